/* act.c - gated GELU over an exp of our own (see act.h): the base build
 * and the choice of level. */
#include "backend/act.h"

#include "backend/act_impl.h"
#include "backend/quant.h"

/* The wider builds of the same code (act_avx2.c, act_avx512.c). */
void act_gelu_tanh_mul_avx2(float *g, const float *u, size_t n);
void act_gelu_tanh_mul_avx512(float *g, const float *u, size_t n);

float act_expf(float x) { return act__exp_clamped(x); }

void act_gelu_tanh_mul_level(int level, float *g, const float *u, size_t n) {
    if (level > quant_level()) level = quant_level();
    if (level >= QUANT_AVX512) act_gelu_tanh_mul_avx512(g, u, n);
    else if (level >= QUANT_AVX2) act_gelu_tanh_mul_avx2(g, u, n);
    else act__gelu_tanh_mul(g, u, n);
}

void act_gelu_tanh_mul(float *g, const float *u, size_t n) { act_gelu_tanh_mul_level(quant_level(), g, u, n); }
