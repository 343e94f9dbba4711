/* tmpl_parse.c - tokens to AST, and tmpl_parse/tmpl_free.
 *
 * A recursive-descent parser with jinja2's grammar and precedence, lowest
 * first: `x if c else y`, or, and, not, comparisons (== != < <= > >= in,
 * not in; chained), + -, ~, * / // %, **, unary - +, then postfix
 * (.attr, [item], [a:b:c], call) with filters (|f) and tests (is t) binding
 * tighter than any binary operator, as in jinja2 (so `-x|abs` is abs(-x) and
 * `a + b is string` tests only b).
 *
 * Statements: if/elif/else, for (else, `if` filter, tuple targets), set
 * (expression, namespace attribute, tuple, block form with filters), macro,
 * call, filter, break, continue, generation (HF's marker, rendered as its
 * body). Unknown filters and tests are errors here, like jinja2's compile
 * step. Errors unwind by longjmp; everything lives in the template arena. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "text/tmpl_int.h"

typedef struct parser {
    tarena *ar;
    ttok *t;
    size_t n, pos;
    strata_err *err;
    jmp_buf jb;
    int depth;
    int code;     /* the error code when unwinding */
} parser;

#define MAX_NEST 200 /* nesting of expressions and blocks */

__attribute__((noreturn, format(printf, 4, 5)))
static void perr(parser *P, const ttok *at, int code, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    strata_vfmt(msg, sizeof msg, fmt, ap);
    va_end(ap);
    strata_errf(P->err, code, "template line %d:%d: %s", at->line, at->col, msg);
    P->code = code;
    longjmp(P->jb, 1);
}

static ttok *cur(parser *P) { return &P->t[P->pos]; }
static ttok *peek(parser *P, size_t k)
{
    size_t i = P->pos + k;
    return &P->t[i < P->n ? i : P->n - 1];
}

static int is_op(const ttok *t, const char *op)
{
    return t->kind == TK_OP && t->len == strlen(op) && memcmp(t->p, op, t->len) == 0;
}

static int is_name(const ttok *t, const char *nm)
{
    return t->kind == TK_NAME && t->len == strlen(nm) && memcmp(t->p, nm, t->len) == 0;
}

/* What a token looks like in an error message. */
static const char *tok_desc(const ttok *t, char *buf, size_t n)
{
    switch (t->kind) {
    case TK_EOF: return "end of template";
    case TK_VAR_END: return "end of print statement '}}'";
    case TK_BLOCK_END: return "end of statement block '%}'";
    case TK_TEXT: return "template text";
    default:
        snprintf(buf, n, "'%.*s'", (int)(t->len > 40 ? 40 : t->len), t->p);
        return buf;
    }
}

__attribute__((noreturn))
static void unexpected(parser *P, const char *wanted)
{
    char b[64];
    perr(P, cur(P), STRATA_EFORMAT, "unexpected %s, expected %s",
         tok_desc(cur(P), b, sizeof b), wanted);
}

static void expect_op(parser *P, const char *op)
{
    if (!is_op(cur(P), op)) {
        char w[16];
        snprintf(w, sizeof w, "'%s'", op);
        unexpected(P, w);
    }
    P->pos++;
}

static ttok *expect_name(parser *P)
{
    if (cur(P)->kind != TK_NAME) unexpected(P, "a name");
    return &P->t[P->pos++];
}

static tnode *mk(parser *P, int kind, const ttok *at)
{
    tnode *n = ta_alloc(P->ar, sizeof *n);
    if (!n) perr(P, at, STRATA_ENOMEM, "out of memory");
    n->kind = kind;
    n->line = at->line;
    n->col = at->col;
    return n;
}

/* Growable node array in the arena. */
typedef struct nvec {
    tnode **v;
    size_t n, cap;
} nvec;

