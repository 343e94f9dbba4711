/* moe.c - the mixture-of-experts feed-forward (qwen3moe, qwen35moe, gpt-oss).
 *
 * For a batch of n normed rows xn:
 *   router logits (one matmul, + bias) -> per token: gating, top-k,
 *   renormalisation (moe_route) -> the batch's (token, k) pairs grouped
 *   by expert into "slots", tokens in batch order within an expert ->
 *   each slot's activation row converted from its token's xn row ->
 *   per active expert one gate and one up matmul over its slots (its
 *   slice of the mapped stack, rows only of the experts chosen) ->
 *   SwiGLU per slot (gpt-oss: biases first, its clamped SwiGLU) -> per active expert one down matmul -> per token
 *   the weighted sum of its k outputs, best expert first (llama.cpp's
 *   order: y0 w0 + y1 w1 + ...) -> + the shared expert's SwiGLU times
 *   sigmoid(gate . x) when the layer has one.
 * Batch invariance: a slot's row goes through the same kernels whatever
 * else shares its expert's matmul (quant_gemm's contract: a row's bits do
 * not depend on n_tok or its place in the tile), routing is per token,
 * and the sum runs in the token's own k order, so grouping tokens by
 * expert never changes a token's bits. Threads take (expert, matrix, row
 * chunk) items from a shared counter (pool_run_any), never a reduction.
 * Decode (one token) reads the n_expert_used chosen experts' rows only. */
#include "model/moe.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/vexp.h"
#include "base/mem.h"
#include "model/forward_int.h"

model_tensor moe_expert(const model_experts *x, int e) {
    model_tensor t = x->m;
    t.data = (const uint8_t *)x->m.data + (size_t)e * x->expert_bytes;
    return t;
}

/* ---- routing ---------------------------------------------------------------- */

static void softmax(float *x, int n) {
    float max = x[0];
    for (int i = 1; i < n; i++) max = x[i] > max ? x[i] : max;
    double sum = 0; /* ggml sums in double too */
    for (int i = 0; i < n; i++) sum += x[i] = expf(x[i] - max);
    float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++) x[i] *= inv;
}

/* The k largest of p[0..n) by value, best first; ties to the lower id. */
static void top_k(const float *p, int n, int k, int *ids) {
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int i = 0; i < n; i++) {
            int taken = 0;
            for (int q = 0; q < j && !taken; q++) taken = ids[q] == i;
            if (!taken && (best < 0 || p[i] > p[best])) best = i;
        }
        ids[j] = best;
    }
}

void moe_route(const model_hparams *hp, const float *logits, float *p, int *ids, float *w) {
    int n = hp->n_expert, k = hp->n_expert_used;
    memcpy(p, logits, (size_t)n * sizeof(float));
    if (hp->expert_gating == MOE_GATE_SOFTMAX) softmax(p, n);
    else if (hp->expert_gating == MOE_GATE_SIGMOID)
        for (int i = 0; i < n; i++) p[i] = 1.0f / (1.0f + expf(-p[i]));
    top_k(p, n, k, ids);
    for (int j = 0; j < k; j++) w[j] = p[ids[j]];
    if (hp->expert_gating == MOE_GATE_SOFTMAX_WEIGHT) softmax(w, k);
    if (hp->expert_norm) {
        float sum = 0;
        for (int j = 0; j < k; j++) sum += w[j];
        if (sum < 6.103515625e-5f) sum = 6.103515625e-5f; /* llama.cpp's clamp (smallest F16 normal) */
        for (int j = 0; j < k; j++) w[j] /= sum;
    }
    if (hp->expert_scale != 0.0f && hp->expert_scale != 1.0f)
        for (int j = 0; j < k; j++) w[j] *= hp->expert_scale;
}

/* ---- scratch ------------------------------------------------------------------ */

struct moe_ctx {
    int max_batch, k;
    float *logits, *probs; /* [max_batch][n_expert] */
    int *ids;              /* [max_batch][k] chosen experts */
    float *w;              /* [max_batch][k] their weights */
    int *slot_of;          /* [max_batch][k] slot of token t's j-th expert */
    int *slot_tok;         /* [slots] token of each slot */
    int *slot_exp;         /* [slots] expert of each slot */
    int *first;            /* [n_expert + 1] each expert's first slot */
    int *fill;             /* [n_expert] grouping cursor */
    uint8_t *xq[2];        /* slot activation rows (gate's and up's formats) */
    size_t xq_cap;
    float *g, *u; /* [slots][n_ff_exp] */
    float *y;     /* [slots][n_embd] */
    float *sh_g, *sh_u, *sh_y, *sh_s; /* shared expert: [n][n_ff_shexp] x2, [n][n_embd], [n] */
    struct moe_item *items;
    int items_cap;
};

