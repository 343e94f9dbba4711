/* toolcall.c - the streaming tool-call parser: format state machine and
 * events (API in toolcall.h).
 *
 * Input is appended to `in`; a step function for the current mode consumes
 * what it can decide and leaves the rest (a possible marker prefix, spaces
 * that may sit before a call) for the next feed. JSON documents go byte by
 * byte through the scanner of toolcall_json.c; its callbacks give each open
 * container a role (call object, arguments, list of calls, ...) and turn
 * keys and values into events.
 *
 * Whitespace next to a tool call (before it, between calls, after the last
 * one) is not content: it is held while undecided and dropped. All other
 * text passes through byte for byte.
 *
 * HARMONY (gpt-oss) is a run of messages, each a header up to
 * <|message|> (channel, recipient, constraint) and a body up to <|end|>,
 * <|call|>, <|return|> or the next <|start|>: analysis bodies are
 * reasoning events, final and commentary bodies content, and a body with
 * a recipient (to=functions.NAME) is that call's arguments JSON. Output
 * that does not open with a header is plain content.
 *
 * Not handled: XML-style calls (Qwen3-Coder <function=...>), Llama 3.1
 * built-in python calls after <|python_tag|> (they stay content), calls
 * inside <think> (ignored on purpose: reasoning may mention the marker). */
#include "text/toolcall.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "base/utf8.h"
#include "text/toolcall_int.h"
#include "text/jsonload.h"

enum mode {
    M_CONTENT, /* text; look for the format's markers (none when plain) */
    M_START,   /* LLAMA3/GENERIC: leading spaces; is the reply JSON? */
    M_DOC,     /* inside a JSON document */
    M_HCLOSE,  /* HERMES: after the JSON, expect </tool_call> */
    M_LAFTER,  /* LLAMA3: after a call: ';', another call, or text */
    M_MNAME,   /* MISTRAL: after [TOOL_CALLS]: '[' array or name[ARGS] */
    M_MCALLID, /* MISTRAL: name[CALL_ID]id, waiting for [ARGS] */
    M_FCLOSE,  /* LLAMA3/GENERIC: the ``` after a fenced JSON reply */
    M_HHEAD,   /* HARMONY: a message header, up to <|message|> */
    M_HBODY,   /* HARMONY: a message body (reasoning or content) */
    M_HARGS,   /* HARMONY: a call's body, before its JSON */
    M_HEND,    /* HARMONY: after a call's JSON: <|call|>, <|end|> or the end */
};

/* What the root of a JSON document must be. */
enum root { R_CALL, R_MAYBE_CALL, R_GENERIC, R_CALL_ARRAY, R_ARGS };

/* Role of an open container, by depth. */
enum role { RO_SKIP, RO_CALL, RO_FUNC, RO_CALLS, RO_ARGS, RO_UNDECIDED, RO_GROOT };

enum args_state { A_NONE, A_STREAM, A_STRING, A_NULL, A_DONE };

/* A callback code: the document is not a call after all; release it. */
#define STOP_PASSTHROUGH 2

typedef struct ev_rec {
    tc_event_kind kind;
    int index;
    size_t off, len; /* in evtext */
} ev_rec;

struct tc_parser {
    tc_format fmt;
    enum mode mode;
    int plain;        /* no markers any more: everything is content */
    int in_think;     /* inside <think>...</think>: markers are ignored */
    int after_struct; /* a call (or JSON reply) was parsed: spaces around are dropped */
    int skip_ws;      /* drop spaces at the start of the next content */
    int python_tag;   /* LLAMA3: <|python_tag|> seen at the start */
    int fenced;       /* the JSON reply opened with ``` or ```json */
    int failed, finished;
    strata_err err;
    tc_event_kind hkind; /* HARMONY: what the current body's text is */

    tc_buf in;   /* input not consumed yet, from pos */
    size_t pos;
    tc_buf lead; /* consumed in M_START but released only if not a call */

    tc_jscan js;
    enum root root;
    int role[TC_JSON_MAX_DEPTH + 2];

    /* the open call (cur >= 0) */
    int cur, n_started, begun, has_name;
    enum args_state args_state;
    int args_on;      /* argument bytes are being copied from the JSON */
    tc_buf name, args, mname;
    size_t args_sent; /* bytes of args already emitted */

    /* GENERIC: the "content" string being streamed */
    int content_on;
    size_t content_from;

    /* finished calls, for tc_calls */
    char **names, **argv;
    int n_calls, cap_calls;

    /* events of the current feed; carry holds a cut UTF-8 tail */
    ev_rec *recs;
    int n_recs, cap_recs;
    tc_buf evtext, outtext, carry;
    tc_event_kind carry_kind;
    int carry_index;
    tc_event *out;
    int cap_out;
};

static const char HERMES_OPEN[] = "<tool_call>";
static const char HERMES_CLOSE[] = "</tool_call>";
static const char MISTRAL_OPEN[] = "[TOOL_CALLS]";
static const char THINK_OPEN[] = "<think>";
static const char THINK_CLOSE[] = "</think>";
static const char PYTHON_TAG[] = "<|python_tag|>";
static const char FENCE[] = "```";

/* Harmony's markers (special tokens; the tokenizer prints these, as
 * llama.cpp does: <|return|> and <|call|> end generation and print nothing). */
