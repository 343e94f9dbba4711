/* test_kv_swa_dev.c - a KV pool with sliding-window layers in device
 * memory (the fake device of fake_dev.h: copies run late, the two streams
 * out of order unless events order them) behaves exactly like the same
 * pool in host memory: after the same steps the same blocks hold the same
 * slots, and every payload reads back the same bytes (gathered, queued,
 * written whole, its sliding part imported, copied on write), the bytes
 * computed for it. A download still queued from a slot that is then
 * given to another block gets the old bytes, whichever way the new ones
 * come in (an upload on the copy stream, an import). No GPU, no model. */
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "fake_dev.h"
#include "model/kv.h"
#include "test.h"

/* Sliding layers in two runs around a global one: a payload's copies
 * between host and device are one per run (kv.c, payload_copy). */
enum { L = 4, KVD = 8, BT = 8, SWA = 6, CHUNK = 8, NB = 64 };
static const uint8_t swa_layers[L] = {1, 1, 0, 1};

static void pool_open(kv_pool *p, const devmem *dev, int n_blocks, int n_slots) {
    kv_pool_opts o = {.n_layer = L, .kv_dim = KVD, .block_tokens = BT, .n_blocks = n_blocks,
                      .swa_layer = swa_layers, .n_swa = SWA, .n_slots = n_slots, .dev = dev};
    strata_err e = {0};
    CHECK_MSG(kv_pool_init_opts(p, &o, &e) == 0, "%s", e.msg);
}

/* What the "model" computes at pos for token tok: element j of layer l's K or V row. */
static uint16_t val(int32_t tok, int pos, int l, int v, int j) {
    return (uint16_t)((tok * 31 + pos * 7 + l * 1000 + v * 500 + j) & 0x7fff);
}

/* Positions [s->n_pos, n) of s computed: in place on a host pool; on a
 * device pool each row goes up on the compute stream (as a kernel writes
 * it) and the host waits at the end, as the scheduler's step does (for
 * its logits). */
static void compute(kv_pool *p, kv_seq *s, const int32_t *toks, int n) {
    CHECK_EQ_INT(kv_seq_reserve(p, s, n, NULL), 0);
    int m = n > s->n_pos ? n - s->n_pos : 1;
    uint16_t *rows = xmalloc((size_t)m * L * 2 * KVD * sizeof(uint16_t)), *row = rows;
    for (int pos = s->n_pos; pos < n; pos++)
        for (int l = 0; l < L; l++)
            for (int v = 0; v < 2; v++, row += KVD) {
                for (int j = 0; j < KVD; j++) row[j] = val(toks[pos], pos, l, v, j);
                uint16_t *dst = kv_rows(p, s->blocks[pos / BT], l, v) + (size_t)(pos % BT) * KVD;
                if (!p->dev) memcpy(dst, row, KVD * sizeof(uint16_t));
                else CHECK_EQ_INT(devmem_copy(p->dev, DEVMEM_COMPUTE, dst, row, KVD * 2, DEVMEM_H2D, NULL), 0);
            }
    s->n_pos = n;
    if (p->dev) CHECK_EQ_INT(devmem_sync(p->dev, DEVMEM_COMPUTE, NULL), 0);
    free(rows);
}

enum { GLOBAL = 1, SLIDING = 2, BOTH = 3 };

/* Payload pl of the block holding positions [b0, b0 + BT) of toks: the
 * layers of the parts asked for as computed. */
static int payload_holds(const uint16_t *pl, const int32_t *toks, int b0, int parts) {
    for (int l = 0; l < L; l++)
        for (int v = 0; v < 2 && (parts & (swa_layers[l] ? SLIDING : GLOBAL)); v++)
            for (int i = 0; i < BT; i++)
                for (int j = 0; j < KVD; j++)
                    if (pl[((size_t)(l * 2 + v) * BT + i) * KVD + j] != val(toks[b0 + i], b0 + i, l, v, j)) return 0;
    return 1;
}

/* The host pool h and the device pool d after the same steps: the same
 * blocks, slots and holds; for sequences hs[i] / ds[i] the same tables,
 * and each block's payload the same bytes where written (or missing in
 * both). */
