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
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "base/strbuf.h"
#include "server/api_params.h"
#include "server/gen.h"
#include "server/normalize.h"
#include "text/jsonscan.h"
#include "server/prompt.h"
#include "server/api_call.h"
#include "server/api_stream.h"
#include "text/jsonload.h"

#define POLL_MS 1000

typedef struct ant_call {
    api_call a;    /* first: the lifecycle's part (api_call.h) */
    json_t *tools; /* normalised (function shape) */
    json_t *shown; /* ...of which listed in the prompt (not deferred), or NULL: all */
    int block, block_open; /* stream: index of the current content block */
    int block_kind; /* of the open block: BLOCK_TEXT, BLOCK_THINKING or BLOCK_OTHER */
    json_t *diagnostics; /* the cache-diagnosis beta's answer, or NULL when not asked */
} ant_call;

static void reply_error(http_reply *rep, int status, const char *type, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void reply_error(http_reply *rep, int status, const char *type, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    strata_vfmt(msg, sizeof msg, fmt, ap);
    va_end(ap);
    reply_anthropic_error(rep, status, type, msg);
}

/* ---- normalising messages -------------------------------------------------- */

/* One content block of message mi into the text accumulator, the tool
 * calls (assistant) or tool results (user). A user's other blocks
 * (images, documents, search results, tool references, ...) are read as
 * prompt_content_text reads parts; an assistant's blocks from Anthropic's
 * own server tools (server_tool_use, web_search_tool_result, ...) cannot
 * have come from this server and are left out, named in ig. */
static char *tool_result_text(const json_t *content, const char *where, const json_t *req_tools, req_ignored *ig,
                              char *why, size_t cap);

static int take_block(const json_t *b, size_t mi, size_t bi, int assistant, strbuf *text, strbuf *thinking,
                      json_t *calls, json_t *results, const json_t *req_tools, req_ignored *ig, char *why,
                      size_t cap) {
    const char *type = json_string_value(json_object_get(b, "type"));
    char where[96];
    snprintf(where, sizeof where, "messages[%zu].content[%zu]", mi, bi);
    if (type && !strcmp(type, "text") && json_is_string(json_object_get(b, "text"))) {
        strbuf_puts(text, json_string_value(json_object_get(b, "text")));
    } else if (type && !strcmp(type, "tool_use") && assistant) {
        const json_t *name = json_object_get(b, "name"), *input = json_object_get(b, "input");
        if (!json_is_string(name) || !json_is_object(input)) {
            snprintf(why, cap, "%s: tool_use needs a string name and an object input", where);
            return -1;
        }
        json_array_append_new(calls, json_pack("{s:O*,s:s,s:{s:O,s:O}}", "id", json_object_get(b, "id"), "type",
                                               "function", "function", "name", name, "arguments", input));
    } else if (type && !strcmp(type, "thinking") && assistant) {
        /* earlier turns' reasoning, sent back: the turn's "thinking", which a template that shows it
           (gpt-oss keeps a tool-call turn's analysis) renders and the others ignore */
        const char *t = json_string_value(json_object_get(b, "thinking"));
        if (t) strbuf_puts(thinking, t);
    } else if (type && !strcmp(type, "redacted_thinking") && assistant) {
        /* encrypted reasoning of another server: accepted, not rendered */
    } else if (type && !strcmp(type, "tool_result") && !assistant) {
        const json_t *c = json_object_get(b, "content");
        char inner[112];
        snprintf(inner, sizeof inner, "%s.content", where);
        char *t = c ? tool_result_text(c, inner, req_tools, ig, why, cap) : xstrdup("");
        if (!t) return -1;
        json_array_append_new(results, json_pack("{s:s,s:s,s:O*}", "role", "tool", "content", t, "tool_call_id",
                                                 json_object_get(b, "tool_use_id")));
        free(t);
    } else if (type && (!strcmp(type, "tool_use") || !strcmp(type, "tool_result"))) {
        strata_fmt(why, cap, "%s: a %s block belongs in %s message", where, type, assistant ? "a user" : "an assistant");
        return -1;
    } else if (assistant) {
        return ignored_note(ig, why, cap, "%s: assistant block '%s' (not rendered)", where, type ? type : "?");
    } else {
        char base[48];
        snprintf(base, sizeof base, "messages[%zu].content", mi);
        return prompt_part_text(b, base, bi, ig, text, why, cap);
    }
    return 0;
}

/* A system message inside messages (Claude Code sends one after the
 * first user turn): kept where it stands, as a system turn; the renderer
 * folds it into a neighbouring turn when the template cannot place it
 * (text/render.h). */
static int add_system_message(json_t *out, const json_t *m, size_t mi, req_ignored *ig, char *why, size_t cap) {
    char where[48];
    snprintf(where, sizeof where, "messages[%zu].content", mi);
    char *text = prompt_content_text(json_object_get(m, "content"), where, ig, why, cap);
    if (!text) return -1;
    json_array_append_new(out, json_pack("{s:s,s:s}", "role", "system", "content", text));
    free(text);
    return 0;
}

static int add_message(json_t *out, const json_t *m, size_t mi, const json_t *req_tools, req_ignored *ig, char *why,
                       size_t cap) {
    const char *role = json_string_value(json_object_get(m, "role"));
    if (role && !strcmp(role, "system")) return add_system_message(out, m, mi, ig, why, cap);
    if (!role || (strcmp(role, "user") && strcmp(role, "assistant"))) {
        strata_fmt(why, cap, "messages[%zu].role '%s' must be 'user', 'assistant' or 'system'", mi, role ? role : "?");
        return -1;
    }
    int assistant = !strcmp(role, "assistant");
    const json_t *content = json_object_get(m, "content");
    strbuf text = {0}, thinking = {0};
    json_t *calls = json_array(), *results = json_array();
    int rc = 0;
    if (json_is_string(content)) {
        strbuf_puts(&text, json_string_value(content));
    } else if (json_is_array(content)) {
        size_t bi;
        const json_t *b;
        json_array_foreach(content, bi, b)
            if ((rc = take_block(b, mi, bi, assistant, &text, &thinking, calls, results, req_tools, ig, why, cap)))
                break;
    } else {
        snprintf(why, cap, "messages[%zu].content must be a string or an array of blocks", mi);
        rc = -1;
    }
    if (!rc) {
        json_array_extend(out, results); /* tool results precede the user's words */
        if (text.s || json_array_size(calls) || !json_array_size(results)) {
            json_t *msg = json_pack("{s:s,s:s}", "role", role, "content", text.s ? text.s : "");
            if (json_array_size(calls)) json_object_set(msg, "tool_calls", calls);
            if (thinking.s) json_object_set_new(msg, "thinking", json_string(thinking.s));
            json_array_append_new(out, msg);
        }
    }
    strbuf_free(&text);
    strbuf_free(&thinking);
    json_decref(calls);
    json_decref(results);
    return rc;
}

/* A cache_control on any block of `holder` (an array of blocks, or one
 * block) is a breakpoint through the first n normalised messages, kept
 * for its ttl (policy_ttl_parse: "5m" by default, "1h", any N s/m/h up to
 * a day). A breakpoint
 * inside a message counts from the message's end. */
static int note_breaks(const json_t *holder, size_t n_messages, prompt_cache_info *ci, char *why, size_t cap) {
    if (!ci) return 0;
    size_t i;
    const json_t *b;
    for (i = 0; i < (json_is_array(holder) ? json_array_size(holder) : 1); i++) {
        b = json_is_array(holder) ? json_array_get(holder, i) : holder;
        const json_t *cc = json_object_get(b, "cache_control");
        if (!json_is_object(cc)) continue;
        const char *ttl = json_string_value(json_object_get(cc, "ttl"));
        double ttl_s;
        if (policy_ttl_parse(ttl, &ttl_s)) {
            strata_fmt(why, cap, "cache_control.ttl must be a duration such as '5m' or '1h' (at most 24h), not '%s'",
                       ttl);
            return -1;
        }
        if (ci->n_breaks < (int)(sizeof ci->breaks / sizeof ci->breaks[0]))
            ci->breaks[ci->n_breaks++].n_messages = n_messages, ci->breaks[ci->n_breaks - 1].ttl_s = ttl_s;
    }
    return 0;
}

/* The system prompt (if any) and the messages, normalised. */
static json_t *system_and_messages(const json_t *req, const json_t *sys, const json_t *msgs, prompt_cache_info *ci,
                                   req_ignored *ig, char *why, size_t cap) {
    json_t *out = json_array();
    if (sys && !json_is_null(sys)) {
        char *t = prompt_content_text(sys, "system", ig, why, cap);
        if (!t) {
            json_decref(out);
            return NULL;
        }
        json_array_append_new(out, json_pack("{s:s,s:s}", "role", "system", "content", t));
        free(t);
    }
    size_t i;
    const json_t *m;
    int rc = note_breaks(sys, 1, ci, why, cap) ||
             note_breaks(json_object_get(req, "tools"), json_array_size(out), ci, why, cap);
    json_array_foreach(msgs, i, m) {
        if (rc) break;
        rc = add_message(out, m, i, json_object_get(req, "tools"), ig, why, cap) ||
             note_breaks(json_object_get(m, "content"), json_array_size(out), ci, why, cap);
    }
    /* Automatic caching: a top-level cache_control marks the whole conversation. */
    if (!rc && json_is_object(json_object_get(req, "cache_control"))) rc = note_breaks(req, json_array_size(out), ci, why, cap);
    if (rc) {
        json_decref(out);
        return NULL;
    }
    return out;
}

static json_t *normal_messages(const json_t *req, prompt_cache_info *ci, req_ignored *ig, char *why, size_t cap) {
    const json_t *msgs = json_object_get(req, "messages");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        snprintf(why, cap, "messages: must be a non-empty array");
        return NULL;
    }
    const char *held_out;
    json_t *sys = normalize_system(json_object_get(req, "system"), &held_out); /* volatile client text out */
    if (held_out && (json_is_array(sys) ? !json_array_size(sys) : !*json_string_value(sys))) {
        json_decref(sys); /* it was all held out: no system prompt */
        sys = NULL;
    }
    if (ci) ci->held_out = held_out;
    json_t *out = system_and_messages(req, sys, msgs, ci, ig, why, cap);
    json_decref(sys);
    return out;
}

