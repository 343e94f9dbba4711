/* quant_act_impl.h - activation rows to Q8_0 / Q8_1 / Q8_K, the element
 * code included by quant.c (the base build) and by quant_act_avx2.c /
 * quant_act_avx512.c, so the compiler vectorises the same C at 4 and 8
 * lanes (AVX-512 writes its Q8_0 / Q8_1 / Q8_K by hand and takes only the
 * row loops and F32 from here). Every step is exact per element or
 * order-free (the absolute maximum, integer sums), and -std=c11 contracts
 * nothing into FMA, so every level writes the same bytes (test_quant_act.c
 * compares them). */
#ifndef STRATA_BACKEND_QUANT_ACT_IMPL_H
#define STRATA_BACKEND_QUANT_ACT_IMPL_H

#include <math.h>
#include <string.h>

#include "backend/quant_impl.h"

/* Round half away from zero; |v| <= 127.5 here, so the cast is safe. */
static inline int round_q(float v) { return (int)(v + (v >= 0 ? 0.5f : -0.5f)); }

#define ACT_LANES 16 /* divides every block size (32, 256) */

/* The largest |x| of n values, NaNs left out (fmaxf's value, 0 if all are
 * NaN). Compared as bits: for |x| that is not NaN, the order of the bit
 * patterns is the order of the values, and a maximum is exact and
 * order-free, so ACT_LANES running maxima and then one across them give
 * the serial loop's value at every level. The float loop (a > amax ? a :
 * amax) vectorises at no width without -ffast-math: it was a chain of
 * dependent VMAXSS, 60% of the conversion in Gemma 3's pp512 (perf,
 * issue 29); the integer one vectorises (VPMAXUD). */
static inline float q8_absmax(const float *x, int n) {
    uint32_t m[ACT_LANES] = {0}, mx = 0;
    for (int j = 0; j < n; j += ACT_LANES)
        for (int l = 0; l < ACT_LANES; l++) {
            uint32_t b;
            memcpy(&b, x + j + l, 4);
            b &= 0x7fffffffu;                /* |x| */
            b = b > 0x7f800000u ? 0 : b;     /* a NaN never wins */
            m[l] = b > m[l] ? b : m[l];
        }
    for (int l = 0; l < ACT_LANES; l++) mx = m[l] > mx ? m[l] : mx;
    float amax;
    memcpy(&amax, &mx, 4);
    return amax;
}

/* Symmetric int8 quantization of n values (a multiple of ACT_LANES):
 * returns the scale d. */
static inline float q8_block(const float *x, int8_t *q, int n) {
    float amax = q8_absmax(x, n);
    float d = amax / 127.0f, id = amax > 0 ? 127.0f / amax : 0.0f;
    for (int j = 0; j < n; j++) q[j] = (int8_t)round_q(x[j] * id);
    return d;
}

/* One block of QK values to QK int8 quants: returns d, sets *sum to the
 * quants' sum. The SIMD files pass their own (the same bytes). */
typedef float (*act_q8_blk_fn)(const float *x, int8_t *q, int *sum);

static inline float act_q8_blk_c(const float *x, int8_t *q, int *sum) {
    float d = q8_block(x, q, QK);
    int s = 0;
    for (int j = 0; j < QK; j++) s += q[j];
    *sum = s;
    return d;
}

/* Blocks [b0, b1) of a Q8_0/Q8_1 row of n values in the grouped lane
 * layout of quant_impl.h, blocks by blk; x holds those blocks' values
 * only. The part that ends the row also zeroes the padding blocks of the
 * last group, so the parts of a row together write every byte of it. */
static inline __attribute__((always_inline)) void act_q8_part_with(const float *x, void *dst, int64_t n, int64_t b0,
                                                                   int64_t b1, act_q8_blk_fn blk) {
    int64_t nb = n / QK, nbp = qa8_nbp(nb);
    float *d = dst, *s = d + nbp;
    int8_t *qs = (int8_t *)dst + 8 * nbp;
    for (int64_t b = b0; b < b1; b++) {
        int8_t q[QK];
        int sum;
        int64_t slot = qa8_slot(b);
        d[slot] = blk(x + (b - b0) * QK, q, &sum);
        s[slot] = d[slot] * (float)sum;
        for (int e = 0; e < QK; e += 4) memcpy(qs + qa8_qoff(b, e), q + e, 4);
    }
    for (int64_t b = b1 == nb ? nb : nbp; b < nbp; b++) {
        int64_t slot = qa8_slot(b);
        d[slot] = s[slot] = 0;
        for (int e = 0; e < QK; e += 4) memset(qs + qa8_qoff(b, e), 0, 4);
    }
}

/* The whole row; the padding blocks of the last group are zero. */
static inline __attribute__((always_inline)) void act_q8_with(const float *x, void *dst, int64_t n,
                                                              act_q8_blk_fn blk) {
    memset(dst, 0, (size_t)qa8_nbp(n / QK) * (8 + QK));
    act_q8_part_with(x, dst, n, 0, n / QK, blk);
}

/* Blocks [b0, b1) of a Q8_K row of n values (x: theirs only). */
static inline void act_q8k_part(const float *x, void *dst, int64_t n, int64_t b0, int64_t b1) {
    int64_t nb = n / QK_K;
    float *d = dst;
    int16_t *bs = (int16_t *)(d + nb);
    int8_t *qs = (int8_t *)dst + 36 * nb;
    for (int64_t b = b0; b < b1; b++) {
        int8_t *q = qs + b * QK_K;
        d[b] = q8_block(x + (b - b0) * QK_K, q, QK_K);
        for (int g = 0; g < 16; g++) {
            int sum = 0;
            for (int j = 0; j < 16; j++) sum += q[16 * g + j];
            bs[16 * b + g] = (int16_t)sum;
        }
    }
}

/* Values [i0, i1) of a row of n (x: theirs only) in format act; i0 and
 * i1 on the format's block edges (quant.h, quant_act_part). blk: the
 * Q8_0/Q8_1 block the level uses. */
static inline __attribute__((always_inline)) void quant__act_part_with(qtype act, const float *x, void *dst, int64_t n,
                                                                       int64_t i0, int64_t i1, act_q8_blk_fn blk) {
    switch (act) {
    case QT_Q8_0:
    case QT_Q8_1: act_q8_part_with(x, dst, n, i0 / QK, i1 / QK, blk); break;
    case QT_Q8_K: act_q8k_part(x, dst, n, i0 / QK_K, i1 / QK_K); break;
    case QT_F32: memcpy((float *)dst + i0, x, (size_t)(i1 - i0) * 4); break;
    default: break;
    }
}

static inline void quant__act_row(qtype act, const float *x, void *dst, int64_t n) {
    switch (act) {
    case QT_Q8_0:
    case QT_Q8_1: act_q8_with(x, dst, n, act_q8_blk_c); break;
    case QT_Q8_K: act_q8k_part(x, dst, n, 0, n / QK_K); break;
    case QT_F32: memcpy(dst, x, (size_t)n * 4); break;
    default: break;
    }
}

#endif