static void same(const kv_pool *h, const kv_pool *d, const kv_seq *hs, const kv_seq *ds, int n_seq) {
    CHECK(memcmp(h->swa_slot, d->swa_slot, (size_t)NB * sizeof(int)) == 0);
    CHECK(memcmp(h->swa_hold, d->swa_hold, (size_t)NB * sizeof(int)) == 0);
    CHECK(memcmp(h->refcount, d->refcount, (size_t)NB * sizeof(int)) == 0);
    CHECK_EQ_INT(h->swa_reclaimed, d->swa_reclaimed);
    uint8_t *hb = xmalloc(h->block_bytes), *db = xmalloc(d->block_bytes);
    for (int i = 0; i < n_seq; i++) {
        CHECK_EQ_INT(hs[i].n_blocks, ds[i].n_blocks);
        for (int k = 0; k < hs[i].n_blocks && k < ds[i].n_blocks; k++) {
            CHECK_EQ_INT(hs[i].blocks[k], ds[i].blocks[k]);
            const void *a = kv_block_read(h, hs[i].blocks[k], hb), *b = kv_block_read(d, ds[i].blocks[k], db);
            CHECK_MSG((a == NULL) == (b == NULL), "seq %d block %d: in memory on one pool only", i, k);
            int n = hs[i].n_pos - k * BT < BT ? hs[i].n_pos - k * BT : BT; /* rows written */
            for (int lv = 0; a && b && lv < 2 * L; lv++) {
                size_t at = (size_t)lv * BT * KVD * sizeof(uint16_t);
                CHECK_MSG(memcmp((const uint8_t *)a + at, (const uint8_t *)b + at, (size_t)n * KVD * 2) == 0,
                          "seq %d block %d: other bytes on the device", i, k);
            }
        }
    }
    free(hb), free(db);
}

static void tokens(int32_t *t, int n, int seed) {
    for (int i = 0; i < n; i++) t[i] = 1 + (i * 37 + seed) % 5000;
}

/* The server's steps on both pools at once: p[0] in host memory, p[1] on
 * the fake device; s[k][i] is sequence i of pool k. */
typedef struct twin {
    fake_dev *fd;
    kv_pool p[2];
    kv_seq s[2][3];
} twin;

static void twin_open(twin *t, unsigned seed, int n_slots) {
    t->fd = fake_dev_new(seed);
    pool_open(&t->p[0], NULL, NB, n_slots);
    pool_open(&t->p[1], fake_dev_mem(t->fd), NB, n_slots);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 3; i++) kv_seq_init(&t->s[k][i]);
}

static void twin_same(const twin *t) { same(&t->p[0], &t->p[1], t->s[0], t->s[1], 3); }

/* Sequence i of both grows chunk by chunk to n, compared after each chunk. */
static void twin_grow(twin *t, int i, const int32_t *toks, int n) {
    while (t->s[0][i].n_pos < n) {
        int end = t->s[0][i].n_pos + CHUNK < n ? t->s[0][i].n_pos + CHUNK : n;
        for (int k = 0; k < 2; k++) compute(&t->p[k], &t->s[k][i], toks, end);
        twin_same(t);
    }
}

static void twin_close(twin *t) {
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 3; i++) kv_seq_release(&t->p[k], &t->s[k][i]);
        CHECK_EQ_INT(t->p[k].n_free, NB);
        CHECK_EQ_INT(t->p[k].n_slot_free, t->p[k].n_slots);
        kv_pool_destroy(&t->p[k]);
    }
    fake_dev_free_clean(t->fd);
}

/* A sequence grows past many windows (slots recycled), a fork writes into
 * a shared block (copied on write, both parts), a queued download reads
 * a block, a dropped window comes back from saved payloads and the
 * sequence goes on from there, a block is written whole: the device pool
 * stays the host pool's twin, and holds what was computed. Over seeds
 * (the fake device's other orders). */
