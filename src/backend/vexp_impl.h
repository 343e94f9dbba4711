/* vexp_impl.h - what vexp.c and the level files (vexp_avx2.c,
 * vexp_avx512.c) share: glibc expf's figures and table, the scalar loops
 * (the reference, and every level's tail). The vector loops are
 * vexp_loops.h. */
#ifndef STRATA_BACKEND_VEXP_IMPL_H
#define STRATA_BACKEND_VEXP_IMPL_H

#include <math.h>
#include <stddef.h>

/* glibc's expf (FMA build), figures as published with it (N = 32):
 * k = round(x N/ln2) by adding and taking off 1.5 * 2^52, r = x N/ln2 - k
 * in one FMA, e^x = 2^(k/N) (C0 r^3 + C1 r^2 + C2 r + 1), the cubic's
 * coefficients being those of 2^(r/N). */
#define VEXP_INV_LN2_N 0x1.71547652b82fep+5 /* 32 / ln 2 */
#define VEXP_SHIFT 0x1.8p+52
#define VEXP_C0 0x1.c6af84b912394p-20
#define VEXP_C1 0x1.ebfce50fac4f3p-13
#define VEXP_C2 0x1.62e42ff0c52d6p-6
/* Bits of |x| from which glibc leaves the main path (|x| >= 88: overflow,
 * underflow, inf; NaN above): those lanes take libm's expf itself. */
#define VEXP_SPECIAL_ABS 0x42b00000

/* 2^(i/32), i = 0..31, each rounded to the nearest double (vexp.c). */
extern const double vexp__exp2_32[32];

/* e[i] = expf(x[i]) for each set bit i of mask (a vector's special
 * lanes; out of line: rare). */
void vexp__fix(float *e, const float *x, unsigned mask);

/* The loops with libm's expf per element: the scalar level, and the
 * tail of a row (fewer than a vector's lanes) at every level. */
void vexp__expf_scalar(float *y, const float *x, size_t n);
void vexp__silu_mul_scalar(float *out, const float *g, const float *u, size_t n);
void vexp__sigmoid_mul_scalar(float *o, const float *g, size_t n);
void vexp__swiglu_oai_scalar(float *out, const float *g, const float *u, size_t n, float alpha, float limit);

#endif
