/* delta_avx512.c - the delta rule with AVX-512F, dim 128 (see delta.h).
 *
 * A row of S is 8 registers. Rows go in pairs (two independent chains for
 * the out-of-order core), each pair kept in registers across a block of
 * TB tokens whose k and q stay in L1. Per token and row: S *= decay (8
 * mul), S k (4 chains of 2, then (a0 + a1) + (a2 + a3) and a fixed
 * horizontal sum), d = (v - S k) * beta, S += d k (8 FMA), S q as S k,
 * times scale. A lone last row runs the same step: its bits do not depend
 * on a partner. Other dims fall back to the avx2 kernel. */
#include <immintrin.h>

#include "backend/delta.h"

#define NV 8  /* registers per row: dim 128 */
#define TB 32 /* tokens per block: 32 x (k + q) = 32 KiB of L1 */
#define UNROLL _Pragma("GCC unroll 8")

/* Fixed-order horizontal sum: halves, quarters, then pairs. */
static inline __attribute__((always_inline)) float hsum(__m512 x) {
    __m256 lo = _mm512_castps512_ps256(x);
    __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1));
    __m256 a = _mm256_add_ps(lo, hi);
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b = _mm_add_ss(b, _mm_movehdup_ps(b));
    return _mm_cvtss_f32(b);
}

static inline __attribute__((always_inline)) float dot(const __m512 *r, const float *x) {
    __m512 a0 = _mm512_mul_ps(r[0], _mm512_loadu_ps(x));
    __m512 a1 = _mm512_mul_ps(r[1], _mm512_loadu_ps(x + 16));
    __m512 a2 = _mm512_mul_ps(r[2], _mm512_loadu_ps(x + 32));
    __m512 a3 = _mm512_mul_ps(r[3], _mm512_loadu_ps(x + 48));
    a0 = _mm512_fmadd_ps(r[4], _mm512_loadu_ps(x + 64), a0);
    a1 = _mm512_fmadd_ps(r[5], _mm512_loadu_ps(x + 80), a1);
    a2 = _mm512_fmadd_ps(r[6], _mm512_loadu_ps(x + 96), a2);
    a3 = _mm512_fmadd_ps(r[7], _mm512_loadu_ps(x + 112), a3);
    return hsum(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

/* One token on one row held in r. */
static inline __attribute__((always_inline)) void step(__m512 *r, const float *k, const float *q, float v, float beta, __m512 decay,
                        float scale, float *o) {
    UNROLL for (int i = 0; i < NV; i++) r[i] = _mm512_mul_ps(r[i], decay);
    __m512 d = _mm512_set1_ps((v - dot(r, k)) * beta);
    UNROLL for (int i = 0; i < NV; i++) r[i] = _mm512_fmadd_ps(d, _mm512_loadu_ps(k + 16 * i), r[i]);
    *o = dot(r, q) * scale;
}

/* Rows j and j + 1 (pair) or j alone over tokens [t0, t1); pair is a
 * constant at each call, so the loop has no branch. */
static inline __attribute__((always_inline)) void rows_block(const delta_run *R, float *S, int j, int pair, int t0, int t1, float scale) {
    __m512 a[NV], b[NV];
    float *ra = S + (size_t)j * 128, *rb = ra + 128;
    UNROLL for (int i = 0; i < NV; i++) a[i] = _mm512_loadu_ps(ra + 16 * i);
    if (pair) UNROLL for (int i = 0; i < NV; i++) b[i] = _mm512_loadu_ps(rb + 16 * i);
    for (int t = t0; t < t1; t++) {
        const float *k = R->k + t * R->x_stride, *q = R->q + t * R->x_stride;
        const float *v = R->v + t * R->x_stride + j;
        float beta = R->beta[t * R->g_stride], *o = R->o + t * R->o_stride + j;
        __m512 decay = _mm512_set1_ps(R->decay[t * R->g_stride]);
        step(a, k, q, v[0], beta, decay, scale, o);
        if (pair) step(b, k, q, v[1], beta, decay, scale, o + 1);
    }
    UNROLL for (int i = 0; i < NV; i++) _mm512_storeu_ps(ra + 16 * i, a[i]);
    if (pair) UNROLL for (int i = 0; i < NV; i++) _mm512_storeu_ps(rb + 16 * i, b[i]);
}

static void rows128(const delta_run *R, float *S, int dim, int r0, int r1, float scale) {
    for (int t0 = 0; t0 < R->n_tok; t0 += TB) {
        int t1 = t0 + TB < R->n_tok ? t0 + TB : R->n_tok;
        int j = r0;
        for (; j + 1 < r1; j += 2) rows_block(R, S, j, 1, t0, t1, scale);
        if (j < r1) rows_block(R, S, j, 0, t0, t1, scale);
    }
}

delta_fn delta_fn_avx512(int dim) {
    return dim == 128 ? rows128 : NULL;
}