static void nv_push(parser *P, nvec *a, tnode *x)
{
    if (a->n == a->cap) {
        size_t nc = mem_grown_cap(a->cap, a->cap + 1, 4);
        tnode **nv = ta_alloc(P->ar, nc * sizeof *nv);
        if (a->n) memcpy(nv, a->v, a->n * sizeof *nv);
        a->v = nv;
        a->cap = nc;
    }
    a->v[a->n++] = x;
}

static void enter(parser *P)
{
    if (++P->depth > MAX_NEST)
        perr(P, cur(P), STRATA_ERANGE, "nesting deeper than %d", MAX_NEST);
}

/* ---- expressions ---- */

static tnode *parse_expr(parser *P);      /* with conditional */
static tnode *parse_or(parser *P);
static tnode *parse_unary(parser *P, int with_filter);
static tnode *parse_primary(parser *P);
static tnode *parse_postfix(parser *P, tnode *n);
static tnode *parse_tuple(parser *P, int with_cond, int explicit_parens,
                          const char *extra_end);

/* Call arguments: `(a, b, k=v)`; the '(' is current. */
static void parse_call_args(parser *P, tnode *n)
{
    nvec pos = {0}, kw = {0};
    nvec kwn = {0};
    expect_op(P, "(");
    while (!is_op(cur(P), ")")) {
        if (pos.n + kw.n) expect_op(P, ",");
        if (is_op(cur(P), ")")) break; /* trailing comma */
        if (is_op(cur(P), "*") || is_op(cur(P), "**"))
            perr(P, cur(P), STRATA_EUNSUPPORTED, "*args / **kwargs calls are not supported");
        if (cur(P)->kind == TK_NAME && is_op(peek(P, 1), "=")) {
            ttok *k = &P->t[P->pos];
            P->pos += 2;
            tnode *nm = mk(P, E_NAME, k);
            nm->name = k->p;
            nm->name_len = k->len;
            nv_push(P, &kwn, nm);
            nv_push(P, &kw, parse_expr(P));
        } else {
            if (kw.n) perr(P, cur(P), STRATA_EFORMAT, "positional argument after keyword argument");
            nv_push(P, &pos, parse_expr(P));
        }
    }
    P->pos++;
    n->kids = pos.v;
    n->nkids = pos.n;
    n->nkw = kw.n;
    n->kwvals = kw.v;
    n->kwnames = ta_alloc(P->ar, (kw.n + 1) * sizeof *n->kwnames);
    n->kwlens = ta_alloc(P->ar, (kw.n + 1) * sizeof *n->kwlens);
    for (size_t i = 0; i < kw.n; i++) {
        n->kwnames[i] = kwn.v[i]->name;
        n->kwlens[i] = kwn.v[i]->name_len;
    }
}

/* `|name` or `|name(args)`, applied to target (NULL in filter blocks). */
static tnode *parse_filter(parser *P, tnode *target)
{
    ttok *nm = expect_name(P);
    tnode *f = mk(P, E_FILTER, nm);
    f->a = target;
    f->name = nm->p;
    f->name_len = nm->len;
    f->fid = tf_filter_id(nm->p, nm->len);
    if (f->fid < 0)
        perr(P, nm, STRATA_EUNSUPPORTED, "unknown filter '%.*s'", (int)nm->len, nm->p);
    if (is_op(cur(P), "(")) parse_call_args(P, f);
    return f;
}

static tnode *parse_test(parser *P, tnode *target)
{
    tnode *t = mk(P, E_TEST, cur(P));
    P->pos++; /* 'is' */
    if (is_name(cur(P), "not")) {
        t->negate = 1;
        P->pos++;
    }
    ttok *nm = expect_name(P);
    t->a = target;
    t->name = nm->p;
    t->name_len = nm->len;
    t->fid = tf_test_id(nm->p, nm->len);
    if (t->fid < 0)
        perr(P, nm, STRATA_EUNSUPPORTED, "unknown test '%.*s'", (int)nm->len, nm->p);
    ttok *c = cur(P);
    if (is_op(c, "(")) {
        parse_call_args(P, t);
    } else if ((c->kind == TK_NAME || c->kind == TK_STRING || c->kind == TK_INT ||
                c->kind == TK_FLOAT || is_op(c, "[") || is_op(c, "{")) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is")) perr(P, c, STRATA_EFORMAT, "cannot chain tests with 'is'");
        tnode *arg = parse_postfix(P, parse_primary(P));
        t->kids = ta_alloc(P->ar, sizeof *t->kids);
        t->kids[0] = arg;
        t->nkids = 1;
    }
    return t;
}

