/* cpu.h - CPU features, detected once; kernels dispatch on them. */
#ifndef STRATA_CPU_H
#define STRATA_CPU_H

typedef struct cpu_features {
    int avx2, fma, f16c, avx512f, avx512bw, avx512vl, avx512vnni, avxvnni;
} cpu_features;

/* Detected features, masked by STRATA_CPU=scalar|avx2|avx512 if set
 * (tests use it to compare the kernels of each level). */
const cpu_features *cpu_get(void);
/* "avx512", "avx2" or "scalar": the highest level kernels will use. */
const char *cpu_level_name(void);

#endif
