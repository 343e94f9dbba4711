/* api_anthropic.c - Anthropic Messages API: /v1/messages and
 * /v1/messages/count_tokens.
 *
 * Messages (system string or blocks; text, tool_use and tool_result
 * blocks) are normalised into the shape of server/prompt.h; cache_control
 * is accepted on any block. Streams follow the documented event order:
 * message_start, content_block_start, ping, content_block_delta...,
 * content_block_stop, message_delta (stop_reason, usage), message_stop. */
#include "server/api_anthropic.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "server/api_params.h"
#include "server/gen.h"
#include "server/prompt.h"
#include "server/sse.h"

#define POLL_MS 1000

typedef struct ant_call {
    server *srv;
    json_t *req;
    gen g;
    gen_params gp;
    int stream, n_prompt, phase; /* phase: 0 start events next, 1 text, 2 done */
    char id[64];
    sse_buf out;
} ant_call;

static void reply_error(http_reply *rep, int status, const char *type, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void reply_error(http_reply *rep, int status, const char *type, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    reply_json(rep, status, json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type", type, "message", msg));
}

/* ---- normalising messages -------------------------------------------------- */

/* Text of a string or an array of text blocks (cache_control ignored). */
static char *blocks_text(const json_t *content, const char *where, char *why, size_t cap) {
    if (json_is_string(content)) return xstrdup(json_string_value(content));
    if (!json_is_array(content)) {
        snprintf(why, cap, "%s must be a string or an array of content blocks", where);
        return NULL;
    }
    char *out = xstrdup("");
    size_t len = 0, i;
    const json_t *b;
    json_array_foreach(content, i, b) {
        const char *type = json_string_value(json_object_get(b, "type"));
        const char *text = json_string_value(json_object_get(b, "text"));
        if (!type || strcmp(type, "text") || !text) {
            snprintf(why, cap, "%s[%zu]: expected a text block", where, i);
            free(out);
            return NULL;
        }
        size_t n = strlen(text);
        out = xrealloc(out, len + n + 1);
        memcpy(out + len, text, n + 1);
        len += n;
    }
    return out;
}

static void append_text(char **acc, const char *text) {
    size_t a = *acc ? strlen(*acc) : 0, n = strlen(text);
    *acc = xrealloc(*acc, a + n + 1);
    memcpy(*acc + a, text, n + 1);
}

/* One content block of message mi into the text accumulator, the tool
 * calls (assistant) or tool results (user). */
static int take_block(const json_t *b, size_t mi, size_t bi, int assistant, char **text,
                      json_t *calls, json_t *results, char *why, size_t cap) {
    const char *type = json_string_value(json_object_get(b, "type"));
    char where[96];
    snprintf(where, sizeof where, "messages[%zu].content[%zu]", mi, bi);
    if (type && !strcmp(type, "text") && json_is_string(json_object_get(b, "text"))) {
        append_text(text, json_string_value(json_object_get(b, "text")));
    } else if (type && !strcmp(type, "tool_use") && assistant) {
        const json_t *name = json_object_get(b, "name"), *input = json_object_get(b, "input");
        if (!json_is_string(name) || !json_is_object(input)) {
            snprintf(why, cap, "%s: tool_use needs a string name and an object input", where);
            return -1;
        }
        json_array_append_new(calls, json_pack("{s:O*,s:s,s:{s:O,s:O}}", "id", json_object_get(b, "id"), "type",
                                               "function", "function", "name", name, "arguments", input));
    } else if (type && !strcmp(type, "tool_result") && !assistant) {
        const json_t *c = json_object_get(b, "content");
        char *t = c ? blocks_text(c, where, why, cap) : xstrdup("");
        if (!t) return -1;
        json_array_append_new(results, json_pack("{s:s,s:s,s:O*}", "role", "tool", "content", t, "tool_call_id",
                                                 json_object_get(b, "tool_use_id")));
        free(t);
    } else {
        snprintf(why, cap, "%s: unsupported block type '%s' for a %s message", where, type ? type : "?",
                 assistant ? "assistant" : "user");
        return -1;
    }
    return 0;
}

static int add_message(json_t *out, const json_t *m, size_t mi, char *why, size_t cap) {
    const char *role = json_string_value(json_object_get(m, "role"));
    if (!role || (strcmp(role, "user") && strcmp(role, "assistant"))) {
        snprintf(why, cap, "messages[%zu].role must be 'user' or 'assistant'", mi);
        return -1;
    }
    int assistant = !strcmp(role, "assistant");
    const json_t *content = json_object_get(m, "content");
    char *text = NULL;
    json_t *calls = json_array(), *results = json_array();
    int rc = 0;
    if (json_is_string(content)) {
        text = xstrdup(json_string_value(content));
    } else if (json_is_array(content)) {
        size_t bi;
        const json_t *b;
        json_array_foreach(content, bi, b)
            if ((rc = take_block(b, mi, bi, assistant, &text, calls, results, why, cap))) break;
    } else {
        snprintf(why, cap, "messages[%zu].content must be a string or an array of blocks", mi);
        rc = -1;
    }
    if (!rc) {
        json_array_extend(out, results); /* tool results precede the user's words */
        if (text || json_array_size(calls) || !json_array_size(results)) {
            json_t *msg = json_pack("{s:s,s:s}", "role", role, "content", text ? text : "");
            if (json_array_size(calls)) json_object_set(msg, "tool_calls", calls);
            json_array_append_new(out, msg);
        }
    }
    free(text);
    json_decref(calls);
    json_decref(results);
    return rc;
}

static json_t *normal_messages(const json_t *req, char *why, size_t cap) {
    const json_t *msgs = json_object_get(req, "messages"), *sys = json_object_get(req, "system");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        snprintf(why, cap, "messages: must be a non-empty array");
        return NULL;
    }
    json_t *out = json_array();
    if (sys && !json_is_null(sys)) {
        char *t = blocks_text(sys, "system", why, cap);
        if (!t) {
            json_decref(out);
            return NULL;
        }
        json_array_append_new(out, json_pack("{s:s,s:s}", "role", "system", "content", t));
        free(t);
    }
    size_t i;
    const json_t *m;
    json_array_foreach(msgs, i, m) if (add_message(out, m, i, why, cap)) {
        json_decref(out);
        return NULL;
    }
    return out;
}

/* Anthropic tools -> the normalised (OpenAI function) shape. */
static json_t *normal_tools(const json_t *tools) {
    if (!json_is_array(tools) || !json_array_size(tools)) return NULL;
    json_t *out = json_array();
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t)
        json_array_append_new(out, json_pack("{s:s,s:{s:O*,s:O*,s:O*}}", "type", "function", "function", "name",
                                             json_object_get(t, "name"), "description",
                                             json_object_get(t, "description"), "parameters",
                                             json_object_get(t, "input_schema")));
    return out;
}

