/* test_quant.c - tensor formats and matmul kernels (src/backend/quant*).
 *
 * Checks, for every weight type:
 *  - dequantization bit-exact with the gguf Python package (fixtures from
 *    tools/testdata_quant.py);
 *  - quant_gemm against a double-precision reference within a worst-case
 *    error bound (derived at gemm_tolerance);
 *  - batch invariance: a row's bits do not depend on n_tok, the token's
 *    place in the batch, or the [r0, r1) split, at every SIMD level;
 *  - each SIMD level against the scalar kernels;
 * and the fp16/bf16 helpers of base/fp16.h against numpy. */
#include "test.h"
#include "test_util.h"

#include "backend/quant_impl.h"
#include "base/fp16.h"
#include "base/mem.h"

#include <stdint.h>
#include <stdlib.h>

static const qtype WEIGHT_TYPES[] = {QT_Q4_1, QT_Q8_0, QT_Q4_K, QT_Q6_K,
                                     QT_Q5_K, QT_Q4_0, QT_Q5_0, QT_Q5_1,
                                     QT_F16,  QT_BF16, QT_F32, QT_MXFP4};
#define N_WEIGHT_TYPES (int)(sizeof WEIGHT_TYPES / sizeof WEIGHT_TYPES[0])

/* ---- helpers ----------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s) { /* xorshift64* */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

static float rng_unit(uint64_t *s) { /* uniform in [0, 1) */
    return (float)(rng_next(s) >> 40) / (float)(1 << 24);
}

static float rng_normal(uint64_t *s) { /* Irwin-Hall: close enough */
    float a = 0;
    for (int i = 0; i < 12; i++) a += rng_unit(s);
    return a - 6.0f;
}

static void put16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* Offsets of the f16 scale fields of one block, -1 terminated. */
static const int *scale_fields(qtype t) {
    static const int d0[] = {0, -1}, dm[] = {0, 2, -1}, q6[] = {208, -1},
                     none[] = {-1};
    switch (t) {
    case QT_Q4_0: case QT_Q5_0: case QT_Q8_0: return d0;
    case QT_Q4_1: case QT_Q5_1: case QT_Q4_K: case QT_Q5_K: return dm;
    case QT_Q6_K: return q6;
    default: return none;
    }
}

/* Random weight rows: random quant bits, scales of realistic size (the
 * float formats get N(0, 0.1) values). */
static uint8_t *random_weights(qtype t, int rows, int64_t k, uint64_t *s) {
    const quant_traits *tr = quant_get(t);
    size_t rb = quant_row_bytes(t, k), n = rb * (size_t)rows;
    uint8_t *w = malloc(n);
    for (size_t i = 0; i < n; i++) w[i] = (uint8_t)rng_next(s);
    if (tr->blck == 1) {
        for (size_t i = 0; i < (size_t)rows * (size_t)k; i++) {
            float v = 0.1f * rng_normal(s);
            if (t == QT_F32) memcpy(w + 4 * i, &v, 4);
            else put16(w + 2 * i, t == QT_F16 ? f32_to_fp16(v) : f32_to_bf16(v));
        }
        return w;
    }
    if (t == QT_MXFP4) { /* E8M0 exponents of realistic size: 2^-10 .. 2^-2 */
        for (size_t b = 0; b < n / tr->bytes; b++) w[b * tr->bytes] = (uint8_t)(118 + rng_next(s) % 9);
        return w;
    }
    for (size_t b = 0; b < n / tr->bytes; b++)
        for (const int *f = scale_fields(t); *f >= 0; f++) {
            float v = (0.002f + 0.01f * rng_unit(s)) * (rng_unit(s) < 0.5f ? -1 : 1);
            put16(w + b * tr->bytes + *f, f32_to_fp16(v));
        }
    return w;
}

static float *random_acts(int n, int64_t k, uint64_t *s) {
    float *x = malloc(sizeof(float) * (size_t)n * (size_t)k);
    for (int64_t i = 0; i < n * k; i++) x[i] = rng_normal(s);
    for (int t = 0; t < n; t++) x[t * k + (t * 7) % k] = 9.0f; /* an outlier */
    return x;
}

/* Activation rows converted to the weight type's act format. */
static uint8_t *convert_acts(qtype wt, const float *x, int n, int64_t k,
                             size_t *xrb) {
    qtype act = quant_get(wt)->act_type;
    *xrb = quant_act_row_bytes(act, k);
    uint8_t *xq = malloc(*xrb * (size_t)n);
    for (int t = 0; t < n; t++) quant_act_row(act, x + t * k, xq + t * *xrb, k);
    return xq;
}

/* ---- dequantization vs the gguf package ------------------------------- */

static void check_dequant(qtype t) {
    size_t len = 0;
    char rel[64];
    snprintf(rel, sizeof rel, "quant/%s.bin", quant_name(t));
    uint8_t *buf = (uint8_t *)test_read_file(test_data(rel), &len);
    CHECK_MSG(buf != NULL, "fixture %s missing (run tools/gen_testdata.py)", rel);
    if (!buf) return;
    uint32_t hdr[3];
    memcpy(hdr, buf + 4, sizeof hdr);
    CHECK(memcmp(buf, "SQDQ", 4) == 0);
    CHECK_EQ_INT(hdr[0], t);
    CHECK_EQ_INT(hdr[2], quant_row_bytes(t, hdr[1]));
    CHECK_EQ_INT(len, 16 + hdr[2] + 4 * (size_t)hdr[1]);
    float *got = malloc(4 * (size_t)hdr[1]);
    quant_dequant_row(t, buf + 16, got, hdr[1]);
    const uint8_t *ref = buf + 16 + hdr[2];
    int bad = 0;
    for (uint32_t i = 0; i < hdr[1]; i++) {
        if (memcmp(got + i, ref + 4 * i, 4) == 0) continue;
        if (bad++ < 5) {
            float r;
            memcpy(&r, ref + 4 * i, 4);
            test_fail(__FILE__, __LINE__, "%s elem %u: got %a want %a",
                      quant_name(t), i, got[i], r);
        }
    }
    CHECK_EQ_INT(bad, 0);
    free(got);
    free(buf);
}

