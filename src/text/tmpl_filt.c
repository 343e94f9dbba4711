/* tmpl_filt.c - jinja2's filters and tests, the ones chat templates use.
 *
 * Each filter takes the value and the call's arguments (positional and
 * keyword, named as in jinja2's signatures) and follows jinja2 3.1: filters
 * that stringify use Python's str() (undefined -> ""), list filters keep the
 * element values (and their provenance), and `tojson` is HF's override:
 * json.dumps(x, ensure_ascii=False, indent=None, separators=None,
 * sort_keys=False). Unknown names are rejected by the parser, so every id
 * reaching tf_filter/tf_test exists. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tmpl_int.h"

typedef tval (*filter_fn)(trender *r, tval v, targs *a);
typedef int (*test_fn)(trender *r, tval v, targs *a);

/* ---- helpers ---- */

static tval soft_str(trender *r, tval v) { return tv_to_str(r, v); }

static int is_word_ascii(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static int arg_bool(tval *v, int def) { return v ? tv_truthy(*v) : def; }

/* int(f) for a finite f: truncates; outside int64 (where a C cast is
 * undefined) it is an overflow error, as Python's int would be a big int. */
static int64_t float_to_int(trender *r, double f)
{
    if (!(f > -9223372036854775808.0 - 1024 && f < 9223372036854775808.0)) tr_int_overflow(r);
    return (int64_t)f;
}

static int64_t arg_int(trender *r, tval *v, int64_t def)
{
    if (!v || v->kind == TV_NONE) return def;
    if (v->kind == TV_INT || v->kind == TV_BOOL) return v->u.i;
    if (v->kind == TV_FLOAT) return float_to_int(r, v->u.f);
    tr_fail(r, STRATA_EINVAL, "expected an integer argument, got %s", tv_type_name(*v));
}

static tval list_of(trender *r, size_t cap) { return tv_list(r, cap); }

/* jinja2's attribute getter: "a.b.0" walks item lookups. */
static tval get_path(trender *r, tval item, tval path)
{
    if (path.kind != TV_STR) return tr_getitem(r, item, path);
    const char *p = path.u.s.p, *end = p + path.u.s.len;
    while (p <= end) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        if (!dot) dot = end;
        size_t n = (size_t)(dot - p);
        int digits = n > 0;
        for (size_t i = 0; i < n; i++) digits &= p[i] >= '0' && p[i] <= '9';
        tval key = digits ? tv_int(strtoll(p, NULL, 10)) : tv_str(p, n, 0);
        item = tr_getitem(r, item, key);
        p = dot + 1;
    }
    return item;
}

/* Sort key: attribute (if any), lowercased when case-insensitive. */
static tval sort_key(trender *r, tval v, tval *attr, int case_sensitive)
{
    if (attr && attr->kind != TV_NONE) v = get_path(r, v, *attr);
    if (!case_sensitive && v.kind == TV_STR) v = ts_case(r, v, 'L');
    return v;
}

/* Stable merge sort by precomputed keys (Python's sort is stable). */
static void msort(trender *r, tval *v, tval *k, size_t n, int rev, tval *tv, tval *tk)
{
    if (n < 2) return;
    size_t h = n / 2;
    msort(r, v, k, h, rev, tv, tk);
    msort(r, v + h, k + h, n - h, rev, tv, tk);
    size_t i = 0, j = h, o = 0;
    while (i < h && j < n) {
        int c = tv_compare(r, k[j], k[i]);
        /* take right only when strictly before left (keeps stability) */
        if (rev ? c > 0 : c < 0) { tv[o] = v[j]; tk[o++] = k[j++]; }
        else { tv[o] = v[i]; tk[o++] = k[i++]; }
    }
    while (i < h) { tv[o] = v[i]; tk[o++] = k[i++]; }
    while (j < n) { tv[o] = v[j]; tk[o++] = k[j++]; }
    memcpy(v, tv, n * sizeof *v);
    memcpy(k, tk, n * sizeof *k);
}

static tval sorted(trender *r, tlist *in, tval *attr, int cs, int rev)
{
    size_t n = in->n;
    tval out = list_of(r, n);
    tval *keys = tr_alloc(r, (n + 1) * sizeof *keys);
    tval *t1 = tr_alloc(r, (n + 1) * sizeof *t1), *t2 = tr_alloc(r, (n + 1) * sizeof *t2);
    for (size_t i = 0; i < n; i++) {
        out.u.list->v[i] = in->v[i];
        keys[i] = sort_key(r, in->v[i], attr, cs);
    }
    out.u.list->n = n;
    msort(r, out.u.list->v, keys, n, rev, t1, t2);
    return out;
}

static tval pair(trender *r, tval a, tval b)
{
    tval t = list_of(r, 2);
    t.tuple = 1;
    t.u.list->v[0] = a;
    t.u.list->v[1] = b;
    t.u.list->n = 2;
    return t;
}

/* ---- filters ---- */

static tval f_abs(trender *r, tval v, targs *a)
{
    (void)a;
    if (v.kind == TV_FLOAT) return tv_float(fabs(v.u.f));
    if (v.kind == TV_INT || v.kind == TV_BOOL) {
        if (v.u.i == INT64_MIN) tr_int_overflow(r);
        return tv_int(v.u.i < 0 ? -v.u.i : v.u.i);
    }
    tr_fail(r, STRATA_EINVAL, "bad operand type for abs(): '%s'", tv_type_name(v));
}

static tval f_attr(trender *r, tval v, targs *a)
{
    tval *n = ta_arg(a, 0, "name");
    if (!n || n->kind != TV_STR) tr_fail(r, STRATA_EINVAL, "attr needs a name");
    return tr_getattr(r, v, n->u.s.p, n->u.s.len);
}

