/* quant_tile.h - the level-independent half of the SIMD gemm kernels: the
 * tile driver, the tile-set and gemm wrappers and the per-type kernel
 * table. Included by quant_avx2.c and quant_avx512.c only, so it is
 * compiled once per level with that file's -m flags (everything here is
 * static). Does not: any arithmetic; the tiles are the including file's.
 *
 * A tile computes R weight rows x T tokens: out[r * T + t] for weight rows
 * w[0..R) and activation rows x[0..T). A tile set lists tile shapes,
 * widest T first, the last with T == 1; shapes may differ in R. Batch
 * invariance is the tiles' job (each (row, token) pair sees the same float
 * operations in every shape); the driver only promises that row tails
 * rerun a full tile with the last row repeated (results dropped). */
#ifndef STRATA_QUANT_TILE_H
#define STRATA_QUANT_TILE_H

#include "backend/quant_impl.h"

#define AI static inline __attribute__((always_inline))
/* Tile loops must unroll fully so the accumulators live in registers. */
#define UNROLL _Pragma("GCC unroll 16")

#define TILE_ROWS 32 /* rows per chunk: its weights stay in cache for all tokens */
#define TILE_MAX_OUT 32 /* R * T of the largest tile */

typedef void (*tile_fn)(const uint8_t *const *w, const uint8_t *const *x,
                        int64_t k, float *out);
typedef struct {
    int rows, toks; /* R, T; TILE_ROWS is a multiple of every R */
    tile_fn fn;
} tile_shape;
typedef struct {
    tile_shape s[4]; /* widest first; ends with toks == 1 */
} tile_set;

#define TILE_PF_BYTES 4096 /* how far ahead of the tile its weights are prefetched */

/* Touch bytes [from, to) of the weights. Weights stream from memory once
 * per token in decode (all of them, far more than the caches hold), and
 * on the machine measured the hardware prefetcher alone left the AVX-512
 * Q4_1 kernel waiting on memory at a fifth of its speed
 * (backend/README.md). Prefetches past the rows asked for (or past the
 * mapping) are harmless: they never fault. */
static inline void tile_prefetch(const void *w, size_t from, size_t to) {
    for (const char *p = (const char *)w + from; p < (const char *)w + to; p += 64) __builtin_prefetch(p, 0, 3);
}

/* One token tile [t0, t0 + T) over the rows [rc, rce) of a chunk; the
 * first token tile (pf) also prefetches the rows ahead. */
static void tile_rows(const tile_shape *sh, const void *w, size_t wrb, int64_t k,
                      const uint8_t *const *xp, int t0, float *y, int64_t ldy,
                      int rc, int rce, int r1, int pf) {
    const int R = sh->rows, T = sh->toks;
    for (int r = rc; r < rce; r += R) {
        const uint8_t *wp[TILE_MAX_OUT];
        float out[TILE_MAX_OUT];
        if (pf) tile_prefetch(w, r * wrb + TILE_PF_BYTES, (r + R) * wrb + TILE_PF_BYTES);
        for (int i = 0; i < R; i++)
            wp[i] = (const uint8_t *)w + (size_t)(r + i < r1 ? r + i : r1 - 1) * wrb;
        sh->fn(wp, xp, k, out);
        const int nr = rce - r < R ? rce - r : R;
        if (R == 1) /* MXFP4's tiles */
            for (int j = 0; j < T; j++) y[(t0 + j) * ldy + r] = out[j];
        else
            for (int j = 0; j < T; j++) { /* token by token: each token's rows share a cache line of y */
                float *yt = y + (t0 + j) * ldy + r;
                for (int i = 0; i < nr; i++) yt[i] = out[i * T + j];
            }
    }
}

/* The shape of s (widest first) for the token tile at t0. */
static const tile_shape *tile_pick(const tile_shape *s, int n_tok, int t0) {
    const tile_shape *sh = s;
    while (sh->toks > n_tok - t0) sh++;
    return sh;
}

/* Walks [r0, r1) x [0, n_tok) in tiles, rows in chunks of TILE_ROWS. */
static void tile_drive(const tile_set *ts, const void *w, size_t wrb, int64_t k,
                       const void *xq, size_t xrb, int n_tok, float *y,
                       int64_t ldy, int r0, int r1) {
    tile_prefetch(w, r0 * wrb, r0 * wrb + TILE_PF_BYTES); /* the rows' head; tile_rows keeps ahead */
    for (int rc = r0; rc < r1; rc += TILE_ROWS) {
        int rce = rc + TILE_ROWS < r1 ? rc + TILE_ROWS : r1;
        for (int t0 = 0; t0 < n_tok;) {
            const tile_shape *sh = tile_pick(ts->s, n_tok, t0);
            const uint8_t *xp[TILE_MAX_OUT];
            for (int j = 0; j < sh->toks; j++)
                xp[j] = (const uint8_t *)xq + (size_t)(t0 + j) * xrb;
            tile_rows(sh, w, wrb, k, xp, t0, y, ldy, rc, rce, r1, t0 == 0);
            t0 += sh->toks;
        }
    }
}

