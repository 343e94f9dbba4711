/* quant_avx2.c - AVX2 + FMA (+F16C) gemm kernels.
 *
 * Legacy formats (Q4_0..Q8_0): one float chain per (row, token) pair with
 * 8 weight rows in a vector's lanes, quant_scalar.c's arithmetic (the
 * same bits at every level; "legacy formats: one float chain per pair"
 * below): rows prepared per call in groups of 8 for prefill, the GGUF
 * rows with lanes = blocks and an 8 x 8 transpose of the sums for decode.
 * K-quant prefill (n_tok >= 8) also puts 8 weight rows in the lanes, rows
 * prepared per call in groups of 8 ("K-quants, prefill" below). The
 * other kernels are register tiles of R weight rows x T tokens (AVX2 has
 * 16 vector registers: K-quant decode 1 x 4, 2 x 2 and 4 x 1, floats
 * 4 x 2, MXFP4 1 x 4) driven by quant_tile.h. Batch
 * invariance as in quant_avx512.c: every (row, token) pair owns its
 * accumulators and sees the same instructions in every tile shape; row
 * tails repeat the last row, token tails use narrower tiles.
 *
 * The half-group loads (lg_load: 8 blocks of a 16-block activation group
 * in the lanes) serve the legacy decode, the legacy row preparation and
 * MXFP4. K-quants: scales applied in integers (VPMADDWD with the scale
 * pattern, or in prefill with the rows' (sc, sc) pairs), then every
 * level's float steps on the exact super-block sums (decode: kq_sums):
 * the same bits as the scalar kernels. MXFP4 keeps its own
 * fixed steps (the same bits at every level too). Floats: 8 lanes and
 * hsum8, this level's own bits ("+mm-avx2"). Does not: threads. */
#include <immintrin.h>

#include "backend/simd_tr.h"
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
    __m256 d, m;      /* scale and minimum (Q4_0: -8d, Q5_0: -16d, Q8_0: -128d) */
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

/* Block of lane i of half h (real when below the group's n). */
AI int lg_blk(int h, int i) { return qa8_lane(8 * h + i); }

/* 2^(e-128) of the E8M0 byte e in each dword (quant_e8m0_half). */
AI __m256 mx_e8m0(__m256i e) {
    __m256i big = _mm256_cmpgt_epi32(e, _mm256_set1_epi32(1));
    __m256i den = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    __m256i nrm = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(den, nrm, big));
}

/* Q4_1, Q5_1 store their minimum; the others' is a multiple of d. */
AI int lg_has_min(int ty) { return ty == L41 || ty == L51; }
AI __m256 lg_m_of_d(int ty, __m256 d) {
    return _mm256_mul_ps(d, _mm256_set1_ps(ty == L40 ? -8.0f : ty == L50 ? -16.0f : -128.0f));
}

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
    if (ty == LMX) { /* dh holds each block's E8M0 byte (and qs[0] above it) */
        o->d = mx_e8m0(_mm256_and_si256(_mm256_cvtepu16_epi32(dh), _mm256_set1_epi32(0xff)));
        o->m = _mm256_setzero_ps();
        return;
    }
    o->d = _mm256_cvtph_ps(dh);
    o->m = lg_has_min(ty) ? _mm256_cvtph_ps(mh) : lg_m_of_d(ty, o->d);
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

/* How many chunks of VPMADDUBSW pairs an int16 sum may take: Q4's
 * u <= 15, 8 * 2 * 15 * 127 < 2^15; Q5's u <= 31, 4 * 2 * 31 * 127. */
AI int lg_flush(int ty) { return ty == L50 || ty == L51 ? 4 : 8; }

/* Exact integer block sums of one half against token row x (Q8_0: of q,
 * by the sign trick; nibble formats: of u, lg_flush chunks in int16). */
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
    for (int v0 = 0; v0 < 8; v0 += lg_flush(ty)) {
        __m256i p = _mm256_setzero_si256();
        UNROLL
        for (int v = v0; v < v0 + lg_flush(ty); v++)
            p = _mm256_add_epi16(p, _mm256_maddubs_epi16(lg_chunk(ty, g, v),
                                                         _mm256_loadu_si256((const void *)(xq + 64 * v))));
        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p, ones));
    }
    return sum;
}

/* ---- legacy formats: one float chain per (row, token) pair ------------
 * The arithmetic is quant_scalar.c's dot_legacy, every level's bits: per
 * block in order acc = fma(isum, dw * dx, acc), per block in order accm =
 * fma(m, s, accm), then out = acc + accm. Here a vector's 8 lanes are 8
 * weight rows, so the float steps are one convert, multiply and FMA per
 * 8 pairs and block, and no pair needs a horizontal sum.
 *
 * isum is the exact sum of the unsigned weight quants u times the
 * activation quants. Nibble formats sum VPMADDUBSW pairs in int16
 * (lg_flush chunks at a time), then VPMADDWD. Q8_0's u = q + 128 would
 * saturate VPMADDUBSW's pairs, so its kernels sum q * x by the sign trick
 * (|q| x sign(x, q), one chunk a VPMADDWD) and add 128 times the
 * activation block's integer sum (lg_xsum128): the same integer.
 *
 * Prefill (n_tok >= LG_PREP_MIN): each call prepares its rows in groups
 * of 8 (lg_prep_group), per block 8 chunk vectors (chunk c, lane r:
 * elements 4c..4c+3 of row r; u, Q8_0: q), then the rows' dw, then their
 * m: LG_BLK bytes. A tile of 2 groups x 3 tokens broadcasts a token's 4
 * bytes of a chunk to a VPMADDUBSW per group (lg_tile). Decode reads the
 * GGUF rows as the half-group loads give them (lanes = blocks), sums each
 * (row, token, block) exactly, then an 8 x 8 transpose per token and half
 * turns the sums to lanes = rows before the same float steps (lg_dec).
 * Rows past r1 repeat the last row; their results are not stored. The
 * drivers are quant_group_drive.h's (avx512's too). */
