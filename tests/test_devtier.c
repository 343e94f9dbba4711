/* test_devtier.c - the KV tiers of a GPU run, on a fake device (fake_dev.h):
 * the live pool in device memory, the RAM tier in (pinned) host memory,
 * the disk tier below, moved between by asynchronous copies that the fake
 * device runs late and out of order. Proves: hits are the bytes written,
 * whichever tier they come from (the GPU pool, the RAM tier, the disk, the
 * disk after a restart); eviction moves a block down a tier before dropping
 * it, in the policy's order; a full GPU pool and a refused allocation are
 * clear errors that leak nothing; and blocks of one backend's numerics are
 * never served to the other. No GPU, no model. */
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include "backend/cuda/cuda.h"
#include "cache/disk.h"
#include "cache/disk_tier.h"
#include "cache/ram_tier.h"
#include "base/mem.h"
#include "cache/store.h"
#include "fake_dev.h"
#include "test.h"
#include "test_util.h"

#define B 4
#define N_LAYER 2
#define KV_DIM 8

/* ---- "compute" on the device ------------------------------------------------------ */

/* The half of (layer, K|V, position, element) a sequence computed for
 * token tok: what a hit must give back, bit for bit. */
static uint16_t kv_value(int32_t tok, int pos, int layer, int is_v, int j) {
    return (uint16_t)(tok * 131 + pos * 17 + layer * 7 + is_v * 3 + j);
}

/* Positions [s->n_pos, n) of s computed on the device: each row goes up by
 * a copy on the compute stream, as a kernel would write it, and the host
 * goes on (as after a kernel launch). The rows are staged in the buffer
 * returned until the compute stream is done with them (the caller frees
 * it after a sync). */
static uint16_t *compute_async(kv_pool *p, kv_seq *s, const int32_t *toks, int n) {
    CHECK_EQ_INT(kv_seq_reserve(p, s, n, NULL), 0);
    int m = n - s->n_pos;
    uint16_t *rows = malloc((size_t)(m > 0 ? m : 1) * N_LAYER * 2 * KV_DIM * sizeof(uint16_t));
    for (int i = s->n_pos, r = 0; i < n; i++)
        for (int l = 0; l < N_LAYER; l++)
            for (int v = 0; v < 2; v++, r++) {
                uint16_t *row = rows + (size_t)r * KV_DIM;
                for (int j = 0; j < KV_DIM; j++) row[j] = kv_value(toks[i], i, l, v, j);
                uint16_t *dst = kv_rows(p, s->blocks[i / B], l, v) + (size_t)(i % B) * KV_DIM;
                CHECK_EQ_INT(devmem_copy(p->dev, DEVMEM_COMPUTE, dst, row, KV_DIM * 2, DEVMEM_H2D, NULL), 0);
            }
    s->n_pos = n;
    return rows;
}

/* The same, waited for. */
static void compute(kv_pool *p, kv_seq *s, const int32_t *toks, int n) {
    uint16_t *rows = compute_async(p, s, toks, n);
    CHECK_EQ_INT(devmem_sync(p->dev, DEVMEM_COMPUTE, NULL), 0);
    free(rows);
}

/* Positions [0, n) of s hold what compute() wrote for toks (read back
 * through the pool, from the device). */
static int holds(const kv_pool *p, const kv_seq *s, const int32_t *toks, int n) {
    uint16_t *buf = malloc(p->block_bytes);
    int ok = 1;
    for (int i = 0; ok && i < n; i++) {
        const uint16_t *pl = kv_block_read(p, s->blocks[i / B], buf);
        if (!pl) ok = 0;
        for (int l = 0; ok && l < N_LAYER; l++)
            for (int v = 0; v < 2; v++)
                for (int j = 0; j < KV_DIM; j++)
                    if (pl[((size_t)(l * 2 + v) * B + i % B) * KV_DIM + j] != kv_value(toks[i], i, l, v, j)) ok = 0;
    }
    free(buf);
    return ok;
}

static void tokens(int32_t *t, int n, int base) {
    for (int i = 0; i < n; i++) t[i] = base + i;
}

/* ---- the fixture: a GPU pool, a RAM tier, a disk tier ------------------------------ */

typedef struct rig {
    fake_dev *fd;
    const devmem *dev;
    kv_pool p;
    cache_store *st;
    store_request rq;
    ram_tier *ram;
    disk_store *disk;
    cache_tier t_ram, t_disk;
    char *dir;
    uint8_t fp[32];
} rig;

static void rig_disk_open(rig *r) {
    disk_opts o = {.dir = r->dir, .block_tokens = B, .block_bytes = r->p.block_bytes, .kv_dtype = DISK_F16,
                   .protect_ms = 1}; /* a test may empty it at once */
    memcpy(o.model_fp, r->fp, 32);
    strata_err e = {0};
    CHECK_EQ_INT(disk_open(&r->disk, &o, &e), 0);
    r->t_disk = disk_tier(r->disk);
}

/* The store over the pool, the RAM tier (ram_blocks of room, 0: none)
 * and the disk tier, under numerics (cache_numerics_fingerprint). */
static void rig_store(rig *r, int ram_blocks, const char *numerics) {
    uint8_t file_fp[32];
    memset(file_fp, 7, 32);
    cache_numerics_fingerprint(file_fp, numerics, r->fp);
    store_opts so = {.default_scope = {SCOPE_FULL, 0}};
    memcpy(so.model_fp, r->fp, 32);
    r->st = store_new(&r->p, &so);
    store_root(r->st, NULL, "", &r->rq.root);
    r->rq.scope = (cache_scope){SCOPE_FULL, 0};
    rig_disk_open(r);
    if (ram_blocks > 0) {
        ram_tier_opts ro = {.budget_bytes = (size_t)ram_blocks * r->p.block_bytes, .block_bytes = r->p.block_bytes,
                            .block_tokens = B, .dev = r->dev, .below = &r->t_disk};
        strata_err e = {0};
        CHECK_EQ_INT(ram_tier_open(&r->ram, &ro, &e), 0);
        r->t_ram = ram_tier_iface(r->ram);
        store_add_tier(r->st, &r->t_ram);
    }
    store_add_tier(r->st, &r->t_disk);
}

