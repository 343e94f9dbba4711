/* tmpl_val.c - the value model of the template engine.
 *
 * Values are small structs passed by value; strings, lists and dicts point
 * into the render arena (or, for data from the context, straight into the
 * caller's JSON). A string carries its provenance: either one flag for all
 * of it or a list of runs, so that '<|im_start|>' + role keeps the literal
 * part literal and the role data. Operations that cut a string (slicing,
 * strip, split) keep runs exactly; ones that rewrite it (upper, replace)
 * give literal only when every input byte was literal.
 *
 * Text forms follow Python, because jinja2 prints with str(): True/False/
 * None, float repr (1.0, 1e-05), repr() of lists and dicts, and json.dumps
 * for tojson (HF's: ensure_ascii=False, insertion order kept). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "text/tmpl_int.h"

/* ---- arena ---- */

typedef struct tachunk {
    struct tachunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} tachunk;

void *ta_alloc(tarena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (!n) n = 16;
    tachunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > (64u << 10) ? n : (64u << 10);
        if (a->limit && a->used_total + cap > a->limit) return NULL;
        c = xmalloc(sizeof *c + cap);
        c->next = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
        a->used_total += cap;
    }
    void *p = c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

void ta_free_all(tarena *a)
{
    tachunk *c = a->head;
    while (c) {
        tachunk *nx = c->next;
        free(c);
        c = nx;
    }
    a->head = NULL;
    a->used_total = 0;
}

/* ---- constructors ---- */

tval tv_undef(const char *hint)
{
    tval v = {.kind = TV_UNDEF};
    v.u.undef = hint;
    return v;
}

tval tv_none(void) { return (tval){.kind = TV_NONE}; }

tval tv_bool(int b)
{
    tval v = {.kind = TV_BOOL};
    v.u.i = b != 0;
    return v;
}

tval tv_int(int64_t i)
{
    tval v = {.kind = TV_INT};
    v.u.i = i;
    return v;
}

tval tv_float(double f)
{
    tval v = {.kind = TV_FLOAT};
    v.u.f = f;
    return v;
}

tval tv_str(const char *p, size_t len, int lit)
{
    tval v = {.kind = TV_STR, .lit = (uint8_t)(lit == TL_NOW ? TL_NOW : lit != 0)};
    v.u.s.p = p;
    v.u.s.len = len;
    return v;
}

tval tv_cstr(const char *s, int lit) { return tv_str(s, strlen(s), lit); }

tval tv_list(trender *r, size_t cap)
{
    tval v = {.kind = TV_LIST};
    v.u.list = tr_alloc(r, sizeof *v.u.list);
    if (cap) {
        v.u.list->v = tr_alloc(r, cap * sizeof(tval));
        v.u.list->cap = cap;
    }
    return v;
}

tval tv_dict(trender *r, size_t cap)
{
    tval v = {.kind = TV_DICT};
    v.u.dict = tr_alloc(r, sizeof *v.u.dict);
    if (cap) {
        v.u.dict->k = tr_alloc(r, cap * sizeof(tval));
        v.u.dict->v = tr_alloc(r, cap * sizeof(tval));
        v.u.dict->cap = cap;
    }
    return v;
}

void tl_push(trender *r, tlist *l, tval v)
{
    if (l->n == l->cap) {
        size_t nc = mem_grown_cap(l->cap, l->cap + 1, 8);
        tval *nv = tr_alloc(r, nc * sizeof *nv);
        if (l->n) memcpy(nv, l->v, l->n * sizeof *nv);
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = v;
}

tval *td_get(const tdict *d, const char *key, size_t klen)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].kind == TV_STR && d->k[i].u.s.len == klen &&
            memcmp(d->k[i].u.s.p, key, klen) == 0)
            return &d->v[i];
    return NULL;
}

static tval *dict_find(trender *r, const tdict *d, tval key, int depth);

tval *td_getv(trender *r, const tdict *d, tval key) { return dict_find(r, d, key, 0); }

