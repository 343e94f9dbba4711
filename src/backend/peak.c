/* peak.c - runs the peak chains of peak.h on n threads and times them.
 * Each thread of a base/pool runs the same number of rounds of its own
 * chains; the rate is all threads' ops over the wall time of the job, so a
 * thread the (shared) machine delays lowers it, as it would a matmul. */
#include "backend/peak.h"

#include "base/clock.h"
#include "base/cpu.h"
#include "base/pool.h"

typedef double (*peak_fn)(long rounds);

static const struct {
    const char *name;
    peak_fn fn;
} peak_kinds[PEAK_KINDS] = {
    [PEAK_VNNI512] = {"avx512-vnni vpdpbusd zmm", peak_vnni512_run},
    [PEAK_VNNI256] = {"avx-vnni vpdpbusd ymm", peak_vnni256_run},
    [PEAK_MADDUBS256] = {"avx2 vpmaddubsw ymm", peak_maddubs256_run},
    [PEAK_AMX64] = {"amx-int8 tdpbusd k=64", peak_amx64_run},
    [PEAK_AMX32] = {"amx-int8 tdpbusd k=32", peak_amx32_run},
};

const char *peak_name(peak_kind k) { return k < PEAK_KINDS ? peak_kinds[k].name : "?"; }

int peak_available(peak_kind k) {
    const cpu_features *f = cpu_get();
    switch (k) {
    case PEAK_VNNI512: return f->avx512f && f->avx512bw && f->avx512vnni;
    case PEAK_VNNI256: return f->avxvnni;
    case PEAK_MADDUBS256: return f->avx2;
    case PEAK_AMX64:
    case PEAK_AMX32: return f->amxint8;
    default: return 0;
    }
}

typedef struct {
    peak_fn fn;
    long rounds;
    double ops[64]; /* per thread */
} peak_job;

static void peak_worker(void *ctx, int ith, int nth) {
    peak_job *j = ctx;
    double ops = j->fn(j->rounds);
    if (ith < 64) j->ops[ith] = ops;
}

/* ops / s of one pool_run of `rounds` rounds. */
static double peak_once(pool *p, peak_job *j, long rounds, double *ms) {
    j->rounds = rounds;
    double t0 = clock_ms();
    pool_run(p, peak_worker, j);
    *ms = clock_ms() - t0;
    double ops = 0;
    for (int i = 0; i < pool_size(p) && i < 64; i++) ops += j->ops[i];
    return ops / (*ms * 1e-3);
}

double peak_measure(peak_kind k, int n_threads, double seconds) {
    if (!peak_available(k)) return 0;
    pool *p = pool_new(n_threads > 64 ? 64 : n_threads);
    peak_job j = {.fn = peak_kinds[k].fn};
    double ms = 0;
    long rounds = 1 << 16;
    while (peak_once(p, &j, rounds, &ms) > 0 && ms < 50) rounds *= 4; /* calibrate, warm the clocks */
    rounds = (long)((double)rounds * (seconds * 1e3 / 3) / (ms > 0 ? ms : 1)) + 1;
    double best = 0;
    for (int r = 0; r < 3; r++) { /* best of 3: the machine is shared */
        double v = peak_once(p, &j, rounds, &ms);
        if (v > best) best = v;
    }
    pool_free(p);
    return best * 1e-9;
}
