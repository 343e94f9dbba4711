/* quant_avx512.c - AVX-512 (F, BW, VL, VNNI) gemm kernels.
 *
 * Every kernel is a register tile of R weight rows x T tokens: weight
 * blocks are decoded once per tile and reused for T tokens, activation
 * blocks are loaded once and reused for R rows. In prefill (n_tok >=
 * LG_PREP_MIN, KG_PREP_MIN) the legacy formats and the K-quants prepare
 * the call's rows in groups of 16 instead, 16 rows in a vector's lanes
 * ("legacy formats: one float chain per pair", "K-quants, prefill"
 * below; the drivers are quant_group_drive.h's).
 *
 * Batch invariance: every (row, token) pair owns its accumulators and
 * sees the same instruction sequence in every tile shape (block order,
 * lane layout and final horizontal sum are fixed by k alone). Row tails
 * rerun the R-row tile with the last row repeated; token tails use the
 * T = 2 and T = 1 tiles, which do per pair exactly what T = 4 does.
 *
 * Legacy formats (Q4_0..Q8_0, blocks of 32): weights are decoded to
 * unsigned bytes (Q8_0: w + 128), multiplied with the signed activation
 * bytes by VPDPBUSD, and the offset is a per-block "minimum" m (Q4_0: -8d,
 * Q5_0: -16d, Q8_0: -128d, Q4_1/Q5_1: the stored min) times the
 * activation block sum s; the float steps are quant_scalar.c's, one chain
 * per (row, token) pair, with 16 weight rows in a vector's lanes.
 * K-quants: sub-block scales are applied in integers (decode tiles:
 * VPMADDUBSW then VPDPWSSD, partial sums summed exactly, all the tile's
 * pairs at once; prefill: VPMULLD on rows in lanes), and the float steps
 * are every level's (the same bits at scalar, avx2, avx512, amx: see "the
 * K-quants' level-independent float steps" below).
 * Does not: threads; F16/BF16 use plain float FMAs. */
#include <immintrin.h>

#include <string.h>

#include "backend/simd_tr.h"
#include "backend/quant_tile.h"

#define R 4 /* weight rows per tile of the K-quant and float kernels */

/* v, loaded into a register once: without this GCC folds a load shared
 * by several VPDPBUSD (VPMADDUBSW) into each of them as a memory operand,
 * which undoes a tile's sharing (seen in a 2 x 6 legacy tile: 12
 * activation loads per chunk instead of 6). */
AI __m512i zmm_in_reg(__m512i v) {
    __asm__("" : "+v"(v));
    return v;
}

/* ---- legacy 32-element blocks ------------------------------------------- */

/* A group of 16 weight blocks in the activation layout (quant_impl.h):
 * lane p is block qa8_lane(p). Nibble formats keep 4 packed vectors (dword
 * c of each block: low nibbles are chunk c, high nibbles chunk c + 4);
 * Q8_0 keeps its 8 chunks as unsigned bytes (w + 128). */
typedef struct {
    __m512i q[8], qh; /* qh: Q5_0/Q5_1 fifth bits, one dword per lane */
    __m512 d, m;      /* scale and minimum (Q4_0: -8d, Q5_0: -16d, Q8_0: -128d) */
} lg_group;

/* 4x4 dword transpose inside each 128-bit lane: out[c] dword 4L + i is
 * in[i] dword 4L + c. With in[i] holding blocks 4i..4i+3 in its 128-bit
 * lanes this puts block qa8_lane(p) in lane p. */
AI void lg_transpose4(const __m512i *in, __m512i *out) {
    __m512i t0 = _mm512_unpacklo_epi32(in[0], in[1]), t1 = _mm512_unpackhi_epi32(in[0], in[1]);
    __m512i t2 = _mm512_unpacklo_epi32(in[2], in[3]), t3 = _mm512_unpackhi_epi32(in[2], in[3]);
    out[0] = _mm512_unpacklo_epi64(t0, t2);
    out[1] = _mm512_unpackhi_epi64(t0, t2);
    out[2] = _mm512_unpacklo_epi64(t1, t3);
    out[3] = _mm512_unpackhi_epi64(t1, t3);
}

/* The dword at offset off of each lane's block (0 past the n real blocks),
 * inserted lane by lane: VPGATHERDD is slow with the GDS mitigation. */
AI __m512i lg_lanes32(const uint8_t *g, int by, int off, int n) {
    __m128i q[4];
    for (int i = 0; i < 4; i++) q[i] = _mm_setzero_si128();
#define LANE(p)                                                               \
    if (qa8_lane(p) < n)                                                      \
        q[(p) / 4] = _mm_insert_epi32(q[(p) / 4], (int)quant_rd32(g + qa8_lane(p) * by + off), (p) % 4);
    LANE(0) LANE(1) LANE(2) LANE(3) LANE(4) LANE(5) LANE(6) LANE(7)
    LANE(8) LANE(9) LANE(10) LANE(11) LANE(12) LANE(13) LANE(14) LANE(15)
#undef LANE
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(q[1], q[0])),
                              _mm256_set_m128i(q[3], q[2]), 1);
}

/* d (low half) and m (high half) of each lane's header dword as floats. */
/* 2^(e-128) of the E8M0 byte e in each dword (quant_e8m0_half). */
AI __m512 mx_e8m0(__m512i e) {
    __mmask16 big = _mm512_cmpgt_epi32_mask(e, _mm512_set1_epi32(1));
    __m512i den = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
    __m512i nrm = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    return _mm512_castsi512_ps(_mm512_mask_mov_epi32(den, big, nrm));
}

AI void lg_scales(int ty, __m512i h, lg_group *o) {
    if (ty == LMX) { /* the header is one E8M0 byte; no minimum */
        o->d = mx_e8m0(_mm512_and_si512(h, _mm512_set1_epi32(0xff)));
        o->m = _mm512_setzero_ps();
        return;
    }
    const __m512i idx = _mm512_set_epi16(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1,
                                         30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    __m512i p = _mm512_permutexvar_epi16(idx, h);
    o->d = _mm512_cvtph_ps(_mm512_castsi512_si256(p));
    if (ty == L41 || ty == L51)
        o->m = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(p, 1));
    else
        o->m = _mm512_mul_ps(o->d, _mm512_set1_ps(ty == L40 ? -8.0f : ty == L50 ? -16.0f : -128.0f));
}

