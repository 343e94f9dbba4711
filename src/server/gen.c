/* gen.c - pulling a request's output from the scheduler (see gen.h). */
#include "server/gen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/mem.h"
#include "server/prompt.h"
#include "server/server.h"

int gen_start(gen *g, sched *s, const tokenizer *tok, const int32_t *ids, int n,
              const gen_params *p, strata_err *err) {
    memset(g, 0, sizeof *g);
    g->t_start = clock_ms();
    g->tok = tok;
    textout_init(&g->text);
    for (int i = 0; i < p->n_stops; i++) textout_add_stop(&g->text, p->stops[i]);
    tc_format parse = p->harmony ? TC_HARMONY : p->tools;
    if (parse != TC_NONE) g->tc = tc_new(parse);
    g->harmony = p->harmony;
    g->one_call = p->one_call;
    g->replay = p->replay;
    g->replay_ns = p->replay_ns;
    g->replay_ctx = p->replay_ctx;
    g->has_replay_ctx = p->has_replay_ctx;
    g->tools = p->tools;
    g->tool_defs = p->tool_defs;
    if (p->args_open) { /* the prefix opened the arguments: the scanner's root */
        static const tc_jscan_cb none = {0};
        tc_jscan_reset(&g->args, &none);
        tc_jscan_byte(&g->args, '{');
        g->args_watch = 1;
    }
    if (p->prefix) textout_append(&g->text, p->prefix, strlen(p->prefix)); /* parsed as if generated */
    g->prefix_len = p->prefix ? strlen(p->prefix) : 0;
    if (p->prefix_ids > 0 && p->prefix_ids <= n) {
        g->n_prefix_tok = p->prefix_ids;
        g->prefix_tok = xmalloc((size_t)p->prefix_ids * sizeof(int32_t));
        memcpy(g->prefix_tok, ids + n - p->prefix_ids, (size_t)p->prefix_ids * sizeof(int32_t));
    }
    sched_job job = {.prompt = ids, .n_prompt = n, .sampling = p->sampling,
                     .max_tokens = p->max_tokens, .n_logprobs = p->n_logprobs, .ignore_eos = p->ignore_eos,
                     .no_speculative = p->no_speculative, .prediction = p->prediction,
                     .n_prediction = p->n_prediction,
                     .cache_salt = p->cache_salt, .tenant = p->tenant, .json_mode = p->json_mode, .schema = p->schema,
                     .call_schema = p->call_schema, .call_format = p->tools,
                     .json_prefix = p->prefix, .scope = p->scope, .bounds = p->bounds, .n_bounds = p->n_bounds,
                     .held_out = p->held_out, .ignored = p->ignored, .recent_id = p->recent_id,
                     .share_prompt = p->share_prompt, .later_choice = p->later_choice};
    for (int i = 0; i < p->n_marks && i < POLICY_MAX_MARKS; i++) job.marks[job.n_marks++] = p->marks[i];
    int rc = sched_submit(s, &job, &g->req, err);
    if (rc) {
        textout_free(&g->text);
        tc_free(g->tc);
        g->tc = NULL;
        free(g->prefix_tok);
        g->prefix_tok = NULL;
    }
    return rc;
}

static void keep_token(gen *g, const sched_token *t) {
    XGROW(g->tokens, g->cap_tokens, g->n_tokens + 1, 64);
    g->tokens[g->n_tokens++] = *t;
}

/* New tokens -> text, applying stop strings; returns 1 when finished. */
/* The reply is complete before the model stopped (a stop string, a
 * finished required call, a bad call): cancel the rest, and wait for the
 * scheduler to let the request go, which is when its tail and marks enter
 * the cache. Without the wait a client that sends its next turn the moment
 * this reply ends can find the last partial block missing and recompute
 * it. Bounded: the wait is one scheduler step, SETTLE_MS at most. The
 * tokens that come meanwhile are not part of the reply. */
#define SETTLE_MS 2000

