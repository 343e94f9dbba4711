/* forward_cuda.c - the llama-family forward pass on the GPU (see
 * forward_cuda.h). The steps are forward.c's, per layer:
 *   norm -> Q,K,V matmuls (+bias, +QK-norm) -> RoPE -> K,V to the
 *   half-float cache -> attention -> output matmul -> residual -> norm
 *   -> gate/up matmuls -> SwiGLU -> down -> residual;
 * then the wanted rows' final norm and output matmul. Kernels are queued
 * on one stream; the only waits are the copies of logits and ids back. */
#include "model/forward_cuda.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda.h"
#include "base/mem.h"
#include "model/forward_cuda_int.h"

typedef struct dev_layer {
    dev_tensor attn_norm, wq, wk, wv, wo, bq, bk, bv, q_norm, k_norm, ffn_norm, w_gate, w_up, w_down;
    dev_tensor post_attn_norm, post_ffn_norm; /* gemma3: on the attention's and the FFN's output */
    int swa;                                  /* a sliding-window layer (gemma3) */
    uint16_t *kc, *vc; /* [n_ctx][kv_dim] halves; paged: the layer's rows of the pool's unit 0 */
    /* Paged: the pool's part holding the layer (0: the global parts,
     * blocks; 1: the sliding parts, slots) and the halves from one unit
     * to the next (model/kv.h, kv_unit_rows). */
    int part;
    size_t unit_halves;
} dev_layer;

/* A paged call's run: batch tokens [t0, t1) of one sequence at
 * consecutive positions, its block table at tables + table, keys up to end. */
typedef struct dev_run {
    int t0, t1, table, end;
} dev_run;

#define PAGED_GRAPHS 65 /* decode steps of up to 64 sequences as graphs */

struct fwdc {
    const model *m;
    int n_ctx, max_batch, n_out;
    dev_tensor tok_embd, output_norm, output;
    dev_layer *layers;
    size_t weight_bytes;
    float *x, *xn, *q, *k, *v, *att, *gate, *up, *tmp, *logits, *inv_freq, *attn_part;
    float *inv_freq_swa; /* gemma3's sliding layers rotate with their own base (or NULL: as the others) */
    int32_t *tok, *pos, *rows, *ids;
    int32_t *h_pos, *h_rows; /* host staging */
    void **allocs;           /* every device allocation, for fwdc_free */
    int n_allocs, cap_allocs;
    /* One decode step (n = 1) as a CUDA graph, recorded on the first one:
     * its arguments never change (the token id and position are read from
     * device memory, attention's grid covers n_ctx). STRATA_CUDA_GRAPH=0
     * (or fwdc_use_graphs) queues the kernels one by one instead. */
    cuda_graph *step;
    int use_graphs;
    /* Fused launches (cuda_matmul_multi/_swiglu, cuda_rope_kv_store): 9
     * kernels a layer instead of 17, the same bits; 7 where the 8-bit
     * decode kernel applies the RMS norms itself (cuda_matmul_norms).
     * STRATA_CUDA_FUSE=0 (or fwdc_use_fusion) runs the separate kernels,
     * for comparison. */
    int fuse;
    /* Paged (fwdc_new_paged): K/V in the device pool kv, many sequences a
     * call (fwdc_run_batch); n_ctx is then the positions one sequence may
     * reach. Per call and per part of the pool (dev_layer.part: a sliding
     * layer's rows are in its block's slot): each token's K/V row (dst,
     * halves from the layer's unit 0) and each run's table of units
     * (blocks, or slots: -1 for a block outside the window, which the
     * window's attention never reads), made on the host. */
    kv_pool *kv;
    int64_t *dst[2], *h_dst[2];
    int32_t *tables[2], *h_tables[2];
    size_t tables_cap;
    dev_run *runs;
    int n_runs;
    /* ... and attention's query blocks, all runs' in one launch
     * (cuda_attention_paged: a block's first token, tokens, table), the
     * runs' last position + 1, and whether each run is one block */
    int32_t *qblocks, *h_qblocks;
    int n_qblocks, qblocks_one_a_run, runs_end;
    /* qwen35: Q rows with their gates ([n][n_head][q | gate]) and the
     * gates split off ([n][n_head * head_dim]); the recurrent layers
     * (deltanet_cuda.c), whose one-sequence state covers positions
     * [0, rs_end); paged, each run's sequence state (kv_seq.rs). */
    float *qg, *agate;
    dnc *dn;
    int rs_end;
    cuda_delta_run *dn_runs;
    mec *me; /* qwen3moe, qwen35moe: the mixture-of-experts layers (moe_cuda.c) */
    /* Paged decode steps (a token for each of n sequences, every row
     * wanted) as graphs, one per n < PAGED_GRAPHS, recorded on first use:
     * run i's table starts at i * table_stride and attention covers the
     * whole context, so the arguments never change (paged_graph). */
    cuda_graph *paged_steps[PAGED_GRAPHS];
    int table_stride, graph_call;
};

static void *dev_alloc(fwdc *c, size_t bytes, strata_err *err) {
    void *p = cuda_alloc(bytes, err);
    if (!p) return NULL;
    XGROW(c->allocs, c->cap_allocs, c->n_allocs + 1, 64);
    c->allocs[c->n_allocs++] = p;
    return p;
}

void *fwdc__alloc(fwdc *c, size_t bytes, strata_err *err) { return dev_alloc(c, bytes, err); }

/* The tensor's bytes to the GPU (once; the tied output reuses the
 * embedding's copy). */
static int upload(fwdc *c, const model_tensor *t, dev_tensor *out, strata_err *err) {
    *out = (dev_tensor){.type = t->type, .rows = (int)t->rows, .cols = (int)t->cols, .row_bytes = t->row_bytes};
    if (!t->data) return 0;
    if (t->rows > 1 && !cuda_supports(t->type))
        return strata_errf(err, STRATA_EUNSUPPORTED, "cuda: no kernel for weight type %s", quant_name(t->type));
    size_t bytes = t->row_bytes * (size_t)t->rows;
    void *d = dev_alloc(c, bytes, err);
    if (!d || cuda_upload(d, t->data, bytes, err)) return err->code;
    out->d = d;
    c->weight_bytes += bytes;
    return 0;
}

