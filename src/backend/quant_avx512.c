/* quant_avx512.c - AVX-512 (F, BW, VL, VNNI) gemm kernels.
 *
 * Every kernel is a register tile of R weight rows x T tokens (T = 4, 2 or
 * 1): weight blocks are decoded once per tile and reused for T tokens,
 * activation blocks are loaded once and reused for R rows.
 *
 * Batch invariance: every (row, token) pair owns its accumulators and
 * sees the same instruction sequence in every tile shape (block order,
 * lane layout and final horizontal sum are fixed by k alone). Row tails
 * rerun the R-row tile with the last row repeated; token tails use the
 * T = 2 and T = 1 tiles, which do per pair exactly what T = 4 does.
 *
 * Legacy formats (Q4_0..Q8_0, blocks of 32): two blocks per zmm. Weights
 * are decoded to unsigned bytes (Q8_0: w + 128), multiplied with the signed
 * activation bytes by VPDPBUSD, and the offset is a per-block "minimum"
 * m (Q4_0: -8d, Q5_0: -16d, Q8_0: -128d, Q4_1/Q5_1: the stored min) times
 * the activation block sum s, accumulated 16 blocks at a time.
 * K-quants: sub-block scales are applied in integers (VPMADDUBSW then
 * VPDPWSSD), so the float work is one FMA per 256 elements.
 * Does not: threads; F16/BF16 use plain float FMAs. */
#include "backend/quant_impl.h"

#include <immintrin.h>

#define AI static inline __attribute__((always_inline))
#define R 4 /* weight rows per tile */
/* Tile loops must unroll fully so the accumulators live in registers. */
#define UNROLL _Pragma("GCC unroll 16")

typedef void (*tile_fn)(const uint8_t *const *w, const uint8_t *const *x,
                        int64_t k, float *out);
typedef struct {
    tile_fn t1, t2, t4;
} tile_set;

/* Walks [r0, r1) x [0, n_tok) in tiles; rows in chunks of 32 so a chunk's
 * weights stay in cache while every token passes over them. */
static void drive(const tile_set *ts, const void *w, size_t wrb, int64_t k,
                  const void *xq, size_t xrb, int n_tok, float *y,
                  int64_t ldy, int r0, int r1) {
    for (int rc = r0; rc < r1; rc += 32) {
        int rce = rc + 32 < r1 ? rc + 32 : r1;
        for (int t0 = 0; t0 < n_tok;) {
            int left = n_tok - t0, T = left >= 4 ? 4 : left >= 2 ? 2 : 1;
            tile_fn fn = T == 4 ? ts->t4 : T == 2 ? ts->t2 : ts->t1;
            const uint8_t *xp[4];
            for (int j = 0; j < T; j++) xp[j] = (const uint8_t *)xq + (size_t)(t0 + j) * xrb;
            for (int r = rc; r < rce; r += R) {
                const uint8_t *wp[R];
                float out[R * 4];
                for (int i = 0; i < R; i++)
                    wp[i] = (const uint8_t *)w + (size_t)(r + i < r1 ? r + i : r1 - 1) * wrb;
                fn(wp, xp, k, out);
                for (int i = 0; i < R && r + i < rce; i++)
                    for (int j = 0; j < T; j++) y[(t0 + j) * ldy + r + i] = out[i * T + j];
            }
            t0 += T;
        }
    }
}

#define TILESET(name)                                                         \
    static void name##_1(const uint8_t *const *w, const uint8_t *const *x,    \
                         int64_t k, float *o) { name(w, x, k, o, 1); }         \
    static void name##_2(const uint8_t *const *w, const uint8_t *const *x,    \
                         int64_t k, float *o) { name(w, x, k, o, 2); }         \
    static void name##_4(const uint8_t *const *w, const uint8_t *const *x,    \
                         int64_t k, float *o) { name(w, x, k, o, 4); }         \
    static const tile_set name##_set = {name##_1, name##_2, name##_4};

/* ---- legacy 32-element blocks ------------------------------------------- */

