/* delta.c - the delta rule's scalar kernel and level dispatch (see
 * delta.h). The scalar kernel is the reference: plain C at the base flags
 * (no FMA), a row's dot products summed in 8 lanes and then a fixed tree.
 * Does not: threads (model/deltanet.c splits value heads), or the gates. */
#include "backend/delta.h"
#include "base/cpu.h"

float delta_dot(const float *a, const float *b, int n) {
    float acc[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += a[i + l] * b[i + l];
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

/* One row over the run: decay, S k, rank-1 update, S q, per token. */
static void row_scalar(const delta_run *r, float *row, int dim, int j, float scale) {
    for (int t = 0; t < r->n_tok; t++) {
        const float *k = r->k + t * r->x_stride, *q = r->q + t * r->x_stride;
        float decay = r->decay[t * r->g_stride];
        for (int i = 0; i < dim; i++) row[i] *= decay;
        float d = (r->v[t * r->x_stride + j] - delta_dot(row, k, dim)) * r->beta[t * r->g_stride];
        for (int i = 0; i < dim; i++) row[i] += d * k[i];
        r->o[t * r->o_stride + j] = delta_dot(row, q, dim) * scale;
    }
}

void delta_rows_scalar(const delta_run *r, float *S, int dim, int r0, int r1, float scale) {
    for (int j = r0; j < r1; j++) row_scalar(r, S + (size_t)j * dim, dim, j, scale);
}

/* ---- dispatch -------------------------------------------------------------- */

static int cpu_level(void) {
    const cpu_features *f = cpu_get();
    if (f->avx512f && f->avx512bw && f->avx512vl && f->avx2 && f->fma) return 2;
    if (f->avx2 && f->fma) return 1;
    return 0;
}

static delta_fn fn_for(int level, int dim) {
    if (level > cpu_level()) level = cpu_level();
    delta_fn f = NULL;
    if (level >= 2) f = delta_fn_avx512(dim);
    if (!f && level >= 1) f = delta_fn_avx2(dim);
    return f ? f : delta_rows_scalar;
}

void delta_rows_level(int level, const delta_run *r, float *S, int dim, int r0, int r1, float scale) {
    fn_for(level, dim)(r, S, dim, r0, r1, scale);
}

int delta_level(void) {
    return cpu_level();
}

const char *delta_numerics_level(int level, int dim) {
    delta_fn f = fn_for(level, dim);
    return f == delta_fn_avx512(dim) ? "" : f == delta_fn_avx2(dim) ? "+delta-avx2" : "+delta-scalar";
}

const char *delta_numerics(int dim) { return delta_numerics_level(cpu_level(), dim); }

void delta_rows(const delta_run *r, float *S, int dim, int r0, int r1, float scale) {
    delta_rows_level(cpu_level(), r, S, dim, r0, r1, scale);
}
