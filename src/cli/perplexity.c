/* perplexity.c - `strata perplexity`: how well the model predicts a text,
 * for measuring what a numerics choice costs (--kv-type q8_0 against
 * f16, bench/kv_quality.py). The text is tokenized (no special tokens,
 * BOS first when the vocabulary asks for it) and cut into windows of
 * --ctx tokens; each window is a fresh sequence fed in batches, and every
 * position past the window's first --skip predicts the next token:
 * perplexity = exp(mean negative log-likelihood). --top1 FILE writes
 * each scored position's argmax id (int32, little-endian), so two runs
 * can be compared token for token. Like llama-perplexity, without its
 * half-window scoring rule (here: all but the first --skip positions). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/mem.h"
#include "cli/args.h"
#include "cli/cli.h"
#include "model/engine.h"
#include "text/tokenizer.h"

#define PPL_BATCH 64 /* positions whose logits are held at once */

typedef struct ppl_opts {
    const char *model, *file, *kv_type, *top1;
    int ctx, skip, threads, max_windows, help;
} ppl_opts;

typedef struct ppl_sum {
    double nll;
    long n;
    FILE *top1;
} ppl_sum;

/* Log-probability of `next` under one row of logits; *argmax its top id. */
static double row_logprob(const float *row, int V, int32_t next, int32_t *argmax) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (row[i] > row[best]) best = i;
    double sum = 0;
    for (int i = 0; i < V; i++) sum += exp((double)row[i] - row[best]);
    *argmax = best;
    return (double)row[next] - row[best] - log(sum);
}

/* One window of n tokens: a fresh sequence fed PPL_BATCH tokens at a
 * time; positions from skip on score their next token. */
static int ppl_window(engine *e, const int32_t *toks, int n, int skip, float *logits, ppl_sum *acc, strata_err *err) {
    int V = e->m->hp.n_vocab, rc = 0;
    kv_seq s;
    kv_seq_init(&s);
    kv_seq *seqs[PPL_BATCH];
    int32_t pos[PPL_BATCH];
    int8_t want[PPL_BATCH];
    for (int done = 0; done < n - 1 && !rc; done += PPL_BATCH) {
        int c = n - 1 - done < PPL_BATCH ? n - 1 - done : PPL_BATCH;
        for (int i = 0; i < c; i++) seqs[i] = &s, pos[i] = done + i, want[i] = done + i >= skip;
        fwd_batch b = {.n = c, .tokens = toks + done, .seqs = seqs, .pos = pos, .want = want};
        rc = fwd_run(e->fwd, &b, logits, err);
        for (int i = 0, k = 0; i < c && !rc; i++) {
            if (!want[i]) continue;
            int32_t top;
            acc->nll -= row_logprob(logits + (size_t)k++ * V, V, toks[done + i + 1], &top);
            acc->n++;
            if (acc->top1) fwrite(&top, 4, 1, acc->top1);
        }
    }
    kv_seq_release(&e->kv, &s);
    return rc;
}

static int read_tokens(const ppl_opts *o, engine *e, int32_t **ids, size_t *n, strata_err *err) {
    FILE *f = fopen(o->file, "rb");
    if (!f) return strata_errf(err, STRATA_EIO, "-f %s: cannot open", o->file);
    char *text = NULL;
    size_t len = 0, cap = 0, r;
    do {
        XGROW(text, cap, len + 65536, 131072);
        r = fread(text + len, 1, 65536, f);
        len += r;
    } while (r > 0);
    fclose(f);
    tokenizer *tok = NULL;
    int rc = tok_load(&tok, e->m->gguf, err);
    int32_t *body = NULL;
    size_t nb = 0;
    if (!rc) rc = tok_encode(tok, text, len, 0, &body, &nb, err);
    if (!rc) {
        int bos = tok_add_bos(tok) ? 1 : 0;
        *ids = xmalloc((nb + 1) * sizeof(int32_t));
        if (bos) (*ids)[0] = tok_bos(tok);
        for (size_t i = 0; i < nb; i++) (*ids)[bos + i] = body[i];
        *n = nb + (size_t)bos;
    }
    free(body);
    free(text);
    tok_free(tok);
    return rc;
}

