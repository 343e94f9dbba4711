/* api_openai.c - OpenAI Chat Completions, Completions and Models.
 *
 * A call is parsed and validated into a prompt (token ids) and generation
 * parameters, submitted to the scheduler, then answered whole or streamed
 * as server-sent events: per choice a role chunk, content deltas and a
 * final chunk with finish_reason (n > 1: choice after choice, each chunk
 * carrying its choice's index), then an optional usage chunk, and
 * "data: [DONE]". While a long prompt is prefilled the stream carries
 * ": prefill N/M" comments, which also reveal a client that went away (the
 * write fails, we cancel). */
#include "server/api_openai.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/mem.h"
#include "base/strbuf.h"
#include "server/api_params.h"
#include "server/gen.h"
#include "server/prompt.h"
#include "server/api_call.h"
#include "server/api_stream.h"
#include "server/resp_tools.h"
#include "text/jsonload.h"

#define POLL_MS 1000 /* stream keep-alive period while nothing is generated */

/* One choice of the reply as it is formatted: its generation (api_call_gen)
 * and what has gone out of it so far. */
typedef struct oai_choice {
    int index;
    gen *g;
    int begun;            /* stream: its first chunk went out */
    char *call_args;      /* streaming a custom tool's call: its arguments so far */
    size_t call_args_len;
    resp_input_stream input; /* ...and its input streamed */
    int open_custom;      /* the call being streamed is a custom tool's */
    int n_logprob_done;
    long text_offset; /* completions logprobs: bytes of text so far */
} oai_choice;

typedef struct oai_call {
    api_call a; /* first: the lifecycle's part (api_call.h) */
    int chat, include_usage, logprobs;
    int legacy_functions; /* the request used `functions`: the reply is one `function_call` */
    json_t *allowed;      /* tool_choice allowed_tools: the callable ones (pt.tools borrows them) */
    json_t *custom;       /* names of the custom tools (free-text input), as an object's keys */
    long created;
    oai_choice *ch;       /* owned: n_choices of them */
    int cur;              /* stream: the choice being streamed */
} oai_call;

/* Choice k, its generation looked up (the later ones start after parsing). */
static oai_choice *choice_at(oai_call *c, int k) {
    c->ch[k].g = api_call_gen(&c->a, k);
    return &c->ch[k];
}

/* ---- prompt building ---------------------------------------------------- */

static const char *normal_role(const char *role) {
    if (!role) return NULL;
    if (strcmp(role, "developer") == 0) return "system";
    if (strcmp(role, "function") == 0) return "tool"; /* the deprecated function-calling API's result */
    if (!strcmp(role, "system") || !strcmp(role, "user") || !strcmp(role, "assistant") || !strcmp(role, "tool"))
        return role;
    return NULL;
}

/* The deprecated function-calling API in history: an assistant's
 * `function_call` is its one tool call, and the `function` message after
 * it that call's result; the function's name stands in for the call id
 * that API never had. NULL when m has none. */
static json_t *legacy_call(const json_t *m) {
    const json_t *fc = json_object_get(m, "function_call");
    if (!json_is_object(fc) || json_object_get(m, "tool_calls")) return NULL;
    return json_pack("[{s:O*,s:s,s:O}]", "id", json_object_get(fc, "name"), "type", "function", "function", fc);
}

/* OpenAI tool_calls with "arguments" as a JSON string -> arguments as an
 * object (what chat templates expect); unparsable strings stay strings. */
static json_t *normal_tool_calls(const json_t *calls, size_t mi, char *why, size_t cap) {
    if (!json_is_array(calls)) {
        snprintf(why, cap, "messages[%zu].tool_calls must be an array", mi);
        return NULL;
    }
    json_t *out = json_array();
    size_t i;
    const json_t *c;
    json_array_foreach(calls, i, c) {
        const json_t *fn = json_object_get(c, "function"), *custom = json_object_get(c, "custom");
        const char *name = json_string_value(json_object_get(fn ? fn : custom, "name"));
        const json_t *args = json_object_get(fn, "arguments");
        if (!fn && custom) { /* a custom tool's call: what the model wrote, {"input": ...} */
            const json_t *in = json_object_get(custom, "input");
            json_array_append_new(out, json_pack("{s:O*,s:s,s:{s:s,s:{s:O}}}", "id", json_object_get(c, "id"), "type",
                                                 "function", "function", "name", name ? name : "", "arguments",
                                                 "input", in ? in : json_string("")));
            continue;
        }
        if (!name) {
            snprintf(why, cap, "messages[%zu].tool_calls[%zu].function.name must be a string", mi, i);
            json_decref(out);
            return NULL;
        }
        json_t *parsed = json_load_lenient_string(args);
        json_t *a = parsed ? parsed : args ? json_incref((json_t *)args) : json_object();
        json_array_append_new(out, json_pack("{s:O*,s:s,s:{s:s,s:o}}", "id", json_object_get(c, "id"),
                                             "type", "function", "function", "name", name, "arguments", a));
    }
    return out;
}

