/* tmpl_meth.c - methods of values (str, dict, list, loop) and the global
 * functions (range, namespace, dict, raise_exception, strftime_now).
 *
 * Methods follow Python's str/dict/list as the templates call them
 * (message.content.split('</think>'), tool.items(), s.startswith(...)).
 * Indices are code points, as in Python. Case mapping is ASCII only: other
 * letters keep their case (Python would map e.g. 'é'.upper()).
 * The sandbox forbids methods that mutate lists and dicts (append, update,
 * pop...): calling one is an error, as under HF's ImmutableSandboxedEnvironment. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "text/tmpl_int.h"

#define STREQ(p, l, s) ((l) == sizeof(s) - 1 && memcmp((p), (s), (l)) == 0)

/* ---- string helpers shared with the filters ---- */

static int cp_in(uint32_t cp, tval chars)
{
    for (size_t i = 0; i < chars.u.s.len;) {
        uint32_t c;
        i = tu_next(chars.u.s.p, chars.u.s.len, i, &c);
        if (c == cp) return 1;
    }
    return 0;
}

/* Python str.strip/lstrip/rstrip; chars NULL or none = whitespace. */
tval ts_strip(trender *r, tval s, const tval *chars, int left, int right)
{
    int ws = !chars || chars->kind == TV_NONE || chars->kind == TV_UNDEF;
    size_t a = 0, b = s.u.s.len;
    uint32_t cp;
    while (left && a < b) {
        size_t nx = tu_next(s.u.s.p, b, a, &cp);
        if (ws ? !tu_isspace(cp) : !cp_in(cp, *chars)) break;
        a = nx;
    }
    while (right && b > a) {
        size_t st = b - 1;
        while (st > a && ((unsigned char)s.u.s.p[st] & 0xC0) == 0x80) st--;
        tu_next(s.u.s.p, b, st, &cp);
        if (ws ? !tu_isspace(cp) : !cp_in(cp, *chars)) break;
        b = st;
    }
    return ts_sub(r, s, a, b - a);
}

static int is_lower(char c) { return c >= 'a' && c <= 'z'; }
static int is_upper(char c) { return c >= 'A' && c <= 'Z'; }
static int is_alpha(char c) { return is_lower(c) || is_upper(c); }

/* Simple (one-to-one) case mapping for the scripts chat text mostly uses:
 * ASCII, Latin-1, Latin Extended-A, Greek, Cyrillic, Armenian, fullwidth
 * Latin. Python's full mapping (ß -> SS, final sigma) is not reproduced. */
static uint32_t cp_lower(uint32_t c)
{
    if ((c >= 'A' && c <= 'Z') || (c >= 0xC0 && c <= 0xDE && c != 0xD7) ||
        (c >= 0x391 && c <= 0x3AB && c != 0x3A2) || (c >= 0x410 && c <= 0x42F) ||
        (c >= 0xFF21 && c <= 0xFF3A))
        return c >= 0x410 && c <= 0x42F ? c + 32 : c >= 0xFF21 ? c + 32 : c + 32;
    if (c >= 0x400 && c <= 0x40F) return c + 80;
    if (c >= 0x531 && c <= 0x556) return c + 48;
    if (c == 0x386) return 0x3AC;
    if (c >= 0x388 && c <= 0x38A) return c + 37;
    if (c == 0x38C) return 0x3CC;
    if (c == 0x38E || c == 0x38F) return c + 63;
    if (c == 0x178) return 0xFF;
    if ((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177) ||
        (c >= 0x460 && c <= 0x481) || (c >= 0x48A && c <= 0x4BF))
        return c % 2 == 0 ? c + 1 : c;
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E))
        return c % 2 == 1 ? c + 1 : c;
    return c;
}

