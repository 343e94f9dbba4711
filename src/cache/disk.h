/* disk.h - the disk tier: every published KV block as one content-addressed
 * file, so the cache survives a restart (DESIGN.md, "Tiers").
 *
 * A block is named by its chained SHA-256 hash (hash.h) and stored as
 * DIR/ab/<hex>.kv (format in disk_file.h); so is a sequence's partial
 * last block (a tail, disk_put_n). Opening rebuilds an in-memory
 * index from file headers only. Writes are queued and done by one
 * background thread (temp file, fsync, rename, fsync dir), never on the
 * request's critical path; a block is never stored twice. When the files
 * pass the budget, blocks go leaf first (a block whose children are all
 * gone before its parents), lowest score first (recency plus a decayed hit
 * count), and never one written or loaded in the last protect_ms.
 * Loading verifies everything; a damaged file is moved to DIR/quarantine/,
 * reported and never loaded. A full or read-only disk drops writes (counted,
 * warned once) and the server keeps serving.
 *
 * Thread safety: every call may come from any thread.
 * Does not: decide which blocks are worth keeping longer (policy layer),
 * know about the live pool or RAM tier (the scheduler copies blocks). */
#ifndef STRATA_CACHE_DISK_H
#define STRATA_CACHE_DISK_H

#include <stdint.h>

#include "backend/kvq.h"
#include "base/err.h"
#include "cache/hash.h"

typedef struct disk_store disk_store;

typedef struct disk_opts {
    const char *dir;          /* created if missing (mkdir -p) */
    uint64_t budget_bytes;    /* evict down to this after writes; 0 = no limit */
    uint8_t model_fp[32];     /* files of other models are left alone, not indexed */
    uint32_t block_tokens;    /* B */
    uint64_t block_bytes;     /* KV payload bytes per block */
    uint32_t kv_dtype;        /* DISK_F16, DISK_Q8_0 or DISK_Q4_0 (disk_kv_dtype) */
    uint32_t protect_ms;      /* never evict a block written/loaded this recently; 0 = POLICY_PROTECT_MS */
    uint64_t max_pending_bytes; /* queued write copies; more are dropped; 0 = 256 MiB */
    /* For `strata cache`: index every model's files, geometry per file;
     * disk_put and disk_get are refused (use disk_verify). */
    int all_models;
    int read_only;            /* no writer thread, no cleanup, no quarantine moves */
} disk_opts;

/* The payload's element type in a block file's header (disk_file.h);
 * 2 is a snapshot's (DISK_STATE_F32). */
enum { DISK_F16 = 1, DISK_Q8_0 = 3, DISK_Q4_0 = 4 };
/* The header's kv dtype for blocks stored as t, and back ("f16", "q8_0", "q4_0",
 * "state", or "type N"). */
uint32_t disk_kv_dtype(kvq_type t);
const char *disk_kv_dtype_name(uint32_t dtype);

/* Opens (or creates) the store and rebuilds its index from headers. A
 * directory that cannot be created or written returns STRATA_EIO with the
 * reason; the caller then runs memory-only with a warning. */
int disk_open(disk_store **out, const disk_opts *o, strata_err *err);
/* Drains queued writes, stops the writer, frees everything; NULL is fine. */
void disk_close(disk_store *d);

/* 1 when the block is stored or queued for writing. */
int disk_has(disk_store *d, const cache_hash *h);

/* Queues a copy of one block (tokens: its B token ids; parent: the previous
 * block's hash, the root for block 0; kv: block_bytes) and returns at once.
 * A hash already stored or queued is a no-op returning 0. STRATA_EBUSY when
 * the queue is full (the write is dropped and counted). */
int disk_put(disk_store *d, const cache_hash *h, const cache_hash *parent, const int32_t *tokens,
             const void *kv);

/* disk_put for a block holding n_tokens (1..B) token ids: a sequence's
 * partial last block (a *tail*), stored with a whole block's payload of
 * which only the first n_tokens positions count. Name it by the chain
 * hash of its tokens (cache_hash_block over n_tokens). */
int disk_put_n(disk_store *d, const cache_hash *h, const cache_hash *parent, const int32_t *tokens, int n_tokens,
               const void *kv);

/* Partial matches: the stored or queued block continuing parent (a tail,
 * or a full block matching in part) that shares the longest prefix with
 * tokens[0..n). Returns that length (0: none) and the block's hash and
 * token count in *h and *n_tokens. */
int disk_best_child(disk_store *d, const cache_hash *parent, const int32_t *tokens, int n, cache_hash *h,
                    int *n_tokens);
/* Deletes the stored tails continuing parent that a block or tail of
 * tokens[0..n) now holds whole (their tokens are a proper prefix of it):
 * a conversation's tail of turn N once turn N+1 is stored. Returns how
 * many went. */
int disk_drop_tails(disk_store *d, const cache_hash *parent, const int32_t *tokens, int n);

/* Reads a block into dst (block_bytes) and its token ids into tokens_out
 * (its n_tokens, at most B; may be NULL). Checks magic, version, model fingerprint,
 * hash, token count, dtype, size and checksum; a mismatch quarantines the
 * file and returns STRATA_EFORMAT with the reason. STRATA_EIO when it is
 * not stored (or vanished). A queued block is served from its copy.
 * On failure dst is zeroed (never partly loaded data).
 * Either way a failure is a miss for the caller, never fatal. */
int disk_get(disk_store *d, const cache_hash *h, void *dst, int32_t *tokens_out, strata_err *err);

/* disk_get for n blocks at once, read by up to DISK_READERS threads so
 * the device (or the page cache and the checksum) works in parallel; one
 * result code per block in rc[]. Returns how many blocks from the first
 * on all loaded (the usable prefix). */