typedef struct moe_item {
    int e, i, r0, r1; /* expert, matrix of the job, rows [r0, r1) */
} moe_item;

moe_ctx *moe_new(const model *m, int max_batch) {
    const model_hparams *hp = &m->hp;
    if (hp->n_expert <= 0) return NULL;
    moe_ctx *x = xcalloc(1, sizeof *x);
    size_t n = (size_t)max_batch, k = (size_t)hp->n_expert_used, slots = n * k, ne = (size_t)hp->n_expert;
    x->max_batch = max_batch;
    x->k = (int)k;
    x->logits = xaligned(n * ne * sizeof(float));
    x->probs = xaligned(n * ne * sizeof(float));
    x->ids = xmalloc(slots * sizeof(int));
    x->w = xmalloc(slots * sizeof(float));
    x->slot_of = xmalloc(slots * sizeof(int));
    x->slot_tok = xmalloc(slots * sizeof(int));
    x->slot_exp = xmalloc(slots * sizeof(int));
    x->first = xmalloc((ne + 1) * sizeof(int));
    x->fill = xmalloc(ne * sizeof(int));
    x->g = xaligned(slots * (size_t)hp->n_ff_exp * sizeof(float));
    x->u = xaligned(slots * (size_t)hp->n_ff_exp * sizeof(float));
    x->y = xaligned(slots * (size_t)hp->n_embd * sizeof(float));
    if (hp->n_ff_shexp > 0) {
        x->sh_g = xaligned(n * (size_t)hp->n_ff_shexp * sizeof(float));
        x->sh_u = xaligned(n * (size_t)hp->n_ff_shexp * sizeof(float));
        x->sh_y = xaligned(n * (size_t)hp->n_embd * sizeof(float));
        x->sh_s = xaligned(n * sizeof(float));
    }
    return x;
}

void moe_free(moe_ctx *x) {
    if (!x) return;
    void *p[] = {x->logits, x->probs, x->ids, x->w, x->slot_of, x->slot_tok, x->slot_exp, x->first, x->fill, x->xq[0], x->xq[1],
                 x->g, x->u, x->y, x->sh_g, x->sh_u, x->sh_y, x->sh_s, x->items};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) free(p[i]);
    free(x);
}

static void ensure_xq(moe_ctx *x, size_t need) {
    if (need <= x->xq_cap) return;
    for (int i = 0; i < 2; i++) {
        free(x->xq[i]);
        x->xq[i] = xaligned(need);
    }
    x->xq_cap = need;
}

/* ---- steps ---------------------------------------------------------------------- */

typedef struct {
    const model_layer *L;
    float *out; /* combine_row's output rows */
} moe_arg;

static void route_row(fwd_ctx *c, void *arg, int t) {
    const moe_arg *a = arg;
    const model_hparams *hp = &c->m->hp;
    moe_ctx *x = c->moe;
    size_t ne = (size_t)hp->n_expert;
    float *lg = x->logits + t * ne;
    const model_tensor *b = &a->L->moe.router_b;
    if (b->data)
        for (size_t i = 0; i < ne; i++) lg[i] += ((const float *)b->data)[i];
    moe_route(hp, lg, x->probs + t * ne, x->ids + (size_t)t * x->k, x->w + (size_t)t * x->k);
}

/* Slots: the (token, j) pairs grouped by expert, tokens in batch order. */
void moe_group(const int *ids, int n, int k, int n_expert, int *first, int *fill, int *slot_of, int *slot_tok,
               int *slot_exp) {
    memset(first, 0, (size_t)(n_expert + 1) * sizeof(int));
    for (int s = 0; s < n * k; s++) first[ids[s] + 1]++;
    for (int e = 0; e < n_expert; e++) first[e + 1] += first[e];
    memcpy(fill, first, (size_t)n_expert * sizeof(int));
    for (int i = 0; i < n * k; i++) {
        int e = ids[i], s = fill[e]++;
        slot_of[i] = s;
        slot_tok[s] = i / k;
        if (slot_exp) slot_exp[s] = e;
    }
}

typedef struct {
    const float *src; /* rows of width k, src_stride apart */
    size_t src_stride;
    const int *row_of; /* slot -> source row (NULL: the slot itself) */
    qtype act;
    int64_t k;
    uint8_t *dst;
    size_t bytes;
} act_arg;

static void act_slot(fwd_ctx *c, void *arg, int s) {
    const act_arg *a = arg;
    int r = a->row_of ? a->row_of[s] : s;
    quant_act_row(a->act, a->src + (size_t)r * a->src_stride, a->dst + (size_t)s * a->bytes, a->k);
}

