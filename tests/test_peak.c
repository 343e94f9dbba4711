/* test_peak.c - the int8 peak benchmark (src/backend/peak*): every kind
 * the CPU runs gives a positive rate on 1 and 2 threads, a kind it cannot
 * run gives 0, and the op counts are those the names promise (2 per
 * multiply-add, as the matmul benchmarks count). */
#include "test.h"

#include "backend/peak.h"

TEST(peak_kinds_measure_what_they_promise) {
    for (int k = 0; k < PEAK_KINDS; k++) {
        const char *name = peak_name((peak_kind)k);
        CHECK_MSG(name && name[0] != '?', "kind %d has no name", k);
        double one = peak_measure((peak_kind)k, 1, 0.05), two = peak_measure((peak_kind)k, 2, 0.05);
        if (!peak_available((peak_kind)k)) {
            CHECK_MSG(one == 0 && two == 0, "%s: not available here but measured %.1f", name, one);
            continue;
        }
        CHECK_MSG(one > 1 && two > 1, "%s: %.1f / %.1f G ops/s", name, one, two);
    }
}

/* 2 ops per multiply-add: one round of each kind's chains is a known
 * number of instructions of a known width (peak_avx2.c, peak_avx512.c). */
TEST(peak_op_counts) {
    if (peak_available(PEAK_VNNI512)) CHECK(peak_vnni512_run(3) == 3.0 * 16 * 64 * 2);
    if (peak_available(PEAK_VNNI256)) CHECK(peak_vnni256_run(3) == 3.0 * 12 * 32 * 2);
    if (peak_available(PEAK_MADDUBS256)) CHECK(peak_maddubs256_run(3) == 3.0 * 4 * 8 * 32 * 2);
    if (peak_available(PEAK_AMX64)) CHECK(peak_amx64_run(3) == 3.0 * 4 * 16 * 16 * 64 * 2);
    if (peak_available(PEAK_AMX32)) CHECK(peak_amx32_run(3) == 3.0 * 4 * 16 * 16 * 32 * 2);
}