static int ppl_main(const ppl_opts *o, strata_err *err) {
    engine_params ep = {.model_path = o->model, .n_threads = o->threads, .n_ctx = o->ctx + 64, .max_batch = PPL_BATCH};
    engine *e = NULL;
    int rc = kvq_parse(o->kv_type, &ep.kv_type, err);
    if (!rc) rc = engine_open(&e, &ep, err);
    int32_t *ids = NULL;
    size_t n = 0;
    if (!rc) rc = read_tokens(o, e, &ids, &n, err);
    ppl_sum acc = {0};
    if (!rc && o->top1 && !(acc.top1 = fopen(o->top1, "wb")))
        rc = strata_errf(err, STRATA_EIO, "--top1 %s: cannot write", o->top1);
    if (!rc && n < (size_t)o->ctx)
        rc = strata_errf(err, STRATA_EINVAL, "%s: %zu tokens, fewer than one window of --ctx %d", o->file, n, o->ctx);
    float *logits = rc ? NULL : xmalloc((size_t)PPL_BATCH * e->m->hp.n_vocab * sizeof(float));
    int windows = rc ? 0 : (int)(n / (size_t)o->ctx);
    if (o->max_windows > 0 && windows > o->max_windows) windows = o->max_windows;
    for (int w = 0; w < windows && !rc; w++)
        rc = ppl_window(e, ids + (size_t)w * o->ctx, o->ctx, o->skip, logits, &acc, err);
    if (!rc)
        printf("{\"model\":\"%s\",\"kv_type\":\"%s\",\"tokens\":%zu,\"windows\":%d,\"ctx\":%d,\"scored\":%ld,"
               "\"nll\":%.6f,\"ppl\":%.4f}\n",
               o->model, kvq_name(e->kv.type), n, windows, o->ctx, acc.n, acc.nll / acc.n, exp(acc.nll / acc.n));
    if (acc.top1) fclose(acc.top1);
    free(logits);
    free(ids);
    engine_close(e);
    return rc;
}

int cli_perplexity(int argc, char **argv) {
    ppl_opts o = {.ctx = 2048, .skip = 64};
    const arg_spec specs[] = {
        ARG_SPEC_MODEL(&o.model),
        {"--file", "-f", ARG_STR, &o.file, 0, -1, "text to score (required)"},
        {"--ctx", "-c", ARG_INT, &o.ctx, 16, 1 << 20, "tokens per window (2048)"},
        {"--skip", NULL, ARG_INT, &o.skip, 0, 1 << 20, "first positions of each window not scored (64)"},
        {"--windows", NULL, ARG_INT, &o.max_windows, 0, 1 << 20, "at most this many windows (0: all)"},
        {"--kv-type", NULL, ARG_STR, &o.kv_type, 0, -1, KVQ_HELP},
        {"--top1", NULL, ARG_STR, &o.top1, 0, -1, "write each scored position's argmax id (int32) here"},
        ARG_SPEC_THREADS(&o.threads),
        ARG_SPEC_HELP(&o.help),
    };
    int n_specs = (int)(sizeof specs / sizeof specs[0]);
    int rc_args = args_cli("perplexity", "-m MODEL -f TEXT [--ctx N] [--kv-type q8_0] [--top1 FILE]", specs, n_specs, argc, argv, &o.help);
    if (rc_args >= 0) return rc_args;
    strata_err err = {0};
    if (!o.model || !o.file) {
        fprintf(stderr, "strata perplexity: -m MODEL and -f TEXT are required\n");
        return 2;
    }
    if (o.skip >= o.ctx - 1) {
        fprintf(stderr, "strata perplexity: --skip %d leaves nothing of a --ctx %d window to score\n", o.skip, o.ctx);
        return 2;
    }
    if (ppl_main(&o, &err)) {
        fprintf(stderr, "strata perplexity: %s\n", err.msg);
        return 1;
    }
    return 0;
}
