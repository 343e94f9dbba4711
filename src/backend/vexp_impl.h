/* vexp_impl.h - what vexp.c and the level files (vexp_avx2.c,
 * vexp_avx512.c) share: glibc expf's figures, the scalar loops (the
 * reference, and every level's tail), and the loops over whole vectors,
 * written once over a level's vector type.
 *
 * A level file defines, before including this with VX_LEVEL set to its
 * suffix: the float vector type `vx` of VX_W lanes, vx_load / vx_store
 * (unaligned), vx_add / vx_mul / vx_div (one IEEE operation per lane,
 * never contracted: -std=c11), vx_neg (the sign flipped), vx_set1 and
 * vx_exp (libm's expf per lane, vexp.h). */
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

#ifdef VX_LEVEL
#define VX_CAT2(a, b) a##_##b
#define VX_CAT(a, b) VX_CAT2(a, b)
#define VX_FN(name) VX_CAT(name, VX_LEVEL)

void VX_FN(vexp_expf)(float *y, const float *x, size_t n);
void VX_FN(vexp_silu_mul)(float *out, const float *g, const float *u, size_t n);
void VX_FN(vexp_sigmoid_mul)(float *o, const float *g, size_t n);

/* Whole vectors here, the rest one by one with libm's expf: the same
 * bits, so an element's result does not depend on where its row ends. */
void VX_FN(vexp_expf)(float *y, const float *x, size_t n) {
    size_t i = 0;
    for (; i + VX_W <= n; i += VX_W) vx_store(y + i, vx_exp(vx_load(x + i)));
    vexp__expf_scalar(y + i, x + i, n - i);
}

/* g / (1 + e^-g) * u, the operations of the scalar loop in its order. */
void VX_FN(vexp_silu_mul)(float *out, const float *g, const float *u, size_t n) {
    const vx one = vx_set1(1.0f);
    size_t i = 0;
    for (; i + VX_W <= n; i += VX_W) {
        vx gi = vx_load(g + i), s = vx_div(gi, vx_add(one, vx_exp(vx_neg(gi))));
        vx_store(out + i, u ? vx_mul(s, vx_load(u + i)) : s);
    }
    vexp__silu_mul_scalar(out + i, g + i, u ? u + i : NULL, n - i);
}

void VX_FN(vexp_sigmoid_mul)(float *o, const float *g, size_t n) {
    const vx one = vx_set1(1.0f);
    size_t i = 0;
    for (; i + VX_W <= n; i += VX_W) {
        vx s = vx_div(one, vx_add(one, vx_exp(vx_neg(vx_load(g + i)))));
        vx_store(o + i, vx_mul(vx_load(o + i), s));
    }
    vexp__sigmoid_mul_scalar(o + i, g + i, n - i);
}
#endif

#endif
