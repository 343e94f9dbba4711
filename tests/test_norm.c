/* test_norm.c - the RMS norm of rows (backend/norm): every level gives
 * the bits of one row's plain loop (a chain of adds in element order,
 * then (x * scale) * w), whatever the number of rows, their length, their
 * stride, in place or not. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/norm.h"
#include "backend/quant.h"
#include "test.h"

/* One row as the models have always computed it. */
static void ref_row(float *out, const float *x, const float *w, int n, float eps) {
    float ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    float scale = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
}

static float rnd(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    int e = (int)(*s >> 60) - 8; /* magnitudes 2^-8 .. 2^7: the sums' roundings matter */
    return ldexpf((float)((int64_t)(*s >> 33) - (1ll << 30)) / (float)(1 << 30), e);
}

TEST(norm_levels_give_the_bits_of_one_row) {
    static const int rows_[] = {1, 2, 3, 4, 5, 8, 9, 15, 16, 17, 33};
    static const int ns[] = {1, 7, 16, 64, 250, 256, 640};
    const float eps = 1e-6f;
    uint64_t s = 77;
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
        for (size_t ri = 0; ri < sizeof rows_ / sizeof rows_[0]; ri++) {
            const int n = ns[ni], rows = rows_[ri];
            const size_t stride = (size_t)n + 3;
            float *x = malloc(sizeof(float) * stride * rows), *w = malloc(sizeof(float) * n);
            float *ref = malloc(sizeof(float) * stride * rows), *out = malloc(sizeof(float) * stride * rows);
            for (size_t i = 0; i < stride * rows; i++) x[i] = rnd(&s);
            for (int i = 0; i < n; i++) w[i] = 1.0f + rnd(&s);
            for (int r = 0; r < rows; r++) ref_row(ref + r * stride, x + r * stride, w, n, eps);
            for (int level = QUANT_SCALAR; level <= quant_level(); level++) {
                int bad = 0;
                memset(out, 0, sizeof(float) * stride * rows);
                norm_rms_rows_level(level, out, x, stride, w, rows, n, eps);
                for (int r = 0; r < rows; r++) bad += memcmp(out + r * stride, ref + r * stride, sizeof(float) * n) != 0;
                float *xi = malloc(sizeof(float) * stride * rows); /* in place */
                memcpy(xi, x, sizeof(float) * stride * rows);
                norm_rms_rows_level(level, xi, xi, stride, w, rows, n, eps);
                for (int r = 0; r < rows; r++) bad += memcmp(xi + r * stride, ref + r * stride, sizeof(float) * n) != 0;
                CHECK_MSG(bad == 0, "level %d, %d rows of %d: %d rows differ from one row's loop", level, rows, n, bad);
                free(xi);
            }
            free(x), free(w), free(ref), free(out);
        }
}
