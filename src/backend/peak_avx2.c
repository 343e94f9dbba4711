/* peak_avx2.c - AVX2 and AVX-VNNI peak chains (peak.h). The AVX-VNNI
 * function is compiled for that extension alone (target attribute): the
 * AVX2 kernels do not use it, it says what they could reach with it. */
#include <immintrin.h>

#include "backend/peak.h"

#define PEAK_CHAINS 12

__attribute__((target("avxvnni"))) double peak_vnni256_run(long rounds) {
    volatile int seed = 1;
    __m256i w = _mm256_set1_epi8((char)seed), x = _mm256_set1_epi8((char)(seed + 1));
    __m256i a[PEAK_CHAINS];
    _Pragma("GCC unroll 16") for (int j = 0; j < PEAK_CHAINS; j++) a[j] = _mm256_set1_epi32(j);
    for (long i = 0; i < rounds; i++) {
        _Pragma("GCC unroll 16") for (int j = 0; j < PEAK_CHAINS; j++) {
            a[j] = _mm256_dpbusd_avx_epi32(a[j], w, x);
            __asm__ volatile("" : "+x"(a[j]));
        }
    }
    __m256i s = a[0];
    _Pragma("GCC unroll 16") for (int j = 1; j < PEAK_CHAINS; j++) s = _mm256_add_epi32(s, a[j]);
    volatile int sink = _mm256_extract_epi32(s, 0) + _mm256_extract_epi32(s, 7);
    (void)sink;
    return (double)rounds * PEAK_CHAINS * 32 * 2;
}

/* PEAK_MCHAINS chains of VPMADDUBSW summed in int16 by VPADDW (exact in
 * the kernels: their products are small), each widened by VPMADDWD by
 * ones and a VPADDD into its int32 sum every 8 rounds: the AVX2 kernels'
 * sequence, 32 multiply-adds per VPMADDUBSW. Each chain has its own x,
 * "changed" by an empty asm every round, so no multiply is hoisted out of
 * the loop or shared. */
#define PEAK_MCHAINS 4 /* x, s, a: 12 of the 16 ymm registers */

double peak_maddubs256_run(long rounds) {
    volatile int seed = 1;
    __m256i w = _mm256_set1_epi8((char)seed), x[PEAK_MCHAINS], s[PEAK_MCHAINS], a[PEAK_MCHAINS];
    const __m256i ones = _mm256_set1_epi16(1);
    _Pragma("GCC unroll 16") for (int j = 0; j < PEAK_MCHAINS; j++) {
        x[j] = _mm256_set1_epi8((char)(seed + j));
        s[j] = a[j] = _mm256_setzero_si256();
    }
    for (long i = 0; i < rounds; i++) {
        _Pragma("GCC unroll 8") for (int v = 0; v < 8; v++)
            _Pragma("GCC unroll 16") for (int j = 0; j < PEAK_MCHAINS; j++) {
                __asm__ volatile("" : "+x"(x[j]));
                s[j] = _mm256_add_epi16(s[j], _mm256_maddubs_epi16(w, x[j]));
                __asm__ volatile("" : "+x"(s[j])); /* in order: no multiplies run ahead into spills */
            }
        _Pragma("GCC unroll 16") for (int j = 0; j < PEAK_MCHAINS; j++) {
            a[j] = _mm256_add_epi32(a[j], _mm256_madd_epi16(s[j], ones));
            s[j] = _mm256_setzero_si256();
        }
    }
    __m256i t = a[0];
    _Pragma("GCC unroll 16") for (int j = 1; j < PEAK_MCHAINS; j++) t = _mm256_add_epi32(t, a[j]);
    volatile int sink = _mm256_extract_epi32(t, 0);
    (void)sink;
    return (double)rounds * PEAK_MCHAINS * 8 * 32 * 2;
}
