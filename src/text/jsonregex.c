/* jsonregex.c - ECMA-262 regular expressions to byte DFAs (see
 * jsonregex.h for the dialect).
 *
 * Three steps:
 *   1. parse the pattern into a small tree (character sets as code point
 *      ranges, concatenation, alternation, repetition, ^ and $);
 *   2. build a Thompson NFA over bytes: each set becomes the UTF-8 byte
 *      sequences of its ranges; an any-character loop before the regex
 *      and after its end gives the search semantics;
 *   3. subset construction over byte classes, then cut the states that
 *      cannot reach a match and compute, per state, which completion
 *      lengths exist (jre_viable).
 * Does not: capture, or match anything but whole strings. */
#include "text/jsonregex.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "base/utf8.h"

#define MAX_NFA 60000 /* NFA states */
#define MAX_PATTERN 4096 /* bytes: the parser and builder recurse on its structure */
#define MAX_GROUPS 64  /* nested parentheses */
#define MAX_REP 1000  /* {n,m} bounds */
#define MAX_CP 0x10FFFF

/* ---- step 1: the tree ---------------------------------------------------- */

enum { RN_SET, RN_CAT, RN_ALT, RN_REP, RN_EMPTY, RN_BOL, RN_EOL };

typedef struct rrange {
    uint32_t lo, hi;
} rrange;

typedef struct rnode {
    int kind, a, b;   /* children (CAT, ALT: a b; REP: a) */
    int min, max;     /* REP; max -1: unbounded */
    int first, count; /* SET: ranges[first .. first+count) */
} rnode;

typedef struct rparse {
    const char *p;
    rnode *node;
    int n_node, cap_node;
    rrange *range;
    int n_range, cap_range;
    char *why;
    size_t cap;
    int err;
    int nest; /* open parentheses */
} rparse;

static int perr(rparse *r, int code, const char *fmt, ...) {
    if (r->err) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->why, r->cap, fmt, ap);
    va_end(ap);
    r->err = code;
    return -1;
}

static int rnode_new(rparse *r, int kind, int a, int b) {
    XGROW(r->node, r->cap_node, r->n_node + 1, 64);
    r->node[r->n_node] = (rnode){.kind = kind, .a = a, .b = b, .first = r->n_range};
    return r->n_node++;
}

static void range_add(rparse *r, uint32_t lo, uint32_t hi) {
    XGROW(r->range, r->cap_range, r->n_range + 1, 64);
    r->range[r->n_range++] = (rrange){lo, hi};
}

/* Decodes one UTF-8 character at *p (the pattern is a JSON string, so
 * valid UTF-8). */
