/* test_vexp.c - the vectorised expf (backend/vexp): the bits of libm's
 * expf at every level the CPU has, over every float SwiGLU's gates
 * normally see and every float around glibc's thresholds, plus a stride
 * through all 2^32 patterns (all of them: `make check-vexp`, about a
 * minute); the SiLU, sigmoid and clamped SwiGLU loops against their
 * scalar form; the level's choice. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/quant.h"
#include "backend/vexp.h"
#include "backend/vexp_impl.h"
#include "test.h"

TEST(vexp_table_is_exp2_of_i_over_32) {
    for (int i = 0; i < 32; i++) {
        long double want = exp2l((long double)i / 32), got = vexp__exp2_32[i];
        long double half_ulp = ldexpl(1.0L, -53);
        CHECK_MSG(fabsl(got - want) <= half_ulp, "2^(%d/32): %La vs %La", i, got, want);
    }
}

enum { CHUNK = 1 << 14 };

/* Bit patterns first, first + step, ... (count of them) through the
 * level's expf and libm's; the number that differ (the first few shown). */
static long mismatches(int level, uint32_t first, uint32_t step, uint64_t count) {
    static float x[CHUNK], want[CHUNK], got[CHUNK];
    long bad = 0;
    uint32_t b = first;
    for (uint64_t done = 0; done < count;) {
        size_t n = count - done < CHUNK ? (size_t)(count - done) : CHUNK;
        for (size_t i = 0; i < n; i++, b += step) memcpy(&x[i], &b, 4);
        for (size_t i = 0; i < n; i++) want[i] = expf(x[i]);
        vexp_expf_level(level, got, x, n);
        if (memcmp(want, got, n * 4) != 0)
            for (size_t i = 0; i < n; i++)
                if (memcmp(&want[i], &got[i], 4) != 0 && bad++ < 5)
                    test_fail(__FILE__, __LINE__, "level %s: expf(%a) = %a, vexp %a", quant_level_name(level),
                              (double)x[i], (double)want[i], (double)got[i]);
        done += n;
    }
    return bad;
}

static int top_level(void) { return quant_level() > QUANT_AVX512 ? QUANT_AVX512 : quant_level(); }

/* Every float with 2^-4 <= |x| < 2^7 (SwiGLU's gates live there; it holds
 * all of glibc's thresholds, 88 to 104, and the subnormal results below
 * -87.3), both signs; and all patterns at a stride of 97 (odd: every low
 * bit pattern, every exponent). */
TEST(vexp_same_bits_as_libm) {
    const uint32_t lo = 0x3d800000, hi = 0x43000000;
    for (int level = QUANT_AVX2; level <= top_level(); level++) {
        CHECK_EQ_INT(mismatches(level, lo, 1, hi - lo), 0);
        CHECK_EQ_INT(mismatches(level, lo | 0x80000000u, 1, hi - lo), 0);
        CHECK_EQ_INT(mismatches(level, 0, 97, (1ull << 32) / 97), 0);
    }
}

/* Rows of many lengths (whole vectors and tails), u given or not, in place
 * or not, values across the thresholds: the scalar loop's bits. */
TEST(vexp_silu_sigmoid_swiglu_oai_give_the_scalar_bits) {
    enum { N = 300 };
    static float g[N], u[N], want[N], got[N];
    for (int i = 0; i < N; i++) g[i] = (float)((i * 7919) % 2001 - 1000) * 0.11f, u[i] = 0.25f + (float)(i % 7) * 0.3f;
    g[5] = NAN, g[17] = INFINITY, g[40] = -INFINITY, g[41] = -1e30f;
    for (int level = QUANT_AVX2; level <= top_level(); level++)
        for (size_t n = 1; n <= N; n = n * 2 + 1) {
            vexp_silu_mul_level(QUANT_SCALAR, want, g, u, n);
            vexp_silu_mul_level(level, got, g, u, n);
            CHECK_MSG(memcmp(want, got, n * 4) == 0, "silu_mul level %d, row of %zu", level, n);
            memcpy(got, g, sizeof got);
            vexp_silu_mul_level(level, got, got, NULL, n);
            vexp_silu_mul_level(QUANT_SCALAR, want, g, NULL, n);
            CHECK_MSG(memcmp(want, got, n * 4) == 0, "silu level %d, row of %zu", level, n);
            memcpy(want, u, sizeof want), memcpy(got, u, sizeof got);
            vexp_sigmoid_mul_level(QUANT_SCALAR, want, g, n);
            vexp_sigmoid_mul_level(level, got, g, n);
            CHECK_MSG(memcmp(want, got, n * 4) == 0, "sigmoid_mul level %d, row of %zu", level, n);
        }
    /* gpt-oss's clamped SwiGLU: values across both clamps, NaN g and u */
    float uc[N];
    for (int i = 0; i < N; i++) uc[i] = (float)((i * 4241) % 301 - 150) * 0.1f;
    uc[3] = NAN, uc[9] = -INFINITY, uc[11] = INFINITY, uc[12] = -0.0f;
    for (int level = QUANT_AVX2; level <= top_level(); level++)
        for (size_t n = 1; n <= N; n = n * 2 + 1) {
            vexp_swiglu_oai_level(QUANT_SCALAR, want, g, uc, n, 1.702f, 7.0f);
            vexp_swiglu_oai_level(level, got, g, uc, n, 1.702f, 7.0f);
            CHECK_MSG(memcmp(want, got, n * 4) == 0, "swiglu_oai level %d, row of %zu", level, n);
        }
    /* the scalar loops are the model's expressions */
    for (int i = 0; i < 64; i++) {
        float s = g[i] / (1.0f + expf(-g[i])) * u[i];
        vexp_silu_mul_level(QUANT_SCALAR, got, g + i, u + i, 1);
        CHECK(memcmp(&s, got, 4) == 0);
        float x = g[i] < 7.0f ? g[i] : 7.0f, y = uc[i] < -7.0f ? -7.0f : uc[i] > 7.0f ? 7.0f : uc[i];
        s = x / (1.0f + expf(1.702f * -x)) * (y + 1.0f);
        vexp_swiglu_oai_level(QUANT_SCALAR, got, g + i, uc + i, 1, 1.702f, 7.0f);
        CHECK(memcmp(&s, got, 4) == 0);
    }
}

/* On a machine whose libm is glibc's FMA expf (this project's Debian),
 * the check passes and the loops run at the CPU's vector level; where it
 * fails they fall back to libm, and this test says so. */
TEST(vexp_level_is_the_cpus) {
    CHECK_MSG(vexp_level() == top_level(), "vexp level %s, CPU level %s: libm's expf is not glibc's FMA build?",
              quant_level_name(vexp_level()), quant_level_name(top_level()));
}
