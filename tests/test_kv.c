/* test_kv.c - paged KV blocks: allocation, sharing, copy on write,
 * truncation and a full pool. */
#include <stdlib.h>
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

/* A q8_0 pool: rows of 17 halves per 32 values, head-major, in the global part and
 * in the sliding slots alike; a payload read gathers exactly those bytes
 * and writes back the same; rows that are not whole q8_0 blocks are
 * refused. */
TEST(kv_q8_0_pool_rows_and_payload) {
    static const uint8_t swa[3] = {1, 0, 1};
    kv_pool f, q;
    kv_pool_opts o = {.n_layer = 3, .kv_dim = 64, .block_tokens = 4, .n_blocks = 4, .swa_layer = swa, .n_swa = 8,
                      .n_slots = 4};
    CHECK_EQ_INT(kv_pool_init_opts(&f, &o, NULL), 0);
    o.type = KVQ_Q8_0;
    CHECK_EQ_INT(kv_pool_init_opts(&q, &o, NULL), 0);
    CHECK_EQ_INT(q.row_halves, 34);
    CHECK_EQ_INT(q.head_stride, 34); /* one head of 64 */
    kv_pool h2;
    o.head_dim = 32; /* two heads of 32: head-major, each head's 4 rows together */
    CHECK_EQ_INT(kv_pool_init_opts(&h2, &o, NULL), 0);
    CHECK_EQ_INT(h2.head_stride, 17);
    CHECK_EQ_INT(h2.head_off, 4 * 17);
    CHECK_EQ_INT(h2.block_bytes, q.block_bytes);
    kv_pool_destroy(&h2);
    o.head_dim = 0;
    CHECK_EQ_INT(f.head_stride, 64); /* f16: token-major, heads side by side */
    CHECK_EQ_INT(f.head_off, 64);
    CHECK_EQ_INT(q.block_bytes * 32, f.block_bytes * 17);
    CHECK_EQ_INT(q.glob_bytes * 3, q.block_bytes);
    kv_seq s;
    kv_seq_init(&s);
    CHECK_EQ_INT(kv_seq_reserve(&q, &s, 4, NULL), 0);
    int b = s.blocks[0];
    for (int l = 0; l < 3; l++)
        for (int v = 0; v < 2; v++) {
            uint16_t *r = kv_rows(&q, b, l, v);
            for (int i = 0; i < 4 * 34; i++) r[i] = (uint16_t)(l * 1000 + v * 500 + i);
        }
    uint16_t *pay = malloc(q.block_bytes), *back = malloc(q.block_bytes);
    const uint16_t *got = kv_block_read(&q, b, pay);
    CHECK(got != NULL);
    for (int l = 0; l < 3; l++) /* [layer][K|V][B][row] */
        CHECK_EQ_INT(got[(size_t)(l * 2 + 1) * 4 * 34 + 5], l * 1000 + 500 + 5);
    memcpy(back, got, q.block_bytes);
    memset(kv_rows(&q, b, 1, 0), 0, 4 * 34 * 2);
    kv_block_write(&q, b, back, NULL);
    CHECK_EQ_INT(kv_rows(&q, b, 1, 0)[7], 1000 + 7);
    free(pay), free(back);
    kv_seq_release(&q, &s);
    kv_pool_destroy(&q);
    kv_pool_destroy(&f);
    strata_err err = {0};
    o.kv_dim = 48;
    CHECK_EQ_INT(kv_pool_init_opts(&q, &o, &err), STRATA_EINVAL);
    CHECK(strstr(err.msg, "q8_0") != NULL);
}
