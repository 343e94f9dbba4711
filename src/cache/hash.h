/* hash.h - block identity: chained SHA-256 over token ids.
 *
 *   root  = H("strata-kv" | format version | model fingerprint | salt)
 * where the model fingerprint covers the file and the numerics of the
 * backend that computes the K/V (cache_numerics_fingerprint),
 *   h[i]  = H(h[i-1] | token ids of block i as little-endian int32)
 * so a block's name covers every token before it, the model and the
 * tenant. SHA-256 because blocks are shared: a collision would serve one
 * prefix's KV to another. (DESIGN.md, "Blocks and hashes".) */
#ifndef STRATA_CACHE_HASH_H
#define STRATA_CACHE_HASH_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define CACHE_FORMAT_VERSION 1

typedef struct cache_hash {
    uint8_t b[32];
} cache_hash;

void cache_hash_root(cache_hash *out, const uint8_t model_fp[32], const char *salt, size_t salt_len);
/* The root of a request's chain: tenant (the API key's, or NULL) and
 * cache salt (NULL: none), each hashed on its own so no pair of strings
 * can alias another; without a tenant it is cache_hash_root of the salt. */
void cache_hash_root_for(cache_hash *out, const uint8_t model_fp[32], const char *tenant, const char *salt);
void cache_hash_block(cache_hash *out, const cache_hash *parent, const int32_t *tokens, int n);
/* SHA-256 of the whole model file: its identity (layout and weights).
 * With memo_dir (may be NULL), the result is remembered there keyed by the
 * file's path, size, mtime, ctime, device and inode, with a check of its
 * own, so a restart does not read the weights again; a changed or swapped
 * file, or a damaged memo, is hashed anew. */
int cache_model_fingerprint(const char *path, const char *memo_dir, uint8_t out[32], strata_err *err);
/* The fingerprint a model's blocks are filed under when `numerics`
 * computes them: backends give other bits for the same tokens (other
 * summation orders, float vs 8-bit activations), so a block is only
 * served to a run of the same numerics. "cpu" (NULL too) keeps the file's
 * fingerprint as it is, so disk caches written before stay valid; any
 * other id (CUDA_NUMERICS, "cuda-1") gives
 * H("strata-numerics" | file fingerprint | H(id)), and with it other block
 * hashes, block-file headers, Redis keys and saved maps. out may be
 * file_fp. */
void cache_numerics_fingerprint(const uint8_t file_fp[32], const char *numerics, uint8_t out[32]);
/* 64 hex characters and a NUL. */
void cache_hash_hex(const cache_hash *h, char out[65]);

#endif
