/* conv_impl.h - conv_sum's code, included by conv.c and by each level's
 * file (conv_avx2.c, conv_avx512.c) so the compiler vectorises the same C
 * at every width (see conv.h; act_impl.h does the same for the GELU). */
#ifndef STRATA_BACKEND_CONV_IMPL_H
#define STRATA_BACKEND_CONV_IMPL_H

#include <stddef.h>

#define CONV__CB 16 /* channels a step: a fixed count the compiler vectorises whole */

/* Channels [c0, c0 + m) (m <= CONV__CB; m is CONV__CB, a constant after
 * inlining, except in the tail). */
static inline __attribute__((always_inline)) void conv__block(float *restrict y, const float *restrict x,
                                                              const float *const *hist, const float *restrict w,
                                                              size_t wstride, int K, size_t c0, size_t m) {
    float acc[CONV__CB];
    for (size_t l = 0; l < m; l++) acc[l] = 0.0f;
    for (int k = 0; k < K - 1; k++) {
        const float *restrict h = hist[k] + c0, *restrict wk = w + (size_t)k * wstride + c0;
        for (size_t l = 0; l < m; l++) acc[l] += h[l] * wk[l];
    }
    const float *restrict wk = w + (size_t)(K - 1) * wstride + c0;
    for (size_t l = 0; l < m; l++) y[c0 + l] = acc[l] + x[c0 + l] * wk[l];
}

static inline void conv__sum(float *restrict y, const float *restrict x, const float *const *hist,
                             const float *restrict w, size_t wstride, int K, size_t n) {
    size_t c0 = 0;
    for (; c0 + CONV__CB <= n; c0 += CONV__CB) conv__block(y, x, hist, w, wstride, K, c0, CONV__CB);
    if (c0 < n) conv__block(y, x, hist, w, wstride, K, c0, n - c0);
}

#endif
