/* kvq.h - the element formats of the KV cache (`--kv-type`).
 *
 * A K or V row (one token, every KV head: kv_dim values) is stored as
 *   f16:  kv_dim IEEE half floats (2 bytes a value);
 *   q8_0: kv_dim / 32 blocks of {half scale d, 32 int8 q} (34 bytes per 32
 *         values, ggml's block_q8_0 layout: 1.0625 bytes a value), the
 *         value being q * d.
 * Rows are written once, when the forward pass computes them (quantized
 * from floats then), and read by attention (backend/attn.h) as stored: a
 * q8_0 value widens to float exactly (an int8 times a half is exact in a
 * float), so every level widens a tile to the same floats. A q8_0 block
 * never straddles two heads: the head size must be a multiple of 32
 * (kvq_check). Sizes are counted in halves (uint16_t), the unit of the
 * KV pool's memory: a q8_0 block is 17 halves.
 * Does not: know about blocks, layers or sequences (model/kv.h). */
#ifndef STRATA_KVQ_H
#define STRATA_KVQ_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/fp16.h"

typedef enum kvq_type {
    KVQ_F16 = 0,
    KVQ_Q8_0 = 1,
} kvq_type;

#define KVQ_Q8_0_BLOCK 32      /* values per q8_0 block */
#define KVQ_Q8_0_BLOCK_HALVES 17 /* its bytes (2 + 32) in halves */

/* Halves that n values take in type t (n a multiple of 32 for q8_0). */
static inline size_t kvq_halves(kvq_type t, size_t n) {
    return t == KVQ_Q8_0 ? n / KVQ_Q8_0_BLOCK * KVQ_Q8_0_BLOCK_HALVES : n;
}

/* Value i of a row stored as type t, widened to float (exact). */
static inline float kvq_at(kvq_type t, const uint16_t *row, int i) {
    if (t != KVQ_Q8_0) return fp16_to_f32(row[i]);
    const uint16_t *blk = row + (size_t)(i / KVQ_Q8_0_BLOCK) * KVQ_Q8_0_BLOCK_HALVES;
    return (float)((const int8_t *)(blk + 1))[i % KVQ_Q8_0_BLOCK] * fp16_to_f32(blk[0]);
}

/* "f16" / "q8_0". */
const char *kvq_name(kvq_type t);
/* The type named s (NULL: f16); STRATA_EINVAL naming the choices otherwise. */
int kvq_parse(const char *s, kvq_type *t, strata_err *err);
/* STRATA_EINVAL, with the reason, when heads of head_dim values cannot
 * be stored in type t (q8_0: head_dim not a multiple of 32). */
int kvq_check(kvq_type t, int head_dim, strata_err *err);
/* The numerics id of a KV type, mixed into the block hashes
 * (cache_numerics_fingerprint): base ("cpu") for f16, so caches written
 * before stay valid; "<base>+kv-q8_0" otherwise. */
const char *kvq_numerics(kvq_type t, const char *base, char *buf, size_t cap);

/* Stores n floats (n % 32 == 0 for q8_0) as type t at dst. The same
 * bytes on every CPU (plain scalar code, one rounding order). */
void kvq_write_row(kvq_type t, const float *x, uint16_t *dst, int n);
/* The n values at src, widened to floats (the values attention reads). */
void kvq_read_row(kvq_type t, const uint16_t *src, float *x, int n);

#endif
