/* test_diag.c - cache diagnostics: the first difference from the most
 * similar recent prompt of the same tenant, and the message holding a
 * position. */
#include <string.h>

#include "server/diag.h"
#include "test.h"

TEST(diag_first_difference_against_the_most_similar_recent_prompt) {
    diag_store *d = diag_new();
    cache_hash a = {{1}}, b = {{2}};
    int32_t p1[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, p2[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    int32_t edited[10] = {1, 2, 3, 99, 5, 6, 7, 8, 9, 10}, other[4] = {7, 7, 7, 7};
    cache_diag g;
    diag_observe(d, &a, p1, 10, &g);
    CHECK(!g.diverged); /* nothing seen yet */
    diag_observe(d, &a, p2, 12, &g);
    CHECK(!g.diverged); /* the next turn extends it: not a miss */
    diag_observe(d, &b, edited, 10, &g);
    CHECK(!g.diverged); /* another tenant sees nothing of a's prompts */
    diag_observe(d, &a, edited, 10, &g);
    CHECK(g.diverged);
    CHECK_EQ_INT(g.first_diff, 3);
    CHECK_EQ_INT(g.lost, 7); /* both have 10 tokens: 7 past the edit */
    CHECK_EQ_INT(g.n_was, 7); /* what the earlier prompt had from there on */
    CHECK_EQ_INT(g.was[0], 4);
    CHECK_EQ_INT(g.was[6], 10);
    diag_observe(d, &a, other, 4, &g);
    CHECK(!g.diverged); /* shares nothing: a new conversation */
    diag_free(d);
}

TEST(diag_message_at_a_position) {
    int ends[] = {0, 12, 30, 41}; /* 3 messages: [0,12) [12,30) [30,41) */
    CHECK_EQ_INT(diag_message_at(ends, 3, 0), 0);
    CHECK_EQ_INT(diag_message_at(ends, 3, 11), 0);
    CHECK_EQ_INT(diag_message_at(ends, 3, 12), 1);
    CHECK_EQ_INT(diag_message_at(ends, 3, 40), 2);
    CHECK_EQ_INT(diag_message_at(ends, 3, 41), -1); /* past the messages: the open turn */
    int unknown[] = {0, -1, 30};
    CHECK_EQ_INT(diag_message_at(unknown, 2, 5), 1);
    CHECK_EQ_INT(diag_message_at(NULL, 0, 5), -1);
}