void td_set(trender *r, tdict *d, tval key, tval val)
{
    tval *slot = td_getv(r, d, key);
    if (slot) {
        *slot = val;
        return;
    }
    if (d->n == d->cap) {
        size_t nc = mem_grown_cap(d->cap, d->cap + 1, 8);
        tval *nk = tr_alloc(r, nc * sizeof *nk), *nv = tr_alloc(r, nc * sizeof *nv);
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof *nk);
            memcpy(nv, d->v, d->n * sizeof *nv);
        }
        d->k = nk;
        d->v = nv;
        d->cap = nc;
    }
    d->k[d->n] = key;
    d->v[d->n++] = val;
}

/* Number of items of range(start, stop, step), step != 0, computed in
 * unsigned arithmetic so that extreme values cannot overflow. */
uint64_t tv_range_len(int64_t start, int64_t stop, int64_t step)
{
    if (step > 0 && stop > start)
        return 1 + ((uint64_t)stop - (uint64_t)start - 1) / (uint64_t)step;
    if (step < 0 && start > stop)
        return 1 + ((uint64_t)start - (uint64_t)stop - 1) / (0 - (uint64_t)step);
    return 0;
}

/* ---- truth, equality, order ---- */

int tv_truthy(tval v)
{
    switch (v.kind) {
    case TV_UNDEF: case TV_NONE: return 0;
    case TV_BOOL: case TV_INT: return v.u.i != 0;
    case TV_FLOAT: return v.u.f != 0.0;
    case TV_STR: return v.u.s.len != 0;
    case TV_LIST: return v.u.list->n != 0;
    case TV_DICT: return v.u.dict->n != 0;
    default: return 1;
    }
}

static void value_depth(trender *r, int depth)
{
    if (depth > TMPL_MAX_VALUE_DEPTH)
        tr_fail(r, STRATA_ERANGE, "comparing or hashing a value nested deeper than %d",
                TMPL_MAX_VALUE_DEPTH);
}

static int hashable_at(trender *r, tval v, int depth)
{
    value_depth(r, depth);
    if (v.kind == TV_DICT || (v.kind == TV_LIST && !v.tuple)) return 0;
    if (v.kind == TV_LIST)
        for (size_t i = 0; i < v.u.list->n; i++)
            if (!hashable_at(r, v.u.list->v[i], depth + 1)) return 0;
    return 1;
}

int tv_hashable(trender *r, tval v) { return hashable_at(r, v, 0); }

int tv_is_num(tval v)
{
    return v.kind == TV_INT || v.kind == TV_FLOAT || v.kind == TV_BOOL;
}

double tv_num(tval v)
{
    return v.kind == TV_FLOAT ? v.u.f : (double)v.u.i;
}

static int num_equal(tval a, tval b)
{
    if (a.kind != TV_FLOAT && b.kind != TV_FLOAT) return a.u.i == b.u.i;
    return tv_num(a) == tv_num(b);
}

static int equal_at(trender *r, tval a, tval b, int depth);

/* d[key] for any hashable key (strings go the fast way). */
static tval *dict_find(trender *r, const tdict *d, tval key, int depth)
{
    if (key.kind == TV_STR) return td_get(d, key.u.s.p, key.u.s.len);
    for (size_t i = 0; i < d->n; i++)
        if (equal_at(r, d->k[i], key, depth)) return &d->v[i];
    return NULL;
}

int tv_equal(trender *r, tval a, tval b) { return equal_at(r, a, b, 0); }