TEST(quant_dequant_q4_0) { check_dequant(QT_Q4_0); }
TEST(quant_dequant_q4_1) { check_dequant(QT_Q4_1); }
TEST(quant_dequant_q5_0) { check_dequant(QT_Q5_0); }
TEST(quant_dequant_q5_1) { check_dequant(QT_Q5_1); }
TEST(quant_dequant_q8_0) { check_dequant(QT_Q8_0); }
TEST(quant_dequant_q4_k) { check_dequant(QT_Q4_K); }
TEST(quant_dequant_q5_k) { check_dequant(QT_Q5_K); }
TEST(quant_dequant_q6_k) { check_dequant(QT_Q6_K); }
TEST(quant_dequant_f16) { check_dequant(QT_F16); }
TEST(quant_dequant_bf16) { check_dequant(QT_BF16); }
TEST(quant_dequant_f32) { check_dequant(QT_F32); }
TEST(quant_dequant_mxfp4) { check_dequant(QT_MXFP4); }

/* ---- fp16 helpers vs numpy --------------------------------------------- */

TEST(quant_fp16_numpy) {
    size_t len = 0;
    uint8_t *buf = (uint8_t *)test_read_file(test_data("quant/fp16.bin"), &len);
    CHECK_MSG(buf != NULL, "fixture quant/fp16.bin missing");
    if (!buf) return;
    uint32_t nh, m;
    memcpy(&nh, buf + 4, 4);
    memcpy(&m, buf + 8, 4);
    CHECK_EQ_INT(nh, 65536);
    CHECK_EQ_INT(len, 12 + 4 * (size_t)nh + 6 * (size_t)m);
    const uint8_t *h2f = buf + 12, *fb = h2f + 4 * nh, *f2h = fb + 4 * m;
    int bad = 0;
    for (uint32_t h = 0; h < nh; h++) {
        float f = fp16_to_f32((uint16_t)h);
        if (memcmp(&f, h2f + 4 * h, 4) != 0 && bad++ < 5)
            test_fail(__FILE__, __LINE__, "half %04x -> %a", h, f);
    }
    for (uint32_t i = 0; i < m; i++) {
        float f;
        uint16_t want, got;
        memcpy(&f, fb + 4 * i, 4);
        memcpy(&want, f2h + 2 * i, 2);
        got = f32_to_fp16(f);
        if (got != want && bad++ < 10)
            test_fail(__FILE__, __LINE__, "float %a -> %04x, numpy %04x", f, got, want);
    }
    CHECK_EQ_INT(bad, 0);
    free(buf);
}

TEST(quant_bf16_round) {
    /* Round to nearest even on the dropped 16 bits; NaN stays NaN. */
    uint32_t cases[][2] = {{0x3f808000, 0x3f80}, {0x3f818000, 0x3f82},
                           {0x3f808001, 0x3f81}, {0x7f7fffff, 0x7f80},
                           {0x7f800001, 0x7fc0}, {0x80000000, 0x8000}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        float f;
        memcpy(&f, &cases[i][0], 4);
        CHECK_EQ_INT(f32_to_bf16(f), cases[i][1]);
    }
}

/* ---- traits --------------------------------------------------------------- */

TEST(quant_type_traits) {
    CHECK_STR(quant_name(QT_Q4_1), "Q4_1");
    CHECK_STR(quant_name(17), "IQ2_XS");
    CHECK_STR(quant_name(39), "MXFP4");
    CHECK_EQ_INT(quant_row_bytes(QT_MXFP4, 2880), 90 * 17);
    CHECK_EQ_INT(quant_act_bytes_for(QT_MXFP4, 2880), 96 * 40);
    /* E8M0 -> 2^(e-128): the two subnormals, one, and the largest */
    CHECK(quant_e8m0_half(0) == ldexpf(1, -128) && quant_e8m0_half(1) == ldexpf(1, -127));
    CHECK(quant_e8m0_half(128) == 1.0f && quant_e8m0_half(255) == ldexpf(1, 127));
    CHECK_STR(quant_name(33), "unknown type id 33");
    CHECK(quant_get(QT_Q2_K) && !quant_get(QT_Q2_K)->is_weight);
    CHECK(quant_get(99) == NULL);
    CHECK_EQ_INT(quant_row_bytes(QT_Q4_1, 576), 18 * 20);
    CHECK_EQ_INT(quant_row_bytes(QT_Q6_K, 512), 2 * 210);
    CHECK_EQ_INT(quant_row_bytes(QT_BF16, 10), 20);
    CHECK_EQ_INT(quant_act_bytes_for(QT_Q4_1, 576), 32 * 40); /* groups of 16 blocks */
    CHECK_EQ_INT(quant_act_bytes_for(QT_Q8_0, 1024), 32 * 40);
    CHECK_EQ_INT(quant_act_bytes_for(QT_Q4_K, 512), 2 * 292);
    CHECK_EQ_INT(quant_act_bytes_for(QT_F16, 64), 256);
    for (int i = 0; i < N_WEIGHT_TYPES; i++) {
        const quant_traits *tr = quant_get(WEIGHT_TYPES[i]);
        CHECK(tr && tr->is_weight);
        for (int l = 0; l < QUANT_LEVELS; l++)
            CHECK(quant_kernel_at(l, WEIGHT_TYPES[i]) != NULL);
    }
}

