/* simd_tr16.h - the 16 x 16 dword transpose of AVX-512 registers, for the
 * kernels that turn rows into lanes: the matmul tiles (quant_avx512.c,
 * quant_amx_avx512.c), the norms of 16 rows (norm_avx512.c) and the delta
 * rule's 16 rows (delta_avx512.c). Include it from *_avx512.c files only. */
#ifndef STRATA_SIMD_TR16_H
#define STRATA_SIMD_TR16_H

#include <immintrin.h>

/* In place: out[c] dword r = in[r] dword c. */
static inline __attribute__((always_inline, target("avx512f"))) void simd_tr16(__m512i *r) {
    __m512i a[16], b[16];
    _Pragma("GCC unroll 16")
    for (int i = 0; i < 8; i++) {
        a[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    /* b[4i + j], 128-bit lane L: rows 4i..4i+3 at column 4L + j */
    _Pragma("GCC unroll 16")
    for (int i = 0; i < 4; i++) {
        b[4 * i] = _mm512_unpacklo_epi64(a[4 * i], a[4 * i + 2]);
        b[4 * i + 1] = _mm512_unpackhi_epi64(a[4 * i], a[4 * i + 2]);
        b[4 * i + 2] = _mm512_unpacklo_epi64(a[4 * i + 1], a[4 * i + 3]);
        b[4 * i + 3] = _mm512_unpackhi_epi64(a[4 * i + 1], a[4 * i + 3]);
    }
    _Pragma("GCC unroll 16")
    for (int j = 0; j < 4; j++) {
        __m512i c0 = _mm512_shuffle_i32x4(b[j], b[4 + j], 0x44), c1 = _mm512_shuffle_i32x4(b[8 + j], b[12 + j], 0x44);
        __m512i c2 = _mm512_shuffle_i32x4(b[j], b[4 + j], 0xee), c3 = _mm512_shuffle_i32x4(b[8 + j], b[12 + j], 0xee);
        r[j] = _mm512_shuffle_i32x4(c0, c1, 0x88);
        r[4 + j] = _mm512_shuffle_i32x4(c0, c1, 0xdd);
        r[8 + j] = _mm512_shuffle_i32x4(c2, c3, 0x88);
        r[12 + j] = _mm512_shuffle_i32x4(c2, c3, 0xdd);
    }
}

#endif