/* Q4_1 (20-byte blocks, every field dword aligned): blocks 4i..4i+3 are
 * dwords 20i..20i+19 of the group, so one two-source dword permute makes
 * each packed vector and one masked permute drops the four headers into
 * lanes 4L + i. Loads are masked at the n real blocks. */
AI void lg_load_q4_1(const uint8_t *g, int n, lg_group *o) {
    const __m512i iq = _mm512_set_epi32(19, 18, 17, 16, 14, 13, 12, 11, 9, 8, 7, 6, 4, 3, 2, 1);
    const __m512i ih = _mm512_set_epi32(15, 15, 15, 15, 10, 10, 10, 10, 5, 5, 5, 5, 0, 0, 0, 0);
    __m512i z[4], h = _mm512_setzero_si512();
    UNROLL
    for (int i = 0; i < 4; i++) {
        int lo = 5 * n - 20 * i, hi = lo - 16;
        __mmask16 kw = (__mmask16)(lo >= 16 ? 0xffff : lo <= 0 ? 0 : (1u << lo) - 1);
        __mmask16 kx = (__mmask16)(hi >= 4 ? 0xf : hi <= 0 ? 0 : (1u << hi) - 1);
        __m512i a = _mm512_maskz_loadu_epi32(kw, g + 80 * i);
        __m512i b = _mm512_maskz_loadu_epi32(kx, g + 80 * i + 64);
        z[i] = _mm512_permutex2var_epi32(a, iq, b);
        h = _mm512_mask_permutexvar_epi32(h, (__mmask16)(0x1111 << i), ih, a);
    }
    lg_transpose4(z, o->q);
    lg_scales(L41, h, o);
}

/* Q4_0, Q5_0, Q5_1: 16-byte quant loads into 128-bit lanes. */
AI void lg_load_nibbles(int ty, const uint8_t *g, int n, lg_group *o) {
    const int by = lg_bytes(ty), qo = lg_qs_off(ty);
    __m512i z[4];
    UNROLL
    for (int i = 0; i < 4; i++) {
        __m128i v[4];
        UNROLL
        for (int l = 0; l < 4; l++)
            v[l] = 4 * i + l < n ? _mm_loadu_si128((const void *)(g + (4 * i + l) * by + qo))
                                 : _mm_setzero_si128();
        z[i] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(v[1], v[0])),
                                  _mm256_set_m128i(v[3], v[2]), 1);
    }
    lg_transpose4(z, o->q);
    if (ty == L50 || ty == L51) o->qh = lg_lanes32(g, by, lg_qh_off(ty), n);
    lg_scales(ty, lg_lanes32(g, by, 0, n), o);
}

/* Q8_0: y[i] holds the blocks of lanes i and 8 + i (32 bytes each); an 8x8
 * dword transpose inside each 256-bit half gives chunk v in q[v]. */
AI void lg_load_q8_0(const uint8_t *g, int n, lg_group *o) {
    __m512i y[8], u[4], u2[4];
    UNROLL
    for (int i = 0; i < 8; i++) {
        int ja = qa8_lane(i), jb = qa8_lane(8 + i);
        __m256i a = ja < n ? _mm256_loadu_si256((const void *)(g + ja * QB_Q8_0 + 2)) : _mm256_setzero_si256();
        __m256i b = jb < n ? _mm256_loadu_si256((const void *)(g + jb * QB_Q8_0 + 2)) : _mm256_setzero_si256();
        y[i] = _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
    }
    lg_transpose4(y, u);
    lg_transpose4(y + 4, u2);
    const __m512i lo = _mm512_set_epi64(13, 12, 5, 4, 9, 8, 1, 0);
    const __m512i hi = _mm512_set_epi64(15, 14, 7, 6, 11, 10, 3, 2);
    UNROLL
    for (int v = 0; v < 8; v++)
        o->q[v] = _mm512_xor_si512(_mm512_permutex2var_epi64(u[v % 4], v < 4 ? lo : hi, u2[v % 4]),
                                   _mm512_set1_epi8((char)0x80));
    lg_scales(L80, lg_lanes32(g, QB_Q8_0, 0, n), o);
}

/* The last, short group of a row (n <= 4 blocks, as k = 576 or 640
 * leaves): block j goes to lane 4j (qa8_lane), so each packed vector is
 * one zero-masked permute of the first blocks instead of the full
 * 16-block transpose. Same lanes and values as lg_load gives. */
AI void lg_load_tail(int ty, const uint8_t *g, int n, lg_group *o) {
    const __mmask16 k4 = 0x1111;
    if (ty == L41) { /* block j at dwords 5j..5j+4: header, then 4 quant dwords */
        __m512i a = _mm512_maskz_loadu_epi32((__mmask16)((1u << (5 * n < 16 ? 5 * n : 16)) - 1), g);
        __m512i b = _mm512_maskz_loadu_epi32((__mmask16)(n == 4 ? 0xf : 0), g + 64);
        UNROLL
        for (int c = 0; c < 4; c++)
            o->q[c] = _mm512_maskz_permutex2var_epi32(k4, a, _mm512_set_epi32(0, 0, 0, 16 + c, 0, 0, 0, 11 + c,
                                                                             0, 0, 0, 6 + c, 0, 0, 0, 1 + c), b);
        lg_scales(L41, _mm512_maskz_permutexvar_epi32(k4, _mm512_set_epi32(0, 0, 0, 15, 0, 0, 0, 10, 0, 0, 0,
                                                                            5, 0, 0, 0, 0), a), o);
    } else if (ty == L80) { /* a: blocks 0, 1; b: blocks 2, 3 (32 bytes each) */
        const int by = QB_Q8_0;
        __m256i q[4];
        UNROLL
        for (int j = 0; j < 4; j++)
            q[j] = j < n ? _mm256_loadu_si256((const void *)(g + j * by + 2)) : _mm256_setzero_si256();
        __m512i a = _mm512_inserti64x4(_mm512_castsi256_si512(q[0]), q[1], 1);
        __m512i b = _mm512_inserti64x4(_mm512_castsi256_si512(q[2]), q[3], 1);
        UNROLL
        for (int v = 0; v < 8; v++)
            o->q[v] = _mm512_xor_si512(
                _mm512_maskz_permutex2var_epi32(k4, a, _mm512_set_epi32(0, 0, 0, 24 + v, 0, 0, 0, 16 + v,
                                                                        0, 0, 0, 8 + v, 0, 0, 0, v), b),
                _mm512_set1_epi8((char)0x80));
        lg_scales(L80, lg_lanes32(g, by, 0, n), o);
    } else { /* nibble formats: block j's 16 quant bytes in 128-bit lane j */
        const int by = lg_bytes(ty), qo = lg_qs_off(ty);
        __m128i v[4];
        UNROLL
        for (int j = 0; j < 4; j++)
            v[j] = j < n ? _mm_loadu_si128((const void *)(g + j * by + qo)) : _mm_setzero_si128();
        __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(v[1], v[0])),
                                       _mm256_set_m128i(v[3], v[2]), 1);
        UNROLL
        for (int c = 0; c < 4; c++)
            o->q[c] = _mm512_maskz_permutexvar_epi32(k4, _mm512_set_epi32(0, 0, 0, 12 + c, 0, 0, 0, 8 + c,
                                                                          0, 0, 0, 4 + c, 0, 0, 0, c), z);
        if (ty == L50 || ty == L51) o->qh = lg_lanes32(g, by, lg_qh_off(ty), n);
        lg_scales(ty, lg_lanes32(g, by, 0, n), o);
    }
}