TEST(quant_act_roundtrip) {
    /* Every converted activation is within half a quant step of the input. */
    uint64_t s = 7;
    float *x = random_acts(1, 512, &s);
    uint8_t q8[40 * 16], qk[292 * 2];
    quant_act_row(QT_Q8_1, x, q8, 512);
    quant_act_row(QT_Q8_K, x, qk, 512);
    for (int i = 0; i < 512; i++) {
        float d8 = qa8_d(q8)[qa8_slot(i / 32)], dk = qak_d(qk)[i / 256];
        CHECK(fabsf(d8 * qa8_qs(q8, 16)[qa8_qoff(i / 32, i % 32)] - x[i]) <= 0.5001f * d8);
        CHECK(fabsf(dk * qak_qs(qk, 2)[i] - x[i]) <= 0.5001f * dk);
    }
    /* Q8_0/Q8_1 rows pad to groups of 16 blocks with zero blocks. */
    uint8_t q8p[40 * 32];
    float *xp = random_acts(1, 576, &s);
    quant_act_row(QT_Q8_1, xp, q8p, 576);
    for (int b = 0; b < 32; b++) {
        float d = qa8_d(q8p)[qa8_slot(b)];
        int sum = 0;
        for (int e = 0; e < 32; e++) sum += qa8_qs(q8p, 18)[qa8_qoff(b, e)];
        CHECK(b < 18 ? d > 0 : d == 0 && sum == 0);
        CHECK(qa8_s(q8p, 18)[qa8_slot(b)] == d * (float)sum);
    }
    free(xp);
    for (int g = 0; g < 32; g++) {
        int sum = 0;
        for (int j = 0; j < 16; j++) sum += qak_qs(qk, 2)[16 * g + j];
        CHECK_EQ_INT(qak_bsums(qk, 2)[g], sum);
    }
    free(x);
}

/* ---- gemm vs double reference ---------------------------------------------
 * Tolerance: with activation block scale dx, every converted activation is
 * within dx/2 of the true one (round to nearest; checked above), so the
 * activation error contributes at most sum_i |w_i| * dx_i / 2. Weights are
 * used exactly (integer quants, float scales). The float work adds at most
 * ~(blocks + 16) roundings of relative size 2^-24 on sums bounded by
 * sum_i |w_i x_i| (plus the dx/2 slack); 1e-5 of that covers k <= 4096. */
static double gemm_tolerance(qtype wt, const float *w, const float *x, int64_t k) {
    const quant_traits *tr = quant_get(wt);
    int blk = tr->act_type == QT_Q8_K ? QK_K : QK;
    double bound = 0, mag = 0;
    for (int64_t b = 0; b < k; b += blk) {
        double amax = 0, wsum = 0;
        for (int j = 0; j < blk; j++) {
            amax = fmax(amax, fabs(x[b + j]));
            wsum += fabs(w[b + j]);
            mag += fabs((double)w[b + j] * x[b + j]);
        }
        if (tr->act_type != QT_F32) bound += wsum * amax / 127.0 * 0.5;
    }
    return bound * 1.001 + 1e-5 * (mag + bound) + 1e-30;
}

static void check_gemm_accuracy(qtype wt, int64_t k) {
    enum { ROWS = 9, NT = 5 };
    uint64_t s = 1234 + wt;
    uint8_t *w = random_weights(wt, ROWS, k, &s);
    float *x = random_acts(NT, k, &s), *wf = malloc(4 * (size_t)k), y[NT * ROWS];
    size_t xrb, wrb = quant_row_bytes(wt, k);
    uint8_t *xq = convert_acts(wt, x, NT, k, &xrb);
    for (int l = 0; l <= quant_level(); l++) {
        quant_gemm_level(l, wt, w, wrb, k, xq, xrb, NT, y, ROWS, 0, ROWS);
        for (int r = 0; r < ROWS; r++) {
            quant_dequant_row(wt, w + r * wrb, wf, k);
            for (int t = 0; t < NT; t++) {
                double ref = 0;
                for (int64_t i = 0; i < k; i++) ref += (double)wf[i] * x[t * k + i];
                double tol = gemm_tolerance(wt, wf, x + t * k, k);
                CHECK_MSG(fabs(y[t * ROWS + r] - ref) <= tol,
                          "%s level %d k %lld r %d t %d: %.9g vs %.9g (tol %g)",
                          quant_name(wt), l, (long long)k, r, t,
                          y[t * ROWS + r], ref, tol);
            }
        }
    }
    free(w);
    free(x);
    free(wf);
    free(xq);
}

TEST(quant_gemm_accuracy) {
    for (int i = 0; i < N_WEIGHT_TYPES; i++) {
        qtype t = WEIGHT_TYPES[i];
        check_gemm_accuracy(t, 512);
        check_gemm_accuracy(t, 1024);
        if (quant_get(t)->blck == QK) check_gemm_accuracy(t, 576 + 32);
    }
}

/* ---- batch invariance ----------------------------------------------------- */

/* Rows of one gemm call over tokens [t0, t0 + n) and rows [r0, r1), into a
 * full-size output at the same places. */
static void gemm_window(int level, qtype wt, const uint8_t *w, int64_t k,
                        const uint8_t *xq, size_t xrb, int t0, int n,
                        float *y, int rows, int r0, int r1) {
    quant_gemm_level(level, wt, w, quant_row_bytes(wt, k), k, xq + t0 * xrb,
                     xrb, n, y + t0 * rows, rows, r0, r1);
}

static void check_invariance(int level, qtype wt, int64_t k) {
    enum { ROWS = 37, NT = 13 };
    static const int sizes[] = {1, 3, 4, 5, 8, 13};
    static const int splits[][4] = {{0, 37, 37, 37}, {0, 1, 1, 37},
                                    {0, 5, 5, 37}, {0, 18, 18, 37},
                                    {0, 33, 33, 37}, {0, 36, 36, 37}};
    uint64_t s = 99 + wt;
    uint8_t *w = random_weights(wt, ROWS, k, &s);
    float *x = random_acts(NT, k, &s), full[NT * ROWS], part[NT * ROWS];
    size_t xrb;
    uint8_t *xq = convert_acts(wt, x, NT, k, &xrb);
    gemm_window(level, wt, w, k, xq, xrb, 0, NT, full, ROWS, 0, ROWS);
    int bad = 0;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (int t0 = 0; t0 + sizes[si] <= NT; t0++)
            for (size_t sp = 0; sp < sizeof splits / sizeof splits[0]; sp++) {
                const int *p = splits[sp];
                memset(part, 0xff, sizeof part);
                gemm_window(level, wt, w, k, xq, xrb, t0, sizes[si], part, ROWS, p[0], p[1]);
                gemm_window(level, wt, w, k, xq, xrb, t0, sizes[si], part, ROWS, p[2], p[3]);
                for (int t = t0; t < t0 + sizes[si]; t++)
                    if (memcmp(full + t * ROWS, part + t * ROWS, 4 * ROWS) != 0 && bad++ < 3)
                        test_fail(__FILE__, __LINE__,
                                  "%s level %d: token %d differs with n_tok %d at %d, split %d",
                                  quant_name(wt), level, t, sizes[si], t0, p[1]);
            }
    CHECK_EQ_INT(bad, 0);
    free(w);
    free(x);
    free(xq);
}

