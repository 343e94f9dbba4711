/* api_responses.c - the OpenAI Responses API: POST /v1/responses and
 * GET / DELETE /v1/responses/{id}.
 *
 * A request's input (a string or items, server/resp_items.h), its
 * instructions (a system message) and, with previous_response_id, the
 * stored conversation before it (server/resp_store.h) become normalised
 * messages and go through the one request lifecycle (api_call.h). The
 * reply is a response object whose output is a message item (one
 * output_text part) and call items (function_call, custom_tool_call,
 * local_shell_call: resp_tools.h); streamed, it is the
 * documented event sequence, each event with a sequence_number:
 * response.created, response.in_progress, then per item
 * response.output_item.added, (message) response.content_part.added,
 * response.output_text.delta..., response.output_text.done,
 * response.content_part.done, (function call) response.function_call_
 * arguments.delta..., .done, (custom call) response.custom_tool_call_input
 * .delta..., .done, (local_shell call: added once complete, no argument
 * events), and response.output_item.done; last
 * response.completed (or .incomplete at max_output_tokens, .failed).
 * Responses are stored (unless "store": false) once complete.
 * text.format json_schema constrains the reply to the schema (text/jsonschema.h).
 * Hosted tools (web_search, ...) are a 400 (resp_tools.h). */
#include "server/api_responses.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/mem.h"
#include "server/api_call.h"
#include "server/api_openai.h"
#include "server/api_params.h"
#include "server/api_stream.h"
#include "server/prompt.h"
#include "server/resp_items.h"
#include "server/resp_store.h"
#include "server/resp_tools.h"

#define POLL_MS 1000 /* stream keep-alive period while nothing is generated */

enum { ITEM_NONE, ITEM_MESSAGE, ITEM_CALL, ITEM_REASONING };

typedef struct resp_call {
    api_call a;       /* first: the lifecycle's part (api_call.h) */
    json_t *items;    /* the whole conversation's input items, earlier turns expanded */
    resp_tools rt;    /* the request's tools, normalised (resp_tools.h) */
    json_t *allowed;  /* tool_choice allowed_tools: the callable ones (pt.tools borrows them) */
    json_t *output;   /* output items complete so far */
    cache_hash ns;    /* the tenant's store namespace */
    int store;
    long created;
    /* stream state: one output item open at a time */
    int seq, item, item_index, call_index;
    char msg_id[64];
    char *acc;        /* the open item's text or arguments so far */
    size_t acc_len;
    char *call_name;  /* the open call's tool */
    resp_input_stream input; /* custom tool call: its input streamed */
} resp_call;

/* ---- parameters ---------------------------------------------------------------- */

/* tool_choice kinds resp_tools_choice does not take: allowed_tools (the
 * tools stay listed, calls are held to the allowed ones), and the type
 * of a hosted tool the request declares (that tool is not offered: the
 * model chooses, noted).
 * 1 when tc was one of them (or -1 on error), 0 otherwise. */
static int other_tool_choice(resp_call *c, const json_t *tc, char *why, size_t cap) {
    const char *type = json_string_value(json_object_get(tc, "type"));
    if (!type || !strcmp(type, "function") || !strcmp(type, "custom") || !strcmp(type, "local_shell")) return 0;
    if (!strcmp(type, "allowed_tools")) {
        if (prompt_allowed_tools(c->rt.tools, tc, &c->allowed, &c->a.pt.required, why, cap)) return -1;
        c->a.pt.shown = json_array_size(c->rt.tools) ? c->rt.tools : NULL;
        c->a.pt.tools = c->allowed;
        return 1;
    }
    size_t i;
    const json_t *t;
    int hosted = 0; /* the official API refuses a choice of a hosted tool the request does not declare */
    json_array_foreach(json_object_get(c->a.req, "tools"), i, t)
        hosted |= !strcmp(json_string_value(json_object_get(t, "type")) ?: "", type);
    if (!hosted) return 0; /* resp_tools_choice refuses it */
    c->a.pt.tools = json_array_size(c->rt.tools) ? c->rt.tools : NULL;
    return ignored_note(&c->a.ignored, why, cap, "tool_choice type '%s' (a hosted tool, not offered to the "
                        "model; it chooses among the tools it has)", type) ? -1 : 1;
}

