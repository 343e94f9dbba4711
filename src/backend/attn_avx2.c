/* attn_avx2.c - attention with AVX2/FMA/F16C (head_dim a multiple of 8;
 * other sizes fall back to the scalar path). */
#include <immintrin.h>
#include <math.h>

#include "backend/attn.h"

static float hsum8(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

static float dot_q_k(const float *q, const uint16_t *k, int d) {
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < d; i += 8) {
        __m256 kv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + i)));
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), kv, acc);
    }
    return hsum8(acc);
}

void attn_head_avx2(const attn_args *a) {
    int B = a->block_tokens, d = a->head_dim;
    if (d % 8 || d > 512) {
        attn_head_scalar(a);
        return;
    }
    float mx = -INFINITY;
    for (int j = 0; j < a->n_kv; j++) {
        const uint16_t *k = a->k_blocks[j / B] + (size_t)(j % B) * a->stride;
        float s = dot_q_k(a->q, k, d) * a->scale;
        a->scores[j] = s;
        if (s > mx) mx = s;
    }
    float sum = 0;
    for (int j = 0; j < a->n_kv; j++) {
        a->scores[j] = expf(a->scores[j] - mx);
        sum += a->scores[j];
    }
    float inv = 1.0f / sum;
    __m256 acc[64];
    int nv = d / 8;
    for (int i = 0; i < nv; i++) acc[i] = _mm256_setzero_ps();
    for (int j = 0; j < a->n_kv; j++) {
        const uint16_t *v = a->v_blocks[j / B] + (size_t)(j % B) * a->stride;
        __m256 p = _mm256_set1_ps(a->scores[j] * inv);
        for (int i = 0; i < nv; i++) {
            __m256 vv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(v + 8 * i)));
            acc[i] = _mm256_fmadd_ps(p, vv, acc[i]);
        }
    }
    for (int i = 0; i < nv; i++) _mm256_storeu_ps(a->out + 8 * i, acc[i]);
}