TEST(kv_swa_on_device_matches_the_host_pool) {
    int per_seq = kv_swa_slots_per_seq(BT, SWA, CHUNK);
    for (unsigned seed = 0; seed < 12; seed++) {
        twin t;
        twin_open(&t, 700 + seed, per_seq + 2);
        int32_t a[200], f[200], w[BT];
        tokens(a, 200, (int)seed), tokens(f, 200, 1000 + (int)seed), tokens(w, BT, 2000 + (int)seed);
        memcpy(f, a, 150 * sizeof(int32_t));
        twin_grow(&t, 0, a, 24);
        uint16_t *saved[2], *buf = xmalloc(t.p[0].block_bytes);
        for (int b = 0; b < 2; b++) { /* blocks 0 and 1 as a tier would keep them */
            saved[b] = xmalloc(t.p[1].block_bytes);
            CHECK(kv_block_read(&t.p[1], t.s[1][0].blocks[b], saved[b]) == saved[b]);
            CHECK(payload_holds(saved[b], a, b * BT, BOTH));
        }
        twin_grow(&t, 0, a, 160);
        CHECK_MSG(t.p[1].swa_reclaimed > 0, "seed %u: slots were recycled", seed);
        CHECK(!kv_block_has_swa(&t.p[1], t.s[1][0].blocks[0])); /* its window is long gone */
        /* a fork inside block 18 that writes into it: a private copy */
        for (int k = 0; k < 2; k++) kv_seq_fork(&t.p[k], &t.s[k][0], 150, &t.s[k][1]);
        twin_grow(&t, 1, f, 170);
        CHECK(t.s[1][1].blocks[150 / BT] != t.s[1][0].blocks[150 / BT]);
        CHECK(kv_block_read(&t.p[1], t.s[1][1].blocks[150 / BT], buf) && payload_holds(buf, f, 144, BOTH));
        CHECK(kv_block_read(&t.p[1], t.s[1][0].blocks[150 / BT], buf) && payload_holds(buf, a, 144, BOTH));
        /* a queued download of the last full block, into pinned memory */
        uint8_t *down = devmem_host_alloc(t.p[1].dev, t.p[1].block_bytes, NULL);
        devmem_event *ev = NULL;
        CHECK_EQ_INT(kv_block_read_async(&t.p[1], t.s[1][0].blocks[19], down, &ev, NULL), 0);
        CHECK_EQ_INT(devmem_sync(t.p[1].dev, DEVMEM_COMPUTE, NULL), 0);
        CHECK_EQ_INT(devmem_done(t.p[1].dev, ev, NULL), 1);
        CHECK(payload_holds((const uint16_t *)down, a, 152, BOTH));
        devmem_event_free(t.p[1].dev, ev);
        devmem_host_free(t.p[1].dev, down);
        /* back to position 12: the window (blocks 0, 1) comes back from the saved payloads */
        for (int k = 0; k < 2; k++) {
            kv_seq_truncate(&t.p[k], &t.s[k][0], 12);
            CHECK_EQ_INT(kv_seq_window_missing(&t.p[k], &t.s[k][0]), 1);
            for (int b = 0; b < 2; b++)
                CHECK_EQ_INT(kv_block_import_swa(&t.p[k], t.s[k][0].blocks[b], saved[b], NULL), 0);
            CHECK_EQ_INT(kv_seq_window_missing(&t.p[k], &t.s[k][0]), -1);
        }
        twin_grow(&t, 0, a, 40);
        CHECK(kv_block_read(&t.p[1], t.s[1][0].blocks[1], buf) && payload_holds(buf, a, BT, BOTH));
        /* a fresh block written whole (a load from a tier below) */
        uint16_t *pl = xmalloc(t.p[0].block_bytes);
        for (int l = 0; l < L; l++)
            for (int v = 0; v < 2; v++)
                for (int i = 0; i < BT; i++)
                    for (int j = 0; j < KVD; j++) pl[((l * 2 + v) * BT + i) * KVD + j] = val(w[i], i, l, v, j);
        for (int k = 0; k < 2; k++) {
            CHECK_EQ_INT(kv_seq_reserve_load(&t.p[k], &t.s[k][2], BT, 1, NULL), 0);
            CHECK_EQ_INT(kv_block_write(&t.p[k], t.s[k][2].blocks[0], pl, NULL), 0);
            t.s[k][2].n_pos = BT;
        }
        CHECK(kv_block_read(&t.p[1], t.s[1][2].blocks[0], buf) && payload_holds(buf, w, 0, BOTH));
        twin_same(&t);
        free(pl), free(buf), free(saved[0]), free(saved[1]);
        twin_close(&t);
    }
}

