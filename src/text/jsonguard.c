/* jsonguard.c - JSON-object constrained sampling (see jsonguard.h).
 *
 * Two parts:
 *   1. The automaton: jg_state is a lexer mode plus the container stack as
 *      one bit per level (1 = object), 16 bytes in all, so copying it is
 *      cheap. jg_step advances it by one byte or says the byte is invalid.
 *      Every state it accepts can still be completed (limits are checked
 *      early enough that no dead end is reachable), so the mask never
 *      empties while the vocabulary can spell the ASCII punctuation and
 *      digits, and the rest of any UTF-8 character a token leaves open
 *      (byte-level BPE and SPM byte fallback can).
 *   2. The mask: the vocabulary's token texts form a trie stored in
 *      preorder (byte, depth, index past the subtree, range of tokens
 *      ending there). One linear pass over the nodes carries the automaton
 *      down the trie, one state per depth; a byte the automaton rejects
 *      skips its whole subtree, so outside strings only a few thousand
 *      nodes are visited. A token is allowed iff its last node is reached.
 *      Inside a string nearly every token passes, so there the mask is a
 *      precomputed bitmap of "plain" tokens plus a byte-by-byte check of
 *      the few hundred others (in a string held to lengths only, the
 *      bitmap filtered by each token's character count; in one held to a
 *      pattern, a trie walk carrying only the string's state). Masks are
 *      also cached per guard by state, since inside a long string the
 *      state repeats token after token.
 * Does not: sample, or know about schemas (jsonguard_schema.c does). */
#include "text/jsonguard.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "text/jsonguard_int.h"

/* ---- the automaton -------------------------------------------------------- */

static const char *const LITERALS[3] = {"true", "false", "null"};

static int is_ws(unsigned c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static int is_digit(unsigned c) { return c - '0' < 10u; }

/* Whitespace between tokens, bounded so that a model cannot emit it
 * forever; any non-space byte resets the count by changing mode. */
static int eat_ws(jg_state *s) {
    if (s->n >= JSON_GUARD_MAX_WS) return 0;
    s->n++;
    return 1;
}

/* Clears every per-mode field, so that equal situations give equal states
 * (the mask cache compares states whole). */
static int set_mode(jg_state *s, int mode) {
    s->mode = (uint8_t)mode;
    s->n = s->aux = s->lo = s->hi = 0;
    s->code = 0;
    return 1;
}

/* Back to plain string text after an escape or a character. */
static int back_to_str(jg_state *s) {
    int key = s->aux & AUX_KEY;
    set_mode(s, JG_STR);
    s->aux = (uint8_t)key;
    return 1;
}

static int top_is_object(const jg_state *s) { return (int)((s->stack >> (s->depth - 1)) & 1); }

static int push(jg_state *s, int is_object) {
    if (s->depth >= JSON_GUARD_MAX_DEPTH) return 0;
    uint64_t bit = 1ull << s->depth;
    s->stack = is_object ? s->stack | bit : s->stack & ~bit;
    s->depth++;
    return set_mode(s, is_object ? JG_OBJ_FIRST : JG_ARR_FIRST);
}

static int pop(jg_state *s) {
    s->depth--;
    s->stack &= ~(1ull << s->depth); /* bits above depth stay zero */
    return set_mode(s, s->depth ? JG_AFTER : JG_DONE);
}

static int start_string(jg_state *s, int key) {
    set_mode(s, JG_STR);
    s->aux = key ? AUX_KEY : 0;
    return 1;
}

/* First byte of any value. */
static int begin_value(jg_state *s, unsigned c) {
    switch (c) {
    case '{': return push(s, 1);
    case '[': return push(s, 0);
    case '"': return start_string(s, 0);
    case '-': return set_mode(s, JG_MINUS);
    case '0': return set_mode(s, JG_ZERO);
    case 't': case 'f': case 'n':
        set_mode(s, JG_LIT);
        s->aux = c == 't' ? 0 : c == 'f' ? 1 : 2;
        s->n = 1;
        return 1;
    }
    if (!is_digit(c)) return 0;
    set_mode(s, JG_INT);
    s->n = 1;
    return 1;
}

/* After a complete value inside a container. */
static int step_after(jg_state *s, unsigned c) {
    if (is_ws(c)) return eat_ws(s);
    int obj = top_is_object(s);
    if (c == ',') return set_mode(s, obj ? JG_KEY : JG_VALUE);
    if (c == (obj ? '}' : ']')) return pop(s);
    return 0;
}

/* The structural modes: between tokens of the JSON text. */
static int step_struct(jg_state *s, unsigned c) {
    if (s->mode == JG_AFTER) return step_after(s, c);
    if (is_ws(c)) return eat_ws(s);
    switch (s->mode) {
    case JG_START: return c == '{' && push(s, 1);
    case JG_VALUE: return begin_value(s, c);
    case JG_ARR_FIRST: return c == ']' ? pop(s) : begin_value(s, c);
    case JG_OBJ_FIRST:
        if (c == '}') return pop(s);
        /* fall through */
    case JG_KEY:
        return c == '"' && start_string(s, 1);
    case JG_COLON: return c == ':' && set_mode(s, JG_VALUE);
    }
    return 0;
}

/* A lead byte of a multi-byte UTF-8 character: how many bytes follow and
 * the range of the first of them (this excludes overlong forms, UTF-16
 * surrogates and code points past U+10FFFF, as Jansson does). */
static int utf8_lead(jg_state *s, unsigned c) {
    int n = 0;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) n = 1;
    else if (c >= 0xE0 && c <= 0xEF) n = 2, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) n = 3, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else return 0;
    s->mode = JG_UTF8; /* keeps aux: the key flag */
    s->n = (uint8_t)n;
    s->lo = (uint8_t)lo;
    s->hi = (uint8_t)hi;
    return 1;
}

