/* quant_impl.h - internals shared by the quant kernels of every SIMD level
 * (quant.c, quant_scalar.c, quant_avx2.c, quant_avx512.c) and the tests.
 *
 * Holds the weight block layouts (facts of the GGUF format), the in-memory
 * layout of Strata's activation formats (ours, never on disk), and the
 * per-level kernel tables. Not part of the public API: model/ codes against
 * quant.h only. */
#ifndef STRATA_QUANT_IMPL_H
#define STRATA_QUANT_IMPL_H

#include "backend/quant.h"

#include <stdint.h>
#include <string.h>

#define QK 32   /* elements per block of the legacy formats */
#define QK_K 256 /* elements per super-block of the K-quants */

/* Weight block layouts (little-endian, packed, no padding):
 *   Q4_0 18 B: f16 d, u8 qs[16]          x = d * (q - 8)
 *   Q4_1 20 B: f16 d, f16 m, u8 qs[16]   x = d * q + m
 *   Q5_0 22 B: f16 d, u32 qh, u8 qs[16]  x = d * (q - 16)
 *   Q5_1 24 B: f16 d, f16 m, u32 qh, u8 qs[16]  x = d * q + m
 *   Q8_0 34 B: f16 d, i8 qs[32]          x = d * q
 * Nibbles: element j < 16 is the low nibble of qs[j], element j + 16 the
 * high nibble; the fifth bit of element j is bit j of qh.
 *   Q4_K 144 B: f16 d, f16 dmin, u8 scales[12], u8 qs[128]
 *   Q5_K 176 B: f16 d, f16 dmin, u8 scales[12], u8 qh[32], u8 qs[128]
 *   Q6_K 210 B: u8 ql[128], u8 qh[64], i8 scales[16], f16 d
 * Q4_K/Q5_K: eight sub-blocks of 32 with 6-bit scale sc and min m (packed
 * in scales[12], see quant_kscale); x = d*sc*q - dmin*m. Sub-block 2i is
 * the low nibbles of qs[32i..32i+31], sub-block 2i+1 their high nibbles;
 * Q5_K's fifth bit of element l of sub-block j is bit j of qh[l].
 * Q6_K: element h*128 + s*64 + j (h, s in {0,1}, j < 64) has low bits
 * nibble s of ql[h*64 + j] and high bits (qh[h*32 + j%32] >> 2*(2s + j/32))
 * & 3; x = d * scales[e/16] * (q - 32).
 *   MXFP4 17 B: u8 e, u8 qs[16]          x = 2^(e-128) * kv[q]
 * (OCP microscaling FP4: E2M1 values with one E8M0 exponent per 32; ggml
 * type 39.) Nibbles as Q4_0. kv (quant_mxfp4_kv) holds the E2M1 values
 * doubled, so they are the integers 0..12 with sign bit 3, and the scale
 * is halved to match: 2^(e-127) / 2 (quant_e8m0_half; e = 0 and 1 give
 * the subnormals 2^-128 and 2^-127, as ggml and the gguf package do). */
#define QB_Q4_0 18
#define QB_Q4_1 20
#define QB_Q5_0 22
#define QB_Q5_1 24
#define QB_Q8_0 34
#define QB_Q4_K 144
#define QB_Q5_K 176
#define QB_Q6_K 210
#define QB_MXFP4 17 /* bytes per MXFP4 block (public: sizes and benches) */