/* Tool types Anthropic's servers run (web search, web fetch, code
 * execution, tool search, MCP connectors): not offered to the model
 * here, since no one here would run them; named in ig. */
static int server_tool(const char *type) {
    static const char *const PREFIXES[] = {"web_search", "web_fetch", "code_execution", "tool_search_tool",
                                           "mcp_toolset", NULL};
    for (int i = 0; type && PREFIXES[i]; i++)
        if (!strncmp(type, PREFIXES[i], strlen(PREFIXES[i]))) return 1;
    return 0;
}

/* Anthropic tools -> the normalised (OpenAI function) shape. A client
 * tool is {name, description, input_schema} (type absent or "custom");
 * an Anthropic-defined client tool (bash_*, text_editor_*, computer_*,
 * memory_*: the client runs it, the schema is Anthropic's) is offered by
 * its name taking any object; server tools are left out. An empty list
 * is NULL (no tools). */
static json_t *normal_tools(const json_t *tools, req_ignored *ig, char *why, size_t cap) {
    json_t *out = json_array();
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        const char *type = json_string_value(json_object_get(t, "type"));
        int custom = !type || !strcmp(type, "custom");
        if (server_tool(type)) {
            if (ignored_note(ig, why, cap, "tools[%zu]: server tool '%s' (runs on Anthropic's servers; not offered "
                             "to the model)", i, type))
                goto fail;
            continue;
        }
        if (!custom && ignored_note(ig, why, cap, "tools[%zu]: the schema of Anthropic-defined tool '%s' (offered "
                                    "taking any object)", i, type))
            goto fail;
        json_array_append_new(out, json_pack("{s:s,s:{s:O*,s:O*,s:O*}}", "type", "function", "function", "name",
                                             json_object_get(t, "name"), "description",
                                             json_object_get(t, "description"), "parameters",
                                             custom ? json_object_get(t, "input_schema") : NULL));
    }
    if (json_array_size(out)) return out;
