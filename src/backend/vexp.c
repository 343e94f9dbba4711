/* vexp.c - libm's expf over arrays (vexp.h): the table, the scalar loops,
 * the check of each vector level against libm, and the choice of level. */
#include "backend/vexp.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "backend/quant.h"
#include "backend/vexp_impl.h"

/* The wider builds (vexp_avx2.c, vexp_avx512.c; vexp_impl.h's loops). */
void vexp_expf_avx2(float *y, const float *x, size_t n);
void vexp_silu_mul_avx2(float *out, const float *g, const float *u, size_t n);
void vexp_sigmoid_mul_avx2(float *o, const float *g, size_t n);
void vexp_expf_avx512(float *y, const float *x, size_t n);
void vexp_silu_mul_avx512(float *out, const float *g, const float *u, size_t n);
void vexp_sigmoid_mul_avx512(float *o, const float *g, size_t n);
void vexp_swiglu_oai_avx2(float *out, const float *g, const float *u, size_t n, float alpha, float limit);
void vexp_swiglu_oai_avx512(float *out, const float *g, const float *u, size_t n, float alpha, float limit);

/* 2^(i/32), correctly rounded (glibc's table holds the same doubles, less
 * i << 47 in their bits; test_vexp checks them against exp2l). */
const double vexp__exp2_32[32] = {
    0x1.0000000000000p+0, 0x1.059b0d3158574p+0, 0x1.0b5586cf9890fp+0, 0x1.11301d0125b51p+0,
    0x1.172b83c7d517bp+0, 0x1.1d4873168b9aap+0, 0x1.2387a6e756238p+0, 0x1.29e9df51fdee1p+0,
    0x1.306fe0a31b715p+0, 0x1.371a7373aa9cbp+0, 0x1.3dea64c123422p+0, 0x1.44e086061892dp+0,
    0x1.4bfdad5362a27p+0, 0x1.5342b569d4f82p+0, 0x1.5ab07dd485429p+0, 0x1.6247eb03a5585p+0,
    0x1.6a09e667f3bcdp+0, 0x1.71f75e8ec5f74p+0, 0x1.7a11473eb0187p+0, 0x1.82589994cce13p+0,
    0x1.8ace5422aa0dbp+0, 0x1.93737b0cdc5e5p+0, 0x1.9c49182a3f090p+0, 0x1.a5503b23e255dp+0,
    0x1.ae89f995ad3adp+0, 0x1.b7f76f2fb5e47p+0, 0x1.c199bdd85529cp+0, 0x1.cb720dcef9069p+0,
    0x1.d5818dcfba487p+0, 0x1.dfc97337b9b5fp+0, 0x1.ea4afa2a490dap+0, 0x1.f50765b6e4540p+0,
};

void vexp__fix(float *e, const float *x, unsigned mask) {
    for (; mask; mask &= mask - 1) {
        int i = __builtin_ctz(mask);
        e[i] = expf(x[i]);
    }
}

void vexp__expf_scalar(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = expf(x[i]);
}

void vexp__silu_mul_scalar(float *out, const float *g, const float *u, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float s = g[i] / (1.0f + expf(-g[i]));
        out[i] = u ? s * u[i] : s;
    }
}

void vexp__sigmoid_mul_scalar(float *o, const float *g, size_t n) {
    for (size_t i = 0; i < n; i++) o[i] *= 1.0f / (1.0f + expf(-g[i]));
}

void vexp__swiglu_oai_scalar(float *out, const float *g, const float *u, size_t n, float alpha, float limit) {
    for (size_t i = 0; i < n; i++) {
        float x = g[i] < limit ? g[i] : limit, y = u[i] < -limit ? -limit : u[i] > limit ? limit : u[i];
        out[i] = x / (1.0f + expf(alpha * -x)) * (y + 1.0f);
    }
}

/* ---- the check against libm and the level ---------------------------- */

enum { CHECK_N = 4096 };

/* Inputs where a rounding step or a branch of glibc's could differ: every
 * float around its thresholds (88, 0x1.62e42ep6 overflow, the underflow
 * ones near -103, the subnormal results below -87.3), a sweep of
 * [-110, 110], small magnitudes, specials, and pseudo-random bit patterns. */
