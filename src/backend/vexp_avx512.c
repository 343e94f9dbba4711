/* vexp_avx512.c - libm's expf, 16 floats at a time (AVX-512F/DQ): each
 * half of 8 widened to doubles and taken through glibc's steps
 * (vexp_impl.h), the 32-entry table read by two two-register permutes.
 * The loops are vexp_loops.h's. */
#include <immintrin.h>
#include <stdint.h>

#include "backend/vexp_impl.h"

typedef __m512 vx;
#define VX_W 16

#define vx_min _mm512_min_ps
#define vx_max _mm512_max_ps

/* The table in four registers, entry i less i << 47 in its bits (as
 * glibc keeps it): adding k << 47 then puts k div 32 into the exponent and
 * takes i = k mod 32 back out, one shift instead of two per vector. */
typedef struct {
    __m512i t[4];
} vx_tab;

static inline vx_tab vx_tab_make(void) {
    vx_tab T;
    const __m512i iota = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
    for (int j = 0; j < 4; j++) {
        __m512i i = _mm512_add_epi64(iota, _mm512_set1_epi64(8 * j));
        T.t[j] = _mm512_sub_epi64(_mm512_loadu_si512(vexp__exp2_32 + 8 * j), _mm512_slli_epi64(i, 47));
    }
    return T;
}

/* 8 lanes of glibc's main path, in double, to float once. */
static inline __m256 exp8(const vx_tab *T, __m256 x) {
    const __m512d inv = _mm512_set1_pd(VEXP_INV_LN2_N), shift = _mm512_set1_pd(VEXP_SHIFT);
    __m512d xd = _mm512_cvtps_pd(x);
    __m512d z = _mm512_fmadd_pd(inv, xd, shift); /* k in the low bits */
    __m512i ki = _mm512_castpd_si512(z);
    __m512d r = _mm512_fmsub_pd(inv, xd, _mm512_sub_pd(z, shift));
    /* 2^(i/32) for i = k mod 32 (bits 0-3 pick among 16, bit 4 among the
     * halves), k div 32 added to its exponent */
    __m512i lo = _mm512_permutex2var_epi64(T->t[0], ki, T->t[1]);
    __m512i hi = _mm512_permutex2var_epi64(T->t[2], ki, T->t[3]);
    __m512i s = _mm512_mask_blend_epi64(_mm512_test_epi64_mask(ki, _mm512_set1_epi64(16)), lo, hi);
    s = _mm512_add_epi64(s, _mm512_slli_epi64(ki, 47));
    __m512d p = _mm512_fmadd_pd(_mm512_set1_pd(VEXP_C0), r, _mm512_set1_pd(VEXP_C1));
    __m512d q = _mm512_fmadd_pd(_mm512_set1_pd(VEXP_C2), r, _mm512_set1_pd(1.0));
    p = _mm512_fmadd_pd(p, _mm512_mul_pd(r, r), q);
    return _mm512_cvtpd_ps(_mm512_mul_pd(p, _mm512_castsi512_pd(s)));
}

static inline vx vx_exp_main(const vx_tab *T, vx x) {
    __m256 e0 = exp8(T, _mm512_castps512_ps256(x)), e1 = exp8(T, _mm512_extractf32x8_ps(x, 1));
    return _mm512_insertf32x8(_mm512_castps256_ps512(e0), e1, 1);
}

static inline unsigned vx_special(vx x) {
    __m512i ax = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MAX));
    return _mm512_cmpge_epi32_mask(ax, _mm512_set1_epi32(VEXP_SPECIAL_ABS));
}

#define VX_LEVEL avx512
#include "backend/vexp_loops.h"