/* tools (resp_tools.h: function, custom, local_shell) and tool_choice. */
static int parse_tools(resp_call *c, char *why, size_t cap) {
    int none = 0, other;
    const json_t *tc = json_object_get(c->a.req, "tool_choice");
    if (resp_tools_parse(&c->rt, json_object_get(c->a.req, "tools"), &c->a.ignored, why, cap) ||
        (other = other_tool_choice(c, tc, why, cap)) < 0 ||
        (!other && resp_tools_choice(&c->rt, tc, &none, &c->a.pt.forced, &c->a.pt.required, why, cap)))
        return -1;
    if (!other) c->a.pt.tools = json_array_size(c->rt.tools) && !none ? c->rt.tools : NULL;
    c->a.gp.tools = render_tool_format(c->a.srv->render, &c->a.pt);
    c->a.gp.json_mode |= c->a.gp.tools == TC_GENERIC; /* the generic reply is one JSON object */
    return 0;
}

/* text.format: text | json_object (one valid JSON object) | json_schema
 * ({"type", "name", "schema", "strict"}: the reply validates against the
 * schema, strict or not; keywords the engine does not enforce are named
 * in x-strata-ignored). */
static int parse_text_format(resp_call *c, char *why, size_t cap) {
    const json_t *fmt = json_object_get(json_object_get(c->a.req, "text"), "format");
    if (!fmt || json_is_null(fmt)) return 0;
    const char *type = json_string_value(json_object_get(fmt, "type"));
    if (type && !strcmp(type, "text")) return 0;
    if (!type || (strcmp(type, "json_object") && strcmp(type, "json_schema"))) {
        snprintf(why, cap, "'text.format.type' must be text, json_object or json_schema");
        return -1;
    }
    if (c->a.gp.tools != TC_NONE) /* the tool-call constraint already shapes the reply */
        return ignored_note(&c->a.ignored, why, cap, "text.format %s (beside tools, the reply is held to the "
                            "tool-call format only)", type);
    c->a.gp.json_mode = 1;
    if (strcmp(type, "json_schema")) return 0;
    return api_call_schema(&c->a, json_object_get(fmt, "schema"), "text.format.schema", why, cap);
}

static int parse_options(resp_call *c, char *why, size_t cap) {
    long max_tokens = 0;
    if (param_int(c->a.req, "max_output_tokens", 1, 1L << 30, &max_tokens, why, cap) < 0) return -1;
    c->a.gp.max_tokens = max_tokens > 0 ? (int)max_tokens : 1 << 30;
    if (param_bool(c->a.req, "stream", &c->a.stream, why, cap) < 0) return -1;
    const json_t *ins = json_object_get(c->a.req, "instructions");
    if (ins && !json_is_null(ins) && !json_is_string(ins)) {
        snprintf(why, cap, "'instructions' must be a string");
        return -1;
    }
    if (parse_tools(c, why, cap) || parse_text_format(c, why, cap)) return -1;
    const json_t *prompt = json_object_get(c->a.req, "prompt"); /* a template stored on OpenAI's servers */
    if (prompt && !json_is_null(prompt) &&
        ignored_note(&c->a.ignored, why, cap, "prompt (a stored prompt template lives on OpenAI's servers; the "
                     "request's own instructions and input are served)"))
        return -1;
    return params_sampling(c->a.req, "stop", &c->a.srv->sampling, &c->a.gp, why, cap);
}

/* ---- the response object --------------------------------------------------------- */

static const char *call_id(resp_call *c, int index) { return api_call_id(&c->a, index, "call_"); }

