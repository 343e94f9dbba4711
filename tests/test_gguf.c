/* test_gguf.c - the GGUF loader: a good file loads with the right values;
 * every bad file of tools/testdata_models.py (bad/MANIFEST.txt) fails with
 * the listed error code and a message naming the listed field. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "test.h"

TEST(gguf_reads_metadata_and_tensors) {
    gguf_file *f;
    strata_err err = {0};
    if (gguf_open(&f, test_data("models/llama-q4_1.gguf"), &err)) {
        test_fail(__FILE__, __LINE__, "%s", err.msg);
        return;
    }
    CHECK_EQ_INT(f->version, 3);
    gguf_str arch;
    CHECK(gguf_get_str(f, "general.architecture", &arch, &err) == 0 && gguf_str_eq(arch, "llama"));
    uint32_t n_layer;
    CHECK(gguf_get_u32(f, "llama.block_count", &n_layer, &err) == 0);
    CHECK_EQ_INT(n_layer, 3);
    float eps;
    CHECK(gguf_get_f32(f, "llama.attention.layer_norm_rms_epsilon", &eps, &err) == 0);
    CHECK_NEAR(eps, 1e-5, 1e-9);
    CHECK(gguf_get_u32(f, "general.architecture", &n_layer, &err) == STRATA_EFORMAT);
    CHECK(strstr(err.msg, "general.architecture") != NULL);
    CHECK(gguf_get_u32(f, "no.such.key", &n_layer, &err) == STRATA_EINVAL);
    const gguf_str *toks;
    uint64_t n;
    CHECK(gguf_get_str_arr(f, "tokenizer.ggml.tokens", &toks, &n, &err) == 0 && n > 256);
    const gguf_tensor *t = gguf_find_tensor(f, "blk.0.attn_q.weight");
    CHECK(t && t->ne[0] == 256 && t->ne[1] == 256 && t->type == QT_Q4_1);
    CHECK(t && (const uint8_t *)t->data + t->nbytes <= f->map + f->size);
    gguf_close(f);
}

static int code_matches(int code, const char *want) {
    char buf[64];
    snprintf(buf, sizeof buf, "%s", want);
    for (char *tok = strtok(buf, "|"); tok; tok = strtok(NULL, "|")) {
        if (strcmp(tok, "OK") == 0 && code == 0) return 1;
        if (code && strcmp(tok, strata_strerror(code)) == 0) return 1;
    }
    return 0;
}

static int msg_matches(const char *msg, const char *fields) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", fields);
    for (char *tok = strtok(buf, "|"); tok; tok = strtok(NULL, "|"))
        if (strcmp(tok, "-") == 0 || strstr(msg, tok)) return 1;
    return 0;
}

static void check_bad_file(const char *name, const char *codes, const char *fields) {
    char path[512];
    snprintf(path, sizeof path, "%s", test_data("bad/"));
    snprintf(path + strlen(path), sizeof path - strlen(path), "%s", name);
    strata_err err = {0};
    model *m = NULL;
    int rc = model_load(&m, path, &err);
    CHECK_MSG(code_matches(rc, codes), "%s: got %s (%s), want %s", name, strata_strerror(rc),
              err.msg, codes);
    if (rc) CHECK_MSG(msg_matches(err.msg, fields), "%s: message '%s' does not name %s", name, err.msg, fields);
    model_free(m);
}

/* Every file a manifest lists (bad/<rel>); how many. */
static int check_manifest(const char *rel) {
    FILE *f = fopen(test_data(rel), "r");
    if (!f) {
        test_fail(__FILE__, __LINE__, "missing %s (make testdata)", rel);
        return 0;
    }
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        char name[128], codes[64], fields[256];
        if (line[0] == '#' || sscanf(line, "%127s %63s %255s", name, codes, fields) != 3) continue;
        check_bad_file(name, codes, fields);
        n++;
    }
    fclose(f);
    return n;
}

TEST(gguf_bad_files_fail_clearly) { CHECK(check_manifest("bad/MANIFEST.txt") >= 20); }

/* gpt-oss's own tensors and keys (tools/testdata_gptoss.py). */
TEST(gguf_bad_gptoss_files_fail_clearly) { CHECK(check_manifest("bad/MANIFEST-gptoss.txt") >= 5); }

TEST(gguf_missing_file_is_an_error) {
    gguf_file *f;
    strata_err err = {0};
    CHECK(gguf_open(&f, "/nonexistent/model.gguf", &err) == STRATA_EIO);
    CHECK(strstr(err.msg, "/nonexistent/model.gguf") != NULL);
    CHECK(f == NULL);
}
