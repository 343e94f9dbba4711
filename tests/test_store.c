/* test_store.c - the block store's walk over its tiers, with no model and
 * no disk: fake tiers that count what they are asked. Proves the walk
 * order (live pool, then each tier in turn), one hash per block per
 * request, a failed tier read falling back to the next tier, and a read
 * that overlaps other sequences' compute. */
#include <pthread.h>
#include <sched.h>
#include <string.h>

#include "cache/store.h"
#include "test.h"

#define B 4
#define FAKE_MAX 32
#define BLOCK_BYTES 64 /* >= the pool's block_bytes for 1 layer, kv_dim 2 */

/* A tier in memory. Blocks listed in fail[] are "held" but every read of
 * them fails; while gated, reads wait until the gate opens. */
typedef struct fake_tier {
    int n;
    cache_hash h[FAKE_MAX], parent[FAKE_MAX];
    int32_t tok[FAKE_MAX][B];
    int n_tok[FAKE_MAX], fail[FAKE_MAX];
    uint8_t kv[FAKE_MAX][BLOCK_BYTES];
    size_t bytes;
    int blocks_read, reads_failed, writes, touches;
    int gated;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} fake_tier;

static int fake_find(const fake_tier *f, const cache_hash *h) {
    for (int i = 0; i < f->n; i++)
        if (memcmp(f->h[i].b, h->b, 32) == 0) return i;
    return -1;
}

static int fake_has(void *self, const cache_hash *h) { return fake_find(self, h) >= 0; }

static int fake_best_child(void *self, const cache_hash *parent, const int32_t *tokens, int n, cache_hash *h,
                           int *n_tokens) {
    fake_tier *f = self;
    int best = 0;
    for (int i = 0; i < f->n; i++) {
        if (memcmp(f->parent[i].b, parent->b, 32) != 0) continue;
        int m = 0;
        while (m < f->n_tok[i] && m < n && f->tok[i][m] == tokens[m]) m++;
        if (m > best) best = m, *h = f->h[i], *n_tokens = f->n_tok[i];
    }
    return best;
}

static int fake_read_many(void *self, const cache_hash *h, void *const *dst, int32_t *const *tok, int n, int *rc) {
    fake_tier *f = self;
    pthread_mutex_lock(&f->mu);
    while (f->gated) pthread_cond_wait(&f->cv, &f->mu);
    int ok = 0, prefix = 1;
    for (int k = 0; k < n; k++) {
        int i = fake_find(f, &h[k]);
        rc[k] = i < 0 || f->fail[i] ? STRATA_EIO : 0;
        if (rc[k]) {
            memset(dst[k], 0, f->bytes);
            f->reads_failed++;
            prefix = 0;
            continue;
        }
        memcpy(dst[k], f->kv[i], f->bytes);
        memcpy(tok[k], f->tok[i], (size_t)f->n_tok[i] * sizeof(int32_t));
        f->blocks_read++;
        ok += prefix;
    }
    pthread_mutex_unlock(&f->mu);
    return ok;
}

static int fake_write(void *self, const cache_hash *h, const cache_hash *parent, const int32_t *tokens, int n,
                      const void *kv) {
    fake_tier *f = self;
    pthread_mutex_lock(&f->mu);
    f->writes++;
    if (fake_find(f, h) < 0 && f->n < FAKE_MAX) {
        int i = f->n++;
        f->h[i] = *h, f->parent[i] = *parent, f->n_tok[i] = n, f->fail[i] = 0;
        memcpy(f->tok[i], tokens, (size_t)n * sizeof(int32_t));
        memcpy(f->kv[i], kv, f->bytes);
    }
    pthread_mutex_unlock(&f->mu);
    return 0;
}

static int fake_drop(void *self, const cache_hash *parent, const int32_t *tokens, int n) { return 0; }
static void fake_touch(void *self, const cache_hash *h) { ((fake_tier *)self)->touches++; }
static void fake_retain(void *self, const cache_hash *h, double ttl_s) {}
static double fake_retained_s(void *self, const cache_hash *h) { return 0; }

