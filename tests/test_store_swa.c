/* test_store_swa.c - the block store over a pool with sliding-window
 * layers, no model: blocks go to the disk tier whole while their sequence
 * still holds them, a hit whose window's sliding parts were taken reads
 * them back from disk bit for bit (full blocks and tails), and with no
 * tier below the hit is cut back to where its window is whole. The same
 * with the pool in device memory (the fake device of fake_dev.h, copies
 * late and out of order: the GPU server's pool): published blocks go
 * down by queued downloads, a window's parts come back by uploads
 * (kv_block_import_swa), a restart's load writes globals and the window
 * on the copy stream. */
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "cache/disk_tier.h"
#include "cache/store.h"
#include "fake_dev.h"
#include "test.h"
#include "test_util.h"

enum { L = 3, KVD = 2, BT = 16, SWA = 8, CHUNK = 16, NB = 64 };
static const uint8_t swa_layers[L] = {1, 0, 1};

typedef struct rig {
    kv_pool p;
    cache_store *c;
    disk_store *d; /* or NULL */
    cache_hash root;
    fake_dev *fd;  /* the pool's device, or NULL: host memory */
} rig;

/* A pool with room for `seqs` sequences' sliding parts, on fd (NULL: in
 * host memory; the rig owns fd from here). */
static void rig_open_on(rig *r, const char *dir, int seqs, fake_dev *fd) {
    int slots = seqs * kv_swa_slots_per_seq(BT, SWA, CHUNK);
    kv_pool_opts po = {.n_layer = L, .kv_dim = KVD, .block_tokens = BT, .n_blocks = NB,
                       .swa_layer = swa_layers, .n_swa = SWA, .n_slots = slots, .dev = fd ? fake_dev_mem(fd) : NULL};
    r->fd = fd;
    CHECK_EQ_INT(kv_pool_init_opts(&r->p, &po, NULL), 0);
    store_opts o = {.default_scope = {SCOPE_FULL, 0}};
    r->c = store_new(&r->p, &o);
    memset(o.model_fp, 1, 32);
    cache_hash_root(&r->root, o.model_fp, "", 0);
    r->d = NULL;
    if (!dir) return;
    disk_opts d = {.dir = dir, .block_tokens = BT, .block_bytes = r->p.block_bytes, .kv_dtype = DISK_F16};
    memset(d.model_fp, 1, 32);
    CHECK_EQ_INT(disk_open(&r->d, &d, NULL), 0);
    cache_tier t = disk_tier(r->d);
    store_add_tier(r->c, &t);
}

/* Everything goes; nothing may be left on the device (the store drains
 * its queued copies). */
static void rig_close(rig *r) {
    store_free(r->c);
    CHECK_EQ_INT(r->p.n_free, NB);
    CHECK_EQ_INT(r->p.n_slot_free, r->p.n_slots);
    kv_pool_destroy(&r->p);
    disk_close(r->d);
    if (r->fd) fake_dev_free_clean(r->fd);
}

/* What the "model" writes at pos for token tok: a function of the prefix's
 * last token and position, different in every layer and in K and V. */
static uint16_t val(int32_t tok, int pos, int layer, int is_v) {
    return (uint16_t)((tok * 31 + pos * 7 + layer * 1000 + is_v * 500) & 0x7fff);
}

/* Positions [s->n_pos, end) of s computed (reserved first): written in
 * place on a host pool; on a device pool each row goes up on the compute
 * stream as a kernel writes it, and the host waits at the end, as the
 * scheduler's step does for its logits. */
static void fill(kv_pool *p, kv_seq *s, const int32_t *toks, int end) {
    uint16_t *rows = xmalloc((size_t)(end - s->n_pos) * L * 2 * KVD * sizeof(uint16_t)), *row = rows;
    for (int pos = s->n_pos; pos < end; pos++)
        for (int l = 0; l < L; l++)
            for (int v = 0; v < 2; v++, row += KVD) {
                for (int i = 0; i < KVD; i++) row[i] = val(toks[pos], pos, l, v);
                uint16_t *dst = kv_rows(p, s->blocks[pos / BT], l, v) + (pos % BT) * KVD;
                if (!p->dev) memcpy(dst, row, KVD * sizeof(uint16_t));
                else CHECK_EQ_INT(devmem_copy(p->dev, DEVMEM_COMPUTE, dst, row, KVD * 2, DEVMEM_H2D, NULL), 0);
            }
    s->n_pos = end;
    if (p->dev) CHECK_EQ_INT(devmem_sync(p->dev, DEVMEM_COMPUTE, NULL), 0);
    free(rows);
}

/* The first value of position pos's row of layer l in s (read back from
 * the device, on a device pool). */
static uint16_t row_at(const kv_pool *p, const kv_seq *s, int pos, int l, int v) {
    const uint16_t *at = kv_rows(p, s->blocks[pos / BT], l, v) + (pos % BT) * KVD;
    uint16_t x = 0;
    if (!p->dev) return *at;
    CHECK_EQ_INT(devmem_copy_sync(p->dev, DEVMEM_COMPUTE, &x, at, sizeof x, DEVMEM_D2H, NULL), 0);
    return x;
}