static int equal_at(trender *r, tval a, tval b, int depth)
{
    value_depth(r, depth);
    if (tv_is_num(a) && tv_is_num(b)) return num_equal(a, b);
    if (a.kind != b.kind) return 0;
    switch (a.kind) {
    case TV_UNDEF: case TV_NONE: return 1;
    case TV_STR:
        return a.u.s.len == b.u.s.len && memcmp(a.u.s.p, b.u.s.p, a.u.s.len) == 0;
    case TV_LIST:
        if (a.tuple != b.tuple || a.u.list->n != b.u.list->n) return 0;
        for (size_t i = 0; i < a.u.list->n; i++)
            if (!equal_at(r, a.u.list->v[i], b.u.list->v[i], depth + 1)) return 0;
        return 1;
    case TV_DICT:
        if (a.u.dict->n != b.u.dict->n) return 0;
        for (size_t i = 0; i < a.u.dict->n; i++) {
            tval *o = dict_find(r, b.u.dict, a.u.dict->k[i], depth + 1);
            if (!o || !equal_at(r, a.u.dict->v[i], *o, depth + 1)) return 0;
        }
        return 1;
    case TV_NS: return a.u.dict == b.u.dict;
    case TV_LOOP: return a.u.loop == b.u.loop;
    case TV_MACRO: return a.u.macro == b.u.macro;
    case TV_FUNC: return a.u.i == b.u.i;
    default: return 0;
    }
}

const char *tv_type_name(tval v)
{
    static const char *const names[] = {"Undefined", "NoneType", "bool", "int",
        "float", "str", "list", "dict", "Namespace", "LoopContext", "Macro",
        "function", "method"};
    if (v.kind == TV_LIST && v.tuple) return "tuple";
    return names[v.kind];
}

static int compare_at(trender *r, tval a, tval b, int depth)
{
    value_depth(r, depth);
    if (tv_is_num(a) && tv_is_num(b)) {
        if (a.kind != TV_FLOAT && b.kind != TV_FLOAT)
            return (a.u.i > b.u.i) - (a.u.i < b.u.i);
        double x = tv_num(a), y = tv_num(b);
        return (x > y) - (x < y);
    }
    if (a.kind == TV_STR && b.kind == TV_STR) {
        /* UTF-8 byte order is code point order, as Python compares. */
        size_t n = a.u.s.len < b.u.s.len ? a.u.s.len : b.u.s.len;
        int c = memcmp(a.u.s.p, b.u.s.p, n);
        if (c) return c < 0 ? -1 : 1;
        return (a.u.s.len > b.u.s.len) - (a.u.s.len < b.u.s.len);
    }
    if (a.kind == TV_LIST && b.kind == TV_LIST && a.tuple == b.tuple) {
        size_t n = a.u.list->n < b.u.list->n ? a.u.list->n : b.u.list->n;
        for (size_t i = 0; i < n; i++) {
            if (equal_at(r, a.u.list->v[i], b.u.list->v[i], depth + 1)) continue;
            return compare_at(r, a.u.list->v[i], b.u.list->v[i], depth + 1);
        }
        return (a.u.list->n > b.u.list->n) - (a.u.list->n < b.u.list->n);
    }
    tr_fail(r, STRATA_EINVAL, "'<' not supported between instances of '%s' and '%s'",
            tv_type_name(a), tv_type_name(b));
}

int tv_compare(trender *r, tval a, tval b) { return compare_at(r, a, b, 0); }

/* ---- UTF-8 ---- */

size_t tu_next(const char *p, size_t n, size_t i, uint32_t *cp)
{
    const unsigned char *s = (const unsigned char *)p;
    unsigned char c = s[i];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!len || i + (size_t)len > n) {
        *cp = 0xFFFD;
        return i + 1;
    }
    uint32_t v = len == 1 ? c : c & (0x7F >> len);
    for (int k = 1; k < len; k++) {
        if ((s[i + k] & 0xC0) != 0x80) {
            *cp = 0xFFFD;
            return i + 1;
        }
        v = (v << 6) | (s[i + k] & 0x3F);
    }
    *cp = v;
    return i + (size_t)len;
}

