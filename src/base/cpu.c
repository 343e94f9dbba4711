/* cpu.c - runtime CPU feature detection with an environment override. */
#include "base/cpu.h"

#include <pthread.h>

#include <stdlib.h>
#include <string.h>

static cpu_features detect(void) {
    cpu_features f = {0};
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    f.avx2 = __builtin_cpu_supports("avx2");
    f.fma = __builtin_cpu_supports("fma");
    f.f16c = f.avx2; /* every AVX2 CPU we target has F16C */
    f.avx512f = __builtin_cpu_supports("avx512f");
    f.avx512bw = __builtin_cpu_supports("avx512bw");
    f.avx512vl = __builtin_cpu_supports("avx512vl");
    f.avx512vnni = __builtin_cpu_supports("avx512vnni");
    f.avxvnni = __builtin_cpu_supports("avxvnni"); /* VEX VPDPBUSD: only the peak benchmark uses it */
#endif
    const char *force = getenv("STRATA_CPU");
    if (force && strcmp(force, "avx2") == 0) {
        f.avx512f = f.avx512bw = f.avx512vl = f.avx512vnni = 0; /* avxvnni stays: a VEX (AVX2-width) extension */
    } else if (force && strcmp(force, "scalar") == 0) {
        memset(&f, 0, sizeof f);
    }
    return f;
}

static cpu_features g_feats;
static pthread_once_t g_feats_once = PTHREAD_ONCE_INIT;

static void detect_once(void) { g_feats = detect(); }

/* Detected once, whichever thread asks first (pthread_once: no data race
 * between kernel threads starting together). */
const cpu_features *cpu_get(void) {
    pthread_once(&g_feats_once, detect_once);
    return &g_feats;
}

const char *cpu_level_name(void) {
    const cpu_features *f = cpu_get();
    if (f->avx512f && f->avx512bw && f->avx512vl) return "avx512";
    if (f->avx2 && f->fma) return "avx2";
    return "scalar";
}