#define LG_PREP_MIN 8
#define LG_CHUNK (256 << 10) /* prepared bytes per row chunk: it stays in L2 */
#define LG_G 8 /* rows per group */
enum { LG_BLK = 8 * 32 + 2 * 32, LG_MAXG = 128 /* groups per chunk, at most (short rows) */ };

/* In place: v[c] dword r = v[r] dword c (simd_tr8). */
AI void lg_tr8(__m256i *v) {
    __m256 f[8];
    UNROLL
    for (int i = 0; i < 8; i++) f[i] = _mm256_castsi256_ps(v[i]);
    simd_tr8(f);
    UNROLL
    for (int i = 0; i < 8; i++) v[i] = _mm256_castps_si256(f[i]);
}

/* The integer sums of the activation blocks of half h of the group at qs
 * (lane i: block qa8_lane(8h + i)), times 128 (Q8_0's offset): 8 chunks
 * of VPMADDUBSW with ones summed in int16 (8 * 2 * 127 < 2^15). */
AI __m256i lg_xsum128(const int8_t *qs, int h) {
    __m256i p = _mm256_setzero_si256();
    UNROLL
    for (int v = 0; v < 8; v++)
        p = _mm256_add_epi16(p, _mm256_maddubs_epi16(_mm256_set1_epi8(1),
                                                     _mm256_loadu_si256((const void *)(qs + 32 * h + 64 * v))));
    return _mm256_slli_epi32(_mm256_madd_epi16(p, _mm256_set1_epi16(1)), 7);
}

/* Whether half h of a group of n blocks holds one (lanes 8h..8h+7 are
 * blocks qa8_lane(8h + i): half 1 starts at block 2). */
AI int lg_half_used(int h, int n) { return h == 0 || n > 2; }

/* The 8 GGUF rows rw[] prepared into nb * LG_BLK bytes at dst. */
AI void lg_prep_group(int ty, const uint8_t *const *rw, int64_t nb, uint8_t *dst) {
    for (int64_t b0 = 0; b0 < nb; b0 += QA8_GROUP) {
        const int n = nb - b0 < QA8_GROUP ? (int)(nb - b0) : QA8_GROUP;
        for (int h = 0; h < 2 && lg_half_used(h, n); h++) {
            __m256i t[10][8];
            for (int i = 0; i < 8; i++) {
                lg_half g;
                lg_load(ty, rw[i] + b0 * lg_bytes(ty), h, n, &g);
                UNROLL
                for (int v = 0; v < 8; v++) t[v][i] = lg_chunk(ty, &g, v);
                t[8][i] = _mm256_castps_si256(g.d);
                t[9][i] = _mm256_castps_si256(g.m);
            }
            for (int v = 0; v < 10; v++) {
                lg_tr8(t[v]); /* t[v][i]: lane r = row r's block b0 + qa8_lane(8h + i) */
                for (int i = 0; i < 8; i++)
                    if (lg_blk(h, i) < n)
                        _mm256_store_si256((__m256i *)(void *)(dst + (b0 + lg_blk(h, i)) * LG_BLK + 32 * v), t[v][i]);
            }
        }
    }
}

/* What the legacy prefill tiles take per token besides its row: Q8_0's
 * blocks' integer sums times 128, as int32 at their slots. */
AI size_t lg_x_bytes(int ty, int64_t nb) { return ty == L80 ? (size_t)qa8_nbp(nb) * 4 : 0; }
AI void lg_x_prep(int ty, const uint8_t *x, int64_t nb, uint8_t *dst) {
    if (ty != L80) return;
    for (int64_t b0 = 0; b0 < nb; b0 += QA8_GROUP)
        for (int h = 0; h < 2; h++)
            _mm256_storeu_si256((__m256i *)(void *)(dst + 4 * (b0 + 8 * h)), lg_xsum128(qa8_qs(x, nb) + b0 * QK, h));
}

/* Stores acc + accm (sub: acc - accm, the K-quants' out) of RV groups x
 * T tokens: group r's rows at y[t * ldy + row[r]], the first nr[r] of
 * them. */