/* A call item's id: its call id under the item prefix of its kind
 * (fc_, ctc_, lsh_). */
static void call_item_id(resp_call *c, int index, const char *name, char out[64]) {
    snprintf(out, 64, "%s%s", resp_tools_item_prefix(&c->rt, name), call_id(c, index) + strlen("call_"));
}

static json_t *text_part(const char *text, size_t len) {
    return json_pack("{s:s,s:o,s:[],s:[]}", "type", "output_text", "text", json_text(text, len), "annotations",
                     "logprobs");
}

static json_t *message_item(const char *id, const char *text, size_t len, const char *status) {
    json_t *content = text ? json_pack("[o]", text_part(text, len)) : json_array(); /* NULL: opened, no part yet */
    return json_pack("{s:s,s:s,s:s,s:s,s:o}", "id", id, "type", "message", "status", status, "role", "assistant",
                     "content", content);
}

/* Reasoning (harmony's analysis channel) as a reasoning item: the text
 * in content (reasoning_text), no summary. A client sends the item back
 * before the turn it led to (resp_items.c makes it that turn's thinking). */
static json_t *reasoning_item(const char *id, const char *text, size_t len, const char *status) {
    json_t *content = text ? json_pack("[{s:s,s:o}]", "type", "reasoning_text", "text", json_text(text, len))
                           : json_array();
    return json_pack("{s:s,s:s,s:[],s:o,s:s}", "id", id, "type", "reasoning", "summary", "content", content,
                     "status", status);
}

static json_t *call_item(resp_call *c, int index, const char *name, const char *args, size_t len,
                         const char *status) {
    char id[64];
    call_item_id(c, index, name, id);
    return resp_tools_call_item(&c->rt, id, call_id(c, index), name, args, len, status);
}

static json_t *usage_json(const resp_call *c) {
    int out = c->a.g.n_tokens;
    const sched_status *st = &c->a.g.st; /* strata_cache: the per-tier split (an extension) */
    return json_pack("{s:i,s:{s:i},s:i,s:{s:i},s:i,s:o}", "input_tokens", c->a.n_prompt,
                     "input_tokens_details", "cached_tokens", st->n_cached, "output_tokens", out,
                     "output_tokens_details", "reasoning_tokens", 0, "total_tokens", c->a.n_prompt + out,
                     "strata_cache", api_call_cache_json(&c->a));
}

/* A request field echoed in the response, or dflt (a new reference). */
static json_t *echo(const resp_call *c, const char *key, json_t *dflt) {
    const json_t *v = json_object_get(c->a.req, key);
    if (!v || json_is_null(v)) return dflt;
    json_decref(dflt);
    return json_incref((json_t *)v);
}

/* The response object; status "in_progress" has no usage yet. */
static json_t *response_json(resp_call *c, const char *status, json_t *output) {
    json_t *r = json_pack("{s:s,s:s,s:I,s:s,s:n,s:n}", "id", c->a.id, "object", "response", "created_at",
                          (json_int_t)c->created, "status", status, "error", "incomplete_details");
    if (!strcmp(status, "incomplete"))
        json_object_set_new(r, "incomplete_details", json_pack("{s:s}", "reason", "max_output_tokens"));
    json_object_set_new(r, "instructions", echo(c, "instructions", json_null()));
    json_object_set_new(r, "max_output_tokens", echo(c, "max_output_tokens", json_null()));
    json_object_set_new(r, "model", json_string(c->a.srv->model_id));
    json_object_set_new(r, "output", output);
    json_object_set_new(r, "parallel_tool_calls", echo(c, "parallel_tool_calls", json_true()));
    json_object_set_new(r, "previous_response_id", echo(c, "previous_response_id", json_null()));
    json_object_set_new(r, "store", json_boolean(c->store));
    json_object_set_new(r, "temperature", json_real(c->a.gp.sampling.temperature));
    json_object_set_new(r, "text", echo(c, "text", json_pack("{s:{s:s}}", "format", "type", "text")));
    json_object_set_new(r, "tool_choice", echo(c, "tool_choice", json_string("auto")));
    json_object_set_new(r, "tools", echo(c, "tools", json_array()));
    json_object_set_new(r, "top_p", json_real(c->a.gp.sampling.top_p));
    json_object_set_new(r, "truncation", json_string("disabled"));
    json_object_set_new(r, "metadata", echo(c, "metadata", json_object()));
    json_object_set_new(r, "usage", strcmp(status, "in_progress") ? usage_json(c) : json_null());
    return r;
}

