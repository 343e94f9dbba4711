/* deltanet_cuda.c - qwen35's gated delta-net layer on the GPU, for the
 * one-sequence pass and the paged one (forward_cuda.c): deltanet.c's
 * steps, each a kernel of backend/cuda/cuda.h ("qwen35") over the call's
 * n tokens (the paged pass's conv and delta rule over every sequence's
 * run in one launch, each run on its own state: dnc_set_runs):
 *   1. in-projections qkv, z, beta, alpha (matmuls of one kind share a launch);
 *   2. the short causal conv over qkv with its conv state, then SiLU
 *      (the projections in qkv_in, the conv's output in qkv);
 *   3. q and k heads L2-normed, beta = sigmoid(beta), the decay;
 *   4. the delta rule per value head with its state;
 *   5. RMS norm per head times SiLU(z);
 * the out-projection (6.) is the caller's, into the residual.
 * The state of every recurrent layer lives in device memory, in the GPU's
 * own layout (per layer: conv [d_conv - 1][conv_dim], oldest row first,
 * then the delta state [v heads][dim][dim]): the one-sequence pass's
 * here, the paged pass's in each sequence (kv_seq.rs, the pool's device
 * memory; snapshots of it are downloaded as they are). The CPU's is
 * [conv_dim][d_conv - 1] then the same delta state: the two never meet
 * (a GPU engine's numerics id names other blocks and snapshots). Zeroed
 * at position 0, carried from call to call: prefill chunks and decode
 * steps continue the same state, and a token's bits do not depend on the
 * chunking or the batch (the conv's taps read inputs only; the delta
 * rule walks a run's tokens in order). Ran on the H100 (2026-11-27).
 * Does not: the feed-forward (forward_cuda.c; qwen35moe's experts:
 * moe_cuda.c). */
#include <math.h>
#include <stdlib.h>

#include "backend/cuda/cuda.h"
#include "base/mem.h"
#include "model/forward_cuda_int.h"

typedef struct dnc_tensors {
    dev_tensor qkv, gate, conv, dt, a, beta, alpha, norm, out;
} dnc_tensors;

struct dnc {
    const model *m;
    int conv_dim, qk_dim;
    size_t conv_floats, layer_floats; /* one layer's conv state, and its whole state */
    float scale;                      /* the delta rule's read-out, 1 / sqrt(dim) as deltanet.c */
    float *state;                     /* every recurrent layer's, [rec_layer][layer_floats] */
    float *qkv_in, *qkv, *z, *beta, *g, *o; /* [max_batch][...]: qkv_in the projection, qkv the conv's output;
                                             * g: alpha, then the decay */
    dnc_tensors *layers;              /* by rec_layer */
    cuda_delta_run *runs;             /* paged: the call's runs and their states, in device memory */
    int n_runs, serial, max_run;      /* serial: a sequence has two runs (launched one after the other);
                                       * max_run: the most tokens of a run */
};

static int upload_layer(fwdc *c, const model_layer *L, dnc_tensors *T, strata_err *err) {
    const model_tensor *src[] = {&L->ssm_qkv, &L->ssm_gate, &L->ssm_conv1d, &L->ssm_dt, &L->ssm_a,
                                 &L->ssm_beta, &L->ssm_alpha, &L->ssm_norm, &L->ssm_out};
    dev_tensor *dst[] = {&T->qkv, &T->gate, &T->conv, &T->dt, &T->a, &T->beta, &T->alpha, &T->norm, &T->out};
    for (size_t i = 0; i < sizeof src / sizeof src[0]; i++)
        if (fwdc__upload(c, src[i], dst[i], err)) return err->code;
    return 0;
}

