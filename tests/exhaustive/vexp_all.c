/* vexp_all.c - backend/vexp's expf against libm's for all 2^32 float bit
 * patterns, at every vector level the CPU has (`make check-vexp`; the
 * unit test test_vexp.c covers the gates' range and a stride of the rest).
 * The patterns are split over THREADS threads (default: the cores online).
 * Prints the level, the mismatches (the first few shown) and the time;
 * exits 1 if any differ.
 *   build/vexp-all [THREADS] */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/quant.h"
#include "backend/vexp.h"

enum { CHUNK = 1 << 14 };

typedef struct {
    int level;
    uint64_t first, count; /* patterns [first, first + count) */
    uint64_t bad;
} job;

static void *run(void *arg) {
    job *j = arg;
    static _Thread_local float x[CHUNK], want[CHUNK], got[CHUNK];
    for (uint64_t b = j->first, end = j->first + j->count; b < end; b += CHUNK) {
        size_t n = end - b < CHUNK ? (size_t)(end - b) : CHUNK;
        for (size_t i = 0; i < n; i++) {
            uint32_t v = (uint32_t)(b + i);
            memcpy(&x[i], &v, 4);
            want[i] = expf(x[i]);
        }
        vexp_expf_level(j->level, got, x, n);
        if (memcmp(want, got, n * 4) == 0) continue;
        for (size_t i = 0; i < n; i++)
            if (memcmp(&want[i], &got[i], 4) != 0 && j->bad++ < 5)
                printf("  expf(%a) = %a, vexp %a\n", (double)x[i], (double)want[i], (double)got[i]);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int nt = argc > 1 ? atoi(argv[1]) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (nt < 1 || nt > 256) nt = 1;
    int top = quant_level() > QUANT_AVX512 ? QUANT_AVX512 : quant_level(), failed = 0;
    if (top < QUANT_AVX2) printf("no vector level on this CPU: nothing to check\n");
    for (int level = QUANT_AVX2; level <= top; level++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        job jobs[256];
        pthread_t th[256];
        uint64_t per = ((1ull << 32) + nt - 1) / nt, bad = 0;
        for (int i = 0; i < nt; i++) {
            uint64_t first = per * i;
            jobs[i] = (job){.level = level, .first = first, .count = first >= (1ull << 32) ? 0 : ((1ull << 32) - first < per ? (1ull << 32) - first : per)};
            pthread_create(&th[i], NULL, run, &jobs[i]);
        }
        for (int i = 0; i < nt; i++) pthread_join(th[i], NULL), bad += jobs[i].bad;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        printf("level %s: %llu of 4294967296 float bit patterns differ from libm's expf (%.1f s, %d threads)\n",
               quant_level_name(level), (unsigned long long)bad,
               (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9, nt);
        failed |= bad != 0;
    }
    printf("vexp_level: %s\n", quant_level_name(vexp_level()));
    return failed;
}