static int end_string(jg_state *s) { return set_mode(s, (s->aux & AUX_KEY) ? JG_COLON : JG_AFTER); }

static int step_str(jg_state *s, unsigned c) {
    if (c == '"') return end_string(s);
    if (c == '\\') {
        s->mode = JG_ESC;
        return 1;
    }
    if (c < 0x20) return 0;
    if (c < 0x80) return 1;
    return utf8_lead(s, c);
}

static int hex_val(unsigned c) {
    if (is_digit(c)) return (int)(c - '0');
    c |= 0x20;
    return c >= 'a' && c <= 'f' ? (int)(c - 'a' + 10) : -1;
}

/* Can the \u escape with these n leading digits still end valid? Rejecting
 * as soon as no completion exists keeps the automaton free of dead ends:
 * "\uDC" cannot become a valid lone escape, so its 'C' is refused. */
static int hex_viable(unsigned code, int n, int want_low) {
    unsigned shift = 4u * (unsigned)(4 - n);
    unsigned first = code << shift, last = first + (1u << shift) - 1;
    if (want_low) return first <= 0xDFFF && last >= 0xDC00;
    /* valid alone: 0001..DBFF (high surrogates pair later) and E000..FFFF;
     * U+0000 is refused because Jansson refuses it by default. */
    return (first <= 0xDBFF && last >= 0x0001) || last >= 0xE000;
}

static int step_hex(jg_state *s, unsigned c) {
    int v = hex_val(c);
    if (v < 0) return 0;
    unsigned code = (unsigned)s->code << 4 | (unsigned)v;
    int n = s->n + 1, low = s->aux & AUX_LOW;
    if (!hex_viable(code, n, low)) return 0;
    s->code = (uint16_t)code;
    s->n = (uint8_t)n;
    if (n < 4) return 1;
    if (!low && code >= 0xD800 && code <= 0xDBFF) {
        s->aux |= AUX_LOW; /* a high surrogate: the low one must follow */
        s->mode = JG_LOW_BS;
        return 1;
    }
    return back_to_str(s);
}

