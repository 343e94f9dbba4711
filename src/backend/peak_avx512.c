/* peak_avx512.c - AVX-512 VNNI and AMX-INT8 peak chains (peak.h). */
#include <immintrin.h>

#include <string.h>

#include "backend/amx_cfg.h"
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

/* Four independent result tiles (a TDPBUSD's latency is about 4 of its
 * issue intervals), each += A B with A 16 rows x kb bytes and B kb / 4
 * rows x 64 bytes, operands zero (the rate does not depend on values). */
static __attribute__((target("amx-tile,amx-int8"))) double peak_amx_run(long rounds, int kb) {
    amx_cfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int i = 0; i < 8; i++) c.colsb[i] = i == 4 ? kb : 64, c.rows[i] = i == 6 ? kb / 4 : 16;
    amx_cfg_load(&c);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_zero(4);
    _tile_zero(6);
    for (long i = 0; i < rounds; i++) {
        _tile_dpbusd(0, 4, 6);
        _tile_dpbusd(1, 4, 6);
        _tile_dpbusd(2, 4, 6);
        _tile_dpbusd(3, 4, 6);
    }
    _tile_release();
    return (double)rounds * 4 * 16 * 16 * kb * 2;
}

double peak_amx64_run(long rounds) { return peak_amx_run(rounds, 64); }
double peak_amx32_run(long rounds) { return peak_amx_run(rounds, 32); }