AI void lg_load(int ty, const uint8_t *g, int n, lg_group *o) {
    if (n <= 4) lg_load_tail(ty, g, n, o);
    else if (ty == L41) lg_load_q4_1(g, n, o);
    else if (ty == L80) lg_load_q8_0(g, n, o);
    else lg_load_nibbles(ty, g, n, o);
}

/* Chunk v (elements 4v..4v+3 of each lane's block) as unsigned bytes. */
AI __m512i lg_chunk(int ty, const lg_group *g, int v) {
    if (ty == L80) return g->q[v];
    const __m512i m4 = _mm512_set1_epi8(15);
    __m512i c = v < 4 ? _mm512_and_si512(g->q[v], m4)
                      : _mm512_and_si512(_mm512_srli_epi16(g->q[v - 4], 4), m4);
    if (ty == L50 || ty == L51) { /* bit 4v + i of qh -> 16 in byte i */
        const __m512i base = _mm512_broadcast_i32x4(
            _mm_setr_epi32(0, 0x04040404, 0x08080808, 0x0c0c0c0c));
        __m512i b = _mm512_shuffle_epi8(g->qh, _mm512_add_epi8(base, _mm512_set1_epi8((char)(v / 2))));
        __mmask64 on = _mm512_test_epi8_mask(b, _mm512_set1_epi32(v & 1 ? (int)0x80402010 : 0x08040201));
        c = _mm512_mask_add_epi8(c, on, c, _mm512_set1_epi8(16));
    }
    return c;
}

/* Sum of the 16 lanes in a fixed order: halves, quarters, then
 * (0 + 2) + (1 + 3), as GCC's _mm512_reduce_add_ps does it, written out
 * so it does not depend on the compiler (MXFP4's final sum,
 * quant_mx_hsum16). */