TEST(quant_gemm_batch_invariance) {
    for (int l = 0; l <= quant_level(); l++)
        for (int i = 0; i < N_WEIGHT_TYPES; i++) {
            qtype t = WEIGHT_TYPES[i];
            check_invariance(l, t, 512);
            if (quant_get(t)->blck < QK_K) {
                check_invariance(l, t, 576 + 32); /* a group + 3 blocks */
                check_invariance(l, t, 32);       /* one block */
                check_invariance(l, t, 1056);     /* two groups + 1 block */
            }
        }
}

/* ---- SIMD levels vs scalar ------------------------------------------------
 * Both levels compute the same exact integer dot products per block; they
 * differ only in the order of the float accumulation, so the difference is
 * bounded by a few roundings of the total magnitude sum |w_i x_i|. */
static void check_level(int level, qtype wt, int64_t k) {
    enum { ROWS = 21, NT = 7 };
    uint64_t s = 4242 + wt;
    uint8_t *w = random_weights(wt, ROWS, k, &s);
    float *x = random_acts(NT, k, &s), *wf = malloc(4 * (size_t)k);
    float ys[NT * ROWS], yl[NT * ROWS];
    size_t xrb, wrb = quant_row_bytes(wt, k);
    uint8_t *xq = convert_acts(wt, x, NT, k, &xrb);
    quant_gemm_level(QUANT_SCALAR, wt, w, wrb, k, xq, xrb, NT, ys, ROWS, 0, ROWS);
    quant_gemm_level(level, wt, w, wrb, k, xq, xrb, NT, yl, ROWS, 0, ROWS);
    for (int r = 0; r < ROWS; r++) {
        quant_dequant_row(wt, w + r * wrb, wf, k);
        for (int t = 0; t < NT; t++) {
            double mag = 0;
            for (int64_t i = 0; i < k; i++) mag += fabs((double)wf[i] * x[t * k + i]);
            CHECK_MSG(fabs(ys[t * ROWS + r] - yl[t * ROWS + r]) <= 1e-5 * mag + 1e-30,
                      "%s level %d r %d t %d: %.9g vs scalar %.9g", quant_name(wt),
                      level, r, t, yl[t * ROWS + r], ys[t * ROWS + r]);
        }
    }
    free(w);
    free(x);
    free(wf);
    free(xq);
}

TEST(quant_gemm_levels_vs_scalar) {
    for (int l = QUANT_SCALAR + 1; l <= quant_level(); l++)
        for (int i = 0; i < N_WEIGHT_TYPES; i++) {
            check_level(l, WEIGHT_TYPES[i], 1024);
            if (quant_get(WEIGHT_TYPES[i])->blck == QK)
                check_level(l, WEIGHT_TYPES[i], 576 + 32);
        }
}

/* The short last group of a row (1-4 blocks, as k = 576 and 640 leave)
 * has its own load path in the SIMD kernels; 5 blocks is the first size
 * past it. Each is checked against scalar and for batch invariance. */
TEST(quant_gemm_short_last_group) {
    for (int l = QUANT_SCALAR; l <= quant_level(); l++)
        for (int i = 0; i < N_WEIGHT_TYPES; i++) {
            qtype t = WEIGHT_TYPES[i];
            if (quant_get(t)->blck != QK) continue;
            for (int64_t k = 512 + 32; k <= 512 + 5 * 32; k += 32) {
                if (l > QUANT_SCALAR) check_level(l, t, k);
                check_invariance(l, t, k);
            }
        }
}

/* A row whose last group is short (1-4 blocks: its own load at AVX-512, a
 * packed pass at AVX2) gives the same bits as the row zero-padded to
 * whole groups, which takes the full-group path: the padding blocks have
 * d = 0 and add exact zeros in lanes the short path leaves out. Checked
 * for n_tok 1..NT (so both AVX2 tile sets, GGUF rows and prepared rows)
 * and row tails (37 rows). */
static void check_short_vs_padded(int level, qtype wt, int64_t k) {
    enum { ROWS = 37, NT = 11 };
    const int64_t kp = (k + 511) / 512 * 512;
    const size_t rb = quant_row_bytes(wt, k), rbp = quant_row_bytes(wt, kp);
    uint64_t s = 777 + wt + (uint64_t)k;
    uint8_t *w = random_weights(wt, ROWS, k, &s), *wp = calloc(ROWS, rbp);
    float *x = random_acts(NT, k, &s), *xp = calloc((size_t)NT * kp, sizeof(float));
    for (int r = 0; r < ROWS; r++) memcpy(wp + r * rbp, w + r * rb, rb);
    for (int t = 0; t < NT; t++) memcpy(xp + t * kp, x + t * k, sizeof(float) * (size_t)k);
    size_t xrb, xrbp;
    uint8_t *xq = convert_acts(wt, x, NT, k, &xrb), *xqp = convert_acts(wt, xp, NT, kp, &xrbp);
    float y[NT * ROWS], yp[NT * ROWS];
    int bad = 0;
    for (int n = 1; n <= NT; n++) {
        memset(y, 0xff, sizeof y);
        memset(yp, 0xfe, sizeof yp);
        quant_gemm_level(level, wt, w, rb, k, xq, xrb, n, y, ROWS, 0, ROWS);
        quant_gemm_level(level, wt, wp, rbp, kp, xqp, xrbp, n, yp, ROWS, 0, ROWS);
        if (memcmp(y, yp, sizeof(float) * (size_t)n * ROWS) != 0 && bad++ < 3)
            test_fail(__FILE__, __LINE__, "%s level %d k %lld n_tok %d: short group differs from padded",
                      quant_name(wt), level, (long long)k, n);
    }
    CHECK_EQ_INT(bad, 0);
    free(w), free(wp), free(x), free(xp), free(xq), free(xqp);
}

