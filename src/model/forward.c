/* forward.c - llama-family forward pass (llama, qwen2, qwen3, gemma3, qwen35,
 * and their mixture-of-experts variants qwen3moe, qwen35moe: moe.c).
 *
 * Per layer, for a batch of n tokens:
 *   norm -> Q,K,V matmuls (+bias, +QK-norm) -> RoPE -> store K,V as F16 in
 *   the sequences' blocks -> attention per (run of tokens, KV head): all
 *   query heads of a GQA group over all tokens of a run share one read of
 *   each key tile (backend/attn.h) -> output matmul
 *   (-> post norm) -> residual -> norm -> gate/up matmuls -> SwiGLU or
 *   GELU -> down (ffn.c, the first three fused per work item; MoE: moe.c)
 *   (-> post norm) -> residual.
 * Sliding-window layers (gemma3) attend to the last n_swa positions only,
 * and the pool keeps their K/V for a sequence's window only (kv.h): a
 * block's sliding part is read only from the window's first tile on, so
 * the rows of dropped parts are never touched.
 * qwen35: recurrent layers run deltanet.c instead of attention; its
 * attention layers gate their output with sigmoid(gate) (Q rows carry the
 * gate) and rotate with interleaved M-RoPE sections (init_imrope); the
 * K/V pool holds the attention layers only (model_layer.kv_layer).
 * Every step computes each token's row with the same operations whatever
 * the batch holds; threads split weight rows or (token, head) pairs, never
 * a reduction. */
#include "model/forward.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/attn.h"
#include "backend/norm.h"
#include "backend/vexp.h"
#include "base/fp16.h"
#include "base/mem.h"
#include "model/forward_int.h"

/* ---- row-parallel helpers ---------------------------------------------- */

typedef struct {
    fwd_ctx *c;
    row_fn fn;
    void *arg;
    int n, per; /* rows, rows a grab */
    atomic_int next;
} rows_job;

/* Rows in grabs from a shared counter (pool_run_any): an even split made
 * the other thread wait whenever a neighbour slowed one core. */
#define ROWS_GRABS_PER_THREAD 8

static void rows_worker(void *p, int ith, int nth) {
    rows_job *j = p;
    for (int t0; (t0 = atomic_fetch_add(&j->next, j->per)) < j->n;) {
        int t1 = t0 + j->per < j->n ? t0 + j->per : j->n;
        for (int t = t0; t < t1; t++) j->fn(j->c, j->arg, t);
    }
}

void fwd__for_rows(fwd_ctx *c, int n, row_fn fn, void *arg) {
    int nth = pool_size(c->threads);
    if (n < 2 || nth == 1) {
        for (int t = 0; t < n; t++) fn(c, arg, t);
        return;
    }
    int per = n / (ROWS_GRABS_PER_THREAD * nth);
    rows_job j = {c, fn, arg, n, per < 1 ? 1 : per, 0};
    pool_run_any(c->threads, rows_worker, &j);
}

/* ---- matmul ------------------------------------------------------------- */

typedef struct {
    const model_tensor *w[MM_MAX];
    float *y[MM_MAX];
    const uint8_t *xq[MM_MAX], *xt[MM_MAX];
    size_t xq_bytes[MM_MAX];
    int n_w, n;
    int chunk_rows[MM_MAX], first[MM_MAX + 1]; /* chunks of weight i: [first[i], first[i + 1]) */
    atomic_int next;                            /* next chunk to take */
} mm_job;

/* Threads take chunks of rows from a shared counter (pool_run_any), so a
 * thread the scheduler parks does not hold up the others. A chunk is a
 * whole number of ROW_ALIGN blocks, and the kernels give a row the same
 * bits whatever rows share its call. */
static void mm_worker(void *p, int ith, int nth) {
    mm_job *j = p;
    for (int ci; (ci = atomic_fetch_add(&j->next, 1)) < j->first[j->n_w];) {
        int i = 0;
        while (ci >= j->first[i + 1]) i++;
        const model_tensor *w = j->w[i];
        int r0 = (ci - j->first[i]) * j->chunk_rows[i], r1 = r0 + j->chunk_rows[i];
        if (r1 > w->rows) r1 = (int)w->rows;
        quant_gemm_xt(w->type, w->data, w->row_bytes, w->cols, j->xq[i], j->xq_bytes[i], j->xt[i], j->n, j->y[i],
                      w->rows, r0, r1);
    }
}

#define MM_CHUNKS_PER_THREAD 2 /* decode, 2 busy cores: 1 was 6% faster than 2, 8 10% slower */

/* Rows per chunk: about MM_CHUNKS_PER_THREAD chunks per thread and weight
 * (a parked thread holds up at most its current chunk), at least 64 rows,
 * whole ROW_ALIGN blocks. */
int fwd__chunk_rows(long rows, int nth) {
    long per = rows / ((long)MM_CHUNKS_PER_THREAD * nth);
    per = (per + ROW_ALIGN - 1) / ROW_ALIGN * ROW_ALIGN;
    return per < 4 * ROW_ALIGN ? 4 * ROW_ALIGN : (int)per;
}

static void mm_chunks(mm_job *j, int nth) {
    j->first[0] = 0;
    for (int i = 0; i < j->n_w; i++) {
        long rows = j->w[i]->rows, per = fwd__chunk_rows(rows, nth);
        j->chunk_rows[i] = (int)per;
        j->first[i + 1] = j->first[i] + (int)((rows + per - 1) / per);
    }
}

typedef struct {
    const float *x;
    int64_t k;
    qtype act;
    uint8_t *dst;
    size_t bytes;
} act_job;

static void act_row(fwd_ctx *c, void *arg, int t) {
    act_job *a = arg;
    quant_act_row(a->act, a->x + (size_t)t * a->k, a->dst + (size_t)t * a->bytes, a->k);
}

/* Grows the activation buffers to the largest the whole group needs, before
 * any is filled or handed to the job: growing frees them, so growing for a
 * later weight of a group (weights of one group may differ in type, hence
 * in activation format and row size) would free the rows an earlier weight's
 * job points at. */
