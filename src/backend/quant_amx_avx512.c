/* quant_amx_avx512.c - prefill of the legacy formats (Q4_0, Q4_1, Q5_0,
 * Q5_1, Q8_0) on AMX-INT8 tiles: the gemm level QUANT_AMX (quant.h).
 *
 * Why: the AVX-512 tiles (quant_avx512.c) run at about half the VPDPBUSD
 * peak, and a TDPBUSD does 16 x 16 x 64 multiply-adds in one
 * instruction. Here it takes 16 weight rows x 16 tokens over one block
 * (32 elements, K = 32): the exact integer dot product of every (row,
 * token) pair and block, the same integers VPDPBUSD sums in a lane.
 *
 * Same bits as the avx512 level, by construction: per (row, token) pair
 * the float steps are lg_tile's, op for op. There a 32-bit lane p of a
 * group of 16 blocks holds block 16G + qa8_lane(p) and runs
 *     acc_p  = fma(float(isum), d_w * d_x, acc_p)
 *     accm_p = fma(m_w, s_x, accm_p)           (G = 0, 1, ... in order)
 * from 0, then out = lg_hsum(acc) + lg_hsum(accm), lg_hsum being the
 * fixed tree ((a0 + a8) + (a4 + a12)) + ((a2 + a10) + (a6 + a14)) + ...
 * (quant_mx_hsum16). Here the lanes are 16 tokens of one row instead, and
 * each "block lane" p is a register running the same chain; the tree is
 * the same adds between registers. A lane whose block is past the row's
 * end adds fma(0, 0 * 0, acc) there: acc exactly (acc is never -0), so it
 * is skipped here. The tests memcmp this level against avx512 and against
 * decode (quant_gemm_amx_same_bits); nothing in the numerics id changes.
 *
 * Per call (n_tok >= AMX_MIN_TOK; fewer tokens take the avx512 kernels):
 *   1. every token tile of 16 is laid out for TDPBUSD's B operand, per
 *      block 8 rows of 64 bytes (row v: elements 4v..4v+3 of the 16
 *      tokens), plus the 16 tokens' d_x and s_x per block: a 16 x 16 dword
 *      transpose of each activation group's chunk (amx_prep_x);
 *   2. per 16 rows, each row is decoded once to 32 unsigned bytes per
 *      block in element order (Q8_0: w + 128) and its d_w, m_w as floats
 *      (amx_prep_w; m_w is lg_scales': -8d, -16d, -128d or the stored min);
 *   3. per token tile: one TDPBUSD per block into a zeroed result tile
 *      (batches of 4 on tiles 0-3, issued between the previous token
 *      tile's rows and stored one row later, amx_stream), then the float
 *      chains per row, and a 16 x 16 transpose so each token's 16 results
 *      are one contiguous store.
 * Does not: K-quants (quant_amx_kq_avx512.c), MXFP4 (avx512 kernels), decode. */
#include <immintrin.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend/amx_cfg.h"
#include "backend/quant_amx.h"
#include "backend/quant_impl.h"
#include "base/mem.h"

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
    amx_tr16(r);
    UNROLL
    for (int p = 0; p < 16; p++)
        if (g0 + qa8_lane(p) < nb) _mm512_store_si512((void *)(dst + (size_t)(g0 + qa8_lane(p)) * stride), r[p]);
}

/* Token tile of nt tokens (rows at x[n]) as B operands: xb[b] 8 rows of
 * 64 bytes, xd[b] and xs[b] 16 floats (AMX_XB + 128 bytes per block). */
static AMX void amx_prep_x(const uint8_t *const *x, int nt, int64_t nb, uint8_t *dst) {
    uint8_t *xd = dst + (size_t)nb * AMX_XB, *xs = xd + (size_t)nb * 64;
    const size_t qs = (size_t)8 * qa8_nbp(nb), so = (size_t)4 * qa8_nbp(nb);
    for (int64_t g0 = 0; g0 < nb; g0 += QA8_GROUP) {
        for (int v = 0; v < 8; v++)
            amx_tr_store(x, nt, qs + (size_t)g0 * QK + 64 * v, dst + 64 * v, AMX_XB, g0, nb);
        amx_tr_store(x, nt, 4 * (size_t)g0, xd, 64, g0, nb);
        amx_tr_store(x, nt, so + 4 * (size_t)g0, xs, 64, g0, nb);
    }
}