static int alloc_all(fwdc *c, dnc *d, int max_batch, int paged, strata_err *err) {
    const model_hparams *hp = &d->m->hp;
    size_t n = (size_t)max_batch, vd = (size_t)hp->ssm_d_inner, hv = (size_t)hp->ssm_n_v_heads;
    float **bufs[] = {&d->qkv_in, &d->qkv, &d->z, &d->beta, &d->g, &d->o};
    size_t sizes[] = {(size_t)d->conv_dim, (size_t)d->conv_dim, vd, hv, hv, vd};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (!(*bufs[i] = fwdc__alloc(c, n * sizes[i] * sizeof(float), err))) return err->code;
    if (paged) /* the states are the pool's sequences' (kv_seq.rs), a table of them a call */
        return (d->runs = fwdc__alloc(c, n * sizeof(cuda_delta_run), err)) ? 0 : err->code;
    if (!(d->state = fwdc__alloc(c, dnc_state_floats(d) * sizeof(float), err))) return err->code;
    dnc_reset(d);
    return 0;
}

int dnc_new(fwdc *c, const model *m, int max_batch, int paged, dnc **out, strata_err *err) {
    const model_hparams *hp = &m->hp;
    *out = NULL;
    int rc = cuda_delta_init(err);
    if (rc) return rc;
    dnc *d = xcalloc(1, sizeof *d);
    d->m = m;
    d->qk_dim = hp->ssm_n_k_heads * hp->ssm_d_state;
    d->conv_dim = 2 * d->qk_dim + hp->ssm_d_inner;
    d->conv_floats = (size_t)d->conv_dim * (hp->ssm_d_conv - 1);
    d->layer_floats = d->conv_floats + (size_t)hp->ssm_n_v_heads * hp->ssm_d_state * hp->ssm_d_state;
    d->scale = 1.0f / sqrtf((float)hp->ssm_d_state);
    d->layers = xcalloc((size_t)hp->n_rec_layer, sizeof(dnc_tensors));
    for (int il = 0; il < hp->n_layer && !rc; il++)
        if (m->layers[il].recurrent) rc = upload_layer(c, &m->layers[il], &d->layers[m->layers[il].rec_layer], err);
    if (!rc) rc = alloc_all(c, d, max_batch, paged, err);
    if (rc) {
        dnc_free(d);
        return rc;
    }
    *out = d;
    return 0;
}

void dnc_free(dnc *d) {
    if (!d) return;
    free(d->layers);
    free(d);
}

void dnc_reset(dnc *d) { cuda_zero(d->state, dnc_state_floats(d) * sizeof(float)); }

/* Step 1: the four in-projections of x (normed, or normed in each
 * launch with weights nw), consecutive ones of one kind (type and row
 * size) in one launch of up to three (the same bits as separate ones). */
static int in_proj(dnc *d, const dnc_tensors *T, const float *x, const float *nw, int n, strata_err *err) {
    const dev_tensor *w[4] = {&T->qkv, &T->gate, &T->beta, &T->alpha};
    float *y[4] = {d->qkv_in, d->z, d->beta, d->g};
    for (int i = 0, j; i < 4; i = j) {
        const void *ws[3];
        int rows[3];
        float *ys[3];
        for (j = i; j < 4 && j - i < 3 && fwdc__same_kind(w[i], w[j]); j++)
            ws[j - i] = w[j]->d, rows[j - i] = w[j]->rows, ys[j - i] = y[j];
        if (cuda_matmul_multi(w[i]->type, w[i]->row_bytes, w[i]->cols, x, n, j - i, ws, rows, ys, 0, nw,
                              d->m->hp.rms_eps, err))
            return err->code;
    }
    return 0;
}

int dnc_norms(const dnc *d, int il, int n) {
    const dnc_tensors *T = &d->layers[d->m->layers[il].rec_layer];
    return cuda_matmul_norms(T->qkv.type, n) && cuda_matmul_norms(T->gate.type, n) &&
           cuda_matmul_norms(T->beta.type, n) && cuda_matmul_norms(T->alpha.type, n);
}

