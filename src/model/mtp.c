/* mtp.c - the multi-token-prediction drafter (see mtp.h).
 *
 * The block runs through the ordinary forward pass (forward.c) over a
 * one-layer view of the model: its attention block as the only layer
 * (kv_layer 0 of a pool of its own), its head norm and head as the
 * output. Only its input differs: fwd_run_rows takes the rows
 * eh_proj([enorm(embed(token)) | hnorm(h)]) built here. So the block
 * has the trunk's kernels, paging and batch invariance, and no second
 * copy of the attention code. */
#include "model/mtp.h"

#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "model/forward_int.h"

struct mtp {
    const model *m;
    model view;         /* the block as a one-layer model */
    model_layer layer;  /* its attention block, kv_layer 0 */
    kv_pool kv;
    fwd_ctx *fwd;
    int max_batch, max_rows, e;
    float *in2;         /* [max_batch][2 e]: enorm(embed) | hnorm(h) */
    float *x;           /* [max_batch][e]: eh_proj of in2, the block's input rows */
    const float **hp;   /* [max_batch]: each row's h (zeros where none) */
    float *zeros, *chain_h, *logits;
    int32_t *pos;
    kv_seq **seqs;
    int8_t *want;
};

/* ---- input rows ------------------------------------------------------------ */

typedef struct {
    mtp *d;
    const int32_t *tokens;
} rows_arg;

static void input_row(fwd_ctx *c, void *arg, int t) {
    const rows_arg *a = arg;
    const mtp *d = a->d;
    const model_mtp *x = &d->m->mtp;
    int e = d->e;
    float *dst = d->in2 + (size_t)t * 2 * e;
    const uint8_t *row = (const uint8_t *)x->embd.data + (size_t)a->tokens[t] * x->embd.row_bytes;
    quant_dequant_row(x->embd.type, row, dst, e);
    fwd__rmsnorm(dst, dst, x->enorm.data, e, d->m->hp.rms_eps);
    fwd__rmsnorm(dst + e, d->hp[t], x->hnorm.data, e, d->m->hp.rms_eps);
    (void)c;
}

/* d->x = the block's input rows for tokens[0, n) with d->hp[0, n). */
static void build_rows(mtp *d, const int32_t *tokens, int n) {
    rows_arg a = {d, tokens};
    fwd__for_rows(d->fwd, n, input_row, &a);
    fwd__matmul(d->fwd, d->in2, n, &d->m->mtp.eh_proj, d->x);
}

/* ---- sequences --------------------------------------------------------------- */

void mtp_seq_init(mtp *d, mtp_seq *s) {
    memset(s, 0, sizeof *s);
    kv_seq_init(&s->kv);
    s->base = s->h_pos = -1;
    s->h = xmalloc((size_t)d->e * sizeof(float));
    s->rows = xmalloc((size_t)d->max_rows * d->e * sizeof(float));
}

void mtp_seq_reset(mtp *d, mtp_seq *s) {
    kv_seq_release(&d->kv, &s->kv);
    kv_seq_init(&s->kv);
    s->base = s->h_pos = -1;
    s->n_rows = 0;
}

void mtp_seq_release(mtp *d, mtp_seq *s) {
    if (!s->h) return;
    kv_seq_release(&d->kv, &s->kv);
    free(s->h);
    free(s->rows);
    memset(s, 0, sizeof *s);
}

/* s holds the trunk's hidden state at position p (h_pos -1: none, not
 * the state "before position 0", which is zeros). */
static int has_h(const mtp_seq *s, int p) { return s->h_pos >= 0 && s->h_pos == p; }

/* The earlier batch token of t's sequence, or -1. */
static int prev_of(mtp_seq *const *seqs, int t) {
    for (int u = t - 1; u >= 0; u--)
        if (seqs[u] == seqs[t]) return u;
    return -1;
}

static int is_last_of(mtp_seq *const *seqs, int n, int t) {
    for (int u = t + 1; u < n; u++)
        if (seqs[u] == seqs[t]) return 0;
    return 1;
}

/* Where the block's sequence goes on from: its first token in the batch
 * at trunk position q. An empty sequence, or one q does not continue
 * (gone back before its start, or past its end: a restart, a resume
 * after a cache hit), starts again at q. */
static void place(mtp *d, mtp_seq *s, int q) {
    if (s->base >= 0 && q >= s->base && q - s->base <= s->kv.n_pos) return;
    mtp_seq_reset(d, s);
    s->base = q;
}

/* The trunk's hidden rows of s's last tokens in the batch (last at t),
 * kept for a cut inside the batch; h becomes the last one. */
