/* test_act.c - the gated GELU (backend/act): agreement with a
 * float64 reference, finite results at the clamps, and the same bits for
 * an element whether its row is long (vectorised runs) or one element, at
 * every kernel level. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/act.h"
#include "backend/quant.h"
#include "test.h"

TEST(act_expf_within_2e7_of_float64) {
    double worst = 0;
    for (float x = -87.0f; x <= 88.0f; x += 0.0013f) {
        double e = exp((double)x), rel = fabs(act_expf(x) - e) / e;
        if (rel > worst) worst = rel;
    }
    CHECK_MSG(worst < 2e-7, "worst relative error %.3g", worst);
    CHECK(isfinite(act_expf(1000.0f)) && act_expf(1000.0f) > 1e38f); /* clamped at 88 */
    CHECK(act_expf(-1000.0f) > 0 && act_expf(-1000.0f) < 1e-37f);
}

/* GELU's tanh form in float64, as x / (1 + e^-2y) (0.5 x (1 + tanh y)
 * cancels where tanh y is near -1). */
static double gelu_ref(double x) { return x / (1.0 + exp(-2.0 * 0.7978845608028654 * (x + 0.044715 * x * x * x))); }

static double worst_rel(void (*fn)(float *, const float *, size_t), double (*ref)(double), float lo, float hi) {
    enum { N = 4096 };
    float g[N], u[N];
    double worst = 0;
    for (float x0 = lo; x0 < hi; x0 += N * 0.001f) {
        for (int i = 0; i < N; i++) g[i] = x0 + i * 0.001f, u[i] = 1.0f + (float)(i % 3);
        float x[N];
        memcpy(x, g, sizeof x);
        fn(g, u, N);
        for (int i = 0; i < N; i++) {
            double want = ref(x[i]) * u[i];
            if (fabs(want) < 1e-30) continue;
            double rel = fabs(g[i] - want) / fabs(want);
            if (rel > worst) worst = rel;
        }
    }
    return worst;
}

TEST(act_gelu_agrees_with_float64) {
    double g = worst_rel(act_gelu_tanh_mul, gelu_ref, -9.0f, 30.0f);
    /* near -9, e^-2y is e^75: the argument's float rounding (1e-7) times 75 */
    CHECK_MSG(g < 2e-5, "gelu worst relative error %.3g", g);
    float big[2] = {-1e4f, 1e4f}, one[2] = {1, 1};
    act_gelu_tanh_mul(big, one, 2);
    CHECK(big[0] == 0.0f || (isfinite(big[0]) && fabsf(big[0]) < 1e-30f));
    CHECK(big[1] == 1e4f);
}

/* A row of 37 (two runs and a tail of 5) against each element alone. */
TEST(act_same_bits_in_any_row_length) {
    float g[37], u[37], alone[37], row[37];
    for (int i = 0; i < 37; i++) g[i] = (float)(i - 18) * 0.37f, u[i] = 0.5f + i * 0.01f;
    memcpy(row, g, sizeof row);
    act_gelu_tanh_mul(row, u, 37);
    for (int i = 0; i < 37; i++) {
        alone[i] = g[i];
        act_gelu_tanh_mul(&alone[i], &u[i], 1);
    }
    CHECK(memcmp(row, alone, sizeof row) == 0);
}

/* Every kernel level the CPU has computes the base build's bits: the
 * same C at 4, 8 or 16 lanes, with no FMA contraction (act_impl.h). Rows
 * of many lengths, values across the exp's clamps. */
TEST(act_levels_give_the_same_bits) {
    enum { N = 1000 };
    static float g0[N], u[N], base[N], lv[N];
    for (int i = 0; i < N; i++) g0[i] = (float)((i * 7919) % 2001 - 1000) * 0.0137f, u[i] = 0.25f + (float)(i % 7) * 0.3f;
    for (int level = QUANT_AVX2; level <= quant_level(); level++) {
        for (size_t n = 1; n <= N; n = n * 3 + 1) {
            memcpy(base, g0, sizeof base), memcpy(lv, g0, sizeof lv);
            act_gelu_tanh_mul_level(QUANT_SCALAR, base, u, n);
            act_gelu_tanh_mul_level(level, lv, u, n);
            CHECK_MSG(memcmp(base, lv, n * sizeof(float)) == 0, "level %d, row of %zu", level, n);
        }
    }
}

/* The bits every cache and test of Gemma 3 was made with, pinned: an
 * FNV-1a hash of the outputs for one input in 4099 of all 2^32 bit
 * patterns (NaNs, infinities, subnormals and both clamps included), u
 * 1, 1.25 or 1.5, at every level. The value is the hash of the code
 * before the clamps became bit selects (act_impl.h), which was checked
 * equal on all 2^32 inputs. */
TEST(act_gelu_bits_are_pinned) {
    enum { N = 4096 };
    static float g[N], u[N];
    for (int level = QUANT_SCALAR; level <= quant_level(); level++) {
        uint64_t h = 1469598103934665603ull;
        for (uint64_t b0 = 0; b0 < (1ull << 32); b0 += (uint64_t)N * 4099) {
            for (int i = 0; i < N; i++) {
                uint32_t bits = (uint32_t)(b0 + (uint64_t)i * 4099);
                memcpy(&g[i], &bits, 4);
                u[i] = 1.0f + (float)(i % 3) * 0.25f;
            }
            act_gelu_tanh_mul_level(level, g, u, N);
            const unsigned char *p = (const unsigned char *)g;
            for (size_t k = 0; k < sizeof g; k++) h = (h ^ p[k]) * 1099511628211ull;
        }
        CHECK_MSG(h == 0xf4fbd213334ec549ull, "level %d: hash %016llx", level, (unsigned long long)h);
    }
}
