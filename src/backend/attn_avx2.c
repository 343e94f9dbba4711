/* attn_avx2.c - attention with AVX2/FMA/F16C.
 *
 * Scores are computed eight keys at a time: one accumulator per key, then
 * a transpose-and-add tree gives the eight dot products in one register,
 * so no key pays a full horizontal sum. Key j always sits in lane j % 8 of
 * the group starting at j - j % 8, and each lane's additions happen in the
 * same tree order, so a score depends only on q and its key row. exp runs
 * vectorised with a fixed polynomial. head_dim must be a multiple of 8 (at
 * most 256); other shapes use the scalar path. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "backend/attn.h"

#define MAX_DIM 256

/* Walks key/value rows in position order without a division per row. */
typedef struct row_cursor {
    const uint16_t *const *blocks;
    const uint16_t *row;
    int B, stride, off, block, left; /* left: rows after the current one */
} row_cursor;

static inline void cursor_init(row_cursor *c, const uint16_t *const *blocks, int B, int stride, int n) {
    *c = (row_cursor){blocks, blocks[0], B, stride, 0, 0, n - 1};
}

/* Current row; then advance unless it was the last (which then repeats). */
static inline const uint16_t *cursor_next(row_cursor *c) {
    const uint16_t *r = c->row;
    if (c->left > 0) {
        c->left--;
        if (++c->off == c->B) {
            c->off = 0;
            c->row = c->blocks[++c->block];
        } else {
            c->row += c->stride;
        }
    }
    return r;
}

/* Lane u of the result = sum of the 8 lanes of acc[u]. */
static inline __m256 sum8x8(const __m256 acc[8]) {
    __m256 a = _mm256_hadd_ps(acc[0], acc[1]), b = _mm256_hadd_ps(acc[2], acc[3]);
    __m256 c = _mm256_hadd_ps(acc[4], acc[5]), d = _mm256_hadd_ps(acc[6], acc[7]);
    __m256 ab = _mm256_hadd_ps(a, b), cd = _mm256_hadd_ps(c, d);
    /* ab = [k0 k1 k2 k3 | k0' k1' k2' k3'] (low and high halves of keys 0-3) */
    __m256 lo = _mm256_permute2f128_ps(ab, cd, 0x20), hi = _mm256_permute2f128_ps(ab, cd, 0x31);
    return _mm256_add_ps(lo, hi);
}

/* e^x for x <= 0 (scores minus their max); exact 0 below -87. */
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

/* Eight floats of row data: widened from F16, or read as float. The two
 * are the same values, so the arithmetic that follows is the same. */
static inline __attribute__((always_inline)) __m256 row8(const void *row, int i, int f32) {
    if (f32) return _mm256_loadu_ps((const float *)row + 8 * i);
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + 8 * i)));
}

/* Row j of the float copy, or the next F16 row of the cursor; past n_kv
 * both give the last row again. */
static inline __attribute__((always_inline)) const void *next_row(row_cursor *cur, const float *base, int d,
                                                                  int j, int n_kv, int f32) {
    if (f32) return base + (size_t)(j < n_kv ? j : n_kv - 1) * d;
    return cursor_next(cur);
}

/* scores[j] = scale * q.k_j for j < n_kv (the last group may write past
 * n_kv up to the next multiple of 8; the caller's buffer allows it). */
static inline __attribute__((always_inline)) float scores_and_max_src(const attn_args *a, int f32) {
    int B = a->block_tokens, nv = a->head_dim / 8;
    __m256 q[MAX_DIM / 8], mx = _mm256_set1_ps(-INFINITY), scale = _mm256_set1_ps(a->scale);
    for (int i = 0; i < nv; i++) q[i] = _mm256_loadu_ps(a->q + 8 * i);
    row_cursor cur;
    cursor_init(&cur, a->k_blocks, B, a->stride, a->n_kv);
    for (int j0 = 0; j0 < a->n_kv; j0 += 8) {
        __m256 acc[8];
        for (int u = 0; u < 8; u++) {
            const void *k = next_row(&cur, a->kf, a->head_dim, j0 + u, a->n_kv, f32);
            acc[u] = _mm256_setzero_ps();
            for (int i = 0; i < nv; i++) acc[u] = _mm256_fmadd_ps(q[i], row8(k, i, f32), acc[u]);
        }
        __m256 s = _mm256_mul_ps(sum8x8(acc), scale);
        _mm256_storeu_ps(a->scores + j0, s);
        mx = _mm256_max_ps(mx, s); /* tail lanes repeat key n_kv - 1: harmless */
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    return _mm_cvtss_f32(m4);
}

/* scores[j] = exp(scores[j] - mx); returns their sum (fixed lane order). */
static float exp_and_sum(const attn_args *a, float mx) {
    __m256 m = _mm256_set1_ps(mx), sum = _mm256_setzero_ps();
    int full = a->n_kv & ~7;
    for (int j = 0; j < full; j += 8) {
        __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(a->scores + j), m));
        _mm256_storeu_ps(a->scores + j, e);
        sum = _mm256_add_ps(sum, e);
    }
    if (full < a->n_kv) {
        float tail[8] = {0};
        for (int j = full; j < a->n_kv; j++) tail[j - full] = a->scores[j] - mx;
        for (int j = a->n_kv - full; j < 8; j++) tail[j] = -INFINITY;
        __m256 e = exp256(_mm256_loadu_ps(tail));
        _mm256_storeu_ps(tail, e);
        for (int j = full; j < a->n_kv; j++) a->scores[j] = tail[j - full];
        sum = _mm256_add_ps(sum, e);
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, sum);
    return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

