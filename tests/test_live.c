/* test_live.c - the live prefix tier: publish, attach, idle LRU, eviction
 * under pressure, and published blocks never written in place. */
#include <limits.h>
#include <string.h>

#include "cache/live.h"
#include "test.h"

#define B 4

static void setup(kv_pool *p, live_cache **c, cache_hash *root, int n_blocks) {
    kv_pool_init(p, 1, 2, B, n_blocks, NULL);
    *c = live_new(p);
    uint8_t fp[32] = {1};
    cache_hash_root(root, fp, "", 0);
}

/* A sequence "computed" for tokens: blocks reserved, positions filled. */
static void compute(kv_pool *p, kv_seq *s, const int32_t *toks, int n) {
    kv_seq_reserve(p, s, n, NULL);
    for (int i = s->n_pos; i < n; i++) kv_rows(p, s->blocks[i / B], 0, 0)[(i % B) * 2] = (uint16_t)toks[i];
    s->n_pos = n;
}

TEST(live_publish_then_attach_longest_prefix) {
    kv_pool p;
    live_cache *c;
    cache_hash root;
    setup(&p, &c, &root, 16);
    int32_t a[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, b[10] = {1, 2, 3, 4, 5, 6, 0, 0, 0, 0};
    kv_seq s1, s2;
    kv_seq_init(&s1);
    live_cursor c1, c2;
    live_cursor_init(&c1, &root);
    compute(&p, &s1, a, 10);
    live_publish(c, &c1, a, &s1, INT_MAX);
    CHECK_EQ_INT(c1.n_blocks, 2); /* positions 0..7 are two full blocks */
    kv_seq_init(&s2);
    live_cursor_init(&c2, &root);
    CHECK_EQ_INT(live_attach(c, &c2, b, 9, &s2, NULL), 4); /* block 1 differs at token 6 */
    CHECK_EQ_INT(s2.blocks[0], s1.blocks[0]);
    CHECK_EQ_INT(p.refcount[s1.blocks[0]], 2);
    kv_seq_release(&p, &s1);
    kv_seq_release(&p, &s2);
    live_stats st;
    live_get_stats(c, &st);
    CHECK_EQ_INT(st.idle_blocks, 2); /* both published blocks stay cached */
    live_free(c);
    CHECK_EQ_INT(p.n_free, 16);
    kv_pool_destroy(&p);
}

TEST(live_idle_blocks_are_reclaimed_oldest_first) {
    kv_pool p;
    live_cache *c;
    cache_hash root;
    setup(&p, &c, &root, 4);
    int32_t x[4] = {1, 1, 1, 1}, y[4] = {2, 2, 2, 2}, z[12] = {0};
    kv_seq s;
    live_cursor cur;
    for (int k = 0; k < 2; k++) {
        kv_seq_init(&s);
        live_cursor_init(&cur, &root);
        compute(&p, &s, k ? y : x, 4);
        live_publish(c, &cur, k ? y : x, &s, INT_MAX);
        kv_seq_release(&p, &s);
    }
    kv_seq_init(&s); /* needs 3 of 4 blocks: 2 free + the oldest idle one */
    compute(&p, &s, z, 12);
    CHECK_EQ_INT(s.n_blocks, 3);
    kv_seq_release(&p, &s);
    kv_seq t;
    kv_seq_init(&t);
    live_cursor_init(&cur, &root);
    CHECK_EQ_INT(live_attach(c, &cur, x, 4, &t, NULL), 0); /* x was evicted */
    kv_seq_release(&p, &t);
    kv_seq_init(&t);
    live_cursor_init(&cur, &root);
    CHECK_EQ_INT(live_attach(c, &cur, y, 4, &t, NULL), 4); /* y, newer, survived */
    kv_seq_release(&p, &t);
    live_free(c);
    kv_pool_destroy(&p);
}

TEST(live_published_block_is_copied_before_rewrite) {
    kv_pool p;
    live_cache *c;
    cache_hash root;
    setup(&p, &c, &root, 8);
    int32_t a[4] = {7, 7, 7, 7};
    kv_seq s;
    kv_seq_init(&s);
    live_cursor cur;
    live_cursor_init(&cur, &root);
    compute(&p, &s, a, 4);
    live_publish(c, &cur, a, &s, INT_MAX);
    int published = s.blocks[0];
    kv_seq_truncate(&p, &s, 2); /* rewind into the published block... */
    kv_seq_reserve(&p, &s, 3, NULL); /* ...and write position 2 */
    CHECK(s.blocks[0] != published);
    kv_seq_release(&p, &s);
    live_free(c);
    kv_pool_destroy(&p);
}

TEST(live_different_roots_never_share) {
    kv_pool p;
    live_cache *c;
    cache_hash root, other;
    setup(&p, &c, &root, 8);
    uint8_t fp[32] = {1};
    cache_hash_root(&other, fp, "tenant-b", 8);
    int32_t a[4] = {3, 3, 3, 3};
    kv_seq s, t;
    kv_seq_init(&s);
    live_cursor cur;
    live_cursor_init(&cur, &root);
    compute(&p, &s, a, 4);
    live_publish(c, &cur, a, &s, INT_MAX);
    kv_seq_init(&t);
    live_cursor_init(&cur, &other);
    CHECK_EQ_INT(live_attach(c, &cur, a, 4, &t, NULL), 0);
    kv_seq_release(&p, &s);
    kv_seq_release(&p, &t);
    live_free(c);
    kv_pool_destroy(&p);
}
