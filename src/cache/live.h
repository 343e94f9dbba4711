/* live.h - the live tier: full KV blocks in the compute pool, named by
 * their chained hash, shared by every sequence whose prompt starts with
 * the same tokens.
 *
 * A sequence's full blocks are published under their hash as they fill.
 * A new sequence attaches the longest chain of published blocks matching
 * its prompt, then as many tokens as match of a finished sequence's
 * partial last block (its tail: token granularity), and prefills only the
 * rest. Blocks no sequence uses stay in memory until the pool needs the
 * space; then the pool takes a leaf (no cached block continues it), the
 * one policy.h values least, retained blocks last. Attached blocks are
 * shared and copied before any write.
 * Cached KV is bit-identical to recomputing it: the forward pass is batch
 * invariant, so where a block was computed does not matter.
 * Does not: decide what is worth keeping (policy.c). */
#ifndef STRATA_CACHE_LIVE_H
#define STRATA_CACHE_LIVE_H

#include <stdint.h>

#include "cache/disk.h"
#include "cache/hash.h"
#include "cache/policy.h"
#include "model/kv.h"

typedef struct live_cache live_cache;

typedef struct live_stats {
    long lookups, hit_tokens, disk_hit_tokens, published_blocks, evicted_blocks, disk_errors;
    long tail_hit_tokens;     /* of hit_tokens, from partial tails */
    long evicted_retained;    /* of evicted_blocks, still within a retention mark */
    int cached_blocks, idle_blocks, tails;
} live_stats;

/* Takes over the pool's keeper hooks. */
live_cache *live_new(kv_pool *kv);
void live_free(live_cache *c); /* NULL is fine; restores the hooks */
/* Adds the disk tier below (NULL: none): published blocks are written to
 * it, and prefixes continue from it when the live tier runs out. */
void live_set_disk(live_cache *c, disk_store *d);
/* Attention's cost per earlier position relative to the weights' cost per
 * token (policy_value); 0 by default. */
void live_set_cost(live_cache *c, double attn_per_pos);

/* A sequence's publishing cursor: blocks published so far and the hash of
 * the last one (root when none). */
typedef struct live_cursor {
    int n_blocks;
    cache_hash last;
} live_cursor;

void live_cursor_init(live_cursor *cur, const cache_hash *root);
/* Attaches to the empty sequence s the longest chain of cached blocks that
 * matches tokens[0..n_max): live blocks first, then blocks loaded from
 * disk into fresh pool blocks, then the longest matching part of a kept
 * tail or of a block that matches only in part (in memory or, read with
 * the run, on disk). Advances the cursor over whole blocks. Returns the tokens
 * attached; *from_disk (if not NULL) those loaded. */
int live_attach(live_cache *c, live_cursor *cur, const int32_t *tokens, int n_max, kv_seq *s, int *from_disk);
/* live_attach in two steps, so a disk read overlaps other sequences'
 * compute: begin attaches what memory holds and, where the prefix goes on
 * on disk, reserves blocks in s and starts reading them on a thread of
 * its own (*pending set; s must not be used until end). end (when
 * live_load_ready says so, or it waits) takes the blocks in and attaches
 * the rest as live_attach does. Both return the tokens attached so far.
 * A request dropped meanwhile calls live_load_cancel, then releases s. */
typedef struct live_load live_load;
int live_attach_begin(live_cache *c, live_cursor *cur, const int32_t *tokens, int n_max, kv_seq *s, live_load **pending);
int live_load_ready(live_load *l);
int live_attach_end(live_cache *c, live_cursor *cur, const int32_t *tokens, int n_max, kv_seq *s, live_load *l,
                    int *from_disk);
void live_load_cancel(live_load *l); /* NULL is fine */

/* Publishes every block of s that is full (positions < s->n_pos), lies
 * within the first n_limit positions (the request's cache scope; use
 * INT_MAX for all) and is not yet published; tokens are the sequence's
 * tokens so far. */
void live_publish(live_cache *c, live_cursor *cur, const int32_t *tokens, const kv_seq *s, int n_limit);

/* At the end of a request: keeps s's partial last block (positions past
 * its last full block) as a tail that a later prompt extending tokens can
 * attach, if every full block before it was published (cur is at the
 * end). A kept tail that is a prefix of this one is dropped. The tail
 * goes to the disk tier too (and replaces the shorter ones there). */
void live_keep_tail(live_cache *c, const live_cursor *cur, const int32_t *tokens, const kv_seq *s);

/* Retention: the cached blocks of s that start before position end are
 * kept at least ttl_s after now (the disk tier is told too). Call when the
 * request ends, before releasing s. */
void live_retain(live_cache *c, const kv_seq *s, int end, double ttl_s);

void live_get_stats(const live_cache *c, live_stats *out);

#endif
