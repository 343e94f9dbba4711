/* disk_file.h - the on-disk format of one KV block file, and how it is
 * named, written atomically, read back and checked. Internal to the disk
 * tier (cache/disk.c) and the `strata cache` tool; the store's index,
 * writer thread and eviction live in disk.c.
 *
 * Layout (all integers little-endian; see disk_file.c for the writer):
 *
 *   off  size  field
 *     0     8  magic "STRKV\0\0\1"
 *     8     4  format version (DISK_FORMAT_VERSION)
 *    12     4  kv dtype (1 = f16, 3 = q8_0, 4 = q4_0: backend/kvq.h; 2 = snapshot)
 *    16     4  n_tokens (B; fewer for a tail, a partial last block)
 *    20     4  reserved, 0
 *    24     8  payload bytes (KV of every layer, kv_pool.block_bytes)
 *    32    32  model fingerprint
 *    64    32  block hash (also the file name)
 *    96    32  parent hash (root hash for a prompt's first block)
 *   128     4  header CRC-32C over bytes [0,128) and the token ids
 *   132     4  reserved, 0
 *   136  4*nt  token ids (int32)
 *     .     P  payload, exactly as in the KV pool (its --kv-type)
 *   end-4   4  CRC-32C over everything before it (header, tokens, payload)
 *
 * The header CRC lets the store rebuild its index from headers alone
 * (no payload reads) and still reject a damaged header; the trailing CRC
 * checks the whole file when a block is loaded. CRC-32C: fast (hardware
 * instruction on x86-64), needs no extra library, and detects any burst
 * up to 32 bits; block identity itself is the SHA-256 chain (hash.h).
 *
 * A recurrent-state snapshot (snapshot.h, disk_snap.c) is the same format
 * with kv dtype 2 (DISK_STATE_F32): n_tokens is r (the tokens past its
 * boundary), the parent field is the boundary's hash, the token ids are
 * those r tokens, the payload the state as f32. It is named <hex>.rs, so
 * a build that predates snapshots (its scan takes only .kv names) leaves
 * it alone, and a build that reads it checks everything a block gets.
 *
 * Names: DIR/ab/abcdef...(64 hex).kv, fanned out by the first byte so no
 * directory grows past a few thousand entries. Temp files are
 * DIR/ab/.tmp-PID-SEQ while being written; rename makes a file appear
 * whole or not at all. */
#ifndef STRATA_CACHE_DISK_FILE_H
#define STRATA_CACHE_DISK_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "cache/hash.h"

#define DISK_MAGIC "STRKV\0\0\1"
#define DISK_FORMAT_VERSION 1
#define DISK_HDR_BYTES 136
#define DISK_MAX_TOKENS 65536 /* refuse absurd headers before allocating */
#define DISK_QUARANTINE "quarantine"

typedef struct disk_hdr {
    uint32_t version, kv_dtype, n_tokens;
    uint64_t payload_bytes;
    uint8_t model_fp[32];
    cache_hash hash, parent;
} disk_hdr;

/* What a loaded file must match; NULL / 0 fields are not checked. */
typedef struct disk_expect {
    const cache_hash *hash;
    const uint8_t *model_fp;
    uint32_t n_tokens, kv_dtype;
    uint64_t payload_bytes;
} disk_expect;

uint32_t disk_crc32c(uint32_t crc, const void *p, size_t n);
/* Size of a whole block file. */
uint64_t disk_file_bytes(uint32_t n_tokens, uint64_t payload_bytes);
#define DISK_STATE_F32 2 /* kv_dtype of a snapshot file */
/* DIR/ab/<hex>.kv (.rs for a snapshot: disk_file_write names a header of
 * kv dtype DISK_STATE_F32 so); with sub != NULL also DIR/ab. */
void disk_file_path_ext(const char *dir, const cache_hash *h, const char *ext, char *out, size_t cap, char *sub,
                        size_t sub_cap);
/* 1 when name is "<64 hex><ext>" (the hash goes to h). */
int disk_file_name_hash_ext(const char *name, const char *ext, cache_hash *h);
void disk_file_path(const char *dir, const cache_hash *h, char *out, size_t cap, char *sub,
                    size_t sub_cap);
/* 1 when name is "<64 hex>.kv" (the hash goes to h). */
int disk_file_name_hash(const char *name, cache_hash *h);

