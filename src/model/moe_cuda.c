/* moe_cuda.c - the mixture-of-experts feed-forward on the GPU (qwen3moe,
 * qwen35moe), model/moe.c's steps for the GPU pass (forward_cuda.c):
 *   router logits (one matmul, + bias) -> copied to the host, which
 *   routes each token as the CPU does (moe_route: gating, top-k,
 *   renormalisation) and groups the batch's (token, k) pairs by expert
 *   into slots, tokens in batch order within an expert -> the slots'
 *   rows gathered -> per active expert a gate and an up matmul over its
 *   slots (its slice of the uploaded stack) -> SwiGLU -> per active
 *   expert a down matmul -> per token the weighted sum of its k rows,
 *   best first, + the shared expert's SwiGLU times sigmoid(gate . x)
 *   (qwen35moe), added to the residual (cuda_moe_add).
 * Batch invariance: a slot's row goes through matmuls whose row bits do
 * not depend on the rows beside it (cuda.h), routing is per token and the
 * sum runs in the token's own k order, so the grouping never changes a
 * token's bits. The routing waits for the logits on the host (one copy
 * a layer): no decode graph for these models (forward_cuda.c).
 * Ran on the H100 (2026-11-27: gpu_moe_matches_cpu_and_float64).
 * Does not: gpt-oss (experts with biases, the clamped SwiGLU, MXFP4). */
#include <stdlib.h>

#include "backend/cuda/cuda.h"
#include "base/mem.h"
#include "model/forward_cuda_int.h"
#include "model/moe.h"

_Static_assert(sizeof(int) == sizeof(int32_t), "the host's slot tables are uploaded as int32_t");

typedef struct mec_tensors {
    dev_tensor router, router_b, gate, up, down, sh_gate_inp, sh_gate, sh_up, sh_down;
    size_t gate_step, up_step, down_step; /* bytes from one expert's matrix to the next */
} mec_tensors;

struct mec {
    const model *m;
    int k;
    mec_tensors *layers; /* by layer */
    float *logits, *h_logits, *h_p; /* [max_batch][n_expert] on the device, the host's copy; one token's scratch */
    int32_t *slot_tok, *slot_of;    /* [max_batch * k] each slot's token (grouped by expert), token t's j-th's slot */
    int *h_slot_tok, *h_slot_of;    /* their host copies (moe_group's) */
    float *w, *h_w;                 /* [max_batch][k] its weight */
    int *h_ids, *first, *fill;      /* chosen experts; each expert's first slot; the grouping's cursor */
    float *xs, *g, *u, *y;          /* the slots' rows: input, gate, up, output */
    float *sh_g, *sh_u, *sh_y, *sh_s; /* the shared expert's, per token */
};

/* An expert stack as one tensor of n_expert x rows rows; *step: one
 * expert's bytes. */
static int upload_stack(fwdc *c, const model_experts *x, dev_tensor *out, size_t *step, strata_err *err) {
    model_tensor t = x->m;
    if (x->expert_bytes != t.row_bytes * (size_t)t.rows)
        return strata_errf(err, STRATA_EUNSUPPORTED, "cuda: an expert stack whose experts are not contiguous");
    t.rows *= x->n_expert;
    *step = x->expert_bytes;
    if (fwdc__upload(c, &t, out, err)) return err->code;
    out->rows = (int)x->m.rows;
    return 0;
}

static int upload_layer(fwdc *c, const model_moe *mo, mec_tensors *T, strata_err *err) {
    const model_tensor *src[] = {&mo->router, &mo->router_b, &mo->sh_gate_inp, &mo->sh_gate, &mo->sh_up, &mo->sh_down};
    dev_tensor *dst[] = {&T->router, &T->router_b, &T->sh_gate_inp, &T->sh_gate, &T->sh_up, &T->sh_down};
    for (size_t i = 0; i < sizeof src / sizeof src[0]; i++)
        if (fwdc__upload(c, src[i], dst[i], err)) return err->code;
    if (upload_stack(c, &mo->gate, &T->gate, &T->gate_step, err) || upload_stack(c, &mo->up, &T->up, &T->up_step, err) ||
        upload_stack(c, &mo->down, &T->down, &T->down_step, err))
        return err->code;
    return 0;
}

static int alloc_all(fwdc *c, mec *x, int max_batch, strata_err *err) {
    const model_hparams *hp = &x->m->hp;
    size_t n = (size_t)max_batch, ne = (size_t)hp->n_expert, slots = n * x->k, E = (size_t)hp->n_embd;
    size_t F = (size_t)hp->n_ff_exp, S = hp->n_ff_shexp > 0 ? (size_t)hp->n_ff_shexp : 0;
    float **bufs[] = {&x->logits, &x->w, &x->xs, &x->g, &x->u, &x->y, &x->sh_g, &x->sh_u, &x->sh_y, &x->sh_s};
    size_t sizes[] = {n * ne, slots, slots * E, slots * F, slots * F, slots * E, n * S, n * S, S ? n * E : 0, S ? n : 0};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i] && !(*bufs[i] = fwdc__alloc(c, sizes[i] * sizeof(float), err))) return err->code;
    if (!(x->slot_tok = fwdc__alloc(c, slots * sizeof(int32_t), err)) ||
        !(x->slot_of = fwdc__alloc(c, slots * sizeof(int32_t), err)))
        return err->code;
    x->h_logits = xmalloc(n * ne * sizeof(float));
    x->h_p = xmalloc(ne * sizeof(float));
    x->h_slot_tok = xmalloc(slots * sizeof(int));
    x->h_slot_of = xmalloc(slots * sizeof(int));
    x->h_w = xmalloc(slots * sizeof(float));
    x->h_ids = xmalloc(slots * sizeof(int));
    x->first = xmalloc((ne + 1) * sizeof(int));
    x->fill = xmalloc(ne * sizeof(int));
    return 0;
}

