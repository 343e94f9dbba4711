/* test_quant_act.c - the activation quantizer writes the same bytes at
 * every kernel level: backend/quant_act_impl.h's C built at 4 and 8 lanes
 * and AVX-512's hand-written code (quant_act_avx512.c). Rows of every
 * activation format and several lengths (Q8_0/Q8_1: 1 to 40 blocks, so
 * groups of 16 with and without padding; Q8_K: 1 to 5 super-blocks),
 * values over a wide range with exact ties. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/quant.h"
#include "test.h"

static void fill(float *x, int n, uint32_t seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        float v = (float)((int32_t)(seed >> 8) - (1 << 23)) / (float)(1 << 18); /* about +-32 */
        x[i] = (i % 17 == 0) ? (float)(i % 9) - 4.0f : v;                        /* some exact values */
    }
}

TEST(quant_act_levels_write_the_same_bytes) {
    const qtype acts[] = {QT_Q8_0, QT_Q8_1, QT_Q8_K};
    const int lens[][4] = {{32, 96, 576, 1280}, {32, 96, 576, 1280}, {256, 512, 768, 1280}};
    for (int a = 0; a < 3; a++) {
        for (int li = 0; li < 4; li++) {
            int n = lens[a][li];
            size_t bytes = quant_act_row_bytes(acts[a], n);
            float *x = malloc((size_t)n * sizeof(float));
            uint8_t *base = malloc(bytes), *lv = malloc(bytes);
            fill(x, n, (uint32_t)(7 * n + a));
            quant_act_row_level(QUANT_SCALAR, acts[a], x, base, n);
            for (int level = QUANT_AVX2; level <= quant_level(); level++) {
                memset(lv, 0xAB, bytes);
                quant_act_row_level(level, acts[a], x, lv, n);
                CHECK_MSG(memcmp(base, lv, bytes) == 0, "act type %d, n %d, level %d", (int)acts[a], n, level);
            }
            free(x), free(base), free(lv);
        }
    }
}

/* Rows with an all-zero block (id = 0), a block of -0 and tiny values,
 * one of huge ones, exact ties, NaNs among values, an infinity, and all
 * NaN, at every level; the same for Q8_K below (the AVX-512 code is
 * written by hand: quant_act_avx512.c). */
TEST(quant_act_special_blocks_same_bytes) {
    enum { N = 224 };
    float x[N];
    for (int i = 0; i < N; i++) {
        int b = i / 32;
        x[i] = b == 0 ? 0.0f : b == 1 ? (i % 2 ? -0.0f : 1e-30f * (float)(i % 7))
             : b == 2 ? 3e38f * ((i % 5) - 2) / 2.0f : b == 3 ? (float)(i % 9) - 4.0f
             : b == 4 ? -(float)(i % 33) / 8.0f : b == 5 ? (i % 7 == 0 ? NAN : i == 170 ? -INFINITY : (float)(i % 5))
             : (i % 2 ? NAN : -NAN);
    }
    const qtype acts[] = {QT_Q8_0, QT_Q8_1};
    for (int a = 0; a < 2; a++) {
        size_t bytes = quant_act_row_bytes(acts[a], N);
        uint8_t *base = malloc(bytes), *lv = malloc(bytes);
        quant_act_row_level(QUANT_SCALAR, acts[a], x, base, N);
        for (int level = QUANT_AVX2; level <= quant_level(); level++) {
            memset(lv, 0xAB, bytes);
            quant_act_row_level(level, acts[a], x, lv, N);
            CHECK_MSG(memcmp(base, lv, bytes) == 0, "act type %d, level %d", (int)acts[a], level);
        }
        free(base), free(lv);
    }
    /* Q8_K (256-value blocks): all zero, the specials above, all NaN, an
     * infinity among huge values */
    enum { NK = 1024 };
    float *xk = malloc(NK * sizeof(float));
    for (int i = 0; i < NK; i++)
        xk[i] = i < 256 ? 0.0f : i < 512 ? x[(i - 256) % N] : i < 768 ? NAN : i == 900 ? INFINITY : 1e38f * (i % 3);
    size_t bytes = quant_act_row_bytes(QT_Q8_K, NK);
    uint8_t *base = malloc(bytes), *lv = malloc(bytes);
    quant_act_row_level(QUANT_SCALAR, QT_Q8_K, xk, base, NK);
    for (int level = QUANT_AVX2; level <= quant_level(); level++) {
        memset(lv, 0xAB, bytes);
        quant_act_row_level(level, QT_Q8_K, xk, lv, NK);
        CHECK_MSG(memcmp(base, lv, bytes) == 0, "Q8_K, level %d", level);
    }
    free(xk), free(base), free(lv);
}

/* quant_act_part: a row written in parts at block edges (model/ffn.c's
 * work items), last part first and onto garbage, gives quant_act_row's
 * bytes at every level. Q8_0/Q8_1 at 20 blocks (12 padding blocks the
 * last part must zero) and 48; Q8_K at 3 and 6 super-blocks; F32. */
TEST(quant_act_parts_write_the_row) {
    const qtype acts[] = {QT_Q8_0, QT_Q8_1, QT_Q8_K, QT_F32};
    const int lens[][2] = {{640, 1536}, {640, 1536}, {768, 1536}, {640, 1536}};
    for (int a = 0; a < 4; a++)
        for (int li = 0; li < 2; li++) {
            int n = lens[a][li], blk = acts[a] == QT_Q8_K ? 256 : 32;
            size_t bytes = quant_act_row_bytes(acts[a], n);
            float *x = malloc((size_t)n * sizeof(float));
            uint8_t *want = malloc(bytes), *got = malloc(bytes);
            fill(x, n, (uint32_t)(3 * n + a));
            quant_act_row(acts[a], x, want, n);
            for (int level = QUANT_SCALAR; level <= quant_level(); level++)
                for (int part = blk; part <= 4 * blk; part *= 2) {
                    memset(got, 0xAB, bytes);
                    for (int i1 = n; i1 > 0;) {
                        int i0 = (i1 - 1) / part * part; /* the last, maybe short, part first */
                        quant_act_part_level(level, acts[a], x + i0, got, n, i0, i1);
                        i1 = i0;
                    }
                    CHECK_MSG(memcmp(want, got, bytes) == 0, "act %d, n %d, level %d, parts of %d", (int)acts[a], n,
                              level, part);
                }
            free(x), free(want), free(got);
        }
}
