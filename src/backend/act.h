/* act.h - GELU (tanh form) gated, g[i] = gelu(g[i]) * u[i], for Gemma 3's
 * feed-forward.
 *
 * It is built on an exp of our own (act_expf: range reduction to
 * |r| <= ln2/2 and a degree-7 polynomial, relative error < 2e-7), in
 * plain C with no library call and no branch (act_impl.h), so the
 * compiler vectorises the loops, at 4, 8 or 16 lanes by the kernel level
 * (quant_level), and every machine and level computes the same bits (no
 * FMA contraction in ISO C mode). libm's tanhf and expf, called once per
 * element, were a fifth of Gemma 3's prefill. (SwiGLU keeps libm's
 * expf's bits, vectorised in vexp.h: model/forward.c says why.)
 * Does not: know about rows, threads or models (model/forward.c). */
#ifndef STRATA_BACKEND_ACT_H
#define STRATA_BACKEND_ACT_H

#include <stddef.h>

/* e^x for x in [-87, 88] (clamped there: no inf, no denormal). */
float act_expf(float x);
/* GEGLU, tanh form (gelu_pytorch_tanh): g = 0.5 g (1 + tanh(y)) * u with
 * y = sqrt(2/pi) (g + 0.044715 g^3), computed as g / (1 + e^(-2y)) * u. */
void act_gelu_tanh_mul(float *g, const float *u, size_t n);
/* The same at a given kernel level (QUANT_SCALAR..QUANT_AVX512, capped at
 * what the CPU has): tests compare the levels' bits. */
void act_gelu_tanh_mul_level(int level, float *g, const float *u, size_t n);

#endif