#define DISK_READERS 4
int disk_get_many(disk_store *d, const cache_hash *h, void *const *dst, int32_t *const *tokens_out, int n, int *rc);

/* A hit served by an upper tier (live pool, RAM): feeds recency and the
 * hit count used by eviction, and protects the block for protect_ms.
 * disk_get already counts as a hit; do not touch for the same use. */
void disk_touch(disk_store *d, const cache_hash *h);

/* Retention (policy.h): the block is evicted only after every unretained
 * one until ttl_s from now (extends, never shortens). Kept across a
 * restart in the usage file. */
void disk_retain(disk_store *d, const cache_hash *h, double ttl_s);
/* Seconds the block stays retained from now (0: not retained, or not
 * stored), so a tier above can carry the mark on. */
double disk_retained_s(disk_store *d, const cache_hash *h);

/* Waits until every queued write is done (tests, tools, shutdown). */
void disk_flush(disk_store *d);

typedef struct disk_stats {
    uint64_t files, bytes;            /* stored now (this model) */
    uint64_t writes, write_bytes;     /* files written since open */
    uint64_t reads, read_bytes;       /* blocks served by disk_get (reads: also from the queue;
                                         read_bytes: payload read from files) */
    uint64_t evicted, quarantined;
    uint64_t superseded;              /* tails deleted because a longer block holds them */
    uint64_t write_errors;            /* failed writes (ENOSPC, EROFS, ...): dropped */
    uint64_t dropped;                 /* puts refused because the queue was full */
    uint64_t pending, pending_bytes;  /* queued now */
    uint64_t foreign;                 /* files left alone at open: other model, version, geometry */
    uint64_t other_kv_type;           /* of those, blocks of another KV type (--kv-type): never served */
    uint32_t other_kv_dtype;          /* the (last) such type seen, for the report */
    uint64_t temp_removed;            /* leftover temp files of dead writers, removed at open */
    uint64_t snap_writes, snap_write_bytes, snap_reads; /* recurrent-state snapshot files (disk_snap.c) */
    uint64_t snap_files;              /* stored now (their bytes are in `bytes`) */
} disk_stats;
void disk_get_stats(disk_store *d, disk_stats *out);

/* ---- recurrent-state snapshots (disk_snap.c; format in disk_file.h) ----
 * DIR/ab/<hex of key>.rs beside the blocks, queued and written
 * atomically (temp, fsync, rename) by the writer thread, verified like a block on every
 * read; a damaged, foreign or mis-shaped one is quarantined and reported,
 * never loaded. Their bytes count in the budget; evicting a block
 * deletes the snapshots that need it (named by its hash, or filed under
 * it as their boundary). */
int disk_snap_put(disk_store *d, const cache_hash *key, const cache_hash *boundary, const int32_t *tokens, int r,
                  const float *state, size_t n);
int disk_snap_get(disk_store *d, const cache_hash *key, float *dst, size_t n);
/* Retention mark on a snapshot (written or still queued), as disk_retain
 * for a block: kept in the usage file across a restart, and carried into
 * the store's memory index at start (disk_snap_retained_s: seconds left). */
void disk_snap_retain(disk_store *d, const cache_hash *key, double ttl_s);
double disk_snap_retained_s(disk_store *d, const cache_hash *key);
/* fn(ctx, key, boundary, r) for every snapshot file of this model whose
 * header checks out (damaged ones are quarantined). */
void disk_snap_foreach(disk_store *d, void (*fn)(void *ctx, const cache_hash *key, const cache_hash *boundary, int r),
                       void *ctx);
/* For `strata cache verify`: every snapshot file read in full and checked
 * (header, the name's hash, CRCs, a model with blocks in this directory,
 * a block it needs still stored); each bad one is reported through
 * bad(ctx, path, why) and quarantined. Returns how many were good. */
uint64_t disk_snap_verify(disk_store *d, void (*bad)(void *ctx, const char *path, const char *why), void *ctx,
                          uint64_t *n_bad);
/* For `strata cache`: snapshot files of every model under dir, their
 * bytes (may be NULL); with remove, deleted (files: how many went). */
void disk_snap_count(const char *dir, uint64_t *files, uint64_t *bytes, int remove);

/* ---- for `strata cache` (tools; also usable by the server) ---- */

/* Evicts down to budget_bytes now (0: everything that may go; same order
 * and protection as after a write) and keeps it as the budget (where 0
 * means no limit again). Returns the number of files evicted. */
uint64_t disk_evict_to(disk_store *d, uint64_t budget_bytes);

typedef struct disk_block_info {
    cache_hash hash, parent;
    uint8_t model_fp[32];
    uint32_t n_tokens;
    uint32_t n_children;      /* stored or queued blocks whose parent this is */
    uint64_t bytes;           /* file size */
    double last_use;          /* unix seconds (file mtime at open, then hits) */
    double hits;              /* decayed hit count since open */
    int parent_stored;        /* the parent is in the index */
    int pending;              /* queued, not on disk yet */
} disk_block_info;
/* Calls fn for every stored or queued block, under the store's lock: fn
 * must not call back into the store. */
void disk_foreach(disk_store *d, void (*fn)(void *ctx, const disk_block_info *b), void *ctx);

/* Reads one stored block of any model in full and checks everything;
 * quarantines it on failure (unless read_only). 0 or STRATA_EFORMAT/EIO. */
int disk_verify(disk_store *d, const cache_hash *h, strata_err *err);

/* Deletes every block file, temp file and quarantined file under dir (all
 * models). *n_files gets the count. */
int disk_purge(const char *dir, uint64_t *n_files, strata_err *err);

#endif
