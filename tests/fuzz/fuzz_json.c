/* fuzz_json.c - libFuzzer target: a request body of arbitrary bytes.
 *
 * The message normalisation of each API (normal_messages in
 * server/api_openai.c and api_anthropic.c) is static and takes the
 * handler's call struct, so it is reached through the server by the
 * request fuzzer (request_fuzzer.py). Here: everything pure that a body
 * goes through, in the order the handlers call it: jansson's parse, the
 * typed sampling fields and stop strings of both APIs (params_sampling),
 * the cache scope, every message's content (prompt_content_text), the
 * tool list's generic system prompt (tc_generic_system_prompt), and the
 * tool-call parser of every format fed each content string in two pieces
 * (model output is arbitrary text too), and the schema compiler on
 * response_format's schema and on the tools (the generic format's reply
 * schema), each compiled schema then fed the message texts as output.
 * Seeds: tests/fuzz/corpus/json (bodies from the e2e tests). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "server/api_params.h"
#include "server/prompt.h"
#include "text/jsonguard.h"
#include "text/jsonschema.h"
#include "text/toolcall.h"

static void touch_params(const json_t *req) {
    gen_params gp;
    char why[512];
    const sample_params defaults = sample_params_default();
    memset(&gp, 0, sizeof gp);
    params_sampling(req, "stop", &defaults, &gp, why, sizeof why);
    memset(&gp, 0, sizeof gp);
    params_sampling(req, "stop_sequences", &defaults, &gp, why, sizeof why);
    json_t *vars = NULL;
    if (!params_template_vars(req, &vars, why, sizeof why)) json_decref(vars);
    long l;
    param_int(req, "max_tokens", 0, 1L << 30, &l, why, sizeof why);
    cache_scope scope;
    const json_t *v = json_object_get(req, "prefix_cache_scope");
    if (v) param_scope_value(v, &scope, why, sizeof why);
}

/* Two feeds split at a point chosen by the text, then the final one. */
static void feed_tool_parsers(const char *text) {
    size_t len = strlen(text), cut = len ? (unsigned char)text[0] % (len + 1) : 0;
    for (tc_format f = TC_NONE; f <= TC_HARMONY; f++) {
        tc_parser *p = tc_new(f);
        const tc_event *evs;
        int n;
        strata_err err;
        if (tc_feed(p, text, cut, 0, &evs, &n, &err) == 0)
            tc_feed(p, text + cut, len - cut, 1, &evs, &n, &err);
        const char **names, **args;
        tc_calls(p, &names, &args);
        tc_free(p);
    }
}

static void touch_messages(const json_t *msgs) {
    size_t i;
    const json_t *m;
    char why[512];
    req_ignored ig = {0}; /* parts left out are listed (server/ignored.h) */
    json_array_foreach(msgs, i, m) {
        char *text = prompt_content_text(json_object_get(m, "content"), "messages[i].content", &ig, why, sizeof why);
        if (text) feed_tool_parsers(text);
        free(text);
    }
}

static void touch_tools(const json_t *req) {
    const json_t *tools = json_object_get(req, "tools");
    const char *forced = json_string_value(json_object_get(req, "tool_choice"));
    char *sys = tc_generic_system_prompt(tools, forced, forced != NULL);
    free(sys);
}

/* A compiled schema run over every message's text as if generated. */
static void feed_schema(json_schema *s, const json_t *msgs) {
    if (!s) return;
    json_schema_unenforced(s);
    size_t i;
    const json_t *m;
    json_array_foreach(msgs, i, m) {
        const char *text = json_string_value(json_object_get(m, "content"));
        if (!text) continue;
        json_guard *g = json_guard_new_schema(NULL, s);
        for (size_t k = 0; text[k]; k++)
            if (json_guard_feed(g, text + k, 1)) break;
        json_guard_free(g);
    }
}

static void touch_schemas(const json_t *req) {
    char why[512];
    const json_t *rf = json_object_get(req, "response_format"), *msgs = json_object_get(req, "messages");
    const json_t *sch = json_object_get(json_object_get(rf, "json_schema"), "schema");
    json_schema *s;
    if (sch) {
        s = json_schema_compile(sch, why, sizeof why);
        feed_schema(s, msgs);
        json_schema_free(s);
    }
    const json_t *tools = json_object_get(req, "tools");
    if (json_is_array(tools)) {
        s = json_schema_tools(tools, NULL, 0, why, sizeof why);
        feed_schema(s, msgs);
        json_schema_free(s);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    json_t *req = json_loadb((const char *)data, size, 0, NULL);
    if (!req) return 0;
    touch_params(req);
    touch_messages(json_object_get(req, "messages"));
    const json_t *sys = json_object_get(req, "system");
    char why[256];
    req_ignored strict = {.strict = 1}; /* --strict-requests: a part left out is an error */
    free(prompt_content_text(sys, "system", &strict, why, sizeof why));
    touch_tools(req);
    touch_schemas(req);
    json_decref(req);
    return 0;
}
