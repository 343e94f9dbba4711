/* attn_avx2.c - attention tile kernels with AVX2/FMA/F16C (see attn.h).
 *
 * tile_fill widens a 64-key tile: values row by row, keys through 8x8
 * transposes into [dim][key] (F16 rows through F16C, Q8_0 rows as int8
 * times their block's scale), so that scores come out eight keys per
 * register with no horizontal sums: score lane j is one FMA chain over the
 * dims in order, q[0] k_j[0] first. tile_step per query:
 *   1. scores of all 64 keys (8 chains of head_dim FMAs), keys outside
 *      [lo, hi) set to -inf;
 *   2. tile max, new running max m', alpha = e^(m - m');
 *   3. p = e^(s - m') vectorised (fixed polynomial), their sum by a fixed
 *      tree; sum' = sum * alpha + tile sum;
 *   4. acc = acc * alpha, then acc += p_j v_j for j = lo .. hi-1 in order.
 * Every step is the same whatever lo/hi or company, so a query's bits
 * depend on nothing else. head_dim must be a multiple of 8 (at most
 * 512); other shapes use the scalar kernels. */
#include <immintrin.h>
#include <math.h>

#include "backend/attn.h"
#include "backend/attn_simd.h"

#define T ATTN_KV_TILE
#define UNROLL _Pragma("GCC unroll 8")

static inline __m256 load_h8(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

static inline __m256 block_scale(const uint16_t *blk) {
    return _mm256_cvtph_ps(_mm_set1_epi16((short)blk[0]));
}

/* Eight key rows r (8 dims from i on, positions g..g+7) transposed into
 * kt, and the eight value rows v into vt. */
static inline __attribute__((always_inline)) void store_group(__m256 r[8], const __m256 v[8], float *kt, float *vt,
                                                              int d, int g, int i) {
    UNROLL for (int u = 0; u < 8; u++) _mm256_storeu_ps(vt + (size_t)(g + u) * d + i, v[u]);
    simd_tr8(r);
    UNROLL for (int u = 0; u < 8; u++) _mm256_storeu_ps(kt + (size_t)(i + u) * T + g, r[u]);
}

static void fill_f16(const attn_kv *kv, int t0, int last, float *kt, float *vt) {
    int d = kv->head_dim;
    for (int g = 0; g < T; g += 8) {
        const uint16_t *kr[8], *vr[8];
        attn_group_rows(kv, t0, g, last, kr, vr);
        for (int i = 0; i < d; i += 8) {
            __m256 r[8], v[8];
            UNROLL for (int u = 0; u < 8; u++) r[u] = load_h8(kr[u] + i), v[u] = load_h8(vr[u] + i);
            store_group(r, v, kt, vt, d, g, i);
        }
    }
}

/* Eight values of a quantized block from dim j on (j % 8 == 0), times
 * the block's scale: Q8_0, its int8s; Q4_0 (q4), the low nibbles of
 * bytes j.. for j < 16, the high ones of bytes j - 16.. after, minus 8.
 * Small integers times a half: exact in float, the scalar kvq_at's. */
static inline __attribute__((always_inline)) __m256 quant_ps(int q4, const uint8_t *qs, int j, __m256 scale) {
    __m256i w;
    if (q4) {
        __m128i b = _mm_loadl_epi64((const __m128i *)(qs + (j & 15)));
        if (j >= 16) b = _mm_srli_epi16(b, 4);
        b = _mm_and_si128(b, _mm_set1_epi8(15));
        w = _mm256_sub_epi32(_mm256_cvtepu8_epi32(b), _mm256_set1_epi32(8));
    } else {
        w = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(qs + j)));
    }
    return _mm256_mul_ps(_mm256_cvtepi32_ps(w), scale);
}

/* Q8_0 or Q4_0 (q4) rows, one block (32 dims) at a time, the 8 rows'
 * scales widened once; inlined once per type. */
