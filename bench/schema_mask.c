/* schema_mask.c - the per-token cost of schema-constrained sampling on a
 * request with 60 tools (issue 12 item 1), next to a decode step.
 *
 * Builds the generic tool-call schema for 60 generated tools (5-7
 * properties each: strings, enums, bounded integers, numbers, arrays,
 * nested objects), then generates tool-call replies under the mask from
 * random logits over the real vocabulary, timing every json_guard_mask
 * call (the cost the scheduler adds per token). Prints mean, p50, p99 and
 * worst, with and without the schema (json_object mode), and the compile
 * time. Usage: build/schema-mask MODEL.gguf [runs]. Not a test: no
 * assertion on time. */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "model/gguf.h"
#include "text/jsonguard.h"
#include "text/jsonschema.h"
#include "text/tokenizer.h"

static double unit(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (double)((z ^ (z >> 31)) >> 11) / 9007199254740992.0;
}

static json_t *tool(int i) {
    char name[32];
    snprintf(name, sizeof name, "tool_%02d_%s", i, i % 3 ? "lookup" : "update");
    json_t *p = json_pack("{s:{s:s},s:{s:[s,s,s]},s:{s:s,s:i,s:i},s:{s:s},s:{s:s,s:{s:s},s:i},s:{s:s,s:{s:{s:s},s:{s:s}},s:[s]}}",
                          "query", "type", "string", "mode", "enum", "fast", "exact", "fuzzy", "limit", "type",
                          "integer", "minimum", 1, "maximum", 100, "weight", "type", "number", "ids", "type", "array",
                          "items", "type", "string", "maxItems", 5, "filter", "type", "object", "properties", "field",
                          "type", "string", "value", "type", "string", "required", "field");
    if (i % 2) json_object_set_new(p, "verbose", json_pack("{s:s}", "type", "boolean"));
    return json_pack("{s:s,s:{s:s,s:s,s:{s:s,s:o,s:[s,s],s:b}}}", "type", "function", "function", "name", name,
                     "description", "a generated tool", "parameters", "type", "object", "properties", p, "required",
                     "query", "mode", "additionalProperties", 0);
}

static int cmp_d(const void *a, const void *b) { return (*(const double *)a > *(const double *)b) - (*(const double *)a < *(const double *)b); }

/* Runs of at most 200 tokens; times every mask call into ms[]. */
static int run(const tokenizer *t, const json_vocab *v, json_schema *s, int runs, double *ms, int *n_tok) {
    int32_t n = tok_n_vocab(t), closers[3] = {tok_find(t, "\""), tok_find(t, "}"), tok_find(t, "]")};
    float *logits = malloc(sizeof(float) * (size_t)n);
    int k = 0, closed = 0;
    for (int r = 0; r < runs; r++) {
        uint64_t seed = (uint64_t)r + 1;
        json_guard *g = json_guard_new_schema(v, s);
        const char *prefix = "{\"tool_calls\": [{\"name\": \"";
        json_guard_feed(g, prefix, strlen(prefix));
        for (int step = 0; step < 200; step++) {
            for (int32_t i = 0; i < n; i++) logits[i] = (float)(unit(&seed) * 4.0);
            for (int c = 0; c < 3; c++) if (closers[c] >= 0) logits[closers[c]] += (float)(step * 0.1);
            double t0 = clock_ms();
            int allowed = json_guard_mask(g, logits);
            ms[k++] = clock_ms() - t0;
            if (!allowed) break;
            double total = 0, x;
            for (int32_t i = 0; i < n; i++) total += logits[i] = isinf(logits[i]) ? 0.0f : expf(logits[i]);
            x = unit(&seed) * total;
            int32_t id = -1;
            for (int32_t i = 0; i < n && x > 0; i++) if (logits[i] > 0) id = i, x -= logits[i];
            json_guard_accept(g, id);
            if (tok_is_eog(t, id)) { closed++; break; }
        }
        json_guard_free(g);
    }
    free(logits);
    *n_tok = k;
    return closed;
}

static void report(const char *what, double *ms, int k, int closed, int runs) {
    qsort(ms, (size_t)k, sizeof *ms, cmp_d);
    double sum = 0;
    for (int i = 0; i < k; i++) sum += ms[i];
    printf("%-22s %6d masks, %d/%d replies closed: mean %.4f ms, p50 %.4f, p99 %.4f, worst %.4f\n", what, k, closed,
           runs, sum / k, ms[k / 2], ms[(int)(k * 0.99)], ms[k - 1]);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL.gguf [runs]\n", argv[0]);
        return 2;
    }
    int runs = argc > 2 ? atoi(argv[2]) : 20;
    strata_err err = {0};
    gguf_file *f;
    tokenizer *t;
    if (gguf_open(&f, argv[1], &err) || tok_load(&t, f, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    json_t *tools = json_array();
    for (int i = 0; i < 60; i++) json_array_append_new(tools, tool(i));
    char why[512];
    double t0 = clock_ms();
    json_schema *s = json_schema_tools(tools, NULL, 1, why, sizeof why);
    if (!s) {
        fprintf(stderr, "%s\n", why);
        return 1;
    }
    printf("60 tools: schema compiled in %.2f ms, %d nodes\n", clock_ms() - t0, json_schema_n_nodes(s));
    json_vocab *v = json_vocab_new(t);
    double *ms = malloc(sizeof(double) * (size_t)runs * 200);
    int k, closed = run(t, v, s, runs, ms, &k);
    report("schema (60 tools)", ms, k, closed, runs);
    closed = run(t, v, NULL, runs, ms, &k);
    report("json_object (no schema)", ms, k, closed, runs);
    free(ms);
    json_vocab_free(v);
    json_schema_free(s);
    json_decref(tools);
    tok_free(t);
    gguf_close(f);
    return 0;
}
