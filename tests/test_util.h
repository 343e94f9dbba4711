/* test_util.h - helpers several test files share. */
#ifndef STRATA_TEST_UTIL_H
#define STRATA_TEST_UTIL_H

#include "text/tokenizer.h"

/* Loads the tokenizer of a GGUF file and closes the file at once (the
 * tokenizer must not keep pointers into the map). NULL and a failed check
 * on error. */
tokenizer *test_load_tokenizer(const char *path);

/* A fresh directory under /tmp (static buffer: one at a time), and its
 * removal with everything in it, read-only parts included. */
char *test_tmpdir_new(void);
void test_tmpdir_free(const char *dir);

#endif
