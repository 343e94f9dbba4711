/* live.h - the live tier's index: full KV blocks in the compute pool,
 * named by their chained hash, shared by every sequence whose prompt
 * starts with the same tokens, and the partial last blocks (tails) of
 * finished sequences, matched at token granularity.
 *
 * The store (store.h) walks the tiers and decides when a block joins,
 * is attached or is retained; this file only keeps the index and the
 * per-block records, and gives the pool back its idle blocks when it runs
 * dry: a leaf (no cached block continues it), the one policy.h values
 * least, retained blocks last. Attached blocks are shared and copied
 * before any write (the pool's keeper hooks).
 * Does not: hash tokens, read or write other tiers, decide what is worth
 * keeping (policy.c). */
#ifndef STRATA_CACHE_LIVE_H
#define STRATA_CACHE_LIVE_H

#include <stdint.h>

#include "cache/hash.h"
#include "model/kv.h"

typedef struct live_cache live_cache;

typedef struct live_stats {
    long evicted_blocks;
    long evicted_retained;    /* of evicted_blocks, still within a retention mark */
    int cached_blocks, idle_blocks, tails;
} live_stats;

/* Takes over the pool's keeper hooks. attn_per_pos: attention's cost per
 * earlier position (policy_attn_cost_per_pos), for policy_value. */
live_cache *live_new(kv_pool *kv, double attn_per_pos);
void live_free(live_cache *c); /* NULL is fine; restores the hooks */
/* fn(ctx, h) is told the chain hash naming each block or tail evicted
 * (the store drops the snapshot attached to its end with it). */
void live_on_evict(live_cache *c, void (*fn)(void *ctx, const cache_hash *h), void *ctx);
/* fn(ctx, b, h, prev, tokens, n) is told of each block or tail about to be
 * evicted while pool block b still holds its payload (the store moves it
 * down a tier first when the pool is on a device). */
typedef void (*live_spill_fn)(void *ctx, int b, const cache_hash *h, const cache_hash *prev, const int32_t *tokens,
                              int n);
void live_on_spill(live_cache *c, live_spill_fn fn, void *ctx);

/* The pool block indexed under h, or -1. */
int live_find(const live_cache *c, const cache_hash *h);
/* 1 when pool block b is cached (indexed, or a tail). */
int live_is_cached(const live_cache *c, int b);
/* The name tiers know cached block b by (its index hash, or a tail's
 * hash) and its tokens; returns how many (0: b is not cached). */
int live_name(const live_cache *c, int b, cache_hash *h, const int32_t **tokens);

/* Attaches cached full block b to s as a hit (s ends on a block edge). */
void live_attach(live_cache *c, int b, kv_seq *s);
/* The cached block after chain hash prev (a tail, or a full block that
 * matches only in part) whose tokens match most of tokens[0..n); that
 * length in *len; -1 when none. */
int live_best_partial(const live_cache *c, const cache_hash *prev, const int32_t *tokens, int n, int *len);
/* Attaches b's first len positions to s as a hit (shared: the first write
 * copies it). */
void live_attach_part(live_cache *c, int b, kv_seq *s, int len);

/* Block bi of s, holding n tokens after chain hash prev, joins the cache:
 * indexed under h when full (h NULL: a tail), kept at least keep_s
 * seconds (0: no mark). Returns 0, or -1 when h is already indexed or the
 * block already cached (never stored twice). */
int live_add(live_cache *c, const kv_seq *s, int bi, const cache_hash *h, const cache_hash *prev,
             const int32_t *tokens, int n, double keep_s);
/* At the end of a request: s's partial last block (n tokens after prev,
 * n < B) becomes a tail unless a cached block already holds those tokens;
 * kept tails it extends go. 1 when kept. */
int live_keep_tail(live_cache *c, const kv_seq *s, const cache_hash *prev, const int32_t *tokens, int n);

/* Keeps cached block b at least ttl_s from now. Returns its hash when it
 * is an indexed full block (so the tiers below keep it too), else NULL. */
const cache_hash *live_retain(live_cache *c, int b, double ttl_s);

void live_get_stats(const live_cache *c, live_stats *out);

#endif
