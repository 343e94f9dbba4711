/* attn.c - the tile driver, the scalar kernels and level dispatch (see
 * attn.h).
 *
 * The driver is level-independent: it widens each key tile once (tile_fill)
 * and hands it to every query that sees part of it (tile_step), in tile
 * order. Per query and tile the kernels run a fixed instruction sequence
 * that depends only on (query, tile rows, lo, hi), so a query's bits do
 * not depend on its company. Does not: thread (model/ splits the (token
 * block, KV head) pairs over the pool) or know about sequences. */
#include "backend/attn.h"

#include <limits.h>
#include <math.h>
#include <string.h>

#include "base/cpu.h"
#include "base/fp16.h"

#define T ATTN_KV_TILE

/* Per query: the scaled q (d floats), then acc (d), max, sum; rounded up
 * to whole 64-byte lines. */
static size_t query_floats(int d) {
    return ((size_t)2 * d + 2 + 15) & ~(size_t)15;
}

size_t attn_ws_floats(int head_dim, int nq) {
    return (size_t)2 * T * head_dim + T + (size_t)nq * query_floats(head_dim);
}

/* ---- scalar kernels (the reference; also any head_dim) -------------------- */

static const uint16_t *row_at(const uint16_t *const *blocks, int B, int stride, int pos) {
    return blocks[pos / B] + (size_t)(pos % B) * stride;
}

static void fill_scalar(const attn_kv *kv, int t0, int last, float *kt, float *vt) {
    int d = kv->head_dim;
    for (int j = 0; j < T; j++) {
        int pos = t0 + j < last ? t0 + j : last;
        const uint16_t *k = row_at(kv->k_blocks, kv->block_tokens, kv->stride, pos);
        const uint16_t *v = row_at(kv->v_blocks, kv->block_tokens, kv->stride, pos);
        for (int i = 0; i < d; i++) {
            kt[(size_t)i * T + j] = fp16_to_f32(k[i]);
            vt[(size_t)j * d + i] = fp16_to_f32(v[i]);
        }
    }
}

static void step_scalar(int d, const float *q, const float *kt, const float *vt, int lo, int hi, float *st,
                        float *p) {
    float m = st[d], mx = -INFINITY;
    for (int j = lo; j < hi; j++) {
        float s = 0;
        for (int i = 0; i < d; i++) s += q[i] * kt[(size_t)i * T + j];
        p[j] = s;
        if (s > mx) mx = s;
    }
    float mn = m > mx ? m : mx, alpha = expf(m - mn), sum = 0;
    for (int j = lo; j < hi; j++) {
        p[j] = expf(p[j] - mn);
        sum += p[j];
    }
    if (alpha != 1.0f)
        for (int i = 0; i < d; i++) st[i] *= alpha;
    for (int j = lo; j < hi; j++)
        for (int i = 0; i < d; i++) st[i] += p[j] * vt[(size_t)j * d + i];
    st[d] = mn;
    st[d + 1] = st[d + 1] * alpha + sum;
}

const attn_ops attn_ops_scalar = {fill_scalar, step_scalar};

/* ---- driver ---------------------------------------------------------------- */

static void run_ops(const attn_ops *ops, const attn_kv *kv, const attn_query *qs, int nq, float scale,
                    float *ws) {
    int d = kv->head_dim, first = INT_MAX, end = 0;
    size_t qf = query_floats(d);
    float *kt = ws, *vt = kt + (size_t)T * d, *p = vt + (size_t)T * d, *qb = p + T;
    for (int i = 0; i < nq; i++) {
        float *qi = qb + i * qf, *st = qi + d;
        for (int k = 0; k < d; k++) qi[k] = qs[i].q[k] * scale;
        memset(st, 0, (size_t)d * sizeof(float));
        st[d] = -INFINITY;
        st[d + 1] = 0;
        if (qs[i].first < first) first = qs[i].first;
        if (qs[i].end > end) end = qs[i].end;
    }
    for (int t0 = first / T * T; t0 < end; t0 += T) {
        ops->tile_fill(kv, t0, end - 1, kt, vt);
        for (int i = 0; i < nq; i++) {
            if (qs[i].first >= t0 + T || qs[i].end <= t0) continue;
            int lo = qs[i].first > t0 ? qs[i].first - t0 : 0, hi = qs[i].end - t0 < T ? qs[i].end - t0 : T;
            float *qi = qb + i * qf;
            ops->tile_step(d, qi, kt, vt, lo, hi, qi + d, p);
        }
    }
    for (int i = 0; i < nq; i++) {
        const float *st = qb + i * qf + d;
        float inv = 1.0f / st[d + 1];
        for (int k = 0; k < d; k++) qs[i].out[k] = st[k] * inv;
    }
}

/* ---- dispatch ----------------------------------------------------------------- */

static int cpu_level(void) {
    const cpu_features *f = cpu_get();
    if (f->avx512f && f->avx512bw && f->avx512vl && f->avx2 && f->fma && f->f16c) return 2;
    if (f->avx2 && f->fma && f->f16c) return 1;
    return 0;
}

static const attn_ops *ops_for(int level, int d) {
    if (level > cpu_level()) level = cpu_level();
    const attn_ops *o = NULL;
    if (level >= 2) o = attn_ops_avx512(d);
    if (!o && level >= 1) o = attn_ops_avx2(d);
    return o ? o : &attn_ops_scalar;
}

void attn_run_level(int level, const attn_kv *kv, const attn_query *qs, int nq, float scale, float *ws) {
    run_ops(ops_for(level, kv->head_dim), kv, qs, nq, scale, ws);
}

int attn_level(void) {
    return cpu_level();
}

void attn_run(const attn_kv *kv, const attn_query *qs, int nq, float scale, float *ws) {
    attn_run_level(cpu_level(), kv, qs, nq, scale, ws);
}