static void keep_rows(mtp *d, const fwd_batch *b, mtp_seq *const *seqs, const float *hidden, int t) {
    mtp_seq *s = seqs[t];
    size_t e = (size_t)d->e;
    int idx[64], n = 0; /* max_rows <= 64 (mtp_new) */
    for (int u = t; u >= 0 && n < d->max_rows; u--)
        if (seqs[u] == s) idx[n++] = u;
    s->n_rows = n;
    s->rows_pos0 = b->pos[t] - n + 1;
    for (int i = 0; i < n; i++) memcpy(s->rows + (size_t)(n - 1 - i) * e, hidden + idx[i] * e, e * sizeof(float));
    memcpy(s->h, hidden + (size_t)t * e, e * sizeof(float));
    s->h_pos = b->pos[t];
}

int mtp_feed(mtp *d, const fwd_batch *b, mtp_seq *const *seqs, const float *hidden, strata_err *err) {
    size_t e = (size_t)d->e;
    for (int t = 0; t < b->n; t++) {
        mtp_seq *s = seqs[t];
        int q = b->pos[t], u = prev_of(seqs, t);
        if (u < 0) place(d, s, q);
        if (u >= 0 && b->pos[u] == q - 1) d->hp[t] = hidden + (size_t)u * e;
        else d->hp[t] = u < 0 && has_h(s, q - 1) ? s->h : d->zeros;
        d->pos[t] = q - s->base;
        d->seqs[t] = &s->kv;
        d->want[t] = 0;
    }
    build_rows(d, b->tokens, b->n);
    fwd_batch mb = {.n = b->n, .tokens = b->tokens, .seqs = d->seqs, .pos = d->pos, .want = d->want};
    int rc = fwd_run_rows(d->fwd, &mb, d->x, NULL, err);
    if (rc) {
        for (int t = 0; t < b->n; t++) mtp_seq_reset(d, seqs[t]);
        return rc;
    }
    for (int t = 0; t < b->n; t++)
        if (is_last_of(seqs, b->n, t)) keep_rows(d, b, seqs, hidden, t);
    return 0;
}

void mtp_seq_cut(mtp *d, mtp_seq *s, int n) {
    if (s->base < 0) return;
    if (n <= s->base) {
        mtp_seq_reset(d, s);
        return;
    }
    if (n - s->base < s->kv.n_pos) kv_seq_truncate(&d->kv, &s->kv, n - s->base);
    int r = n - 1 - s->rows_pos0;
    if (r >= 0 && r < s->n_rows) {
        memcpy(s->h, s->rows + (size_t)r * d->e, (size_t)d->e * sizeof(float));
        s->h_pos = n - 1;
    } else if (!has_h(s, n - 1)) {
        s->h_pos = -1;
    }
}

/* ---- drafting ------------------------------------------------------------------ */

static int32_t argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* One token through the block at the sequence's position p (trunk
 * position minus base) with input state h; its logits to d->logits, its
 * normed output state to d->chain_h. */
static int step_one(mtp *d, mtp_seq *s, int32_t tok, const float *h, int p, strata_err *err) {
    d->hp[0] = h;
    build_rows(d, &tok, 1);
    kv_seq *ks = &s->kv;
    int8_t want = 1;
    fwd_batch b = {.n = 1, .tokens = &tok, .seqs = &ks, .pos = &p, .want = &want};
    int rc = fwd_run_rows(d->fwd, &b, d->x, d->logits, err);
    if (rc) return rc;
    memcpy(d->chain_h, fwd_hidden(d->fwd), (size_t)d->e * sizeof(float));
    return 0;
}

int mtp_draft(mtp *d, mtp_seq *s, int32_t last, int pos, int k, int32_t *out, float *logits, strata_err *err) {
    if (s->base < 0 || !has_h(s, pos - 1) || s->kv.n_pos < pos - s->base || k <= 0) return 0;
    int V = d->m->hp.n_vocab;
    int32_t tok = last;
    const float *h = s->h;
    for (int j = 0; j < k; j++) {
        if (step_one(d, s, tok, h, pos - s->base + j, err)) return j;
        out[j] = tok = argmax(d->logits, V);
        if (logits) memcpy(logits + (size_t)j * V, d->logits, (size_t)V * sizeof(float));
        h = d->chain_h;
    }
    return k;
}

int mtp_eval(mtp *d, const int32_t *tokens, const float *hidden, int n, float *logits, float *h_out,
             strata_err *err) {
    mtp_seq s;
    mtp_seq_init(d, &s);
    s.base = 0;
    size_t e = (size_t)d->e, V = (size_t)d->m->hp.n_vocab;
    int rc = 0;
    for (int done = 0; done < n && !rc; ) {
        int chunk = n - done < d->max_batch ? n - done : d->max_batch;
        for (int i = 0; i < chunk; i++) {
            int q = done + i;
            d->hp[i] = q > 0 ? hidden + (size_t)(q - 1) * e : d->zeros;
            d->pos[i] = q;
            d->seqs[i] = &s.kv;
            d->want[i] = 1;
        }
        build_rows(d, tokens + done, chunk);
        fwd_batch b = {.n = chunk, .tokens = tokens + done, .seqs = d->seqs, .pos = d->pos, .want = d->want};
        rc = fwd_run_rows(d->fwd, &b, d->x, logits + (size_t)done * V, err);
        if (!rc && h_out) memcpy(h_out + (size_t)done * e, fwd_hidden(d->fwd), (size_t)chunk * e * sizeof(float));
        done += chunk;
    }
    mtp_seq_release(d, &s);
    return rc;
}