void fwd__reserve_xq(fwd_ctx *c, const model_tensor **w, int n_w, int n) {
    size_t need = 0;
    for (int i = 0; i < n_w; i++) {
        size_t b = quant_act_bytes_for(w[i]->type, w[i]->cols) * (size_t)n;
        if (b > need) need = b;
    }
    if (need <= c->xq_cap) return;
    for (int i = 0; i < MM_MAX; i++) {
        free(c->xq[i]);
        c->xq[i] = xaligned(need);
    }
    c->xq_cap = need;
}

typedef struct {
    const model_tensor *w;
    const uint8_t *xq;
    size_t bytes;
    int n;
    uint8_t *dst;
} xt_job;

static void xt_tile(fwd_ctx *c, void *arg, int i) {
    xt_job *a = arg;
    quant_xtiles(a->w->type, a->w->cols, a->xq, a->bytes, a->n, i, i + 1, a->dst);
}

const uint8_t *fwd__xtiles(fwd_ctx *c, int slot, const model_tensor *w, const uint8_t *xq, size_t bytes, int n) {
    size_t need = quant_xtiles_bytes(w->type, w->cols, n);
    if (!need) return NULL;
    if (need > c->xt_cap[slot]) {
        free(c->xt[slot]);
        c->xt[slot] = xaligned(need);
        c->xt_cap[slot] = need;
    }
    xt_job a = {w, xq, bytes, n, c->xt[slot]};
    fwd__for_rows(c, (n + QUANT_XTILE - 1) / QUANT_XTILE, xt_tile, &a);
    return c->xt[slot];
}

/* The input rows x in the activation format of each of the n_w weights,
 * converted once per distinct format: xq[i] (rows bytes[i] apart) is
 * weight i's. The rows live in c->xq until the next conversion; their
 * tiles (xt) in c->xt, made once per slot: weights sharing a format share
 * x's columns too, and the tiles depend on nothing else. */
void fwd__quant_inputs(fwd_ctx *c, const float *x, int n, const model_tensor **w, int n_w, const uint8_t **xq,
                       size_t *bytes, const uint8_t **xt) {
    qtype done[MM_MAX];
    const uint8_t *tiles[MM_MAX] = {0};
    int n_done = 0;
    fwd__reserve_xq(c, w, n_w, n);
    for (int i = 0; i < n_w; i++) {
        qtype act = quant_get(w[i]->type)->act_type;
        bytes[i] = quant_act_row_bytes(act, w[i]->cols);
        int slot = 0;
        while (slot < n_done && done[slot] != act) slot++;
        if (slot == n_done) {
            act_job a = {x, w[i]->cols, act, c->xq[slot], bytes[i]};
            fwd__for_rows(c, n, act_row, &a);
            done[n_done++] = act;
        }
        xq[i] = c->xq[slot];
        if (!xt) continue;
        if (!tiles[slot]) tiles[slot] = fwd__xtiles(c, slot, w[i], xq[i], bytes[i], n);
        xt[i] = quant_xtiles_bytes(w[i]->type, w[i]->cols, n) ? tiles[slot] : NULL;
    }
}

/* y_i[t][:] = W_i x[t] for up to MM_MAX weights sharing the input rows x. */
void fwd__matmul_group(fwd_ctx *c, const float *x, int n, const model_tensor **w, float **y, int n_w) {
    mm_job j = {.n_w = n_w, .n = n};
    fwd__quant_inputs(c, x, n, w, n_w, j.xq, j.xq_bytes, j.xt);
    for (int i = 0; i < n_w; i++) {
        j.w[i] = w[i];
        j.y[i] = y[i];
    }
    mm_chunks(&j, pool_size(c->threads));
    pool_run_any(c->threads, mm_worker, &j);
}

void fwd__matmul_xq(fwd_ctx *c, const uint8_t *xq, size_t bytes, int n, const model_tensor *w, float *y) {
    int slot = 0; /* the tiles of c->xq[i]'s rows go to c->xt[i] (the FFN's down projection: slot 2) */
    while (slot < MM_MAX - 1 && c->xq[slot] != xq) slot++;
    mm_job j = {.w = {w}, .y = {y}, .xq = {xq}, .xq_bytes = {bytes}, .xt = {fwd__xtiles(c, slot, w, xq, bytes, n)},
                .n_w = 1, .n = n};
    mm_chunks(&j, pool_size(c->threads));
    pool_run_any(c->threads, mm_worker, &j);
}

void fwd__matmul(fwd_ctx *c, const float *x, int n, const model_tensor *w, float *y) {
    fwd__matmul_group(c, x, n, &w, &y, 1);
}

/* ---- elementwise steps ---------------------------------------------------- */

/* 4 floats, for the elementwise loops the compiler leaves scalar at -O2
 * (GNU C vectors: one IEEE operation per lane, never contracted, so the
 * scalar loops' bits). */
typedef float fwd_v4 __attribute__((vector_size(16)));
typedef int fwd_i4 __attribute__((vector_size(16)));

/* RMS norm: backend/norm.h (several rows' chains side by side, one row
 * per lane; the bits of one row alone). */
#define NORM_ROWS 16 /* rows a norm_rows work item takes: one AVX-512 pass */

void fwd__rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    norm_rms_rows(out, x, 0, w, 1, n, eps);
}

typedef struct {
    const float *in;
    float *out;
    const float *w;
    int rows, len; /* rows of len floats, len apart */
} norm_arg;

/* Rows [NORM_ROWS g, NORM_ROWS (g + 1)) of the batch. */
static void norm_group(fwd_ctx *c, void *arg, int g) {
    norm_arg *a = arg;
    int r0 = g * NORM_ROWS, rows = a->rows - r0 < NORM_ROWS ? a->rows - r0 : NORM_ROWS;
    size_t o = (size_t)r0 * a->len;
    norm_rms_rows(a->out + o, a->in + o, (size_t)a->len, a->w, rows, a->len, c->m->hp.rms_eps);
}

static void norm_rows_of(fwd_ctx *c, const float *in, float *out, const model_tensor *w, int rows, int len) {
    norm_arg a = {in, out, w->data, rows, len};
    fwd__for_rows(c, (rows + NORM_ROWS - 1) / NORM_ROWS, norm_group, &a);
}

/* n token rows of n_embd. */
static void norm_rows(fwd_ctx *c, const float *in, float *out, const model_tensor *w, int n) {
    norm_rows_of(c, in, out, w, n, c->m->hp.n_embd);
}