static uint32_t utf8_next(const char **p) {
    const unsigned char *s = (const unsigned char *)*p;
    uint32_t c = s[0];
    int n = c < 0x80 ? 0 : c < 0xE0 ? 1 : c < 0xF0 ? 2 : 3;
    if (n) c &= 0x3F >> n;
    for (int i = 1; i <= n && s[i]; i++) c = c << 6 | (s[i] & 0x3F);
    *p += 1 + n;
    return c;
}

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    c |= 0x20;
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* n hex digits at r->p, or -1. */
static long hex_digits(rparse *r, int n) {
    long v = 0;
    for (int i = 0; i < n; i++) {
        int h = hexval((unsigned char)r->p[i]);
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    r->p += n;
    return v;
}

/* The class escapes \d \w \s and their negations, as ranges: ASCII
 * only, a subset of what ECMA-262 and Python's `re` (the validator the
 * tests use) match, so every output matches in both. Inside a negated
 * class (wide) they take every non-ASCII character too, so that the
 * complement is the subset: [^\s@] writes no U+00A0, which Python's \s
 * matches. */
static int class_escape(rparse *r, int c, int wide) {
    static const uint32_t D[] = {'0', '9'}, W[] = {'0', '9', 'A', 'Z', '_', '_', 'a', 'z'}, S[] = {'\t', '\r', ' ', ' '};
    const uint32_t *t;
    int n;
    switch (c | 0x20) {
    case 'd': t = D, n = 1; break;
    case 'w': t = W, n = 4; break;
    case 's': t = S, n = 2; break;
    default: return 0;
    }
    if (wide) range_add(r, 0x80, MAX_CP);
    if (c >= 'a') {
        for (int i = 0; i < n; i++) range_add(r, t[2 * i], t[2 * i + 1]);
        return 1;
    }
    uint32_t from = 0; /* the ASCII complement of the sorted ranges */
    for (int i = 0; i < n; i++) {
        if (t[2 * i] > from) range_add(r, from, t[2 * i] - 1);
        from = t[2 * i + 1] + 1;
    }
    range_add(r, from, 0x7F);
    return 1;
}

/* One escaped character after '\' (not a class escape): its code point,
 * or -1 with the error set. */
static long char_escape(rparse *r) {
    uint32_t c = utf8_next(&r->p);
    switch (c) {
    case 't': return '\t';
    case 'n': return '\n';
    case 'r': return '\r';
    case 'f': return '\f';
    case 'v': return '\v';
    case '0': return r->p[0] >= '0' && r->p[0] <= '9' ? perr(r, JRE_UNSUPPORTED, "octal escape") : 0;
    case 'x': {
        long v = hex_digits(r, 2);
        return v >= 0 ? v : perr(r, JRE_UNSUPPORTED, "bad \\x escape");
    }
    case 'u': {
        if (*r->p == '{') {
            char *end;
            long v = strtol(r->p + 1, &end, 16);
            if (*end != '}' || end == r->p + 1 || v > MAX_CP) return perr(r, JRE_UNSUPPORTED, "bad \\u{} escape");
            r->p = end + 1;
            return v;
        }
        long v = hex_digits(r, 4);
        if (v < 0) return perr(r, JRE_UNSUPPORTED, "bad \\u escape");
        if (v >= 0xD800 && v < 0xDC00 && r->p[0] == '\\' && r->p[1] == 'u') { /* a surrogate pair */
            const char *save = r->p;
            r->p += 2;
            long lo = hex_digits(r, 4);
            if (lo >= 0xDC00 && lo < 0xE000) return 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
            r->p = save;
        }
        return v;
    }
    }
    if (c == 'b' || c == 'B') return perr(r, JRE_UNSUPPORTED, "word boundary \\%c", (int)c);
    if (c >= '1' && c <= '9') return perr(r, JRE_UNSUPPORTED, "backreference");
    if (c == 'p' || c == 'P' || c == 'c' || c == 'k') return perr(r, JRE_UNSUPPORTED, "escape \\%c", (int)c);
    if (c < 0x80 && ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')) return perr(r, JRE_UNSUPPORTED, "escape \\%c", (int)c);
    if (!c) return perr(r, JRE_UNSUPPORTED, "pattern ends with '\\'");
    return c; /* escaped punctuation */
}

/* A class [..] after '['. */
static int parse_class(rparse *r) {
    int neg = *r->p == '^';
    if (neg) r->p++;
    int id = rnode_new(r, RN_SET, -1, -1), first = r->n_range;
    while (*r->p != ']') {
        if (!*r->p) return perr(r, JRE_UNSUPPORTED, "unterminated class");
        long lo;
        if (*r->p == '\\') {
            r->p++;
            if (class_escape(r, (unsigned char)*r->p, neg)) {
                r->p++;
                continue;
            }
            lo = *r->p == 'b' ? (r->p++, 8) : char_escape(r);
        } else {
            lo = utf8_next(&r->p);
        }
        if (lo < 0) return -1;
        long hi = lo;
        if (r->p[0] == '-' && r->p[1] != ']' && r->p[1]) {
            r->p++;
            if (*r->p == '\\') {
                r->p++;
                if (strchr("dDwWsS", *r->p)) return perr(r, JRE_UNSUPPORTED, "class escape as a range end");
                hi = *r->p == 'b' ? (r->p++, 8) : char_escape(r);
            } else {
                hi = utf8_next(&r->p);
            }
            if (hi < 0) return -1;
            if (hi < lo) return perr(r, JRE_UNSUPPORTED, "range out of order in class");
        }
        range_add(r, (uint32_t)lo, (uint32_t)hi);
    }
    r->p++;
    r->node[id].first = first;
    r->node[id].count = r->n_range - first;
    if (neg) r->node[id].count = -r->node[id].count - 1; /* marks negation: see set_ranges */
    return id;
}

static int parse_alt(rparse *r);

static int set_node(rparse *r, uint32_t lo, uint32_t hi) {
    int id = rnode_new(r, RN_SET, -1, -1);
    range_add(r, lo, hi);
    r->node[id].count = 1;
    return id;
}

static int parse_atom(rparse *r) {
    uint32_t c = (unsigned char)*r->p;
    if (c == '(') {
        r->p++;
        if (r->p[0] == '?') {
            if (r->p[1] == ':') r->p += 2;
            else if (r->p[1] == '<' && r->p[2] != '=' && r->p[2] != '!') { /* a named group */
                const char *e = strchr(r->p, '>');
                if (!e) return perr(r, JRE_UNSUPPORTED, "bad group name");
                r->p = e + 1;
            } else return perr(r, JRE_UNSUPPORTED, "lookaround");
        }
        if (++r->nest > MAX_GROUPS) return perr(r, JRE_TOO_BIG, "groups nested deeper than %d", MAX_GROUPS);
        int a = parse_alt(r);
        r->nest--;
        if (a < 0) return -1;
        if (*r->p != ')') return perr(r, JRE_UNSUPPORTED, "unbalanced parenthesis");
        r->p++;
        return a;
    }
    if (c == '[') {
        r->p++;
        return parse_class(r);
    }
    if (c == '.') {
        r->p++;
        int id = rnode_new(r, RN_SET, -1, -1);
        range_add(r, 0, '\n' - 1), range_add(r, '\n' + 1, '\r' - 1), range_add(r, '\r' + 1, 0x2027);
        range_add(r, 0x202A, MAX_CP); /* no line terminator */
        r->node[id].count = 4;
        return id;
    }
    if (c == '^' || c == '$') {
        r->p++;
        return rnode_new(r, c == '^' ? RN_BOL : RN_EOL, -1, -1);
    }
    if (c == '\\') {
        r->p++;
        int id = rnode_new(r, RN_SET, -1, -1);
        if (class_escape(r, (unsigned char)*r->p, 0)) {
            r->p++;
            r->node[id].count = r->n_range - r->node[id].first;
            return id;
        }
        long v = char_escape(r);
        if (v < 0) return -1;
        range_add(r, (uint32_t)v, (uint32_t)v);
        r->node[id].count = 1;
        return id;
    }
    if (c == ')' || c == '|' || !c) return rnode_new(r, RN_EMPTY, -1, -1);
    if (c == '*' || c == '+' || c == '?') return perr(r, JRE_UNSUPPORTED, "nothing to repeat");
    c = utf8_next(&r->p);
    return set_node(r, c, c);
}

/* {n}, {n,}, {n,m} at r->p; 0 if it is not a quantifier (a literal '{'). */
static int parse_braces(rparse *r, int *min, int *max) {
    const char *p = r->p + 1;
    char *e;
    if (*p == ',' && p[1] >= '0' && p[1] <= '9') /* a literal in ECMA-262, {0,n} in Python: not guessed */
        return perr(r, JRE_UNSUPPORTED, "{,n}"), -1;
    if (*p < '0' || *p > '9') return 0;
    long a = strtol(p, &e, 10), b = a;
    if (*e == ',') {
        if (e[1] == '}') b = -1, e++;
        else if (e[1] >= '0' && e[1] <= '9') b = strtol(e + 1, &e, 10);
        else return 0;
    }
    if (*e != '}') return 0;
    if (a > MAX_REP || b > MAX_REP) return perr(r, JRE_TOO_BIG, "repetition over %d", MAX_REP), -1;
    if (b >= 0 && b < a) return perr(r, JRE_UNSUPPORTED, "{n,m} with m < n"), -1;
    *min = (int)a, *max = (int)b;
    r->p = e + 1;
    return 1;
}

static int parse_quant(rparse *r, int atom) {
    for (;;) {
        int min, max, q = 1;
        switch (*r->p) {
        case '*': min = 0, max = -1, r->p++; break;
        case '+': min = 1, max = -1, r->p++; break;
        case '?': min = 0, max = 1, r->p++; break;
        case '{': q = parse_braces(r, &min, &max); break;
        default: q = 0;
        }
        if (q < 0) return -1;
        if (!q) return atom;
        if (*r->p == '?') r->p++; /* lazy: the same language */
        if (r->node[atom].kind == RN_BOL || r->node[atom].kind == RN_EOL) return perr(r, JRE_UNSUPPORTED, "quantified anchor");
        int id = rnode_new(r, RN_REP, atom, -1);
        r->node[id].min = min, r->node[id].max = max;
        atom = id;
    }
}

static int parse_seq(rparse *r) {
    int seq = -1;
    while (*r->p && *r->p != '|' && *r->p != ')') {
        int a = parse_atom(r);
        if (a < 0 || (a = parse_quant(r, a)) < 0) return -1;
        seq = seq < 0 ? a : rnode_new(r, RN_CAT, seq, a);
    }
    return seq < 0 ? rnode_new(r, RN_EMPTY, -1, -1) : seq;
}

static int parse_alt(rparse *r) {
    int a = parse_seq(r);
    while (a >= 0 && *r->p == '|') {
        r->p++;
        int b = parse_seq(r);
        a = b < 0 ? -1 : rnode_new(r, RN_ALT, a, b);
    }
    return a;
}

/* ---- step 2: the NFA ------------------------------------------------------ */

enum { NS_SPLIT, NS_BYTE, NS_BOL, NS_EOL };

typedef struct nst {
    uint8_t kind, lo, hi;
    int out, out2; /* -1: none */
} nst;

typedef struct nfa {
    nst *st;
    int n, cap;
    int err;
} nfa;

typedef struct frag {
    int start, end; /* end: an NS_SPLIT whose outs are free */
} frag;

static int nst_new(nfa *a, int kind, int lo, int hi) {
    if (a->n >= MAX_NFA) {
        a->err = 1;
        return 0;
    }
    XGROW(a->st, a->cap, a->n + 1, 256);
    a->st[a->n] = (nst){.kind = (uint8_t)kind, .lo = (uint8_t)lo, .hi = (uint8_t)hi, .out = -1, .out2 = -1};
    return a->n++;
}

/* Adds an epsilon edge from split state s to t. */
static void eps(nfa *a, int s, int t) {
    if (a->st[s].out < 0) {
        a->st[s].out = t;
        return;
    }
    while (a->st[s].out2 >= 0) s = a->st[s].out2; /* a chain of splits */
    int n = nst_new(a, NS_SPLIT, 0, 0);
    a->st[n].out = t;
    a->st[s].out2 = n;
}

/* One byte-sequence alternative: bytes lo[i]..hi[i] from s to e. */
static void byte_seq(nfa *a, int s, int e, const uint8_t *lo, const uint8_t *hi, int n) {
    int prev = -1, first = -1;
    for (int i = 0; i < n; i++) {
        int b = nst_new(a, NS_BYTE, lo[i], hi[i]);
        if (prev >= 0) a->st[prev].out = b;
        else first = b;
        prev = b;
    }
    a->st[prev].out = e;
    eps(a, s, first);
}

/* The code points lo..hi (no surrogates, same UTF-8 length) as byte-range
 * sequences: split until every byte position is a plain range (the usual
 * UTF-8 range construction). */
static void utf8_ranges(nfa *a, int s, int e, uint32_t lo, uint32_t hi) {
    static const uint32_t MAXS[3] = {0x7F, 0x7FF, 0xFFFF};
    for (int i = 0; i < 3; i++)
        if (lo <= MAXS[i] && hi > MAXS[i]) {
            utf8_ranges(a, s, e, lo, MAXS[i]);
            utf8_ranges(a, s, e, MAXS[i] + 1, hi);
            return;
        }
    int n = utf8_len(lo);
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) == (hi & ~m)) continue;
        if (lo & m) {
            utf8_ranges(a, s, e, lo, lo | m);
            utf8_ranges(a, s, e, (lo | m) + 1, hi);
            return;
        }
        if ((hi & m) != m) {
            utf8_ranges(a, s, e, lo, (hi & ~m) - 1);
            utf8_ranges(a, s, e, hi & ~m, hi);
            return;
        }
    }
    uint8_t bl[4], bh[4];
    utf8_put((char *)bl, lo), utf8_put((char *)bh, hi);
    byte_seq(a, s, e, bl, bh, n);
}