/* ---- life cycle -------------------------------------------------------------- */

/* The block as a model of one attention layer, its head as the output. */
static void make_view(mtp *d, const model *m) {
    d->view = *m;
    d->layer = m->mtp.layer;
    d->layer.recurrent = 0, d->layer.kv_layer = 0, d->layer.rec_layer = -1, d->layer.swa = 0;
    d->view.layers = &d->layer;
    d->view.hp.n_layer = d->view.hp.n_kv_layer = 1;
    d->view.hp.n_rec_layer = d->view.hp.n_expert = d->view.hp.n_swa = 0;
    d->view.tok_embd = m->mtp.embd;
    d->view.output = m->mtp.head;
    d->view.output_norm = m->mtp.head_norm;
    d->view.has_mtp = 0;
}

/* Blocks of the block's K/V one sequence of ctx positions holds: its
 * context and drafts, and one more (copy-on-write headroom, as the
 * trunk's pool). */
static int seq_blocks(int ctx, int max_draft, int B) { return (ctx + max_draft + B - 1) / B + 1; }

static int kv_dim_of(const model_hparams *hp) { return hp->n_head_kv * hp->head_dim; }

mtp_cost mtp_seq_cost(const model *m, int max_draft, int block_tokens, kvq_type kv_type) {
    size_t block = kv_layer_block_bytes(kv_type, kv_dim_of(&m->hp), block_tokens);
    size_t rows = (size_t)(max_draft + 2) * (size_t)m->hp.n_embd * sizeof(float); /* mtp_seq: h and rows */
    return (mtp_cost){.token_bytes = block / (size_t)block_tokens,
                      .seq_bytes = (size_t)seq_blocks(0, max_draft, block_tokens) * block + rows};
}

int mtp_new(mtp **out, const model *m, pool *threads, int n_seq, int ctx_per_seq, int max_draft, int max_batch,
            int block_tokens, kvq_type kv_type, strata_err *err) {
    *out = NULL;
    if (!m->has_mtp) return strata_errf(err, STRATA_EUNSUPPORTED, "%s: no MTP block to draft with", m->gguf->path);
    if (max_draft < 0 || max_draft > 63 || n_seq <= 0 || max_batch <= 0)
        return strata_errf(err, STRATA_EINVAL, "mtp: %d sequences, %d drafts, batch %d", n_seq, max_draft, max_batch);
    mtp *d = xcalloc(1, sizeof *d);
    d->m = m;
    d->e = m->hp.n_embd;
    d->max_batch = max_batch;
    d->max_rows = max_draft + 1;
    make_view(d, m);
    const model_hparams *hp = &m->hp;
    int B = block_tokens, per_seq = seq_blocks(ctx_per_seq, max_draft, B);
    kv_pool_opts o = {.n_layer = 1, .kv_dim = kv_dim_of(hp), .block_tokens = B,
                      .n_blocks = n_seq * per_seq, .type = kv_type, .head_dim = hp->head_dim};
    int rc = kv_pool_init_opts(&d->kv, &o, err);
    if (rc) {
        free(d);
        return rc;
    }
    d->fwd = fwd_new(&d->view, &d->kv, threads, max_batch);
    fwd_keep_hidden(d->fwd, 1);
    size_t n = (size_t)max_batch, e = (size_t)d->e;
    d->in2 = xaligned(n * 2 * e * sizeof(float));
    d->x = xaligned(n * e * sizeof(float));
    d->hp = xmalloc(n * sizeof(*d->hp));
    d->zeros = xcalloc(e, sizeof(float));
    d->chain_h = xmalloc(e * sizeof(float));
    d->logits = xmalloc((size_t)hp->n_vocab * sizeof(float));
    d->pos = xmalloc(n * sizeof(int32_t));
    d->seqs = xmalloc(n * sizeof(kv_seq *));
    d->want = xmalloc(n);
    *out = d;
    return 0;
}

void mtp_free(mtp *d) {
    if (!d) return;
    fwd_free(d->fwd);
    kv_pool_destroy(&d->kv);
    free(d->in2), free(d->x), free(d->hp), free(d->zeros), free(d->chain_h), free(d->logits);
    free(d->pos), free(d->seqs), free(d->want);
    free(d);
}

size_t mtp_kv_bytes(const mtp *d) { return (size_t)d->kv.n_blocks * d->kv.block_bytes; }
