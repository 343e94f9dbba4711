/* bench.c - `strata bench`: prompt processing (pp) and generation (tg)
 * speed, like llama-bench. d "depth" tokens are prefilled once, untimed
 * (-d, default 0); each run then times pp: p more tokens prefilled on top
 * of them; tg: the sequence cut back to the depth, then n single-token
 * decode steps; and cuts back to the depth again (prefilling it anew only
 * where a sliding window or recurrent state cannot go back). So pp512 at
 * d4096 and tg128 at d4096 mean what llama-bench's `-d 4096` means,
 * without paying the depth's prefill on every run. One warm-up run, then r
 * measured runs; prints mean +- sd tok/s (or one JSON object). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "backend/peak.h"
#include "base/clock.h"
#include "base/cpu.h"
#include "base/mem.h"
#include "cli/args.h"
#include "cli/cli.h"
#include "model/engine.h"
#include "model/forward_cuda.h"

typedef struct bench_opts {
    const char *model, *device, *kv_type;
    int n_prompt, n_gen, depth, threads, reps, json, help, peak;
} bench_opts;

typedef struct stat {
    double mean, sd;
} stat;

static stat summarize(const double *v, int n) {
    stat s = {0, 0};
    for (int i = 0; i < n; i++) s.mean += v[i];
    s.mean /= n;
    for (int i = 0; i < n; i++) s.sd += (v[i] - s.mean) * (v[i] - s.mean);
    s.sd = n > 1 ? sqrt(s.sd / (n - 1)) : 0;
    return s;
}

/* The sequence at the depth again: cut back, and prefilled anew when a
 * long pp let the depth's sliding window go, or moved a recurrent state
 * (qwen35) past the depth, where it cannot be rewound (on the GPU too:
 * from 0 there; a depth of 0 restarts the state by itself). */
static int back_to_depth(engine *e, const bench_opts *o, kv_seq *s, const int32_t *toks, float *logits,
                         strata_err *err) {
    engine_seq_cut(e, s, o->depth);
    if (e->gpu) {
        if (fwdc_state_end(e->gpu) <= o->depth) return 0; /* no recurrent state, or at the depth */
        engine_seq_cut(e, s, 0);
        return o->depth ? engine_eval(e, s, toks, o->depth, logits, err) : 0;
    }
    if (kv_seq_window_missing(&e->kv, s) < 0 && !(s->rs && s->rs_pos != o->depth)) return 0;
    kv_seq_release(&e->kv, s);
    return o->depth ? fwd_prefill(e->fwd, s, toks, o->depth, logits, err) : 0;
}

/* One run's rates: pp and tg tok/s, and tokens per CPU-second of the
 * process (every thread's time: on a shared machine the wall time
 * measures the other jobs, the CPU time mostly does not). */
enum { R_PP, R_TG, R_PP_CPU, R_TG_CPU, R_N };

/* One run on s, which holds the depth's d tokens (prefilled once, untimed,
 * by the caller, and left at the depth again): its rates to out[R_N].
 * toks holds depth + n_prompt + n_gen ids: the depth's, the prompt's, the
 * decode's. */
static int bench_once(engine *e, const bench_opts *o, kv_seq *s, const int32_t *toks, float *logits, double *out,
                      strata_err *err) {
    double t0 = clock_ms(), c0 = clock_cpu_ms();
    int rc = o->n_prompt ? engine_eval(e, s, toks + o->depth, o->n_prompt, logits, err) : 0;
    double t1 = clock_ms(), c1 = clock_cpu_ms();
    if (!rc) rc = back_to_depth(e, o, s, toks, logits, err); /* tg starts at the depth, as pp did */
    double t2 = clock_ms(), c2 = clock_cpu_ms();
    for (int i = 0; i < o->n_gen && !rc; i++)
        rc = engine_eval(e, s, &toks[o->depth + o->n_prompt + i], 1, logits, err);
    double t3 = clock_ms(), c3 = clock_cpu_ms();
    if (!rc) rc = back_to_depth(e, o, s, toks, logits, err);
    out[R_PP] = o->n_prompt ? o->n_prompt * 1e3 / (t1 - t0) : 0;
    out[R_TG] = o->n_gen ? o->n_gen * 1e3 / (t3 - t2) : 0;
    out[R_PP_CPU] = o->n_prompt ? o->n_prompt * 1e3 / (c1 - c0) : 0;
    out[R_TG_CPU] = o->n_gen ? o->n_gen * 1e3 / (c3 - c2) : 0;
    return rc;
}

