/* callguard.c - native tool-call formats held to the declared tools (see
 * callguard.h).
 *
 * Outside a call the state is a small byte machine: the last bytes of
 * free text (to spot the format's marker), or, after a marker or a call,
 * which continuations may follow (e.g. "</tool_call>", or "," / "]").
 * Inside a call the JSON guard, reset at each call, has the bytes. The
 * mask outside a call only has to look at tokens that could open one:
 * in free text, those holding the marker's last byte; at the start of a
 * Llama 3 reply and after a call, every token (a few steps per call). */
#include "text/callguard.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"

enum { CG_FREE, CG_CALL, CG_AFTER, CG_HNAME, CG_HHEAD }; /* H*: harmony's call header */

#define CG_MAX_WS 64 /* whitespace in a row between a call and what follows */

/* What may follow, outside free text: one of the alternatives (after
 * optional whitespace), the end of the reply when eog_ok, or anything
 * else (back to free text) when other_free. */
typedef struct cg_alt {
    const char *text;
    int next; /* CG_CALL or CG_FREE once text is complete */
} cg_alt;

typedef struct cg_set {
    cg_alt alt[2];
    int n, eog_ok, other_free;
} cg_set;

static const cg_set HERMES_AFTER = {{{"</tool_call>", CG_FREE}}, 1, 1, 0};
static const cg_set LLAMA3_AFTER = {{{";", CG_CALL}}, 1, 1, 0};
static const cg_set MISTRAL_OPEN = {{{"[", CG_CALL}}, 1, 0, 1}; /* else the name form: free */
static const cg_set MISTRAL_AFTER = {{{",", CG_CALL}, {"]", CG_FREE}}, 2, 0, 0};
static const cg_set HARMONY_AFTER = {{{"<|end|>", CG_FREE}}, 1, 1, 0}; /* or <|call|>: an end of generation */

typedef struct cg_st {
    int mode;
    int at_start;       /* Llama 3: only whitespace so far, a '{' opens a call */
    int in_think;       /* Hermes, Mistral: inside <think>..</think>, markers are text */
    const cg_set *set;  /* CG_AFTER */
    int alt;            /* the alternative being matched, -1: none yet */
    size_t matched, ws;
    char tail[16];      /* CG_FREE: the last bytes (markers are shorter) */
    size_t tail_len;
    /* harmony */
    int in_header;      /* CG_FREE: inside a message header, where a recipient opens a call */
    size_t name_len;    /* CG_HNAME: bytes of the tool's name; CG_HHEAD: of the header */
    int depth, in_str, esc, started; /* CG_CALL: the arguments' JSON nesting, strings skipped */
} cg_st;

struct call_guard {
    const json_vocab *v;
    json_guard *g;          /* the call's object; idle outside calls */
    const char *marker;     /* opens a call (or the after_marker set) in free text */
    const cg_set *after_marker; /* NULL: the marker opens the call itself */
    const cg_set *after_call;
    int thinks;             /* markers inside <think>..</think> are reasoning, not calls */
    cg_st st;
    int32_t *cand;          /* tokens holding the marker's last byte */
    int n_cand;
    int harmony;            /* harmony's state machine (h_byte) */
    int32_t *close;         /* harmony: tokens holding '}' or ']', which may end the arguments */
    int n_close;
};

static int is_ws(unsigned char b) { return b == ' ' || b == '\n' || b == '\t' || b == '\r'; }

static void enter_after(cg_st *s, const cg_set *set) {
    s->mode = CG_AFTER, s->set = set, s->alt = -1, s->matched = 0, s->ws = 0;
}

static void enter_free(cg_st *s) { s->mode = CG_FREE, s->tail_len = 0; }

static int ends_with(const cg_st *s, const char *m) {
    size_t n = strlen(m);
    return s->tail_len >= n && !memcmp(s->tail + s->tail_len - n, m, n);
}

/* One byte of free text: 0, 1 when it completed a marker that opens a
 * call, 2 when it is itself the call's first byte (Llama 3's '{'). */
