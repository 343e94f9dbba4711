/* deltanet.c - the gated delta-net layer of qwen35 (Qwen3.5 / 3.6), as
 * llama.cpp computes it.
 *
 * For a batch of n tokens (normed input rows x):
 *   1. in-projections: qkv = W_qkv x (conv channels [q | k | v]),
 *      z = W_gate x, beta = W_beta x, alpha = W_alpha x;
 *   2. short causal conv per channel over the last d_conv inputs (the
 *      sequence's conv state holds the d_conv - 1 before this token),
 *      then SiLU;
 *   3. per token: q and k heads L2-normalised (x / sqrt(sum x^2 + eps)),
 *      beta = sigmoid(beta), g = softplus(alpha + dt_bias) * A;
 *   4. delta rule per value head h (key head h % n_k_heads), state S
 *      [value dim j][key dim i]:
 *        S *= exp(g);  d = beta * (v - S k);  S += d k^T;
 *        o = (S q) / sqrt(head dim);
 *   5. o per head: RMS norm (ssm_norm) times SiLU(z);
 *   6. out = W_out o.
 * Batch invariance: steps 2 and 4 walk the batch's tokens in order, each
 * on its own sequence's state; threads split channels (2) or value heads
 * (4), never a token's reduction. So a token's bits are the same whether
 * it came in a prefill chunk of any size or as a decode step: the
 * recurrence is computed token by token (no chunked closed form), the
 * price of exactness.
 * Does not: keep snapshots of the state (a sequence cannot be rewound;
 * see kv.h), or run the attention layers (forward.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/delta.h"
#include "base/mem.h"
#include "model/forward_int.h"

struct dn_ctx {
    int conv_dim, qk_dim; /* channels; q (= k) width: key heads x head size */
    size_t layer_floats, conv_floats; /* one layer's state, its conv part */
    float *qkv, *conv, *z, *beta, *g, *o; /* [max_batch][...] */
};

static size_t layer_state_floats(const model_hparams *hp, size_t *conv_floats) {
    size_t conv_dim = 2 * (size_t)hp->ssm_n_k_heads * hp->ssm_d_state + hp->ssm_d_inner;
    *conv_floats = conv_dim * (size_t)(hp->ssm_d_conv - 1);
    return *conv_floats + (size_t)hp->ssm_n_v_heads * hp->ssm_d_state * hp->ssm_d_state;
}

size_t dn_state_floats(const model *m) {
    size_t conv;
    return m->hp.n_rec_layer ? layer_state_floats(&m->hp, &conv) * m->hp.n_rec_layer : 0;
}

dn_ctx *dn_new(const model *m, int max_batch) {
    const model_hparams *hp = &m->hp;
    if (!hp->n_rec_layer) return NULL;
    dn_ctx *d = xcalloc(1, sizeof *d);
    d->qk_dim = hp->ssm_n_k_heads * hp->ssm_d_state;
    d->conv_dim = 2 * d->qk_dim + hp->ssm_d_inner;
    d->layer_floats = layer_state_floats(hp, &d->conv_floats);
    size_t n = (size_t)max_batch, vd = hp->ssm_d_inner, hv = hp->ssm_n_v_heads;
    d->qkv = xaligned(n * d->conv_dim * sizeof(float));
    d->conv = xaligned(n * d->conv_dim * sizeof(float));
    d->z = xaligned(n * vd * sizeof(float));
    d->beta = xaligned(n * hv * sizeof(float));
    d->g = xaligned(n * hv * sizeof(float));
    d->o = xaligned(n * vd * sizeof(float));
    return d;
}

void dn_free(dn_ctx *d) {
    if (!d) return;
    free(d->qkv), free(d->conv), free(d->z), free(d->beta), free(d->g), free(d->o);
    free(d);
}

typedef struct {
    fwd_ctx *c;
    dn_ctx *d;
    const fwd_batch *b;
    const model_layer *L;
} dn_job;