static uint32_t cp_upper(uint32_t c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 0xE0 && c <= 0xFE && c != 0xF7) ||
        (c >= 0x3B1 && c <= 0x3CB && c != 0x3C2) || (c >= 0x430 && c <= 0x44F) ||
        (c >= 0xFF41 && c <= 0xFF5A))
        return c - 32;
    if (c == 0x3C2) return 0x3A3;
    if (c >= 0x450 && c <= 0x45F) return c - 80;
    if (c >= 0x561 && c <= 0x586) return c - 48;
    if (c == 0x3AC) return 0x386;
    if (c >= 0x3AD && c <= 0x3AF) return c - 37;
    if (c == 0x3CC) return 0x38C;
    if (c == 0x3CD || c == 0x3CE) return c - 63;
    if (c == 0xFF) return 0x178;
    if (c == 0x131) return 'I';
    if (c == 0x17F) return 'S';
    if ((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177) ||
        (c >= 0x460 && c <= 0x481) || (c >= 0x48A && c <= 0x4BF))
        return c % 2 == 1 ? c - 1 : c;
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E))
        return c % 2 == 0 ? c - 1 : c;
    return c;
}

/* Has case (Python's "cased"): title() starts a word after a non-cased. */
static int cp_cased(uint32_t c)
{
    return cp_upper(c) != c || cp_lower(c) != c || c == 0xDF || c == 0x138 || c == 0x149;
}

/* mode: 'U' upper, 'L' lower, 'C' capitalize, 'T' str.title(). */
tval ts_case(trender *r, tval s, int mode)
{
    /* Mapped code points can change UTF-8 length (ÿ <-> Ÿ): 4 bytes each
     * is always enough. */
    char *o = tr_alloc(r, s.u.s.len * 2 + 4);
    size_t ol = 0;
    int prev_cased = 0, first = 1;
    for (size_t i = 0; i < s.u.s.len;) {
        uint32_t cp;
        size_t nx = tu_next(s.u.s.p, s.u.s.len, i, &cp);
        int up;
        switch (mode) {
        case 'U': up = 1; break;
        case 'L': up = 0; break;
        case 'C': up = first; break;
        default: up = !prev_cased; break;
        }
        uint32_t m = up ? cp_upper(cp) : cp_lower(cp);
        if (m == cp) {
            memcpy(o + ol, s.u.s.p + i, nx - i);
            ol += nx - i;
        } else {
            ol += tu_put(o + ol, m);
        }
        prev_cased = cp_cased(cp);
        first = 0;
        i = nx;
    }
    return ts_derived(r, o, ol, s);
}

tval ts_replace(trender *r, tval s, tval old, tval nw, int64_t count)
{
    tsb b = {0};
    size_t i = 0, done = 0;
    int lit = ts_all_lit(s) && ts_all_lit(old) && ts_all_lit(nw);
    if (!old.u.s.len) {
        /* Python inserts `new` before every code point and at the end. */
        while (i <= s.u.s.len) {
            if (count >= 0 && (int64_t)done >= count) break;
            tsb_add(r, &b, nw.u.s.p, nw.u.s.len, lit);
            done++;
            if (i == s.u.s.len) { i++; break; }
            uint32_t cp;
            size_t nx = tu_next(s.u.s.p, s.u.s.len, i, &cp);
            tsb_add(r, &b, s.u.s.p + i, nx - i, lit);
            i = nx;
        }
        if (i < s.u.s.len) tsb_add(r, &b, s.u.s.p + i, s.u.s.len - i, lit);
        tval v = tsb_val(&b);
        v.lit = (uint8_t)lit;
        return v;
    }
    while (i < s.u.s.len && (count < 0 || (int64_t)done < count)) {
        const char *hit = memmem(s.u.s.p + i, s.u.s.len - i, old.u.s.p, old.u.s.len);
        if (!hit) break;
        size_t at = (size_t)(hit - s.u.s.p);
        tsb_add(r, &b, s.u.s.p + i, at - i, lit);
        tsb_add(r, &b, nw.u.s.p, nw.u.s.len, lit);
        i = at + old.u.s.len;
        done++;
    }
    tsb_add(r, &b, s.u.s.p + i, s.u.s.len - i, lit);
    tval v = tsb_val(&b);
    v.lit = (uint8_t)lit;
    return v;
}

