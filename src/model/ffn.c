/* ffn.c - the dense gated feed-forward of one layer: gate and up matmuls,
 * the gated activation (SwiGLU: llama family, qwen35; GELU, tanh form:
 * gemma3), the down matmul. Mixture-of-experts layers are moe.c.
 *
 * Fused (the default): a work item is a range of rows of both gate and
 * up, [r0, r1), for a range of tokens, [t0, t1). One thread computes the
 * gate and up rows into a scratch of its own, applies the activation to
 * that (token, row) rectangle while both are still in its L2, and
 * converts the result straight into the down projection's activation
 * rows (quant_act_part: a row's parts on block edges), which the down
 * matmul reads. Separately, the matmuls wrote 8 MiB (Gemma 3, 512
 * tokens, each layer) that the activation read back, and the conversion
 * read its 4 MiB of output back again; now only the converted rows
 * (about a quarter of those 4 MiB) leave the cache.
 *
 * The bits are the unfused pass's: quant_gemm gives a (row, token) pair
 * the same bits whatever rows and tokens share its call (backend/quant.h),
 * the activations are element-wise with no dependence on where a range
 * starts or ends (act.h: runs of 16 and a tail of the same operations;
 * vexp.h: vectors and a tail on libm's expf, the same bits by the level
 * check), and a converted block depends on its own values only.
 * `fwd_use_fusion(c, 0)` (or STRATA_CPU_FUSE=0) runs the
 * separate passes; tests/test_forward.c compares the two.
 * Does not: MoE (moe.c), the CUDA pass (forward_cuda.c). */
#include <stdatomic.h>
#include <stdlib.h>

#include "backend/act.h"
#include "backend/vexp.h"
#include "base/mem.h"
#include "model/forward_int.h"

/* A work item's rectangle: its gate and up outputs (4 x rows x tokens
 * bytes each, 256 KiB at most) stay in L2 until converted. Fewer tokens an item mean more weight decoding (each call
 * prepares its rows again), fewer rows more activation preparing (each
 * call prepares its tokens again). pp512 per CPU-second, 1 thread, of
 * 128x512, 256x128, 256x256, 256x512, 512x256, 512x512 and 1024x512
 * (rows x tokens): 256 x 128 and 256 x 256 best on both models, within
 * the noise of each other; 1024 x 512 (the whole batch, today's chunk)
 * 3-7% below. */
#define FFN_ROWS 256
#define FFN_TOKS 256
_Static_assert(MM_MAX >= 3, "ffn_fused converts the down projection's input into c->xq[2]");
_Static_assert(FFN_TOKS % QUANT_XTILE == 0, "an item's tokens start on a tile of fwd__xtiles");

static void swiglu(float *g, const float *u, size_t n) {
    /* libm's expf's bits, kept (vectorised: backend/vexp.h): act_expf
     * moved SmolLM2's oracle RMS on one prompt from 0.25 to 0.45 (rounding
     * chaos, not error), and these models' bits stay as every earlier cache
     * and test has them. */
    vexp_silu_mul(g, g, u, n);
}

/* GELU, tanh form (gemma's gelu_pytorch_tanh), backend/act.h. llama.cpp
 * looks it up in an F16 table instead; the difference is within the
 * oracle tolerance. */
static void geglu(float *g, const float *u, size_t n) { act_gelu_tanh_mul(g, u, n); }

typedef void (*ffn_act_fn)(float *g, const float *u, size_t n);

static ffn_act_fn ffn_act(const fwd_ctx *c) { return c->m->hp.ffn_gelu ? geglu : swiglu; }

/* ---- unfused: the separate passes ------------------------------------- */

static void act_row(fwd_ctx *c, void *arg, int t) {
    size_t f = (size_t)c->m->hp.n_ff;
    ffn_act(c)(c->gate + t * f, c->up + t * f, f);
}

static void ffn_unfused(fwd_ctx *c, const model_layer *L, const float *xn, int n) {
    const model_tensor *gu[2] = {&L->w_gate, &L->w_up};
    float *gu_out[2] = {c->gate, c->up};
    fwd__matmul_group(c, xn, n, gu, gu_out, 2);
    fwd__for_rows(c, n, act_row, NULL);
}

/* ---- fused: gate, up, the activation and its conversion per item ------ */

typedef struct {
    fwd_ctx *c;
    const model_tensor *w[2]; /* gate, up */
    const uint8_t *xq[2], *xt[2]; /* xt: their tiles (fwd__xtiles) or NULL */
    size_t xq_bytes[2];
    ffn_act_fn act;
    qtype down_act;           /* the down projection's activation format */
    uint8_t *xd;              /* its input rows, xd_bytes apart */
    size_t xd_bytes;
    int n, rows, toks, row_items, items;
    atomic_int next;
} ffn_job;

