/* delta.h - the gated delta rule of a delta-net value head (qwen35), per
 * token, on a state S of dim x dim floats (row j = value dim j, column i =
 * key dim i). For each token in order:
 *
 *   S *= decay;  d = beta * (v - S k);  S += d k^T;  o = (S q) * scale
 *
 * Each row of S only ever reads itself, so the kernels keep a row (or a
 * pair of rows) in registers across a run of tokens and stream k and q,
 * instead of walking all of S once per token. A row's arithmetic for a
 * token is the same instruction sequence whatever the run's length, the
 * row range asked for, the rows it is paired with or the thread: a token's
 * state and output bits never depend on how the tokens were batched
 * (batch invariance, src/backend/README.md). The recurrence stays token by
 * token (no chunked closed form).
 *
 * Levels (0 scalar, 1 avx2, 2 avx512) give different bits from one
 * another; a process uses one level for its whole life (delta_level). */
#ifndef STRATA_DELTA_H
#define STRATA_DELTA_H

#include <stddef.h>

/* A run of n_tok tokens of one sequence, for one value head. Token t's
 * key, query and value are k/q/v + t * x_stride (dim floats each), its
 * gates beta[t * g_stride], decay[t * g_stride], its output o + t *
 * o_stride (dim floats, written). */
typedef struct delta_run {
    const float *k, *q, *v, *beta, *decay;
    float *o;
    size_t x_stride, g_stride, o_stride;
    int n_tok;
} delta_run;

/* Rows [r0, r1) of S over the run's tokens in order. */
void delta_rows(const delta_run *r, float *S, int dim, int r0, int r1, float scale);
/* The same at a given level (tests): one the CPU or build lacks, or a dim
 * it has no kernel for, falls back to the next lower one. */
void delta_rows_level(int level, const delta_run *r, float *S, int dim, int r0, int r1, float scale);
/* The level delta_rows uses in this process. */
int delta_level(void);
/* What the engine's numerics id adds for a delta-net model with states
 * of dim: "" where the avx512 kernel runs, "+delta-avx2" or
 * "+delta-scalar" where another does (their bits differ). */
const char *delta_numerics(int dim);
const char *delta_numerics_level(int level, int dim); /* the same for a level (tests) */
/* sum a[i] b[i] in a fixed order, the scalar kernel's: 8 lanes, a tree,
 * then the tail in order (plain C at the base flags; also qwen35's q/k
 * L2 norm, model/deltanet.c). */
float delta_dot(const float *a, const float *b, int n);

/* ---- per-level kernels (delta.c dispatches) ---------------------------- */
typedef void (*delta_fn)(const delta_run *r, float *S, int dim, int r0, int r1, float scale);
void delta_rows_scalar(const delta_run *r, float *S, int dim, int r0, int r1, float scale);
/* NULL where dim has no kernel at that level. */
delta_fn delta_fn_avx2(int dim);
delta_fn delta_fn_avx512(int dim);

#endif