/* One weight row of a 16-row tile: block b's 32 unsigned quants in
 * element order at q + 512 b (the A operand of block b is then 512
 * contiguous bytes), d[b] and m[b] as floats (the values lg_scales gives). */
static AMX void amx_prep_w(qtype t, const uint8_t *w, int64_t nb, uint8_t *q, float *d, float *m) {
    const int by = amx_blk(t);
    const __m128i m4 = _mm_set1_epi8(15);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = w + b * by;
        __m256i u;
        d[b] = _cvtsh_ss(quant_rd16(p));
        if (t == QT_Q8_0) {
            u = _mm256_xor_si256(_mm256_loadu_si256((const void *)(p + 2)), _mm256_set1_epi8((char)0x80));
            m[b] = d[b] * -128.0f;
        } else {
            int qo = t == QT_Q4_0 ? 2 : t == QT_Q4_1 ? 4 : t == QT_Q5_0 ? 6 : 8;
            __m128i v = _mm_loadu_si128((const void *)(p + qo));
            u = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m4), _mm_and_si128(v, m4));
            if (t == QT_Q5_0 || t == QT_Q5_1) /* bit j of qh: 16 in element j */
                u = _mm256_mask_add_epi8(u, (__mmask32)quant_rd32(p + (t == QT_Q5_0 ? 2 : 4)), u,
                                         _mm256_set1_epi8(16));
            m[b] = t == QT_Q4_1 || t == QT_Q5_1 ? _cvtsh_ss(quant_rd16(p + 2))
                 : d[b] * (t == QT_Q4_0 ? -8.0f : -16.0f);
        }
        _mm256_store_si256((void *)(q + AMX_R * 32 * b), u);
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

/* The tile products of one token tile, issued in batches of up to 4
 * blocks between the float steps of the previous tile (amx_tile), so the
 * tile unit and the vector units work at once. A batch: per block, a
 * zeroed result tile (0-3) += 16 prepared rows x the token tile's B
 * operand; its tiles are stored (to c + 256 b) only when the next batch
 * is issued, a row's float steps later: a vector load after a tile store
 * waits until the store has executed, and a store right after its
 * product would wait for the product. */
typedef struct {
    const uint8_t *w, *xb; /* prepared quants (amx_prep_w), token tile (amx_prep_x) */
    int32_t *c;
    int b, nb, pb, pn; /* next block; the pending batch: first block, count */
} amx_stream;

/* Stores the pending batch. */
INL void amx_store(amx_stream *st) {
    int32_t *c = st->c + 256 * st->pb;
    if (st->pn > 0) _tile_stored(0, c, 64);
    if (st->pn > 1) _tile_stored(1, c + 256, 64);
    if (st->pn > 2) _tile_stored(2, c + 512, 64);
    if (st->pn > 3) _tile_stored(3, c + 768, 64);
    st->pn = 0;
}

/* Tile numbers are literals (the intrinsics paste them into the asm). */
#define AMX_BLOCK(ct, at, xt, i)                                                                                   \
    do {                                                                                                           \
        _tile_zero(ct);                                                                                            \
        _tile_loadd(at, st->w + AMX_R * 32 * (b + i), 32);                                                         \
        _tile_loadd(xt, st->xb + (size_t)(b + i) * AMX_XB, 64);                                                    \
        _tile_dpbusd(ct, at, xt);                                                                                  \
    } while (0)

/* Stores the pending batch and issues the next one (if blocks remain). */
INL void amx_batch(amx_stream *st) {
    amx_store(st);
    const int b = st->b, n = st->nb - b < 4 ? st->nb - b : 4;
    if (n > 0) AMX_BLOCK(0, 4, 6, 0);
    if (n > 1) AMX_BLOCK(1, 5, 7, 1);
    if (n > 2) AMX_BLOCK(2, 4, 6, 2);
    if (n > 3) AMX_BLOCK(3, 5, 7, 3);
    st->pb = b, st->pn = n, st->b = b + n;
}
#undef AMX_BLOCK

