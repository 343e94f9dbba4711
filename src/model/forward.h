/* forward.h - the transformer forward pass over paged KV.
 *
 * One call processes a batch of tokens that may belong to several
 * sequences, at any positions (a prefill chunk, decode steps, or both
 * mixed). Each token's K/V is written into its sequence's blocks, then it
 * attends to positions [0, pos] of its own sequence. Every per-token value
 * is computed independently of the rest of the batch, so logits are
 * bit-identical however a prompt is chunked (batch invariance).
 * Does not: sample, tokenize, or decide what is cached. */
#ifndef STRATA_FORWARD_H
#define STRATA_FORWARD_H

#include <stdint.h>

#include "base/err.h"
#include "base/pool.h"
#include "model/kv.h"
#include "model/model.h"

typedef struct fwd_ctx fwd_ctx;

typedef struct fwd_batch {
    int n;
    const int32_t *tokens;
    kv_seq *const *seqs;  /* per token: the sequence it extends */
    const int32_t *pos;   /* per token: its position (== seq->n_pos for the first) */
    const int8_t *want;   /* per token: 1 to return its logits (NULL: last only) */
} fwd_batch;

/* max_batch: most tokens per call (larger batches are split by callers). */
fwd_ctx *fwd_new(const model *m, kv_pool *kv, pool *threads, int max_batch);
void fwd_free(fwd_ctx *c);

/* Runs the batch. Logits of the wanted rows, in batch order, go to logits
 * (n_wanted x n_vocab floats). Sequences grow to cover their positions;
 * a position must be at most the sequence's current length (no gaps). */
int fwd_run(fwd_ctx *c, const fwd_batch *b, float *logits, strata_err *err);

/* The same, with the batch's input rows given (n x n_embd floats) instead
 * of the tokens' embeddings (the tokens are still checked): the MTP
 * block's input (model/mtp.h). */
int fwd_run_rows(fwd_ctx *c, const fwd_batch *b, const float *x, float *logits, strata_err *err);

/* With on, every later fwd_run also keeps each batch row's final hidden
 * state after the output norm (llama.cpp's h_nextn: what the MTP block
 * reads); fwd_hidden gives the last run's, n x n_embd floats in batch
 * order (NULL while off). Costs one RMS norm per row. */
void fwd_keep_hidden(fwd_ctx *c, int on);
const float *fwd_hidden(const fwd_ctx *c);

/* The dense feed-forward's gate/up matmuls and activation fused per
 * work item (1, the default unless STRATA_CPU_FUSE=0; model/ffn.c) or as
 * separate passes (0): the same bits. */
void fwd_use_fusion(fwd_ctx *c, int on);

/* Floats of one sequence's recurrent state (kv_seq.rs): every recurrent
 * layer's conv and delta state; 0 for a model without recurrent layers. */
size_t fwd_state_floats(const model *m);

/* Recurrent layers (qwen35): 0 when a token at position pos may run on
 * a state that covers positions [0, state_end): it continues it, or (with
 * may_restart: its sequence's first token of the call) starts again at
 * 0; else STRATA_EINVAL saying the state cannot be rewound or skipped.
 * The CPU pass and the GPU's (forward_cuda.c) ask the same. */
int fwd_state_pos_check(int pos, int state_end, int may_restart, strata_err *err);

/* 1 when rotated pair i (< rope_dim / 2) is left as it is for text: a
 * qwen35 M-RoPE section whose position is 0 (forward.c); 0 for other
 * architectures. */
int fwd_rope_pair_still(const model_hparams *hp, int i);

/* Convenience: feed n tokens of one sequence in chunks of max_batch,
 * returning the last token's logits (n_vocab floats). */
int fwd_prefill(fwd_ctx *c, kv_seq *s, const int32_t *tokens, int n, float *logits,
                strata_err *err);

#endif
