/* forward_int.h - the forward context and its helpers, shared by
 * forward.c, the recurrent layer (deltanet.c), the mixture-of-experts
 * feed-forward (moe.c) and the MTP drafter (mtp.c, which builds its
 * block's input rows with the matmul); not for other modules. */
#ifndef STRATA_FORWARD_INT_H
#define STRATA_FORWARD_INT_H

#include "backend/attn.h"
#include "model/forward.h"

typedef struct dn_ctx dn_ctx;
typedef struct moe_ctx moe_ctx;

#define MM_MAX 4     /* matmuls sharing one input (Q, K, V; deltanet qkv, z, beta, alpha) */
#define ROW_ALIGN 16 /* thread row splits keep kernel tiles whole */
/* Tokens of one sequence per attention work item: each key tile is
 * widened once for all of them (x the group's query heads). 64, not 32:
 * the AMX kernels' fill is shared by twice the queries (Gemma 3 call at
 * depth 4096: 4.3 ms for 64 tokens against 2 x 2.7 for 32); the float32
 * kernels gain 1-4%; a query's bits do not depend on its company
 * (backend/attn.h), so the K/V and every cached block stay the same. */
#define ATTN_RUN 64

typedef struct fwd_run_span {
    int t0, t1; /* batch tokens [t0, t1): one sequence, consecutive positions */
} fwd_run_span;

struct fwd_ctx {
    const model *m;
    kv_pool *kv;
    pool *threads;
    int max_batch;
    float *x, *xn, *q, *k, *v, *att, *gate, *up, *tmp;
    uint8_t *xq[MM_MAX];
    size_t xq_cap;
    uint8_t *xt[MM_MAX];    /* xq's slots laid out for their kernels (quant_xtiles), or unused */
    size_t xt_cap[MM_MAX];
    float *rope_inv_freq; /* rope_dim / 2 */
    float *rope_inv_swa;  /* the same for sliding-window layers (their own base) */
    /* The batch's rotation angles, computed once per batch for every
     * layer: [token][kind][pair] with kind 0 = global layers, 1 =
     * sliding-window layers (only when the model has them). */
    float *rope_cos, *rope_sin;
    int rope_kinds;
    /* Attention: the batch cut into runs of consecutive tokens of one
     * sequence (at most ATTN_RUN each); a work item is (run, KV head). */
    fwd_run_span *runs;
    int n_runs;
    float *attn_ws;            /* n_threads x attn_ws_n floats */
    size_t attn_ws_n;
    attn_query *attn_qs;       /* n_threads x ATTN_RUN x (query heads per KV head) */
    float **attn_stp;          /* the same count: their segment states (split decode) */
    float *attn_part;          /* [small batch token][head][seg_cap] segment states */
    int seg_cap;
    const uint16_t **kb, **vb; /* n_threads x blocks_cap: block tables */
    int blocks_cap;
    float *qg;           /* qwen35: Q rows with their gate, [n][n_head][2][head_dim] */
    float *attn_gate;    /* qwen35: the gate part, [n][n_head * head_dim] */
    uint8_t *rope_off;   /* qwen35: per rotated pair, 1 = M-RoPE section with position 0 */
    dn_ctx *dn;          /* qwen35: the recurrent layers' scratch (deltanet.c) */
    moe_ctx *moe;        /* mixture-of-experts scratch (moe.c); NULL for dense models */
    float *hidden;       /* fwd_keep_hidden: every batch row's output-normed final state, or NULL */
    float *ffn_scratch;  /* ffn.c: per thread, a work item's gate and up rows (NULL for MoE models) */
    int ffn_unfused;     /* fwd_use_fusion(c, 0): the feed-forward's separate passes */
};

typedef void (*row_fn)(fwd_ctx *c, void *arg, int t);

/* fn(c, arg, t) for t in [0, n), spread over the pool when worth it. */
void fwd__for_rows(fwd_ctx *c, int n, row_fn fn, void *arg);
/* c->xq's slots (all MM_MAX) grown to hold n rows of any of the n_w
 * weights' activations; growing frees what they held. */
void fwd__reserve_xq(fwd_ctx *c, const model_tensor **w, int n_w, int n);
/* y[t][:] = W xq[t] for n activation rows already in w's format. */
void fwd__matmul_xq(fwd_ctx *c, const uint8_t *xq, size_t bytes, int n, const model_tensor *w, float *y);
/* Rows per matmul chunk for a weight of `rows` rows over nth threads. */
int fwd__chunk_rows(long rows, int nth);
/* x's n rows in each weight's activation format (once per distinct
 * format, in c->xq): xq[i] rows bytes[i] apart, for weight i; with xt,
 * xt[i] those rows laid out once for weight i's kernel (fwd__xtiles). */
void fwd__quant_inputs(fwd_ctx *c, const float *x, int n, const model_tensor **w, int n_w, const uint8_t **xq,
                       size_t *bytes, const uint8_t **xt);
/* w's n activation rows xq laid out for its kernel in c->xt[slot] (the
 * pool makes the tiles), so its row chunks on every thread share them
 * (backend/quant.h: quant_xtiles); NULL where the kernel reads xq as is. */
const uint8_t *fwd__xtiles(fwd_ctx *c, int slot, const model_tensor *w, const uint8_t *xq, size_t bytes, int n);
/* y_i[t][:] = W_i x[t] for up to MM_MAX weights sharing the input rows x. */
void fwd__matmul_group(fwd_ctx *c, const float *x, int n, const model_tensor **w, float **y, int n_w);
void fwd__matmul(fwd_ctx *c, const float *x, int n, const model_tensor *w, float *y);
/* out = x / rms(x) * w over n values (out may be x). */
void fwd__rmsnorm(float *out, const float *x, const float *w, int n, float eps);

/* ffn.c: the dense gated feed-forward of layer L over the n normed rows
 * xn (n_embd each), its output to out (n x n_embd; not xn); c->gate and
 * c->up are its scratch (unfused). fwd__ffn_scratch: the per-thread
 * buffer the fused pass needs (c->ffn_scratch; NULL for a MoE model). */
float *fwd__ffn_scratch(const model *m, int n_threads);
void fwd__ffn(fwd_ctx *c, const model_layer *L, const float *xn, int n, float *out);

/* deltanet.c: the gated delta-net layer il over the batch's normed rows
 * c->xn, its output (n x n_embd) to out. Recurrent state lives in the
 * sequences (kv_seq.rs), created on a sequence's first token. */
dn_ctx *dn_new(const model *m, int max_batch);
void dn_free(dn_ctx *d);
void dn_layer(fwd_ctx *c, const fwd_batch *b, int il, float *out);
/* Floats of recurrent state one sequence needs (0: no recurrent layers). */
size_t dn_state_floats(const model *m);

/* moe.c: the mixture-of-experts feed-forward of layer L over the batch's
 * n normed rows xn (n_embd each), its output to out (n x n_embd; not xn).
 * moe_new gives NULL for a dense model (hp.n_expert 0). */
moe_ctx *moe_new(const model *m, int max_batch);
void moe_free(moe_ctx *x);
void moe_ffn(fwd_ctx *c, const model_layer *L, const float *xn, int n, float *out);

#endif
