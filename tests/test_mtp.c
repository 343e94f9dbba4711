/* test_mtp.c - the MTP drafter (model/mtp.h) on the random-weight
 * qwen35 fixture with an MTP block (bad/qwen35-f32-mtp.gguf,
 * tools/testdata_models.py): the block is bound; its forward pass
 * matches the float64 reference (tools/ref_forward.py, mtp_forward);
 * its K/V kept up from the trunk's hidden states (in any chunking, and
 * cut back) gives drafts that are exactly the argmax of the block's own
 * forward pass, chained on its own output state. Acceptance rates mean
 * nothing with random weights; the scheduler tests (test_sched_spec.c)
 * check that drafting never changes the output. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "model/engine.h"
#include "model/mtp.h"
#include "test.h"
#include "test_util.h"

#define MTP_FIXTURE "bad/qwen35-f32-mtp.gguf"

static engine *open_mtp_engine(int max_batch) {
    strata_err err = {0};
    engine_params p = {.model_path = test_data(MTP_FIXTURE), .n_threads = 2, .n_ctx = 1024, .block_tokens = 16,
                       .max_batch = max_batch};
    engine *e = NULL;
    if (engine_open(&e, &p, &err)) test_fail(__FILE__, __LINE__, "engine_open: %s", err.msg);
    return e;
}

static mtp *open_drafter(engine *e, int n_seq, int max_draft) {
    mtp *d = NULL;
    strata_err err = {0};
    if (mtp_new(&d, e->m, e->threads, n_seq, 512, max_draft, e->max_batch, 16, KVQ_F16, &err))
        test_fail(__FILE__, __LINE__, "mtp_new: %s", err.msg);
    return d;
}

static int32_t argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

TEST(mtp_block_is_bound) {
    engine *e = open_mtp_engine(64);
    if (!e) return;
    const model *m = e->m;
    CHECK(m->has_mtp);
    CHECK_EQ_INT(m->hp.n_layer, 4);
    CHECK_EQ_INT(m->hp.n_nextn, 1);
    CHECK(m->mtp.eh_proj.cols == 2 * m->hp.n_embd && m->mtp.eh_proj.rows == m->hp.n_embd);
    CHECK(m->mtp.layer.wq.data && m->mtp.layer.q_norm.data && m->mtp.layer.w_down.data);
    CHECK(m->mtp.head_norm.data && m->mtp.head_norm.data != m->output_norm.data); /* its own shared_head_norm */
    CHECK(m->mtp.head.data == m->output.data && m->mtp.embd.data == m->tok_embd.data); /* the trunk's */
    engine_close(e);
    /* the plain fixture has none, and no drafter can be made for it */
    engine_params p = {.model_path = test_data("models/qwen35-f32.gguf"), .n_threads = 1, .n_ctx = 256,
                       .block_tokens = 16, .max_batch = 16};
    strata_err err = {0};
    if (engine_open(&e, &p, &err)) {
        test_fail(__FILE__, __LINE__, "engine_open: %s", err.msg);
        return;
    }
    CHECK(!e->m->has_mtp);
    mtp *d = NULL;
    CHECK(mtp_new(&d, e->m, e->threads, 1, 256, 4, 16, 16, KVQ_F16, &err) == STRATA_EUNSUPPORTED);
    CHECK(d == NULL && strstr(err.msg, "no MTP block") != NULL);
    engine_close(e);
}

/* The block's logits at every reference position (token q, the trunk's
 * hidden state at q - 1) against the float64 reference. F32 weights, F16
 * K/V: the error is rounding, far below a wrong norm, concatenation order
 * or position (errors of order 1). */