/* Python str.split(sep=None, maxsplit=-1). */
tlist *ts_split(trender *r, tval s, const tval *sep, int64_t maxsplit)
{
    tlist *l = tv_list(r, 0).u.list;
    const char *p = s.u.s.p;
    size_t n = s.u.s.len, i = 0;
    if (!sep || sep->kind == TV_NONE) {
        uint32_t cp;
        for (;;) {
            while (i < n) {
                size_t nx = tu_next(p, n, i, &cp);
                if (!tu_isspace(cp)) break;
                i = nx;
            }
            if (i >= n) break;
            if (maxsplit >= 0 && (int64_t)l->n >= maxsplit) {
                /* the rest keeps its trailing whitespace, as in Python */
                tl_push(r, l, ts_sub(r, s, i, n - i));
                break;
            }
            size_t st = i;
            while (i < n) {
                size_t nx = tu_next(p, n, i, &cp);
                if (tu_isspace(cp)) break;
                i = nx;
            }
            tl_push(r, l, ts_sub(r, s, st, i - st));
        }
        return l;
    }
    if (sep->kind != TV_STR) tr_fail(r, STRATA_EINVAL, "split: separator must be a string");
    if (!sep->u.s.len) tr_fail(r, STRATA_EINVAL, "empty separator");
    for (;;) {
        const char *hit = NULL;
        if (maxsplit < 0 || (int64_t)l->n < maxsplit)
            hit = memmem(p + i, n - i, sep->u.s.p, sep->u.s.len);
        if (!hit) break;
        size_t at = (size_t)(hit - p);
        tl_push(r, l, ts_sub(r, s, i, at - i));
        i = at + sep->u.s.len;
    }
    tl_push(r, l, ts_sub(r, s, i, n - i));
    return l;
}

/* ---- method tables ---- */

static const char *const STR_METHODS[] = {"strip", "lstrip", "rstrip", "split",
    "startswith", "endswith", "replace", "upper", "lower", "title",
    "capitalize", "find", "rfind", "index", "count", "join", "format",
    "isdigit", "isalpha", "isalnum", "isspace", "islower", "isupper",
    "splitlines", "rsplit", NULL};
static const char *const DICT_METHODS[] = {"items", "keys", "values", "get",
    "pop", "popitem", "setdefault", "update", "clear", "copy", NULL};
static const char *const LIST_METHODS[] = {"index", "count", "append", "extend",
    "insert", "pop", "remove", "reverse", "sort", "clear", "copy", NULL};
static const char *const UNSAFE[] = {"pop", "popitem", "setdefault", "update",
    "clear", "append", "extend", "insert", "remove", "reverse", "sort", NULL};

static int in_table(const char *const *t, const char *name, size_t len)
{
    for (int i = 0; t[i]; i++)
        if (strlen(t[i]) == len && memcmp(t[i], name, len) == 0) return 1;
    return 0;
}

int tf_has_method(tval v, const char *name, size_t len)
{
    switch (v.kind) {
    case TV_STR: return in_table(STR_METHODS, name, len);
    case TV_DICT: return in_table(DICT_METHODS, name, len);
    case TV_LIST: return in_table(LIST_METHODS, name, len);
    default: return 0;
    }
}

static tval need_str(trender *r, tval *v, const char *what)
{
    if (!v || v->kind != TV_STR)
        tr_fail(r, STRATA_EINVAL, "%s: expected a string argument", what);
    return *v;
}

static int64_t int_arg(trender *r, tval *v, int64_t def)
{
    if (!v || v->kind == TV_NONE) return def;
    if (v->kind != TV_INT && v->kind != TV_BOOL)
        tr_fail(r, STRATA_EINVAL, "expected an integer argument");
    return v->u.i;
}

/* startswith/endswith with a string or a tuple of strings. */
static int affix(trender *r, tval s, tval *arg, int end)
{
    if (arg && arg->kind == TV_LIST) {
        for (size_t i = 0; i < arg->u.list->n; i++)
            if (affix(r, s, &arg->u.list->v[i], end)) return 1;
        return 0;
    }
    tval a = need_str(r, arg, end ? "endswith" : "startswith");
    if (a.u.s.len > s.u.s.len) return 0;
    const char *p = end ? s.u.s.p + s.u.s.len - a.u.s.len : s.u.s.p;
    return memcmp(p, a.u.s.p, a.u.s.len) == 0;
}

