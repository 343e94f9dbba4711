/* cpu.c - runtime CPU feature detection with an environment override. */
#include "base/cpu.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <stdlib.h>
#include <string.h>

/* AMX-TILE and the tile product kinds (CPUID 7.0 EDX bit 24; `kind`:
 * bit 22 AMX-BF16, 25 AMX-INT8), usable only once Linux grants this
 * process the tile state (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA,
 * feature 18; Linux 5.16+; asking twice is harmless). */
static int amx_usable(int kind) {
#if defined(__x86_64__)
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << kind))) return 0;
    return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
#else
    (void)kind;
    return 0;
#endif
}

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
    f.avx512bf16 = __builtin_cpu_supports("avx512bf16");
    f.amxbf16 = f.avx512bf16 && amx_usable(22);
    f.amxint8 = f.avx512vnni && amx_usable(25);
#endif
    const char *force = getenv("STRATA_CPU");
    if (force && strcmp(force, "avx2") == 0) { /* avxvnni stays: a VEX (AVX2-width) extension */
        f.avx512f = f.avx512bw = f.avx512vl = f.avx512vnni = f.avx512bf16 = f.amxbf16 = f.amxint8 = 0;
    } else if (force && strcmp(force, "avx512") == 0) { /* AVX-512 without AMX */
        f.amxbf16 = f.amxint8 = 0;
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
