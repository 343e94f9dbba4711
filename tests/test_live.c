/* test_live.c - the live prefix tier through the block store: publish,
 * attach, tails, eviction under pressure (leaf first, policy order,
 * retention), cached blocks never written in place, and restores from the
 * disk tier below. */
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "cache/disk_file.h"
#include "cache/disk_tier.h"
#include "cache/store.h"
#include "test.h"
#include "test_util.h"

#define B 4

static void setup(kv_pool *p, cache_store **c, cache_hash *root, int n_blocks) {
    kv_pool_init(p, 1, 2, B, n_blocks, NULL);
    store_opts o = {.default_scope = {SCOPE_FULL, 0}};
    *c = store_new(p, &o);
    uint8_t fp[32] = {1};
    cache_hash_root(root, fp, "", 0);
}

/* Frees the cache and checks every block went back to the pool. */
static void teardown(kv_pool *p, cache_store *c) {
    store_free(c);
    CHECK_EQ_INT(p->n_free, p->n_blocks);
    kv_pool_destroy(p);
}

/* A request's walk over the store (its request and its cursor). */
typedef struct cursor {
    store_request rq;
    store_seq q;
} cursor;

static void cursor_init(cache_store *c, cursor *cur, const cache_hash *root) {
    cur->rq = (store_request){.root = *root, .scope = {SCOPE_FULL, 0}};
    store_seq_init(c, &cur->q, &cur->rq);
}

/* Attaches toks[0..n_max) to s; the tokens from the disk in *from_disk. */
static int attach(cache_store *c, cursor *cur, const int32_t *toks, int n_max, kv_seq *s, int *from_disk) {
    int got = store_attach(c, &cur->q, toks, n_max, n_max, s);
    if (from_disk) *from_disk = cur->q.n_cached_lower;
    return got;
}

/* Ends the walk without keeping a tail (frees its key chain). */
static void done(cache_store *c, cursor *cur, const int32_t *toks, const kv_seq *s) {
    store_finish(c, &cur->q, toks, s, 0);
}

/* Retention for the first end positions of s, as a request's mark. */
static void retain(cache_store *c, cursor *cur, const int32_t *toks, const kv_seq *s, int end, double ttl_s) {
    cache_mark m = {end, ttl_s};
    cur->rq.marks = &m;
    cur->rq.n_marks = 1;
    store_finish(c, &cur->q, toks, s, 0);
}

/* A sequence "computed" for tokens: blocks reserved, positions filled. */
static void compute(kv_pool *p, kv_seq *s, const int32_t *toks, int n) {
    kv_seq_reserve(p, s, n, NULL);
    for (int i = s->n_pos; i < n; i++) kv_rows(p, s->blocks[i / B], 0, 0)[(i % B) * 2] = (uint16_t)toks[i];
    s->n_pos = n;
}