TEST(mtp_forward_matches_reference) {
    ref_logits r;
    char path[512];
    snprintf(path, sizeof path, "%s", test_data("bad/qwen35-f32-mtp.mtp.ref"));
    if (test_read_ref_logits(path, &r)) {
        test_fail(__FILE__, __LINE__, "%s: missing reference (make testdata)", path);
        return;
    }
    engine *e = open_mtp_engine(64);
    if (!e) return;
    mtp *d = open_drafter(e, 1, 4);
    int V = e->m->hp.n_vocab, n = r.n_tok;
    CHECK_EQ_INT(V, r.n_vocab);
    float *h = test_trunk_hidden(e, r.tokens, n), *ours = xmalloc((size_t)n * V * sizeof(float));
    strata_err err = {0};
    CHECK(mtp_eval(d, r.tokens, h, n, ours, NULL, &err) == 0);
    double maxdiff = 0, maxref = 0;
    int top_agree = 0;
    for (size_t i = 0; i < (size_t)n * V; i++) {
        double dd = fabs((double)ours[i] - r.logits[i]);
        if (dd > maxdiff) maxdiff = dd;
        if (fabs(r.logits[i]) > maxref) maxref = fabs(r.logits[i]);
    }
    for (int q = 0; q < n; q++) top_agree += argmax(ours + (size_t)q * V, V) == argmax(r.logits + (size_t)q * V, V);
    printf("    mtp vs float64 reference: %d positions, max |diff| %.2e (%.2e of the range), top-1 agrees at %d\n", n,
           maxdiff, maxdiff / maxref, top_agree);
    CHECK_MSG(maxdiff / maxref < 0.01, "MTP logits: max error %.5f of the range %.3f", maxdiff / maxref, maxref);
    CHECK_MSG(top_agree == n, "argmax agrees at %d of %d positions", top_agree, n);
    free(h), free(ours), free(r.tokens), free(r.logits);
    mtp_free(d);
    engine_close(e);
}

/* A sequence's block K/V kept up from trunk passes in chunks of 7 (the
 * hidden state across a chunk's edge comes from the sequence), drafts of
 * 3 after it: each is the argmax of the block's own pass over the same
 * inputs, bit for bit the same logits (batch invariance), the second and
 * third fed the block's own output state. Then a cut back inside the
 * last batch (as verification cuts refused drafts): the draft from there
 * is the forward pass's again; a cut before it leaves no state, no draft. */
TEST(mtp_draft_is_argmax_of_forward) {
    engine *e = open_mtp_engine(64);
    if (!e) return;
    mtp *d = open_drafter(e, 1, 3);
    int V = e->m->hp.n_vocab, E = e->m->hp.n_embd, n = 30;
    int32_t toks[40];
    for (int t = 0; t < 40; t++) toks[t] = 3 + (t * 53 + 7) % 390;
    /* the trunk and the block, chunk by chunk */
    kv_seq s;
    kv_seq_init(&s);
    mtp_seq ms;
    mtp_seq_init(d, &ms);
    for (int i = 0; i < E; i++) ms.h[i] = 1.0f; /* no state yet: position 0 must read zeros, not this */
    fwd_keep_hidden(e->fwd, 1);
    strata_err err = {0};
    kv_seq *seqs[8];
    mtp_seq *mseqs[8];
    int32_t pos[8];
    for (int done = 0; done < n;) {
        int c = n - done < 7 ? n - done : 7;
        for (int i = 0; i < c; i++) seqs[i] = &s, mseqs[i] = &ms, pos[i] = done + i;
        fwd_batch b = {.n = c, .tokens = toks + done, .seqs = seqs, .pos = pos};
        float *lg = xmalloc((size_t)V * sizeof(float));
        CHECK(fwd_run(e->fwd, &b, lg, &err) == 0);
        free(lg);
        CHECK(mtp_feed(d, &b, mseqs, fwd_hidden(e->fwd), &err) == 0);
        done += c;
    }
    fwd_keep_hidden(e->fwd, 0);
    int32_t out[3];
    float *dl = xmalloc((size_t)3 * V * sizeof(float));
    CHECK_EQ_INT(mtp_draft(d, &ms, toks[n], n, 3, out, dl, &err), 3);
    /* the block's own pass: tokens[0..n] then the drafts, each row with
     * the trunk's hidden state before it, then the block's own */
    float *h = test_trunk_hidden(e, toks, n);
    int32_t seq[40];
    memcpy(seq, toks, (size_t)(n + 1) * sizeof(int32_t));
    float *hh = xmalloc((size_t)(n + 3) * E * sizeof(float)), *hm = xmalloc((size_t)(n + 3) * E * sizeof(float));
    float *lg = xmalloc((size_t)(n + 3) * V * sizeof(float));
    memcpy(hh, h, (size_t)n * E * sizeof(float));
    for (int j = 0; j < 3; j++) {
        CHECK(mtp_eval(d, seq, hh, n + 1 + j, lg, hm, &err) == 0);
        const float *row = lg + (size_t)(n + j) * V;
        CHECK_MSG(memcmp(row, dl + (size_t)j * V, (size_t)V * sizeof(float)) == 0, "draft %d: other logits", j);
        CHECK_EQ_INT(out[j], argmax(row, V));
        seq[n + 1 + j] = out[j];
        memcpy(hh + (size_t)(n + j) * E, hm + (size_t)(n + j) * E, (size_t)E * sizeof(float));
    }
    /* cut back to 29 (inside the last chunk, [28, 30)): the next draft
     * after token 29 uses the trunk's state at 28 */
    mtp_seq_cut(d, &ms, 29);
    CHECK_EQ_INT(ms.h_pos, 28);
    CHECK_EQ_INT(mtp_draft(d, &ms, toks[29], 29, 1, out, dl, &err), 1);
    CHECK(mtp_eval(d, toks, h, 30, lg, NULL, &err) == 0);
    CHECK(memcmp(lg + (size_t)29 * V, dl, (size_t)V * sizeof(float)) == 0);
    /* a cut before the kept rows leaves no state: no draft */
    mtp_seq_cut(d, &ms, 10);
    CHECK_EQ_INT(mtp_draft(d, &ms, toks[10], 10, 1, out, NULL, &err), 0);
    mtp_seq_release(d, &ms);
    kv_seq_release(&e->kv, &s);
    free(dl), free(h), free(hh), free(hm), free(lg);
    mtp_free(d);
    engine_close(e);
}