static inline __attribute__((always_inline)) void attn_src(const attn_args *a, int f32) {
    int B = a->block_tokens, nv = a->head_dim / 8;
    float mx = scores_and_max_src(a, f32);
    float inv = 1.0f / exp_and_sum(a, mx);
    __m256 acc[MAX_DIM / 8];
    for (int i = 0; i < nv; i++) acc[i] = _mm256_setzero_ps();
    row_cursor cur;
    cursor_init(&cur, a->v_blocks, B, a->stride, a->n_kv);
    for (int j = 0; j < a->n_kv; j++) {
        const void *v = next_row(&cur, a->vf, a->head_dim, j, a->n_kv, f32);
        __m256 p = _mm256_set1_ps(a->scores[j]);
        for (int i = 0; i < nv; i++) acc[i] = _mm256_fmadd_ps(p, row8(v, i, f32), acc[i]);
    }
    __m256 s = _mm256_set1_ps(inv);
    for (int i = 0; i < nv; i++) _mm256_storeu_ps(a->out + 8 * i, _mm256_mul_ps(acc[i], s));
}

static void attn_f16(const attn_args *a) { attn_src(a, 0); }
static void attn_f32(const attn_args *a) { attn_src(a, 1); }

void attn_head_avx2(const attn_args *a) {
    if (a->head_dim % 8 || a->head_dim > MAX_DIM) attn_head_scalar(a);
    else if (a->kf && a->vf) attn_f32(a);
    else attn_f16(a);
}

/* ---- query tiles (prefill, float rows) ------------------------------------
 * Queries of one head over one sequence's keys, each computed with exactly
 * the per-query operations of attn_head_avx2's float path, but key chunks
 * are visited once for the whole tile, so each chunk is read from L1 by
 * every query instead of from far memory by each one. Only the loop order
 * across queries changes; no query's arithmetic does. */

#define CHUNK 64 /* keys per pass, a multiple of the 8-key groups */

static inline __m256 group_scores_f32(const __m256 *q, int nv, const float *kf, int d, int j0, int n_kv,
                                      __m256 scale) {
    __m256 acc[8];
    for (int u = 0; u < 8; u++) {
        const float *k = kf + (size_t)(j0 + u < n_kv ? j0 + u : n_kv - 1) * d;
        acc[u] = _mm256_setzero_ps();
        for (int i = 0; i < nv; i++) acc[u] = _mm256_fmadd_ps(q[i], _mm256_loadu_ps(k + 8 * i), acc[u]);
    }
    return _mm256_mul_ps(sum8x8(acc), scale);
}

static float hmax8(__m256 mx) {
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    return _mm_cvtss_f32(m4);
}

static void tile_scores(const attn_args *a, int nq, int c0, __m256 *mx) {
    int d = a[0].head_dim, nv = d / 8;
    for (int t = 0; t < nq; t++) {
        __m256 q[MAX_DIM / 8], scale = _mm256_set1_ps(a[t].scale);
        for (int i = 0; i < nv; i++) q[i] = _mm256_loadu_ps(a[t].q + 8 * i);
        for (int j0 = c0; j0 < c0 + CHUNK && j0 < a[t].n_kv; j0 += 8) {
            __m256 s = group_scores_f32(q, nv, a[t].kf, d, j0, a[t].n_kv, scale);
            _mm256_storeu_ps(a[t].scores + j0, s);
            mx[t] = _mm256_max_ps(mx[t], s);
        }
    }
}

static void tile_values(const attn_args *a, int nq, int c0, float (*accbuf)[MAX_DIM]) {
    int d = a[0].head_dim, nv = d / 8;
    for (int t = 0; t < nq; t++) {
        __m256 acc[MAX_DIM / 8];
        for (int i = 0; i < nv; i++) acc[i] = _mm256_loadu_ps(accbuf[t] + 8 * i);
        int end = c0 + CHUNK < a[t].n_kv ? c0 + CHUNK : a[t].n_kv;
        for (int j = c0; j < end; j++) {
            const float *v = a[t].vf + (size_t)j * d;
            __m256 p = _mm256_set1_ps(a[t].scores[j]);
            for (int i = 0; i < nv; i++) acc[i] = _mm256_fmadd_ps(p, _mm256_loadu_ps(v + 8 * i), acc[i]);
        }
        for (int i = 0; i < nv; i++) _mm256_storeu_ps(accbuf[t] + 8 * i, acc[i]);
    }
}

void attn_tile_avx2(const attn_args *a, int nq) {
    int d = a[0].head_dim, nv = d / 8, max_kv = 0;
    if (d % 8 || d > MAX_DIM || nq > ATTN_TILE || !a[0].kf) {
        for (int t = 0; t < nq; t++) attn_head_avx2(&a[t]);
        return;
    }
    __m256 mx[ATTN_TILE];
    float inv[ATTN_TILE], accbuf[ATTN_TILE][MAX_DIM];
    for (int t = 0; t < nq; t++) {
        mx[t] = _mm256_set1_ps(-INFINITY);
        memset(accbuf[t], 0, sizeof accbuf[t]);
        if (a[t].n_kv > max_kv) max_kv = a[t].n_kv;
    }
    for (int c0 = 0; c0 < max_kv; c0 += CHUNK) tile_scores(a, nq, c0, mx);
    for (int t = 0; t < nq; t++) inv[t] = 1.0f / exp_and_sum(&a[t], hmax8(mx[t]));
    for (int c0 = 0; c0 < max_kv; c0 += CHUNK) tile_values(a, nq, c0, accbuf);
    for (int t = 0; t < nq; t++) {
        __m256 s = _mm256_set1_ps(inv[t]);
        for (int i = 0; i < nv; i++) _mm256_storeu_ps(a[t].out + 8 * i, _mm256_mul_ps(_mm256_loadu_ps(accbuf[t] + 8 * i), s));
    }
}
