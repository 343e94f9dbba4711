/* attn_amx_avx512.c - attention tile kernels on Intel AMX (AMX-BF16:
 * TDPBF16PS on 16 x 16 float32 tiles), the attention level ATTN_LEVEL_AMX
 * (see attn.h).
 *
 * Why: at depth attention is most of prefill, and the float32 kernels
 * (attn_avx512.c) issue one FMA per query, key and dim. A TDPBF16PS
 * multiplies a 16 x 32 bf16 tile by a 32 x 16 one into 16 x 16 float32
 * sums: the products of 16 queries with 16 keys over 32 dims in one
 * instruction.
 *
 * Numerics ("bf16x3", near float32): bf16 keeps 8 significant bits, too
 * few for scores (one rounding of q and k put the tiny MoE models 0.1 of
 * their logit range off the float64 reference, past router ties). So
 * every operand is split into a bf16 head and a bf16 tail, x = hi + lo
 * with lo = bf16(x - hi), and a product is hi*hi' + hi*lo' + lo*hi' (the
 * lo*lo' term, 2^-18 of it, dropped): keys and values from F16 split
 * exactly (11 bits), q and the softmax weights keep 16 bits. Sums are
 * float32. So the result is within ~2^-16 relative of float32 attention,
 * but its bits differ from the float32 levels: its blocks are filed under
 * their own numerics id (attn_numerics).
 *
 * Per tile and group of up to 16 queries (tile rows):
 *   1. S = Q K^T: 4 result tiles (16 keys each), summed over the dims 32
 *      at a time in order, three products each (hi hi, hi lo, lo hi);
 *   2. per query row: mask to [lo, hi), running max, p = e^(s - m') (the
 *      avx512 level's polynomial), its float32 sum by a fixed tree, p
 *      split into bf16 head and tail rows;
 *   3. per 64 dims, O = P V over the 64 keys (keys 0-31, then 32-63) in
 *      zeroed tiles, then acc = acc * alpha + O (one FMA) per query.
 * A row of a tile product depends only on that row of its first operand,
 * and a query's steps depend only on it and its [lo, hi): its bits never
 * depend on the other queries, their number or the thread (batch
 * invariance). Masked keys get p = 0 exactly; values are clamped finite
 * when the tile is made, so 0 x v is 0 whatever the rows past a query's
 * end hold.
 *
 * Layouts (made once per tile, read by every query of the call):
 *   keys:   kt = [head_dim / 2][64 keys][2] bf16 heads, then the tails: lane
 *           j of pair-row i holds key j's dims 2i (low half) and 2i + 1;
 *   values: vt = [32 key pairs][head_dim][2] heads, then tails: lane m of
 *           pair-row j, dim block u, holds dim 16u + m of keys 2j, 2j + 1;
 *   q:      head_dim bf16 heads, then head_dim tails, in the call's query
 *           array (tile loads read 16 of them at its stride).
 * head_dim must be a multiple of 32, from ATTN_AMX_MIN_DIM to 512. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "backend/amx_cfg.h"
#include "backend/attn.h"
#include "backend/attn_simd.h"

#define T ATTN_KV_TILE
#define R 16 /* query rows per tile */
#define UNROLL _Pragma("GCC unroll 16")
/* Every function: bf16 and AMX instructions beyond the file's AVX-512
 * flags (an attribute, not a build flag, so every build of the file gets
 * it; the level is used only where the CPU has them, attn.c). */
#define AMX __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,amx-tile,amx-bf16")))
#define INL static inline __attribute__((always_inline)) AMX

/* bf16 back to float (exact: the high half of a float). */
INL __m512 widen(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* x rounded to bf16 (nearest even), as a float. */
INL __m512 round_bf16(__m512 x) {
    return widen((__m256i)_mm512_cvtneps_pbh(x));
}

/* 16 floats from a and 16 from b, rounded to bf16 and interleaved:
 * a0 b0 a1 b1 ... a15 b15. */
INL __m512i pack_pairs(__m512 a, __m512 b) {
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                         21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    return _mm512_permutexvar_epi16(idx, (__m512i)_mm512_cvtne2ps_pbh(b, a));
}

/* Values clamped to +-FLT_MAX (NaN stays NaN), so a masked key's 0 x v is 0. */
INL __m512 clamp_finite(__m512 v) {
    const __m512 big = _mm512_set1_ps(3.4028234663852886e38f);
    return _mm512_max_ps(_mm512_sub_ps(_mm512_setzero_ps(), big), _mm512_min_ps(big, v));
}

/* Pairs (a_m, b_m) of two float vectors as bf16 by truncation: b's high
 * halves over a's (no lane crossing, unlike pack_pairs). */
INL __m512i trunc_pairs(__m512 a, __m512 b) {
    const __m512i hi16 = _mm512_set1_epi32((int)0xffff0000u);
    /* ternary 0xCA: mask ? b : a >> 16, bit by bit */
    return _mm512_ternarylogic_epi32(hi16, _mm512_castps_si512(b), _mm512_srli_epi32(_mm512_castps_si512(a), 16),
                                     0xCA);
}

INL __m512 trunc_bf16(__m512 x) {
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0xffff0000u)));
}