/* How the generation ended, in the API's words. */
static const char *final_status(const resp_call *c) {
    if (c->a.g.tool_error || c->a.g.st.finish == FINISH_ERROR) return "failed";
    return strcmp(gen_finish_word(&c->a.g), "length") ? "completed" : "incomplete";
}

/* Keeps a finished response for previous_response_id and GET: the
 * response object and the whole conversation it answered. */
static void remember(resp_call *c, const json_t *response) {
    if (!c->store || !strcmp(json_string_value(json_object_get(response, "status")), "failed")) return;
    char *r = json_dumps(response, JSON_COMPACT), *in = json_dumps(c->items, JSON_COMPACT);
    resp_store_put(c->a.srv->responses, &c->ns, c->a.id, r, in);
    free(r);
    free(in);
}

/* ---- whole replies ------------------------------------------------------------------ */

static json_t *whole_output(resp_call *c, const char *text, size_t len) {
    json_t *out = json_array();
    int calls = c->a.g.n_calls_done && !c->a.g.tool_error;
    char id[64];
    make_id(id, sizeof id, "msg_");
    const char *status = strcmp(final_status(c), "incomplete") ? "completed" : "incomplete";
    /* A call cut by max_output_tokens is returned as generated, never
     * dropped: an item with status "incomplete". */
    const char *open_name, *open_args;
    int open = !strcmp(status, "incomplete") && !c->a.g.tool_error && gen_open_call(&c->a.g, &open_name, &open_args);
    if (c->a.g.reasoning_len) {
        char rid[64];
        make_id(rid, sizeof rid, "rs_");
        json_array_append_new(out, reasoning_item(rid, c->a.g.reasoning, c->a.g.reasoning_len, "completed"));
    }
    if (len || (!calls && !open)) json_array_append_new(out, message_item(id, text, len, status));
    const char **names, **args;
    int n = calls ? tc_calls(c->a.g.tc, &names, &args) : 0;
    for (int i = 0; i < n; i++) json_array_append_new(out, call_item(c, i, names[i], args[i], strlen(args[i]), "completed"));
    if (open) json_array_append_new(out, call_item(c, n, open_name, open_args, strlen(open_args), "incomplete"));
    return out;
}

static void answer_whole(resp_call *c, const http_req *req, http_reply *rep) {
    size_t len;
    char *text = api_collect_text(&c->a.g, req, &len);
    if (!text) {
        reply_openai_error(rep, 499, "client_closed", NULL, "client closed the connection");
        return;
    }
    if (!strcmp(final_status(c), "failed")) {
        free(text);
        reply_openai_error(rep, 500, "server_error", NULL, "generation failed: %s",
                           c->a.g.tool_error ? c->a.g.error : c->a.g.st.error);
        return;
    }
    json_t *r = response_json(c, final_status(c), whole_output(c, text, len));
    free(text);
    remember(c, r);
    reply_json(rep, 200, r);
}

/* ---- streamed replies: one output item open at a time ------------------------------ */

/* An event named by its type, with the next sequence_number; takes ev. */
static void emit(resp_call *c, const char *type, json_t *ev) {
    json_object_set_new(ev, "type", json_string(type));
    json_object_set_new(ev, "sequence_number", json_integer(c->seq++));
    sse_event(&c->a.st.out, type, ev);
}

