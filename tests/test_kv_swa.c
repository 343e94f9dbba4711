/* test_kv_swa.c - sliding-window layers in the KV pool, no model: a
 * sequence holds only its window's sliding parts however long it grows,
 * what it holds is never taken, a block's payload keeps the one layout
 * (gathered and scattered), going back into a dropped window is refused
 * with a clear error, and a full slot area is a clean error. */
#include <string.h>

#include "model/kv.h"
#include "test.h"

enum { L = 3, KVD = 2, BT = 16, SWA = 8, CHUNK = 16 };
static const uint8_t swa_layers[L] = {1, 0, 1}; /* layer 1 is global */

static void pool_open(kv_pool *p, int n_blocks, int n_slots) {
    kv_pool_opts o = {.n_layer = L, .kv_dim = KVD, .block_tokens = BT, .n_blocks = n_blocks,
                      .swa_layer = swa_layers, .n_swa = SWA, .n_slots = n_slots};
    CHECK_EQ_INT(kv_pool_init_opts(p, &o, NULL), 0);
}

static uint16_t val(int pos, int layer, int is_v) { return (uint16_t)((pos * 7 + layer * 1000 + is_v * 500) & 0x7fff); }

static void fill(kv_pool *p, const kv_seq *s, int pos) {
    for (int l = 0; l < L; l++)
        for (int v = 0; v < 2; v++)
            for (int i = 0; i < KVD; i++) kv_rows(p, s->blocks[pos / BT], l, v)[(pos % BT) * KVD + i] = val(pos, l, v);
}


/* Positions [from, to) of s read back as written, in layers l0..l1. */
static int intact(const kv_pool *p, const kv_seq *s, int from, int to, int l0, int l1) {
    for (int pos = from; pos < to; pos++)
        for (int l = l0; l <= l1; l++) {
            if (p->swa_layer[l] && !kv_block_has_swa(p, s->blocks[pos / BT])) return 0;
            if (kv_rows(p, s->blocks[pos / BT], l, 1)[(pos % BT) * KVD + 1] != val(pos, l, 1)) return 0;
        }
    return 1;
}

/* Grows s chunk by chunk to n positions, as the forward pass does. */
static void grow(kv_pool *p, kv_seq *s, int n, int *max_held) {
    while (s->n_pos < n) {
        int end = s->n_pos + CHUNK < n ? s->n_pos + CHUNK : n;
        CHECK_EQ_INT(kv_seq_reserve(p, s, end, NULL), 0);
        for (int pos = s->n_pos; pos < end; pos++) fill(p, s, pos);
        s->n_pos = end;
        int held = 0;
        for (int b = 0; b < p->n_blocks; b++) held += p->swa_hold[b] > 0;
        if (held > *max_held) *max_held = held;
        /* the next query's window is whole */
        CHECK(intact(p, s, kv_swa_first_block(p, s->n_pos) * BT, s->n_pos, 0, L - 1));
    }
}

/* A pool of n_blocks with one sequence's slots, and s in it grown to n
 * positions. Returns the most sliding parts held at once. */
static int open_grown(kv_pool *p, kv_seq *s, int n_blocks, int n) {
    int max_held = 0;
    pool_open(p, n_blocks, kv_swa_slots_per_seq(BT, SWA, CHUNK));
    kv_seq_init(s);
    grow(p, s, n, &max_held);
    return max_held;
}

TEST(kv_swa_held_slots_stay_within_the_window) {
    int per_seq = kv_swa_slots_per_seq(BT, SWA, CHUNK);
    kv_pool p;
    kv_seq s;
    int max_held = open_grown(&p, &s, 80, 1200); /* 75 blocks, 150 windows of 8 */
    CHECK(max_held <= per_seq);
    CHECK(max_held >= 2);
    CHECK(p.swa_reclaimed >= 75 - per_seq);        /* old windows' parts were reused */
    CHECK(intact(&p, &s, 0, 1200, 1, 1));          /* the global layer keeps every position */
    CHECK(!kv_block_has_swa(&p, s.blocks[0]));     /* the first window is gone */
    CHECK_EQ_INT(p.glob_bytes * 3, p.block_bytes); /* 1 of 3 layers per block, 2 in slots */
    kv_seq_release(&p, &s);
    CHECK_EQ_INT(p.n_free, 80);
    CHECK_EQ_INT(p.n_slot_free, per_seq);
    kv_pool_destroy(&p);
}

TEST(kv_swa_going_back_into_a_dropped_window_is_refused) {
    kv_pool p;
    kv_seq s;
    open_grown(&p, &s, 40, 400);
    kv_seq_truncate(&p, &s, 395); /* its window is held: fine */
    CHECK_EQ_INT(kv_seq_reserve(&p, &s, 396, NULL), 0);
    kv_seq_truncate(&p, &s, 100); /* positions 29.. were dropped long ago */
    strata_err err = {0};
    CHECK_EQ_INT(kv_seq_reserve(&p, &s, 101, &err), STRATA_EINVAL);
    CHECK(strstr(err.msg, "sliding-window") != NULL);
    CHECK(kv_seq_window_missing(&p, &s) >= 0);
    kv_seq_truncate(&p, &s, 0); /* starting again is fine */
    CHECK_EQ_INT(kv_seq_reserve(&p, &s, 16, NULL), 0);
    kv_seq_release(&p, &s);
    kv_pool_destroy(&p);
}