/* Values of keys a and b (16 dims each, floats) as head and tail pair
 * vectors at hi[0] and lo[0], split by truncation: the head keeps a
 * value's first 8 significant bits, the tail (exact in float) the next
 * 8, so an F16 value (11 bits) is split exactly, without the rounding
 * and lane permutes of pack_pairs. */
INL void store_value_pairs(__m512 a, __m512 b, uint16_t *hi, uint16_t *lo) {
    a = clamp_finite(a), b = clamp_finite(b);
    _mm512_storeu_si512(hi, trunc_pairs(a, b));
    _mm512_storeu_si512(lo, trunc_pairs(_mm512_sub_ps(a, trunc_bf16(a)), _mm512_sub_ps(b, trunc_bf16(b))));
}

/* 16 floats as bf16 head at hi and tail at lo. */
INL void store_split(__m512 x, uint16_t *hi, uint16_t *lo) {
    __m256i h = (__m256i)_mm512_cvtneps_pbh(x);
    _mm256_storeu_si256((__m256i *)hi, h);
    _mm256_storeu_si256((__m256i *)lo, (__m256i)_mm512_cvtneps_pbh(_mm512_sub_ps(x, widen(h))));
}

/* F16 rows straight to the layouts: keys 8 at a time through 8x8
 * transposes of dim pairs (32-bit units of two halves), values in row
 * pairs interleaved. */
static AMX void fill_f16(const attn_kv *kv, int t0, int last, float *kt, float *vt) {
    int d = kv->head_dim;
    uint16_t *kh = (uint16_t *)kt, *kl = kh + (size_t)T * d, *vh = (uint16_t *)vt, *vl = vh + (size_t)T * d;
    for (int g = 0; g < T; g += 8) {
        const uint16_t *kr[8], *vr[8];
        attn_group_rows(kv, t0, g, last, kr, vr);
        for (int i = 0; i < d; i += 16) {
            __m256 r[8];
            UNROLL for (int u = 0; u < 8; u++) r[u] = _mm256_loadu_ps((const float *)(kr[u] + i));
            simd_tr8(r); /* r[u]: dims i + 2u, i + 2u + 1 of the 8 keys */
            UNROLL for (int u = 0; u < 8; u++) {
                size_t o = ((size_t)(i / 2 + u) * T + g) * 2;
                store_split(_mm512_cvtph_ps(_mm256_castps_si256(r[u])), kh + o, kl + o);
            }
        }
        for (int u = 0; u < 8; u += 2) /* keys g + u, g + u + 1: one value pair-row */
            for (int i = 0; i < d; i += 16) {
                size_t o = ((size_t)(g + u) / 2 * d + i) * 2;
                store_value_pairs(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(vr[u] + i))),
                                  _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(vr[u + 1] + i))), vh + o,
                                  vl + o);
            }
    }
}

/* A float tile (keys transposed [d][64], values [64][d], as
 * attn_fill_avx2 widens Q8_0 / Q4_0 rows) to the layouts at kt, vt. */
static AMX void tile_from_floats(int d, const float *kf, const float *vf, float *kt, float *vt) {
    uint16_t *kh = (uint16_t *)kt, *kl = kh + (size_t)T * d, *vh = (uint16_t *)vt, *vl = vh + (size_t)T * d;
    for (int i = 0; i < d / 2; i++)
        for (int g = 0; g < T; g += 16) {
            __m512 a = _mm512_loadu_ps(kf + (size_t)2 * i * T + g), b = _mm512_loadu_ps(kf + (size_t)(2 * i + 1) * T + g);
            size_t o = ((size_t)i * T + g) * 2;
            _mm512_storeu_si512(kh + o, pack_pairs(a, b));
            _mm512_storeu_si512(kl + o, pack_pairs(_mm512_sub_ps(a, round_bf16(a)), _mm512_sub_ps(b, round_bf16(b))));
        }
    for (int j = 0; j < T / 2; j++)
        for (int i = 0; i < d; i += 16) {
            size_t o = ((size_t)j * d + i) * 2;
            store_value_pairs(_mm512_loadu_ps(vf + (size_t)2 * j * d + i), _mm512_loadu_ps(vf + (size_t)(2 * j + 1) * d + i),
                              vh + o, vl + o);
        }
}

/* F16 directly; Q8_0 and Q4_0 widened to floats (exactly) in the stage
 * area after the tile first. */
