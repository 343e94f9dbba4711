/* test_conv.c - the causal conv's sum (backend/conv): every kernel level
 * gives the bits of the per-channel loop deltanet.c always ran (products
 * and sums rounded apart, oldest input first), for any channel count and
 * tap count, with edge values (NaN, infinities, -0, subnormals) among the
 * inputs. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/conv.h"
#include "backend/quant.h"
#include "test.h"

enum { N = 200, KMAX = 5 };

static uint32_t rng = 11;
static float frand(void) {
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xffff) / 16384.0f - 2.0f;
}

/* The loop of deltanet.c before backend/conv: one channel at a time. */
static void ref_sum(float *y, const float *x, const float *const *hist, const float *w, size_t ws, int K, size_t n) {
    for (size_t l = 0; l < n; l++) {
        volatile float acc = 0.0f; /* one rounding per operation */
        for (int k = 0; k < K - 1; k++) {
            volatile float p = hist[k][l] * w[(size_t)k * ws + l];
            acc = acc + p;
        }
        volatile float p = x[l] * w[(size_t)(K - 1) * ws + l];
        y[l] = acc + p;
    }
}

TEST(conv_levels_give_the_bits_of_the_channel_loop) {
    static float x[N], h[KMAX][N], w[KMAX * (N + 3)], ref[N], got[N];
    const size_t ws = N + 3; /* tap rows a stride apart, not n */
    for (int i = 0; i < N; i++) {
        x[i] = frand();
        for (int k = 0; k < KMAX; k++) h[k][i] = frand();
    }
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) w[i] = frand();
    const float edge[] = {NAN, INFINITY, -INFINITY, -0.0f, 1e-40f, -3e-39f, 3e38f};
    for (size_t e = 0; e < sizeof edge / sizeof edge[0]; e++) {
        x[13 + 17 * e] = edge[e];
        h[e % (KMAX - 1)][29 + 11 * e] = edge[e];
        w[(e % KMAX) * ws + 41 + 7 * e] = edge[e];
    }
    const float *hist[KMAX - 1];
    for (int k = 0; k < KMAX - 1; k++) hist[k] = h[k];
    for (int level = QUANT_SCALAR; level <= quant_level(); level++)
        for (int K = 1; K <= KMAX; K++)
            for (size_t n = 1; n <= N; n = n * 2 + 1) {
                ref_sum(ref, x, hist, w, ws, K, n);
                memset(got, 0, sizeof got);
                conv_sum_level(level, got, x, hist, w, ws, K, n);
                CHECK_MSG(memcmp(ref, got, n * sizeof(float)) == 0, "level %d, K %d, %zu channels", level, K, n);
            }
}
