/* peak.h - the int8 dot-product peak of this CPU: the denominator of the
 * prefill numbers (`strata bench --peak`, bench/README.md).
 *
 * Each kernel runs independent chains of one instruction sequence on
 * register operands (no memory traffic), enough chains to cover the
 * instruction's latency, so the rate is the core's issue limit for it.
 * Ops are counted as the matmul benchmarks count them: 2 per int8
 * multiply-add (2 * rows * k * tokens for a matmul).
 * Does not: say what a real kernel reaches (loads, decode, float steps). */
#ifndef STRATA_PEAK_H
#define STRATA_PEAK_H

typedef enum {
    PEAK_VNNI512,   /* AVX-512 VNNI: VPDPBUSD zmm, 64 multiply-adds */
    PEAK_VNNI256,   /* AVX-VNNI (VEX): VPDPBUSD ymm, 32 */
    PEAK_MADDUBS256, /* AVX2: VPMADDUBSW ymm (32) + VPADDW, widened by VPMADDWD every 8 (the AVX2 kernels' way) */
    PEAK_AMX64,     /* AMX-INT8: TDPBUSD of 16 x 64 by 64 x 16 bytes, 16,384 multiply-adds */
    PEAK_AMX32,     /* the same with K = 32 (one legacy block, as quant_amx_avx512.c runs it), 8,192 */
    PEAK_KINDS
} peak_kind;

const char *peak_name(peak_kind k);
/* 1 when this CPU (and build) runs kind k. */
int peak_available(peak_kind k);
/* G int8 ops/s of kind k on n_threads threads (each its own chains), run
 * for about `seconds`; 0 when not available. */
double peak_measure(peak_kind k, int n_threads, double seconds);

/* The per-level kernels: `rounds` rounds of the chains, returning the
 * int8 ops done (internal; peak.c dispatches). */
double peak_vnni512_run(long rounds);
double peak_vnni256_run(long rounds);
double peak_maddubs256_run(long rounds);
double peak_amx64_run(long rounds);
double peak_amx32_run(long rounds);

#endif