/* st[R_N]: the rates' summaries (R_PP_CPU, R_TG_CPU only in the JSON:
 * tokens per CPU-second, "pp_cpu" / "tg_cpu"). */
static void report(const bench_opts *o, const engine *e, const stat *st) {
    stat pp = st[R_PP], tg = st[R_TG];
    if (o->json) {
        printf("{\"model\":\"%s\",\"threads\":%d,\"cpu\":\"%s\",\"device\":\"%s\",\"kv_type\":\"%s\",\"depth\":%d,"
               "\"pp\":{\"n\":%d,\"mean\":%.3f,\"sd\":%.3f},"
               "\"tg\":{\"n\":%d,\"mean\":%.3f,\"sd\":%.3f},"
               "\"pp_cpu\":{\"mean\":%.3f,\"sd\":%.3f},\"tg_cpu\":{\"mean\":%.3f,\"sd\":%.3f},\"reps\":%d}\n",
               o->model, pool_size(e->threads), cpu_level_name(), engine_device(e), kvq_name(e->kv.type), o->depth,
               o->n_prompt, pp.mean, pp.sd, o->n_gen, tg.mean, tg.sd, st[R_PP_CPU].mean, st[R_PP_CPU].sd,
               st[R_TG_CPU].mean, st[R_TG_CPU].sd, o->reps);
        return;
    }
    if (e->gpu)
        printf("model: %s (%s, %.1f MiB), device: %s\n", o->model, e->m->hp.arch_name,
               model_weight_bytes(e->m) / 1048576.0, engine_device(e));
    else
        printf("model: %s (%s, %.1f MiB), threads: %d, kernels: %s, kv: %s (%.1f KiB a token)\n", o->model,
               e->m->hp.arch_name, model_weight_bytes(e->m) / 1048576.0, pool_size(e->threads), cpu_level_name(),
               kvq_name(e->kv.type), (double)e->kv.block_bytes / e->kv.block_tokens / 1024.0);
    char at[32] = "", name[64];
    if (o->depth) snprintf(at, sizeof at, " @ d%d", o->depth);
    printf("| test            |            t/s |\n|-----------------|----------------|\n");
    if (o->n_prompt) {
        snprintf(name, sizeof name, "pp%d%s", o->n_prompt, at);
        printf("| %-15s | %8.2f ± %5.2f |\n", name, pp.mean, pp.sd);
    }
    if (o->n_gen) {
        snprintf(name, sizeof name, "tg%d%s", o->n_gen, at);
        printf("| %-15s | %8.2f ± %5.2f |\n", name, tg.mean, tg.sd);
    }
}

static int bench_main(const bench_opts *o, strata_err *err) {
    engine_params ep = {.model_path = o->model, .n_threads = o->threads,
                        .n_ctx = o->depth + o->n_prompt + o->n_gen + 64,
                        .max_batch = o->n_prompt > 0 && o->n_prompt < 512 ? o->n_prompt : 512,
                        .device = o->device};
    engine *e;
    int rc = kvq_parse(o->kv_type, &ep.kv_type, err);
    if (!rc) rc = engine_open(&e, &ep, err);
    if (rc) return rc;
    int total = o->depth + o->n_prompt + o->n_gen;
    int32_t *toks = xmalloc((size_t)(total ? total : 1) * sizeof(int32_t));
    uint32_t x = 12345;
    for (int i = 0; i < total; i++) {
        x = x * 1664525u + 1013904223u;
        toks[i] = (int32_t)((x >> 8) % (uint32_t)e->m->hp.n_vocab);
    }
    float *logits = xmalloc((size_t)e->m->hp.n_vocab * sizeof(float));
    double *runs = xcalloc((size_t)(o->reps + 1) * R_N, sizeof(double)), *warm = runs + R_N * o->reps;
    double *v = xcalloc((size_t)o->reps + 1, sizeof(double));
    kv_seq s;
    kv_seq_init(&s);
    rc = o->depth ? engine_eval(e, &s, toks, o->depth, logits, err) : 0; /* the depth, once */
    if (!rc) rc = bench_once(e, o, &s, toks, logits, warm, err);         /* warm-up */
    for (int r = 0; r < o->reps && !rc; r++) rc = bench_once(e, o, &s, toks, logits, runs + R_N * r, err);
    engine_seq_release(e, &s);
    stat st[R_N];
    for (int k = 0; k < R_N; k++) {
        for (int r = 0; r < o->reps; r++) v[r] = runs[R_N * r + k];
        st[k] = summarize(v, o->reps);
    }
    if (!rc) report(o, e, st);
    free(runs);
    free(v);
    free(logits);
    free(toks);
    engine_close(e);
    return rc;
}

