/* quant_amx_avx512.c - prefill of the legacy formats (Q4_0, Q4_1, Q5_0,
 * Q5_1, Q8_0) on AMX-INT8 tiles: the gemm level QUANT_AMX (quant.h).
 *
 * Why: a TDPBUSD does 16 x 16 x 64 multiply-adds in one
 * instruction. Here it takes 16 weight rows x 16 tokens over one block
 * (32 elements, K = 32): the exact integer dot product of every (row,
 * token) pair and block, the same integers VPDPBUSD sums in a lane.
 *
 * The same bits as the avx512 and scalar levels: per (row, token) pair
 * the float steps are quant_scalar.c's dot_legacy, block after block,
 *     acc  = fma(float(isum), d_w * d_x, acc)
 *     accm = fma(m_w, s_x, accm)
 * then out = acc + accm; here the 16 lanes of a register are 16 tokens of
 * one row. The tests memcmp this level against decode and against scalar
 * (quant_gemm_amx_same_bits, quant_legacy_same_bits_every_level).
 *
 * Per call (n_tok >= AMX_MIN_TOK; fewer tokens take the avx512 kernels):
 *   1. every token tile of 16 is laid out for TDPBUSD's B operand, per
 *      block 8 rows of 64 bytes (row v: elements 4v..4v+3 of the 16
 *      tokens), plus the 16 tokens' d_x and s_x per block: a 16 x 16 dword
 *      transpose of each activation group's chunk (amx_prep_x);
 *   2. rows in chunks of ~256 KiB prepared (L2): each row decoded once to
 *      32 unsigned bytes per block in element order (Q8_0: w + 128;
 *      amx_prep_w, the row AMX_PF_ROWS on prefetched) and a row tile's d_w,
 *      m_w as floats (amx_prep_scales, a gather per block; m_w is
 *      lg_scales': -8d, -16d, -128d or the stored min);
 *   3. per chunk, token tiles outer and the chunk's 16-row tiles inner
 *      (each token's results are then written in runs along its row of
 *      y, not as a 64-byte strip down 512 rows), per (row tile, token
 *      tile) pair and batch of AMX_NB blocks: one TDPBUSD per block into
 *      a zeroed result tile (tiles 0-3), stored to a 16 KiB L1 buffer
 *      (amx_products), then the batch's float chains, 8 rows at a time
 *      (amx_chains); at the end acc + accm and a 16 x 16 transpose so
 *      each token's 16 results are one store (amx_out).
 * Why serial: on this CPU a vector load after a tile store waits for it
 * (and the tile unit's earlier work), so the products and the float steps
 * do not overlap however they are interleaved; measured, every
 * interleaving was slower than bursts, and a double buffer of a pair's
 * sums (2 x nb KiB) left L1, where tile stores cost ~4x.
 * Does not: K-quants (quant_amx_kq_avx512.c), MXFP4 (avx512 kernels), decode. */
#include <immintrin.h>
#include <string.h>

#include "backend/amx_cfg.h"
#include "backend/quant_amx.h"
#include "backend/quant_impl.h"
#include "backend/simd_tr.h"

#define AMX __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,amx-tile,amx-int8")))
#define INL static inline __attribute__((always_inline)) AMX
#define UNROLL _Pragma("GCC unroll 16")

enum {
    AMX_MIN_TOK = 16, /* below: avx512 (a token tile would be mostly padding) */
    AMX_T = 16,       /* tokens per tile (result tile columns) */
    AMX_R = 16,       /* weight rows per tile */
    AMX_XB = 512,     /* B bytes per block and token tile: 8 rows x 64 */
    AMX_WB = 40,      /* prepared weight bytes per block: 32 quants, d, m */
    AMX_MAX_K = 1 << 20, /* block indexes are int */
    AMX_WCHUNK = 256 << 10, /* prepared weight bytes of a row chunk (L2) */
    AMX_PF_ROWS = 4,        /* weight rows prefetched ahead while preparing */
};

/* Block bytes and the offsets of the quants and Q5's fifth bits. */
static int amx_blk(qtype t) {
    return t == QT_Q4_0 ? QB_Q4_0 : t == QT_Q4_1 ? QB_Q4_1 : t == QT_Q5_0 ? QB_Q5_0
         : t == QT_Q5_1 ? QB_Q5_1 : QB_Q8_0;
}

/* Transposes the 16 rows at src[n] + off (n < nt; zeros past) and stores
 * row p (the 16 tokens' dwords of lane p) at dst + (16G + qa8_lane(p)) *
 * stride, for the blocks below nb. */