fail:
    json_decref(out);
    return NULL;
}

static int deferred(const json_t *t) { return json_is_true(json_object_get(t, "defer_loading")); }

/* The normalised tools listed in the prompt: all but the deferred ones
 * (tool search): Claude Code adds each tool a search loads to `tools`, in
 * name order, so listing them would change the prompt's early part and
 * lose the cache; they are shown where the search result names them
 * (tool_reference_text). NULL when none is deferred. */
static json_t *shown_tools(const json_t *req_tools, const json_t *normal) {
    size_t i;
    const json_t *t;
    int any = 0;
    json_array_foreach(req_tools, i, t) any |= deferred(t);
    if (!any || !normal) return NULL;
    json_t *out = json_array();
    json_array_foreach(normal, i, t) {
        const char *name = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
        size_t j;
        const json_t *rt;
        int hide = 0;
        json_array_foreach(req_tools, j, rt)
            if (deferred(rt) && !strcmp(json_string_value(json_object_get(rt, "name")) ?: "", name)) hide = 1;
        if (!hide) json_array_append(out, (json_t *)t);
    }
    return out;
}

/* A tool_reference part (a tool search's answer): the tool's definition
 * where the search result stands, as Anthropic's API expands it; a name
 * not among the request's tools is the name alone. */
static void tool_reference_text(const json_t *part, const json_t *req_tools, strbuf *out) {
    const char *name = json_string_value(json_object_get(part, "tool_name")) ?: "?";
    size_t i;
    const json_t *t;
    strbuf_puts(out, "Tool available: ");
    strbuf_puts(out, name);
    json_array_foreach(req_tools, i, t) {
        if (strcmp(json_string_value(json_object_get(t, "name")) ?: "", name)) continue;
        json_t *def = json_pack("{s:s,s:O*,s:O*}", "name", name, "description", json_object_get(t, "description"),
                                "parameters", json_object_get(t, "input_schema"));
        char *text = def ? json_dumps(def, JSON_COMPACT) : NULL;
        if (text) strbuf_puts(out, "\n"), strbuf_puts(out, text);
        free(text);
        json_decref(def);
        break;
    }
}