TEST(live_publish_then_attach_longest_prefix) {
    kv_pool p;
    cache_store *c;
    cache_hash root;
    setup(&p, &c, &root, 16);
    int32_t a[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, b[10] = {1, 2, 3, 4, 5, 6, 0, 0, 0, 0};
    kv_seq s1, s2;
    kv_seq_init(&s1);
    cursor c1, c2;
    cursor_init(c, &c1, &root);
    compute(&p, &s1, a, 10);
    store_publish(c, &c1.q, a, &s1);
    CHECK_EQ_INT(c1.q.n_blocks, 2); /* positions 0..7 are two full blocks */
    kv_seq_init(&s2);
    cursor_init(c, &c2, &root);
    /* block 1 differs at token 6: block 0 whole, then 2 tokens of block 1 */
    CHECK_EQ_INT(attach(c, &c2, b, 9, &s2, NULL), 6);
    CHECK_EQ_INT(c2.q.n_blocks, 1);
    CHECK_EQ_INT(s2.n_pos, 6);
    CHECK_EQ_INT(s2.blocks[0], s1.blocks[0]);
    CHECK_EQ_INT(s2.blocks[1], s1.blocks[1]);
    CHECK_EQ_INT(p.refcount[s1.blocks[0]], 2);
    kv_seq_reserve(&p, &s2, 7, NULL); /* writing position 6 copies the shared block */
    CHECK(s2.blocks[1] != s1.blocks[1]);
    CHECK_EQ_INT(kv_rows(&p, s1.blocks[1], 0, 0)[2 * 2], 7); /* the cached block is untouched */
    done(c, &c1, a, &s1);
    done(c, &c2, b, &s2);
    kv_seq_release(&p, &s1);
    kv_seq_release(&p, &s2);
    store_stats st;
    store_get_stats(c, &st);
    CHECK_EQ_INT(st.live.idle_blocks, 2); /* both published blocks stay cached */
    teardown(&p, c);
}

TEST(live_idle_blocks_are_reclaimed_least_recent_first) {
    kv_pool p;
    cache_store *c;
    cache_hash root;
    setup(&p, &c, &root, 4);
    int32_t x[4] = {1, 1, 1, 1}, y[4] = {2, 2, 2, 2}, z[12] = {0};
    kv_seq s;
    cursor cur;
    for (int k = 0; k < 2; k++) {
        kv_seq_init(&s);
        cursor_init(c, &cur, &root);
        compute(&p, &s, k ? y : x, 4);
        store_publish(c, &cur.q, k ? y : x, &s);
        done(c, &cur, k ? y : x, &s);
        kv_seq_release(&p, &s);
    }
    kv_seq_init(&s); /* needs 3 of 4 blocks: 2 free + the oldest idle one */
    compute(&p, &s, z, 12);
    CHECK_EQ_INT(s.n_blocks, 3);
    kv_seq_release(&p, &s);
    kv_seq t;
    kv_seq_init(&t);
    cursor_init(c, &cur, &root);
    CHECK_EQ_INT(attach(c, &cur, x, 4, &t, NULL), 0); /* x was evicted */
    done(c, &cur, x, &t);
    kv_seq_release(&p, &t);
    kv_seq_init(&t);
    cursor_init(c, &cur, &root);
    CHECK_EQ_INT(attach(c, &cur, y, 4, &t, NULL), 4); /* y, newer, survived */
    done(c, &cur, y, &t);
    kv_seq_release(&p, &t);
    store_free(c);
    kv_pool_destroy(&p);
}

TEST(live_published_block_is_copied_before_rewrite) {
    kv_pool p;
    cache_store *c;
    cache_hash root;
    setup(&p, &c, &root, 8);
    int32_t a[4] = {7, 7, 7, 7};
    kv_seq s;
    kv_seq_init(&s);
    cursor cur;
    cursor_init(c, &cur, &root);
    compute(&p, &s, a, 4);
    store_publish(c, &cur.q, a, &s);
    int published = s.blocks[0];
    kv_seq_truncate(&p, &s, 2); /* rewind into the published block... */
    kv_seq_reserve(&p, &s, 3, NULL); /* ...and write position 2 */
    CHECK(s.blocks[0] != published);
    done(c, &cur, a, &s);
    kv_seq_release(&p, &s);
    store_free(c);
    kv_pool_destroy(&p);
}

TEST(live_different_roots_never_share) {
    kv_pool p;
    cache_store *c;
    cache_hash root, other;
    setup(&p, &c, &root, 8);
    uint8_t fp[32] = {1};
    cache_hash_root(&other, fp, "tenant-b", 8);
    int32_t a[4] = {3, 3, 3, 3};
    kv_seq s, t;
    kv_seq_init(&s);
    cursor cur;
    cursor_init(c, &cur, &root);
    compute(&p, &s, a, 4);
    store_publish(c, &cur.q, a, &s);
    done(c, &cur, a, &s);
    kv_seq_init(&t);
    cursor_init(c, &cur, &other);
    CHECK_EQ_INT(attach(c, &cur, a, 4, &t, NULL), 0);
    done(c, &cur, a, &t);
    kv_seq_release(&p, &s);
    kv_seq_release(&p, &t);
    store_free(c);
    kv_pool_destroy(&p);
}

/* One finished request: computes toks[0..n), publishes, keeps its tail,
 * releases. */
static void finish_request(kv_pool *p, cache_store *c, const cache_hash *root, const int32_t *toks, int n) {
    kv_seq s;
    kv_seq_init(&s);
    cursor cur;
    cursor_init(c, &cur, root);
    int got = attach(c, &cur, toks, n, &s, NULL);
    kv_seq_reserve(p, &s, n, NULL);
    for (int i = got; i < n; i++) kv_rows(p, s.blocks[i / B], 0, 0)[(i % B) * 2] = (uint16_t)toks[i];
    s.n_pos = n;
    store_publish(c, &cur.q, toks, &s);
    store_finish(c, &cur.q, toks, &s, 1);
    kv_seq_release(p, &s);
}

TEST(live_tail_is_attached_at_token_granularity_and_copied_on_write) {
    kv_pool p;
    cache_store *c;
    cache_hash root;
    setup(&p, &c, &root, 16);
    int32_t turn1[7] = {1, 2, 3, 4, 5, 6, 7}, turn2[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    finish_request(&p, c, &root, turn1, 7); /* one full block + a tail of 3 */
    store_stats st;
    store_get_stats(c, &st);
    CHECK_EQ_INT(st.live.tails, 1);
    kv_seq s;
    kv_seq_init(&s);
    cursor cur;
    cursor_init(c, &cur, &root);
    CHECK_EQ_INT(attach(c, &cur, turn2, 9, &s, NULL), 7); /* 4 + the whole tail */
    CHECK_EQ_INT(s.n_pos, 7);
    CHECK_EQ_INT(cur.q.n_blocks, 1);
    int tail_block = s.blocks[1];
    CHECK_EQ_INT(kv_rows(&p, tail_block, 0, 0)[2 * 2], 7); /* position 6 holds token 7 */
    kv_seq_reserve(&p, &s, 9, NULL); /* writing position 7 copies the shared tail */
    CHECK(s.blocks[1] != tail_block);
    CHECK_EQ_INT(kv_rows(&p, s.blocks[1], 0, 0)[2 * 2], 7);
    done(c, &cur, turn2, &s);
    kv_seq_release(&p, &s);
    /* A prompt that leaves the tail after 2 of its 3 tokens takes those 2. */
    int32_t other[8] = {1, 2, 3, 4, 5, 6, 0, 0};
    kv_seq_init(&s);
    cursor_init(c, &cur, &root);
    CHECK_EQ_INT(attach(c, &cur, other, 8, &s, NULL), 6);
    done(c, &cur, other, &s);
    kv_seq_release(&p, &s);
    store_get_stats(c, &st);
    CHECK_EQ_INT(st.tail_hit_tokens, 5);
    teardown(&p, c);
}

TEST(live_longer_tail_replaces_its_prefix) {
    kv_pool p;
    cache_store *c;
    cache_hash root;
    setup(&p, &c, &root, 16);
    int32_t a[6] = {1, 2, 3, 4, 5, 6}, b[7] = {1, 2, 3, 4, 5, 6, 7};
    finish_request(&p, c, &root, a, 6);
    finish_request(&p, c, &root, b, 7); /* attaches a's tail, then keeps a longer one */
    finish_request(&p, c, &root, a, 6); /* a is a prefix of the kept tail: nothing new */
    store_stats st;
    store_get_stats(c, &st);
    CHECK_EQ_INT(st.live.tails, 1);
    CHECK_EQ_INT(st.live.cached_blocks, 1);
    teardown(&p, c);
}

TEST(live_evicts_leaves_before_their_parents) {
    kv_pool p;
    cache_store *c;
    cache_hash root;
    setup(&p, &c, &root, 4);
    int32_t chain[12] = {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3}, z[8] = {9, 9, 9, 9, 9, 9, 9, 9};
    finish_request(&p, c, &root, chain, 12); /* 3 blocks, released together */
    kv_seq s;
    kv_seq_init(&s);
    compute(&p, &s, z, 8); /* needs 2: the free one and one idle */
    kv_seq_release(&p, &s);
    cursor cur;
    cursor_init(c, &cur, &root);
    kv_seq_init(&s);
    CHECK_EQ_INT(attach(c, &cur, chain, 12, &s, NULL), 8); /* the leaf went, not the root */
    done(c, &cur, chain, &s);
    kv_seq_release(&p, &s);
    store_free(c);
    kv_pool_destroy(&p);
}

TEST(live_retained_blocks_are_evicted_last) {
    kv_pool p;
    cache_store *c;
    cache_hash root;
    setup(&p, &c, &root, 3);
    int32_t anchor[4] = {5, 5, 5, 5}, later[4] = {6, 6, 6, 6}, z[8] = {0};
    kv_seq s;
    cursor cur;
    kv_seq_init(&s);
    cursor_init(c, &cur, &root);
    compute(&p, &s, anchor, 4);
    store_publish(c, &cur.q, anchor, &s);
    retain(c, &cur, anchor, &s, 4, 60);
    kv_seq_release(&p, &s);
    finish_request(&p, c, &root, later, 4); /* newer, more valuable by recency */
    kv_seq_init(&s);
    compute(&p, &s, z, 8); /* the free block, then one idle: not the retained one */
    kv_seq_release(&p, &s);
    kv_seq_init(&s);
    cursor_init(c, &cur, &root);
    CHECK_EQ_INT(attach(c, &cur, anchor, 4, &s, NULL), 4);
    done(c, &cur, anchor, &s);
    kv_seq_release(&p, &s);
    kv_seq_init(&s);
    cursor_init(c, &cur, &root);
    CHECK_EQ_INT(attach(c, &cur, later, 4, &s, NULL), 0);
    done(c, &cur, later, &s);
    kv_seq_release(&p, &s);
    store_stats st;
    store_get_stats(c, &st);
    CHECK_EQ_INT(st.live.evicted_retained, 0);
    store_free(c);
    kv_pool_destroy(&p);
}

static disk_store *open_disk(const char *dir, const kv_pool *p) {
    disk_opts o = {.dir = dir, .block_tokens = B, .block_bytes = p->block_bytes, .kv_dtype = DISK_F16};
    memset(o.model_fp, 1, 32);
    disk_store *d = NULL;
    CHECK_EQ_INT(disk_open(&d, &o, NULL), 0);
    return d;
}

/* setup, with a disk tier in dir. */
static disk_store *setup_with_disk(kv_pool *p, cache_store **c, cache_hash *root, int n_blocks, const char *dir) {
    setup(p, c, root, n_blocks);
    disk_store *d = open_disk(dir, p);
    cache_tier t = disk_tier(d);
    store_add_tier(*c, &t);
    return d;
}

/* Blocks published to disk come back, read in parallel, bit for bit, in a
 * fresh pool; a damaged file in the middle ends the restored prefix there. */
TEST(live_restores_runs_of_blocks_from_disk) {
    char *dir = test_tmpdir_new();
    enum { N = 12 };
    int32_t toks[N * B + 1];
    for (int i = 0; i <= N * B; i++) toks[i] = 100 + i;
    kv_pool p;
    cache_store *c;
    cache_hash root;
    disk_store *d = setup_with_disk(&p, &c, &root, 2 * N, dir);
    finish_request(&p, c, &root, toks, N * B);
    disk_flush(d);
    store_free(c);
    kv_pool_destroy(&p);
    disk_close(d);

    for (int damaged = 0; damaged < 2; damaged++) {
        d = setup_with_disk(&p, &c, &root, 2 * N, dir);
        kv_seq s;
        kv_seq_init(&s);
        cursor cur;
        cursor_init(c, &cur, &root);
        int from_disk = 0, want = damaged ? 7 * B : N * B;
        if (!damaged) {
            CHECK_EQ_INT(attach(c, &cur, toks, N * B + 1, &s, &from_disk), want);
        } else { /* the two-step form: the read runs on its own thread */
            CHECK_EQ_INT(store_attach_begin(c, &cur.q, toks, N * B + 1, N * B + 1, &s), 0);
            CHECK(store_loading(&cur.q));
            while (store_loading(&cur.q) && !store_load_ready(&cur.q)) sched_yield();
            CHECK_EQ_INT(store_attach_end(c, &cur.q, toks, N * B + 1, N * B + 1, &s), want);
            from_disk = cur.q.n_cached_lower;
        }
        CHECK_EQ_INT(from_disk, want);
        CHECK_EQ_INT(s.n_blocks, want / B); /* nothing reserved past the prefix */
        for (int i = 0; i < want; i++) CHECK_EQ_INT(kv_rows(&p, s.blocks[i / B], 0, 0)[(i % B) * 2], toks[i]);
        done(c, &cur, toks, &s);
        kv_seq_release(&p, &s);
        store_free(c);
        CHECK_EQ_INT(p.n_free, 2 * N);
        kv_pool_destroy(&p);
        if (!damaged) { /* flip a payload byte of block 7 for the second round */
            cache_hash h = root;
            for (int b = 0; b <= 7; b++) cache_hash_block(&h, &h, toks + b * B, B);
            char path[4200];
            disk_file_path(dir, &h, path, sizeof path, NULL, 0);
            FILE *f = fopen(path, "r+b");
            CHECK(f != NULL);
            fseek(f, -8, SEEK_END);
            fputc(0x5a ^ fgetc(f), f);
            fclose(f);
        }
        disk_close(d);
    }
    test_tmpdir_free(dir);
}

/* Attaches toks[0..n_max) from disk in a fresh pool (the two-step form when
 * async) and checks what came back, bit for bit. */
static void restore_and_check(const char *dir, const int32_t *toks, int n_max, int async, int want) {
    kv_pool p;
    cache_store *c;
    cache_hash root;
    disk_store *d = setup_with_disk(&p, &c, &root, 16, dir);
    kv_seq s;
    kv_seq_init(&s);
    cursor cur;
    cursor_init(c, &cur, &root);
    int from_disk = -1, got;
    if (!async) {
        got = attach(c, &cur, toks, n_max, &s, &from_disk);
    } else {
        got = store_attach_begin(c, &cur.q, toks, n_max, n_max, &s);
        CHECK(store_loading(&cur.q));
        if (store_loading(&cur.q)) got = store_attach_end(c, &cur.q, toks, n_max, n_max, &s);
        from_disk = cur.q.n_cached_lower;
    }
    CHECK_EQ_INT(got, want);
    CHECK_EQ_INT(from_disk, want);
    CHECK_EQ_INT(s.n_blocks, (want + B - 1) / B);
    for (int i = 0; i < got; i++) CHECK_EQ_INT(kv_rows(&p, s.blocks[i / B], 0, 0)[(i % B) * 2], toks[i]);
    done(c, &cur, toks, &s);
    kv_seq_release(&p, &s);
    disk_close(d);
    teardown(&p, c);
}

/* After a restart a prompt resumes at token granularity from disk too: a
 * finished request's tail (its partial last block) is stored, and a
 * stored full block serves the part of it a prompt matches. */
TEST(live_restores_tails_and_partial_blocks_from_disk) {
    char *dir = test_tmpdir_new();
    int32_t toks[4 * B];
    for (int i = 0; i < 4 * B; i++) toks[i] = 100 + i;
    kv_pool p;
    cache_store *c;
    cache_hash root;
    disk_store *d = setup_with_disk(&p, &c, &root, 16, dir);
    finish_request(&p, c, &root, toks, 3 * B + 2); /* 3 blocks and a tail of 2 */
    disk_close(d);
    teardown(&p, c);

    restore_and_check(dir, toks, 3 * B + 2, 0, 3 * B + 2); /* the next turn: all of it */
    restore_and_check(dir, toks, 3 * B + 1, 1, 3 * B + 1); /* a re-sent prompt, read in the background */
    restore_and_check(dir, toks, 3 * B - 1, 0, 3 * B - 1); /* block 2 in part: one token left to compute */
    int32_t other[3 * B + 2];
    memcpy(other, toks, sizeof other);
    other[3 * B + 1] = 7; /* leaves the tail after its first token */
    restore_and_check(dir, other, 3 * B + 2, 0, 3 * B + 1);
    test_tmpdir_free(dir);
}

static int count_files(disk_store *d) {
    disk_stats st;
    disk_get_stats(d, &st);
    return (int)(st.files + st.pending);
}

/* A stored tail goes when a longer tail or a full block holds it whole. */
TEST(live_superseded_tails_leave_the_disk) {
    char *dir = test_tmpdir_new();
    int32_t toks[3 * B];
    for (int i = 0; i < 3 * B; i++) toks[i] = 100 + i;
    kv_pool p;
    cache_store *c;
    cache_hash root;
    disk_store *d = setup_with_disk(&p, &c, &root, 16, dir);
    finish_request(&p, c, &root, toks, B + 1);
    disk_flush(d);
    CHECK_EQ_INT(count_files(d), 2);
    finish_request(&p, c, &root, toks, B + 3); /* the longer tail replaces it */
    disk_flush(d);
    CHECK_EQ_INT(count_files(d), 2);
    finish_request(&p, c, &root, toks, 2 * B); /* a full block replaces that */
    disk_flush(d);
    CHECK_EQ_INT(count_files(d), 2);
    cache_hash h1, best;
    int n_tok = 0;
    cache_hash_block(&h1, &root, toks, B);
    CHECK_EQ_INT(disk_best_child(d, &h1, toks + B, B, &best, &n_tok), B);
    CHECK_EQ_INT(n_tok, B);
    disk_stats st;
    disk_get_stats(d, &st);
    CHECK_EQ_INT((int)st.superseded, 2);
    disk_close(d);
    teardown(&p, c);
    test_tmpdir_free(dir);
}

/* A retention mark the disk remembers comes back with the blocks: after a
 * restart, restored anchor blocks outlast newer unmarked ones in the pool. */
TEST(live_restored_blocks_keep_their_retention) {
    char *dir = test_tmpdir_new();
    int32_t anchor[2 * B], x[2 * B], y[2 * B];
    for (int i = 0; i < 2 * B; i++) anchor[i] = 10 + i, x[i] = 50 + i, y[i] = 90 + i;
    kv_pool p;
    cache_store *c;
    cache_hash root;
    disk_store *d = setup_with_disk(&p, &c, &root, 8, dir);
    kv_seq s;
    kv_seq_init(&s);
    cursor cur;
    cursor_init(c, &cur, &root);
    compute(&p, &s, anchor, 2 * B);
    store_publish(c, &cur.q, anchor, &s);
    retain(c, &cur, anchor, &s, 2 * B, 3600);
    kv_seq_release(&p, &s);
    disk_close(d);
    teardown(&p, c);

    d = setup_with_disk(&p, &c, &root, 4, dir);
    int from_disk = 0;
    kv_seq_init(&s);
    cursor_init(c, &cur, &root);
    CHECK_EQ_INT(attach(c, &cur, anchor, 2 * B, &s, &from_disk), 2 * B);
    CHECK_EQ_INT(from_disk, 2 * B);
    done(c, &cur, anchor, &s);
    kv_seq_release(&p, &s);
    finish_request(&p, c, &root, x, 2 * B); /* fills the pool */
    finish_request(&p, c, &root, y, 2 * B); /* x goes, not the anchor */
    kv_seq_init(&s);
    cursor_init(c, &cur, &root);
    CHECK_EQ_INT(attach(c, &cur, anchor, 2 * B, &s, &from_disk), 2 * B);
    CHECK_EQ_INT(from_disk, 0);
    done(c, &cur, anchor, &s);
    kv_seq_release(&p, &s);
    disk_close(d);
    teardown(&p, c);
    test_tmpdir_free(dir);
}
