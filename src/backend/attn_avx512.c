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
#include <string.h>

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

/* e^(m - m') for the running max m and the tile's m' >= m: 1 where the
 * max did not move (expf(0) is 1 exactly, so skipping the call keeps the
 * bits; -inf - -inf and inf - inf are NaN, not 0, and still call it). */
static inline float tile_alpha(float m, float mn) {
    float x = m - mn;
    return x == 0.0f ? 1.0f : expf(x);
}

/* Steps 2 and 3 for N queries with the same [lo, hi) (scores s[q]): keys
 * outside [lo, hi) to -inf, the running max, weights p = e^(s - m') to
 * p + q T with their sum into st[q]; alpha[q] out. In phases over the
 * queries (maxima, then weights and sums, then the scalar state), so no
 * vector value lives across expf (all zmm registers are the caller's to
 * save) and the queries' reduction trees overlap; each query's operations
 * are the same as alone. */
static inline __attribute__((always_inline)) void softmax_tiles(const int N, int d, __m512 (*s)[4], int lo, int hi,
                                                                 float *const st[], float *p, float alpha[]) {
    float mn[4], ts[4];
    if (lo > 0 || hi < T) {
        __m512 ninf = _mm512_set1_ps(-INFINITY);
        uint64_t in = (hi >= 64 ? ~0ull : (1ull << hi) - 1) & ~((1ull << lo) - 1);
        UNROLL for (int q = 0; q < N; q++)
            UNROLL for (int g = 0; g < 4; g++) s[q][g] = _mm512_mask_blend_ps((__mmask16)(in >> (16 * g)), ninf, s[q][g]);
    }
    UNROLL for (int q = 0; q < N; q++) {
        float m = st[q][d], tmax = attn_hmax16(_mm512_max_ps(_mm512_max_ps(s[q][0], s[q][1]),
                                                             _mm512_max_ps(s[q][2], s[q][3])));
        mn[q] = m > tmax ? m : tmax;
    }
    UNROLL for (int q = 0; q < N; q++) {
        __m512 vm = _mm512_set1_ps(mn[q]);
        UNROLL for (int g = 0; g < 4; g++) {
            s[q][g] = attn_exp512(_mm512_sub_ps(s[q][g], vm));
            _mm512_storeu_ps(p + q * T + 16 * g, s[q][g]);
        }
        ts[q] = attn_hsum16(_mm512_add_ps(_mm512_add_ps(s[q][0], s[q][1]), _mm512_add_ps(s[q][2], s[q][3])));
    }
    UNROLL for (int q = 0; q < N; q++) {
        alpha[q] = tile_alpha(st[q][d], mn[q]);
        st[q][d + 1] = st[q][d + 1] * alpha[q] + ts[q];
        st[q][d] = mn[q];
    }
}

