/* moe_cuda.c - the mixture-of-experts feed-forward on the GPU (qwen3moe,
 * qwen35moe), model/moe.c's steps for the GPU pass (forward_cuda.c):
 *   router logits (one matmul, + bias) -> each token routed on the device
 *   as the CPU routes (cuda_moe_route: gating, top-k, renormalisation)
 *   and the batch's (token, k) pairs grouped by expert into slots, tokens
 *   in batch order within an expert (cuda_moe_group) -> the slots' rows
 *   gathered -> each group's (an expert's up to 32 slots) gate and up
 *   matmuls with SwiGLU (its slice of the uploaded stack) -> each
 *   group's down matmul -> per token the weighted sum of its k rows, best first,
 *   + the shared expert's SwiGLU times sigmoid(gate . x) (qwen35moe),
 *   added to the residual (cuda_moe_add).
 * Each matmul is one launch for all of a step's experts (cuda_matmul_
 * experts reads the groups on the device: 3 launches a layer, or 2 with
 * SwiGLU fused, where there was one an active expert, up to 3 x 128):
 * nothing waits on the host, so a decode step is one graph.
 * Batch invariance: a slot's row goes through matmuls whose row bits do
 * not depend on the rows beside it or the launch (cuda.h), routing is
 * per token and the sum runs in the token's own k order, so the grouping
 * never changes a token's bits.
 * Ran on the H100 (2026-11-27: gpu_moe_matches_cpu_and_float64), routed
 * on the host then; the device's routing has not run on a GPU yet.
 * Does not: gpt-oss (experts with biases, the clamped SwiGLU, MXFP4). */
#include <stdlib.h>

#include "backend/cuda/cuda.h"
#include "base/mem.h"
#include "model/forward_cuda_int.h"

typedef struct mec_tensors {
    dev_tensor router, router_b, gate, up, down, sh_gate_inp, sh_gate, sh_up, sh_down;
    size_t gate_step, up_step, down_step; /* bytes from one expert's matrix to the next */
} mec_tensors;

struct mec {
    const model *m;
    int k;
    cuda_moe_gating gating;
    mec_tensors *layers; /* by layer */
    float *logits;       /* [max_batch][n_expert] */
    int32_t *ids;        /* [max_batch * k] token t's j-th expert */
    int32_t *slot_tok, *slot_of; /* [max_batch * k] each slot's token (grouped by expert), token t's j-th's slot */
    int32_t *groups;             /* the groups (cuda_moe_group) */
    float *w;                    /* [max_batch][k] its weight */
    float *xs, *g, *u, *y;       /* the slots' rows: input, gate, up, output */
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
    size_t groups = (size_t)cuda_moe_groups(max_batch, x->k, hp->n_expert) * CUDA_GROUP_INTS;
    void **bufs[] = {(void **)&x->logits, (void **)&x->w, (void **)&x->xs, (void **)&x->g, (void **)&x->u,
                     (void **)&x->y, (void **)&x->sh_g, (void **)&x->sh_u, (void **)&x->sh_y, (void **)&x->sh_s,
                     (void **)&x->ids, (void **)&x->slot_tok, (void **)&x->slot_of, (void **)&x->groups};
    size_t sizes[] = {n * ne, slots, slots * E, slots * F, slots * F, slots * E, n * S, n * S,
                      S ? n * E : 0, S ? n : 0, slots, slots, slots, groups}; /* 4-byte elements */
    _Static_assert(sizeof bufs / sizeof bufs[0] == sizeof sizes / sizeof sizes[0], "a size a buffer");
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i] && !(*bufs[i] = fwdc__alloc(c, sizes[i] * 4, err))) return err->code;
    return 0;
}

static cuda_moe_gating gating_of(const model_hparams *hp) {
    cuda_moe_gating g = {hp->n_expert, hp->n_expert_used, CUDA_GATE_SOFTMAX, hp->expert_norm, hp->expert_scale};
    if (hp->expert_gating == MOE_GATE_SIGMOID) g.gating = CUDA_GATE_SIGMOID;
    else if (hp->expert_gating == MOE_GATE_SOFTMAX_WEIGHT) g.gating = CUDA_GATE_SOFTMAX_WEIGHT;
    return g;
}

