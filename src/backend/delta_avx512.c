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
#include "backend/simd_tr.h"

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

/* ---- 16 rows in the lanes (runs of LANES_MIN_TOK tokens and more) ------- */

/* The same operations, element for element, on 16 rows at once: lane i of
 * T[c] is column c of row j + i (the rows transposed into T on entry and
 * back on exit, 8 KiB that stay in L1). A lane's arithmetic is the pair
 * kernel's for its row, in the same order with the same operands, so its
 * bits are too (delta_batch_invariance memcmps runs on either side of
 * LANES_MIN_TOK): dot()'s lane l, (T[l] x[l] + T[64 + l] x[64 + l]) + ...,
 * is one vector here, and hsum's tree over the lanes is a tree of vector
 * adds. Why: the pair kernel's token step is a chain through two
 * horizontal sums (~48 cycles a row-token here); 16 rows side by side
 * have none, and a token's update, its S q, the next token's decay and
 * S k share one pass over T. */
#define RL 16
#define LANES_MIN_TOK 8 /* fewer tokens (decode): the pair kernel (the two transposes cost more) */

typedef struct {
    __m512 q, k;
} dot2;

/* Column group l of one pass (columns l + 16 m): with upd, T = d k + T and
 * dot()'s lane l of T with q; with next, T *= decay and lane l with kn. */
static inline __attribute__((always_inline)) dot2 lanes_group(__m512 *T, int l, int upd, int next, __m512 d,
                                                              const float *k, const float *q, __m512 decay,
                                                              const float *kn) {
    __m512 aq[4], ak[4];
    UNROLL for (int m = 0; m < 4; m++) {
        int c = 16 * m + l, c2 = c + 64;
        __m512 x = T[c], y = T[c2];
        if (upd) {
            x = _mm512_fmadd_ps(d, _mm512_set1_ps(k[c]), x);
            y = _mm512_fmadd_ps(d, _mm512_set1_ps(k[c2]), y);
            aq[m] = _mm512_fmadd_ps(y, _mm512_set1_ps(q[c2]), _mm512_mul_ps(x, _mm512_set1_ps(q[c])));
        }
        if (next) {
            x = _mm512_mul_ps(x, decay);
            y = _mm512_mul_ps(y, decay);
            ak[m] = _mm512_fmadd_ps(y, _mm512_set1_ps(kn[c2]), _mm512_mul_ps(x, _mm512_set1_ps(kn[c])));
        }
        T[c] = x, T[c2] = y;
    }
    dot2 r = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    if (upd) r.q = _mm512_add_ps(_mm512_add_ps(aq[0], aq[1]), _mm512_add_ps(aq[2], aq[3]));
    if (next) r.k = _mm512_add_ps(_mm512_add_ps(ak[0], ak[1]), _mm512_add_ps(ak[2], ak[3]));
    return r;
}

static inline __attribute__((always_inline)) dot2 add2(dot2 a, dot2 b) {
    return (dot2){_mm512_add_ps(a.q, b.q), _mm512_add_ps(a.k, b.k)};
}

/* hsum's tree over the groups x_l: h1(l) = x_l + x_{l+8}, h2(l) = h1(l) +
 * h1(l + 4), h3(l) = h2(l) + h2(l + 2), then h3(0) + h3(1); visited in
 * that order so few partial sums are live at a time. */
static inline __attribute__((always_inline)) dot2 lanes_pass(__m512 *T, int upd, int next, __m512 d, const float *k,
                                                             const float *q, __m512 decay, const float *kn) {
#define X(l) lanes_group(T, l, upd, next, d, k, q, decay, kn)
#define H1(l) add2(X(l), X(l + 8))
    dot2 h2[4];
    for (int l = 0; l < 4; l++) {
        dot2 a = H1(l);
        h2[l] = add2(a, H1(l + 4));
    }
#undef H1
#undef X
    return add2(add2(h2[0], h2[2]), add2(h2[1], h2[3]));
}

/* Rows j .. j + nr - 1 (nr <= 16) of S over the run's tokens. */
static void lanes_block(const delta_run *R, float *S, int j, int nr, float scale) {
    __m512 T[128];
    const __mmask16 live = (__mmask16)((1u << nr) - 1);
    for (int b = 0; b < 8; b++) { /* rows to columns */
        __m512i r[RL];
        UNROLL for (int i = 0; i < RL; i++)
            r[i] = i < nr ? _mm512_loadu_si512(S + (size_t)(j + i) * 128 + 16 * b) : _mm512_setzero_si512();
        simd_tr16(r);
        UNROLL for (int c = 0; c < RL; c++) T[16 * b + c] = _mm512_castsi512_ps(r[c]);
    }
    const __m512 vs = _mm512_set1_ps(scale), z = _mm512_setzero_ps();
    /* the first token's decay and S k */
    __m512 dk = lanes_pass(T, 0, 1, z, NULL, NULL, _mm512_set1_ps(R->decay[0]), R->k).k;
    for (int t = 0; t < R->n_tok; t++) {
        const float *k = R->k + t * R->x_stride, *q = R->q + t * R->x_stride;
        __m512 v = _mm512_maskz_loadu_ps(live, R->v + t * R->x_stride + j);
        __m512 d = _mm512_mul_ps(_mm512_sub_ps(v, dk), _mm512_set1_ps(R->beta[t * R->g_stride]));
        dot2 r;
        if (t + 1 < R->n_tok)
            r = lanes_pass(T, 1, 1, d, k, q, _mm512_set1_ps(R->decay[(t + 1) * R->g_stride]), k + R->x_stride);
        else
            r = lanes_pass(T, 1, 0, d, k, q, z, NULL);
        _mm512_mask_storeu_ps(R->o + t * R->o_stride + j, live, _mm512_mul_ps(r.q, vs));
        dk = r.k;
    }
    for (int b = 0; b < 8; b++) { /* columns back to rows */
        __m512i r[RL];
        UNROLL for (int c = 0; c < RL; c++) r[c] = _mm512_castps_si512(T[16 * b + c]);
        simd_tr16(r);
        UNROLL for (int i = 0; i < RL; i++)
            if (i < nr) _mm512_storeu_si512(S + (size_t)(j + i) * 128 + 16 * b, r[i]);
    }
}

static void rows128(const delta_run *R, float *S, int dim, int r0, int r1, float scale) {
    if (R->n_tok >= LANES_MIN_TOK) {
        for (int j = r0; j < r1; j += RL) lanes_block(R, S, j, r1 - j < RL ? r1 - j : RL, scale);
        return;
    }
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