AI float lg_hsum(__m512 a) {
    __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1));
    __m256 h = _mm256_add_ps(hi, _mm512_castps512_ps256(a));
    __m128 q = _mm_add_ps(_mm256_extractf128_ps(h, 1), _mm256_castps256_ps128(h));
    q = _mm_add_ps(q, _mm_shuffle_ps(q, q, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtss_f32(q) + _mm_cvtss_f32(_mm_movehdup_ps(q));
}

/* ---- legacy formats: one float chain per (row, token) pair ------------
 * The arithmetic is quant_scalar.c's dot_legacy, every level's bits: per
 * block in order acc = fma(isum, dw * dx, acc), per block in order accm =
 * fma(m, s, accm), then out = acc + accm. Here a vector's 16 lanes are 16
 * weight rows, so the float steps are one convert, multiply and FMA per
 * 16 pairs and block, and no pair needs a horizontal sum.
 *
 * Prefill (n_tok >= LG_PREP_MIN): each call prepares its rows in groups
 * of 16 (lg_prep_group), per block 8 chunk vectors (chunk c, lane r:
 * elements 4c..4c+3 of row r as unsigned bytes), then the rows' dw, then
 * their m: LG_BLK bytes. A tile of 2 groups x up to 6 tokens broadcasts
 * a token's 4 bytes of a chunk to a VPDPBUSD per group (lg_tile).
 * Decode and short batches read the GGUF rows as the group loads give
 * them (lanes = blocks), sum each (row, token, block) exactly, then one
 * 16 x 16 transpose per token turns the sums to lanes = rows before the
 * same float steps (lg_dec). Rows past r1 repeat the last row; their
 * results are not stored. The drivers are quant_group_drive.h's (avx2's
 * too). */
#define LG_PREP_MIN 8
#define LG_CHUNK (256 << 10) /* prepared bytes per row chunk: it stays in L2 */
enum { LG_BLK = 8 * 64 + 2 * 64, LG_MAXG = 64 /* groups per chunk, at most (short rows) */ };

/* The 16 rows' group g (blocks b0 .. b0+n-1) as vectors t[v][i]: row i's
 * chunk v (v < 8), its d (8) and m (9), lanes = blocks (qa8_lane order). */
AI void lg_rows16(int ty, const uint8_t *const *rw, int64_t b0, int n, __m512i t[10][16]) {
    UNROLL
    for (int i = 0; i < 16; i++) {
        lg_group g;
        lg_load(ty, rw[i] + b0 * lg_bytes(ty), n, &g);
        UNROLL
        for (int v = 0; v < 8; v++) t[v][i] = lg_chunk(ty, &g, v);
        t[8][i] = _mm512_castps_si512(g.d);
        t[9][i] = _mm512_castps_si512(g.m);
    }
}

/* The 16 GGUF rows rw[] prepared into nb * LG_BLK bytes at dst. */
AI void lg_prep_group(int ty, const uint8_t *const *rw, int64_t nb, uint8_t *dst) {
    for (int64_t b0 = 0; b0 < nb; b0 += QA8_GROUP) {
        const int n = nb - b0 < QA8_GROUP ? (int)(nb - b0) : QA8_GROUP;
        __m512i t[10][16];
        lg_rows16(ty, rw, b0, n, t);
        for (int v = 0; v < 10; v++) {
            simd_tr16(t[v]); /* t[v][p]: lane i = row i's block b0 + qa8_lane(p) */
            for (int j = 0; j < n; j++)
                _mm512_store_si512(dst + (b0 + j) * LG_BLK + 64 * v, t[v][qa8_lane(j)]);
        }
    }
}

/* The 4 activation bytes at p, in every lane. */
AI __m512i lg_bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* Stores acc + accm of RV groups x T tokens: group r's 16 rows at
 * y[t * ldy + row[r]], the first nr[r] of them. */
AI void lg_store(const __m512 (*acc)[6], const __m512 (*accm)[6], float *y, int64_t ldy, const int *row,
                 const int *nr, const int RV, const int T) {
    UNROLL
    for (int r = 0; r < RV; r++) {
        const __mmask16 km = (__mmask16)(nr[r] >= 16 ? 0xffff : (1u << nr[r]) - 1);
        UNROLL
        for (int t = 0; t < T; t++)
            _mm512_mask_storeu_ps(y + t * ldy + row[r], km, _mm512_add_ps(acc[r][t], accm[r][t]));
    }
}

/* Prefill tile: RV prepared groups (P[r]) x T tokens (x[t]). Fewer than
 * 6 pairs split each sum into two chains (exact integers) to hide
 * VPDPBUSD's latency. */
AI void lg_tile(const uint8_t *const *P, const uint8_t *const *x, int64_t nb, float *y, int64_t ldy,
                const int *row, const int *nr, const int RV, const int T) {
    const int NS = RV * T < 6 ? 2 : 1;
    __m512 acc[4][6], accm[4][6];
    UNROLL
    for (int r = 0; r < RV; r++)
        UNROLL
        for (int t = 0; t < T; t++) acc[r][t] = accm[r][t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const int64_t xo = qa8_qoff(b, 0), sl = qa8_slot(b);
        __m512i is[4][6][2];
        UNROLL
        for (int r = 0; r < RV; r++)
            UNROLL
            for (int t = 0; t < T; t++) is[r][t][0] = is[r][t][1] = _mm512_setzero_si512();
        UNROLL
        for (int c = 0; c < 8; c++) {
            __m512i wv[4];
            UNROLL
            for (int r = 0; r < RV; r++) wv[r] = _mm512_load_si512(P[r] + b * LG_BLK + 64 * c);
            UNROLL
            for (int t = 0; t < T; t++) {
                __m512i xb = lg_bcast4(qa8_qs(x[t], nb) + xo + 64 * c);
                if (RV > 1) xb = zmm_in_reg(xb);
                UNROLL
                for (int r = 0; r < RV; r++) is[r][t][c % NS] = _mm512_dpbusd_epi32(is[r][t][c % NS], wv[r], xb);
            }
        }
        UNROLL
        for (int r = 0; r < RV; r++) {
            __m512 d = _mm512_load_ps((const float *)(const void *)(P[r] + b * LG_BLK + 512));
            UNROLL
            for (int t = 0; t < T; t++) {
                __m512i sum = NS == 2 ? _mm512_add_epi32(is[r][t][0], is[r][t][1]) : is[r][t][0];
                acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(d, _mm512_set1_ps(qa8_d(x[t])[sl])),
                                            acc[r][t]);
            }
        }
    }
    for (int64_t b = 0; b < nb; b++) { /* the min term's chains */
        const int64_t sl = qa8_slot(b);
        UNROLL
        for (int r = 0; r < RV; r++) {
            __m512 m = _mm512_load_ps((const float *)(const void *)(P[r] + b * LG_BLK + 576));
            UNROLL
            for (int t = 0; t < T; t++)
                accm[r][t] = _mm512_fmadd_ps(m, _mm512_set1_ps(qa8_s(x[t], nb)[sl]), accm[r][t]);
        }
    }
    lg_store((const __m512(*)[6])acc, (const __m512(*)[6])accm, y, ldy, row, nr, RV, T);
}

/* Decode tile: 16 GGUF rows (rw) x T tokens. Per group the exact block
 * sums of every (row, token) pair, lanes = blocks, go through a 16 x 16
 * transpose (as do the rows' d and m) so that the float chains run with
 * lanes = rows, block after block as lg_tile runs them. */
AI void lg_dec(int ty, const uint8_t *const *rw, const uint8_t *const *x, int64_t nb, float *y, int64_t ldy,
               int row, int nr, const int T) {
    __m512 acc[1][6], accm[1][6];
    UNROLL
    for (int t = 0; t < T; t++) acc[0][t] = accm[0][t] = _mm512_setzero_ps();
    for (int64_t b0 = 0; b0 < nb; b0 += QA8_GROUP) {
        const int n = nb - b0 < QA8_GROUP ? (int)(nb - b0) : QA8_GROUP;
        __m512i s[6][16], dm[2][16];
        for (int i = 0; i < 16; i++) {
            lg_group g;
            lg_load(ty, rw[i] + b0 * lg_bytes(ty), n, &g);
            __m512i is[6][2];
            UNROLL
            for (int t = 0; t < T; t++) is[t][0] = is[t][1] = _mm512_setzero_si512();
            UNROLL
            for (int v = 0; v < 8; v++) {
                __m512i wv = lg_chunk(ty, &g, v);
                UNROLL
                for (int t = 0; t < T; t++) {
                    __m512i xv = _mm512_loadu_si512((const void *)(qa8_qs(x[t], nb) + b0 * QK + 64 * v));
                    is[t][v & 1] = _mm512_dpbusd_epi32(is[t][v & 1], wv, xv);
                }
            }
            UNROLL
            for (int t = 0; t < T; t++) s[t][i] = _mm512_add_epi32(is[t][0], is[t][1]);
            dm[0][i] = _mm512_castps_si512(g.d);
            dm[1][i] = _mm512_castps_si512(g.m);
        }
        UNROLL
        for (int t = 0; t < T; t++) simd_tr16(s[t]);
        simd_tr16(dm[0]);
        simd_tr16(dm[1]);
        for (int j = 0; j < n; j++) { /* block b0 + j, in order */
            const int p = qa8_lane(j);
            const int64_t sl = b0 + p; /* qa8_slot(b0 + j) */
            __m512 d = _mm512_castsi512_ps(dm[0][p]), m = _mm512_castsi512_ps(dm[1][p]);
            UNROLL
            for (int t = 0; t < T; t++) {
                acc[0][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[t][p]), _mm512_mul_ps(d, _mm512_set1_ps(qa8_d(x[t])[sl])),
                                            acc[0][t]);
                accm[0][t] = _mm512_fmadd_ps(m, _mm512_set1_ps(qa8_s(x[t], nb)[sl]), accm[0][t]);
            }
        }
    }
    lg_store((const __m512(*)[6])acc, (const __m512(*)[6])accm, y, ldy, &row, &nr, 1, T);
}