/* One OpenAI message in the normalised shape (see server/prompt.h). */
static json_t *normal_message(const json_t *m, size_t i, req_ignored *ig, char *why, size_t cap) {
    const char *role = json_is_object(m) ? normal_role(json_string_value(json_object_get(m, "role"))) : NULL;
    if (!role) {
        snprintf(why, cap, "messages[%zu].role must be one of system, developer, user, assistant, tool, function", i);
        return NULL;
    }
    char where[48];
    snprintf(where, sizeof where, "messages[%zu].content", i);
    char *text = prompt_content_text(json_object_get(m, "content"), where, ig, why, cap);
    if (!text) return NULL;
    json_t *out = json_pack("{s:s,s:s}", "role", role, "content", text);
    free(text);
    json_t *legacy = legacy_call(m);
    const json_t *calls = legacy ? legacy : json_object_get(m, "tool_calls");
    if (calls && !json_is_null(calls) && strcmp(role, "assistant") == 0) {
        json_t *tc = normal_tool_calls(calls, i, why, cap);
        if (!tc) {
            json_decref(legacy);
            json_decref(out);
            return NULL;
        }
        json_object_set_new(out, "tool_calls", tc);
    }
    json_decref(legacy);
    const json_t *id = json_object_get(m, "tool_call_id");
    if (!id && !strcmp(json_string_value(json_object_get(m, "role")), "function")) id = json_object_get(m, "name");
    if (json_is_string(id)) json_object_set(out, "tool_call_id", (json_t *)id);
    /* An earlier turn's reasoning sent back (what this server returned as
     * reasoning_content): the turn's "thinking", which a template that shows
     * it (gpt-oss keeps a tool-call turn's analysis) renders. */
    const json_t *rc = json_object_get(m, "reasoning_content");
    if (json_is_string(rc) && json_string_length(rc) && !strcmp(role, "assistant"))
        json_object_set(out, "thinking", (json_t *)rc);
    return out;
}

/* The request's messages in the normalised shape, or NULL with why set. */
static json_t *normal_messages(oai_call *c, char *why, size_t cap) {
    const json_t *msgs = json_object_get(c->a.req, "messages");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        snprintf(why, cap, "'messages' must be a non-empty array");
        return NULL;
    }
    json_t *norm = json_array();
    size_t i;
    const json_t *m;
    json_array_foreach(msgs, i, m) {
        json_t *nm = normal_message(m, i, &c->a.ignored, why, cap);
        if (!nm) {
            json_decref(norm);
            return NULL;
        }
        json_array_append_new(norm, nm);
    }
    return norm;
}

/* prompt_cache_key names a conversation: its prefix before the newest
 * message is kept like an anchor (policy_key_break). */
static int note_cache_key(oai_call *c, size_t n_messages, prompt_cache_info *ci, char *why, size_t cap) {
    const json_t *key = json_object_get(c->a.req, "prompt_cache_key");
    if (!key || json_is_null(key)) return 0;
    if (!json_is_string(key)) {
        snprintf(why, cap, "'prompt_cache_key' must be a string");
        return -1;
    }
    if (ci && n_messages > 1 && ci->n_breaks < (int)(sizeof ci->breaks / sizeof ci->breaks[0]))
        ci->breaks[ci->n_breaks++] = policy_key_break(n_messages);
    return 0;
}

static int chat_prompt_ids(oai_call *c, int32_t **ids, size_t *n, prompt_cache_info *ci, char *why, size_t cap) {
    json_t *norm = normal_messages(c, why, cap);
    if (!norm) return -1;
    if (note_cache_key(c, json_array_size(norm), ci, why, cap)) {
        json_decref(norm);
        return -1;
    }
    int rc = api_call_prompt(&c->a, norm, ids, n, ci, why, cap);
    json_decref(norm);
    return rc;
}

/* Completions: "prompt" is a string or an array of token ids. */
static int completion_prompt_ids(oai_call *c, int32_t **ids, size_t *n, char *why, size_t cap) {
    const json_t *p = json_object_get(c->a.req, "prompt");
    const server *s = c->a.srv;
    const json_t *first = json_array_get(p, 0);
    if (json_is_string(first) || json_is_array(first)) { /* a batch of prompts: the first is answered */
        size_t more = json_array_size(p) - 1;
        if (more && ignored_note(&c->a.ignored, why, cap, "prompt[1..%zu] (a batch of prompts: the first is answered)",
                                 more))
            return -1;
        p = first;
    }
    if (json_is_string(p)) {
        chat_prompt cp = {0};
        chat_prompt_add(&cp, json_string_value(p), strlen(json_string_value(p)), 0);
        strata_err err = {0};
        int rc = chat_tokenize(s->tok, &cp, tok_add_bos(s->tok), ids, n, &err);
        chat_prompt_free(&cp);
        if (rc) strata_fmt(why, cap, "%s", err.msg);
        return rc ? -1 : 0;
    }
    if (!json_is_array(p) || json_array_size(p) == 0) {
        snprintf(why, cap, "'prompt' must be a string or a non-empty array of token ids");
        return -1;
    }
    *n = json_array_size(p);
    *ids = xmalloc(*n * sizeof(int32_t));
    for (size_t i = 0; i < *n; i++) {
        const json_t *t = json_array_get(p, i);
        long long v = json_is_integer(t) ? json_integer_value(t) : -1;
        if (v < 0 || v >= tok_n_vocab(s->tok)) {
            snprintf(why, cap, "prompt[%zu] is not a token id in [0, %d)", i, tok_n_vocab(s->tok));
            free(*ids);
            *ids = NULL;
            return -1;
        }
        (*ids)[i] = (int32_t)v;
    }
    return 0;
}