static void acc_add(resp_call *c, const char *s, size_t n) {
    c->acc = xrealloc(c->acc, c->acc_len + n + 1);
    memcpy(c->acc + c->acc_len, s, n);
    c->acc_len += n;
    c->acc[c->acc_len] = 0;
}

static void item_added(resp_call *c, int kind, json_t *item) {
    c->item = kind;
    c->item_index = (int)json_array_size(c->output);
    c->acc_len = 0;
    emit(c, "response.output_item.added", json_pack("{s:i,s:o}", "output_index", c->item_index, "item", item));
}

static void item_done(resp_call *c, json_t *item) {
    emit(c, "response.output_item.done", json_pack("{s:i,s:O}", "output_index", c->item_index, "item", item));
    json_array_append_new(c->output, item);
    c->item = ITEM_NONE;
}

static void open_message(resp_call *c) {
    make_id(c->msg_id, sizeof c->msg_id, "msg_");
    item_added(c, ITEM_MESSAGE, message_item(c->msg_id, NULL, 0, "in_progress"));
    emit(c, "response.content_part.added", json_pack("{s:s,s:i,s:i,s:o}", "item_id", c->msg_id, "output_index",
                                                     c->item_index, "content_index", 0, "part", text_part("", 0)));
}

static void close_message(resp_call *c) {
    const char *text = c->acc ? c->acc : "";
    emit(c, "response.output_text.done", json_pack("{s:s,s:i,s:i,s:o,s:[]}", "item_id", c->msg_id, "output_index",
                                                   c->item_index, "content_index", 0, "text",
                                                   json_text(text, c->acc_len), "logprobs"));
    emit(c, "response.content_part.done", json_pack("{s:s,s:i,s:i,s:o}", "item_id", c->msg_id, "output_index",
                                                    c->item_index, "content_index", 0, "part",
                                                    text_part(text, c->acc_len)));
    item_done(c, message_item(c->msg_id, text, c->acc_len, "completed"));
}

/* A custom call's input so far, decoded from its arguments: what is new
 * since the last delta goes out as one. */
static void custom_delta(resp_call *c, const char *id) {
    tc_buf fresh = {0};
    resp_input_next(&c->input, c->acc ? c->acc : "", c->acc_len, &fresh);
    if (fresh.len)
        emit(c, "response.custom_tool_call_input.delta", json_pack("{s:s,s:i,s:o}", "item_id", id, "output_index",
                                                                   c->item_index, "delta",
                                                                   json_text(fresh.p, fresh.len)));
    tc_buf_free(&fresh);
}

/* status: "completed", or "incomplete" for a call cut by max_output_tokens
 * (returned as generated, never dropped). */
static void close_call(resp_call *c, const char *status) {
    char id[64];
    call_item_id(c, c->call_index, c->call_name, id);
    const char *args = c->acc ? c->acc : "";
    json_t *item = call_item(c, c->call_index, c->call_name, args, c->acc_len, status);
    switch (resp_tools_kind(&c->rt, c->call_name)) {
    case RESP_TOOL_FUNCTION:
        emit(c, "response.function_call_arguments.done", json_pack("{s:s,s:i,s:s,s:o}", "item_id", id,
                                                                   "output_index", c->item_index, "name",
                                                                   c->call_name, "arguments",
                                                                   json_text(args, c->acc_len)));
        break;
    case RESP_TOOL_CUSTOM:
        custom_delta(c, id);
        emit(c, "response.custom_tool_call_input.done", json_pack("{s:s,s:i,s:O}", "item_id", id, "output_index",
                                                                  c->item_index, "input",
                                                                  json_object_get(item, "input")));
        break;
    case RESP_TOOL_SHELL: /* no argument events: the item is announced whole */
        emit(c, "response.output_item.added", json_pack("{s:i,s:o}", "output_index", c->item_index, "item",
                                                        call_item(c, c->call_index, c->call_name, args, c->acc_len,
                                                                  "in_progress")));
        break;
    }
    item_done(c, item);
    free(c->call_name);
    c->call_name = NULL;
}