TEST(quant_gemm_short_group_vs_padded) {
    static const int64_t ks[] = {32, 64, 96, 128, 544, 576, 608, 640, 1056, 1152};
    for (int l = QUANT_SCALAR; l <= quant_level(); l++)
        for (int i = 0; i < N_WEIGHT_TYPES; i++) {
            if (quant_get(WEIGHT_TYPES[i])->blck != QK) continue;
            for (size_t j = 0; j < sizeof ks / sizeof ks[0]; j++)
                check_short_vs_padded(l, WEIGHT_TYPES[i], ks[j]);
        }
}

/* A prepared row bigger than the driver's 32 KiB stack buffer (AVX2
 * legacy prefill: 640 bytes per 16 blocks, so k > 26,000) takes a heap
 * buffer; same checks as above on one such k (60 groups + 2 blocks). */
TEST(quant_gemm_big_rows) {
    const int64_t k = 30720 + 64;
    for (int l = QUANT_SCALAR + 1; l <= quant_level(); l++) {
        check_invariance(l, QT_Q5_0, k);
        check_invariance(l, QT_Q8_0, k);
        check_level(l, QT_Q5_0, k);
    }
}

/* Prefill (n_tok >= 8, the SIMD legacy kernels and the AVX-512 K-quants:
 * rows prepared once per row chunk, short last groups packed)
 * gives every token the bits of decode (n_tok = 1: GGUF rows), for every
 * token count 2 to 15 (GGUF-row tiles below the threshold, prepared tiles
 * of 8, 4, 2, 1 above it) and 37 rows (two row chunks at AVX-512's 32, a
 * row tail; K-quant rows of k = 2048 come 7 to a chunk). */
static void check_prefill_vs_decode(int level, qtype wt, int64_t k) {
    enum { ROWS = 37, NT = 15 };
    uint64_t s = 31337 + wt + (uint64_t)k;
    uint8_t *w = random_weights(wt, ROWS, k, &s);
    float *x = random_acts(NT, k, &s), y[NT * ROWS], y1[NT * ROWS];
    size_t xrb, wrb = quant_row_bytes(wt, k);
    uint8_t *xq = convert_acts(wt, x, NT, k, &xrb);
    for (int t = 0; t < NT; t++)
        quant_gemm_level(level, wt, w, wrb, k, xq + t * xrb, xrb, 1, y1 + t * ROWS, ROWS, 0, ROWS);
    int bad = 0;
    for (int n = 2; n <= NT; n++) {
        memset(y, 0xff, sizeof y);
        quant_gemm_level(level, wt, w, wrb, k, xq, xrb, n, y, ROWS, 0, ROWS);
        for (int t = 0; t < n; t++)
            if (memcmp(y + t * ROWS, y1 + t * ROWS, 4 * ROWS) != 0 && bad++ < 3)
                test_fail(__FILE__, __LINE__, "%s level %d k %lld: token %d of %d differs from decode",
                          quant_name(wt), level, (long long)k, t, n);
    }
    CHECK_EQ_INT(bad, 0);
    free(w), free(x), free(xq);
}

TEST(quant_gemm_prefill_vs_decode) {
    static const int64_t ks[] = {96, 512, 576, 640, 672, 1536}, kks[] = {256, 768, 2048};
    for (int l = QUANT_SCALAR; l <= quant_level(); l++)
        for (int i = 0; i < N_WEIGHT_TYPES; i++) {
            int legacy = quant_get(WEIGHT_TYPES[i])->blck == QK, kquant = quant_get(WEIGHT_TYPES[i])->blck == QK_K;
            for (size_t j = 0; legacy && j < sizeof ks / sizeof ks[0]; j++)
                check_prefill_vs_decode(l, WEIGHT_TYPES[i], ks[j]);
            for (size_t j = 0; kquant && j < sizeof kks / sizeof kks[0]; j++)
                check_prefill_vs_decode(l, WEIGHT_TYPES[i], kks[j]);
        }
}

/* MXFP4 kernels give the same bits at every level (they share the float
 * steps and the reduction tree; quant_scalar.c): memcmp of each level
 * against scalar, for rows of one block to several groups with short and
 * long tails, and n_tok 1 to 11 (every tile shape and token tail). */
static void check_mxfp4_same_bits(int level, int64_t k) {
    enum { ROWS = 13, NT = 11 };
    uint64_t s = 2025 + (uint64_t)k;
    uint8_t *w = random_weights(QT_MXFP4, ROWS, k, &s);
    float *x = random_acts(NT, k, &s), ys[NT * ROWS], yl[NT * ROWS];
    size_t xrb, wrb = quant_row_bytes(QT_MXFP4, k);
    uint8_t *xq = convert_acts(QT_MXFP4, x, NT, k, &xrb);
    int bad = 0;
    for (int n = 1; n <= NT; n++) {
        memset(yl, 0xff, sizeof yl);
        quant_gemm_level(QUANT_SCALAR, QT_MXFP4, w, wrb, k, xq, xrb, n, ys, ROWS, 0, ROWS);
        quant_gemm_level(level, QT_MXFP4, w, wrb, k, xq, xrb, n, yl, ROWS, 0, ROWS);
        if (memcmp(ys, yl, sizeof(float) * (size_t)n * ROWS) != 0 && bad++ < 3)
            test_fail(__FILE__, __LINE__, "MXFP4 level %d k %lld n_tok %d: bits differ from scalar",
                      level, (long long)k, n);
    }
    CHECK_EQ_INT(bad, 0);
    free(w), free(x), free(xq);
}