/* On dev (NULL: a fake device seeded with seed). */
static void rig_init_on(rig *r, const devmem *dev, unsigned seed, int gpu_blocks, int ram_blocks,
                        const char *numerics) {
    memset(r, 0, sizeof *r);
    if (!dev) r->fd = fake_dev_new(seed);
    r->dev = dev ? dev : fake_dev_mem(r->fd);
    r->dir = xstrdup(test_tmpdir_new());
    kv_pool_opts po = {.n_layer = N_LAYER, .kv_dim = KV_DIM, .block_tokens = B, .n_blocks = gpu_blocks, .dev = r->dev};
    strata_err e = {0};
    CHECK_EQ_INT(kv_pool_init_opts(&r->p, &po, &e), 0);
    rig_store(r, ram_blocks, numerics);
}

static void rig_init(rig *r, unsigned seed, int gpu_blocks, int ram_blocks, const char *numerics) {
    rig_init_on(r, NULL, seed, gpu_blocks, ram_blocks, numerics);
}

/* The store and the tiers go (the disk's files stay: a restart). */
static void rig_stop(rig *r) {
    store_free(r->st);
    ram_tier_close(r->ram);
    disk_close(r->disk);
    r->st = NULL, r->ram = NULL, r->disk = NULL;
}

/* Everything goes; nothing may be left on the device. */
static void rig_free(rig *r) {
    rig_stop(r);
    CHECK_EQ_INT(r->p.n_free, r->p.n_blocks);
    kv_pool_destroy(&r->p);
    if (r->fd) {
        fake_dev_stats fs;
        fake_dev_stats_get(r->fd, &fs);
        CHECK_EQ_INT(fs.dev_allocs, 0);
        CHECK_EQ_INT(fs.host_allocs, 0);
        CHECK_EQ_INT(fs.misuse, 0);
        fake_dev_free(r->fd);
    }
    test_tmpdir_free(r->dir);
    free(r->dir);
}

/* One request: attach what the store has of toks[0..n), compute the rest
 * on the device, publish, keep the tail. Returns the tokens attached; the
 * tiers they came from in from[] (live, then each tier added). */
static int request(rig *r, const int32_t *toks, int n, int *from) {
    kv_seq s;
    kv_seq_init(&s);
    store_seq q;
    store_seq_init(r->st, &q, &r->rq);
    int got = store_attach(r->st, &q, toks, n, n, &s);
    CHECK_MSG(holds(&r->p, &s, toks, got), "the %d attached tokens are the bytes computed for them", got);
    compute(&r->p, &s, toks, n);
    CHECK(holds(&r->p, &s, toks, n));
    store_publish(r->st, &q, toks, &s);
    store_finish(r->st, &q, toks, &s, 1);
    if (from) {
        from[0] = q.n_cached - q.n_cached_lower;
        for (int k = 0; k < 2; k++) from[1 + k] = q.n_cached_tier[k];
    }
    kv_seq_release(&r->p, &s);
    return got;
}

/* ---- the fake device itself ----------------------------------------------------------- */

TEST(devmem_fake_runs_copies_late_and_streams_out_of_order) {
    fake_dev *fd = fake_dev_new(1);
    const devmem *dev = fake_dev_mem(fd);
    uint8_t *d = devmem_alloc(dev, 4096, NULL), *h = devmem_host_alloc(dev, 4096, NULL), src[64], back[64];
    CHECK(d && h);
    /* A copy reads its source when it runs: changing it before the wait
     * changes what arrives (the callers must wait before reusing it). */
    int late = 0;
    for (int k = 0; k < 16; k++) {
        memset(src, 1, sizeof src);
        devmem_copy(dev, DEVMEM_COPY, d, src, sizeof src, DEVMEM_H2D, NULL);
        memset(src, 2, sizeof src);
        devmem_copy_sync(dev, DEVMEM_COPY, back, d, sizeof back, DEVMEM_D2H, NULL);
        late += back[0] == 2;
    }
    CHECK_MSG(late > 0 && late < 16, "copies ran late in %d of 16 tries (some, not all)", late);
    /* An event orders the streams: the copy stream's download waits for
     * the compute stream's upload. */
    for (int k = 0; k < 32; k++) {
        memset(src, k, sizeof src);
        devmem_copy(dev, DEVMEM_COMPUTE, d + 64, src, sizeof src, DEVMEM_H2D, NULL);
        devmem_event *ev = devmem_record(dev, DEVMEM_COMPUTE, NULL);
        devmem_wait(dev, DEVMEM_COPY, ev, NULL);
        devmem_copy(dev, DEVMEM_COPY, h, d + 64, 64, DEVMEM_D2H, NULL);
        CHECK_EQ_INT(devmem_sync(dev, DEVMEM_COPY, NULL), 0);
        CHECK_EQ_INT(devmem_done(dev, ev, NULL), 1);
        CHECK_EQ_INT(h[0], k);
        devmem_event_free(dev, ev);
    }
    /* Without an event the streams overtake each other. */
    for (int k = 0; k < 32; k++) {
        devmem_copy(dev, DEVMEM_COMPUTE, d + 128, src, 8, DEVMEM_H2D, NULL);
        devmem_copy(dev, DEVMEM_COPY, d + 256, src, 8, DEVMEM_H2D, NULL);
    }
    devmem_sync(dev, DEVMEM_COMPUTE, NULL);
    devmem_sync(dev, DEVMEM_COPY, NULL);
    CHECK_EQ_INT(fake_dev_pending(fd), 0);
    /* A copy whose pointers are not of its direction is refused. */
    strata_err e = {0};
    CHECK(devmem_copy(dev, DEVMEM_COPY, src, back, 8, DEVMEM_H2D, &e) < 0);
    CHECK(strstr(e.msg, "not device memory") != NULL);
    fake_dev_stats fs;
    fake_dev_stats_get(fd, &fs);
    CHECK(fs.reordered > 0);
    CHECK_EQ_INT(fs.misuse, 1);
    CHECK_EQ_INT(fs.events, 0);
    devmem_free(dev, d);
    devmem_host_free(dev, h);
    fake_dev_stats_get(fd, &fs);
    CHECK_EQ_INT(fs.dev_allocs + fs.host_allocs, 0);
    fake_dev_free(fd);
}

/* ---- the pool in device memory ----------------------------------------------------------- */