enum { L40, L41, L50, L51, L80 };

AI int lg_bytes(int ty) {
    static const int b[] = {QB_Q4_0, QB_Q4_1, QB_Q5_0, QB_Q5_1, QB_Q8_0};
    return b[ty];
}

/* Two blocks (a, then a + bytes) as 64 unsigned bytes in element order.
 * With has_b == 0 only block a exists: the upper half is zeroed. */
AI __m512i lg_decode(int ty, const uint8_t *a, int has_b) {
    const uint8_t *b = has_b ? a + lg_bytes(ty) : a;
    __m512i z;
    if (ty == L80) {
        z = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const void *)(a + 2))),
                               _mm256_loadu_si256((const void *)(b + 2)), 1);
        z = _mm512_xor_si512(z, _mm512_set1_epi8((char)0x80));
    } else {
        int off = ty == L40 ? 2 : ty == L41 ? 4 : ty == L50 ? 6 : 8;
        __m256i t = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const void *)(a + off))),
            _mm_loadu_si128((const void *)(b + off)), 1);
        z = _mm512_inserti64x4(_mm512_castsi256_si512(t), _mm256_srli_epi16(t, 4), 1);
        /* 128-bit lanes [a.lo, b.lo, a.hi, b.hi] -> [a.lo, a.hi, b.lo, b.hi] */
        z = _mm512_and_si512(_mm512_shuffle_i64x2(z, z, 0xD8), _mm512_set1_epi8(15));
        if (ty == L50 || ty == L51) {
            int qo = ty == L50 ? 2 : 4;
            uint64_t bits = quant_rd32(a + qo) | (uint64_t)quant_rd32(b + qo) << 32;
            z = _mm512_or_si512(z, _mm512_maskz_mov_epi8(_cvtu64_mask64(bits),
                                                         _mm512_set1_epi8(16)));
        }
    }
    return has_b ? z : _mm512_maskz_mov_epi8(0xffffffffULL, z);
}

/* Scales d and minimums m of blocks b0..b0+n-1 (n <= 16; others 0). The
 * dword at each block start holds d (and m for Q4_1/Q5_1). Inserted lane
 * by lane: VPGATHERDD is slow on CPUs with the gather-data-sampling fix. */
AI void lg_head(int ty, const uint8_t *row, int64_t b0, int n, __m512 *d, __m512 *m) {
    const int by = lg_bytes(ty);
    const uint8_t *p = row + b0 * by;
    __m128i q[4];
    for (int i = 0; i < 4; i++) q[i] = _mm_setzero_si128();
#define LANE(i)                                                               \
    if (i < n) q[i / 4] = _mm_insert_epi32(q[i / 4], (int)quant_rd32(p + (i) * by), (i) % 4);
    LANE(0) LANE(1) LANE(2) LANE(3) LANE(4) LANE(5) LANE(6) LANE(7)
    LANE(8) LANE(9) LANE(10) LANE(11) LANE(12) LANE(13) LANE(14) LANE(15)
#undef LANE
    __m512i g = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_set_m128i(q[1], q[0])), _mm256_set_m128i(q[3], q[2]), 1);
    *d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g));
    if (ty == L41 || ty == L51)
        *m = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(g, 16)));
    else
        *m = _mm512_mul_ps(*d, _mm512_set1_ps(ty == L40 ? -8.0f : ty == L50 ? -16.0f : -128.0f));
}