static int begin_hex(jg_state *s) {
    s->mode = JG_HEX;
    s->n = 0;
    s->code = 0;
    return 1;
}

/* Everything that happens inside a string after the opening quote. */
static int step_string_modes(jg_state *s, unsigned c) {
    switch (s->mode) {
    case JG_STR: return step_str(s, c);
    case JG_ESC:
        if (c == 'u') return begin_hex(s);
        if (c == 0 || !strchr("\"\\/bfnrt", (int)c)) return 0;
        return back_to_str(s);
    case JG_HEX: return step_hex(s, c);
    case JG_LOW_BS:
        if (c != '\\') return 0;
        s->mode = JG_LOW_U;
        return 1;
    case JG_LOW_U: return c == 'u' && begin_hex(s);
    case JG_UTF8:
        if (c < s->lo || c > s->hi) return 0;
        if (--s->n == 0) return back_to_str(s);
        s->lo = 0x80, s->hi = 0xBF;
        return 1;
    }
    return 0;
}

/* Number states that may end here hand the byte to JG_AFTER: numbers only
 * occur inside containers, so a delimiter always follows them. */
static int end_number(jg_state *s, unsigned c) {
    set_mode(s, JG_AFTER);
    return step_after(s, c);
}

/* Counts a digit against a limit (n digits so far). */
static int count_digit(jg_state *s, int limit) {
    if (s->n >= limit) return 0;
    s->n++;
    return 1;
}

static int step_number(jg_state *s, unsigned c) {
    int d = is_digit(c), e = (c | 0x20) == 'e';
    switch (s->mode) {
    case JG_MINUS:
        if (!d) return 0;
        set_mode(s, c == '0' ? JG_ZERO : JG_INT);
        s->n = 1;
        return 1;
    case JG_INT:
        if (d) return count_digit(s, MAX_INT_DIGITS);
        /* fall through */
    case JG_ZERO:
        if (d) return 0; /* no leading zeros */
        if (c == '.') return set_mode(s, JG_DOT);
        if (e) return set_mode(s, JG_E);
        return end_number(s, c);
    case JG_DOT: return d && set_mode(s, JG_FRAC);
    case JG_FRAC:
        if (d) return 1;
        if (e) return set_mode(s, JG_E);
        return end_number(s, c);
    case JG_E:
        if (c == '+' || c == '-') return set_mode(s, JG_ESIGN);
        /* fall through */
    case JG_ESIGN:
        if (!d) return 0;
        set_mode(s, JG_EXP);
        s->n = 1;
        return 1;
    case JG_EXP:
        if (d) return count_digit(s, MAX_EXP_DIGITS);
        return end_number(s, c);
    }
    return 0;
}

static int step_literal(jg_state *s, unsigned c) {
    const char *lit = LITERALS[s->aux];
    if (c != (unsigned char)lit[s->n]) return 0;
    if (lit[++s->n] == 0) set_mode(s, JG_AFTER);
    return 1;
}

/* One byte; 0 if it cannot continue a valid prefix (s is then garbage:
 * callers step a copy). */
int jg_step(jg_state *s, unsigned c) {
    if (s->mode == JG_STR) { /* the hot case: plain text in a string */
        if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') return 1;
        return step_str(s, c);
    }
    if (s->mode <= JG_AFTER) return step_struct(s, c);
    if (s->mode <= JG_UTF8) return step_string_modes(s, c);
    if (s->mode <= JG_EXP) return step_number(s, c);
    if (s->mode == JG_LIT) return step_literal(s, c);
    return 0; /* JG_DONE: nothing may follow */
}


/* ---- the vocabulary ------------------------------------------------------- */

enum { TK_NEVER, TK_EOG, TK_TEXT }; /* token kinds */