/* ---- parameters ------------------------------------------------------------ */

/* The deprecated `function_call` ("none" | "auto" | {"name"}) as the
 * tool_choice it became. */
static json_t *legacy_tool_choice(const json_t *fc) {
    const char *name = json_string_value(json_object_get(fc, "name"));
    if (name) return json_pack("{s:s,s:{s:s}}", "type", "function", "function", "name", name);
    return fc ? json_incref((json_t *)fc) : NULL;
}

/* tool_choice: "none" | "auto" | "required" | {"type":"function","function":{"name"}}
 * | {"type":"allowed_tools",...}; the deprecated function_call likewise. */
static int parse_tool_choice(oai_call *c, const json_t *tools, char *why, size_t cap) {
    const json_t *tc = json_object_get(c->a.req, "tool_choice");
    if (!tc && c->legacy_functions) {
        json_object_set_new(c->a.req, "tool_choice", legacy_tool_choice(json_object_get(c->a.req, "function_call")));
        tc = json_object_get(c->a.req, "tool_choice");
    }
    const char *word = json_string_value(tc);
    const char *type = json_string_value(json_object_get(tc, "type"));
    if (type && !strcmp(type, "allowed_tools")) {
        if (prompt_allowed_tools(tools, json_object_get(tc, "allowed_tools"), &c->allowed, &c->a.pt.required, why,
                                 cap))
            return -1;
        c->a.pt.shown = tools;
        c->a.pt.tools = c->allowed;
        return 0;
    }
    if (!tc || json_is_null(tc) || (word && !strcmp(word, "auto"))) return 0;
    if (word && !strcmp(word, "none")) {
        c->a.pt.tools = NULL;
        return 0;
    }
    if (word && !strcmp(word, "required")) {
        c->a.pt.required = 1;
        return 0;
    }
    const char *name = json_string_value(json_object_get(json_object_get(tc, "function"), "name"));
    if (!name) name = json_string_value(json_object_get(json_object_get(tc, "custom"), "name")); /* {"type": "custom"} */
    if (!name || !prompt_tool_known(tools, name)) {
        snprintf(why, cap, "'tool_choice' must be none, auto, required or a function named in 'tools'");
        return -1;
    }
    c->a.pt.forced = name;
    c->a.pt.required = 1;
    return 0;
}

/* The deprecated `functions` as the tools they became: a request with
 * no `tools` that declares functions gets its reply in that API's shape
 * (one `function_call`). */
static void legacy_functions(oai_call *c) {
    const json_t *fns = json_object_get(c->a.req, "functions"), *f;
    if (!json_array_size(fns) || json_array_size(json_object_get(c->a.req, "tools"))) return;
    json_t *tools = json_array();
    size_t i;
    json_array_foreach(fns, i, f) json_array_append_new(tools, json_pack("{s:s,s:O}", "type", "function", "function", f));
    json_object_set_new(c->a.req, "tools", tools);
    c->legacy_functions = 1;
    c->a.gp.one_call = 1;
}

/* {"type": "custom", "custom": {"name", "description", "format"}}: offered
 * as a function taking {"input": <string>} (resp_tools.h); its calls are
 * answered as custom calls with that input. */
static int add_custom_tool(oai_call *c, const json_t *t, size_t i, json_t *served, char *why, size_t cap) {
    const json_t *def = json_object_get(t, "custom");
    const char *name = json_string_value(json_object_get(def, "name"));
    char where[32];
    snprintf(where, sizeof where, "tools[%zu]", i);
    if (!name || !*name) {
        snprintf(why, cap, "'%s' must be {\"type\": \"custom\", \"custom\": {\"name\": ...}}", where);
        return -1;
    }
    json_t *fn = resp_tools_custom_function(def, where, why, cap);
    if (!fn) return -1;
    json_array_append_new(served, fn);
    if (!c->custom) c->custom = json_object();
    json_object_set_new(c->custom, name, json_true());
    return 0;
}

static int is_custom(const oai_call *c, const char *name) { return json_object_get(c->custom, name) != NULL; }

static int parse_tools(oai_call *c, char *why, size_t cap) {
    legacy_functions(c);
    const json_t *tools = json_object_get(c->a.req, "tools"), *t;
    if (!tools || json_is_null(tools)) return 0;
    if (!json_is_array(tools)) {
        snprintf(why, cap, "'tools' must be an array");
        return -1;
    }
    size_t i;
    json_t *served = json_array();
    json_array_foreach(tools, i, t) {
        const char *type = json_string_value(json_object_get(t, "type"));
        if (type && !strcmp(type, "custom")) {
            if (add_custom_tool(c, t, i, served, why, cap)) goto fail;
            continue;
        }
        if (type && strcmp(type, "function")) { /* types newer than this server: left out, named */
            if (ignored_note(&c->a.ignored, why, cap, "tools[%zu]: tool type '%s' (not offered to the model)", i, type))
                goto fail;
            continue;
        }
        if (!type || !json_is_string(json_object_get(json_object_get(t, "function"), "name"))) {
            snprintf(why, cap, "'tools[%zu]' must be {\"type\": \"function\", \"function\": {\"name\": ...}}", i);
            goto fail;
        }
        json_array_append(served, (json_t *)t);
    }
    json_object_set_new(c->a.req, "tools", served); /* the request owns what pt borrows */
    tools = served;
    c->a.pt.tools = json_array_size(tools) ? tools : NULL;
    if (parse_tool_choice(c, tools, why, cap)) return -1;
    c->a.gp.tools = render_tool_format(c->a.srv->render, &c->a.pt);
    c->a.gp.json_mode |= c->a.gp.tools == TC_GENERIC; /* the generic reply is one JSON object */
    return 0;
fail:
    json_decref(served);
    return -1;
}