/* After a prefix-cache hit the block's sequence starts where the trunk
 * resumes: fed from position 20 on, position 20 - base is its 0. */
TEST(mtp_resumed_sequence_starts_at_its_first_position) {
    engine *e = open_mtp_engine(64);
    if (!e) return;
    mtp *d = open_drafter(e, 1, 2);
    int V = e->m->hp.n_vocab;
    int32_t toks[32];
    for (int t = 0; t < 32; t++) toks[t] = 5 + (t * 29) % 380;
    kv_seq s;
    kv_seq_init(&s);
    strata_err err = {0};
    float *lg = xmalloc((size_t)V * sizeof(float));
    CHECK(fwd_prefill(e->fwd, &s, toks, 20, lg, &err) == 0); /* "the cached prefix" */
    mtp_seq ms;
    mtp_seq_init(d, &ms);
    fwd_keep_hidden(e->fwd, 1);
    kv_seq *seqs[8];
    mtp_seq *mseqs[8];
    int32_t pos[8];
    for (int i = 0; i < 8; i++) seqs[i] = &s, mseqs[i] = &ms, pos[i] = 20 + i;
    fwd_batch b = {.n = 8, .tokens = toks + 20, .seqs = seqs, .pos = pos};
    CHECK(fwd_run(e->fwd, &b, lg, &err) == 0);
    CHECK(mtp_feed(d, &b, mseqs, fwd_hidden(e->fwd), &err) == 0);
    fwd_keep_hidden(e->fwd, 0);
    CHECK_EQ_INT(ms.base, 20);
    CHECK_EQ_INT(ms.kv.n_pos, 8);
    int32_t out[2];
    CHECK_EQ_INT(mtp_draft(d, &ms, toks[28], 28, 2, out, NULL, &err), 2);
    CHECK(out[0] >= 0 && out[0] < V && out[1] >= 0 && out[1] < V);
    mtp_seq_release(d, &ms);
    kv_seq_release(&e->kv, &s);
    free(lg);
    mtp_free(d);
    engine_close(e);
}