static void cancel_and_settle(gen *g) {
    sched_cancel(g->req);
    sched_token toks[64];
    sched_status st = {0};
    int from = g->n_seen;
    double until = clock_ms() + SETTLE_MS;
    for (;;) {
        double left = until - clock_ms();
        if (left <= 0) break;
        from += sched_wait(g->req, from, toks, 64, (int)left + 1, &st);
        if (st.finish != FINISH_NONE) break;
    }
}

/* Tokens are taken one at a time while tool calls are parsed: a reply
 * that ends at a call's end (a forced call) or at a malformed call then
 * holds exactly the tokens up to there, however many the scheduler had
 * produced (a speculative step yields several at once). */
static int take_tokens(gen *g, int timeout_ms) {
    sched_token toks[64];
    int n = sched_wait(g->req, g->n_seen, toks, g->tc ? 1 : 64, timeout_ms, &g->st);
    g->n_seen += n;
    for (int i = 0; i < n && !g->text.stopped; i++) {
        char piece[256];
        int len = tok_piece(g->tok, toks[i].id, 0, piece, sizeof piece);
        if (len > (int)sizeof piece) len = (int)sizeof piece;
        keep_token(g, &toks[i]);
        if (len > 0 && textout_append(&g->text, piece, (size_t)len)) {
            g->stopped_by_string = 1;
            cancel_and_settle(g);
        }
    }
    return g->st.finish != FINISH_NONE || g->stopped_by_string;
}

/* Length of text up to and including the brace that closes the arguments
 * object, or 0 if it stays open (the JSON scanner follows strings and
 * escapes; output that is not JSON is no longer watched: the tool-call
 * parser reports it). The prefix's own bytes are skipped by starting
 * after it. */
static size_t args_close_at(gen *g, const char *text, size_t len, size_t skip) {
    for (size_t i = skip; i < len; i++) {
        int r = tc_jscan_byte(&g->args, (unsigned char)text[i]);
        if (r == TC_JSCAN_DONE || r == TC_JSCAN_ERR) g->args_watch = 0;
        if (r == TC_JSCAN_DONE) return i + 1;
        if (r == TC_JSCAN_ERR) return 0;
    }
    return 0;
}

/* Tokens of text (no special tokens) appended to ids[*n]. */
static int32_t *append_text_tokens(const gen *g, const char *text, int32_t *ids, size_t *n) {
    int32_t *t;
    size_t k;
    if (!*text || tok_encode(g->tok, text, strlen(text), 0, &t, &k, NULL)) return ids;
    ids = xrealloc(ids, (*n + k) * sizeof(int32_t));
    memcpy(ids + *n, t, k * sizeof(int32_t));
    *n += k;
    free(t);
    return ids;
}

/* A reply's ids, by its key: in the tenant's namespace and in the one
 * narrowed to the conversation it answers (replay.h). */
static void remember_put(gen *g, const char *key, size_t len, const int32_t *ids, size_t n) {
    replay_put(g->replay, &g->replay_ns, key, len, ids, n);
    if (g->has_replay_ctx) replay_put(g->replay, &g->replay_ctx, key, len, ids, n);
}

typedef char *(*turn_key_fn)(const char *content, const char **names, const char **args, int n);

static char *generic_key(const char *content, const char **names, const char **args, int n) {
    (void)content;
    return render_generic_calls_text(names, args, n);
}

static char *native_key(const char *content, const char **names, const char **args, int n) {
    return replay_native_turn_key(content, names, args, n);
}

/* How a client may spell a call's arguments when it sends them back,
 * besides as generated: as a JavaScript client does (1.0 comes back as
 * 1), with the schema's defaults filled in (a client that parses inputs
 * with the tool's schema: Claude Code), or both. */
enum { RESPELL_JS = 1, RESPELL_DEFAULTS = 2, RESPELL_ALL = 3 };

/* One call's arguments respelled (caller frees), or NULL: no change. */
static char *respell(const gen *g, const char *name, const char *args, int how) {
    char *d = how & RESPELL_DEFAULTS ? replay_schema_defaults(g->tool_defs, name, args) : NULL;
    char *j = how & RESPELL_JS ? replay_js_numbers(d ? d : args) : NULL;
    if (!j) return d;
    free(d);
    return j;
}

/* The turn's key with every call respelled `how`, or NULL when no call's
 * spelling changes. */
