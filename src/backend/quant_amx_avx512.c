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
 *   2. rows in chunks of ~256 KiB prepared (L2): each row decoded once to
 *      32 unsigned bytes per block in element order (Q8_0: w + 128) and
 *      its d_w, m_w as floats (amx_prep_w; m_w is lg_scales': -8d, -16d,
 *      -128d or the stored min);
 *   3. per chunk, token tiles outer and the chunk's 16-row tiles inner
 *      (each token's results are then written in runs along its row of
 *      y, not as a 64-byte strip down 512 rows), per (row tile, token
 *      tile) pair: one TDPBUSD per block into a zeroed result tile (tiles
 *      0-3, amx_stream) stored to a small L1 buffer, then the float chains
 *      of 4 rows at a time (amx_lanes: one loop per block lane for the 4
 *      rows; lg_hsum's tree depth first), and a 16 x 16 transpose so each
 *      token's 16 results are one store. Pairs of up to AMX_WHOLE blocks
 *      do all products, then all float steps (amx_pair_whole); longer
 *      rows go in 4 phases, the blocks of the tree's q_j each
 *      (amx_pair), so the sums buffer stays 4 KiB per group.
 * Why serial: on this CPU a vector load after a tile store waits for it
 * (and the tile unit's earlier work), so the products and the float steps
 * do not overlap however they are interleaved; measured, every
 * interleaving was slower than bursts, and a double buffer of a pair's
 * sums (2 x nb KiB) left L1, where tile stores cost ~4x.
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
    AMX_WCHUNK = 256 << 10, /* prepared weight bytes of a row chunk (L2) */
    AMX_WHOLE = 24,         /* up to this many blocks a pair's sums are kept whole (amx_pair_whole) */
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
 * contiguous bytes), d and m as floats (the values lg_scales gives) at
 * d[32 b] and m[32 b] (the tile's 16 rows' d, then their m, per block). */
static AMX void amx_prep_w(qtype t, const uint8_t *w, int64_t nb, uint8_t *q, float *d, float *m) {
    const int by = amx_blk(t);
    const __m128i m4 = _mm_set1_epi8(15);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = w + b * by;
        __m256i u;
        const float db = _cvtsh_ss(quant_rd16(p));
        d[2 * AMX_R * b] = db;
        if (t == QT_Q8_0) {
            u = _mm256_xor_si256(_mm256_loadu_si256((const void *)(p + 2)), _mm256_set1_epi8((char)0x80));
            m[2 * AMX_R * b] = db * -128.0f;
        } else {
            int qo = t == QT_Q4_0 ? 2 : t == QT_Q4_1 ? 4 : t == QT_Q5_0 ? 6 : 8;
            __m128i v = _mm_loadu_si128((const void *)(p + qo));
            u = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m4), _mm_and_si128(v, m4));
            if (t == QT_Q5_0 || t == QT_Q5_1) /* bit j of qh: 16 in element j */
                u = _mm256_mask_add_epi8(u, (__mmask32)quant_rd32(p + (t == QT_Q5_0 ? 2 : 4)), u,
                                         _mm256_set1_epi8(16));
            m[2 * AMX_R * b] = t == QT_Q4_1 || t == QT_Q5_1 ? _cvtsh_ss(quant_rd16(p + 2))
                             : db * (t == QT_Q4_0 ? -8.0f : -16.0f);
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

/* The tile products of one phase j (0-3) of a (row tile, token tile)
 * pair: the blocks 16 G + 4 j + i (i < 4) of every group G, the ones whose
 * sums lg_hsum's q_j needs (lanes j, j + 4, j + 8, j + 12). Per block a
 * zeroed result tile (0-3) += 16 prepared rows x the token tile's B
 * operand, its 1 KiB of sums stored to c + gs G + 256 i (gs = 1024: a
 * phase's own buffer; gs = 4096 and c at 1024 j: a whole pair's, block b
 * at 256 b). One batch per group; a batch is stored when the next is issued, or by
 * amx_finish (a store right after its product waits for it). */
typedef struct {
    const uint8_t *w, *xb; /* prepared quants (amx_prep_w), token tile (amx_prep_x) */
    int32_t *c;
    int j, g, nb, gs; /* phase, next group, blocks; slot stride of a group (int32) */
    int pn;           /* the pending batch's count */
    int32_t *pc;      /* and its slots */
} amx_stream;

/* Stores the pending batch. */
INL void amx_store(amx_stream *st) {
    int32_t *c = st->pc;
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

/* Issues the next group's batch (storing the pending one first) and
 * returns 1, or 0 when the phase has no blocks left. */
INL int amx_batch(amx_stream *st) {
    const int b = 16 * st->g + 4 * st->j, n = st->nb - b < 4 ? st->nb - b : 4;
    if (n <= 0) return 0;
    amx_store(st);
    if (n > 0) AMX_BLOCK(0, 4, 6, 0);
    if (n > 1) AMX_BLOCK(1, 5, 7, 1);
    if (n > 2) AMX_BLOCK(2, 4, 6, 2);
    if (n > 3) AMX_BLOCK(3, 5, 7, 3);
    st->pc = st->c + st->gs * st->g++, st->pn = n;
    return 1;
}
#undef AMX_BLOCK

/* Issues the rest of the phase and stores it all. */
static AMX void amx_finish(amx_stream *st) {
    while (amx_batch(st)) {
    }
    amx_store(st);
}

/* All 4 phases of a pair, block b's sums at c + 256 b (the batches flow
 * from one phase into the next). */
static AMX void amx_products(const uint8_t *wp, const uint8_t *xt, int32_t *c, int nb) {
    amx_stream st = {wp, xt, c, 0, 0, nb, 4096, 0, NULL};
    for (int j = 0; j < 4; j++) {
        st.c = c + 1024 * j, st.j = j, st.g = 0;
        while (amx_batch(&st)) {
        }
    }
    amx_store(&st);
}

enum { AMX_RP = 4 }; /* rows whose chains run side by side (~7 registers each) */

/* Block lane p's chains for AMX_RP rows (sums of row m at c + 16 m +
 * 256 (b % 4) + gs (b / 16): amx_stream's slots; d_w, m_w at w[m + 32 b], w[16 + m + 32 b]) over the token tile's d_x,
 * s_x (x[32 b], x[16 + 32 b]): lg_tile's lane p, row by row. The rows
 * share the loads of d_x and s_x and the loop; one row per loop was
 * ~16 instructions per row and block for 4 vector operations. */
INL void amx_lanes(const int32_t *c, int gs, const float *w, const float *x, int64_t nb, int p, __m512 *a,
                   __m512 *am) {
    __m512 s[AMX_RP], sm[AMX_RP];
    UNROLL
    for (int r = 0; r < AMX_RP; r++) s[r] = _mm512_setzero_ps(), sm[r] = _mm512_setzero_ps();
    for (int64_t b = qa8_lane(p); b < nb; b += QA8_GROUP) {
        const __m512 xd = _mm512_load_ps(x + 32 * b), xs = _mm512_load_ps(x + 32 * b + 16);
        UNROLL
        for (int r = 0; r < AMX_RP; r++) {
            __m512 dd = _mm512_mul_ps(_mm512_set1_ps(w[r + 32 * b]), xd);
            const int32_t *cb = c + 256 * (b & 3) + gs * (b >> 4) + 16 * r; /* block b's sums */
            s[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512((const void *)cb)), dd, s[r]);
            sm[r] = _mm512_fmadd_ps(_mm512_set1_ps(w[16 + r + 32 * b]), xs, sm[r]);
        }
    }
    UNROLL
    for (int r = 0; r < AMX_RP; r++) a[r] = s[r], am[r] = sm[r];
}

/* o = a + b and om = am + bm for AMX_RP rows: one step of lg_hsum's tree
 * on acc and on accm (operands in lg_hsum's order). */
INL void amx_add(const __m512 *a, const __m512 *am, const __m512 *b, const __m512 *bm, __m512 *o, __m512 *om) {
    UNROLL
    for (int r = 0; r < AMX_RP; r++) o[r] = _mm512_add_ps(a[r], b[r]), om[r] = _mm512_add_ps(am[r], bm[r]);
}

/* Lanes p and p + 8 added (lg_hsum's first step), for acc and accm. */
INL void amx_h(const int32_t *c, int gs, const float *w, const float *x, int64_t nb, int p, __m512 *h, __m512 *hm) {
    __m512 a0[AMX_RP], m0[AMX_RP], a1[AMX_RP], m1[AMX_RP];
    amx_lanes(c, gs, w, x, nb, p, a0, m0);
    amx_lanes(c, gs, w, x, nb, p + 8, a1, m1);
    amx_add(a1, m1, a0, m0, h, hm);
}

/* q_j = h_{j+4} + h_j of lg_hsum's tree, for acc and accm. */
INL void amx_q(const int32_t *c, int gs, const float *w, const float *x, int64_t nb, int j, __m512 *q, __m512 *qm) {
    __m512 h0[AMX_RP], hm0[AMX_RP], h4[AMX_RP], hm4[AMX_RP];
    amx_h(c, gs, w, x, nb, j, h0, hm0);
    amx_h(c, gs, w, x, nb, j + 4, h4, hm4);
    amx_add(h4, hm4, h0, hm0, q, qm);
}

/* (q_j + q_{j+2}) of the tree, for acc and accm (block b's sums at c + 256 b). */
INL void amx_qq(const int32_t *c, const float *w, const float *x, int64_t nb, int j, __m512 *o, __m512 *om) {
    __m512 q0[AMX_RP], qm0[AMX_RP], q2[AMX_RP], qm2[AMX_RP];
    amx_q(c + 1024 * j, 4096, w, x, nb, j, q0, qm0);
    amx_q(c + 1024 * (j + 2), 4096, w, x, nb, j + 2, q2, qm2);
    amx_add(q0, qm0, q2, qm2, o, om);
}

/* AMX_RP rows' 16 results each: lg_hsum's tree on acc and on accm, added,
 * evaluated depth first so only ~3 partial sums per chain are live. */
INL void amx_rows(const int32_t *c, const float *w, const float *x, int64_t nb, __m512 *out) {
    __m512 r02[AMX_RP], m02[AMX_RP], r13[AMX_RP], m13[AMX_RP];
    amx_qq(c, w, x, nb, 0, r02, m02);
    amx_qq(c, w, x, nb, 1, r13, m13);
    UNROLL
    for (int r = 0; r < AMX_RP; r++)
        out[r] = _mm512_add_ps(_mm512_add_ps(r02[r], r13[r]), _mm512_add_ps(m02[r], m13[r]));
}

/* The 16 rows' results res (the first nr real) to y, nt tokens: a 16 x 16
 * transpose, then per token one store of its 16 results. */
INL void amx_out(__m512 *res, int nr, int nt, float *y, int64_t ldy) {
    amx_tr16((__m512i *)(void *)res);
    const __mmask16 rows = (__mmask16)((1u << nr) - 1);
    for (int n = 0; n < nt; n++) _mm512_mask_storeu_ps(y + n * ldy, rows, res[n]);
}

/* A pair whose sums fit L1 whole (nb <= AMX_WHOLE): all its products
 * (phase j's at c + j ps), then the float steps, 4 rows at a time with
 * the whole tree in registers. */
static AMX void amx_pair_whole(const uint8_t *wp, int64_t nb, const uint8_t *xt, int32_t *c, int nr, int nt,
                               float *y, int64_t ldy) {
    const float *wd = (const float *)(const void *)(wp + (size_t)AMX_R * 32 * nb);
    const float *x = (const float *)(const void *)(xt + (size_t)nb * AMX_XB);
    __m512 res[16];
    amx_products(wp, xt, c, (int)nb);
    for (int m = 0; m < 16; m += AMX_RP) amx_rows(c + 16 * m, wd + m, x, nb, res + m);
    amx_out(res, nr, nt, y, ldy);
}

/* One pair: per phase j, q_j of the 16 rows' trees (amx_q, 4 rows at a
 * time) from the phase's sums in c, kept in qs; the products of the
 * phase after (phase j + 1, or phase 0 of the next pair nwp, nxt, which
 * the next call finds in c) are issued around them, into the same
 * buffer: its first batch before (its stores come after the float
 * steps), the rest after. One buffer, not two: +10-20% (two left L1 at
 * k >= 1536); spreading the batches over the 4-row steps: -5-7% (a
 * vector load after a tile store waits for it). Then the rest of the
 * tree, a 16 x 16 transpose and per token one store of its 16 results
 * (the first nr real, nt tokens). */
static AMX void amx_pair(const uint8_t *wp, int64_t nb, const uint8_t *xt, const uint8_t *nwp, const uint8_t *nxt,
                         int32_t *c, int nr, int nt, float *y, int64_t ldy) {
    const float *wd = (const float *)(const void *)(wp + (size_t)AMX_R * 32 * nb);
    const float *x = (const float *)(const void *)(xt + (size_t)nb * AMX_XB);
    __m512 qs[4][AMX_R], qms[4][AMX_R], res[16];
    for (int j = 0; j < 4; j++) {
        amx_stream nx = {j < 3 ? wp : nwp, j < 3 ? xt : nxt, c, (j + 1) & 3, 0, (int)nb, 1024, 0, NULL};
        const int more = j < 3 || nwp;
        if (more) amx_batch(&nx);
        for (int m = 0; m < 16; m += AMX_RP) amx_q(c + 16 * m, 1024, wd + m, x, nb, j, qs[j] + m, qms[j] + m);
        if (more) amx_finish(&nx);
    }
    UNROLL
    for (int m = 0; m < 16; m++) /* lg_hsum's (q0 + q2) + (q1 + q3), for acc and accm, added */
        res[m] = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(qs[0][m], qs[2][m]), _mm512_add_ps(qs[1][m], qs[3][m])),
                               _mm512_add_ps(_mm512_add_ps(qms[0][m], qms[2][m]), _mm512_add_ps(qms[1][m], qms[3][m])));
    amx_out(res, nr, nt, y, ldy);
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