/* YaRN ramp between the corrected dimensions (published YaRN formula). */
static float yarn_corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
    return n_dims * logf((float)n_ctx_orig / (n_rot * 2.0f * (float)M_PI)) / (2.0f * logf(base));
}

/* swa: a sliding-window layer, which rotates with its own base and no
 * scaling (llama.cpp's rope_freq_scale_train_swa is 1). */
static void rope_angles(const fwd_ctx *c, int pos, int i, int swa, float *cos_t, float *sin_t) {
    const model_hparams *hp = &c->m->hp;
    double theta = (double)pos * (swa ? c->rope_inv_swa : c->rope_inv_freq)[i];
    double mscale = 1.0;
    if (swa) {
        /* no scaling */
    } else if (hp->rope_scale == ROPE_SCALE_LINEAR) {
        theta /= hp->rope_factor;
    } else if (hp->rope_scale == ROPE_SCALE_YARN) {
        float lo = floorf(yarn_corr_dim(hp->rope_dim, hp->rope_orig_ctx, hp->yarn_beta_fast, hp->rope_base));
        float hi = ceilf(yarn_corr_dim(hp->rope_dim, hp->rope_orig_ctx, hp->yarn_beta_slow, hp->rope_base));
        if (lo < 0) lo = 0;
        if (hi > hp->rope_dim - 1) hi = (float)hp->rope_dim - 1;
        float y = ((float)i - lo) / fmaxf(0.001f, hi - lo);
        double ramp = 1.0 - fmin(1.0, fmax(0.0, y));
        double interp = theta / hp->rope_factor;
        theta = interp * (1 - ramp) + theta * ramp;
        mscale = hp->yarn_attn_factor * (1.0 + 0.1 * log(hp->rope_factor));
    }
    *cos_t = (float)(cos(theta) * mscale);
    *sin_t = (float)(sin(theta) * mscale);
}

/* Token t's angles for every rotated pair and each kind of layer, once
 * per batch: every layer's Q and K of the token use them (18 layers x 2
 * used to compute them again; sin and cos were ~2.5% of a prefill). */
static void rope_table_row(fwd_ctx *c, void *arg, int t) {
    const fwd_batch *b = arg;
    int half = c->m->hp.rope_dim / 2;
    for (int kind = 0; kind < c->rope_kinds; kind++) {
        size_t o = ((size_t)t * c->rope_kinds + kind) * half;
        for (int i = 0; i < half; i++) rope_angles(c, b->pos[t], i, kind, &c->rope_cos[o + i], &c->rope_sin[o + i]);
    }
}

/* One head's pairs (a_i, b_i) rotated: a = x0 cos - x1 sin, b = x0 sin +
 * x1 cos, each product and sum rounded (GNU C vectors: one IEEE
 * operation per lane, never contracted), 4 pairs a step: the scalar
 * loop's bits. neox: pairs (i, i + half), else (2i, 2i + 1). The loop
 * with qwen35's still pairs and both layouts inside stayed scalar (2% of
 * SmolLM2's prefill). */
static void rope_pairs(float *v, const float *ct, const float *st, int half, int neox) {
    int i = 0;
    for (; i + 4 <= half; i += 4) {
        fwd_v4 x0, x1, lo, hi, c, s;
        memcpy(&c, ct + i, sizeof c);
        memcpy(&s, st + i, sizeof s);
        if (neox) {
            memcpy(&x0, v + i, sizeof x0);
            memcpy(&x1, v + i + half, sizeof x1);
        } else {
            memcpy(&lo, v + 2 * i, sizeof lo);
            memcpy(&hi, v + 2 * i + 4, sizeof hi);
            x0 = __builtin_shuffle(lo, hi, (fwd_i4){0, 2, 4, 6});
            x1 = __builtin_shuffle(lo, hi, (fwd_i4){1, 3, 5, 7});
        }
        fwd_v4 a = x0 * c - x1 * s, b = x0 * s + x1 * c;
        if (neox) {
            memcpy(v + i, &a, sizeof a);
            memcpy(v + i + half, &b, sizeof b);
        } else {
            lo = __builtin_shuffle(a, b, (fwd_i4){0, 4, 1, 5});
            hi = __builtin_shuffle(a, b, (fwd_i4){2, 6, 3, 7});
            memcpy(v + 2 * i, &lo, sizeof lo);
            memcpy(v + 2 * i + 4, &hi, sizeof hi);
        }
    }
    for (; i < half; i++) {
        int ia = neox ? i : 2 * i, ib = neox ? i + half : 2 * i + 1;
        float x0 = v[ia], x1 = v[ib];
        v[ia] = x0 * ct[i] - x1 * st[i];
        v[ib] = x0 * st[i] + x1 * ct[i];
    }
}

/* RoPE on n heads of batch token t (x: head_dim floats apart), with the
 * angles of its layer kind from the batch's table. */
static void rope_heads(const fwd_ctx *c, float *x, int n, int t, int swa) {
    const model_hparams *hp = &c->m->hp;
    int half = hp->rope_dim / 2;
    size_t o = ((size_t)t * c->rope_kinds + (swa && c->rope_kinds > 1 ? 1 : 0)) * half;
    const float *ct = c->rope_cos + o, *st = c->rope_sin + o;
    for (int h = 0; h < n; h++) {
        float *v = x + (size_t)h * hp->head_dim;
        if (!c->rope_off) {
            rope_pairs(v, ct, st, half, hp->rope_neox);
            continue;
        }
        for (int i = 0; i < half; i++) {
            if (c->rope_off[i]) continue; /* rotated by angle 0 */
            int a = hp->rope_neox ? i : 2 * i, b = hp->rope_neox ? i + half : 2 * i + 1;
            float x0 = v[a], x1 = v[b];
            v[a] = x0 * ct[i] - x1 * st[i];
            v[b] = x0 * st[i] + x1 * ct[i];
        }
    }
}

typedef struct {
    const fwd_batch *b;
    const model_layer *L;
    int layer;
} layer_arg;

static void add_bias(float *y, const model_tensor *bias, int n) {
    if (!bias->data) return;
    const float *bv = bias->data;
    for (int i = 0; i < n; i++) y[i] += bv[i];
}