int fwdc__upload(fwdc *c, const model_tensor *t, dev_tensor *out, strata_err *err) { return upload(c, t, out, err); }

/* qwen35's delta-net shapes the GPU kernels take (cuda.h, "qwen35"). */
static int delta_shape_ok(const model_hparams *hp) {
    return hp->ssm_d_state % 8 == 0 && hp->ssm_d_state <= CUDA_DELTA_MAX_DIM && hp->ssm_d_conv <= 16;
}

/* Experts with biases (gpt-oss's kind): not on the GPU path. */
static int has_expert_biases(const model *m) {
    for (int il = 0; il < m->hp.n_layer; il++) {
        const model_moe *mo = &m->layers[il].moe;
        if (mo->gate_b.data || mo->up_b.data || mo->down_b.data) return 1;
    }
    return 0;
}

/* What the GPU path does not run yet, named. Gemma 3 (sliding windows,
 * GELU, post norms, the embedding scale), qwen35 (delta-net layers,
 * gated attention, M-RoPE) and the mixtures of experts without expert
 * biases (qwen3moe, qwen35moe: moe_cuda.c) run on the one-sequence pass
 * (`run`, `bench`) and the paged one (`serve`: the pool's sliding parts,
 * and each sequence's recurrent state, in device memory too). (None has
 * run on a GPU yet.) */
static int check_model(const model *m, strata_err *err) {
    const model_hparams *hp = &m->hp;
    const char *why = NULL;
    int gemma = hp->arch == ARCH_GEMMA3, q35 = hp->arch == ARCH_QWEN35 || hp->arch == ARCH_QWEN35MOE;
    int moe = hp->arch == ARCH_QWEN3MOE || hp->arch == ARCH_QWEN35MOE;
    if (hp->arch != ARCH_LLAMA && hp->arch != ARCH_QWEN2 && hp->arch != ARCH_QWEN3 && !gemma && !q35 && !moe)
        why = "architecture";
    else if (moe && (hp->expert_act != MOE_ACT_SILU || has_expert_biases(m))) why = "expert kind";
    else if (hp->rope_scale == ROPE_SCALE_YARN) why = "YaRN rope scaling";
    else if ((!q35 && (hp->attn_gate || hp->n_rec_layer)) || (!gemma && (hp->n_swa || hp->ffn_gelu))) why = "layer kind";
    else if (q35 && !delta_shape_ok(hp)) why = "delta-net state size (a multiple of 8, at most 256)";
    else if (hp->logit_softcap > 0 || (!gemma && hp->embd_scale != 1.0f)) why = "output scaling";
    else if (hp->head_dim > 256 || hp->rope_dim > hp->head_dim) why = "head size";
    if (why)
        return strata_errf(err, STRATA_EUNSUPPORTED,
                           "--device cuda: %s (%s) is not on the GPU path yet (llama, qwen2, qwen3, gemma3, qwen35, "
                           "qwen3moe and qwen35moe are)",
                           hp->arch_name, why);
    return 0;
}

static int upload_layer(fwdc *c, const model_layer *L, dev_layer *D, strata_err *err) {
    const model_tensor *src[] = {&L->attn_norm, &L->wq, &L->wk, &L->wv, &L->wo, &L->bq, &L->bk, &L->bv,
                                 &L->q_norm, &L->k_norm, &L->ffn_norm, &L->w_gate, &L->w_up, &L->w_down,
                                 &L->post_attn_norm, &L->post_ffn_norm};
    dev_tensor *dst[] = {&D->attn_norm, &D->wq, &D->wk, &D->wv, &D->wo, &D->bq, &D->bk, &D->bv,
                         &D->q_norm, &D->k_norm, &D->ffn_norm, &D->w_gate, &D->w_up, &D->w_down,
                         &D->post_attn_norm, &D->post_ffn_norm};
    D->swa = L->swa && c->m->hp.n_swa > 0;
    for (size_t i = 0; i < sizeof src / sizeof src[0]; i++)
        if (upload(c, src[i], dst[i], err)) return err->code;
    return 0;
}

/* A table of half floats to the GPU. */
static float *upload_floats(fwdc *c, const float *h, int n, strata_err *err) {
    float *d = dev_alloc(c, (size_t)n * sizeof(float), err);
    if (d && cuda_upload(d, h, (size_t)n * sizeof(float), err)) return NULL;
    return d;
}

/* forward.c's init_rope: the same inverse frequencies (llama3's per-dim
 * divisors included; gemma3's sliding layers with their own base); 0 on
 * qwen35's pairs that stay still (forward.c's rope_off). */
static int upload_rope(fwdc *c, strata_err *err) {
    const model_hparams *hp = &c->m->hp;
    int half = hp->rope_dim / 2, swa = hp->n_swa > 0 && hp->swa_rope;
    float *inv = xmalloc((size_t)half * sizeof(float)), *inv_swa = xmalloc((size_t)half * sizeof(float));
    const float *ff = c->m->rope_freqs.data;
    for (int i = 0; i < half; i++) {
        double f = pow((double)hp->rope_base, -2.0 * i / hp->rope_dim);
        inv[i] = fwd_rope_pair_still(hp, i) ? 0.0f : (float)(ff ? f / ff[i] : f); /* 0: the kernels skip the pair */
        inv_swa[i] = (float)pow((double)hp->rope_base_swa, -2.0 * i / hp->rope_dim);
    }
    c->inv_freq = upload_floats(c, inv, half, err);
    if (c->inv_freq && swa) c->inv_freq_swa = upload_floats(c, inv_swa, half, err);
    free(inv), free(inv_swa);
    return c->inv_freq && (!swa || c->inv_freq_swa) ? 0 : err->code;
}