/* A tool_result's content: a string, or parts read as prompt_part_text
 * reads them, tool references expanded into definitions. */
static char *tool_result_text(const json_t *content, const char *where, const json_t *req_tools, req_ignored *ig,
                              char *why, size_t cap) {
    if (!json_is_array(content)) return prompt_content_text(content, where, ig, why, cap);
    strbuf out = {0};
    size_t i;
    const json_t *part;
    json_array_foreach(content, i, part) {
        const char *type = json_string_value(json_object_get(part, "type"));
        if (type && !strcmp(type, "tool_reference")) tool_reference_text(part, req_tools, &out);
        else if (prompt_part_text(part, where, i, ig, &out, why, cap)) {
            strbuf_free(&out);
            return NULL;
        }
    }
    return strbuf_take(&out);
}

/* Anthropic's cache-diagnosis beta ("diagnostics": {"previous_message_id":
 * id or null}): the first divergence from the request whose reply had that
 * id, by part (system, messages) with the input tokens past it. */
static json_t *miss_reason(ant_call *c, const json_t *msgs, const int32_t *ids, size_t n) {
    const json_t *prev = json_object_get(json_object_get(c->a.req, "diagnostics"), "previous_message_id");
    cache_diag d;
    if (!json_is_string(prev)) return json_null(); /* the first turn: nothing to compare */
    if (!diag_compare_reply(c->a.srv->diag, json_string_value(prev), &c->a.replay_ns, ids, (int)n, &d))
        return json_pack("{s:s}", "type", "previous_message_not_found");
    if (!d.diverged) return json_null();
    int k = diag_message_at(c->a.msg_ends, c->a.n_msgs, d.first_diff);
    const char *role = json_string_value(json_object_get(json_array_get(msgs, k < 0 ? 0 : (size_t)k), "role"));
    return json_pack("{s:s,s:i}", "type", k >= 0 && role && !strcmp(role, "system") ? "system_changed" : "messages_changed",
                     "cache_missed_input_tokens", (int)n - d.first_diff);
}