TEST(quant_mxfp4_same_bits_every_level) {
    static const int64_t ks[] = {32, 96, 512, 544, 640, 672, 1024, 2880};
    for (int l = QUANT_SCALAR + 1; l <= quant_level(); l++)
        for (size_t j = 0; j < sizeof ks / sizeof ks[0]; j++) check_mxfp4_same_bits(l, ks[j]);
}

/* The AMX level (legacy formats and K-quants, 16+ tokens on AMX-INT8 tiles) gives every
 * (row, token) pair the bits of decode (n_tok = 1, the avx512 GGUF-row
 * tiles): n_tok 16-50 (token tiles of 16 and their tails), 37 rows split
 * as threads split them (16-row tiles and row tails), k from one block to
 * three groups with short and long last groups. Where the CPU has no AMX
 * this runs at its highest level (prefill at these sizes vs decode). */
static void check_amx_vs_decode(int level, qtype wt, int64_t k) {
    enum { ROWS = 37, NT = 50 };
    static const int ns[] = {16, 17, 31, 32, 33, 50};
    static const int splits[][4] = {{0, 37, 37, 37}, {0, 5, 5, 37}, {0, 18, 18, 37}, {0, 32, 32, 37}};
    uint64_t s = 4711 + wt + (uint64_t)k;
    uint8_t *w = random_weights(wt, ROWS, k, &s);
    float *x = random_acts(NT, k, &s), *y = malloc(sizeof(float) * NT * ROWS), *y1 = malloc(sizeof(float) * NT * ROWS);
    size_t xrb, wrb = quant_row_bytes(wt, k);
    uint8_t *xq = convert_acts(wt, x, NT, k, &xrb);
    for (int t = 0; t < NT; t++)
        quant_gemm_level(level, wt, w, wrb, k, xq + t * xrb, xrb, 1, y1 + t * ROWS, ROWS, 0, ROWS);
    int bad = 0;
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        for (size_t sp = 0; sp < sizeof splits / sizeof splits[0]; sp++) {
            const int *p = splits[sp];
            memset(y, 0xff, sizeof(float) * NT * ROWS);
            quant_gemm_level(level, wt, w, wrb, k, xq, xrb, ns[i], y, ROWS, p[0], p[1]);
            quant_gemm_level(level, wt, w, wrb, k, xq, xrb, ns[i], y, ROWS, p[2], p[3]);
            for (int t = 0; t < ns[i]; t++)
                if (memcmp(y + t * ROWS, y1 + t * ROWS, 4 * ROWS) != 0 && bad++ < 3)
                    test_fail(__FILE__, __LINE__, "%s level %d k %lld: token %d of %d (split %d) differs from decode",
                              quant_name(wt), level, (long long)k, t, ns[i], p[1]);
        }
    CHECK_EQ_INT(bad, 0);
    free(w), free(x), free(xq), free(y), free(y1);
}

TEST(quant_gemm_amx_same_bits) {
    static const qtype types[] = {QT_Q4_0, QT_Q4_1, QT_Q5_0, QT_Q5_1, QT_Q8_0};
    static const int64_t ks[] = {32, 96, 512, 544, 576, 640, 672, 1056, 1536};
    int level = quant_level() < QUANT_AMX ? quant_level() : QUANT_AMX;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        for (size_t j = 0; j < sizeof ks / sizeof ks[0]; j++) check_amx_vs_decode(level, types[i], ks[j]);
    static const qtype ktypes[] = {QT_Q4_K, QT_Q5_K, QT_Q6_K}; /* quant_amx_kq_avx512.c */
    static const int64_t kks[] = {256, 768, 2048};
    for (size_t i = 0; i < sizeof ktypes / sizeof ktypes[0]; i++)
        for (size_t j = 0; j < sizeof kks / sizeof kks[0]; j++) check_amx_vs_decode(level, ktypes[i], kks[j]);
}

/* Tiles the caller lays out once (quant_xtiles; the model makes them per
 * matmul, its row chunks share them) give quant_gemm's bits: whole calls,
 * tiles made in two shares as two threads make them, and a call over
 * tokens from 16 on (the FFN's token items) with quant_xtiles_at. Where
 * the level has no tiles (no AMX) quant_xtiles_bytes is 0 and this checks
 * that quant_gemm_xt with NULL is quant_gemm. */
static void check_xtiles(int level, qtype wt, int64_t k, int n) {
    enum { ROWS = 37 };
    uint64_t s = 99 + wt + (uint64_t)k + (uint64_t)n;
    uint8_t *w = random_weights(wt, ROWS, k, &s);
    float *x = random_acts(n, k, &s), *y = malloc(sizeof(float) * n * ROWS), *y1 = malloc(sizeof(float) * n * ROWS);
    size_t xrb, wrb = quant_row_bytes(wt, k), tb = quant_xtiles_bytes_level(level, wt, k, n);
    uint8_t *xq = convert_acts(wt, x, n, k, &xrb), *xt = tb ? xaligned(tb) : NULL;
    int ntt = (n + QUANT_XTILE - 1) / QUANT_XTILE;
    if (xt) quant_xtiles(wt, k, xq, xrb, n, ntt / 2, ntt, xt), quant_xtiles(wt, k, xq, xrb, n, 0, ntt / 2, xt);
    quant_gemm_level(level, wt, w, wrb, k, xq, xrb, n, y1, ROWS, 0, ROWS);
    memset(y, 0xff, sizeof(float) * n * ROWS);
    quant_gemm_xt_level(level, wt, w, wrb, k, xq, xrb, xt, n, y, ROWS, 0, 21);
    quant_gemm_xt_level(level, wt, w, wrb, k, xq, xrb, xt, n, y, ROWS, 21, ROWS);
    CHECK(memcmp(y, y1, sizeof(float) * n * ROWS) == 0);
    memset(y, 0xff, sizeof(float) * n * ROWS);
    quant_gemm_xt_level(level, wt, w, wrb, k, xq + 16 * xrb, xrb, quant_xtiles_at(wt, k, xt, 16), n - 16,
                        y + 16 * ROWS, ROWS, 0, ROWS);
    CHECK(memcmp(y + 16 * ROWS, y1 + 16 * ROWS, sizeof(float) * (n - 16) * ROWS) == 0);
    free(w), free(x), free(xq), free(xt), free(y), free(y1);
}

