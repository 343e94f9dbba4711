/* vexp_avx2.c - libm's expf, 8 floats at a time (AVX2 + FMA): each half
 * of 4 widened to doubles and taken through glibc's steps (vexp_impl.h's figures),
 * the 32-entry table read by a gather. The loops are vexp_loops.h's. */
#include <immintrin.h>
#include <stdint.h>

#include "backend/vexp_impl.h"

typedef __m256 vx;
#define VX_W 8

#define vx_min _mm256_min_ps
#define vx_max _mm256_max_ps

/* The table stays in memory, where the gather reads it. */
typedef struct {
    const double *t;
} vx_tab;

static inline vx_tab vx_tab_make(void) { return (vx_tab){vexp__exp2_32}; }

/* 4 lanes of glibc's main path, in double, to float once. */
static inline __m128 exp4(const vx_tab *T, __m128 x) {
    const __m256d inv = _mm256_set1_pd(VEXP_INV_LN2_N), shift = _mm256_set1_pd(VEXP_SHIFT);
    __m256d xd = _mm256_cvtps_pd(x);
    __m256d z = _mm256_fmadd_pd(inv, xd, shift); /* k in the low bits */
    __m256i ki = _mm256_castpd_si256(z);
    __m256d r = _mm256_fmsub_pd(inv, xd, _mm256_sub_pd(z, shift));
    /* 2^(i/32) for i = k mod 32, k div 32 added to its exponent */
    __m256i i = _mm256_and_si256(ki, _mm256_set1_epi64x(31));
    __m256i s = _mm256_i64gather_epi64((const long long *)T->t, i, 8);
    s = _mm256_add_epi64(s, _mm256_slli_epi64(_mm256_srli_epi64(ki, 5), 52));
    __m256d p = _mm256_fmadd_pd(_mm256_set1_pd(VEXP_C0), r, _mm256_set1_pd(VEXP_C1));
    __m256d q = _mm256_fmadd_pd(_mm256_set1_pd(VEXP_C2), r, _mm256_set1_pd(1.0));
    p = _mm256_fmadd_pd(p, _mm256_mul_pd(r, r), q);
    return _mm256_cvtpd_ps(_mm256_mul_pd(p, _mm256_castsi256_pd(s)));
}

static inline vx vx_exp_main(const vx_tab *T, vx x) {
    return _mm256_set_m128(exp4(T, _mm256_extractf128_ps(x, 1)), exp4(T, _mm256_castps256_ps128(x)));
}

static inline unsigned vx_special(vx x) {
    __m256i ax = _mm256_and_si256(_mm256_castps_si256(x), _mm256_set1_epi32(INT32_MAX));
    __m256i sp = _mm256_cmpgt_epi32(ax, _mm256_set1_epi32(VEXP_SPECIAL_ABS - 1));
    return (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(sp));
}

#define VX_LEVEL avx2
#include "backend/vexp_loops.h"