static AMX void fill_amx(const attn_kv *kv, int t0, int last, float *kt, float *vt) {
    if (kv->type == KVQ_F16) {
        fill_f16(kv, t0, last, kt, vt);
        return;
    }
    float *kf = vt + (size_t)T * kv->head_dim, *vf = kf + (size_t)T * kv->head_dim;
    attn_fill_avx2(kv, t0, last, kf, vf);
    tile_from_floats(kv->head_dim, kf, vf, kt, vt);
}

/* The scaled query (d floats) to d bf16 heads and d tails, in place. */
static AMX void prep_amx(int d, float *q) {
    float x[512];
    memcpy(x, q, (size_t)d * sizeof(float));
    uint16_t *h = (uint16_t *)q;
    for (int i = 0; i < d; i += 16) store_split(_mm512_loadu_ps(x + i), h + i, h + d + i);
}

/* Tiles of 64-byte rows: 0-3 results and 4, 7 the Q or P heads and
 * tails, m rows (the group's queries: a tile product's time goes with
 * its rows, and decode has a few); 5 and 6 the K or V heads and tails,
 * 16 rows (32 dims or keys). A row's result does not depend on how many
 * rows there are. */
static AMX void amx_config(int m) {
    amx_cfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 8; t++) c.colsb[t] = 64, c.rows[t] = (uint8_t)(t == 5 || t == 6 ? 16 : m);
    amx_cfg_load(&c);
}

/* Where the group's m q rows are for tile loads: in place when they lie
 * one stride apart in the call's array, else packed into qp (heads and
 * tails of a row together). *stride: bytes from a row to the next. */
static AMX const uint16_t *group_rows(int d, int m, const attn_gq *qs, int qstride, uint16_t *qp, int *stride) {
    int together = 1;
    for (int r = 1; r < m; r++) together &= qs[r].idx == qs[0].idx + r;
    if (together) {
        *stride = qstride * (int)sizeof(float);
        return (const uint16_t *)qs[0].q;
    }
    for (int r = 0; r < m; r++) memcpy(qp + (size_t)r * 2 * d, qs[r].q, (size_t)d * 4);
    *stride = d * 4;
    return qp;
}

/* Result tile c += A B for A = (4: head, 7: tail), B = (5: head, 6:
 * tail): hi hi, hi lo, lo hi, in that order. */
#define DP3(c)                                                                                                     \
    do {                                                                                                           \
        _tile_dpbf16ps(c, 4, 5);                                                                                   \
        _tile_dpbf16ps(c, 4, 6);                                                                                   \
        _tile_dpbf16ps(c, 7, 5);                                                                                   \
    } while (0)

/* B's head (5) and tail (6) from p and p + tail (bf16 units). */
#define LOAD_B(p, tail, stride)                                                                                    \
    do {                                                                                                           \
        _tile_loadd(5, (p), (stride));                                                                             \
        _tile_loadd(6, (p) + (tail), (stride));                                                                    \
    } while (0)

/* Result tiles 0 .. nb-1 (nb 2 or 4) += A times the B blocks at b, b + 32,
 * ... (16 keys or 16 dims of pairs each), tails at + tail. */
static AMX void dp_blocks(const uint16_t *b, size_t tail, int stride, int nb) {
    LOAD_B(b, tail, stride);
    DP3(0);
    LOAD_B(b + 32, tail, stride);
    DP3(1);
    if (nb == 4) {
        LOAD_B(b + 64, tail, stride);
        DP3(2);
        LOAD_B(b + 96, tail, stride);
        DP3(3);
    }
}

static AMX void zero_blocks(void) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
}

/* Result tiles 0 .. nb-1 to o, o + 16, ... (rows of 64 floats). */
static AMX void store_blocks(float *o, int nb) {
    _tile_stored(0, o, 4 * T);
    _tile_stored(1, o + 16, 4 * T);
    if (nb == 4) {
        _tile_stored(2, o + 32, 4 * T);
        _tile_stored(3, o + 48, 4 * T);
    }
}

/* Scores of the group (rows of heads and tails at q, stride bytes apart)
 * over the 64 keys into s [R][64]. */
static AMX void amx_scores(int d, const uint16_t *q, int stride, const uint16_t *kt, float *s) {
    zero_blocks();
    for (int ks = 0; ks < d / 32; ks++) {
        _tile_loadd(4, q + 32 * ks, stride);
        _tile_loadd(7, q + d + 32 * ks, stride);
        dp_blocks(kt + (size_t)ks * 16 * 2 * T, (size_t)T * d, 4 * T, 4); /* pair-rows 16 ks .. */
    }
    store_blocks(s, 4);
}

/* O [R][64] = P V for dims i .. i + 16 nb (nb 4 or 2); pb: [R][64]
 * heads, then tails. */