AI void lg_store(const __m256 (*acc)[4], const __m256 (*accm)[4], float *y, int64_t ldy, const int *row,
                 const int *nr, const int RV, const int T, const int sub) {
    UNROLL
    for (int r = 0; r < RV; r++) {
        const __m256i km = _mm256_cmpgt_epi32(_mm256_set1_epi32(nr[r]), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        UNROLL
        for (int t = 0; t < T; t++) {
            __m256 v = sub ? _mm256_sub_ps(acc[r][t], accm[r][t]) : _mm256_add_ps(acc[r][t], accm[r][t]);
            if (nr[r] == 8) _mm256_storeu_ps(y + t * ldy + row[r], v);
            else _mm256_maskstore_ps(y + t * ldy + row[r], km, v);
        }
    }
}

/* v, kept in a register as it is: without this GCC reassociates a tile's
 * int16 sums (exact, so it may) into a tree over all 8 chunks' products,
 * which it then spills (seen: 48 VPMADDUBSW results stored and reloaded
 * per block of a 2 x 3 tile: 130 G int8 ops/s instead of 206), and
 * reloads a weight chunk for each token. */
AI __m256i ymm_in_reg(__m256i v) {
    __asm__("" : "+x"(v));
    return v;
}

/* The 4 activation bytes at p, in every lane. */
AI __m256i lg_bcast4(const int8_t *p) { return _mm256_set1_epi32((int)quant_rd32((const uint8_t *)p)); }

/* Prefill tile: RV prepared groups (P[r]) x T tokens (x[t]; Q8_0: xa[t],
 * their blocks' sums times 128, group_x_prep). The driver's tiles are
 * 2 groups x 3 tokens (token tails 2, 1; an odd last group alone): 6
 * pairs of an acc and an int16 sum (Q5: and an int32 sum; Q8_0: an int32
 * sum) in registers, 2 weight chunks and 1 broadcast per 6 VPMADDUBSW.
 * Measured (1024 x 640, 512 tokens, G int8 ops/s): Q5_0 2 x 3 194, 2 x 2
 * 173; Q8_0 2 x 3 123, 2 x 2 116. */
AI void lg_tile(int ty, const uint8_t *const *P, const uint8_t *const *x, const uint8_t *const *xa, int64_t nb,
                float *y, int64_t ldy, const int *row, const int *nr, const int RV, const int T) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[2][4], accm[2][4];
    UNROLL
    for (int r = 0; r < RV; r++)
        UNROLL
        for (int t = 0; t < T; t++) acc[r][t] = accm[r][t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const int64_t xo = qa8_qoff(b, 0), sl = qa8_slot(b);
        __m256i is[2][4], p[2][4];
        UNROLL
        for (int t = 0; t < T; t++) {
            __m256i i0 = ty == L80 ? _mm256_set1_epi32((int)quant_rd32(xa[t] + 4 * sl)) : _mm256_setzero_si256();
            UNROLL
            for (int r = 0; r < RV; r++) is[r][t] = i0, p[r][t] = _mm256_setzero_si256();
        }
        UNROLL
        for (int c = 0; c < 8; c++) {
            __m256i wv[2], aw[2];
            UNROLL
            for (int r = 0; r < RV; r++) {
                wv[r] = ymm_in_reg(_mm256_load_si256((const __m256i *)(const void *)(P[r] + b * LG_BLK + 32 * c)));
                if (ty == L80) aw[r] = _mm256_sign_epi8(wv[r], wv[r]);
            }
            UNROLL
            for (int t = 0; t < T; t++) {
                __m256i xb = lg_bcast4(qa8_qs(x[t], nb) + xo + 64 * c);
                UNROLL
                for (int r = 0; r < RV; r++) {
                    if (ty == L80)
                        is[r][t] = ymm_in_reg(_mm256_add_epi32(is[r][t], _mm256_madd_epi16(
                            _mm256_maddubs_epi16(aw[r], _mm256_sign_epi8(xb, wv[r])), ones)));
                    else
                        p[r][t] = ymm_in_reg(_mm256_add_epi16(p[r][t], _mm256_maddubs_epi16(wv[r], xb)));
                }
            }
            if (ty != L80 && c % lg_flush(ty) == lg_flush(ty) - 1)
                UNROLL
                for (int r = 0; r < RV; r++)
                    UNROLL
                    for (int t = 0; t < T; t++) {
                        is[r][t] = _mm256_add_epi32(is[r][t], _mm256_madd_epi16(p[r][t], ones));
                        p[r][t] = _mm256_setzero_si256();
                    }
        }
        UNROLL
        for (int r = 0; r < RV; r++) {
            __m256 d = _mm256_load_ps((const float *)(const void *)(P[r] + b * LG_BLK + 256));
            UNROLL
            for (int t = 0; t < T; t++)
                acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[r][t]),
                                            _mm256_mul_ps(d, _mm256_set1_ps(qa8_d(x[t])[sl])), acc[r][t]);
        }
    }
    for (int64_t b = 0; b < nb; b++) { /* the min term's chains */
        const int64_t sl = qa8_slot(b);
        UNROLL
        for (int r = 0; r < RV; r++) {
            __m256 m = _mm256_load_ps((const float *)(const void *)(P[r] + b * LG_BLK + 288));
            UNROLL
            for (int t = 0; t < T; t++)
                accm[r][t] = _mm256_fmadd_ps(m, _mm256_set1_ps(qa8_s(x[t], nb)[sl]), accm[r][t]);
        }
    }
    lg_store((const __m256(*)[4])acc, (const __m256(*)[4])accm, y, ldy, row, nr, RV, T, 0);
}

/* Decode tile: 8 GGUF rows (rw) x T tokens. Per half group the exact
 * block sums of every (row, token) pair, lanes = blocks, go through an
 * 8 x 8 transpose (as do the rows' d and m) so that the float chains run
 * with lanes = rows, block after block as lg_tile runs them. */