static tnode *parse_filter_expr(parser *P, tnode *n)
{
    for (;;) {
        if (is_op(cur(P), "|")) {
            P->pos++;
            n = parse_filter(P, n);
        } else if (is_name(cur(P), "is")) {
            n = parse_test(P, n);
        } else if (is_op(cur(P), "(")) {
            tnode *c = mk(P, E_CALL, cur(P));
            c->a = n;
            parse_call_args(P, c);
            n = c;
        } else {
            return n;
        }
    }
}

/* `[...]` after an expression: an item, a slice, or a tuple key. */
static tnode *parse_subscript(parser *P, tnode *obj)
{
    ttok *at = cur(P);
    P->pos++; /* '[' */
    tnode *parts[3] = {0};
    int np = 0, slice = 0;
    for (;;) {
        if (is_op(cur(P), ":")) {
            slice = 1;
            if (np >= 2) perr(P, cur(P), STRATA_EFORMAT, "too many ':' in slice");
            P->pos++;
            np++;
            continue;
        }
        if (is_op(cur(P), "]")) break;
        if (parts[np]) unexpected(P, "']' or ':'");
        parts[np] = parse_expr(P);
        if (!slice && !is_op(cur(P), ":")) {
            if (is_op(cur(P), ",")) {
                /* a[1, 2]: tuple key */
                nvec items = {0};
                nv_push(P, &items, parts[0]);
                while (is_op(cur(P), ",")) {
                    P->pos++;
                    if (is_op(cur(P), "]")) break;
                    nv_push(P, &items, parse_expr(P));
                }
                tnode *tu = mk(P, E_TUPLE, at);
                tu->kids = items.v;
                tu->nkids = items.n;
                parts[0] = tu;
            }
            break;
        }
    }
    expect_op(P, "]");
    tnode *n = mk(P, slice ? E_SLICE : E_ITEM, at);
    n->a = obj;
    if (slice) {
        n->kids = ta_alloc(P->ar, 3 * sizeof *n->kids);
        memcpy(n->kids, parts, sizeof parts);
        n->nkids = 3;
    } else {
        if (!parts[0]) perr(P, at, STRATA_EFORMAT, "empty subscript");
        n->b = parts[0];
    }
    return n;
}

static tnode *parse_postfix(parser *P, tnode *n)
{
    for (;;) {
        ttok *t = cur(P);
        if (is_op(t, ".")) {
            P->pos++;
            ttok *a = cur(P);
            if (a->kind == TK_NAME) {
                tnode *g = mk(P, E_ATTR, a);
                g->a = n;
                g->name = a->p;
                g->name_len = a->len;
                P->pos++;
                n = g;
            } else if (a->kind == TK_INT) {
                tnode *g = mk(P, E_ITEM, a);
                g->a = n;
                g->b = mk(P, E_CONST, a);
                g->b->cval = tv_int(a->ival);
                P->pos++;
                n = g;
            } else {
                unexpected(P, "an attribute name");
            }
        } else if (is_op(t, "[")) {
            n = parse_subscript(P, n);
        } else if (is_op(t, "(")) {
            tnode *c = mk(P, E_CALL, t);
            c->a = n;
            parse_call_args(P, c);
            n = c;
        } else {
            return n;
        }
    }
}

