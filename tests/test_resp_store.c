/* test_resp_store.c - the Responses API's store of recent responses
 * (server/resp_store.h): lookup by tenant, LRU by entries and bytes,
 * delete, and the saved file (round trip, a corrupt or foreign file
 * ignored whole). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/resp_store.h"
#include "test.h"
#include "test_util.h"

static const cache_hash NS_A = {{1}}, NS_B = {{2}};
static const uint8_t FP[32] = {7}, OTHER_FP[32] = {8};

static int has(resp_store *rs, const cache_hash *ns, const char *id) {
    return resp_store_get(rs, ns, id, NULL, NULL) == 0;
}

TEST(resp_store_get_returns_copies_in_the_tenant_only) {
    resp_store *rs = resp_store_new(4, 0);
    resp_store_put(rs, &NS_A, "resp_1", "{\"id\":\"resp_1\"}", "[1]");
    char *resp = NULL, *input = NULL;
    CHECK(resp_store_get(rs, &NS_A, "resp_1", &resp, &input) == 0);
    CHECK_STR(resp, "{\"id\":\"resp_1\"}");
    CHECK_STR(input, "[1]");
    free(resp);
    free(input);
    CHECK(!has(rs, &NS_B, "resp_1")); /* another API key never finds it */
    CHECK(!has(rs, &NS_A, "resp_2"));
    resp_store_free(rs);
}

TEST(resp_store_evicts_least_recently_used) {
    resp_store *rs = resp_store_new(2, 0);
    resp_store_put(rs, &NS_A, "a", "{}", "[]");
    resp_store_put(rs, &NS_A, "b", "{}", "[]");
    CHECK(has(rs, &NS_A, "a")); /* a is now the most recent */
    resp_store_put(rs, &NS_A, "c", "{}", "[]");
    CHECK(has(rs, &NS_A, "a") && has(rs, &NS_A, "c") && !has(rs, &NS_A, "b"));
    CHECK_EQ_INT(resp_store_count(rs), 2);
    resp_store_free(rs);
}

TEST(resp_store_keeps_within_its_byte_budget) {
    resp_store *rs = resp_store_new(100, 64);
    char big[41];
    memset(big, 'x', 40);
    big[40] = 0;
    resp_store_put(rs, &NS_A, "a", big, "[]");
    resp_store_put(rs, &NS_A, "b", big, "[]"); /* both do not fit: a goes */
    CHECK(!has(rs, &NS_A, "a") && has(rs, &NS_A, "b"));
    char huge[100];
    memset(huge, 'y', 99);
    huge[99] = 0;
    resp_store_put(rs, &NS_A, "c", huge, "[]"); /* larger than the budget: not kept, nothing evicted */
    CHECK(!has(rs, &NS_A, "c") && has(rs, &NS_A, "b"));
    resp_store_free(rs);
}

TEST(resp_store_delete_and_replace) {
    resp_store *rs = resp_store_new(4, 0);
    resp_store_put(rs, &NS_A, "a", "{\"v\":1}", "[]");
    resp_store_put(rs, &NS_A, "a", "{\"v\":2}", "[]");
    CHECK_EQ_INT(resp_store_count(rs), 1);
    char *resp;
    CHECK(resp_store_get(rs, &NS_A, "a", &resp, NULL) == 0);
    CHECK_STR(resp, "{\"v\":2}");
    free(resp);
    CHECK(resp_store_delete(rs, &NS_B, "a") == -1); /* not another tenant's to delete */
    CHECK(resp_store_delete(rs, &NS_A, "a") == 0);
    CHECK(resp_store_delete(rs, &NS_A, "a") == -1);
    CHECK(!has(rs, &NS_A, "a"));
    resp_store_free(rs);
}

TEST(resp_store_save_load_round_trip_keeps_recency) {
    char *dir = test_tmpdir_new(), path[512];
    snprintf(path, sizeof path, "%s/responses.bin", dir);
    resp_store *rs = resp_store_new(8, 0);
    resp_store_put(rs, &NS_A, "old", "{\"o\":1}", "[\"in\"]");
    resp_store_put(rs, &NS_B, "new", "{\"n\":2}", "[]");
    CHECK(has(rs, &NS_A, "old")); /* old becomes the most recent */
    CHECK(resp_store_save(rs, path, FP) == 0);
    resp_store_free(rs);

    resp_store *two = resp_store_new(1, 0); /* room for one: the most recent survives */
    CHECK(resp_store_load(two, path, FP) == 0);
    char *resp, *input;
    CHECK(resp_store_get(two, &NS_A, "old", &resp, &input) == 0);
    CHECK_STR(resp, "{\"o\":1}");
    CHECK_STR(input, "[\"in\"]");
    free(resp);
    free(input);
    CHECK(!has(two, &NS_B, "new"));
    CHECK(resp_store_load(two, path, OTHER_FP) == -1); /* another model's file */
    resp_store_free(two);
    test_tmpdir_free(dir);
}

TEST(resp_store_corrupt_file_is_ignored_whole) {
    char *dir = test_tmpdir_new(), path[512];
    snprintf(path, sizeof path, "%s/responses.bin", dir);
    resp_store *rs = resp_store_new(8, 0);
    resp_store_put(rs, &NS_A, "a", "{\"a\":1}", "[]");
    CHECK(resp_store_save(rs, path, FP) == 0);
    resp_store_free(rs);
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    fseek(f, 60, SEEK_SET);
    fputc('!', f);
    fclose(f);
    resp_store *two = resp_store_new(8, 0);
    CHECK(resp_store_load(two, path, FP) == -1);
    CHECK_EQ_INT(resp_store_count(two), 0);
    CHECK(resp_store_load(two, "/nonexistent/responses.bin", FP) == -1);
    resp_store_free(two);
    test_tmpdir_free(dir);
}