static tval f_batch(trender *r, tval v, targs *a)
{
    int64_t n = arg_int(r, ta_arg(a, 0, "linecount"), 1);
    tval *fill = ta_arg(a, 1, "fill_with");
    if (n <= 0) tr_fail(r, STRATA_EINVAL, "batch size must be positive");
    tlist *in = tr_iter(r, v);
    tval out = list_of(r, 0), cur = list_of(r, 0);
    for (size_t i = 0; i < in->n; i++) {
        if ((int64_t)cur.u.list->n == n) {
            tl_push(r, out.u.list, cur);
            cur = list_of(r, 0);
        }
        tl_push(r, cur.u.list, in->v[i]);
    }
    if (cur.u.list->n) {
        if (fill && fill->kind != TV_NONE)
            while ((int64_t)cur.u.list->n < n) tl_push(r, cur.u.list, *fill);
        tl_push(r, out.u.list, cur);
    }
    return out;
}

static tval f_capitalize(trender *r, tval v, targs *a)
{
    (void)a;
    return ts_case(r, soft_str(r, v), 'C');
}

static tval f_default(trender *r, tval v, targs *a)
{
    tval *d = ta_arg(a, 0, "default_value");
    int boolean = arg_bool(ta_arg(a, 1, "boolean"), 0);
    if (v.kind == TV_UNDEF || (boolean && !tv_truthy(v)))
        return d ? *d : tv_str("", 0, 1);
    return v;
}

static tval f_dictsort(trender *r, tval v, targs *a)
{
    int cs = arg_bool(ta_arg(a, 0, "case_sensitive"), 0);
    tval *by = ta_arg(a, 1, "by");
    int rev = arg_bool(ta_arg(a, 2, "reverse"), 0);
    if (v.kind != TV_DICT) tr_fail(r, STRATA_EINVAL, "dictsort needs a dict");
    int byval = by && by->kind == TV_STR && by->u.s.len == 5 && !memcmp(by->u.s.p, "value", 5);
    tval items = list_of(r, v.u.dict->n);
    for (size_t i = 0; i < v.u.dict->n; i++)
        tl_push(r, items.u.list, pair(r, v.u.dict->k[i], v.u.dict->v[i]));
    tval idx = tv_int(byval ? 1 : 0);
    return sorted(r, items.u.list, &idx, cs, rev);
}

static tval f_escape(trender *r, tval v, targs *a)
{
    (void)a;
    tval s = soft_str(r, v);
    tsb b = {0};
    int lit = ts_all_lit(s);
    for (size_t i = 0; i < s.u.s.len; i++) {
        const char *e = NULL;
        switch (s.u.s.p[i]) {
        case '&': e = "&amp;"; break;
        case '<': e = "&lt;"; break;
        case '>': e = "&gt;"; break;
        case '"': e = "&#34;"; break;
        case '\'': e = "&#39;"; break;
        }
        if (e) tsb_addc(r, &b, e, lit);
        else tsb_add(r, &b, s.u.s.p + i, 1, lit);
    }
    tval out = tsb_val(&b);
    out.lit = (uint8_t)lit;
    return out;
}

static tval f_first(trender *r, tval v, targs *a)
{
    (void)a;
    tlist *l = tr_iter(r, v);
    return l->n ? l->v[0] : tv_undef("No first item, sequence was empty.");
}

static tval f_last(trender *r, tval v, targs *a)
{
    (void)a;
    tlist *l = tr_iter(r, v);
    return l->n ? l->v[l->n - 1] : tv_undef("No last item, sequence was empty.");
}

/* Python float(s) for a string; 0 when it does not parse. */
static int parse_float(tval s, double *out)
{
    char buf[128];
    size_t n = s.u.s.len < sizeof buf - 1 ? s.u.s.len : sizeof buf - 1;
    size_t o = 0;
    for (size_t i = 0; i < n; i++)
        if (s.u.s.p[i] != '_') buf[o++] = s.u.s.p[i];
    buf[o] = 0;
    char *end;
    *out = strtod(buf, &end);
    while (*end == ' ' || (*end >= 9 && *end <= 13)) end++;
    return end != buf && !*end;
}

static tval f_float(trender *r, tval v, targs *a)
{
    tval *d = ta_arg(a, 0, "default");
    double x;
    if (v.kind == TV_UNDEF) tr_fail(r, STRATA_EINVAL, "%s", v.u.undef ? v.u.undef : "undefined value");
    if (tv_is_num(v)) return tv_float(tv_num(v));
    if (v.kind == TV_STR && parse_float(v, &x)) return tv_float(x);
    (void)r;
    return d ? *d : tv_float(0.0);
}

static tval f_int(trender *r, tval v, targs *a)
{
    tval *d = ta_arg(a, 0, "default");
    int64_t base = arg_int(r, ta_arg(a, 1, "base"), 10);
    if (v.kind == TV_UNDEF) tr_fail(r, STRATA_EINVAL, "%s", v.u.undef ? v.u.undef : "undefined value");
    if (v.kind == TV_INT || v.kind == TV_BOOL) return tv_int(v.u.i);
    if (v.kind == TV_FLOAT && isfinite(v.u.f)) return tv_int(float_to_int(r, v.u.f));
    if (v.kind == TV_STR) {
        char buf[128], *end;
        size_t n = v.u.s.len < sizeof buf - 1 ? v.u.s.len : sizeof buf - 1, o = 0;
        for (size_t i = 0; i < n; i++)
            if (v.u.s.p[i] != '_') buf[o++] = v.u.s.p[i];
        buf[o] = 0;
        long long x = strtoll(buf, &end, (int)base);
        while (*end == ' ' || (*end >= 9 && *end <= 13)) end++;
        if (end != buf && !*end) return tv_int(x);
        double f;
        if (parse_float(v, &f) && isfinite(f)) return tv_int(float_to_int(r, f));
    }
    return d ? *d : tv_int(0);
}

