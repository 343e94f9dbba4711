/* delta_avx2.c - the delta rule with AVX2 + FMA, dim a multiple of 32
 * (see delta.h).
 *
 * A row of dim 128 is 16 registers, all AVX2 has, so rows stay in memory
 * (L1: the row is reread every token) and each token is two passes over
 * the row: (1) x = row * decay, S k summed in 4 chains; (2) x = row *
 * decay again (the same bits), row = x + d k stored, S q summed in 4
 * chains. Chains end as (a0 + a1) + (a2 + a3), then a fixed horizontal
 * sum. Rows go in pairs over a block of TB tokens (k, q in L1); a lone
 * last row runs the same step. */
#include <immintrin.h>

#include "backend/delta.h"

#define TB 32

static inline float hsum(__m256 x) {
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b = _mm_add_ss(b, _mm_movehdup_ps(b));
    return _mm_cvtss_f32(b);
}

static inline float sum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    return hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
}

/* One token on one row (in memory). */
static inline void step(float *row, int dim, const float *k, const float *q, float v, float beta, __m256 decay,
                        float scale, float *o) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int i = 0; i < dim; i += 32) {
        a0 = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_loadu_ps(row + i), decay), _mm256_loadu_ps(k + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_loadu_ps(row + i + 8), decay), _mm256_loadu_ps(k + i + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_loadu_ps(row + i + 16), decay), _mm256_loadu_ps(k + i + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_loadu_ps(row + i + 24), decay), _mm256_loadu_ps(k + i + 24), a3);
    }
    __m256 d = _mm256_set1_ps((v - sum4(a0, a1, a2, a3)) * beta);
    a0 = a1 = a2 = a3 = _mm256_setzero_ps();
    for (int i = 0; i < dim; i += 32) {
        __m256 x[4];
        for (int u = 0; u < 4; u++) {
            x[u] = _mm256_fmadd_ps(d, _mm256_loadu_ps(k + i + 8 * u),
                                   _mm256_mul_ps(_mm256_loadu_ps(row + i + 8 * u), decay));
            _mm256_storeu_ps(row + i + 8 * u, x[u]);
        }
        a0 = _mm256_fmadd_ps(x[0], _mm256_loadu_ps(q + i), a0);
        a1 = _mm256_fmadd_ps(x[1], _mm256_loadu_ps(q + i + 8), a1);
        a2 = _mm256_fmadd_ps(x[2], _mm256_loadu_ps(q + i + 16), a2);
        a3 = _mm256_fmadd_ps(x[3], _mm256_loadu_ps(q + i + 24), a3);
    }
    *o = sum4(a0, a1, a2, a3) * scale;
}

static inline __attribute__((always_inline)) void rows_block(const delta_run *R, float *S, int dim, int j,
                                                             int pair, int t0, int t1, float scale) {
    float *ra = S + (size_t)j * dim, *rb = ra + dim;
    for (int t = t0; t < t1; t++) {
        const float *k = R->k + t * R->x_stride, *q = R->q + t * R->x_stride;
        const float *v = R->v + t * R->x_stride + j;
        float beta = R->beta[t * R->g_stride], *o = R->o + t * R->o_stride + j;
        __m256 decay = _mm256_set1_ps(R->decay[t * R->g_stride]);
        step(ra, dim, k, q, v[0], beta, decay, scale, o);
        if (pair) step(rb, dim, k, q, v[1], beta, decay, scale, o + 1);
    }
}

static void rows(const delta_run *R, float *S, int dim, int r0, int r1, float scale) {
    for (int t0 = 0; t0 < R->n_tok; t0 += TB) {
        int t1 = t0 + TB < R->n_tok ? t0 + TB : R->n_tok;
        int j = r0;
        for (; j + 1 < r1; j += 2) rows_block(R, S, dim, j, 1, t0, t1, scale);
        if (j < r1) rows_block(R, S, dim, j, 0, t0, t1, scale);
    }
    /* gcc (12) emits no VZEROUPPER here (`step`, not inlined, takes a
     * __m256), so the caller's SSE code (the base build's loops, libm)
     * ran with the upper halves dirty: on this Intel Xeon qwen35's
     * prefill at avx2 spent 56% in conv_run and libm's expf after it
     * (0.2% at avx512). */
    _mm256_zeroupper();
}

delta_fn delta_fn_avx2(int dim) {
    return dim > 0 && dim % 32 == 0 ? rows : NULL;
}