INL void amx_tr_store(const uint8_t *const *src, int nt, size_t off, uint8_t *dst, size_t stride,
                      int64_t g0, int64_t nb) {
    __m512i r[16];
    UNROLL
    for (int n = 0; n < 16; n++)
        r[n] = n < nt ? _mm512_loadu_si512((const void *)(src[n] + off)) : _mm512_setzero_si512();
    simd_tr16(r);
    UNROLL
    for (int p = 0; p < 16; p++)
        if (g0 + qa8_lane(p) < nb) _mm512_store_si512((void *)(dst + (size_t)(g0 + qa8_lane(p)) * stride), r[p]);
}

/* Token tile of nt tokens (rows at x[n]) as B operands: xb[b] 8 rows of
 * 64 bytes, then per block its 16 d_x and 16 s_x floats side by side
 * (AMX_XB + 128 bytes per block; one pointer walks both in amx_lanes). */
static AMX void amx_prep_x(const uint8_t *const *x, int nt, int64_t nb, uint8_t *dst) {
    uint8_t *xd = dst + (size_t)nb * AMX_XB, *xs = xd + 64;
    const size_t qs = (size_t)8 * qa8_nbp(nb), so = (size_t)4 * qa8_nbp(nb);
    for (int64_t g0 = 0; g0 < nb; g0 += QA8_GROUP) {
        for (int v = 0; v < 8; v++)
            amx_tr_store(x, nt, qs + (size_t)g0 * QK + 64 * v, dst + 64 * v, AMX_XB, g0, nb);
        amx_tr_store(x, nt, 4 * (size_t)g0, xd, 128, g0, nb);
        amx_tr_store(x, nt, so + 4 * (size_t)g0, xs, 128, g0, nb);
    }
}

/* One weight row of a 16-row tile: block b's 32 unsigned quants in
 * element order at q + 512 b (the A operand of block b is then 512
 * contiguous bytes). The scales are amx_prep_scales'. */
static AMX void amx_prep_w(qtype t, const uint8_t *w, int64_t nb, uint8_t *q) {
    const int by = amx_blk(t);
    const __m128i m4 = _mm_set1_epi8(15);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = w + b * by;
        __m256i u;
        if (t == QT_Q8_0) {
            u = _mm256_xor_si256(_mm256_loadu_si256((const void *)(p + 2)), _mm256_set1_epi8((char)0x80));
        } else {
            int qo = t == QT_Q4_0 ? 2 : t == QT_Q4_1 ? 4 : t == QT_Q5_0 ? 6 : 8;
            __m128i v = _mm_loadu_si128((const void *)(p + qo));
            u = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m4), _mm_and_si128(v, m4));
            if (t == QT_Q5_0 || t == QT_Q5_1) /* bit j of qh: 16 in element j */
                u = _mm256_mask_add_epi8(u, (__mmask32)quant_rd32(p + (t == QT_Q5_0 ? 2 : 4)), u,
                                         _mm256_set1_epi8(16));
        }
        _mm256_store_si256((void *)(q + AMX_R * 32 * b), u);
    }
}

/* The 16 rows' d and m of every block as floats (the values lg_scales
 * gives: m is the stored min, or -8d, -16d, -128d) at d + 32 b and d + 16
 * + 32 b: one gather of the 16 rows' first dword per block (d in its low
 * half, Q4_1 / Q5_1's min in the high one), where a row at a time took
 * two scalar conversions and stores per block. rows: the 16 rows' byte
 * offsets from w. */
static AMX void amx_prep_scales(qtype t, const uint8_t *w, __m512i rows, int64_t nb, float *d) {
    const int by = amx_blk(t);
    const int has_min = t == QT_Q4_1 || t == QT_Q5_1;
    const __m512 mul = _mm512_set1_ps(t == QT_Q4_0 ? -8.0f : t == QT_Q8_0 ? -128.0f : -16.0f);
    for (int64_t b = 0; b < nb; b++) {
        __m512i g = _mm512_i32gather_epi32(rows, (const void *)(w + b * by), 1);
        __m512 db = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g));
        __m512 mb = has_min ? _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(g, 16))) : _mm512_mul_ps(db, mul);
        _mm512_store_ps(d + 2 * AMX_R * b, db);
        _mm512_store_ps(d + 2 * AMX_R * b + AMX_R, mb);
    }
}

/* Tiles 0-3: results (16 rows x 16 int32); 4, 5: weights (16 rows x 32
 * bytes); 6, 7: activations (8 rows x 64 bytes). */