/* QK-norm of n tokens' heads (qwen3, Gemma 3): every head of every token
 * one row of head_dim (c->q and c->k hold them contiguously), so a work
 * item takes NORM_ROWS heads whatever the heads per token. */
static void head_norms(fwd_ctx *c, const model_tensor *w, float *x, int n_heads, int n) {
    if (w->data) norm_rows_of(c, x, x, w, n * n_heads, c->m->hp.head_dim);
}

/* qwen35: Q rows come as [head][q | gate]; q to c->q, gate to c->attn_gate. */
static void split_gate(fwd_ctx *c, int t) {
    const model_hparams *hp = &c->m->hp;
    int d = hp->head_dim, nq = hp->n_head * d;
    const float *src = c->qg + (size_t)t * 2 * nq;
    for (int h = 0; h < hp->n_head; h++) {
        memcpy(c->q + (size_t)t * nq + (size_t)h * d, src + (size_t)h * 2 * d, (size_t)d * sizeof(float));
        memcpy(c->attn_gate + (size_t)t * nq + (size_t)h * d, src + (size_t)h * 2 * d + d, (size_t)d * sizeof(float));
    }
}

/* qwen35: attention output times sigmoid(gate), per token row. */
static void apply_gate_row(fwd_ctx *c, void *arg, int t) {
    size_t nq = (size_t)c->m->hp.n_head * c->m->hp.head_dim;
    float *o = c->att + (size_t)t * nq;
    const float *g = c->attn_gate + (size_t)t * nq;
    vexp_sigmoid_mul(o, g, nq);
}

/* qwen35's gate split and the biases of token t's Q, K and V (before the
 * QK-norm). */
static void qkv_bias_row(fwd_ctx *c, void *arg, int t) {
    layer_arg *a = arg;
    const model_hparams *hp = &c->m->hp;
    int nq = hp->n_head * hp->head_dim, kvd = hp->n_head_kv * hp->head_dim;
    if (hp->attn_gate) split_gate(c, t);
    add_bias(c->q + (size_t)t * nq, &a->L->bq, nq);
    add_bias(c->k + (size_t)t * kvd, &a->L->bk, kvd);
    add_bias(c->v + (size_t)t * kvd, &a->L->bv, kvd);
}

/* RoPE on token t's Q and K (biased and normed); then K,V go to the cache. */
static void qkv_finish_row(fwd_ctx *c, void *arg, int t) {
    layer_arg *a = arg;
    const model_hparams *hp = &c->m->hp;
    int nq = hp->n_head * hp->head_dim, kvd = hp->n_head_kv * hp->head_dim;
    float *q = c->q + (size_t)t * nq, *k = c->k + (size_t)t * kvd, *v = c->v + (size_t)t * kvd;
    int pos = a->b->pos[t];
    rope_heads(c, q, hp->n_head, t, a->L->swa);
    rope_heads(c, k, hp->n_head_kv, t, a->L->swa);
    const kv_seq *s = a->b->seqs[t];
    int B = c->kv->block_tokens, blk = s->blocks[pos / B];
    size_t row = (size_t)(pos % B) * c->kv->head_stride, d = (size_t)hp->head_dim;
    for (int g = 0; g < hp->n_head_kv; g++) { /* stored as computed: the cache keeps these bytes */
        kvq_write_row(c->kv->type, k + g * d, kv_head_rows(c->kv, blk, a->layer, 0, g) + row, (int)d);
        kvq_write_row(c->kv->type, v + g * d, kv_head_rows(c->kv, blk, a->layer, 1, g) + row, (int)d);
    }
}

/* First position token t sees in this layer: 0, or on a sliding-window
 * layer the oldest of the last n_swa (llama.cpp masks p0 when
 * pos - p0 >= n_swa). */
static int attn_first_pos(const fwd_ctx *c, const layer_arg *a, int t) {
    int n_swa = c->m->hp.n_swa, first = a->b->pos[t] + 1 - n_swa;
    return a->L->swa && first > 0 ? first : 0;
}

/* The queries of part `part` of `parts` of KV head g's query heads for
 * the tokens of run r into qs; the block table of KV head g covering the
 * run's sequence from the first tile any of them sees into *kv. */
static int attn_gather(fwd_ctx *c, const layer_arg *a, const fwd_run_span *r, int g, int part, int parts, int ith,
                       attn_query *qs, attn_kv *kv) {
    const model_hparams *hp = &c->m->hp;
    int d = hp->head_dim, hpg = hp->n_head / hp->n_head_kv, B = c->kv->block_tokens;
    const kv_seq *s = a->b->seqs[r->t0];
    const uint16_t **kb = c->kb + (size_t)ith * c->blocks_cap, **vb = c->vb + (size_t)ith * c->blocks_cap;
    int nq = 0, h0 = g * hpg + part * hpg / parts, h1 = g * hpg + (part + 1) * hpg / parts;
    for (int t = r->t0; t < r->t1; t++)
        for (int h = h0; h < h1; h++)
            qs[nq++] = (attn_query){
                .q = c->q + (size_t)t * hp->n_head * d + (size_t)h * d,
                .out = c->att + (size_t)t * hp->n_head * d + (size_t)h * d,
                .first = attn_first_pos(c, a, t),
                .end = a->b->pos[t] + 1,
                .sink = a->L->sinks.data ? (const float *)a->L->sinks.data + h : NULL,
            };
    int end = a->b->pos[r->t1 - 1] + 1, from = qs[0].first / ATTN_KV_TILE * ATTN_KV_TILE / B;
    for (int i = from; i < (end + B - 1) / B; i++) {
        kb[i] = kv_head_rows(c->kv, s->blocks[i], a->layer, 0, g);
        vb[i] = kv_head_rows(c->kv, s->blocks[i], a->layer, 1, g);
    }
    *kv = (attn_kv){.k_blocks = kb, .v_blocks = vb, .block_tokens = B, .stride = c->kv->head_stride, .head_dim = d,
                    .type = c->kv->type};
    return nq;
}

/* Segment states of token t's query head h (attn_state_floats each, by
 * absolute segment). */
static float *attn_states(fwd_ctx *c, int t, int h) {
    return c->attn_part + ((size_t)t * c->m->hp.n_head + h) * c->seg_cap * attn_state_floats(c->m->hp.head_dim);
}

