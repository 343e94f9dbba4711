/* quant_amx_kq_avx512.c - prefill of Q4_K and Q5_K on AMX-INT8 tiles: the
 * amx level's kernels for those types (quant.h). Q6_K runs on the avx512
 * kernels at the amx level too: with 16 tile products of K = 16 and 16
 * VPMULLD per super-block its AMX path was slower than the avx512
 * prefill's 16 rows in the lanes (640 x 2048, 512 tokens: 355 vs 385 G
 * int8 ops/s; 2048 x 768, 33 tokens: 250 vs 311).
 *
 * Why: in Gemma 3's pp512 the K-quant matmuls on the AVX-512 tiles took
 * about 31% of the time once the legacy formats ran on AMX. A TDPBSUD
 * here multiplies 16 tokens by 16 weight rows over one sub-block (32
 * elements, K = 32), giving every (token, row) pair that sub-block's exact
 * dot.
 *
 * Same bits as every other level (quant_avx512.c, "the K-quants'
 * level-independent float steps"): per pair and super-block b the
 * integers
 *     isum = sum_s sc_s dot_s
 *     im   = sum_s m_s bsum_s
 * are exact in int32 whatever the order (|isum| < 2^27, every partial
 * sum < 2^29: src/backend/README.md), and the float
 * steps are the scalar kernel's, in block order, product and sum
 * rounded apart: acc + (float)isum * (d_w * d_x), accm likewise with
 * dmin, out = acc - accm. The tests memcmp this level against scalar and
 * against decode (quant_kquant_same_bits_every_level).
 *
 * Layout: the result tile's rows are tokens and its 16 columns weight
 * rows (A = activations, signed; B = weights, unsigned: TDPBSUD), so a
 * result row is one token's 16 weight rows: the integer scaling and the
 * float steps run on 16 rows per register, with the rows' scales as
 * plain vectors, and a token's 16 results are one store. The activation
 * rows are A as they are (Q8_K keeps a super-block's quants contiguous:
 * a tile load with the row stride); only the weights are laid out, once
 * per 16 rows per call (ka_prep_w), and every token tile reuses them.
 *
 * Per call (n_tok >= KA_MIN_TOK; fewer tokens take the avx512 kernels),
 * per 16 weight rows: prepare them; per token tile of 16 (a last short
 * one copied into a zero-padded buffer, or of very few tokens left to
 * the avx512 tiles) and super-block: the sub-blocks' tile products (4
 * result tiles a batch) stored, issued before the previous super-block's
 * vector steps, then per token the integer scaling (VPMULLD by the rows'
 * scales; the min term by VPDPWSSD of the token's block sums against the
 * rows' int16 pairs) and the float step. Does not: decode. */
#include <immintrin.h>
#include <string.h>

#include "backend/amx_cfg.h"
#include "backend/quant_amx.h"
#include "backend/quant_impl.h"

#define KAMX __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,amx-tile,amx-int8")))
#define KINL static inline __attribute__((always_inline)) KAMX
#define UNROLL _Pragma("GCC unroll 16")

enum {
    KA_MIN_TOK = 16, /* below: avx512 (a token tile would be mostly padding) */
    KA_T = 16,       /* tokens per token tile (result tile rows) */
    KA_R = 16,       /* weight rows per weight tile (result tile columns) */
    KA_NS = 8,       /* sub-blocks per super-block: one tile product each */
    KA_KB = 32,      /* bytes of a sub-block: the tile products' K */
    /* A last token tile of fewer tokens runs on the avx512 kernels instead
     * (the same bits): padded to 16 it costs a whole tile product and 16
     * tokens' steps. Measured (1 thread, MoE expert shapes, n_tok 17-31):
     * Q4_K 768 x 2048 gains on AMX from a tail of 3 (n_tok 19: 234 vs 196
     * G ops/s). */
    KA_TAIL_MIN = 3,
};

/* Rows w[0 .. nr) (the last repeated up to 16) prepared, nb super-blocks
 * (quant_impl.h's KQ16 layout: its chunk vectors are the B operands). */
