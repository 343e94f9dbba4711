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
 *      beta = sigmoid(beta), g = softplus(alpha + dt_bias) * A (kept as
 *      the decay exp(g));
 *   4. delta rule per value head h (key head h % n_k_heads), state S
 *      [value dim j][key dim i]:
 *        S *= exp(g);  d = beta * (v - S k);  S += d k^T;
 *        o = (S q) / sqrt(head dim);
 *   5. o per head: RMS norm (ssm_norm) times SiLU(z);
 *   6. out = W_out o.
 * Steps 2-5 of key head g touch only its q and k channels and its value
 * heads (g, g + n_k_heads, ...), so threads split key-head groups and run
 * the four steps in one pool job with no barrier between them (decode
 * hands off 3 times per layer, not 6).
 * Batch invariance: steps 2 and 4 walk the batch's tokens in order, each
 * on its own sequence's state; threads split groups, never a token's
 * reduction; the delta rule's kernels (backend/delta.h) give a row the
 * same instructions per token whatever the run length. So a token's bits
 * are the same whether it came in a prefill chunk of any size or as a
 * decode step: the recurrence is computed token by token (no chunked
 * closed form), the price of exactness.
 * Does not: keep snapshots of the state (a sequence cannot be rewound;
 * see kv.h), or run the attention layers (forward.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/conv.h"
#include "backend/delta.h"
#include "backend/vexp.h"
#include "base/mem.h"
#include "model/forward_int.h"

struct dn_ctx {
    int conv_dim, qk_dim; /* channels; q (= k) width: key heads x head size */
    size_t layer_floats, conv_floats; /* one layer's state, its conv part */
    float *qkv, *conv, *z, *beta, *g, *o; /* [max_batch][...]; g holds the decay e^g */
    float *conv_wt; /* per recurrent layer, ssm_conv1d transposed: [K][conv_dim] */
    float *ring;    /* the conv's last K - 1 inputs, [K - 1][conv_dim] */
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
    int K = hp->ssm_d_conv;
    size_t C = (size_t)d->conv_dim;
    d->conv_wt = xaligned((size_t)hp->n_rec_layer * K * C * sizeof(float));
    d->ring = xaligned((K > 1 ? K - 1 : 1) * C * sizeof(float));
    for (int il = 0; il < hp->n_layer; il++) {
        const model_layer *L = &m->layers[il];
        if (!L->recurrent) continue;
        const float *w = L->ssm_conv1d.data; /* [C][K] */
        float *wt = d->conv_wt + (size_t)L->rec_layer * K * C;
        for (size_t ch = 0; ch < C; ch++)
            for (int k = 0; k < K; k++) wt[(size_t)k * C + ch] = w[ch * K + k];
    }
    return d;
}

void dn_free(dn_ctx *d) {
    if (!d) return;
    free(d->qkv), free(d->conv), free(d->z), free(d->beta), free(d->g), free(d->o);
    free(d->conv_wt), free(d->ring);
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

#define CONV_AHEAD 4 /* tokens ahead to prefetch a channel range's inputs */

/* Step 2 for channels [c0, c1) over tokens [t0, t1) of one sequence,
 * token by token in order. The d_conv - 1 inputs before each token come
 * from ring rows ([K - 1][conv_dim], this thread's columns), filled from
 * the sequence's state ([channel][K - 1]) at the start and written back
 * at the end; weights are the layer's, transposed to [K][conv_dim]. */
static void conv_run(const dn_job *j, int c0, int c1, int t0, int t1) {
    int K = j->c->m->hp.ssm_d_conv, C = j->d->conv_dim, R = K - 1;
    float *st = conv_state(j, t0), *ring = j->d->ring;
    const float *w = j->d->conv_wt + (size_t)j->L->rec_layer * K * C;
    for (int k = 0; k < R; k++)
        for (int ch = c0; ch < c1; ch++) ring[(size_t)k * C + ch] = st[(size_t)ch * R + k];
    const float *hist[CONV_MAX_K]; /* model_qwen35.c bounds d_conv by it */
    for (int t = t0; t < t1; t++) {
        int i = t - t0;
        for (int k = 0; k < R; k++) hist[k] = ring + (size_t)((i + k) % R) * C + c0;
        const float *x = j->d->qkv + (size_t)t * C;
        float *y = j->d->conv + (size_t)t * C;
        if (t + CONV_AHEAD < t1) /* rows are conv_dim apart: too far for the hardware prefetcher */
            for (int ch = c0; ch < c1; ch += 16) __builtin_prefetch(x + (size_t)CONV_AHEAD * C + ch);
        conv_sum(y + c0, x + c0, hist, w + c0, (size_t)C, K, (size_t)(c1 - c0));
        if (R) memcpy(ring + (size_t)(i % R) * C + c0, x + c0, (size_t)(c1 - c0) * sizeof(float)); /* the oldest out, x in */
        vexp_silu_mul(y + c0, y + c0, NULL, (size_t)(c1 - c0)); /* SiLU */
    }
    int n = t1 - t0;
    for (int k = 0; k < R; k++) {
        const float *h = ring + (size_t)((n + k) % R) * C;
        for (int ch = c0; ch < c1; ch++) st[(size_t)ch * R + k] = h[ch];
    }
}

/* x / sqrt(sum x^2 + eps); the sum in delta_dot's fixed order (8 chains:
 * one chain of 128 was latency bound). */
static void l2norm(float *x, int n, float eps) {
    float scale = 1.0f / sqrtf(delta_dot(x, x, n) + eps);
    for (int i = 0; i < n; i++) x[i] *= scale;
}

static float softplus(float x) { return x > 20.0f ? x : logf(1.0f + expf(x)); }

/* Step 3 for token t: key head g's q and k, its value heads' gates. */
static void gates(const dn_job *j, int g, int t) {
    const model_hparams *hp = &j->c->m->hp;
    int S = hp->ssm_d_state, hv = hp->ssm_n_v_heads, hk = hp->ssm_n_k_heads;
    float *row = j->d->conv + (size_t)t * j->d->conv_dim;
    l2norm(row + (size_t)g * S, S, hp->rms_eps);
    l2norm(row + j->d->qk_dim + (size_t)g * S, S, hp->rms_eps);
    float *beta = j->d->beta + (size_t)t * hv, *dec = j->d->g + (size_t)t * hv;
    const float *dt = j->L->ssm_dt.data, *a = j->L->ssm_a.data;
    for (int h = g; h < hv; h += hk) {
        beta[h] = 1.0f / (1.0f + expf(-beta[h]));
        dec[h] = expf(softplus(dec[h] + dt[h]) * a[h]); /* the decay e^g */
    }
}

/* Step 4 for value head h over tokens [t0, t1) of one sequence. */
static void delta(const dn_job *j, int h, int t0, int t1) {
    const model_hparams *hp = &j->c->m->hp;
    int S = hp->ssm_d_state, hv = hp->ssm_n_v_heads, hk = hp->ssm_n_k_heads;
    const float *row = j->d->conv + (size_t)t0 * j->d->conv_dim;
    delta_run r = {.k = row + j->d->qk_dim + (h % hk) * S, .q = row + (h % hk) * S,
                   .v = row + 2 * j->d->qk_dim + h * S, .beta = j->d->beta + (size_t)t0 * hv + h,
                   .decay = j->d->g + (size_t)t0 * hv + h, .o = j->d->o + (size_t)t0 * hp->ssm_d_inner + h * S,
                   .x_stride = (size_t)j->d->conv_dim, .g_stride = (size_t)hv,
                   .o_stride = (size_t)hp->ssm_d_inner, .n_tok = t1 - t0};
    delta_rows(&r, ssm_state(j, t0, h), S, 0, S, 1.0f / sqrtf((float)S));
}

/* Step 5 for value head h of token t: RMS norm, times SiLU(z). */
static void gated_norm(const dn_job *j, int h, int t) {
    const model_hparams *hp = &j->c->m->hp;
    int S = hp->ssm_d_state;
    float *o = j->d->o + (size_t)t * hp->ssm_d_inner + (size_t)h * S;
    const float *z = j->d->z + (size_t)t * hp->ssm_d_inner + (size_t)h * S;
    fwd__rmsnorm(o, o, j->L->ssm_norm.data, S, hp->rms_eps);
    vexp_silu_mul(o, z, o, (size_t)S); /* o * SiLU(z) */
}

/* Steps 2-5 for key head g and its value heads (g, g + hk, ...) over
 * tokens [t0, t1) of one sequence. Nothing here reads another group's
 * channels or heads, so groups need no barrier between the steps. */
static void group_run(const dn_job *j, int g, int t0, int t1) {
    const model_hparams *hp = &j->c->m->hp;
    int S = hp->ssm_d_state, hv = hp->ssm_n_v_heads, hk = hp->ssm_n_k_heads, qk = j->d->qk_dim;
    conv_run(j, g * S, (g + 1) * S, t0, t1);
    conv_run(j, qk + g * S, qk + (g + 1) * S, t0, t1);
    for (int h = g; h < hv; h += hk) conv_run(j, 2 * qk + h * S, 2 * qk + (h + 1) * S, t0, t1);
    for (int t = t0; t < t1; t++) gates(j, g, t);
    for (int h = g; h < hv; h += hk) delta(j, h, t0, t1);
    for (int t = t0; t < t1; t++)
        for (int h = g; h < hv; h += hk) gated_norm(j, h, t);
}

#define GROUP_TOKENS 32 /* a token block: its rows of this thread's groups stay in L2 */

/* Steps 2-5, threads splitting key-head groups: every run of one
 * sequence's tokens in batch order, a block of GROUP_TOKENS at a time
 * for all of this thread's groups (a group reads a few hundred bytes of
 * each token's rows: blocks let the next group find them in cache). */
static void heads_worker(void *p, int ith, int nth) {
    dn_job *j = p;
    long lo, hi;
    pool_range(j->c->m->hp.ssm_n_k_heads, ith, nth, &lo, &hi);
    for (int t0 = 0, t1; t0 < j->b->n; t0 = t1) {
        for (t1 = t0 + 1; t1 < j->b->n && j->b->seqs[t1] == j->b->seqs[t0]; t1++) {}
        for (int b0 = t0; b0 < t1; b0 += GROUP_TOKENS) {
            int b1 = b0 + GROUP_TOKENS < t1 ? b0 + GROUP_TOKENS : t1;
            for (long g = lo; g < hi; g++) group_run(j, (int)g, b0, b1);
        }
    }
}

void dn_layer(fwd_ctx *c, const fwd_batch *b, int il, float *out) {
    dn_ctx *d = c->dn;
    const model_layer *L = &c->m->layers[il];
    dn_job j = {c, d, b, L};
    const model_tensor *w[4] = {&L->ssm_qkv, &L->ssm_gate, &L->ssm_beta, &L->ssm_alpha};
    float *y[4] = {d->qkv, d->z, d->beta, d->g};
    fwd__matmul_group(c, c->xn, b->n, w, y, 4);
    pool_run(c->threads, heads_worker, &j);
    fwd__matmul(c, d->o, b->n, &L->ssm_out, out);
}
