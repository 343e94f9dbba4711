/* quant_act_avx512.c - activation rows to Q8_0 / Q8_1 / Q8_K for the
 * AVX-512 level: Q8_K is quant_act_impl.h's code built for 16 lanes; the
 * Q8_0 / Q8_1 blocks (the legacy formats' activations) are written out
 * by hand, since the compiler's version of that code (a 16-lane maximum
 * and sum reduced lane by lane per 32-value block) was 7.7% of SmolLM2's
 * prefill once its matmuls ran on AMX tiles, 3.8% this way (perf, issue
 * 29). The same operations per value, so the same bytes as the base
 * build (test_quant_act.c compares them): the largest |x| as bits with
 * NaN left out, d = amax / 127, id = 127 / amax (0 if amax is 0),
 * q = (int)(x * id + (x * id >= 0 ? 0.5 : -0.5)) truncated to int8. */
#include <immintrin.h>

#include "backend/quant_act_impl.h"

void quant_act_row_avx512(qtype act, const float *x, void *dst, int64_t n);
void quant_act_part_avx512(qtype act, const float *x, void *dst, int64_t n, int64_t i0, int64_t i1);

static inline float act_q8_blk_avx512(const float *x, int8_t *q, int *sum) {
    const __m512i abs = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
    __m512i a0 = _mm512_and_si512(_mm512_castps_si512(x0), abs), a1 = _mm512_and_si512(_mm512_castps_si512(x1), abs);
    a0 = _mm512_maskz_mov_epi32(_mm512_cmple_epu32_mask(a0, inf), a0); /* a NaN never wins */
    a1 = _mm512_maskz_mov_epi32(_mm512_cmple_epu32_mask(a1, inf), a1);
    uint32_t mx = (uint32_t)_mm512_reduce_max_epu32(_mm512_max_epu32(a0, a1));
    float amax;
    memcpy(&amax, &mx, 4);
    float d = amax / 127.0f, id = amax > 0 ? 127.0f / amax : 0.0f;
    const __m512 vid = _mm512_set1_ps(id), half = _mm512_set1_ps(0.5f), mhalf = _mm512_set1_ps(-0.5f);
    __m512 v0 = _mm512_mul_ps(x0, vid), v1 = _mm512_mul_ps(x1, vid);
    v0 = _mm512_add_ps(v0, _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v0, _mm512_setzero_ps(), _CMP_GE_OQ), mhalf, half));
    v1 = _mm512_add_ps(v1, _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v1, _mm512_setzero_ps(), _CMP_GE_OQ), mhalf, half));
    /* (int8_t) of the truncated int: the low byte, sign-extended for the sum */
    __m512i q0 = _mm512_srai_epi32(_mm512_slli_epi32(_mm512_cvttps_epi32(v0), 24), 24);
    __m512i q1 = _mm512_srai_epi32(_mm512_slli_epi32(_mm512_cvttps_epi32(v1), 24), 24);
    *sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
    _mm_storeu_si128((__m128i *)(void *)q, _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128((__m128i *)(void *)(q + 16), _mm512_cvtepi32_epi8(q1));
    return d;
}

void quant_act_row_avx512(qtype act, const float *x, void *dst, int64_t n) {
    if (act == QT_Q8_0 || act == QT_Q8_1) act_q8_with(x, dst, n, act_q8_blk_avx512);
    else quant__act_row(act, x, dst, n);
}

void quant_act_part_avx512(qtype act, const float *x, void *dst, int64_t n, int64_t i0, int64_t i1) {
    quant__act_part_with(act, x, dst, n, i0, i1, act_q8_blk_avx512);
}
