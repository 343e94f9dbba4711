/* fuzz_tmpl.c - libFuzzer target: a chat template of arbitrary bytes,
 * parsed and rendered. Input: the template, optionally followed by a NUL
 * byte and a JSON object used as the render context; without one (or
 * when it is not a JSON object) a conversation with every role, a tool
 * call and a tool is used. Parse and render must end in output or an
 * error, within the limits in text/tmpl.h (steps, memory, depth).
 * Seeds: tests/fuzz/corpus/tmpl (the real templates in tests/data/tmpl
 * and small ones that reach loops, macros, filters and methods). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "text/tmpl.h"

static const char DEFAULT_CTX[] =
    "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
    "{\"role\":\"user\",\"content\":\"Weather in Paris?\"},"
    "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\","
    "\"function\":{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}}]},"
    "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"18C\"},"
    "{\"role\":\"assistant\",\"content\":\"It is 18C.\"}],"
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
    "\"description\":\"Weather\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"type\":\"string\"}}}}}],"
    "\"add_generation_prompt\":true,\"bos_token\":\"<s>\",\"eos_token\":\"</s>\"}";

/* The context after the first NUL, or the default conversation. */
static json_t *context_of(const uint8_t *data, size_t size, size_t *tmpl_len) {
    const uint8_t *nul = memchr(data, 0, size);
    *tmpl_len = nul ? (size_t)(nul - data) : size;
    json_t *ctx = nul ? json_loadb((const char *)nul + 1, size - *tmpl_len - 1, 0, NULL) : NULL;
    if (json_is_object(ctx)) return ctx;
    json_decref(ctx);
    return json_loads(DEFAULT_CTX, 0, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t len;
    json_t *ctx = context_of(data, size, &len);
    tmpl *t = NULL;
    strata_err err;
    if (tmpl_parse(&t, (const char *)data, len, &err) == 0) {
        char *out = NULL;
        size_t out_len = 0, n_spans = 0;
        tmpl_span *spans = NULL;
        if (tmpl_render(t, ctx, &out, &out_len, &spans, &n_spans, &err) == 0) {
            free(out);
            free(spans);
        }
        tmpl_free(t);
    }
    json_decref(ctx);
    return 0;
}