/* name_T: tile function `name(w, x, k, out, T)` fixed at T tokens. */
#define TILE_T(name, T)                                                       \
    static void name##_##T(const uint8_t *const *w, const uint8_t *const *x,  \
                           int64_t k, float *o) { name(w, x, k, o, T); }

/* Tile sets of the usual shapes: R rows x {4, 2, 1} or {2, 1} tokens. */
#define TILESET_421(name, R)                                                  \
    TILE_T(name, 1) TILE_T(name, 2) TILE_T(name, 4)                           \
    static const tile_set name##_set = {                                      \
        .s = {{R, 4, name##_4}, {R, 2, name##_2}, {R, 1, name##_1}}};
#define TILESET_21(name, R)                                                   \
    TILE_T(name, 1) TILE_T(name, 2)                                           \
    static const tile_set name##_set = {.s = {{R, 2, name##_2}, {R, 1, name##_1}}};

#define TILE_GEMM(name)                                                       \
    static void gemm_##name(const void *w, size_t wrb, int64_t k,             \
                            const void *xq, size_t xrb, int n_tok, float *y,  \
                            int64_t ldy, int r0, int r1) {                    \
        tile_drive(&name##_set, w, wrb, k, xq, xrb, n_tok, y, ldy, r0, r1);   \
    }

/* gemm_<name> for the weight types other than the legacy formats, and
 * the type -> kernel table `fn_name` (gemm_lg_*: each level's own legacy
 * driver, defined before); both levels name their tiles the same way. */
#define TILE_KERNELS(fn_name)                                                 \
    TILE_GEMM(fl_f32)                                                         \
    TILE_GEMM(fl_f16) TILE_GEMM(fl_bf16) TILE_GEMM(mx_mxfp4)                  \
    quant_gemm_fn fn_name(qtype t) {                                          \
        switch (t) {                                                          \
        case QT_Q4_0: return gemm_lg_q4_0;                                    \
        case QT_Q4_1: return gemm_lg_q4_1;                                    \
        case QT_Q5_0: return gemm_lg_q5_0;                                    \
        case QT_Q5_1: return gemm_lg_q5_1;                                    \
        case QT_Q8_0: return gemm_lg_q8_0;                                    \
        case QT_Q4_K: return gemm_kq_q4_k;                                    \
        case QT_Q5_K: return gemm_kq_q5_k;                                    \
        case QT_Q6_K: return gemm_kq_q6_k;                                    \
        case QT_F32: return gemm_fl_f32;                                      \
        case QT_F16: return gemm_fl_f16;                                      \
        case QT_BF16: return gemm_fl_bf16;                                    \
        case QT_MXFP4: return gemm_mx_mxfp4;                                  \
        default: return NULL;                                                 \
        }                                                                     \
    }

/* Per-type tile wrappers `prefix_q4_0(w, x, k, o, T)` over a tile function
 * `tile(type, w, x, k, o, T)`, one per type of a family. */
#define TILE_WRAP(prefix, tile, ty)                                           \
    AI void prefix(const uint8_t *const *w, const uint8_t *const *x,          \
                   int64_t k, float *o, int T) { tile(ty, w, x, k, o, T); }

/* The weight families' type tags, the same at every level. LMX (MXFP4)
 * shares the legacy loads (blocks of 32, nibbles as Q4_0; the header is
 * one E8M0 byte) but has its own tiles. */
enum { L40, L41, L50, L51, L80, LMX };
enum { K4 = 16, K5, K6 }; /* above the legacy tags: drivers tell them apart */
enum { FF32, FF16, FBF16 };

/* Legacy block sizes and where the quants start. */
AI int lg_bytes(int ty) {
    return ty == L40 ? QB_Q4_0 : ty == L41 ? QB_Q4_1 : ty == L50 ? QB_Q5_0
         : ty == L51 ? QB_Q5_1 : ty == LMX ? QB_MXFP4 : QB_Q8_0;
}
AI int lg_qs_off(int ty) {
    return ty == L40 ? 2 : ty == L41 ? 4 : ty == L50 ? 6 : ty == L51 ? 8 : ty == LMX ? 1 : 2;
}
/* Offset of the 32 high bits of Q5_0/Q5_1. */
AI int lg_qh_off(int ty) { return ty == L50 ? 2 : 4; }

#endif
