/* test_kv.c - paged KV blocks: allocation, sharing, copy on write,
 * truncation and a full pool. */
#include <string.h>

#include "model/kv.h"
#include "test.h"

static void fill(kv_pool *p, const kv_seq *s, int pos, uint16_t v) {
    int B = p->block_tokens;
    uint16_t *row = kv_rows(p, s->blocks[pos / B], 0, 0) + (size_t)(pos % B) * p->kv_dim;
    for (int i = 0; i < p->kv_dim; i++) row[i] = v;
}

static uint16_t get(const kv_pool *p, const kv_seq *s, int pos) {
    int B = p->block_tokens;
    return kv_rows(p, s->blocks[pos / B], 0, 0)[(size_t)(pos % B) * p->kv_dim];
}

TEST(kv_reserve_truncate_release) {
    kv_pool p;
    CHECK(kv_pool_init(&p, 2, 8, 4, 6, NULL) == 0);
    kv_seq s;
    kv_seq_init(&s);
    CHECK(kv_seq_reserve(&p, &s, 10, NULL) == 0);
    s.n_pos = 10;
    CHECK_EQ_INT(s.n_blocks, 3);
    CHECK_EQ_INT(p.n_free, 3);
    kv_seq_truncate(&p, &s, 5);
    CHECK_EQ_INT(s.n_blocks, 2);
    CHECK_EQ_INT(p.n_free, 4);
    kv_seq_truncate(&p, &s, 0);
    CHECK_EQ_INT(p.n_free, 6);
    kv_seq_release(&p, &s);
    CHECK_EQ_INT(p.n_free, 6);
    kv_pool_destroy(&p);
}

TEST(kv_fork_shares_and_copies_on_write) {
    kv_pool p;
    kv_pool_init(&p, 1, 4, 4, 8, NULL);
    kv_seq a, b;
    kv_seq_init(&a);
    kv_seq_reserve(&p, &a, 6, NULL);
    for (int i = 0; i < 6; i++) fill(&p, &a, i, (uint16_t)(100 + i));
    a.n_pos = 6;
    kv_seq_fork(&p, &a, 5, &b); /* shares block 0 fully, block 1 partly */
    CHECK_EQ_INT(b.n_pos, 5);
    CHECK_EQ_INT(b.blocks[0], a.blocks[0]);
    CHECK_EQ_INT(p.refcount[a.blocks[1]], 2);
    CHECK(kv_seq_reserve(&p, &b, 6, NULL) == 0); /* b writes position 5 */
    CHECK(b.blocks[1] != a.blocks[1]);            /* so it got a copy */
    CHECK_EQ_INT(b.blocks[0], a.blocks[0]);
    fill(&p, &b, 5, 999);
    CHECK_EQ_INT(get(&p, &a, 5), 105); /* a is untouched */
    CHECK_EQ_INT(get(&p, &b, 4), 104); /* the copy kept the shared rows */
    kv_seq_release(&p, &a);
    kv_seq_release(&p, &b);
    CHECK_EQ_INT(p.n_free, 8);
    kv_pool_destroy(&p);
}

TEST(kv_full_pool_is_an_error_not_a_crash) {
    kv_pool p;
    kv_pool_init(&p, 1, 4, 4, 2, NULL);
    kv_seq s;
    kv_seq_init(&s);
    strata_err err = {0};
    CHECK(kv_seq_reserve(&p, &s, 9, &err) == STRATA_ERANGE);
    CHECK(strstr(err.msg, "full") != NULL);
    CHECK_EQ_INT(p.n_free, 2);
    kv_seq_release(&p, &s);
    kv_pool_destroy(&p);
}