static tval str_find(trender *r, tval s, tval *arg, int rev, int must)
{
    tval sub = need_str(r, arg, "find");
    const char *hit = NULL;
    if (!rev) {
        hit = sub.u.s.len ? memmem(s.u.s.p, s.u.s.len, sub.u.s.p, sub.u.s.len) : s.u.s.p;
    } else {
        for (size_t i = s.u.s.len + 1; i-- > 0;)
            if (i + sub.u.s.len <= s.u.s.len && memcmp(s.u.s.p + i, sub.u.s.p, sub.u.s.len) == 0) {
                hit = s.u.s.p + i;
                break;
            }
    }
    if (!hit) {
        if (must) tr_fail(r, STRATA_EINVAL, "substring not found");
        return tv_int(-1);
    }
    return tv_int((int64_t)tu_len(s.u.s.p, (size_t)(hit - s.u.s.p)));
}

static int64_t str_count(tval s, tval sub)
{
    if (!sub.u.s.len) return (int64_t)tu_len(s.u.s.p, s.u.s.len) + 1;
    int64_t c = 0;
    size_t i = 0;
    const char *hit;
    while ((hit = memmem(s.u.s.p + i, s.u.s.len - i, sub.u.s.p, sub.u.s.len)) != NULL) {
        c++;
        i = (size_t)(hit - s.u.s.p) + sub.u.s.len;
    }
    return c;
}

static tval str_join(trender *r, tval sep, tval *arg)
{
    if (!arg) tr_fail(r, STRATA_EINVAL, "join() takes exactly one argument");
    tlist *l = tr_iter(r, *arg);
    tsb b = {0};
    for (size_t i = 0; i < l->n; i++) {
        if (l->v[i].kind != TV_STR)
            tr_fail(r, STRATA_EINVAL, "sequence item %zu: expected str instance, %s found",
                    i, tv_type_name(l->v[i]));
        if (i) tsb_addv(r, &b, sep);
        tsb_addv(r, &b, l->v[i]);
    }
    tval v = tsb_val(&b);
    if (!b.len) v.lit = ts_all_lit(sep);
    return v;
}

/* str.format with {} / {0} / {name} fields (no format specs). */
static tval str_format(trender *r, tval s, targs *a)
{
    tsb b = {0};
    const char *p = s.u.s.p;
    size_t n = s.u.s.len, auto_i = 0, i = 0;
    int lit = ts_all_lit(s);
    while (i < n) {
        if ((p[i] == '{' || p[i] == '}') && i + 1 < n && p[i + 1] == p[i]) {
            tsb_add(r, &b, p + i, 1, lit);
            i += 2;
            continue;
        }
        if (p[i] != '{') {
            tsb_add(r, &b, p + i, 1, lit);
            i++;
            continue;
        }
        const char *close = memchr(p + i, '}', n - i);
        if (!close) tr_fail(r, STRATA_EINVAL, "format: single '{' encountered");
        size_t fl = (size_t)(close - (p + i + 1));
        const char *field = p + i + 1;
        tval *v = NULL;
        if (!fl) v = auto_i < a->npos ? &a->pos[auto_i++] : NULL;
        else if (field[0] >= '0' && field[0] <= '9') {
            size_t k = (size_t)atoi(field);
            v = k < a->npos ? &a->pos[k] : NULL;
        } else {
            for (size_t k = 0; k < a->nkw; k++)
                if (a->kwl[k] == fl && memcmp(a->kwn[k], field, fl) == 0) v = &a->kwv[k];
        }
        if (!v) tr_fail(r, STRATA_EINVAL, "format: missing argument for {%.*s}", (int)fl, field);
        tsb_addv(r, &b, tv_to_str(r, *v));
        i = (size_t)(close - p) + 1;
    }
    return tsb_val(&b);
}