TEST(quant_gemm_xtiles_same_bits) {
    static const qtype types[] = {QT_Q4_0, QT_Q4_1, QT_Q5_0, QT_Q5_1, QT_Q8_0, QT_Q4_K};
    static const int ns[] = {17, 48, 50};
    int level = quant_level() < QUANT_AMX ? quant_level() : QUANT_AMX;
    CHECK_EQ_INT(quant_xtiles_bytes_level(level, QT_Q4_0, 64, QUANT_XTILE - 1), 0);
    CHECK_EQ_INT(quant_xtiles_bytes_level(level, QT_Q4_K, 256, 64), 0); /* reads its rows as they are */
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        for (size_t j = 0; j < sizeof ns / sizeof ns[0]; j++) {
            int64_t k = quant_get(types[i])->blck == 256 ? 512 : 576;
            check_xtiles(level, types[i], k, ns[j]);
        }
    if (level == QUANT_AMX) CHECK(quant_xtiles_bytes_level(level, QT_Q4_1, 576, 16) > 0);
}

/* ---- K-quants and legacy formats: the same bits at every level ----------
 * Q4_K, Q5_K and Q6_K make each super-block's integer sums exactly and
 * then fixed float steps in block order (acc + (float)isum * (d_w * d_x),
 * no FMA; quant_scalar.c, quant_avx512.c), so scalar, avx2, avx512 and
 * amx give the same bits; the legacy formats (Q4_0..Q8_0) run one FMA
 * chain per (row, token) pair in block order (quant_scalar.c dot_legacy)
 * at every level too.
 * memcmp of each level against scalar for n_tok 1 to 50 (every tile
 * shape, prepared and GGUF-row tiles, amx token tiles and tails), row
 * splits as threads make them (row tails, 8- and 16-row groups, amx tiles),
 * k of 1 to 8 super-blocks (legacy: 1 block to 4 groups, short and long
 * last groups). `extreme`: every quant (K-quants: and scale and min) at
 * its largest magnitude (legacy: u = 15 or 31; Q8_0 q = -128) and
 * activations at +-127, the int32 (avx2 legacy: int16) sums' worst case,
 * also held to the float64 reference (an overflow that every level
 * shared would pass the memcmp). */
static void check_same_bits_as_scalar(int level, qtype wt, int64_t k, int extreme) {
    enum { ROWS = 37, NT = 50 };
    static const int splits[][4] = {{0, 37, 37, 37}, {0, 5, 5, 37}, {0, 18, 18, 37}, {0, 32, 32, 37}};
    const quant_traits *tr = quant_get(wt);
    uint64_t s = 8086 + wt + (uint64_t)k + (uint64_t)extreme;
    uint8_t *w = random_weights(wt, ROWS, k, &s);
    float *x = random_acts(NT, k, &s);
    size_t xrb, wrb = quant_row_bytes(wt, k);
    for (size_t b = 0; extreme && b < ROWS * wrb / tr->bytes; b++) {
        uint8_t *blk = w + b * tr->bytes;
        if (wt == QT_Q6_K) {
            memset(blk, 0xff, 192);       /* q = 63 */
            memset(blk + 192, 0x80, 16);  /* scales -128 */
        } else if (wt == QT_Q8_0) {
            memset(blk + 2, 0x80, 32);    /* q = -128 */
        } else if (tr->blck == QK) {      /* fifth bits and nibbles all set: u = 31 (15) */
            int q0 = wt == QT_Q4_1 || wt == QT_Q5_1 ? 4 : 2;
            memset(blk + q0, 0xff, tr->bytes - q0);
        } else {
            memset(blk + 4, 0xff, tr->bytes - 4); /* scales, mins 63; q = 15 (31) */
        }
    }
    for (int64_t i = 0; extreme && i < NT * k; i++) x[i] = (i / k) % 2 ? -1.0f : 1.0f;
    uint8_t *xq = convert_acts(wt, x, NT, k, &xrb);
    float *ys = malloc(sizeof(float) * NT * ROWS), *yl = malloc(sizeof(float) * NT * ROWS);
    quant_gemm_level(QUANT_SCALAR, wt, w, wrb, k, xq, xrb, NT, ys, ROWS, 0, ROWS);
    int bad = 0;
    for (int n = 1; n <= NT; n++)
        for (size_t sp = 0; sp < sizeof splits / sizeof splits[0]; sp++) {
            const int *p = splits[sp];
            if (n % 7 != 1 && n < 16 && sp > 0) continue; /* every n once, splits at a few */
            memset(yl, 0xff, sizeof(float) * NT * ROWS);
            quant_gemm_level(level, wt, w, wrb, k, xq, xrb, n, yl, ROWS, p[0], p[1]);
            quant_gemm_level(level, wt, w, wrb, k, xq, xrb, n, yl, ROWS, p[2], p[3]);
            if (memcmp(ys, yl, sizeof(float) * (size_t)n * ROWS) != 0 && bad++ < 3)
                test_fail(__FILE__, __LINE__, "%s level %d k %lld n_tok %d split %d%s: bits differ from scalar",
                          quant_name(wt), level, (long long)k, n, p[1], extreme ? " (extreme)" : "");
        }
    CHECK_EQ_INT(bad, 0);
    float *wf = malloc(sizeof(float) * (size_t)k);
    for (int r = 0; extreme && r < 2; r++) {
        quant_dequant_row(wt, w + r * wrb, wf, k);
        for (int t = 0; t < 2; t++) {
            double ref = 0;
            for (int64_t i = 0; i < k; i++) ref += (double)wf[i] * x[t * k + i];
            CHECK_MSG(fabs(ys[t * ROWS + r] - ref) <= gemm_tolerance(wt, wf, x + t * k, k),
                      "%s extreme k %lld: %.9g vs %.9g", quant_name(wt), (long long)k, ys[t * ROWS + r], ref);
        }
    }
    free(w), free(wf), free(x), free(xq), free(ys), free(yl);
}

