/* quant.h - GGML tensor formats: block layouts, dequantization, the
 * activation formats and the dot/gemm kernels matmul uses.
 *
 * Weights stay in their file format. Activations are converted per row to
 * the weight type's act_type (Q8_0, Q8_1, Q8_K or F32) once per matmul.
 *
 * Batch invariance contract (DESIGN.md, principle 2): quant_gemm computes
 * every y[t][r] with the same sequence of floating-point operations no
 * matter n_tok, which row t is inside a tile, or the [r0, r1) split. A
 * token's logits never depend on what else is in the batch.
 * Does not: threads (model/ splits rows over the pool). */
#ifndef STRATA_QUANT_H
#define STRATA_QUANT_H

#include <stddef.h>
#include <stdint.h>

/* ggml type ids as stored in GGUF. */
typedef enum {
    QT_F32 = 0, QT_F16 = 1, QT_Q4_0 = 2, QT_Q4_1 = 3, QT_Q5_0 = 6, QT_Q5_1 = 7,
    QT_Q8_0 = 8, QT_Q8_1 = 9, QT_Q2_K = 10, QT_Q3_K = 11, QT_Q4_K = 12,
    QT_Q5_K = 13, QT_Q6_K = 14, QT_Q8_K = 15, QT_BF16 = 30, QT_MXFP4 = 39,
    QT_COUNT = 40
} qtype;

typedef struct quant_traits {
    const char *name; /* "Q4_1" */
    int blck;         /* elements per block */
    size_t bytes;     /* bytes per block */
    qtype act_type;   /* activation format the weight's dot kernel takes */
    int is_weight;    /* usable as a weight type (has dequant + dot) */
} quant_traits;

/* Traits of a ggml type id, or NULL if Strata does not know it. */
const quant_traits *quant_get(uint32_t type);
const char *quant_name(uint32_t type); /* "type 17" style for unknown */
/* Bytes of a row of n elements (n must be a multiple of blck). */
size_t quant_row_bytes(qtype t, int64_t n);

/* Reference dequantization of n elements (n multiple of blck). */
void quant_dequant_row(qtype t, const void *src, float *dst, int64_t n);
/* Convert an activation row to act (Q8_0, Q8_1, Q8_K or F32). */
void quant_act_row(qtype act, const float *x, void *dst, int64_t n);
/* The same at a given kernel level (capped at what the CPU has): every
 * level writes the same bytes (tests compare them). */
void quant_act_row_level(int level, qtype act, const float *x, void *dst, int64_t n);
/* Values [i0, i1) of a row of n elements into that row's activation bytes
 * at dst (the whole row's, as quant_act_row lays them out); x holds those
 * values only. i0 and i1 on the format's block edges (Q8_0/Q8_1 32, Q8_K
 * 256; i1 may be n). The parts of a row, in any order, write
 * quant_act_row's bytes (model/ffn.c converts the feed-forward's output
 * per work item while it is in cache). */
void quant_act_part(qtype act, const float *x, void *dst, int64_t n, int64_t i0, int64_t i1);
void quant_act_part_level(int level, qtype act, const float *x, void *dst, int64_t n, int64_t i0, int64_t i1);
/* Bytes of one converted activation row of n elements in format act. The
 * activation layouts are Strata's own (not ggml's), so size xq buffers with
 * this, NOT quant_row_bytes: Q8_0/Q8_1 40 B per 32, Q8_K 292 B per 256,
 * F32 4 B per element. Always a multiple of 4; rows must start 4-aligned. */
size_t quant_act_row_bytes(qtype act, int64_t n);
/* Bytes of the activation row weight type wt's kernel takes for k inputs. */
size_t quant_act_bytes_for(qtype wt, int64_t k);

/* y[t * ldy + r] = dot(weight row r, activation row t) for r in [r0, r1)
 * and t in [0, n_tok). w: row-major weights, w_row_bytes apart, k elements
 * per row. xq: activation rows in act_type, xq_row_bytes apart. */
void quant_gemm(qtype wt, const void *w, size_t w_row_bytes, int64_t k,
                const void *xq, size_t xq_row_bytes, int n_tok,
                float *y, int64_t ldy, int r0, int r1);

/* Activations laid out once for every call of one matmul. The amx
 * level's legacy-format prefill reads 16 tokens at a time as tile
 * operands (a transpose of their rows); a matmul split into row chunks
 * over threads would redo it in every chunk. quant_xtiles_bytes: the
 * bytes for n_tok tokens, 0 where weight type wt's kernel reads xq as it
 * is (other levels and types, fewer than QUANT_XTILE tokens; then pass
 * xt NULL). quant_xtiles writes tiles [i0, i1) (tokens QUANT_XTILE i0 ..),
 * so threads may make a share each. quant_gemm_xt is quant_gemm (the
 * same bits) on them; for tokens from t0 (a multiple of QUANT_XTILE) on,
 * pass quant_xtiles_at(wt, k, xt, t0) and those tokens' xq rows. xt is
 * 64-byte aligned (xaligned). */
#define QUANT_XTILE 16
size_t quant_xtiles_bytes(qtype wt, int64_t k, int n_tok);
void quant_xtiles(qtype wt, int64_t k, const void *xq, size_t xq_row_bytes, int n_tok, int i0, int i1, void *xt);
const void *quant_xtiles_at(qtype wt, int64_t k, const void *xt, int t0);
void quant_gemm_xt(qtype wt, const void *w, size_t w_row_bytes, int64_t k, const void *xq, size_t xq_row_bytes,
                   const void *xt, int n_tok, float *y, int64_t ldy, int r0, int r1);

/* Kernel levels. A process uses one (cpu_get() decides); tests and
 * `strata bench-kernels` call each level directly. QUANT_AMX is avx512
 * with the prefill (16+ tokens) of the legacy formats and the K-quants on
 * AMX-INT8 tiles: the same bits as avx512 (quant_amx_avx512.c,
 * quant_amx_kq_avx512.c), only faster; where the CPU has it and
 * STRATA_CPU does not say avx512 or lower. */
enum { QUANT_SCALAR = 0, QUANT_AVX2 = 1, QUANT_AVX512 = 2, QUANT_AMX = 3, QUANT_LEVELS = 4 };

/* Highest level this CPU (after STRATA_CPU masking) runs. */
int quant_level(void);
const char *quant_level_name(int level); /* "scalar", "avx2", "avx512", "amx" */
/* What the engine's numerics id adds for this process's matmuls: "" at
 * the avx512 and amx levels (the same bits: the id caches were written
 * under), "+mm-avx2" or "+mm-scalar" below (the legacy and float kernels'
 * bits differ between levels, so blocks of one are not another's). */
const char *quant_numerics(void);
const char *quant_numerics_level(int level); /* the same for a level (tests) */
/* quant_gemm forced to one level; level must be <= quant_level(). */
void quant_gemm_level(int level, qtype wt, const void *w, size_t w_row_bytes,
                      int64_t k, const void *xq, size_t xq_row_bytes,
                      int n_tok, float *y, int64_t ldy, int r0, int r1);
/* quant_xtiles_bytes and quant_gemm_xt at one level (tests). */
size_t quant_xtiles_bytes_level(int level, qtype wt, int64_t k, int n_tok);
void quant_gemm_xt_level(int level, qtype wt, const void *w, size_t w_row_bytes, int64_t k, const void *xq,
                         size_t xq_row_bytes, const void *xt, int n_tok, float *y, int64_t ldy, int r0, int r1);

#endif