static cache_tier fake_as_tier(fake_tier *f, size_t bytes) {
    memset(f, 0, sizeof *f);
    f->bytes = bytes;
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    return (cache_tier){.name = "fake", .self = f, .has = fake_has, .best_child = fake_best_child,
                        .read_many = fake_read_many, .write = fake_write, .drop_superseded = fake_drop,
                        .touch = fake_touch, .retain = fake_retain, .retained_s = fake_retained_s};
}

static void fake_open_gate(fake_tier *f) {
    pthread_mutex_lock(&f->mu);
    f->gated = 0;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

/* ---- fixture ------------------------------------------------------------------ */

typedef struct fixture {
    kv_pool p;
    cache_store *st;
    store_request rq;
    fake_tier a, b;
} fixture;

static void fixture_init(fixture *x, int n_blocks, int n_tiers) {
    kv_pool_init(&x->p, 1, 2, B, n_blocks, NULL);
    CHECK(x->p.block_bytes <= BLOCK_BYTES);
    store_opts o = {.default_scope = {SCOPE_FULL, 0}};
    memset(o.model_fp, 3, 32);
    x->st = store_new(&x->p, &o);
    store_root(x->st, NULL, "", &x->rq.root);
    x->rq.scope = (cache_scope){SCOPE_FULL, 0};
    cache_tier ta = fake_as_tier(&x->a, x->p.block_bytes), tb = fake_as_tier(&x->b, x->p.block_bytes);
    if (n_tiers > 0) store_add_tier(x->st, &ta);
    if (n_tiers > 1) store_add_tier(x->st, &tb);
}

static void fixture_free(fixture *x) {
    store_free(x->st);
    CHECK_EQ_INT(x->p.n_free, x->p.n_blocks); /* every block went back */
    kv_pool_destroy(&x->p);
}

/* Position i of a block holds token i's id in its first K row: what a
 * "computed" sequence looks like, so restored data can be checked. */
static void compute(kv_pool *p, kv_seq *s, const int32_t *toks, int n) {
    kv_seq_reserve(p, s, n, NULL);
    for (int i = s->n_pos; i < n; i++) kv_rows(p, s->blocks[i / B], 0, 0)[(i % B) * 2] = (uint16_t)toks[i];
    s->n_pos = n;
}

static int holds(const kv_pool *p, const kv_seq *s, const int32_t *toks, int n) {
    for (int i = 0; i < n; i++)
        if (kv_rows(p, s->blocks[i / B], 0, 0)[(i % B) * 2] != (uint16_t)toks[i]) return 0;
    return 1;
}

/* Computes toks[0..n) in a scratch pool and writes its whole blocks from
 * `from` to `to` into tier f, as a tier that has seen them would hold
 * them. */
static void tier_holds(fixture *x, fake_tier *f, const int32_t *toks, int from, int to) {
    kv_pool p;
    kv_pool_init(&p, 1, 2, B, to + 1, NULL);
    kv_seq s;
    kv_seq_init(&s);
    compute(&p, &s, toks, to * B);
    cache_hash prev = x->rq.root, h;
    for (int i = 0; i < to; i++, prev = h) {
        cache_hash_block(&h, &prev, toks + i * B, B);
        if (i >= from) fake_write(f, &h, &prev, toks + i * B, B, kv_rows(&p, s.blocks[i], 0, 0));
    }
    f->writes = 0;
    kv_seq_release(&p, &s);
    kv_pool_destroy(&p);
}

/* Computes toks[0..n) in the store's own pool and publishes it (the live
 * tier then holds its whole blocks). */
static void live_holds(fixture *x, const int32_t *toks, int n) {
    kv_seq s;
    kv_seq_init(&s);
    store_seq q;
    store_seq_init(x->st, &q, &x->rq);
    compute(&x->p, &s, toks, n);
    store_publish(x->st, &q, toks, &s);
    store_finish(x->st, &q, toks, &s, 0);
    kv_seq_release(&x->p, &s);
}

static void tokens(int32_t *t, int n, int base) {
    for (int i = 0; i < n; i++) t[i] = base + i;
}

/* ---- tests -------------------------------------------------------------------- */

TEST(store_walks_the_live_pool_then_each_tier_in_order) {
    fixture x;
    fixture_init(&x, 16, 2);
    int32_t t[4 * B + 1];
    tokens(t, 4 * B + 1, 200);
    live_holds(&x, t, B);            /* block 0 in memory */
    x.a.writes = x.b.writes = 0;
    tier_holds(&x, &x.a, t, 1, 2);   /* block 1 in the first tier */
    tier_holds(&x, &x.b, t, 1, 4);   /* blocks 1-3 in the second */
    kv_seq s;
    kv_seq_init(&s);
    store_seq q;
    store_seq_init(x.st, &q, &x.rq);
    CHECK_EQ_INT(store_attach(x.st, &q, t, 4 * B + 1, 4 * B + 1, &s), 4 * B);
    CHECK_EQ_INT(q.n_cached_lower, 3 * B);
    CHECK_EQ_INT(x.a.blocks_read, 1);  /* block 1 from the first tier that has it */
    CHECK_EQ_INT(x.b.blocks_read, 2);  /* blocks 2-3, which only the second has */
    CHECK_EQ_INT(x.a.touches, 1);      /* the live hit on block 0 is heard below */
    CHECK(holds(&x.p, &s, t, 4 * B));  /* bit for bit */
    store_stats ss;
    store_get_stats(x.st, &ss);
    CHECK_EQ_INT(ss.lower_hit_tokens, 3 * B);
    CHECK_EQ_INT(ss.hit_tokens, B);
    store_finish(x.st, &q, t, &s, 0);
    kv_seq_release(&x.p, &s);
    fixture_free(&x);
}

TEST(store_hashes_each_block_once_per_request) {
    fixture x;
    fixture_init(&x, 32, 1);
    int32_t t[8 * B + 2];
    tokens(t, 8 * B + 2, 500);
    live_holds(&x, t, 2 * B);           /* blocks 0-1 in memory */
    tier_holds(&x, &x.a, t, 2, 4);      /* blocks 2-3 below */
    store_stats before, after;
    store_get_stats(x.st, &before);
    kv_seq s;
    kv_seq_init(&s);
    store_seq q;
    store_seq_init(x.st, &q, &x.rq);
    int prompt = 6 * B + 1;             /* then 5 generated tokens */
    CHECK_EQ_INT(store_attach(x.st, &q, t, prompt, prompt - 1, &s), 4 * B);
    compute(&x.p, &s, t, prompt);
    store_publish(x.st, &q, t, &s);
    compute(&x.p, &s, t, 8 * B + 2);
    store_publish(x.st, &q, t, &s);
    CHECK_EQ_INT(q.n_blocks, 8);
    CHECK_EQ_INT(q.n_hashes, 8);        /* lookup, run, partial check and publish shared one chain */
    store_finish(x.st, &q, t, &s, 1);
    CHECK_EQ_INT(q.n_hashes, 9);        /* and the tail, named once for the tier */
    store_get_stats(x.st, &after);
    CHECK_EQ_INT(after.hashes - before.hashes, 9);
    CHECK_EQ_INT(x.a.writes, 5);        /* blocks 4-7 and the tail written through */
    kv_seq_release(&x.p, &s);
    fixture_free(&x);
}

TEST(store_failed_tier_read_falls_back_to_the_next_tier) {
    fixture x;
    fixture_init(&x, 16, 2);
    int32_t t[3 * B + 1];
    tokens(t, 3 * B + 1, 900);
    tier_holds(&x, &x.a, t, 0, 3);
    tier_holds(&x, &x.b, t, 0, 3);
    x.a.fail[1] = 1;                    /* the first tier's block 1 is unreadable */
    kv_seq s;
    kv_seq_init(&s);
    store_seq q;
    store_seq_init(x.st, &q, &x.rq);
    CHECK_EQ_INT(store_attach(x.st, &q, t, 3 * B + 1, 3 * B, &s), 3 * B);
    CHECK_EQ_INT(x.a.reads_failed, 1);
    CHECK_EQ_INT(x.a.blocks_read, 2);
    CHECK_EQ_INT(x.b.blocks_read, 1);   /* block 1 came from the second tier */
    CHECK(holds(&x.p, &s, t, 3 * B));
    store_finish(x.st, &q, t, &s, 0);
    kv_seq_release(&x.p, &s);
    fixture_free(&x);

    /* Unreadable everywhere: the prefix ends before it. */
    fixture_init(&x, 16, 2);
    tier_holds(&x, &x.a, t, 0, 3);
    tier_holds(&x, &x.b, t, 0, 3);
    x.a.fail[1] = x.b.fail[1] = 1;
    kv_seq_init(&s);
    store_seq_init(x.st, &q, &x.rq);
    CHECK_EQ_INT(store_attach(x.st, &q, t, 3 * B + 1, 3 * B, &s), B);
    CHECK(holds(&x.p, &s, t, B));
    CHECK_EQ_INT(s.n_blocks, 1);        /* reserved blocks past the prefix went back */
    store_stats ss;
    store_get_stats(x.st, &ss);
    CHECK_EQ_INT(ss.load_errors, 1);
    store_finish(x.st, &q, t, &s, 0);
    kv_seq_release(&x.p, &s);
    fixture_free(&x);
}

TEST(store_tier_read_overlaps_other_sequences_compute) {
    fixture x;
    fixture_init(&x, 32, 1);
    int32_t t[4 * B + 1], u[3 * B];
    tokens(t, 4 * B + 1, 300);
    tokens(u, 3 * B, 7000);
    tier_holds(&x, &x.a, t, 0, 4);
    x.a.gated = 1;                      /* the tier answers only when told */
    kv_seq s, other;
    kv_seq_init(&s);
    kv_seq_init(&other);
    store_seq q, qo;
    store_seq_init(x.st, &q, &x.rq);
    CHECK_EQ_INT(store_attach_begin(x.st, &q, t, 4 * B + 1, 4 * B, &s), 0);
    CHECK(store_loading(&q));
    CHECK(!store_load_ready(&q));
    /* Meanwhile another request looks up, computes and publishes. */
    store_seq_init(x.st, &qo, &x.rq);
    CHECK_EQ_INT(store_attach(x.st, &qo, u, 3 * B, 3 * B, &other), 0);
    compute(&x.p, &other, u, 3 * B);
    store_publish(x.st, &qo, u, &other);
    CHECK_EQ_INT(qo.n_blocks, 3);
    CHECK(!store_load_ready(&q));       /* still reading all along */
    fake_open_gate(&x.a);
    while (!store_load_ready(&q)) sched_yield();
    CHECK_EQ_INT(store_attach_end(x.st, &q, t, 4 * B + 1, 4 * B, &s), 4 * B);
    CHECK(holds(&x.p, &s, t, 4 * B));
    CHECK(holds(&x.p, &other, u, 3 * B));
    store_finish(x.st, &qo, u, &other, 0);
    store_finish(x.st, &q, t, &s, 0);
    kv_seq_release(&x.p, &other);
    kv_seq_release(&x.p, &s);
    fixture_free(&x);
}

/* A prompt shorter than one block, sent again after a restart: the lower
 * tier holds only its tail (a partial block under the root), so the read
 * is 0 whole blocks plus the tail (once a zero-length copy from a NULL
 * run, undefined behaviour that UBSan reports: make test-asan). */
TEST(store_tail_only_hit_from_a_lower_tier) {
    fixture x;
    fixture_init(&x, 8, 1);
    int32_t t[B - 1];
    tokens(t, B - 1, 40);
    kv_pool p;
    kv_pool_init(&p, 1, 2, B, 2, NULL);
    kv_seq w;
    kv_seq_init(&w);
    compute(&p, &w, t, B - 1);
    cache_hash h;
    cache_hash_block(&h, &x.rq.root, t, B - 1);
    fake_write(&x.a, &h, &x.rq.root, t, B - 1, kv_rows(&p, w.blocks[0], 0, 0));
    kv_seq_release(&p, &w);
    kv_pool_destroy(&p);
    kv_seq s;
    kv_seq_init(&s);
    store_seq q;
    store_seq_init(x.st, &q, &x.rq);
    CHECK_EQ_INT(store_attach(x.st, &q, t, B - 1, B - 2, &s), B - 2);
    CHECK_EQ_INT(x.a.blocks_read, 1);
    CHECK(holds(&x.p, &s, t, B - 2));
    store_finish(x.st, &q, t, &s, 0);
    kv_seq_release(&x.p, &s);
    fixture_free(&x);
}
