/* quant_avx2.c - AVX2 + FMA (+F16C) gemm kernels.
 *
 * Same shape as quant_avx512.c: register tiles of R weight rows x T tokens
 * (T = 2 or 1 here; AVX2 has 16 vector registers), each weight block
 * decoded once per tile. Batch invariance as there: every (row, token)
 * pair owns its accumulators and sees the same instructions in every tile
 * shape; row tails repeat the last row, token tails use the T = 1 tile.
 *
 * Legacy formats: one 32-element block per ymm; VPMADDUBSW (unsigned
 * weight x signed activation) then VPMADDWD into 8 int32 lanes. Q8_0 uses
 * the sign trick (|w| x sign(x, w)) because w + 128 would saturate the
 * int16 pair sums; Q4_0/Q5_0 fold their offset into a per-block minimum
 * (-8d, -16d) times the activation block sum, as Q4_1/Q5_1 do with m.
 * K-quants: scales applied in integers (VPMADDWD with the scale pattern),
 * one FMA per 256 elements. Does not: threads. */
#include "backend/quant_impl.h"

#include <immintrin.h>

#define AI static inline __attribute__((always_inline))
#define R 4
#define UNROLL _Pragma("GCC unroll 16")

typedef void (*tile_fn)(const uint8_t *const *w, const uint8_t *const *x,
                        int64_t k, float *out);
typedef struct {
    tile_fn t1, t2;
} tile_set;