AI void lg_tile(int ty, const uint8_t *const *w, const uint8_t *const *x,
                int64_t k, float *out, const int T) {
    const int64_t nb = k / QK;
    const int by = lg_bytes(ty);
    __m512 acc[R][4], accm[R][4];
    UNROLL
    for (int r = 0; r < R; r++)
        UNROLL
        for (int t = 0; t < T; t++) acc[r][t] = accm[r][t] = _mm512_setzero_ps();
    const __m512i half = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    for (int64_t b0 = 0; b0 < nb; b0 += 16) {
        int n = nb - b0 < 16 ? (int)(nb - b0) : 16;
        __mmask16 km = (__mmask16)(n >= 16 ? 0xffff : (1u << n) - 1);
        __m512 d[R], m[R], dx[4];
        UNROLL
        for (int r = 0; r < R; r++) lg_head(ty, w[r], b0, n, &d[r], &m[r]);
        UNROLL
        for (int t = 0; t < T; t++) {
            dx[t] = _mm512_maskz_loadu_ps(km, qa8_d(x[t]) + b0);
            __m512 s = _mm512_maskz_loadu_ps(km, qa8_s(x[t], nb) + b0);
            UNROLL
            for (int r = 0; r < R; r++) accm[r][t] = _mm512_fmadd_ps(m[r], s, accm[r][t]);
        }
        for (int st = 0; 2 * st < n; st++) {
            int has_b = 2 * st + 1 < n;
            __m512i pidx = _mm512_add_epi32(half, _mm512_set1_epi32(2 * st));
            __m512i wv[R];
            __m512 dw[R];
            UNROLL
            for (int r = 0; r < R; r++) {
                wv[r] = lg_decode(ty, w[r] + (b0 + 2 * st) * by, has_b);
                dw[r] = _mm512_permutexvar_ps(pidx, d[r]);
            }
            UNROLL
            for (int t = 0; t < T; t++) {
                const int8_t *xp = qa8_qs(x[t], nb) + (b0 + 2 * st) * QK;
                __m512i xv = has_b ? _mm512_loadu_si512((const void *)xp)
                                   : _mm512_maskz_loadu_epi8(0xffffffffULL, xp);
                __m512 dxp = _mm512_permutexvar_ps(pidx, dx[t]);
                UNROLL
                for (int r = 0; r < R; r++) {
                    __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[r], xv);
                    acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p),
                                                _mm512_mul_ps(dw[r], dxp), acc[r][t]);
                }
            }
        }
    }
    UNROLL
    for (int r = 0; r < R; r++)
        UNROLL
        for (int t = 0; t < T; t++)
            out[r * T + t] = _mm512_reduce_add_ps(acc[r][t]) + _mm512_reduce_add_ps(accm[r][t]);
}

AI void lg_q4_0(const uint8_t *const *w, const uint8_t *const *x, int64_t k, float *o, int T) {
    lg_tile(L40, w, x, k, o, T);
}
AI void lg_q4_1(const uint8_t *const *w, const uint8_t *const *x, int64_t k, float *o, int T) {
    lg_tile(L41, w, x, k, o, T);
}
AI void lg_q5_0(const uint8_t *const *w, const uint8_t *const *x, int64_t k, float *o, int T) {
    lg_tile(L50, w, x, k, o, T);
}
AI void lg_q5_1(const uint8_t *const *w, const uint8_t *const *x, int64_t k, float *o, int T) {
    lg_tile(L51, w, x, k, o, T);
}
AI void lg_q8_0(const uint8_t *const *w, const uint8_t *const *x, int64_t k, float *o, int T) {
    lg_tile(L80, w, x, k, o, T);
}
TILESET(lg_q4_0)
TILESET(lg_q4_1)
TILESET(lg_q5_0)
TILESET(lg_q5_1)
TILESET(lg_q8_0)

/* ---- K-quants (Q8_K activations) --------------------------------------- */

enum { K4, K5, K6 };

/* Per super-block weight data a tile row needs: the 4 decoded 64-element
 * chunks' scale patterns come from `sc` (int16 lanes), the minimum
 * pattern per 16-element activation group from `mp`. */
typedef struct {
    __m512i sc;  /* Q4_K/Q5_K: 8 scales, 8 mins (int16); Q6_K: 16 scales */
    __m256i mp;  /* Q4_K/Q5_K: m[g/2]; Q6_K: -32 * sc[g] (int16, 16 lanes) */
    __m512 d, dmin;
} kq_head;