int mec_new(fwdc *c, const model *m, int max_batch, mec **out, strata_err *err) {
    const model_hparams *hp = &m->hp;
    *out = NULL;
    mec *x = xcalloc(1, sizeof *x);
    x->m = m;
    x->k = hp->n_expert_used;
    x->layers = xcalloc((size_t)hp->n_layer, sizeof(mec_tensors));
    int rc = 0;
    for (int il = 0; il < hp->n_layer && !rc; il++)
        if (m->layers[il].moe.router.data) rc = upload_layer(c, &m->layers[il].moe, &x->layers[il], err);
    if (!rc) rc = alloc_all(c, x, max_batch, err);
    if (rc) {
        mec_free(x);
        return rc;
    }
    *out = x;
    return 0;
}

void mec_free(mec *x) {
    if (!x) return;
    void *p[] = {x->layers, x->h_logits, x->h_p, x->h_slot_tok, x->h_slot_of, x->h_w, x->h_ids, x->first, x->fill};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) free(p[i]);
    free(x);
}

int mec_is_moe(const mec *x, int il) { return x && x->layers[il].router.d != NULL; }

/* Each token's experts and weights from the router's logits (the
 * host's), then the slots grouped by expert, uploaded. */
static int route(mec *x, int n, strata_err *err) {
    const model_hparams *hp = &x->m->hp;
    int ne = hp->n_expert, k = x->k;
    if (cuda_download(x->h_logits, x->logits, (size_t)n * ne * sizeof(float), err)) return err->code;
    for (int t = 0; t < n; t++) moe_route(hp, x->h_logits + (size_t)t * ne, x->h_p, x->h_ids + t * k, x->h_w + t * k);
    moe_group(x->h_ids, n, k, ne, x->first, x->fill, x->h_slot_of, x->h_slot_tok, NULL);
    size_t bytes = (size_t)n * k * sizeof(int32_t);
    if (cuda_upload(x->slot_tok, x->h_slot_tok, bytes, err) || cuda_upload(x->slot_of, x->h_slot_of, bytes, err) ||
        cuda_upload(x->w, x->h_w, (size_t)n * k * sizeof(float), err))
        return err->code;
    return 0;
}

/* y's slot rows = W_e in's, for every active expert e (its slice of the stack). */
static int experts(mec *x, const dev_tensor *w, size_t step, const float *in, size_t in_dim, float *y, size_t y_dim,
                   strata_err *err) {
    for (int e = 0; e < x->m->hp.n_expert; e++) {
        int s0 = x->first[e], m = x->first[e + 1] - s0;
        if (m && cuda_matmul(w->type, (const uint8_t *)w->d + (size_t)e * step, w->row_bytes, w->rows, w->cols,
                             in + (size_t)s0 * in_dim, m, y + (size_t)s0 * y_dim, err))
            return err->code;
    }
    return 0;
}

static int mm(const dev_tensor *w, const float *in, int n, float *y, strata_err *err) {
    return cuda_matmul(w->type, w->d, w->row_bytes, w->rows, w->cols, in, n, y, err);
}

/* The shared expert's SwiGLU of every row, and its gate's logit. */
static int shared_expert(mec *x, const mec_tensors *T, const float *d_xn, int n, strata_err *err) {
    if (mm(&T->sh_gate, d_xn, n, x->sh_g, err) || mm(&T->sh_up, d_xn, n, x->sh_u, err)) return err->code;
    cuda_swiglu(x->sh_g, x->sh_u, (size_t)n * T->sh_gate.rows);
    if (mm(&T->sh_down, x->sh_g, n, x->sh_y, err) || mm(&T->sh_gate_inp, d_xn, n, x->sh_s, err)) return err->code;
    return 0;
}

int mec_layer(mec *x, int il, const float *d_xn, int n, float *d_x, strata_err *err) {
    const model_hparams *hp = &x->m->hp;
    const mec_tensors *T = &x->layers[il];
    size_t E = (size_t)hp->n_embd, F = (size_t)hp->n_ff_exp;
    int slots = n * x->k;
    if (mm(&T->router, d_xn, n, x->logits, err)) return err->code;
    if (T->router_b.d) cuda_add_rows(x->logits, T->router_b.d, n, hp->n_expert);
    if (route(x, n, err)) return err->code;
    cuda_gather(x->xs, d_xn, x->slot_tok, slots, (int)E);
    if (experts(x, &T->gate, T->gate_step, x->xs, E, x->g, F, err) ||
        experts(x, &T->up, T->up_step, x->xs, E, x->u, F, err))
        return err->code;
    cuda_swiglu(x->g, x->u, (size_t)slots * F);
    if (experts(x, &T->down, T->down_step, x->g, F, x->y, E, err)) return err->code;
    int shared = T->sh_up.d != NULL;
    if (shared && shared_expert(x, T, d_xn, n, err)) return err->code;
    cuda_moe_add(d_x, x->y, x->slot_of, x->w, n, x->k, (int)E, shared ? x->sh_y : NULL, x->sh_s);
    return 0;
}