int mec_new(fwdc *c, const model *m, int max_batch, mec **out, strata_err *err) {
    const model_hparams *hp = &m->hp;
    *out = NULL;
    mec *x = xcalloc(1, sizeof *x);
    x->m = m;
    x->k = hp->n_expert_used;
    x->gating = gating_of(hp);
    if (hp->n_expert > CUDA_MOE_MAX_EXPERTS || x->k > CUDA_MOE_MAX_USED) {
        free(x);
        return strata_errf(err, STRATA_EUNSUPPORTED, "cuda: %d of %d experts a token (the GPU routes up to %d of %d)",
                           hp->n_expert_used, hp->n_expert, CUDA_MOE_MAX_USED, CUDA_MOE_MAX_EXPERTS);
    }
    x->layers = xcalloc((size_t)hp->n_layer, sizeof(mec_tensors));
    int rc = cuda_moe_init(err);
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
    free(x->layers);
    free(x);
}

int mec_is_moe(const mec *x, int il) { return x && x->layers[il].router.d != NULL; }

static int mm(const dev_tensor *w, const float *in, int n, float *y, strata_err *err) {
    return cuda_matmul(w->type, w->d, w->row_bytes, w->rows, w->cols, in, n, y, err);
}

/* Whether gate and up run as one SwiGLU launch (the same type and shape). */
static int swiglu_fused(const mec_tensors *T) {
    return fwdc__same_kind(&T->gate, &T->up) && T->gate.rows == T->up.rows && T->gate_step == T->up_step;
}

/* The experts' matmuls over every slot, each one launch for all groups
 * (read on the device). */
static int experts(mec *x, const mec_tensors *T, int n, strata_err *err) {
    int slots = n * x->k, ng = cuda_moe_groups(n, x->k, x->m->hp.n_expert);
    const dev_tensor *G = &T->gate, *U = &T->up, *D = &T->down;
    if (swiglu_fused(T)) {
        if (cuda_matmul_experts(G->type, G->d, U->d, T->gate_step, G->row_bytes, G->rows, G->cols, x->xs, n, slots,
                                x->groups, ng, x->g, err))
            return err->code;
    } else {
        if (cuda_matmul_experts(G->type, G->d, NULL, T->gate_step, G->row_bytes, G->rows, G->cols, x->xs, n, slots,
                                x->groups, ng, x->g, err) ||
            cuda_matmul_experts(U->type, U->d, NULL, T->up_step, U->row_bytes, U->rows, U->cols, x->xs, n, slots,
                                x->groups, ng, x->u, err))
            return err->code;
        cuda_swiglu(x->g, x->u, (size_t)slots * G->rows);
    }
    return cuda_matmul_experts(D->type, D->d, NULL, T->down_step, D->row_bytes, D->rows, D->cols, x->g, n, slots,
                               x->groups, ng, x->y, err);
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
    int slots = n * x->k;
    if (mm(&T->router, d_xn, n, x->logits, err)) return err->code;
    if (T->router_b.d) cuda_add_rows(x->logits, T->router_b.d, n, hp->n_expert);
    if (cuda_moe_route(x->logits, n, &x->gating, x->ids, x->w, err) ||
        cuda_moe_group(x->ids, n, x->k, hp->n_expert, NULL, x->slot_of, x->slot_tok, x->groups, err))
        return err->code;
    cuda_gather(x->xs, d_xn, x->slot_tok, slots, hp->n_embd);
    if (experts(x, T, n, err)) return err->code;
    int shared = T->sh_up.d != NULL;
    if (shared && shared_expert(x, T, d_xn, n, err)) return err->code;
    cuda_moe_add(d_x, x->y, x->slot_of, x->w, n, x->k, hp->n_embd, shared ? x->sh_y : NULL, x->sh_s);
    return 0;
}
