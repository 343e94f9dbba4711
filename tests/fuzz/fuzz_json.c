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
 * (model output is arbitrary text too).
 * Seeds: tests/fuzz/corpus/json (bodies from the e2e tests). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "server/api_params.h"
#include "server/prompt.h"
#include "text/toolcall.h"

static void touch_params(const json_t *req) {
    gen_params gp;
    char why[512];
    memset(&gp, 0, sizeof gp);
    params_sampling(req, "stop", &gp, why, sizeof why);
    memset(&gp, 0, sizeof gp);
    params_sampling(req, "stop_sequences", &gp, why, sizeof why);
    long l;
    param_int(req, "max_tokens", 0, 1L << 30, &l, why, sizeof why);
    cache_scope scope;
    const json_t *v = json_object_get(req, "prefix_cache_scope");
    if (v) param_scope_value(v, &scope, why, sizeof why);
}

/* Two feeds split at a point chosen by the text, then the final one. */
static void feed_tool_parsers(const char *text) {
    size_t len = strlen(text), cut = len ? (unsigned char)text[0] % (len + 1) : 0;
    for (tc_format f = TC_NONE; f <= TC_GENERIC; f++) {
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
    json_array_foreach(msgs, i, m) {
        char *text = prompt_content_text(json_object_get(m, "content"), "messages[i].content", why, sizeof why);
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    json_t *req = json_loadb((const char *)data, size, 0, NULL);
    if (!req) return 0;
    touch_params(req);
    touch_messages(json_object_get(req, "messages"));
    const json_t *sys = json_object_get(req, "system");
    char why[256];
    free(prompt_content_text(sys, "system", why, sizeof why));
    touch_tools(req);
    json_decref(req);
    return 0;
}
