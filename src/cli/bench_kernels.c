/* bench_kernels.c - micro-benchmark of quant_gemm (`strata bench-kernels`).
 *
 *   cli_bench_kernels(argc, argv): [TYPE [ROWS [K [N_TOK...]]]] [--level L]
 *   defaults: Q4_1 1536 576 1 512; L = scalar|avx2|avx512|all (default all
 *   levels this CPU runs). Single thread; random weights with sane scales.
 * Weights are random bytes whose odd bytes are tamed so every f16 field is
 * a small normal number (no NaN, Inf or denormal slowdowns).
 * Prints one line per (level, n_tok): ms per call and GFLOP/s (2*rows*k*n
 * flops, activation conversion excluded). Does not: threads. */
#include "backend/quant_impl.h"
#include "base/fp16.h"
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts); /* the thread's own time: the machine is shared */
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int type_by_name(const char *s) {
    for (uint32_t t = 0; t < QT_COUNT; t++) {
        const quant_traits *tr = quant_get(t);
        if (tr && tr->is_weight && strcasecmp(tr->name, s) == 0) return (int)t;
    }
    return -1;
}


static void *bench_weights(qtype t, int rows, int64_t k) {
    size_t n = quant_row_bytes(t, k) * (size_t)rows;
    uint8_t *w = malloc(n);
    uint32_t s = 12345;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        w[i] = (uint8_t)(s >> 24);
    }
    if (t == QT_MXFP4) { /* one E8M0 byte per 17: 2^-8 */
        for (size_t i = 0; i < n; i += QB_MXFP4) w[i] = 120;
        return w;
    }
    /* every other block size is even: all f16 fields start at even offsets */
    for (size_t i = 0; i + 1 < n; i += 2)
        w[i + 1] = (uint8_t)((w[i + 1] & 0x83) | 0x20); /* |v| near 2^-7 */
    return w;
}

static void bench_one(int level, qtype t, int rows, int64_t k, int n_tok) {
    const quant_traits *tr = quant_get(t);
    size_t wrb = quant_row_bytes(t, k), xrb = quant_act_row_bytes(tr->act_type, k);
    void *w = bench_weights(t, rows, k);
    float *x = malloc(sizeof(float) * (size_t)k), *y = malloc(sizeof(float) * (size_t)rows * n_tok);
    uint8_t *xq = malloc(xrb * (size_t)n_tok);
    for (int64_t i = 0; i < k; i++) x[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    for (int i = 0; i < n_tok; i++) quant_act_row(tr->act_type, x, xq + i * xrb, k);
    int iters = 0;
    double t0 = now_s(), el = 0;
    while (el < 0.5 || iters < 3) {
        quant_gemm_level(level, t, w, wrb, k, xq, xrb, n_tok, y, rows, 0, rows);
        iters++;
        el = now_s() - t0;
    }
    double per = el / iters, flops = 2.0 * rows * (double)k * n_tok;
    printf("%-6s %-5s rows=%d k=%lld n_tok=%d: %9.3f ms  %7.1f GFLOP/s\n",
           quant_level_name(level), tr->name, rows, (long long)k, n_tok, per * 1e3,
           flops / per * 1e-9);
    free(w);
    free(x);
    free(y);
    free(xq);
}

/* argv[0] is the command name. */
int cli_bench_kernels(int argc, char **argv) {
    int type = QT_Q4_1, rows = 1536, lv = -1, ntoks[16], nn = 0, pos = 0;
    int64_t k = 576;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--level") == 0 && i + 1 < argc) {
            const char *l = argv[++i];
            lv = strcmp(l, "all") == 0 ? -1 : -2;
            for (int j = 0; j < QUANT_LEVELS; j++)
                if (strcmp(l, quant_level_name(j)) == 0) lv = j;
            if (lv == -2) return fprintf(stderr, "unknown level %s\n", l), 2;
        } else if (pos == 0) {
            type = type_by_name(argv[i]), pos++;
            if (type < 0) return fprintf(stderr, "unknown type %s\n", argv[i]), 2;
        } else if (pos == 1) {
            rows = atoi(argv[i]), pos++;
        } else if (pos == 2) {
            k = atoll(argv[i]), pos++;
        } else if (nn < 16) {
            ntoks[nn++] = atoi(argv[i]);
        }
    }
    if (nn == 0) ntoks[nn++] = 1, ntoks[nn++] = 512;
    if (rows <= 0 || k <= 0 || k % quant_get((uint32_t)type)->blck)
        return fprintf(stderr, "bad shape\n"), 2;
    for (int l = 0; l <= quant_level(); l++) {
        if (lv >= 0 && l != lv) continue;
        for (int i = 0; i < nn; i++) bench_one(l, (qtype)type, rows, k, ntoks[i]);
    }
    return 0;
}