size_t tu_put(char *o, uint32_t cp)
{
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Counts the steps tu_next takes (a stray continuation byte is one U+FFFD
 * there), so tables indexed by code point, as in slicing, fit. */
size_t tu_len(const char *p, size_t n)
{
    size_t c = 0;
    uint32_t cp;
    for (size_t i = 0; i < n; i = tu_next(p, n, i, &cp)) c++;
    return c;
}

/* Python's str.isspace(): the characters str.strip() and split() drop. */
int tu_isspace(uint32_t cp)
{
    if (cp <= 0x20) return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C) ;
    if (cp < 0x85) return 0;
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* ---- string builder with provenance ---- */

void tsb_add(trender *r, tsb *b, const char *p, size_t len, int lit)
{
    if (!len) return;
    if (b->len + len + 1 > b->cap) {
        size_t nc = mem_grown_cap(b->cap, b->len + len + 1, 64);
        char *np = tr_alloc(r, nc);
        if (b->len) memcpy(np, b->p, b->len);
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->len, p, len);
    b->len += len;
    b->p[b->len] = 0;
    if (b->nruns && b->runs[b->nruns - 1].lit == lit) {
        b->runs[b->nruns - 1].len += len;
        return;
    }
    if (b->nruns == b->rcap) {
        size_t nc = mem_grown_cap(b->rcap, b->rcap + 1, 4);
        trun *nr = tr_alloc(r, nc * sizeof *nr);
        if (b->nruns) memcpy(nr, b->runs, b->nruns * sizeof *nr);
        b->runs = nr;
        b->rcap = nc;
    }
    b->runs[b->nruns++] = (trun){len, lit};
}

void tsb_addc(trender *r, tsb *b, const char *s, int lit)
{
    tsb_add(r, b, s, strlen(s), lit);
}

void tsb_addv(trender *r, tsb *b, tval s)
{
    if (!s.nruns) {
        tsb_add(r, b, s.u.s.p, s.u.s.len, s.lit);
        return;
    }
    size_t off = 0;
    for (uint32_t i = 0; i < s.nruns; i++) {
        tsb_add(r, b, s.u.s.p + off, s.u.s.runs[i].len, s.u.s.runs[i].lit);
        off += s.u.s.runs[i].len;
    }
}

tval tsb_val(tsb *b)
{
    tval v = tv_str(b->p ? b->p : "", b->len, b->nruns ? b->runs[0].lit : 1);
    if (b->nruns > 1) {
        v.nruns = (uint32_t)b->nruns;
        v.u.s.runs = b->runs;
    }
    return v;
}

tval ts_sub(trender *r, tval s, size_t off, size_t len)
{
    if (!s.nruns) return tv_str(s.u.s.p + off, len, s.lit);
    tsb b = {0};
    size_t pos = 0;
    for (uint32_t i = 0; i < s.nruns && pos < off + len; i++) {
        size_t a = pos, e = pos + s.u.s.runs[i].len;
        pos = e;
        if (e <= off) continue;
        if (a < off) a = off;
        if (e > off + len) e = off + len;
        tsb_add(r, &b, s.u.s.p + a, e - a, s.u.s.runs[i].lit);
    }
    tval v = tsb_val(&b);
    if (!len) v.lit = ts_all_lit(s);
    return v;
}

int ts_all_lit(tval s)
{
    if (!s.nruns) return s.lit == TL_LIT;
    for (uint32_t i = 0; i < s.nruns; i++)
        if (s.u.s.runs[i].lit != TL_LIT) return 0;
    return 1;
}

tval ts_derived(trender *r, const char *p, size_t len, tval from)
{
    return tv_str(p, len, from.kind == TV_STR ? ts_all_lit(from) : 0);
}

/* ---- Python text forms ---- */

void tv_fmt_float(char *buf, double f)
{
    if (isnan(f)) { strcpy(buf, "nan"); return; }
    if (isinf(f)) { strcpy(buf, f < 0 ? "-inf" : "inf"); return; }
    char tmp[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    /* tmp = [-]d[.ddd]e[+-]xx: pull out digits and exponent. */
    char digs[24];
    int nd = 0, neg = tmp[0] == '-';
    const char *q = tmp + neg;
    for (; *q && *q != 'e'; q++)
        if (*q != '.') digs[nd++] = *q;
    while (nd > 1 && digs[nd - 1] == '0') nd--;
    digs[nd] = 0;
    int decpt = atoi(q + 1) + 1;
    char *o = buf;
    if (neg) *o++ = '-';
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            o += sprintf(o, "0.");
            for (int i = 0; i < -decpt; i++) *o++ = '0';
            o += sprintf(o, "%s", digs);
        } else if (decpt >= nd) {
            o += sprintf(o, "%s", digs);
            for (int i = nd; i < decpt; i++) *o++ = '0';
            o += sprintf(o, ".0");
        } else {
            o += sprintf(o, "%.*s.%s", decpt, digs, digs + decpt);
        }
    } else {
        *o++ = digs[0];
        if (nd > 1) o += sprintf(o, ".%s", digs + 1);
        int e = decpt - 1;
        o += sprintf(o, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    }
    *o = 0;
}

/* Characters Python's repr() escapes: not str.isprintable(). Covers the
 * controls, separators and common format characters; unassigned code
 * points are not known here and print as themselves. */
static int py_unprintable(uint32_t cp)
{
    if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) return 1;
    if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200F) ||
        (cp >= 0x2028 && cp <= 0x202F) || (cp >= 0x205F && cp <= 0x206F) ||
        cp == 0x3000 || cp == 0xFEFF || (cp >= 0xFFF9 && cp <= 0xFFFB))
        return 1;
    if (cp == 0x61C || (cp >= 0x600 && cp <= 0x605) || cp == 0x6DD ||
        cp == 0x70F || cp == 0x180E)
        return 1;
    if ((cp >= 0xD800 && cp <= 0xF8FF) || cp >= 0xF0000 ||
        (cp >= 0xE0000 && cp <= 0xE007F))
        return 1;
    return 0;
}