static inline __attribute__((always_inline)) void fill_quant(int q4, const attn_kv *kv, int t0, int last, float *kt,
                                                             float *vt) {
    int d = kv->head_dim, bh = q4 ? KVQ_Q4_0_BLOCK_HALVES : KVQ_Q8_0_BLOCK_HALVES;
    for (int g = 0; g < T; g += 8) {
        const uint16_t *kr[8], *vr[8];
        attn_group_rows(kv, t0, g, last, kr, vr);
        for (int b = 0; b < d / KVQ_BLOCK; b++) {
            __m256 ks[8], vs[8];
            const uint8_t *kq[8], *vq[8];
            UNROLL for (int u = 0; u < 8; u++) {
                const uint16_t *kb = kr[u] + (size_t)b * bh, *vb = vr[u] + (size_t)b * bh;
                ks[u] = block_scale(kb), vs[u] = block_scale(vb);
                kq[u] = (const uint8_t *)(kb + 1), vq[u] = (const uint8_t *)(vb + 1);
            }
            for (int j = 0; j < KVQ_BLOCK; j += 8) {
                __m256 r[8], v[8];
                UNROLL for (int u = 0; u < 8; u++) {
                    r[u] = quant_ps(q4, kq[u], j, ks[u]);
                    v[u] = quant_ps(q4, vq[u], j, vs[u]);
                }
                store_group(r, v, kt, vt, d, g, b * KVQ_BLOCK + j);
            }
        }
    }
}

static void fill_q8_0(const attn_kv *kv, int t0, int last, float *kt, float *vt) {
    fill_quant(0, kv, t0, last, kt, vt);
}

static void fill_q4_0(const attn_kv *kv, int t0, int last, float *kt, float *vt) {
    fill_quant(1, kv, t0, last, kt, vt);
}

void attn_fill_avx2(const attn_kv *kv, int t0, int last, float *kt, float *vt) {
    if (kv->type == KVQ_Q4_0) fill_q4_0(kv, t0, last, kt, vt);
    else if (kv->type == KVQ_Q8_0) fill_q8_0(kv, t0, last, kt, vt);
    else fill_f16(kv, t0, last, kt, vt);
}

/* e^x for x <= 0 (scores minus their max); exact 0 below -87 and for -inf. */
static inline __m256 exp256(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.0f);
    __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_max_ps(x, lo);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

static inline float hmax8(__m256 v) {
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    return _mm_cvtss_f32(m4);
}

/* Lanes 0..7 summed as ((0+4)+(2+6)) + ((1+5)+(3+7)): a fixed tree. */
static inline float hsum8(__m256 v) {
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
    return _mm_cvtss_f32(s4);
}

/* acc[0 .. 8 nb) = acc * alpha + sum over j in [lo, hi) of p[j] v_j. */
static inline __attribute__((always_inline)) void pv_block(int nb, float *acc, const float *vt, int d,
                                                           const float *p, int lo, int hi, float alpha) {
    __m256 a[8];
    UNROLL for (int u = 0; u < nb; u++) a[u] = _mm256_loadu_ps(acc + 8 * u);
    if (alpha != 1.0f) {
        __m256 al = _mm256_set1_ps(alpha);
        UNROLL for (int u = 0; u < nb; u++) a[u] = _mm256_mul_ps(a[u], al);
    }
    for (int j = lo; j < hi; j++) {
        __m256 b = _mm256_broadcast_ss(p + j);
        const float *v = vt + (size_t)j * d;
        UNROLL for (int u = 0; u < nb; u++) a[u] = _mm256_fmadd_ps(b, _mm256_loadu_ps(v + 8 * u), a[u]);
    }
    UNROLL for (int u = 0; u < nb; u++) _mm256_storeu_ps(acc + 8 * u, a[u]);
}

/* Steps 2 and 3 for one query: keys outside [lo, hi) to -inf, the running
 * max, weights p = e^(s - m') with their sum into st; returns alpha. */
