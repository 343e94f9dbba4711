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
#include <immintrin.h>

#include "backend/quant_tile.h"

#define R 4 /* weight rows per tile of the K-quant and float kernels */

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

/* Half h of a 16-block activation group (quant_impl.h): lanes p = 8h + i,
 * i < 8, block qa8_lane(p). Nibble formats keep 4 packed vectors (dword c
 * of each block: low nibbles chunk c, high nibbles chunk c + 4); Q8_0 its
 * 8 chunks as signed bytes (the sign trick keeps VPMADDUBSW unsaturated). */
typedef struct {
    __m256i q[8], qh; /* qh: Q5_0/Q5_1 fifth bits, one dword per lane */
    __m256 d, m;      /* scale and minimum (Q4_0: -8d, Q5_0: -16d) */
} lg_half;

/* 4x4 dword transpose inside each 128-bit lane (see quant_avx512.c). */
AI void lg_transpose4(const __m256i *in, __m256i *out) {
    __m256i t0 = _mm256_unpacklo_epi32(in[0], in[1]), t1 = _mm256_unpackhi_epi32(in[0], in[1]);
    __m256i t2 = _mm256_unpacklo_epi32(in[2], in[3]), t3 = _mm256_unpackhi_epi32(in[2], in[3]);
    out[0] = _mm256_unpacklo_epi64(t0, t2);
    out[1] = _mm256_unpackhi_epi64(t0, t2);
    out[2] = _mm256_unpacklo_epi64(t1, t3);
    out[3] = _mm256_unpackhi_epi64(t1, t3);
}

/* Block of lane i of half h, and whether it is one of the n real ones. */
AI int lg_blk(int h, int i) { return qa8_lane(8 * h + i); }

AI void lg_load_head(int ty, const uint8_t *g, int h, int n, lg_half *o) {
    const int by = lg_bytes(ty);
    /* Built in registers: 2-byte stores then a 16-byte load would stall on
     * store forwarding. */
    __m128i dh = _mm_setzero_si128(), mh = _mm_setzero_si128(), qh = _mm_setzero_si128();
    __m128i qh2 = _mm_setzero_si128();
#define LANE(i)                                                               \
    if (lg_blk(h, i) < n) {                                                   \
        const uint8_t *b = g + lg_blk(h, i) * by;                             \
        dh = _mm_insert_epi16(dh, quant_rd16(b), i);                          \
        mh = _mm_insert_epi16(mh, quant_rd16(b + 2), i);                      \
        if (ty == L50 || ty == L51) {                                         \
            if ((i) < 4) qh = _mm_insert_epi32(qh, (int)quant_rd32(b + lg_qh_off(ty)), (i) & 3); \
            else qh2 = _mm_insert_epi32(qh2, (int)quant_rd32(b + lg_qh_off(ty)), (i) & 3); \
        }                                                                     \
    }
    LANE(0) LANE(1) LANE(2) LANE(3) LANE(4) LANE(5) LANE(6) LANE(7)
#undef LANE
    o->qh = _mm256_set_m128i(qh2, qh);
    o->d = _mm256_cvtph_ps(dh);
    if (ty == L41 || ty == L51)
        o->m = _mm256_cvtph_ps(mh);
    else
        o->m = _mm256_mul_ps(o->d, _mm256_set1_ps(ty == L40 ? -8.0f : ty == L50 ? -16.0f : 0.0f));
}

AI void lg_load(int ty, const uint8_t *g, int h, int n, lg_half *o) {
    const int by = lg_bytes(ty), qo = lg_qs_off(ty);
    if (ty == L80) { /* 8x8 dword transpose of one block per ymm */
        __m256i y[8], u[4], u2[4];
        UNROLL
        for (int i = 0; i < 8; i++)
            y[i] = lg_blk(h, i) < n ? _mm256_loadu_si256((const void *)(g + lg_blk(h, i) * by + qo))
                                    : _mm256_setzero_si256();
        lg_transpose4(y, u);
        lg_transpose4(y + 4, u2);
        /* Two loops, so the permute's selector is a literal at every
         * optimisation level (unrolling alone makes it one only at -O2). */
        UNROLL
        for (int v = 0; v < 4; v++) o->q[v] = _mm256_permute2x128_si256(u[v], u2[v], 0x20);
        UNROLL
        for (int v = 4; v < 8; v++) o->q[v] = _mm256_permute2x128_si256(u[v - 4], u2[v - 4], 0x31);
    } else { /* lanes 4L + i of block 4i + 2h + L: two 16-byte loads each */
        __m256i z[4];
        UNROLL
        for (int i = 0; i < 4; i++) {
            int j = 4 * i + 2 * h;
            __m128i a = j < n ? _mm_loadu_si128((const void *)(g + j * by + qo)) : _mm_setzero_si128();
            __m128i b = j + 1 < n ? _mm_loadu_si128((const void *)(g + (j + 1) * by + qo)) : _mm_setzero_si128();
            z[i] = _mm256_set_m128i(b, a);
        }
        lg_transpose4(z, o->q);
    }
    lg_load_head(ty, g, h, n, o);
}

