/* norm_impl.h - what the SIMD builds of norm.h share: the driver over a
 * level's passes of NORM_L rows (one row per lane), written once and
 * included by norm_avx2.c (8 lanes) and norm_avx512.c (16) after they
 * define
 *   NORM_L, norm_vec (NORM_L floats), norm_set1, norm_loadu, norm_storeu,
 *     norm_mul (one IEEE multiply per lane; never an FMA);
 *   norm_sumsq(x, stride, n, ss): the sums of squares of the NORM_L rows
 *     at x, each a chain in element order, to ss[0 .. NORM_L).
 * No include guard: one inclusion per level file. */
#include <math.h>

/* out = x * scale * w: (x_i * scale) * w_i, NORM_L elements a step. */
static void norm_scale_row(float *out, const float *x, const float *w, int n, float ss, float eps) {
    const float scale = 1.0f / sqrtf(ss / (float)n + eps);
    const norm_vec sv = norm_set1(scale);
    int i = 0;
    for (; i + NORM_L <= n; i += NORM_L)
        norm_storeu(out + i, norm_mul(norm_mul(norm_loadu(x + i), sv), norm_loadu(w + i)));
    for (; i < n; i++) out[i] = x[i] * scale * w[i];
}

static void norm_rows_simd(float *out, const float *x, size_t stride, const float *w, int rows, int n, float eps) {
    int r = 0;
    for (; r + 1 < rows; r += NORM_L) { /* a short last pass repeats its last row (sums dropped) */
        const float *rx[NORM_L];
        float ss[NORM_L];
        for (int j = 0; j < NORM_L; j++) rx[j] = x + (size_t)(r + j < rows ? r + j : rows - 1) * stride;
        norm_sumsq(rx, n, ss);
        for (int j = 0; j < NORM_L && r + j < rows; j++)
            norm_scale_row(out + (size_t)(r + j) * stride, rx[j], w, n, ss[j], eps);
    }
    if (r < rows) { /* one row: its chain alone */
        const float *xr = x + (size_t)r * stride;
        float ss = 0;
        for (int i = 0; i < n; i++) ss += xr[i] * xr[i];
        norm_scale_row(out + (size_t)r * stride, xr, w, n, ss, eps);
    }
}