static int free_byte(const call_guard *g, cg_st *s, unsigned char b) {
    if (s->at_start) {
        if (is_ws(b)) return 0;
        s->at_start = 0;
        if (b == '{') return s->mode = CG_CALL, 2;
    }
    if (s->tail_len == sizeof s->tail) memmove(s->tail, s->tail + 1, --s->tail_len);
    s->tail[s->tail_len++] = (char)b;
    if (g->thinks) { /* as the parser does (toolcall.c): reasoning may mention the marker */
        if (ends_with(s, "<think>")) s->in_think = 1;
        else if (ends_with(s, "</think>")) s->in_think = 0;
        if (s->in_think) return 0;
    }
    if (!ends_with(s, g->marker)) return 0;
    s->tail_len = 0;
    if (g->after_marker) return enter_after(s, g->after_marker), 0;
    return s->mode = CG_CALL, 1;
}

/* One byte after a marker or a call: 0, 1 (a call opens), -1 refused. */
static int after_byte(const call_guard *g, cg_st *s, unsigned char b) {
    const cg_set *set = s->set;
    if (s->alt < 0) {
        if (is_ws(b)) return ++s->ws > CG_MAX_WS ? -1 : 0;
        for (int k = 0; k < set->n && s->alt < 0; k++)
            if ((unsigned char)set->alt[k].text[0] == b) s->alt = k;
        if (s->alt < 0) {
            if (!set->other_free) return -1;
            enter_free(s);
            return free_byte(g, s, b);
        }
    }
    const cg_alt *a = &set->alt[s->alt];
    if ((unsigned char)a->text[s->matched] != b) return -1;
    if (a->text[++s->matched]) return 0;
    if (a->next == CG_CALL) return s->mode = CG_CALL, 1;
    enter_free(s);
    return 0;
}

static int byte_step(const call_guard *g, cg_st *s, unsigned char b) {
    return s->mode == CG_FREE ? free_byte(g, s, b) : after_byte(g, s, b);
}

/* ---- harmony (gpt-oss) ------------------------------------------------------
 * A call is a message header with a recipient, "to=functions.NAME", then
 * the header's rest up to <|message|>, then the arguments object, then
 * <|call|> (an end of generation) or <|end|>. The JSON guard holds the
 * call as the other formats' one-call object: it is fed {"name": " where
 * the name starts, the name's bytes, ", "arguments":  where the name ends
 * (a space or '<', allowed only where the name is complete), the
 * arguments' bytes, and the closing } when the arguments close (their
 * nesting is followed here, strings skipped). */

typedef struct h_out {
    char b[1024]; /* bytes for the JSON guard */
    size_t n;
    int reset;    /* a call opens: the guard starts over first */
} h_out;

static int h_put(h_out *o, const char *p, size_t n) {
    if (o->n + n > sizeof o->b) return -1;
    memcpy(o->b + o->n, p, n);
    o->n += n;
    return 0;
}

static void tail_push(cg_st *s, unsigned char b) {
    if (s->tail_len == sizeof s->tail) memmove(s->tail, s->tail + 1, --s->tail_len);
    s->tail[s->tail_len++] = (char)b;
}

static int h_free(cg_st *s, unsigned char b, h_out *o) {
    tail_push(s, b);
    if (ends_with(s, "<|start|>")) s->in_header = 1;
    else if (ends_with(s, "<|message|>")) s->in_header = 0;
    if (!s->in_header || !ends_with(s, "to=functions.")) return 0;
    s->mode = CG_HNAME, s->name_len = 0, o->reset = 1, o->n = 0;
    return h_put(o, "{\"name\": \"", 10);
}

/* The arguments' nesting; at their end the closing brace and what may follow. */
static int h_args(cg_st *s, unsigned char b, h_out *o) {
    if (h_put(o, (const char *)&b, 1)) return -1;
    if (s->in_str) {
        if (s->esc) s->esc = 0;
        else if (b == '\\') s->esc = 1;
        else if (b == '"') s->in_str = 0;
    } else if (b == '"') {
        s->in_str = 1;
    } else if (b == '{' || b == '[') {
        s->depth++, s->started = 1;
    } else if (b == '}' || b == ']') {
        s->depth--;
    }
    if (!s->started || s->depth > 0) return 0;
    enter_after(s, &HARMONY_AFTER);
    return h_put(o, "}", 1);
}

#define H_HEAD_MAX 64 /* header bytes after the name before <|message|> is forced */

/* How much of "<|message|>" the header's last bytes are the start of. */
static size_t message_matched(const cg_st *s) {
    static const char M[] = "<|message|>";
    for (size_t k = s->tail_len < sizeof M - 1 ? s->tail_len : sizeof M - 1; k > 0; k--)
        if (!memcmp(s->tail + s->tail_len - k, M, k)) return k;
    return 0;
}