TEST(kv_pool_on_device_round_trips_payloads_and_copies_on_write) {
    fake_dev *fd = fake_dev_new(2);
    kv_pool p;
    kv_pool_opts po = {.n_layer = N_LAYER, .kv_dim = KV_DIM, .block_tokens = B, .n_blocks = 8, .dev = fake_dev_mem(fd)};
    CHECK_EQ_INT(kv_pool_init_opts(&p, &po, NULL), 0);
    CHECK(kv_block_view(&p, 0) == NULL); /* not host memory */
    int32_t t[3 * B];
    tokens(t, 3 * B, 50);
    kv_seq a, b;
    kv_seq_init(&a);
    compute(&p, &a, t, 2 * B + 2);
    CHECK(holds(&p, &a, t, 2 * B + 2));
    /* b shares a's blocks and writes into the shared partial one: the
     * device copies it first, so a keeps its bytes and b sees them too. */
    kv_seq_fork(&p, &a, 2 * B + 1, &b);
    int32_t u[3 * B];
    memcpy(u, t, sizeof u);
    u[2 * B + 1] = 999;
    compute(&p, &b, u, 2 * B + 3);
    CHECK(b.blocks[2] != a.blocks[2]);
    CHECK(holds(&p, &a, t, 2 * B + 2));
    CHECK(holds(&p, &b, u, 2 * B + 3));
    /* A payload written from the host (a tier's read) is read back the same. */
    uint8_t *pl = malloc(p.block_bytes), *back = malloc(p.block_bytes);
    for (size_t i = 0; i < p.block_bytes; i++) pl[i] = (uint8_t)(i * 37 + 1);
    CHECK_EQ_INT(kv_block_write(&p, a.blocks[0], pl, NULL), 0);
    CHECK(memcmp(kv_block_read(&p, a.blocks[0], back), pl, p.block_bytes) == 0);
    free(pl), free(back);
    kv_seq_release(&p, &a);
    kv_seq_release(&p, &b);
    kv_pool_destroy(&p);
    fake_dev_stats fs;
    fake_dev_stats_get(fd, &fs);
    CHECK_EQ_INT(fs.dev_allocs, 0);
    CHECK_EQ_INT(fs.misuse, 0);
    CHECK(fs.copies[DEVMEM_D2D] >= 1);
    fake_dev_free(fd);
}

/* An eviction's download (kv_block_read_async) returns before the copy
 * has run; the block is given out again at once, and what writes into it
 * next runs after the download on the device: an upload (a load from a
 * lower tier, the copy stream) waits for its event, a kernel follows it
 * on the compute stream. The download gets the old bytes. Over seeds: the
 * fake device runs the streams in other orders each time. */
TEST(kv_pool_on_device_download_runs_late_and_uploads_wait_for_it) {
    int late = 0;
    for (unsigned seed = 0; seed < 512; seed++) {
        fake_dev *fd = fake_dev_new(100 + seed);
        const devmem *dev = fake_dev_mem(fd);
        kv_pool p;
        kv_pool_opts po = {.n_layer = N_LAYER, .kv_dim = KV_DIM, .block_tokens = B, .n_blocks = 4, .dev = dev};
        CHECK_EQ_INT(kv_pool_init_opts(&p, &po, NULL), 0);
        int32_t t[B];
        tokens(t, B, 40 + (int)seed);
        kv_seq a;
        kv_seq_init(&a);
        compute(&p, &a, t, B);
        uint8_t *want = malloc(p.block_bytes), *next = malloc(p.block_bytes);
        memcpy(want, kv_block_read(&p, a.blocks[0], want), p.block_bytes);
        memset(next, 0x3C, p.block_bytes);
        uint8_t *down = devmem_host_alloc(dev, p.block_bytes, NULL);
        devmem_event *ev = NULL;
        CHECK_EQ_INT(kv_block_read_async(&p, a.blocks[0], down, &ev, NULL), 0);
        late += memcmp(down, want, p.block_bytes) != 0; /* not run yet (pinned memory starts as garbage) */
        if (seed % 2) { /* the block's next owner: a load from a tier below (copy stream) */
            CHECK_EQ_INT(kv_block_write_async(&p, a.blocks[0], next, NULL), 0);
            CHECK_EQ_INT(kv_pool_wait_writes(&p, NULL), 0);
        } else { /* or its compute (the kernels' stream) */
            CHECK_EQ_INT(devmem_copy(dev, DEVMEM_COMPUTE, kv_rows(&p, a.blocks[0], 0, 0), next, p.block_bytes,
                                     DEVMEM_H2D, NULL), 0);
        }
        CHECK_EQ_INT(devmem_sync(dev, DEVMEM_COMPUTE, NULL), 0);
        CHECK_EQ_INT(devmem_done(dev, ev, NULL), 1);
        CHECK_MSG(memcmp(down, want, p.block_bytes) == 0, "seed %u: the download has the evicted bytes", seed);
        uint8_t *back = malloc(p.block_bytes);
        CHECK(memcmp(kv_block_read(&p, a.blocks[0], back), next, p.block_bytes) == 0);
        devmem_event_free(dev, ev);
        devmem_host_free(dev, down);
        free(want), free(next), free(back);
        kv_seq_release(&p, &a);
        kv_pool_destroy(&p);
        fake_dev_free_clean(fd);
    }
    CHECK_MSG(late > 0 && late < 512, "downloads not yet run when the block was written again: %d of 512", late);
}

TEST(kv_pool_on_device_refused_allocation_is_clear_and_leaks_nothing) {
    fake_dev *fd = fake_dev_new(3);
    kv_pool p;
    kv_pool_opts po = {.n_layer = N_LAYER, .kv_dim = KV_DIM, .block_tokens = B, .n_blocks = 64, .dev = fake_dev_mem(fd)};
    fake_dev_fail_alloc(fd, 1, 0);
    strata_err e = {0};
    CHECK_EQ_INT(kv_pool_init_opts(&p, &po, &e), STRATA_ENOMEM);
    CHECK_MSG(strstr(e.msg, "kv pool: 64 blocks") && strstr(e.msg, "fake memory") && strstr(e.msg, "out of device memory"),
              "a clear reason: %s", e.msg);
    /* With sliding-window layers their slots are device memory too: a
     * refused one is named, and the blocks' memory is given back. */
    uint8_t swa[N_LAYER] = {1, 0};
    po.swa_layer = swa, po.n_swa = 8, po.n_slots = 4;
    fake_dev_fail_alloc(fd, 2, 0);
    CHECK_EQ_INT(kv_pool_init_opts(&p, &po, &e), STRATA_ENOMEM);
    CHECK_MSG(strstr(e.msg, "kv pool: 4 sliding-window slots") && strstr(e.msg, "out of device memory"),
              "a clear reason: %s", e.msg);
    fake_dev_stats fs;
    fake_dev_stats_get(fd, &fs);
    CHECK_EQ_INT(fs.dev_allocs, 0);
    /* ... and the pinned RAM tier: a clear reason, nothing kept. */
    ram_tier *r = NULL;
    ram_tier_opts ro = {.budget_bytes = 1 << 20, .block_bytes = 4096, .block_tokens = B, .dev = fake_dev_mem(fd)};
    fake_dev_fail_alloc(fd, 1, 1);
    CHECK_EQ_INT(ram_tier_open(&r, &ro, &e), STRATA_ENOMEM);
    CHECK_MSG(r == NULL && strstr(e.msg, "RAM tier: 256 blocks") && strstr(e.msg, "pinned host"), "%s", e.msg);
    ro.budget_bytes = 4095; /* not one block */
    CHECK_EQ_INT(ram_tier_open(&r, &ro, &e), STRATA_EINVAL);
    CHECK(strstr(e.msg, "--cache-ram-mb") != NULL);
    fake_dev_stats_get(fd, &fs);
    CHECK_EQ_INT(fs.dev_allocs + fs.host_allocs, 0);
    fake_dev_free(fd);
}

