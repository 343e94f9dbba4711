/* tmpl_eval.c - runs a parsed template: tmpl_render.
 *
 * Semantics follow jinja2 in HF's sandbox:
 *   - Scopes: `set` writes the innermost frame. Each for-loop iteration and
 *     each macro call gets a fresh frame whose reads fall through to the
 *     enclosing ones, so a `set` inside a loop is gone after the iteration
 *     (templates use namespace() to carry state out, as with jinja2).
 *   - Undefined: printing it gives "", iterating it gives nothing, testing
 *     it is false; taking an attribute or item of it, calling it, or doing
 *     arithmetic with it is an error. A missing key or attribute of a
 *     defined value is undefined, not an error.
 *   - `a.b` tries the attribute (dict methods such as items/get win, as in
 *     Python) then the key; `a['b']` tries the key first.
 *   - The immutable sandbox: list.append and other mutating methods are
 *     errors; range() is capped at 100000 items.
 * Output goes to a string builder that records which bytes came from
 * template literals; macros and block sets capture into their own. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/mem.h"
#include "text/tmpl_int.h"

typedef struct tframe {
    struct tframe *parent;
    tdict vars;
    int captured;   /* a macro closes over it: do not reuse */
} tframe;

struct tmacro {
    const tnode *def;    /* N_MACRO, or N_CALLBLOCK for caller() */
    tframe *closure;
};

struct trender {
    tarena ar;
    strata_err *err;
    jmp_buf jb;
    int code;
    tsb *out;            /* where output goes now */
    tsb root_out;
    tframe *ctx;         /* context variables (from the JSON) */
    size_t steps;
    int depth;           /* nested bodies and macro calls */
    int edepth;          /* nested expression evaluation */
    tmpl_clock *clk;     /* what strftime_now reads; NULL: the system clock */
    long long now;       /* the time strftime_now formats, once read (0: not yet) */
};

enum { SIG_NONE, SIG_BREAK, SIG_CONTINUE };

/* ---- errors and resources ---- */

void tr_fail(trender *r, int code, const char *fmt, ...)
{
    char msg[480];
    va_list ap;
    va_start(ap, fmt);
    strata_vfmt(msg, sizeof msg, fmt, ap);
    va_end(ap);
    strata_errf(r->err, code, "%s", msg);
    r->code = code;
    longjmp(r->jb, 1);
}

__attribute__((noreturn))
static void fail_at(trender *r, const tnode *n, int code, const char *what)
{
    tr_fail(r, code, "template line %d:%d: %s", n->line, n->col, what);
}

void *tr_alloc(trender *r, size_t n)
{
    void *p = ta_alloc(&r->ar, n);
    if (!p)
        tr_fail(r, STRATA_ERANGE, "template render exceeded the memory limit (%u MiB)",
                TMPL_MAX_MEMORY >> 20);
    return p;
}

void tr_steps(trender *r, uint64_t n)
{
    if (n > TMPL_MAX_STEPS || (r->steps += n) > TMPL_MAX_STEPS)
        tr_fail(r, STRATA_ERANGE,
                "template render exceeded %u loop iterations and calls (infinite loop?)",
                TMPL_MAX_STEPS);
}

void tr_step(trender *r) { tr_steps(r, 1); }

void tr_int_overflow(trender *r)
{
    tr_fail(r, STRATA_ERANGE, "integer overflow (result beyond 64 bits)");
}

static void enter(trender *r, const tnode *n)
{
    if (++r->depth > TMPL_MAX_DEPTH)
        fail_at(r, n, STRATA_ERANGE, "template recursion deeper than the limit");
}