static int build_prompt(ant_call *c, int32_t **ids, size_t *n, char *why, size_t cap) {
    json_t *msgs = normal_messages(c->req, why, cap);
    if (!msgs) return -1;
    json_t *tools = normal_tools(json_object_get(c->req, "tools"));
    int rc = prompt_tokens(c->srv, msgs, tools, ids, n, why, cap);
    json_decref(msgs);
    json_decref(tools);
    return rc;
}

/* ---- parameters -------------------------------------------------------------------- */

static int parse_options(ant_call *c, char *why, size_t cap) {
    long max_tokens = 0;
    int r = param_int(c->req, "max_tokens", 1, 1L << 30, &max_tokens, why, cap);
    if (r <= 0) {
        if (!r) snprintf(why, cap, "max_tokens: field required");
        return -1;
    }
    c->gp.max_tokens = (int)max_tokens;
    if (param_bool(c->req, "stream", &c->stream, why, cap) < 0) return -1;
    const json_t *tools = json_object_get(c->req, "tools");
    if (json_is_array(tools) && json_array_size(tools) > 0) {
        snprintf(why, cap, "tools: not supported by this server build yet");
        return -1;
    }
    return params_sampling(c->req, "stop_sequences", &c->gp, why, cap);
}

/* ---- replies ------------------------------------------------------------------------- */

