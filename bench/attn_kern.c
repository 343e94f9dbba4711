/* attn_kern.c - one attention call's thread CPU time at depth, per kernel
 * (`make build/attn-kern`, bench/README.md): the decode and prefill
 * shapes of SmolLM2 (head_dim 64, 3 query heads per KV head) and Gemma 3
 * (256, 4), K/V stored as f16 or q8_0, through the avx512 float32
 * kernels, the int8 scoring of q8_0 keys (AVX-512 VNNI) and the AMX ones
 * where the CPU has them. Thread CPU time, so the other jobs of a shared
 * machine cost it little; best of REPS. A prefill run of 64 tokens
 * against two of 32 is model/forward_int.h's ATTN_RUN.
 *   build/attn-kern [DEPTH (4096)] [REPS (7)] */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "attn_cache.h"
#include "backend/attn.h"
#include "base/cpu.h"
#include "base/mem.h"

static double cpu_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* Best time of reps calls: n_tok tokens ending at depth, hpg heads each. */
static double time_call(const attn_ops *ops, kvq_type t, int d, int depth, int n_tok, int hpg, int reps) {
    bench_cache c;
    bench_cache_new(&c, t, d, (depth + BENCH_BT - 1) / BENCH_BT);
    int nq = n_tok * hpg;
    float *q = xmalloc((size_t)nq * d * 4), *out = xmalloc((size_t)nq * d * 4);
    for (int i = 0; i < nq * d; i++) q[i] = bench_frand();
    attn_query *qs = xmalloc((size_t)nq * sizeof(*qs));
    for (int i = 0; i < nq; i++)
        qs[i] = (attn_query){q + (size_t)i * d, out + (size_t)i * d, 0, depth - n_tok + i / hpg + 1, NULL};
    float *ws = xaligned(attn_ws_floats(d, nq) * sizeof(float));
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = cpu_ms();
        attn_run_ops(ops, &c.kv, qs, nq, 0.125f, ws);
        double dt = cpu_ms() - t0;
        if (dt < best) best = dt;
    }
    bench_cache_free(&c);
    free(q), free(out), free(qs), free(ws);
    return best;
}

int main(int argc, char **argv) {
    int depth = argc > 1 ? atoi(argv[1]) : 4096, reps = argc > 2 ? atoi(argv[2]) : 7;
    static const struct {
        const char *name;
        int d, n_tok, hpg;
    } shapes[] = {
        {"SmolLM2 decode (d 64, 1 token x 3 heads)", 64, 1, 3},
        {"SmolLM2 prefill run (d 64, 32 tokens x 3 heads)", 64, 32, 3},
        {"SmolLM2 prefill run (d 64, 64 tokens x 3 heads)", 64, 64, 3},
        {"Gemma 3 decode (d 256, 1 token x 4 heads)", 256, 1, 4},
        {"Gemma 3 prefill run (d 256, 32 tokens x 4 heads)", 256, 32, 4},
        {"Gemma 3 prefill run (d 256, 64 tokens x 4 heads)", 256, 64, 4},
    };
    int vnni = cpu_get()->avx512vnni && attn_level() >= ATTN_LEVEL_AVX512;
    printf("depth %d, best of %d, thread CPU ms per call\n\n", depth, reps);
    printf("| shape | f16 avx512 | q8_0 avx512 (float32 scores) | q8_0 int8 scores (VNNI) | f16 amx | q8_0 amx |\n");
    printf("|---|---|---|---|---|---|\n");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int d = shapes[s].d, n = shapes[s].n_tok, h = shapes[s].hpg;
        const attn_ops *f = attn_ops_avx512(d), *i8 = vnni ? attn_ops_vnni_q8(d) : NULL;
        const attn_ops *amx = attn_level() == ATTN_LEVEL_AMX ? attn_ops_amx(d) : NULL;
        printf("| %s | %.3f | %.3f | ", shapes[s].name, time_call(f, KVQ_F16, d, depth, n, h, reps),
               time_call(f, KVQ_Q8_0, d, depth, n, h, reps));
        if (i8) printf("%.3f | ", time_call(i8, KVQ_Q8_0, d, depth, n, h, reps));
        else printf("- | ");
        if (amx) printf("%.3f | %.3f |\n", time_call(amx, KVQ_F16, d, depth, n, h, reps),
                        time_call(amx, KVQ_Q8_0, d, depth, n, h, reps));
        else printf("- | - |\n");
        fflush(stdout);
    }
    return 0;
}