static AMX void amx_config(void) {
    amx_cfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int i = 0; i < 8; i++) {
        c.colsb[i] = i == 4 || i == 5 ? 32 : 64;
        c.rows[i] = i >= 6 ? 8 : 16;
    }
    amx_cfg_load(&c);
}

enum { AMX_NB = 16 }; /* blocks per batch: their sums (16 KiB) stay in L1 */

/* Tile numbers are literals (the intrinsics paste them into the asm). */
#define AMX_BLOCK(ct, at, xt, b)                                                                                   \
    do {                                                                                                           \
        _tile_zero(ct);                                                                                            \
        _tile_loadd(at, wp + AMX_R * 32 * (b), 32);                                                                \
        _tile_loadd(xt, xp + (size_t)(b) * AMX_XB, 64);                                                            \
        _tile_dpbusd(ct, at, xt);                                                                                  \
    } while (0)

/* The exact sums of blocks [b0, b0 + n) of a (row tile, token tile) pair:
 * block b's 16 rows x 16 tokens at c + 256 (b - b0), row m at + 16 m.
 * Four products are issued before their stores (a store right after
 * its product waits for it). */
static AMX void amx_products(const uint8_t *wp, const uint8_t *xp, int32_t *c, int64_t b0, int n) {
    for (int i = 0; i < n; i += 4) {
        const int64_t b = b0 + i;
        const int k = n - i < 4 ? n - i : 4;
        AMX_BLOCK(0, 4, 6, b);
        if (k > 1) AMX_BLOCK(1, 5, 7, b + 1);
        if (k > 2) AMX_BLOCK(2, 4, 6, b + 2);
        if (k > 3) AMX_BLOCK(3, 5, 7, b + 3);
        _tile_stored(0, c + 256 * i, 64);
        if (k > 1) _tile_stored(1, c + 256 * (i + 1), 64);
        if (k > 2) _tile_stored(2, c + 256 * (i + 2), 64);
        if (k > 3) _tile_stored(3, c + 256 * (i + 3), 64);
    }
}
#undef AMX_BLOCK

enum { AMX_RP = 8 }; /* rows whose chains run side by side (acc and accm: 16 registers) */

/* The float chains of rows m0 .. m0 + 7 over the batch's blocks [b0, b0 +
 * n) (sums in c as amx_products left them; d_w, m_w of row m at w[m + 32
 * b], w[16 + m + 32 b]; the 16 tokens' d_x, s_x at x[32 b], x[16 + 32 b]),
 * lanes = tokens: quant_scalar.c's dot_legacy, block after block. */
INL void amx_chains(const int32_t *c, const float *w, const float *x, int64_t b0, int n, int m0, __m512 *acc,
                    __m512 *accm) {
    __m512 a[AMX_RP], am[AMX_RP];
    UNROLL
    for (int r = 0; r < AMX_RP; r++) a[r] = acc[m0 + r], am[r] = accm[m0 + r];
    for (int i = 0; i < n; i++) {
        const int64_t b = b0 + i;
        const __m512 xd = _mm512_load_ps(x + 32 * b), xs = _mm512_load_ps(x + 32 * b + 16);
        UNROLL
        for (int r = 0; r < AMX_RP; r++) {
            __m512 dd = _mm512_mul_ps(_mm512_set1_ps(w[m0 + r + 32 * b]), xd);
            __m512i s = _mm512_load_si512((const void *)(c + 256 * i + 16 * (m0 + r)));
            a[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), dd, a[r]);
            am[r] = _mm512_fmadd_ps(_mm512_set1_ps(w[16 + m0 + r + 32 * b]), xs, am[r]);
        }
    }
    UNROLL
    for (int r = 0; r < AMX_RP; r++) acc[m0 + r] = a[r], accm[m0 + r] = am[r];
}

/* The 16 rows' results res (the first nr real) to y, nt tokens: a 16 x 16
 * transpose, then per token one store of its 16 results. */
INL void amx_out(__m512 *res, int nr, int nt, float *y, int64_t ldy) {
    simd_tr16((__m512i *)(void *)res);
    const __mmask16 rows = (__mmask16)((1u << nr) - 1);
    for (int n = 0; n < nt; n++) _mm512_mask_storeu_ps(y + n * ldy, rows, res[n]);
}

/* One (row tile, token tile) pair: per batch of AMX_NB blocks the tile
 * products, then the float chains of its blocks, 8 rows at a time; then
 * out = acc + accm, to y. */