static const char *stop_reason(const ant_call *c) {
    if (c->g.stopped_by_string) return "stop_sequence";
    return c->g.st.finish == FINISH_LENGTH ? "max_tokens" : "end_turn";
}

static json_t *stop_sequence(const ant_call *c) {
    return c->g.stopped_by_string ? json_string(c->gp.stops[c->g.text.hit]) : json_null();
}

/* Anthropic counts input as uncached + cache reads (+ cache writes, which
 * the live tier does not bill separately: 0). */
static json_t *usage(const ant_call *c, int output_tokens) {
    int cached = c->g.st.n_cached;
    return json_pack("{s:i,s:i,s:i,s:i}", "input_tokens", c->n_prompt - cached, "output_tokens", output_tokens,
                     "cache_creation_input_tokens", 0, "cache_read_input_tokens", cached);
}

static json_t *message(const ant_call *c, json_t *content, json_t *reason, json_t *seq, int out_tokens) {
    return json_pack("{s:s,s:s,s:s,s:s,s:o,s:o,s:o,s:o}", "id", c->id, "type", "message", "role", "assistant",
                     "model", c->srv->model_id, "content", content, "stop_reason", reason, "stop_sequence", seq,
                     "usage", usage(c, out_tokens));
}

static void answer_whole(ant_call *c, const http_req *req, http_reply *rep) {
    char *text = xstrdup("");
    size_t len = 0;
    while (!c->g.done) {
        const char *piece;
        size_t n = gen_pull(&c->g, 200, &piece);
        text = xrealloc(text, len + n + 1);
        memcpy(text + len, piece, n);
        len += n;
        if (http_client_gone(req)) {
            gen_cancel(&c->g);
            free(text);
            reply_error(rep, 499, "api_error", "client closed the connection");
            return;
        }
    }
    if (c->g.st.finish == FINISH_ERROR) {
        free(text);
        reply_error(rep, 500, "api_error", "generation failed: %s", c->g.st.error);
        return;
    }
    json_t *content = json_array();
    if (len) json_array_append_new(content, json_pack("{s:s,s:o}", "type", "text", "text", json_text(text, len)));
    free(text);
    reply_json(rep, 200, message(c, content, json_string(stop_reason(c)), stop_sequence(c), c->g.n_tokens));
}

static void stream_start(ant_call *c) {
    sse_event(&c->out, "message_start",
              json_pack("{s:s,s:o}", "type", "message_start", "message",
                        message(c, json_array(), json_null(), json_null(), 0)));
    sse_event(&c->out, "content_block_start",
              json_pack("{s:s,s:i,s:{s:s,s:s}}", "type", "content_block_start", "index", 0, "content_block",
                        "type", "text", "text", ""));
    sse_event(&c->out, "ping", json_pack("{s:s}", "type", "ping"));
    c->phase = 1;
}

static void stream_finish(ant_call *c) {
    sse_event(&c->out, "content_block_stop", json_pack("{s:s,s:i}", "type", "content_block_stop", "index", 0));
    sse_event(&c->out, "message_delta",
              json_pack("{s:s,s:{s:s,s:o},s:o}", "type", "message_delta", "delta", "stop_reason",
                        stop_reason(c), "stop_sequence", stop_sequence(c), "usage", usage(c, c->g.n_tokens)));
    sse_event(&c->out, "message_stop", json_pack("{s:s}", "type", "message_stop"));
    c->phase = 2;
}

static void stream_produce(ant_call *c) {
    if (c->phase == 0) {
        stream_start(c);
        return;
    }
    const char *text;
    size_t n = gen_pull(&c->g, POLL_MS, &text);
    if (n)
        sse_event(&c->out, "content_block_delta",
                  json_pack("{s:s,s:i,s:{s:s,s:o}}", "type", "content_block_delta", "index", 0, "delta", "type",
                            "text_delta", "text", json_text(text, n)));
    if (c->g.done) stream_finish(c);
    else if (!n) sse_event(&c->out, "ping", json_pack("{s:s}", "type", "ping")); /* keep-alive */
}