/* Steps 2-4 for one query whose 64 scores are s. */
static inline __attribute__((always_inline)) void weigh_values(int d, __m512 s[4], const float *vt, int lo, int hi,
                                                                float *st, float *p) {
    /* 2., 3. */
    float alpha;
    softmax_tiles(1, d, (__m512(*)[4])s, lo, hi, &st, p, &alpha);
    /* 4. weighted values, 128 dims at a time (then 64, 32, 16) */
    int i = 0;
    for (; d - i >= 128; i += 128) pv_block(8, st + i, vt + i, d, p, lo, hi, alpha);
    if (d - i >= 64) pv_block(4, st + i, vt + i, d, p, lo, hi, alpha), i += 64;
    if (d - i >= 32) pv_block(2, st + i, vt + i, d, p, lo, hi, alpha), i += 32;
    if (d - i >= 16) pv_block(1, st + i, vt + i, d, p, lo, hi, alpha);
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
    weigh_values(d, s, vt, lo, hi, st, p);
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

/* weigh_values for two queries with the same [lo, hi) (scores s and r):
 * each value load feeds both. */
static inline __attribute__((always_inline)) void weigh_values2(int d, __m512 s[4], __m512 r[4], const float *vt,
                                                                 int lo, int hi, float *st0, float *st1, float *p) {
    float alpha[2], *const st[2] = {st0, st1};
    __m512 sr[2][4];
    UNROLL for (int g = 0; g < 4; g++) sr[0][g] = s[g], sr[1][g] = r[g];
    softmax_tiles(2, d, sr, lo, hi, st, p, alpha);
    float alpha0 = alpha[0], alpha1 = alpha[1];
    int i = 0;
    for (; d - i >= 128; i += 128) pv_block2(8, st0 + i, st1 + i, vt + i, d, p, p + T, lo, hi, alpha0, alpha1);
    if (d - i >= 64) pv_block2(4, st0 + i, st1 + i, vt + i, d, p, p + T, lo, hi, alpha0, alpha1), i += 64;
    if (d - i >= 32) pv_block2(2, st0 + i, st1 + i, vt + i, d, p, p + T, lo, hi, alpha0, alpha1), i += 32;
    if (d - i >= 16) pv_block2(1, st0 + i, st1 + i, vt + i, d, p, p + T, lo, hi, alpha0, alpha1);
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
    weigh_values2(d, s, r, vt, lo, hi, st0, st1, p);
}

/* pv_block for N = 1 to 4 queries (64 dims at most: 4 N accumulators):
 * each value load feeds all N. */
static inline __attribute__((always_inline)) void pv_blockn(const int N, int nb, float *const acc[4], const float *vt,
                                                            int d, const float *p, int lo, int hi,
                                                            const float alpha[4]) {
    __m512 a[4][4];
    UNROLL for (int q = 0; q < N; q++) {
        UNROLL for (int u = 0; u < nb; u++) a[q][u] = _mm512_loadu_ps(acc[q] + 16 * u);
        if (alpha[q] != 1.0f) {
            __m512 al = _mm512_set1_ps(alpha[q]);
            UNROLL for (int u = 0; u < nb; u++) a[q][u] = _mm512_mul_ps(a[q][u], al);
        }
    }
    for (int j = lo; j < hi; j++) {
        const float *v = vt + (size_t)j * d;
        __m512 b[4];
        UNROLL for (int q = 0; q < N; q++) b[q] = _mm512_set1_ps(p[q * T + j]);
        UNROLL for (int u = 0; u < nb; u++) {
            __m512 x = _mm512_loadu_ps(v + 16 * u);
            UNROLL for (int q = 0; q < N; q++) a[q][u] = _mm512_fmadd_ps(b[q], x, a[q][u]);
        }
    }
    UNROLL for (int q = 0; q < N; q++)
        UNROLL for (int u = 0; u < nb; u++) _mm512_storeu_ps(acc[q] + 16 * u, a[q][u]);
}

/* Step 4 for N queries with the same [lo, hi): per query and dim the
 * steps of weigh_values (acc * alpha, then the weighted values in key
 * order), 64 dims at a time. */
static inline __attribute__((always_inline)) void pvn(const int N, int d, const float *vt, int lo, int hi,
                                                      float *const st[4], const float *p, const float alpha[4]) {
    for (int i = 0; i < d;) {
        float *acc[4] = {st[0] + i, N > 1 ? st[1] + i : NULL, N > 2 ? st[2] + i : NULL, N > 3 ? st[3] + i : NULL};
        if (d - i >= 64) pv_blockn(N, 4, acc, vt + i, d, p, lo, hi, alpha), i += 64;
        else if (d - i >= 32) pv_blockn(N, 2, acc, vt + i, d, p, lo, hi, alpha), i += 32;
        else pv_blockn(N, 1, acc, vt + i, d, p, lo, hi, alpha), i += 16;
    }
}

/* weigh_values for N queries with the same [lo, hi) (scores s[q]). */
static inline __attribute__((always_inline)) void weigh_valuesn(const int N, int d, __m512 s[4][4], const float *vt,
                                                                 int lo, int hi, float *const st[4], float *p) {
    float alpha[4];
    softmax_tiles(N, d, s, lo, hi, st, p, alpha);
    pvn(N, d, vt, lo, hi, st, p, alpha);
}

/* Step 1 for N queries: every key load feeds N score chains, each
 * query's op for op step_avx512's. */
static inline __attribute__((always_inline)) void scoresn(const int N, int d, const float *const q[4], const float *kt,
                                                          __m512 s[4][4]) {
    UNROLL for (int qi = 0; qi < N; qi++)
        UNROLL for (int g = 0; g < 4; g++) s[qi][g] = _mm512_setzero_ps();
    for (int i = 0; i < d; i++) {
        __m512 b[4];
        UNROLL for (int qi = 0; qi < N; qi++) b[qi] = _mm512_set1_ps(q[qi][i]);
        const float *k = kt + (size_t)i * T;
        UNROLL for (int g = 0; g < 4; g++) {
            __m512 x = _mm512_loadu_ps(k + 16 * g);
            UNROLL for (int qi = 0; qi < N; qi++) s[qi][g] = _mm512_fmadd_ps(b[qi], x, s[qi][g]);
        }
    }
}

/* step_avx512 for N queries with the same [lo, hi). */
static inline __attribute__((always_inline)) void stepn(const int N, int d, const float *const q[4], const float *kt,
                                                        const float *vt, int lo, int hi, float *const st[4],
                                                        float *p) {
    __m512 s[4][4];
    scoresn(N, d, q, kt, s);
    weigh_valuesn(N, d, s, vt, lo, hi, st, p);
}

/* stepn for 4 + NB queries (NB = 1 .. 4) in two groups, ordered scores A,
 * weights A, scores B, weights B, values A, values B: each group's
 * softmax (a latency chain: trees, the exp polynomial) then has
 * independent FMA work after it for the out-of-order core to overlap
 * (alone, the values wait on it); each query's operations are the same. */
static inline __attribute__((always_inline)) void stepn_two(const int NB, int d, const float *const q[8],
                                                            const float *kt, const float *vt, int lo, int hi,
                                                            float *const st[8], float *p) {
    __m512 s[4][4];
    float alpha[8];
    scoresn(4, d, q, kt, s);
    softmax_tiles(4, d, s, lo, hi, st, p, alpha);
    scoresn(NB, d, q + 4, kt, s);
    softmax_tiles(NB, d, s, lo, hi, st + 4, p + 4 * T, alpha + 4);
    pvn(4, d, vt, lo, hi, st, p, alpha);
    pvn(NB, d, vt, lo, hi, st + 4, p + 4 * T, alpha + 4);
}

static void stepn_avx512(int d, int n, const float *const q[8], const float *kt, const float *vt, int lo, int hi,
                         float *const st[8], float *p) {
    switch (n) {
    case 8: stepn_two(4, d, q, kt, vt, lo, hi, st, p); break;
    case 7: stepn_two(3, d, q, kt, vt, lo, hi, st, p); break;
    case 6: stepn_two(2, d, q, kt, vt, lo, hi, st, p); break;
    case 5: stepn_two(1, d, q, kt, vt, lo, hi, st, p); break;
    case 4: stepn(4, d, q, kt, vt, lo, hi, st, p); break;
    default: stepn(3, d, q, kt, vt, lo, hi, st, p);
    }
}

static const attn_ops ops_avx512 = {.tile_fill = attn_fill_avx2, .tile_step = step_avx512, .tile_step2 = step2_avx512,
                                    .tile_stepn = stepn_avx512, .stepn_max = 8};

const attn_ops *attn_ops_avx512(int head_dim) {
    return head_dim % 16 == 0 && head_dim <= 512 ? &ops_avx512 : NULL;
}

/* ---- q8_0 keys scored in int8 (AVX-512 VNNI; attn.h, attn_qk_int8) -----
 *
 * Why: at depth with q8_0 K/V, widening each tile's keys to float (the
 * fill) cost as much as scoring them (perf, SmolLM2 decode at d8192: 30%
 * fill, 26% steps); VPDPBUSD multiplies 64 byte pairs into 16 int32 sums
 * in one instruction, and the keys stay int8 in the tile.
 *
 * Layouts, written over kt (64 x head_dim floats of room):
 *   k8: [head_dim / 4][64 keys][4] int8: lane j of row w holds key j's
 *       dims 4w .. 4w + 3 (8x8 transposes of 4-byte units);
 *   ks: [head_dim / 32][64] float: key j's scale in block b;
 *   kb: [head_dim / 32][64] int32: -128 x the sum of key j's int8s in b.
 * The query (prep_q): kvq_quant_q8 of the scaled query, stored as head_dim
 * bytes q + 128 (VPDPBUSD's unsigned operand), then the head_dim / 32
 * float scales. A block's dot kb + sum (q + 128) k = sum q k is exact in
 * int32 (|.| <= 127 * 127 * 32), whatever order the sums take; the score
 * is sum over blocks, in order, of float(dot) * (key scale * query
 * scale), one multiply and one FMA per block. Values are widened to float
 * (the other levels' floats) and steps 2-4 are step_avx512's. */

#define QK_BLOCKS(d) ((d) / KVQ_BLOCK)

static inline const float *qk_scales(const float *kt, int d) {
    return kt + (size_t)d * T / 4;
}

static inline const int32_t *qk_bias(const float *kt, int d) {
    return (const int32_t *)(qk_scales(kt, d) + (size_t)QK_BLOCKS(d) * T);
}

/* One 8-key group's block b: keys transposed into k8, their scales, the
 * bias; the values widened (each row's 32 int8s times its scale). */
static inline __attribute__((always_inline)) void fill_q8_block(const uint16_t *kr[8], const uint16_t *vr[8], int b,
                                                                int g, int d, float *kt, float *vt) {
    uint8_t *k8 = (uint8_t *)kt;
    float *ks = (float *)qk_scales(kt, d);
    int32_t *kb = (int32_t *)qk_bias(kt, d);
    __m256 r[8];
    UNROLL for (int u = 0; u < 8; u++) {
        const uint16_t *blk = kr[u] + (size_t)b * KVQ_Q8_0_BLOCK_HALVES;
        ks[(size_t)b * T + g + u] = _cvtsh_ss(blk[0]);
        r[u] = _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)(blk + 1)));
    }
    simd_tr8(r);
    __m256i sum = _mm256_setzero_si256();
    UNROLL for (int w = 0; w < 8; w++) {
        __m256i x = _mm256_castps_si256(r[w]);
        _mm256_storeu_si256((__m256i *)(k8 + ((size_t)(b * 8 + w) * T + g) * 4), x);
        sum = _mm256_dpbusd_epi32(sum, _mm256_set1_epi8(1), x);
    }
    _mm256_storeu_si256((__m256i *)(kb + (size_t)b * T + g), _mm256_sub_epi32(_mm256_setzero_si256(),
                                                                                _mm256_slli_epi32(sum, 7)));
    UNROLL for (int u = 0; u < 8; u++) {
        const uint16_t *blk = vr[u] + (size_t)b * KVQ_Q8_0_BLOCK_HALVES;
        const int8_t *q = (const int8_t *)(blk + 1);
        __m512 sc = _mm512_set1_ps(_cvtsh_ss(blk[0]));
        float *dst = vt + (size_t)(g + u) * d + b * KVQ_BLOCK;
        _mm512_storeu_ps(dst, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)q))), sc));
        _mm512_storeu_ps(dst + 16, _mm512_mul_ps(
                                       _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(q + 16)))), sc));
    }
}