/* One byte of harmony output: 0, or -1 when the format refuses it. */
static int h_byte(const call_guard *g, cg_st *s, unsigned char b, h_out *o) {
    switch (s->mode) {
    case CG_FREE: return h_free(s, b, o);
    case CG_HNAME:
        if (b == ' ' || b == '<') { /* the name ends: the rest of the header follows */
            if (!s->name_len || h_put(o, "\", \"arguments\": ", 16)) return -1;
            s->mode = CG_HHEAD, s->tail_len = 0, s->name_len = 0;
            tail_push(s, b);
            return 0;
        }
        if (b == '"' || b == '\\' || b < 0x20 || ++s->name_len > 256) return -1;
        return h_put(o, (const char *)&b, 1);
    case CG_HHEAD:
        tail_push(s, b);
        /* a channel and <|constrain|>json fit; past that only <|message|> may follow, so the
           header ends well inside the parser's bound and the guard never gets stuck in it */
        if (++s->name_len > H_HEAD_MAX && message_matched(s) < s->name_len - H_HEAD_MAX) return -1;
        if (ends_with(s, "<|message|>")) s->mode = CG_CALL, s->depth = s->in_str = s->esc = s->started = 0;
        return 0;
    case CG_CALL: return h_args(s, b, o);
    default: return after_byte(g, s, b);
    }
}

/* Bytes through the harmony machine, the guard's share into the guard. */
static int h_feed(call_guard *g, const char *p, size_t n) {
    h_out o;
    for (size_t i = 0; i < n;) {
        o.n = 0, o.reset = 0;
        for (; i < n && o.n < sizeof o.b / 2; i++)
            if (h_byte(g, &g->st, (unsigned char)p[i], &o)) return -1;
        if (o.reset) json_guard_reset(g->g);
        if (o.n && json_guard_feed(g->g, o.b, o.n)) return -1;
    }
    return 0;
}

/* token_ok for harmony: the machine on a copy, the guard's share tried. */
static int h_token_ok(const call_guard *g, const cg_st *from, const char *p, size_t n) {
    cg_st s = *from;
    h_out o = {.n = 0};
    for (size_t i = 0; i < n; i++)
        if (h_byte(g, &s, (unsigned char)p[i], &o)) return 0;
    if (!o.n) return 1;
    if (o.reset) json_guard_reset(g->g); /* the guard is idle until a call opens */
    return json_guard_try(g->g, o.b, o.n);
}

/* 1 if a token's text is allowed from *from (not inside a call): the
 * bytes past a call's opening must keep the call valid. */
static int token_ok(const call_guard *g, const cg_st *from, const char *p, size_t n) {
    if (g->harmony) return h_token_ok(g, from, p, n);
    cg_st s = *from;
    for (size_t i = 0; i < n; i++) {
        int r = byte_step(g, &s, (unsigned char)p[i]);
        if (r < 0) return 0;
        if (r > 0) {
            size_t k = r == 2 ? i : i + 1;
            json_guard_reset(g->g); /* idle outside calls */
            return json_guard_try(g->g, p + k, n - k);
        }
    }
    return 1;
}

/* Bytes through the machine; inside a call, through the JSON guard. */
static int feed_bytes(call_guard *g, const char *p, size_t n) {
    if (g->harmony) return h_feed(g, p, n);
    for (size_t i = 0; i < n;) {
        if (g->st.mode == CG_CALL) {
            if (json_guard_feed(g->g, p + i, 1)) return -1;
            i++;
            if (json_guard_done(g->g)) enter_after(&g->st, g->after_call);
            continue;
        }
        int r = byte_step(g, &g->st, (unsigned char)p[i]);
        if (r < 0) return -1;
        if (r > 0) json_guard_reset(g->g);
        if (r != 2) i++; /* 2: the byte is the call's first: fed above */
    }
    return 0;
}

/* The tokens holding any byte of set. */
static int32_t *tokens_with(const json_vocab *v, const char *set, int *count) {
    int32_t n = json_vocab_size(v), *out = xmalloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    *count = 0;
    for (int32_t id = 0; id < n; id++) {
        size_t len;
        const char *t = json_vocab_text(v, id, &len);
        for (const char *c = set; *c && len; c++)
            if (memchr(t, *c, len)) {
                out[(*count)++] = id;
                break;
            }
    }
    return out;
}