struct json_vocab {
    int32_t n_vocab;
    uint8_t *kind;    /* TK_* per token; TK_NEVER: control tokens (no text) */
    uint8_t *text;    /* all token texts back to back */
    uint32_t *off;    /* n_vocab + 1 offsets into text */
    int32_t *eog;     /* end-of-generation ids */
    int n_eog;
    uint32_t n_nodes; /* the trie of TK_TEXT texts, in preorder: */
    uint8_t *byte;    /*   the byte on the edge into the node */
    uint16_t *depth;  /*   1 for children of the root */
    uint32_t *skip;   /*   index of the first node after the subtree */
    uint32_t *tstart; /*   node k's tokens: order[tstart[k] .. tstart[k+1]) */
    int32_t *order;   /* TK_TEXT ids sorted by text (trie order) */
    int max_depth;
    size_t words;     /* 64-bit words in a token bitmap */
    uint64_t *plain;  /* tokens that leave any plain-string state as it is */
    int n_plain;
    uint16_t *nchars; /* plain tokens: characters, as a string constraint counts them */
    int32_t *rest;    /* the other TK_TEXT tokens */
    int n_rest;
};

#define MAX_TOKEN_BYTES 65535 /* depth is 16 bits; longer tokens are refused */

/* Reads every token's text and kind. */
static void vocab_read_texts(json_vocab *v, const tokenizer *t) {
    size_t cap = 1 << 16, used = 0;
    v->text = xmalloc(cap);
    for (int32_t id = 0; id < v->n_vocab; id++) {
        int len = tok_piece(t, id, 0, NULL, 0);
        if (len < 0 || len > MAX_TOKEN_BYTES) len = 0;
        XGROW(v->text, cap, used + (size_t)len, cap);
        if (len) tok_piece(t, id, 0, (char *)v->text + used, (size_t)len);
        v->off[id] = (uint32_t)used;
        used += (size_t)len;
        v->kind[id] = tok_is_eog(t, id) ? TK_EOG : len ? TK_TEXT : TK_NEVER;
        if (v->kind[id] == TK_EOG) v->eog[v->n_eog++] = id;
    }
    v->off[v->n_vocab] = (uint32_t)used;
}

static const uint8_t *tok_bytes(const json_vocab *v, int32_t id, uint32_t *len) {
    *len = v->off[id + 1] - v->off[id];
    return v->text + v->off[id];
}

/* A trie candidate: its text and id, sorted by text. */
typedef struct tok_text {
    const uint8_t *p;
    uint32_t len;
    int32_t id;
} tok_text;