static char *respelled_key(const gen *g, const char **names, const char **args, int n, const char *content,
                           turn_key_fn make_key, int how) {
    char **sp = xcalloc((size_t)n, sizeof *sp);
    const char **use = xcalloc((size_t)n, sizeof *use);
    int changed = 0;
    for (int i = 0; i < n; i++) {
        sp[i] = respell(g, names[i], args[i], how);
        use[i] = sp[i] ? sp[i] : args[i];
        changed |= sp[i] != NULL;
    }
    char *key = changed ? make_key(content, names, use, n) : NULL;
    for (int i = 0; i < n; i++) free(sp[i]);
    free(sp), free(use);
    return key;
}

/* Remembers a call turn's ids under its key and under the key of each
 * spelling a client may send it back in. */
static void remember_call_turn(gen *g, const char **names, const char **args, int n, const char *content,
                               turn_key_fn make_key, const int32_t *ids, size_t n_ids) {
    char *key = make_key(content, names, args, n);
    remember_put(g, key, strlen(key), ids, n_ids);
    for (int how = RESPELL_JS; how <= RESPELL_ALL; how++) {
        char *v = respelled_key(g, names, args, n, content, make_key, how);
        if (v && strcmp(v, key)) remember_put(g, v, strlen(v), ids, n_ids);
        free(v);
    }
    free(key);
}

/* A generic-format tool-call turn comes back re-rendered as compact JSON;
 * it replays as what the model saw and wrote: the forced prefix, its own
 * tokens up to the end of the arguments, and the JSON we closed it with. */
static void remember_calls(gen *g) {
    const char **names, **args;
    int n = tc_calls(g->tc, &names, &args);
    if (n <= 0) return;
    size_t n_ids = 0, off = g->prefix_len;
    char *prefix = xmalloc(g->prefix_len + 1); /* text.buf starts with it */
    memcpy(prefix, g->text.buf ? g->text.buf : "", g->prefix_len);
    prefix[g->prefix_len] = 0;
    int32_t *ids = append_text_tokens(g, prefix, NULL, &n_ids);
    free(prefix);
    for (int i = 0; i < g->n_tokens && (!g->close_at || off < g->close_at); i++) {
        char piece[256];
        int len = tok_piece(g->tok, g->tokens[i].id, 0, piece, sizeof piece);
        off += len > 0 ? (size_t)len : 0;
        ids = xrealloc(ids, (n_ids + 1) * sizeof(int32_t));
        ids[n_ids++] = g->tokens[i].id;
    }
    if (g->close_at) ids = append_text_tokens(g, "}]}", ids, &n_ids);
    remember_call_turn(g, names, args, n, "", generic_key, ids, n_ids);
    free(ids);
}

/* A native-format tool-call turn comes back as content and calls, which
 * the template renders its own way; it replays as every token of the
 * turn: a forced opening's (in the prompt) and the model's (prompt.c puts
 * them where the template renders the turn). */
static void remember_native_calls(gen *g) {
    const char **names, **args;
    int n = tc_calls(g->tc, &names, &args);
    if (n <= 0 || g->n_calls != g->n_calls_done || g->st.finish == FINISH_LENGTH) return;
    size_t len;
    char *content = utf8_sanitize(g->content ? g->content : "", g->content_len, &len);
    size_t n_ids = (size_t)g->n_prefix_tok + (size_t)g->n_tokens;
    int32_t *ids = xmalloc(n_ids * sizeof(int32_t));
    if (g->n_prefix_tok) memcpy(ids, g->prefix_tok, (size_t)g->n_prefix_tok * sizeof(int32_t));
    for (int i = 0; i < g->n_tokens; i++) ids[g->n_prefix_tok + i] = g->tokens[i].id;
    remember_call_turn(g, names, args, n, content, native_key, ids, n_ids);
    free(ids);
    free(content);
}

/* A harmony turn (gpt-oss) comes back as content, calls and reasoning,
 * which the template renders its own way (recipient before the channel,
 * no <|constrain|>; a final answer without its analysis). It replays as
 * what the model saw: every token it wrote after the prompt's
 * "<|start|>assistant" (a forced opening's included), then the end the
 * template gives the turn (<|call|> after a call, else <|end|>); replay.c
 * puts them in place of the template's rendering of the turn. Keyed like
 * a native call turn, by content and calls, also without calls. */
