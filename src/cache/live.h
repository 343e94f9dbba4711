/* live.h - the live tier: full KV blocks in the compute pool, named by
 * their chained hash, shared by every sequence whose prompt starts with
 * the same tokens.
 *
 * A sequence's full blocks are published under their hash as they fill.
 * A new sequence attaches the longest chain of published blocks matching
 * its prompt and prefills only the rest. Blocks no sequence uses stay in
 * memory (least recently used first out) until the pool needs the space.
 * Cached KV is bit-identical to recomputing it: the forward pass is batch
 * invariant, so where a block was computed does not matter.
 * Does not: write to RAM or disk tiers (later), decide retention policy. */
#ifndef STRATA_CACHE_LIVE_H
#define STRATA_CACHE_LIVE_H

#include <stdint.h>

#include "cache/disk.h"
#include "cache/hash.h"
#include "model/kv.h"

typedef struct live_cache live_cache;

typedef struct live_stats {
    long lookups, hit_tokens, disk_hit_tokens, published_blocks, evicted_blocks, disk_errors;
    int cached_blocks, idle_blocks;
} live_stats;

/* Takes over the pool's keeper hooks. */
live_cache *live_new(kv_pool *kv);
void live_free(live_cache *c); /* NULL is fine; restores the hooks */
/* Adds the disk tier below (NULL: none): published blocks are written to
 * it, and prefixes continue from it when the live tier runs out. */
void live_set_disk(live_cache *c, disk_store *d);

/* A sequence's publishing cursor: blocks published so far and the hash of
 * the last one (root when none). */
typedef struct live_cursor {
    int n_blocks;
    cache_hash last;
} live_cursor;

void live_cursor_init(live_cursor *cur, const cache_hash *root);
/* Attaches to the empty sequence s the longest chain of cached blocks that
 * matches tokens[0..n_max) (whole blocks only): live blocks first, then
 * blocks loaded from disk into fresh pool blocks. Advances the cursor.
 * Returns the tokens attached; *from_disk (if not NULL) those loaded. */
int live_attach(live_cache *c, live_cursor *cur, const int32_t *tokens, int n_max, kv_seq *s, int *from_disk);
/* Publishes every block of s that is full (positions < s->n_pos), lies
 * within the first n_limit positions (the request's cache scope; use
 * INT_MAX for all) and is not yet published; tokens are the sequence's
 * tokens so far. */
void live_publish(live_cache *c, live_cursor *cur, const int32_t *tokens, const kv_seq *s, int n_limit);

void live_get_stats(const live_cache *c, live_stats *out);

#endif