static const char H_CHANNEL[] = "<|channel|>";
static const char H_MESSAGE[] = "<|message|>";
static const char H_START[] = "<|start|>";
static const char *const H_BODY_ENDS[] = {"<|end|>", "<|call|>", "<|return|>", "<|start|>", NULL};

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static int bad(tc_parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(tc_parser *p, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    strata_vfmt(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return strata_errf(&p->err, STRATA_EFORMAT, "tool call (%s format): %s; turn ended",
                       tc_format_name(p->fmt), msg);
}

/* ---- format detection ---- */

tc_format tc_detect(const char *tmpl) {
    if (!tmpl) return TC_GENERIC;
    if (strstr(tmpl, H_CHANNEL) && strstr(tmpl, H_MESSAGE)) return TC_HARMONY;
    if (strstr(tmpl, HERMES_OPEN)) return TC_HERMES;
    if (strstr(tmpl, MISTRAL_OPEN)) return TC_MISTRAL;
    if (strstr(tmpl, PYTHON_TAG) || strstr(tmpl, "ipython")) return TC_LLAMA3;
    return TC_GENERIC;
}

const char *tc_format_name(tc_format f) {
    switch (f) {
    case TC_NONE: return "none";
    case TC_HERMES: return "hermes";
    case TC_LLAMA3: return "llama3";
    case TC_MISTRAL: return "mistral";
    case TC_GENERIC: return "generic";
    case TC_HARMONY: return "harmony";
    }
    return "?";
}

/* ---- events ---- */

static void ev_push(tc_parser *p, tc_event_kind kind, int index, const char *s, size_t n) {
    ev_rec *last = p->n_recs ? &p->recs[p->n_recs - 1] : NULL;
    int joins = kind == TC_EV_TEXT || kind == TC_EV_CALL_ARGS || kind == TC_EV_REASONING;
    if (joins && n == 0) return;
    if (joins && last && last->kind == kind && last->index == index) {
        tc_buf_add(&p->evtext, s, n);
        last->len += n;
        return;
    }
    XGROW(p->recs, p->cap_recs, p->n_recs + 1, 16);
    p->recs[p->n_recs++] = (ev_rec){kind, index, p->evtext.len, n};
    tc_buf_add(&p->evtext, s, n);
}

/* Every event goes through here so that a held UTF-8 tail keeps its place. */
static void emit(tc_parser *p, tc_event_kind kind, int index, const char *s, size_t n) {
    if (p->carry.len) {
        ev_push(p, p->carry_kind, p->carry_index, p->carry.p, p->carry.len);
        tc_buf_clear(&p->carry);
    }
    ev_push(p, kind, index, s, n);
}

static void emit_text(tc_parser *p, const char *s, size_t n) { emit(p, TC_EV_TEXT, -1, s, n); }

/* A text or argument event must not end inside a UTF-8 character (the
 * server puts it in a JSON string): keep a cut tail for the next feed. */
static void hold_utf8_tail(tc_parser *p) {
    if (!p->n_recs) return;
    ev_rec *r = &p->recs[p->n_recs - 1];
    if (r->kind != TC_EV_TEXT && r->kind != TC_EV_CALL_ARGS && r->kind != TC_EV_REASONING) return;
    size_t keep = utf8_cut(p->evtext.p + r->off, r->len);
    if (keep == r->len) return;
    tc_buf_add(&p->carry, p->evtext.p + r->off + keep, r->len - keep);
    p->carry_kind = r->kind;
    p->carry_index = r->index;
    p->evtext.len -= r->len - keep;
    r->len = keep;
    if (keep == 0) p->n_recs--;
}

/* Copies the records into the public array, each text NUL-terminated. */
static void build_events(tc_parser *p) {
    if (p->n_recs > p->cap_out) {
        p->cap_out = p->n_recs;
        p->out = xrealloc(p->out, (size_t)p->cap_out * sizeof *p->out);
    }
    tc_buf_clear(&p->outtext);
    size_t *offs = xmalloc((size_t)(p->n_recs ? p->n_recs : 1) * sizeof *offs);
    for (int i = 0; i < p->n_recs; i++) {
        offs[i] = p->outtext.len;
        tc_buf_add(&p->outtext, p->evtext.p + p->recs[i].off, p->recs[i].len);
        tc_buf_addc(&p->outtext, '\0');
    }
    for (int i = 0; i < p->n_recs; i++)
        p->out[i] = (tc_event){p->recs[i].kind, p->recs[i].index, p->outtext.p + offs[i],
                               p->recs[i].len};
    free(offs);
}

/* ---- calls ---- */

static void call_open(tc_parser *p) {
    p->cur = p->n_started++;
    p->begun = p->has_name = 0;
    p->args_state = A_NONE;
    p->args_on = 0;
    p->args_sent = 0;
    tc_buf_clear(&p->name);
    tc_buf_clear(&p->args);
}

/* Emits argument bytes not sent yet; before the name they wait. */
static void args_flush(tc_parser *p) {
    if (p->cur < 0 || !p->begun || p->args_sent >= p->args.len) return;
    emit(p, TC_EV_CALL_ARGS, p->cur, p->args.p + p->args_sent, p->args.len - p->args_sent);
    p->args_sent = p->args.len;
}

static int call_name(tc_parser *p, const char *s, size_t n) {
    if (p->has_name) return bad(p, "call %d has two names", p->cur);
    if (n == 0 || memchr(s, '\0', n)) return bad(p, "call %d has an empty name", p->cur);
    tc_buf_clear(&p->name);
    tc_buf_add(&p->name, s, n);
    p->has_name = p->begun = 1;
    emit(p, TC_EV_CALL_BEGIN, p->cur, p->name.p, p->name.len);
    args_flush(p);
    return 0;
}

/* The complete arguments must be one JSON object (jansson decides). */
static int args_done(tc_parser *p) {
    json_error_t je;
    json_t *v = json_load_lenient(p->args.p ? p->args.p : "", p->args.len, JSON_ALLOW_NUL, &je, NULL);
    int ok = v && json_is_object(v);
    json_decref(v);
    p->args_state = A_DONE;
    p->args_on = 0;
    if (!ok) return bad(p, "arguments of call %d are not a JSON object (%s)", p->cur,
                        v ? "not an object" : je.text);
    args_flush(p);
    return 0;
}

/* Arguments written as a JSON string that holds the object. */
static int args_from_string(tc_parser *p, const char *raw, size_t n) {
    tc_buf dec = {0};
    size_t used;
    if (tc_json_unescape(raw, n, 1, &dec, &used) < 0) {
        tc_buf_free(&dec);
        return bad(p, "arguments string of call %d has a bad escape", p->cur);
    }
    tc_buf_clear(&p->args);
    tc_json_compact(dec.p ? dec.p : "", dec.len, &p->args);
    tc_buf_free(&dec);
    if (p->args.len == 0) tc_buf_add(&p->args, "{}", 2);
    return args_done(p);
}

static void store_call(tc_parser *p) {
    if (p->n_calls == p->cap_calls) {
        p->cap_calls = mem_grown_cap(p->cap_calls, p->n_calls + 1, 4);
        p->names = xrealloc(p->names, (size_t)p->cap_calls * sizeof *p->names);
        p->argv = xrealloc(p->argv, (size_t)p->cap_calls * sizeof *p->argv);
    }
    p->names[p->n_calls] = xstrdup(p->name.p);
    p->argv[p->n_calls] = xstrdup(p->args.p);
    p->n_calls++;
}

static int call_close(tc_parser *p) {
    if (!p->has_name) return bad(p, "call %d has no \"name\"", p->cur);
    if (p->args_state == A_NONE) {
        tc_buf_add(&p->args, "{}", 2);
        p->args_state = A_DONE;
    }
    args_flush(p);
    emit(p, TC_EV_CALL_END, p->cur, "", 0);
    store_call(p);
    p->cur = -1;
    p->after_struct = p->skip_ws = 1;
    return 0;
}

/* ---- JSON callbacks: roles by depth ---- */

static int key_in(const tc_jscan *js, int d, const char *const *names) {
    for (; *names; names++)
        if (tc_jscan_key_is(js, d, *names)) return 1;
    return 0;
}

static const char *const CALL_KEYS[] = {"name", "arguments", "parameters", "function", NULL};
static const char *const ARGS_KEYS[] = {"arguments", "parameters", NULL};
static const char *const GENERIC_KEYS[] = {"tool_calls", "tool_call", "content", NULL};
static const char *const NEUTRAL_KEYS[] = {"type", "id", NULL};

/* LLAMA3/GENERIC roots are undecided until a key says what they are;
 * "type" and "id" say nothing, any other unknown key means plain JSON. */
static int cb_key(void *ctx, int d, size_t s, size_t e) {
    tc_parser *p = ctx;
    if (p->role[d] != RO_UNDECIDED || key_in(&p->js, d, NEUTRAL_KEYS)) return 0;
    if (key_in(&p->js, d, CALL_KEYS)) {
        p->role[d] = RO_CALL;
        call_open(p);
        return 0;
    }
    if (p->root == R_GENERIC && key_in(&p->js, d, GENERIC_KEYS)) {
        p->role[d] = RO_GROOT;
        return 0;
    }
    return STOP_PASSTHROUGH;
}

static int root_begin(tc_parser *p, char c) {
    switch (p->root) {
    case R_CALL:
        if (c == '[') {
            p->role[1] = RO_CALLS; /* several calls in one tag: tolerated */
        } else {
            call_open(p);
            p->role[1] = RO_CALL;
        }
        return 0;
    case R_MAYBE_CALL:
    case R_GENERIC:
        p->role[1] = c == '{' ? RO_UNDECIDED : RO_SKIP;
        return 0;
    case R_CALL_ARRAY:
        if (c != '[') return bad(p, "expected a JSON array after [TOOL_CALLS]");
        p->role[1] = RO_CALLS;
        return 0;
    case R_ARGS:
        if (c != '{') return bad(p, "arguments after [ARGS] must be a JSON object");
        p->role[1] = RO_ARGS;
        p->args_state = A_STREAM;
        p->args_on = 1;
        tc_buf_addc(&p->args, c);
        return 0;
    }
    return 0;
}

static int call_value_begin(tc_parser *p, int d, char c, int *child) {
    if (tc_jscan_key_is(&p->js, d, "name")) {
        if (c != '"') return bad(p, "the name of call %d is not a string", p->cur);
    } else if (key_in(&p->js, d, ARGS_KEYS)) {
        if (p->args_state != A_NONE) return bad(p, "call %d has two argument objects", p->cur);
        if (c == '{') {
            p->args_state = A_STREAM;
            p->args_on = 1;
            tc_buf_addc(&p->args, c); /* the scanner's later bytes are copied by the driver */
            *child = RO_ARGS;
        } else if (c == '"') {
            p->args_state = A_STRING;
        } else if (c == 'n') {
            p->args_state = A_NULL;
        } else {
            return bad(p, "the arguments of call %d are not a JSON object", p->cur);
        }
    } else if (tc_jscan_key_is(&p->js, d, "function") && p->role[d] == RO_CALL && c == '{') {
        *child = RO_FUNC; /* OpenAI shape: {"type":"function","function":{...}} */
    }
    return 0;
}

static int generic_value_begin(tc_parser *p, int d, char c, size_t at, int *child) {
    if (tc_jscan_key_is(&p->js, d, "tool_calls")) {
        if (c == '[') *child = RO_CALLS;
        else if (c != 'n') return bad(p, "\"tool_calls\" is not an array");
    } else if (tc_jscan_key_is(&p->js, d, "tool_call")) {
        if (c != '{') return bad(p, "\"tool_call\" is not an object");
        call_open(p);
        *child = RO_CALL;
    } else if (tc_jscan_key_is(&p->js, d, "content")) {
        if (c == '"') {
            p->content_on = 1;
            p->content_from = at + 1;
        } else if (c != 'n') {
            return bad(p, "\"content\" is not a string");
        }
    }
    return 0;
}

static int cb_begin(void *ctx, int d, char c, size_t at) {
    tc_parser *p = ctx;
    if (d == 0) return root_begin(p, c);
    int child = RO_SKIP, rc = 0;
    switch (p->role[d]) {
    case RO_CALLS:
        if (c != '{') return bad(p, "a tool call in the list is not a JSON object");
        call_open(p);
        child = RO_CALL;
        break;
    case RO_CALL:
    case RO_FUNC:
        rc = call_value_begin(p, d, c, &child);
        break;
    case RO_GROOT:
        rc = generic_value_begin(p, d, c, at, &child);
        break;
    default:
        break;
    }
    if (c == '{' || c == '[') p->role[d + 1] = child;
    return rc;
}

/* Streams the decodable part of the GENERIC "content" string so far. */
static int content_flush(tc_parser *p, size_t end, int final) {
    if (!p->content_on || end <= p->content_from) return 0;
    tc_buf dec = {0};
    size_t used = 0;
    const char *s = p->js.doc.p + p->content_from;
    int rc = tc_json_unescape(s, end - p->content_from, final, &dec, &used);
    if (rc == 0) {
        emit_text(p, dec.p, dec.len);
        p->content_from += used;
    }
    tc_buf_free(&dec);
    return rc < 0 ? bad(p, "bad escape in \"content\"") : 0;
}

/* A scalar value under a call's key ended: name or string/null args. */
static int call_value_end(tc_parser *p, int d, size_t s, size_t e) {
    const char *raw = p->js.doc.p + s;
    if (tc_jscan_key_is(&p->js, d, "name") && raw[0] == '"') {
        tc_buf dec = {0};
        size_t used;
        int rc = tc_json_unescape(raw + 1, e - s - 2, 1, &dec, &used);
        rc = rc < 0 ? bad(p, "bad escape in the name of call %d", p->cur)
                    : call_name(p, dec.p ? dec.p : "", dec.len);
        tc_buf_free(&dec);
        return rc;
    }
    if (!key_in(&p->js, d, ARGS_KEYS)) return 0;
    if (p->args_state == A_STRING) return args_from_string(p, raw + 1, e - s - 2);
    if (p->args_state == A_NULL) {
        if (e - s != 4 || memcmp(raw, "null", 4))
            return bad(p, "the arguments of call %d are not a JSON object", p->cur);
        tc_buf_add(&p->args, "{}", 2);
        return args_done(p);
    }
    return 0;
}

static int cb_end(void *ctx, int d, size_t s, size_t e) {
    tc_parser *p = ctx;
    char c = p->js.doc.p[s];
    int own = c == '{' || c == '[' ? p->role[d + 1] : -1;
    if (own == RO_CALL) return call_close(p);
    if (own == RO_UNDECIDED) return STOP_PASSTHROUGH;
    if (own == RO_ARGS) {
        int rc = args_done(p);
        return rc ? rc : d == 0 ? call_close(p) : 0;
    }
    if (d == 0) return 0;
    if (p->role[d] == RO_CALL || p->role[d] == RO_FUNC) return call_value_end(p, d, s, e);
    if (p->role[d] == RO_GROOT && p->content_on && c == '"') {
        int rc = content_flush(p, e - 1, 1);
        p->content_on = 0;
        return rc;
    }
    return 0;
}

static void doc_begin(tc_parser *p, enum root root) {
    static const tc_jscan_cb cb = {NULL, cb_key, cb_begin, cb_end};
    tc_jscan_cb mine = cb;
    mine.ctx = p;
    tc_jscan_reset(&p->js, &mine);
    p->root = root;
    p->content_on = 0;
    p->mode = M_DOC;
}

/* ---- text steps: each returns 1 after progress, 0 when it needs more
 * input (or is done at the end), or a negative error ---- */

/* Length of the longest suffix of s[0..n) that is a proper prefix of m. */
static size_t partial_suffix(const char *s, size_t n, const char *m) {
    size_t ml = strlen(m);
    for (size_t k = ml - 1 < n ? ml - 1 : n; k > 0; k--)
        if (!memcmp(s + n - k, m, k)) return k;
    return 0;
}

/* 1 if s[0..n) is m or starts with it, 0 if it differs, -1 if it is a
 * proper prefix of m (undecided). */
static int starts_with(const char *s, size_t n, const char *m) {
    size_t ml = strlen(m);
    if (memcmp(s, m, n < ml ? n : ml)) return 0;
    return n >= ml ? 1 : -1;
}

/* The marker that matters now in M_CONTENT, or NULL. */
static const char *call_marker(const tc_parser *p) {
    if (p->plain || p->in_think) return NULL;
    return p->fmt == TC_HERMES ? HERMES_OPEN : p->fmt == TC_MISTRAL ? MISTRAL_OPEN : NULL;
}

static const char *think_marker(const tc_parser *p) {
    if (p->in_think) return THINK_CLOSE;
    return p->plain || p->fmt == TC_NONE ? NULL : THINK_OPEN;
}

static size_t find(const char *s, size_t n, const char *m) {
    if (!m) return n;
    const char *f = memmem(s, n, m, strlen(m));
    return f ? (size_t)(f - s) : n;
}

static void enter_call(tc_parser *p) {
    if (p->fmt == TC_HERMES) {
        doc_begin(p, R_CALL);
    } else {
        tc_buf_clear(&p->mname);
        p->mode = M_MNAME;
    }
}

/* A marker was found at i: text before it, then the marker's effect. */
static int content_marker(tc_parser *p, const char *s, size_t i, const char *m) {
    size_t ml = strlen(m);
    if (m == HERMES_OPEN || m == MISTRAL_OPEN) {
        size_t t = i;
        while (t > 0 && is_ws(s[t - 1])) t--; /* spaces before a call are not content */
        emit_text(p, s, t);
        p->pos += i + ml;
        enter_call(p);
        return 1;
    }
    emit_text(p, s, i + ml); /* think tags are content */
    p->pos += i + ml;
    p->in_think = m == THINK_OPEN;
    if (!p->in_think && (p->fmt == TC_LLAMA3 || p->fmt == TC_GENERIC)) p->mode = M_START;
    return 1;
}

static int step_content(tc_parser *p, int final) {
    const char *s = p->in.p + p->pos;
    size_t n = p->in.len - p->pos;
    if (p->skip_ws) {
        size_t k = 0;
        while (k < n && is_ws(s[k])) k++;
        p->pos += k, s += k, n -= k;
        if (n) p->skip_ws = 0;
    }
    const char *cm = call_marker(p), *tm = think_marker(p);
    size_t ci = find(s, n, cm), ti = find(s, n, tm);
    if (ci < n || ti < n) return content_marker(p, s, ci <= ti ? ci : ti, ci <= ti ? cm : tm);
    size_t keep = 0;
    if (!final) {
        size_t kc = cm ? partial_suffix(s, n, cm) : 0, kt = tm ? partial_suffix(s, n, tm) : 0;
        keep = kc > kt ? kc : kt;
        /* Spaces that may turn out to precede a call are held too. */
        if (cm || p->after_struct)
            while (keep < n && is_ws(s[n - keep - 1])) keep++;
    } else if (p->after_struct) {
        while (keep < n && is_ws(s[n - keep - 1])) keep++;
        p->pos += keep; /* trailing spaces after the calls: dropped */
        n -= keep, keep = 0;
    }
    emit_text(p, s, n - keep);
    p->pos += n - keep;
    return 0;
}

/* The reply is not JSON: release what M_START held and go plain. */
static int go_plain(tc_parser *p) {
    emit_text(p, p->lead.p, p->lead.len);
    tc_buf_clear(&p->lead);
    p->plain = 1;
    p->mode = M_CONTENT;
    return 1;
}

/* A '<' at the start: <think> or (LLAMA3) <|python_tag|>, else text. */
static int start_tag(tc_parser *p, const char *s, size_t n, size_t k, int final) {
    int th = starts_with(s + k, n - k, THINK_OPEN);
    int py = p->fmt == TC_LLAMA3 && !p->python_tag ? starts_with(s + k, n - k, PYTHON_TAG) : 0;
    if ((th < 0 || py < 0) && !final) return 0;
    if (th > 0) {
        emit_text(p, p->lead.p, p->lead.len);
        tc_buf_clear(&p->lead);
        emit_text(p, s, k + strlen(THINK_OPEN));
        p->pos += k + strlen(THINK_OPEN);
        p->in_think = 1;
        p->mode = M_CONTENT;
        return 1;
    }
    if (py > 0) {
        tc_buf_add(&p->lead, s, k + strlen(PYTHON_TAG));
        p->pos += k + strlen(PYTHON_TAG);
        p->python_tag = 1;
        return 1;
    }
    return go_plain(p);
}

/* Small models often wrap the JSON reply in a Markdown fence: ``` or
 * ```json, then a newline. The fence is held like leading spaces. */
static int start_fence(tc_parser *p, const char *s, size_t n, size_t k, int final) {
    size_t i = k;
    if (starts_with(s + i, n - i, FENCE) < 0) return final ? go_plain(p) : 0;
    if (starts_with(s + i, n - i, FENCE) == 0) return go_plain(p);
    i += strlen(FENCE);
    int lang = starts_with(s + i, n - i, "json");
    if (lang < 0 && !final) return 0;
    if (lang > 0) i += 4;
    if (i == n) return final ? go_plain(p) : 0;
    if (s[i] != '\n' && s[i] != '\r') return go_plain(p);
    tc_buf_add(&p->lead, s, i);
    p->pos += i;
    p->fenced = 1;
    return 1;
}

static int step_start(tc_parser *p, int final) {
    const char *s = p->in.p + p->pos;
    size_t n = p->in.len - p->pos, k = 0;
    while (k < n && is_ws(s[k])) k++;
    if (k == n) return final ? go_plain(p) : 0;
    if (s[k] == '{') {
        tc_buf_add(&p->lead, s, k);
        p->pos += k;
        doc_begin(p, p->fmt == TC_LLAMA3 ? R_MAYBE_CALL : R_GENERIC);
        return 1;
    }
    if (s[k] == '<') return start_tag(p, s, n, k, final);
    if (s[k] == '`' && !p->fenced) return start_fence(p, s, n, k, final);
    return go_plain(p);
}

/* ---- JSON document step ---- */

/* An undecided root turned out to be ordinary JSON: it is content. */
static int doc_passthrough(tc_parser *p) {
    tc_buf_add(&p->lead, p->js.doc.p, p->js.doc.len);
    return go_plain(p);
}

static int doc_done(tc_parser *p) {
    tc_buf_clear(&p->lead);
    p->after_struct = p->skip_ws = 1;
    if (p->fmt == TC_HERMES) p->mode = M_HCLOSE;
    else if (p->fmt == TC_HARMONY) p->mode = M_HEND;
    else if (p->fenced) p->mode = M_FCLOSE;
    else if (p->fmt == TC_LLAMA3) p->mode = M_LAFTER;
    else p->mode = M_CONTENT;
    if (p->fmt == TC_GENERIC) p->plain = 1; /* one JSON reply; the rest is text */
    return 1;
}

/* The root may still turn out to be plain JSON (LLAMA3, GENERIC). */
static int undecided(const tc_parser *p) {
    return p->js.depth >= 1 && p->role[1] == RO_UNDECIDED;
}

static int doc_unterminated(tc_parser *p) {
    if (undecided(p)) return doc_passthrough(p);
    if (p->fmt == TC_HERMES) return bad(p, "unterminated <tool_call>: the output ended inside its JSON");
    return bad(p, "the output ended inside the tool call JSON");
}

static int step_doc(tc_parser *p, int final) {
    while (p->pos < p->in.len) {
        unsigned char c = (unsigned char)p->in.p[p->pos];
        /* Argument bytes are copied before the scanner sees them, so an
         * arguments object is complete when its end callback runs. */
        if (p->args_on && !tc_jscan_insignificant(&p->js, c))
            tc_json_put(&p->args, c, tc_jscan_in_string(&p->js));
        int rc = tc_jscan_byte(&p->js, c);
        p->pos++;
        if (rc == 0) continue;
        if (rc == TC_JSCAN_DONE) return doc_done(p);
        if (rc == STOP_PASSTHROUGH) return doc_passthrough(p);
        if (rc == TC_JSCAN_ERR && undecided(p)) return doc_passthrough(p); /* "{not json" */
        if (rc == TC_JSCAN_ERR)
            return bad(p, "invalid JSON at byte %zu of the call: %s", p->js.doc.len - 1, p->js.why);
        return rc;
    }
    return final ? doc_unterminated(p) : 0;
}

/* ---- steps after a call ---- */

static size_t skip_ws_in(tc_parser *p, const char *extra) {
    while (p->pos < p->in.len &&
           (is_ws(p->in.p[p->pos]) || (extra && strchr(extra, p->in.p[p->pos]))))
        p->pos++;
    return p->in.len - p->pos;
}

/* HERMES: </tool_call> after the JSON. Missing at the very end, or
 * replaced by the next <tool_call>, is forgiven: the JSON was complete. */
static int step_hclose(tc_parser *p, int final) {
    size_t n = skip_ws_in(p, NULL);
    const char *s = p->in.p + p->pos;
    if (n == 0) {
        if (final) p->mode = M_CONTENT;
        return final;
    }
    int m = starts_with(s, n, HERMES_CLOSE);
    if (m > 0) p->pos += strlen(HERMES_CLOSE);
    if (m > 0 || starts_with(s, n, HERMES_OPEN) > 0) {
        p->mode = M_CONTENT;
        return 1;
    }
    if (m < 0 || starts_with(s, n, HERMES_OPEN) < 0) {
        if (!final) return 0;
        p->pos = p->in.len;
        p->mode = M_CONTENT;
        return 1;
    }
    return bad(p, "expected </tool_call> after the call's JSON");
}

/* LLAMA3: more calls may follow, separated by ';' or newlines. */
static int step_lafter(tc_parser *p, int final) {
    if (skip_ws_in(p, ";") == 0) return 0;
    if (p->in.p[p->pos] == '{') {
        doc_begin(p, R_CALL);
        return 1;
    }
    p->plain = 1;
    p->mode = M_CONTENT;
    return 1;
}

/* The closing fence of a fenced JSON reply is not content either. */
static int step_fclose(tc_parser *p, int final) {
    size_t n = skip_ws_in(p, NULL);
    int m = n ? starts_with(p->in.p + p->pos, n, FENCE) : -1;
    if (m < 0 && !final) return 0;
    if (m > 0) p->pos += strlen(FENCE);
    p->fenced = 0;
    p->mode = p->fmt == TC_LLAMA3 ? M_LAFTER : M_CONTENT;
    return 1;
}

static int name_char_ok(unsigned char c) {
    return c > 0x20 && c != 0x7f && !strchr("[]{}\"'", c);
}

/* MISTRAL: the name was complete at [ARGS]; the arguments JSON follows. */
static int mistral_args(tc_parser *p) {
    call_open(p);
    int rc = call_name(p, p->mname.p, p->mname.len);
    if (rc) return rc;
    doc_begin(p, R_ARGS);
    return 1;
}

static int step_mname(tc_parser *p, int final) {
    size_t n = p->mname.len ? p->in.len - p->pos : skip_ws_in(p, NULL);
    const char *s = p->in.p + p->pos;
    if (n == 0) return final ? bad(p, "nothing after [TOOL_CALLS]") : 0;
    if (p->mname.len == 0 && s[0] == '[') {
        doc_begin(p, R_CALL_ARRAY);
        return 1;
    }
    size_t i = 0;
    while (i < n && s[i] != '[') {
        if (!name_char_ok((unsigned char)s[i]) || p->mname.len + i >= 256)
            return bad(p, "bad tool name after [TOOL_CALLS]");
        i++;
    }
    tc_buf_add(&p->mname, s, i);
    p->pos += i, s += i, n -= i;
    if (n == 0) return final ? bad(p, "no [ARGS] after the tool name") : 0;
    int a = starts_with(s, n, "[ARGS]"), c = starts_with(s, n, "[CALL_ID]");
    if (a > 0) {
        p->pos += strlen("[ARGS]");
        return p->mname.len ? mistral_args(p) : bad(p, "empty tool name before [ARGS]");
    }
    if (c > 0) {
        p->pos += strlen("[CALL_ID]");
        p->mode = M_MCALLID;
        return 1;
    }
    if ((a < 0 || c < 0) && !final) return 0;
    return bad(p, "expected [ARGS] after the tool name");
}

static int step_mcallid(tc_parser *p, int final) {
    const char *s = p->in.p + p->pos;
    size_t n = p->in.len - p->pos, i = find(s, n, "[ARGS]");
    if (i == n) return final ? bad(p, "no [ARGS] after [CALL_ID]") : 0;
    p->pos += i + strlen("[ARGS]");
    if (!p->mname.len) return bad(p, "empty tool name before [CALL_ID]");
    return mistral_args(p);
}

/* ---- HARMONY ---- */

/* The word after key in the header h[0..n) (to=NAME, <|channel|>NAME):
 * up to a space or '<'. Sets *w, returns its length (0: absent). */
static size_t header_word(const char *h, size_t n, const char *key, const char **w) {
    const char *k = memmem(h, n, key, strlen(key));
    if (!k) return 0;
    *w = k + strlen(key);
    size_t len = 0;
    while (*w + len < h + n && !is_ws((*w)[len]) && (*w)[len] != '<') len++;
    return len;
}

/* A whole header (before <|message|>): the channel says what the body
 * is; a recipient makes it a call (functions.NAME -> NAME; any other
 * recipient, a built-in tool, keeps its whole name). */
static int harmony_header(tc_parser *p, const char *h, size_t n) {
    const char *to = NULL, *ch = NULL;
    size_t tl = header_word(h, n, "to=", &to), cl = header_word(h, n, H_CHANNEL, &ch);
    if (tl) {
        if (tl > 10 && !memcmp(to, "functions.", 10)) to += 10, tl -= 10;
        call_open(p);
        int rc = call_name(p, to, tl);
        if (rc) return rc;
        p->mode = M_HARGS;
        return 1;
    }
    p->hkind = cl == 8 && !memcmp(ch, "analysis", 8) ? TC_EV_REASONING : TC_EV_TEXT;
    p->mode = M_HBODY;
    return 1;
}

/* Could s[0..n) (spaces skipped) still open a header? "<|..." or "to=". */
static int header_possible(const char *s, size_t n) {
    size_t k = 0;
    while (k < n && is_ws(s[k])) k++;
    return k == n || starts_with(s + k, n - k, "<|") || starts_with(s + k, n - k, "to=");
}

/* At the end, is s[0..n) a header the output cut (a channel or recipient
 * written), or only spaces? Either is dropped; anything else is text. */
static int header_begun(const char *s, size_t n) {
    size_t k = 0;
    while (k < n && is_ws(s[k])) k++;
    return k == n || memmem(s, n, H_CHANNEL, strlen(H_CHANNEL)) || starts_with(s + k, n - k, "to=") > 0 ||
           starts_with(s + k, n - k, H_START) > 0;
}

static int step_hhead(tc_parser *p, int final) {
    const char *s = p->in.p + p->pos;
    size_t n = p->in.len - p->pos, i = find(s, n, H_MESSAGE);
    if (i < n && i < 512 && header_possible(s, i)) {
        p->pos += i + strlen(H_MESSAGE);
        return harmony_header(p, s, i);
    }
    int maybe = i == n && header_possible(s, n);
    if (maybe && n < 512 && !final) return 0;
    if (maybe && final && header_begun(s, n)) {
        p->pos = p->in.len; /* a header cut by the end (or trailing spaces): not content */
        return 0;
    }
    p->plain = 1; /* not harmony after all: the rest is text */
    p->mode = M_CONTENT;
    return 1;
}

static int step_hbody(tc_parser *p, int final) {
    const char *s = p->in.p + p->pos;
    size_t n = p->in.len - p->pos, at = n, keep = 0;
    const char *m = NULL;
    for (const char *const *e = H_BODY_ENDS; *e; e++) {
        size_t i = find(s, n, *e), k = final ? 0 : partial_suffix(s, n, *e);
        if (i < at) at = i, m = *e;
        if (k > keep) keep = k;
    }
    if (!m) {
        emit(p, p->hkind, -1, s, n - keep);
        p->pos += n - keep;
        return 0;
    }
    emit(p, p->hkind, -1, s, at);
    p->pos += at + (m == H_START ? 0 : strlen(m)); /* the header step skips <|start|> */
    p->mode = M_HHEAD;
    return 1;
}

/* A call's body: spaces, then its arguments object. */
static int step_hargs(tc_parser *p, int final) {
    if (skip_ws_in(p, NULL) == 0) return final ? bad(p, "call %d has no arguments", p->cur) : 0;
    doc_begin(p, R_ARGS);
    return 1;
}

/* After a call's JSON: <|call|> (usually not printed: it ends the
 * generation), <|end|>, or the next message. */
static int step_hend(tc_parser *p, int final) {
    size_t n = skip_ws_in(p, NULL);
    if (n == 0) return 0;
    const char *s = p->in.p + p->pos;
    for (const char *const *e = H_BODY_ENDS; *e; e++) {
        int m = starts_with(s, n, *e);
        if (m < 0 && !final) return 0;
        if (m > 0) {
            p->pos += *e == H_START ? 0 : strlen(*e);
            p->mode = M_HHEAD;
            return 1;
        }
    }
    return bad(p, "expected <|call|> after the arguments of call %d", p->n_started - 1);
}

static int step(tc_parser *p, int final) {
    switch (p->mode) {
    case M_CONTENT: return step_content(p, final);
    case M_START: return step_start(p, final);
    case M_DOC: return step_doc(p, final);
    case M_HCLOSE: return step_hclose(p, final);
    case M_LAFTER: return step_lafter(p, final);
    case M_MNAME: return step_mname(p, final);
    case M_MCALLID: return step_mcallid(p, final);
    case M_FCLOSE: return step_fclose(p, final);
    case M_HHEAD: return step_hhead(p, final);
    case M_HBODY: return step_hbody(p, final);
    case M_HARGS: return step_hargs(p, final);
    case M_HEND: return step_hend(p, final);
    }
    return 0;
}

/* ---- API ---- */

tc_parser *tc_new(tc_format f) {
    tc_parser *p = xcalloc(1, sizeof *p);
    p->fmt = f;
    p->cur = -1;
    p->plain = f == TC_NONE;
    p->mode = f == TC_LLAMA3 || f == TC_GENERIC ? M_START : f == TC_HARMONY ? M_HHEAD : M_CONTENT;
    return p;
}

void tc_free(tc_parser *p) {
    if (!p) return;
    for (int i = 0; i < p->n_calls; i++) {
        free(p->names[i]);
        free(p->argv[i]);
    }
    free(p->names);
    free(p->argv);
    tc_buf *bufs[] = {&p->in, &p->lead, &p->name, &p->args, &p->mname,
                      &p->evtext, &p->outtext, &p->carry};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) tc_buf_free(bufs[i]);
    tc_jscan_free(&p->js);
    free(p->recs);
    free(p->out);
    free(p);
}

/* Streams partial arguments and content at the end of a feed. */
static int sync_streams(tc_parser *p) {
    if (p->mode != M_DOC) return 0;
    args_flush(p);
    return content_flush(p, p->js.doc.len, 0);
}

static int run(tc_parser *p, int final) {
    int rc;
    while ((rc = step(p, final)) > 0) {}
    if (rc == 0) rc = sync_streams(p);
    /* Drop the consumed input so the buffer holds only undecided bytes. */
    memmove(p->in.p, p->in.p + p->pos, p->in.len - p->pos);
    p->in.len -= p->pos;
    p->pos = 0;
    return rc;
}

int tc_feed(tc_parser *p, const char *text, size_t len, int final, const tc_event **evs,
            int *n, strata_err *err) {
    p->n_recs = 0;
    tc_buf_clear(&p->evtext);
    *evs = NULL;
    *n = 0;
    if (p->failed || p->finished) {
        if (!p->failed) strata_errf(&p->err, STRATA_EINVAL, "tool call: fed after the final piece");
        if (err) *err = p->err;
        return p->err.code;
    }
    tc_buf_add(&p->in, text, len);
    int rc = run(p, final);
    if (rc < 0) tc_buf_clear(&p->carry); /* a cut character that can never be completed */
    else if (final) emit(p, TC_EV_TEXT, -1, "", 0); /* releases any carry */
    else hold_utf8_tail(p);
    build_events(p);
    *evs = p->out;
    *n = p->n_recs;
    p->finished = final;
    if (rc < 0) {
        p->failed = 1;
        if (err) *err = p->err;
    }
    return rc < 0 ? STRATA_EFORMAT : 0;
}

int tc_calls(const tc_parser *p, const char ***names, const char ***arguments) {
    if (names) *names = (const char **)p->names;
    if (arguments) *arguments = (const char **)p->argv;
    return p->n_calls;
}
