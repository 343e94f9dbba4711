/* act_impl.h - the gated GELU's element code, included by act.c and by
 * each level's file (act_avx2.c, act_avx512.c) so the compiler vectorises
 * the same C at every width. Built with -std=c11, where gcc contracts no
 * a*b+c into an FMA (-ffp-contract=off is the ISO default), so each
 * element goes through the same IEEE operations at every level: one set of
 * bits on every machine (test_act.c compares the levels). */
#ifndef STRATA_BACKEND_ACT_IMPL_H
#define STRATA_BACKEND_ACT_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* c ? a : b as a select of bits, never a branch. Why: with the clamps
 * below written as `x < -87.0f ? -87.0f : x`, gcc 12 (-O3) split the
 * GELU into a path per clamp, folded e^88 into a constant there and,
 * vectorised, computed that path's g / (1 + e^88) on every lane: a
 * subnormal quotient for every ordinary g, a microcode assist per vector
 * (Gemma 3 pp512: the GELU ran at ~4 ns an element, 10% of the prefill;
 * now ~0.7). The values are the ternary's, NaN included (a NaN x fails
 * both compares and stays): every one of the 2^32 inputs gives the same
 * bits (test_act.c pins a hash of the outputs). */
static inline float act__select(int c, float a, float b) {
    int32_t ai, bi, m = -(int32_t)c, r;
    memcpy(&ai, &a, 4);
    memcpy(&bi, &b, 4);
    r = (ai & m) | (bi & ~m);
    memcpy(&a, &r, 4);
    return a;
}

/* e^x = 2^n e^r with n = round(x / ln2) and r = x - n ln2, ln2 split in
 * a part exact in float (0.693359375) and the rest, so r carries no
 * rounding error from n; e^r by its Taylor series to r^7 (|r| <= 0.347:
 * the first term left out is below 4e-9); 2^n added to the exponent
 * bits. Rounding uses the 1.5 * 2^23 trick: adding it leaves n in the
 * low mantissa bits. */
static inline float act__exp_clamped(float x) {
    const float shift = 12582912.0f; /* 1.5 * 2^23 */
    x = act__select(x < -87.0f, -87.0f, x);
    x = act__select(x > 88.0f, 88.0f, x);
    float t = x * 1.44269504088896341f + shift;
    float n = t - shift;
    float r = x - n * 0.693359375f - n * -2.12194440e-4f;
    float p = 1.98412698e-4f; /* 1/7! */
    p = p * r + 1.38888889e-3f;  /* 1/6! */
    p = p * r + 8.33333333e-3f;  /* 1/5! */
    p = p * r + 4.16666667e-2f;  /* 1/4! */
    p = p * r + 1.66666667e-1f;  /* 1/3! */
    p = p * r + 0.5f;
    p = p * r * r + r + 1.0f;
    int32_t ti, pi;
    memcpy(&ti, &t, 4);
    memcpy(&pi, &p, 4);
    pi += (ti - 0x4B400000) * (1 << 23); /* n = t's bits minus shift's */
    memcpy(&p, &pi, 4);
    return p;
}

static inline float act__gelu_mul(float x, float u) {
    float y = 0.79788456080286535588f * x * (1.0f + 0.044715f * x * x);
    return x / (1.0f + act__exp_clamped(-2.0f * y)) * u;
}

/* Elements go in runs of ACT_RUN (a fixed count the compiler vectorises
 * without a cost model's doubts), the rest one by one: the same
 * operations either way, so the bits do not depend on where a row ends. */
#define ACT_RUN 16

static inline void act__gelu_tanh_mul(float *g, const float *u, size_t n) {
    size_t i = 0;
    for (; i + ACT_RUN <= n; i += ACT_RUN)
        for (int k = 0; k < ACT_RUN; k++) g[i + k] = act__gelu_mul(g[i + k], u[i + k]);
    for (; i < n; i++) g[i] = act__gelu_mul(g[i], u[i]);
}

#endif