static const int8_t quant_mxfp4_kv[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* The E8M0 exponent e as 2^(e-128), exactly (bits built, no libm). */
static inline float quant_e8m0_half(uint8_t e) {
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Activation formats (Strata's own layout, never on disk):
 *   Q8_0 and Q8_1 row of n elements, nb = n / 32 blocks, padded to
 *   nbp = qa8_nbp(nb) (a multiple of 16; padding blocks are all zero):
 *       float d[nbp]; float s[nbp]; int8_t qs[32 * nbp];
 *     x ~= d * q with q in [-127, 127]; s = d * sum(q) of the block (used
 *     by the weight formats with a minimum, Q4_1 and Q5_1, and by the
 *     unsigned-weight trick of the AVX-512 Q8_0 kernel).
 *     Blocks come in groups of 16, one block per 32-bit SIMD lane p: lane p
 *     of group G holds block 16G + qa8_lane(p). d and s are in lane order;
 *     qs of group G is 8 chunks of 64 bytes, chunk v holding elements
 *     4v..4v+3 of the block of lane p at bytes 4p..4p+3. So one VPDPBUSD
 *     per chunk accumulates 16 blocks' dot products in 16 lanes and the
 *     float scaling is one convert + FMA per 16 blocks.
 *     qa8_lane(p) = 4 (p % 4) + p / 4 (self-inverse) is what a 4x4 dword
 *     transpose of four 4-block weight loads produces (quant_avx512.c).
 *   Q8_K row, nb = n / 256:
 *       float d[nb]; int16_t bsums[16 * nb]; int8_t qs[n];
 *     bsums[16b + g] = sum of q over elements 16g..16g+15 of block b.
 *   F32 row: float x[n].
 * Rows must start 4-byte aligned; quant_act_row_bytes gives their size. */
#define QA8_GROUP 16 /* blocks per activation group */
static inline int64_t qa8_nbp(int64_t nb) { return (nb + QA8_GROUP - 1) & ~(int64_t)(QA8_GROUP - 1); }
static inline int qa8_lane(int j) { return 4 * (j & 3) + (j >> 2); }
/* Index of block b's d and s in a Q8_0/Q8_1 row (lane order in groups). */
static inline int64_t qa8_slot(int64_t b) { return (b & ~(int64_t)15) + qa8_lane((int)(b & 15)); }
/* Byte offset of element e (0..31) of block b within qs. */
static inline int64_t qa8_qoff(int64_t b, int e) {
    return (b >> 4) * 512 + (e >> 2) * 64 + 4 * qa8_lane((int)(b & 15)) + (e & 3);
}
static inline const float *qa8_d(const void *row) { return (const float *)row; }
static inline const float *qa8_s(const void *row, int64_t nb) {
    return (const float *)row + qa8_nbp(nb);
}
static inline const int8_t *qa8_qs(const void *row, int64_t nb) {
    return (const int8_t *)row + 8 * qa8_nbp(nb);
}
static inline const float *qak_d(const void *row) { return (const float *)row; }
static inline const int16_t *qak_bsums(const void *row, int64_t nb) {
    return (const int16_t *)((const float *)row + nb);
}
static inline const int8_t *qak_qs(const void *row, int64_t nb) {
    return (const int8_t *)row + 36 * nb;
}

/* Unpack the 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K
 * super-block from its 12 packed bytes. */
static inline void quant_kscale(const uint8_t *s, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

static inline uint16_t quant_rd16(const uint8_t *p) {
    return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t quant_rd32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}

/* The sum of 16 lanes in the order every MXFP4 kernel uses: lane i + lane
 * i + 8, then + 4, then (0 + 2) + (1 + 3). It is the order of the
 * AVX-512 and AVX2 reductions (lg_hsum, hsum8 of the two halves' sum). */
static inline float quant_mx_hsum16(const float *v) {
    float h[8], q[4];
    for (int i = 0; i < 8; i++) h[i] = v[i] + v[i + 8];
    for (int i = 0; i < 4; i++) q[i] = h[i] + h[i + 4];
    return (q[0] + q[2]) + (q[1] + q[3]);
}

typedef void (*quant_gemm_fn)(const void *w, size_t w_row_bytes, int64_t k,
                              const void *xq, size_t xq_row_bytes, int n_tok,
                              float *y, int64_t ldy, int r0, int r1);

/* Kernel of weight type t at one level, or NULL when that level has none
 * (quant_gemm then falls back to the next lower level). */
quant_gemm_fn quant_scalar_kernel(qtype t);
quant_gemm_fn quant_avx2_kernel(qtype t);
quant_gemm_fn quant_avx512_kernel(qtype t);
quant_gemm_fn quant_amx_kernel(qtype t);
/* The amx level's K-quant kernels (quant_amx_kq_avx512.c), NULL for
 * other types; quant_amx_kernel hands them out. */
quant_gemm_fn quant_amx_kq_kernel(qtype t);
/* The amx level's legacy-format kernels on token tiles the caller laid
 * out (quant.h's quant_xtiles; quant_amx_avx512.c): bytes of one tile of
 * QUANT_XTILE tokens (0 where that kernel does not take t, k and n_tok),
 * tiles [i0, i1) of xq's rows, the matmul on them. */
size_t quant_amx_xtile_bytes(qtype t, int64_t k, int n_tok);
void quant_amx_xtiles(qtype t, int64_t k, const void *xq, size_t xq_row_bytes, int n_tok, int i0, int i1, void *xt);
void quant_amx_gemm_xt(qtype t, const void *w, size_t w_row_bytes, int64_t k, const void *xt, int n_tok, float *y,
                       int64_t ldy, int r0, int r1);
/* Sixteen Q4_K, Q5_K or Q6_K rows with the rows in a vector's lanes, per
 * super-block KQ16_SB bytes: 64 chunk vectors (chunk c, lane r: row r's
 * unsigned quants of elements 4c..4c+3; also the AMX tiles' B operand
 * rows), at KQ16_SC one int32 vector per scale (Q4_K/Q5_K: 8 sub-blocks'
 * sc_s; Q6_K: 16 groups' sc_g), at KQ16_MP 8 vectors of int16 pairs for
 * the activations' bsums dwords j (Q4_K/Q5_K the min (m_j, m_j); Q6_K the
 * offset (-32 sc_2j, -32 sc_2j+1)), at KQ16_DW and KQ16_DM the rows' d and
 * dmin as floats (Q6_K: dmin 0). quant_avx512_kq_prep16 (quant_avx512.c)
 * writes nb super-blocks of rows[0..16) to dst (64-byte aligned); the
 * avx512 prefill and the amx level's K-quant kernels read them. */
enum { KQ16_SC = 4096, KQ16_MP = 5120, KQ16_DW = 5632, KQ16_DM = 5696, KQ16_SB = 5760 };
void quant_avx512_kq_prep16(qtype t, const uint8_t *const *rows, int64_t nb, uint8_t *dst);

/* A work buffer of at least n bytes, 64-byte aligned, kept per thread
 * across calls (freed when the thread ends); valid until the next call
 * (quant_work.c). */
uint8_t *quant_work(size_t n);

/* The kernel quant_gemm would use for t at `level` (with fallback). */
quant_gemm_fn quant_kernel_at(int level, qtype t);

#endif
