/* kvq.h - the element formats of the KV cache (`--kv-type`).
 *
 * A K or V row (one token, every KV head: kv_dim values) is stored as
 *   f16:  kv_dim IEEE half floats (2 bytes a value);
 *   q8_0: kv_dim / 32 blocks of {half scale d, 32 int8 q} (34 bytes per 32
 *         values, ggml's block_q8_0 layout: 1.0625 bytes a value), the
 *         value being q * d;
 *   q4_0: kv_dim / 32 blocks of {half scale d, 16 bytes of nibbles} (18
 *         bytes per 32 values, ggml's block_q4_0: byte j holds value j in
 *         its low nibble and value j + 16 in its high one), the value
 *         being (nibble - 8) * d.
 * Rows are written once, when the forward pass computes them (quantized
 * from floats then), and read by attention (backend/attn.h) as stored: a
 * q8_0 or q4_0 value widens to float exactly (a small integer times a
 * half is exact in a float), so every level widens a tile to the same
 * floats (except q8_0 keys where they are scored in int8, attn_qk_int8:
 * they stay int8 there, and the query is quantized to meet them). A block never straddles two heads: the head size must be a
 * multiple of 32 (kvq_check). Sizes are counted in halves (uint16_t), the
 * unit of the KV pool's memory: a q8_0 block is 17 halves, a q4_0 one 9.
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
    KVQ_Q4_0 = 2,
} kvq_type;

#define KVQ_BLOCK 32             /* values per q8_0 or q4_0 block */
#define KVQ_Q8_0_BLOCK KVQ_BLOCK
#define KVQ_Q8_0_BLOCK_HALVES 17 /* its bytes (2 + 32) in halves */
#define KVQ_Q4_0_BLOCK_HALVES 9  /* 2 + 16 bytes */

/* Halves one block of 32 values takes in type t (f16: 32). */
static inline size_t kvq_block_halves(kvq_type t) {
    return t == KVQ_Q8_0 ? KVQ_Q8_0_BLOCK_HALVES : t == KVQ_Q4_0 ? KVQ_Q4_0_BLOCK_HALVES : KVQ_BLOCK;
}

/* Halves that n values take in type t (n a multiple of 32 unless f16). */
static inline size_t kvq_halves(kvq_type t, size_t n) {
    return t == KVQ_F16 ? n : n / KVQ_BLOCK * kvq_block_halves(t);
}

/* Value i of a row stored as type t, widened to float (exact). */
static inline float kvq_at(kvq_type t, const uint16_t *row, int i) {
    if (t == KVQ_F16) return fp16_to_f32(row[i]);
    const uint16_t *blk = row + (size_t)(i / KVQ_BLOCK) * kvq_block_halves(t);
    int j = i % KVQ_BLOCK;
    if (t == KVQ_Q8_0) return (float)((const int8_t *)(blk + 1))[j] * fp16_to_f32(blk[0]);
    uint8_t b = ((const uint8_t *)(blk + 1))[j % 16];
    return (float)((j < 16 ? b & 15 : b >> 4) - 8) * fp16_to_f32(blk[0]);
}

/* The --kv-type flag's help, one text for every command that takes it. */
#define KVQ_HELP                                                                                                   \
    "how K/V are stored in memory, on disk and on Redis: f16, q8_0 (17/32 the bytes) or q4_0 (9/32); the "           \
    "quantized types need a head size that is a multiple of 32 (f16)"

/* "f16" / "q8_0" / "q4_0". */
const char *kvq_name(kvq_type t);
/* The type named s (NULL: f16); STRATA_EINVAL naming the choices otherwise. */
int kvq_parse(const char *s, kvq_type *t, strata_err *err);
/* STRATA_EINVAL, with the reason, when heads of head_dim values cannot
 * be stored in type t (q8_0, q4_0: head_dim not a multiple of 32). */
int kvq_check(kvq_type t, int head_dim, strata_err *err);
/* The numerics id of a KV type, mixed into the block hashes
 * (cache_numerics_fingerprint): base ("cpu") for f16, so caches written
 * before stay valid; "<base>+kv-q8_0" otherwise. */
const char *kvq_numerics(kvq_type t, const char *base, char *buf, size_t cap);

/* Stores n floats (n % 32 == 0 unless f16) as type t at dst. The same
 * bytes on every CPU (plain scalar code, one rounding order). */
void kvq_write_row(kvq_type t, const float *x, uint16_t *dst, int n);
/* The n values at src, widened to floats (the values attention reads). */
void kvq_read_row(kvq_type t, const uint16_t *src, float *x, int n);
/* n floats (n % 32 == 0) quantized as q8_0 blocks are, but with each
 * block's scale kept as a float: int8s to q, n / 32 scales to d (a query
 * scored against q8_0 keys in int8, backend/attn.h). Scalar code, one
 * rounding order: the same bytes for the same row on every CPU. */
void kvq_quant_q8(const float *x, int n, int8_t *q, float *d);

#endif