/* {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}:
 * the reply validates against the schema, strict or not (a keyword the
 * engine does not enforce is named in x-strata-ignored, the rest holds). */
static int parse_json_schema(oai_call *c, const json_t *rf, char *why, size_t cap) {
    const json_t *js = json_object_get(rf, "json_schema");
    const json_t *schema = json_object_get(js, "schema");
    if (!json_is_object(js) || !json_is_string(json_object_get(js, "name"))) {
        snprintf(why, cap, "'response_format.json_schema' must be an object with a 'name'");
        return -1;
    }
    return api_call_schema(&c->a, schema, "response_format.json_schema.schema", why, cap);
}

/* response_format: {"type": "text" | "json_object" | "json_schema"}. */
static int parse_response_format(oai_call *c, char *why, size_t cap) {
    const json_t *rf = json_object_get(c->a.req, "response_format");
    if (!rf || json_is_null(rf)) return 0;
    const char *type = json_string_value(json_object_get(rf, "type"));
    if (type && !strcmp(type, "text")) return 0;
    if (type && (!strcmp(type, "json_object") || !strcmp(type, "json_schema"))) {
        if (c->a.gp.tools != TC_NONE) /* the tool-call constraint already shapes the reply */
            return ignored_note(&c->a.ignored, why, cap, "response_format %s (beside tools, the reply is held to the "
                                "tool-call format only)", type);
        if (!strcmp(type, "json_schema")) return parse_json_schema(c, rf, why, cap);
        c->a.gp.json_mode = 1;
        return 0;
    }
    snprintf(why, cap, "'response_format.type' must be 'text', 'json_object' or 'json_schema'");
    return -1;
}

/* "prediction": {"type": "content", "content": text or text parts}: the
 * reply's likely bytes (a file an edit re-emits), tokenized as the
 * speculative drafter's first source. It never changes the reply, only
 * how many tokens a forward pass verifies. */
static int parse_prediction(oai_call *c, char *why, size_t cap) {
    const json_t *p = json_object_get(c->a.req, "prediction"), *content = json_object_get(p, "content"), *part;
    if (!p || json_is_null(p)) return 0;
    const char *type = json_string_value(json_object_get(p, "type"));
    if (!json_is_object(p) || !type || strcmp(type, "content") || !(json_is_string(content) || json_is_array(content))) {
        snprintf(why, cap, "'prediction' must be {\"type\": \"content\", \"content\": a string or text parts}");
        return -1;
    }
    strbuf text = {0};
    size_t i;
    if (json_is_string(content)) strbuf_add(&text, json_string_value(content), json_string_length(content));
    json_array_foreach(content, i, part) {
        const json_t *t = json_object_get(part, "text");
        if (!json_is_string(t)) {
            strbuf_free(&text);
            snprintf(why, cap, "'prediction.content[%zu]' must be a text part", i);
            return -1;
        }
        strbuf_add(&text, json_string_value(t), json_string_length(t));
    }
    strata_err err = {0};
    size_t n = 0;
    int rc = text.len ? tok_encode(c->a.srv->tok, text.s, text.len, 0, &c->a.prediction, &n, &err) : 0;
    strbuf_free(&text);
    if (rc) {
        snprintf(why, cap, "'prediction': %s", err.msg);
        return -1;
    }
    c->a.gp.prediction = c->a.prediction;
    c->a.gp.n_prediction = (int)n;
    return 0;
}

static int parse_options(oai_call *c, char *why, size_t cap) {
    long n = 1, max_tokens = 0, top_logprobs = 0;
    int r;
    if (param_int(c->a.req, "n", 1, 128, &n, why, cap) < 0) return -1;
    c->a.n_choices = (int)n; /* each its own generation (api_call.c, start_more) */
    c->ch = xcalloc((size_t)n, sizeof *c->ch);
    for (int k = 0; k < n; k++) c->ch[k].index = k;
    if ((r = param_int(c->a.req, "max_completion_tokens", 1, 1L << 30, &max_tokens, why, cap)) < 0) return -1;
    if (!r && param_int(c->a.req, "max_tokens", 1, 1L << 30, &max_tokens, why, cap) < 0) return -1;
    c->a.gp.max_tokens = max_tokens > 0 ? (int)max_tokens : 1 << 30;
    if (param_bool(c->a.req, "stream", &c->a.stream, why, cap) < 0) return -1;
    if (c->chat) {
        if (param_bool(c->a.req, "logprobs", &c->logprobs, why, cap) < 0) return -1;
        if (param_int(c->a.req, "top_logprobs", 0, 20, &top_logprobs, why, cap) < 0) return -1;
    } else { /* completions: "logprobs": N asks for the top N as well */
        if ((r = param_int(c->a.req, "logprobs", 0, 20, &top_logprobs, why, cap)) < 0) return -1;
        c->logprobs = r > 0;
    }
    c->a.gp.n_logprobs = c->logprobs ? (int)top_logprobs : 0;
    const json_t *so = json_object_get(c->a.req, "stream_options");
    if (so && json_is_object(so) && param_bool(so, "include_usage", &c->include_usage, why, cap) < 0) return -1;
    if (parse_tools(c, why, cap) || parse_response_format(c, why, cap) || parse_prediction(c, why, cap)) return -1;
    return params_sampling(c->a.req, "stop", &c->a.srv->sampling, &c->a.gp, why, cap);
}

