/* spill.h - the copies down a tier that a device pool's blocks take
 * (cache/README.md, "Tiers on a GPU"): a published block's copy written
 * through to every tier, and an evicted block's move to the tier below.
 *
 * Both need the block's bytes on the host. Waiting for each download on
 * the scheduler's thread would stall every step that publishes or evicts;
 * instead the download is queued (kv_block_read_async: the compute stream,
 * after the kernels that wrote the block, into a pinned staging slot of
 * this queue) and the caller goes on; the block may be written again or
 * reused at once (the device orders those writes after the copy). The
 * queue is drained in order without waiting whenever the store is called,
 * each finished copy handed to the done callback with the kind it was
 * queued with (so the tiers get the writes in the order they were asked
 * for); the host waits only when every slot is busy, when the store needs
 * a queued block (spillq_wait_for, spillq_wait_for_child), and at the end
 * (spillq_drain with wait).
 * Thread safety: one thread (the store's caller).
 * Does not: decide what to copy (store.c) or write anywhere itself (the
 * done callback does). */
#ifndef STRATA_CACHE_SPILL_H
#define STRATA_CACHE_SPILL_H

#include <stdint.h>

#include "cache/hash.h"
#include "model/kv.h"

/* Downloads in flight at most: the host waits for the oldest beyond this. */
#define SPILLQ_SLOTS 8

typedef struct spill_queue spill_queue;

/* A finished download: the kind it was queued with (the caller's), the
 * block's name and payload (block_bytes). */
typedef void (*spillq_done_fn)(void *ctx, int kind, const cache_hash *h, const cache_hash *prev,
                               const int32_t *tokens, int n, const void *payload);

typedef struct spillq_stats {
    long queued, done, waits, errors;
} spillq_stats;

/* Over the device pool kv (kv->dev set); done gets each finished copy. */
spill_queue *spillq_new(kv_pool *kv, spillq_done_fn done, void *ctx);
/* Waits for what is queued (spillq_drain), then frees. NULL is fine. */
void spillq_free(spill_queue *q);
/* Queues the download of block b (named h, after prev; its n tokens) for
 * done, with kind. Returns 0 when queued; < 0 (err) when the pinned
 * staging memory or the device refused, and nothing was queued. */
int spillq_push(spill_queue *q, int kind, int b, const cache_hash *h, const cache_hash *prev, const int32_t *tokens,
                int n, strata_err *err);
/* Finished copies, oldest first, go to done; with wait, every queued one
 * (the host waits). */
void spillq_drain(spill_queue *q, int wait);
/* 1 when a copy of h is queued. */
int spillq_has(const spill_queue *q, const cache_hash *h);
/* Waits for the last queued copy of h and every one queued before it,
 * and hands them to done; 0 when h was not queued. */
int spillq_wait_for(spill_queue *q, const cache_hash *h);
/* The same for the last queued copy filed after prev (a block or tail
 * that continues it: a partial match's candidates). */
int spillq_wait_for_child(spill_queue *q, const cache_hash *prev);
int spillq_pending(const spill_queue *q);
void spillq_get_stats(const spill_queue *q, spillq_stats *out);

#endif