static inline __attribute__((always_inline)) float softmax_tile(int d, __m256 s[8], int lo, int hi, float *st,
                                                                 float *p) {
    if (lo > 0 || hi < T) {
        __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), vlo = _mm256_set1_epi32(lo - 1);
        __m256i vhi = _mm256_set1_epi32(hi);
        __m256 ninf = _mm256_set1_ps(-INFINITY);
        UNROLL for (int g = 0; g < 8; g++) {
            __m256i j = _mm256_add_epi32(idx, _mm256_set1_epi32(8 * g));
            __m256i in = _mm256_and_si256(_mm256_cmpgt_epi32(j, vlo), _mm256_cmpgt_epi32(vhi, j));
            s[g] = _mm256_blendv_ps(ninf, s[g], _mm256_castsi256_ps(in));
        }
    }
    __m256 mx = _mm256_max_ps(_mm256_max_ps(_mm256_max_ps(s[0], s[1]), _mm256_max_ps(s[2], s[3])),
                              _mm256_max_ps(_mm256_max_ps(s[4], s[5]), _mm256_max_ps(s[6], s[7])));
    float m = st[d], tmax = hmax8(mx), mn = m > tmax ? m : tmax, alpha = expf(m - mn);
    __m256 vm = _mm256_set1_ps(mn);
    UNROLL for (int g = 0; g < 8; g++) {
        s[g] = exp256(_mm256_sub_ps(s[g], vm));
        _mm256_storeu_ps(p + 8 * g, s[g]);
    }
    __m256 sum = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(s[0], s[1]), _mm256_add_ps(s[2], s[3])),
                               _mm256_add_ps(_mm256_add_ps(s[4], s[5]), _mm256_add_ps(s[6], s[7])));
    st[d + 1] = st[d + 1] * alpha + hsum8(sum);
    st[d] = mn;
    return alpha;
}

static void step_avx2(int d, const float *q, const float *kt, const float *vt, int lo, int hi, float *st,
                      float *p) {
    /* 1. scores */
    __m256 s[8];
    UNROLL for (int g = 0; g < 8; g++) s[g] = _mm256_setzero_ps();
    for (int i = 0; i < d; i++) {
        __m256 b = _mm256_broadcast_ss(q + i);
        const float *k = kt + (size_t)i * T;
        UNROLL for (int g = 0; g < 8; g++) s[g] = _mm256_fmadd_ps(b, _mm256_loadu_ps(k + 8 * g), s[g]);
    }
    /* 2., 3. */
    float alpha = softmax_tile(d, s, lo, hi, st, p);
    /* 4. weighted values, 64 dims at a time (then 32, 16, 8) */
    int i = 0;
    for (; d - i >= 64; i += 64) pv_block(8, st + i, vt + i, d, p, lo, hi, alpha);
    if (d - i >= 32) pv_block(4, st + i, vt + i, d, p, lo, hi, alpha), i += 32;
    if (d - i >= 16) pv_block(2, st + i, vt + i, d, p, lo, hi, alpha), i += 16;
    if (d - i >= 8) pv_block(1, st + i, vt + i, d, p, lo, hi, alpha);
}

/* Scores of keys 32 h .. 32 h + 31 for two queries into s0, s1 (four
 * registers each: sixteen do not fit eight per query). */
static inline __attribute__((always_inline)) void scores2_half(int d, const float *q0, const float *q1,
                                                              const float *kt, __m256 *s0, __m256 *s1) {
    UNROLL for (int g = 0; g < 4; g++) s0[g] = _mm256_setzero_ps(), s1[g] = _mm256_setzero_ps();
    for (int i = 0; i < d; i++) {
        __m256 b0 = _mm256_broadcast_ss(q0 + i), b1 = _mm256_broadcast_ss(q1 + i);
        const float *k = kt + (size_t)i * T;
        UNROLL for (int g = 0; g < 4; g++) {
            __m256 x = _mm256_loadu_ps(k + 8 * g);
            s0[g] = _mm256_fmadd_ps(b0, x, s0[g]);
            s1[g] = _mm256_fmadd_ps(b1, x, s1[g]);
        }
    }
}