static AMX void amx_pair(const uint8_t *wp, int64_t nb, const uint8_t *xp, int32_t *c, int nr, int nt, float *y,
                         int64_t ldy) {
    const float *wd = (const float *)(const void *)(wp + (size_t)AMX_R * 32 * nb);
    const float *x = (const float *)(const void *)(xp + (size_t)nb * AMX_XB);
    __m512 acc[16], accm[16];
    UNROLL
    for (int m = 0; m < 16; m++) acc[m] = accm[m] = _mm512_setzero_ps();
    for (int64_t b0 = 0; b0 < nb; b0 += AMX_NB) {
        const int n = nb - b0 < AMX_NB ? (int)(nb - b0) : AMX_NB;
        amx_products(wp, xp, c, b0, n);
        amx_chains(c, wd, x, b0, n, 0, acc, accm);
        amx_chains(c, wd, x, b0, n, AMX_RP, acc, accm);
    }
    UNROLL
    for (int m = 0; m < 16; m++) acc[m] = _mm512_add_ps(acc[m], accm[m]);
    amx_out(acc, nr, nt, y, ldy);
}

/* Decodes row tiles [i0, i0 + n) of the call (16 rows from r0 + 16 i each;
 * rows past r1: the last one again, results dropped) to wb + i * wtb. */
static AMX void amx_prep_rows(qtype t, const void *w, size_t wrb, int64_t nb, int r0, int r1, int i0, int n,
                              uint8_t *wb, size_t wtb) {
    for (int i = 0; i < n; i++) {
        const int r = r0 + AMX_R * (i0 + i), nr = r1 - r < AMX_R ? r1 - r : AMX_R;
        const uint8_t *w0 = (const uint8_t *)w + (size_t)r * wrb;
        uint8_t *wp = wb + (size_t)i * wtb;
        int32_t off[AMX_R];
        for (int m = 0; m < AMX_R; m++) {
            off[m] = (int32_t)((size_t)(m < nr ? m : nr - 1) * wrb);
            /* The rows come from L3 or memory, each read once per call; a
             * row of 576 inputs is 6 lines, too short for the hardware
             * prefetcher to run ahead: fetch the row AMX_PF_ROWS on. */
            const uint8_t *ahead = w0 + (size_t)(m + AMX_PF_ROWS) * wrb;
            if (r + m + AMX_PF_ROWS < r1)
                for (size_t o = 0; o < wrb; o += 64) _mm_prefetch((const char *)ahead + o, _MM_HINT_T0);
            amx_prep_w(t, w0 + off[m], nb, wp + 32 * m);
        }
        amx_prep_scales(t, w0, _mm512_loadu_si512(off), nb, (float *)(void *)(wp + (size_t)AMX_R * 32 * nb));
    }
}

/* Bytes of one token tile's B operands and scales at nb blocks. */
static size_t amx_xtile_bytes(int64_t nb) { return (size_t)nb * (AMX_XB + 128); }

/* Token tiles [i0, i1) of n_tok activation rows (xrb apart) to xt (tile
 * i at xt + i amx_xtile_bytes). */
static AMX void amx_xtiles(int64_t nb, const void *xq, size_t xrb, int n_tok, int i0, int i1, uint8_t *xt) {
    const size_t xtb = amx_xtile_bytes(nb);
    for (int tt = i0; tt < i1; tt++) {
        const uint8_t *xr[AMX_T];
        int nt = n_tok - tt * AMX_T < AMX_T ? n_tok - tt * AMX_T : AMX_T;
        for (int n = 0; n < nt; n++) xr[n] = (const uint8_t *)xq + (size_t)(tt * AMX_T + n) * xrb;
        amx_prep_x(xr, nt, nb, xt + (size_t)tt * xtb);
    }
}

/* Row tiles a chunk of prepared weights holds (~AMX_WCHUNK bytes), of nrt. */
static int amx_chunk_tiles(int64_t nb, int nrt) {
    int ct = (int)(AMX_WCHUNK / ((size_t)AMX_R * nb * AMX_WB));
    return ct < 1 ? 1 : ct > nrt ? nrt : ct;
}

/* Bytes of amx_gemm_tiles' work area: a chunk of prepared rows and the
 * tile sums of a step. */
static size_t amx_work_bytes(int64_t nb, int r0, int r1) {
    const int nrt = (r1 - r0 + AMX_R - 1) / AMX_R;
    return (size_t)amx_chunk_tiles(nb, nrt) * AMX_R * nb * AMX_WB + (size_t)1024 * AMX_NB;
}

/* Rows [r0, r1) for n_tok tokens whose tiles are laid out at xb; work:
 * amx_work_bytes. */
