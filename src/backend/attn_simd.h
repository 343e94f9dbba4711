/* attn_simd.h - helpers the SIMD attention files share (attn_avx2.c,
 * attn_avx512.c, attn_bf16_avx512.c); included only by files built with
 * AVX2 flags (the AVX-512 part only where __AVX512F__ is set). Internal:
 * not part of attn.h's API. */
#ifndef STRATA_ATTN_SIMD_H
#define STRATA_ATTN_SIMD_H

#include <immintrin.h>
#include <stdint.h>

#include "backend/attn.h"
#include "backend/simd_tr.h"

static inline const uint16_t *attn_row_at(const uint16_t *const *blocks, int B, int stride, int pos) {
    return blocks[pos / B] + (size_t)(pos % B) * stride;
}

/* Rows of 8 positions from t0 + g on, clamped to last. */
static inline void attn_group_rows(const attn_kv *kv, int t0, int g, int last, const uint16_t *kr[8],
                              const uint16_t *vr[8]) {
    for (int u = 0; u < 8; u++) {
        int pos = t0 + g + u < last ? t0 + g + u : last;
        kr[u] = attn_row_at(kv->k_blocks, kv->block_tokens, kv->stride, pos);
        vr[u] = attn_row_at(kv->v_blocks, kv->block_tokens, kv->stride, pos);
    }
}

#ifdef __AVX512F__
/* attn_exp512 before its last step: e^x = p 2^n with p = e^r, r = x - n
 * ln 2 (the polynomial of attn_avx2.c's exp256); *under: the lanes below
 * -87, 0 in the result. */
static inline __attribute__((always_inline)) __m512 attn_exp512_parts(__m512 x, __m512 *n, __mmask16 *under) {
    const __m512 lo = _mm512_set1_ps(-87.0f);
    *under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    x = _mm512_max_ps(x, lo);
    *n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(*n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(*n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    return _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
}

/* e^x for x <= 0; exact 0 below -87 and for -inf (not for x > 0). p 2^n
 * by VSCALEFPS: n is in [-126, 0] here (x in [-87, 0]), so 2^n is a
 * normal float and VSCALEFPS rounds the same exact product once, as
 * multiplying by the float with exponent n + 127 (the form before it,
 * and exp256's) does: one instruction for four (convert, add, shift,
 * multiply), the same bits for every x <= 0 and NaN (`make
 * check-attn-exp` checks all 2^31 of them; only x >= 88.4, never an
 * input, differs). */
static inline __m512 attn_exp512(__m512 x) {
    __m512 n;
    __mmask16 under;
    __m512 p = attn_exp512_parts(x, &n, &under);
    return _mm512_maskz_scalef_ps((__mmask16)~under, p, n);
}

/* Lanes 8..15 (AVX-512F only, no DQ needed). */
static inline __m256 attn_hi8(__m512 v) {
    return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
}

/* Lanes summed (max 0) or maxed (max 1) by a fixed tree: halves, then
 * quarters, ... (inlined with a constant max: one tree each). */
static inline __attribute__((always_inline)) float attn_tree16(__m512 v, int max) {
    __m256 a = _mm512_castps512_ps256(v), b = attn_hi8(v);
    __m256 h = max ? _mm256_max_ps(a, b) : _mm256_add_ps(a, b);
    __m128 c = _mm256_castps256_ps128(h), e = _mm256_extractf128_ps(h, 1);
    __m128 s4 = max ? _mm_max_ps(c, e) : _mm_add_ps(c, e);
    s4 = max ? _mm_max_ps(s4, _mm_movehl_ps(s4, s4)) : _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    s4 = max ? _mm_max_ss(s4, _mm_movehdup_ps(s4)) : _mm_add_ss(s4, _mm_movehdup_ps(s4));
    return _mm_cvtss_f32(s4);
}

static inline float attn_hsum16(__m512 v) {
    return attn_tree16(v, 0);
}

static inline float attn_hmax16(__m512 v) {
    return attn_tree16(v, 1);
}

#endif

#endif