/* Converts every slot's input row for the weights w[0..n_w) (one
 * conversion per distinct activation format) into x->xq; xq[i] and
 * bytes[i] say where weight i's rows are. */
static void convert_slots(fwd_ctx *c, const model_tensor *const *w, int n_w, const float *src, size_t stride,
                          const int *row_of, int slots, const uint8_t **xq, size_t *bytes) {
    moe_ctx *x = c->moe;
    size_t need = 0;
    for (int i = 0; i < n_w; i++) {
        size_t b = quant_act_bytes_for(w[i]->type, w[i]->cols) * (size_t)slots;
        need = b > need ? b : need;
    }
    ensure_xq(x, need);
    qtype done = QT_COUNT;
    for (int i = 0; i < n_w; i++) {
        qtype act = quant_get(w[i]->type)->act_type;
        bytes[i] = quant_act_row_bytes(act, w[i]->cols);
        if (i > 0 && act == done) {
            xq[i] = xq[0];
            bytes[i] = bytes[0];
            continue;
        }
        act_arg a = {src, stride, row_of, act, w[i]->cols, x->xq[i], bytes[i]};
        fwd__for_rows(c, slots, act_slot, &a);
        xq[i] = x->xq[i];
        done = act;
    }
}

typedef struct {
    const model_experts *w[2];
    float *y[2];
    const uint8_t *xq[2];
    size_t xq_bytes[2];
    const int *first;
    const moe_item *items;
    int n_items;
    atomic_int next;
} moe_job;

static void moe_worker(void *p, int ith, int nth) {
    moe_job *j = p;
    (void)ith, (void)nth;
    for (int ii; (ii = atomic_fetch_add(&j->next, 1)) < j->n_items;) {
        const moe_item *it = &j->items[ii];
        model_tensor w = moe_expert(j->w[it->i], it->e);
        int s0 = j->first[it->e], cnt = j->first[it->e + 1] - s0;
        quant_gemm(w.type, w.data, w.row_bytes, w.cols, j->xq[it->i] + (size_t)s0 * j->xq_bytes[it->i],
                   j->xq_bytes[it->i], cnt, j->y[it->i] + (size_t)s0 * w.rows, w.rows, it->r0, it->r1);
    }
}

#define MOE_CHUNKS_PER_THREAD 2

/* Items for every active expert and matrix, rows cut as forward.c's
 * matmuls cut them (whole ROW_ALIGN blocks, at least 64 rows). */
static int make_items(fwd_ctx *c, moe_job *j, int n_w, int n_expert) {
    moe_ctx *x = c->moe;
    int nth = pool_size(c->threads), n = 0;
    for (int i = 0; i < n_w; i++) {
        long rows = j->w[i]->m.rows, per = rows / ((long)MOE_CHUNKS_PER_THREAD * nth);
        per = (per + ROW_ALIGN - 1) / ROW_ALIGN * ROW_ALIGN;
        if (per < 4 * ROW_ALIGN) per = 4 * ROW_ALIGN;
        int chunks = (int)((rows + per - 1) / per), need = n + chunks * n_expert;
        XGROW(x->items, x->items_cap, need, 256);
        for (int e = 0; e < n_expert; e++) {
            if (j->first[e + 1] == j->first[e]) continue;
            for (long r0 = 0; r0 < rows; r0 += per)
                x->items[n++] = (moe_item){e, i, (int)r0, (int)(r0 + per < rows ? r0 + per : rows)};
        }
    }
    return n;
}

/* y_i[slot] = (the slot's expert's matrix of stack w_i) x (the slot's
 * activation row), for every slot, as one job over the active experts. */
static void run_experts(fwd_ctx *c, const model_experts *const *w, float *const *y, const uint8_t *const *xq,
                        const size_t *bytes, int n_w) {
    moe_job j = {.first = c->moe->first};
    for (int i = 0; i < n_w; i++) {
        j.w[i] = w[i];
        j.y[i] = y[i];
        j.xq[i] = xq[i];
        j.xq_bytes[i] = bytes[i];
    }
    j.n_items = make_items(c, &j, n_w, c->m->hp.n_expert);
    j.items = c->moe->items;
    atomic_init(&j.next, 0);
    pool_run_any(c->threads, moe_worker, &j);
}