/* ---- responses ------------------------------------------------------------ */

/* The prompt counted once (the first choice's: the later ones reuse it
 * from the cache), completion tokens summed over the choices, as the
 * official API counts them. */
static json_t *usage_json(oai_call *c) {
    int done = api_call_tokens(&c->a), drafted = 0, accepted = 0;
    const sched_status *st = &c->a.g.st; /* strata_cache: the per-tier split (an extension) */
    json_t *u = json_pack("{s:i,s:i,s:i,s:{s:i},s:o}", "prompt_tokens", c->a.n_prompt, "completion_tokens", done,
                          "total_tokens", c->a.n_prompt + done, "prompt_tokens_details", "cached_tokens", st->n_cached,
                          "strata_cache", api_call_cache_json(&c->a));
    for (int k = 0; k < c->a.n_choices; k++) {
        const sched_status *ks = &api_call_gen(&c->a, k)->st;
        drafted += ks->pred_drafted, accepted += ks->pred_accepted;
    }
    if (c->a.gp.n_prediction > 0) /* drafted from the prediction: kept by verification, or refused */
        json_object_set_new(u, "completion_tokens_details",
                            json_pack("{s:i,s:i}", "accepted_prediction_tokens", accepted,
                                      "rejected_prediction_tokens", drafted - accepted));
    return u;
}

/* A token's text into piece (256 bytes); its length, clamped to the buffer. */
static int token_piece(const server *s, int32_t id, char piece[256]) {
    int len = tok_piece(s->tok, id, 0, piece, 256);
    return len < 0 ? 0 : len > 256 ? 256 : len;
}

static json_t *token_json(const server *s, int32_t id, float logprob) {
    char piece[256];
    int len = token_piece(s, id, piece);
    json_t *bytes = json_array();
    for (int i = 0; i < len; i++) json_array_append_new(bytes, json_integer((unsigned char)piece[i]));
    return json_pack("{s:o,s:f,s:o}", "token", json_text(piece, (size_t)len), "logprob", (double)logprob,
                     "bytes", bytes);
}

/* Logprobs of choice k's tokens [from, to) in the chat format ("content": [...]). */
static json_t *logprobs_json(const oai_call *c, const oai_choice *k, int from, int to) {
    json_t *arr = json_array();
    for (int i = from; i < to; i++) {
        const sched_token *t = &k->g->tokens[i];
        json_t *tj = token_json(c->a.srv, t->id, t->logprob), *top = json_array();
        for (int k = 0; k < t->n_top; k++)
            json_array_append_new(top, token_json(c->a.srv, t->top_ids[k], t->top_logprobs[k]));
        json_object_set_new(tj, "top_logprobs", top);
        json_array_append_new(arr, tj);
    }
    return json_pack("{s:o}", "content", arr);
}

/* The same in the completions format: tokens, token_logprobs,
 * top_logprobs (piece -> logprob) and text_offset (bytes into the text). */
static json_t *completion_logprobs_json(const oai_call *c, oai_choice *k, int from, int to) {
    json_t *toks = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    for (int i = from; i < to; i++) {
        const sched_token *t = &k->g->tokens[i];
        char piece[256];
        int len = token_piece(c->a.srv, t->id, piece);
        json_array_append_new(toks, json_text(piece, (size_t)len));
        json_array_append_new(lps, json_real(t->logprob));
        json_t *top = json_object();
        for (int k = 0; k < t->n_top; k++) {
            char tp[256];
            json_t *key = json_text(tp, (size_t)token_piece(c->a.srv, t->top_ids[k], tp));
            json_object_set_new(top, json_string_value(key), json_real(t->top_logprobs[k]));
            json_decref(key);
        }
        json_array_append_new(tops, top);
        json_array_append_new(offs, json_integer(k->text_offset));
        k->text_offset += len;
    }
    return json_pack("{s:o,s:o,s:o,s:o}", "tokens", toks, "token_logprobs", lps, "top_logprobs", tops, "text_offset", offs);
}

static const char *call_id(oai_call *c, const oai_choice *k, int index) {
    return api_call_choice_id(&c->a, k->index, index, "call_");
}

static json_t *choice(oai_call *c, oai_choice *k, const char *finish) {
    json_t *ch = json_pack("{s:i}", "index", k->index);
    int to = k->g->n_tokens;
    json_object_set_new(ch, "logprobs", !c->logprobs ? json_null()
                                        : c->chat  ? logprobs_json(c, k, k->n_logprob_done, to)
                                                   : completion_logprobs_json(c, k, k->n_logprob_done, to));
    k->n_logprob_done = to;
    json_object_set_new(ch, "finish_reason", finish ? json_string(finish) : json_null());
    return ch;
}