static void open_reasoning(resp_call *c) {
    make_id(c->msg_id, sizeof c->msg_id, "rs_");
    item_added(c, ITEM_REASONING, reasoning_item(c->msg_id, NULL, 0, "in_progress"));
}

static void close_reasoning(resp_call *c) {
    const char *text = c->acc ? c->acc : "";
    emit(c, "response.reasoning_text.done", json_pack("{s:s,s:i,s:i,s:o}", "item_id", c->msg_id, "output_index",
                                                      c->item_index, "content_index", 0, "text",
                                                      json_text(text, c->acc_len)));
    item_done(c, reasoning_item(c->msg_id, text, c->acc_len, "completed"));
}

static void close_item(resp_call *c, const char *status) {
    if (c->item == ITEM_REASONING) close_reasoning(c);
    else if (c->item == ITEM_MESSAGE) close_message(c);
    else if (c->item == ITEM_CALL) close_call(c, status);
}

static void stream_event(resp_call *c, const tc_event *e) {
    char id[64];
    switch (e->kind) {
    case TC_EV_TEXT:
        if (c->item != ITEM_MESSAGE) close_item(c, "completed"), open_message(c);
        acc_add(c, e->text, e->len);
        emit(c, "response.output_text.delta", json_pack("{s:s,s:i,s:i,s:o,s:[]}", "item_id", c->msg_id,
                                                        "output_index", c->item_index, "content_index", 0, "delta",
                                                        json_text(e->text, e->len), "logprobs"));
        break;
    case TC_EV_REASONING:
        if (c->item != ITEM_REASONING) close_item(c, "completed"), open_reasoning(c);
        acc_add(c, e->text, e->len);
        emit(c, "response.reasoning_text.delta", json_pack("{s:s,s:i,s:i,s:o}", "item_id", c->msg_id, "output_index",
                                                           c->item_index, "content_index", 0, "delta",
                                                           json_text(e->text, e->len)));
        break;
    case TC_EV_CALL_BEGIN:
        close_item(c, "completed");
        c->call_index = e->index;
        c->call_name = xstrdup(e->text);
        resp_input_free(&c->input);
        resp_input_init(&c->input);
        if (resp_tools_kind(&c->rt, c->call_name) == RESP_TOOL_SHELL) { /* announced when complete */
            c->item = ITEM_CALL, c->item_index = (int)json_array_size(c->output), c->acc_len = 0;
            break;
        }
        item_added(c, ITEM_CALL, call_item(c, e->index, c->call_name, "", 0, "in_progress"));
        break;
    case TC_EV_CALL_ARGS:
        if (c->item != ITEM_CALL) break;
        acc_add(c, e->text, e->len);
        call_item_id(c, c->call_index, c->call_name, id);
        if (resp_tools_kind(&c->rt, c->call_name) == RESP_TOOL_CUSTOM) custom_delta(c, id);
        else if (resp_tools_kind(&c->rt, c->call_name) == RESP_TOOL_FUNCTION)
            emit(c, "response.function_call_arguments.delta", json_pack("{s:s,s:i,s:o}", "item_id", id,
                                                                        "output_index", c->item_index, "delta",
                                                                        json_text(e->text, e->len)));
        break;
    case TC_EV_CALL_END:
        if (c->item == ITEM_CALL) close_call(c, "completed");
        break;
    }
}