static void repr_str(trender *r, tsb *b, const char *p, size_t n)
{
    int has_sq = memchr(p, '\'', n) != NULL, has_dq = memchr(p, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    char qs[2] = {q, 0};
    tsb_add(r, b, qs, 1, 0);
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t nx = tu_next(p, n, i, &cp);
        char e[16];
        if (cp == (uint32_t)q || cp == '\\') {
            e[0] = '\\';
            e[1] = (char)cp;
            tsb_add(r, b, e, 2, 0);
        } else if (cp == '\n') tsb_addc(r, b, "\\n", 0);
        else if (cp == '\r') tsb_addc(r, b, "\\r", 0);
        else if (cp == '\t') tsb_addc(r, b, "\\t", 0);
        else if (py_unprintable(cp)) {
            if (cp < 0x100) snprintf(e, sizeof e, "\\x%02x", cp);
            else if (cp < 0x10000) snprintf(e, sizeof e, "\\u%04x", cp);
            else snprintf(e, sizeof e, "\\U%08x", cp);
            tsb_addc(r, b, e, 0);
        } else {
            tsb_add(r, b, p + i, nx - i, 0);
        }
        i = nx;
    }
    tsb_add(r, b, qs, 1, 0);
}

static void scalar_text(trender *r, tsb *b, tval v)
{
    char buf[48];
    switch (v.kind) {
    case TV_NONE: tsb_addc(r, b, "None", 0); break;
    case TV_BOOL: tsb_addc(r, b, v.u.i ? "True" : "False", 0); break;
    case TV_INT:
        snprintf(buf, sizeof buf, "%lld", (long long)v.u.i);
        tsb_addc(r, b, buf, 0);
        break;
    case TV_FLOAT:
        tv_fmt_float(buf, v.u.f);
        tsb_addc(r, b, buf, 0);
        break;
    default: break;
    }
}

/* The containers being printed, innermost first: `{% set ns.me = ns %}`
 * makes a namespace that contains itself, and Python prints the inner
 * occurrence as `{...}` (`[...]`, `(...)` for lists and tuples; the
 * Py_ReprEnter guard) instead of recursing forever. */