static int cmp_range(const void *x, const void *y) {
    const rrange *p = x, *q = y;
    return (p->lo > q->lo) - (p->lo < q->lo);
}

/* A set's ranges sorted, merged, complemented if negated, without
 * surrogates and without the control characters a JSON string cannot
 * carry as the guard writes it (only \b \t \n \f \r). Returns the count. */
static int set_ranges(const rparse *r, const rnode *nd, rrange *out) {
    int neg = nd->count < 0, n = neg ? -nd->count - 1 : nd->count, k = 0;
    rrange *t = xmalloc(sizeof(rrange) * (size_t)(n + 1));
    memcpy(t, r->range + nd->first, sizeof(rrange) * (size_t)n);
    qsort(t, (size_t)n, sizeof *t, cmp_range);
    rrange merged[n + 1];
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m && t[i].lo <= merged[m - 1].hi + 1) {
            if (t[i].hi > merged[m - 1].hi) merged[m - 1].hi = t[i].hi;
        } else merged[m++] = t[i];
    }
    free(t);
    rrange pos[n + 2];
    int np = 0;
    if (!neg) memcpy(pos, merged, sizeof(rrange) * (size_t)(np = m));
    else {
        uint32_t from = 0;
        for (int i = 0; i < m; i++) {
            if (merged[i].lo > from) pos[np++] = (rrange){from, merged[i].lo - 1};
            from = merged[i].hi + 1;
        }
        if (from <= MAX_CP) pos[np++] = (rrange){from, MAX_CP};
    }
    /* intersect with what the guard can write */
    static const rrange OK[] = {{8, 10}, {12, 13}, {0x20, 0xD7FF}, {0xE000, MAX_CP}};
    for (int i = 0; i < np; i++)
        for (int j = 0; j < 4; j++) {
            uint32_t lo = pos[i].lo > OK[j].lo ? pos[i].lo : OK[j].lo, hi = pos[i].hi < OK[j].hi ? pos[i].hi : OK[j].hi;
            if (lo <= hi) out[k++] = (rrange){lo, hi};
        }
    return k;
}