static void stream_finish(resp_call *c) {
    const char *status = final_status(c);
    if (!strcmp(status, "failed")) {
        c->item = ITEM_NONE; /* what was open is not an answer */
        json_t *r = response_json(c, status, json_incref(c->output));
        json_object_set_new(r, "error", json_pack("{s:s,s:s}", "code", "server_error", "message",
                                                  c->a.g.tool_error ? c->a.g.error : c->a.g.st.error));
        emit(c, "response.failed", json_pack("{s:o}", "response", r));
    } else {
        close_item(c, status); /* a call still open was cut by the limit */
        if (!json_array_size(c->output)) open_message(c), close_message(c); /* never no output */
        json_t *r = response_json(c, status, json_incref(c->output));
        remember(c, r);
        emit(c, strcmp(status, "completed") ? "response.incomplete" : "response.completed",
             json_pack("{s:o}", "response", r));
    }
    c->a.st.finished = 1;
}

static void stream_produce(api_stream *st) {
    resp_call *c = (resp_call *)api_call_of(st);
    if (c->a.phase == 0) {
        emit(c, "response.created", json_pack("{s:o}", "response", response_json(c, "in_progress", json_array())));
        emit(c, "response.in_progress", json_pack("{s:o}", "response", response_json(c, "in_progress", json_array())));
        c->a.phase = 1;
        return;
    }
    const tc_event *ev;
    int n = gen_pull(&c->a.g, POLL_MS, &ev);
    for (int i = 0; i < n; i++) stream_event(c, &ev[i]);
    if (c->a.g.done) {
        stream_finish(c);
    } else if (!n) {
        char line[96]; /* keep-alive, and it reveals a client that left */
        snprintf(line, sizeof line, "prefill %d/%d", c->a.g.st.n_prompt_done, c->a.g.st.n_prompt);
        sse_comment(&c->a.st.out, line);
    }
}

/* ---- the dialect ---------------------------------------------------------------------- */

static int build(api_call *a, int32_t **ids, size_t *n, prompt_cache_info *ci, char *why, size_t cap) {
    resp_call *c = (resp_call *)a;
    if (parse_options(c, why, cap)) return -1;
    const char *ins = json_string_value(json_object_get(c->a.req, "instructions"));
    json_t *msgs = resp_items_messages(ins, c->items, &c->a.ignored, why, cap);
    if (!msgs) return -1;
    int rc = api_call_prompt(&c->a, msgs, ids, n, ci, why, cap);
    json_decref(msgs);
    return rc;
}

static void whole(api_call *a, const http_req *req, http_reply *rep) { answer_whole((resp_call *)a, req, rep); }

static void free_own(api_call *a) {
    resp_call *c = (resp_call *)a;
    json_decref(c->items);
    resp_tools_free(&c->rt);
    json_decref(c->allowed);
    json_decref(c->output);
    free(c->call_name);
    free(c->acc);
    resp_input_free(&c->input);
}

static const api_dialect RESPONSES = {
    .build = build, .fail = api_openai_fail, .produce = stream_produce, .whole = whole, .free = free_own};

/* ---- entry points ------------------------------------------------------------------------ */

static void reply_not_found(http_reply *rep, int status, const char *param, const char *code, const char *what,
                            const char *id) {
    char msg[512]; /* the id may be any bytes of the URL: json_text makes them UTF-8 */
    snprintf(msg, sizeof msg, "%s with id '%s' not found (never stored, deleted, or evicted from the store of "
             "recent responses).", what, id);
    reply_json(rep, status, json_pack("{s:{s:o,s:s,s:s,s:s}}", "error", "message", json_text(msg, strlen(msg)),
                                      "type", "invalid_request_error", "param", param, "code", code));
}

/* The conversation before this request (a stored response's input and
 * output), then the new input. NULL after replying with the error. */