static json_t *envelope(const oai_call *c, int chunk) {
    const char *obj = c->chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
    return json_pack("{s:s,s:s,s:I,s:s,s:[]}", "id", c->a.id, "object", obj, "created", (json_int_t)c->created,
                     "model", c->a.srv->model_id, "choices");
}

/* ---- whole replies ---------------------------------------------------------- */

/* One call of a whole reply: a function call, or a custom tool's call
 * with its input. */
static json_t *call_json(oai_call *c, const oai_choice *k, int i, const char *name, const char *args) {
    if (!is_custom(c, name))
        return json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", call_id(c, k, i), "type", "function", "function", "name", name,
                         "arguments", args);
    char *in = resp_tools_custom_input(args, strlen(args));
    json_t *out = json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", call_id(c, k, i), "type", "custom", "custom", "name", name,
                            "input", in ? in : "");
    free(in);
    return out;
}

static json_t *whole_tool_calls(oai_call *c, const oai_choice *k) {
    const char **names, **args;
    int n = tc_calls(k->g->tc, &names, &args);
    json_t *arr = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(arr, call_json(c, k, i, names[i], args[i]));
    return arr;
}

/* The finish reason: the deprecated function-calling API's word for a call. */
static const char *finish_word(const oai_call *c, const oai_choice *k) {
    const char *w = gen_finish_word(k->g);
    return c->legacy_functions && !strcmp(w, "tool_calls") ? "function_call" : w;
}

/* A legacy request's reply: its one call as `function_call`. */
static void legacy_reply_call(json_t *msg) {
    json_t *fn = json_object_get(json_array_get(json_object_get(msg, "tool_calls"), 0), "function");
    if (fn) json_object_set(msg, "function_call", fn);
    json_object_del(msg, "tool_calls");
}

static json_t *whole_choice(oai_call *c, oai_choice *k, const char *text, size_t len) {
    const gen *g = k->g;
    json_t *ch = choice(c, k, finish_word(c, k));
    if (!c->chat) {
        json_object_set_new(ch, "text", json_text(text, len));
        return ch;
    }
    json_t *msg = json_pack("{s:s}", "role", "assistant");
    if (g->tool_error) { /* show what the model wrote, and why it was refused */
        text = g->text.buf ? g->text.buf : "";
        len = g->text.len;
        json_object_set_new(msg, "refusal", json_string(g->error));
    }
    const char *open_name, *open_args; /* a call cut by the token limit is returned as generated */
    int open = g->st.finish == FINISH_LENGTH && !g->tool_error && gen_open_call(g, &open_name, &open_args);
    int calls = (g->n_calls_done || open) && !g->tool_error;
    if (!len && !calls && g->st.finish == FINISH_LENGTH && g->tools != TC_NONE) {
        text = g->text.buf ? g->text.buf : ""; /* cut before a call or content began */
        len = g->text.len;
    }
    json_object_set_new(msg, "content", len || !calls ? json_text(text, len) : json_null());
    if (g->reasoning_len) /* harmony's analysis channel, as llama.cpp and vLLM name it */
        json_object_set_new(msg, "reasoning_content", json_text(g->reasoning, g->reasoning_len));
    if (calls) json_object_set_new(msg, "tool_calls", whole_tool_calls(c, k));
    if (open)
        json_array_append_new(json_object_get(msg, "tool_calls"), call_json(c, k, g->n_calls_done, open_name, open_args));
    if (c->legacy_functions) legacy_reply_call(msg);
    json_object_set_new(ch, "message", msg);
    return ch;
}

/* Every choice collected in turn (the later ones generate meanwhile);
 * one that fails fails the reply. */
static void answer_whole(oai_call *c, const http_req *req, http_reply *rep) {
    json_t *body = envelope(c, 0);
    for (int i = 0; i < c->a.n_choices; i++) {
        oai_choice *k = choice_at(c, i);
        size_t len;
        char *text = api_collect_text(k->g, req, &len);
        if (!text) {
            json_decref(body);
            reply_openai_error(rep, 499, "client_closed", NULL, "client closed the connection");
            return;
        }
        if (k->g->st.finish == FINISH_ERROR) {
            free(text);
            json_decref(body);
            reply_openai_error(rep, 500, "server_error", NULL, "generation failed: %s", k->g->st.error);
            return;
        }
        json_array_append_new(json_object_get(body, "choices"), whole_choice(c, k, text, len));
        free(text);
    }
    json_object_set_new(body, "usage", usage_json(c));
    reply_json(rep, 200, body);
}

/* ---- streamed replies ------------------------------------------------------- */

static void emit_chunk(oai_call *c, oai_choice *k, json_t *delta, const char *finish) {
    json_t *ev = envelope(c, 1), *ch = choice(c, k, finish);
    json_object_set_new(ch, c->chat ? "delta" : "text",
                        c->chat ? delta : json_incref(json_object_get(delta, "content")));
    if (!c->chat) json_decref(delta);
    json_array_append_new(json_object_get(ev, "choices"), ch);
    sse_event(&c->a.st.out, NULL, ev);
}