static void remember_harmony(gen *g) {
    const char **names = NULL, **args = NULL;
    int n = tc_calls(g->tc, &names, &args);
    const char *end = n ? "<|call|>" : "<|end|>";
    int32_t *end_ids = NULL;
    size_t n_end = 0, tl = g->text.len, el = strlen(end); /* one special token in gpt-oss's vocabulary */
    int wrote_end = tl >= el && !memcmp(g->text.buf + tl - el, end, el); /* the model ended the message itself */
    /* a text turn cut by the limit comes back as the text the client got, and is remembered;
       a call cut there is not (the client gets no call to send back) */
    if (g->n_calls != g->n_calls_done || (n && g->st.finish == FINISH_LENGTH) ||
        (!wrote_end && tok_encode(g->tok, end, el, 1, &end_ids, &n_end, NULL)))
        return;
    size_t len, n_ids = (size_t)g->n_prefix_tok + (size_t)g->n_tokens + n_end;
    char *content = utf8_sanitize(g->content ? g->content : "", g->content_len, &len);
    int32_t *ids = xmalloc(n_ids * sizeof(int32_t));
    if (g->n_prefix_tok) memcpy(ids, g->prefix_tok, (size_t)g->n_prefix_tok * sizeof(int32_t));
    for (int i = 0; i < g->n_tokens; i++) ids[g->n_prefix_tok + i] = g->tokens[i].id;
    memcpy(ids + g->n_prefix_tok + g->n_tokens, end_ids, n_end * sizeof(int32_t));
    free(end_ids);
    remember_call_turn(g, names, args, n, content, native_key, ids, n_ids);
    free(ids);
    free(content);
}

/* A reply that ended by itself or at the limit is remembered with its
 * exact tokens, for when the client sends it back (exact replay). */
static void remember(gen *g) {
    if (!g->replay || g->stopped_by_string || g->st.finish == FINISH_ERROR || g->tool_error)
        return;
    if (g->harmony) {
        if (g->st.finish != FINISH_CANCELLED) remember_harmony(g);
        return;
    }
    if (g->tools == TC_GENERIC && g->n_calls_done) {
        remember_calls(g);
        return;
    }
    if (g->st.finish == FINISH_CANCELLED || (g->tools == TC_GENERIC && g->n_calls)) return;
    if (g->n_calls) {
        remember_native_calls(g);
        return;
    }
    /* Keyed by what the client received (and will send back): the text; in
     * the generic tool format the content the parser passed on (the reply
     * may be {"content": ...} JSON, whose tokens are what the model saw). */
    int generic = g->tools == TC_GENERIC;
    size_t len;
    char *seen = generic ? utf8_sanitize(g->content ? g->content : "", g->content_len, &len)
                         : utf8_sanitize(g->text.buf ? g->text.buf : "", g->text.len, &len);
    int32_t *ids = xmalloc((size_t)(g->n_tokens ? g->n_tokens : 1) * sizeof(int32_t));
    for (int i = 0; i < g->n_tokens; i++) ids[i] = g->tokens[i].id;
    if (len) remember_put(g, seen, len, ids, (size_t)g->n_tokens);
    free(seen);
    free(ids);
}

static void keep_text(char **buf, size_t *n, const char *text, size_t len) {
    *buf = xrealloc(*buf, *n + len + 1);
    memcpy(*buf + *n, text, len);
    *n += len;
    (*buf)[*n] = 0;
}

/* Keeps the call in progress, for a reply cut inside it. */
static void follow_open_call(gen *g, const tc_event *e) {
    if (e->kind == TC_EV_CALL_BEGIN) {
        free(g->open_name);
        g->open_name = xstrdup(e->text);
        g->open_args_len = 0;
    } else if (e->kind == TC_EV_CALL_ARGS) {
        g->open_args = xrealloc(g->open_args, g->open_args_len + e->len + 1);
        memcpy(g->open_args + g->open_args_len, e->text, e->len);
        g->open_args[g->open_args_len += e->len] = 0;
    } else if (e->kind == TC_EV_CALL_END) {
        free(g->open_name);
        g->open_name = NULL;
    }
}