/* [a, b] or {k: v} literal; the opening bracket is current. */
static tnode *parse_list_or_dict(parser *P, int dict)
{
    ttok *at = cur(P);
    P->pos++;
    nvec items = {0};
    const char *close = dict ? "}" : "]";
    while (!is_op(cur(P), close)) {
        if (items.n) expect_op(P, ",");
        if (is_op(cur(P), close)) break;
        nv_push(P, &items, parse_expr(P));
        if (dict) {
            expect_op(P, ":");
            nv_push(P, &items, parse_expr(P));
        }
    }
    P->pos++;
    tnode *n = mk(P, dict ? E_DICT : E_LIST, at);
    n->kids = items.v;
    n->nkids = items.n;
    return n;
}

static tnode *parse_primary(parser *P)
{
    ttok *t = cur(P);
    tnode *n;
    if (t->kind == TK_NAME) {
        P->pos++;
        n = mk(P, E_CONST, t);
        if (is_name(t, "true") || is_name(t, "True")) n->cval = tv_bool(1);
        else if (is_name(t, "false") || is_name(t, "False")) n->cval = tv_bool(0);
        else if (is_name(t, "none") || is_name(t, "None")) n->cval = tv_none();
        else {
            n->kind = E_NAME;
            n->name = t->p;
            n->name_len = t->len;
        }
        return n;
    }
    if (t->kind == TK_STRING) {
        /* Adjacent string literals concatenate, as in jinja2. */
        size_t total = 0, k = P->pos;
        while (P->t[k].kind == TK_STRING) total += P->t[k++].len;
        char *buf = ta_alloc(P->ar, total + 1);
        size_t off = 0;
        while (cur(P)->kind == TK_STRING) {
            memcpy(buf + off, cur(P)->p, cur(P)->len);
            off += cur(P)->len;
            P->pos++;
        }
        n = mk(P, E_CONST, t);
        n->cval = tv_str(buf, total, 1);
        return n;
    }
    if (t->kind == TK_INT || t->kind == TK_FLOAT) {
        P->pos++;
        n = mk(P, E_CONST, t);
        n->cval = t->kind == TK_INT ? tv_int(t->ival) : tv_float(t->fval);
        return n;
    }
    if (is_op(t, "(")) {
        P->pos++;
        n = parse_tuple(P, 1, 1, NULL);
        expect_op(P, ")");
        return n;
    }
    if (is_op(t, "[")) return parse_list_or_dict(P, 0);
    if (is_op(t, "{")) return parse_list_or_dict(P, 1);
    unexpected(P, "an expression");
}

static tnode *parse_unary(parser *P, int with_filter)
{
    ttok *t = cur(P);
    tnode *n;
    enter(P);
    if (is_op(t, "-") || is_op(t, "+")) {
        P->pos++;
        n = mk(P, is_op(t, "-") ? E_NEG : E_POS, t);
        n->a = parse_unary(P, 0);
    } else {
        n = parse_primary(P);
    }
    n = parse_postfix(P, n);
    if (with_filter) n = parse_filter_expr(P, n);
    P->depth--;
    return n;
}