/* Reads and checks the header and token ids of an open file (no payload):
 * 0; STRATA_EUNSUPPORTED for a format version this build does not know
 * (left alone: a newer Strata may own it); STRATA_EFORMAT for anything
 * damaged (magic, CRC, size); STRATA_EIO when it cannot be read.
 * tokens (may be NULL) must hold DISK_MAX_TOKENS. */
int disk_file_read_header(int fd, uint64_t file_size, disk_hdr *h, int32_t *tokens,
                          strata_err *err);

/* Loads and verifies a whole file into payload (cap bytes): everything in
 * read_header, the expectations in ex, then the trailing CRC. Returns 0,
 * STRATA_EFORMAT (damaged or not what was expected), or STRATA_EIO (cannot
 * read; errno-style ENOENT is reported as STRATA_EIO with err->msg saying
 * "missing"). */
/* Opens a block file for reading: never blocks on a FIFO or device named
 * like a block (O_NONBLOCK, then a file-type check). Returns the fd and
 * its size in *size, or STRATA_EIO ("missing", or why it could not open)
 * or STRATA_EFORMAT ("not a regular file") with err filled. */
int disk_file_open(const char *path, uint64_t *size, strata_err *err);
int disk_file_load(const char *path, const disk_expect *ex, disk_hdr *h, int32_t *tokens,
                   void *payload, size_t cap, strata_err *err);

/* The same bytes as a block file, in memory (a value in a shared tier
 * such as Redis, which must be as self-describing as a file): out holds
 * disk_file_bytes(h->n_tokens, h->payload_bytes). */
void disk_file_encode(const disk_hdr *h, const int32_t *tokens, const void *payload, uint8_t *out);
/* Checks buf[0..len) like disk_file_load checks a file (magic, CRCs,
 * version, size, the expectations in ex) and only then copies the payload
 * (cap bytes at most) and token ids (may be NULL) out. 0 or STRATA_EFORMAT
 * (any other version included: a value asked for by name must be ours). */
int disk_file_decode(const uint8_t *buf, size_t len, const disk_expect *ex, disk_hdr *h, int32_t *tokens,
                     void *payload, size_t cap, strata_err *err);

/* Writes a block file atomically: temp file in the same directory, write,
 * fsync, rename, fsync the directory. Creates DIR/ab when missing. On any
 * failure nothing that could load is left behind; *sys_errno gets the
 * errno of the failing call (ENOSPC, EROFS, ...). */
int disk_file_write(const char *dir, const disk_hdr *h, const int32_t *tokens,
                    const void *payload, unsigned seq, int *sys_errno, strata_err *err);

/* Every entry under DIR/ab/ subdirectories: block files (hash set) and
 * temp files (is_tmp, pid of the writer). cb returns nonzero to stop. */
typedef struct disk_dirent {
    const char *path;
    const char *name;
    int is_tmp;
    long tmp_pid;
    cache_hash hash;
} disk_dirent;
int disk_file_scan(const char *dir, int (*cb)(void *ctx, const disk_dirent *e), void *ctx,
                   strata_err *err);

/* ---- usage file: hit counts and recency that survive a restart ----
 *
 * DIR/usage-<first 8 bytes of the model fingerprint, hex>.bin, rewritten
 * atomically when a store closes:
 *   0  8  magic "STRKU\0\0\2" (version 1, still read: no retention field)
 *   8  4  record count
 *  12  4  reserved, 0
 *  16 56n records: block hash (32), hits (f64), last use (f64, unix s),
 *         retained until (f64, unix s; 0: not retained)
 *  end 4  CRC-32C over everything before it
 * Advisory only: a missing or damaged usage file means zero hits, file
 * mtimes for recency and no retention, never an error. */
typedef struct disk_usage_rec {
    cache_hash hash;
    double hits, last_use, keep_until;
} disk_usage_rec;

int disk_usage_write(const char *dir, const uint8_t model_fp[32], const disk_usage_rec *r, size_t n,
                     strata_err *err);
/* Calls fn for every record of this model's usage file, or of every usage
 * file when model_fp is NULL. Damaged files are skipped. */
void disk_usage_read(const char *dir, const uint8_t *model_fp,
                     void (*fn)(void *ctx, const disk_usage_rec *r), void *ctx);

#endif