/* fn: one token tile of T over a chunk's ng prepared groups, pairs of
 * groups (an odd last one alone) through TILE_AT(RV, T). */
#define GROUP_TOKENS(fn, T, TILE_AT)                                                                                   \
    static void fn(const uint8_t *pw, size_t gb, int ng, const uint8_t *const *xp, int64_t nb, float *yt,            \
                   int64_t ldy, const int *grow, const int *gnr) {                                                   \
        for (int i = 0; i < ng; i += 2) {                                                                            \
            const uint8_t *P[2] = {pw + (size_t)i * gb, pw + (size_t)(i + 1) * gb};                                  \
            const int *row = grow + i, *nr = gnr + i;                                                                \
            if (i + 1 < ng) TILE_AT(2, T);                                                                           \
            else TILE_AT(1, T);                                                                                      \
        }                                                                                                            \
    }
#define LG_TILE_AT(RV, T) lg_tile(P, xp, nb, yt, ldy, row, nr, RV, T)
GROUP_TOKENS(lg_tokens_6, 6, LG_TILE_AT) GROUP_TOKENS(lg_tokens_3, 3, LG_TILE_AT)
GROUP_TOKENS(lg_tokens_2, 2, LG_TILE_AT) GROUP_TOKENS(lg_tokens_1, 1, LG_TILE_AT)


/* ---- MXFP4 (Q8_0 activations) -------------------------------------------
 * The group loads are the legacy ones (LMX: nibbles as Q4_0, d from the
 * E8M0 byte). A chunk's nibbles become |kv| by a byte shuffle and their
 * sign (bit 3) negates the activation bytes, so VPDPBUSD takes |w| as its
 * unsigned operand; the sums are exact. Float steps and the final sum are
 * the scalar kernel's (quant_scalar.c: acc + cvt(isum) * (dw * dx), no
 * FMA, then quant_mx_hsum16's tree = lg_hsum), so every level gives the
 * same bits. Tiles: 1 row x {8, 4, 2, 1} tokens on the GGUF rows. */
AI void mx_tile(const uint8_t *const *w, const uint8_t *const *x, int64_t k, float *out, const int T) {
    const int64_t nb = k / QK;
    const __m512i tab = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, 1, 2, 3, 4, 6, 8, 12));
    const __m512i sgn = _mm512_set1_epi8(8);
    __m512 acc[8];
    UNROLL
    for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t b0 = 0; b0 < nb; b0 += QA8_GROUP) {
        int n = nb - b0 < QA8_GROUP ? (int)(nb - b0) : QA8_GROUP;
        lg_group g;
        lg_load(LMX, w[0] + b0 * QB_MXFP4, n, &g);
        __m512i is[8];
        UNROLL
        for (int t = 0; t < T; t++) is[t] = _mm512_setzero_si512();
        UNROLL
        for (int v = 0; v < 8; v++) {
            __m512i nib = lg_chunk(LMX, &g, v), wa = _mm512_shuffle_epi8(tab, nib);
            __mmask64 neg = _mm512_test_epi8_mask(nib, sgn);
            UNROLL
            for (int t = 0; t < T; t++) {
                __m512i xv = _mm512_loadu_si512((const void *)(qa8_qs(x[t], nb) + b0 * QK + 64 * v));
                xv = _mm512_mask_sub_epi8(xv, neg, _mm512_setzero_si512(), xv);
                is[t] = _mm512_dpbusd_epi32(is[t], wa, xv);
            }
        }
        UNROLL
        for (int t = 0; t < T; t++) {
            __m512 dd = _mm512_mul_ps(g.d, _mm512_loadu_ps(qa8_d(x[t]) + b0));
            acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(_mm512_cvtepi32_ps(is[t]), dd));
        }
    }
    UNROLL
    for (int t = 0; t < T; t++) out[t] = lg_hsum(acc[t]);
}

TILE_T(mx_tile, 1) TILE_T(mx_tile, 2) TILE_T(mx_tile, 4) TILE_T(mx_tile, 8)
static const tile_set mx_mxfp4_set = {
    .s = {{1, 8, mx_tile_8}, {1, 4, mx_tile_4}, {1, 2, mx_tile_2}, {1, 1, mx_tile_1}}};

/* ---- K-quants (Q8_K activations) --------------------------------------- */

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

/* A pair's integer sum starts at the Q6_K offset term (sum_g -32 sc_g
 * bsum_g), else 0. */
AI __m512i kq_ia0(int ty, __m256i bs, __m256i mp) {
    if (ty != K6) return _mm512_setzero_si512();
    return _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_zextsi256_si512(bs), _mm512_zextsi256_si512(mp));
}

/* ---- the K-quants' level-independent float steps -------------------------
 * Per (row, token) pair and super-block b the kernels make the exact
 * integers isum (sum_s sc_s dot_s; Q6_K: sum_g sc_g (dot_g - 32 bsum_g))
 * and, for Q4_K/Q5_K, im = sum_s m_s bsum_s, as 16 partial sums in the
 * lanes of a vector; integer sums are exact in any order, so the lanes'
 * split does not matter. The float steps are then the scalar kernel's
 * (quant_scalar.c), in block order, product and sum rounded apart:
 *     acc  = acc  + (float)isum * (d_w * d_x)
 *     accm = accm + (float)im   * (dmin_w * d_x)       out = acc - accm
 * so every level (and the amx one) gives the same bits. The pairs of a
 * tile are summed together by a transposed tree (kq_fold2, kq_tree) into
 * one vector, lane i holding pair i (= r * T + t), and the float steps
 * run on the pairs' lanes: one vector each for acc and accm. */

/* Tree stage 1: pairs i (a) and i + 1 (b), 16 partial sums each, to 8
 * each: lanes 0-7 pair i, 8-15 pair i + 1. */
AI __m512i kq_fold2(__m512i a, __m512i b) {
    return _mm512_add_epi32(_mm512_shuffle_i32x4(a, b, 0x44), _mm512_shuffle_i32x4(a, b, 0xee));
}

/* The rest of the tree over the stage-1 vectors s[0 .. (n + 1) / 2) of n
 * pairs (n = 2, 4, 8 or 16): lane i of the result is pair i's sum. */