/* Python str.splitlines() boundaries. */
static size_t line_break(const char *p, size_t n, size_t i, size_t *len)
{
    uint32_t cp;
    size_t nx = tu_next(p, n, i, &cp);
    if (cp == '\r' && nx < n && p[nx] == '\n') { *len = 2; return 1; }
    if (cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C ||
        cp == 0x1D || cp == 0x1E || cp == 0x85 || cp == 0x2028 || cp == 0x2029) {
        *len = nx - i;
        return 1;
    }
    *len = nx - i;
    return 0;
}

/* jinja2's indent: lines are s split at every line break (a trailing
 * break leaves an empty last line); all but the first get the indent,
 * blank ones only with blank=True. */
static tval f_indent(trender *r, tval v, targs *a)
{
    tval *w = ta_arg(a, 0, "width");
    int first = arg_bool(ta_arg(a, 1, "first"), 0);
    int blank = arg_bool(ta_arg(a, 2, "blank"), 0);
    tval ind;
    if (w && w->kind == TV_STR) ind = *w;
    else {
        int64_t n = arg_int(r, w, 4);
        size_t k = (size_t)(n > 0 ? n : 0);
        char *sp = tr_alloc(r, k + 1);
        memset(sp, ' ', k);
        ind = tv_str(sp, k, 1);
    }
    if (v.kind != TV_STR)
        tr_fail(r, STRATA_EINVAL, "indent: unsupported operand type(s) for +=: '%s' and 'str'",
                tv_type_name(v));
    tval s = v;
    tsb b = {0};
    size_t start = 0;
    if (first) tsb_addv(r, &b, ind);
    for (int line = 0;; line++) {
        size_t e = start, bl = 0;
        while (e < s.u.s.len) {
            size_t l;
            if (line_break(s.u.s.p, s.u.s.len, e, &l)) { bl = l; break; }
            e += l;
        }
        tval ln = ts_sub(r, s, start, e - start);
        if (line > 0) {
            tsb_add(r, &b, "\n", 1, ts_all_lit(s));
            if (blank || ln.u.s.len) tsb_addv(r, &b, ind);
        }
        tsb_addv(r, &b, ln);
        if (!bl) break;
        start = e + bl;
    }
    tval out = tsb_val(&b);
    if (!b.len) out.lit = ts_all_lit(s);
    return out;
}

static tval f_items(trender *r, tval v, targs *a)
{
    (void)a;
    if (v.kind == TV_UNDEF) return list_of(r, 0);
    if (v.kind != TV_DICT) tr_fail(r, STRATA_EINVAL, "Can only get item pairs from a mapping.");
    tval l = list_of(r, v.u.dict->n);
    for (size_t i = 0; i < v.u.dict->n; i++)
        tl_push(r, l.u.list, pair(r, v.u.dict->k[i], v.u.dict->v[i]));
    return l;
}

static tval f_join(trender *r, tval v, targs *a)
{
    tval *d = ta_arg(a, 0, "d"), *attr = ta_arg(a, 1, "attribute");
    tval sep = d ? soft_str(r, *d) : tv_str("", 0, 1);
    tlist *l = tr_iter(r, v);
    tsb b = {0};
    for (size_t i = 0; i < l->n; i++) {
        tval x = attr && attr->kind != TV_NONE ? get_path(r, l->v[i], *attr) : l->v[i];
        if (i) tsb_addv(r, &b, sep);
        tsb_addv(r, &b, soft_str(r, x));
    }
    tval out = tsb_val(&b);
    if (!b.len) out.lit = 1;
    return out;
}

static tval f_length(trender *r, tval v, targs *a)
{
    (void)a;
    switch (v.kind) {
    case TV_STR: return tv_int((int64_t)tu_len(v.u.s.p, v.u.s.len));
    case TV_LIST: return tv_int((int64_t)v.u.list->n);
    case TV_DICT: case TV_NS: return tv_int((int64_t)v.u.dict->n);
    case TV_UNDEF: return tv_int(0);
    default: tr_fail(r, STRATA_EINVAL, "object of type '%s' has no len()", tv_type_name(v));
    }
}

static tval f_list(trender *r, tval v, targs *a)
{
    (void)a;
    tlist *l = tr_iter(r, v);
    tval out = list_of(r, l->n);
    for (size_t i = 0; i < l->n; i++) out.u.list->v[i] = l->v[i];
    out.u.list->n = l->n;
    return out;
}

static tval f_lower(trender *r, tval v, targs *a) { (void)a; return ts_case(r, soft_str(r, v), 'L'); }
static tval f_upper(trender *r, tval v, targs *a) { (void)a; return ts_case(r, soft_str(r, v), 'U'); }

/* Positional args after the first `skip`, keywords unchanged. */
static targs shift_args(targs *a, size_t skip)
{
    targs s = *a;
    s.npos = a->npos > skip ? a->npos - skip : 0;
    s.pos = a->pos + (a->npos > skip ? skip : a->npos);
    return s;
}

