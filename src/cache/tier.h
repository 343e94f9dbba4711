/* tier.h - a tier below the live pool, as the store (store.h) sees it.
 *
 * The disk tier (disk_tier.c), the tier shared between replicas on Redis
 * (redis_tier.c), a RAM tier tomorrow: each is a set of blocks named by their chain hash
 * (hash.h) holding the same payload as a pool block, so moving a block
 * between tiers is a copy. The store walks the tiers in the order they
 * were added, reads runs of blocks from the first one that has them,
 * falls back to the next when a read fails, and writes every published
 * block through to all of them.
 *
 * Every call may come from any thread (reads run on the store's loader
 * thread). A tier keeps its own budget and evicts on its own, ordering its
 * blocks by the policy's one formula (policy_value, policy_evict_key);
 * it never decides what is worth keeping longer: retain() tells it.
 * Does not: know the live pool, requests or the scheduler. */
#ifndef STRATA_CACHE_TIER_H
#define STRATA_CACHE_TIER_H

#include <stdint.h>

#include "cache/hash.h"

typedef struct cache_tier {
    const char *name; /* for logs and the trace: "disk", ... */
    void *self;
    /* 1 when the block is held (or being written). */
    int (*has)(void *self, const cache_hash *h);
    /* Optional (NULL: has() one by one): how many of h[0..n), from the
     * first, are held; a remote tier answers a run in one round trip. */
    int (*has_run)(void *self, const cache_hash *h, int n);
    /* The held block continuing parent (a tail, or a full block matching
     * in part) that shares the longest prefix with tokens[0..n): returns
     * that length (0: none), its hash and token count. */
    int (*best_child)(void *self, const cache_hash *parent, const int32_t *tokens, int n, cache_hash *h,
                      int *n_tokens);
    /* Reads n blocks into dst[i] (a pool block's bytes) and their token ids
     * into tokens_out[i]; rc[i] 0 or a negative STRATA_E* per block, and a
     * failed block's dst zeroed. Returns how many from the first loaded. */
    int (*read_many)(void *self, const cache_hash *h, void *const *dst, int32_t *const *tokens_out, int n, int *rc);
    /* Stores a copy of a block of n_tokens (B, or fewer: a tail) and
     * returns at once; 0 when stored or already held, < 0 when dropped. */
    int (*write)(void *self, const cache_hash *h, const cache_hash *parent, const int32_t *tokens, int n_tokens,
                 const void *kv);
    /* After a write of tokens[0..n) under parent: drops the held tails
     * that block now holds whole. */
    int (*drop_superseded)(void *self, const cache_hash *parent, const int32_t *tokens, int n);
    /* A hit served by a tier above: recency and hit count. */
    void (*touch)(void *self, const cache_hash *h);
    /* Retention mark: kept behind every unmarked block until ttl_s from now. */
    void (*retain)(void *self, const cache_hash *h, double ttl_s);
    /* Seconds the block's mark has left (0: none), carried up on a read. */
    double (*retained_s)(void *self, const cache_hash *h);
    /* Recurrent-state snapshots (snapshot.h); all NULL: this tier keeps
     * none. A copy of the state (n floats) at the position named by
     * key: r tokens past boundary (tokens: those r). 0 stored or held. */
    int (*snap_write)(void *self, const cache_hash *key, const cache_hash *boundary, const int32_t *tokens, int r,
                      const float *state, size_t n);
    /* Reads it back verified into dst (n floats); < 0 (dst zeroed) when
     * missing, damaged or not of this shape. */
    int (*snap_read)(void *self, const cache_hash *key, float *dst, size_t n);
    /* Calls fn for every snapshot held (the store indexes them once, when
     * the tier is added). */
    void (*snap_list)(void *self, void (*fn)(void *ctx, const cache_hash *key, const cache_hash *boundary, int r),
                      void *ctx);
    /* Optional: a retention mark on the snapshot (key, filed under
     * boundary), kept at least ttl_s from now, as retain() for a block. */
    void (*snap_retain)(void *self, const cache_hash *key, const cache_hash *boundary, double ttl_s);
    /* Optional: seconds its mark has left (0: none), carried into memory
     * when the store lists the tier's snapshots at start. */
    double (*snap_retained_s)(void *self, const cache_hash *key);
    /* Optional, for a tier others write to (shared): the snapshots filed
     * under each of boundaries[0..n), asked when a request looks for one. */
    void (*snap_probe)(void *self, const cache_hash *boundaries, int n,
                       void (*fn)(void *ctx, const cache_hash *key, const cache_hash *boundary, int r), void *ctx);
} cache_tier;

#endif