/* Walks [r0, r1) x [0, n_tok) in tiles, rows in chunks of 32. */
static void drive(const tile_set *ts, const void *w, size_t wrb, int64_t k,
                  const void *xq, size_t xrb, int n_tok, float *y,
                  int64_t ldy, int r0, int r1) {
    for (int rc = r0; rc < r1; rc += 32) {
        int rce = rc + 32 < r1 ? rc + 32 : r1;
        for (int t0 = 0; t0 < n_tok;) {
            int T = n_tok - t0 >= 2 ? 2 : 1;
            tile_fn fn = T == 2 ? ts->t2 : ts->t1;
            const uint8_t *xp[2];
            for (int j = 0; j < T; j++) xp[j] = (const uint8_t *)xq + (size_t)(t0 + j) * xrb;
            for (int r = rc; r < rce; r += R) {
                const uint8_t *wp[R];
                float out[R * 2];
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
    static const tile_set name##_set = {name##_1, name##_2};

AI float hsum8(__m256 a) { /* fixed order: halves, then pairs, then lanes */
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* n (< 8) floats from p, zero-filled to 8: the tail of a short group. */
AI __m256 load_part(const float *p, int n) {
    float buf[8] = {0};
    for (int i = 0; i < n; i++) buf[i] = p[i];
    return _mm256_loadu_ps(buf);
}

/* ---- legacy 32-element blocks ------------------------------------------- */

enum { L40, L41, L50, L51, L80 };

AI int lg_bytes(int ty) {
    static const int b[] = {QB_Q4_0, QB_Q4_1, QB_Q5_0, QB_Q5_1, QB_Q8_0};
    return b[ty];
}

/* One block as 32 bytes in element order: unsigned quants, or for Q8_0 the
 * signed quants (the caller applies the sign trick). */
AI __m256i lg_decode(int ty, const uint8_t *b) {
    if (ty == L80) return _mm256_loadu_si256((const void *)(b + 2));
    int off = ty == L40 ? 2 : ty == L41 ? 4 : ty == L50 ? 6 : 8;
    __m128i q = _mm_loadu_si128((const void *)(b + off));
    __m256i z = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(15));
    if (ty == L50 || ty == L51) { /* bit j of qh -> 0x10 in byte j */
        uint32_t qh = quant_rd32(b + (ty == L50 ? 2 : 4));
        __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh),
                                        _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL,
                                                          0x0101010101010101LL, 0));
        __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
        v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
        z = _mm256_or_si256(z, _mm256_and_si256(v, _mm256_set1_epi8(16)));
    }
    return z;
}

/* Scales and minimums of blocks b0..b0+n-1 (n <= 8, rest 0) as floats. */
AI void lg_head(int ty, const uint8_t *row, int64_t b0, int n, __m256 *d, __m256 *m) {
    const int by = lg_bytes(ty);
    /* Built in registers: eight 2-byte stores then a 16-byte load would
     * stall on store forwarding. */
    __m128i dh = _mm_setzero_si128(), mh = _mm_setzero_si128();
#define LANE(i)                                                              \
    if (i < n) {                                                             \
        dh = _mm_insert_epi16(dh, quant_rd16(row + (b0 + i) * by), i);       \
        mh = _mm_insert_epi16(mh, quant_rd16(row + (b0 + i) * by + 2), i);   \
    }
    LANE(0) LANE(1) LANE(2) LANE(3) LANE(4) LANE(5) LANE(6) LANE(7)
#undef LANE
    *d = _mm256_cvtph_ps(dh);
    if (ty == L41 || ty == L51)
        *m = _mm256_cvtph_ps(mh);
    else
        *m = _mm256_mul_ps(*d, _mm256_set1_ps(ty == L40 ? -8.0f : ty == L50 ? -16.0f : 0.0f));
}

AI void lg_tile(int ty, const uint8_t *const *w, const uint8_t *const *x,
                int64_t k, float *out, const int T) {
    const int64_t nb = k / QK;
    const int by = lg_bytes(ty);
    __m256 acc[R][2], accm[R][2];
    UNROLL
    for (int r = 0; r < R; r++)
        UNROLL
        for (int t = 0; t < T; t++) acc[r][t] = accm[r][t] = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t b0 = 0; b0 < nb; b0 += 8) {
        int n = nb - b0 < 8 ? (int)(nb - b0) : 8;
        __m256 d[R], m[R];
        float dw[R][8];
        UNROLL
        for (int r = 0; r < R; r++) {
            lg_head(ty, w[r], b0, n, &d[r], &m[r]);
            _mm256_storeu_ps(dw[r], d[r]);
        }
        if (ty != L80) {
            UNROLL
            for (int t = 0; t < T; t++) {
                const float *sp = qa8_s(x[t], nb) + b0;
                __m256 s = n == 8 ? _mm256_loadu_ps(sp) : load_part(sp, n);
                UNROLL
                for (int r = 0; r < R; r++) accm[r][t] = _mm256_fmadd_ps(m[r], s, accm[r][t]);
            }
        }
        for (int j = 0; j < n; j++) {
            __m256i wv[R];
            UNROLL
            for (int r = 0; r < R; r++) wv[r] = lg_decode(ty, w[r] + (b0 + j) * by);
            UNROLL
            for (int t = 0; t < T; t++) {
                __m256i xv = _mm256_loadu_si256((const void *)(qa8_qs(x[t], nb) + (b0 + j) * QK));
                __m256 dx = _mm256_broadcast_ss(qa8_d(x[t]) + b0 + j);
                UNROLL
                for (int r = 0; r < R; r++) {
                    __m256i p = ty == L80
                        ? _mm256_maddubs_epi16(_mm256_sign_epi8(wv[r], wv[r]),
                                               _mm256_sign_epi8(xv, wv[r]))
                        : _mm256_maddubs_epi16(wv[r], xv);
                    p = _mm256_madd_epi16(p, ones);
                    __m256 sc = _mm256_mul_ps(_mm256_broadcast_ss(&dw[r][j]), dx);
                    acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), sc, acc[r][t]);
                }
            }
        }
    }
    UNROLL
    for (int r = 0; r < R; r++)
        UNROLL
        for (int t = 0; t < T; t++) out[r * T + t] = hsum8(acc[r][t]) + hsum8(accm[r][t]);
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

/* int16 scales of the 8 sub-blocks (Q4_K/Q5_K, then the 8 mins) or of the
 * 16 groups (Q6_K), as stored per super-block. */
