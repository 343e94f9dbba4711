/* bench_mtp.c - `strata bench-mtp`: what qwen35's MTP drafter
 * (model/mtp.h) costs per decode step, beside the step itself.
 *
 * One sequence: d depth tokens prefilled (untimed; the block's K/V fed
 * from them as the server feeds it), then n decode steps, each timed in
 * three parts: the trunk's forward pass of one token (hidden states
 * kept), the block kept up with it (mtp_feed: its K/V of that position),
 * and a draft of k tokens (mtp_draft: k passes of the block and the
 * output head). The server feeds every step and drafts only where it
 * drafts (back-off after refusals; lookup first under auto), so feed is
 * the floor and feed + draft the most a step costs. Acceptance is not
 * measured: on random-weight models it means nothing. Parts alternate
 * within each step, so the machine's load hits them alike. */
#include <stdio.h>
#include <stdlib.h>

#include "base/clock.h"
#include "base/mem.h"
#include "cli/args.h"
#include "cli/cli.h"
#include "model/engine.h"
#include "model/mtp.h"

typedef struct bm_opts {
    const char *model;
    int depth, n_gen, k, threads, reps, json, help;
} bm_opts;

typedef struct bm_times {
    double trunk, feed, draft; /* ms, summed over steps */
    int steps;
    double pre_trunk, pre_feed; /* the depth's prefill, ms, summed over runs */
    int runs;
} bm_times;

/* One token of s at position pos through the trunk and the block. */
static int bm_step(engine *e, mtp *d, kv_seq *s, mtp_seq *ms, int32_t tok, int32_t next, int k, float *logits,
                   bm_times *t, strata_err *err) {
    int32_t pos = s->n_pos, out[64];
    kv_seq *seqs[1] = {s};
    mtp_seq *mseqs[1] = {ms};
    fwd_batch b = {.n = 1, .tokens = &tok, .seqs = seqs, .pos = &pos};
    double t0 = clock_ms();
    int rc = fwd_run(e->fwd, &b, logits, err);
    double t1 = clock_ms();
    if (!rc) rc = mtp_feed(d, &b, mseqs, fwd_hidden(e->fwd), err);
    double t2 = clock_ms();
    if (!rc && k > 0 && mtp_draft(d, ms, next, pos + 1, k, out, NULL, err) != k)
        rc = err->code ? err->code : strata_errf(err, STRATA_EINVAL, "the block drafted nothing at %d", pos + 1);
    double t3 = clock_ms();
    t->trunk += t1 - t0, t->feed += t2 - t1, t->draft += t3 - t2;
    t->steps++;
    return rc;
}

static int bm_run(const bm_opts *o, engine *e, mtp *d, bm_times *t, strata_err *err) {
    int total = o->depth + o->n_gen + 1, rc = 0;
    int32_t *toks = xmalloc((size_t)total * sizeof(int32_t));
    uint32_t x = 12345;
    for (int i = 0; i < total; i++) {
        x = x * 1664525u + 1013904223u;
        toks[i] = (int32_t)((x >> 8) % (uint32_t)e->m->hp.n_vocab);
    }
    float *logits = xmalloc((size_t)e->m->hp.n_vocab * sizeof(float));
    for (int r = 0; r <= o->reps && !rc; r++) { /* run 0 warms up */
        kv_seq s;
        mtp_seq ms;
        kv_seq_init(&s);
        mtp_seq_init(d, &ms);
        bm_times warm = {0}, *tt = r ? t : &warm;
        for (int i = 0; i < o->depth && !rc; i += e->max_batch) { /* the depth, untimed, fed as the server feeds it */
            int n = o->depth - i < e->max_batch ? o->depth - i : e->max_batch;
            kv_seq *seqs[512];
            mtp_seq *mseqs[512];
            int32_t pos[512];
            for (int j = 0; j < n; j++) seqs[j] = &s, mseqs[j] = &ms, pos[j] = i + j;
            fwd_batch b = {.n = n, .tokens = toks + i, .seqs = seqs, .pos = pos};
            double t0 = clock_ms();
            rc = fwd_run(e->fwd, &b, logits, err);
            double t1 = clock_ms();
            if (!rc) rc = mtp_feed(d, &b, mseqs, fwd_hidden(e->fwd), err);
            tt->pre_trunk += t1 - t0, tt->pre_feed += clock_ms() - t1;
        }
        tt->runs++;
        for (int i = 0; i < o->n_gen && !rc; i++)
            rc = bm_step(e, d, &s, &ms, toks[o->depth + i], toks[o->depth + i + 1], o->k, logits, tt, err);
        mtp_seq_release(d, &ms);
        kv_seq_release(&e->kv, &s);
    }
    free(logits);
    free(toks);
    return rc;
}