/* Paged: the layers' K/V are the pool's (a sliding layer's in the
 * slots); per-call rows and tables, for each part the pool has. */
static int alloc_paged(fwdc *c, strata_err *err) {
    const model_hparams *hp = &c->m->hp;
    for (int il = 0; il < hp->n_layer; il++) {
        int kl = c->m->layers[il].kv_layer;
        dev_layer *D = &c->layers[il];
        D->kc = kv_unit_rows(c->kv, 0, kl, 0);
        D->vc = kv_unit_rows(c->kv, 0, kl, 1);
        D->part = kv_layer_slides(c->kv, kl);
        D->unit_halves = kv_unit_halves(c->kv, kl);
    }
    size_t n = (size_t)c->max_batch;
    c->table_stride = c->n_ctx / c->kv->block_tokens + 1; /* a sequence's blocks at most */
    c->tables_cap = n * (size_t)c->table_stride;
    for (int part = 0; part < (c->kv->swa_layer ? 2 : 1); part++) {
        if (!(c->dst[part] = dev_alloc(c, n * sizeof(int64_t), err))) return err->code;
        if (!(c->tables[part] = dev_alloc(c, c->tables_cap * sizeof(int32_t), err))) return err->code;
        c->h_dst[part] = xmalloc(n * sizeof(int64_t));
        c->h_tables[part] = xmalloc(c->tables_cap * sizeof(int32_t));
    }
    c->runs = xmalloc(n * sizeof(dev_run));
    c->dn_runs = xmalloc(n * sizeof(cuda_delta_run));
    if (!(c->qblocks = dev_alloc(c, 3 * n * sizeof(int32_t), err))) return err->code; /* a token a block at most */
    c->h_qblocks = xmalloc(3 * n * sizeof(int32_t));
    return 0;
}

static int alloc_scratch(fwdc *c, strata_err *err) {
    const model_hparams *hp = &c->m->hp;
    size_t n = (size_t)c->max_batch, nq = (size_t)hp->n_head * hp->head_dim, kvd = (size_t)hp->n_head_kv * hp->head_dim;
    size_t e = hp->n_embd, wide = e > nq ? e : nq, f = hp->n_ff > 0 ? (size_t)hp->n_ff : 1; /* moe: the experts' own */
    float **bufs[] = {&c->x, &c->xn, &c->q, &c->k, &c->v, &c->att, &c->gate, &c->up, &c->tmp, &c->logits};
    size_t sizes[] = {e, wide, nq, kvd, kvd, nq, f, f, wide, (size_t)hp->n_vocab};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (!(*bufs[i] = dev_alloc(c, n * sizes[i] * sizeof(float), err))) return err->code;
    size_t part = cuda_attention_scratch(c->max_batch, hp->n_head, hp->head_dim, c->n_ctx);
    if (!(c->attn_part = dev_alloc(c, part * sizeof(float), err))) return err->code;
    int32_t **ibufs[] = {&c->tok, &c->pos, &c->rows, &c->ids};
    for (size_t i = 0; i < 4; i++)
        if (!(*ibufs[i] = dev_alloc(c, n * sizeof(int32_t), err))) return err->code;
    for (int il = 0; il < hp->n_layer && !c->kv; il++) {
        dev_layer *D = &c->layers[il];
        if (c->m->layers[il].recurrent) continue; /* qwen35's delta-net layers keep no K/V */
        if (!(D->kc = dev_alloc(c, (size_t)c->n_ctx * kvd * 2, err))) return err->code;
        if (!(D->vc = dev_alloc(c, (size_t)c->n_ctx * kvd * 2, err))) return err->code;
    }
    if (c->kv && alloc_paged(c, err)) return err->code;
    if (hp->attn_gate && (!(c->qg = dev_alloc(c, n * 2 * nq * sizeof(float), err)) ||
                          !(c->agate = dev_alloc(c, n * nq * sizeof(float), err))))
        return err->code;
    c->h_pos = xmalloc(n * sizeof(int32_t));
    c->h_rows = xmalloc(n * sizeof(int32_t));
    /* the 8-bit matmuls' activations, for the widest input (the decode
     * graph cannot grow the buffer): qwen35's out-projection reads ssm_d_inner */
    size_t k_max = wide > f ? wide : f;
    if ((size_t)hp->ssm_d_inner > k_max) k_max = (size_t)hp->ssm_d_inner;
    if ((size_t)hp->n_ff_exp > k_max) k_max = (size_t)hp->n_ff_exp;
    if ((size_t)hp->n_ff_shexp > k_max) k_max = (size_t)hp->n_ff_shexp;
    int rows = c->max_batch * (hp->n_expert > 0 ? hp->n_expert_used : 1); /* the experts' matmuls: every slot */
    return cuda_matmul_reserve(rows, (int)k_max, err);
}

int fwdc_check_model(const model *m, strata_err *err) { return check_model(m, err); }

/* The pool the paged pass runs on: f16 in GPU memory; where it keeps a
 * layer in slots, the model's layer is a sliding one (its attention never
 * reads a block without its slot) and the pool's window at least the
 * model's (forward.c's check). */
static int check_pool(const model *m, const kv_pool *kv, strata_err *err) {
    if (kv->dev != cuda_devmem() || kv->type != KVQ_F16)
        return strata_errf(err, STRATA_EINVAL, "--device cuda: the KV pool must be f16 in GPU memory");
    if (kv->swa_layer && kv->n_swa < m->hp.n_swa)
        return strata_errf(err, STRATA_EINVAL, "kv pool keeps a window of %d positions, the model's is %d", kv->n_swa,
                           m->hp.n_swa);
    for (int il = 0; il < m->hp.n_layer; il++) {
        int kl = m->layers[il].kv_layer;
        if (kl >= 0 && kv_layer_slides(kv, kl) && !(m->layers[il].swa && m->hp.n_swa > 0))
            return strata_errf(err, STRATA_EINVAL,
                               "kv pool keeps layer %d in sliding-window slots; the model's attends to all positions", il);
    }
    return 0;
}