typedef struct repr_path {
    const void *obj;
    const struct repr_path *up;
    int depth;
} repr_path;

static int repr_on_path(const repr_path *p, const void *obj)
{
    for (; p; p = p->up)
        if (p->obj == obj) return 1;
    return 0;
}

static void repr_at(trender *r, tsb *b, tval v, const repr_path *up);

static void repr_list(trender *r, tsb *b, tval v, const repr_path *here)
{
    tsb_addc(r, b, v.tuple ? "(" : "[", 0);
    if (repr_on_path(here->up, v.u.list)) {
        tsb_addc(r, b, "...", 0);
    } else {
        for (size_t i = 0; i < v.u.list->n; i++) {
            if (i) tsb_addc(r, b, ", ", 0);
            repr_at(r, b, v.u.list->v[i], here);
        }
        if (v.tuple && v.u.list->n == 1) tsb_addc(r, b, ",", 0);
    }
    tsb_addc(r, b, v.tuple ? ")" : "]", 0);
}

static void repr_dict(trender *r, tsb *b, tval v, const repr_path *here)
{
    if (v.kind == TV_NS) tsb_addc(r, b, "<Namespace ", 0);
    tsb_addc(r, b, "{", 0);
    if (repr_on_path(here->up, v.u.dict)) {
        tsb_addc(r, b, "...", 0);
    } else {
        for (size_t i = 0; i < v.u.dict->n; i++) {
            if (i) tsb_addc(r, b, ", ", 0);
            repr_at(r, b, v.u.dict->k[i], here);
            tsb_addc(r, b, ": ", 0);
            repr_at(r, b, v.u.dict->v[i], here);
        }
    }
    tsb_addc(r, b, "}", 0);
    if (v.kind == TV_NS) tsb_addc(r, b, ">", 0);
}

void tv_repr(trender *r, tsb *b, tval v) { repr_at(r, b, v, NULL); }

static void repr_at(trender *r, tsb *b, tval v, const repr_path *up)
{
    repr_path here = {NULL, up, up ? up->depth + 1 : 1};
    if (here.depth > TMPL_MAX_VALUE_DEPTH)
        tr_fail(r, STRATA_ERANGE, "str()/repr(): value nested deeper than %d", TMPL_MAX_VALUE_DEPTH);
    switch (v.kind) {
    case TV_STR: repr_str(r, b, v.u.s.p, v.u.s.len); return;
    case TV_UNDEF: tsb_addc(r, b, "Undefined", 0); return;
    case TV_LIST:
        here.obj = v.u.list;
        repr_list(r, b, v, &here);
        return;
    case TV_NS:
    case TV_DICT:
        here.obj = v.u.dict;
        repr_dict(r, b, v, &here);
        return;
    case TV_LOOP: tsb_addc(r, b, "<LoopContext>", 0); return;
    case TV_MACRO: tsb_addc(r, b, "<Macro>", 0); return;
    case TV_FUNC: case TV_METHOD: tsb_addc(r, b, "<built-in function>", 0); return;
    default: scalar_text(r, b, v); return;
    }
}

tval tv_to_str(trender *r, tval v)
{
    if (v.kind == TV_STR) return v;
    if (v.kind == TV_UNDEF) return tv_str("", 0, 0);
    tsb b = {0};
    tv_repr(r, &b, v);
    tval s = tsb_val(&b);
    s.lit = 0;
    return s;
}

/* ---- json.dumps ---- */