static tval f_map(trender *r, tval v, targs *a)
{
    tlist *l = tv_truthy(v) ? tr_iter(r, v) : tv_list(r, 0).u.list;
    tval out = list_of(r, l->n);
    tval *attr = NULL, *def = NULL;
    for (size_t k = 0; k < a->nkw; k++) {
        if (a->kwl[k] == 9 && !memcmp(a->kwn[k], "attribute", 9)) attr = &a->kwv[k];
        if (a->kwl[k] == 7 && !memcmp(a->kwn[k], "default", 7)) def = &a->kwv[k];
    }
    int fid = -1;
    targs sub = shift_args(a, 1);
    if (!attr) {
        if (!a->npos || a->pos[0].kind != TV_STR) tr_fail(r, STRATA_EINVAL, "map needs a filter name or attribute=");
        fid = tf_filter_id(a->pos[0].u.s.p, a->pos[0].u.s.len);
        if (fid < 0)
            tr_fail(r, STRATA_EUNSUPPORTED, "No filter named '%.*s'.", (int)a->pos[0].u.s.len, a->pos[0].u.s.p);
    }
    for (size_t i = 0; i < l->n; i++) {
        tval x;
        if (attr) {
            x = get_path(r, l->v[i], *attr);
            if (x.kind == TV_UNDEF && def) x = *def;
        } else {
            x = tf_filter(r, fid, l->v[i], &sub, NULL);
        }
        out.u.list->v[out.u.list->n++] = x;
    }
    return out;
}

static tval minmax(trender *r, tval v, targs *a, int want_max)
{
    int cs = arg_bool(ta_arg(a, 0, "case_sensitive"), 0);
    tval *attr = ta_arg(a, 1, "attribute");
    tlist *l = tr_iter(r, v);
    if (!l->n) return tv_undef(want_max ? "No aggregated item, sequence was empty." : "No aggregated item, sequence was empty.");
    size_t best = 0;
    tval bk = sort_key(r, l->v[0], attr, cs);
    for (size_t i = 1; i < l->n; i++) {
        tval k = sort_key(r, l->v[i], attr, cs);
        int c = tv_compare(r, k, bk);
        if (want_max ? c > 0 : c < 0) { best = i; bk = k; }
    }
    return l->v[best];
}

static tval f_max(trender *r, tval v, targs *a) { return minmax(r, v, a, 1); }
static tval f_min(trender *r, tval v, targs *a) { return minmax(r, v, a, 0); }

static tval f_replace(trender *r, tval v, targs *a)
{
    tval s = soft_str(r, v);
    tval *o = ta_arg(a, 0, "old"), *n = ta_arg(a, 1, "new");
    if (!o || !n) tr_fail(r, STRATA_EINVAL, "replace needs old and new");
    return ts_replace(r, s, soft_str(r, *o), soft_str(r, *n), arg_int(r, ta_arg(a, 2, "count"), -1));
}

static tval f_reverse(trender *r, tval v, targs *a)
{
    (void)a;
    tlist *l = tr_iter(r, v);
    if (v.kind == TV_STR) {
        tsb b = {0};
        for (size_t i = l->n; i-- > 0;) tsb_addv(r, &b, l->v[i]);
        tval s = tsb_val(&b);
        if (!b.len) s.lit = ts_all_lit(v);
        return s;
    }
    tval out = list_of(r, l->n);
    for (size_t i = 0; i < l->n; i++) out.u.list->v[i] = l->v[l->n - 1 - i];
    out.u.list->n = l->n;
    return out;
}

/* Python round(x, n): glibc's printf rounds the exact binary value half to
 * even, as Python's correctly rounded algorithm does. */
static tval f_round(trender *r, tval v, targs *a)
{
    int64_t prec = arg_int(r, ta_arg(a, 0, "precision"), 0);
    tval *m = ta_arg(a, 1, "method");
    if (!tv_is_num(v)) tr_fail(r, STRATA_EINVAL, "round needs a number");
    int common = !m || (m->kind == TV_STR && m->u.s.len == 6 && !memcmp(m->u.s.p, "common", 6));
    if (common) {
        if (v.kind != TV_FLOAT) return tv_int(v.u.i);
        char buf[400];
        if (prec < 0 || prec > 300) return tv_float(v.u.f);
        snprintf(buf, sizeof buf, "%.*f", (int)prec, v.u.f);
        return tv_float(strtod(buf, NULL));
    }
    double p10 = pow(10.0, (double)prec), x = tv_num(v) * p10;
    int ceil_m = m->kind == TV_STR && m->u.s.len == 4 && !memcmp(m->u.s.p, "ceil", 4);
    return tv_float((ceil_m ? ceil(x) : floor(x)) / p10);
}

/* Markup(str(x)); Markup's auto-escaping of later operands is not modeled. */
static tval f_safe(trender *r, tval v, targs *a) { (void)a; return soft_str(r, v); }

/* select/reject/selectattr/rejectattr: attr_mode takes an attribute first. */
static tval select_items(trender *r, tval v, targs *a, int attr_mode, int keep)
{
    /* jinja2 iterates only a truthy sequence: none|select is []. */
    tlist *l = tv_truthy(v) ? tr_iter(r, v) : tv_list(r, 0).u.list;
    size_t skip = attr_mode ? 1 : 0;
    tval *attr = attr_mode ? ta_arg(a, 0, "attribute") : NULL;
    if (attr_mode && !attr) tr_fail(r, STRATA_EINVAL, "selectattr needs an attribute");
    int tid = -1;
    if (a->npos > skip) {
        tval tn = a->pos[skip];
        if (tn.kind != TV_STR) tr_fail(r, STRATA_EINVAL, "test name must be a string");
        tid = tf_test_id(tn.u.s.p, tn.u.s.len);
        if (tid < 0) tr_fail(r, STRATA_EUNSUPPORTED, "No test named '%.*s'.", (int)tn.u.s.len, tn.u.s.p);
    }
    targs sub = shift_args(a, skip + 1);
    tval out = list_of(r, 0);
    for (size_t i = 0; i < l->n; i++) {
        tr_step(r);
        tval x = attr ? get_path(r, l->v[i], *attr) : l->v[i];
        int ok = tid >= 0 ? tf_test(r, tid, x, &sub) : tv_truthy(x);
        if (ok == keep) tl_push(r, out.u.list, l->v[i]);
    }
    return out;
}