static frag build(nfa *a, const rparse *r, int id);

static frag frag_set(nfa *a, const rparse *r, const rnode *nd) {
    int n = nd->count < 0 ? -nd->count - 1 : nd->count;
    rrange *rs = xmalloc(sizeof(rrange) * (size_t)(4 * n + 8));
    int k = set_ranges(r, nd, rs);
    frag f = {nst_new(a, NS_SPLIT, 0, 0), nst_new(a, NS_SPLIT, 0, 0)};
    for (int i = 0; i < k; i++) utf8_ranges(a, f.start, f.end, rs[i].lo, rs[i].hi);
    free(rs);
    return f; /* an empty set: start leads nowhere */
}

static frag frag_rep(nfa *a, const rparse *r, const rnode *nd) {
    frag f = {nst_new(a, NS_SPLIT, 0, 0), -1};
    f.end = f.start;
    for (int i = 0; i < nd->min && !a->err; i++) {
        frag c = build(a, r, nd->a);
        eps(a, f.end, c.start);
        f.end = c.end;
    }
    int e = nst_new(a, NS_SPLIT, 0, 0);
    if (nd->max < 0) { /* a loop: L -> child -> L, L -> e */
        int l = nst_new(a, NS_SPLIT, 0, 0);
        frag c = build(a, r, nd->a);
        eps(a, f.end, l), eps(a, l, c.start), eps(a, c.end, l), eps(a, l, e);
    } else {
        for (int i = nd->min; i < nd->max && !a->err; i++) { /* optional copies */
            frag c = build(a, r, nd->a);
            eps(a, f.end, e), eps(a, f.end, c.start);
            f.end = c.end;
        }
        eps(a, f.end, e);
    }
    f.end = e;
    return f;
}