/* A block's payload is [layer][K|V][B][kv_dim] over all layers, whether
 * gathered from the two parts or written back into them. */
TEST(kv_swa_payload_keeps_the_block_layout) {
    kv_pool p;
    pool_open(&p, 8, 4);
    kv_seq s;
    kv_seq_init(&s);
    CHECK_EQ_INT(kv_seq_reserve(&p, &s, BT, NULL), 0);
    for (int pos = 0; pos < BT; pos++) fill(&p, &s, pos);
    s.n_pos = BT;
    CHECK(kv_block_view(&p, s.blocks[0]) == NULL);
    uint16_t buf[L * 2 * BT * KVD], back[L * 2 * BT * KVD];
    const uint16_t *pl = kv_block_read(&p, s.blocks[0], buf);
    CHECK(pl == buf);
    for (int l = 0; l < L; l++)
        for (int v = 0; v < 2; v++)
            for (int pos = 0; pos < BT; pos++) CHECK_EQ_INT(pl[((l * 2 + v) * BT + pos) * KVD], val(pos, l, v));
    kv_seq t; /* a fresh block gets it back whole */
    kv_seq_init(&t);
    CHECK_EQ_INT(kv_seq_reserve(&p, &t, BT, NULL), 0);
    kv_block_write(&p, t.blocks[0], buf, NULL);
    CHECK(memcmp(kv_block_read(&p, t.blocks[0], back), buf, sizeof buf) == 0);
    kv_seq_release(&p, &t);
    kv_seq_release(&p, &s);
    kv_pool_destroy(&p);

    kv_pool q; /* with no sliding layer the payload is the block itself */
    CHECK_EQ_INT(kv_pool_init(&q, 2, KVD, BT, 2, NULL), 0);
    CHECK(kv_block_view(&q, 1) == (void *)(q.mem + q.block_bytes / 2));
    CHECK(kv_block_read(&q, 1, buf) == kv_block_view(&q, 1));
    kv_pool_destroy(&q);
}

/* A part dropped from the window comes back from a payload (a tier's
 * copy) and the sequence may then go back there. */
TEST(kv_swa_dropped_part_comes_back_from_a_payload) {
    int max_held = 0;
    kv_pool p;
    kv_seq s;
    uint16_t saved[L * 2 * BT * KVD], blk_tmp[L * 2 * BT * KVD];
    open_grown(&p, &s, 40, 64);
    CHECK(kv_block_read(&p, s.blocks[1], saved) != NULL);
    grow(&p, &s, 400, &max_held);
    CHECK(kv_block_read(&p, s.blocks[1], blk_tmp) == NULL); /* dropped: nothing to gather */
    kv_seq_truncate(&p, &s, 20);                               /* its window: blocks 0 and 1 */
    CHECK_EQ_INT(kv_seq_window_missing(&p, &s), 1);
    uint16_t blk0[L * 2 * BT * KVD];
    for (int l = 0; l < L; l++) /* block 0's payload, as a tier would hold it */
        for (int v = 0; v < 2; v++)
            for (int pos = 0; pos < BT; pos++)
                for (int i = 0; i < KVD; i++) blk0[((l * 2 + v) * BT + pos) * KVD + i] = val(pos, l, v);
    CHECK_EQ_INT(kv_block_import_swa(&p, s.blocks[1], saved, NULL), 0);
    CHECK_EQ_INT(kv_block_import_swa(&p, s.blocks[0], blk0, NULL), 0);
    CHECK_EQ_INT(kv_seq_window_missing(&p, &s), -1);
    CHECK_EQ_INT(kv_seq_reserve(&p, &s, 21, NULL), 0);
    CHECK(intact(&p, &s, 0, 20, 0, L - 1));
    kv_seq_release(&p, &s);
    kv_pool_destroy(&p);
}

/* Every slot held: reserving is STRATA_ERANGE and leaves the sequence
 * and the pool as they were. */
TEST(kv_swa_full_slot_area_is_a_clean_error) {
    kv_pool p;
    pool_open(&p, 16, 3);
    kv_seq a, b;
    kv_seq_init(&a);
    kv_seq_init(&b);
    CHECK_EQ_INT(kv_seq_reserve(&p, &a, 3 * BT, NULL), 0); /* holds all 3 */
    a.n_pos = 3 * BT;
    strata_err err = {0};
    CHECK_EQ_INT(kv_seq_reserve(&p, &b, BT, &err), STRATA_ERANGE);
    CHECK(strstr(err.msg, "sliding-window slot") != NULL);
    CHECK_EQ_INT(b.n_blocks, 0);
    CHECK_EQ_INT(p.n_free, 16 - 3);
    CHECK_EQ_INT(kv_seq_reserve(&p, &a, 4 * BT + 1, &err), STRATA_ERANGE); /* no slot for the new blocks */
    CHECK_EQ_INT(a.n_blocks, 3);
    kv_seq_release(&p, &a);
    CHECK_EQ_INT(kv_seq_reserve(&p, &b, 3 * BT, NULL), 0); /* released: free again */
    kv_seq_release(&p, &b);
    CHECK_EQ_INT(p.n_free, 16);
    CHECK_EQ_INT(p.n_slot_free, 3);
    kv_pool_destroy(&p);
}