static tval f_select(trender *r, tval v, targs *a) { return select_items(r, v, a, 0, 1); }
static tval f_reject(trender *r, tval v, targs *a) { return select_items(r, v, a, 0, 0); }
static tval f_selectattr(trender *r, tval v, targs *a) { return select_items(r, v, a, 1, 1); }
static tval f_rejectattr(trender *r, tval v, targs *a) { return select_items(r, v, a, 1, 0); }

static tval f_sort(trender *r, tval v, targs *a)
{
    int rev = arg_bool(ta_arg(a, 0, "reverse"), 0);
    int cs = arg_bool(ta_arg(a, 1, "case_sensitive"), 0);
    return sorted(r, tr_iter(r, v), ta_arg(a, 2, "attribute"), cs, rev);
}

static tval f_string(trender *r, tval v, targs *a) { (void)a; return soft_str(r, v); }

static tval f_striptags(trender *r, tval v, targs *a)
{
    (void)a;
    tval s = soft_str(r, v);
    tsb b = {0};
    int in_tag = 0;
    for (size_t i = 0; i < s.u.s.len; i++) {
        char c = s.u.s.p[i];
        if (c == '<') in_tag = 1;
        else if (c == '>' && in_tag) in_tag = 0;
        else if (!in_tag) tsb_add(r, &b, &c, 1, 0);
    }
    tval stripped = tsb_val(&b);
    tlist *words = ts_split(r, stripped, NULL, -1);
    tval sp = tv_str(" ", 1, 0);
    tval wl = {.kind = TV_LIST};
    wl.u.list = words;
    targs ja = {.pos = &sp, .npos = 1};
    tval out = f_join(r, wl, &ja);
    return ts_derived(r, out.u.s.p, out.u.s.len, s);
}

static tval f_sum(trender *r, tval v, targs *a)
{
    tval *attr = ta_arg(a, 0, "attribute"), *start = ta_arg(a, 1, "start");
    tval acc = start ? *start : tv_int(0);
    tlist *l = tr_iter(r, v);
    for (size_t i = 0; i < l->n; i++) {
        tval x = attr && attr->kind != TV_NONE ? get_path(r, l->v[i], *attr) : l->v[i];
        if (!tv_is_num(x) || !tv_is_num(acc)) tr_fail(r, STRATA_EINVAL, "sum needs numbers");
        int64_t z;
        if (acc.kind == TV_FLOAT || x.kind == TV_FLOAT) acc = tv_float(tv_num(acc) + tv_num(x));
        else if (__builtin_add_overflow(acc.u.i, x.u.i, &z)) tr_int_overflow(r);
        else acc = tv_int(z);
    }
    return acc;
}

/* jinja2's title filter: split at runs of -, whitespace, ( { [ <; each
 * piece gets its first character upper-cased and the rest lower-cased. */
static tval f_title(trender *r, tval v, targs *a)
{
    (void)a;
    tval s = soft_str(r, v);
    tsb b = {0};
    int lit = ts_all_lit(s), start = 1;
    for (size_t i = 0; i < s.u.s.len;) {
        uint32_t cp;
        size_t nx = tu_next(s.u.s.p, s.u.s.len, i, &cp);
        int sep = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || tu_isspace(cp);
        tval ch = ts_sub(r, s, i, nx - i);
        if (!sep) ch = ts_case(r, ch, start ? 'U' : 'L');
        start = sep;
        tsb_add(r, &b, ch.u.s.p, ch.u.s.len, lit);
        i = nx;
    }
    tval out = tsb_val(&b);
    out.lit = (uint8_t)lit;
    return out;
}

static tval f_tojson(trender *r, tval v, targs *a)
{
    int ascii = arg_bool(ta_arg(a, 0, "ensure_ascii"), 0);
    tval *ind = ta_arg(a, 1, "indent"), *seps = ta_arg(a, 2, "separators");
    int sort = arg_bool(ta_arg(a, 3, "sort_keys"), 0);
    char *indent = NULL;
    if (ind && ind->kind == TV_STR) {
        indent = tr_alloc(r, ind->u.s.len + 1);
        memcpy(indent, ind->u.s.p, ind->u.s.len);
    } else if (ind && ind->kind != TV_NONE) {
        int64_t n = arg_int(r, ind, 0);
        if (n < 0) n = 0;
        if (n > 64) tr_fail(r, STRATA_EINVAL, "tojson indent too large");
        indent = tr_alloc(r, (size_t)n + 1);
        memset(indent, ' ', (size_t)n);
    }
    const char *isep = NULL, *ksep = NULL;
    if (seps && seps->kind == TV_LIST && seps->u.list->n == 2) {
        tval s0 = seps->u.list->v[0], s1 = seps->u.list->v[1];
        if (s0.kind != TV_STR || s1.kind != TV_STR) tr_fail(r, STRATA_EINVAL, "bad separators");
        char *x = tr_alloc(r, s0.u.s.len + 1), *y = tr_alloc(r, s1.u.s.len + 1);
        memcpy(x, s0.u.s.p, s0.u.s.len);
        memcpy(y, s1.u.s.p, s1.u.s.len);
        isep = x;
        ksep = y;
    }
    tsb b = {0};
    tv_tojson(r, &b, v, ascii, indent, isep, ksep, sort);
    tval out = tsb_val(&b);
    out.lit = 0;
    out.nruns = 0;
    return out;
}

static tval f_trim(trender *r, tval v, targs *a)
{
    return ts_strip(r, soft_str(r, v), ta_arg(a, 0, "chars"), 1, 1);
}