AI __m256i kq_scales(int ty, const uint8_t *blk) {
    if (ty == K6) return _mm256_cvtepi8_epi16(_mm_loadu_si128((const void *)(blk + 192)));
    const uint8_t *s = blk + 4;
    uint32_t a = quant_rd32(s), b = quant_rd32(s + 4), c = quant_rd32(s + 8);
    uint64_t sc = (a & 0x3f3f3f3fu) |
                  (uint64_t)((c & 0x0f0f0f0fu) | ((a >> 2) & 0x30303030u)) << 32;
    uint64_t mn = (b & 0x3f3f3f3fu) |
                  (uint64_t)(((c >> 4) & 0x0f0f0f0fu) | ((b >> 2) & 0x30303030u)) << 32;
    return _mm256_cvtepu8_epi16(_mm_set_epi64x((long long)mn, (long long)sc));
}

/* 32 unsigned quants of chunk c (elements 32c..32c+31). */
AI __m256i kq_decode(int ty, const uint8_t *blk, int c) {
    const __m256i m4 = _mm256_set1_epi8(15);
    if (ty == K6) {
        int h = c / 4, s = (c / 2) & 1;
        __m256i ql = _mm256_loadu_si256((const void *)(blk + 64 * h + 32 * (c & 1)));
        __m256i lo = _mm256_and_si256(s ? _mm256_srli_epi16(ql, 4) : ql, m4);
        __m256i qh = _mm256_loadu_si256((const void *)(blk + 128 + 32 * h));
        int sh = 2 * (c % 4); /* bits sh, sh+1 -> bits 4, 5 */
        __m256i hi = sh <= 4 ? _mm256_slli_epi16(qh, 4 - sh) : _mm256_srli_epi16(qh, sh - 4);
        return _mm256_or_si256(lo, _mm256_and_si256(hi, _mm256_set1_epi8(0x30)));
    }
    const uint8_t *qs = blk + (ty == K5 ? 48 : 16) + 32 * (c / 2);
    __m256i q = _mm256_loadu_si256((const void *)qs);
    __m256i z = _mm256_and_si256((c & 1) ? _mm256_srli_epi16(q, 4) : q, m4);
    if (ty == K5) {
        __m256i bit = _mm256_set1_epi8((char)(1 << c));
        __m256i qh = _mm256_loadu_si256((const void *)(blk + 16));
        __m256i on = _mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit);
        z = _mm256_or_si256(z, _mm256_and_si256(on, _mm256_set1_epi8(16)));
    }
    return z;
}

/* int16 scale for each of the 16 VPMADDUBSW lanes of chunk c. */
AI __m256i kq_pattern(int ty, __m256i sc, int c) {
    __m128i s = _mm256_castsi256_si128(sc); /* lanes 0..7 */
    if (ty == K6) { /* groups 2c (elements 0-15) and 2c + 1 (16-31) */
        __m128i src = c < 4 ? s : _mm256_extracti128_si256(sc, 1);
        int i = (2 * c) & 7;
        return _mm256_set_m128i(
            _mm_shuffle_epi8(src, _mm_set1_epi16((short)(0x0100 + 0x0202 * (i + 1)))),
            _mm_shuffle_epi8(src, _mm_set1_epi16((short)(0x0100 + 0x0202 * i))));
    }
    __m128i lo = _mm_shuffle_epi8(s, _mm_set1_epi16((short)(0x0100 + 0x0202 * c)));
    return _mm256_set_m128i(lo, lo);
}