static void ka_prep_w(qtype t, const uint8_t *w, size_t wrb, int nr, int64_t nb, uint8_t *dst) {
    const uint8_t *rows[KA_R];
    for (int n = 0; n < KA_R; n++) rows[n] = w + (size_t)(n < nr ? n : nr - 1) * wrb;
    quant_avx512_kq_prep16(t, rows, nb, dst);
}

/* Tiles 0-3: results (16 tokens x 16 rows, int32); 4, 5: activations (16
 * tokens x 32 bytes); 6, 7: weights (8 rows x 64 bytes). */
static KAMX void ka_config(void) {
    const int kb = KA_KB;
    amx_cfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int i = 0; i < 8; i++) {
        c.colsb[i] = i == 4 || i == 5 ? kb : 64;
        c.rows[i] = i >= 6 ? kb / 4 : 16;
    }
    amx_cfg_load(&c);
}

/* Tile numbers are literals (the intrinsics paste them into the asm). */
#define KA_PRODUCT(ct, at, bt, s)                                                                                  \
    do {                                                                                                           \
        _tile_zero(ct);                                                                                            \
        _tile_loadd(at, xq + (s) * KA_KB, xs);                                                                     \
        _tile_loadd(bt, wb + (s) * KA_KB * 16, 64);                                                                \
        _tile_dpbsud(ct, at, bt);                                                                                  \
    } while (0)

/* The 8 sub-block products of one super-block and token tile, stored
 * to c + 256 s (token m's 16 rows at c + 256 s + 16 m). xq: the token
 * tile's quants of this super-block (rows xs bytes apart); wb: its
 * prepared B operands. */
static KAMX void ka_products(const uint8_t *xq, size_t xs, const uint8_t *wb, int32_t *c) {
    for (int s = 0; s < KA_NS; s += 4) {
        KA_PRODUCT(0, 4, 6, s);
        KA_PRODUCT(1, 5, 7, s + 1);
        KA_PRODUCT(2, 4, 6, s + 2);
        KA_PRODUCT(3, 5, 7, s + 3);
        _tile_stored(0, c + 256 * s, 64);
        _tile_stored(1, c + 256 * (s + 1), 64);
        _tile_stored(2, c + 256 * (s + 2), 64);
        _tile_stored(3, c + 256 * (s + 3), 64);
    }
}
#undef KA_PRODUCT

/* One super-block's steps for the 16 tokens of a tile (rows xs bytes
 * apart from x; super-block b of nb): per token the exact isum (and im)
 * of its 16 rows, then acc[m] (accm[m]) + (float)isum * (d_w * d_x). */
KINL void ka_steps(const int32_t *c, const uint8_t *p, const uint8_t *x, size_t xs, int64_t nb, int64_t b, float *acc,
                   float *accm) {
    const __m512i *scv = (const __m512i *)(const void *)(p + KQ16_SC), *mpv = (const __m512i *)(const void *)(p + KQ16_MP);
    const __m512 dw = _mm512_load_ps(p + KQ16_DW), dm = _mm512_load_ps(p + KQ16_DM);
    for (int m = 0; m < KA_T; m++) {
        const uint8_t *xm = x + (size_t)m * xs;
        const int32_t *bs = (const int32_t *)(const void *)(qak_bsums(xm, nb) + 16 * b); /* int16 pairs */
        __m512i ia = _mm512_setzero_si512(), im = _mm512_setzero_si512();
        UNROLL
        for (int i = 0; i < 8; i++) im = _mm512_dpwssd_epi32(im, _mm512_set1_epi32(bs[i]), _mm512_load_si512(mpv + i));
        UNROLL
        for (int s = 0; s < KA_NS; s++)
            ia = _mm512_add_epi32(ia, _mm512_mullo_epi32(_mm512_load_si512((const void *)(c + 256 * s + 16 * m)),
                                                         _mm512_load_si512(scv + s)));
        __m512 dx = _mm512_set1_ps(qak_d(xm)[b]);
        __m512 a = _mm512_load_ps(acc + 16 * m);
        _mm512_store_ps(acc + 16 * m, _mm512_add_ps(a, _mm512_mul_ps(_mm512_cvtepi32_ps(ia), _mm512_mul_ps(dw, dx))));
        __m512 am = _mm512_load_ps(accm + 16 * m);
        _mm512_store_ps(accm + 16 * m, _mm512_add_ps(am, _mm512_mul_ps(_mm512_cvtepi32_ps(im), _mm512_mul_ps(dm, dx))));
    }
}