static int build_prompt(ant_call *c, int32_t **ids, size_t *n, prompt_cache_info *ci, char *why, size_t cap) {
    json_t *msgs = normal_messages(c->a.req, ci, &c->a.ignored, why, cap);
    if (!msgs) return -1;
    int rc = api_call_prompt(&c->a, msgs, ids, n, ci, why, cap);
    if (!rc && ci && json_is_object(json_object_get(c->a.req, "diagnostics"))) {
        c->diagnostics = json_pack("{s:o}", "cache_miss_reason", miss_reason(c, msgs, *ids, *n));
        diag_remember_reply(c->a.srv->diag, c->a.id, &c->a.replay_ns, *ids, (int)*n);
    }
    json_decref(msgs);
    return rc;
}

/* ---- parameters -------------------------------------------------------------------- */

/* tools: [{name, description, input_schema}]; tool_choice: {type: auto |
 * any | tool (with name) | none}. */
static int parse_tools(ant_call *c, char *why, size_t cap) {
    const json_t *tools = json_object_get(c->a.req, "tools"), *t;
    if (!tools || json_is_null(tools)) return 0;
    size_t i;
    if (!json_is_array(tools)) {
        snprintf(why, cap, "tools: must be an array");
        return -1;
    }
    json_array_foreach(tools, i, t) if (!json_is_string(json_object_get(t, "name"))) {
        snprintf(why, cap, "tools.%zu.name: field required", i);
        return -1;
    }
    why[0] = 0;
    c->tools = normal_tools(tools, &c->a.ignored, why, cap);
    if (!c->tools && why[0]) return -1;
    c->a.pt.tools = c->tools;
    c->shown = shown_tools(tools, c->tools);
    c->a.pt.shown = c->shown;
    const json_t *choice = json_object_get(c->a.req, "tool_choice");
    const char *type = json_string_value(json_object_get(choice, "type"));
    if (type && !strcmp(type, "none")) c->a.pt.tools = NULL;
    else if (type && !strcmp(type, "any")) c->a.pt.required = 1;
    else if (type && !strcmp(type, "tool")) {
        c->a.pt.forced = json_string_value(json_object_get(choice, "name"));
        c->a.pt.required = 1;
        if (!c->a.pt.forced) {
            snprintf(why, cap, "tool_choice.name: field required for type 'tool'");
            return -1;
        }
    } else if (choice && !json_is_null(choice) && !(type && !strcmp(type, "auto"))) {
        snprintf(why, cap, "tool_choice.type: must be auto, any, tool or none");
        return -1;
    }
    c->a.gp.tools = render_tool_format(c->a.srv->render, &c->a.pt);
    c->a.gp.json_mode = c->a.gp.tools == TC_GENERIC;
    return 0;
}

static int parse_options(ant_call *c, char *why, size_t cap) {
    long max_tokens = 0;
    int r = param_int(c->a.req, "max_tokens", 1, 1L << 30, &max_tokens, why, cap);
    if (r <= 0) {
        if (!r) snprintf(why, cap, "max_tokens: field required");
        return -1;
    }
    c->a.gp.max_tokens = (int)max_tokens;
    if (param_bool(c->a.req, "stream", &c->a.stream, why, cap) < 0) return -1;
    if (parse_tools(c, why, cap)) return -1;
    return params_sampling(c->a.req, "stop_sequences", &c->a.srv->sampling, &c->a.gp, why, cap);
}

/* ---- replies ------------------------------------------------------------------------- */

static const char *stop_reason(const ant_call *c) {
    if (c->a.g.n_calls_done && !c->a.g.tool_error && (c->a.g.st.finish != FINISH_LENGTH || c->a.g.one_call)) return "tool_use";
    if (c->a.g.stopped_by_string) return "stop_sequence";
    return c->a.g.st.finish == FINISH_LENGTH ? "max_tokens" : "end_turn";
}

