/* test_hash.c - block hash chains and the remembered model fingerprint. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/hash.h"
#include "test.h"

TEST(hash_chain_depends_on_every_earlier_token) {
    uint8_t fp[32] = {9};
    cache_hash root, a1, a2, b1, b2;
    cache_hash_root(&root, fp, "", 0);
    int32_t x[4] = {1, 2, 3, 4}, y[4] = {1, 2, 3, 5};
    cache_hash_block(&a1, &root, x, 4);
    cache_hash_block(&b1, &root, y, 4);
    cache_hash_block(&a2, &a1, x, 4);
    cache_hash_block(&b2, &b1, x, 4); /* same tokens, different parent */
    CHECK(memcmp(a1.b, b1.b, 32) != 0);
    CHECK(memcmp(a2.b, b2.b, 32) != 0);
    char hex[65];
    cache_hash_hex(&a1, hex);
    CHECK_EQ_INT(strlen(hex), 64);
}

TEST(hash_fingerprint_is_remembered_until_the_file_changes) {
    char dir[] = "/tmp/strata-fp-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char model[256], memo_dir[256];
    snprintf(model, sizeof model, "%s/model.bin", dir);
    snprintf(memo_dir, sizeof memo_dir, "%s/memo", dir);
    mkdir(memo_dir, 0755);
    FILE *f = fopen(model, "w");
    fputs("weights v1", f);
    fclose(f);
    uint8_t a[32], b[32], c[32], plain[32];
    CHECK(cache_model_fingerprint(model, memo_dir, a, NULL) == 0);
    CHECK(cache_model_fingerprint(model, NULL, plain, NULL) == 0);
    CHECK(memcmp(a, plain, 32) == 0);
    CHECK(cache_model_fingerprint(model, memo_dir, b, NULL) == 0); /* from the memo */
    CHECK(memcmp(a, b, 32) == 0);
    f = fopen(model, "w"); /* new content and size: the memo no longer applies */
    fputs("weights version 2", f);
    fclose(f);
    CHECK(cache_model_fingerprint(model, memo_dir, c, NULL) == 0);
    CHECK(memcmp(a, c, 32) != 0);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}
