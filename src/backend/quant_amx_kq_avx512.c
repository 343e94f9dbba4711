/* quant_amx_kq_avx512.c - prefill of the K-quants (Q4_K, Q5_K, Q6_K) on
 * AMX-INT8 tiles: the amx level's kernels for those types (quant.h).
 *
 * Why: in Gemma 3's pp512 the K-quant matmuls on the AVX-512 tiles took
 * about 31% of the time once the legacy formats ran on AMX. A TDPBSUD
 * here multiplies 16 tokens by 16 weight rows over one sub-block (Q4_K,
 * Q5_K: 32 elements, K = 32) or one scale group (Q6_K: 16 elements,
 * K = 16), giving every (token, row) pair that sub-block's exact dot.
 *
 * Same bits as every other level (quant_avx512.c, "the K-quants'
 * level-independent float steps"): per pair and super-block b the
 * integers
 *     isum = sum_s sc_s dot_s            (Q6_K: sum_g sc_g (dot_g - 32 bsum_g))
 *     im   = sum_s m_s bsum_s            (Q4_K, Q5_K)
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
 * scales; the min and Q6_K offset terms by VPDPWSSD of the token's block
 * sums against the rows' int16 pairs) and the float step. Does not:
 * decode. */
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
    /* prepared bytes per super-block of 16 rows (ka_prep_w): */
    KA_B = 0,        /* B operands: 64 rows of 64 bytes (dword D of each row's 256 quants) */
    KA_SC = 4096,    /* the 8 or 16 scales, one int32 vector (16 rows) each */
    KA_MP = 5120,    /* 8 vectors of int16 pairs: (m_s, m_s), Q6_K (-32 sc_2i, -32 sc_2i+1) */
    KA_DW = 5632,    /* d of the 16 rows (floats) */
    KA_DM = 5696,    /* dmin */
    KA_SB = 5760,
};

/* Sub-blocks per super-block (one tile product each); a super-block's GGUF bytes. */
static int ka_ns(qtype t) { return t == QT_Q6_K ? 16 : 8; }
static int ka_by(qtype t) { return t == QT_Q4_K ? QB_Q4_K : t == QT_Q5_K ? QB_Q5_K : QB_Q6_K; }

/* A last token tile of fewer tokens runs on the avx512 tiles instead
 * (they give the same bits): padded to 16 it costs a whole tile product
 * and 16 tokens' steps. Measured (1 thread, MoE expert shapes, n_tok
 * 17-31): Q4_K 768 x 2048 gains on AMX from a tail of 3 (n_tok 19: 234
 * vs 196 G ops/s), Q6_K 2048 x 768 from 5-6 (n_tok 23: 177 vs 159). */
static int ka_tail_min(qtype t) { return t == QT_Q6_K ? 6 : 3; }

/* The 16 rows' scales as vectors over the rows (two 16 x 16 transposes
 * of the rows' int16 scales quant_avx512_kq_unpack gives): at KA_SC the
 * int32 scale of each sub-block (Q6_K: group), at KA_MP the int16 pairs
 * of the min term, (m_s, m_s), or Q6_K's offset, (-32 sc_2i, -32 sc_2i+1). */
KINL void ka_prep_scales(qtype t, const int16_t (*sc)[16], uint8_t *p) {
    __m512i v[16], u[16];
    UNROLL
    for (int n = 0; n < KA_R; n++) {
        __m256i s = _mm256_loadu_si256((const void *)sc[n]);
        v[n] = _mm512_cvtepi16_epi32(s);
        if (t == QT_Q6_K) {
            u[n] = _mm512_zextsi256_si512(_mm256_mullo_epi16(s, _mm256_set1_epi16(-32)));
        } else {
            __m128i m = _mm256_extracti128_si256(s, 1);
            u[n] = _mm512_zextsi256_si512(_mm256_set_m128i(_mm_unpackhi_epi16(m, m), _mm_unpacklo_epi16(m, m)));
        }
    }
    quant_tr16(v);
    quant_tr16(u);
    UNROLL
    for (int s = 0; s < 16; s++)
        if (s < ka_ns(t)) _mm512_store_si512((void *)(p + KA_SC + 64 * s), v[s]);
    UNROLL
    for (int i = 0; i < 8; i++) _mm512_store_si512((void *)(p + KA_MP + 64 * i), u[i]);
}

