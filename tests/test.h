/* test.h - the unit-test registry.
 *
 * Each tests/test_<module>.c defines tests with TEST(name) { ... }; they
 * register themselves at start-up. build/strata-tests runs every test, each
 * in its own child process (a crash fails one test, not the run), or only
 * the tests named on the command line (or matching a prefix ending in '*').
 * Tests need no model and no GPU unless their name starts with "real_":
 * those read the default model and are skipped when STRATA_MODEL is unset.
 * Tests named "gpu_*" run on a CUDA GPU (tests/test_cuda.c) and only when
 * STRATA_TEST_GPU is set (`make test-gpu`); elsewhere they are skipped.
 * Fixtures made by tools/ live under tests/data/gen/ (TEST_DATA_DIR). */
#ifndef STRATA_TEST_H
#define STRATA_TEST_H

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef void (*test_fn)(void);
void test_register(const char *name, test_fn fn, const char *file);
void test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Failed checks so far in the running test. */
int test_failures(void);
/* Path of a generated fixture: TEST_DATA_DIR "/" rel (static buffer). */
const char *test_data(const char *rel);
/* Path of the real default model, or NULL (test then returns early). */
const char *test_real_model(void);
/* Gemma 3 270M (STRATA_GEMMA3_MODEL): tests named gemma3_* skip without it. */
const char *test_gemma3_model(void);

#define TEST(name)                                                        \
    static void name(void);                                               \
    __attribute__((constructor)) static void register_##name(void) {      \
        test_register(#name, name, __FILE__);                             \
    }                                                                     \
    static void name(void)

#define CHECK(cond)                                                       \
    do {                                                                  \
        if (!(cond)) test_fail(__FILE__, __LINE__, "CHECK(%s)", #cond);   \
    } while (0)

#define CHECK_MSG(cond, ...)                                              \
    do {                                                                  \
        if (!(cond)) test_fail(__FILE__, __LINE__, __VA_ARGS__);          \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                \
    do {                                                                  \
        long long va_ = (long long)(a), vb_ = (long long)(b);             \
        if (va_ != vb_)                                                   \
            test_fail(__FILE__, __LINE__, "%s == %s (%lld != %lld)", #a,  \
                      #b, va_, vb_);                                      \
    } while (0)

#define CHECK_STR(a, b)                                                   \
    do {                                                                  \
        const char *sa_ = (a), *sb_ = (b);                                \
        if (strcmp(sa_, sb_) != 0)                                        \
            test_fail(__FILE__, __LINE__, "%s == %s (\"%s\" != \"%s\")",  \
                      #a, #b, sa_, sb_);                                  \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                             \
    do {                                                                  \
        double va_ = (a), vb_ = (b);                                      \
        if (!(fabs(va_ - vb_) <= (tol)))                                  \
            test_fail(__FILE__, __LINE__, "%s ~ %s (%g vs %g, tol %g)",   \
                      #a, #b, va_, vb_, (double)(tol));                   \
    } while (0)

#endif