static int begins_custom(const oai_call *c, const tc_event *e) {
    char name[256];
    snprintf(name, sizeof name, "%.*s", (int)e->len, e->text);
    return is_custom(c, name);
}

/* A custom tool's call streamed: the first delta carries id, type and
 * name, later ones its input as it grows (decoded from the arguments
 * JSON written so far). */
static void emit_custom_delta(oai_call *c, oai_choice *k, const tc_event *e) {
    if (e->kind == TC_EV_CALL_BEGIN) {
        k->open_custom = 1;
        k->call_args_len = 0;
        resp_input_free(&k->input);
        resp_input_init(&k->input);
        emit_chunk(c, k, json_pack("{s:[{s:i,s:s,s:s,s:{s:o,s:s}}]}", "tool_calls", "index", e->index, "id",
                                   call_id(c, k, e->index), "type", "custom", "custom", "name",
                                   json_text(e->text, e->len), "input", ""), NULL);
        return;
    }
    k->call_args = xrealloc(k->call_args, k->call_args_len + e->len + 1);
    memcpy(k->call_args + k->call_args_len, e->text, e->len);
    k->call_args_len += e->len;
    tc_buf fresh = {0};
    resp_input_next(&k->input, k->call_args, k->call_args_len, &fresh);
    if (fresh.len)
        emit_chunk(c, k, json_pack("{s:[{s:i,s:{s:o}}]}", "tool_calls", "index", e->index, "custom", "input",
                                   json_text(fresh.p, fresh.len)), NULL);
    tc_buf_free(&fresh);
}

/* One parser event as a chunk: content, or a tool-call delta (the first
 * carries id and name, later ones argument fragments). */
static void emit_event(oai_call *c, oai_choice *k, const tc_event *e) {
    if (e->kind == TC_EV_TEXT) {
        emit_chunk(c, k, json_pack("{s:o}", "content", json_text(e->text, e->len)), NULL);
        return;
    }
    if (e->kind == TC_EV_REASONING) {
        if (c->chat) emit_chunk(c, k, json_pack("{s:o}", "reasoning_content", json_text(e->text, e->len)), NULL);
        return;
    }
    if (c->chat && (e->kind == TC_EV_CALL_BEGIN ? begins_custom(c, e) : k->open_custom)) {
        if (e->kind == TC_EV_CALL_END) k->open_custom = 0;
        else emit_custom_delta(c, k, e);
        return;
    }
    if (e->kind == TC_EV_CALL_END || !c->chat) return;
    if (c->legacy_functions) { /* one call, as function_call deltas */
        if (e->index > 0) return;
        json_t *fc = e->kind == TC_EV_CALL_BEGIN ? json_pack("{s:o,s:s}", "name", json_text(e->text, e->len), "arguments", "")
                                                 : json_pack("{s:o}", "arguments", json_text(e->text, e->len));
        emit_chunk(c, k, json_pack("{s:o}", "function_call", fc), NULL);
        return;
    }
    json_t *call = json_pack("{s:i}", "index", e->index);
    if (e->kind == TC_EV_CALL_BEGIN) {
        json_object_set_new(call, "id", json_string(call_id(c, k, e->index)));
        json_object_set_new(call, "type", json_string("function"));
        json_object_set_new(call, "function", json_pack("{s:o,s:s}", "name", json_text(e->text, e->len), "arguments", ""));
    } else {
        json_object_set_new(call, "function", json_pack("{s:o}", "arguments", json_text(e->text, e->len)));
    }
    emit_chunk(c, k, json_pack("{s:[o]}", "tool_calls", call), NULL);
}

/* Choice k's last chunk: its finish_reason. */
static void emit_finish(oai_call *c, oai_choice *k) {
    emit_chunk(c, k, c->chat ? json_object() : json_pack("{s:s}", "content", ""), finish_word(c, k));
}

/* After the last choice: the usage chunk if asked for, and [DONE]. */
static void emit_end(oai_call *c) {
    if (c->include_usage) {
        json_t *ev = envelope(c, 1);
        json_object_set_new(ev, "usage", usage_json(c));
        sse_event(&c->a.st.out, NULL, ev);
    }
    sse_raw(&c->a.st.out, "data: [DONE]\n\n", 14);
    c->a.st.finished = 1;
}

/* Generates the next stream bytes, waiting up to POLL_MS: the choices one
 * after another (the later ones generate meanwhile; their tokens wait in
 * the scheduler), each from its role chunk to its finish_reason. */
static void stream_produce(api_stream *st) {
    oai_call *c = (oai_call *)api_call_of(st);
    oai_choice *k = choice_at(c, c->cur);
    c->a.phase = 1;
    if (!k->begun) {
        k->begun = 1;
        if (c->chat) {
            emit_chunk(c, k, json_pack("{s:s,s:s}", "role", "assistant", "content", ""), NULL);
            return;
        }
    }
    const tc_event *ev;
    int n = gen_pull(k->g, POLL_MS, &ev);
    for (int i = 0; i < n; i++) emit_event(c, k, &ev[i]);
    if (k->g->done) {
        emit_finish(c, k);
        if (++c->cur == c->a.n_choices) emit_end(c);
    } else if (!n && k->g->st.n_prompt_done < k->g->st.n_prompt) {
        char line[96];
        snprintf(line, sizeof line, "prefill %d/%d", k->g->st.n_prompt_done, k->g->st.n_prompt);
        sse_comment(&c->a.st.out, line);
    }
}