int dnc_set_runs(dnc *d, const cuda_delta_run *runs, int n_runs, strata_err *err) {
    d->n_runs = n_runs;
    d->serial = 0; /* one launch would run a state's two runs side by side */
    d->max_run = 0;
    for (int i = 0; i < n_runs; i++) d->max_run = runs[i].n > d->max_run ? runs[i].n : d->max_run;
    for (int i = 0; i < n_runs && !d->serial; i++)
        for (int j = 0; j < i && !d->serial; j++) d->serial = runs[i].state == runs[j].state;
    return cuda_upload(d->runs, runs, (size_t)n_runs * sizeof(cuda_delta_run), err);
}

/* The paged call's runs launch all at once (one wave of n_runs), or
 * one a launch in order when a state has two (serial). */
static void waves(const dnc *d, int *n_waves, int *per_wave) {
    *n_waves = d->serial ? d->n_runs : 1;
    *per_wave = d->serial ? 1 : d->n_runs;
}

/* The conv over the paged call's runs. */
static int conv_runs(dnc *d, const dnc_tensors *T, size_t off, strata_err *err) {
    int n_waves, per;
    waves(d, &n_waves, &per);
    for (int i = 0; i < n_waves; i++)
        if (cuda_delta_conv_runs(d->qkv, d->qkv_in, d->runs + i, per, d->max_run, off, T->conv.d, d->conv_dim,
                                 d->m->hp.ssm_d_conv, err))
            return err->code;
    return 0;
}

/* The delta rule likewise. */
static int rule_runs(dnc *d, size_t off, strata_err *err) {
    const model_hparams *hp = &d->m->hp;
    int n_waves, per;
    waves(d, &n_waves, &per);
    for (int i = 0; i < n_waves; i++)
        if (cuda_delta_rule_runs(d->o, d->runs + i, per, off, d->qkv, d->beta, d->g, d->conv_dim, hp->ssm_d_state,
                                 hp->ssm_n_k_heads, hp->ssm_n_v_heads, d->scale, err))
            return err->code;
    return 0;
}

/* Steps 2 to 4 with a conv and a delta rule launch for every run (paged:
 * dnc_set_runs's table), or for the call's one run on the one state. */
static int conv_and_rule(dnc *d, const dnc_tensors *T, int rl, int n, strata_err *err) {
    const model_hparams *hp = &d->m->hp;
    int S = hp->ssm_d_state, hk = hp->ssm_n_k_heads, hv = hp->ssm_n_v_heads;
    size_t conv_off = (size_t)rl * d->layer_floats, delta_off = conv_off + d->conv_floats;
    if (d->runs ? conv_runs(d, T, conv_off, err)
                : cuda_delta_conv(d->qkv, d->qkv_in, d->state + conv_off, T->conv.d, n, d->conv_dim, hp->ssm_d_conv,
                                  err))
        return err->code;
    if (cuda_delta_gates(d->qkv, d->beta, d->g, T->dt.d, T->a.d, n, d->conv_dim, S, hk, hv, hp->rms_eps, err))
        return err->code;
    if (d->runs ? rule_runs(d, delta_off, err)
                : cuda_delta_rule(d->o, d->state + delta_off, d->qkv, d->beta, d->g, n, d->conv_dim, S, hk, hv,
                                  d->scale, err))
        return err->code;
    return 0;
}

int dnc_layer(dnc *d, int il, const float *d_in, const float *nw, int n, const float **o, const dev_tensor **w_out,
              strata_err *err) {
    const model_hparams *hp = &d->m->hp;
    int rl = d->m->layers[il].rec_layer;
    const dnc_tensors *T = &d->layers[rl];
    if (in_proj(d, T, d_in, nw, n, err) || conv_and_rule(d, T, rl, n, err) ||
        cuda_delta_gated_norm(d->o, d->z, T->norm.d, n, hp->ssm_n_v_heads, hp->ssm_d_state, hp->rms_eps, err))
        return err->code;
    *o = d->o;
    *w_out = &T->out;
    return 0;
}

size_t dnc_state_floats(const dnc *d) { return d->layer_floats * (size_t)d->m->hp.n_rec_layer; }