static tnode *binop(parser *P, int kind, int op, const ttok *at, tnode *a, tnode *b)
{
    tnode *n = mk(P, kind, at);
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

static tnode *parse_pow(parser *P)
{
    tnode *n = parse_unary(P, 1);
    while (is_op(cur(P), "**")) {
        ttok *t = &P->t[P->pos++];
        n = binop(P, E_BIN, OP_POW, t, n, parse_unary(P, 1));
    }
    return n;
}

static tnode *parse_math2(parser *P)
{
    tnode *n = parse_pow(P);
    for (;;) {
        ttok *t = cur(P);
        int op = is_op(t, "*") ? OP_MUL : is_op(t, "/") ? OP_DIV
               : is_op(t, "//") ? OP_FDIV : is_op(t, "%") ? OP_MOD : 0;
        if (!op) return n;
        P->pos++;
        n = binop(P, E_BIN, op, t, n, parse_pow(P));
    }
}

static tnode *parse_concat(parser *P)
{
    tnode *n = parse_math2(P);
    while (is_op(cur(P), "~")) {
        ttok *t = &P->t[P->pos++];
        n = binop(P, E_CONCAT, 0, t, n, parse_math2(P));
    }
    return n;
}

static tnode *parse_math1(parser *P)
{
    tnode *n = parse_concat(P);
    for (;;) {
        ttok *t = cur(P);
        int op = is_op(t, "+") ? OP_ADD : is_op(t, "-") ? OP_SUB : 0;
        if (!op) return n;
        P->pos++;
        n = binop(P, E_BIN, op, t, n, parse_concat(P));
    }
}

static int cmp_op(parser *P)
{
    ttok *t = cur(P);
    static const char *const ops[] = {"==", "!=", "<", "<=", ">", ">="};
    static const int codes[] = {OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE};
    for (int i = 0; i < 6; i++)
        if (is_op(t, ops[i])) { P->pos++; return codes[i]; }
    if (is_name(t, "in")) { P->pos++; return OP_IN; }
    if (is_name(t, "not") && is_name(peek(P, 1), "in")) { P->pos += 2; return OP_NOTIN; }
    return 0;
}

static tnode *parse_compare(parser *P)
{
    ttok *at = cur(P);
    tnode *first = parse_math1(P);
    nvec rest = {0};
    int ops[64];
    int op;
    while ((op = cmp_op(P)) != 0) {
        if (rest.n >= 64) perr(P, cur(P), STRATA_EUNSUPPORTED, "comparison chain too long");
        ops[rest.n] = op;
        nv_push(P, &rest, parse_math1(P));
    }
    if (!rest.n) return first;
    tnode *n = mk(P, E_CMP, at);
    n->a = first;
    n->kids = rest.v;
    n->nkids = rest.n;
    n->ops = ta_alloc(P->ar, rest.n * sizeof *n->ops);
    memcpy(n->ops, ops, rest.n * sizeof *n->ops);
    return n;
}

static tnode *parse_not(parser *P)
{
    if (is_name(cur(P), "not")) {
        ttok *t = &P->t[P->pos++];
        enter(P);
        tnode *n = mk(P, E_NOT, t);
        n->a = parse_not(P);
        P->depth--;
        return n;
    }
    return parse_compare(P);
}

static tnode *parse_and(parser *P)
{
    tnode *n = parse_not(P);
    while (is_name(cur(P), "and")) {
        ttok *t = &P->t[P->pos++];
        n = binop(P, E_AND, 0, t, n, parse_not(P));
    }
    return n;
}

static tnode *parse_or(parser *P)
{
    tnode *n = parse_and(P);
    while (is_name(cur(P), "or")) {
        ttok *t = &P->t[P->pos++];
        n = binop(P, E_OR, 0, t, n, parse_and(P));
    }
    return n;
}

/* `a if cond else b` (else optional: missing gives undefined). */
static tnode *parse_expr(parser *P)
{
    enter(P);
    tnode *n = parse_or(P);
    while (is_name(cur(P), "if")) {
        ttok *t = &P->t[P->pos++];
        tnode *c = mk(P, E_COND, t);
        c->a = n;
        c->b = parse_or(P);
        if (is_name(cur(P), "else")) {
            P->pos++;
            c->c = parse_expr(P);
        }
        n = c;
    }
    P->depth--;
    return n;
}

/* Does the current token end a tuple? */
static int tuple_end(parser *P, const char *extra_end)
{
    ttok *t = cur(P);
    if (t->kind == TK_VAR_END || t->kind == TK_BLOCK_END || t->kind == TK_EOF)
        return 1;
    if (is_op(t, ")") || is_op(t, "]") || is_op(t, "}") || is_op(t, "="))
        return 1;
    return extra_end && is_name(t, extra_end);
}

/* Comma-separated expressions; one without a comma is itself. */
static tnode *parse_tuple(parser *P, int with_cond, int explicit_parens,
                          const char *extra_end)
{
    ttok *at = cur(P);
    nvec items = {0};
    int comma = 0;
    for (;;) {
        if (items.n) {
            if (!is_op(cur(P), ",")) break;
            P->pos++;
            comma = 1;
        }
        if (tuple_end(P, extra_end)) break;
        nv_push(P, &items, with_cond ? parse_expr(P) : parse_or(P));
    }
    if (!comma && items.n == 1) return items.v[0];
    if (!items.n && !explicit_parens) unexpected(P, "an expression");
    tnode *n = mk(P, E_TUPLE, at);
    n->kids = items.v;
    n->nkids = items.n;
    return n;
}

/* ---- statements ---- */

static tnode *parse_body(parser *P, const char *const *ends, int *which);

static void expect_block_end(parser *P)
{
    if (cur(P)->kind != TK_BLOCK_END) unexpected(P, "'%}'");
    P->pos++;
}

/* Assignment target: name, ns.attr, or names separated by commas. */
static tnode *parse_target(parser *P, int allow_attr, const char *extra_end)
{
    ttok *at = cur(P);
    nvec names = {0};
    int paren = is_op(at, "(");
    if (paren) P->pos++;
    for (;;) {
        ttok *nm = expect_name(P);
        tnode *n = mk(P, E_NAME, nm);
        n->name = nm->p;
        n->name_len = nm->len;
        if (allow_attr && is_op(cur(P), ".")) {
            P->pos++;
            ttok *a = expect_name(P);
            tnode *g = mk(P, E_ATTR, a);
            g->a = n;
            g->name = a->p;
            g->name_len = a->len;
            n = g;
        }
        nv_push(P, &names, n);
        if (!is_op(cur(P), ",")) break;
        P->pos++;
        if ((extra_end && is_name(cur(P), extra_end)) || is_op(cur(P), "=") ||
            is_op(cur(P), ")"))
            break;
    }
    if (paren) expect_op(P, ")");
    if (names.n == 1 && !paren) return names.v[0];
    tnode *t = mk(P, E_TUPLE, at);
    t->kids = names.v;
    t->nkids = names.n;
    for (size_t i = 0; i < names.n; i++)
        if (names.v[i]->kind != E_NAME)
            perr(P, at, STRATA_EUNSUPPORTED, "tuple targets must be plain names");
    return t;
}

static tnode *parse_if(parser *P, const ttok *at)
{
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    tnode *n = mk(P, N_IF, at);
    n->a = parse_tuple(P, 0, 0, NULL);
    expect_block_end(P);
    int w;
    n->body = parse_body(P, ends, &w);
    if (w == 0) {
        ttok *et = &P->t[P->pos - 1];
        tnode *b = mk(P, N_BODY, et);
        b->kids = ta_alloc(P->ar, sizeof *b->kids);
        b->kids[0] = parse_if(P, et);
        b->nkids = 1;
        n->orelse = b;
        return n;
    }
    if (w == 1) {
        static const char *const e2[] = {"endif", NULL};
        expect_block_end(P);
        n->orelse = parse_body(P, e2, &w);
    }
    expect_block_end(P);
    return n;
}

static tnode *parse_for(parser *P, const ttok *at)
{
    static const char *const ends[] = {"else", "endfor", NULL};
    tnode *n = mk(P, N_FOR, at);
    n->a = parse_target(P, 0, "in");
    if (!is_name(cur(P), "in")) unexpected(P, "'in'");
    P->pos++;
    n->b = parse_tuple(P, 0, 0, "recursive");
    if (is_name(cur(P), "if")) {
        P->pos++;
        n->c = parse_expr(P);
    }
    if (is_name(cur(P), "recursive"))
        perr(P, cur(P), STRATA_EUNSUPPORTED, "recursive for loops are not supported");
    expect_block_end(P);
    int w;
    n->body = parse_body(P, ends, &w);
    if (w == 0) {
        static const char *const e2[] = {"endfor", NULL};
        expect_block_end(P);
        n->orelse = parse_body(P, e2, &w);
    }
    expect_block_end(P);
    return n;
}

/* A chain `|f1|f2(x)` for filter blocks and block sets; the innermost
 * filter's target is NULL, meaning the captured body. */
static tnode *parse_filter_chain(parser *P)
{
    tnode *f = parse_filter(P, NULL);
    while (is_op(cur(P), "|")) {
        P->pos++;
        f = parse_filter(P, f);
    }
    return f;
}

static tnode *parse_set(parser *P, const ttok *at)
{
    tnode *target = parse_target(P, 1, NULL);
    if (is_op(cur(P), "=")) {
        P->pos++;
        tnode *n = mk(P, N_SET, at);
        n->a = target;
        n->b = parse_tuple(P, 1, 0, NULL);
        expect_block_end(P);
        return n;
    }
    if (target->kind != E_NAME) unexpected(P, "'='");
    static const char *const ends[] = {"endset", NULL};
    tnode *n = mk(P, N_SETBLOCK, at);
    n->a = target;
    if (is_op(cur(P), "|")) {
        P->pos++;
        n->c = parse_filter_chain(P);
    }
    expect_block_end(P);
    int w;
    n->body = parse_body(P, ends, &w);
    expect_block_end(P);
    return n;
}

/* Macro / caller parameters `(a, b=default)` into n->kids / n->kwvals. */
static void parse_params(parser *P, tnode *n)
{
    nvec names = {0}, defs = {0};
    expect_op(P, "(");
    while (!is_op(cur(P), ")")) {
        if (names.n) expect_op(P, ",");
        ttok *nm = expect_name(P);
        tnode *x = mk(P, E_NAME, nm);
        x->name = nm->p;
        x->name_len = nm->len;
        nv_push(P, &names, x);
        tnode *d = NULL;
        if (is_op(cur(P), "=")) {
            P->pos++;
            d = parse_expr(P);
        } else if (defs.n && defs.v[defs.n - 1]) {
            perr(P, nm, STRATA_EFORMAT, "non-default argument follows default argument");
        }
        nv_push(P, &defs, d);
    }
    P->pos++;
    n->kids = names.v;
    n->nkids = names.n;
    n->kwvals = defs.v;
}

static tnode *parse_macro(parser *P, const ttok *at)
{
    static const char *const ends[] = {"endmacro", NULL};
    ttok *nm = expect_name(P);
    tnode *n = mk(P, N_MACRO, at);
    n->name = nm->p;
    n->name_len = nm->len;
    parse_params(P, n);
    expect_block_end(P);
    int w;
    n->body = parse_body(P, ends, &w);
    expect_block_end(P);
    return n;
}

static tnode *parse_call_block(parser *P, const ttok *at)
{
    static const char *const ends[] = {"endcall", NULL};
    tnode *n = mk(P, N_CALLBLOCK, at);
    if (is_op(cur(P), "(")) parse_params(P, n);
    n->a = parse_expr(P);
    if (n->a->kind != E_CALL) perr(P, at, STRATA_EFORMAT, "expected a call after 'call'");
    expect_block_end(P);
    int w;
    n->body = parse_body(P, ends, &w);
    expect_block_end(P);
    return n;
}

static tnode *parse_simple_body(parser *P, int kind, const ttok *at,
                                const char *end)
{
    const char *ends[] = {end, NULL};
    tnode *n = mk(P, kind, at);
    if (kind == N_FILTERBLOCK) n->a = parse_filter_chain(P);
    expect_block_end(P);
    int w;
    n->body = parse_body(P, ends, &w);
    expect_block_end(P);
    return n;
}

static tnode *parse_statement(parser *P)
{
    ttok *at = cur(P);
    ttok *nm = expect_name(P);
    if (is_name(nm, "if")) return parse_if(P, at);
    if (is_name(nm, "for")) return parse_for(P, at);
    if (is_name(nm, "set")) return parse_set(P, at);
    if (is_name(nm, "macro")) return parse_macro(P, at);
    if (is_name(nm, "call")) return parse_call_block(P, at);
    if (is_name(nm, "filter")) return parse_simple_body(P, N_FILTERBLOCK, at, "endfilter");
    if (is_name(nm, "generation")) /* HF's assistant-mask marker */
        return parse_simple_body(P, N_BODY, at, "endgeneration")->body;
    if (is_name(nm, "break") || is_name(nm, "continue")) {
        tnode *n = mk(P, is_name(nm, "break") ? N_BREAK : N_CONTINUE, at);
        expect_block_end(P);
        return n;
    }
    static const char *const known[] = {"include", "extends", "block", "import",
        "from", "with", "autoescape", "do", "trans", NULL};
    for (int i = 0; known[i]; i++)
        if (is_name(nm, known[i]))
            perr(P, nm, STRATA_EUNSUPPORTED, "tag '%s' is not supported", known[i]);
    perr(P, nm, STRATA_EFORMAT, "unknown tag '%.*s'", (int)nm->len, nm->p);
}

/* Statements until a block tag named in ends (NULL-terminated; ends may be
 * NULL for the top level). *which is the index of the tag found; the tag's
 * name has been consumed. */
static tnode *parse_body(parser *P, const char *const *ends, int *which)
{
    ttok *at = cur(P);
    nvec st = {0};
    enter(P);
    for (;;) {
        ttok *t = cur(P);
        if (t->kind == TK_EOF) {
            if (ends) {
                perr(P, t, STRATA_EFORMAT, "unexpected end of template, expected '%s'",
                     ends[0]);
            }
            break;
        }
        if (t->kind == TK_TEXT) {
            tnode *n = mk(P, N_TEXT, t);
            n->cval = tv_str(t->p, t->len, 1);
            nv_push(P, &st, n);
            P->pos++;
        } else if (t->kind == TK_VAR_BEGIN) {
            P->pos++;
            tnode *n = mk(P, N_OUTPUT, t);
            n->a = parse_tuple(P, 1, 0, NULL);
            if (cur(P)->kind != TK_VAR_END) unexpected(P, "'}}'");
            P->pos++;
            nv_push(P, &st, n);
        } else if (t->kind == TK_BLOCK_BEGIN) {
            ttok *nm = peek(P, 1);
            int hit = -1;
            for (int i = 0; ends && ends[i]; i++)
                if (is_name(nm, ends[i])) hit = i;
            if (hit >= 0) {
                P->pos += 2;
                *which = hit;
                break;
            }
            P->pos++;
            nv_push(P, &st, parse_statement(P));
        } else {
            unexpected(P, "template text or a tag");
        }
    }
    P->depth--;
    tnode *b = mk(P, N_BODY, at);
    b->kids = st.v;
    b->nkids = st.n;
    return b;
}

/* Line breaks to \n and one trailing newline dropped, as jinja2 does. */
static char *normalize(tarena *ar, const char *src, size_t len, size_t *out)
{
    char *s = ta_alloc(ar, len + 1);
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[o++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            s[o++] = src[i];
        }
    }
    if (o && s[o - 1] == '\n') o--;
    s[o] = 0;
    *out = o;
    return s;
}

int tmpl_parse(tmpl **out, const char *src, size_t len, strata_err *err)
{
    *out = NULL;
    tmpl *t = xcalloc(1, sizeof *t);
    t->src = normalize(&t->ar, src, len, &t->len);
    ttok *toks;
    size_t n;
    int rc = tmpl_lex(&t->ar, t->src, t->len, &toks, &n, err);
    if (rc) {
        tmpl_free(t);
        return rc;
    }
    parser P = {.ar = &t->ar, .t = toks, .n = n, .err = err};
    if (setjmp(P.jb)) {
        tmpl_free(t);
        return P.code;
    }
    t->root = parse_body(&P, NULL, NULL);
    *out = t;
    return 0;
}

void tmpl_free(tmpl *t)
{
    if (!t) return;
    ta_free_all(&t->ar);
    free(t);
}