static tval f_unique(trender *r, tval v, targs *a)
{
    int cs = arg_bool(ta_arg(a, 0, "case_sensitive"), 0);
    tval *attr = ta_arg(a, 1, "attribute");
    tlist *l = tr_iter(r, v);
    tval out = list_of(r, 0), seen = list_of(r, 0);
    for (size_t i = 0; i < l->n; i++) {
        tval k = sort_key(r, l->v[i], attr, cs);
        if (!tv_hashable(r, k)) tr_fail(r, STRATA_EINVAL, "unhashable type: '%s'", tv_type_name(k));
        int dup = 0;
        for (size_t j = 0; j < seen.u.list->n && !dup; j++) dup = tv_equal(r, seen.u.list->v[j], k);
        if (dup) continue;
        tl_push(r, seen.u.list, k);
        tl_push(r, out.u.list, l->v[i]);
    }
    return out;
}

static tval f_wordcount(trender *r, tval v, targs *a)
{
    (void)a;
    tval s = soft_str(r, v);
    int64_t n = 0;
    int in = 0;
    for (size_t i = 0; i < s.u.s.len; i++) {
        unsigned char c = (unsigned char)s.u.s.p[i];
        uint32_t cp = c;
        size_t nx = i + 1;
        if (c >= 0x80) nx = tu_next(s.u.s.p, s.u.s.len, i, &cp);
        /* \w: letters, digits, _; non-ASCII counts unless it is a space
         * or general/CJK punctuation. */
        int w = (c >= '0' && c <= '9') || is_word_ascii(c) ||
                (cp >= 0x80 && !tu_isspace(cp) && !(cp >= 0x2000 && cp <= 0x206F) &&
                 !(cp >= 0x3000 && cp <= 0x303F) && !(cp >= 0xA0 && cp <= 0xBF));
        if (w && !in) n++;
        in = w;
        i = nx - 1;
    }
    return tv_int(n);
}

/* A number of a %-spec (width or precision) starting at *i. Capped, so
 * '%.1000000000f' is an error, not seconds of work and a gigabyte. */
static int spec_num(trender *r, const char *p, size_t n, size_t *i)
{
    int v = 0;
    for (; *i < n && p[*i] >= '0' && p[*i] <= '9'; (*i)++) {
        v = v * 10 + (p[*i] - '0');
        if (v > TMPL_MAX_FORMAT_WIDTH)
            tr_fail(r, STRATA_ERANGE, "format: width or precision over the limit (%d)",
                    TMPL_MAX_FORMAT_WIDTH);
    }
    return v;
}

/* Parses the flags, width and precision after a '%' at s[i] into spec (a
 * C printf spec without the conversion: each flag once, so it stays
 * short). Returns the index of the conversion character. */
static size_t parse_spec(trender *r, tval s, size_t i, char spec[32])
{
    const char *p = s.u.s.p;
    size_t n = s.u.s.len, k = 0;
    spec[k++] = '%';
    for (i++; i < n && p[i] && strchr("-+ #0", p[i]); i++)
        if (!memchr(spec, p[i], k)) spec[k++] = p[i];
    int width = spec_num(r, p, n, &i), prec = -1;
    if (i < n && p[i] == '.') {
        i++;
        prec = spec_num(r, p, n, &i);
    }
    if (i >= n) tr_fail(r, STRATA_EINVAL, "incomplete format");
    if (width) k += (size_t)snprintf(spec + k, 24 - k, "%d", width);
    if (prec >= 0) k += (size_t)snprintf(spec + k, 24 - k, ".%d", prec);
    spec[k] = 0;
    return i;
}

/* Python "fmt % args" for %s %d %i %r %f %x %e %g %% (with flags, width
 * and precision up to TMPL_MAX_FORMAT_WIDTH). Returns the formatted
 * string; *used = args consumed. */
static tval printf_py(trender *r, tval s, const tval *args, size_t nargs, size_t *used)
{
    tsb b = {0};
    size_t ai = 0;
    for (size_t i = 0; i < s.u.s.len; i++) {
        if (s.u.s.p[i] != '%') {
            tsb_add(r, &b, s.u.s.p + i, 1, 0);
            continue;
        }
        char spec[32];
        i = parse_spec(r, s, i, spec);
        char conv = s.u.s.p[i];
        if (conv == '%') { tsb_add(r, &b, "%", 1, 0); continue; }
        if (ai >= nargs) tr_fail(r, STRATA_EINVAL, "not enough arguments for format string");
        tval x = args[ai++];
        /* %f of 1e308 has 309 digits before the point */
        char out[TMPL_MAX_FORMAT_WIDTH + 400];
        size_t sl = strlen(spec);
        if (conv == 's' || conv == 'r') {
            tval t;
            if (conv == 'r') { tsb rb = {0}; tv_repr(r, &rb, x); t = tsb_val(&rb); }
            else t = soft_str(r, x);
            tsb_addv(r, &b, t);
        } else if (strchr("dixXfFeEgG", conv)) {
            if (!tv_is_num(x)) tr_fail(r, STRATA_EINVAL, "%%%c format: a real number is required, not %s", conv, tv_type_name(x));
            if (strchr("dixX", conv)) {
                memcpy(spec + sl, "ll", 2);
                spec[sl + 2] = conv == 'i' ? 'd' : conv;
                spec[sl + 3] = 0;
                snprintf(out, sizeof out, spec, (long long)(x.kind == TV_FLOAT ? float_to_int(r, x.u.f) : x.u.i));
            } else {
                spec[sl] = conv;
                spec[sl + 1] = 0;
                snprintf(out, sizeof out, spec, tv_num(x));
            }
            tsb_addc(r, &b, out, 0);
        } else {
            tr_fail(r, STRATA_EUNSUPPORTED, "format conversion '%%%c' is not supported", conv);
        }
    }
    *used = ai;
    tval out = tsb_val(&b);
    return ts_derived(r, out.u.s.p, out.u.s.len, s);
}