static json_t *stop_sequence(const ant_call *c) {
    return c->a.g.stopped_by_string ? json_string(c->a.gp.stops[c->a.g.text.hit]) : json_null();
}

/* Anthropic splits the prompt into cache reads, cache writes (tokens this
 * request newly puts into the cache, by retention: a mark of an hour or
 * more is a 1h write) and the rest. */
static json_t *usage(const ant_call *c, int output_tokens) {
    const sched_status *st = &c->a.g.st;
    int cached = st->n_cached, fresh = st->n_cache_new, fresh_1h = st->n_cache_new_1h;
    return json_pack("{s:i,s:i,s:i,s:i,s:{s:i,s:i},s:o}", "input_tokens", c->a.n_prompt - cached - fresh,
                     "output_tokens", output_tokens, "cache_creation_input_tokens", fresh, "cache_read_input_tokens",
                     cached, "cache_creation", "ephemeral_5m_input_tokens", fresh - fresh_1h,
                     "ephemeral_1h_input_tokens", fresh_1h, "strata_cache", api_call_cache_json(&c->a));
}

static json_t *message(const ant_call *c, json_t *content, json_t *reason, json_t *seq, int out_tokens) {
    json_t *m = json_pack("{s:s,s:s,s:s,s:s,s:o,s:o,s:o,s:o}", "id", c->a.id, "type", "message", "role", "assistant",
                          "model", c->a.srv->model_id, "content", content, "stop_reason", reason, "stop_sequence", seq,
                          "usage", usage(c, out_tokens));
    if (c->diagnostics) json_object_set(m, "diagnostics", c->diagnostics);
    return m;
}

static const char *call_id(ant_call *c, int index) { return api_call_id(&c->a, index, "toolu_"); }

/* A call cut by max_tokens is returned as generated: a tool_use whose input
 * is the object its arguments were on the way to (tc_json_close_partial). */
static void add_cut_call(ant_call *c, json_t *content, int index) {
    const gen *g = &c->a.g;
    char *closed = tc_json_close_partial(g->open_args ? g->open_args : "", g->open_args_len);
    json_t *input = closed ? json_load_lenient(closed, strlen(closed), 0, NULL, NULL) : NULL;
    free(closed);
    json_array_append_new(content, json_pack("{s:s,s:s,s:s,s:o}", "type", "tool_use", "id", call_id(c, index), "name",
                                             g->open_name, "input", json_is_object(input) ? input : json_object()));
    if (input && !json_is_object(input)) json_decref(input);
}

/* The calls the reply completed, as tool_use blocks. */
static void add_calls(ant_call *c, json_t *content) {
    const char **names, **args;
    int n = tc_calls(c->a.g.tc, &names, &args);
    for (int i = 0; i < n; i++) {
        json_t *input = json_load_lenient(args[i], strlen(args[i]), 0, NULL, NULL);
        json_array_append_new(content, json_pack("{s:s,s:s,s:s,s:o}", "type", "tool_use", "id", call_id(c, i), "name",
                                                 names[i], "input", input ? input : json_object()));
    }
}

/* Reasoning (harmony's analysis channel) as a thinking block. The
 * signature is empty: nothing here is signed, and a client sends the
 * block back as it got it (take_block turns it into the turn's thinking). */
static json_t *thinking_block(const char *text, size_t len) {
    return json_pack("{s:s,s:o,s:s}", "type", "thinking", "thinking", json_text(text, len), "signature", "");
}

static json_t *whole_content(ant_call *c, const char *text, size_t len) {
    json_t *content = json_array();
    if (c->a.g.reasoning_len) json_array_append_new(content, thinking_block(c->a.g.reasoning, c->a.g.reasoning_len));
    if (len) json_array_append_new(content, json_pack("{s:s,s:o}", "type", "text", "text", json_text(text, len)));
    if (c->a.g.tool_error) return content;
    if (c->a.g.n_calls_done) add_calls(c, content);
    if (c->a.g.open_name && c->a.g.st.finish == FINISH_LENGTH) add_cut_call(c, content, c->a.g.n_calls_done);
    return content;
}

