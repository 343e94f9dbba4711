/* peak_avx512.c - AVX-512 VNNI peak chains (peak.h). */
#include <immintrin.h>

#include "backend/peak.h"

#define PEAK_CHAINS 16 /* > latency (4-5) x throughput (1-2 per cycle) */

double peak_vnni512_run(long rounds) {
    volatile int seed = 1;
    __m512i w = _mm512_set1_epi8((char)seed), x = _mm512_set1_epi8((char)(seed + 1));
    __m512i a[PEAK_CHAINS];
    _Pragma("GCC unroll 16") for (int j = 0; j < PEAK_CHAINS; j++) a[j] = _mm512_set1_epi32(j);
    for (long i = 0; i < rounds; i++) {
        _Pragma("GCC unroll 16") for (int j = 0; j < PEAK_CHAINS; j++) {
            a[j] = _mm512_dpbusd_epi32(a[j], w, x);
            __asm__ volatile("" : "+v"(a[j])); /* keep every chain in its register */
        }
    }
    __m512i s = a[0];
    _Pragma("GCC unroll 16") for (int j = 1; j < PEAK_CHAINS; j++) s = _mm512_add_epi32(s, a[j]);
    volatile int sink = _mm512_reduce_add_epi32(s);
    (void)sink;
    return (double)rounds * PEAK_CHAINS * 64 * 2;
}