static AMX void amx_pv(int d, int i, int nb, const uint16_t *pb, const uint16_t *vt, float *o) {
    zero_blocks();
    for (int ks = 0; ks < 2; ks++) {
        _tile_loadd(4, pb + 32 * ks, 2 * T);
        _tile_loadd(7, pb + R * T + 32 * ks, 2 * T);
        dp_blocks(vt + (size_t)ks * 16 * 2 * d + 2 * i, (size_t)T * d, 4 * d, nb); /* key pairs 16 ks .. */
    }
    store_blocks(o, nb);
}

/* Step 2 for one query row s (64 scores): mask to [lo, hi), the running
 * max, p = e^(s - m') with its float32 sum into st, p's heads and tails
 * to ph, pl; returns alpha = e^(m - m'). */
static AMX float softmax_row(int d, const float *srow, int lo, int hi, float *st, uint16_t *ph, uint16_t *pl) {
    __m512 s[4];
    UNROLL for (int g = 0; g < 4; g++) s[g] = _mm512_loadu_ps(srow + 16 * g);
    if (lo > 0 || hi < T) {
        uint64_t in = (hi >= 64 ? ~0ull : (1ull << hi) - 1) & ~((1ull << lo) - 1);
        UNROLL for (int g = 0; g < 4; g++)
            s[g] = _mm512_mask_blend_ps((__mmask16)(in >> (16 * g)), _mm512_set1_ps(-INFINITY), s[g]);
    }
    float m = st[d], tmax = attn_hmax16(_mm512_max_ps(_mm512_max_ps(s[0], s[1]), _mm512_max_ps(s[2], s[3])));
    float mn = m > tmax ? m : tmax, alpha = m == mn ? 1.0f : expf(m - mn); /* expf(0) is 1: the same bits, no call */
    __m512 vm = _mm512_set1_ps(mn);
    UNROLL for (int g = 0; g < 4; g++) {
        s[g] = attn_exp512(_mm512_sub_ps(s[g], vm));
        store_split(s[g], ph + 16 * g, pl + 16 * g);
    }
    st[d + 1] = st[d + 1] * alpha + attn_hsum16(_mm512_add_ps(_mm512_add_ps(s[0], s[1]), _mm512_add_ps(s[2], s[3])));
    st[d] = mn;
    return alpha;
}

/* One group of m <= R queries: scores, softmax rows, values. p: the
 * kernel scratch (attn.c: scratch_floats). */
static AMX void amx_group(int d, int m, const attn_gq *qs, int qstride, const float *kt, const float *vt, float *p) {
    float *so = p, alpha[R];                                       /* [R][64]: scores, then values */
    uint16_t *pb = (uint16_t *)(so + R * T), *qp = pb + 2 * R * T; /* weights heads, tails; packed q */
    int stride;
    const uint16_t *q = group_rows(d, m, qs, qstride, qp, &stride);
    amx_scores(d, q, stride, (const uint16_t *)kt, so);
    for (int r = 0; r < m; r++)
        alpha[r] = softmax_row(d, so + r * T, qs[r].lo, qs[r].hi, qs[r].st, pb + r * T, pb + (R + r) * T);
    for (int i = 0; i < d; i += 64) {
        int nb = d - i >= 64 ? 4 : 2;
        amx_pv(d, i, nb, pb, (const uint16_t *)vt, so);
        for (int r = 0; r < m; r++) {
            __m512 al = _mm512_set1_ps(alpha[r]);
            for (int u = 0; u < nb; u++) {
                float *acc = qs[r].st + i + 16 * u;
                _mm512_storeu_ps(acc, _mm512_fmadd_ps(_mm512_loadu_ps(acc), al, _mm512_loadu_ps(so + r * T + 16 * u)));
            }
        }
    }
}

/* The scratch's first float holds the rows the tiles are configured
 * for (0: none): configured once per call (and when a group's rows
 * differ), released at its end, so no other code sees the tiles
 * configured (or pays for their state in a context switch). */
static AMX void amx_groups(int d, int n, const attn_gq *qs, int qstride, const float *kt, const float *vt, float *p) {
    int *rows = (int *)p;
    for (; n > 0; n -= R, qs += R) {
        int m = n < R ? n : R;
        if (m != *rows) amx_config(*rows = m);
        amx_group(d, m, qs, qstride, kt, vt, p + 16);
    }
}

static void amx_calls_begin(float *p) {
    *(int *)p = 0;
}

static AMX void amx_calls_end(float *p) {
    if (*(int *)p) _tile_release();
}

static const attn_ops ops_amx = {.tile_fill = fill_amx, .prep_q = prep_amx, .tile_group = amx_groups,
                                 .group_begin = amx_calls_begin, .group_end = amx_calls_end};

const attn_ops *attn_ops_amx(int head_dim) {
    return head_dim % 32 == 0 && head_dim >= ATTN_AMX_MIN_DIM && head_dim <= 512 ? &ops_amx : NULL;
}