/* ---- entry points ------------------------------------------------------------ */

/* api_dialect.build: options, then the prompt (chat: the conversation;
 * completions: text or token ids). */
static int build(api_call *a, int32_t **ids, size_t *n, prompt_cache_info *ci, char *why, size_t cap) {
    oai_call *c = (oai_call *)a;
    if (parse_options(c, why, cap)) return -1;
    if (c->chat) return chat_prompt_ids(c, ids, n, ci, why, cap);
    c->a.pt.required = 0, c->a.pt.forced = NULL; /* completions never force a tool call */
    c->a.raw_text = 1;
    return completion_prompt_ids(c, ids, n, why, cap);
}

void api_openai_fail(http_reply *rep, int code, const char *msg) {
    const char *type;
    int status = status_for(code, &type);
    reply_openai_error(rep, status, type, code == STRATA_ERANGE ? "context_length_exceeded" : NULL, "%s", msg);
    if (status == 503) rep->retry_after = 1;
}

static void whole(api_call *a, const http_req *req, http_reply *rep) { answer_whole((oai_call *)a, req, rep); }

static void oai_free(api_call *a) {
    oai_call *c = (oai_call *)a;
    json_decref(c->allowed);
    json_decref(c->custom);
    for (int k = 0; c->ch && k < c->a.n_choices; k++) {
        free(c->ch[k].call_args);
        resp_input_free(&c->ch[k].input);
    }
    free(c->ch);
}

static const api_dialect OPENAI = {.build = build, .fail = api_openai_fail, .produce = stream_produce, .whole = whole,
                                   .free = oai_free};

static void handle(server *s, const http_req *req, http_reply *rep, int chat) {
    json_t *body = parse_body_openai(req, rep);
    if (!body) return;
    const char *model = json_string_value(json_object_get(body, "model"));
    if (!server_knows_model(s, model)) {
        reply_openai_error(rep, 404, "invalid_request_error", "model_not_found",
                           "model '%s' does not exist; this server serves '%s'", model, s->model_id);
        json_decref(body);
        return;
    }
    oai_call *c = xcalloc(1, sizeof *c);
    c->a = (api_call){.srv = s, .d = &OPENAI, .req = body};
    c->chat = chat;
    c->created = (long)time(NULL);
    make_id(c->a.id, sizeof c->a.id, chat ? "chatcmpl-" : "cmpl-");
    api_call_run(&c->a, req, rep);
}

void api_openai_chat(server *s, const http_req *req, http_reply *rep) { handle(s, req, rep, 1); }

void api_openai_completions(server *s, const http_req *req, http_reply *rep) { handle(s, req, rep, 0); }

static json_t *model_json(const server *s, const char *id) {
    return json_pack("{s:s,s:s,s:I,s:s}", "id", id, "object", "model", "created", (json_int_t)s->started_at,
                     "owned_by", "strata");
}

/* The served model under its id and each alias. */
void api_openai_models(server *s, const http_req *req, http_reply *rep) {
    json_t *data = json_array();
    json_array_append_new(data, model_json(s, s->model_id));
    for (int i = 0; i < s->n_aliases; i++)
        if (strcmp(s->aliases[i], s->model_id)) json_array_append_new(data, model_json(s, s->aliases[i]));
    reply_json(rep, 200, json_pack("{s:s,s:o}", "object", "list", "data", data));
}

/* GET /v1/models/{id}: a name the server answers to (server_knows_model)
 * is the served model; with --strict-model others are 404. */
void api_openai_model(server *s, const http_req *req, http_reply *rep) {
    const char *id = req->path + strlen("/v1/models/");
    if (!server_knows_model(s, id)) {
        reply_openai_error(rep, 404, "invalid_request_error", "model_not_found",
                           "model '%s' does not exist; this server serves '%s'", id, s->model_id);
        return;
    }
    reply_json(rep, 200, model_json(s, s->model_id));
}

/* POST /apply-template: the prompt text a chat request would be given. */
void api_openai_apply_template(server *s, const http_req *req, http_reply *rep) {
    oai_call c = {.a = {.srv = s}, .chat = 1};
    if (!(c.a.req = parse_body_openai(req, rep))) return;
    char why[512] = "";
    json_t *norm = NULL;
    if (!params_template_vars(c.a.req, &c.a.template_vars, why, sizeof why) && !parse_tools(&c, why, sizeof why))
        norm = normal_messages(&c, why, sizeof why);
    c.a.pt.vars = c.a.template_vars;
    render_out p = {0};
    if (!norm || prompt_render(s, norm, &c.a.pt, &p, why, sizeof why)) {
        reply_openai_error(rep, 400, "invalid_request_error", NULL, "%s", why);
    } else {
        size_t len;
        char *text = render_out_text(&p, &len);
        reply_json(rep, 200, json_pack("{s:o}", "prompt", json_text(text, len)));
        free(text);
    }
    render_out_free(&p);
    json_decref(norm);
    json_decref(c.a.template_vars);
    json_decref(c.a.req);
}
