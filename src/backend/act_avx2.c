/* act_avx2.c - the gated GELU built for AVX2 (8 lanes): act_impl.h's code,
 * the same bits as the base build. */
#include "backend/act_impl.h"

void act_gelu_tanh_mul_avx2(float *g, const float *u, size_t n);

void act_gelu_tanh_mul_avx2(float *g, const float *u, size_t n) { act__gelu_tanh_mul(g, u, n); }