/* ---- the tiers together ------------------------------------------------------------------ */

TEST(devtier_hit_in_the_gpu_pool_is_the_bytes_written) {
    rig r;
    rig_init(&r, 4, 16, 8, "cuda-2");
    int32_t t[3 * B + 2];
    tokens(t, 3 * B + 2, 10);
    int from[3];
    CHECK_EQ_INT(request(&r, t, 3 * B + 2, from), 0);        /* cold */
    CHECK_EQ_INT(request(&r, t, 3 * B + 2, from), 3 * B + 2); /* again: every token, tail included */
    CHECK_EQ_INT(from[0], 3 * B + 2);                           /* from the GPU pool */
    store_flush_spills(r.st); /* the publish copies were queued */
    ram_tier_stats rs;
    ram_tier_get_stats(r.ram, &rs);
    CHECK_EQ_INT(rs.blocks, 4); /* written through: 3 blocks and the tail */
    rig_free(&r);
}

/* A GPU pool of 4 blocks under three 3-block conversations: the first is
 * evicted from the GPU (it is in RAM: written through), then from RAM
 * (on disk too), and each comes back from the tier holding it, the same
 * bytes. */
static void eviction_round_trip(rig *r) {
    int32_t a[3 * B], b[3 * B], c[3 * B];
    tokens(a, 3 * B, 100), tokens(b, 3 * B, 300), tokens(c, 3 * B, 500);
    int from[3];
    request(r, a, 3 * B, NULL);
    request(r, b, 3 * B, NULL); /* the pool is full: a's blocks leave the GPU */
    store_flush_spills(r->st);  /* b's publish copies: queued, written through when done */
    store_stats ss;
    store_get_stats(r->st, &ss);
    CHECK(ss.live.evicted_blocks >= 2);
    CHECK_EQ_INT(ss.spilled_blocks, 0); /* the RAM tier held them: nothing to copy at eviction */
    ram_tier_stats rs;
    ram_tier_get_stats(r->ram, &rs);
    CHECK(rs.evicted >= 3); /* 6 blocks through 3 slots */
    CHECK_EQ_INT(rs.lost, 0);
    request(r, c, 3 * B, NULL);
    /* b: what the GPU pool gave up comes from below it (c's blocks took
     * the RAM tier's slots: leaf first, b's went down to the disk). */
    CHECK_EQ_INT(request(r, b, 3 * B, from), 3 * B);
    CHECK_MSG(from[1] + from[2] > 0 && from[0] + from[1] + from[2] == 3 * B, "b from gpu %d, ram %d, disk %d tokens",
              from[0], from[1], from[2]);
    /* a: long gone from the GPU and from RAM, on disk. */
    CHECK_EQ_INT(request(r, a, 3 * B, from), 3 * B);
    CHECK_EQ_INT(from[2], 3 * B);
    rig_free(r);
}

TEST(devtier_eviction_moves_blocks_down_and_they_come_back_the_same) {
    rig r;
    rig_init(&r, 5, 4, 3, "cuda-2");
    eviction_round_trip(&r);
}

/* The same on a CUDA GPU (cuda_devmem: device memory, pinned host
 * memory, the copy stream): STRATA_TEST_GPU=1 only. */
TEST(gpu_tiers_move_blocks_down_and_back_on_the_gpu) {
    strata_err e = {0};
    if (cuda_open(&e)) {
        test_fail(__FILE__, __LINE__, "cuda_open: %s", e.msg);
        return;
    }
    rig r;
    rig_init_on(&r, cuda_devmem(), 0, 4, 3, CUDA_NUMERICS);
    eviction_round_trip(&r);
}

/* Without a copy below (the disk dropped its write, or has none), the
 * RAM tier writes an evicted block down before dropping it, and a GPU
 * block the RAM tier no longer holds is moved into it at eviction. */
TEST(devtier_eviction_writes_down_what_the_tier_below_lacks) {
    rig r;
    rig_init(&r, 6, 4, 2, "cuda-2");
    int32_t a[2 * B], b[2 * B], c[2 * B];
    tokens(a, 2 * B, 100), tokens(b, 2 * B, 300), tokens(c, 2 * B, 500);
    request(&r, a, 2 * B, NULL);
    store_flush_spills(r.st); /* the published blocks' copies to the tiers were queued */
    /* The disk loses a's blocks (evicted at once: its budget shrank). */
    cache_hash h0, h1;
    cache_hash_block(&h0, &r.rq.root, a, B);
    cache_hash_block(&h1, &h0, a + B, B);
    disk_flush(r.disk);
    usleep(5000); /* past protect_ms */
    CHECK_EQ_INT(disk_evict_to(r.disk, 0), 2);
    CHECK(!disk_has(r.disk, &h0) && !disk_has(r.disk, &h1));
    request(&r, b, 2 * B, NULL); /* RAM full: a's blocks move down to the disk */
    ram_tier_stats rs;
    ram_tier_get_stats(r.ram, &rs);
    CHECK_EQ_INT(rs.moved_down, 2);
    CHECK(disk_has(r.disk, &h0) && disk_has(r.disk, &h1));
    /* The GPU pool evicts a's blocks, which the RAM tier no longer holds:
     * they move into it first. */
    request(&r, c, 2 * B, NULL);
    store_flush_spills(r.st); /* the copies down were queued, not waited for */
    store_stats ss;
    store_get_stats(r.st, &ss);
    CHECK_EQ_INT(ss.spilled_blocks, 2);
    CHECK_EQ_INT(ss.spill_pending, 0);
    int from[3];
    CHECK_EQ_INT(request(&r, a, 2 * B, from), 2 * B);
    CHECK_MSG(from[1] + from[2] == 2 * B, "a from ram %d, disk %d tokens", from[1], from[2]);
    ram_tier_get_stats(r.ram, &rs);
    CHECK_EQ_INT(rs.lost, 0);
    rig_free(&r);
}