static void json_str(trender *r, tsb *b, const char *p, size_t n, int ascii)
{
    tsb_addc(r, b, "\"", 0);
    size_t i = 0, start = 0;
    while (i < n) {
        unsigned char c = (unsigned char)p[i];
        const char *esc = NULL;
        char e[16];
        size_t nx = i + 1;
        if (c == '"') esc = "\\\"";
        else if (c == '\\') esc = "\\\\";
        else if (c == '\n') esc = "\\n";
        else if (c == '\r') esc = "\\r";
        else if (c == '\t') esc = "\\t";
        else if (c == '\b') esc = "\\b";
        else if (c == '\f') esc = "\\f";
        else if (c < 0x20 || (ascii && c == 0x7F)) {
            snprintf(e, sizeof e, "\\u%04x", c);
            esc = e;
        } else if (ascii && c >= 0x80) {
            uint32_t cp;
            nx = tu_next(p, n, i, &cp);
            if (cp >= 0x10000) {
                cp -= 0x10000;
                snprintf(e, sizeof e, "\\u%04x\\u%04x", 0xD800 + (cp >> 10),
                         0xDC00 + (cp & 0x3FF));
            } else {
                snprintf(e, sizeof e, "\\u%04x", cp);
            }
            esc = e;
        }
        if (esc) {
            tsb_add(r, b, p + start, i - start, 0);
            tsb_addc(r, b, esc, 0);
            start = nx;
        }
        i = nx;
    }
    tsb_add(r, b, p + start, n - start, 0);
    tsb_addc(r, b, "\"", 0);
}

typedef struct jopts {
    int ascii, sort;
    const char *indent, *item_sep, *key_sep;
} jopts;

static void json_newline(trender *r, tsb *b, const jopts *o, int level)
{
    tsb_addc(r, b, "\n", 0);
    for (int i = 0; i < level; i++) tsb_addc(r, b, o->indent, 0);
}

static void json_float(trender *r, tsb *b, double f)
{
    char buf[48];
    if (isnan(f)) strcpy(buf, "NaN");
    else if (isinf(f)) strcpy(buf, f < 0 ? "-Infinity" : "Infinity");
    else tv_fmt_float(buf, f);
    tsb_addc(r, b, buf, 0);
}

/* A dict key as json.dumps writes it (str, or int/float/bool/None). */
static void json_key(trender *r, tsb *b, tval k, const jopts *o)
{
    char buf[48];
    switch (k.kind) {
    case TV_STR: json_str(r, b, k.u.s.p, k.u.s.len, o->ascii); return;
    case TV_BOOL: tsb_addc(r, b, k.u.i ? "\"true\"" : "\"false\"", 0); return;
    case TV_NONE: tsb_addc(r, b, "\"null\"", 0); return;
    case TV_INT: snprintf(buf, sizeof buf, "\"%lld\"", (long long)k.u.i); break;
    case TV_FLOAT: {
        char f[40];
        tv_fmt_float(f, k.u.f);
        snprintf(buf, sizeof buf, "\"%s\"", f);
        break;
    }
    default:
        tr_fail(r, STRATA_EINVAL, "keys must be str, int, float, bool or None, not %s",
                tv_type_name(k));
    }
    tsb_addc(r, b, buf, 0);
}

static void json_val(trender *r, tsb *b, tval v, const jopts *o, int level);

/* Key order for sort_keys=True: indices sorted by key bytes (insertion
 * sort: qsort would need the dict in a global to compare). */