static int fwdc_open(fwdc **out, const model *m, kv_pool *kv, int n_ctx, int max_batch, strata_err *err) {
    *out = NULL;
    int rc = check_model(m, err);
    if (rc || (rc = cuda_open(err)) || (kv && (rc = check_pool(m, kv, err)))) return rc;
    fwdc *c = xcalloc(1, sizeof *c);
    c->m = m;
    c->kv = kv;
    c->n_ctx = n_ctx;
    c->max_batch = max_batch;
    const char *g = getenv("STRATA_CUDA_GRAPH");
    c->use_graphs = !(g && !strcmp(g, "0"));
    const char *fz = getenv("STRATA_CUDA_FUSE");
    c->fuse = !(fz && !strcmp(fz, "0"));
    c->layers = xcalloc((size_t)m->hp.n_layer, sizeof(dev_layer));
    rc = upload(c, &m->tok_embd, &c->tok_embd, err);
    if (!rc) rc = upload(c, &m->output_norm, &c->output_norm, err);
    if (!rc) {
        if (m->tied_output) c->output = c->tok_embd;
        else rc = upload(c, &m->output, &c->output, err);
    }
    for (int il = 0; il < m->hp.n_layer && !rc; il++) rc = upload_layer(c, &m->layers[il], &c->layers[il], err);
    if (!rc) rc = upload_rope(c, err);
    if (!rc) rc = alloc_scratch(c, err);
    if (!rc && m->hp.n_rec_layer) rc = dnc_new(c, m, max_batch, kv != NULL, &c->dn, err);
    if (!rc && m->hp.n_expert) rc = mec_new(c, m, max_batch, &c->me, err);
    if (rc) {
        fwdc_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

int fwdc_new(fwdc **out, const model *m, int n_ctx, int max_batch, strata_err *err) {
    return fwdc_open(out, m, NULL, n_ctx, max_batch, err);
}

int fwdc_new_paged(fwdc **out, const model *m, kv_pool *kv, int ctx_per_seq, int max_batch, strata_err *err) {
    return fwdc_open(out, m, kv, ctx_per_seq, max_batch, err);
}

void fwdc_free(fwdc *c) {
    if (!c) return;
    cuda_graph_free(c->step);
    for (int i = 0; i < PAGED_GRAPHS; i++) cuda_graph_free(c->paged_steps[i]);
    dnc_free(c->dn);
    mec_free(c->me);
    for (int i = 0; i < c->n_allocs; i++) cuda_free(c->allocs[i]);
    free(c->allocs);
    free(c->layers);
    free(c->h_pos);
    free(c->h_rows);
    for (int part = 0; part < 2; part++) free(c->h_dst[part]), free(c->h_tables[part]);
    free(c->runs);
    free(c->dn_runs);
    free(c->h_qblocks);
    free(c);
}

size_t fwdc_weight_bytes(const fwdc *c) { return c->weight_bytes; }

int fwdc_state_end(const fwdc *c) { return c->dn ? c->rs_end : -1; }

void fwdc_use_graphs(fwdc *c, int on) { c->use_graphs = on; }

void fwdc_use_fusion(fwdc *c, int on) {
    if (c->fuse != !!on) { /* the recorded steps have the other kernels */
        cuda_graph_free(c->step);
        c->step = NULL;
        for (int i = 0; i < PAGED_GRAPHS; i++) cuda_graph_free(c->paged_steps[i]), c->paged_steps[i] = NULL;
    }
    c->fuse = !!on;
}

/* ---- the pass ------------------------------------------------------------ */

static int mm(const dev_tensor *w, const float *x, int n, float *y, strata_err *err) {
    return cuda_matmul(w->type, w->d, w->row_bytes, w->rows, w->cols, x, n, y, err);
}

static void bias(const dev_tensor *b, float *x, int n) {
    if (b->d) cuda_add_rows(x, b->d, n, b->cols);
}

int fwdc__same_kind(const dev_tensor *a, const dev_tensor *b) {
    return a->type == b->type && a->row_bytes == b->row_bytes && a->cols == b->cols;
}

/* y (+)= W x for n tokens: with add, y += W x (the residual). */
static int mm_into(fwdc *c, const dev_tensor *w, const float *x, int n, float *y, int add, float *tmp,
                   strata_err *err) {
    if (add && c->fuse) {
        const void *ws[] = {w->d};
        int rows[] = {w->rows};
        float *ys[] = {y};
        return cuda_matmul_multi(w->type, w->row_bytes, w->cols, x, n, 1, ws, rows, ys, 1, NULL, 0.0f, err);
    }
    if (mm(w, x, n, add ? tmp : y, err)) return err->code;
    if (add) cuda_add(y, tmp, (size_t)n * w->rows);
    return 0;
}

/* c->x += W in for n tokens, through the block's post norm when it has
 * one (gemma3: the output RMS-normed before the residual add). */
static int block_out(fwdc *c, const dev_tensor *w, const float *in, int n, const dev_tensor *post, strata_err *err) {
    if (!post->d) return mm_into(c, w, in, n, c->x, 1, c->tmp, err);
    if (mm(w, in, n, c->tmp, err)) return err->code;
    cuda_rmsnorm(c->tmp, c->tmp, post->d, n, w->rows, c->m->hp.rms_eps);
    cuda_add(c->x, c->tmp, (size_t)n * w->rows);
    return 0;
}

/* Whether Q, K and V are one launch, and whether it applies the
 * attention norm itself (then c->xn is not written first). */
static int qkv_fused(const fwdc *c, const dev_layer *L) {
    return c->fuse && fwdc__same_kind(&L->wq, &L->wk) && fwdc__same_kind(&L->wq, &L->wv);
}

static int qkv_norms(const fwdc *c, const dev_layer *L, int n) {
    return qkv_fused(c, L) && cuda_matmul_norms(L->wq.type, n);
}

/* Q (qwen35: with its gates, to c->qg), K and V of c->xn, or (nw: the
 * attention norm's weights, where qkv_norms) of c->x normed in the launch. */
static int qkv(fwdc *c, const dev_layer *L, int n, const float *nw, strata_err *err) {
    float *q = c->qg ? c->qg : c->q;
    if (qkv_fused(c, L)) {
        const void *ws[] = {L->wq.d, L->wk.d, L->wv.d};
        int rows[] = {L->wq.rows, L->wk.rows, L->wv.rows};
        float *ys[] = {q, c->k, c->v};
        return cuda_matmul_multi(L->wq.type, L->wq.row_bytes, L->wq.cols, nw ? c->x : c->xn, n, 3, ws, rows, ys, 0, nw,
                                 c->m->hp.rms_eps, err);
    }
    if (mm(&L->wq, c->xn, n, q, err) || mm(&L->wk, c->xn, n, c->k, err) || mm(&L->wv, c->xn, n, c->v, err))
        return err->code;
    return 0;
}

/* Paged: attention of every run (one sequence each) in one launch, each
 * through its table of the layer's part (fill_tables' query blocks); a
 * sliding layer reads its window only. */
static int attend_runs(fwdc *c, const dev_layer *L, int n, strata_err *err) {
    const model_hparams *hp = &c->m->hp;
    return cuda_attention_paged(c->att, c->attn_part, c->q, L->kc, L->vc, c->tables[L->part], c->kv->block_tokens,
                                L->unit_halves, c->pos, n, c->qblocks, c->h_qblocks, c->n_qblocks,
                                c->qblocks_one_a_run, c->graph_call ? c->n_ctx : c->runs_end, c->n_ctx, hp->n_head,
                                hp->n_head_kv, hp->head_dim, hp->attn_scale, L->swa ? hp->n_swa : 0, err);
}

/* max_end: the call's last position + 1 (attention's grid). The
 * attention output projection is added to the residual c->x. */
static int attention(fwdc *c, const dev_layer *L, int n, int max_end, const float *nw, strata_err *err) {
    const model_hparams *hp = &c->m->hp;
    int d = hp->head_dim, nq = hp->n_head * d, kvd = hp->n_head_kv * d;
    if (qkv(c, L, n, nw, err)) return err->code;
    if (c->qg) cuda_gate_split(c->q, c->agate, c->qg, n, hp->n_head, d); /* qwen35 */
    bias(&L->bq, c->q, n);
    bias(&L->bk, c->k, n);
    bias(&L->bv, c->v, n);
    if (!c->fuse && L->q_norm.d) cuda_rmsnorm(c->q, c->q, L->q_norm.d, n * hp->n_head, d, hp->rms_eps);
    if (!c->fuse && L->k_norm.d) cuda_rmsnorm(c->k, c->k, L->k_norm.d, n * hp->n_head_kv, d, hp->rms_eps);
    /* forward.c's rope_angles: a sliding layer with its own base rotates unscaled */
    int own = L->swa && c->inv_freq_swa;
    float div = !own && hp->rope_scale == ROPE_SCALE_LINEAR ? hp->rope_factor : 1.0f;
    const float *inv = own ? c->inv_freq_swa : c->inv_freq;
    const int64_t *dst = c->kv ? c->dst[L->part] : NULL; /* paged: each token's row in the pool */
    if (c->fuse) {
        cuda_rope_kv_store_at(c->q, c->k, c->v, L->kc, L->vc, dst, n, hp->n_head, hp->n_head_kv, d, hp->rope_dim,
                              hp->rope_neox, c->pos, inv, div, L->q_norm.d, L->k_norm.d, hp->rms_eps); /* the norms too */
    } else {
        cuda_rope(c->q, n, nq, hp->n_head, d, hp->rope_dim, hp->rope_neox, c->pos, inv, div);
        cuda_rope(c->k, n, kvd, hp->n_head_kv, d, hp->rope_dim, hp->rope_neox, c->pos, inv, div);
        cuda_kv_store_at(L->kc, L->vc, c->k, c->v, dst, c->pos, n, kvd);
    }
    if (c->kv ? attend_runs(c, L, n, err)
              : cuda_attention_window(c->att, c->attn_part, c->q, L->kc, L->vc, c->pos, n, max_end, c->n_ctx,
                                      hp->n_head, hp->n_head_kv, d, hp->attn_scale, L->swa ? hp->n_swa : 0, err))
        return err->code;
    if (c->agate) cuda_sigmoid_mul(c->att, c->agate, (size_t)n * nq); /* qwen35: the output gate */
    return block_out(c, &L->wo, c->att, n, &L->post_attn_norm, err);
}

/* Whether gate and up are one SwiGLU launch, and whether it applies
 * the FFN norm itself (then c->xn is not written first). */
static int swiglu_fused(const fwdc *c, const dev_layer *L, int il) {
    const dev_tensor *g = &L->w_gate, *u = &L->w_up;
    return !mec_is_moe(c->me, il) && !c->m->hp.ffn_gelu && c->fuse && fwdc__same_kind(g, u) && g->rows == u->rows;
}

static int swiglu_norms(const fwdc *c, const dev_layer *L, int il, int n) {
    return swiglu_fused(c, L, il) && cuda_matmul_norms(L->w_gate.type, n);
}

/* c->gate = silu(W_gate xn) * (W_up xn) (gemma: gelu; nw: the FFN norm's
 * weights where swiglu_norms, c->x normed in the launch), then c->x +=
 * W_down c->gate; or layer il's mixture of experts added to c->x. */
static int ffn(fwdc *c, const dev_layer *L, int il, int n, const float *nw, strata_err *err) {
    if (mec_is_moe(c->me, il)) return mec_layer(c->me, il, c->xn, n, c->x, err);
    const dev_tensor *g = &L->w_gate, *u = &L->w_up;
    if (c->m->hp.ffn_gelu) {
        if (mm(g, c->xn, n, c->gate, err) || mm(u, c->xn, n, c->up, err)) return err->code;
        cuda_geglu(c->gate, c->up, (size_t)n * g->rows);
    } else if (swiglu_fused(c, L, il)) {
        if (cuda_matmul_swiglu(g->type, g->row_bytes, g->rows, g->cols, nw ? c->x : c->xn, n, g->d, u->d, c->gate, nw,
                               c->m->hp.rms_eps, err))
            return err->code;
    } else {
        if (mm(g, c->xn, n, c->gate, err) || mm(u, c->xn, n, c->up, err)) return err->code;
        cuda_swiglu(c->gate, c->up, (size_t)n * g->rows);
    }
    return block_out(c, &L->w_down, c->gate, n, &L->post_ffn_norm, err);
}

/* qwen35's recurrent layer il (deltanet_cuda.c) over c->xn, or (nw: the
 * attention norm's weights) c->x normed in its in-projections' launches;
 * its out-projection added to c->x. */
static int recurrent(fwdc *c, const dev_layer *L, int il, int n, const float *nw, strata_err *err) {
    const float *o;
    const dev_tensor *w_out;
    if (dnc_layer(c->dn, il, nw ? c->x : c->xn, nw, n, &o, &w_out, err)) return err->code;
    return block_out(c, w_out, o, n, &L->post_attn_norm, err);
}

static int layer(fwdc *c, int il, int n, int max_end, strata_err *err) {
    const model_hparams *hp = &c->m->hp;
    const dev_layer *L = &c->layers[il];
    int e = hp->n_embd, rec = c->m->layers[il].recurrent;
    /* each norm in the launches that read it where they can, else c->xn first */
    int fold = rec ? c->fuse && dnc_norms(c->dn, il, n) : qkv_norms(c, L, n);
    const float *an = fold ? L->attn_norm.d : NULL;
    if (!an) cuda_rmsnorm(c->xn, c->x, L->attn_norm.d, n, e, hp->rms_eps);
    if (rec ? recurrent(c, L, il, n, an, err) : attention(c, L, n, max_end, an, err)) return err->code;
    const float *fn = swiglu_norms(c, L, il, n) ? L->ffn_norm.d : NULL;
    if (!fn) cuda_rmsnorm(c->xn, c->x, L->ffn_norm.d, n, e, hp->rms_eps);
    return ffn(c, L, il, n, fn, err);
}

static int check_run(const fwdc *c, const int32_t *tok, int n, int pos0, strata_err *err) {
    if (n <= 0 || n > c->max_batch) return strata_errf(err, STRATA_EINVAL, "batch of %d tokens (max %d)", n, c->max_batch);
    if (pos0 < 0 || pos0 + n > c->n_ctx)
        return strata_errf(err, STRATA_ERANGE, "positions [%d, %d) past the GPU context of %d", pos0, pos0 + n, c->n_ctx);
    for (int i = 0; i < n; i++)
        if (tok[i] < 0 || tok[i] >= c->m->hp.n_vocab)
            return strata_errf(err, STRATA_EINVAL, "token id %d out of range (vocab %d)", tok[i], c->m->hp.n_vocab);
    return 0;
}

/* Every kernel of the pass, queued (or recorded into a graph): the ids
 * and positions are in c->tok and c->pos, the wanted rows in c->rows. */
static int queue_pass(fwdc *c, int n, int max_end, strata_err *err) {
    const model_hparams *hp = &c->m->hp;
    int e = hp->n_embd;
    const dev_tensor *emb = &c->tok_embd;
    if (cuda_embed(c->x, emb->type, emb->d, emb->row_bytes, e, c->tok, n, hp->embd_scale, err)) return err->code;
    for (int il = 0; il < hp->n_layer; il++)
        if (layer(c, il, n, max_end, err)) return err->code;
    if (c->n_out == 0) return 0; /* a paged call that wants no logits */
    cuda_gather(c->tmp, c->x, c->rows, c->n_out, e);
    const dev_tensor *o = &c->output;
    if (c->fuse && cuda_matmul_norms(o->type, c->n_out)) { /* the output norm in the logits' launch */
        const void *ws[] = {o->d};
        int rows[] = {o->rows};
        float *ys[] = {c->logits};
        return cuda_matmul_multi(o->type, o->row_bytes, o->cols, c->tmp, c->n_out, 1, ws, rows, ys, 0,
                                 c->output_norm.d, hp->rms_eps, err);
    }
    cuda_rmsnorm(c->xn, c->tmp, c->output_norm.d, c->n_out, e, hp->rms_eps);
    return mm(o, c->xn, c->n_out, c->logits, err);
}

/* A decode step of n tokens: the graph in *slot, recorded on first use
 * (its attention grid covers the whole context, so it fits every
 * position). */
static int run_graph(fwdc *c, cuda_graph **slot, int n, strata_err *err) {
    if (!*slot) {
        if (cuda_graph_begin(err)) return err->code;
        int rc = queue_pass(c, n, c->n_ctx, err);
        cuda_graph *g = NULL;
        strata_err end_err = {0};
        int rc2 = cuda_graph_end(&g, &end_err); /* ends the capture even after a failure */
        if (rc) {
            cuda_graph_free(g);
            return rc;
        }
        if (rc2) {
            if (err) *err = end_err;
            return rc2;
        }
        *slot = g;
    }
    return cuda_graph_run(*slot, err);
}

/* qwen35: the recurrent state continues from pos0 (which must be where it
 * ends) or starts again at 0 (zeroed here, outside any graph); until the
 * call has run, it covers nothing. */
static int recurrent_prepare(fwdc *c, int pos0, strata_err *err) {
    if (!c->dn) return 0;
    int rc = fwd_state_pos_check(pos0, c->rs_end, 1, err);
    if (rc) return rc;
    if (pos0 == 0) dnc_reset(c->dn);
    c->rs_end = 0;
    return 0;
}

int fwdc_run(fwdc *c, const int32_t *tok, int n, int pos0, int all, float *logits, strata_err *err) {
    int rc = check_run(c, tok, n, pos0, err);
    if (!rc) rc = recurrent_prepare(c, pos0, err);
    if (rc) return rc;
    for (int i = 0; i < n; i++) c->h_pos[i] = pos0 + i;
    c->n_out = all ? n : 1;
    for (int i = 0; i < c->n_out; i++) c->h_rows[i] = all ? i : n - 1;
    if (cuda_upload(c->tok, tok, (size_t)n * sizeof(int32_t), err) ||
        cuda_upload(c->pos, c->h_pos, (size_t)n * sizeof(int32_t), err) ||
        cuda_upload(c->rows, c->h_rows, (size_t)c->n_out * sizeof(int32_t), err))
        return err->code;
    rc = n == 1 && c->use_graphs ? run_graph(c, &c->step, 1, err) : queue_pass(c, n, pos0 + n, err);
    if (!rc) rc = logits ? cuda_download(logits, c->logits, (size_t)c->n_out * c->m->hp.n_vocab * sizeof(float), err)
                         : cuda_sync(err);
    if (!rc && c->dn) c->rs_end = pos0 + n;
    return rc;
}

int fwdc_argmax(fwdc *c, int32_t *ids, strata_err *err) {
    cuda_argmax(c->ids, c->logits, c->n_out, c->m->hp.n_vocab);
    return cuda_download(ids, c->ids, (size_t)c->n_out * sizeof(int32_t), err);
}

/* ---- paged: many sequences a call (the server) ------------------------------ */

/* The batch cut into runs (one sequence, consecutive positions); each
 * sequence's blocks made writable as fwd_run does (cut back where a run
 * starts inside it, grown to its last position). */
static int plan_runs(fwdc *c, const fwd_batch *b, strata_err *err) {
    c->n_runs = 0;
    for (int t = 0; t < b->n; t++) {
        dev_run *r = c->n_runs ? &c->runs[c->n_runs - 1] : NULL;
        if (r && b->seqs[t] == b->seqs[t - 1] && b->pos[t] == b->pos[t - 1] + 1) r->t1++;
        else c->runs[c->n_runs++] = (dev_run){t, t + 1, 0, 0};
    }
    for (int i = 0; i < c->n_runs; i++) {
        dev_run *r = &c->runs[i];
        kv_seq *s = b->seqs[r->t0];
        int p0 = b->pos[r->t0];
        r->end = p0 + (r->t1 - r->t0);
        if (p0 < 0 || p0 > s->n_pos)
            return strata_errf(err, STRATA_EINVAL, "position %d leaves a gap (sequence has %d)", p0, s->n_pos);
        if (r->end > c->n_ctx)
            return strata_errf(err, STRATA_ERANGE, "positions [%d, %d) past the GPU context of %d a sequence", p0,
                               r->end, c->n_ctx);
        if (p0 < s->n_pos) kv_seq_truncate(c->kv, s, p0);
        int rc = kv_seq_reserve(c->kv, s, r->end, err);
        if (rc) return rc;
        if (r->end > s->n_pos) s->n_pos = r->end;
    }
    return 0;
}

/* Block b's unit in a part of the pool (model/kv.h): b itself in the
 * global part, its slot (or -1) in the sliding part. */
static int part_unit(const kv_pool *kv, int part, int b) { return part ? kv->swa_slot[b] : b; }

/* Attention's query blocks: each run cut into blocks of at most
 * cuda_attention_block_tokens tokens (with its table's place), and the
 * runs' last position + 1. */
static void plan_query_blocks(fwdc *c) {
    const model_hparams *hp = &c->m->hp;
    int most = cuda_attention_block_tokens(hp->n_head, hp->n_head_kv, hp->head_dim);
    if (most < 1) most = 1; /* heads the kernels refuse: attention says so */
    c->n_qblocks = 0, c->qblocks_one_a_run = 1, c->runs_end = 0;
    for (int i = 0; i < c->n_runs; i++) {
        const dev_run *r = &c->runs[i];
        for (int t = r->t0; t < r->t1; t += most) {
            int32_t *q = c->h_qblocks + 3 * c->n_qblocks++;
            q[0] = t, q[1] = r->t1 - t < most ? r->t1 - t : most, q[2] = r->table;
        }
        c->qblocks_one_a_run &= r->t1 - r->t0 <= most;
        if (r->end > c->runs_end) c->runs_end = r->end;
    }
}

/* Host copies of the call's positions, K/V rows, wanted rows and tables
 * of units, for each part (taken after every reserve: copy on write may
 * move a block, a reserve may give a block a slot). Every token's block
 * has its slot: the reserve holds it. */
static int fill_tables(fwdc *c, const fwd_batch *b, strata_err *err) {
    const kv_pool *kv = c->kv;
    int B = kv->block_tokens, kvd = c->m->hp.n_head_kv * c->m->hp.head_dim, parts = kv->swa_layer ? 2 : 1;
    size_t unit[2] = {kv->glob_bytes / 2, kv->swa_bytes / 2}, at = 0;
    c->n_out = 0;
    for (int t = 0; t < b->n; t++) {
        int p = b->pos[t], blk = b->seqs[t]->blocks[p / B];
        c->h_pos[t] = p;
        if (parts > 1 && kv->swa_slot[blk] < 0) /* never after a reserve: a kernel would write outside the slots */
            return strata_errf(err, STRATA_EINVAL, "cuda: position %d's block %d has no sliding part", p, blk);
        for (int part = 0; part < parts; part++)
            c->h_dst[part][t] = (int64_t)((size_t)part_unit(kv, part, blk) * unit[part] + (size_t)(p % B) * kvd);
        if (b->want ? b->want[t] : t == b->n - 1) c->h_rows[c->n_out++] = t;
    }
    for (int i = 0; i < c->n_runs; i++) {
        dev_run *r = &c->runs[i];
        int nb = (r->end + B - 1) / B;
        if (c->graph_call) at = (size_t)i * c->table_stride; /* the graph's fixed places (nb <= the stride) */
        if (at + (size_t)nb > c->tables_cap)
            return strata_errf(err, STRATA_ERANGE, "cuda: block tables of %zu entries past %zu", at + nb, c->tables_cap);
        for (int part = 0; part < parts; part++)
            for (int j = 0; j < nb; j++) c->h_tables[part][at + j] = part_unit(kv, part, b->seqs[r->t0]->blocks[j]);
        r->table = (int)at;
        at += (size_t)nb;
    }
    plan_query_blocks(c);
    if (cuda_upload(c->pos, c->h_pos, (size_t)b->n * sizeof(int32_t), err) ||
        cuda_upload(c->rows, c->h_rows, (size_t)(c->n_out ? c->n_out : 1) * sizeof(int32_t), err) ||
        cuda_upload(c->qblocks, c->h_qblocks, (size_t)c->n_qblocks * 3 * sizeof(int32_t), err))
        return err->code;
    for (int part = 0; part < parts; part++)
        if (cuda_upload(c->dst[part], c->h_dst[part], (size_t)b->n * sizeof(int64_t), err) ||
            cuda_upload(c->tables[part], c->h_tables[part], at * sizeof(int32_t), err))
            return err->code;
    return 0;
}

/* qwen35: a sequence's first run in the batch continues its state
 * (position rs_pos) or starts it again at 0, a later run of it goes on
 * where the one before ended: forward.c's rule, checked before any
 * sequence changes. */
static int check_states(const fwdc *c, const fwd_batch *b, strata_err *err) {
    for (int t = 0; t < b->n && c->dn; t++) {
        if (t > 0 && b->seqs[t] == b->seqs[t - 1] && b->pos[t] == b->pos[t - 1] + 1) continue; /* inside a run */
        int u = t - 1;
        while (u >= 0 && b->seqs[u] != b->seqs[t]) u--;
        int rc = fwd_state_pos_check(b->pos[t], u >= 0 ? b->pos[u] + 1 : b->seqs[t]->rs_pos, u < 0, err);
        if (rc) return rc;
    }
    return 0;
}

/* Whether run i is its sequence's first in the call. */
static int first_run(const fwdc *c, const fwd_batch *b, int i) {
    for (int j = 0; j < i; j++)
        if (b->seqs[c->runs[j].t0] == b->seqs[c->runs[i].t0]) return 0;
    return 1;
}

/* ... and each run's state ready: made in the pool's device memory on a
 * sequence's first use, zeroed (queued) where it starts again at 0. */
static int prepare_states(fwdc *c, const fwd_batch *b, strata_err *err) {
    size_t need = c->dn ? dnc_state_floats(c->dn) : 0;
    for (int i = 0; i < c->n_runs && c->dn; i++) {
        const dev_run *r = &c->runs[i];
        kv_seq *s = b->seqs[r->t0];
        int first = first_run(c, b, i);
        if (first && (!s->rs || s->rs_floats != need)) {
            kv_state_free(c->kv, s->rs);
            s->rs_floats = 0, s->rs_pos = 0;
            if (!(s->rs = kv_state_alloc(c->kv, need, err))) return err->code;
            s->rs_floats = need;
            cuda_zero(s->rs, need * sizeof(float));
        } else if (first && b->pos[r->t0] == 0) {
            cuda_zero(s->rs, need * sizeof(float));
        }
        c->dn_runs[i] = (cuda_delta_run){r->t0, r->t1 - r->t0, s->rs};
    }
    return c->dn ? dnc_set_runs(c->dn, c->dn_runs, c->n_runs, err) : 0;
}

/* ... and after the call: each state covers its sequence's last position. */
static void commit_states(fwdc *c, const fwd_batch *b) {
    for (int i = 0; i < c->n_runs && c->dn; i++) b->seqs[c->runs[i].t0]->rs_pos = c->runs[i].end;
}

/* A decode step a graph can replay: a token for each of n different
 * sequences (runs of one), every row wanted. */
static int graph_step(const fwdc *c, const fwd_batch *b) {
    if (!c->use_graphs || b->n >= PAGED_GRAPHS || c->n_runs != b->n) return 0;
    for (int t = 0; t < b->n; t++) {
        if (b->want && !b->want[t]) return 0;
        for (int u = 0; u < t; u++)
            if (b->seqs[u] == b->seqs[t]) return 0;
    }
    return 1;
}

int fwdc_run_batch(fwdc *c, const fwd_batch *b, float *logits, strata_err *err) {
    if (!c->kv) return strata_errf(err, STRATA_EINVAL, "cuda: a batch of sequences needs the paged pass (fwdc_new_paged)");
    for (int t = 0; t < b->n; t++)
        if (b->tokens[t] < 0 || b->tokens[t] >= c->m->hp.n_vocab)
            return strata_errf(err, STRATA_EINVAL, "token id %d out of range (vocab %d)", b->tokens[t], c->m->hp.n_vocab);
    if (b->n <= 0 || b->n > c->max_batch)
        return strata_errf(err, STRATA_EINVAL, "batch of %d tokens (max %d)", b->n, c->max_batch);
    int rc = check_states(c, b, err);
    if (rc || (rc = plan_runs(c, b, err))) return rc;
    c->graph_call = graph_step(c, b);
    if ((rc = fill_tables(c, b, err)) || (rc = prepare_states(c, b, err))) return rc;
    if (cuda_upload(c->tok, b->tokens, (size_t)b->n * sizeof(int32_t), err)) return err->code;
    rc = c->graph_call ? run_graph(c, &c->paged_steps[b->n], b->n, err) : queue_pass(c, b->n, 0, err);
    c->graph_call = 0;
    if (rc) return rc;
    if (c->n_out == 0 || !logits) rc = cuda_sync(err); /* no rows wanted, or the caller wants none back */
    else rc = cuda_download(logits, c->logits, (size_t)c->n_out * c->m->hp.n_vocab * sizeof(float), err);
    if (!rc) commit_states(c, b);
    return rc;
}