static void find_candidates(call_guard *g) {
    char last[2] = {g->marker[strlen(g->marker) - 1], 0};
    g->cand = tokens_with(g->v, last, &g->n_cand);
    if (g->harmony) g->close = tokens_with(g->v, "}]", &g->n_close);
}

call_guard *call_guard_new(const json_vocab *v, tc_format f, json_schema *call) {
    if (f != TC_HERMES && f != TC_LLAMA3 && f != TC_MISTRAL && f != TC_HARMONY) return NULL;
    call_guard *g = xcalloc(1, sizeof *g);
    g->v = v;
    g->g = json_guard_new_schema(v, call);
    if (f == TC_HERMES) g->marker = "<tool_call>", g->after_call = &HERMES_AFTER, g->thinks = 1;
    if (f == TC_LLAMA3) g->marker = "<|python_tag|>", g->after_call = &LLAMA3_AFTER, g->st.at_start = 1;
    if (f == TC_MISTRAL)
        g->marker = "[TOOL_CALLS]", g->after_marker = &MISTRAL_OPEN, g->after_call = &MISTRAL_AFTER, g->thinks = 1;
    if (f == TC_HARMONY) /* the reply opens with a header */
        g->marker = "to=functions.", g->after_call = &HARMONY_AFTER, g->harmony = 1, g->st.in_header = 1;
    enter_free(&g->st);
    find_candidates(g);
    return g;
}

void call_guard_free(call_guard *g) {
    if (!g) return;
    json_guard_free(g->g);
    free(g->cand);
    free(g->close);
    free(g);
}

int call_guard_feed(call_guard *g, const char *text, size_t n) { return feed_bytes(g, text, n); }

int call_guard_in_call(const call_guard *g) {
    return g->st.mode == CG_CALL || g->st.mode == CG_HNAME || g->st.mode == CG_HHEAD;
}

/* Harmony inside the arguments: the JSON guard's mask, less the tokens
 * that close the arguments and go on with anything but whitespace. */
static int mask_harmony_args(call_guard *g, float *logits) {
    int allowed = json_guard_mask(g->g, logits);
    for (int k = 0; k < g->n_close; k++) {
        size_t len;
        const char *t = json_vocab_text(g->v, g->close[k], &len);
        if (!isinf(logits[g->close[k]]) && !token_ok(g, &g->st, t, len)) logits[g->close[k]] = -INFINITY, allowed--;
    }
    return allowed;
}

/* Free text past the start: only tokens that may open a call are looked at. */
static int mask_candidates(call_guard *g, float *logits) {
    int refused = 0;
    for (int k = 0; k < g->n_cand; k++) {
        size_t len;
        const char *t = json_vocab_text(g->v, g->cand[k], &len);
        if (!token_ok(g, &g->st, t, len)) logits[g->cand[k]] = -INFINITY, refused++;
    }
    return json_vocab_size(g->v) - refused;
}

int call_guard_mask(call_guard *g, float *logits) {
    if (g->st.mode == CG_CALL) return g->harmony ? mask_harmony_args(g, logits) : json_guard_mask(g->g, logits);
    if (g->st.mode == CG_FREE && !g->st.at_start) return mask_candidates(g, logits);
    int free_text = g->st.mode == CG_FREE, count = 0;
    for (int32_t id = 0; id < json_vocab_size(g->v); id++) {
        size_t len;
        const char *t = json_vocab_text(g->v, id, &len);
        int ok = json_vocab_is_eog(g->v, id) ? free_text || (g->st.mode == CG_AFTER && g->st.set->eog_ok)
               : !len ? free_text /* control tokens: as the model likes, outside calls only */
               : token_ok(g, &g->st, t, len);
        if (ok) count++;
        else logits[id] = -INFINITY;
    }
    return count;
}

int call_guard_accept(call_guard *g, int32_t token) {
    if (token < 0 || token >= json_vocab_size(g->v)) return -1;
    if (json_vocab_is_eog(g->v, token))
        return g->st.mode == CG_FREE || (g->st.mode == CG_AFTER && g->st.set->eog_ok) ? 0 : -1;
    size_t len;
    const char *t = json_vocab_text(g->v, token, &len);
    if (!len) return g->st.mode == CG_FREE ? 0 : -1; /* control tokens: outside calls only */
    if (g->st.mode == CG_CALL && g->harmony && !token_ok(g, &g->st, t, len)) return -1; /* as the mask */
    return feed_bytes(g, t, len);
}
