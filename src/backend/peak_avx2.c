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

/* Per chain and round: 8 VPMADDUBSW summed in int16 by VPADDW (exact in
 * the kernels: their products are small), then one VPMADDWD by ones and a
 * VPADDD into the int32 sum: 256 multiply-adds. */
#define PEAK_MCHAINS 4

double peak_maddubs256_run(long rounds) {
    volatile int seed = 1;
    __m256i w = _mm256_set1_epi8((char)seed), x = _mm256_set1_epi8((char)(seed + 1));
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i a[PEAK_MCHAINS];
    _Pragma("GCC unroll 16") for (int j = 0; j < PEAK_MCHAINS; j++) a[j] = _mm256_set1_epi32(j);
    for (long i = 0; i < rounds; i++) {
        _Pragma("GCC unroll 4") for (int j = 0; j < PEAK_MCHAINS; j++) {
            __m256i s = _mm256_setzero_si256();
            _Pragma("GCC unroll 8") for (int v = 0; v < 8; v++) {
                __asm__ volatile("" : "+x"(w)); /* w "changes": no multiply is shared */
                s = _mm256_add_epi16(s, _mm256_maddubs_epi16(w, x));
            }
            a[j] = _mm256_add_epi32(a[j], _mm256_madd_epi16(s, ones));
            __asm__ volatile("" : "+x"(a[j]));
        }
    }
    __m256i s = a[0];
    _Pragma("GCC unroll 16") for (int j = 1; j < PEAK_MCHAINS; j++) s = _mm256_add_epi32(s, a[j]);
    volatile int sink = _mm256_extract_epi32(s, 0);
    (void)sink;
    return (double)rounds * PEAK_MCHAINS * 8 * 32 * 2;
}
