/* run.c - `strata run`: prompt in, streamed text out, speeds on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/mem.h"
#include "cli/args.h"
#include "cli/cli.h"
#include "model/engine.h"
#include "model/sample.h"
#include "text/chat.h"
#include "text/render.h"
#include "text/tokenizer.h"

typedef struct run_opts {
    const char *model, *prompt, *system, *template_file, *device, *kv_type;
    int n_predict, threads, ctx, chat, help, seed, top_k, quiet;
    float temp, top_p, min_p, repeat_penalty;
} run_opts;

typedef struct run_state {
    engine *e;
    tokenizer *tok;
    renderer *render; /* --chat: the same renderer `serve` uses */
    sampler *smp;
    kv_seq seq;
    float *logits;
} run_state;

/* --chat: the system message and the prompt as a conversation, rendered
 * as `serve` renders it (the model's own template, or the built-in one). */
static int chat_tokens(const run_opts *o, run_state *st, int32_t **ids, size_t *n, strata_err *err) {
    render_opts ro = {.template_file = o->template_file};
    int rc = render_new(&st->render, st->e->m->gguf, st->tok, &ro, err);
    if (rc) return rc;
    json_t *msgs = json_pack("[{s:s,s:s}]", "role", "user", "content", o->prompt);
    if (o->system) json_array_insert_new(msgs, 0, json_pack("{s:s,s:s}", "role", "system", "content", o->system));
    render_out out;
    render_tokens rt;
    char why[512];
    if (render_messages(st->render, msgs, NULL, 1, &out, why, sizeof why)) rc = strata_errf(err, STRATA_EINVAL, "%s", why);
    else rc = render_tokenize(st->render, &out, &rt, err);
    render_out_free(&out);
    json_decref(msgs);
    if (rc) return rc;
    *ids = rt.ids, *n = rt.n, rt.ids = NULL;
    render_tokens_free(&rt);
    return 0;
}

static int prompt_tokens(const run_opts *o, run_state *st, int32_t **ids, size_t *n,
                         strata_err *err) {
    int rc;
    if (o->chat) {
        rc = chat_tokens(o, st, ids, n, err);
    } else {
        chat_prompt p = {0};
        chat_prompt_add(&p, o->prompt, strlen(o->prompt), 0);
        rc = chat_tokenize(st->tok, &p, tok_add_bos(st->tok), ids, n, err);
        chat_prompt_free(&p);
    }
    if (rc) return rc;
    if (*n == 0) rc = strata_errf(err, STRATA_EINVAL, "prompt is empty");
    else if ((int)*n + o->n_predict > st->e->n_ctx)
        rc = strata_errf(err, STRATA_ERANGE, "prompt is %zu tokens + %d to generate, context is %d (raise -c)", *n,
                         o->n_predict, st->e->n_ctx);
    if (rc) {
        free(*ids);
        *ids = NULL;
    }
    return rc;
}

static void emit(const run_state *st, int32_t id) {
    char buf[256];
    int len = tok_piece(st->tok, id, 0, buf, sizeof buf);
    if (len > (int)sizeof buf) len = (int)sizeof buf;
    if (len > 0) fwrite(buf, 1, (size_t)len, stdout);
    fflush(stdout);
}

/* Decode until n_predict tokens or end of generation; returns the count. */
static int generate(const run_opts *o, run_state *st, strata_err *err) {
    int n_vocab = st->e->m->hp.n_vocab, n = 0;
    while (n < o->n_predict) {
        int32_t id = sample_next(st->smp, st->logits, n_vocab, st->seq.n_pos);
        if (tok_is_eog(st->tok, id)) break;
        sample_accept(st->smp, id);
        emit(st, id);
        n++;
        if (n == o->n_predict) break;
        if (engine_eval(st->e, &st->seq, &id, 1, st->logits, err)) return -1;
    }
    return n;
}