static json_t *conversation(server *s, const json_t *body, const cache_hash *ns, http_reply *rep) {
    char why[512] = "";
    json_t *input = resp_items_of_input(json_object_get(body, "input"), why, sizeof why);
    json_t *check = input ? resp_items_messages("-", input, NULL, why, sizeof why) : NULL; /* errors index the new input */
    json_decref(check);
    if (!check) {
        json_decref(input);
        reply_openai_error(rep, 400, "invalid_request_error", NULL, "%s", why);
        return NULL;
    }
    const json_t *prev = json_object_get(body, "previous_response_id");
    if (!prev || json_is_null(prev)) return input;
    char *resp = NULL, *items = NULL;
    if (!json_is_string(prev) || resp_store_get(s->responses, ns, json_string_value(prev), &resp, &items)) {
        reply_not_found(rep, 400, "previous_response_id", "previous_response_not_found", "Previous response",
                        json_is_string(prev) ? json_string_value(prev) : "?");
        json_decref(input);
        return NULL;
    }
    json_t *all = json_loads(items, 0, NULL), *r = json_loads(resp, 0, NULL);
    if (!json_is_array(all)) json_decref(all), all = json_array();
    json_array_extend(all, json_object_get(r, "output"));
    json_array_extend(all, input);
    json_decref(r);
    json_decref(input);
    free(resp);
    free(items);
    return all;
}

void api_responses_create(server *s, const http_req *req, http_reply *rep) {
    json_t *body = parse_body_openai(req, rep);
    if (!body) return;
    const char *model = json_string_value(json_object_get(body, "model"));
    char why[512] = "";
    int store = 1;
    cache_hash ns;
    server_replay_ns(s, server_tenant(s, req), NULL, &ns);
    json_t *items = NULL;
    if (!server_knows_model(s, model))
        reply_openai_error(rep, 404, "invalid_request_error", "model_not_found",
                           "model '%s' does not exist; this server serves '%s'", model, s->model_id);
    else if (param_bool(body, "store", &store, why, sizeof why) < 0 ||
             param_metadata(body, "metadata", why, sizeof why) < 0)
        reply_openai_error(rep, 400, "invalid_request_error", NULL, "%s", why);
    else
        items = conversation(s, body, &ns, rep);
    if (!items) {
        json_decref(body);
        return;
    }
    resp_call *c = xcalloc(1, sizeof *c);
    c->a = (api_call){.srv = s, .d = &RESPONSES, .req = body};
    c->items = items, c->ns = ns, c->store = store, c->output = json_array();
    c->created = (long)time(NULL);
    make_id(c->a.id, sizeof c->a.id, "resp_");
    api_call_run(&c->a, req, rep);
}

/* GET /v1/responses/{id}, GET .../{id}/input_items, DELETE /v1/responses/{id}. */
void api_responses_item(server *s, const http_req *req, http_reply *rep) {
    char id[128];
    const char *rest = req->path + strlen("/v1/responses/"), *slash = strchr(rest, '/');
    snprintf(id, sizeof id, "%.*s", slash ? (int)(slash - rest) : (int)strlen(rest), rest);
    int inputs = slash && !strcmp(slash, "/input_items"), del = !strcmp(req->method, "DELETE");
    cache_hash ns;
    server_replay_ns(s, server_tenant(s, req), NULL, &ns);
    char *resp = NULL, *items = NULL;
    if ((slash && (!inputs || del)) || !id[0]) {
        reply_openai_error(rep, 404, "invalid_request_error", NULL, "no endpoint %s %s", req->method, req->path);
    } else if (del ? resp_store_delete(s->responses, &ns, id) : resp_store_get(s->responses, &ns, id, &resp, &items)) {
        reply_not_found(rep, 404, "response_id", "response_not_found", "Response", id);
    } else if (del) {
        reply_json(rep, 200, json_pack("{s:s,s:s,s:b}", "id", id, "object", "response.deleted", "deleted", 1));
    } else if (inputs) {
        reply_json(rep, 200, json_pack("{s:s,s:o,s:b}", "object", "list", "data", json_loads(items, 0, NULL),
                                       "has_more", 0));
    } else {
        reply_json(rep, 200, json_loads(resp, 0, NULL));
    }
    free(resp);
    free(items);
}