/* The GPU pool evicts blocks no tier below holds: their copies down are
 * queued and the blocks handed out at once (the scheduler's thread does
 * not wait); the new owner's compute writes into them after the copies
 * (the same stream: odd seeds compute first). A lookup that needs such a
 * block waits for its copy (even seeds look up first) and hits in the
 * tiers below, the bytes computed. Over seeds (other stream orders). */
TEST(devtier_eviction_copies_down_without_waiting_and_a_lookup_waits_for_them) {
    int pending_seen = 0;
    for (unsigned seed = 0; seed < 16; seed++) {
        rig r;
        rig_init(&r, 200 + seed, 4, 2, "cuda-2");
        int32_t a[2 * B], b[2 * B], c[2 * B];
        tokens(a, 2 * B, 100), tokens(b, 2 * B, 300), tokens(c, 2 * B, 500);
        request(&r, a, 2 * B, NULL);
        request(&r, b, 2 * B, NULL); /* the RAM tier (2 blocks) gives a's up: the disk has them */
        disk_flush(r.disk);
        usleep(5000); /* past protect_ms */
        disk_evict_to(r.disk, 0); /* a is in the GPU pool alone now */
        kv_seq x;
        kv_seq_init(&x);
        CHECK_EQ_INT(kv_seq_reserve(&r.p, &x, 2 * B, NULL), 0); /* evicts a's blocks: copied down, queued */
        store_stats ss;
        store_get_stats(r.st, &ss);
        pending_seen += ss.spill_pending > 0;
        CHECK_EQ_INT(ss.spill_waits, 0);
        if (seed % 2) compute(&r.p, &x, c, 2 * B); /* into a's old blocks, before the copies down ran */
        int from[3];
        /* from the tiers below (a RAM eviction may have moved one to the
         * disk), none recomputed: a queued copy was waited for or done */
        CHECK_EQ_INT(request(&r, a, 2 * B, from), 2 * B); /* request() checks the bytes */
        CHECK_MSG(from[1] > 0 && from[1] + from[2] == 2 * B, "seed %u: a from gpu %d, ram %d, disk %d tokens", seed,
                  from[0], from[1], from[2]);
        if (seed % 2 == 0) compute(&r.p, &x, c, 2 * B); /* after the lookup waited for them */
        CHECK(holds(&r.p, &x, c, 2 * B));
        kv_seq_release(&r.p, &x);
        store_flush_spills(r.st);
        store_get_stats(r.st, &ss);
        CHECK(ss.spilled_blocks >= 2);
        CHECK_EQ_INT(ss.spill_pending, 0);
        CHECK_EQ_INT(ss.spill_errors, 0);
        rig_free(&r);
    }
    CHECK_MSG(pending_seen > 0, "copies down still queued after the eviction: %d of 16 seeds", pending_seen);
}

/* ---- publishing from the GPU pool ------------------------------------------------------- */

/* The published blocks and tail of t[0..n) (n = NB full blocks and a tail
 * of n - NB*B tokens): their names. */
static int publish_names(const rig *r, const int32_t *t, int n, cache_hash *h) {
    const cache_hash *prev = &r->rq.root;
    int k = 0;
    for (; k * B < n; k++) {
        int m = n - k * B < B ? n - k * B : B;
        cache_hash_block(&h[k], prev, t + (size_t)k * B, m);
        prev = &h[k];
    }
    return k;
}

/* Tier t holds block h with exactly the payload want (block_bytes). */
static int tier_holds(const rig *r, const cache_tier *t, const cache_hash *h, const uint8_t *want) {
    uint8_t *got = malloc(r->p.block_bytes);
    int32_t tok[B];
    void *dst[1] = {got};
    int32_t *tk[1] = {tok};
    int rc[1] = {-1};
    int ok = t->read_many(t->self, h, dst, tk, 1, rc) == 1 && rc[0] == 0 && memcmp(got, want, r->p.block_bytes) == 0;
    free(got);
    return ok;
}

/* One request's attach, compute and publish (its tail kept), with the
 * payloads of its blocks as the synchronous path read them (want[i]:
 * downloaded and waited for right after the compute), and the sequence
 * released: its blocks stay in the GPU pool's cache. The device is held
 * busy from the publish on (fake_dev_hold: the copies stay queued until
 * the host waits for them); the caller lets it go. Returns the blocks. */
static int publish_capturing(rig *r, const int32_t *t, int n, uint8_t **want) {
    kv_seq s;
    kv_seq_init(&s);
    store_seq q;
    store_seq_init(r->st, &q, &r->rq);
    CHECK_EQ_INT(store_attach(r->st, &q, t, n, n, &s), 0); /* cold */
    compute(&r->p, &s, t, n);
    for (int i = 0; i < s.n_blocks; i++) {
        want[i] = malloc(r->p.block_bytes);
        CHECK(kv_block_read(&r->p, s.blocks[i], want[i]) == want[i]);
    }
    fake_dev_hold(r->fd, 1);
    store_publish(r->st, &q, t, &s);
    store_finish(r->st, &q, t, &s, 1);
    int nb = s.n_blocks;
    kv_seq_release(&r->p, &s);
    return nb;
}

/* A rig (seeded, gpu_blocks in its GPU pool, 8 in RAM) that has published
 * n tokens of its own (from base) with publish_capturing, the device left
 * busy: every copy queued, none waited for, none in a tier yet. */
