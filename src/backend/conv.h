/* conv.h - the sum of a short causal convolution (qwen35's delta-net
 * layers, model/deltanet.c) for one token over n channels:
 *
 *   y[l] = ((0 + h_0[l] w_0[l]) + h_1[l] w_1[l] + ...) + x[l] w_(K-1)[l]
 *
 * with h_k the k-th oldest of the K - 1 earlier inputs, each product and
 * sum rounded apart (no FMA), in that order: the sum as deltanet.c has
 * always computed it. The code is plain C vectorised at 4, 8 or 16 lanes
 * by the kernel level (quant_level), with one set of bits at every level
 * (ISO C mode contracts nothing into an FMA; test_conv.c compares them).
 * Why: at the base flags (4-wide SSE) the sum was ~5% of qwen35's prefill.
 * Does not: the SiLU after it, the state ring, threads (deltanet.c). */
#ifndef STRATA_BACKEND_CONV_H
#define STRATA_BACKEND_CONV_H

#include <stddef.h>

/* Tap k's weights are w + k * wstride (n of them); hist[k] the K - 1
 * earlier inputs, oldest first. K from 1 to CONV_MAX_K. */
#define CONV_MAX_K 16
void conv_sum(float *y, const float *x, const float *const *hist, const float *w, size_t wstride, int K, size_t n);
/* The same at a given kernel level (QUANT_SCALAR..QUANT_AVX512, capped at
 * what the CPU has): tests compare the levels' bits. */
void conv_sum_level(int level, float *y, const float *x, const float *const *hist, const float *w, size_t wstride,
                    int K, size_t n);

#endif
