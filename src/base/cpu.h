/* cpu.h - CPU features, detected once; kernels dispatch on them. */
#ifndef STRATA_CPU_H
#define STRATA_CPU_H

typedef struct cpu_features {
    int avx2, fma, f16c, avx512f, avx512bw, avx512vl, avx512vnni, avxvnni;
    int avx512bf16; /* bf16 conversions (VCVTNE2PS2BF16), which the AMX attention kernels use */
    int amxbf16;    /* AMX-TILE + AMX-BF16, and the kernel let this process use the tiles (backend/attn.h) */
    int amxint8;    /* AMX-TILE + AMX-INT8, the same grant (backend/quant.h: the gemm level QUANT_AMX) */
} cpu_features;

/* Detected features, masked by STRATA_CPU=scalar|avx2|avx512 if set
 * (tests and benchmarks use it to compare the kernels of each level;
 * avx512: no AMX). */
const cpu_features *cpu_get(void);
/* "avx512", "avx2" or "scalar": the highest level kernels will use. */
const char *cpu_level_name(void);

#endif
