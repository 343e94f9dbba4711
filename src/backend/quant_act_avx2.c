/* quant_act_avx2.c - activation rows to Q8_0 / Q8_1 / Q8_K for the AVX2
 * level: Q8_K is quant_act_impl.h's code built for 8 lanes; the Q8_0 /
 * Q8_1 blocks are written out by hand as at AVX-512 (quant_act_avx512.c
 * says why and what each step is): the same bytes as the base build. */
#include <immintrin.h>

#include "backend/quant_act_impl.h"

void quant_act_row_avx2(qtype act, const float *x, void *dst, int64_t n);
void quant_act_part_avx2(qtype act, const float *x, void *dst, int64_t n, int64_t i0, int64_t i1);

static inline float act_q8_blk_avx2(const float *x, int8_t *q, int *sum) {
    const __m256i abs = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    __m256 v[4];
    __m256i m = _mm256_setzero_si256();
    for (int i = 0; i < 4; i++) {
        v[i] = _mm256_loadu_ps(x + 8 * i);
        __m256i a = _mm256_and_si256(_mm256_castps_si256(v[i]), abs); /* |x| bits: non-negative as int32 */
        a = _mm256_andnot_si256(_mm256_cmpgt_epi32(a, inf), a);       /* a NaN never wins */
        m = _mm256_max_epi32(m, a);
    }
    __m128i h = _mm_max_epi32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
    h = _mm_max_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(1, 0, 3, 2)));
    h = _mm_max_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(2, 3, 0, 1)));
    float amax = _mm_cvtss_f32(_mm_castsi128_ps(h));
    float d = amax / 127.0f, id = amax > 0 ? 127.0f / amax : 0.0f;
    const __m256 vid = _mm256_set1_ps(id), half = _mm256_set1_ps(0.5f), mhalf = _mm256_set1_ps(-0.5f);
    /* low byte of each dword to the front of its 128-bit lane, then the two lanes' 4 bytes together */
    const __m256i lo = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                        0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    __m256i s = _mm256_setzero_si256();
    for (int i = 0; i < 4; i++) {
        __m256 t = _mm256_mul_ps(v[i], vid);
        t = _mm256_add_ps(t, _mm256_blendv_ps(mhalf, half, _mm256_cmp_ps(t, _mm256_setzero_ps(), _CMP_GE_OQ)));
        __m256i qi = _mm256_srai_epi32(_mm256_slli_epi32(_mm256_cvttps_epi32(t), 24), 24);
        s = _mm256_add_epi32(s, qi);
        __m256i b = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(qi, lo), _mm256_setr_epi32(0, 4, 1, 1, 1, 1, 1, 1));
        _mm_storel_epi64((__m128i *)(void *)(q + 8 * i), _mm256_castsi256_si128(b));
    }
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(1, 0, 3, 2)));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(2, 3, 0, 1)));
    *sum = _mm_cvtsi128_si32(s4);
    return d;
}

void quant_act_row_avx2(qtype act, const float *x, void *dst, int64_t n) {
    if (act == QT_Q8_0 || act == QT_Q8_1) act_q8_with(x, dst, n, act_q8_blk_avx2);
    else quant__act_row(act, x, dst, n);
}

void quant_act_part_avx2(qtype act, const float *x, void *dst, int64_t n, int64_t i0, int64_t i1) {
    quant__act_part_with(act, x, dst, n, i0, i1, act_q8_blk_avx2);
}