AI void lg_dec(int ty, const uint8_t *const *rw, const uint8_t *const *x, int64_t nb, float *y, int64_t ldy,
               int row, int nr, const int T) {
    __m256 acc[1][4], accm[1][4];
    UNROLL
    for (int t = 0; t < T; t++) acc[0][t] = accm[0][t] = _mm256_setzero_ps();
    for (int64_t b0 = 0; b0 < nb; b0 += QA8_GROUP) {
        const int n = nb - b0 < QA8_GROUP ? (int)(nb - b0) : QA8_GROUP;
        __m256i s[4][2][8], dm[2][2][8];
        for (int h = 0; h < 2 && lg_half_used(h, n); h++) {
            __m256i x128[4];
            UNROLL
            for (int t = 0; t < T; t++) x128[t] = ty == L80 ? lg_xsum128(qa8_qs(x[t], nb) + b0 * QK, h)
                                                            : _mm256_setzero_si256();
            for (int i = 0; i < 8; i++) {
                lg_half g;
                lg_load(ty, rw[i] + b0 * lg_bytes(ty), h, n, &g);
                UNROLL
                for (int t = 0; t < T; t++)
                    s[t][h][i] = _mm256_add_epi32(lg_dot(ty, &g, qa8_qs(x[t], nb) + b0 * QK + 32 * h), x128[t]);
                dm[0][h][i] = _mm256_castps_si256(g.d);
                if (lg_has_min(ty)) dm[1][h][i] = _mm256_castps_si256(g.m);
            }
            UNROLL
            for (int t = 0; t < T; t++) lg_tr8(s[t][h]);
            lg_tr8(dm[0][h]);
            if (lg_has_min(ty)) lg_tr8(dm[1][h]); /* else m is made from d below: the same bits */
        }
        for (int j = 0; j < n; j++) { /* block b0 + j, in order */
            const int p = qa8_lane(j), h = p / 8, i = p % 8;
            const int64_t sl = b0 + p; /* qa8_slot(b0 + j) */
            __m256 d = _mm256_castsi256_ps(dm[0][h][i]);
            __m256 m = lg_has_min(ty) ? _mm256_castsi256_ps(dm[1][h][i]) : lg_m_of_d(ty, d);
            UNROLL
            for (int t = 0; t < T; t++) {
                acc[0][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[t][h][i]),
                                            _mm256_mul_ps(d, _mm256_set1_ps(qa8_d(x[t])[sl])), acc[0][t]);
                accm[0][t] = _mm256_fmadd_ps(m, _mm256_set1_ps(qa8_s(x[t], nb)[sl]), accm[0][t]);
            }
        }
    }
    lg_store((const __m256(*)[4])acc, (const __m256(*)[4])accm, y, ldy, &row, &nr, 1, T, 0);
}

/* ---- MXFP4 (Q8_0 activations) -------------------------------------------
 * Half groups load as the legacy ones (LMX: nibbles as Q4_0, d from the
 * E8M0 byte); a byte shuffle turns nibbles into kv values and the sign
 * trick (|w| x sign(x, w)) feeds VPMADDUBSW: 8 chunks sum in int16
 * (8 * 2 * 12 * 127 < 2^15), exactly. Float steps and the final sum are
 * the scalar kernel's (acc + cvt(isum) * (dw * dx), no FMA, per lane;
 * hsum8 of the two halves' sum is quant_mx_hsum16's tree), so every level
 * gives the same bits. Tiles: 1 row x {4, 2, 1} tokens on GGUF rows. */
AI void mx_tile(const uint8_t *const *w, const uint8_t *const *x, int64_t k, float *out, const int T) {
    const int64_t nb = k / QK;
    const __m256i tab = _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12,
                                         0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[2][4];
    UNROLL
    for (int t = 0; t < T; t++) acc[0][t] = acc[1][t] = _mm256_setzero_ps();
    for (int64_t b0 = 0; b0 < nb; b0 += QA8_GROUP) {
        int n = nb - b0 < QA8_GROUP ? (int)(nb - b0) : QA8_GROUP;
        for (int h = 0; h < 2; h++) {
            lg_half g;
            lg_load(LMX, w[0] + b0 * QB_MXFP4, h, n, &g);
            __m256i p[4];
            UNROLL
            for (int t = 0; t < T; t++) p[t] = _mm256_setzero_si256();
            UNROLL
            for (int v = 0; v < 8; v++) {
                __m256i wv = _mm256_shuffle_epi8(tab, lg_chunk(LMX, &g, v)), aw = _mm256_sign_epi8(wv, wv);
                UNROLL
                for (int t = 0; t < T; t++) {
                    __m256i xv = _mm256_loadu_si256((const void *)(qa8_qs(x[t], nb) + b0 * QK + 32 * h + 64 * v));
                    p[t] = _mm256_add_epi16(p[t], _mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv, wv)));
                }
            }
            UNROLL
            for (int t = 0; t < T; t++) {
                __m256 dd = _mm256_mul_ps(g.d, _mm256_loadu_ps(qa8_d(x[t]) + b0 + 8 * h));
                __m256 isum = _mm256_cvtepi32_ps(_mm256_madd_epi16(p[t], ones));
                acc[h][t] = _mm256_add_ps(acc[h][t], _mm256_mul_ps(isum, dd));
            }
        }
    }
    UNROLL
    for (int t = 0; t < T; t++) out[t] = hsum8(_mm256_add_ps(acc[0][t], acc[1][t]));
}

