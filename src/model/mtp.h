/* mtp.h - drafting with a qwen35 file's multi-token-prediction block
 * (model.h, model_mtp) for speculative decoding.
 *
 * The block guesses the token after next: at position q its input is the
 * embedding of token q and the trunk's output-normed hidden state at
 * q - 1 (h_{q-1}; zeros where there is none), each RMS-normed (enorm,
 * hnorm), concatenated and projected (eh_proj), then one full-attention
 * block over the block's own K/V of the sequence, then its head norm and
 * the output head: the argmax guesses token q + 1. Drafting k tokens
 * chains the block on its own guess and its own normed output state
 * (llama.cpp's draft-mtp for qwen35 does the same).
 *
 * Its K/V. The block attends over its own K/V of the sequence, one layer,
 * held here in compute memory only, in a pool of its own (the KV type of
 * the trunk's): never hashed, published or stored in a tier, so the
 * trunk's blocks and their hashes are what they were. It is filled
 * from the trunk's hidden states as the trunk computes them (mtp_feed:
 * prefill chunks and every verified step), and cut with the trunk's
 * sequence (mtp_seq_cut). After a prefix-cache hit the trunk's hidden
 * states of the cached positions do not exist (recomputing them is what
 * the cache avoids), so the block's sequence starts where the trunk
 * resumed (mtp_seq.base) and attends over the positions since then only,
 * at positions counted from there (RoPE sees only differences). A guess
 * never changes the output: the trunk verifies every drafted token.
 * Memory: one layer of K/V for each sequence's context (qwen35 0.8B:
 * 2 KiB a token in f16, against the trunk's 6 attention layers), which
 * an engine's KV budget counts when asked to (mtp_seq_cost,
 * engine_params.mtp_draft).
 * Does not: verify, sample, or choose between drafters (server/sched_spec.c). */
#ifndef STRATA_MTP_H
#define STRATA_MTP_H

#include "base/pool.h"
#include "model/forward.h"
#include "model/kv.h"
#include "model/model.h"

typedef struct mtp mtp;

/* One trunk sequence's side of the block. base: the trunk position of
 * the block's position 0 (-1: empty). h: the trunk's hidden state at
 * h_pos (-1: none), the input of a draft at h_pos + 1. rows: the trunk's
 * hidden states of the sequence's last tokens of the last fed batch
 * (positions [rows_pos0, rows_pos0 + n_rows)), so a cut inside the batch
 * still knows h. */
typedef struct mtp_seq {
    kv_seq kv;
    int base;
    float *h;
    int h_pos;
    float *rows;
    int rows_pos0, n_rows;
} mtp_seq;

/* A drafter for m (has_mtp) over its own KV pool for n_seq sequences of
 * up to ctx_per_seq positions plus max_draft drafted ones, batches of up
 * to max_batch tokens, on the caller's threads (borrowed, as m is). */
int mtp_new(mtp **out, const model *m, pool *threads, int n_seq, int ctx_per_seq, int max_draft, int max_batch,
            int block_tokens, kvq_type kv_type, strata_err *err);
void mtp_free(mtp *d); /* NULL is fine */

/* What the drafter mtp_new would make costs each sequence, for a KV
 * budget (engine.c): token_bytes for each position of its context (the
 * block's K/V, one layer), and seq_bytes whatever the context (a multiple
 * of block_tokens): the blocks for max_draft drafted positions and one
 * more (mtp_new's pool), and its hidden rows (mtp_seq). */
typedef struct mtp_cost {
    size_t token_bytes, seq_bytes;
} mtp_cost;
mtp_cost mtp_seq_cost(const model *m, int max_draft, int block_tokens, kvq_type kv_type);
/* Bytes of the drafter's K/V pool (one layer for every sequence). */
size_t mtp_kv_bytes(const mtp *d);

void mtp_seq_init(mtp *d, mtp_seq *s);
/* Empties s (its K/V go back to the pool); it starts again at the next feed. */
void mtp_seq_reset(mtp *d, mtp_seq *s);
void mtp_seq_release(mtp *d, mtp_seq *s);

/* After a trunk pass over b: each token t at position q of its sequence
 * enters seqs[t] at q with h_{q-1} (the hidden row of the batch's token
 * at q - 1, or the sequence's h). hidden: the trunk's rows (fwd_hidden).
 * A sequence that is empty, or fed at a position it does not continue
 * from (a restart, a resume after a hit), starts again there. */
int mtp_feed(mtp *d, const fwd_batch *b, mtp_seq *const *seqs, const float *hidden, strata_err *err);

/* The trunk's sequence was cut to n positions: so is s, and h is the
 * hidden state at n - 1 when the last fed batch had it (else none). */
void mtp_seq_cut(mtp *d, mtp_seq *s, int n);

/* Up to k guesses of the tokens at pos + 1, pos + 2, ... after token
 * `last` at position pos (not yet fed to the trunk), into out; returns
 * how many: 0 when s has no hidden state at pos - 1 or does not cover
 * the positions before pos. Logits of each guess to logits when not NULL
 * (k x n_vocab; for tests). */
int mtp_draft(mtp *d, mtp_seq *s, int32_t last, int pos, int k, int32_t *out, float *logits, strata_err *err);

/* The block's logits for tokens[0, n) at positions 0.. of a fresh
 * sequence, token q with hidden[q - 1] (zeros for q = 0): n x n_vocab
 * into logits, and its own normed output states (n x n_embd) into h_out
 * when not NULL. For tests against a reference (tools/ref_forward.py). */
int mtp_eval(mtp *d, const int32_t *tokens, const float *hidden, int n, float *logits, float *h_out,
             strata_err *err);

#endif
