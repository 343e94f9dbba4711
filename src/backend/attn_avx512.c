/* attn_avx512.c - attention tile step with AVX-512F (see attn.h).
 *
 * The same algorithm as attn_avx2.c, sixteen keys per register: a tile's
 * 64 scores are 4 FMA chains over the dims (q[0] k_j[0] first), keys
 * outside [lo, hi) masked to -inf, then the running max, e^(s - m') with
 * the same polynomial in 16 lanes, a fixed sum tree, and acc = acc * alpha
 * + p_j v_j for j = lo .. hi-1 in order, 16 dims per register. Bits differ
 * from the avx2 level (other sum trees), never between calls of this one.
 * The tile fill is pure data movement: the avx2 one serves. head_dim must
 * be a multiple of 16 (at most 512); other shapes fall back to avx2. */
#include <immintrin.h>
#include <math.h>

#include "backend/attn.h"
#include "backend/attn_simd.h"

#define T ATTN_KV_TILE
#define UNROLL _Pragma("GCC unroll 8")

/* acc[0 .. 16 nb) = acc * alpha + sum over j in [lo, hi) of p[j] v_j. */
static inline __attribute__((always_inline)) void pv_block(int nb, float *acc, const float *vt, int d,
                                                           const float *p, int lo, int hi, float alpha) {
    __m512 a[8];
    UNROLL for (int u = 0; u < nb; u++) a[u] = _mm512_loadu_ps(acc + 16 * u);
    if (alpha != 1.0f) {
        __m512 al = _mm512_set1_ps(alpha);
        UNROLL for (int u = 0; u < nb; u++) a[u] = _mm512_mul_ps(a[u], al);
    }
    for (int j = lo; j < hi; j++) {
        __m512 b = _mm512_set1_ps(p[j]);
        const float *v = vt + (size_t)j * d;
        UNROLL for (int u = 0; u < nb; u++) a[u] = _mm512_fmadd_ps(b, _mm512_loadu_ps(v + 16 * u), a[u]);
    }
    UNROLL for (int u = 0; u < nb; u++) _mm512_storeu_ps(acc + 16 * u, a[u]);
}

/* Steps 2 and 3 for one query: keys outside [lo, hi) to -inf, the running
 * max, weights p = e^(s - m') with their sum into st; returns alpha. */
static inline __attribute__((always_inline)) float softmax_tile(int d, __m512 s[4], int lo, int hi, float *st,
                                                                 float *p) {
    __m512 ninf = _mm512_set1_ps(-INFINITY);
    if (lo > 0 || hi < T) {
        uint64_t in = (hi >= 64 ? ~0ull : (1ull << hi) - 1) & ~((1ull << lo) - 1);
        UNROLL for (int g = 0; g < 4; g++) s[g] = _mm512_mask_blend_ps((__mmask16)(in >> (16 * g)), ninf, s[g]);
    }
    float m = st[d], tmax = attn_hmax16(_mm512_max_ps(_mm512_max_ps(s[0], s[1]), _mm512_max_ps(s[2], s[3])));
    float mn = m > tmax ? m : tmax, alpha = expf(m - mn);
    __m512 vm = _mm512_set1_ps(mn);
    UNROLL for (int g = 0; g < 4; g++) {
        s[g] = attn_exp512(_mm512_sub_ps(s[g], vm));
        _mm512_storeu_ps(p + 16 * g, s[g]);
    }
    st[d + 1] = st[d + 1] * alpha + attn_hsum16(_mm512_add_ps(_mm512_add_ps(s[0], s[1]), _mm512_add_ps(s[2], s[3])));
    st[d] = mn;
    return alpha;
}

static void step_avx512(int d, const float *q, const float *kt, const float *vt, int lo, int hi, float *st,
                        float *p) {
    /* 1. scores */
    __m512 s[4];
    UNROLL for (int g = 0; g < 4; g++) s[g] = _mm512_setzero_ps();
    for (int i = 0; i < d; i++) {
        __m512 b = _mm512_set1_ps(q[i]);
        const float *k = kt + (size_t)i * T;
        UNROLL for (int g = 0; g < 4; g++) s[g] = _mm512_fmadd_ps(b, _mm512_loadu_ps(k + 16 * g), s[g]);
    }
    /* 2., 3. */
    float alpha = softmax_tile(d, s, lo, hi, st, p);
    /* 4. weighted values, 128 dims at a time (then 64, 32, 16) */
    int i = 0;
    for (; d - i >= 128; i += 128) pv_block(8, st + i, vt + i, d, p, lo, hi, alpha);
    if (d - i >= 64) pv_block(4, st + i, vt + i, d, p, lo, hi, alpha), i += 64;
    if (d - i >= 32) pv_block(2, st + i, vt + i, d, p, lo, hi, alpha), i += 32;
    if (d - i >= 16) pv_block(1, st + i, vt + i, d, p, lo, hi, alpha);
}

