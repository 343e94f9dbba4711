/* test_util.c - helpers several test files share (test_util.h). */
#define _XOPEN_SOURCE 700
#include "test_util.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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