static AMX void amx_gemm_tiles(qtype t, const void *w, size_t wrb, int64_t nb, const uint8_t *xb, int n_tok,
                               float *y, int64_t ldy, int r0, int r1, uint8_t *work) {
    const int ntt = (n_tok + AMX_T - 1) / AMX_T, nrt = (r1 - r0 + AMX_R - 1) / AMX_R, ct = amx_chunk_tiles(nb, nrt);
    const size_t xtb = amx_xtile_bytes(nb), wtb = (size_t)AMX_R * nb * AMX_WB;
    uint8_t *wb = work; /* per row tile quants, then d and m */
    int32_t *c = (int32_t *)(void *)(wb + (size_t)ct * wtb);
    amx_config();
    for (int i0 = 0; i0 < nrt; i0 += ct) {
        const int ni = nrt - i0 < ct ? nrt - i0 : ct;
        amx_prep_rows(t, w, wrb, nb, r0, r1, i0, ni, wb, wtb);
        for (int tt = 0; tt < ntt; tt++) {
            const int nt = n_tok - tt * AMX_T < AMX_T ? n_tok - tt * AMX_T : AMX_T;
            for (int i = 0; i < ni; i++) {
                const int r = r0 + AMX_R * (i0 + i), nr = r1 - r < AMX_R ? r1 - r : AMX_R;
                amx_pair(wb + (size_t)i * wtb, nb, xb + (size_t)tt * xtb, c, nr, nt, y + (size_t)tt * AMX_T * ldy + r,
                         ldy);
            }
        }
    }
    _tile_release();
}

/* The kernel on tiles of its own, made per call (the caller made none). */
static AMX void amx_gemm(qtype t, const void *w, size_t wrb, int64_t k, const void *xq, size_t xrb, int n_tok,
                         float *y, int64_t ldy, int r0, int r1) {
    const int64_t nb = k / QK;
    const int ntt = (n_tok + AMX_T - 1) / AMX_T;
    const size_t xtb = (size_t)ntt * amx_xtile_bytes(nb);
    uint8_t *buf = quant_work(xtb + amx_work_bytes(nb, r0, r1));
    amx_xtiles(nb, xq, xrb, n_tok, 0, ntt, buf);
    amx_gemm_tiles(t, w, wrb, nb, buf, n_tok, y, ldy, r0, r1, buf + xtb);
}

/* ---- tiles made once by the caller (quant.h: quant_xtiles) ---- */

static int amx_serves(qtype t, int64_t k, int n_tok) {
    return (t == QT_Q4_0 || t == QT_Q4_1 || t == QT_Q5_0 || t == QT_Q5_1 || t == QT_Q8_0) && n_tok >= AMX_MIN_TOK &&
           k <= AMX_MAX_K;
}

size_t quant_amx_xtile_bytes(qtype t, int64_t k, int n_tok) {
    return amx_serves(t, k, n_tok) ? amx_xtile_bytes(k / QK) : 0;
}

void quant_amx_xtiles(qtype t, int64_t k, const void *xq, size_t xrb, int n_tok, int i0, int i1, void *xt) {
    if (amx_serves(t, k, n_tok)) amx_xtiles(k / QK, xq, xrb, n_tok, i0, i1, xt);
}

void quant_amx_gemm_xt(qtype t, const void *w, size_t wrb, int64_t k, const void *xt, int n_tok, float *y,
                       int64_t ldy, int r0, int r1) {
    const int64_t nb = k / QK;
    amx_gemm_tiles(t, w, wrb, nb, xt, n_tok, y, ldy, r0, r1, quant_work(amx_work_bytes(nb, r0, r1)));
}

#define AMX_KERNEL(name, ty) QUANT_AMX_KERNEL(name, ty, amx_gemm, AMX_MIN_TOK, AMX_MAX_K)
AMX_KERNEL(amx_q4_0, QT_Q4_0)
AMX_KERNEL(amx_q4_1, QT_Q4_1)
AMX_KERNEL(amx_q5_0, QT_Q5_0)
AMX_KERNEL(amx_q5_1, QT_Q5_1)
AMX_KERNEL(amx_q8_0, QT_Q8_0)

quant_gemm_fn quant_amx_kernel(qtype t) {
    switch (t) {
    case QT_Q4_0: return amx_q4_0;
    case QT_Q4_1: return amx_q4_1;
    case QT_Q5_0: return amx_q5_0;
    case QT_Q5_1: return amx_q5_1;
    case QT_Q8_0: return amx_q8_0;
    default: return quant_amx_kq_kernel(t); /* Q4_K, Q5_K, Q6_K, else NULL */
    }
}
