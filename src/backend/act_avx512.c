/* act_avx512.c - the gated GELU built for AVX-512 (16 lanes): act_impl.h's
 * code, the same bits as the base build. */
#include "backend/act_impl.h"

void act_gelu_tanh_mul_avx512(float *g, const float *u, size_t n);

void act_gelu_tanh_mul_avx512(float *g, const float *u, size_t n) { act__gelu_tanh_mul(g, u, n); }