/* --peak: the int8 dot-product peak (backend/peak.h) on 1 thread and on
 * -t threads (default: one per online core), the denominator of pp's
 * fraction of the machine in bench/README.md; --json: one object,
 * {"threads": N, "peak": {KIND: {"1": G, "N": G}}} (G int8 ops/s). */
static int bench_peak(const bench_opts *o) {
    int nt = o->threads > 0 ? o->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (nt < 1) nt = 1;
    if (o->json) printf("{\"threads\":%d,\"cpu\":\"%s\",\"peak\":{", nt, cpu_level_name());
    else {
        printf("int8 dot-product peak, G int8 ops/s (2 per multiply-add), best of 3; kernels: %s\n", cpu_level_name());
        printf("%-28s %10s %10s\n", "instruction chains", "1 thread", nt == 1 ? "" : "threads");
    }
    for (int k = 0, first = 1; k < PEAK_KINDS; k++) {
        const char *name = peak_name((peak_kind)k);
        if (!peak_available((peak_kind)k)) {
            if (!o->json) printf("%-28s %10s\n", name, "n/a");
            continue;
        }
        double one = peak_measure((peak_kind)k, 1, 1.0), all = nt > 1 ? peak_measure((peak_kind)k, nt, 1.0) : one;
        if (o->json) printf("%s\"%s\":{\"1\":%.1f,\"%d\":%.1f}", first ? "" : ",", name, one, nt, all);
        else if (nt > 1) printf("%-28s %10.1f %7.1f (%d)\n", name, one, all, nt);
        else printf("%-28s %10.1f\n", name, one);
        first = 0;
    }
    if (o->json) printf("}}\n");
    return 0;
}

int cli_bench(int argc, char **argv) {
    bench_opts o = {.n_prompt = 512, .n_gen = 128, .reps = 5};
    const arg_spec specs[] = {
        ARG_SPEC_MODEL(&o.model),
        {"--n-prompt", "-p", ARG_INT, &o.n_prompt, 0, 1 << 20, "prompt tokens (512)"},
        {"--n-gen", "-n", ARG_INT, &o.n_gen, 0, 1 << 20, "generated tokens (128)"},
        {"--depth", "-d", ARG_INT, &o.depth, 0, 1 << 20, "tokens prefilled untimed before each test (0)"},
        ARG_SPEC_THREADS(&o.threads),
        {"--device", NULL, ARG_STR, &o.device, 0, -1, "cpu or cuda (cpu; cuda: llama, qwen2, qwen3)"},
        {"--kv-type", NULL, ARG_STR, &o.kv_type, 0, -1, KVQ_HELP},
        {"--reps", "-r", ARG_INT, &o.reps, 1, 1000, "measured repetitions (5)"},
        {"--json", NULL, ARG_FLAG, &o.json, 0, -1, "print one JSON object"},
        {"--peak", NULL, ARG_FLAG, &o.peak, 0, -1, "the CPU's int8 dot-product peak (no model; -t threads)"},
        ARG_SPEC_HELP(&o.help),
    };
    int n_specs = (int)(sizeof specs / sizeof specs[0]);
    int rc_args = args_cli("bench", "-m MODEL [options]", specs, n_specs, argc, argv, &o.help);
    if (rc_args >= 0) return rc_args;
    strata_err err = {0};
    if (o.peak) return bench_peak(&o);
    if (!o.model) {
        fprintf(stderr, "strata bench: -m MODEL is required\n");
        return 2;
    }
    if (o.n_prompt + o.n_gen == 0) {
        fprintf(stderr, "strata bench: nothing to measure (-p 0 -n 0)\n");
        return 2;
    }
    if (bench_main(&o, &err)) {
        fprintf(stderr, "strata bench: %s\n", err.msg);
        return 1;
    }
    return 0;
}