static frag build(nfa *a, const rparse *r, int id) {
    const rnode *nd = &r->node[id];
    frag f;
    if (a->err) return (frag){0, 0};
    switch (nd->kind) {
    case RN_SET: return frag_set(a, r, nd);
    case RN_REP: return frag_rep(a, r, nd);
    case RN_CAT: {
        frag x = build(a, r, nd->a), y = build(a, r, nd->b);
        eps(a, x.end, y.start);
        return (frag){x.start, y.end};
    }
    case RN_ALT: {
        frag x = build(a, r, nd->a), y = build(a, r, nd->b);
        f = (frag){nst_new(a, NS_SPLIT, 0, 0), nst_new(a, NS_SPLIT, 0, 0)};
        eps(a, f.start, x.start), eps(a, f.start, y.start), eps(a, x.end, f.end), eps(a, y.end, f.end);
        return f;
    }
    case RN_BOL: case RN_EOL: {
        f = (frag){nst_new(a, nd->kind == RN_BOL ? NS_BOL : NS_EOL, 0, 0), nst_new(a, NS_SPLIT, 0, 0)};
        a->st[f.start].out = f.end;
        return f;
    }
    }
    f.start = f.end = nst_new(a, NS_SPLIT, 0, 0);
    return f;
}

/* A loop over any character a string can carry, from and back to s. */
static void any_loop(nfa *a, int s) {
    rparse r = {0};
    int id = rnode_new(&r, RN_SET, -1, -1);
    range_add(&r, 0, MAX_CP);
    r.node[id].count = 1;
    frag c = build(a, &r, id);
    eps(a, s, c.start), eps(a, c.end, s);
    free(r.node), free(r.range);
}

/* ---- step 3: the DFA ------------------------------------------------------ */

typedef struct dfab {
    const nfa *a;
    int match;            /* the NFA state of a complete match */
    int **set;            /* per DFA state: its NFA states, sorted */
    int *set_n;
    int n, cap;
    int *hash;            /* open addressing: DFA state + 1, 0 empty */
    int hash_cap;
    uint16_t *next;
    uint8_t *acc;
    int *stack, *mark, gen; /* closure scratch */
} dfab;

static uint32_t set_hash(const int *s, int n) {
    uint32_t h = 2166136261u;
    for (int i = 0; i < n; i++) h = (h ^ (uint32_t)s[i]) * 16777619u;
    return h;
}

static int cmp_int(const void *x, const void *y) { return (*(const int *)x > *(const int *)y) - (*(const int *)x < *(const int *)y); }

/* The epsilon closure of n states in buf (grows buf in place; BOL edges
 * only at the start, EOL edges only when asked). Returns the count. */
static int closure(dfab *d, int *buf, int n, int at_begin, int at_end) {
    const nst *st = d->a->st;
    d->gen++;
    int sp = 0, k = 0;
    for (int i = 0; i < n; i++) d->stack[sp++] = buf[i];
    while (sp) {
        int s = d->stack[--sp];
        if (s < 0 || d->mark[s] == d->gen) continue;
        d->mark[s] = d->gen;
        buf[k++] = s;
        if (st[s].kind == NS_SPLIT) d->stack[sp++] = st[s].out, d->stack[sp++] = st[s].out2;
        else if ((st[s].kind == NS_BOL && at_begin) || (st[s].kind == NS_EOL && at_end)) d->stack[sp++] = st[s].out;
    }
    return k;
}

static int is_accepting(dfab *d, const int *s, int n, int at_begin) {
    int *buf = xmalloc(sizeof(int) * (size_t)d->a->n);
    memcpy(buf, s, sizeof(int) * (size_t)n);
    int k = closure(d, buf, n, at_begin, 1), acc = 0;
    for (int i = 0; i < k && !acc; i++) acc = buf[i] == d->match;
    free(buf);
    return acc;
}

/* The DFA state for NFA set s (sorted, closed), added if new; -1 when over
 * the limit. */
static int dfa_state(dfab *d, const int *s, int n, int at_begin) {
    uint32_t h = set_hash(s, n);
    for (uint32_t i = h & (uint32_t)(d->hash_cap - 1);; i = (i + 1) & (uint32_t)(d->hash_cap - 1)) {
        int q = d->hash[i] - 1;
        if (q < 0) {
            if (d->n >= JRE_MAX_STATES) return -1;
            if (d->n == d->cap) {
                d->cap *= 2;
                d->set = xrealloc(d->set, sizeof(int *) * (size_t)d->cap);
                d->set_n = xrealloc(d->set_n, sizeof(int) * (size_t)d->cap);
                d->next = xrealloc(d->next, sizeof(uint16_t) * 256 * (size_t)d->cap);
                d->acc = xrealloc(d->acc, (size_t)d->cap);
            }
            q = d->n++;
            d->set[q] = xmalloc(sizeof(int) * (size_t)(n + 1));
            memcpy(d->set[q], s, sizeof(int) * (size_t)n);
            d->set_n[q] = n;
            d->acc[q] = (uint8_t)is_accepting(d, s, n, at_begin);
            d->hash[i] = q + 1;
            return q;
        }
        if (d->set_n[q] == n && !memcmp(d->set[q], s, sizeof(int) * (size_t)n)) return q;
    }
}