static void answer_whole(ant_call *c, const http_req *req, http_reply *rep) {
    size_t len;
    char *text = api_collect_text(&c->a.g, req, &len);
    if (!text) {
        reply_error(rep, 499, "api_error", "client closed the connection");
        return;
    }
    if (c->a.g.st.finish == FINISH_ERROR || c->a.g.tool_error) {
        free(text);
        reply_error(rep, 500, "api_error", "generation failed: %s",
                    c->a.g.tool_error ? c->a.g.error : c->a.g.st.error);
        return;
    }
    json_t *content = whole_content(c, text, len);
    free(text);
    reply_json(rep, 200, message(c, content, json_string(stop_reason(c)), stop_sequence(c), c->a.g.n_tokens));
}

/* ---- streams: one content block open at a time ------------------------------ */

static void close_block(ant_call *c) {
    if (!c->block_open) return;
    sse_event(&c->a.st.out, "content_block_stop", json_pack("{s:s,s:i}", "type", "content_block_stop", "index", c->block));
    c->block_open = 0;
    c->block++;
}

enum { BLOCK_OTHER, BLOCK_TEXT, BLOCK_THINKING };

static void open_block(ant_call *c, json_t *block, int kind) {
    close_block(c);
    sse_event(&c->a.st.out, "content_block_start",
              json_pack("{s:s,s:i,s:o}", "type", "content_block_start", "index", c->block, "content_block", block));
    c->block_open = 1;
    c->block_kind = kind;
}

static void block_delta(ant_call *c, json_t *delta) {
    sse_event(&c->a.st.out, "content_block_delta",
              json_pack("{s:s,s:i,s:o}", "type", "content_block_delta", "index", c->block, "delta", delta));
}

static void emit_event(ant_call *c, const tc_event *e) {
    switch (e->kind) {
    case TC_EV_TEXT:
        if (!c->block_open || c->block_kind != BLOCK_TEXT)
            open_block(c, json_pack("{s:s,s:s}", "type", "text", "text", ""), BLOCK_TEXT);
        block_delta(c, json_pack("{s:s,s:o}", "type", "text_delta", "text", json_text(e->text, e->len)));
        break;
    case TC_EV_REASONING:
        if (!c->block_open || c->block_kind != BLOCK_THINKING) open_block(c, thinking_block("", 0), BLOCK_THINKING);
        block_delta(c, json_pack("{s:s,s:o}", "type", "thinking_delta", "thinking", json_text(e->text, e->len)));
        break;
    case TC_EV_CALL_BEGIN:
        open_block(c, json_pack("{s:s,s:s,s:o,s:{}}", "type", "tool_use", "id", call_id(c, e->index), "name",
                                json_text(e->text, e->len), "input"), BLOCK_OTHER);
        break;
    case TC_EV_CALL_ARGS:
        block_delta(c, json_pack("{s:s,s:o}", "type", "input_json_delta", "partial_json", json_text(e->text, e->len)));
        break;
    case TC_EV_CALL_END:
        close_block(c);
        break;
    }
}

#define ATTACH_WAIT_MS 60000 /* a long disk restore, at most, before message_start */

static void stream_start(ant_call *c) {
    gen_wait_attached(&c->a.g, ATTACH_WAIT_MS); /* message_start's usage is then the final split */
    sse_event(&c->a.st.out, "message_start",
              json_pack("{s:s,s:o}", "type", "message_start", "message",
                        message(c, json_array(), json_null(), json_null(), 0)));
    sse_event(&c->a.st.out, "ping", json_pack("{s:s}", "type", "ping"));
    c->a.phase = 1;
}