static void bm_report(const bm_opts *o, const engine *e, const bm_times *t) {
    double n = t->steps ? t->steps : 1, tr = t->trunk / n, fe = t->feed / n, dr = t->draft / n;
    double runs = t->runs ? t->runs : 1, pt = t->pre_trunk / runs, pf = t->pre_feed / runs;
    if (o->json) {
        printf("{\"model\":\"%s\",\"threads\":%d,\"depth\":%d,\"steps\":%d,\"k\":%d,\"trunk_ms\":%.3f,\"feed_ms\":%.3f,"
               "\"draft_ms\":%.3f,\"prefill_trunk_ms\":%.3f,\"prefill_feed_ms\":%.3f}\n", o->model,
               pool_size(e->threads), o->depth, t->steps, o->k, tr, fe, dr, pt, pf);
        return;
    }
    printf("model: %s, threads: %d, depth %d, %d steps, drafts of %d\n", o->model, pool_size(e->threads), o->depth,
           t->steps, o->k);
    if (o->depth)
        printf("prefill of the depth: trunk %.1f ms; MTP feed %.1f ms (%.1f%%)\n", pt, pf, 100 * pf / pt);
    printf("per step: trunk %.2f ms; MTP feed %.3f ms (%.1f%%), draft of %d %.2f ms (%.1f%%)\n", tr, fe,
           100 * fe / tr, o->k, dr, 100 * dr / tr);
}

static int bm_main(const bm_opts *o, strata_err *err) {
    engine_params ep = {.model_path = o->model, .n_threads = o->threads, .n_ctx = o->depth + o->n_gen + 128,
                        .max_batch = 512};
    engine *e;
    mtp *d = NULL;
    int rc = engine_open(&e, &ep, err);
    if (rc) return rc;
    rc = mtp_new(&d, e->m, e->threads, 1, o->depth + o->n_gen + 2, o->k, e->max_batch, e->kv.block_tokens,
                 e->kv.type, err);
    if (!rc) {
        fwd_keep_hidden(e->fwd, 1);
        bm_times t = {0};
        rc = bm_run(o, e, d, &t, err);
        if (!rc) bm_report(o, e, &t);
    }
    mtp_free(d);
    engine_close(e);
    return rc;
}

int cli_bench_mtp(int argc, char **argv) {
    bm_opts o = {.n_gen = 64, .k = 1, .reps = 3};
    const arg_spec specs[] = {
        ARG_SPEC_MODEL(&o.model),
        {"--n-gen", "-n", ARG_INT, &o.n_gen, 1, 1 << 20, "decode steps per run (64)"},
        {"--depth", "-d", ARG_INT, &o.depth, 0, 1 << 20, "tokens prefilled untimed first (0)"},
        {"--draft", "-k", ARG_INT, &o.k, 0, 63, "tokens drafted per step (1; 0: feed only)"},
        ARG_SPEC_THREADS(&o.threads),
        {"--reps", "-r", ARG_INT, &o.reps, 1, 1000, "measured runs after one warm-up (3)"},
        {"--json", NULL, ARG_FLAG, &o.json, 0, -1, "print one JSON object"},
        ARG_SPEC_HELP(&o.help),
    };
    int n_specs = (int)(sizeof specs / sizeof specs[0]);
    int rc_args = args_cli("bench-mtp", "-m MODEL [options] (a qwen35 file with an MTP block)", specs, n_specs, argc,
                           argv, &o.help);
    if (rc_args >= 0) return rc_args;
    if (!o.model) {
        fprintf(stderr, "strata bench-mtp: -m MODEL is required\n");
        return 2;
    }
    strata_err err = {0};
    if (bm_main(&o, &err)) {
        fprintf(stderr, "strata bench-mtp: %s\n", err.msg);
        return 1;
    }
    return 0;
}
