/* quant_act_avx512.c - activation rows to Q8_0 / Q8_1 / Q8_K for the
 * AVX-512 level, written by hand. Q8_0 / Q8_1 (the legacy formats'
 * activations) a group of 16 blocks at a time, one block per lane as the
 * row's layout keeps them (quant_impl.h): the compiler's version of the C
 * (a 16-lane maximum and sum reduced lane by lane per 32-value block) was
 * 7.7% of SmolLM2's prefill once its matmuls ran on AMX tiles; a hand
 * version per block 6.4% (2 threads; its horizontal reductions, scalar
 * divisions and 4-byte scattered stores), this one 3.7% (perf, issue 29).
 * Q8_K 16 values a vector (act_q8k_blk). The same operations per value,
 * so the same bytes as the base build (test_quant_act.c compares them,
 * NaN and infinity included): the largest |x| as bits with NaN left out,
 * d = amax / 127, id = 127 / amax (0 if amax is 0), q = (int)(x * id +
 * (x * id >= 0 ? 0.5 : -0.5)) truncated to int8; Q8_0 / Q8_1 the block's
 * sum of q and s = d * sum, Q8_K the sums of each 16 q. */
#include <immintrin.h>

#include "backend/quant_act_impl.h"

void quant_act_row_avx512(qtype act, const float *x, void *dst, int64_t n);
void quant_act_part_avx512(qtype act, const float *x, void *dst, int64_t n, int64_t i0, int64_t i1);

#define INL static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")

/* The lanes of one step of act_reduce16: 2 l - l % h (+ h for the second
 * half of each pair of partial results). */
#define ACT_IDX(l, h, o) (2 * (l) - (l) % (h) + (o))
#define ACT_IDX16(h, o)                                                                                            \
    _mm512_set_epi32(ACT_IDX(15, h, o), ACT_IDX(14, h, o), ACT_IDX(13, h, o), ACT_IDX(12, h, o), ACT_IDX(11, h, o), \
                     ACT_IDX(10, h, o), ACT_IDX(9, h, o), ACT_IDX(8, h, o), ACT_IDX(7, h, o), ACT_IDX(6, h, o),     \
                     ACT_IDX(5, h, o), ACT_IDX(4, h, o), ACT_IDX(3, h, o), ACT_IDX(2, h, o), ACT_IDX(1, h, o),     \
                     ACT_IDX(0, h, o))

/* Lane p = the largest (add: the sum) of m[p]'s 16 lanes: four steps,
 * each pairing vectors that hold B blocks of 2h partial results (lane =
 * block 2h + k) into one of 2B blocks of h (the first vector's blocks
 * first). Maxima and integer sums are exact in any order. */
INL __m512i act_reduce16(__m512i *m, int add) {
    UNROLL
    for (int h = 8, nv = 16; h >= 1; h /= 2, nv /= 2) {
        const __m512i lo = ACT_IDX16(h, 0), hi = ACT_IDX16(h, h);
        UNROLL
        for (int i = 0; i < nv / 2; i++) {
            __m512i a = _mm512_permutex2var_epi32(m[2 * i], lo, m[2 * i + 1]);
            __m512i b = _mm512_permutex2var_epi32(m[2 * i], hi, m[2 * i + 1]);
            m[i] = add ? _mm512_add_epi32(a, b) : _mm512_max_epu32(a, b);
        }
    }
    return m[0];
}

/* |x| as bits with NaN as 0: a NaN never wins the maximum. */
INL __m512i act_abs_bits(__m512 x) {
    __m512i a = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff));
    return _mm512_maskz_mov_epi32(_mm512_cmple_epu32_mask(a, _mm512_set1_epi32(0x7f800000)), a);
}

/* Round half away from zero and truncate to int32 (round_q's steps). */
INL __m512i act_round(__m512 v) {
    const __mmask16 pos = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GE_OQ);
    return _mm512_cvttps_epi32(_mm512_add_ps(v, _mm512_mask_blend_ps(pos, _mm512_set1_ps(-0.5f), _mm512_set1_ps(0.5f))));
}

/* 8 x 8 dword transposes in both 256-bit halves of z[0..7] at once:
 * z[v] dword i of half h becomes z[i] dword v of half h. */