/* Every layer of positions [from, to) of s holds what fill wrote. */
static int intact(const kv_pool *p, const kv_seq *s, const int32_t *toks, int from, int to) {
    for (int pos = from; pos < to; pos++)
        for (int l = 0; l < L; l++)
            for (int v = 0; v < 2; v++) {
                if (p->swa_layer[l] && !kv_block_has_swa(p, s->blocks[pos / BT])) return 0;
                if (row_at(p, s, pos, l, v) != val(toks[pos], pos, l, v)) return 0;
            }
    return 1;
}

typedef struct req {
    store_request rq;
    store_seq q;
    kv_seq s;
} req;

/* Attaches toks[0..n_max) as a request does; returns the tokens attached. */
static int req_begin(rig *r, req *x, const int32_t *toks, int n_max) {
    x->rq = (store_request){.root = r->root, .scope = {SCOPE_FULL, 0}};
    store_seq_init(r->c, &x->q, &x->rq);
    kv_seq_init(&x->s);
    return store_attach(r->c, &x->q, toks, n_max, n_max, &x->s);
}

/* Computes up to n chunk by chunk (publishing as the scheduler does),
 * then ends the request keeping its tail. */
static void req_run(rig *r, req *x, const int32_t *toks, int n) {
    while (x->s.n_pos < n) {
        int end = x->s.n_pos + CHUNK < n ? x->s.n_pos + CHUNK : n;
        CHECK_EQ_INT(kv_seq_reserve(&r->p, &x->s, end, NULL), 0);
        fill(&r->p, &x->s, toks, end);
        store_publish(r->c, &x->q, toks, &x->s);
    }
    store_finish(r->c, &x->q, toks, &x->s, 1);
    kv_seq_release(&r->p, &x->s);
}

static void tokens(int32_t *t, int n, int seed);

/* Another sequence takes every sliding part nobody holds and writes into
 * it (a part that comes back must be written again, not found). */
static void crowd_out(rig *r) {
    int32_t other[512];
    int n = r->p.n_slots * BT;
    CHECK(n <= 512);
    tokens(other, n, 4242);
    kv_seq o;
    kv_seq_init(&o);
    CHECK_EQ_INT(kv_seq_reserve(&r->p, &o, n, NULL), 0);
    fill(&r->p, &o, other, n);
    kv_seq_release(&r->p, &o);
    CHECK_EQ_INT(r->p.n_slot_free, r->p.n_slots);
}

static void tokens(int32_t *t, int n, int seed) {
    for (int i = 0; i < n; i++) t[i] = 1 + (i * 37 + seed) % 5000;
}

/* n cached tokens ending at `end` (a full block's end, or a tail's):
 * with the disk tier the hit is whole and its window read back bit for
 * bit; without one it is cut back to 0 (every earlier window is gone).
 * The pool on fd (NULL: host memory). */
static void check_hit_on(const char *dir, int end, int extra, fake_dev *fd) {
    int32_t toks[400];
    tokens(toks, end + extra, 3);
    rig r;
    rig_open_on(&r, dir, 1, fd);
    req a;
    CHECK_EQ_INT(req_begin(&r, &a, toks, end), 0);
    req_run(&r, &a, toks, end);
    if (r.fd) store_flush_spills(r.c); /* the published blocks' queued downloads, written */
    if (r.d) disk_flush(r.d);
    crowd_out(&r);
    req b;
    int got = req_begin(&r, &b, toks, end + extra - 1);
    if (dir) {
        CHECK_EQ_INT(got, end);
        CHECK_EQ_INT(b.q.n_cached, end);
        CHECK(b.q.n_window_reloaded >= 1);
        CHECK_EQ_INT(b.q.n_window_cut, 0);
        CHECK(intact(&r.p, &b.s, toks, kv_swa_first_block(&r.p, end) * BT, end));
    } else {
        CHECK_EQ_INT(got, 0);
        CHECK_EQ_INT(b.q.n_cached, 0);
        CHECK_EQ_INT(b.q.n_window_cut, end);
    }
    CHECK_EQ_INT(kv_seq_window_missing(&r.p, &b.s), -1);
    req_run(&r, &b, toks, end + extra); /* it goes on from there */
    store_stats st;
    store_get_stats(r.c, &st);
    CHECK_EQ_INT(st.window_reloaded_blocks, b.q.n_window_reloaded);
    CHECK_EQ_INT(st.window_cut_tokens, b.q.n_window_cut);
    CHECK_EQ_INT(st.hit_tokens + st.lower_hit_tokens, b.q.n_cached);
    if (r.fd) CHECK_EQ_INT(st.spill_errors, 0);
    if (r.fd && dir) CHECK(st.publish_queued > 0); /* the tier got the blocks by queued downloads */
    rig_close(&r);
}

static void check_hit(const char *dir, int end, int extra) { check_hit_on(dir, end, extra, NULL); }

