/* forward_cuda.h - the llama-family forward pass on a CUDA GPU
 * (llama, qwen2, qwen3, gemma3, qwen35): weights uploaded once, one sequence's K/V in GPU
 * memory as half floats, every step a kernel of backend/cuda/cuda.h.
 *
 * One sequence only: a call computes tokens at positions [pos0, pos0 + n)
 * and attends to [0, pos] for each, so continuing, going back (a shorter
 * pos0 overwrites the K/V after it) and starting over are all a choice of
 * pos0. Every row is computed with the same operations whatever else is
 * in the call (backend/cuda/cuda.h), so logits are bit-identical however a
 * prompt is chunked, as on the CPU; the bits differ from the CPU's.
 * A decode step is one CUDA graph launch (recorded on the first step).
 *
 * Paged (fwdc_new_paged, `strata serve --device cuda`): K/V live in a KV
 * pool in GPU memory (model/kv.h, kv_pool_opts.dev = cuda_devmem()), the
 * same blocks the cache names and moves between tiers; a call takes a
 * batch of several sequences as fwd_run does (fwdc_run_batch), each
 * token's K/V stored through its sequence's block table and attention
 * read through it, one launch per sequence's run; a decode step (a token
 * for each of n sequences) replays a graph recorded for n.
 * Gemma 3's sliding layers keep their rows in the pool's slots (model/kv.h):
 * they go through tables of slots, and their attention reads the window
 * only (cuda_attention_paged's n_swa).
 * qwen35's recurrent layers keep their state in GPU memory
 * (deltanet_cuda.c: the one-sequence pass's own, the paged pass's in each
 * sequence of the pool), so a call continues where the last one ended or
 * starts again at 0 (going back is refused, as on the CPU). The
 * mixture-of-experts layers are moe_cuda.c's. All of it ran on the H100
 * (2026-11-27; src/backend/cuda/README.md, "Status, step 5").
 * Does not: gpt-oss, YaRN. */
#ifndef STRATA_FORWARD_CUDA_H
#define STRATA_FORWARD_CUDA_H

#include <stdint.h>

#include "base/err.h"
#include "model/forward.h"
#include "model/kv.h"
#include "model/model.h"

typedef struct fwdc fwdc;

/* Opens the GPU (backend/cuda/cuda.h cuda_open), checks the model is one
 * the GPU path runs, uploads its weights and allocates n_ctx positions of
 * K/V and scratch for max_batch tokens. */
int fwdc_new(fwdc **out, const model *m, int n_ctx, int max_batch, strata_err *err);
void fwdc_free(fwdc *c); /* NULL is fine */
/* STRATA_EUNSUPPORTED, naming what, when m is not one the GPU path runs. */
int fwdc_check_model(const model *m, strata_err *err);
/* The paged pass over kv (f16, in cuda_devmem()'s memory; kept alive by
 * the caller): weights uploaded, scratch for max_batch tokens, attention
 * scratch for sequences of up to ctx_per_seq positions. */
int fwdc_new_paged(fwdc **out, const model *m, kv_pool *kv, int ctx_per_seq, int max_batch, strata_err *err);
/* fwd_run (model/forward.h) on the GPU: the batch's sequences grow to
 * cover their positions, logits of the wanted rows to logits. */
int fwdc_run_batch(fwdc *c, const fwd_batch *b, float *logits, strata_err *err);

/* Tokens tok[0, n) at positions [pos0, pos0 + n), n <= max_batch,
 * pos0 + n <= n_ctx (qwen35: pos0 0 or fwdc_state_end). all: logits of every row (n x n_vocab) to logits,
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
/* qwen35: the positions [0, end) the recurrent state covers (0 after a
 * failed call: only a restart at 0 is taken then); -1 for a model
 * without recurrent layers, which can go back to any position. */
int fwdc_state_end(const fwdc *c);
/* Bytes of weights in GPU memory. */
size_t fwdc_weight_bytes(const fwdc *c);

#endif