INL void act_tr8x2(__m512i *z) {
    __m512i a[8], b[8];
    UNROLL
    for (int i = 0; i < 4; i++) {
        a[2 * i] = _mm512_unpacklo_epi32(z[2 * i], z[2 * i + 1]);
        a[2 * i + 1] = _mm512_unpackhi_epi32(z[2 * i], z[2 * i + 1]);
    }
    UNROLL
    for (int i = 0; i < 2; i++)
        UNROLL
        for (int j = 0; j < 2; j++) {
            b[4 * i + 2 * j] = _mm512_unpacklo_epi64(a[4 * i + j], a[4 * i + j + 2]);
            b[4 * i + 2 * j + 1] = _mm512_unpackhi_epi64(a[4 * i + j], a[4 * i + j + 2]);
        }
    /* b[4i + r] (r = 0..3), 128-bit lane L: rows 4i..4i+3 at column 4(L % 2) + r */
    const __m512i lo = _mm512_set_epi64(13, 12, 5, 4, 9, 8, 1, 0), hi = _mm512_set_epi64(15, 14, 7, 6, 11, 10, 3, 2);
    UNROLL
    for (int r = 0; r < 4; r++) {
        z[r] = _mm512_permutex2var_epi64(b[r], lo, b[4 + r]);
        z[4 + r] = _mm512_permutex2var_epi64(b[r], hi, b[4 + r]);
    }
}

/* Blocks 16 G + j of one group for j in [j0, j1) (block j's values at x +
 * 32 (j - j0)), in the group's lane layout (quant_impl.h: position p holds
 * block qa8_lane(p)) at d, s (16 floats each) and q (512 bytes); with pad,
 * the blocks from j1 on are the row's padding and get zeros. All 16 blocks
 * side by side: the largest |x| by a transposed reduction (act_reduce16),
 * d and 1 / d as vectors, each block's quants packed to 32 bytes, two 8 x
 * 8 dword transposes into the layout, the sums by VPDPBUSD against ones.
 * The same operations per value as act_q8_blk_c. */
INL void act_q8_group(const float *x, float *d, float *s, int8_t *q, int j0, int j1, int pad) {
    __m512i m[16];
    __mmask16 live = 0, store = 0;
    UNROLL
    for (int p = 0; p < 16; p++) {
        int j = qa8_lane(p);
        m[p] = _mm512_setzero_si512();
        if (j >= j0 && j < j1) {
            const float *xb = x + 32 * (j - j0);
            m[p] = _mm512_max_epu32(act_abs_bits(_mm512_loadu_ps(xb)), act_abs_bits(_mm512_loadu_ps(xb + 16)));
            live |= (__mmask16)(1u << p);
        }
        if ((j >= j0 && j < j1) || (pad && j >= j1)) store |= (__mmask16)(1u << p);
    }
    const __m512 amax = _mm512_castsi512_ps(act_reduce16(m, 0));
    const __m512 vd = _mm512_div_ps(amax, _mm512_set1_ps(127.0f));
    const __m512 vid = _mm512_maskz_div_ps(_mm512_cmp_ps_mask(amax, _mm512_setzero_ps(), _CMP_GT_OQ),
                                           _mm512_set1_ps(127.0f), amax);
    __m512i z[8];
    UNROLL
    for (int v = 0; v < 8; v++) z[v] = _mm512_setzero_si512();
    UNROLL
    for (int p = 0; p < 16; p++) {
        if (!(live >> p & 1)) continue;
        const float *xb = x + 32 * (qa8_lane(p) - j0);
        const __m512 id = _mm512_permutexvar_ps(_mm512_set1_epi32(p), vid);
        /* the rounded ints' low bytes: (int8_t) of them */
        __m256i qb = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm512_cvtepi32_epi8(act_round(_mm512_mul_ps(_mm512_loadu_ps(xb), id)))),
            _mm512_cvtepi32_epi8(act_round(_mm512_mul_ps(_mm512_loadu_ps(xb + 16), id))), 1);
        z[p & 7] = p < 8 ? _mm512_inserti64x4(z[p & 7], qb, 0) : _mm512_inserti64x4(z[p & 7], qb, 1);
    }
    act_tr8x2(z); /* z[v] position p: block qa8_lane(p)'s quants 4v..4v+3 */
    __m512i sum = _mm512_setzero_si512();
    const __m512i ones = _mm512_set1_epi8(1);
    UNROLL
    for (int v = 0; v < 8; v++) {
        sum = _mm512_dpbusd_epi32(sum, ones, z[v]);
        _mm512_mask_storeu_epi32(q + 64 * v, store, z[v]);
    }
    _mm512_mask_storeu_ps(d, store, _mm512_maskz_mov_ps(live, vd));
    _mm512_mask_storeu_ps(s, store, _mm512_maskz_mov_ps(live, _mm512_mul_ps(vd, _mm512_cvtepi32_ps(sum))));
}