TILE_T(mx_tile, 1) TILE_T(mx_tile, 2) TILE_T(mx_tile, 4)
static const tile_set mx_mxfp4_set = {.s = {{1, 4, mx_tile_4}, {1, 2, mx_tile_2}, {1, 1, mx_tile_1}}};

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

/* The K-quants' float steps are every level's (quant_avx512.c, "the
 * K-quants' level-independent float steps"): per pair and super-block
 * the exact integers isum and im, summed from their 8 partial lanes by
 * one transposed tree for all the tile's n pairs (kq_sums, n = 4 or 8:
 * lane i is pair i = r * T + t), then acc + (float)isum * (d_w * d_x),
 * product and sum rounded apart, the same for accm with dmin, and
 * out = acc - accm. */
AI __m256i kq_sums(const __m256i *v, const int n) {
    __m256i s[4], u[2];
    UNROLL
    for (int i = 0; i < n / 2; i++) /* 128-bit half h: pair 2i + h's 4 partial sums */
        s[i] = _mm256_add_epi32(_mm256_permute2x128_si256(v[2 * i], v[2 * i + 1], 0x20),
                                _mm256_permute2x128_si256(v[2 * i], v[2 * i + 1], 0x31));
    UNROLL
    for (int i = 0; i < n / 4; i++) u[i] = _mm256_hadd_epi32(s[2 * i], s[2 * i + 1]);
    __m256i z = _mm256_hadd_epi32(u[0], n == 8 ? u[1] : u[0]); /* dword 4h + j: pair 2j + h */
    return _mm256_permutevar8x32_epi32(z, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

AI __m256 kq_fstep(__m256 acc, __m256i isum, __m256 dw, __m256 dx) {
    return _mm256_add_ps(acc, _mm256_mul_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, dx)));
}

/* Lane i = r * T + t of a tile's pairs: v[r] (per_row) or v[t]. */
AI __m256 kq_per_pair(const float *v, int per_row, const int RR, const int T) {
#define KQ_J(i) ((i) < RR * T ? v[per_row ? (i) / T : (i) % T] : 0.0f)
    return _mm256_setr_ps(KQ_J(0), KQ_J(1), KQ_J(2), KQ_J(3), KQ_J(4), KQ_J(5), KQ_J(6), KQ_J(7));
#undef KQ_J
}

AI void kq_tile(int ty, const uint8_t *const *w, const uint8_t *const *x,
                int64_t k, float *out, const int RR, const int T) {
    const int64_t nb = k / QK_K, n = RR * T;
    const int by = ty == K4 ? QB_Q4_K : ty == K5 ? QB_Q5_K : QB_Q6_K;
    __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i sc[4], ia[8], im[8];
        float dw[4], dm[4], dx[8];
        UNROLL
        for (int r = 0; r < RR; r++) {
            sc[r] = kq_scales(ty, w[r] + b * by);
            dw[r] = _cvtsh_ss(quant_rd16(w[r] + b * by + (ty == K6 ? 208 : 0)));
            dm[r] = ty == K6 ? 0.0f : _cvtsh_ss(quant_rd16(w[r] + b * by + 2));
        }
        UNROLL
        for (int t = 0; t < T; t++) {
            __m256i bs = _mm256_loadu_si256((const void *)(qak_bsums(x[t], nb) + 16 * b));
            dx[t] = qak_d(x[t])[b];
            UNROLL
            for (int r = 0; r < RR; r++) {
                if (ty == K6) { /* the -32 offset: sum_g -32 sc_g bsum_g */
                    ia[r * T + t] = _mm256_madd_epi16(bs, _mm256_mullo_epi16(sc[r], _mm256_set1_epi16(-32)));
                } else { /* mins: sum_g m[g/2] bsum_g */
                    __m128i mn = _mm256_extracti128_si256(sc[r], 1);
                    __m256i mp = _mm256_set_m128i(_mm_unpackhi_epi16(mn, mn), _mm_unpacklo_epi16(mn, mn));
                    im[r * T + t] = _mm256_madd_epi16(bs, mp);
                    ia[r * T + t] = _mm256_setzero_si256();
                }
            }
        }
        for (int c = 0; c < 8; c++) {
            __m256i wv[4], sp[4];
            UNROLL
            for (int r = 0; r < RR; r++) {
                wv[r] = kq_decode(ty, w[r] + b * by, c);
                sp[r] = kq_pattern(ty, sc[r], c);
            }
            UNROLL
            for (int t = 0; t < T; t++) {
                __m256i xv = _mm256_loadu_si256((const void *)(qak_qs(x[t], nb) + b * QK_K + 32 * c));
                UNROLL
                for (int r = 0; r < RR; r++)
                    ia[r * T + t] = _mm256_add_epi32(ia[r * T + t], _mm256_madd_epi16(_mm256_maddubs_epi16(wv[r], xv), sp[r]));
            }
        }
        __m256 dxv = kq_per_pair(dx, 0, RR, T);
        acc = kq_fstep(acc, kq_sums(ia, n), kq_per_pair(dw, 1, RR, T), dxv);
        if (ty != K6) accm = kq_fstep(accm, kq_sums(im, n), kq_per_pair(dm, 1, RR, T), dxv);
    }
    float o[8];
    _mm256_storeu_ps(o, ty == K6 ? acc : _mm256_sub_ps(acc, accm));
    for (int i = 0; i < n; i++) out[i] = o[i];
}