static void fill_vnni_q8(const attn_kv *kv, int t0, int last, float *kt, float *vt) {
    int d = kv->head_dim;
    for (int g = 0; g < T; g += 8) {
        const uint16_t *kr[8], *vr[8];
        attn_group_rows(kv, t0, g, last, kr, vr);
        for (int b = 0; b < QK_BLOCKS(d); b++) fill_q8_block(kr, vr, b, g, d, kt, vt);
    }
}

/* The scaled query as int8 + 128 and float block scales, in place. */
static void prep_q_q8(int d, float *q) {
    int8_t q8[512];
    float sc[512 / KVQ_BLOCK];
    kvq_quant_q8(q, d, q8, sc);
    uint8_t *u = (uint8_t *)q;
    for (int i = 0; i < d; i++) u[i] = (uint8_t)(q8[i] + 128);
    memcpy(q + d / 4, sc, (size_t)QK_BLOCKS(d) * sizeof(float));
}

static inline __m512i qk_bcast4(const float *q, int i) {
    int32_t x;
    memcpy(&x, (const uint8_t *)q + i, 4);
    return _mm512_set1_epi32(x);
}

/* s[g] += float(dot) * (key scales * query scale): one block's scores. */
static inline __attribute__((always_inline)) void qk_block_scores(__m512 s[4], const __m512i a[4], const float *ks,
                                                                   float qscale) {
    __m512 sq = _mm512_set1_ps(qscale);
    UNROLL for (int g = 0; g < 4; g++)
        s[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a[g]), _mm512_mul_ps(_mm512_loadu_ps(ks + 16 * g), sq), s[g]);
}