static tval f_format(trender *r, tval v, targs *a)
{
    size_t used;
    return printf_py(r, soft_str(r, v), a->pos, a->npos, &used);
}

tval tf_str_mod(trender *r, tval fmt, tval args)
{
    int tuple = args.kind == TV_LIST && args.tuple;
    size_t used;
    tval out = printf_py(r, fmt, tuple ? args.u.list->v : &args,
                         tuple ? args.u.list->n : 1, &used);
    /* Python tolerates an unused non-tuple argument only if it is a mapping
     * or sequence other than str. */
    size_t n = tuple ? args.u.list->n : 1;
    if (used < n && (tuple || !(args.kind == TV_LIST || args.kind == TV_DICT)))
        tr_fail(r, STRATA_EINVAL, "not all arguments converted during string formatting");
    return out;
}

static const struct {
    const char *name;
    filter_fn fn;
} FILTERS[] = {
    {"abs", f_abs}, {"attr", f_attr}, {"batch", f_batch},
    {"capitalize", f_capitalize}, {"count", f_length}, {"d", f_default},
    {"default", f_default}, {"dictsort", f_dictsort}, {"e", f_escape},
    {"escape", f_escape}, {"first", f_first}, {"float", f_float},
    {"format", f_format}, {"indent", f_indent}, {"int", f_int},
    {"items", f_items}, {"join", f_join}, {"last", f_last},
    {"length", f_length}, {"list", f_list}, {"lower", f_lower},
    {"map", f_map}, {"max", f_max}, {"min", f_min}, {"reject", f_reject},
    {"rejectattr", f_rejectattr}, {"replace", f_replace},
    {"reverse", f_reverse}, {"round", f_round}, {"safe", f_safe},
    {"select", f_select}, {"selectattr", f_selectattr}, {"sort", f_sort},
    {"string", f_string}, {"striptags", f_striptags}, {"sum", f_sum},
    {"title", f_title}, {"tojson", f_tojson}, {"trim", f_trim},
    {"unique", f_unique}, {"upper", f_upper}, {"wordcount", f_wordcount},
};

int tf_filter_id(const char *name, size_t len)
{
    for (size_t i = 0; i < sizeof FILTERS / sizeof *FILTERS; i++)
        if (strlen(FILTERS[i].name) == len && memcmp(FILTERS[i].name, name, len) == 0)
            return (int)i;
    return -1;
}

tval tf_filter(trender *r, int fid, tval v, targs *a, const tnode *at)
{
    (void)at;
    tr_step(r);
    return FILTERS[fid].fn(r, v, a);
}

/* ---- tests ---- */

static tval *need_arg(trender *r, targs *a, const char *test)
{
    tval *x = ta_arg(a, 0, "other");
    if (!x) tr_fail(r, STRATA_EINVAL, "test '%s' needs an argument", test);
    return x;
}

static int t_defined(trender *r, tval v, targs *a) { (void)r; (void)a; return v.kind != TV_UNDEF; }
static int t_undefined(trender *r, tval v, targs *a) { (void)r; (void)a; return v.kind == TV_UNDEF; }
static int t_none(trender *r, tval v, targs *a) { (void)r; (void)a; return v.kind == TV_NONE; }
static int t_boolean(trender *r, tval v, targs *a) { (void)r; (void)a; return v.kind == TV_BOOL; }
static int t_true(trender *r, tval v, targs *a) { (void)r; (void)a; return v.kind == TV_BOOL && v.u.i; }
static int t_false(trender *r, tval v, targs *a) { (void)r; (void)a; return v.kind == TV_BOOL && !v.u.i; }
static int t_integer(trender *r, tval v, targs *a) { (void)r; (void)a; return v.kind == TV_INT; }
static int t_float(trender *r, tval v, targs *a) { (void)r; (void)a; return v.kind == TV_FLOAT; }
static int t_number(trender *r, tval v, targs *a) { (void)r; (void)a; return tv_is_num(v); }
static int t_string(trender *r, tval v, targs *a) { (void)r; (void)a; return v.kind == TV_STR; }
static int t_mapping(trender *r, tval v, targs *a) { (void)r; (void)a; return v.kind == TV_DICT; }

static int t_iterable(trender *r, tval v, targs *a)
{
    (void)r;
    (void)a;
    /* jinja2's Undefined can be iterated (it yields nothing). */
    return v.kind == TV_STR || v.kind == TV_LIST || v.kind == TV_DICT || v.kind == TV_UNDEF;
}

static int t_sequence(trender *r, tval v, targs *a)
{
    (void)r;
    (void)a;
    /* Undefined has __len__ and __getitem__, so jinja2 calls it a sequence */
    return v.kind == TV_STR || v.kind == TV_LIST || v.kind == TV_DICT || v.kind == TV_UNDEF;
}

static int t_callable(trender *r, tval v, targs *a)
{
    (void)r;
    (void)a;
    /* Undefined has __call__ (it fails when called) */
    return v.kind == TV_MACRO || v.kind == TV_FUNC || v.kind == TV_METHOD || v.kind == TV_UNDEF;
}

static int cmp_test(trender *r, tval v, targs *a, int op)
{
    tval o = *need_arg(r, a, "comparison");
    if (op == 0) return tv_equal(r, v, o);
    if (op == 1) return !tv_equal(r, v, o);
    int c = tv_compare(r, v, o);
    return op == 2 ? c < 0 : op == 3 ? c <= 0 : op == 4 ? c > 0 : c >= 0;
}

