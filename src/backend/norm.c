/* norm.c - RMS norm of rows (norm.h): the base build and the choice of
 * level. The base build runs the chains of 4 or 8 rows side by side in
 * the lanes of 4-float vectors (GNU C vectors: + and * are one IEEE
 * operation per lane), so they overlap: one row at a time, each add
 * waited ~4 cycles on the one before (the norms were 5% of Gemma 3's
 * prefill). */
#include "backend/norm.h"

#include <math.h>
#include <string.h>

#include "backend/quant.h"

/* The wider builds (norm_avx2.c: 8 rows a pass; norm_avx512.c: 16). */
void norm_rms_rows_avx2(float *out, const float *x, size_t stride, const float *w, int rows, int n, float eps);
void norm_rms_rows_avx512(float *out, const float *x, size_t stride, const float *w, int rows, int n, float eps);

typedef float norm_v4 __attribute__((vector_size(16)));

/* out = x * scale * w, 4 lanes at a time (the compiler left the loop
 * scalar: out may be x); the same two roundings per element. */
static void scale_row(float *out, const float *x, const float *w, int n, float ss, float eps) {
    float scale = 1.0f / sqrtf(ss / (float)n + eps);
    norm_v4 sv = {scale, scale, scale, scale}, xv, wv;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        memcpy(&xv, x + i, sizeof xv);
        memcpy(&wv, w + i, sizeof wv);
        xv = xv * sv * wv;
        memcpy(out + i, &xv, sizeof xv);
    }
    for (; i < n; i++) out[i] = x[i] * scale * w[i];
}

/* s + the squares of elements [i, i + 4) of the 4 rows at x (lane j: row
 * j), added one element after the other: 4 loads and a transpose instead
 * of 16 single loads. */
static inline norm_v4 sumsq_step(const float *x, size_t stride, int i, norm_v4 s) {
    norm_v4 a, b, c, d; /* written out: gcc -O2 kept arrays of them on the stack */
    memcpy(&a, x + i, sizeof a);
    memcpy(&b, x + stride + i, sizeof b);
    memcpy(&c, x + 2 * stride + i, sizeof c);
    memcpy(&d, x + 3 * stride + i, sizeof d);
    norm_v4 v0 = {a[0], b[0], c[0], d[0]}, v1 = {a[1], b[1], c[1], d[1]};
    norm_v4 v2 = {a[2], b[2], c[2], d[2]}, v3 = {a[3], b[3], c[3], d[3]};
    s += v0 * v0;
    s += v1 * v1;
    s += v2 * v2;
    return s + v3 * v3;
}

/* Sums of squares of the 4 rows at x (lanes) and, with two, of the 4 at
 * x + 4 stride. */
static void sumsq_rows(const float *x, size_t stride, int n, int two, norm_v4 *a, norm_v4 *b) {
    const float *y = x + 4 * stride;
    norm_v4 sa = {0}, sb = {0};
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        sa = sumsq_step(x, stride, i, sa);
        if (two) sb = sumsq_step(y, stride, i, sb);
    }
    for (; i < n; i++) {
        norm_v4 va = {x[i], x[stride + i], x[2 * stride + i], x[3 * stride + i]};
        sa += va * va;
        if (two) {
            norm_v4 vb = {y[i], y[stride + i], y[2 * stride + i], y[3 * stride + i]};
            sb += vb * vb;
        }
    }
    *a = sa, *b = sb;
}

static void rms_rows_base(float *out, const float *x, size_t stride, const float *w, int rows, int n, float eps) {
    int r = 0;
    for (int k; (k = rows - r >= 8 ? 8 : rows - r >= 4 ? 4 : 0); r += k) {
        norm_v4 s[2];
        sumsq_rows(x + r * stride, stride, n, k == 8, &s[0], &s[1]);
        for (int j = 0; j < k; j++) scale_row(out + (r + j) * stride, x + (r + j) * stride, w, n, s[j / 4][j % 4], eps);
    }
    for (; r < rows; r++) {
        const float *xr = x + r * stride;
        float ss = 0;
        for (int i = 0; i < n; i++) ss += xr[i] * xr[i];
        scale_row(out + r * stride, xr, w, n, ss, eps);
    }
}

void norm_rms_rows_level(int level, float *out, const float *x, size_t stride, const float *w, int rows, int n,
                         float eps) {
    if (level > quant_level()) level = quant_level();
    if (level >= QUANT_AVX512) norm_rms_rows_avx512(out, x, stride, w, rows, n, eps);
    else if (level >= QUANT_AVX2) norm_rms_rows_avx2(out, x, stride, w, rows, n, eps);
    else rms_rows_base(out, x, stride, w, rows, n, eps);
}

void norm_rms_rows(float *out, const float *x, size_t stride, const float *w, int rows, int n, float eps) {
    norm_rms_rows_level(quant_level(), out, x, stride, w, rows, n, eps);
}
