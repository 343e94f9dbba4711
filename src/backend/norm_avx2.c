/* norm_avx2.c - norm.h's RMS norm at AVX2: 8 rows a pass, one per lane
 * (8 x 8 transposes), 8 elements a step when scaling; the bits of the
 * base build. */
#include <immintrin.h>

#include "backend/simd_tr.h"

#define NORM_L 8
typedef __m256 norm_vec;
static inline norm_vec norm_set1(float v) { return _mm256_set1_ps(v); }
static inline norm_vec norm_loadu(const float *p) { return _mm256_loadu_ps(p); }
static inline void norm_storeu(float *p, norm_vec v) { _mm256_storeu_ps(p, v); }
static inline norm_vec norm_mul(norm_vec a, norm_vec b) { return _mm256_mul_ps(a, b); }

/* As norm_avx512.c's, 8 elements a step. */
static void norm_sumsq(const float *const *rx, int n, float *ss) {
    __m256 s = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8) {
        const int m = n - i < 8 ? n - i : 8;
        const __m256i km = _mm256_cmpgt_epi32(_mm256_set1_epi32(m), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        __m256 t[8];
        for (int j = 0; j < 8; j++) {
            _mm_prefetch((const char *)(rx[j] + i) + 256, _MM_HINT_T0);
            t[j] = _mm256_maskload_ps(rx[j] + i, km);
        }
        simd_tr8(t);
        for (int j = 0; j < m; j++) s = _mm256_add_ps(s, _mm256_mul_ps(t[j], t[j]));
    }
    _mm256_storeu_ps(ss, s);
}

#include "backend/norm_impl.h"

void norm_rms_rows_avx2(float *out, const float *x, size_t stride, const float *w, int rows, int n, float eps);

void norm_rms_rows_avx2(float *out, const float *x, size_t stride, const float *w, int rows, int n, float eps) {
    norm_rows_simd(out, x, stride, w, rows, n, eps);
}