/* One token tile (nt real tokens, rows xs bytes apart from x) over the
 * prepared rows wp (nr real): results to y + r (token m at y + m ldy). */
KINL void ka_tile(const uint8_t *wp, const uint8_t *x, size_t xs, int64_t nb, int nt, int nr, int32_t *c, float *y,
                  int64_t ldy) {
    _Alignas(64) float acc[KA_T * 16], accm[KA_T * 16];
    memset(acc, 0, sizeof acc);
    memset(accm, 0, sizeof accm);
    const uint8_t *xq = (const uint8_t *)qak_qs(x, nb);
    /* the next super-block's products are issued before this one's steps
     * (+3-5%) */
    ka_products(xq, xs, wp, c);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = wp + (size_t)b * KQ16_SB;
        if (b + 1 < nb) ka_products(xq + (b + 1) * QK_K, xs, p + KQ16_SB, c + ((b + 1) & 1) * 256 * KA_NS);
        ka_steps(c + (b & 1) * 256 * KA_NS, p, x, xs, nb, b, acc, accm);
    }
    const __mmask16 rows = (__mmask16)((1u << nr) - 1);
    for (int m = 0; m < nt; m++)
        _mm512_mask_storeu_ps(y + m * ldy, rows, _mm512_sub_ps(_mm512_load_ps(acc + 16 * m), _mm512_load_ps(accm + 16 * m)));
}

static KAMX void ka_gemm(qtype t, const void *w, size_t wrb, int64_t k, const void *xq, size_t xrb, int n_tok,
                         float *y, int64_t ldy, int r0, int r1) {
    const int64_t nb = k / QK_K;
    const size_t wb = (size_t)nb * KQ16_SB, cb = (size_t)KA_NS * 2048, tb = (size_t)KA_T * xrb;
    uint8_t *buf = quant_work(wb + cb + tb + 64);
    uint8_t *wp = buf, *tail = buf + wb + cb;
    int32_t *c = (int32_t *)(void *)(buf + wb);
    int nt_last = n_tok % KA_T;
    if (nt_last && nt_last < KA_TAIL_MIN) { /* a few tokens: the avx512 tiles (the same bits) */
        quant_avx512_kernel(t)(w, wrb, k, (const uint8_t *)xq + (size_t)(n_tok - nt_last) * xrb, xrb, nt_last,
                               y + (n_tok - nt_last) * ldy, ldy, r0, r1);
        n_tok -= nt_last;
        nt_last = 0;
    }
    if (nt_last) { /* the short last token tile, padded with zero rows */
        memset(tail, 0, tb);
        memcpy(tail, (const uint8_t *)xq + (size_t)(n_tok - nt_last) * xrb, (size_t)nt_last * xrb);
    }
    ka_config();
    for (int r = r0; r < r1; r += KA_R) {
        int nr = r1 - r < KA_R ? r1 - r : KA_R;
        ka_prep_w(t, (const uint8_t *)w + (size_t)r * wrb, wrb, nr, nb, wp);
        for (int t0 = 0; t0 < n_tok; t0 += KA_T) {
            int nt = n_tok - t0 < KA_T ? n_tok - t0 : KA_T;
            const uint8_t *x = nt < KA_T ? tail : (const uint8_t *)xq + (size_t)t0 * xrb;
            ka_tile(wp, x, xrb, nb, nt, nr, c, y + t0 * ldy + r, ldy);
        }
    }
    _tile_release();
}

#define KA_KERNEL(name, ty) QUANT_AMX_KERNEL(name, ty, ka_gemm, KA_MIN_TOK, INT64_MAX)
KA_KERNEL(ka_q4_k, QT_Q4_K)
KA_KERNEL(ka_q5_k, QT_Q5_K)

quant_gemm_fn quant_amx_kq_kernel(qtype t) {
    switch (t) {
    case QT_Q4_K: return ka_q4_k;
    case QT_Q5_K: return ka_q5_k;
    default: return NULL;
    }
}
