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
 *   its own connection (EXISTS, then SET NX with its expiry): never on a
 *   request's path, never twice from here. A full queue or a refused
 *   write (Redis down, OOM at maxmemory) drops the write and counts it.
 * - Expiry: every key gets ttl_s after its last use (0: none), longer
 *   under a retention mark (policy_shared_ttl_ms decides); a mark on a
 *   block still queued becomes its SET's PX, on one already stored a
 *   PEXPIRE GT (only ever lengthens, never rewrites the value), and hits
 *   (reads, and touches of keys known present) push it again, at most
 *   once per 1/16 of the TTL per key. All of it by the writer thread.
 * - Partial matches: a tail (fewer than B tokens) is stored like a block
 *   and listed under its parent in "strata:tails:<hex parent>" (a hash:
 *   tail hash -> token ids, at most TAIL_MAX, expiring with its tails);
 *   a probe round fetches the list under the last block it finds with
 *   the EXISTS, so best_child usually costs no extra round trip. A tail
 *   read checks its token count and that parent and token ids hash to
 *   its name; a failed or vanished one leaves the list. The writer drops
 *   the tails a newly stored block or tail holds whole.
 * - Not here: eviction (Redis's maxmemory policy, deploy/redis.conf) and
 *   retained_s (Redis's TTL is not carried up as a local mark).
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
    double ttl_s;             /* expiry after last use of an unmarked key (--cache-redis-ttl; 0: none) */
} redis_tier_opts;

typedef struct redis_tier_stats {
    long hits;           /* blocks read from Redis and verified (a run past a failed block is read but not attached) */
    long misses;         /* lookups Redis answered "absent", and reads that found nothing */
    long errors;         /* connection failures, timeouts, refused commands */
    long dropped_writes; /* not written: queue full, Redis down or refusing */
    long rejected;       /* values that failed verification (never loaded) */
    long writes;         /* blocks written */
    long write_skips;    /* already in Redis (written by another replica) */
    long expires;        /* expiries pushed on stored keys (marks, hits) */
    long tail_hits;      /* of hits, tails (partial last blocks) */
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
/* The tail list under parent: "strata:tails:" and 64 hex digits. */
#define REDIS_TAILS_KEY_BYTES 78
void redis_tier_tails_key(const cache_hash *parent, char out[REDIS_TAILS_KEY_BYTES]);

#endif