AI __m512i kq_tree(const __m512i *s, const int n) {
    const __m512i z0 = _mm512_setzero_si512();
    const int ns = (n + 1) / 2, nu = (n + 3) / 4, nw = (nu + 1) / 2;
    __m512i u[4], w[2], z;
    UNROLL
    for (int i = 0; i < nu; i++) { /* 128-bit lane q: pair 4i + q's 4 partial sums */
        __m512i a = s[2 * i], b = 2 * i + 1 < ns ? s[2 * i + 1] : z0;
        u[i] = _mm512_add_epi32(_mm512_shuffle_i32x4(a, b, 0x88), _mm512_shuffle_i32x4(a, b, 0xdd));
    }
    UNROLL
    for (int i = 0; i < nw; i++) { /* lane q: pairs of u[2i] and u[2i+1], 2 partial sums each, interleaved */
        __m512i a = u[2 * i], b = 2 * i + 1 < nu ? u[2 * i + 1] : z0;
        w[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
    }
    if (nw == 1) /* dword 4q + j: pair 4j + q */
        z = _mm512_add_epi32(w[0], _mm512_shuffle_epi32(w[0], (_MM_PERM_ENUM)0x4e));
    else
        z = _mm512_add_epi32(_mm512_unpacklo_epi64(w[0], w[1]), _mm512_unpackhi_epi64(w[0], w[1]));
    const __m512i nat = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    return _mm512_permutexvar_epi32(nat, z); /* lane i <- dword qa8_lane(i) */
}

/* isum of n pairs (ia[i]: pair i's 16 partial sums), lane i pair i. */
AI __m512i kq_sums(const __m512i *ia, const int n) {
    if (n == 1) return _mm512_castsi128_si512(_mm_cvtsi32_si128(_mm512_reduce_add_epi32(ia[0])));
    __m512i s[8];
    UNROLL
    for (int i = 0; i < (n + 1) / 2; i++)
        s[i] = kq_fold2(ia[2 * i], 2 * i + 1 < n ? ia[2 * i + 1] : _mm512_setzero_si512());
    return kq_tree(s, n);
}

/* im of n pairs: pair i's 16 bsums bs[i] times its row's min pattern
 * mp[i], two pairs per VPDPWSSD (the halves are tree stage 1's layout). */
AI __m512i kq_min_sums(const __m256i *bs, const __m256i *mp, const int n) {
    __m512i s[8];
    UNROLL
    for (int i = 0; i < (n + 1) / 2; i++) {
        __m256i b1 = 2 * i + 1 < n ? bs[2 * i + 1] : _mm256_setzero_si256();
        __m256i m1 = 2 * i + 1 < n ? mp[2 * i + 1] : _mm256_setzero_si256();
        s[i] = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_inserti64x4(_mm512_castsi256_si512(bs[2 * i]), b1, 1),
                                   _mm512_inserti64x4(_mm512_castsi256_si512(mp[2 * i]), m1, 1));
    }
    if (n == 1) return _mm512_castsi128_si512(_mm_cvtsi32_si128(_mm512_reduce_add_epi32(s[0])));
    return kq_tree(s, n);
}

/* One float step of the pairs' lanes: acc + (float)isum * (dw * dx). */
AI __m512 kq_fstep(__m512 acc, __m512i isum, __m512 dw, __m512 dx) {
    return _mm512_add_ps(acc, _mm512_mul_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dw, dx)));
}

/* dx of the T tokens of a tile with R rows in pair order (lane r*T + t:
 * token t's d of super-block b). */
AI __m512 kq_dx(const uint8_t *const *x, int64_t nb, int64_t b, const int RR, const int T) {
    __m512 dx = _mm512_setzero_ps();
    UNROLL
    for (int t = 0; t < T; t++) {
        uint32_t m = 0;
        for (int r = 0; r < RR; r++) m |= 1u << (r * T + t);
        dx = _mm512_mask_mov_ps(dx, (__mmask16)m, _mm512_set1_ps(qak_d(x[t])[b]));
    }
    return dx;
}

/* The tile's results: lanes 0 .. n-1 of acc - accm (Q6_K: acc). */
AI void kq_store(int ty, __m512 acc, __m512 accm, float *out, const int n) {
    _mm512_mask_storeu_ps(out, (__mmask16)((1u << n) - 1), ty == K6 ? acc : _mm512_sub_ps(acc, accm));
}

AI void kq_tile(int ty, const uint8_t *const *w, const uint8_t *const *x,
                int64_t k, float *out, const int T) {
    const int64_t nb = k / QK_K;
    const int by = ty == K4 ? QB_Q4_K : ty == K5 ? QB_Q5_K : QB_Q6_K;
    __m512 acc = _mm512_setzero_ps(), accm = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        kq_head h[R];
        __m512i ia[R * 4];
        __m256i bs[4];
        UNROLL
        for (int r = 0; r < R; r++) kq_load_head(ty, w[r] + b * by, &h[r]);
        UNROLL
        for (int t = 0; t < T; t++) {
            bs[t] = _mm256_loadu_si256((const void *)(qak_bsums(x[t], nb) + 16 * b));
            UNROLL
            for (int r = 0; r < R; r++) ia[r * T + t] = kq_ia0(ty, bs[t], h[r].mp);
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
                    ia[r * T + t] = _mm512_dpwssd_epi32(ia[r * T + t], _mm512_maddubs_epi16(wv[r], xv), sp[r]);
            }
        }
        __m512 dw = _mm512_setzero_ps(), dm = _mm512_setzero_ps(), dx = kq_dx(x, nb, b, R, T);
        UNROLL
        for (int r = 0; r < R; r++) {
            __mmask16 m = (__mmask16)(((1u << T) - 1) << (r * T));
            dw = _mm512_mask_mov_ps(dw, m, h[r].d);
            dm = _mm512_mask_mov_ps(dm, m, h[r].dmin);
        }
        acc = kq_fstep(acc, kq_sums(ia, R * T), dw, dx);
        if (ty != K6) {
            __m256i bsp[R * 4], mpp[R * 4];
            UNROLL
            for (int i = 0; i < R * T; i++) bsp[i] = bs[i % T], mpp[i] = h[i / T].mp;
            accm = kq_fstep(accm, kq_min_sums(bsp, mpp, R * T), dm, dx);
        }
    }
    kq_store(ty, acc, accm, out, R * T);
}

/* Tile sets: 4 rows x {4, 2, 1} tokens on GGUF rows, below KG_PREP_MIN
 * tokens (decode; prefill: the groups of 16 rows below). */