static void call_free(ant_call *c) {
    gen_end(&c->g);
    json_decref(c->req);
    sse_free(&c->out);
    free(c);
}

static ssize_t stream_read(void *ctx, char *buf, size_t max) {
    ant_call *c = ctx;
    while (sse_empty(&c->out)) {
        if (c->phase == 2) return -1;
        stream_produce(c);
    }
    return (ssize_t)sse_take(&c->out, buf, max);
}

static void stream_end(void *ctx, int client_gone) {
    ant_call *c = ctx;
    if (client_gone) gen_cancel(&c->g);
    call_free(c);
}

/* ---- entry points -------------------------------------------------------------------- */

static json_t *parse_body(const http_req *req, http_reply *rep) {
    json_error_t je;
    json_t *root = json_loadb(req->body, req->body_len, 0, &je);
    if (!json_is_object(root)) {
        json_decref(root);
        reply_error(rep, 400, "invalid_request_error", "request body is not a valid JSON object: %s",
                    root ? "not an object" : je.text);
        return NULL;
    }
    return root;
}

static int check_model(server *s, const json_t *req, http_reply *rep) {
    const char *model = json_string_value(json_object_get(req, "model"));
    if (!model) {
        reply_error(rep, 400, "invalid_request_error", "model: field required");
        return -1;
    }
    if (*model && strcmp(model, s->model_id) != 0) {
        reply_error(rep, 404, "not_found_error", "model: '%s' does not exist; this server serves '%s'", model,
                    s->model_id);
        return -1;
    }
    return 0;
}

void api_anthropic_messages(server *s, const http_req *req, http_reply *rep) {
    ant_call *c = xcalloc(1, sizeof *c);
    c->srv = s;
    make_id(c->id, sizeof c->id, "msg_");
    if (!(c->req = parse_body(req, rep)) || check_model(s, c->req, rep)) {
        json_decref(c->req);
        free(c);
        return;
    }
    char why[512] = "";
    int32_t *ids = NULL;
    size_t n = 0;
    if (parse_options(c, why, sizeof why) || build_prompt(c, &ids, &n, why, sizeof why)) {
        reply_error(rep, 400, "invalid_request_error", "%s", why);
        json_decref(c->req);
        free(c);
        return;
    }
    c->n_prompt = (int)n;
    strata_err err = {0};
    int rc = gen_start(&c->g, s->sch, s->tok, ids, (int)n, &c->gp, &err);
    free(ids);
    if (rc) {
        const char *type;
        int status = status_for(rc, &type);
        reply_error(rep, status == 503 ? 529 : status, status == 503 ? "overloaded_error" : status == 400 ? "invalid_request_error" : "api_error",
                    "%s", err.msg);
        if (status == 503) rep->retry_after = 1;
        json_decref(c->req);
        free(c);
        return;
    }
    if (!c->stream) {
        answer_whole(c, req, rep);
        call_free(c);
        return;
    }
    rep->status = 200;
    rep->content_type = "text/event-stream";
    rep->stream = stream_read;
    rep->stream_end = stream_end;
    rep->stream_ctx = c;
}

void api_anthropic_count_tokens(server *s, const http_req *req, http_reply *rep) {
    ant_call c = {.srv = s};
    if (!(c.req = parse_body(req, rep)) || check_model(s, c.req, rep)) {
        json_decref(c.req);
        return;
    }
    char why[512] = "";
    int32_t *ids = NULL;
    size_t n = 0;
    if (build_prompt(&c, &ids, &n, why, sizeof why)) reply_error(rep, 400, "invalid_request_error", "%s", why);
    else reply_json(rep, 200, json_pack("{s:i}", "input_tokens", (int)n));
    free(ids);
    json_decref(c.req);
}
