/* test_util.c - helpers several test files share (test_util.h). */
#include "test_util.h"

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