/* Rows w[0 .. nr) (the last repeated up to 16) prepared, nb super-blocks. */
static KAMX void ka_prep_w(qtype t, const uint8_t *w, size_t wrb, int nr, int64_t nb, uint8_t *dst) {
    const int by = ka_by(t);
    _Alignas(64) uint8_t q[KA_R][QK_K];
    int16_t sc[KA_R][16];
    float dd[KA_R][2];
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *p = dst + (size_t)b * KA_SB;
        for (int n = 0; n < KA_R; n++)
            quant_avx512_kq_unpack(t, w + (size_t)(n < nr ? n : nr - 1) * wrb + (size_t)b * by, q[n], sc[n], dd[n]);
        for (int c = 0; c < 4; c++) { /* B row D, column n: dword D of row n */
            __m512i r[16];
            UNROLL
            for (int n = 0; n < 16; n++) r[n] = _mm512_load_si512((const void *)(q[n] + 64 * c));
            quant_tr16(r);
            UNROLL
            for (int j = 0; j < 16; j++) _mm512_store_si512((void *)(p + KA_B + 64 * (16 * c + j)), r[j]);
        }
        ka_prep_scales(t, sc, p);
        float *dw = (float *)(void *)(p + KA_DW), *dm = (float *)(void *)(p + KA_DM);
        for (int n = 0; n < KA_R; n++) {
            dw[n] = dd[n][0];
            dm[n] = dd[n][1];
        }
    }
}

/* Tiles 0-3: results (16 tokens x 16 rows, int32); 4, 5: activations (16
 * tokens x kb bytes); 6, 7: weights (kb / 4 rows x 64 bytes). */
static KAMX void ka_config(int kb) {
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
        _tile_loadd(at, xq + (s) * kb, xs);                                                                        \
        _tile_loadd(bt, wb + (s) * kb * 16, 64);                                                                   \
        _tile_dpbsud(ct, at, bt);                                                                                  \
    } while (0)

/* The ns sub-block products of one super-block and token tile, stored
 * to c + 256 s (token m's 16 rows at c + 256 s + 16 m). xq: the token
 * tile's quants of this super-block (rows xs bytes apart); wb: its
 * prepared B operands. */
