/* vexp.h - expf over arrays with exactly the bits of this machine's libm
 * expf, vectorised (AVX2 + FMA: 8 lanes, AVX-512: 16), and the SiLU /
 * sigmoid loops the models run over it (SwiGLU, gpt-oss's clamped one,
 * qwen35's gates).
 *
 * Why not act_expf (act.h): the models that use SwiGLU were built, cached
 * and tested with libm's expf (model/forward.c, `swiglu_row`), and another
 * exp changes their bits. So this one computes glibc's expf (2.28 and
 * later) step for step: x widened to double, k = round(x * 32/ln2) by a
 * shift constant, r = x * 32/ln2 - k (one FMA), 2^(k/32) from a table of
 * 2^(i/32) and k's high bits, a degree-3 polynomial in double with the
 * FMAs where glibc's FMA build (`__expf_fma`, picked on CPUs with FMA and
 * AVX2) has them, one rounding to float. Lanes with |x| >= 88 or NaN
 * (overflow, underflow, inf, NaN: glibc's special path) go to libm's expf
 * itself.
 *
 * Safe by construction of the choice: the first call checks every vector
 * level against libm's expf on a few thousand inputs (glibc's thresholds,
 * the subnormal range, a sweep); a level that differs anywhere (another
 * libm, another glibc build) is not used, and the loops fall back to
 * libm's expf one element at a time: slower, never other bits.
 *
 * Does not: know about rows, threads or models (model/). */
#ifndef STRATA_BACKEND_VEXP_H
#define STRATA_BACKEND_VEXP_H

#include <stddef.h>

/* y[i] = expf(x[i]) (y may be x). */
void vexp_expf(float *y, const float *x, size_t n);
/* out[i] = g[i] / (1 + expf(-g[i])) * u[i]: SiLU(g) times u, SwiGLU's
 * element (out may be g or u); with u NULL, SiLU alone:
 * out[i] = g[i] / (1 + expf(-g[i])). */
void vexp_silu_mul(float *out, const float *g, const float *u, size_t n);
/* o[i] *= 1 / (1 + expf(-g[i])): times the sigmoid of a gate. */
void vexp_sigmoid_mul(float *o, const float *g, size_t n);
/* gpt-oss's clamped SwiGLU (ggml's swiglu_oai): x = min(g, limit),
 * y = clamp(u, -limit, limit), out = x / (1 + expf(alpha * -x)) * (y + 1);
 * the min and clamp as `g < limit ? g : limit` and `u < -limit ? -limit :
 * u > limit ? limit : u` (a NaN g gives limit, a NaN u stays NaN). */
void vexp_swiglu_oai(float *out, const float *g, const float *u, size_t n, float alpha, float limit);

/* The level the loops above use: QUANT_SCALAR (libm's expf per element),
 * QUANT_AVX2 or QUANT_AVX512 (backend/quant.h), the highest that the CPU
 * has (STRATA_CPU masks it as for the matmuls) and that passed the check
 * against libm. */
int vexp_level(void);
/* The loops at a given level (capped at what the CPU has, not at the
 * check: tests compare a level's bits with libm's directly). */
void vexp_expf_level(int level, float *y, const float *x, size_t n);
void vexp_silu_mul_level(int level, float *out, const float *g, const float *u, size_t n);
void vexp_sigmoid_mul_level(int level, float *o, const float *g, size_t n);
void vexp_swiglu_oai_level(int level, float *out, const float *g, const float *u, size_t n, float alpha, float limit);

#endif
