/* conv_avx512.c - the causal conv's sum built for AVX-512 (16 lanes):
 * conv_impl.h's code, the same bits as the base build. */
#include "backend/conv_impl.h"

void conv_sum_avx512(float *y, const float *x, const float *const *hist, const float *w, size_t wstride, int K,
                   size_t n);

void conv_sum_avx512(float *y, const float *x, const float *const *hist, const float *w, size_t wstride, int K,
                   size_t n) {
    conv__sum(y, x, hist, w, wstride, K, n);
}