/* Unpack the 6-bit scales and mins of a Q4_K/Q5_K super-block: bytes
 * 0-3 hold sc0-3 (low 6 bits), 4-7 m0-3, 8-11 the low nibbles of sc4-7 and
 * m4-7; the top two bits of bytes 0-7 complete sc4-7 and m4-7. */
AI __m512i kq_unpack_scales(const uint8_t *s) {
    uint32_t a = quant_rd32(s), b = quant_rd32(s + 4), c = quant_rd32(s + 8);
    uint64_t sc = (a & 0x3f3f3f3fu) |
                  (uint64_t)((c & 0x0f0f0f0fu) | ((a >> 2) & 0x30303030u)) << 32;
    uint64_t mn = (b & 0x3f3f3f3fu) |
                  (uint64_t)(((c >> 4) & 0x0f0f0f0fu) | ((b >> 2) & 0x30303030u)) << 32;
    return _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_set_epi64x((long long)mn, (long long)sc)));
}

AI void kq_load_head(int ty, const uint8_t *blk, kq_head *h) {
    if (ty == K6) {
        __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const void *)(blk + 192)));
        h->sc = _mm512_castsi256_si512(sc);
        h->mp = _mm256_mullo_epi16(sc, _mm256_set1_epi16(-32));
        h->d = _mm512_set1_ps(_cvtsh_ss(quant_rd16(blk + 208)));
        h->dmin = _mm512_setzero_ps();
    } else {
        h->sc = kq_unpack_scales(blk + 4);
        const __m512i mi = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                            15, 15, 14, 14, 13, 13, 12, 12,
                                            11, 11, 10, 10, 9, 9, 8, 8);
        h->mp = _mm512_castsi512_si256(_mm512_permutexvar_epi16(mi, h->sc));
        h->d = _mm512_set1_ps(_cvtsh_ss(quant_rd16(blk)));
        h->dmin = _mm512_set1_ps(_cvtsh_ss(quant_rd16(blk + 2)));
    }
}

/* 64 unsigned quants of chunk c (elements 64c..64c+63) of a super-block. */
AI __m512i kq_decode(int ty, const uint8_t *blk, int c) {
    const __m512i m4 = _mm512_set1_epi8(15);
    if (ty == K6) {
        int h = c / 2, s = c & 1;
        __m512i ql = _mm512_loadu_si512((const void *)(blk + 64 * h));
        __m512i lo = _mm512_and_si512(s ? _mm512_srli_epi16(ql, 4) : ql, m4);
        __m256i qh = _mm256_loadu_si256((const void *)(blk + 128 + 32 * h));
        __m512i zq = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
        /* bits 2s..2s+1 of each byte, moved to bits 4-5 */
        zq = _mm512_and_si512(s ? zq : _mm512_slli_epi16(zq, 4), _mm512_set1_epi8(0x30));
        return _mm512_or_si512(lo, zq);
    }
    const uint8_t *qs = blk + (ty == K5 ? 48 : 16) + 32 * c;
    __m256i q = _mm256_loadu_si256((const void *)qs);
    __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1);
    z = _mm512_and_si512(z, m4);
    if (ty == K5) { /* bit 2c of qh[l] for the low half, 2c + 1 for the high */
        __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const void *)(blk + 16)));
        __m512i bit = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << 2 * c)),
                                         _mm256_set1_epi8((char)(1 << (2 * c + 1))), 1);
        __mmask64 hb = _mm512_test_epi8_mask(qh, bit);
        z = _mm512_or_si512(z, _mm512_maskz_mov_epi8(hb, _mm512_set1_epi8(16)));
    }
    return z;
}

/* int16 scale for each of the 32 VPMADDUBSW lanes of chunk c. */
AI __m512i kq_scale_pattern(int ty, __m512i sc, int c) {
    __m512i idx;
    if (ty == K6) /* 16-element groups: lane L covers elements 2L, 2L+1 */
        idx = _mm512_srli_epi16(_mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21,
                                                 20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10,
                                                 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), 3);
    else
        idx = _mm512_srli_epi16(_mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21,
                                                 20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10,
                                                 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), 4);
    idx = _mm512_add_epi16(idx, _mm512_set1_epi16((short)(ty == K6 ? 4 * c : 2 * c)));
    return _mm512_permutexvar_epi16(idx, sc);
}

