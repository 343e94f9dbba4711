/* simd_tr.h - transposes of 32-bit elements in registers, for the kernels
 * that turn rows into lanes: simd_tr8 (8 x 8, AVX2: the attention tile
 * fill, the norms, the delta rule) and simd_tr16 (16 x 16, AVX-512: the
 * matmul tiles, the norms, the delta rule). Include it only from files
 * built with AVX2 flags (*_avx2.c, *_avx512.c); simd_tr16 carries its own
 * target attribute and is called only from AVX-512 code. */
#ifndef STRATA_SIMD_TR_H
#define STRATA_SIMD_TR_H

#include <immintrin.h>

/* In place: out[c] element r = in[r] element c (floats, or pairs of halves). */
static inline void simd_tr8(__m256 r[8]) {
    __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

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