/* Issues batches until `to` blocks are issued. */
INL void amx_issue(amx_stream *st, int to) {
    while (st->b < to) amx_batch(st);
}

/* Block lane p's chains for one row (sums c[b] at c + 256 b, row
 * scales dw, mw) over the token tile's xd, xs: lg_tile's lane p. */
INL void amx_lane(const int32_t *c, const float *dw, const float *mw, const float *xd, const float *xs,
                  int64_t nb, int p, __m512 *a, __m512 *am) {
    __m512 s = _mm512_setzero_ps(), sm = _mm512_setzero_ps();
    for (int64_t b = qa8_lane(p); b < nb; b += QA8_GROUP) {
        __m512 dd = _mm512_mul_ps(_mm512_set1_ps(dw[b]), _mm512_load_ps(xd + 16 * b));
        s = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512((const void *)(c + 256 * b))), dd, s);
        sm = _mm512_fmadd_ps(_mm512_set1_ps(mw[b]), _mm512_load_ps(xs + 16 * b), sm);
    }
    *a = s;
    *am = sm;
}

/* Lanes p and p + 8 added (lg_hsum's first step), for acc and accm. */
INL void amx_h(const int32_t *c, const float *dw, const float *mw, const float *xd, const float *xs,
               int64_t nb, int p, __m512 *h, __m512 *hm) {
    __m512 a0, m0, a1, m1;
    amx_lane(c, dw, mw, xd, xs, nb, p, &a0, &m0);
    amx_lane(c, dw, mw, xd, xs, nb, p + 8, &a1, &m1);
    *h = _mm512_add_ps(a1, a0);
    *hm = _mm512_add_ps(m1, m0);
}

/* One row's 16 results: the tree of lg_hsum on acc and on accm, added. */
INL __m512 amx_row(const int32_t *c, const float *dw, const float *mw, const float *xd, const float *xs,
                   int64_t nb) {
    __m512 h[8], hm[8], q[4], qm[4];
    UNROLL
    for (int i = 0; i < 8; i++) amx_h(c, dw, mw, xd, xs, nb, i, h + i, hm + i);
    UNROLL
    for (int j = 0; j < 4; j++) q[j] = _mm512_add_ps(h[j + 4], h[j]), qm[j] = _mm512_add_ps(hm[j + 4], hm[j]);
    __m512 r = _mm512_add_ps(_mm512_add_ps(q[0], q[2]), _mm512_add_ps(q[1], q[3]));
    __m512 rm = _mm512_add_ps(_mm512_add_ps(qm[0], qm[2]), _mm512_add_ps(qm[1], qm[3]));
    return _mm512_add_ps(r, rm);
}

/* The float steps of 16 rows (the first nr real) over the token tile xt
 * (nt tokens) whose block sums are at c, then a 16 x 16 transpose so each
 * token's results are one store; meanwhile `next`'s tile products are
 * issued, a few blocks per row. */
static AMX void amx_tile(const float *wd, int64_t nb, const uint8_t *xt, const int32_t *c, amx_stream *next,
                         int nr, int nt, float *y, int64_t ldy) {
    const float *xd = (const float *)(const void *)(xt + (size_t)nb * AMX_XB), *xs = xd + 16 * nb;
    __m512i res[16];
    for (int m = 0; m < 16; m++) {
        if (next) amx_issue(next, (int)((m + 1) * nb / 14 < nb ? (m + 1) * nb / 14 : nb));
        res[m] = _mm512_castps_si512(amx_row(c + 16 * m, wd + m * nb, wd + (AMX_R + m) * nb, xd, xs, nb));
    }
    if (next) amx_store(next);
    amx_tr16(res);
    const __mmask16 rows = (__mmask16)((1u << nr) - 1);
    for (int n = 0; n < nt; n++) _mm512_mask_storeu_ps(y + n * ldy, rows, _mm512_castsi512_ps(res[n]));
}

/* A per-thread work buffer kept across calls (freed when the thread
 * ends): a fresh ~0.5 MiB malloc per call came from new pages each time
 * (glibc trims the heap top on free), and clearing them was 3% of the
 * kernel's time. */