AI void kq_tile(int ty, const uint8_t *const *w, const uint8_t *const *x,
                int64_t k, float *out, const int T) {
    const int64_t nb = k / QK_K;
    const int by = ty == K4 ? QB_Q4_K : ty == K5 ? QB_Q5_K : QB_Q6_K;
    __m512 acc[R][4];
    __m256 accm[R][4];
    UNROLL
    for (int r = 0; r < R; r++)
        UNROLL
        for (int t = 0; t < T; t++) {
            acc[r][t] = _mm512_setzero_ps();
            accm[r][t] = _mm256_setzero_ps();
        }
    for (int64_t b = 0; b < nb; b++) {
        kq_head h[R];
        __m512i ia[R][4];
        __m256i im[R][4];
        UNROLL
        for (int r = 0; r < R; r++) kq_load_head(ty, w[r] + b * by, &h[r]);
        UNROLL
        for (int t = 0; t < T; t++) {
            __m256i bs = _mm256_loadu_si256((const void *)(qak_bsums(x[t], nb) + 16 * b));
            UNROLL
            for (int r = 0; r < R; r++) {
                if (ty == K6) { /* the -32 offset: sum_g (-32 sc_g) * bsum_g */
                    ia[r][t] = _mm512_dpwssd_epi32(_mm512_setzero_si512(),
                                                   _mm512_zextsi256_si512(bs),
                                                   _mm512_zextsi256_si512(h[r].mp));
                } else {
                    ia[r][t] = _mm512_setzero_si512();
                    im[r][t] = _mm256_dpwssd_epi32(_mm256_setzero_si256(), bs, h[r].mp);
                }
            }
        }
        UNROLL
        for (int c = 0; c < 4; c++) {
            __m512i wv[R], sp[R];
            UNROLL
            for (int r = 0; r < R; r++) {
                wv[r] = kq_decode(ty, w[r] + b * by, c);
                sp[r] = kq_scale_pattern(ty, h[r].sc, c);
            }
            UNROLL
            for (int t = 0; t < T; t++) {
                __m512i xv = _mm512_loadu_si512((const void *)(qak_qs(x[t], nb) + b * QK_K + 64 * c));
                UNROLL
                for (int r = 0; r < R; r++)
                    ia[r][t] = _mm512_dpwssd_epi32(ia[r][t], _mm512_maddubs_epi16(wv[r], xv), sp[r]);
            }
        }
        UNROLL
        for (int t = 0; t < T; t++) {
            __m512 dx = _mm512_set1_ps(qak_d(x[t])[b]);
            UNROLL
            for (int r = 0; r < R; r++) {
                acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[r][t]),
                                            _mm512_mul_ps(h[r].d, dx), acc[r][t]);
                if (ty != K6)
                    accm[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(im[r][t]),
                                                 _mm512_castps512_ps256(_mm512_mul_ps(h[r].dmin, dx)),
                                                 accm[r][t]);
            }
        }
    }
    UNROLL
    for (int r = 0; r < R; r++)
        UNROLL
        for (int t = 0; t < T; t++) {
            float v = _mm512_reduce_add_ps(acc[r][t]);
            if (ty != K6) {
                __m256 a = accm[r][t];
                __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
                s = _mm_add_ps(s, _mm_movehl_ps(s, s));
                s = _mm_add_ss(s, _mm_movehdup_ps(s));
                v -= _mm_cvtss_f32(s);
            }
            out[r * T + t] = v;
        }
}

AI void kq_q4_k(const uint8_t *const *w, const uint8_t *const *x, int64_t k, float *o, int T) {
    kq_tile(K4, w, x, k, o, T);
}
AI void kq_q5_k(const uint8_t *const *w, const uint8_t *const *x, int64_t k, float *o, int T) {
    kq_tile(K5, w, x, k, o, T);
}
AI void kq_q6_k(const uint8_t *const *w, const uint8_t *const *x, int64_t k, float *o, int T) {
    kq_tile(K6, w, x, k, o, T);
}
TILESET(kq_q4_k)
TILESET(kq_q5_k)
TILESET(kq_q6_k)