/* Rows [r0, r1) of w for tokens [t0, t0 + nt) into y (token-major, ldy
 * apart): the rows' slice of the weights as a matrix of its own. */
static void ffn_gemm(const ffn_job *j, int i, int r0, int r1, int t0, int nt, float *y, int64_t ldy) {
    const model_tensor *w = j->w[i];
    const uint8_t *rows = (const uint8_t *)w->data + (size_t)r0 * w->row_bytes;
    quant_gemm_xt(w->type, rows, w->row_bytes, w->cols, j->xq[i] + (size_t)t0 * j->xq_bytes[i], j->xq_bytes[i],
                  quant_xtiles_at(w->type, w->cols, j->xt[i], t0), nt, y, ldy, 0, r1 - r0);
}

static void ffn_worker(void *p, int ith, int nth) {
    ffn_job *j = p;
    int f = j->c->m->hp.n_ff;
    float *g = j->c->ffn_scratch + (size_t)ith * 2 * FFN_ROWS * FFN_TOKS, *u = g + FFN_ROWS * FFN_TOKS;
    for (int it; (it = atomic_fetch_add(&j->next, 1)) < j->items;) {
        int r0 = it % j->row_items * j->rows, t0 = it / j->row_items * j->toks;
        int r1 = r0 + j->rows < f ? r0 + j->rows : f, nt = j->n - t0 < j->toks ? j->n - t0 : j->toks, R = r1 - r0;
        ffn_gemm(j, 0, r0, r1, t0, nt, g, R);
        ffn_gemm(j, 1, r0, r1, t0, nt, u, R);
        for (int t = 0; t < nt; t++) {
            float *gt = g + (size_t)t * R;
            j->act(gt, u + (size_t)t * R, (size_t)R);
            quant_act_part(j->down_act, gt, j->xd + (size_t)(t0 + t) * j->xd_bytes, f, r0, r1);
        }
    }
}

/* Rows an item takes: about fwd__chunk_rows' share, at most FFN_ROWS, a
 * whole number of the down projection's activation blocks (a part of a
 * row converts on block edges: quant_act_part). */
static int ffn_rows(const fwd_ctx *c, qtype down_act) {
    int rows = fwd__chunk_rows(c->m->hp.n_ff, pool_size(c->threads)), blk = quant_get(down_act)->blck;
    if (rows > FFN_ROWS) rows = FFN_ROWS;
    return (rows + blk - 1) / blk * blk;
}

/* Gate, up, the activation and its conversion to the down projection's
 * format per item; the down projection reads the converted rows (c->xq's
 * slot 2: gate and up use at most slots 0 and 1). */
static void ffn_fused(fwd_ctx *c, const model_layer *L, const float *xn, int n, float *out) {
    const model_tensor *w[3] = {&L->w_gate, &L->w_up, &L->w_down};
    int f = c->m->hp.n_ff;
    ffn_job j = {.c = c, .w = {w[0], w[1]}, .act = ffn_act(c), .n = n, .toks = FFN_TOKS};
    j.down_act = quant_get(w[2]->type)->act_type;
    j.xd_bytes = quant_act_row_bytes(j.down_act, f);
    fwd__reserve_xq(c, w, 3, n); /* first: growing later would free the converted inputs */
    fwd__quant_inputs(c, xn, n, w, 2, j.xq, j.xq_bytes, j.xt);
    j.xd = c->xq[2];
    j.rows = ffn_rows(c, j.down_act);
    j.row_items = (f + j.rows - 1) / j.rows;
    j.items = j.row_items * ((n + j.toks - 1) / j.toks);
    pool_run_any(c->threads, ffn_worker, &j);
    fwd__matmul_xq(c, j.xd, j.xd_bytes, n, w[2], out);
}

/* Per thread: an item's gate and up rows (FFN_ROWS x FFN_TOKS floats each). */
float *fwd__ffn_scratch(const model *m, int n_threads) {
    if (m->hp.n_expert > 0) return NULL;
    return xaligned((size_t)n_threads * 2 * FFN_ROWS * FFN_TOKS * sizeof(float));
}

void fwd__ffn(fwd_ctx *c, const model_layer *L, const float *xn, int n, float *out) {
    if (!c->ffn_unfused) {
        ffn_fused(c, L, xn, n, out);
        return;
    }
    ffn_unfused(c, L, xn, n);
    fwd__matmul(c, c->gate, n, &L->w_down, out);
}