static void sorted_order(const tdict *d, size_t *idx)
{
    for (size_t i = 0; i < d->n; i++) idx[i] = i;
    for (size_t i = 1; i < d->n; i++) {
        size_t x = idx[i], j = i;
        while (j > 0) {
            tval a = d->k[idx[j - 1]], k = d->k[x];
            size_t n = a.u.s.len < k.u.s.len ? a.u.s.len : k.u.s.len;
            int c = memcmp(a.u.s.p, k.u.s.p, n);
            if (c < 0 || (c == 0 && a.u.s.len <= k.u.s.len)) break;
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = x;
    }
}

static void json_dict(trender *r, tsb *b, const tdict *d, const jopts *o, int level)
{
    if (!d->n) {
        tsb_addc(r, b, "{}", 0);
        return;
    }
    size_t *idx = tr_alloc(r, d->n * sizeof *idx);
    for (size_t i = 0; i < d->n; i++) idx[i] = i;
    if (o->sort) {
        for (size_t i = 0; i < d->n; i++)
            if (d->k[i].kind != TV_STR)
                tr_fail(r, STRATA_EINVAL, "tojson sort_keys needs string keys");
        sorted_order(d, idx);
    }
    tsb_addc(r, b, "{", 0);
    for (size_t i = 0; i < d->n; i++) {
        if (i) tsb_addc(r, b, o->item_sep, 0);
        if (o->indent) json_newline(r, b, o, level + 1);
        json_key(r, b, d->k[idx[i]], o);
        tsb_addc(r, b, o->key_sep, 0);
        json_val(r, b, d->v[idx[i]], o, level + 1);
    }
    if (o->indent) json_newline(r, b, o, level);
    tsb_addc(r, b, "}", 0);
}

static void json_val(trender *r, tsb *b, tval v, const jopts *o, int level)
{
    char buf[32];
    /* Python's json.dumps stops near its recursion limit (1000). */
    if (level > TMPL_MAX_VALUE_DEPTH)
        tr_fail(r, STRATA_ERANGE, "tojson: nesting deeper than %d", TMPL_MAX_VALUE_DEPTH);
    switch (v.kind) {
    case TV_NONE: tsb_addc(r, b, "null", 0); return;
    case TV_BOOL: tsb_addc(r, b, v.u.i ? "true" : "false", 0); return;
    case TV_INT:
        snprintf(buf, sizeof buf, "%lld", (long long)v.u.i);
        tsb_addc(r, b, buf, 0);
        return;
    case TV_FLOAT: json_float(r, b, v.u.f); return;
    case TV_STR: json_str(r, b, v.u.s.p, v.u.s.len, o->ascii); return;
    case TV_DICT: json_dict(r, b, v.u.dict, o, level); return;
    case TV_LIST:
        if (!v.u.list->n) {
            tsb_addc(r, b, "[]", 0);
            return;
        }
        tsb_addc(r, b, "[", 0);
        for (size_t i = 0; i < v.u.list->n; i++) {
            if (i) tsb_addc(r, b, o->item_sep, 0);
            if (o->indent) json_newline(r, b, o, level + 1);
            json_val(r, b, v.u.list->v[i], o, level + 1);
        }
        if (o->indent) json_newline(r, b, o, level);
        tsb_addc(r, b, "]", 0);
        return;
    default:
        tr_fail(r, STRATA_EINVAL, "Object of type %s is not JSON serializable",
                tv_type_name(v));
    }
}

void tv_tojson(trender *r, tsb *b, tval v, int ensure_ascii, const char *indent,
               const char *item_sep, const char *key_sep, int sort_keys)
{
    jopts o = {ensure_ascii, sort_keys, indent, item_sep, key_sep};
    if (!o.item_sep) o.item_sep = indent ? "," : ", ";
    if (!o.key_sep) o.key_sep = ": ";
    json_val(r, b, v, &o, 0);
}

/* ---- JSON in ---- */

tval tv_from_json(trender *r, const json_t *j)
{
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        tval d = tv_dict(r, json_object_size(j));
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)j, k, x) {
            tval key = tv_str(k, strlen(k), 0);
            tdict *dd = d.u.dict;
            dd->k[dd->n] = key;
            dd->v[dd->n++] = tv_from_json(r, x);
        }
        return d;
    }
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        tval l = tv_list(r, n);
        for (size_t i = 0; i < n; i++) l.u.list->v[i] = tv_from_json(r, json_array_get(j, i));
        l.u.list->n = n;
        return l;
    }
    case JSON_STRING: return tv_str(json_string_value(j), json_string_length(j), 0);
    case JSON_INTEGER: return tv_int(json_integer_value(j));
    case JSON_REAL: return tv_float(json_real_value(j));
    case JSON_TRUE: return tv_bool(1);
    case JSON_FALSE: return tv_bool(0);
    default: return tv_none();
    }
}