/* 1. The 64 scores of one query (prep_q_q8's format) in int8. */
static inline __attribute__((always_inline)) void scores_q8(int d, const float *q, const float *kt, __m512 s[4]) {
    const uint8_t *k8 = (const uint8_t *)kt;
    const float *ks = qk_scales(kt, d), *qd = q + d / 4;
    const int32_t *kb = qk_bias(kt, d);
    UNROLL for (int g = 0; g < 4; g++) s[g] = _mm512_setzero_ps();
    for (int b = 0; b < QK_BLOCKS(d); b++) {
        __m512i a[4], c[4]; /* two chains per 16 keys (integer sums: any order, the same bits) */
        UNROLL for (int g = 0; g < 4; g++) a[g] = _mm512_loadu_si512(kb + (size_t)b * T + 16 * g), c[g] = _mm512_setzero_si512();
        UNROLL for (int w = 0; w < 8; w += 2) {
            const uint8_t *k = k8 + (size_t)(b * 8 + w) * T * 4;
            __m512i x = qk_bcast4(q, b * KVQ_BLOCK + 4 * w), y = qk_bcast4(q, b * KVQ_BLOCK + 4 * w + 4);
            UNROLL for (int g = 0; g < 4; g++) {
                a[g] = _mm512_dpbusd_epi32(a[g], x, _mm512_loadu_si512(k + 64 * g));
                c[g] = _mm512_dpbusd_epi32(c[g], y, _mm512_loadu_si512(k + T * 4 + 64 * g));
            }
        }
        UNROLL for (int g = 0; g < 4; g++) a[g] = _mm512_add_epi32(a[g], c[g]);
        qk_block_scores(s, a, ks + (size_t)b * T, qd[b]);
    }
}