static void rig_published(rig *r, unsigned seed, int gpu_blocks, int32_t *t, int n, int base, uint8_t **want) {
    rig_init(r, seed, gpu_blocks, 8, "cuda-2");
    tokens(t, n, base);
    int nb = (n + B - 1) / B;
    CHECK_EQ_INT(publish_capturing(r, t, n, want), nb);
    store_stats ss;
    store_get_stats(r->st, &ss);
    CHECK_EQ_INT(ss.publish_queued, nb); /* the full blocks and the tail */
    CHECK_EQ_INT(ss.publish_written, 0);
    CHECK_EQ_INT(ss.spill_pending, nb);
    CHECK_EQ_INT(ss.spill_waits, 0); /* the host did not wait */
    cache_hash h[8];
    CHECK_EQ_INT(publish_names(r, t, n, h), nb);
    for (int i = 0; i < nb; i++) CHECK(!r->t_ram.has(r->ram, &h[i]) && !disk_has(r->disk, &h[i]));
}

/* A request for t[0..n) attaches all of it from lower tier k (0: RAM,
 * 1: disk), the bytes computed (request() checks them). */
static void hit_from_tier(rig *r, const int32_t *t, int n, int k) {
    int from[3];
    CHECK_EQ_INT(request(r, t, n, from), n);
    CHECK_EQ_INT(from[1 + k], n);
}

/* rig_published's rig and payloads go. */
static void rig_published_free(rig *r, int n, uint8_t **want) {
    for (int i = 0; i < (n + B - 1) / B; i++) free(want[i]);
    rig_free(r);
}

/* Publishing from the GPU pool queues each block's download (a full
 * block's and the tail's) and returns without waiting, on a busy device;
 * the pool then gives the blocks to another sequence that writes into
 * them at once: a kernel on the compute stream (odd seeds) or an upload
 * from a tier below on the copy stream (even seeds). The copies still
 * read the published bytes (the stream's order; the upload waits for
 * their events), and the RAM and disk tiers get exactly the payloads the
 * synchronous download read; a later request hits all of it from RAM.
 * Over seeds (the streams run in other orders). */
TEST(devtier_publish_copies_down_without_waiting_and_a_rewrite_does_not_corrupt_them) {
    for (unsigned seed = 0; seed < 32; seed++) {
        rig r;
        int32_t t[3 * B + 2], c[5 * B];
        uint8_t *want[4];
        rig_published(&r, 300 + seed, 5, t, 3 * B + 2, 100 + (int)seed, want);
        tokens(c, 5 * B, 900);
        /* The pool (5 blocks) gives t's blocks to x, which writes into them. */
        kv_seq x;
        kv_seq_init(&x);
        if (seed % 2) {
            compute(&r.p, &x, c, 5 * B);
        } else {
            CHECK_EQ_INT(kv_seq_reserve(&r.p, &x, 5 * B, NULL), 0);
            uint8_t *junk = malloc(r.p.block_bytes);
            memset(junk, 0xA5, r.p.block_bytes);
            for (int i = 0; i < 5; i++) CHECK_EQ_INT(kv_block_write_async(&r.p, x.blocks[i], junk, NULL), 0);
            CHECK_EQ_INT(kv_pool_wait_writes(&r.p, NULL), 0);
            free(junk);
        }
        fake_dev_hold(r.fd, 0);
        store_flush_spills(r.st);
        store_stats ss;
        store_get_stats(r.st, &ss);
        CHECK_EQ_INT(ss.publish_written, 4);
        CHECK_EQ_INT(ss.spill_pending, 0);
        CHECK_EQ_INT(ss.spill_errors, 0);
        CHECK_EQ_INT(ss.spilled_blocks, 0); /* the evicted blocks were on their way to RAM already */
        disk_flush(r.disk);
        cache_hash h[4];
        publish_names(&r, t, 3 * B + 2, h);
        for (int i = 0; i < 4; i++) {
            CHECK_MSG(tier_holds(&r, &r.t_ram, &h[i], want[i]), "seed %u: block %d in RAM, as published", seed, i);
            CHECK_MSG(tier_holds(&r, &r.t_disk, &h[i], want[i]), "seed %u: block %d on disk, as published", seed, i);
        }
        kv_seq_release(&r.p, &x);
        hit_from_tier(&r, t, 3 * B + 2, 0);
        rig_published_free(&r, 3 * B + 2, want);
    }
}

/* A block whose publish copy is still queued (a busy device) and that
 * the GPU pool has given up since (no tier holds it yet) is waited for by
 * the lookup that needs it: a hit from the RAM tier, the bytes computed,
 * not a recompute. Over seeds. */
TEST(devtier_lookup_waits_for_a_queued_publish_copy) {
    for (unsigned seed = 0; seed < 32; seed++) {
        rig r;
        int32_t t[3 * B + 2];
        uint8_t *want[4];
        rig_published(&r, 400 + seed, 5, t, 3 * B + 2, 200 + (int)seed, want);
        kv_seq x;
        kv_seq_init(&x);
        CHECK_EQ_INT(kv_seq_reserve(&r.p, &x, 5 * B, NULL), 0); /* evicts t's blocks from the GPU pool */
        kv_seq_release(&r.p, &x);
        hit_from_tier(&r, t, 3 * B + 2, 0); /* a hit, not a recompute */
        store_stats ss;
        store_get_stats(r.st, &ss);
        CHECK(ss.spill_waits > 0);
        CHECK_EQ_INT(ss.publish_written, 4);
        fake_dev_hold(r.fd, 0);
        rig_published_free(&r, 3 * B + 2, want);
    }
}

/* store_free waits for the queued publish copies and writes them through:
 * after a restart the disk serves every published block and the tail. */
TEST(devtier_store_free_drains_queued_publish_copies) {
    for (unsigned seed = 0; seed < 16; seed++) {
        rig r;
        int32_t t[2 * B + 3];
        uint8_t *want[3];
        rig_published(&r, 500 + seed, 8, t, 2 * B + 3, 50 + (int)seed, want);
        rig_stop(&r); /* no flush first; the device still busy */
        fake_dev_hold(r.fd, 0);
        rig_store(&r, 4, "cuda-2");
        cache_hash h[3];
        publish_names(&r, t, 2 * B + 3, h);
        for (int i = 0; i < 3; i++) CHECK_MSG(tier_holds(&r, &r.t_disk, &h[i], want[i]), "seed %u: block %d", seed, i);
        hit_from_tier(&r, t, 2 * B + 3, 1);
        rig_published_free(&r, 2 * B + 3, want);
    }
}

/* A running sequence's tail is kept (its copy queued) and the sequence
 * goes on writing into the same block at once (kernels queued behind the
 * copy, not waited for); then the block fills and is published, and the
 * pinned staging for its copy is refused: that one is downloaded and
 * waited for, after the tail's (so the tiers get the writes in the order
 * asked: the tail, then the block that supersedes it and drops it). The
 * tail's copy holds the bytes the tail had, the block's the whole block. */
