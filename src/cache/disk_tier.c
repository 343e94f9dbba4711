/* disk_tier.c - the disk store behind the tier interface (tier.h). */
#include "cache/disk_tier.h"

static int has(void *d, const cache_hash *h) { return disk_has(d, h); }

static int best_child(void *d, const cache_hash *parent, const int32_t *tokens, int n, cache_hash *h, int *n_tokens) {
    return disk_best_child(d, parent, tokens, n, h, n_tokens);
}

static int read_many(void *d, const cache_hash *h, void *const *dst, int32_t *const *tokens_out, int n, int *rc) {
    return disk_get_many(d, h, dst, tokens_out, n, rc);
}

static int write(void *d, const cache_hash *h, const cache_hash *parent, const int32_t *tokens, int n_tokens,
                 const void *kv) {
    return disk_put_n(d, h, parent, tokens, n_tokens, kv);
}

static int drop_superseded(void *d, const cache_hash *parent, const int32_t *tokens, int n) {
    return disk_drop_tails(d, parent, tokens, n);
}

static void touch(void *d, const cache_hash *h) { disk_touch(d, h); }

static void retain(void *d, const cache_hash *h, double ttl_s) { disk_retain(d, h, ttl_s); }

static double retained_s(void *d, const cache_hash *h) { return disk_retained_s(d, h); }

static int snap_write(void *d, const cache_hash *key, const cache_hash *boundary, const int32_t *tokens, int r,
                      const float *state, size_t n) {
    return disk_snap_put(d, key, boundary, tokens, r, state, n);
}

static int snap_read(void *d, const cache_hash *key, float *dst, size_t n) { return disk_snap_get(d, key, dst, n); }

static void snap_retain(void *d, const cache_hash *key, const cache_hash *boundary, double ttl_s) {
    disk_snap_retain(d, key, ttl_s);
}

static double snap_retained_s(void *d, const cache_hash *key) { return disk_snap_retained_s(d, key); }

static void snap_list(void *d, void (*fn)(void *ctx, const cache_hash *key, const cache_hash *boundary, int r),
                      void *ctx) {
    disk_snap_foreach(d, fn, ctx);
}

cache_tier disk_tier(disk_store *d) {
    return (cache_tier){.name = "disk", .self = d, .has = has, .best_child = best_child, .read_many = read_many,
                        .write = write, .drop_superseded = drop_superseded, .touch = touch, .retain = retain,
                        .retained_s = retained_s, .snap_write = snap_write, .snap_read = snap_read,
                        .snap_retain = snap_retain, .snap_retained_s = snap_retained_s,
                        .snap_list = snap_list};
}