/* Byte classes: bytes no NFA edge tells apart share a class. cls_first
 * gets the first byte of each class; returns the count. */
static int byte_classes(const nfa *a, uint8_t *cls, int *first) {
    uint8_t cut[257] = {0};
    for (int i = 0; i < a->n; i++)
        if (a->st[i].kind == NS_BYTE) cut[a->st[i].lo] = cut[a->st[i].hi + 1] = 1;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        if (b == 0 || cut[b]) first[n++] = b;
        cls[b] = (uint8_t)(n - 1);
    }
    return n;
}

/* Subset construction. Returns 0 or JRE_TOO_BIG. */
static int determinize(dfab *d, int start) {
    const nfa *a = d->a;
    uint8_t cls[256];
    int first[256], n_cls = byte_classes(a, cls, first);
    int *buf = xmalloc(sizeof(int) * (size_t)a->n);
    buf[0] = start;
    int k = closure(d, buf, 1, 1, 0);
    qsort(buf, (size_t)k, sizeof(int), cmp_int);
    int rc = dfa_state(d, buf, k, 1) < 0 ? JRE_TOO_BIG : 0;
    for (int q = 0; q < d->n && !rc; q++) {
        for (int c = 0; c < n_cls && !rc; c++) {
            int b = first[c], m = 0;
            for (int i = 0; i < d->set_n[q]; i++) {
                const nst *s = &a->st[d->set[q][i]];
                if (s->kind == NS_BYTE && b >= s->lo && b <= s->hi) buf[m++] = s->out;
            }
            int t = JRE_DEAD;
            if (m) {
                m = closure(d, buf, m, 0, 0);
                qsort(buf, (size_t)m, sizeof(int), cmp_int);
                t = dfa_state(d, buf, m, 0);
                if (t < 0) rc = JRE_TOO_BIG;
            }
            for (int x = b; x < 256 && cls[x] == c; x++) d->next[(size_t)q * 256 + x] = (uint16_t)t;
        }
    }
    free(buf);
    return rc;
}

/* Characters are counted at their first byte. */
static int weight(int b) { return b < 0x80 || b >= 0xC0; }

/* Cuts states that cannot reach a match, then renumbers. Returns JRE_OK or
 * JRE_EMPTY. out gets next/acc for the kept states (start kept at 0). */
static int prune(const uint16_t *next, const uint8_t *acc, int n, jre_dfa *out) {
    uint8_t *live = xcalloc((size_t)n, 1);
    for (int q = 0; q < n; q++) live[q] = acc[q];
    for (int changed = 1; changed;) { /* backward reachability, by rounds */
        changed = 0;
        for (int q = 0; q < n; q++)
            for (int b = 0; b < 256 && !live[q]; b++) {
                uint16_t t = next[(size_t)q * 256 + b];
                if (t != JRE_DEAD && live[t]) live[q] = 1, changed = 1;
            }
    }
    if (!live[0]) {
        free(live);
        return JRE_EMPTY;
    }
    int *id = xmalloc(sizeof(int) * (size_t)n), m = 0;
    for (int q = 0; q < n; q++) id[q] = live[q] ? m++ : -1;
    out->n = m;
    out->next = xmalloc(sizeof(uint16_t) * 256 * (size_t)m);
    out->acc = xmalloc((size_t)m);
    for (int q = 0; q < n; q++) {
        if (!live[q]) continue;
        out->acc[id[q]] = acc[q];
        for (int b = 0; b < 256; b++) {
            uint16_t t = next[(size_t)q * 256 + b];
            out->next[(size_t)id[q] * 256 + b] = t != JRE_DEAD && live[t] ? (uint16_t)id[t] : JRE_DEAD;
        }
    }
    free(id), free(live);
    return JRE_OK;
}

/* len: completion lengths under 64 characters, a fixed point over the
 * edges; inf: states that reach a cycle (every cycle spends a character),
 * found by peeling states whose successors are all peeled. */