/* One work item: part `part` of the query heads of KV head g for the
 * tokens of run r, all in one attn_run call (each key tile is widened
 * once for all of them); with seg >= 0 only key segment seg, its states
 * to c->attn_part (folded by attn_fold_row). */
static void attn_item(fwd_ctx *c, const layer_arg *a, const fwd_run_span *r, int g, int part, int parts, int seg,
                      int ith) {
    const model_hparams *hp = &c->m->hp;
    int hpg = hp->n_head / hp->n_head_kv;
    attn_query *qs = c->attn_qs + (size_t)ith * ATTN_RUN * hpg;
    attn_kv kv;
    int nq = attn_gather(c, a, r, g, part, parts, ith, qs, &kv);
    float *ws = c->attn_ws + (size_t)ith * c->attn_ws_n;
    if (seg < 0) {
        attn_run(&kv, qs, nq, hp->attn_scale, ws);
        return;
    }
    float **st = c->attn_stp + (size_t)ith * ATTN_RUN * hpg;
    int per_tok = nq / (r->t1 - r->t0), h0 = g * hpg + part * hpg / parts; /* attn_gather's order */
    for (int i = 0; i < nq; i++)
        st[i] = attn_states(c, r->t0 + i / per_tok, h0 + i % per_tok) + (size_t)seg * attn_state_floats(hp->head_dim);
    attn_run_seg(&kv, qs, nq, hp->attn_scale, seg, st, ws);
}

typedef struct {
    fwd_ctx *c;
    const layer_arg *a;
    int parts; /* items per (run, KV head, segment): its query heads split this many ways */
    int segs;  /* key segments per run in separate items (0: all in one) */
    atomic_int next;
} attn_job;

/* The first key segment of run r's queries. */
static int run_seg0(const fwd_ctx *c, const layer_arg *a, const fwd_run_span *r) {
    return attn_first_pos(c, a, r->t0) / ATTN_SEG;
}

/* Items are taken from a shared counter, latest runs first: in a prefill
 * chunk they are the deepest, so the long ones start early. Which thread
 * runs an item, which query heads share it, and whether a run's key
 * segments are split into items does not change a query's bits
 * (backend/attn.h). */
static void attn_worker(void *p, int ith, int nth) {
    attn_job *j = p;
    fwd_ctx *c = j->c;
    int n_kv = c->m->hp.n_head_kv, segs = j->segs ? j->segs : 1, per_run = n_kv * j->parts * segs;
    for (int i; (i = atomic_fetch_add(&j->next, 1)) < c->n_runs * per_run;) {
        const fwd_run_span *r = &c->runs[c->n_runs - 1 - i / per_run];
        int k = i % per_run, seg = -1;
        if (j->segs) {
            seg = run_seg0(c, j->a, r) + k % segs;
            if (seg * ATTN_SEG >= j->a->b->pos[r->t1 - 1] + 1) continue; /* past this run's keys */
            k /= segs;
        }
        attn_item(c, j->a, r, k / j->parts, k % j->parts, j->parts, seg, ith);
    }
}

/* Small batches (decode) split each (run, KV head) over its key segments
 * so that every thread has work at depth; states are folded after. */
#define ATTN_SPLIT_TOK 4

/* Key segments a run of the batch spans at most (0: no split). */
static int attn_segs(const fwd_ctx *c, const layer_arg *a) {
    if (a->b->n > ATTN_SPLIT_TOK || pool_size(c->threads) == 1) return 0;
    int segs = 0;
    for (int i = 0; i < c->n_runs; i++) {
        const fwd_run_span *r = &c->runs[i];
        int n = (a->b->pos[r->t1 - 1]) / ATTN_SEG - run_seg0(c, a, r) + 1;
        if (n > segs) segs = n;
    }
    return segs > 1 ? segs : 0;
}

/* Fewer items than threads (decode with one or two KV heads, as Gemma 3
 * has one): split each pair's query heads so every thread has one. Each
 * part widens the tiles itself, so only then. */
static int attn_parts(const fwd_ctx *c, int segs) {
    int items = c->n_runs * c->m->hp.n_head_kv * (segs ? segs : 1), nth = pool_size(c->threads);
    int hpg = c->m->hp.n_head / c->m->hp.n_head_kv, parts = (nth + items - 1) / items;
    return parts < 1 ? 1 : parts > hpg ? hpg : parts;
}

/* Token t's heads: their segment states folded into c->att. */
static void attn_fold_row(fwd_ctx *c, void *arg, int t) {
    const layer_arg *a = arg;
    const model_hparams *hp = &c->m->hp;
    int s0 = attn_first_pos(c, a, t) / ATTN_SEG, n = a->b->pos[t] / ATTN_SEG - s0 + 1;
    size_t sf = attn_state_floats(hp->head_dim);
    const float *sinks = a->L->sinks.data;
    for (int h = 0; h < hp->n_head; h++)
        attn_fold(hp->head_dim, attn_states(c, t, h) + (size_t)s0 * sf, n, sinks ? sinks + h : NULL,
                  c->att + ((size_t)t * hp->n_head + h) * hp->head_dim);
}

/* Runs of the batch: consecutive tokens of one sequence at consecutive
 * positions, cut every ATTN_RUN tokens. */
static void split_runs(fwd_ctx *c, const fwd_batch *b) {
    c->n_runs = 0;
    for (int t = 0; t < b->n; t++) {
        fwd_run_span *r = c->n_runs ? &c->runs[c->n_runs - 1] : NULL;
        if (r && r->t1 == t && r->t1 - r->t0 < ATTN_RUN && b->seqs[t] == b->seqs[t - 1] &&
            b->pos[t] == b->pos[t - 1] + 1)
            r->t1++;
        else
            c->runs[c->n_runs++] = (fwd_run_span){t, t + 1};
    }
}

typedef struct {
    float *x;
    const float *y;
} add_arg;

/* x += y on token t's row, 4 floats a step. */
static void add_row(fwd_ctx *c, void *arg, int t) {
    const add_arg *a = arg;
    size_t e = (size_t)c->m->hp.n_embd, i = 0;
    float *x = a->x + (size_t)t * e;
    const float *y = a->y + (size_t)t * e;
    for (; i + 4 <= e; i += 4) {
        fwd_v4 xv, yv;
        memcpy(&xv, x + i, sizeof xv);
        memcpy(&yv, y + i, sizeof yv);
        xv += yv;
        memcpy(x + i, &xv, sizeof xv);
    }
    for (; i < e; i++) x[i] += y[i];
}