static KAMX void ka_products(const uint8_t *xq, size_t xs, const uint8_t *wb, int ns, int kb, int32_t *c) {
    for (int s = 0; s < ns; s += 4) {
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
KINL void ka_steps(qtype t, const int32_t *c, const uint8_t *p, const uint8_t *x, size_t xs, int64_t nb,
                   int64_t b, float *acc, float *accm) {
    const int ns = t == QT_Q6_K ? 16 : 8;
    const __m512i *scv = (const __m512i *)(const void *)(p + KA_SC), *mpv = (const __m512i *)(const void *)(p + KA_MP);
    const __m512 dw = _mm512_load_ps(p + KA_DW), dm = _mm512_load_ps(p + KA_DM);
    for (int m = 0; m < KA_T; m++) {
        const uint8_t *xm = x + (size_t)m * xs;
        const int32_t *bs = (const int32_t *)(const void *)(qak_bsums(xm, nb) + 16 * b); /* int16 pairs */
        __m512i ia = _mm512_setzero_si512(), im = _mm512_setzero_si512();
        UNROLL
        for (int i = 0; i < 8; i++) { /* Q6_K: -32 sum sc_g bsum_g into isum; else the mins */
            __m512i v = _mm512_dpwssd_epi32(t == QT_Q6_K ? ia : im, _mm512_set1_epi32(bs[i]), _mm512_load_si512(mpv + i));
            if (t == QT_Q6_K) ia = v;
            else im = v;
        }
        UNROLL
        for (int s = 0; s < ns; s++)
            ia = _mm512_add_epi32(ia, _mm512_mullo_epi32(_mm512_load_si512((const void *)(c + 256 * s + 16 * m)),
                                                         _mm512_load_si512(scv + s)));
        __m512 dx = _mm512_set1_ps(qak_d(xm)[b]);
        __m512 a = _mm512_load_ps(acc + 16 * m);
        _mm512_store_ps(acc + 16 * m, _mm512_add_ps(a, _mm512_mul_ps(_mm512_cvtepi32_ps(ia), _mm512_mul_ps(dw, dx))));
        if (t != QT_Q6_K) {
            __m512 am = _mm512_load_ps(accm + 16 * m);
            _mm512_store_ps(accm + 16 * m,
                            _mm512_add_ps(am, _mm512_mul_ps(_mm512_cvtepi32_ps(im), _mm512_mul_ps(dm, dx))));
        }
    }
}

/* One token tile (nt real tokens, rows xs bytes apart from x) over the
 * prepared rows wp (nr real): results to y + r (token m at y + m ldy). */
KINL void ka_tile(qtype t, const uint8_t *wp, const uint8_t *x, size_t xs, int64_t nb, int nt, int nr,
                  int32_t *c, float *y, int64_t ldy) {
    const int ns = t == QT_Q6_K ? 16 : 8, kb = QK_K / ns;
    _Alignas(64) float acc[KA_T * 16], accm[KA_T * 16];
    memset(acc, 0, sizeof acc);
    memset(accm, 0, sizeof accm);
    const uint8_t *xq = (const uint8_t *)qak_qs(x, nb);
    /* Q4_K, Q5_K: the next super-block's products are issued before this
     * one's steps (+3-5%). Q6_K's double buffer (2 x 16 KiB) crowds L1,
     * where tile stores are cheap: one buffer is 4-6% faster there. */
    const int dbl = ns == 8;
    ka_products(xq, xs, wp + KA_B, ns, kb, c);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = wp + (size_t)b * KA_SB;
        int32_t *cb = dbl ? c + (b & 1) * 256 * ns : c;
        if (!dbl && b > 0) ka_products(xq + b * QK_K, xs, p + KA_B, ns, kb, c);
        if (dbl && b + 1 < nb) ka_products(xq + (b + 1) * QK_K, xs, p + KA_SB + KA_B, ns, kb, c + ((b + 1) & 1) * 256 * ns);
        ka_steps(t, cb, p, x, xs, nb, b, acc, accm);
    }
    const __mmask16 rows = (__mmask16)((1u << nr) - 1);
    for (int m = 0; m < nt; m++) {
        __m512 v = _mm512_load_ps(acc + 16 * m);
        if (t != QT_Q6_K) v = _mm512_sub_ps(v, _mm512_load_ps(accm + 16 * m));
        _mm512_mask_storeu_ps(y + m * ldy, rows, v);
    }
}

static KAMX void ka_gemm(qtype t, const void *w, size_t wrb, int64_t k, const void *xq, size_t xrb, int n_tok,
                         float *y, int64_t ldy, int r0, int r1) {
    const int64_t nb = k / QK_K;
    const int ns = ka_ns(t);
    const size_t wb = (size_t)nb * KA_SB, cb = (size_t)ns * 2048, tb = (size_t)KA_T * xrb;
    uint8_t *buf = quant_work(wb + cb + tb + 64);
    uint8_t *wp = buf, *tail = buf + wb + cb;
    int32_t *c = (int32_t *)(void *)(buf + wb);
    int nt_last = n_tok % KA_T;
    if (nt_last && nt_last < ka_tail_min(t)) { /* a few tokens: the avx512 tiles (the same bits) */
        quant_avx512_kernel(t)(w, wrb, k, (const uint8_t *)xq + (size_t)(n_tok - nt_last) * xrb, xrb, nt_last,
                               y + (n_tok - nt_last) * ldy, ldy, r0, r1);
        n_tok -= nt_last;
        nt_last = 0;
    }
    if (nt_last) { /* the short last token tile, padded with zero rows */
        memset(tail, 0, tb);
        memcpy(tail, (const uint8_t *)xq + (size_t)(n_tok - nt_last) * xrb, (size_t)nt_last * xrb);
    }
    ka_config(QK_K / ns);
    for (int r = r0; r < r1; r += KA_R) {
        int nr = r1 - r < KA_R ? r1 - r : KA_R;
        ka_prep_w(t, (const uint8_t *)w + (size_t)r * wrb, wrb, nr, nb, wp);
        for (int t0 = 0; t0 < n_tok; t0 += KA_T) {
            int nt = n_tok - t0 < KA_T ? n_tok - t0 : KA_T;
            const uint8_t *x = nt < KA_T ? tail : (const uint8_t *)xq + (size_t)t0 * xrb;
            if (t == QT_Q4_K) ka_tile(QT_Q4_K, wp, x, xrb, nb, nt, nr, c, y + t0 * ldy + r, ldy);
            else if (t == QT_Q5_K) ka_tile(QT_Q5_K, wp, x, xrb, nb, nt, nr, c, y + t0 * ldy + r, ldy);
            else ka_tile(QT_Q6_K, wp, x, xrb, nb, nt, nr, c, y + t0 * ldy + r, ldy);
        }
    }
    _tile_release();
}

#define KA_KERNEL(name, ty) QUANT_AMX_KERNEL(name, ty, ka_gemm, KA_MIN_TOK, INT64_MAX)
KA_KERNEL(ka_q4_k, QT_Q4_K)
KA_KERNEL(ka_q5_k, QT_Q5_K)
KA_KERNEL(ka_q6_k, QT_Q6_K)

quant_gemm_fn quant_amx_kq_kernel(qtype t) {
    switch (t) {
    case QT_Q4_K: return ka_q4_k;
    case QT_Q5_K: return ka_q5_k;
    case QT_Q6_K: return ka_q6_k;
    default: return NULL;
    }
}