static void stream_finish(ant_call *c) {
    if (!c->block && !c->block_open) /* never zero blocks */
        open_block(c, json_pack("{s:s,s:s}", "type", "text", "text", ""), BLOCK_TEXT);
    close_block(c);
    if (c->a.g.tool_error)
        sse_event(&c->a.st.out, "error", json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type", "api_error",
                                              "message", c->a.g.error));
    sse_event(&c->a.st.out, "message_delta",
              json_pack("{s:s,s:{s:s,s:o},s:o}", "type", "message_delta", "delta", "stop_reason",
                        stop_reason(c), "stop_sequence", stop_sequence(c), "usage", usage(c, c->a.g.n_tokens)));
    sse_event(&c->a.st.out, "message_stop", json_pack("{s:s}", "type", "message_stop"));
    c->a.st.finished = 1;
}

static void stream_produce(api_stream *st) {
    ant_call *c = (ant_call *)api_call_of(st);
    if (c->a.phase == 0) {
        stream_start(c);
        return;
    }
    const tc_event *ev;
    int n = gen_pull(&c->a.g, POLL_MS, &ev);
    for (int i = 0; i < n; i++) emit_event(c, &ev[i]);
    if (c->a.g.done) stream_finish(c);
    else if (!n) sse_event(&c->a.st.out, "ping", json_pack("{s:s}", "type", "ping")); /* keep-alive */
}

/* ---- the dialect ----------------------------------------------------------------------- */

static int build(api_call *a, int32_t **ids, size_t *n, prompt_cache_info *ci, char *why, size_t cap) {
    ant_call *c = (ant_call *)a;
    return parse_options(c, why, cap) || build_prompt(c, ids, n, ci, why, cap) ? -1 : 0;
}

/* Busy is 529 overloaded_error in this API. */
static void fail(http_reply *rep, int code, const char *msg) {
    const char *type;
    int status = status_for(code, &type);
    reply_error(rep, status == 503 ? 529 : status,
                status == 503 ? "overloaded_error" : status == 400 ? "invalid_request_error" : "api_error", "%s", msg);
    if (status == 503) rep->retry_after = 1;
}

static void whole(api_call *a, const http_req *req, http_reply *rep) { answer_whole((ant_call *)a, req, rep); }

static void free_own(api_call *a) {
    json_decref(((ant_call *)a)->tools);
    json_decref(((ant_call *)a)->shown);
    json_decref(((ant_call *)a)->diagnostics);
}

static const api_dialect ANTHROPIC = {
    .build = build, .fail = fail, .produce = stream_produce, .whole = whole, .free = free_own};

/* ---- entry points -------------------------------------------------------------------- */

static json_t *parse_body(const http_req *req, http_reply *rep) {
    json_error_t je;
    json_t *root = json_load_request(req->body, req->body_len, &je);
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
    if (!server_knows_model(s, model)) {
        reply_error(rep, 404, "not_found_error", "model: '%s' does not exist; this server serves '%s'", model,
                    s->model_id);
        return -1;
    }
    return 0;
}

void api_anthropic_messages(server *s, const http_req *req, http_reply *rep) {
    json_t *body = parse_body(req, rep);
    if (!body || check_model(s, body, rep)) {
        json_decref(body);
        return;
    }
    ant_call *c = xcalloc(1, sizeof *c);
    c->a = (api_call){.srv = s, .d = &ANTHROPIC, .req = body};
    make_id(c->a.id, sizeof c->a.id, "msg_");
    api_call_run(&c->a, req, rep);
}

void api_anthropic_count_tokens(server *s, const http_req *req, http_reply *rep) {
    ant_call c = {.a = {.srv = s}};
    c.a.gp.tenant = server_tenant(s, req); /* its replay namespace: the count a request would get */
    if (!(c.a.req = parse_body(req, rep)) || check_model(s, c.a.req, rep)) {
        json_decref(c.a.req);
        return;
    }
    char why[512] = "";
    int32_t *ids = NULL;
    size_t n = 0;
    if (parse_tools(&c, why, sizeof why) || build_prompt(&c, &ids, &n, NULL, why, sizeof why))
        reply_error(rep, 400, "invalid_request_error", "%s", why);
    else
        reply_json(rep, 200, json_pack("{s:i}", "input_tokens", (int)n));
    free(ids);
    json_decref(c.tools);
    json_decref(c.a.req);
}