/* scores_q8 for two queries, each key load feeding both (one chain per
 * query and 16 keys: the same integer sums, so the same bits). */
static inline __attribute__((always_inline)) void scores2_q8(int d, const float *q0, const float *q1, const float *kt,
                                                             __m512 s[4], __m512 r[4]) {
    const uint8_t *k8 = (const uint8_t *)kt;
    const float *ks = qk_scales(kt, d);
    const int32_t *kb = qk_bias(kt, d);
    UNROLL for (int g = 0; g < 4; g++) s[g] = _mm512_setzero_ps(), r[g] = _mm512_setzero_ps();
    for (int b = 0; b < QK_BLOCKS(d); b++) {
        __m512i a[4], c[4];
        UNROLL for (int g = 0; g < 4; g++) a[g] = c[g] = _mm512_loadu_si512(kb + (size_t)b * T + 16 * g);
        UNROLL for (int w = 0; w < 8; w++) {
            const uint8_t *k = k8 + (size_t)(b * 8 + w) * T * 4;
            __m512i x = qk_bcast4(q0, b * KVQ_BLOCK + 4 * w), y = qk_bcast4(q1, b * KVQ_BLOCK + 4 * w);
            UNROLL for (int g = 0; g < 4; g++) {
                __m512i kv = _mm512_loadu_si512(k + 64 * g);
                a[g] = _mm512_dpbusd_epi32(a[g], x, kv);
                c[g] = _mm512_dpbusd_epi32(c[g], y, kv);
            }
        }
        qk_block_scores(s, a, ks + (size_t)b * T, (q0 + d / 4)[b]);
        qk_block_scores(r, c, ks + (size_t)b * T, (q1 + d / 4)[b]);
    }
}

static void step_vnni_q8(int d, const float *q, const float *kt, const float *vt, int lo, int hi, float *st,
                         float *p) {
    __m512 s[4];
    scores_q8(d, q, kt, s);
    weigh_values(d, s, vt, lo, hi, st, p);
}

static void step2_vnni_q8(int d, const float *q0, const float *q1, const float *kt, const float *vt, int lo, int hi,
                          float *st0, float *st1, float *p) {
    __m512 s[4], r[4];
    scores2_q8(d, q0, q1, kt, s, r);
    weigh_values2(d, s, r, vt, lo, hi, st0, st1, p);
}

/* Three or four queries: pairs' scores (the third alone), then
 * weigh_valuesn. */
static void stepn_vnni_q8(int d, int n, const float *const q[4], const float *kt, const float *vt, int lo, int hi,
                          float *const st[4], float *p) {
    __m512 s[4][4];
    scores2_q8(d, q[0], q[1], kt, s[0], s[1]);
    if (n == 4) {
        scores2_q8(d, q[2], q[3], kt, s[2], s[3]);
        weigh_valuesn(4, d, s, vt, lo, hi, st, p);
    } else {
        scores_q8(d, q[2], kt, s[2]);
        weigh_valuesn(3, d, s, vt, lo, hi, st, p);
    }
}

static const attn_ops ops_vnni_q8 = {.tile_fill = fill_vnni_q8, .tile_step = step_vnni_q8, .tile_step2 = step2_vnni_q8,
                                     .prep_q = prep_q_q8, .tile_stepn = stepn_vnni_q8};

const attn_ops *attn_ops_vnni_q8(int head_dim) {
    return head_dim % KVQ_BLOCK == 0 && head_dim <= ATTN_QK_INT8_MAX_DIM ? &ops_vnni_q8 : NULL;
}