static void lengths(jre_dfa *d) {
    int n = d->n;
    d->len = xcalloc((size_t)n, sizeof(uint64_t));
    d->inf = xcalloc((size_t)n, 1);
    for (int changed = 1; changed;) {
        changed = 0;
        for (int q = 0; q < n; q++) {
            uint64_t v = d->acc[q];
            for (int b = 0; b < 256; b++) {
                uint16_t t = d->next[(size_t)q * 256 + b];
                if (t != JRE_DEAD) v |= weight(b) ? d->len[t] << 1 : d->len[t];
            }
            if (v != d->len[q]) d->len[q] = v, changed = 1;
        }
    }
    int *outdeg = xcalloc((size_t)n, sizeof(int)), *queue = xmalloc(sizeof(int) * (size_t)n), qh = 0, qt = 0;
    int *pred_n = xcalloc((size_t)n + 1, sizeof(int)), *pred;
    for (int q = 0; q < n; q++)
        for (int b = 0; b < 256; b++) {
            uint16_t t = d->next[(size_t)q * 256 + b];
            if (t != JRE_DEAD) outdeg[q]++, pred_n[t + 1]++;
        }
    for (int q = 0; q < n; q++) pred_n[q + 1] += pred_n[q];
    pred = xmalloc(sizeof(int) * (size_t)(pred_n[n] + 1));
    int *fill = xcalloc((size_t)n, sizeof(int));
    for (int q = 0; q < n; q++)
        for (int b = 0; b < 256; b++) {
            uint16_t t = d->next[(size_t)q * 256 + b];
            if (t != JRE_DEAD) pred[pred_n[t] + fill[t]++] = q;
        }
    for (int q = 0; q < n; q++) if (!outdeg[q]) queue[qt++] = q;
    while (qh < qt) {
        int t = queue[qh++];
        for (int i = pred_n[t]; i < pred_n[t + 1]; i++)
            if (--outdeg[pred[i]] == 0) queue[qt++] = pred[i];
    }
    for (int q = 0; q < n; q++) d->inf[q] = outdeg[q] > 0;
    free(outdeg), free(queue), free(pred_n), free(pred), free(fill);
}

static void dfab_free(dfab *d) {
    for (int q = 0; q < d->n; q++) free(d->set[q]);
    free(d->set), free(d->set_n), free(d->hash), free(d->next), free(d->acc), free(d->stack), free(d->mark);
}

/* NFA with the search loops -> pruned DFA with lengths. */
static int nfa_to_dfa(nfa *a, int start, int match, jre_dfa *out, char *why, size_t cap) {
    dfab d = {.a = a, .match = match, .cap = 64, .hash_cap = 4 * JRE_MAX_STATES};
    d.set = xmalloc(sizeof(int *) * 64), d.set_n = xmalloc(sizeof(int) * 64);
    d.next = xmalloc(sizeof(uint16_t) * 256 * 64), d.acc = xmalloc(64);
    d.hash = xcalloc((size_t)d.hash_cap, sizeof(int));
    d.stack = xmalloc(sizeof(int) * (size_t)(3 * a->n + 2)), d.mark = xcalloc((size_t)a->n, sizeof(int));
    int rc = determinize(&d, start);
    if (!rc) rc = prune(d.next, d.acc, d.n, out);
    dfab_free(&d);
    if (rc == JRE_TOO_BIG) snprintf(why, cap, "automaton over %d states", JRE_MAX_STATES);
    if (rc == JRE_EMPTY) snprintf(why, cap, "no string matches");
    if (!rc) lengths(out);
    return rc;
}

static int compile_uncached(const char *pattern, jre_dfa *out, char *why, size_t cap) {
    memset(out, 0, sizeof *out);
    if (strlen(pattern) > MAX_PATTERN) {
        snprintf(why, cap, "longer than %d bytes", MAX_PATTERN);
        return JRE_TOO_BIG;
    }
    rparse r = {.p = pattern, .why = why, .cap = cap};
    int root = parse_alt(&r);
    if (root >= 0 && *r.p) root = perr(&r, JRE_UNSUPPORTED, "unbalanced parenthesis");
    int rc = r.err;
    if (!rc) {
        nfa a = {0};
        int start = nst_new(&a, NS_SPLIT, 0, 0), match = nst_new(&a, NS_SPLIT, 0, 0);
        any_loop(&a, start); /* unanchored start */
        frag f = build(&a, &r, root);
        eps(&a, start, f.start), eps(&a, f.end, match);
        any_loop(&a, match); /* anything may follow a match */
        if (a.err) rc = JRE_TOO_BIG, snprintf(why, cap, "automaton over %d NFA states", MAX_NFA);
        else rc = nfa_to_dfa(&a, start, match, out, why, cap);
        free(a.st);
    }
    free(r.node), free(r.range);
    return rc;
}

/* ---- a process-wide cache: clients send the same tool schemas with every
 * request, so each pattern is compiled once (results and refusals). */

#define CACHE_ENTRIES 256
#define CACHE_BYTES (64u << 20)

typedef struct cache_entry {
    char *pattern;
    int rc;
    char why[96];
    jre_dfa d;
    size_t bytes;
} cache_entry;

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static cache_entry cache[CACHE_ENTRIES];
static int cache_next; /* the slot replaced next (oldest first) */
static size_t cache_bytes;

static size_t dfa_bytes(const jre_dfa *d) { return (size_t)d->n * (256 * sizeof(uint16_t) + 2 + sizeof(uint64_t)); }

static void dfa_copy(jre_dfa *dst, const jre_dfa *src) {
    dst->n = src->n;
    dst->next = xmalloc(sizeof(uint16_t) * 256 * (size_t)src->n);
    dst->acc = xmalloc((size_t)src->n), dst->inf = xmalloc((size_t)src->n);
    dst->len = xmalloc(sizeof(uint64_t) * (size_t)src->n);
    memcpy(dst->next, src->next, sizeof(uint16_t) * 256 * (size_t)src->n);
    memcpy(dst->acc, src->acc, (size_t)src->n), memcpy(dst->inf, src->inf, (size_t)src->n);
    memcpy(dst->len, src->len, sizeof(uint64_t) * (size_t)src->n);
}