/* Decodes row tiles [i0, i0 + n) of the call (16 rows from r0 + 16 i each;
 * rows past r1: the last one again, results dropped) to wb + i * wtb. */
static AMX void amx_prep_rows(qtype t, const void *w, size_t wrb, int64_t nb, int r0, int r1, int i0, int n,
                              uint8_t *wb, size_t wtb) {
    for (int i = 0; i < n; i++) {
        const int r = r0 + AMX_R * (i0 + i), nr = r1 - r < AMX_R ? r1 - r : AMX_R;
        uint8_t *wp = wb + (size_t)i * wtb;
        float *wd = (float *)(void *)(wp + (size_t)AMX_R * 32 * nb);
        for (int m = 0; m < AMX_R; m++)
            amx_prep_w(t, (const uint8_t *)w + (size_t)(r + (m < nr ? m : nr - 1)) * wrb, nb, wp + 32 * m,
                       wd + m, wd + AMX_R + m);
    }
}

static AMX void amx_gemm(qtype t, const void *w, size_t wrb, int64_t k, const void *xq, size_t xrb, int n_tok,
                         float *y, int64_t ldy, int r0, int r1) {
    const int64_t nb = k / QK;
    const int ntt = (n_tok + AMX_T - 1) / AMX_T, nrt = (r1 - r0 + AMX_R - 1) / AMX_R;
    const size_t xtb = (size_t)nb * (AMX_XB + 128), wtb = (size_t)AMX_R * nb * AMX_WB;
    int ct = (int)(AMX_WCHUNK / wtb);
    ct = ct < 1 ? 1 : ct > nrt ? nrt : ct;
    /* a pair's sums (1 KiB per block) or a phase's (4 KiB per group) */
    const size_t cb = nb <= AMX_WHOLE ? (size_t)1024 * nb : (size_t)4096 * ((nb + QA8_GROUP - 1) / QA8_GROUP);
    uint8_t *buf = amx_work((size_t)ntt * xtb + (size_t)ct * wtb + cb);
    uint8_t *xb = buf, *wb = buf + (size_t)ntt * xtb; /* wb: per row tile quants, then d and m */
    int32_t *c = (int32_t *)(void *)(wb + (size_t)ct * wtb);
    for (int tt = 0; tt < ntt; tt++) {
        const uint8_t *xr[AMX_T];
        int nt = n_tok - tt * AMX_T < AMX_T ? n_tok - tt * AMX_T : AMX_T;
        for (int n = 0; n < nt; n++) xr[n] = (const uint8_t *)xq + (size_t)(tt * AMX_T + n) * xrb;
        amx_prep_x(xr, nt, nb, xb + (size_t)tt * xtb);
    }
    amx_config();
    for (int i0 = 0; i0 < nrt; i0 += ct) {
        const int ni = nrt - i0 < ct ? nrt - i0 : ct;
        amx_prep_rows(t, w, wrb, nb, r0, r1, i0, ni, wb, wtb);
        amx_stream st = {wb, xb, c, 0, 0, (int)nb, 1024, 0, NULL}; /* phase 0 of the chunk's first pair */
        if (nb > AMX_WHOLE) amx_finish(&st);
        for (int tt = 0; tt < ntt; tt++) {
            const int nt = n_tok - tt * AMX_T < AMX_T ? n_tok - tt * AMX_T : AMX_T;
            for (int i = 0; i < ni; i++) {
                const int r = r0 + AMX_R * (i0 + i), nr = r1 - r < AMX_R ? r1 - r : AMX_R;
                const int in = i + 1 < ni ? i + 1 : 0, tn = i + 1 < ni ? tt : tt + 1;
                float *yp = y + (size_t)tt * AMX_T * ldy + r;
                if (nb <= AMX_WHOLE)
                    amx_pair_whole(wb + (size_t)i * wtb, nb, xb + (size_t)tt * xtb, c, nr, nt, yp, ldy);
                else
                    amx_pair(wb + (size_t)i * wtb, nb, xb + (size_t)tt * xtb, tn < ntt ? wb + (size_t)in * wtb : NULL,
                             xb + (size_t)tn * xtb, c, nr, nt, yp, ldy);
            }
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
