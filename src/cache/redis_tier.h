/* redis_tier.h - a KV tier shared by server replicas, on Redis (tier.h).
 *
 * Each full block is one Redis string under "strata:kv:<64 hex of the
 * block hash>" whose value is byte for byte a disk block file
 * (disk_file.h: magic, version, model fingerprint, block and parent hash,
 * token ids, CRCs), so a foreign, stale or damaged value is rejected
 * (counted) and never loaded. The hash chain covers the model and the
 * tenant, so replicas of one model share blocks and nothing else does.
 *
 * - Lookups (has, has_run): a lossy in-process set of keys known present
 *   (from our writes and from Redis's answers) and a few recent misses;
 *   what it does not know costs one EXISTS, or one pipelined round of
 *   EXISTS for a run, on a connection of its own with the timeout.
 * - Reads (read_many, on the store's loader thread): a run is one
 *   pipeline of GETs on the reader connection; each value is verified as
 *   it arrives and copied into the pool block.
 * - Writes: copied into a bounded queue and sent by a writer thread on
 *   its own connection (EXISTS, then SET NX): never on a request's path,
 *   never twice from here. A full queue or a refused write (Redis down,
 *   OOM at maxmemory) drops the write and counts it.
 * - Not here: partial matches (best_child finds none: a session moving
 *   to another replica recomputes at most B-1 tokens past its last whole
 *   block, so tails are not written), eviction (Redis's maxmemory policy,
 *   deploy/redis.conf), retention marks (not applied: with an LFU policy
 *   a TTL would only shorten a key's life) and touch (Redis counts its
 *   own reads).
 * - Faults: any failure drops the connection, warns once, counts, and
 *   reconnects with backoff (redis_conn.h); every call waits on Redis at
 *   most timeout_ms per stalled socket operation. */
#ifndef STRATA_CACHE_REDIS_TIER_H
#define STRATA_CACHE_REDIS_TIER_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "cache/tier.h"

typedef struct redis_tier redis_tier;

typedef struct redis_tier_opts {
    const char *url;          /* redis://[:password@]host[:port][/db] */
    int timeout_ms;           /* bound on any one wait on Redis */
    uint8_t model_fp[32];
    uint32_t block_tokens, kv_dtype;
    uint64_t block_bytes;     /* payload of one block */
    uint64_t queue_bytes;     /* write queue bound (0: 64 MiB) */
} redis_tier_opts;

typedef struct redis_tier_stats {
    long hits;           /* blocks read from Redis and verified (a run past a failed block is read but not attached) */
    long misses;         /* lookups Redis answered "absent", and reads that found nothing */
    long errors;         /* connection failures, timeouts, refused commands */
    long dropped_writes; /* not written: queue full, Redis down or refusing */
    long rejected;       /* values that failed verification (never loaded) */
    long writes;         /* blocks written */
    long write_skips;    /* already in Redis (written by another replica) */
    long queued_bytes;
    int up;              /* the last connection attempt succeeded */
} redis_tier_stats;

/* Fails only on a bad URL: Redis being down is a fault the tier rides
 * out (it warns and keeps reconnecting). */
int redis_tier_open(redis_tier **out, const redis_tier_opts *o, strata_err *err);
/* Sends what is queued for up to 2 s more, then drops the rest. NULL is fine. */
void redis_tier_close(redis_tier *r);
cache_tier redis_tier_iface(redis_tier *r);
void redis_tier_get_stats(redis_tier *r, redis_tier_stats *out);
/* The Redis key of a block: "strata:kv:" and 64 hex digits (75 bytes with the NUL). */
#define REDIS_KEY_BYTES 75
void redis_tier_key(const cache_hash *h, char out[REDIS_KEY_BYTES]);

#endif
