/* norm.h - RMS norm of rows, the models' rmsnorm: out = x * scale * w
 * with scale = 1 / sqrt(ss / n + eps), ss the row's sum of squares added
 * one element after the other (ss = ss + x_i * x_i, each product and sum
 * rounded; ISO C contracts nothing into FMA), and each output element
 * two roundings, (x_i * scale) * w_i. Every level gives these bits: the
 * SIMD levels run several rows' chains side by side, one row per lane,
 * so each lane's sum is still its own row's in its order.
 * Does not: threads (model/forward.c splits rows over the pool). */
#ifndef STRATA_BACKEND_NORM_H
#define STRATA_BACKEND_NORM_H

#include <stddef.h>

/* `rows` rows of n floats, stride floats apart (out likewise; out may be
 * x). */
void norm_rms_rows(float *out, const float *x, size_t stride, const float *w, int rows, int n, float eps);
/* The same at a kernel level (QUANT_SCALAR..QUANT_AVX512, capped at what
 * the CPU has): tests compare the levels' bits. */
void norm_rms_rows_level(int level, float *out, const float *x, size_t stride, const float *w, int rows, int n,
                         float eps);

#endif