/* ---- float formats (F32 activations) ----------------------------------- */

enum { FF32, FF16, FBF16 };

/* 16 weights from element i on (n valid, rest 0). */
AI __m512 fl_load(int ty, const uint8_t *row, int64_t i, __mmask16 km) {
    if (ty == FF32) return _mm512_maskz_loadu_ps(km, (const float *)(const void *)row + i);
    __m256i h = _mm256_maskz_loadu_epi16(km, row + 2 * i);
    if (ty == FF16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

AI void fl_tile(int ty, const uint8_t *const *w, const uint8_t *const *x,
                int64_t k, float *out, const int T) {
    __m512 acc[R][4];
    UNROLL
    for (int r = 0; r < R; r++)
        UNROLL
        for (int t = 0; t < T; t++) acc[r][t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < k; i += 16) {
        __mmask16 km = (__mmask16)(k - i >= 16 ? 0xffff : (1u << (k - i)) - 1);
        __m512 wv[R];
        UNROLL
        for (int r = 0; r < R; r++) wv[r] = fl_load(ty, w[r], i, km);
        UNROLL
        for (int t = 0; t < T; t++) {
            __m512 xv = _mm512_maskz_loadu_ps(km, (const float *)(const void *)x[t] + i);
            UNROLL
            for (int r = 0; r < R; r++) acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
        }
    }
    UNROLL
    for (int r = 0; r < R; r++)
        UNROLL
        for (int t = 0; t < T; t++) out[r * T + t] = _mm512_reduce_add_ps(acc[r][t]);
}

AI void fl_f32(const uint8_t *const *w, const uint8_t *const *x, int64_t k, float *o, int T) {
    fl_tile(FF32, w, x, k, o, T);
}
AI void fl_f16(const uint8_t *const *w, const uint8_t *const *x, int64_t k, float *o, int T) {
    fl_tile(FF16, w, x, k, o, T);
}
AI void fl_bf16(const uint8_t *const *w, const uint8_t *const *x, int64_t k, float *o, int T) {
    fl_tile(FBF16, w, x, k, o, T);
}
TILESET(fl_f32)
TILESET(fl_f16)
TILESET(fl_bf16)

/* ---- dispatch ------------------------------------------------------------ */

#define GEMM(name)                                                            \
    static void gemm_##name(const void *w, size_t wrb, int64_t k,             \
                            const void *xq, size_t xrb, int n_tok, float *y,  \
                            int64_t ldy, int r0, int r1) {                    \
        drive(&name##_set, w, wrb, k, xq, xrb, n_tok, y, ldy, r0, r1);        \
    }
GEMM(lg_q4_0)
GEMM(lg_q4_1)
GEMM(lg_q5_0)
GEMM(lg_q5_1)
GEMM(lg_q8_0)
GEMM(kq_q4_k)
GEMM(kq_q5_k)
GEMM(kq_q6_k)
GEMM(fl_f32)
GEMM(fl_f16)
GEMM(fl_bf16)

quant_gemm_fn quant_avx512_kernel(qtype t) {
    switch (t) {
    case QT_Q4_0: return gemm_lg_q4_0;
    case QT_Q4_1: return gemm_lg_q4_1;
    case QT_Q5_0: return gemm_lg_q5_0;
    case QT_Q5_1: return gemm_lg_q5_1;
    case QT_Q8_0: return gemm_lg_q8_0;
    case QT_Q4_K: return gemm_kq_q4_k;
    case QT_Q5_K: return gemm_kq_q5_k;
    case QT_Q6_K: return gemm_kq_q6_k;
    case QT_F32: return gemm_fl_f32;
    case QT_F16: return gemm_fl_f16;
    case QT_BF16: return gemm_fl_bf16;
    default: return NULL;
    }
}
