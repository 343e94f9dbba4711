/* engine.h - a model ready to compute: weights, thread pool, paged KV
 * memory and the forward context, created and destroyed together.
 * The CLI and (later) the server's scheduler own one each. */
#ifndef STRATA_ENGINE_H
#define STRATA_ENGINE_H

#include "base/pool.h"
#include "model/forward.h"
#include "model/kv.h"
#include "model/model.h"
#include "model/mtp.h"

typedef struct engine_params {
    const char *model_path;
    int n_threads;    /* <= 0: one per core */
    int n_ctx;        /* tokens of KV memory in total; <= 0: min(train ctx, 4096) */
    int block_tokens; /* KV block size; <= 0: 64 */
    int max_batch;    /* tokens per forward call; <= 0: 512 */
    int extra_kv_mb;  /* KV memory beyond n_ctx (kept for cached prefixes) */
    /* With n_seq > 0 and n_ctx <= 0: n_seq sequences of the model's training
     * context each, fewer tokens each if their KV plus their recurrent
     * state (engine_seq_state_bytes each) and MTP drafter (mtp_draft)
     * would pass kv_budget_mb. */
    int n_seq;
    int kv_budget_mb;
    /* > 0: the caller runs the MTP drafter (model/mtp.h) with this many
     * drafts a step on every sequence, so the budget counts its K/V and
     * rows too (mtp_seq_cost), when the model has the block and the pass
     * is the CPU's (the only one it runs on); 0: nothing for it. */
    int mtp_draft;
    int min_ctx; /* ...but at least this many tokens each (past the training context), budget permitting */
    /* "cpu" (NULL too) or "cuda": the llama-family forward pass on the GPU
     * (model/forward_cuda.h). With n_seq <= 0 (`run`, `bench`): one
     * sequence, its K/V in GPU memory, no KV pool. With n_seq > 0 (`serve`):
     * the KV pool in GPU memory (kv.dev), the paged pass (engine_run). */
    const char *device;
    /* How K/V are stored (--kv-type; zero: f16). q8_0 halves the bytes a
     * token costs in every tier and is refused (a reason) for a head size
     * that is not a multiple of 32, and on the GPU. */
    kvq_type kv_type;
} engine_params;

typedef struct engine {
    model *m;
    pool *threads;
    kv_pool kv;
    fwd_ctx *fwd;
    int n_ctx, max_batch;
    int ctx_per_seq; /* n_seq > 0: the context each sequence got */
    mtp_cost mtp_counted; /* what the budget counted for each sequence's MTP drafter (zeros: nothing) */
    struct fwdc *gpu; /* --device cuda: the GPU pass (fwd unused; kv too, unless paged) */
    char numerics[96]; /* engine_numerics */
} engine;

int engine_open(engine **out, const engine_params *p, strata_err *err);
/* Bytes each sequence holds beside its KV: the recurrent layers' state
 * (qwen35: conv and delta state, ~19 MiB at the 0.8B shape); 0 for a
 * model without recurrent layers. */
size_t engine_seq_state_bytes(const model *m);
void engine_close(engine *e); /* NULL is fine */

/* One sequence on either device (`run`, `bench`): n tokens appended to s
 * (in max_batch chunks), the last one's logits to logits. On the GPU the
 * sequence's K/V live in GPU memory and s only counts positions, so one
 * sequence at a time. */
/* One forward pass over a batch of sequences (model/forward.h fwd_run)
 * on the engine's device: the server's step. */
int engine_run(engine *e, const fwd_batch *b, float *logits, strata_err *err);
int engine_eval(engine *e, kv_seq *s, const int32_t *tokens, int n, float *logits, strata_err *err);
/* s forgets positions >= n / all of them. */
void engine_seq_cut(engine *e, kv_seq *s, int n);
void engine_seq_release(engine *e, kv_seq *s);
/* The numerics id of the device the engine computes on: "cpu" or
 * CUDA_NUMERICS, with the KV type when it is not f16 ("cpu+kv-q8_0",
 * kvq_numerics): blocks of another KV type are other bytes, never served.
 * A model with K-quant weights adds "+kq-int" (model_has_kquant: their
 * kernels' float steps changed, and the K/V with them), one with Q4_0,
 * Q4_1, Q5_0, Q5_1 or Q8_0 weights "+lg-chain" (model_has_legacy: their
 * kernels sum a pair's blocks in one chain since). A cache keys its
 * blocks by it (cache_numerics_fingerprint). The CPU's levels do not all
 * give the same bits, so below AVX-512 the level is named too
 * ("cpu+attn-avx2+mm-avx2", "+delta-avx2" for a delta-net model;
 * attn_numerics, quant_numerics, delta_numerics): replicas of other CPUs
 * sharing a disk or Redis tier never serve each other's blocks. The
 * avx512 and amx levels keep "cpu", the id caches were written under. */
const char *engine_numerics(const engine *e);
/* "cpu (avx512)" or "cuda (NVIDIA H100 ..., sm_90, ...)". */
const char *engine_device(const engine *e);

#endif