/* Blocks [b0, b1) of a Q8_0 / Q8_1 row of n values (x: theirs only), a
 * group at a time; the part that ends the row zeroes the last group's
 * padding (act_q8_part_with's contract). */
static void act_q8_groups(const float *x, void *dst, int64_t n, int64_t b0, int64_t b1) {
    const int64_t nb = n / QK, nbp = qa8_nbp(nb);
    float *d = dst, *s = d + nbp;
    int8_t *qs = (int8_t *)dst + 8 * nbp;
    for (int64_t g = b0 / 16 * 16; g < b1; g += 16) {
        const int j0 = b0 > g ? (int)(b0 - g) : 0, j1 = b1 < g + 16 ? (int)(b1 - g) : 16;
        act_q8_group(x + (g + j0 - b0) * QK, d + g, s + g, qs + g * 32, j0, j1, b1 == nb);
    }
}

/* One Q8_K super-block (QK_K values): q8_block's d and quants and the
 * sums of each 16 quants (act_q8k_part's bsums), 16 values a vector; the
 * sums by one transposed reduction. The compiler's build of the C left
 * the maximum scalar here (Gemma 3's Q8_K conversions were ~6% of its
 * pp512 at amx). */
INL void act_q8k_blk(const float *x, float *d, int8_t *q, int16_t *bs) {
    __m512i m = _mm512_setzero_si512(), s[16];
    UNROLL
    for (int i = 0; i < 16; i++) m = _mm512_max_epu32(m, act_abs_bits(_mm512_loadu_ps(x + 16 * i)));
    uint32_t mx = (uint32_t)_mm512_reduce_max_epu32(m);
    float amax;
    memcpy(&amax, &mx, 4);
    const float id = amax > 0 ? 127.0f / amax : 0.0f;
    const __m512 vid = _mm512_set1_ps(id);
    UNROLL
    for (int i = 0; i < 16; i++) {
        __m512i qi = act_round(_mm512_mul_ps(_mm512_loadu_ps(x + 16 * i), vid));
        _mm_storeu_si128((__m128i *)(void *)(q + 16 * i), _mm512_cvtepi32_epi8(qi));
        s[i] = _mm512_srai_epi32(_mm512_slli_epi32(qi, 24), 24); /* (int8_t) of it */
    }
    _mm256_storeu_si256((__m256i *)(void *)bs, _mm512_cvtepi32_epi16(act_reduce16(s, 1)));
    *d = amax / 127.0f;
}

/* Blocks [b0, b1) of a Q8_K row of n values (x: theirs only). */
static void act_q8k_blocks(const float *x, void *dst, int64_t n, int64_t b0, int64_t b1) {
    const int64_t nb = n / QK_K;
    float *d = dst;
    int16_t *bs = (int16_t *)(d + nb);
    int8_t *qs = (int8_t *)dst + 36 * nb;
    for (int64_t b = b0; b < b1; b++) act_q8k_blk(x + (b - b0) * QK_K, d + b, qs + b * QK_K, bs + 16 * b);
}

void quant_act_row_avx512(qtype act, const float *x, void *dst, int64_t n) {
    if (act == QT_Q8_0 || act == QT_Q8_1) act_q8_groups(x, dst, n, 0, n / QK);
    else if (act == QT_Q8_K) act_q8k_blocks(x, dst, n, 0, n / QK_K);
    else quant__act_row(act, x, dst, n);
}

void quant_act_part_avx512(qtype act, const float *x, void *dst, int64_t n, int64_t i0, int64_t i1) {
    if (act == QT_Q8_0 || act == QT_Q8_1) act_q8_groups(x, dst, n, i0 / QK, i1 / QK);
    else if (act == QT_Q8_K) act_q8k_blocks(x, dst, n, i0 / QK_K, i1 / QK_K);
    else quant__act_part_with(act, x, dst, n, i0, i1, act_q8_blk_c);
}