/* Block o's download is queued (a publish's, an eviction's) on a busy
 * device; o's sequence goes, and o's slot is given to another block x
 * (not o: the slot's own event must order it), whose sliding part then
 * comes in from the host: uploaded whole (a load from a tier below, odd
 * seeds) or imported (a hit's window, even seeds), both on the copy
 * stream. The download still gets o's bytes, and x has its own. */
TEST(kv_swa_on_device_slot_given_away_waits_for_its_queued_download) {
    int late = 0;
    for (unsigned seed = 0; seed < 128; seed++) {
        fake_dev *fd = fake_dev_new(900 + seed);
        const devmem *dev = fake_dev_mem(fd);
        kv_pool p;
        pool_open(&p, dev, 4, 2);
        int32_t a[BT], w[BT];
        tokens(a, BT, (int)seed), tokens(w, BT, 3000 + (int)seed);
        kv_seq s, y, x;
        kv_seq_init(&s), kv_seq_init(&y), kv_seq_init(&x);
        compute(&p, &s, a, BT);
        int o = s.blocks[0], slot = p.swa_slot[o];
        uint8_t *down = devmem_host_alloc(dev, p.block_bytes, NULL);
        devmem_event *ev = NULL;
        fake_dev_hold(fd, seed % 4 != 0); /* mostly busy: nothing runs until the host waits */
        CHECK_EQ_INT(kv_block_read_async(&p, o, down, &ev, NULL), 0);
        late += !payload_holds((const uint16_t *)down, a, 0, BOTH);
        kv_seq_release(&p, &s);                                /* o and its slot are free */
        CHECK_EQ_INT(kv_seq_reserve_load(&p, &y, BT, 0, NULL), 0); /* o again, without a slot */
        CHECK_EQ_INT(y.blocks[0], o);
        uint16_t *pl = xmalloc(p.block_bytes);
        for (int l = 0; l < L; l++)
            for (int v = 0; v < 2; v++)
                for (int i = 0; i < BT; i++)
                    for (int j = 0; j < KVD; j++) pl[((l * 2 + v) * BT + i) * KVD + j] = val(w[i], i, l, v, j);
        if (seed % 2) {
            CHECK_EQ_INT(kv_seq_reserve_load(&p, &x, BT, 1, NULL), 0);
            CHECK_EQ_INT(kv_block_write(&p, x.blocks[0], pl, NULL), 0);
        } else {
            CHECK_EQ_INT(kv_seq_reserve_load(&p, &x, BT, 0, NULL), 0);
            CHECK_EQ_INT(kv_block_import_swa(&p, x.blocks[0], pl, NULL), 0);
        }
        CHECK(x.blocks[0] != o);
        CHECK_EQ_INT(p.swa_slot[x.blocks[0]], slot); /* o's slot, its download maybe still queued */
        fake_dev_hold(fd, 0);
        CHECK_EQ_INT(devmem_sync(dev, DEVMEM_COMPUTE, NULL), 0);
        CHECK_EQ_INT(devmem_done(dev, ev, NULL), 1);
        CHECK_MSG(payload_holds((const uint16_t *)down, a, 0, BOTH), "seed %u: the download has o's bytes", seed);
        uint16_t *back = xmalloc(p.block_bytes);
        CHECK(kv_block_read(&p, x.blocks[0], back) == back);
        CHECK_MSG(seed % 2 == 0 || payload_holds(back, w, 0, GLOBAL), "seed %u: x's global part as uploaded", seed);
        CHECK_MSG(payload_holds(back, w, 0, SLIDING), "seed %u: x's sliding part as it came in", seed);
        devmem_event_free(dev, ev);
        devmem_host_free(dev, down);
        free(pl), free(back);
        kv_seq_release(&p, &x), kv_seq_release(&p, &y);
        kv_pool_destroy(&p);
        fake_dev_free_clean(fd);
    }
    CHECK_MSG(late > 64, "downloads not yet run when their slot was given away: %d of 128", late);
}