AI void kq_tile(int ty, const uint8_t *const *w, const uint8_t *const *x,
                int64_t k, float *out, const int T) {
    const int64_t nb = k / QK_K;
    const int by = ty == K4 ? QB_Q4_K : ty == K5 ? QB_Q5_K : QB_Q6_K;
    __m256 acc[R][2], accm[R][2];
    UNROLL
    for (int r = 0; r < R; r++)
        UNROLL
        for (int t = 0; t < T; t++) acc[r][t] = accm[r][t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i sc[R], ia[R][2];
        UNROLL
        for (int r = 0; r < R; r++) sc[r] = kq_scales(ty, w[r] + b * by);
        UNROLL
        for (int t = 0; t < T; t++) {
            __m256i bs = _mm256_loadu_si256((const void *)(qak_bsums(x[t], nb) + 16 * b));
            UNROLL
            for (int r = 0; r < R; r++) {
                if (ty == K6) { /* the -32 offset: sum_g -32 sc_g bsum_g */
                    ia[r][t] = _mm256_madd_epi16(bs, _mm256_mullo_epi16(sc[r], _mm256_set1_epi16(-32)));
                } else { /* mins: sum_g m[g/2] bsum_g, scaled by dmin below */
                    __m128i mn = _mm256_extracti128_si256(sc[r], 1);
                    __m256i mp = _mm256_set_m128i(_mm_unpackhi_epi16(mn, mn), _mm_unpacklo_epi16(mn, mn));
                    __m256i im = _mm256_madd_epi16(bs, mp);
                    float dm = _cvtsh_ss(quant_rd16(w[r] + b * by + 2)) * qak_d(x[t])[b];
                    accm[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(im), _mm256_set1_ps(dm), accm[r][t]);
                    ia[r][t] = _mm256_setzero_si256();
                }
            }
        }
        for (int c = 0; c < 8; c++) {
            __m256i wv[R], sp[R];
            UNROLL
            for (int r = 0; r < R; r++) {
                wv[r] = kq_decode(ty, w[r] + b * by, c);
                sp[r] = kq_pattern(ty, sc[r], c);
            }
            UNROLL
            for (int t = 0; t < T; t++) {
                __m256i xv = _mm256_loadu_si256((const void *)(qak_qs(x[t], nb) + b * QK_K + 32 * c));
                UNROLL
                for (int r = 0; r < R; r++)
                    ia[r][t] = _mm256_add_epi32(ia[r][t], _mm256_madd_epi16(_mm256_maddubs_epi16(wv[r], xv), sp[r]));
            }
        }
        UNROLL
        for (int t = 0; t < T; t++)
            UNROLL
            for (int r = 0; r < R; r++) {
                float d = _cvtsh_ss(quant_rd16(w[r] + b * by + (ty == K6 ? 208 : 0)));
                acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia[r][t]),
                                            _mm256_set1_ps(d * qak_d(x[t])[b]), acc[r][t]);
            }
    }
    UNROLL
    for (int r = 0; r < R; r++)
        UNROLL
        for (int t = 0; t < T; t++) out[r * T + t] = hsum8(acc[r][t]) - hsum8(accm[r][t]);
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

/* 8 weights from element i; n < 8 valid ones are zero-filled. */
AI __m256 fl_load(int ty, const uint8_t *row, int64_t i, int n) {
    if (ty == FF32) {
        const float *p = (const float *)(const void *)row + i;
        return n == 8 ? _mm256_loadu_ps(p) : load_part(p, n);
    }
    uint16_t buf[8] = {0};
    const uint16_t *p = (const uint16_t *)(const void *)(row + 2 * i);
    __m128i h;
    if (n == 8) {
        h = _mm_loadu_si128((const void *)p);
    } else {
        for (int j = 0; j < n; j++) buf[j] = p[j];
        h = _mm_loadu_si128((const void *)buf);
    }
    if (ty == FF16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

AI void fl_tile(int ty, const uint8_t *const *w, const uint8_t *const *x,
                int64_t k, float *out, const int T) {
    __m256 acc[R][2];
    UNROLL
    for (int r = 0; r < R; r++)
        UNROLL
        for (int t = 0; t < T; t++) acc[r][t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < k; i += 8) {
        int n = k - i < 8 ? (int)(k - i) : 8;
        __m256 wv[R];
        UNROLL
        for (int r = 0; r < R; r++) wv[r] = fl_load(ty, w[r], i, n);
        UNROLL
        for (int t = 0; t < T; t++) {
            __m256 xv = fl_load(FF32, x[t], i, n);
            UNROLL
            for (int r = 0; r < R; r++) acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]);
        }
    }
    UNROLL
    for (int r = 0; r < R; r++)
        UNROLL
        for (int t = 0; t < T; t++) out[r * T + t] = hsum8(acc[r][t]);
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

quant_gemm_fn quant_avx2_kernel(qtype t) {
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