/* Tiles on GGUF rows, below KG_PREP_MIN tokens (decode; prefill: the
 * groups of 8 rows below): 1 row x 4 tokens, tails 2 x 2, and 4 rows x 1
 * token (one activation load for 4 rows). Any shape gives a pair the same
 * operations. */
#define KQ_KERNEL(name, ty)                                                   \
    TILE_T2(name, ty, 1, 4) TILE_T2(name, ty, 2, 2) TILE_T2(name, ty, 4, 1)   \
    static const tile_set name##_set = {                                      \
        .s = {{1, 4, name##_1x4}, {2, 2, name##_2x2}, {4, 1, name##_4x1}}};
#define TILE_T2(name, ty, RR, T)                                              \
    static void name##_##RR##x##T(const uint8_t *const *w, const uint8_t *const *x, \
                                  int64_t k, float *o) { kq_tile(ty, w, x, k, o, RR, T); }
KQ_KERNEL(kq_q4_k, K4)
KQ_KERNEL(kq_q5_k, K5)
KQ_KERNEL(kq_q6_k, K6)

/* ---- K-quants, prefill: 8 rows in the lanes -------------------------------
 * From KG_PREP_MIN tokens on, a call prepares its rows in groups of 8
 * (kq8_prep), as the legacy formats' prefill does, per super-block
 * KQ8_SB bytes (32-byte aligned: the work buffer is 64-byte aligned and
 * KQ8_SB a multiple of 32):
 *   0        64 chunk vectors: chunk c, lane r: row r's unsigned quants
 *            of elements 4c..4c+3 (quant_impl.h's KQ16 with 8 lanes);
 *   KQ8_SC   per scale an int16 pair (sc, sc) in lane r (Q4_K/Q5_K: the
 *            8 sub-blocks' sc_s; Q6_K: the 16 groups' sc_g);
 *   KQ8_MP   int16 pairs: Q6_K 8 vectors, the offset (-32 sc_2j, -32
 *            sc_2j+1) for the activations' bsums dword j (groups 2j,
 *            2j + 1); Q4_K/Q5_K 4 vectors, the mins (m_2j, m_2j+1) for
 *            dword j of the token's sub-block sums (kg_x_prep);
 *   KQ8_DW, KQ8_DM  the rows' d and dmin as floats (Q6_K: dmin 0).
 * A tile of 2 groups x 3 tokens broadcasts a token's 4 activation bytes of
 * a chunk into a VPMADDUBSW per group and sums the int16 results over
 * kg_flush chunks, then one VPMADDWD against the scale pairs turns the
 * int16 lanes (lo, hi) of row r into sc (lo + hi) in int32, exactly: the
 * scale comes free with the widening. isum's other part (Q6_K's offset)
 * is 8 VPMADDWD of the rows' pairs against the token's bsums dwords, im
 * (Q4_K/Q5_K) 4 against its sub-block sums (made once per call and token:
 * the bsums of 16 elements summed in pairs).
 * Bounds (|x| <= 127 in Q8_K, quant_act_impl.h): a VPMADDUBSW lane is two
 * products, Q4_K 2 * 15 * 127 = 3,810, Q5_K 2 * 31 * 127 = 7,874, Q6_K
 * 2 * 63 * 127 = 16,002 (no saturation); kg_flush lanes of a sum: 8 x
 * 3,810 = 30,480, 4 x 7,874 = 31,496, 2 x 16,002 = 32,004, each < 32,767
 * (one more chunk would overflow); a VPMADDWD of a sum with |sc| <= 128
 * is < 2 * 128 * 32,767 < 2^23; Q6_K's offset pairs (|-32 sc| <= 4,096)
 * against |bsum_g| <= 16 * 127 give < 2^24, the min pairs (m <= 63)
 * against the sub-block sums (|bsum_s| <= 32 * 127 = 4,064: int16)
 * < 2^19; the int32 totals are those of "K-quants: one integer per
 * super-block" (README), < 2^28. So isum and im are every level's
 * integers and the float steps are kq_fstep's: the same bits as kq_tile
 * and scalar. */
#define KG_PREP_MIN 8
enum { KQ8_SC = 64 * 32, KQ8_MP = KQ8_SC + 16 * 32, KQ8_DW = KQ8_MP + 8 * 32, KQ8_DM = KQ8_DW + 32,
       KQ8_SB = KQ8_DM + 32 };

AI int kg_flush(int ty) { return ty == K4 ? 8 : ty == K5 ? 4 : 2; } /* chunks an int16 sum takes */
AI int kg_per_scale(int ty) { return ty == K6 ? 4 : 8; }               /* chunks of one scale */

/* Each dword's low int16 v as the pair (v, v). */
AI __m256i kq_pairs(__m256i v) {
    return _mm256_or_si256(_mm256_and_si256(v, _mm256_set1_epi32(0xffff)), _mm256_slli_epi32(v, 16));
}

/* The 8 GGUF rows rw[] prepared into nb * KQ8_SB bytes at dst: per
 * super-block each row's 32-element pieces (kq_decode) and its scales
 * (kq_scales), each through one 8 x 8 dword transpose to lanes = rows. */
AI void kq8_prep(int ty, const uint8_t *const *rw, int64_t nb, uint8_t *dst) {
    const int by = ty == K4 ? QB_Q4_K : ty == K5 ? QB_Q5_K : QB_Q6_K;
    for (int64_t b = 0; b < nb; b++, dst += KQ8_SB) {
        const uint8_t *blk[8];
        for (int i = 0; i < 8; i++) blk[i] = rw[i] + b * by;
        for (int v = 0; v < 8; v++) { /* elements 32v .. 32v + 31: chunks 8v .. 8v + 7 */
            __m256i t[8];
            UNROLL
            for (int i = 0; i < 8; i++) t[i] = kq_decode(ty, blk[i], v);
            lg_tr8(t);
            UNROLL
            for (int p = 0; p < 8; p++) _mm256_store_si256((__m256i *)(void *)(dst + 32 * (8 * v + p)), t[p]);
        }
        /* s[h][i]: row i's scales 8h .. 8h + 7 as pairs (Q4_K/Q5_K: s[0], the
         * sc_s; Q6_K: both, the 16 sc_g); o[i] dword j: Q6_K's offset pairs
         * (-32 sc_2j, -32 sc_2j+1); Q4_K/Q5_K (j >= 4) the mins (m_2j-8,
         * m_2j-7), kq_scales' high half. */
        __m256i s[2][8], o[8];
        uint16_t dv[8], mv[8] = {0}; /* the rows' d and dmin as halves */
        UNROLL
        for (int i = 0; i < 8; i++) {
            const __m256i sc = kq_scales(ty, blk[i]);
            s[0][i] = kq_pairs(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(sc)));
            s[1][i] = kq_pairs(_mm256_cvtepi16_epi32(_mm256_extracti128_si256(sc, 1)));
            o[i] = ty == K6 ? _mm256_mullo_epi16(sc, _mm256_set1_epi16(-32)) : sc;
            dv[i] = quant_rd16(blk[i] + (ty == K6 ? 208 : 0));
            if (ty != K6) mv[i] = quant_rd16(blk[i] + 2);
        }
        const __m128i dh = _mm_loadu_si128((const __m128i *)(const void *)dv);
        const __m128i mh = _mm_loadu_si128((const __m128i *)(const void *)mv);
        lg_tr8(s[0]);
        lg_tr8(s[1]);
        lg_tr8(o);
        for (int j = 0; j < 8; j++) {
            _mm256_store_si256((__m256i *)(void *)(dst + KQ8_SC + 32 * j), s[0][j]);
            if (ty == K6) _mm256_store_si256((__m256i *)(void *)(dst + KQ8_SC + 32 * (8 + j)), s[1][j]);
            if (ty == K6 || j < 4)
                _mm256_store_si256((__m256i *)(void *)(dst + KQ8_MP + 32 * j), o[ty == K6 ? j : 4 + j]);
        }
        _mm256_store_ps((float *)(void *)(dst + KQ8_DW), _mm256_cvtph_ps(dh));
        _mm256_store_ps((float *)(void *)(dst + KQ8_DM), _mm256_cvtph_ps(mh)); /* Q6_K: 0 */
    }
}