typedef struct {
    uint8_t *p;
    size_t cap;
} amx_buf;
static pthread_key_t amx_buf_key;
static pthread_once_t amx_buf_once = PTHREAD_ONCE_INIT;

static void amx_buf_free(void *b) {
    free(((amx_buf *)b)->p);
    free(b);
}
static void amx_buf_init(void) { pthread_key_create(&amx_buf_key, amx_buf_free); }

static uint8_t *amx_work(size_t n) {
    pthread_once(&amx_buf_once, amx_buf_init);
    amx_buf *b = pthread_getspecific(amx_buf_key);
    if (!b) {
        b = xcalloc(1, sizeof *b);
        pthread_setspecific(amx_buf_key, b);
    }
    if (b->cap < n) {
        free(b->p);
        b->p = xaligned(n);
        b->cap = n;
    }
    return b->p;
}

uint8_t *quant_amx_work(size_t n) { return amx_work(n); }

static AMX void amx_gemm(qtype t, const void *w, size_t wrb, int64_t k, const void *xq, size_t xrb, int n_tok,
                         float *y, int64_t ldy, int r0, int r1) {
    const int64_t nb = k / QK;
    const int ntt = (n_tok + AMX_T - 1) / AMX_T;
    const size_t xtb = (size_t)nb * (AMX_XB + 128), wtb = (size_t)AMX_R * nb * AMX_WB;
    uint8_t *buf = amx_work((size_t)ntt * xtb + wtb + (size_t)nb * 2048);
    uint8_t *xb = buf, *wp = buf + (size_t)ntt * xtb; /* wp: quants, then d and m of 16 rows */
    float *wd = (float *)(void *)(wp + (size_t)AMX_R * 32 * nb);
    int32_t *c[2] = {(int32_t *)(void *)(wp + wtb), (int32_t *)(void *)(wp + wtb) + 256 * nb};
    for (int tt = 0; tt < ntt; tt++) {
        const uint8_t *xr[AMX_T];
        int nt = n_tok - tt * AMX_T < AMX_T ? n_tok - tt * AMX_T : AMX_T;
        for (int n = 0; n < nt; n++) xr[n] = (const uint8_t *)xq + (size_t)(tt * AMX_T + n) * xrb;
        amx_prep_x(xr, nt, nb, xb + (size_t)tt * xtb);
    }
    amx_config();
    for (int r = r0; r < r1; r += AMX_R) {
        int nr = r1 - r < AMX_R ? r1 - r : AMX_R;
        for (int m = 0; m < AMX_R; m++) /* rows past r1: the last one again, results dropped */
            amx_prep_w(t, (const uint8_t *)w + (size_t)(r + (m < nr ? m : nr - 1)) * wrb, nb, wp + 32 * m,
                       wd + m * nb, wd + (AMX_R + m) * nb);
        /* the next 16 rows' GGUF bytes arrive while these run (their
         * decode waited on memory: 4% of SmolLM2's prefill) */
        const char *nw = (const char *)w + (size_t)(r + AMX_R) * wrb;
        for (size_t o = 0; r + AMX_R < r1 && o < (size_t)(r1 - r - AMX_R < AMX_R ? r1 - r - AMX_R : AMX_R) * wrb; o += 64)
            _mm_prefetch(nw + o, _MM_HINT_T1);
        amx_stream st = {wp, xb, c[0], 0, (int)nb, 0, 0};
        amx_issue(&st, (int)nb);
        amx_store(&st);
        for (int tt = 0; tt < ntt; tt++) {
            int nt = n_tok - tt * AMX_T < AMX_T ? n_tok - tt * AMX_T : AMX_T;
            amx_stream nx = {wp, xb + (size_t)(tt + 1) * xtb, c[(tt + 1) & 1], 0, (int)nb, 0, 0};
            amx_tile(wd, nb, xb + (size_t)tt * xtb, c[tt & 1], tt + 1 < ntt ? &nx : NULL, nr, nt,
                     y + (size_t)tt * AMX_T * ldy + r, ldy);
        }
    }
    _tile_release();
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