/* This layer's conv state ([conv_dim][d_conv - 1]) of token t's sequence. */
static float *conv_state(const dn_job *j, int t) {
    return j->b->seqs[t]->rs + (size_t)j->L->rec_layer * j->d->layer_floats;
}

static float *ssm_state(const dn_job *j, int t, int h) {
    int S = j->c->m->hp.ssm_d_state;
    return conv_state(j, t) + j->d->conv_floats + (size_t)h * S * S;
}

#define CONV_CB 16 /* channels per block: one cache line of a token's row */
#define CONV_KMAX 16 /* model_qwen35.c bounds d_conv */

/* Step 2 for channels [c0, c0 + nc) over tokens [t0, t1) of one
 * sequence: the d_conv - 1 inputs before each token in registers (hist,
 * [k][channel]), read from the sequence's state once and written back
 * once. Per channel and token the sum runs in the same order as ever:
 * 0 + s_0 w_0 + ... + s_(K-2) w_(K-2) + x w_(K-1), then SiLU. */
static void conv_block(const dn_job *j, int c0, int nc, int t0, int t1) {
    int K = j->c->m->hp.ssm_d_conv, C = j->d->conv_dim;
    float hist[CONV_KMAX][CONV_CB], w[CONV_KMAX][CONV_CB];
    float *st = conv_state(j, t0) + (size_t)c0 * (K - 1);
    const float *wsrc = (const float *)j->L->ssm_conv1d.data + (size_t)c0 * K; /* [C][K] */
    for (int l = 0; l < nc; l++) {
        for (int k = 0; k < K - 1; k++) hist[k][l] = st[l * (K - 1) + k];
        for (int k = 0; k < K; k++) w[k][l] = wsrc[l * K + k];
    }
    for (int t = t0; t < t1; t++) {
        const float *x = j->d->qkv + (size_t)t * C + c0;
        float *y = j->d->conv + (size_t)t * C + c0, sum[CONV_CB];
        for (int l = 0; l < nc; l++) sum[l] = 0.0f;
        for (int k = 0; k < K - 1; k++)
            for (int l = 0; l < nc; l++) sum[l] += hist[k][l] * w[k][l];
        for (int l = 0; l < nc; l++) sum[l] += x[l] * w[K - 1][l];
        for (int k = 0; k + 1 < K - 1; k++) memcpy(hist[k], hist[k + 1], sizeof hist[k]);
        if (K > 1) memcpy(hist[K - 2], x, (size_t)nc * sizeof(float));
        for (int l = 0; l < nc; l++) y[l] = sum[l] / (1.0f + expf(-sum[l]));
    }
    for (int l = 0; l < nc; l++)
        for (int k = 0; k < K - 1; k++) st[l * (K - 1) + k] = hist[k][l];
}

/* Step 2 for this thread's channel blocks: every run of one sequence's
 * tokens, in batch order. */
static void conv_worker(void *p, int ith, int nth) {
    dn_job *j = p;
    int C = j->d->conv_dim;
    long lo, hi;
    pool_range((C + CONV_CB - 1) / CONV_CB, ith, nth, &lo, &hi);
    for (long cb = lo; cb < hi; cb++) {
        int c0 = (int)cb * CONV_CB, nc = C - c0 < CONV_CB ? C - c0 : CONV_CB;
        for (int t0 = 0, t1; t0 < j->b->n; t0 = t1) {
            for (t1 = t0 + 1; t1 < j->b->n && j->b->seqs[t1] == j->b->seqs[t0]; t1++) {}
            conv_block(j, c0, nc, t0, t1);
        }
    }
}

static void l2norm(float *x, int n, float eps) {
    float ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    float scale = 1.0f / sqrtf(ss + eps);
    for (int i = 0; i < n; i++) x[i] *= scale;
}

static float softplus(float x) { return x > 20.0f ? x : logf(1.0f + expf(x)); }