static int str_class(tval s, int kind)
{
    if (!s.u.s.len) return 0;
    int any_cased = 0;
    for (size_t i = 0; i < s.u.s.len; i++) {
        unsigned char c = (unsigned char)s.u.s.p[i];
        switch (kind) {
        case 'd': if (c < '0' || c > '9') return 0; break;
        case 'a': if (!is_alpha((char)c) && c < 0x80) return 0; break;
        case 'n': if (!is_alpha((char)c) && !(c >= '0' && c <= '9') && c < 0x80) return 0; break;
        case 's': if (!(c == ' ' || (c >= 9 && c <= 13))) return 0; break;
        case 'l': if (is_upper((char)c)) return 0; any_cased |= is_lower((char)c); break;
        case 'u': if (is_lower((char)c)) return 0; any_cased |= is_upper((char)c); break;
        }
    }
    return kind == 'l' || kind == 'u' ? any_cased : 1;
}

static tval str_method(trender *r, tval s, const char *m, size_t ml, targs *a)
{
    tval *a0 = ta_arg(a, 0, ""), *a1 = ta_arg(a, 1, "");
    if (STREQ(m, ml, "strip")) return ts_strip(r, s, a0, 1, 1);
    if (STREQ(m, ml, "lstrip")) return ts_strip(r, s, a0, 1, 0);
    if (STREQ(m, ml, "rstrip")) return ts_strip(r, s, a0, 0, 1);
    if (STREQ(m, ml, "split") || STREQ(m, ml, "rsplit")) {
        tval *sep = ta_arg(a, 0, "sep"), *mx = ta_arg(a, 1, "maxsplit");
        if (STREQ(m, ml, "rsplit") && mx && int_arg(r, mx, -1) >= 0)
            tr_fail(r, STRATA_EUNSUPPORTED, "rsplit with maxsplit is not supported");
        tval l = {.kind = TV_LIST};
        l.u.list = ts_split(r, s, sep, int_arg(r, mx, -1));
        return l;
    }
    if (STREQ(m, ml, "splitlines")) {
        tval nl = tv_str("\n", 1, 1);
        tlist *parts = ts_split(r, s, &nl, -1);
        if (parts->n && parts->v[parts->n - 1].u.s.len == 0) parts->n--;
        tval l = {.kind = TV_LIST};
        l.u.list = parts;
        return l;
    }
    if (STREQ(m, ml, "startswith")) return tv_bool(affix(r, s, a0, 0));
    if (STREQ(m, ml, "endswith")) return tv_bool(affix(r, s, a0, 1));
    if (STREQ(m, ml, "replace"))
        return ts_replace(r, s, need_str(r, a0, "replace"), need_str(r, a1, "replace"),
                          int_arg(r, ta_arg(a, 2, "count"), -1));
    if (STREQ(m, ml, "upper")) return ts_case(r, s, 'U');
    if (STREQ(m, ml, "lower")) return ts_case(r, s, 'L');
    if (STREQ(m, ml, "title")) return ts_case(r, s, 'T');
    if (STREQ(m, ml, "capitalize")) return ts_case(r, s, 'C');
    if (STREQ(m, ml, "find")) return str_find(r, s, a0, 0, 0);
    if (STREQ(m, ml, "rfind")) return str_find(r, s, a0, 1, 0);
    if (STREQ(m, ml, "index")) return str_find(r, s, a0, 0, 1);
    if (STREQ(m, ml, "count")) return tv_int(str_count(s, need_str(r, a0, "count")));
    if (STREQ(m, ml, "join")) return str_join(r, s, a0);
    if (STREQ(m, ml, "format")) return str_format(r, s, a);
    if (STREQ(m, ml, "isdigit")) return tv_bool(str_class(s, 'd'));
    if (STREQ(m, ml, "isalpha")) return tv_bool(str_class(s, 'a'));
    if (STREQ(m, ml, "isalnum")) return tv_bool(str_class(s, 'n'));
    if (STREQ(m, ml, "isspace")) return tv_bool(str_class(s, 's'));
    if (STREQ(m, ml, "islower")) return tv_bool(str_class(s, 'l'));
    if (STREQ(m, ml, "isupper")) return tv_bool(str_class(s, 'u'));
    tr_fail(r, STRATA_EUNSUPPORTED, "str.%.*s() is not supported", (int)ml, m);
}