static int t_eq(trender *r, tval v, targs *a) { return cmp_test(r, v, a, 0); }
static int t_ne(trender *r, tval v, targs *a) { return cmp_test(r, v, a, 1); }
static int t_lt(trender *r, tval v, targs *a) { return cmp_test(r, v, a, 2); }
static int t_le(trender *r, tval v, targs *a) { return cmp_test(r, v, a, 3); }
static int t_gt(trender *r, tval v, targs *a) { return cmp_test(r, v, a, 4); }
static int t_ge(trender *r, tval v, targs *a) { return cmp_test(r, v, a, 5); }

static int t_in(trender *r, tval v, targs *a)
{
    tval seq = *need_arg(r, a, "in");
    if (seq.kind == TV_STR) {
        if (v.kind != TV_STR) tr_fail(r, STRATA_EINVAL, "'in <string>' requires string as left operand");
        return !v.u.s.len || memmem(seq.u.s.p, seq.u.s.len, v.u.s.p, v.u.s.len) != NULL;
    }
    tlist *l = tr_iter(r, seq);
    if (seq.kind == TV_DICT) return td_getv(r, seq.u.dict, v) != NULL;
    for (size_t i = 0; i < l->n; i++)
        if (tv_equal(r, l->v[i], v)) return 1;
    return 0;
}

/* value % m as Python computes it (floats too); undefined is an error. */
static double py_mod(trender *r, tval v, tval m)
{
    if (v.kind == TV_UNDEF) tr_fail(r, STRATA_EINVAL, "%s", v.u.undef ? v.u.undef : "undefined value");
    if (!tv_is_num(v) || !tv_is_num(m))
        tr_fail(r, STRATA_EINVAL, "unsupported operand type(s) for %%: '%s' and '%s'",
                tv_type_name(v), tv_type_name(m));
    double x = tv_num(v), y = tv_num(m);
    if (y == 0) tr_fail(r, STRATA_EINVAL, "integer division or modulo by zero");
    double q = fmod(x, y);
    if (q != 0 && ((q < 0) != (y < 0))) q += y;
    return q;
}

static int t_odd(trender *r, tval v, targs *a) { (void)a; return py_mod(r, v, tv_int(2)) == 1; }
static int t_even(trender *r, tval v, targs *a) { (void)a; return py_mod(r, v, tv_int(2)) == 0; }

static int t_divisibleby(trender *r, tval v, targs *a)
{
    return py_mod(r, v, *need_arg(r, a, "divisibleby")) == 0;
}

static int t_sameas(trender *r, tval v, targs *a)
{
    tval o = *need_arg(r, a, "sameas");
    if (v.kind != o.kind) return 0;
    if (v.kind == TV_NONE || v.kind == TV_BOOL) return tv_equal(r, v, o);
    return tv_equal(r, v, o) && (v.kind != TV_LIST || v.u.list == o.u.list) &&
           (v.kind != TV_DICT || v.u.dict == o.u.dict);
}

static int t_lower(trender *r, tval v, targs *a)
{
    (void)a;
    tval s = soft_str(r, v);
    tval l = ts_case(r, s, 'L');
    return memcmp(l.u.s.p, s.u.s.p, s.u.s.len) == 0 && memcmp(ts_case(r, s, 'U').u.s.p, s.u.s.p, s.u.s.len) != 0;
}

static int t_upper(trender *r, tval v, targs *a)
{
    (void)a;
    tval s = soft_str(r, v);
    tval u = ts_case(r, s, 'U');
    return memcmp(u.u.s.p, s.u.s.p, s.u.s.len) == 0 && memcmp(ts_case(r, s, 'L').u.s.p, s.u.s.p, s.u.s.len) != 0;
}

static int t_escaped(trender *r, tval v, targs *a) { (void)r; (void)v; (void)a; return 0; }

static int t_filter(trender *r, tval v, targs *a)
{
    (void)r;
    (void)a;
    return v.kind == TV_STR && tf_filter_id(v.u.s.p, v.u.s.len) >= 0;
}

static int t_test(trender *r, tval v, targs *a)
{
    (void)r;
    (void)a;
    return v.kind == TV_STR && tf_test_id(v.u.s.p, v.u.s.len) >= 0;
}

static const struct {
    const char *name;
    test_fn fn;
} TESTS[] = {
    {"defined", t_defined}, {"undefined", t_undefined}, {"none", t_none},
    {"boolean", t_boolean}, {"true", t_true}, {"false", t_false},
    {"integer", t_integer}, {"float", t_float}, {"number", t_number},
    {"string", t_string}, {"mapping", t_mapping}, {"iterable", t_iterable},
    {"sequence", t_sequence}, {"callable", t_callable},
    {"equalto", t_eq}, {"eq", t_eq}, {"==", t_eq}, {"ne", t_ne}, {"!=", t_ne},
    {"lt", t_lt}, {"lessthan", t_lt}, {"<", t_lt}, {"le", t_le}, {"<=", t_le},
    {"gt", t_gt}, {"greaterthan", t_gt}, {">", t_gt}, {"ge", t_ge},
    {">=", t_ge}, {"in", t_in}, {"odd", t_odd}, {"even", t_even},
    {"divisibleby", t_divisibleby}, {"sameas", t_sameas},
    {"lower", t_lower}, {"upper", t_upper}, {"escaped", t_escaped},
    {"filter", t_filter}, {"test", t_test},
};

int tf_test_id(const char *name, size_t len)
{
    for (size_t i = 0; i < sizeof TESTS / sizeof *TESTS; i++)
        if (strlen(TESTS[i].name) == len && memcmp(TESTS[i].name, name, len) == 0)
            return (int)i;
    return -1;
}

int tf_test(trender *r, int tid, tval v, targs *a)
{
    return TESTS[tid].fn(r, v, a);
}