static int cmp_text(const void *a, const void *b) {
    const tok_text *x = a, *y = b;
    int c = memcmp(x->p, y->p, x->len < y->len ? x->len : y->len);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* TK_TEXT tokens sorted by text, so that the trie comes out in preorder.
 * Returns the count. */
static int32_t vocab_sorted(const json_vocab *v, tok_text *out) {
    int32_t n = 0;
    for (int32_t id = 0; id < v->n_vocab; id++) {
        if (v->kind[id] != TK_TEXT) continue;
        out[n].p = tok_bytes(v, id, &out[n].len);
        out[n++].id = id;
    }
    qsort(out, (size_t)n, sizeof *out, cmp_text);
    return n;
}

static void node_push(json_vocab *v, size_t *cap, uint8_t byte, int depth) {
    if (v->n_nodes + 1 >= *cap) {
        *cap *= 2;
        v->byte = xrealloc(v->byte, *cap);
        v->depth = xrealloc(v->depth, *cap * sizeof(uint16_t));
        v->skip = xrealloc(v->skip, *cap * sizeof(uint32_t));
        v->tstart = xrealloc(v->tstart, *cap * sizeof(uint32_t));
    }
    v->byte[v->n_nodes] = byte;
    v->depth[v->n_nodes] = (uint16_t)depth;
    v->tstart[v->n_nodes] = 0;
    v->n_nodes++;
}

/* Builds the preorder trie from sorted texts: each text adds nodes for the
 * bytes past its common prefix with the previous one. path[d] is the node
 * at depth d on the current branch; when a branch is left at depth l, its
 * nodes below l end their subtrees, so their skip is the next new node.
 * Texts come in preorder of their last node, so tokens per node are a
 * range of order[]: tstart first counts them, then holds prefix sums. */
static void vocab_build_trie(json_vocab *v, const tok_text *tt, int32_t n) {
    size_t cap = 1024;
    v->byte = xmalloc(cap);
    v->depth = xmalloc(cap * sizeof(uint16_t));
    v->skip = xmalloc(cap * sizeof(uint32_t));
    v->tstart = xmalloc(cap * sizeof(uint32_t));
    v->order = xmalloc(sizeof(int32_t) * (size_t)(n + 1));
    uint32_t *path = xmalloc(sizeof(uint32_t) * (MAX_TOKEN_BYTES + 1));
    uint32_t cur = 0; /* depth of the current branch */
    for (int32_t i = 0; i < n; i++) {
        uint32_t len = tt[i].len, l = 0;
        while (i && l < len && l < tt[i - 1].len && tt[i].p[l] == tt[i - 1].p[l]) l++;
        if (l < len) {
            for (uint32_t d = l + 1; d <= cur; d++) v->skip[path[d]] = v->n_nodes;
            for (uint32_t d = l; d < len; d++) {
                path[d + 1] = v->n_nodes;
                node_push(v, &cap, tt[i].p[d], (int)d + 1);
            }
            cur = len;
        }
        v->tstart[path[len]]++;
        v->order[i] = tt[i].id;
        if ((int)len > v->max_depth) v->max_depth = (int)len;
    }
    for (uint32_t d = 1; d <= cur; d++) v->skip[path[d]] = v->n_nodes;
    uint32_t sum = 0;
    for (uint32_t k = 0; k <= v->n_nodes; k++) {
        uint32_t c = k < v->n_nodes ? v->tstart[k] : 0;
        v->tstart[k] = sum;
        sum += c;
    }
    free(path);
}

/* A token is plain if, fed from inside a string, it never leaves the string
 * and ends where it started (no quote, complete characters and escapes).
 * Most of a vocabulary is plain, and strings are where output spends most
 * tokens: there the mask is this bitmap plus a check of the rest. */
static int token_is_plain(const uint8_t *p, uint32_t len) {
    jg_state start, s;
    memset(&start, 0, sizeof start);
    start.mode = JG_STR;
    s = start;
    for (uint32_t i = 0; i < len; i++)
        if (!jg_step(&s, p[i]) || s.mode < JG_STR || s.mode > JG_UTF8) return 0;
    return memcmp(&s, &start, sizeof s) == 0;
}

/* Characters a plain token adds to a string: bytes that start a character
 * or an escape (jsonguard_schema.c counts the same way). */
static uint16_t token_chars(const uint8_t *p, uint32_t len) {
    jg_state s;
    memset(&s, 0, sizeof s);
    s.mode = JG_STR;
    uint32_t n = 0;
    for (uint32_t i = 0; i < len; i++) {
        n += s.mode == JG_STR && (p[i] < 0x80 || p[i] >= 0xC0);
        jg_step(&s, p[i]);
    }
    return (uint16_t)(n > 65535 ? 65535 : n);
}

static void vocab_split_plain(json_vocab *v) {
    v->words = ((size_t)v->n_vocab + 63) / 64;
    v->plain = xcalloc(v->words, sizeof(uint64_t));
    v->nchars = xcalloc((size_t)v->n_vocab + 1, sizeof(uint16_t));
    v->rest = xmalloc(sizeof(int32_t) * (size_t)(v->n_vocab + 1));
    for (int32_t id = 0; id < v->n_vocab; id++) {
        if (v->kind[id] != TK_TEXT) continue;
        uint32_t len;
        const uint8_t *p = tok_bytes(v, id, &len);
        if (token_is_plain(p, len)) {
            v->plain[id >> 6] |= 1ull << (id & 63);
            v->nchars[id] = token_chars(p, len);
            v->n_plain++;
        } else {
            v->rest[v->n_rest++] = id;
        }
    }
}

json_vocab *json_vocab_new(const tokenizer *t) {
    json_vocab *v = xcalloc(1, sizeof *v);
    v->n_vocab = tok_n_vocab(t);
    size_t n = (size_t)v->n_vocab + 1;
    v->kind = xmalloc(n);
    v->off = xmalloc(sizeof(uint32_t) * n);
    v->eog = xmalloc(sizeof(int32_t) * n);
    vocab_read_texts(v, t);
    tok_text *tt = xmalloc(sizeof(tok_text) * n);
    vocab_build_trie(v, tt, vocab_sorted(v, tt));
    free(tt);
    vocab_split_plain(v);
    return v;
}

void json_vocab_free(json_vocab *v) {
    if (!v) return;
    free(v->kind);
    free(v->text);
    free(v->off);
    free(v->eog);
    free(v->byte);
    free(v->depth);
    free(v->skip);
    free(v->tstart);
    free(v->order);
    free(v->plain);
    free(v->nchars);
    free(v->rest);
    free(v);
}

/* ---- the guard ------------------------------------------------------------ */

/* Feeds p to a copy of *from; 1 if every byte passes (the result goes to
 * *to when to is not NULL). A whole copy: the committed state must have
 * no stale frames, since the mask cache compares states whole. */
static int full_feed(const json_schema *sch, const jg_full *from, const uint8_t *p, size_t n, jg_full *to) {
    jg_full s = *from;
    for (size_t i = 0; i < n; i++)
        if (!jg_schema_step(sch, &s, p[i])) return 0;
    if (to) *to = s;
    return 1;
}

#define CACHE_SLOTS 4

typedef struct mask_slot {
    jg_full key;
    int used, count;
    uint64_t *bits; /* allowed tokens, one bit each */
} mask_slot;

struct json_guard {
    const json_vocab *v;
    json_schema *schema; /* a reference, or NULL: any JSON object */
    jg_full st;
    jg_full *path; /* walk scratch: the state after each depth */
    jg_str_state *spath; /* the same inside a constrained string (walk_string) */
    mask_slot slot[CACHE_SLOTS];
    int next_slot;
};

static jg_full state_initial(void) {
    jg_full s;
    memset(&s, 0, sizeof s); /* padding too: states are compared whole */
    s.syn.mode = JG_START;
    return s;
}

json_guard *json_guard_new_schema(const json_vocab *v, json_schema *schema) {
    json_guard *g = xcalloc(1, sizeof *g);
    g->v = v;
    g->schema = json_schema_ref(schema);
    g->st = state_initial();
    if (!v) return g;
    g->path = xmalloc(sizeof(jg_full) * (size_t)(v->max_depth + 1));
    g->spath = xmalloc(sizeof(jg_str_state) * (size_t)(v->max_depth + 1));
    for (int i = 0; i < CACHE_SLOTS; i++) g->slot[i].bits = xmalloc(v->words * sizeof(uint64_t));
    return g;
}

json_guard *json_guard_new(const json_vocab *v) { return json_guard_new_schema(v, NULL); }

void json_guard_free(json_guard *g) {
    if (!g) return;
    for (int i = 0; i < CACHE_SLOTS; i++) free(g->slot[i].bits);
    json_schema_free(g->schema);
    free(g->path);
    free(g->spath);
    free(g);
}

int json_guard_done(const json_guard *g) { return g->st.syn.mode == JG_DONE; }

static void set_bit(uint64_t *bits, int32_t id) { bits[id >> 6] |= 1ull << (id & 63); }

/* Carries the state down the trie in one pass over the preorder nodes
 * from..to (a whole subtree, or the whole trie): path[d-1] is the state
 * before a depth-d node's byte. Returns the count of allowed tokens, set
 * in bits. */
static int walk_range(json_guard *g, uint64_t *bits, uint32_t from, uint32_t to) {
    const json_vocab *v = g->v;
    const uint8_t *byte = v->byte;
    const uint16_t *depth = v->depth;
    int count = 0;
    const json_schema *sch = g->schema;
    for (uint32_t i = from; i < to;) {
        jg_full *s = &g->path[depth[i]];
        jg_copy(s, &g->path[depth[i] - 1]);
        if (!(sch ? jg_schema_step(sch, s, byte[i]) : jg_step(&s->syn, byte[i]))) {
            i = v->skip[i];
            continue;
        }
        for (uint32_t k = v->tstart[i]; k < v->tstart[i + 1]; k++) set_bit(bits, v->order[k]);
        count += (int)(v->tstart[i + 1] - v->tstart[i]);
        i++;
    }
    return count;
}

/* Inside a constrained string (a pattern or format: no bitmap shortcut)
 * only the syntax, automaton state and character count change, so the
 * walk carries those 24 bytes instead of whole states; a closing quote
 * hands its subtree to walk_range with the whole state rebuilt. */
static int walk_string(json_guard *g, uint64_t *bits) {
    const json_vocab *v = g->v;
    const uint8_t *byte = v->byte;
    const uint16_t *depth = v->depth;
    jg_str_state *sp = g->spath;
    int count = 0, sc = g->st.sc;
    sp[0] = (jg_str_state){g->st.syn, g->st.q, g->st.nch};
    for (uint32_t i = 0; i < v->n_nodes;) {
        int d = depth[i];
        jg_str_state x = sp[d - 1];
        if (x.syn.mode == JG_STR && byte[i] == '"') {
            jg_full *f = &g->path[d - 1];
            jg_copy(f, &g->st);
            f->syn = x.syn, f->q = x.q, f->nch = x.nch;
            count += walk_range(g, bits, i, v->skip[i]);
            i = v->skip[i];
            continue;
        }
        if (!jg_string_step(g->schema, sc, &x, byte[i])) {
            i = v->skip[i];
            continue;
        }
        sp[d] = x;
        for (uint32_t k = v->tstart[i]; k < v->tstart[i + 1]; k++) set_bit(bits, v->order[k]);
        count += (int)(v->tstart[i + 1] - v->tstart[i]);
        i++;
    }
    return count;
}

static int walk_trie(json_guard *g, uint64_t *bits) {
    const jg_full *st = &g->st;
    if (g->schema && st->sc && !st->lit && st->syn.mode >= JG_STR && st->syn.mode <= JG_UTF8) return walk_string(g, bits);
    jg_copy(&g->path[0], &g->st);
    return walk_range(g, bits, 0, g->v->n_nodes);
}

/* Inside plain string text: the plain tokens, and each other one checked
 * byte by byte. */
/* The tokens that may leave the string or hold escapes (v->rest), each
 * checked byte by byte: set in bits, and counted. */
static int rest_mask(const json_guard *g, uint64_t *bits) {
    const json_vocab *v = g->v;
    int count = 0;
    for (int i = 0; i < v->n_rest; i++) {
        uint32_t len;
        const uint8_t *p = tok_bytes(v, v->rest[i], &len);
        if (!full_feed(g->schema, &g->st, p, len, NULL)) continue;
        set_bit(bits, v->rest[i]);
        count++;
    }
    return count;
}

static int string_mask(const json_guard *g, uint64_t *bits) {
    const json_vocab *v = g->v;
    memcpy(bits, v->plain, v->words * sizeof(uint64_t));
    return v->n_plain + rest_mask(g, bits);
}

/* Inside a string held to lengths only: the plain tokens that fit in the
 * room left, and each other one checked byte by byte. */
static int length_mask(const json_guard *g, uint64_t *bits, int64_t room) {
    const json_vocab *v = g->v;
    int count = 0;
    memset(bits, 0, v->words * sizeof(uint64_t));
    for (size_t w = 0; w < v->words; w++)
        for (uint64_t m = v->plain[w]; m; m &= m - 1) {
            int32_t id = (int32_t)(w * 64) + __builtin_ctzll(m);
            if (v->nchars[id] <= room) bits[w] |= m & -m, count++;
        }
    return count + rest_mask(g, bits);
}

/* The allowed set for the current state into slot. */
static void compute_mask(json_guard *g, mask_slot *slot) {
    const json_vocab *v = g->v;
    int64_t room = jg_length_room(g->schema, &g->st);
    if (jg_plain_string(&g->st)) {
        slot->count = string_mask(g, slot->bits);
    } else if (room >= 0) {
        slot->count = length_mask(g, slot->bits, room);
    } else {
        memset(slot->bits, 0, v->words * sizeof(uint64_t));
        if (g->st.syn.mode != JG_DONE) slot->count = walk_trie(g, slot->bits);
        else {
            for (int i = 0; i < v->n_eog; i++) set_bit(slot->bits, v->eog[i]);
            slot->count = v->n_eog;
        }
    }
    slot->key = g->st;
    slot->used = 1;
}

static mask_slot *find_mask(json_guard *g) {
    for (int i = 0; i < CACHE_SLOTS; i++)
        if (g->slot[i].used && memcmp(&g->slot[i].key, &g->st, sizeof g->st) == 0) return &g->slot[i];
    mask_slot *slot = &g->slot[g->next_slot];
    g->next_slot = (g->next_slot + 1) % CACHE_SLOTS;
    compute_mask(g, slot);
    return slot;
}

int json_guard_mask(json_guard *g, float *logits) {
    if (!g->v) return 0;
    const mask_slot *slot = find_mask(g);
    int32_t n = g->v->n_vocab;
    for (size_t w = 0; w < g->v->words; w++) {
        uint64_t off = ~slot->bits[w];
        float *row = logits + w * 64;
        if (w == g->v->words - 1 && (n & 63)) off &= (1ull << (n & 63)) - 1;
        else if (off == ~0ull) { /* a whole word refused: a plain loop vectorizes */
            for (int k = 0; k < 64; k++) row[k] = -INFINITY;
            continue;
        }
        for (; off; off &= off - 1) row[__builtin_ctzll(off)] = -INFINITY;
    }
    return slot->count;
}

int json_guard_feed(json_guard *g, const char *bytes, size_t n) {
    return full_feed(g->schema, &g->st, (const uint8_t *)bytes, n, &g->st) ? 0 : -1;
}

void json_guard_reset(json_guard *g) { g->st = state_initial(); }

int json_guard_try(const json_guard *g, const char *bytes, size_t n) {
    return full_feed(g->schema, &g->st, (const uint8_t *)bytes, n, NULL);
}

int32_t json_vocab_size(const json_vocab *v) { return v->n_vocab; }

const char *json_vocab_text(const json_vocab *v, int32_t id, size_t *len) {
    uint32_t n;
    const uint8_t *p = tok_bytes(v, id, &n);
    *len = n;
    return (const char *)p;
}

int json_vocab_is_eog(const json_vocab *v, int32_t id) { return v->kind[id] == TK_EOG; }

int json_guard_accept(json_guard *g, int32_t token) {
    const json_vocab *v = g->v;
    if (!v || token < 0 || token >= v->n_vocab) return -1;
    if (v->kind[token] == TK_EOG) return json_guard_done(g) ? 0 : -1;
    if (v->kind[token] != TK_TEXT) return -1;
    uint32_t len;
    const uint8_t *p = tok_bytes(v, token, &len);
    return json_guard_feed(g, (const char *)p, len);
}