/* pv_block for two queries at once: each value load feeds both. */
static inline __attribute__((always_inline)) void pv_block2(int nb, float *acc0, float *acc1, const float *vt,
                                                            int d, const float *p0, const float *p1, int lo,
                                                            int hi, float alpha0, float alpha1) {
    __m512 a[8], c[8];
    UNROLL for (int u = 0; u < nb; u++) a[u] = _mm512_loadu_ps(acc0 + 16 * u), c[u] = _mm512_loadu_ps(acc1 + 16 * u);
    if (alpha0 != 1.0f) {
        __m512 al = _mm512_set1_ps(alpha0);
        UNROLL for (int u = 0; u < nb; u++) a[u] = _mm512_mul_ps(a[u], al);
    }
    if (alpha1 != 1.0f) {
        __m512 al = _mm512_set1_ps(alpha1);
        UNROLL for (int u = 0; u < nb; u++) c[u] = _mm512_mul_ps(c[u], al);
    }
    for (int j = lo; j < hi; j++) {
        __m512 b0 = _mm512_set1_ps(p0[j]), b1 = _mm512_set1_ps(p1[j]);
        const float *v = vt + (size_t)j * d;
        UNROLL for (int u = 0; u < nb; u++) {
            __m512 x = _mm512_loadu_ps(v + 16 * u);
            a[u] = _mm512_fmadd_ps(b0, x, a[u]);
            c[u] = _mm512_fmadd_ps(b1, x, c[u]);
        }
    }
    UNROLL for (int u = 0; u < nb; u++) _mm512_storeu_ps(acc0 + 16 * u, a[u]), _mm512_storeu_ps(acc1 + 16 * u, c[u]);
}

/* step_avx512 for two queries with the same [lo, hi): every key and value
 * load serves both (a head_dim 256 tile is 128 KiB, past L1), and each
 * query's arithmetic is step_avx512's, op for op. */
static void step2_avx512(int d, const float *q0, const float *q1, const float *kt, const float *vt, int lo, int hi,
                         float *st0, float *st1, float *p) {
    __m512 s[4], r[4];
    UNROLL for (int g = 0; g < 4; g++) s[g] = _mm512_setzero_ps(), r[g] = _mm512_setzero_ps();
    for (int i = 0; i < d; i++) {
        __m512 b0 = _mm512_set1_ps(q0[i]), b1 = _mm512_set1_ps(q1[i]);
        const float *k = kt + (size_t)i * T;
        UNROLL for (int g = 0; g < 4; g++) {
            __m512 x = _mm512_loadu_ps(k + 16 * g);
            s[g] = _mm512_fmadd_ps(b0, x, s[g]);
            r[g] = _mm512_fmadd_ps(b1, x, r[g]);
        }
    }
    float alpha0 = softmax_tile(d, s, lo, hi, st0, p), alpha1 = softmax_tile(d, r, lo, hi, st1, p + T);
    int i = 0;
    for (; d - i >= 128; i += 128) pv_block2(8, st0 + i, st1 + i, vt + i, d, p, p + T, lo, hi, alpha0, alpha1);
    if (d - i >= 64) pv_block2(4, st0 + i, st1 + i, vt + i, d, p, p + T, lo, hi, alpha0, alpha1), i += 64;
    if (d - i >= 32) pv_block2(2, st0 + i, st1 + i, vt + i, d, p, p + T, lo, hi, alpha0, alpha1), i += 32;
    if (d - i >= 16) pv_block2(1, st0 + i, st1 + i, vt + i, d, p, p + T, lo, hi, alpha0, alpha1);
}

static const attn_ops ops_avx512 = {attn_fill_avx2, step_avx512, step2_avx512, NULL, NULL, NULL, NULL};

const attn_ops *attn_ops_avx512(int head_dim) {
    return head_dim % 16 == 0 && head_dim <= 512 ? &ops_avx512 : NULL;
}