TEST(devtier_tail_copy_survives_the_sequence_going_on_and_a_refused_slot_keeps_the_order) {
    for (unsigned seed = 0; seed < 16; seed++) {
        rig r;
        rig_init(&r, 600 + seed, 8, 8, "cuda-2");
        int32_t t[3 * B];
        tokens(t, 3 * B, 70 + (int)seed);
        kv_seq s;
        kv_seq_init(&s);
        store_seq q;
        store_seq_init(r.st, &q, &r.rq);
        CHECK_EQ_INT(store_attach(r.st, &q, t, 2 * B + 2, 2 * B + 2, &s), 0);
        compute(&r.p, &s, t, 2 * B + 2);
        uint8_t *want_tail = malloc(r.p.block_bytes), *want_block = malloc(r.p.block_bytes);
        CHECK(kv_block_read(&r.p, s.blocks[2], want_tail) == want_tail);
        fake_dev_hold(r.fd, 1); /* a busy device */
        store_publish(r.st, &q, t, &s);
        store_keep_tail(r.st, &q, t, &s); /* as for an n > 1 prompt */
        store_stats ss;
        store_get_stats(r.st, &ss);
        CHECK_EQ_INT(ss.publish_queued, 3);
        CHECK_EQ_INT(ss.spill_pending, 3);
        fake_dev_fail_alloc(r.fd, 1, 1);                    /* the next staging slot */
        uint16_t *rows = compute_async(&r.p, &s, t, 3 * B); /* into the tail's block, or its copy */
        store_publish(r.st, &q, t, &s);                     /* block 2: waited for, after the tail */
        CHECK_EQ_INT(devmem_sync(r.dev, DEVMEM_COMPUTE, NULL), 0);
        free(rows);
        CHECK(kv_block_read(&r.p, s.blocks[2], want_block) == want_block);
        store_get_stats(r.st, &ss);
        CHECK_EQ_INT(ss.publish_queued, 3);
        CHECK_EQ_INT(ss.publish_written, 4); /* the three queued first, then block 2 */
        CHECK_EQ_INT(ss.spill_pending, 0);
        cache_hash h[3], tail;
        publish_names(&r, t, 3 * B, h);
        cache_hash_block(&tail, &h[1], t + 2 * B, 2);
        CHECK_MSG(!r.t_ram.has(r.ram, &tail), "seed %u: the tail written before the block that supersedes it", seed);
        CHECK(tier_holds(&r, &r.t_ram, &h[2], want_block));
        store_finish(r.st, &q, t, &s, 0);
        kv_seq_release(&r.p, &s);
        fake_dev_hold(r.fd, 0);
        disk_flush(r.disk); /* (the disk drops only tails already on disk: this one was still queued) */
        CHECK(tier_holds(&r, &r.t_disk, &h[2], want_block));
        if (disk_has(r.disk, &tail)) /* the tail's copy has the tail's bytes, not what followed */
            CHECK_MSG(tier_holds(&r, &r.t_disk, &tail, want_tail), "seed %u: the tail as kept", seed);
        free(want_tail), free(want_block);
        rig_free(&r);
    }
}

TEST(devtier_ram_eviction_follows_the_policy) {
    rig r;
    rig_init(&r, 7, 16, 3, "cuda-2");
    int32_t a[B], b[B], c[B], d[B];
    tokens(a, B, 100), tokens(b, B, 200), tokens(c, B, 300), tokens(d, B, 400);
    cache_hash ha, hb, hc;
    cache_hash_block(&ha, &r.rq.root, a, B);
    cache_hash_block(&hb, &r.rq.root, b, B);
    cache_hash_block(&hc, &r.rq.root, c, B);
    request(&r, a, B, NULL), request(&r, b, B, NULL), request(&r, c, B, NULL);
    r.t_ram.touch(r.ram, &ha);            /* a: a hit */
    r.t_ram.retain(r.ram, &hb, 3600);     /* b: under a retention mark */
    request(&r, d, B, NULL);              /* full: c, the least valued, goes */
    CHECK(r.t_ram.has(r.ram, &ha) && r.t_ram.has(r.ram, &hb) && !r.t_ram.has(r.ram, &hc));
    CHECK(r.t_ram.retained_s(r.ram, &hb) > 3500);
    rig_free(&r);
}

TEST(devtier_full_gpu_pool_is_a_clear_error) {
    rig r;
    rig_init(&r, 8, 3, 4, "cuda-2");
    int32_t t[4 * B];
    tokens(t, 4 * B, 10);
    kv_seq s;
    kv_seq_init(&s);
    strata_err e = {0};
    CHECK_EQ_INT(kv_seq_reserve(&r.p, &s, 3 * B, &e), 0);
    CHECK_EQ_INT(kv_seq_reserve(&r.p, &s, 4 * B, &e), STRATA_ERANGE);
    CHECK_MSG(strstr(e.msg, "kv pool full") != NULL, "%s", e.msg);
    CHECK_EQ_INT(s.n_blocks, 3); /* as it was */
    kv_seq_release(&r.p, &s);
    /* A hit larger than the pool attaches what fits. */
    request(&r, t, 3 * B, NULL);
    int32_t u[4 * B];
    tokens(u, 4 * B, 900);
    request(&r, u, 2 * B, NULL);
    kv_seq_init(&s);
    store_seq q;
    store_seq_init(r.st, &q, &r.rq);
    int got = store_attach(r.st, &q, t, 3 * B, 3 * B, &s);
    CHECK(got > 0 && got <= 3 * B);
    CHECK(holds(&r.p, &s, t, got));
    store_finish(r.st, &q, t, &s, 0);
    kv_seq_release(&r.p, &s);
    rig_free(&r);
}

TEST(devtier_restart_serves_the_disk_bit_identical) {
    rig r;
    rig_init(&r, 9, 8, 4, "cuda-2");
    int32_t t[3 * B + 1];
    tokens(t, 3 * B + 1, 40);
    request(&r, t, 3 * B + 1, NULL);
    rig_stop(&r); /* the server stops: GPU and RAM are gone, the disk stays */
    CHECK_EQ_INT(r.p.n_free, r.p.n_blocks);
    rig_store(&r, 4, "cuda-2");
    int from[3];
    CHECK_EQ_INT(request(&r, t, 3 * B + 1, from), 3 * B + 1);
    CHECK_EQ_INT(from[2], 3 * B + 1);
    rig_free(&r);
}