/* sum_j pairs j . (dword j at bs), j < n, as int32 per lane. */
AI __m256i kg_bsum_dot(const uint8_t *pairs, const int16_t *bs, const int n) {
    __m256i s = _mm256_setzero_si256();
    UNROLL
    for (int j = 0; j < n; j++)
        s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_load_si256((const __m256i *)(const void *)(pairs + 32 * j)),
                                                  lg_bcast4((const int8_t *)(bs + 2 * j))));
    return s;
}

/* Q4_K/Q5_K: the token's 8 sub-block sums per super-block, int16 (what
 * its prefill tiles take per token besides its row). */
AI size_t kg_x_bytes(int ty, int64_t nb) { return ty == K6 ? 0 : (size_t)nb * 16; }
AI void kg_x_prep(int ty, const uint8_t *x, int64_t nb, uint8_t *dst) {
    const int16_t *bs = qak_bsums(x, nb);
    int16_t *o = (int16_t *)(void *)dst;
    for (int64_t i = 0; ty != K6 && i < 8 * nb; i++) o[i] = (int16_t)(bs[2 * i] + bs[2 * i + 1]);
}

/* Prefill tile: RV prepared groups (P[r]) x T tokens (x[t]; xa[t] their
 * sub-block sums). Registers in the chunk loop: 6 int16 sums, 6 int32
 * sums, 2 weight chunks and a broadcast (15 of 16 ymm); acc and accm
 * change once per super-block and may live in memory. */
