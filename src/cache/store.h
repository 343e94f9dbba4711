/* store.h - the block store: one orchestrator over the tiers (DESIGN.md,
 * "Blocks and hashes", "Tiers").
 *
 * A request's prompt is cut into blocks of B tokens named by a chained
 * hash (hash.h), each hashed once per request. The store walks the tiers
 * in order: the live pool's index (live.h), then every tier added with
 * store_add_tier (tier.h: disk, then Redis), attaches the longest cached prefix
 * to the request's sequence (down to the token, through tails and partial
 * blocks), reading runs of blocks from a lower tier in the background
 * while the caller computes other sequences; a failed read falls back to
 * the next tier that holds the block. As the sequence fills blocks it
 * publishes them (live index, and a copy written through to every tier),
 * within the request's scope; at the end it keeps the partial last block
 * as a tail and applies the request's retention marks. It counts, per
 * request and in total, what came from which tier.
 * Sliding-window models: a hit ends with the sliding parts (model/kv.h)
 * of its last window in memory, read back from a lower tier where the
 * pool dropped them, or is cut back to where they are (store_seq's
 * n_window_reloaded, n_window_cut). Blocks move between tiers as whole
 * payloads (kv_block_read / kv_block_write).
 * Cached KV is bit-identical to recomputing it: the forward pass is batch
 * invariant, so where a block was computed does not matter.
 *
 * Thread safety: one thread (the scheduler) makes every call; a lower
 * tier's read runs on a thread of the store's own.
 * Does not: decide what is worth keeping (policy.c), know about HTTP,
 * rendering or batching. */
#ifndef STRATA_CACHE_STORE_H
#define STRATA_CACHE_STORE_H

#include <stdint.h>

#include "cache/hash.h"
#include "cache/live.h"
#include "cache/policy.h"
#include "cache/snapshot.h"
#include "cache/tier.h"
#include "model/kv.h"

#define STORE_MAX_TIERS 4

typedef struct cache_store cache_store;
typedef struct store_load store_load;

typedef struct store_opts {
    uint8_t model_fp[32];    /* in every root hash */
    double attn_per_pos;     /* policy_attn_cost_per_pos of the model */
    cache_scope default_scope; /* for requests whose scope is SCOPE_DEFAULT */
    /* Recurrent models (snapshot.h): floats of one sequence's state (0:
     * no recurrent layers, no snapshots), the memory budget for them, and
     * a snapshot every this many blocks of a prompt (0: none). */
    size_t snap_floats;
    size_t snap_budget_bytes;
    int snap_every_blocks;
} store_opts;

/* Takes over the pool's keeper hooks (live.h). */
cache_store *store_new(kv_pool *kv, const store_opts *o);
void store_free(cache_store *st); /* NULL is fine */
/* Adds a tier below the ones already there. The caller keeps what t
 * points to alive until store_free. */
void store_add_tier(cache_store *st, const cache_tier *t);

/* What a request asks of the cache; the caller owns the arrays and keeps
 * them until store_finish. */
typedef struct store_request {
    cache_hash root;         /* store_root: model, tenant, salt */
    cache_scope scope;
    const int *bounds;       /* ascending positions where messages start (auto scope cuts there) */
    int n_bounds;
    const cache_mark *marks; /* retention: anchor, cache_control breakpoints */
    int n_marks;
} store_request;

void store_root(const cache_store *st, const char *tenant, const char *salt, cache_hash *root);

/* One sequence's walk over the store. Fields are for reading. */
typedef struct store_seq {
    const store_request *rq;
    cache_hash *chain;        /* hash of each whole block of the tokens, computed once */
    int n_chain, cap_chain;
    int n_blocks;             /* whole blocks attached or published so far (the cursor) */
    int n_attached_blocks;    /* of which came from the cache */
    int n_cached;             /* prompt tokens whose KV came from the cache */
    int n_cached_lower;       /* of which read from a tier below the live pool */
    int n_cached_tier[STORE_MAX_TIERS]; /* of those, per lower tier in the order added */
    int publish_limit;        /* positions it may publish (its scope); set when attached */
    int n_hashes;             /* chain hashes computed: one per block */
    /* Sliding-window models: blocks whose sliding part was read back from
     * a tier below for the hit's window, and tokens the hit was cut by
     * where no tier had one (included in neither n_cached count). */
    int n_window_reloaded, n_window_cut;
    double t_begin, load_ms;  /* when the lookup began (ms), how long attaching took */
    store_load *load;         /* a lower tier's read in flight, or NULL */
    int part_block;           /* private: a partial block just read from a lower tier */
    int part_tier;            /* private: the tier it came from */
    /* Recurrent-state snapshots (store_snap_*): where this request resumed
     * (-1: it did not look), from which tier (-1: memory), and the
     * positions it stored (the first STORE_SNAP_MAX of them). */
    int snap_restored, snap_restored_tier;
    int n_snap_stored;
    int snap_stored_at[16];
    cache_hash snap_keys[16];
} store_seq;

#define STORE_SNAP_MAX 16