static void check_inputs(float *x) {
    static const uint32_t edges[] = {0x42b00000, 0x42b17217, 0xc2b00000, 0xc2aeac50, 0xc2ce8ecf, 0xc2cff1b4};
    int n = 0;
    for (int e = 0; e < 6; e++)
        for (int d = -64; d < 64; d++) {
            uint32_t b = edges[e] + (uint32_t)d;
            memcpy(&x[n++], &b, 4);
        }
    for (int i = 0; i < 2048; i++) x[n++] = -110.0f + (float)i * (220.0f / 2048);
    for (int i = 0; i < 256; i++) x[n++] = ldexpf(1.0f + (float)i / 256, -(i % 40)) * (i & 1 ? -1.0f : 1.0f);
    const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 1e-45f, -1e-45f, 3.4e38f, -3.4e38f};
    for (size_t i = 0; i < sizeof specials / sizeof *specials; i++) x[n++] = specials[i];
    for (uint32_t r = 12345; n < CHECK_N;) {
        r = r * 1664525u + 1013904223u;
        memcpy(&x[n++], &r, 4);
    }
}

static int level_matches_libm(int level) {
    static float x[CHECK_N], want[CHECK_N], got[CHECK_N];
    check_inputs(x);
    vexp__expf_scalar(want, x, CHECK_N);
    vexp_expf_level(level, got, x, CHECK_N);
    return memcmp(want, got, sizeof got) == 0;
}

static int g_level = QUANT_SCALAR;
static pthread_once_t g_level_once = PTHREAD_ONCE_INIT;

static void pick_level(void) {
    int top = quant_level() > QUANT_AVX512 ? QUANT_AVX512 : quant_level();
    for (g_level = top; g_level > QUANT_SCALAR && !level_matches_libm(g_level); g_level--) {
    }
}

int vexp_level(void) {
    pthread_once(&g_level_once, pick_level);
    return g_level;
}

static int cap(int level) { return level > quant_level() ? quant_level() : level; }

void vexp_expf_level(int level, float *y, const float *x, size_t n) {
    level = cap(level);
    if (level >= QUANT_AVX512) vexp_expf_avx512(y, x, n);
    else if (level >= QUANT_AVX2) vexp_expf_avx2(y, x, n);
    else vexp__expf_scalar(y, x, n);
}

void vexp_silu_mul_level(int level, float *out, const float *g, const float *u, size_t n) {
    level = cap(level);
    if (level >= QUANT_AVX512) vexp_silu_mul_avx512(out, g, u, n);
    else if (level >= QUANT_AVX2) vexp_silu_mul_avx2(out, g, u, n);
    else vexp__silu_mul_scalar(out, g, u, n);
}

void vexp_sigmoid_mul_level(int level, float *o, const float *g, size_t n) {
    level = cap(level);
    if (level >= QUANT_AVX512) vexp_sigmoid_mul_avx512(o, g, n);
    else if (level >= QUANT_AVX2) vexp_sigmoid_mul_avx2(o, g, n);
    else vexp__sigmoid_mul_scalar(o, g, n);
}

void vexp_swiglu_oai_level(int level, float *out, const float *g, const float *u, size_t n, float alpha,
                           float limit) {
    level = cap(level);
    if (level >= QUANT_AVX512) vexp_swiglu_oai_avx512(out, g, u, n, alpha, limit);
    else if (level >= QUANT_AVX2) vexp_swiglu_oai_avx2(out, g, u, n, alpha, limit);
    else vexp__swiglu_oai_scalar(out, g, u, n, alpha, limit);
}

void vexp_expf(float *y, const float *x, size_t n) { vexp_expf_level(vexp_level(), y, x, n); }

void vexp_silu_mul(float *out, const float *g, const float *u, size_t n) {
    vexp_silu_mul_level(vexp_level(), out, g, u, n);
}

void vexp_sigmoid_mul(float *o, const float *g, size_t n) { vexp_sigmoid_mul_level(vexp_level(), o, g, n); }

void vexp_swiglu_oai(float *out, const float *g, const float *u, size_t n, float alpha, float limit) {
    vexp_swiglu_oai_level(vexp_level(), out, g, u, n, alpha, limit);
}
