/* test_draft.c - prompt-lookup drafting: the longest suffix's most
 * recent earlier occurrence, its continuation, periodic runs, no match. */
#include "model/draft.h"
#include "test.h"

TEST(draft_continues_latest_longest_match) {
    /* "1 2 3 4 9 ... 1 2 3 4 5 6 7 ... 2 3 4": the 3-gram 2 3 4 last
     * occurred before 5 6 7, not before 9. */
    const int32_t t[] = {1, 2, 3, 4, 9, 8, 1, 2, 3, 4, 5, 6, 7, 8, 2, 3, 4};
    int32_t out[8];
    int n = draft_lookup(t, 17, 3, out);
    CHECK_EQ_INT(n, 3);
    CHECK(out[0] == 5 && out[1] == 6 && out[2] == 7);
    CHECK_EQ_INT(draft_lookup(t, 17, 0, out), 0);
}

TEST(draft_prefers_longer_suffix) {
    /* The 2-gram "3 4" occurs last before 50, but the 4-gram 1 2 3 4
     * occurred before 60: the longer context wins. */
    const int32_t t[] = {1, 2, 3, 4, 60, 61, 7, 3, 4, 50, 8, 1, 2, 3, 4};
    int32_t out[4];
    CHECK_EQ_INT(draft_lookup(t, 15, 2, out), 2);
    CHECK(out[0] == 60 && out[1] == 61);
}

TEST(draft_periodic_run_and_no_match) {
    const int32_t run[] = {9, 5, 6, 5, 6};
    int32_t out[5];
    CHECK_EQ_INT(draft_lookup(run, 5, 5, out), 5); /* 5 6 last at 1: 5 6 5 6 5 ... */
    CHECK(out[0] == 5 && out[1] == 6 && out[2] == 5 && out[3] == 6 && out[4] == 5);
    const int32_t none[] = {1, 2, 3, 4, 5, 6, 1};
    CHECK_EQ_INT(draft_lookup(none, 7, 4, out), 0); /* a lone token is not looked up */
    CHECK_EQ_INT(draft_lookup(none, 1, 4, out), 0);
    CHECK_EQ_INT(draft_lookup(none, 0, 4, out), 0);
}

/* A predicted output: its start while the reply is shorter than an
 * n-gram, then the continuation of the reply's suffix nearest the reply's
 * own length, cut where the prediction ends. */
TEST(draft_from_a_prediction) {
    const int32_t pred[] = {10, 11, 12, 13, 10, 11, 14, 15, 16};
    int32_t out[8];
    CHECK_EQ_INT(draft_predicted(pred, 9, NULL, 0, 3, out), 3);
    CHECK(out[0] == 10 && out[1] == 11 && out[2] == 12);
    const int32_t r1[] = {10};
    CHECK_EQ_INT(draft_predicted(pred, 9, r1, 1, 2, out), 2);
    CHECK(out[0] == 11 && out[1] == 12);
    const int32_t other[] = {99};
    CHECK_EQ_INT(draft_predicted(pred, 9, other, 1, 2, out), 0);
    /* "10 11" occurs at 0 and 4: the reply of 6 tokens ending in it is
     * nearer the second, whose continuation is 14 15 16 (only 3 left) */
    const int32_t r2[] = {10, 11, 12, 13, 10, 11};
    CHECK_EQ_INT(draft_predicted(pred, 9, r2, 6, 5, out), 3);
    CHECK(out[0] == 14 && out[1] == 15 && out[2] == 16);
    const int32_t r3[] = {7, 10, 11};                  /* the reply departed, then came back */
    CHECK_EQ_INT(draft_predicted(pred, 9, r3, 3, 2, out), 2);
    CHECK(out[0] == 12 && out[1] == 13);
    const int32_t r4[] = {7, 16};                      /* a suffix the prediction does not hold */
    CHECK_EQ_INT(draft_predicted(pred, 9, r4, 2, 2, out), 0);
}
