/* norm_avx512.c - norm.h's RMS norm at AVX-512: 16 rows a pass, one per
 * lane (16 x 16 transposes), 16 elements a step when scaling; the bits of
 * the base build. */
#include <immintrin.h>

#include "backend/simd_tr.h"

#define NORM_L 16
typedef __m512 norm_vec;
static inline norm_vec norm_set1(float v) { return _mm512_set1_ps(v); }
static inline norm_vec norm_loadu(const float *p) { return _mm512_loadu_ps(p); }
static inline void norm_storeu(float *p, norm_vec v) { _mm512_storeu_ps(p, v); }
static inline norm_vec norm_mul(norm_vec a, norm_vec b) { return _mm512_mul_ps(a, b); }

/* Elements 16 at a time per row, transposed so that vector j holds
 * element i + j of every row, then added to the rows' sums in order (a
 * last partial step: zeros loaded, their squares never added). The 16
 * rows are 16 streams the hardware prefetcher left waiting on L2/memory
 * (half the function's time at the loads, Gemma 3 pp512): each row's
 * data 256 bytes ahead is prefetched (2.3% -> 1.6% of the prefill). */
static void norm_sumsq(const float *const *rx, int n, float *ss) {
    __m512 s = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16) {
        const int m = n - i < 16 ? n - i : 16;
        const __mmask16 km = (__mmask16)((1u << m) - 1);
        __m512i t[16];
        for (int j = 0; j < 16; j++) {
            _mm_prefetch((const char *)(rx[j] + i) + 256, _MM_HINT_T0);
            t[j] = _mm512_castps_si512(_mm512_maskz_loadu_ps(km, rx[j] + i));
        }
        simd_tr16(t);
        for (int j = 0; j < m; j++) {
            __m512 v = _mm512_castsi512_ps(t[j]);
            s = _mm512_add_ps(s, _mm512_mul_ps(v, v));
        }
    }
    _mm512_storeu_ps(ss, s);
}

#include "backend/norm_impl.h"

void norm_rms_rows_avx512(float *out, const float *x, size_t stride, const float *w, int rows, int n, float eps);

void norm_rms_rows_avx512(float *out, const float *x, size_t stride, const float *w, int rows, int n, float eps) {
    norm_rows_simd(out, x, stride, w, rows, n, eps);
}