AI void kg_tile(int ty, const uint8_t *const *P, const uint8_t *const *x, const uint8_t *const *xa, int64_t nb,
                float *y, int64_t ldy, const int *row, const int *nr, const int RV, const int T) {
    const int F = kg_flush(ty), CS = kg_per_scale(ty);
    __m256 acc[2][4], accm[2][4];
    UNROLL
    for (int r = 0; r < RV; r++)
        UNROLL
        for (int t = 0; t < T; t++) acc[r][t] = accm[r][t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *pb[2];
        const int8_t *xq[3];
        const int16_t *bs[3];
        UNROLL
        for (int r = 0; r < RV; r++) pb[r] = P[r] + b * KQ8_SB;
        UNROLL
        for (int t = 0; t < T; t++) xq[t] = qak_qs(x[t], nb) + b * QK_K, bs[t] = qak_bsums(x[t], nb) + 16 * b;
        __m256i is[2][3];
        UNROLL
        for (int r = 0; r < RV; r++)
            UNROLL
            for (int t = 0; t < T; t++) /* Q6_K: the -32 offset, sum_g -32 sc_g bsum_g */
                is[r][t] = ty == K6 ? kg_bsum_dot(pb[r] + KQ8_MP, bs[t], 8) : _mm256_setzero_si256();
        for (int f = 0; f < 64 / F; f++) {
            __m256i p[2][3];
            UNROLL
            for (int cc = 0; cc < F; cc++) {
                const int c = f * F + cc;
                __m256i wv[2];
                UNROLL
                for (int r = 0; r < RV; r++)
                    wv[r] = ymm_in_reg(_mm256_load_si256((const __m256i *)(const void *)(pb[r] + 32 * c)));
                UNROLL
                for (int t = 0; t < T; t++) {
                    __m256i xb = lg_bcast4(xq[t] + 4 * c);
                    UNROLL
                    for (int r = 0; r < RV; r++) {
                        __m256i m = _mm256_maddubs_epi16(wv[r], xb);
                        p[r][t] = ymm_in_reg(cc == 0 ? m : _mm256_add_epi16(p[r][t], m));
                    }
                }
            }
            UNROLL
            for (int r = 0; r < RV; r++) {
                const uint8_t *spp = pb[r] + KQ8_SC + 32 * (f * F / CS);
                const __m256i sp = _mm256_load_si256((const __m256i *)(const void *)spp);
                UNROLL
                for (int t = 0; t < T; t++) is[r][t] = _mm256_add_epi32(is[r][t], _mm256_madd_epi16(p[r][t], sp));
            }
        }
        UNROLL
        for (int r = 0; r < RV; r++) {
            const __m256 dw = _mm256_load_ps((const float *)(const void *)(pb[r] + KQ8_DW));
            const __m256 dm = _mm256_load_ps((const float *)(const void *)(pb[r] + KQ8_DM));
            UNROLL
            for (int t = 0; t < T; t++) {
                const __m256 dx = _mm256_set1_ps(qak_d(x[t])[b]);
                acc[r][t] = kq_fstep(acc[r][t], is[r][t], dw, dx);
                if (ty == K6) continue;
                const __m256i im = kg_bsum_dot(pb[r] + KQ8_MP, (const int16_t *)(const void *)xa[t] + 8 * b, 4);
                accm[r][t] = kq_fstep(accm[r][t], im, dm, dx);
            }
        }
    }
    /* Q6_K: accm stays +0 and acc - +0 is acc, bit for bit (-0 too) */
    lg_store((const __m256(*)[4])acc, (const __m256(*)[4])accm, y, ldy, row, nr, RV, T, 1);
}

/* quant_group_drive.h's hooks: the legacy formats' and the K-quants'
 * prefill tiles, both 2 groups x 3 tokens at most. */
#define LG_T 3
/* One token tile of T over a chunk's ng prepared groups
 * (quant_group_drive.h). */
AI void group_tokens(int ty, const uint8_t *pw, size_t gb, int ng, const uint8_t *const *xp,
                     const uint8_t *const *xa, int64_t nb, float *yt, int64_t ldy, const int *grow, const int *gnr,
                     const int T) {
    int i = 0;
    for (; i + 2 <= ng; i += 2) {
        const uint8_t *P[2] = {pw + (size_t)i * gb, pw + (size_t)(i + 1) * gb};
        if (ty >= K4) kg_tile(ty, P, xp, xa, nb, yt, ldy, grow + i, gnr + i, 2, T);
        else lg_tile(ty, P, xp, xa, nb, yt, ldy, grow + i, gnr + i, 2, T);
    }
    if (i < ng) {
        const uint8_t *P[1] = {pw + (size_t)i * gb};
        if (ty >= K4) kg_tile(ty, P, xp, xa, nb, yt, ldy, grow + i, gnr + i, 1, T);
        else lg_tile(ty, P, xp, xa, nb, yt, ldy, grow + i, gnr + i, 1, T);
    }
}

AI size_t group_x_bytes(int ty, int64_t nb) { return ty >= K4 ? kg_x_bytes(ty, nb) : lg_x_bytes(ty, nb); }
AI void group_x_prep(int ty, const uint8_t *x, int64_t nb, uint8_t *dst) {
    if (ty >= K4) kg_x_prep(ty, x, nb, dst);
    else lg_x_prep(ty, x, nb, dst);
}
AI size_t group_blk_bytes(int ty) { return ty >= K4 ? KQ8_SB : LG_BLK; }
AI void group_prep(int ty, const uint8_t *const *rw, int64_t nb, uint8_t *dst) {
    if (ty >= K4) kq8_prep(ty, rw, nb, dst);
    else lg_prep_group(ty, rw, nb, dst);
}

#include "backend/quant_group_drive.h"


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