/* Step 3 for token t. */
static void gates_row(fwd_ctx *c, void *arg, int t) {
    dn_job *j = arg;
    const model_hparams *hp = &c->m->hp;
    int S = hp->ssm_d_state, hv = hp->ssm_n_v_heads;
    float *row = j->d->conv + (size_t)t * j->d->conv_dim;
    for (int h = 0; h < 2 * hp->ssm_n_k_heads; h++) l2norm(row + (size_t)h * S, S, hp->rms_eps);
    float *beta = j->d->beta + (size_t)t * hv, *g = j->d->g + (size_t)t * hv;
    const float *dt = j->L->ssm_dt.data, *a = j->L->ssm_a.data;
    for (int h = 0; h < hv; h++) {
        beta[h] = 1.0f / (1.0f + expf(-beta[h]));
        g[h] = expf(softplus(g[h] + dt[h]) * a[h]); /* the decay e^g */
    }
}

/* Step 4 for value heads [lo, hi): per head, the batch's runs of
 * consecutive tokens of one sequence in batch order, each run one
 * delta_rows call (backend/delta.h) on that sequence's state. */
static void delta_worker(void *p, int ith, int nth) {
    dn_job *j = p;
    const model_hparams *hp = &j->c->m->hp;
    int S = hp->ssm_d_state, hv = hp->ssm_n_v_heads, hk = hp->ssm_n_k_heads, C = j->d->conv_dim;
    float scale = 1.0f / sqrtf((float)S);
    long lo, hi;
    pool_range(hv, ith, nth, &lo, &hi);
    for (long h = lo; h < hi; h++) {
        for (int t0 = 0, t1; t0 < j->b->n; t0 = t1) {
            for (t1 = t0 + 1; t1 < j->b->n && j->b->seqs[t1] == j->b->seqs[t0]; t1++) {}
            const float *row = j->d->conv + (size_t)t0 * C;
            delta_run r = {.k = row + j->d->qk_dim + (h % hk) * S, .q = row + (h % hk) * S,
                           .v = row + 2 * j->d->qk_dim + h * S, .beta = j->d->beta + (size_t)t0 * hv + h,
                           .decay = j->d->g + (size_t)t0 * hv + h,
                           .o = j->d->o + (size_t)t0 * hp->ssm_d_inner + h * S, .x_stride = (size_t)C,
                           .g_stride = (size_t)hv, .o_stride = (size_t)hp->ssm_d_inner, .n_tok = t1 - t0};
            delta_rows(&r, ssm_state(j, t0, (int)h), S, 0, S, scale);
        }
    }
}

/* Step 5 for token t: RMS norm per head, times SiLU(z). */
static void gated_norm_row(fwd_ctx *c, void *arg, int t) {
    dn_job *j = arg;
    const model_hparams *hp = &c->m->hp;
    int S = hp->ssm_d_state;
    for (int h = 0; h < hp->ssm_n_v_heads; h++) {
        float *o = j->d->o + (size_t)t * hp->ssm_d_inner + (size_t)h * S;
        const float *z = j->d->z + (size_t)t * hp->ssm_d_inner + (size_t)h * S;
        fwd__rmsnorm(o, o, j->L->ssm_norm.data, S, hp->rms_eps);
        for (int i = 0; i < S; i++) o[i] *= z[i] / (1.0f + expf(-z[i]));
    }
}

void dn_layer(fwd_ctx *c, const fwd_batch *b, int il, float *out) {
    dn_ctx *d = c->dn;
    const model_layer *L = &c->m->layers[il];
    dn_job j = {c, d, b, L};
    const model_tensor *w[4] = {&L->ssm_qkv, &L->ssm_gate, &L->ssm_beta, &L->ssm_alpha};
    float *y[4] = {d->qkv, d->z, d->beta, d->g};
    fwd__matmul_group(c, c->xn, b->n, w, y, 4);
    pool_run(c->threads, conv_worker, &j);
    fwd__for_rows(c, b->n, gates_row, &j);
    pool_run(c->threads, delta_worker, &j);
    fwd__for_rows(c, b->n, gated_norm_row, &j);
    fwd__matmul(c, d->o, b->n, &L->ssm_out, out);
}