static tval dict_method(trender *r, tval d, const char *m, size_t ml, targs *a)
{
    tdict *dd = d.u.dict;
    if (STREQ(m, ml, "items") || STREQ(m, ml, "keys") || STREQ(m, ml, "values")) {
        tval l = tv_list(r, dd->n);
        for (size_t i = 0; i < dd->n; i++) {
            if (m[0] == 'k') l.u.list->v[i] = dd->k[i];
            else if (m[0] == 'v') l.u.list->v[i] = dd->v[i];
            else {
                tval t = tv_list(r, 2);
                t.tuple = 1;
                t.u.list->v[0] = dd->k[i];
                t.u.list->v[1] = dd->v[i];
                t.u.list->n = 2;
                l.u.list->v[i] = t;
            }
        }
        l.u.list->n = dd->n;
        return l;
    }
    if (STREQ(m, ml, "get")) {
        tval *k = ta_arg(a, 0, "key"), *def = ta_arg(a, 1, "default");
        if (!k) tr_fail(r, STRATA_EINVAL, "get expected at least 1 argument");
        tval *v = td_getv(r, dd, *k);
        return v ? *v : def ? *def : tv_none();
    }
    if (STREQ(m, ml, "copy")) {
        tval c = tv_dict(r, dd->n);
        for (size_t i = 0; i < dd->n; i++) td_set(r, c.u.dict, dd->k[i], dd->v[i]);
        return c;
    }
    tr_fail(r, STRATA_EUNSUPPORTED, "dict.%.*s() is not supported", (int)ml, m);
}

static tval list_method(trender *r, tval l, const char *m, size_t ml, targs *a)
{
    tval *x = ta_arg(a, 0, "");
    if (STREQ(m, ml, "index") || STREQ(m, ml, "count")) {
        if (!x) tr_fail(r, STRATA_EINVAL, "%.*s() takes an argument", (int)ml, m);
        int64_t c = 0;
        for (size_t i = 0; i < l.u.list->n; i++) {
            if (!tv_equal(r, l.u.list->v[i], *x)) continue;
            if (m[0] == 'i') return tv_int((int64_t)i);
            c++;
        }
        if (m[0] == 'i') tr_fail(r, STRATA_EINVAL, "x not in list");
        return tv_int(c);
    }
    if (STREQ(m, ml, "copy")) {
        tval c = tv_list(r, l.u.list->n);
        for (size_t i = 0; i < l.u.list->n; i++) c.u.list->v[i] = l.u.list->v[i];
        c.u.list->n = l.u.list->n;
        return c;
    }
    tr_fail(r, STRATA_EUNSUPPORTED, "list.%.*s() is not supported", (int)ml, m);
}

static tval loop_method(trender *r, tval lv, const char *m, targs *a)
{
    tval idx = tr_getattr(r, lv, "index0", 6);
    if (m[0] == 'c' && m[1] == 'y') {
        if (!a->npos) tr_fail(r, STRATA_EINVAL, "no items for cycling given");
        return a->pos[(size_t)idx.u.i % a->npos];
    }
    /* changed(*values): true when the values differ from the last call. */
    tval cur = tv_list(r, a->npos);
    for (size_t i = 0; i < a->npos; i++) cur.u.list->v[i] = a->pos[i];
    cur.u.list->n = a->npos;
    tloop *lp = lv.u.loop;
    int changed = !lp->has_changed || !tv_equal(r, lp->changed_last, cur);
    lp->has_changed = 1;
    lp->changed_last = cur;
    return tv_bool(changed);
}

tval tf_method(trender *r, tval self, const char *name, targs *a)
{
    size_t nl = strlen(name);
    if (in_table(UNSAFE, name, nl) && (self.kind == TV_LIST || self.kind == TV_DICT))
        tr_fail(r, STRATA_EINVAL, "access to attribute '%s' of '%s' object is unsafe.",
                name, tv_type_name(self));
    switch (self.kind) {
    case TV_STR: return str_method(r, self, name, nl, a);
    case TV_DICT: return dict_method(r, self, name, nl, a);
    case TV_LIST: return list_method(r, self, name, nl, a);
    case TV_LOOP: return loop_method(r, self, name, a);
    default: tr_fail(r, STRATA_EINVAL, "'%s' object has no method '%s'", tv_type_name(self), name);
    }
}