#define KQ_KERNEL(name, ty)                                                   \
    TILE_WRAP(name, kq_tile, ty)                                              \
    TILESET_421(name, R)
KQ_KERNEL(kq_q4_k, K4)
KQ_KERNEL(kq_q5_k, K5)
KQ_KERNEL(kq_q6_k, K6)

AI void kq_unpack(int ty, const uint8_t *blk, uint8_t *q, int16_t *sc, float *dd) {
    kq_head h;
    kq_load_head(ty, blk, &h);
    UNROLL
    for (int c = 0; c < 4; c++) _mm512_storeu_si512((void *)(q + 64 * c), kq_decode(ty, blk, c));
    _mm256_storeu_si256((void *)sc, _mm512_castsi512_si256(h.sc));
    dd[0] = _mm512_cvtss_f32(h.d);
    dd[1] = _mm512_cvtss_f32(h.dmin);
}


/* ---- K-quants, prefill: 16 rows in the lanes -----------------------------
 * From KG_PREP_MIN tokens on, a call prepares its rows in groups of 16
 * in quant_impl.h's KQ16 layout (quant_avx512_kq_prep16), as the legacy
 * formats' prefill does. A tile of 2 groups x up to 6 tokens broadcasts
 * a token's 4 activation bytes of a chunk into a VPDPBUSD per group,
 * summing a sub-block (Q6_K: a 16-element group) from zero, then adds it
 * times its scale to the pair's isum (VPMULLD and an add; VPDPWSSD on the
 * sum's int16 value, by pieces of 16 or 8 elements that fit int16,
 * measured 0-20% slower). The integers are exact, so they are every
 * level's isum and im (see "the K-quants' level-independent float
 * steps"), and the float steps are kq_fstep's: the same bits as the
 * decode tiles (kq_tile) and scalar. */
#define KG_PREP_MIN 8

AI int kg_piece(int ty) { return ty == K6 ? 4 : 8; } /* chunks of one scale */

AI void kq16_prep(int ty, const uint8_t *const *rw, int64_t nb, uint8_t *dst) {
    const int by = ty == K4 ? QB_Q4_K : ty == K5 ? QB_Q5_K : QB_Q6_K;
    for (int64_t b = 0; b < nb; b++, dst += KQ16_SB) {
        _Alignas(64) uint8_t q[16][QK_K];
        _Alignas(64) int16_t sc[16][16];
        _Alignas(64) float dd[2][16];
        for (int i = 0; i < 16; i++) {
            float f[2];
            kq_unpack(ty, rw[i] + b * by, q[i], sc[i], f);
            dd[0][i] = f[0], dd[1][i] = f[1];
        }
        __m512i t[16];
        for (int v = 0; v < 4; v++) { /* chunks 16v .. 16v + 15 */
            for (int i = 0; i < 16; i++) t[i] = _mm512_load_si512(q[i] + 64 * v);
            simd_tr16(t);
            for (int p = 0; p < 16; p++) _mm512_store_si512(dst + 64 * (16 * v + p), t[p]);
        }
        for (int i = 0; i < 16; i++)
            t[i] = _mm512_cvtepi16_epi32(_mm256_load_si256((const __m256i *)(const void *)sc[i]));
        simd_tr16(t); /* t[j], lane r: row r's scale j (Q4_K/Q5_K: 0-7 sc, 8-15 m) */
        for (int j = 0; j < (ty == K6 ? 16 : 8); j++) _mm512_store_si512(dst + KQ16_SC + 64 * j, t[j]);
        const __m512i lo16 = _mm512_set1_epi32(0xffff);
        for (int j = 0; j < 8; j++) {
            __m512i a, c;
            if (ty == K6) {
                a = _mm512_mullo_epi32(t[2 * j], _mm512_set1_epi32(-32));
                c = _mm512_mullo_epi32(t[2 * j + 1], _mm512_set1_epi32(-32));
            } else {
                a = c = t[8 + j];
            }
            const __m512i pair = _mm512_or_si512(_mm512_and_si512(a, lo16), _mm512_slli_epi32(c, 16));
            _mm512_store_si512(dst + KQ16_MP + 64 * j, pair);
        }
        _mm512_store_ps(dst + KQ16_DW, _mm512_load_ps(dd[0]));
        _mm512_store_ps(dst + KQ16_DM, _mm512_load_ps(dd[1]));
    }
}

void quant_avx512_kq_prep16(qtype t, const uint8_t *const *rows, int64_t nb, uint8_t *dst) {
    if (t == QT_Q4_K) kq16_prep(K4, rows, nb, dst);
    else if (t == QT_Q5_K) kq16_prep(K5, rows, nb, dst);
    else kq16_prep(K6, rows, nb, dst);
}

