/* test_mem.c - the grow-an-array step in base/mem. */
#include <stdlib.h>

#include "base/mem.h"
#include "test.h"

TEST(mem_grown_cap_doubles_from_first_until_it_holds)
{
    CHECK_EQ_INT((int)mem_grown_cap(0, 1, 16), 16);
    CHECK_EQ_INT((int)mem_grown_cap(0, 17, 16), 32);
    CHECK_EQ_INT((int)mem_grown_cap(16, 16, 4), 16);   /* already holds it */
    CHECK_EQ_INT((int)mem_grown_cap(16, 17, 4), 32);
    CHECK_EQ_INT((int)mem_grown_cap(3, 100, 4), 192);  /* 3, 6, ..., 192 */
    CHECK_EQ_INT((int)mem_grown_cap(0, 5, 0), 8);      /* no first: from 1 */
}

/* Items pushed one at a time through XGROW keep their values across
 * moves, with an int capacity and a size_t one. */
TEST(xgrow_keeps_items_for_any_capacity_type)
{
    int *a = NULL, n = 0, cap = 0;
    for (int i = 0; i < 1000; i++) {
        XGROW(a, cap, n + 1, 4);
        CHECK(cap >= n + 1);
        a[n++] = i * 7;
    }
    CHECK_EQ_INT(cap, 1024);
    for (int i = 0; i < n; i++) CHECK_EQ_INT(a[i], i * 7);
    free(a);

    double *d = NULL;
    size_t dcap = 0;
    XGROW(d, dcap, 300, 64); /* one call grows as far as needed */
    CHECK_EQ_INT((int)dcap, 512);
    d[299] = 1.5;
    XGROW(d, dcap, 10, 64); /* enough already: unchanged */
    CHECK_EQ_INT((int)dcap, 512);
    CHECK(d[299] == 1.5);
    free(d);
}