/* Slot s: expert biases (when the file has them), then SwiGLU into g. */
static void swiglu_slot(fwd_ctx *c, void *arg, int s) {
    const model_moe *mo = arg;
    moe_ctx *x = c->moe;
    int f = c->m->hp.n_ff_exp, e = x->slot_exp[s];
    float *g = x->g + (size_t)s * f, *u = x->u + (size_t)s * f;
    if (mo->gate_b.data)
        for (int i = 0; i < f; i++) g[i] += ((const float *)mo->gate_b.data)[(size_t)e * f + i];
    if (mo->up_b.data)
        for (int i = 0; i < f; i++) u[i] += ((const float *)mo->up_b.data)[(size_t)e * f + i];
    /* gpt-oss's clamped SwiGLU, as ggml's swiglu_oai computes it (alpha
     * 1.702, limit 7, llama.cpp's constants): x = min(g, 7), y = clamp(u,
     * -7, 7), x / (1 + e^(alpha * -x)) * (y + 1) */
    if (c->m->hp.expert_act == MOE_ACT_SWIGLU_OAI)
        vexp_swiglu_oai(g, g, u, (size_t)f, 1.702f, 7.0f);
    else
        vexp_silu_mul(g, g, u, (size_t)f); /* libm's expf's bits, as forward.c's SwiGLU */
}

/* Token t: its experts' outputs times their weights, best first, to out
 * (with the down bias of each expert when the file has one). */
static void combine_row(fwd_ctx *c, void *arg, int t) {
    const moe_arg *a = arg;
    moe_ctx *x = c->moe;
    int E = c->m->hp.n_embd;
    const float *db = a->L->moe.down_b.data;
    float *o = a->out + (size_t)t * E;
    for (int j = 0; j < x->k; j++) {
        const float *y = x->y + (size_t)x->slot_of[t * x->k + j] * E, w = x->w[t * x->k + j];
        const float *b = db ? db + (size_t)x->ids[t * x->k + j] * E : NULL;
        for (int i = 0; i < E; i++) {
            float v = (b ? y[i] + b[i] : y[i]) * w;
            o[i] = j ? o[i] + v : v;
        }
    }
}

/* The shared expert: SwiGLU of every row, times sigmoid(gate . x), added. */
static void shared_row(fwd_ctx *c, void *arg, int t) {
    float *out = arg;
    moe_ctx *x = c->moe;
    int E = c->m->hp.n_embd;
    float s = 1.0f / (1.0f + expf(-x->sh_s[t]));
    const float *y = x->sh_y + (size_t)t * E;
    for (int i = 0; i < E; i++) out[(size_t)t * E + i] += y[i] * s;
}

static void shared_swiglu_row(fwd_ctx *c, void *arg, int t) {
    (void)arg;
    moe_ctx *x = c->moe;
    size_t f = (size_t)c->m->hp.n_ff_shexp;
    float *g = x->sh_g + t * f, *u = x->sh_u + t * f;
    vexp_silu_mul(g, g, u, f);
}

static void shared_expert(fwd_ctx *c, const model_moe *mo, const float *xn, int n, float *out) {
    moe_ctx *x = c->moe;
    const model_tensor *gu[2] = {&mo->sh_gate, &mo->sh_up};
    float *gu_out[2] = {x->sh_g, x->sh_u};
    fwd__matmul_group(c, xn, n, gu, gu_out, 2);
    fwd__for_rows(c, n, shared_swiglu_row, NULL);
    fwd__matmul(c, x->sh_g, n, &mo->sh_down, x->sh_y);
    fwd__matmul(c, xn, n, &mo->sh_gate_inp, x->sh_s);
    fwd__for_rows(c, n, shared_row, out);
}

void moe_ffn(fwd_ctx *c, const model_layer *L, const float *xn, int n, float *out) {
    const model_hparams *hp = &c->m->hp;
    const model_moe *mo = &L->moe;
    moe_ctx *x = c->moe;
    int slots = n * x->k;
    moe_arg a = {L, out};
    fwd__matmul(c, xn, n, &mo->router, x->logits);
    fwd__for_rows(c, n, route_row, &a);
    moe_group(x->ids, n, x->k, hp->n_expert, x->first, x->fill, x->slot_of, x->slot_tok, x->slot_exp);

    const model_tensor *gu[2] = {&mo->gate.m, &mo->up.m};
    const model_experts *gus[2] = {&mo->gate, &mo->up};
    float *gu_out[2] = {x->g, x->u};
    const uint8_t *xq[2];
    size_t bytes[2];
    convert_slots(c, gu, 2, xn, (size_t)hp->n_embd, x->slot_tok, slots, xq, bytes);
    run_experts(c, gus, gu_out, xq, bytes, 2);
    fwd__for_rows(c, slots, swiglu_slot, (void *)mo);

    const model_tensor *d[1] = {&mo->down.m};
    const model_experts *ds[1] = {&mo->down};
    float *d_out[1] = {x->y};
    convert_slots(c, d, 1, x->g, (size_t)hp->n_ff_exp, NULL, slots, xq, bytes);
    run_experts(c, ds, d_out, xq, bytes, 1);

    fwd__for_rows(c, n, combine_row, &a);
    if (mo->sh_up.data) shared_expert(c, mo, xn, n, out);
}