TEST(store_swa_hit_reads_its_window_back_from_disk) {
    char *dir = test_tmpdir_new();
    check_hit(dir, 320, 10); /* blocks 16..19: the window of position 320 */
    test_tmpdir_free(dir);
}

TEST(store_swa_tail_window_reads_back_from_disk) {
    char *dir = test_tmpdir_new();
    check_hit(dir, 330, 10); /* a tail of 10 after 20 blocks */
    test_tmpdir_free(dir);
}

TEST(store_swa_hit_without_a_tier_is_cut_back) {
    check_hit(NULL, 320, 10);
}

/* With no tier below, the request cut back recomputes the window's
 * blocks; publishing them gives the indexed copies their sliding parts
 * back (with slots to spare, as the engine sizes them: one sequence's
 * worth more), so the next request at the same place is whole. */
static void check_refill_on(fake_dev *fd) {
    int32_t toks[400];
    tokens(toks, 340, 5);
    rig r;
    rig_open_on(&r, NULL, 2, fd);
    req a, b, c;
    CHECK_EQ_INT(req_begin(&r, &a, toks, 320), 0);
    req_run(&r, &a, toks, 320);
    crowd_out(&r);
    CHECK_EQ_INT(req_begin(&r, &b, toks, 320), 0); /* cut back to 0 */
    CHECK_EQ_INT(b.q.n_window_cut, 320);
    req_run(&r, &b, toks, 320);
    CHECK_EQ_INT(req_begin(&r, &c, toks, 330), 320);
    CHECK_EQ_INT(c.q.n_window_cut, 0);
    CHECK(intact(&r.p, &c.s, toks, kv_swa_first_block(&r.p, 320) * BT, 320));
    req_run(&r, &c, toks, 330);
    store_stats st;
    store_get_stats(r.c, &st);
    CHECK_MSG(st.window_refilled_blocks >= 4, "refilled %ld", st.window_refilled_blocks);
    rig_close(&r);
}

TEST(store_swa_recomputed_window_makes_the_next_hit_whole) { check_refill_on(NULL); }

/* After a restart the prefix comes from disk: whole blocks' global parts
 * for all, sliding parts for the window only, bit for bit. */
static void check_restart_on(fake_dev *fd, fake_dev *fd_after) {
    char *dir = test_tmpdir_new();
    int32_t toks[400];
    tokens(toks, 400, 5);
    rig r;
    rig_open_on(&r, dir, 1, fd);
    req a;
    req_begin(&r, &a, toks, 350);
    req_run(&r, &a, toks, 350);
    store_flush_spills(r.c);
    disk_flush(r.d);
    rig_close(&r);
    rig_open_on(&r, dir, 1, fd_after);
    req b;
    CHECK_EQ_INT(req_begin(&r, &b, toks, 399), 350);
    CHECK_EQ_INT(b.q.n_cached_lower, 350);
    int from = kv_swa_first_block(&r.p, 350);
    CHECK(intact(&r.p, &b.s, toks, from * BT, 350));
    for (int pos = 0; pos < 350; pos++) /* the global layer everywhere */
        CHECK_EQ_INT(row_at(&r.p, &b.s, pos, 1, 1), val(toks[pos], pos, 1, 1));
    CHECK(!kv_block_has_swa(&r.p, b.s.blocks[0])); /* far outside the window: never in a slot */
    CHECK_EQ_INT(b.q.n_window_reloaded, 0);          /* the load gave the window its parts */
    req_run(&r, &b, toks, 400);
    rig_close(&r);
    test_tmpdir_free(dir);
}

TEST(store_swa_restart_loads_globals_and_the_window) { check_restart_on(NULL, NULL); }

/* ---- the pool in device memory ------------------------------------------------- */

/* Over seeds: the fake device runs the copies in other orders each time. */
#define DEV_SEEDS 6

TEST(store_swa_on_device_hit_reads_its_window_back_from_disk) {
    for (unsigned seed = 0; seed < DEV_SEEDS; seed++) {
        char *dir = test_tmpdir_new();
        check_hit_on(dir, 320, 10, fake_dev_new(40 + seed));
        test_tmpdir_free(dir);
    }
}

TEST(store_swa_on_device_tail_window_reads_back_from_disk) {
    for (unsigned seed = 0; seed < DEV_SEEDS; seed++) {
        char *dir = test_tmpdir_new();
        check_hit_on(dir, 330, 10, fake_dev_new(50 + seed));
        test_tmpdir_free(dir);
    }
}

TEST(store_swa_on_device_hit_without_a_tier_is_cut_back) { check_hit_on(NULL, 320, 10, fake_dev_new(60)); }

TEST(store_swa_on_device_recomputed_window_makes_the_next_hit_whole) {
    for (unsigned seed = 0; seed < DEV_SEEDS; seed++) check_refill_on(fake_dev_new(70 + seed));
}

TEST(store_swa_on_device_restart_loads_globals_and_the_window) {
    for (unsigned seed = 0; seed < DEV_SEEDS; seed++)
        check_restart_on(fake_dev_new(80 + seed), fake_dev_new(90 + seed));
}
