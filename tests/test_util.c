/* test_util.c - helpers several test files share (test_util.h). */
#define _XOPEN_SOURCE 700
#include "test_util.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "model/gguf.h"
#include "test.h"

tokenizer *test_load_tokenizer(const char *path) {
    gguf_file *f = NULL;
    strata_err err = {0};
    if (gguf_open(&f, path, &err)) {
        test_fail(__FILE__, __LINE__, "gguf_open %s: %s", path, err.msg);
        return NULL;
    }
    tokenizer *t = NULL;
    int rc = tok_load(&t, f, &err);
    gguf_close(f);
    if (rc) test_fail(__FILE__, __LINE__, "tok_load %s: %s", path, err.msg);
    return t;
}

char *test_tmpdir_new(void) {
    static char path[64];
    strcpy(path, "/tmp/strata-test-XXXXXX");
    CHECK(mkdtemp(path) != NULL);
    return path;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f) {
    if (flag == FTW_D || flag == FTW_DP) chmod(p, 0755);
    return remove(p);
}

void test_tmpdir_free(const char *dir) {
    chmod(dir, 0755);
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

char *test_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) buf[n] = 0;
    if (len) *len = buf ? (size_t)n : 0;
    return buf;
}

const char *test_token_text(const tokenizer *t, int32_t id, int *len) {
    static char buf[1024];
    int n = tok_piece(t, id, 0, buf, sizeof buf);
    *len = n < 0 ? 0 : n > (int)sizeof buf ? (int)sizeof buf : n;
    return buf;
}

/* What a fresh byte-level guard says of prefix followed by p. */
static int feed_accepts(json_schema *schema, const char *prefix, const char *p, int len) {
    json_guard *b = json_guard_new_schema(NULL, schema);
    int ok = len > 0 && json_guard_feed(b, prefix, strlen(prefix)) == 0 && json_guard_feed(b, p, (size_t)len) == 0;
    json_guard_free(b);
    return ok;
}

void test_mask_matches_feed(const tokenizer *t, const json_vocab *v, json_schema *schema, const char *prefix) {
    int32_t n = tok_n_vocab(t);
    float *logits = calloc((size_t)n, sizeof(float));
    json_guard *g = json_guard_new_schema(v, schema);
    CHECK_EQ_INT(json_guard_feed(g, prefix, strlen(prefix)), 0);
    int allowed = json_guard_mask(g, logits), count = 0, wrong = 0;
    for (int32_t id = 0; id < n; id++) {
        int len;
        const char *p = test_token_text(t, id, &len);
        int want = tok_is_eog(t, id) ? json_guard_done(g) : feed_accepts(schema, prefix, p, len);
        int got = logits[id] == 0.0f;
        count += got;
        if (got != want && wrong++ < 3)
            test_fail(__FILE__, __LINE__, "prefix '%s' token %d '%.*s': mask %d, feed %d", prefix, id, len, p, got,
                      want);
    }
    CHECK_EQ_INT(allowed, count);
    CHECK_MSG(allowed > 0, "stuck after '%s'", prefix);
    json_guard_free(g);
    free(logits);
}

int test_run_strata(const char *args, char *out, size_t cap) {
    const char *bin = getenv("STRATA_BIN") ? getenv("STRATA_BIN") : "./strata";
    char path[] = "/tmp/strata-test-cliXXXXXX", cmd[8192];
    int fd = mkstemp(path);
    snprintf(cmd, sizeof cmd, "%s %s >%s 2>&1 </dev/null", bin, args, path);
    int st = system(cmd);
    ssize_t n = pread(fd, out, cap - 1, 0);
    out[n > 0 ? n : 0] = 0;
    close(fd);
    unlink(path);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
