/* test_jsonschema_corpus.c - the schema engine over a corpus of schemas:
 * every JSON file in tests/data/schemas/ (the generated corpus,
 * tools/gen_schema_corpus.py) and tests/data/clients/ (tool schemas
 * captured from real clients, when present). Each schema must compile;
 * the corpus ones with nothing unenforced. Outputs are sampled under the
 * mask from random logits, several seeds each: no run may get stuck, each
 * finished one must parse as a JSON object. With STRATA_SCHEMA_SAMPLES
 * set, every output is written there as JSON lines for
 * tests/e2e/test_schema_corpus.py, which validates them with the
 * `jsonschema` package (the independent check).
 *
 * A file holds {"schemas": [...]}, a list, or one schema; a list item that
 * is a tool ({"input_schema"}, {"parameters"} or {"function":
 * {"parameters"}}) stands for its parameters.
 * STRATA_SCHEMA_DIRS (colon-separated) replaces the two folders;
 * STRATA_SCHEMA_SEEDS sets the seeds per schema.
 *
 * jsonschema_corpus_tiny  the tiny synthetic tokenizer.
 * real_jsonschema_corpus  the real SmolLM2 vocabulary (STRATA_MODEL). */
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "test_util.h"
#include "text/jsonguard.h"
#include "text/jsonschema.h"
#include "text/tokenizer.h"

/* The schema a corpus item stands for (borrowed). */
static const json_t *item_schema(const json_t *it) {
    const json_t *fn = json_object_get(it, "function");
    if (json_is_object(fn) && json_object_get(fn, "parameters")) return json_object_get(fn, "parameters");
    if (json_object_get(it, "input_schema")) return json_object_get(it, "input_schema");
    if (json_is_object(json_object_get(it, "parameters")) && !json_object_get(it, "type")) return json_object_get(it, "parameters");
    return it;
}

/* The items of a file as a new list. */
static json_t *file_items(const json_t *doc) {
    if (json_is_array(doc)) return json_incref((json_t *)doc);
    if (json_is_array(json_object_get(doc, "schemas"))) return json_incref(json_object_get(doc, "schemas"));
    return json_pack("[O]", doc);
}

typedef struct corpus_run {
    const tokenizer *t;
    const json_vocab *v;
    char *text;
    int cap; /* tokens per run */
    FILE *out;
    int runs, closed, schemas;
} corpus_run;

/* One output under s (test_sample_guarded); returns its length, *closed:
 * ended by EOG. */
static size_t sample(corpus_run *r, json_schema *s, uint64_t seed, int *closed, const char *where) {
    size_t used;
    int before = test_failures();
    *closed = test_sample_guarded(r->t, r->v, s, seed, r->cap, 0.2f, r->text, &used);
    if (test_failures() != before) fprintf(stderr, "    in %s\n", where);
    return used;
}

static void one_schema(corpus_run *r, const char *file, size_t index, const json_t *sch, int corpus, int seeds) {
    char why[512] = "", where[1100];
    snprintf(where, sizeof where, "%s[%zu]", file, index);
    json_schema *s = json_schema_compile(sch, why, sizeof why);
    CHECK_MSG(s != NULL, "%s: %s", where, why);
    if (!s) return;
    const char *u = json_schema_unenforced(s);
    CHECK_MSG(!corpus || !u, "%s: unenforced %s", where, u);
    r->schemas++;
    for (int k = 1; k <= seeds; k++) {
        int closed;
        size_t len = sample(r, s, (uint64_t)k * 1000003u + index, &closed, where);
        r->runs++;
        if (closed) {
            json_t *o = json_loadb(r->text, len, 0, NULL);
            CHECK_MSG(json_is_object(o), "%s seed %d: not a JSON object: %.*s", where, k, (int)len, r->text);
            json_decref(o);
            r->closed++;
        }
        if (!r->out) continue;
        json_t *line = json_pack("{s:s,s:I,s:i,s:b,s:s%,s:s?}", "file", file, "index", (json_int_t)index, "seed", k, "closed",
                                 closed, "output", r->text, len, "unenforced", u);
        if (!line) line = json_pack("{s:s,s:I,s:i,s:b,s:n}", "file", file, "index", (json_int_t)index, "seed", k, "closed", 0,
                                    "output"); /* an output cut inside a character: not valid text */
        char *text = json_dumps(line, JSON_COMPACT);
        fprintf(r->out, "%s\n", text);
        free(text);
        json_decref(line);
    }
    json_schema_free(s);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void one_dir(corpus_run *r, const char *dir, int seeds) {
    DIR *d = opendir(dir);
    if (!d) return;
    char *names[512];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 512) {
        size_t len = strlen(e->d_name);
        if (len > 5 && !strcmp(e->d_name + len - 5, ".json")) names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    for (int i = 0; i < n; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        json_error_t err;
        json_t *doc = json_load_file(path, 0, &err);
        CHECK_MSG(doc != NULL, "%s: %s", path, err.text);
        json_t *items = file_items(doc), *it;
        size_t k;
        json_array_foreach(items, k, it) one_schema(r, path, k, item_schema(it), strstr(dir, "data/schemas") != NULL, seeds);
        json_decref(items);
        json_decref(doc);
        free(names[i]);
    }
}

static void run_corpus(const char *model, int seeds, int cap) {
    tokenizer *t = test_load_tokenizer(model);
    if (!t) return;
    if (getenv("STRATA_SCHEMA_SEEDS")) seeds = atoi(getenv("STRATA_SCHEMA_SEEDS"));
    corpus_run r = {.t = t, .v = json_vocab_new(t), .cap = cap};
    r.text = malloc((size_t)cap * 512 + 1);
    const char *out = getenv("STRATA_SCHEMA_SAMPLES");
    if (out) r.out = fopen(out, "w");
    CHECK_MSG(!out || r.out, "cannot write %s", out);
    char dirs[2048];
    snprintf(dirs, sizeof dirs, "%s", getenv("STRATA_SCHEMA_DIRS") ? getenv("STRATA_SCHEMA_DIRS") : "tests/data/schemas:tests/data/clients");
    for (char *save = NULL, *dir = strtok_r(dirs, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) one_dir(&r, dir, seeds);
    printf("    %d schemas, %d runs, %d closed\n", r.schemas, r.runs, r.closed);
    CHECK_MSG(r.schemas >= 200, "only %d schemas in the corpus", r.schemas);
    CHECK_MSG(r.closed * 10 >= r.runs * 7, "only %d of %d runs closed", r.closed, r.runs);
    if (r.out) fclose(r.out);
    free(r.text);
    json_vocab_free((json_vocab *)r.v);
    tok_free(t);
}

TEST(jsonschema_corpus_tiny) { run_corpus(test_data("models/llama-q4_1.gguf"), 3, 300); }

TEST(real_jsonschema_corpus) { run_corpus(test_real_model(), 2, 300); }
