/* test_delta.c - the delta-rule kernels (backend/delta): agreement with a
 * float64 recurrence at every level, batch invariance (a token's output
 * and state bits are the same whether the run is one call, cut into
 * chunks of any size, or its rows split at any place, as threads split
 * them), and the scalar kernel equal bit for bit to the token-major loop
 * model/deltanet.c ran before the kernels existed. */
#include <stdlib.h>

#include "backend/delta.h"
#include "base/mem.h"
#include "test.h"
#include "test_util.h"

static const char *LEVEL[] = {"scalar", "avx2", "avx512"};

static uint32_t rng = 7;
static float frand(void) { /* [-1, 1) */
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* n tokens: x [n][3 d] (k | q | v, k and q of unit length), gates
 * [n][2] (beta in (0, 1), decay in (0.5, 1)); S0 the starting state. */
typedef struct fix {
    int d, n;
    float *x, *g, *S0;
} fix;

static void fix_new(fix *f, int d, int n) {
    f->d = d, f->n = n;
    f->x = xmalloc((size_t)n * 3 * d * sizeof(float));
    f->g = xmalloc((size_t)n * 2 * sizeof(float));
    f->S0 = xmalloc((size_t)d * d * sizeof(float));
    for (int t = 0; t < n; t++) {
        float *row = f->x + (size_t)t * 3 * d;
        for (int i = 0; i < 3 * d; i++) row[i] = frand();
        for (int h = 0; h < 2; h++) {
            double ss = 0;
            for (int i = 0; i < d; i++) ss += (double)row[h * d + i] * row[h * d + i];
            for (int i = 0; i < d; i++) row[h * d + i] = (float)(row[h * d + i] / sqrt(ss));
        }
        f->g[2 * t] = 0.5f + 0.49f * frand();
        f->g[2 * t + 1] = 0.75f + 0.249f * frand();
    }
    for (int i = 0; i < d * d; i++) f->S0[i] = 0.5f * frand();
}

static void fix_free(fix *f) {
    free(f->x), free(f->g), free(f->S0);
}

#define OPAD 3 /* output rows d + OPAD apart: strides are not dims */

/* Tokens [t0, t1) of f as a run writing o ([n][d + OPAD]). */
static delta_run run_of(const fix *f, int t0, int t1, float *o) {
    const float *x = f->x + (size_t)t0 * 3 * f->d;
    return (delta_run){.k = x, .q = x + f->d, .v = x + 2 * f->d, .beta = f->g + 2 * t0, .decay = f->g + 2 * t0 + 1,
                       .o = o + (size_t)t0 * (f->d + OPAD), .x_stride = 3 * (size_t)f->d, .g_stride = 2,
                       .o_stride = (size_t)f->d + OPAD, .n_tok = t1 - t0};
}

static const int DIMS[] = {32, 48, 64, 128};

TEST(delta_matches_float64) {
    for (size_t di = 0; di < sizeof DIMS / sizeof DIMS[0]; di++) {
        fix f;
        int d = DIMS[di], n = 40;
        fix_new(&f, d, n);
        double *S = xmalloc((size_t)d * d * sizeof(double)), *o = xmalloc((size_t)n * d * sizeof(double));
        for (int i = 0; i < d * d; i++) S[i] = f.S0[i];
        for (int t = 0; t < n; t++) {
            const float *k = f.x + (size_t)t * 3 * d, *q = k + d, *v = k + 2 * d;
            for (int j = 0; j < d; j++) {
                double *r = S + (size_t)j * d, sk = 0, sq = 0;
                for (int i = 0; i < d; i++) sk += (r[i] *= f.g[2 * t + 1]) * k[i];
                double dl = (v[j] - sk) * f.g[2 * t];
                for (int i = 0; i < d; i++) sq += (r[i] += dl * k[i]) * q[i];
                o[(size_t)t * d + j] = sq / sqrt((double)d);
            }
        }
        float *Sf = xmalloc((size_t)d * d * sizeof(float)), *of = xmalloc((size_t)n * (d + OPAD) * sizeof(float));
        for (int level = 0; level <= delta_level(); level++) {
            memcpy(Sf, f.S0, (size_t)d * d * sizeof(float));
            delta_run r = run_of(&f, 0, n, of);
            delta_rows_level(level, &r, Sf, d, 0, d, 1.0f / sqrtf((float)d));
            double eo = 0, es = 0;
            for (int t = 0; t < n; t++)
                for (int j = 0; j < d; j++) eo = fmax(eo, fabs(of[(size_t)t * (d + OPAD) + j] - o[(size_t)t * d + j]));
            for (int i = 0; i < d * d; i++) es = fmax(es, fabs(Sf[i] - S[i]));
            /* Values are O(1); 40 tokens of float rounding stay far below. */
            CHECK_MSG(eo < 2e-5 && es < 2e-5, "%s d=%d: max error out %g, state %g", LEVEL[level], d, eo, es);
        }
        free(S), free(o), free(Sf), free(of);
        fix_free(&f);
    }
}

/* Every token's output and the final state, as one call gives them, are
 * the same bits with the run cut every `chunk` tokens and the rows split
 * at `split` (both halves in separate calls, like two threads). */
static void check_invariance_of(int level, int d, int n, int chunk, int split, void (*edit)(fix *)) {
    fix f;
    fix_new(&f, d, n);
    if (edit) edit(&f);
    size_t sb = (size_t)d * d * sizeof(float), ob = (size_t)n * (d + OPAD) * sizeof(float);
    float *Sa = xmalloc(sb), *Sb = xmalloc(sb), *oa = xcalloc(1, ob), *ob_ = xcalloc(1, ob);
    float scale = 1.0f / sqrtf((float)d);
    memcpy(Sa, f.S0, sb);
    delta_run r = run_of(&f, 0, n, oa);
    delta_rows_level(level, &r, Sa, d, 0, d, scale);
    memcpy(Sb, f.S0, sb);
    for (int t0 = 0; t0 < n; t0 += chunk) {
        int t1 = t0 + chunk < n ? t0 + chunk : n;
        delta_run c = run_of(&f, t0, t1, ob_);
        delta_rows_level(level, &c, Sb, d, split, d, scale); /* the upper rows first: order is free */
        delta_rows_level(level, &c, Sb, d, 0, split, scale);
    }
    CHECK_MSG(memcmp(oa, ob_, ob) == 0, "%s d=%d n=%d chunk %d split %d: outputs differ", LEVEL[level], d, n, chunk,
              split);
    CHECK_MSG(memcmp(Sa, Sb, sb) == 0, "%s d=%d n=%d chunk %d split %d: states differ", LEVEL[level], d, n, chunk,
              split);
    free(Sa), free(Sb), free(oa), free(ob_);
    fix_free(&f);
}

static void check_invariance(int level, int d, int n, int chunk, int split) {
    check_invariance_of(level, d, n, chunk, split, NULL);
}

/* Values at the edges of float: subnormal, huge, -0 and zero state rows;
 * an infinite, a NaN and a subnormal value; a decay of 1 and a beta of 0.
 * The avx512 kernel runs short calls (decode) a pair of rows at a time and long
 * ones 16 rows per register: the same operations on the same operands,
 * so even a NaN's payload must match. */
static void edge_values(fix *f) {
    int d = f->d;
    for (int i = 0; i < d; i++) {
        f->S0[i] = i % 2 ? 1e-40f : -1e-41f;
        f->S0[d + i] = i % 3 ? 1e30f : -3e29f;
        f->S0[2 * d + i] = -0.0f;
        f->S0[3 * d + i] = 0.0f;
    }
    f->x[(size_t)5 * 3 * d + 2 * d + 3] = INFINITY;
    f->x[(size_t)9 * 3 * d + 2 * d + 4] = NAN;
    f->x[(size_t)2 * 3 * d + 2 * d + 5] = 1e-41f;
    f->g[2 * 11 + 1] = 1.0f;
    f->g[2 * 12] = 0.0f;
}

TEST(delta_edge_values_same_bits_in_every_chunking) {
    static const int chunks[] = {1, 7, 8, 33};
    for (int level = 0; level <= delta_level(); level++)
        for (size_t di = 0; di < sizeof DIMS / sizeof DIMS[0]; di++)
            for (size_t ci = 0; ci < sizeof chunks / sizeof chunks[0]; ci++) {
                check_invariance_of(level, DIMS[di], 60, chunks[ci], 0, edge_values);
                check_invariance_of(level, DIMS[di], 60, chunks[ci], DIMS[di] / 2 + 1, edge_values);
            }
}

TEST(delta_batch_invariance) {
    static const int chunks[] = {1, 3, 7, 31, 32, 33, 100};
    for (int level = 0; level <= delta_level(); level++)
        for (size_t di = 0; di < sizeof DIMS / sizeof DIMS[0]; di++)
            for (size_t ci = 0; ci < sizeof chunks / sizeof chunks[0]; ci++) {
                int d = DIMS[di];
                check_invariance(level, d, 100, chunks[ci], 0);
                check_invariance(level, d, 100, chunks[ci], d / 2 + 1); /* odd: rows pair up differently */
                check_invariance(level, d, 100, chunks[ci], 1);
            }
}

/* The loop model/deltanet.c ran before backend/delta.c: token by token,
 * all rows of S per token, 8-lane dot products at the base flags. */
static float old_dot(const float *a, const float *b, int n) {
    float acc[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += a[i + l] * b[i + l];
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

TEST(delta_scalar_equals_token_major_loop) {
    for (size_t di = 0; di < sizeof DIMS / sizeof DIMS[0]; di++) {
        fix f;
        int d = DIMS[di], n = 50;
        fix_new(&f, d, n);
        size_t sb = (size_t)d * d * sizeof(float), ob = (size_t)n * (d + OPAD) * sizeof(float);
        float *Sa = xmalloc(sb), *Sb = xmalloc(sb), *oa = xcalloc(1, ob), *ob_ = xcalloc(1, ob);
        float scale = 1.0f / sqrtf((float)d);
        memcpy(Sa, f.S0, sb);
        for (int t = 0; t < n; t++) {
            const float *k = f.x + (size_t)t * 3 * d, *q = k + d, *v = k + 2 * d;
            for (int j = 0; j < d; j++) {
                float *row = Sa + (size_t)j * d;
                for (int i = 0; i < d; i++) row[i] *= f.g[2 * t + 1];
                float dl = (v[j] - old_dot(row, k, d)) * f.g[2 * t];
                for (int i = 0; i < d; i++) row[i] += dl * k[i];
                oa[(size_t)t * (d + OPAD) + j] = old_dot(row, q, d) * scale;
            }
        }
        memcpy(Sb, f.S0, sb);
        delta_run r = run_of(&f, 0, n, ob_);
        delta_rows_level(0, &r, Sb, d, 0, d, scale);
        CHECK_MSG(memcmp(oa, ob_, ob) == 0 && memcmp(Sa, Sb, sb) == 0, "d=%d: scalar kernel differs", d);
        free(Sa), free(Sb), free(oa), free(ob_);
        fix_free(&f);
    }
}

/* Levels whose delta rule gives other bits have other numerics ids
 * (delta_numerics_level, part of a delta-net model's engine id). */
TEST(delta_levels_with_other_bits_have_other_ids) {
    const int nl = delta_level() + 1;
    int differ = 0;
    for (size_t di = 0; di < sizeof DIMS / sizeof DIMS[0]; di++) {
        int d = DIMS[di], n = 40;
        fix f;
        fix_new(&f, d, n);
        size_t sb = (size_t)d * d * sizeof(float), ob = (size_t)n * (d + OPAD) * sizeof(float);
        void *out[3]; /* per level: the final state, then the outputs */
        const char *id[3];
        for (int l = 0; l < nl; l++) {
            float *S = xcalloc(1, sb + ob);
            memcpy(S, f.S0, sb);
            delta_run r = run_of(&f, 0, n, S + (size_t)d * d);
            delta_rows_level(l, &r, S, d, 0, d, 1.0f / sqrtf((float)d));
            out[l] = S, id[l] = delta_numerics_level(l, d);
        }
        char what[32];
        snprintf(what, sizeof what, "delta d=%d", d);
        differ += test_levels_differ_by_id(what, nl, out, sb + ob, id, LEVEL);
        for (int l = 0; l < nl; l++) free(out[l]);
        fix_free(&f);
    }
    if (delta_level() > 0) CHECK(differ > 0);
}