/* The residual add of n token rows, over the pool (it was one scalar
 * loop on one thread: 2.7% of SmolLM2's prefill at 1 thread). */
static void add_rows(fwd_ctx *c, float *x, const float *y, int n) {
    add_arg a = {x, y};
    fwd__for_rows(c, n, add_row, &a);
}

/* gpt-oss: the output projection's bias on token t's row of c->tmp. */
static void out_bias_row(fwd_ctx *c, void *arg, int t) {
    const model_layer *L = arg;
    add_bias(c->tmp + (size_t)t * c->m->hp.n_embd, &L->bo, c->m->hp.n_embd);
}

/* Attention of layer il over c->xn; its output projection to c->tmp.
 * K/V live in the pool's layer L->kv_layer. */
static void attention(fwd_ctx *c, const fwd_batch *b, const model_layer *L) {
    int n = b->n;
    layer_arg a = {b, L, L->kv_layer};
    const model_tensor *qkv[3] = {&L->wq, &L->wk, &L->wv};
    float *qkv_out[3] = {c->m->hp.attn_gate ? c->qg : c->q, c->k, c->v};
    fwd__matmul_group(c, c->xn, n, qkv, qkv_out, 3);
    if (c->m->hp.attn_gate || L->bq.data || L->bk.data || L->bv.data) fwd__for_rows(c, n, qkv_bias_row, &a);
    head_norms(c, &L->q_norm, c->q, c->m->hp.n_head, n);
    head_norms(c, &L->k_norm, c->k, c->m->hp.n_head_kv, n);
    fwd__for_rows(c, n, qkv_finish_row, &a);
    int segs = attn_segs(c, &a);
    attn_job aj = {c, &a, attn_parts(c, segs), segs, 0};
    pool_run_any(c->threads, attn_worker, &aj);
    if (segs) fwd__for_rows(c, n, attn_fold_row, &a);
    if (c->m->hp.attn_gate) fwd__for_rows(c, n, apply_gate_row, NULL);
    fwd__matmul(c, c->att, n, &L->wo, c->tmp);
    if (L->bo.data) fwd__for_rows(c, n, out_bias_row, (void *)L);
}

static void layer_forward(fwd_ctx *c, const fwd_batch *b, int il) {
    const model_layer *L = &c->m->layers[il];
    int n = b->n;

    norm_rows(c, c->x, c->xn, &L->attn_norm, n);
    if (L->recurrent) dn_layer(c, b, il, c->tmp);
    else attention(c, b, L);
    if (L->post_attn_norm.data) norm_rows(c, c->tmp, c->tmp, &L->post_attn_norm, n);
    add_rows(c, c->x, c->tmp, n);

    norm_rows(c, c->x, c->xn, &L->ffn_norm, n);
    if (c->moe) {
        moe_ffn(c, L, c->xn, n, c->tmp);
    } else {
        fwd__ffn(c, L, c->xn, n, c->tmp);
    }
    if (L->post_ffn_norm.data) norm_rows(c, c->tmp, c->tmp, &L->post_ffn_norm, n);
    add_rows(c, c->x, c->tmp, n);
}

/* ---- batch set-up --------------------------------------------------------- */

static void embed_row(fwd_ctx *c, void *arg, int t) {
    const fwd_batch *b = arg;
    const model_tensor *emb = &c->m->tok_embd;
    const uint8_t *row = (const uint8_t *)emb->data + (size_t)b->tokens[t] * emb->row_bytes;
    float *x = c->x + (size_t)t * c->m->hp.n_embd, scale = c->m->hp.embd_scale;
    quant_dequant_row(emb->type, row, x, emb->cols);
    if (scale != 1.0f)
        for (int i = 0; i < c->m->hp.n_embd; i++) x[i] *= scale;
}

/* Block tables long enough for max_kv positions, per thread; segment
 * states for as many segments. */
static void ensure_scratch(fwd_ctx *c, int max_kv) {
    int nth = pool_size(c->threads), nb = (max_kv + c->kv->block_tokens - 1) / c->kv->block_tokens;
    if (nb > c->blocks_cap) {
        free(c->kb);
        free(c->vb);
        c->blocks_cap = nb + 16;
        c->kb = xmalloc((size_t)nth * c->blocks_cap * sizeof(*c->kb));
        c->vb = xmalloc((size_t)nth * c->blocks_cap * sizeof(*c->vb));
    }
    int segs = (max_kv + ATTN_SEG - 1) / ATTN_SEG;
    if (segs > c->seg_cap) {
        const model_hparams *hp = &c->m->hp;
        free(c->attn_part);
        c->seg_cap = segs + 4;
        c->attn_part = xaligned((size_t)ATTN_SPLIT_TOK * hp->n_head * c->seg_cap * attn_state_floats(hp->head_dim) *
                                sizeof(float));
    }
}

/* Token t continues its sequence from an earlier token of the batch. */
static int follows(const fwd_batch *b, int t) {
    for (int u = t - 1; u >= 0; u--)
        if (b->seqs[u] == b->seqs[t]) return b->pos[u] == b->pos[t] - 1;
    return 0;
}

/* The earlier token of the batch on t's sequence, or -1. */
static int prev_in_batch(const fwd_batch *b, int t) {
    for (int u = t - 1; u >= 0; u--)
        if (b->seqs[u] == b->seqs[t]) return u;
    return -1;
}

int fwd_state_pos_check(int pos, int state_end, int may_restart, strata_err *err) {
    if (pos == state_end || (may_restart && pos == 0)) return 0;
    return strata_errf(err, STRATA_EINVAL,
                       "position %d: this model's recurrent state covers positions [0, %d) and cannot be "
                       "rewound or skipped (only continued, or restarted at 0)", pos, state_end);
}

/* Recurrent layers: a token must continue exactly where its sequence's
 * state ends (position rs_pos), or start the sequence again at 0. The
 * state cannot be rewound to an earlier position (no snapshots yet). */
static int check_recurrent(const fwd_batch *b, int t, strata_err *err) {
    int u = prev_in_batch(b, t), want = u >= 0 ? b->pos[u] + 1 : b->seqs[t]->rs_pos;
    return fwd_state_pos_check(b->pos[t], want, u < 0, err);
}