TEST(quant_kquant_same_bits_every_level) {
    static const qtype types[] = {QT_Q4_K, QT_Q5_K, QT_Q6_K};
    static const int64_t ks[] = {256, 768, 2048};
    for (int l = QUANT_SCALAR + 1; l <= quant_level(); l++)
        for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
            for (size_t j = 0; j < sizeof ks / sizeof ks[0]; j++) check_same_bits_as_scalar(l, types[i], ks[j], 0);
            check_same_bits_as_scalar(l, types[i], 512, 1);
        }
}

TEST(quant_legacy_same_bits_every_level) {
    static const qtype types[] = {QT_Q4_0, QT_Q4_1, QT_Q5_0, QT_Q5_1, QT_Q8_0};
    static const int64_t ks[] = {32, 96, 576, 640, 1056, 2048};
    for (int l = QUANT_SCALAR + 1; l <= quant_level(); l++)
        for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
            for (size_t j = 0; j < sizeof ks / sizeof ks[0]; j++) check_same_bits_as_scalar(l, types[i], ks[j], 0);
            check_same_bits_as_scalar(l, types[i], 1056, 1);
        }
}

/* Rows enough for several chunks: an avx2 or avx512 prefill call prepares
 * its rows in chunks of at most LG_MAXG groups and about LG_CHUNK bytes,
 * the last group of a chunk maybe short: every level's bits against
 * scalar at n_tok 9. */
static void check_many_rows(qtype wt, int rows, int64_t k) {
    enum { NT = 9 };
    uint64_t s = 4242 + wt;
    uint8_t *w = random_weights(wt, rows, k, &s);
    float *x = random_acts(NT, k, &s), *ys = malloc(sizeof(float) * NT * rows), *yl = malloc(sizeof(float) * NT * rows);
    size_t xrb, wrb = quant_row_bytes(wt, k);
    uint8_t *xq = convert_acts(wt, x, NT, k, &xrb);
    quant_gemm_level(QUANT_SCALAR, wt, w, wrb, k, xq, xrb, NT, ys, rows, 0, rows);
    for (int l = QUANT_AVX2; l <= quant_level(); l++) {
        memset(yl, 0xff, sizeof(float) * NT * rows);
        quant_gemm_level(l, wt, w, wrb, k, xq, xrb, NT, yl, rows, 0, rows);
        CHECK_MSG(memcmp(ys, yl, sizeof(float) * NT * rows) == 0, "%s level %d: bits differ from scalar",
                  quant_name(wt), l);
    }
    free(w), free(x), free(xq), free(ys), free(yl);
}

/* Q4_1, 1,100 rows of k = 64: avx512 69 groups of 16, avx2 138 of 8, two
 * chunks each (LG_MAXG); the K-quants, 150 rows of k = 2048: at avx512 10
 * groups of 16, the last of 6 rows, 4 a chunk; at avx2 19 groups of 8, the
 * last of 6 rows, 10 a chunk (the second chunk's 9: an odd group alone). */
TEST(quant_grouped_many_rows_same_bits) {
    check_many_rows(QT_Q4_1, 1100, 64);
    check_many_rows(QT_Q4_K, 150, 2048);
    check_many_rows(QT_Q5_K, 150, 2048);
    check_many_rows(QT_Q6_K, 150, 2048);
}

/* Levels whose matmuls give other bits have other numerics ids
 * (quant_numerics_level, part of the engine's id): blocks one replica
 * computed at avx2 are never served to one at avx512 over a shared tier,
 * nor the reverse. Since the legacy formats' one chain per pair (issue
 * 29) Q4_1, Q8_0 and Q5_0 give every level's bits (and so do the K-quants
 * and MXFP4): F16 (the float formats, 8 lanes at avx2, 16 at avx512, 8
 * running sums at scalar) is what still differs, and what keeps the
 * "+mm-avx2" and "+mm-scalar" ids needed. */
TEST(quant_levels_with_other_bits_have_other_ids) {
    enum { ROWS = 21, NT = 19 };
    static const qtype types[] = {QT_Q4_1, QT_Q8_0, QT_Q5_0, QT_F16};
    const int n = quant_level() + 1;
    const char *id[QUANT_LEVELS], *names[QUANT_LEVELS];
    for (int l = 0; l < n; l++) id[l] = quant_numerics_level(l), names[l] = quant_level_name(l);
    int differ = 0;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        qtype wt = types[i];
        int64_t k = 1024;
        uint64_t s = 77 + wt;
        uint8_t *w = random_weights(wt, ROWS, k, &s);
        float *x = random_acts(NT, k, &s), y[QUANT_LEVELS][NT * ROWS];
        void *out[QUANT_LEVELS];
        size_t xrb, wrb = quant_row_bytes(wt, k);
        uint8_t *xq = convert_acts(wt, x, NT, k, &xrb);
        for (int l = 0; l < n; l++) {
            quant_gemm_level(l, wt, w, wrb, k, xq, xrb, NT, y[l], ROWS, 0, ROWS);
            out[l] = y[l];
        }
        differ += test_levels_differ_by_id(quant_name(wt), n, out, sizeof y[0], id, names);
        free(w), free(x), free(xq);
    }
    if (quant_level() > QUANT_SCALAR) CHECK(differ > 0); /* the premise: the levels' bits do differ */
    CHECK(quant_numerics_level(QUANT_AVX512)[0] == 0 || quant_level() < QUANT_AVX512); /* "cpu" stays "cpu" */
}