static int run_main(const run_opts *o, run_state *st, strata_err *err) {
    engine_params ep = {.model_path = o->model, .n_threads = o->threads, .n_ctx = o->ctx, .device = o->device};
    int rc = kvq_parse(o->kv_type, &ep.kv_type, err);
    if (!rc) rc = engine_open(&st->e, &ep, err);
    if (!rc) rc = tok_load(&st->tok, st->e->m->gguf, err);
    int32_t *ids = NULL;
    size_t n_ids = 0;
    if (!rc) rc = prompt_tokens(o, st, &ids, &n_ids, err);
    if (rc) return rc;
    sample_params sp = sample_params_default();
    sp.temperature = o->temp;
    sp.top_k = o->top_k;
    sp.top_p = o->top_p;
    sp.min_p = o->min_p;
    sp.repeat_penalty = o->repeat_penalty;
    sp.seed = (uint64_t)o->seed;
    st->smp = sample_new(&sp);
    for (size_t i = 0; i < n_ids; i++) sample_accept(st->smp, ids[i]);
    st->logits = xmalloc((size_t)st->e->m->hp.n_vocab * sizeof(float));
    kv_seq_init(&st->seq);
    double t0 = clock_ms();
    rc = engine_eval(st->e, &st->seq, ids, (int)n_ids, st->logits, err);
    free(ids);
    if (rc) return rc;
    double t1 = clock_ms();
    int n_gen = generate(o, st, err);
    double t2 = clock_ms();
    if (n_gen < 0) return err->code;
    if (!o->quiet)
        fprintf(stderr, "\n\nprefill: %zu tokens in %.1f ms (%.1f tok/s); decode: %d tokens in %.1f ms (%.1f tok/s)\n",
                n_ids, t1 - t0, n_ids * 1e3 / (t1 - t0), n_gen, t2 - t1,
                n_gen > 1 ? (n_gen - 1) * 1e3 / (t2 - t1) : 0.0);
    else
        printf("\n");
    return 0;
}

int cli_run(int argc, char **argv) {
    run_opts o = {.n_predict = 256, .temp = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
                  .repeat_penalty = 1.0f, .seed = 42};
    const arg_spec specs[] = {
        ARG_SPEC_MODEL(&o.model),
        {"--prompt", "-p", ARG_STR, &o.prompt, 0, -1, "prompt text (required)"},
        {"--n-predict", "-n", ARG_INT, &o.n_predict, 0, 1 << 20, "tokens to generate (256)"},
        {"--temp", NULL, ARG_FLOAT, &o.temp, 0, 100, "temperature, 0 = greedy (0.8)"},
        {"--top-k", NULL, ARG_INT, &o.top_k, 0, 1 << 24, "top-k, 0 = off (40)"},
        {"--top-p", NULL, ARG_FLOAT, &o.top_p, 0, 1, "top-p (0.95)"},
        {"--min-p", NULL, ARG_FLOAT, &o.min_p, 0, 1, "min-p (0.05)"},
        {"--repeat-penalty", NULL, ARG_FLOAT, &o.repeat_penalty, 0, 10, "repetition penalty (1.0)"},
        {"--seed", NULL, ARG_INT, &o.seed, 0, 2147483647, "sampling seed (42)"},
        {"--chat", NULL, ARG_FLAG, &o.chat, 0, -1, "wrap the prompt in the model's chat template"},
        {"--system", NULL, ARG_STR, &o.system, 0, -1, "system message for --chat"},
        {"--chat-template-file", NULL, ARG_STR, &o.template_file, 0, -1, "Jinja chat template for --chat"},
        ARG_SPEC_THREADS(&o.threads),
        {"--ctx", "-c", ARG_INT, &o.ctx, 16, 1 << 22, "context tokens (min(train, 4096))"},
        {"--device", NULL, ARG_STR, &o.device, 0, -1, "cpu or cuda (cpu; cuda: llama, qwen2, qwen3)"},
        {"--kv-type", NULL, ARG_STR, &o.kv_type, 0, -1, KVQ_HELP},
        {"--quiet", "-q", ARG_FLAG, &o.quiet, 0, -1, "no speed report"},
        ARG_SPEC_HELP(&o.help),
    };
    int n_specs = (int)(sizeof specs / sizeof specs[0]);
    int rc_args = args_cli("run", "-m MODEL -p TEXT [options]", specs, n_specs, argc, argv, &o.help);
    if (rc_args >= 0) return rc_args;
    strata_err err = {0};
    if (!o.model || !o.prompt) {
        fprintf(stderr, "strata run: %s is required\n", !o.model ? "-m MODEL" : "-p TEXT");
        return 2;
    }
    run_state st = {0};
    int rc = run_main(&o, &st, &err);
    if (rc) fprintf(stderr, "strata run: %s\n", err.msg);
    if (st.e) engine_seq_release(st.e, &st.seq);
    free(st.logits);
    sample_free(st.smp);
    render_free(st.render);
    tok_free(st.tok);
    engine_close(st.e);
    return rc ? 1 : 0;
}
