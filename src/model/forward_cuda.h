/* forward_cuda.h - the llama-family forward pass on a CUDA GPU
 * (llama, qwen2, qwen3): weights uploaded once, one sequence's K/V in GPU
 * memory as half floats, every step a kernel of backend/cuda/cuda.h.
 *
 * One sequence only: a call computes tokens at positions [pos0, pos0 + n)
 * and attends to [0, pos] for each, so continuing, going back (a shorter
 * pos0 overwrites the K/V after it) and starting over are all a choice of
 * pos0. Every row is computed with the same operations whatever else is
 * in the call (backend/cuda/cuda.h), so logits are bit-identical however a
 * prompt is chunked, as on the CPU; the bits differ from the CPU's.
 * A decode step is one CUDA graph launch (recorded on the first step).
 * Does not: serve several sequences, page K/V or share blocks with the
 * cache (the server stays on the CPU backend), gemma3, qwen35. */
#ifndef STRATA_FORWARD_CUDA_H
#define STRATA_FORWARD_CUDA_H

#include <stdint.h>

#include "base/err.h"
#include "model/model.h"

typedef struct fwdc fwdc;

/* Opens the GPU (backend/cuda/cuda.h cuda_open), checks the model is one
 * the GPU path runs, uploads its weights and allocates n_ctx positions of
 * K/V and scratch for max_batch tokens. */
int fwdc_new(fwdc **out, const model *m, int n_ctx, int max_batch, strata_err *err);
void fwdc_free(fwdc *c); /* NULL is fine */

/* Tokens tok[0, n) at positions [pos0, pos0 + n), n <= max_batch,
 * pos0 + n <= n_ctx. all: logits of every row (n x n_vocab) to logits,
 * else of the last row only; logits NULL: none copied back (fwdc_argmax
 * still works on the GPU's copy). */
int fwdc_run(fwdc *c, const int32_t *tok, int n, int pos0, int all, float *logits, strata_err *err);
/* Greedy ids of the last fwdc_run's logit rows (first largest), computed
 * on the GPU: ids gets as many as that call returned rows. */
int fwdc_argmax(fwdc *c, int32_t *ids, strata_err *err);
/* Decode steps (n = 1) as a recorded CUDA graph (1, the default unless
 * STRATA_CUDA_GRAPH=0) or kernel by kernel (0): the same bits either way. */
void fwdc_use_graphs(fwdc *c, int on);
/* Fused launches (1, the default unless STRATA_CUDA_FUSE=0: Q/K/V in one
 * matmul, gate/up with SwiGLU in one, residual adds in the matmuls, RoPE
 * with the K/V store) or the separate kernels (0): the same bits. */
void fwdc_use_fusion(fwdc *c, int on);
/* Bytes of weights in GPU memory. */
size_t fwdc_weight_bytes(const fwdc *c);

#endif