/* Chunk v (elements 4v..4v+3 of each lane's block). */
AI __m256i lg_chunk(int ty, const lg_half *g, int v) {
    if (ty == L80) return g->q[v];
    const __m256i m4 = _mm256_set1_epi8(15);
    __m256i c = v < 4 ? _mm256_and_si256(g->q[v], m4)
                      : _mm256_and_si256(_mm256_srli_epi16(g->q[v - 4], 4), m4);
    if (ty == L50 || ty == L51) { /* bit 4v + i of qh -> 16 in byte i */
        const __m256i base = _mm256_setr_epi32(0, 0x04040404, 0x08080808, 0x0c0c0c0c,
                                               0, 0x04040404, 0x08080808, 0x0c0c0c0c);
        __m256i b = _mm256_shuffle_epi8(g->qh, _mm256_add_epi8(base, _mm256_set1_epi8((char)(v / 2))));
        __m256i bit = _mm256_set1_epi32(v & 1 ? (int)0x80402010 : 0x08040201);
        b = _mm256_cmpeq_epi8(_mm256_and_si256(b, bit), bit);
        c = _mm256_or_si256(c, _mm256_and_si256(b, _mm256_set1_epi8(16)));
    }
    return c;
}

/* Exact integer block sums of one half against token row x. Nibble
 * products sum 4 at a time in int16 (4 * 2 * 31 * 127 < 2^15). */
AI __m256i lg_dot(int ty, const lg_half *g, const int8_t *xq) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i sum = _mm256_setzero_si256();
    if (ty == L80) {
        UNROLL
        for (int v = 0; v < 8; v++) {
            __m256i w = g->q[v], x = _mm256_loadu_si256((const void *)(xq + 64 * v));
            __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
            sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p, ones));
        }
        return sum;
    }
    UNROLL
    for (int v0 = 0; v0 < 8; v0 += 4) {
        __m256i p = _mm256_setzero_si256();
        UNROLL
        for (int v = v0; v < v0 + 4; v++)
            p = _mm256_add_epi16(p, _mm256_maddubs_epi16(lg_chunk(ty, g, v),
                                                         _mm256_loadu_si256((const void *)(xq + 64 * v))));
        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p, ones));
    }
    return sum;
}

/* One weight row x T tokens; per (row, token) pair and half group, whatever
 * T: acc = fma(cvt(sum), d*dx, acc), then acc = fma(m, s, acc). */
AI void lg_tile(int ty, const uint8_t *const *w, const uint8_t *const *x,
                int64_t k, float *out, const int T) {
    const int64_t nb = k / QK;
    const int by = lg_bytes(ty);
    __m256 acc[4];
    UNROLL
    for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t b0 = 0; b0 < nb; b0 += QA8_GROUP) {
        int n = nb - b0 < QA8_GROUP ? (int)(nb - b0) : QA8_GROUP;
        for (int h = 0; h < 2; h++) {
            lg_half g;
            lg_load(ty, w[0] + b0 * by, h, n, &g);
            UNROLL
            for (int t = 0; t < T; t++) {
                __m256i sum = lg_dot(ty, &g, qa8_qs(x[t], nb) + b0 * QK + 32 * h);
                __m256 dx = _mm256_loadu_ps(qa8_d(x[t]) + b0 + 8 * h);
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(g.d, dx), acc[t]);
                if (ty != L80)
                    acc[t] = _mm256_fmadd_ps(g.m, _mm256_loadu_ps(qa8_s(x[t], nb) + b0 + 8 * h), acc[t]);
            }
        }
    }
    UNROLL
    for (int t = 0; t < T; t++) out[t] = hsum8(acc[t]);
}

TILE_WRAP(lg_q4_0, lg_tile, L40)
TILE_WRAP(lg_q4_1, lg_tile, L41)
TILE_WRAP(lg_q5_0, lg_tile, L50)
TILE_WRAP(lg_q5_1, lg_tile, L51)
TILE_WRAP(lg_q8_0, lg_tile, L80)
TILESET_421(lg_q4_0, 1)
TILESET_421(lg_q4_1, 1)
TILESET_421(lg_q5_0, 1)
TILESET_421(lg_q5_1, 1)
TILESET_421(lg_q8_0, 1)

/* ---- K-quants (Q8_K activations) --------------------------------------- */

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

TILE_WRAP(kq_q4_k, kq_tile, K4)
TILE_WRAP(kq_q5_k, kq_tile, K5)
TILE_WRAP(kq_q6_k, kq_tile, K6)
TILESET_21(kq_q4_k, R)
TILESET_21(kq_q5_k, R)
TILESET_21(kq_q6_k, R)

/* ---- float formats (F32 activations) ----------------------------------- */

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

TILE_WRAP(fl_f32, fl_tile, FF32)
TILE_WRAP(fl_f16, fl_tile, FF16)
TILE_WRAP(fl_bf16, fl_tile, FBF16)
TILESET_21(fl_f32, R)
TILESET_21(fl_f16, R)
TILESET_21(fl_bf16, R)

/* ---- dispatch ------------------------------------------------------------ */

TILE_KERNELS(quant_avx2_kernel)