/* A hit copies the entry into out; returns 1 (rc and why set), else 0. */
static int cache_get(const char *pattern, jre_dfa *out, int *rc, char *why, size_t cap) {
    int hit = 0;
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < CACHE_ENTRIES && !hit; i++) {
        const cache_entry *e = &cache[i];
        if (!e->pattern || strcmp(e->pattern, pattern)) continue;
        hit = 1, *rc = e->rc;
        if (e->rc == JRE_OK) dfa_copy(out, &e->d);
        else snprintf(why, cap, "%s", e->why);
    }
    pthread_mutex_unlock(&cache_lock);
    return hit;
}

static void cache_put(const char *pattern, const jre_dfa *d, int rc, const char *why) {
    size_t bytes = rc == JRE_OK ? dfa_bytes(d) : 0;
    if (bytes > CACHE_BYTES / 4) return;
    pthread_mutex_lock(&cache_lock);
    cache_entry *e = &cache[cache_next];
    for (int tries = 0; tries < CACHE_ENTRIES && (e->pattern && cache_bytes + bytes > CACHE_BYTES); tries++) {
        free(e->pattern), jre_free(&e->d), cache_bytes -= e->bytes; /* oldest out until it fits */
        memset(e, 0, sizeof *e);
        cache_next = (cache_next + 1) % CACHE_ENTRIES;
        e = &cache[cache_next];
    }
    if (e->pattern) free(e->pattern), jre_free(&e->d), cache_bytes -= e->bytes;
    memset(e, 0, sizeof *e);
    e->pattern = xstrdup(pattern), e->rc = rc, e->bytes = bytes;
    snprintf(e->why, sizeof e->why, "%s", rc ? why : "");
    if (rc == JRE_OK) dfa_copy(&e->d, d);
    cache_bytes += bytes;
    cache_next = (cache_next + 1) % CACHE_ENTRIES;
    pthread_mutex_unlock(&cache_lock);
}

int jre_compile(const char *pattern, jre_dfa *out, char *why, size_t cap) {
    int rc;
    memset(out, 0, sizeof *out);
    if (cache_get(pattern, out, &rc, why, cap)) return rc;
    rc = compile_uncached(pattern, out, why, cap);
    cache_put(pattern, out, rc, why);
    return rc;
}

int jre_intersect(const jre_dfa *a, const jre_dfa *b, jre_dfa *out) {
    memset(out, 0, sizeof *out);
    int cap = 64, n = 1, rc = 0;
    uint16_t *next = xmalloc(sizeof(uint16_t) * 256 * (size_t)cap);
    uint8_t *acc = xmalloc((size_t)cap);
    uint32_t *pair = xmalloc(sizeof(uint32_t) * (size_t)cap);
    int *index = xmalloc(sizeof(int) * (size_t)a->n * (size_t)b->n);
    for (size_t i = 0; i < (size_t)a->n * (size_t)b->n; i++) index[i] = -1;
    pair[0] = 0, index[0] = 0;
    for (int q = 0; q < n && !rc; q++) {
        uint32_t x = pair[q] >> 16, y = pair[q] & 0xFFFF;
        acc[q] = a->acc[x] && b->acc[y];
        for (int c = 0; c < 256; c++) {
            uint16_t u = a->next[x * 256 + (uint32_t)c], v = b->next[y * 256 + (uint32_t)c], t = JRE_DEAD;
            if (u != JRE_DEAD && v != JRE_DEAD) {
                int *slot = &index[(size_t)u * (size_t)b->n + v];
                if (*slot < 0) {
                    if (n >= JRE_MAX_STATES) {
                        rc = JRE_TOO_BIG;
                        break;
                    }
                    if (n == cap) {
                        cap *= 2;
                        next = xrealloc(next, sizeof(uint16_t) * 256 * (size_t)cap);
                        acc = xrealloc(acc, (size_t)cap);
                        pair = xrealloc(pair, sizeof(uint32_t) * (size_t)cap);
                    }
                    pair[n] = (uint32_t)u << 16 | v;
                    *slot = n++;
                }
                t = (uint16_t)*slot;
            }
            next[(size_t)q * 256 + (size_t)c] = t;
        }
    }
    if (!rc) rc = prune(next, acc, n, out);
    if (!rc) lengths(out);
    free(next), free(acc), free(pair), free(index);
    return rc;
}

int jre_matches(const jre_dfa *d, const char *s, size_t n) {
    uint16_t q = 0;
    for (size_t i = 0; i < n && q != JRE_DEAD; i++) q = d->next[(size_t)q * 256 + (unsigned char)s[i]];
    return q != JRE_DEAD && d->acc[q];
}

void jre_free(jre_dfa *d) {
    if (!d) return;
    free(d->next), free(d->acc), free(d->inf), free(d->len);
    memset(d, 0, sizeof *d);
}