/* Prefill tile: RV prepared groups (P[r]) x T tokens (x[t]). */
AI void kg_tile(int ty, const uint8_t *const *P, const uint8_t *const *x, int64_t nb, float *y, int64_t ldy,
                const int *row, const int *nr, const int RV, const int T) {
    const int PC = kg_piece(ty);
    __m512 acc[2][6], accm[2][6];
    UNROLL
    for (int r = 0; r < RV; r++)
        UNROLL
        for (int t = 0; t < T; t++) acc[r][t] = accm[r][t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *pb[2];
        const int8_t *xq[6];
        const int16_t *bs[6];
        UNROLL
        for (int r = 0; r < RV; r++) pb[r] = P[r] + b * KQ16_SB;
        UNROLL
        for (int t = 0; t < T; t++) xq[t] = qak_qs(x[t], nb) + b * QK_K, bs[t] = qak_bsums(x[t], nb) + 16 * b;
        __m512i is[2][6];
        UNROLL
        for (int r = 0; r < RV; r++)
            UNROLL
            for (int t = 0; t < T; t++) {
                is[r][t] = _mm512_setzero_si512();
                if (ty == K6) /* the -32 offset: sum_g -32 sc_g bsum_g */
                    UNROLL
                    for (int j = 0; j < 8; j++)
                        is[r][t] = _mm512_dpwssd_epi32(is[r][t], _mm512_load_si512(pb[r] + KQ16_MP + 64 * j),
                                                       lg_bcast4((const int8_t *)(bs[t] + 2 * j)));
            }
        for (int p = 0; p < 64 / PC; p++) {
            __m512i dt[2][6];
            UNROLL
            for (int r = 0; r < RV; r++)
                UNROLL
                for (int t = 0; t < T; t++) dt[r][t] = _mm512_setzero_si512();
            UNROLL
            for (int c = p * PC; c < p * PC + PC; c++) {
                __m512i wv[2];
                UNROLL
                for (int r = 0; r < RV; r++) wv[r] = _mm512_load_si512(pb[r] + 64 * c);
                UNROLL
                for (int t = 0; t < T; t++) {
                    __m512i xb = lg_bcast4(xq[t] + 4 * c);
                    if (RV > 1) xb = zmm_in_reg(xb);
                    UNROLL
                    for (int r = 0; r < RV; r++) dt[r][t] = _mm512_dpbusd_epi32(dt[r][t], wv[r], xb);
                }
            }
            UNROLL
            for (int r = 0; r < RV; r++) {
                __m512i sv = _mm512_load_si512(pb[r] + KQ16_SC + 64 * p);
                UNROLL
                for (int t = 0; t < T; t++) is[r][t] = _mm512_add_epi32(is[r][t], _mm512_mullo_epi32(dt[r][t], sv));
            }
        }
        UNROLL
        for (int r = 0; r < RV; r++) {
            const __m512 dw = _mm512_load_ps((const float *)(const void *)(pb[r] + KQ16_DW));
            const __m512 dm = _mm512_load_ps((const float *)(const void *)(pb[r] + KQ16_DM));
            UNROLL
            for (int t = 0; t < T; t++) {
                const __m512 dx = _mm512_set1_ps(qak_d(x[t])[b]);
                acc[r][t] = kq_fstep(acc[r][t], is[r][t], dw, dx);
                if (ty == K6) continue;
                __m512i im = _mm512_setzero_si512();
                UNROLL
                for (int j = 0; j < 8; j++)
                    im = _mm512_dpwssd_epi32(im, _mm512_load_si512(pb[r] + KQ16_MP + 64 * j),
                                             lg_bcast4((const int8_t *)(bs[t] + 2 * j)));
                accm[r][t] = kq_fstep(accm[r][t], im, dm, dx);
            }
        }
    }
    UNROLL
    for (int r = 0; r < RV; r++) {
        const __mmask16 km = (__mmask16)(nr[r] >= 16 ? 0xffff : (1u << nr[r]) - 1);
        UNROLL
        for (int t = 0; t < T; t++)
            _mm512_mask_storeu_ps(y + t * ldy + row[r], km,
                                  ty == K6 ? acc[r][t] : _mm512_sub_ps(acc[r][t], accm[r][t]));
    }
}

#define KG4_TILE_AT(RV, T) kg_tile(K4, P, xp, nb, yt, ldy, row, nr, RV, T)
#define KG5_TILE_AT(RV, T) kg_tile(K5, P, xp, nb, yt, ldy, row, nr, RV, T)
#define KG6_TILE_AT(RV, T) kg_tile(K6, P, xp, nb, yt, ldy, row, nr, RV, T)
GROUP_TOKENS(kg4_tokens_6, 6, KG4_TILE_AT) GROUP_TOKENS(kg4_tokens_3, 3, KG4_TILE_AT)
GROUP_TOKENS(kg4_tokens_2, 2, KG4_TILE_AT) GROUP_TOKENS(kg4_tokens_1, 1, KG4_TILE_AT)
GROUP_TOKENS(kg5_tokens_6, 6, KG5_TILE_AT) GROUP_TOKENS(kg5_tokens_3, 3, KG5_TILE_AT)
GROUP_TOKENS(kg5_tokens_2, 2, KG5_TILE_AT) GROUP_TOKENS(kg5_tokens_1, 1, KG5_TILE_AT)
GROUP_TOKENS(kg6_tokens_6, 6, KG6_TILE_AT) GROUP_TOKENS(kg6_tokens_3, 3, KG6_TILE_AT)
GROUP_TOKENS(kg6_tokens_2, 2, KG6_TILE_AT) GROUP_TOKENS(kg6_tokens_1, 1, KG6_TILE_AT)

/* quant_group_drive.h's hooks. The legacy tiles take nothing per token but
 * its row (and not the type: the prepared rows are u, whatever the
 * format); the K-quants' tiles take their type. */
#define LG_G 16
#define LG_T 6
AI size_t group_blk_bytes(int ty) { return ty >= K4 ? KQ16_SB : LG_BLK; }
AI size_t group_x_bytes(int ty, int64_t nb) { return 0; }
AI void group_x_prep(int ty, const uint8_t *x, int64_t nb, uint8_t *dst) {}
AI void group_prep(int ty, const uint8_t *const *rw, int64_t nb, uint8_t *dst) {
    if (ty >= K4) kq16_prep(ty, rw, nb, dst);
    else lg_prep_group(ty, rw, nb, dst);
}
#define GROUP_T_CASES(pre)                                                                                             \
    if (T == 6) pre##_6(pw, gb, ng, xp, nb, yt, ldy, grow, gnr);                                                       \
    else if (T == 3) pre##_3(pw, gb, ng, xp, nb, yt, ldy, grow, gnr);                                                  \
    else if (T == 2) pre##_2(pw, gb, ng, xp, nb, yt, ldy, grow, gnr);                                                  \
    else pre##_1(pw, gb, ng, xp, nb, yt, ldy, grow, gnr);
AI void group_tokens(int ty, const uint8_t *pw, size_t gb, int ng, const uint8_t *const *xp,
                     const uint8_t *const *xa, int64_t nb, float *yt, int64_t ldy, const int *grow, const int *gnr,
                     const int T) {
    if (ty == K4) { GROUP_T_CASES(kg4_tokens) }
    else if (ty == K5) { GROUP_T_CASES(kg5_tokens) }
    else if (ty == K6) { GROUP_T_CASES(kg6_tokens) }
    else { GROUP_T_CASES(lg_tokens) }
}

#include "backend/quant_group_drive.h"


/* ---- float formats (F32 activations) ----------------------------------- */

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

TILE_WRAP(fl_f32, fl_tile, FF32)
TILE_WRAP(fl_f16, fl_tile, FF16)
TILE_WRAP(fl_bf16, fl_tile, FBF16)
TILESET_421(fl_f32, R)
TILESET_421(fl_f16, R)
TILESET_421(fl_bf16, R)

/* ---- dispatch ------------------------------------------------------------ */

TILE_KERNELS(quant_avx512_kernel)