/* pv_block for two queries at once: each value load feeds both. */
static inline __attribute__((always_inline)) void pv_block2(int nb, float *acc0, float *acc1, const float *vt,
                                                            int d, const float *p0, const float *p1, int lo,
                                                            int hi, float alpha0, float alpha1) {
    __m256 a[4], c[4];
    UNROLL for (int u = 0; u < nb; u++) a[u] = _mm256_loadu_ps(acc0 + 8 * u), c[u] = _mm256_loadu_ps(acc1 + 8 * u);
    if (alpha0 != 1.0f) {
        __m256 al = _mm256_set1_ps(alpha0);
        UNROLL for (int u = 0; u < nb; u++) a[u] = _mm256_mul_ps(a[u], al);
    }
    if (alpha1 != 1.0f) {
        __m256 al = _mm256_set1_ps(alpha1);
        UNROLL for (int u = 0; u < nb; u++) c[u] = _mm256_mul_ps(c[u], al);
    }
    for (int j = lo; j < hi; j++) {
        __m256 b0 = _mm256_broadcast_ss(p0 + j), b1 = _mm256_broadcast_ss(p1 + j);
        const float *v = vt + (size_t)j * d;
        UNROLL for (int u = 0; u < nb; u++) {
            __m256 x = _mm256_loadu_ps(v + 8 * u);
            a[u] = _mm256_fmadd_ps(b0, x, a[u]);
            c[u] = _mm256_fmadd_ps(b1, x, c[u]);
        }
    }
    UNROLL for (int u = 0; u < nb; u++) _mm256_storeu_ps(acc0 + 8 * u, a[u]), _mm256_storeu_ps(acc1 + 8 * u, c[u]);
}

/* step_avx2 for two queries with the same [lo, hi): every key and value
 * load serves both, and each query's arithmetic is step_avx2's, op for op
 * (a score lane is one FMA chain over the dims however the lanes are
 * grouped; a value dim's accumulation is independent of the blocking). */
static void step2_avx2(int d, const float *q0, const float *q1, const float *kt, const float *vt, int lo, int hi,
                       float *st0, float *st1, float *p) {
    __m256 s[8], r[8];
    scores2_half(d, q0, q1, kt, s, r);
    scores2_half(d, q0, q1, kt + 32, s + 4, r + 4);
    float alpha0 = softmax_tile(d, s, lo, hi, st0, p), alpha1 = softmax_tile(d, r, lo, hi, st1, p + T);
    int i = 0;
    for (; d - i >= 32; i += 32) pv_block2(4, st0 + i, st1 + i, vt + i, d, p, p + T, lo, hi, alpha0, alpha1);
    if (d - i >= 16) pv_block2(2, st0 + i, st1 + i, vt + i, d, p, p + T, lo, hi, alpha0, alpha1), i += 16;
    if (d - i >= 8) pv_block2(1, st0 + i, st1 + i, vt + i, d, p, p + T, lo, hi, alpha0, alpha1);
}

/* Pairs only from head_dim 128: a smaller tile stays in L1, where the
 * pair's split score pass cost more than the loads it saved (head_dim 64:
 * 3.3 -> 3.7 ms per 96 queries at depth 4096; 256: 9.1 -> 6.0). */
static const attn_ops ops_avx2 = {.tile_fill = attn_fill_avx2, .tile_step = step_avx2};
static const attn_ops ops_avx2_pairs = {.tile_fill = attn_fill_avx2, .tile_step = step_avx2, .tile_step2 = step2_avx2};

const attn_ops *attn_ops_avx2(int head_dim) {
    if (head_dim % 8 || head_dim > 512) return NULL;
    return head_dim >= 128 ? &ops_avx2_pairs : &ops_avx2;
}