static int check_batch(fwd_ctx *c, const fwd_batch *b, strata_err *err) {
    if (c->kv->swa_layer && c->kv->n_swa < c->m->hp.n_swa)
        return strata_errf(err, STRATA_EINVAL, "kv pool keeps a window of %d positions, the model needs %d",
                           c->kv->n_swa, c->m->hp.n_swa);
    if (b->n <= 0 || b->n > c->max_batch)
        return strata_errf(err, STRATA_EINVAL, "batch of %d tokens (max %d)", b->n, c->max_batch);
    for (int t = 0; t < b->n; t++) {
        if (b->tokens[t] < 0 || b->tokens[t] >= c->m->hp.n_vocab)
            return strata_errf(err, STRATA_EINVAL, "token id %d out of range (vocab %d)",
                               b->tokens[t], c->m->hp.n_vocab);
        if (b->pos[t] < 0 || (b->pos[t] > b->seqs[t]->n_pos && !follows(b, t)))
            return strata_errf(err, STRATA_EINVAL, "position %d leaves a gap (sequence has %d)",
                               b->pos[t], b->seqs[t]->n_pos);
        if (c->dn && check_recurrent(b, t, err)) return STRATA_EINVAL;
    }
    return 0;
}

/* Recurrent state before the batch: made on a sequence's first use,
 * zeroed when it starts again at position 0. */
static void recurrent_prepare(fwd_ctx *c, const fwd_batch *b) {
    size_t need = dn_state_floats(c->m);
    for (int t = 0; t < b->n; t++) {
        kv_seq *s = b->seqs[t];
        if (prev_in_batch(b, t) >= 0) continue;
        if (!s->rs || s->rs_floats != need) {
            free(s->rs);
            s->rs = xcalloc(need, sizeof(float));
            s->rs_floats = need;
        } else if (b->pos[t] == 0) {
            memset(s->rs, 0, need * sizeof(float));
        }
    }
}

/* ... and after it: the state now covers each sequence's last position. */
static void recurrent_commit(const fwd_batch *b) {
    for (int t = 0; t < b->n; t++) b->seqs[t]->rs_pos = b->pos[t] + 1;
}

/* The end (last position + 1) of t's sequence in the batch. */
static int seq_end_in_batch(const fwd_batch *b, int t) {
    int end = b->pos[t] + 1;
    for (int u = t + 1; u < b->n; u++)
        if (b->seqs[u] == b->seqs[t] && b->pos[u] + 1 > end) end = b->pos[u] + 1;
    return end;
}

/* Reserves blocks for every sequence up to its last position in the batch,
 * once, from its first token (the window its sliding layers read starts
 * there), then marks the positions filled (their K/V is written this
 * call). */
static int reserve_seqs(fwd_ctx *c, const fwd_batch *b, int *max_kv, strata_err *err) {
    *max_kv = 0;
    for (int t = 0; t < b->n; t++) {
        kv_seq *s = b->seqs[t];
        if (prev_in_batch(b, t) >= 0) continue;
        int end = seq_end_in_batch(b, t);
        if (end > *max_kv) *max_kv = end;
        if (b->pos[t] < s->n_pos) kv_seq_truncate(c->kv, s, b->pos[t]);
        int rc = kv_seq_reserve(c->kv, s, end, err);
        if (rc) return rc;
        if (end > s->n_pos) s->n_pos = end;
    }
    return 0;
}

static void output_logits(fwd_ctx *c, const fwd_batch *b, float *logits) {
    int e = c->m->hp.n_embd, n_out = 0;
    for (int t = 0; t < b->n; t++) {
        int want = b->want ? b->want[t] : t == b->n - 1;
        if (!want) continue;
        memmove(c->tmp + (size_t)n_out * e, c->x + (size_t)t * e, (size_t)e * sizeof(float));
        n_out++;
    }
    if (n_out == 0) return;
    norm_rows(c, c->tmp, c->xn, &c->m->output_norm, n_out);
    fwd__matmul(c, c->xn, n_out, &c->m->output, logits);
    float cap = c->m->hp.logit_softcap;
    if (cap > 0)
        for (size_t i = 0; i < (size_t)n_out * c->m->hp.n_vocab; i++) logits[i] = cap * tanhf(logits[i] / cap);
}

/* The pass over b; x: its input rows, or NULL for the tokens' embeddings. */
static int run(fwd_ctx *c, const fwd_batch *b, const float *x, float *logits, strata_err *err) {
    int max_kv, rc = check_batch(c, b, err);
    if (rc) return rc;
    if ((rc = reserve_seqs(c, b, &max_kv, err))) return rc;
    ensure_scratch(c, max_kv);
    if (c->dn) recurrent_prepare(c, b);
    split_runs(c, b);
    if (x) memcpy(c->x, x, (size_t)b->n * c->m->hp.n_embd * sizeof(float));
    else fwd__for_rows(c, b->n, embed_row, (void *)b);
    fwd__for_rows(c, b->n, rope_table_row, (void *)b);
    for (int il = 0; il < c->m->hp.n_layer; il++) layer_forward(c, b, il);
    if (c->dn) recurrent_commit(b);
    if (c->hidden) norm_rows(c, c->x, c->hidden, &c->m->output_norm, b->n);
    output_logits(c, b, logits);
    return 0;
}

int fwd_run(fwd_ctx *c, const fwd_batch *b, float *logits, strata_err *err) { return run(c, b, NULL, logits, err); }

int fwd_run_rows(fwd_ctx *c, const fwd_batch *b, const float *x, float *logits, strata_err *err) {
    return run(c, b, x, logits, err);
}

void fwd_keep_hidden(fwd_ctx *c, int on) {
    if (on && !c->hidden) c->hidden = xaligned((size_t)c->max_batch * c->m->hp.n_embd * sizeof(float));
    if (!on) {
        free(c->hidden);
        c->hidden = NULL;
    }
}

const float *fwd_hidden(const fwd_ctx *c) { return c->hidden; }

void fwd_use_fusion(fwd_ctx *c, int on) { c->ffn_unfused = !on; }

size_t fwd_state_floats(const model *m) { return dn_state_floats(m); }

