/* conv.c - the causal conv's sum (see conv.h): the base build and the
 * choice of level. */
#include "backend/conv.h"

#include "backend/conv_impl.h"
#include "backend/quant.h"

/* The wider builds of the same code (conv_avx2.c, conv_avx512.c). */
void conv_sum_avx2(float *y, const float *x, const float *const *hist, const float *w, size_t wstride, int K,
                   size_t n);
void conv_sum_avx512(float *y, const float *x, const float *const *hist, const float *w, size_t wstride, int K,
                     size_t n);

void conv_sum_level(int level, float *y, const float *x, const float *const *hist, const float *w, size_t wstride,
                    int K, size_t n) {
    if (level > quant_level()) level = quant_level();
    if (level >= QUANT_AVX512) conv_sum_avx512(y, x, hist, w, wstride, K, n);
    else if (level >= QUANT_AVX2) conv_sum_avx2(y, x, hist, w, wstride, K, n);
    else conv__sum(y, x, hist, w, wstride, K, n);
}

void conv_sum(float *y, const float *x, const float *const *hist, const float *w, size_t wstride, int K, size_t n) {
    conv_sum_level(quant_level(), y, x, hist, w, wstride, K, n);
}