/* ---- globals ---- */

enum { G_RANGE, G_NAMESPACE, G_DICT, G_RAISE, G_STRFTIME };
static const char *const GLOBALS[] = {"range", "namespace", "dict",
    "raise_exception", "strftime_now", NULL};

int tf_global_id(const char *name, size_t len)
{
    for (int i = 0; GLOBALS[i]; i++)
        if (strlen(GLOBALS[i]) == len && memcmp(GLOBALS[i], name, len) == 0) return i;
    return -1;
}

#define MAX_RANGE 100000 /* jinja2's sandbox limit */

static tval g_range(trender *r, targs *a)
{
    int64_t start = 0, stop, step = 1;
    if (a->npos == 1) stop = int_arg(r, &a->pos[0], 0);
    else if (a->npos >= 2) {
        start = int_arg(r, &a->pos[0], 0);
        stop = int_arg(r, &a->pos[1], 0);
        if (a->npos >= 3) step = int_arg(r, &a->pos[2], 1);
    } else tr_fail(r, STRATA_EINVAL, "range expected at least 1 argument");
    if (!step) tr_fail(r, STRATA_EINVAL, "range() arg 3 must not be zero");
    uint64_t n = tv_range_len(start, stop, step);
    if (n > MAX_RANGE)
        tr_fail(r, STRATA_ERANGE, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).",
                MAX_RANGE);
    tval l = tv_list(r, (size_t)n);
    /* start + i * step fits (it is before stop) but i * step alone may
     * not: compute in uint64, where wrapping is defined. */
    for (uint64_t i = 0; i < n; i++)
        l.u.list->v[i] = tv_int((int64_t)((uint64_t)start + i * (uint64_t)step));
    l.u.list->n = (size_t)n;
    return l;
}

static tval g_dictlike(trender *r, targs *a, int ns)
{
    tval d = tv_dict(r, 0);
    if (a->npos) {
        if (a->pos[0].kind != TV_DICT)
            tr_fail(r, STRATA_EINVAL, "%s() positional argument must be a dict",
                    ns ? "namespace" : "dict");
        for (size_t i = 0; i < a->pos[0].u.dict->n; i++)
            td_set(r, d.u.dict, a->pos[0].u.dict->k[i], a->pos[0].u.dict->v[i]);
    }
    for (size_t i = 0; i < a->nkw; i++)
        td_set(r, d.u.dict, tv_str(a->kwn[i], a->kwl[i], 1), a->kwv[i]);
    if (ns) d.kind = TV_NS;
    return d;
}

static tval g_strftime(trender *r, targs *a)
{
    tval f = need_str(r, ta_arg(a, 0, "format"), "strftime_now");
    char fmt[256], out[512];
    size_t n = f.u.s.len < sizeof fmt - 1 ? f.u.s.len : sizeof fmt - 1;
    memcpy(fmt, f.u.s.p, n);
    fmt[n] = 0;
    time_t now = (time_t)tr_now(r);
    struct tm tm;
    localtime_r(&now, &tm);
    size_t len = strftime(out, sizeof out, fmt, &tm);
    char *p = tr_alloc(r, len + 1);
    memcpy(p, out, len);
    return tv_str(p, len, TL_NOW);
}

tval tf_call_global(trender *r, int id, targs *a)
{
    switch (id) {
    case G_RANGE: return g_range(r, a);
    case G_NAMESPACE: return g_dictlike(r, a, 1);
    case G_DICT: return g_dictlike(r, a, 0);
    case G_RAISE: {
        tval *m = ta_arg(a, 0, "message");
        tval s = m ? tv_to_str(r, *m) : tv_str("", 0, 0);
        tr_fail(r, STRATA_EINVAL, "raise_exception: %.*s", (int)s.u.s.len, s.u.s.p);
    }
    case G_STRFTIME: return g_strftime(r, a);
    }
    tr_fail(r, STRATA_EINVAL, "unknown global function");
}