int fwd_prefill(fwd_ctx *c, kv_seq *s, const int32_t *tokens, int n, float *logits,
                strata_err *err) {
    int32_t *pos = xmalloc((size_t)c->max_batch * sizeof(int32_t));
    kv_seq **seqs = xmalloc((size_t)c->max_batch * sizeof(kv_seq *));
    int rc = 0;
    for (int done = 0; done < n && !rc; ) {
        int chunk = n - done < c->max_batch ? n - done : c->max_batch;
        for (int i = 0; i < chunk; i++) {
            pos[i] = s->n_pos + i;
            seqs[i] = s;
        }
        fwd_batch b = {.n = chunk, .tokens = tokens + done, .seqs = seqs, .pos = pos};
        rc = fwd_run(c, &b, logits, err);
        done += chunk;
    }
    free(pos);
    free(seqs);
    return rc;
}

/* ---- life cycle --------------------------------------------------------- */

/* Interleaved M-RoPE (llama.cpp's IMROPE) for text: pair i belongs to
 * sector i % sum(sections); sectors cycle through the t, h, w sections
 * (sector % 3), each up to 3 x its size, and the rest take the fourth
 * position, which is 0 for text tokens (no rotation). t, h and w are all
 * the token's position, so the rotation is plain NeoX RoPE except on
 * those pairs. */
int fwd_rope_pair_still(const model_hparams *hp, int i) {
    if (hp->arch != ARCH_QWEN35 && hp->arch != ARCH_QWEN35MOE) return 0;
    const int *sec = hp->rope_sections;
    int k = i % (sec[0] + sec[1] + sec[2] + sec[3]);
    return !(k < 3 * sec[k % 3]);
}

static void init_imrope(fwd_ctx *c) {
    int half = c->m->hp.rope_dim / 2;
    c->rope_off = xcalloc((size_t)half, 1);
    for (int i = 0; i < half; i++) c->rope_off[i] = (uint8_t)fwd_rope_pair_still(&c->m->hp, i);
}

static void init_rope(fwd_ctx *c) {
    const model_hparams *hp = &c->m->hp;
    int half = hp->rope_dim / 2;
    c->rope_inv_freq = xmalloc((size_t)half * sizeof(float));
    c->rope_inv_swa = xmalloc((size_t)half * sizeof(float));
    const float *ff = c->m->rope_freqs.data;
    for (int i = 0; i < half; i++) {
        double f = pow((double)hp->rope_base, -2.0 * i / hp->rope_dim);
        c->rope_inv_freq[i] = (float)(ff ? f / ff[i] : f);
        c->rope_inv_swa[i] = (float)pow((double)hp->rope_base_swa, -2.0 * i / hp->rope_dim);
    }
    c->rope_kinds = hp->n_swa > 0 && hp->swa_rope ? 2 : 1; /* gpt-oss's window layers rotate as the others */
    size_t table = (size_t)c->max_batch * c->rope_kinds * half * sizeof(float);
    c->rope_cos = xmalloc(table);
    c->rope_sin = xmalloc(table);
    if (hp->arch == ARCH_QWEN35 || hp->arch == ARCH_QWEN35MOE) init_imrope(c);
}

fwd_ctx *fwd_new(const model *m, kv_pool *kv, pool *threads, int max_batch) {
    const model_hparams *hp = &m->hp;
    fwd_ctx *c = xcalloc(1, sizeof *c);
    c->m = m;
    c->kv = kv;
    c->threads = threads;
    c->max_batch = max_batch;
    size_t n = (size_t)max_batch, nq = (size_t)hp->n_head * hp->head_dim;
    size_t kvd = (size_t)hp->n_head_kv * hp->head_dim, e = hp->n_embd;
    size_t f = hp->n_expert > 0 ? 16 : (size_t)hp->n_ff; /* MoE: the dense gate/up buffers go unused */
    size_t wide = e > nq ? e : nq;
    c->x = xaligned(n * e * sizeof(float));
    c->xn = xaligned(n * wide * sizeof(float));
    c->q = xaligned(n * nq * sizeof(float));
    c->k = xaligned(n * kvd * sizeof(float));
    c->v = xaligned(n * kvd * sizeof(float));
    c->att = xaligned(n * nq * sizeof(float));
    c->gate = xaligned(n * f * sizeof(float));
    c->up = xaligned(n * f * sizeof(float));
    c->tmp = xaligned(n * wide * sizeof(float));
    if (hp->attn_gate) {
        c->qg = xaligned(n * 2 * nq * sizeof(float));
        c->attn_gate = xaligned(n * nq * sizeof(float));
    }
    c->dn = dn_new(m, max_batch);
    c->moe = moe_new(m, max_batch);
    c->ffn_scratch = fwd__ffn_scratch(m, pool_size(threads));
    const char *fz = getenv("STRATA_CPU_FUSE");
    c->ffn_unfused = fz && !strcmp(fz, "0");
    int nth = pool_size(threads), hpg = hp->n_head / hp->n_head_kv;
    c->runs = xmalloc(n * sizeof(*c->runs));
    c->attn_ws_n = (attn_ws_floats(hp->head_dim, ATTN_RUN * hpg) + 15) & ~(size_t)15;
    c->attn_ws = xaligned((size_t)nth * c->attn_ws_n * sizeof(float));
    c->attn_qs = xmalloc((size_t)nth * ATTN_RUN * hpg * sizeof(*c->attn_qs));
    c->attn_stp = xmalloc((size_t)nth * ATTN_RUN * hpg * sizeof(*c->attn_stp));
    init_rope(c);
    return c;
}

void fwd_free(fwd_ctx *c) {
    if (!c) return;
    float *bufs[] = {c->x, c->xn, c->q, c->k, c->v, c->att, c->gate, c->up, c->tmp,
                     c->rope_inv_freq, c->rope_inv_swa, c->rope_cos, c->rope_sin, c->attn_ws, c->qg, c->attn_gate,
                     c->hidden, c->ffn_scratch};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    for (int i = 0; i < MM_MAX; i++) free(c->xq[i]), free(c->xt[i]);
    free(c->runs);
    free(c->attn_qs);
    free(c->attn_stp);
    free(c->attn_part);
    free(c->kb);
    free(c->vb);
    free(c->rope_off);
    dn_free(c->dn);
    moe_free(c->moe);
    free(c);
}