/* Blocks are filed under the numerics of the backend that computed them:
 * a disk written by a CPU run serves nothing to a GPU run of the same
 * model, file and tokens, nor the reverse. */
TEST(devtier_blocks_of_the_other_backend_are_never_served) {
    rig r;
    rig_init(&r, 10, 8, 4, "cpu");
    int32_t t[2 * B];
    tokens(t, 2 * B, 70);
    request(&r, t, 2 * B, NULL);
    rig_stop(&r);
    rig_store(&r, 4, CUDA_NUMERICS);
    int from[3];
    CHECK_EQ_INT(request(&r, t, 2 * B, from), 0); /* the GPU run computes it */
    rig_stop(&r);
    rig_store(&r, 4, "cpu");
    CHECK_EQ_INT(request(&r, t, 2 * B, from), 2 * B); /* the CPU's own, from disk */
    CHECK_EQ_INT(from[2], 2 * B);
    rig_free(&r);
}

/* A request's partial last block (a tail) comes back from the RAM tier
 * to the token, and goes from it once a full block holds its tokens. */
TEST(devtier_tail_comes_back_from_the_ram_tier_then_is_superseded) {
    rig r;
    rig_init(&r, 11, 4, 8, "cuda-2");
    int32_t t[3 * B], u[4 * B];
    tokens(t, 3 * B, 10), tokens(u, 4 * B, 600);
    int from[3];
    request(&r, t, 2 * B + 2, NULL);
    request(&r, u, 4 * B, NULL); /* the GPU pool (4 blocks) gives t's blocks up */
    CHECK_EQ_INT(request(&r, t, 2 * B + 2, from), 2 * B + 2);
    CHECK_MSG(from[1] == 2 * B + 2, "t from gpu %d, ram %d, disk %d tokens", from[0], from[1], from[2]);
    cache_hash h0, h1, tail;
    cache_hash_block(&h0, &r.rq.root, t, B);
    cache_hash_block(&h1, &h0, t + B, B);
    cache_hash_block(&tail, &h1, t + 2 * B, 2);
    CHECK(r.t_ram.has(r.ram, &tail));
    request(&r, t, 3 * B, NULL); /* block 2 holds the tail's tokens now */
    store_flush_spills(r.st);    /* its copy to the tiers was queued: written, the tail goes */
    CHECK(!r.t_ram.has(r.ram, &tail));
    rig_free(&r);
}

/* Leaf first in the RAM tier, whatever order blocks came in: a block
 * written after its child (a tail moved down from the GPU pool late) is
 * no leaf, so the child goes first even when it is worth more. */
TEST(devtier_ram_tier_evicts_leaves_first) {
    fake_dev *fd = fake_dev_new(12);
    enum { BYTES = 256 };
    ram_tier *r = NULL;
    ram_tier_opts ro = {.budget_bytes = 2 * BYTES, .block_bytes = BYTES, .block_tokens = B, .dev = fake_dev_mem(fd)};
    CHECK_EQ_INT(ram_tier_open(&r, &ro, NULL), 0);
    cache_tier t = ram_tier_iface(r);
    cache_hash root, p, child, x;
    memset(&root, 1, sizeof root);
    int32_t tp[B], tc[B], tx[B];
    tokens(tp, B, 10), tokens(tc, B, 20), tokens(tx, B, 30);
    cache_hash_block(&p, &root, tp, B);
    cache_hash_block(&child, &p, tc, B);
    cache_hash_block(&x, &root, tx, B);
    uint8_t kv[BYTES] = {0};
    t.write(r, &child, &p, tc, B, kv);
    t.write(r, &p, &root, tp, B, kv);
    t.touch(r, &child); /* worth more than p now */
    t.write(r, &x, &root, tx, B, kv);
    CHECK(!t.has(r, &child) && t.has(r, &p) && t.has(r, &x));
    ram_tier_stats st;
    ram_tier_get_stats(r, &st);
    CHECK_EQ_INT(st.evicted, 1);
    CHECK_EQ_INT(st.lost, 1); /* no tier below it here */
    ram_tier_close(r);
    fake_dev_stats fs;
    fake_dev_stats_get(fd, &fs);
    CHECK_EQ_INT(fs.host_allocs, 0);
    fake_dev_free(fd);
}

/* A hit read from a lower tier goes up on the copy stream, on the store's
 * loader thread, while the scheduler's thread computes another sequence
 * on the compute stream; the hit is the bytes written. */
TEST(devtier_uploads_run_on_the_copy_stream_beside_compute) {
    rig r;
    rig_init(&r, 13, 6, 8, "cuda-2");
    int32_t a[3 * B], b[3 * B], c[3 * B], d[2 * B];
    tokens(a, 3 * B, 100), tokens(b, 3 * B, 300), tokens(c, 3 * B, 500), tokens(d, 2 * B, 700);
    request(&r, a, 3 * B, NULL), request(&r, b, 3 * B, NULL);
    request(&r, c, 3 * B, NULL); /* a's blocks leave the GPU */
    fake_dev_stats before, after;
    fake_dev_stats_get(r.fd, &before);
    kv_seq sa, sd;
    kv_seq_init(&sa), kv_seq_init(&sd);
    store_seq q;
    store_seq_init(r.st, &q, &r.rq);
    store_attach_begin(r.st, &q, a, 3 * B, 3 * B, &sa);
    CHECK(store_loading(&q)); /* the read runs on the loader thread */
    compute(&r.p, &sd, d, 2 * B); /* meanwhile: another sequence's compute */
    CHECK(holds(&r.p, &sd, d, 2 * B));
    CHECK_EQ_INT(store_attach_end(r.st, &q, a, 3 * B, 3 * B, &sa), 3 * B);
    CHECK(holds(&r.p, &sa, a, 3 * B));
    CHECK_EQ_INT(q.n_cached_lower, 3 * B);
    fake_dev_stats_get(r.fd, &after);
    CHECK_MSG(after.on_stream[DEVMEM_COPY] - before.on_stream[DEVMEM_COPY] >= 3, "uploads on the copy stream: %ld",
              after.on_stream[DEVMEM_COPY] - before.on_stream[DEVMEM_COPY]);
    store_finish(r.st, &q, a, &sa, 0);
    kv_seq_release(&r.p, &sa), kv_seq_release(&r.p, &sd);
    rig_free(&r);
}