int gen_open_call(const gen *g, const char **name, const char **args) {
    if (!g->open_name || g->n_calls == g->n_calls_done) return 0;
    *name = g->open_name;
    *args = g->open_args_len ? g->open_args : "";
    return 1;
}

int gen_pull(gen *g, int timeout_ms, const tc_event **evs) {
    *evs = NULL;
    if (g->done) return 0;
    int final = take_tokens(g, timeout_ms);
    const char *text;
    size_t skip = g->text.released == 0 ? g->prefix_len : 0;
    size_t len = textout_release(&g->text, final, &text);
    char closed[4096];
    if (g->args_watch) {
        size_t end = args_close_at(g, text, len, skip);
        if (end && end + 4 <= sizeof closed) {
            g->close_at = (size_t)(text - g->text.buf) + end;
            /* The arguments are complete: finish the call's JSON ourselves. */
            memcpy(closed, text, end);
            memcpy(closed + end, "}]}", 3);
            text = closed;
            len = end + 3;
            final = 1;
            cancel_and_settle(g);
        }
    }
    if (final) g->done = 1;
    if (!g->tc) {
        if (g->done) remember(g);
        if (!len) return 0;
        g->one = (tc_event){TC_EV_TEXT, -1, (char *)text, len};
        *evs = &g->one;
        return 1;
    }
    int n = 0;
    strata_err err = {0};
    /* A reply cut by max_tokens inside a call is "length", not malformed. */
    int cut = final && g->st.finish == FINISH_LENGTH;
    if (tc_feed(g->tc, text, len, final && !cut, evs, &n, &err) && !g->tool_error) {
        g->tool_error = 1;
        strata_fmt(g->error, sizeof g->error, "%s", err.msg);
        g->done = 1;
        cancel_and_settle(g);
    }
    for (int i = 0; i < n; i++) {
        if ((*evs)[i].kind == TC_EV_TEXT) keep_text(&g->content, &g->content_len, (*evs)[i].text, (*evs)[i].len);
        if ((*evs)[i].kind == TC_EV_REASONING)
            keep_text(&g->reasoning, &g->reasoning_len, (*evs)[i].text, (*evs)[i].len);
        follow_open_call(g, &(*evs)[i]);
        g->n_calls += (*evs)[i].kind == TC_EV_CALL_BEGIN;
        g->n_calls_done += (*evs)[i].kind == TC_EV_CALL_END;
        if ((*evs)[i].kind == TC_EV_CALL_END && g->one_call && !g->done) {
            /* The required call is complete: whatever the model adds after
             * it is not asked for (and may not even parse). */
            g->done = 1;
            cancel_and_settle(g);
            remember(g);
            return i + 1;
        }
    }
    if (g->done) remember(g);
    return n;
}

const char *gen_finish_word(const gen *g) {
    if (g->tool_error) return "tool_call_error";
    if (g->n_calls_done && (g->st.finish != FINISH_LENGTH || g->one_call)) return "tool_calls";
    if (g->stopped_by_string) return "stop";
    return g->st.finish == FINISH_LENGTH ? "length" : "stop";
}

void gen_cancel(gen *g) {
    if (g->req) sched_cancel(g->req);
}

void gen_wait_attached(gen *g, int timeout_ms) { sched_wait_attached(g->req, timeout_ms, &g->st); }

int gen_wait_prefilled(gen *g, int timeout_ms) {
    sched_status st;
    sched_wait(g->req, 0, NULL, 0, timeout_ms, &st); /* takes no token: waits for the first, or the end */
    return st.n_generated > 0 || st.finish != FINISH_NONE;
}

void gen_end(gen *g) {
    sched_release(g->req);
    textout_free(&g->text);
    tc_free(g->tc);
    free(g->tokens), free(g->content), free(g->reasoning), free(g->open_name), free(g->open_args), free(g->prefix_tok);
    tc_jscan_free(&g->args);
    memset(g, 0, sizeof *g);
}