/* An undefined value whose use fails with `fmt`. */
__attribute__((format(printf, 2, 3)))
static tval undef(trender *r, const char *fmt, ...)
{
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    size_t n = strata_vfmt(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char *h = tr_alloc(r, n + 1);
    memcpy(h, buf, n);
    return tv_undef(h);
}

__attribute__((noreturn))
static void fail_undef(trender *r, tval v)
{
    tr_fail(r, STRATA_EINVAL, "%s", v.u.undef ? v.u.undef : "undefined value");
}

/* ---- frames ---- */

static tframe *frame_new(trender *r, tframe *parent)
{
    tframe *f = tr_alloc(r, sizeof *f);
    f->parent = parent;
    return f;
}

static tval *lookup(tframe *f, const char *name, size_t len)
{
    for (; f; f = f->parent) {
        tval *v = td_get(&f->vars, name, len);
        if (v) return v;
    }
    return NULL;
}

static void bind(trender *r, tframe *f, const char *name, size_t len, tval v)
{
    td_set(r, &f->vars, tv_str(name, len, 1), v);
}

/* ---- output ---- */

static void emit(trender *r, tval s)
{
    tsb_addv(r, r->out, s);
    if (r->out->len > TMPL_MAX_OUTPUT)
        tr_fail(r, STRATA_ERANGE, "template output exceeded the limit (%u MiB)",
                TMPL_MAX_OUTPUT >> 20);
}

/* ---- iteration ---- */

tlist *tr_iter(trender *r, tval v)
{
    switch (v.kind) {
    case TV_LIST: return v.u.list;
    case TV_UNDEF: return tv_list(r, 0).u.list;
    case TV_DICT:
    case TV_NS: {
        tval l = tv_list(r, v.u.dict->n);
        for (size_t i = 0; i < v.u.dict->n; i++) l.u.list->v[i] = v.u.dict->k[i];
        l.u.list->n = v.u.dict->n;
        return l.u.list;
    }
    case TV_STR: {
        tval l = tv_list(r, 0);
        for (size_t i = 0; i < v.u.s.len;) {
            uint32_t cp;
            size_t nx = tu_next(v.u.s.p, v.u.s.len, i, &cp);
            tl_push(r, l.u.list, ts_sub(r, v, i, nx - i));
            i = nx;
        }
        return l.u.list;
    }
    default:
        tr_fail(r, STRATA_EINVAL, "'%s' object is not iterable", tv_type_name(v));
    }
}

/* ---- attribute and item access ---- */

static tval loop_attr(trender *r, tval lv, const char *name, size_t len)
{
    tloop *l = lv.u.loop;
    size_t n = l->items->n, i = l->i;
#define IS(s) (len == sizeof(s) - 1 && memcmp(name, s, len) == 0)
    if (IS("index")) return tv_int((int64_t)i + 1);
    if (IS("index0")) return tv_int((int64_t)i);
    if (IS("revindex")) return tv_int((int64_t)(n - i));
    if (IS("revindex0")) return tv_int((int64_t)(n - i - 1));
    if (IS("first")) return tv_bool(i == 0);
    if (IS("last")) return tv_bool(i + 1 == n);
    if (IS("length")) return tv_int((int64_t)n);
    if (IS("depth")) return tv_int(1);
    if (IS("depth0")) return tv_int(0);
    if (IS("previtem"))
        return i > 0 ? l->items->v[i - 1] : undef(r, "there is no previous item");
    if (IS("nextitem"))
        return i + 1 < n ? l->items->v[i + 1] : undef(r, "there is no next item");
    if (IS("cycle") || IS("changed")) {
        tval m = {.kind = TV_METHOD};
        m.u.m.self = tr_alloc(r, sizeof(tval));
        *m.u.m.self = lv;
        m.u.m.name = IS("cycle") ? "cycle" : "changed";
        return m;
    }
#undef IS
    return undef(r, "'LoopContext' object has no attribute '%.*s'", (int)len, name);
}

static tval method_val(trender *r, tval self, const char *name, size_t len)
{
    tval m = {.kind = TV_METHOD};
    m.u.m.self = tr_alloc(r, sizeof(tval));
    *m.u.m.self = self;
    char *nm = tr_alloc(r, len + 1);
    memcpy(nm, name, len);
    m.u.m.name = nm;
    return m;
}

tval tr_getattr(trender *r, tval obj, const char *name, size_t len)
{
    if (obj.kind == TV_UNDEF) fail_undef(r, obj);
    if (obj.kind == TV_LOOP) return loop_attr(r, obj, name, len);
    if (len && name[0] == '_')
        return undef(r, "access to attribute '%.*s' of '%s' object is unsafe",
                     (int)len, name, tv_type_name(obj));
    if (tf_has_method(obj, name, len)) return method_val(r, obj, name, len);
    if (obj.kind == TV_DICT || obj.kind == TV_NS) {
        tval *v = td_get(obj.u.dict, name, len);
        if (v) return *v;
    }
    return undef(r, "'%s object' has no attribute '%.*s'", tv_type_name(obj),
                 (int)len, name);
}

/* Code point index -> byte offset table for s (n+1 entries). */
static size_t *cp_offsets(trender *r, tval s, size_t *ncp)
{
    size_t n = tu_len(s.u.s.p, s.u.s.len);
    size_t *off = tr_alloc(r, (n + 1) * sizeof *off);
    size_t k = 0;
    for (size_t i = 0; i < s.u.s.len;) {
        uint32_t cp;
        off[k++] = i;
        i = tu_next(s.u.s.p, s.u.s.len, i, &cp);
    }
    off[k] = s.u.s.len;
    *ncp = k;
    return off;
}

tval tr_getitem(trender *r, tval obj, tval key)
{
    if (obj.kind == TV_UNDEF) fail_undef(r, obj);
    if (obj.kind == TV_DICT || obj.kind == TV_NS) {
        tval *v = td_getv(r, obj.u.dict, key);
        if (v) return *v;
    } else if ((obj.kind == TV_LIST || obj.kind == TV_STR) &&
               (key.kind == TV_INT || key.kind == TV_BOOL)) {
        int64_t i = key.u.i;
        if (obj.kind == TV_LIST) {
            int64_t n = (int64_t)obj.u.list->n;
            if (i < 0) i += n;
            if (i >= 0 && i < n) return obj.u.list->v[i];
        } else {
            size_t ncp;
            size_t *off = cp_offsets(r, obj, &ncp);
            if (i < 0) i += (int64_t)ncp;
            if (i >= 0 && i < (int64_t)ncp)
                return ts_sub(r, obj, off[i], off[i + 1] - off[i]);
        }
        return undef(r, "%s index out of range", tv_type_name(obj));
    }
    if (key.kind == TV_STR) return tr_getattr(r, obj, key.u.s.p, key.u.s.len);
    return undef(r, "'%s object' has no item", tv_type_name(obj));
}

/* Python slice bounds for length n. */
static void slice_bounds(int64_t n, tval *sv, int64_t *start, int64_t *stop,
                         int64_t *step, trender *r)
{
    *step = sv[2].kind == TV_NONE || sv[2].kind == TV_UNDEF ? 1 : sv[2].u.i;
    if (*step == 0) tr_fail(r, STRATA_EINVAL, "slice step cannot be zero");
    int64_t lo = *step > 0 ? 0 : -1, hi = *step > 0 ? n : n - 1;
    for (int k = 0; k < 2; k++) {
        int64_t *out = k ? stop : start;
        if (sv[k].kind == TV_NONE || sv[k].kind == TV_UNDEF) {
            *out = (*step > 0) == (k == 0) ? lo : hi;
            continue;
        }
        int64_t x = sv[k].u.i;
        if (x < 0) {
            x += n;
            if (x < lo) x = lo;
        } else if (x > hi) {
            x = hi;
        }
        *out = x;
    }
}

static tval do_slice(trender *r, tval obj, tval *sv, const tnode *at)
{
    for (int k = 0; k < 3; k++)
        if (sv[k].kind != TV_NONE && sv[k].kind != TV_UNDEF &&
            sv[k].kind != TV_INT && sv[k].kind != TV_BOOL)
            fail_at(r, at, STRATA_EINVAL, "slice indices must be integers or None");
    if (obj.kind == TV_UNDEF) fail_undef(r, obj);
    int64_t start, stop, step;
    if (obj.kind == TV_LIST) {
        slice_bounds((int64_t)obj.u.list->n, sv, &start, &stop, &step, r);
        uint64_t cnt = tv_range_len(start, stop, step);
        tval l = tv_list(r, (size_t)cnt);
        l.tuple = obj.tuple;
        for (uint64_t k = 0; k < cnt; k++)
            l.u.list->v[k] = obj.u.list->v[start + (int64_t)k * step];
        l.u.list->n = (size_t)cnt;
        return l;
    }
    if (obj.kind == TV_STR) {
        size_t ncp;
        size_t *off = cp_offsets(r, obj, &ncp);
        slice_bounds((int64_t)ncp, sv, &start, &stop, &step, r);
        if (step == 1)
            return stop > start ? ts_sub(r, obj, off[start], off[stop] - off[start])
                                : ts_sub(r, obj, 0, 0);
        tsb b = {0};
        uint64_t cnt = tv_range_len(start, stop, step);
        for (uint64_t k = 0; k < cnt; k++) {
            int64_t i = start + (int64_t)k * step;
            tsb_addv(r, &b, ts_sub(r, obj, off[i], off[i + 1] - off[i]));
        }
        tval v = tsb_val(&b);
        if (!b.len) v.lit = ts_all_lit(obj);
        return v;
    }
    fail_at(r, at, STRATA_EINVAL, "object is not subscriptable with a slice");
}

/* ---- operators ---- */

static int contains(trender *r, tval hay, tval needle)
{
    switch (hay.kind) {
    case TV_STR:
        if (needle.kind != TV_STR)
            tr_fail(r, STRATA_EINVAL, "'in <string>' requires string as left operand, not %s",
                    tv_type_name(needle));
        if (!needle.u.s.len) return 1;
        return memmem(hay.u.s.p, hay.u.s.len, needle.u.s.p, needle.u.s.len) != NULL;
    case TV_LIST:
        for (size_t i = 0; i < hay.u.list->n; i++)
            if (tv_equal(r, hay.u.list->v[i], needle)) return 1;
        return 0;
    case TV_DICT: case TV_NS:
        if (!tv_hashable(r, needle))
            tr_fail(r, STRATA_EINVAL, "unhashable type: '%s'", tv_type_name(needle));
        return td_getv(r, hay.u.dict, needle) != NULL;
    case TV_UNDEF: return 0;
    default:
        tr_fail(r, STRATA_EINVAL, "argument of type '%s' is not iterable", tv_type_name(hay));
    }
}

static int compare_op(trender *r, int op, tval a, tval b)
{
    switch (op) {
    case OP_EQ: return tv_equal(r, a, b);
    case OP_NE: return !tv_equal(r, a, b);
    case OP_IN: return contains(r, b, a);
    case OP_NOTIN: return !contains(r, b, a);
    default: break;
    }
    int c = tv_compare(r, a, b);
    return op == OP_LT ? c < 0 : op == OP_LE ? c <= 0 : op == OP_GT ? c > 0 : c >= 0;
}

static tval concat_str(trender *r, tval a, tval b)
{
    tsb s = {0};
    tsb_addv(r, &s, a);
    tsb_addv(r, &s, b);
    tval v = tsb_val(&s);
    if (!s.len) v.lit = ts_all_lit(a) && ts_all_lit(b);
    return v;
}

/* seq * n. The size is checked before any work: a string may not outgrow
 * the output limit, and each copy of a list's items counts as that many
 * steps, so `'a' * 10**9` fails at once instead of looping. */
static tval repeat(trender *r, tval seq, int64_t n, const tnode *at)
{
    size_t unit = seq.kind == TV_STR ? seq.u.s.len : seq.u.list->n;
    if (n < 0 || !unit) n = 0; /* '' * 10**18 is '' at once */
    uint64_t total;
    if (__builtin_mul_overflow((uint64_t)unit, (uint64_t)n, &total) ||
        (seq.kind == TV_STR && total > TMPL_MAX_OUTPUT))
        tr_fail(r, STRATA_ERANGE, "template line %d:%d: %s repetition too large (%zu * %lld; limit %u MiB)",
                at->line, at->col, tv_type_name(seq), unit, (long long)n, TMPL_MAX_OUTPUT >> 20);
    tr_steps(r, seq.kind == TV_STR ? (uint64_t)n : total);
    if (seq.kind == TV_STR) {
        tsb s = {0};
        for (int64_t i = 0; i < n; i++) tsb_addv(r, &s, seq);
        return s.len ? tsb_val(&s) : tv_str("", 0, ts_all_lit(seq));
    }
    tval l = tv_list(r, (size_t)total);
    l.tuple = seq.tuple;
    for (int64_t i = 0; i < n; i++)
        for (size_t k = 0; k < unit; k++) l.u.list->v[l.u.list->n++] = seq.u.list->v[k];
    return l;
}

/* Python floor division and modulo on ints (b != 0). b == -1 is taken
 * apart because INT64_MIN / -1 traps (SIGFPE): the modulo is 0 and the
 * quotient is -a, which overflows for INT64_MIN only. The modulo is
 * computed directly: a - floordiv(a, b) * b could overflow. */
static tval int_divmod(trender *r, int op, int64_t a, int64_t b)
{
    int64_t q;
    if (b == -1) {
        if (op == OP_MOD) return tv_int(0);
        if (__builtin_sub_overflow((int64_t)0, a, &q)) tr_int_overflow(r);
        return tv_int(q);
    }
    int64_t m = a % b;
    int adjust = m != 0 && (m < 0) != (b < 0);
    if (op == OP_MOD) return tv_int(adjust ? m + b : m);
    return tv_int(a / b - adjust);
}

/* Python int ** int (y >= 0) by squaring, so `1 ** 10**18` is quick. When
 * |x| >= 2 and bits of y remain, x*x overflowing means the result does. */
static tval int_pow(trender *r, int64_t x, int64_t y)
{
    int64_t res = 1;
    while (y) {
        if ((y & 1) && __builtin_mul_overflow(res, x, &res)) tr_int_overflow(r);
        y >>= 1;
        if (y && __builtin_mul_overflow(x, x, &x)) tr_int_overflow(r);
    }
    return tv_int(res);
}

static tval arith_num(trender *r, int op, tval a, tval b, const tnode *at)
{
    int ints = a.kind != TV_FLOAT && b.kind != TV_FLOAT;
    int64_t x = a.u.i, y = b.u.i, z;
    double fx = tv_num(a), fy = tv_num(b);
    switch (op) {
    /* Python ints never overflow; ours are 64-bit, so overflow is an
     * error (tr_int_overflow) rather than a silently different number or
     * a float that prints differently from Python's big int. */
    case OP_ADD:
        if (!ints) return tv_float(fx + fy);
        if (__builtin_add_overflow(x, y, &z)) break;
        return tv_int(z);
    case OP_SUB:
        if (!ints) return tv_float(fx - fy);
        if (__builtin_sub_overflow(x, y, &z)) break;
        return tv_int(z);
    case OP_MUL:
        if (!ints) return tv_float(fx * fy);
        if (__builtin_mul_overflow(x, y, &z)) break;
        return tv_int(z);
    case OP_DIV:
        if (fy == 0) fail_at(r, at, STRATA_EINVAL, "division by zero");
        return tv_float(fx / fy);
    case OP_FDIV:
    case OP_MOD:
        if (fy == 0) fail_at(r, at, STRATA_EINVAL, "integer division or modulo by zero");
        if (ints) return int_divmod(r, op, x, y);
        if (op == OP_FDIV) return tv_float(floor(fx / fy));
        {
            double m = fmod(fx, fy);
            if (m != 0 && ((m < 0) != (fy < 0))) m += fy;
            if (m == 0) m = copysign(0.0, fy); /* Python: sign of divisor */
            return tv_float(m);
        }
    case OP_POW:
        if (ints && y >= 0) return int_pow(r, x, y);
        return tv_float(pow(fx, fy));
    }
    tr_int_overflow(r);
}

static tval arith(trender *r, int op, tval a, tval b, const tnode *at)
{
    if (a.kind == TV_UNDEF) fail_undef(r, a);
    if (b.kind == TV_UNDEF) fail_undef(r, b);
    if (tv_is_num(a) && tv_is_num(b)) return arith_num(r, op, a, b, at);
    if (op == OP_ADD && a.kind == TV_STR && b.kind == TV_STR) return concat_str(r, a, b);
    if (op == OP_MOD && a.kind == TV_STR) return tf_str_mod(r, a, b);
    if (op == OP_ADD && a.kind == TV_LIST && b.kind == TV_LIST && a.tuple == b.tuple) {
        tval l = tv_list(r, a.u.list->n + b.u.list->n);
        l.tuple = a.tuple;
        for (size_t i = 0; i < a.u.list->n; i++) tl_push(r, l.u.list, a.u.list->v[i]);
        for (size_t i = 0; i < b.u.list->n; i++) tl_push(r, l.u.list, b.u.list->v[i]);
        return l;
    }
    if (op == OP_MUL && (a.kind == TV_INT || a.kind == TV_BOOL) &&
        (b.kind == TV_STR || b.kind == TV_LIST))
        return repeat(r, b, a.u.i, at);
    if (op == OP_MUL && (b.kind == TV_INT || b.kind == TV_BOOL) &&
        (a.kind == TV_STR || a.kind == TV_LIST))
        return repeat(r, a, b.u.i, at);
    static const char *const sym[] = {"", "+", "-", "*", "/", "//", "%", "**"};
    tr_fail(r, STRATA_EINVAL, "template line %d:%d: unsupported operand type(s) for %s: '%s' and '%s'",
            at->line, at->col, sym[op], tv_type_name(a), tv_type_name(b));
}

/* ---- expressions ---- */

static tval eval(trender *r, tframe *f, const tnode *n);
static void exec_body(trender *r, tframe *f, const tnode *b, int *sig);
static tval call_macro(trender *r, tval m, targs *a, tval caller, const tnode *at);

tval *ta_arg(targs *a, size_t i, const char *name)
{
    if (i < a->npos) return &a->pos[i];
    for (size_t k = 0; k < a->nkw; k++)
        if (strlen(name) == a->kwl[k] && memcmp(a->kwn[k], name, a->kwl[k]) == 0)
            return &a->kwv[k];
    return NULL;
}

static void eval_args(trender *r, tframe *f, const tnode *n, targs *a)
{
    a->npos = n->nkids;
    a->pos = tr_alloc(r, (n->nkids + 1) * sizeof *a->pos);
    for (size_t i = 0; i < n->nkids; i++) a->pos[i] = eval(r, f, n->kids[i]);
    a->nkw = n->nkw;
    a->kwn = n->kwnames;
    a->kwl = n->kwlens;
    a->kwv = tr_alloc(r, (n->nkw + 1) * sizeof *a->kwv);
    for (size_t i = 0; i < n->nkw; i++) a->kwv[i] = eval(r, f, n->kwvals[i]);
}

static tval call_value(trender *r, tval fn, targs *a, tval caller, const tnode *at)
{
    switch (fn.kind) {
    case TV_MACRO: return call_macro(r, fn, a, caller, at);
    case TV_FUNC: return tf_call_global(r, (int)fn.u.i, a);
    case TV_METHOD: return tf_method(r, *fn.u.m.self, fn.u.m.name, a);
    case TV_UNDEF: fail_undef(r, fn);
    default: {
        char msg[96];
        snprintf(msg, sizeof msg, "'%s' object is not callable", tv_type_name(fn));
        fail_at(r, at, STRATA_EINVAL, msg);
    }
    }
}

static tval eval_name(trender *r, tframe *f, const tnode *n)
{
    tval *v = lookup(f, n->name, n->name_len);
    if (v) return *v;
    int g = tf_global_id(n->name, n->name_len);
    if (g >= 0) {
        tval fn = {.kind = TV_FUNC};
        fn.u.i = g;
        return fn;
    }
    return undef(r, "'%.*s' is undefined", (int)n->name_len, n->name);
}

static tval eval_cmp(trender *r, tframe *f, const tnode *n)
{
    tval left = eval(r, f, n->a);
    for (size_t i = 0; i < n->nkids; i++) {
        tval right = eval(r, f, n->kids[i]);
        if (!compare_op(r, n->ops[i], left, right)) return tv_bool(0);
        left = right;
    }
    return tv_bool(1);
}

static tval eval_collection(trender *r, tframe *f, const tnode *n)
{
    if (n->kind == E_DICT) {
        tval d = tv_dict(r, n->nkids / 2);
        for (size_t i = 0; i + 1 < n->nkids; i += 2) {
            tval k = eval(r, f, n->kids[i]);
            if (!tv_hashable(r, k)) fail_at(r, n->kids[i], STRATA_EINVAL, "unhashable dict key");
            td_set(r, d.u.dict, k, eval(r, f, n->kids[i + 1]));
        }
        return d;
    }
    tval l = tv_list(r, n->nkids);
    l.tuple = n->kind == E_TUPLE;
    for (size_t i = 0; i < n->nkids; i++) l.u.list->v[i] = eval(r, f, n->kids[i]);
    l.u.list->n = n->nkids;
    return l;
}

/* -a; -INT64_MIN does not fit. */
static tval negate(trender *r, tval a)
{
    int64_t z;
    if (a.kind == TV_FLOAT) return tv_float(-a.u.f);
    if (__builtin_sub_overflow((int64_t)0, a.u.i, &z)) tr_int_overflow(r);
    return tv_int(z);
}

/* The parser nests brackets at most 200 deep, but chains (`a.b.b...`,
 * `x|f|f...`, `1+1+...`) are left-deep trees built by loops, as deep as
 * the source is long; eval recursing through them is bounded here. */
static void eval_enter(trender *r, const tnode *n)
{
    if (++r->edepth > TMPL_MAX_EVAL_DEPTH)
        tr_fail(r, STRATA_ERANGE,
                "template line %d:%d: expression nested deeper than %d (a chain of filters, "
                "attributes or operators this long, or deep recursion)",
                n->line, n->col, TMPL_MAX_EVAL_DEPTH);
}

static tval eval_node(trender *r, tframe *f, const tnode *n);

static tval eval(trender *r, tframe *f, const tnode *n)
{
    eval_enter(r, n);
    tval v = eval_node(r, f, n);
    r->edepth--;
    return v;
}

static tval eval_node(trender *r, tframe *f, const tnode *n)
{
    tval a, b;
    switch (n->kind) {
    case E_CONST: return n->cval;
    case E_NAME: return eval_name(r, f, n);
    case E_ATTR: return tr_getattr(r, eval(r, f, n->a), n->name, n->name_len);
    case E_ITEM:
        a = eval(r, f, n->a);
        return tr_getitem(r, a, eval(r, f, n->b));
    case E_SLICE: {
        a = eval(r, f, n->a);
        tval sv[3];
        for (int k = 0; k < 3; k++) sv[k] = n->kids[k] ? eval(r, f, n->kids[k]) : tv_none();
        return do_slice(r, a, sv, n);
    }
    case E_CALL: {
        tval fn = eval(r, f, n->a);
        targs args;
        eval_args(r, f, n, &args);
        return call_value(r, fn, &args, tv_undef(NULL), n);
    }
    case E_FILTER: {
        targs args;
        a = eval(r, f, n->a);
        eval_args(r, f, n, &args);
        return tf_filter(r, n->fid, a, &args, n);
    }
    case E_TEST: {
        targs args;
        a = eval(r, f, n->a);
        eval_args(r, f, n, &args);
        return tv_bool(tf_test(r, n->fid, a, &args) != n->negate);
    }
    case E_BIN:
        a = eval(r, f, n->a);
        return arith(r, n->op, a, eval(r, f, n->b), n);
    case E_NEG:
    case E_POS:
        a = eval(r, f, n->a);
        if (a.kind == TV_UNDEF) fail_undef(r, a);
        if (!tv_is_num(a)) fail_at(r, n, STRATA_EINVAL, "bad operand type for unary -/+");
        if (n->kind == E_POS) return a.kind == TV_BOOL ? tv_int(a.u.i) : a;
        return negate(r, a);
    case E_NOT: return tv_bool(!tv_truthy(eval(r, f, n->a)));
    case E_AND:
        a = eval(r, f, n->a);
        return tv_truthy(a) ? eval(r, f, n->b) : a;
    case E_OR:
        a = eval(r, f, n->a);
        return tv_truthy(a) ? a : eval(r, f, n->b);
    case E_COND:
        if (tv_truthy(eval(r, f, n->b))) return eval(r, f, n->a);
        return n->c ? eval(r, f, n->c) : undef(r, "the inline if-expression evaluated to false and no else section was defined");
    case E_LIST: case E_TUPLE: case E_DICT: return eval_collection(r, f, n);
    case E_CONCAT:
        a = tv_to_str(r, eval(r, f, n->a));
        b = tv_to_str(r, eval(r, f, n->b));
        return concat_str(r, a, b);
    case E_CMP: return eval_cmp(r, f, n);
    }
    fail_at(r, n, STRATA_EINVAL, "cannot evaluate this node");
}

/* ---- macros ---- */

/* Runs body in frame f with output captured; returns the text. */
static tval capture(trender *r, tframe *f, const tnode *body)
{
    tsb buf = {0}, *saved = r->out;
    int sig = SIG_NONE;
    r->out = &buf;
    exec_body(r, f, body, &sig);
    r->out = saved;
    tval v = tsb_val(&buf);
    if (!buf.len) v.lit = 1;
    return v;
}

static tval call_macro(trender *r, tval m, targs *a, tval caller, const tnode *at)
{
    const tnode *def = m.u.macro->def;
    tr_step(r);
    enter(r, at);
    tframe *f = frame_new(r, m.u.macro->closure);
    if (a->npos > def->nkids)
        fail_at(r, at, STRATA_EINVAL, "macro called with too many arguments");
    for (size_t k = 0; k < a->nkw; k++) {
        size_t i = 0;
        while (i < def->nkids && (def->kids[i]->name_len != a->kwl[k] ||
                                  memcmp(def->kids[i]->name, a->kwn[k], a->kwl[k]) != 0))
            i++;
        if (i == def->nkids)
            tr_fail(r, STRATA_EINVAL, "template line %d:%d: macro takes no keyword argument '%.*s'",
                    at->line, at->col, (int)a->kwl[k], a->kwn[k]);
    }
    for (size_t i = 0; i < def->nkids; i++) {
        const tnode *p = def->kids[i];
        tval *v = ta_arg(a, i, "");
        for (size_t k = 0; !v && k < a->nkw; k++)
            if (a->kwl[k] == p->name_len && memcmp(a->kwn[k], p->name, p->name_len) == 0)
                v = &a->kwv[k];
        tval val = v ? *v : def->kwvals && def->kwvals[i] ? eval(r, f, def->kwvals[i])
                          : undef(r, "parameter '%.*s' was not provided",
                                  (int)p->name_len, p->name);
        bind(r, f, p->name, p->name_len, val);
    }
    if (caller.kind == TV_MACRO) bind(r, f, "caller", 6, caller);
    tval out = capture(r, f, def->body);
    r->depth--;
    return out;
}

/* ---- statements ---- */

static void assign(trender *r, tframe *f, const tnode *target, tval v)
{
    if (target->kind == E_NAME) {
        bind(r, f, target->name, target->name_len, v);
        return;
    }
    if (target->kind == E_ATTR) {
        tval ns = eval(r, f, target->a);
        if (ns.kind != TV_NS)
            fail_at(r, target, STRATA_EINVAL, "cannot assign attribute on non-namespace object");
        td_set(r, ns.u.dict, tv_str(target->name, target->name_len, 1), v);
        return;
    }
    /* tuple unpacking */
    tlist *l = tr_iter(r, v);
    if (l->n != target->nkids) {
        char msg[96];
        snprintf(msg, sizeof msg, "cannot unpack %zu values into %zu names", l->n, target->nkids);
        fail_at(r, target, STRATA_EINVAL, msg);
    }
    for (size_t i = 0; i < l->n; i++) assign(r, f, target->kids[i], l->v[i]);
}

/* Items of a for loop after its `if` filter. */
static tlist *loop_items(trender *r, tframe *f, const tnode *n)
{
    tlist *all = tr_iter(r, eval(r, f, n->b));
    if (!n->c) return all;
    tlist *keep = tv_list(r, 0).u.list;
    for (size_t i = 0; i < all->n; i++) {
        tr_step(r);
        tframe *it = frame_new(r, f);
        assign(r, it, n->a, all->v[i]);
        if (tv_truthy(eval(r, it, n->c))) tl_push(r, keep, all->v[i]);
    }
    return keep;
}

static void exec_for(trender *r, tframe *f, const tnode *n)
{
    tlist *items = loop_items(r, f, n);
    if (!items->n) {
        int sig = SIG_NONE;
        if (n->orelse) exec_body(r, frame_new(r, f), n->orelse, &sig);
        return;
    }
    tloop *lp = tr_alloc(r, sizeof *lp);
    lp->items = items;
    tval lv = {.kind = TV_LOOP};
    lv.u.loop = lp;
    tframe *it = NULL;
    for (size_t i = 0; i < items->n; i++) {
        tr_step(r);
        lp->i = i;
        /* Each iteration starts with an empty scope. The frame is reused
         * (loops stay O(1) in memory) unless a macro captured it. */
        if (!it || it->captured) it = frame_new(r, f);
        else it->vars.n = 0;
        assign(r, it, n->a, items->v[i]);
        bind(r, it, "loop", 4, lv);
        int sig = SIG_NONE;
        exec_body(r, it, n->body, &sig);
        if (sig == SIG_BREAK) break;
    }
}

/* Applies a filter chain whose innermost target is `v`. */
static tval apply_chain(trender *r, tframe *f, const tnode *fl, tval v)
{
    eval_enter(r, fl);
    tval in = fl->a ? apply_chain(r, f, fl->a, v) : v;
    targs args;
    eval_args(r, f, fl, &args);
    tval out = tf_filter(r, fl->fid, in, &args, fl);
    r->edepth--;
    return out;
}

static void exec_callblock(trender *r, tframe *f, const tnode *n)
{
    tmacro *cm = tr_alloc(r, sizeof *cm);
    cm->def = n;
    cm->closure = f;
    f->captured = 1;
    tval caller = {.kind = TV_MACRO};
    caller.u.macro = cm;
    tval fn = eval(r, f, n->a->a);
    targs args;
    eval_args(r, f, n->a, &args);
    if (fn.kind != TV_MACRO) fail_at(r, n, STRATA_EINVAL, "call block needs a macro");
    emit(r, call_macro(r, fn, &args, caller, n));
}

static void exec_stmt(trender *r, tframe *f, const tnode *n, int *sig)
{
    switch (n->kind) {
    case N_TEXT: emit(r, n->cval); return;
    case N_OUTPUT: emit(r, tv_to_str(r, eval(r, f, n->a))); return;
    case N_IF:
        if (tv_truthy(eval(r, f, n->a))) exec_body(r, f, n->body, sig);
        else if (n->orelse) exec_body(r, f, n->orelse, sig);
        return;
    case N_FOR: exec_for(r, f, n); return;
    case N_SET: assign(r, f, n->a, eval(r, f, n->b)); return;
    case N_SETBLOCK: {
        tval v = capture(r, frame_new(r, f), n->body);
        if (n->c) v = apply_chain(r, f, n->c, v);
        assign(r, f, n->a, v);
        return;
    }
    case N_MACRO: {
        tmacro *m = tr_alloc(r, sizeof *m);
        m->def = n;
        m->closure = f;
        f->captured = 1;
        tval mv = {.kind = TV_MACRO};
        mv.u.macro = m;
        bind(r, f, n->name, n->name_len, mv);
        return;
    }
    case N_CALLBLOCK: exec_callblock(r, f, n); return;
    case N_FILTERBLOCK:
        emit(r, apply_chain(r, f, n->a, capture(r, frame_new(r, f), n->body)));
        return;
    case N_BREAK: *sig = SIG_BREAK; return;
    case N_CONTINUE: *sig = SIG_CONTINUE; return;
    case N_BODY: exec_body(r, f, n, sig); return;
    }
    fail_at(r, n, STRATA_EINVAL, "cannot execute this node");
}

static void exec_body(trender *r, tframe *f, const tnode *b, int *sig)
{
    enter(r, b);
    for (size_t i = 0; i < b->nkids && *sig == SIG_NONE; i++)
        exec_stmt(r, f, b->kids[i], sig);
    r->depth--;
}

/* ---- entry point ---- */

/* The output's spans: strftime_now's runs are data, merged with their
 * neighbours of the same kind; the first of them is reported in clk. */
static void finish_spans(trender *r, tmpl_span **spans, size_t *n_spans)
{
    tsb *b = &r->root_out;
    size_t off = 0, n = 0;
    *spans = xmalloc((b->nruns + 1) * sizeof **spans);
    for (size_t i = 0; i < b->nruns; i++) {
        int literal = b->runs[i].lit == TL_LIT;
        if (b->runs[i].lit == TL_NOW && r->clk && r->clk->off < 0)
            r->clk->off = (long)off, r->clk->len = b->runs[i].len;
        if (n && (*spans)[n - 1].literal == literal) (*spans)[n - 1].len += b->runs[i].len;
        else (*spans)[n++] = (tmpl_span){off, b->runs[i].len, literal};
        off += b->runs[i].len;
    }
    *n_spans = n;
}

static int finish(trender *r, char **out, size_t *out_len, tmpl_span **spans,
                  size_t *n_spans)
{
    tsb *b = &r->root_out;
    *out = xmalloc(b->len + 1);
    if (b->len) memcpy(*out, b->p, b->len);
    (*out)[b->len] = 0;
    *out_len = b->len;
    if (spans) finish_spans(r, spans, n_spans);
    else if (r->clk) { /* the spans are wanted for the clock's offset only */
        tmpl_span *sp;
        size_t ns;
        finish_spans(r, &sp, &ns);
        free(sp);
    }
    if (r->clk) r->clk->used = r->now;
    return 0;
}

long long tr_now(trender *r)
{
    if (!r->now) r->now = r->clk && r->clk->now ? r->clk->now : (long long)time(NULL);
    return r->now;
}

int tmpl_render(const tmpl *t, const json_t *ctx, char **out, size_t *out_len,
                tmpl_span **spans, size_t *n_spans, strata_err *err)
{
    return tmpl_render_at(t, ctx, NULL, out, out_len, spans, n_spans, err);
}

int tmpl_render_at(const tmpl *t, const json_t *ctx, tmpl_clock *clk, char **out, size_t *out_len,
                   tmpl_span **spans, size_t *n_spans, strata_err *err)
{
    *out = NULL;
    *out_len = 0;
    if (spans) {
        *spans = NULL;
        *n_spans = 0;
    }
    if (ctx && !json_is_object(ctx))
        return strata_errf(err, STRATA_EINVAL, "template context must be a JSON object");
    trender *r = xcalloc(1, sizeof *r);
    r->ar.limit = TMPL_MAX_MEMORY;
    r->err = err;
    r->out = &r->root_out;
    r->clk = clk;
    if (clk) clk->used = 0, clk->off = -1, clk->len = 0;
    int rc = 0;
    if (setjmp(r->jb)) {
        rc = r->code;
    } else {
        r->ctx = frame_new(r, NULL);
        const char *k;
        json_t *v;
        if (ctx) {
            json_object_foreach((json_t *)ctx, k, v)
                bind(r, r->ctx, k, strlen(k), tv_from_json(r, v));
        }
        tframe *root = frame_new(r, r->ctx);
        int sig = SIG_NONE;
        exec_body(r, root, t->root, &sig);
        rc = finish(r, out, out_len, spans, n_spans);
    }
    ta_free_all(&r->ar);
    free(r);
    return rc;
}