void store_seq_init(const cache_store *st, store_seq *q, const store_request *rq);

/* Attaches to the empty sequence s the longest cached prefix of
 * tokens[0..n_max) (n_tokens: the whole prompt, for the auto scope).
 * Returns the tokens attached; when part must come from a lower tier, the
 * read is started (store_loading) and store_attach_end takes it in. */
int store_attach_begin(cache_store *st, store_seq *q, const int32_t *tokens, int n_tokens, int n_max, kv_seq *s);
int store_loading(const store_seq *q);
int store_load_ready(const store_seq *q); /* the read is done: end will not wait */
/* Waits for the read if needed, takes it in and attaches what follows. */
int store_attach_end(cache_store *st, store_seq *q, const int32_t *tokens, int n_tokens, int n_max, kv_seq *s);
/* begin and end in one call (waits for every read). */
int store_attach(cache_store *st, store_seq *q, const int32_t *tokens, int n_tokens, int n_max, kv_seq *s);

/* What the prompt's first n_prompt tokens will add to the cache once
 * prefilled, after attaching n_cached of them: the tokens of its whole
 * blocks past the cached ones and within the scope (*fresh; a block begun
 * by a cached tail counts from n_cached, so read and written tokens never
 * overlap), of which under a retention mark of an hour or more
 * (*fresh_1h). */
void store_will_publish(const cache_store *st, const store_seq *q, int n_prompt, int n_cached, int *fresh,
                        int *fresh_1h);

/* Publishes every full block of s (positions < s->n_pos) within the
 * publish limit not yet published; tokens: the sequence's tokens so far. */
void store_publish(cache_store *st, store_seq *q, const int32_t *tokens, const kv_seq *s);

/* Keeps s's partial last block as a tail now, while s still runs (within
 * the request's scope, every full block before it published): another
 * request with the same tokens attaches all of them (a later choice of an
 * OpenAI request with n > 1, attaching its prompt). A tail is published,
 * so s's next write into that block copies it first (kv.h). */
void store_keep_tail(cache_store *st, store_seq *q, const int32_t *tokens, const kv_seq *s);

/* Ends the walk: a read in flight is waited for and dropped; with
 * keep_tail (its KV is complete) the partial last block stays as a tail
 * if it lies within the scope; the request's retention marks apply.
 * Call before releasing s. q's counts stay readable. */
void store_finish(cache_store *st, store_seq *q, const int32_t *tokens, const kv_seq *s, int keep_tail);

/* ---- recurrent-state snapshots (models with snap_floats > 0) ----
 *
 * After attaching: the longest prefix of s for which both the KV (s holds
 * it) and a snapshot exist, in memory or a lower tier. s is cut back to
 * that position and its recurrent state set from the snapshot (nothing
 * found: cut to 0, a cold start). The cache counts follow the cut.
 * Returns the position. */
int store_snap_restore(cache_store *st, store_seq *q, const int32_t *tokens, kv_seq *s);
/* The next position after pos where the policy wants a snapshot of a
 * prompt of n_prompt tokens (policy_snap_next); -1: none. */
int store_snap_next(const cache_store *st, const store_seq *q, int pos, int n_prompt);
/* Keeps s's recurrent state (it covers tokens[0..s->rs_pos)) as a
 * snapshot: memory, and a copy to every tier that takes snapshots. Within
 * the request's scope only; a snapshot held already is not written again. */
void store_snap_save(cache_store *st, store_seq *q, const int32_t *tokens, const kv_seq *s);
int store_has_snapshots(const cache_store *st);

typedef struct store_stats {
    long lookups, hit_tokens, lower_hit_tokens, tail_hit_tokens, published_blocks;
    long tier_hit_tokens[STORE_MAX_TIERS]; /* lower_hit_tokens per tier, in the order added */
    long load_errors;   /* reads that failed or did not match */
    long hashes;        /* chain hashes computed */
    long window_reloaded_blocks, window_cut_tokens; /* store_seq's, in total */
    long window_refilled_blocks; /* sliding parts given back by a recomputed block */
    long spilled_blocks; /* a device pool's evicted blocks moved down to the first tier (it lacked them) */
    long publish_queued;  /* a device pool's published blocks and tails whose download was queued */
    long publish_written; /* a device pool's published blocks and tails written through to the tiers once
                           * downloaded (queued, or waited for when the queue refused: publish_queued less) */
    /* The queue of both (spill.h): */
    long spill_pending;  /* downloads queued and not yet written down (store_flush_spills) */
    long spill_waits;    /* times the host waited for one: a full queue, a lookup that needed it, the end */
    long spill_errors;   /* downloads the device failed (the block is lost from the cache, never served) */
    live_stats live;
    snap_stats snap;    /* recurrent-state snapshots */
} store_stats;
void store_get_stats(const cache_store *st, store_stats *out);
/* Waits for every queued copy down the tiers (a device pool's published
 * and evicted blocks, store.c "write_through", "spill") and writes them
 * down; store_free does it too. */
void store_flush_spills(cache_store *st);

#endif
