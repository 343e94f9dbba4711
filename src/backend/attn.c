/* attn.c - the tile driver, the scalar kernels and level dispatch (see
 * attn.h).
 *
 * The driver is level-independent: it widens each key tile once (tile_fill)
 * and hands it to every query that sees part of it (tile_step, or
 * tile_step2 / tile_stepn for two / three or more queries with the same
 * key range), in tile order,
 * restarting each query's state at every segment and folding the segment
 * states in order (fold_into, shared by attn_run and attn_fold). Per query
 * and tile the kernels run a fixed instruction sequence that depends only
 * on (query, tile rows, lo, hi), so a query's bits do not depend on its
 * company. Does not: thread (model/ splits the (token block, KV head,
 * segment) items over the pool) or know about sequences. */
#include "backend/attn.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "base/mem.h"

#define T ATTN_KV_TILE

/* Per query: the scaled q (d floats), its segment state (d + 2: acc, max,
 * sum) and the folded result so far (d + 2); rounded up to whole 64-byte
 * lines. */
static size_t query_floats(int d) {
    return ((size_t)3 * d + 4 + 15) & ~(size_t)15;
}

/* The tile (kt, vt: 64 x head_dim floats each) and a stage of the same
 * size (the AMX level widens Q8_0 / Q4_0 tiles there first). */
static size_t tile_floats(int d) {
    return (size_t)4 * T * d;
}

/* Kernel scratch: the float levels' weights (T floats a query of a step,
 * ATTN_STEPN_MAX at most); the AMX
 * level's state (16 floats), score/value tile (16 x 64 floats), weights
 * (2 x 16 x 64 bf16) and packed queries (2 x 16 x head_dim bf16). */
static size_t scratch_floats(int d) {
    return (size_t)32 * T + 16 * (size_t)d + 16;
}

/* ws: the tile and stage, the kernel scratch, the queries, then the list
 * of queries that see a tile (tile_group kernels). */
static float *ws_queries(float *ws, int d) {
    return ws + tile_floats(d) + scratch_floats(d);
}

size_t attn_ws_floats(int head_dim, int nq) {
    size_t gq = ((size_t)nq * sizeof(attn_gq) + sizeof(float) - 1) / sizeof(float);
    return tile_floats(head_dim) + scratch_floats(head_dim) + (size_t)nq * query_floats(head_dim) + gq;
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
            kt[(size_t)i * T + j] = kvq_at(kv->type, k, i);
            vt[(size_t)j * d + i] = kvq_at(kv->type, v, i);
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

const attn_ops attn_ops_scalar = {.tile_fill = fill_scalar, .tile_step = step_scalar};

/* ---- driver ---------------------------------------------------------------- */

static void state_init(int d, float *st) {
    memset(st, 0, (size_t)d * sizeof(float));
    st[d] = -INFINITY;
    st[d + 1] = 0;
}

/* res = res folded with the next segment's state x; an empty state (sum
 * 0: no keys) changes nothing, and folding into an empty res copies x, so
 * one segment gives exactly its own state. */
static void fold_into(int d, float *res, const float *x) {
    if (x[d + 1] == 0) return;
    if (res[d + 1] == 0) {
        memcpy(res, x, ((size_t)d + 2) * sizeof(float));
        return;
    }
    float m = res[d] > x[d] ? res[d] : x[d], a = expf(res[d] - m), b = expf(x[d] - m);
    for (int i = 0; i < d; i++) res[i] = res[i] * a + x[i] * b;
    res[d] = m;
    res[d + 1] = res[d + 1] * a + x[d + 1] * b;
}

/* The sink: one more softmax term, e^(sink - m), with no value (ggml's
 * flash attention does the same after its last key): when it is the
 * larger, the state is rescaled to it. Scores are already scaled; the
 * sink is not (it is a logit). After the fold, so it is added once. */
static void add_sink(int d, float *res, float sink) {
    if (res[d + 1] == 0 || sink > res[d]) {
        float a = res[d + 1] == 0 ? 0 : expf(res[d] - sink);
        for (int i = 0; i < d; i++) res[i] *= a;
        res[d] = sink;
        res[d + 1] = res[d + 1] * a + 1;
    } else {
        res[d + 1] += expf(sink - res[d]);
    }
}

typedef float attn_v4 __attribute__((vector_size(16)));

/* out = x * s, 4 floats a step (GNU C vectors: one IEEE multiply per lane,
 * the scalar loop's bits; at -O2 the compiler left the loop scalar: 1.5%
 * of SmolLM2's prefill each where prepare and finish use it). */
static void scale_into(float *out, const float *x, float s, int d) {
    const attn_v4 sv = {s, s, s, s};
    int k = 0;
    for (; k + 4 <= d; k += 4) {
        attn_v4 v;
        memcpy(&v, x + k, sizeof v);
        v *= sv;
        memcpy(out + k, &v, sizeof v);
    }
    for (; k < d; k++) out[k] = x[k] * s;
}

static void finish(int d, float *res, const float *sink, float *out) {
    if (sink) add_sink(d, res, *sink);
    scale_into(out, res, 1.0f / res[d + 1], d);
}

void attn_fold(int head_dim, const float *states, int n, const float *sink, float *out) {
    size_t sf = attn_state_floats(head_dim);
    float stack[1024 + 2], *r = head_dim <= 1024 ? stack : xmalloc(sf * sizeof(float));
    state_init(head_dim, r);
    for (int s = 0; s < n; s++) fold_into(head_dim, r, states + (size_t)s * sf);
    finish(head_dim, r, sink, out);
    if (r != stack) free(r);
}

/* The call's queries, scaled (and in the kernel's format), into ws;
 * their key span [*first, *end). */
static void prepare(const attn_ops *ops, int d, const attn_query *qs, int nq, float scale, float *qb, int *first,
                    int *end) {
    size_t qf = query_floats(d);
    *first = INT_MAX, *end = 0;
    for (int i = 0; i < nq; i++) {
        float *qi = qb + i * qf;
        scale_into(qi, qs[i].q, scale, d);
        if (ops->prep_q) ops->prep_q(d, qi);
        if (qs[i].first < *first) *first = qs[i].first;
        if (qs[i].end > *end) *end = qs[i].end;
    }
}

/* One tile for every query that sees part of it, in one list
 * (tile_group kernels; the list lies after the queries in ws). */
static void tile_groups(const attn_ops *ops, int d, const attn_query *qs, int nq, float *qb, int t0,
                        const float *kt, const float *vt, float *p) {
    size_t qf = query_floats(d);
    attn_gq *g = (attn_gq *)(qb + nq * qf);
    int n = 0;
    for (int i = 0; i < nq; i++) {
        if (qs[i].first >= t0 + T || qs[i].end <= t0) continue;
        float *qi = qb + i * qf;
        g[n++] = (attn_gq){qi, qi + d, qs[i].first > t0 ? qs[i].first - t0 : 0, qs[i].end - t0 < T ? qs[i].end - t0 : T,
                           i};
    }
    if (n) ops->tile_group(d, n, g, (int)qf, kt, vt, p);
}

/* Queries of one tile waiting for company with the same [lo, hi). */
typedef struct {
    float *q[ATTN_STEPN_MAX]; /* each query's q; its state follows it */
    int n, lo, hi;
} pending;

/* The most queries one step takes with these kernels. */
static int step_width(const attn_ops *ops) {
    return ops->tile_stepn ? (ops->stepn_max ? ops->stepn_max : 4) : ops->tile_step2 ? 2 : 1;
}

/* The pending queries through the widest steps there are: 3 to
 * step_width, else 2, then 1 at a time (a query's bits are the same in
 * each). */
static void flush(const attn_ops *ops, int d, pending *pd, const float *kt, const float *vt, float *p) {
    int i = 0;
    if (ops->tile_stepn && pd->n >= 3) {
        float *st[ATTN_STEPN_MAX];
        for (int k = 0; k < pd->n; k++) st[k] = pd->q[k] + d;
        ops->tile_stepn(d, pd->n, (const float *const *)pd->q, kt, vt, pd->lo, pd->hi, st, p);
        i = pd->n;
    }
    for (; ops->tile_step2 && i + 2 <= pd->n; i += 2)
        ops->tile_step2(d, pd->q[i], pd->q[i + 1], kt, vt, pd->lo, pd->hi, pd->q[i] + d, pd->q[i + 1] + d, p);
    for (; i < pd->n; i++) ops->tile_step(d, pd->q[i], kt, vt, pd->lo, pd->hi, pd->q[i] + d, p);
    pd->n = 0;
}

/* Tiles of keys [k0, k1) (k0 on a tile edge) into the segment state of
 * every query that sees part of them; rows are clamped to last. */
static void run_tiles(const attn_ops *ops, const attn_kv *kv, const attn_query *qs, int nq, float *ws, int k0,
                      int k1, int last) {
    int d = kv->head_dim;
    size_t qf = query_floats(d);
    float *kt = ws, *vt = kt + (size_t)T * d, *p = ws + tile_floats(d), *qb = ws_queries(ws, d);
    if (ops->tile_group) {
        ops->group_begin(p);
        for (int t0 = k0; t0 < k1; t0 += T) {
            ops->tile_fill(kv, t0, last, kt, vt);
            tile_groups(ops, d, qs, nq, qb, t0, kt, vt, p);
        }
        ops->group_end(p);
        return;
    }
    int width = step_width(ops);
    for (int t0 = k0; t0 < k1; t0 += T) {
        ops->tile_fill(kv, t0, last, kt, vt);
        pending pd = {.n = 0};
        for (int i = 0; i < nq; i++) {
            if (qs[i].first >= t0 + T || qs[i].end <= t0) continue;
            int lo = qs[i].first > t0 ? qs[i].first - t0 : 0, hi = qs[i].end - t0 < T ? qs[i].end - t0 : T;
            if (pd.n && (lo != pd.lo || hi != pd.hi)) flush(ops, d, &pd, kt, vt, p);
            pd.lo = lo, pd.hi = hi;
            pd.q[pd.n++] = qb + i * qf;
            if (pd.n == width) flush(ops, d, &pd, kt, vt, p);
        }
        flush(ops, d, &pd, kt, vt, p);
    }
}

/* Segment seg's tiles for every query, each starting a fresh state. */
static void run_segment(const attn_ops *ops, const attn_kv *kv, const attn_query *qs, int nq, float *ws,
                        int first, int end, int seg) {
    int d = kv->head_dim, k0 = seg * ATTN_SEG, k1 = k0 + ATTN_SEG;
    size_t qf = query_floats(d);
    float *qb = ws_queries(ws, d);
    for (int i = 0; i < nq; i++) state_init(d, qb + i * qf + d);
    if (k0 < first / T * T) k0 = first / T * T;
    if (k1 > end) k1 = end;
    run_tiles(ops, kv, qs, nq, ws, k0, k1, end - 1);
}

static void run_ops(const attn_ops *ops, const attn_kv *kv, const attn_query *qs, int nq, float scale,
                    float *ws) {
    int d = kv->head_dim, first, end;
    size_t qf = query_floats(d);
    float *qb = ws_queries(ws, d);
    prepare(ops, d, qs, nq, scale, qb, &first, &end);
    for (int i = 0; i < nq; i++) state_init(d, qb + i * qf + 2 * d + 2);
    for (int seg = first / ATTN_SEG; seg * ATTN_SEG < end; seg++) {
        run_segment(ops, kv, qs, nq, ws, first, end, seg);
        for (int i = 0; i < nq; i++) fold_into(d, qb + i * qf + 2 * d + 2, qb + i * qf + d);
    }
    for (int i = 0; i < nq; i++) finish(d, qb + i * qf + 2 * d + 2, qs[i].sink, qs[i].out);
}

static void run_seg_ops(const attn_ops *ops, const attn_kv *kv, const attn_query *qs, int nq, float scale, int seg,
                        float *const *states, float *ws) {
    int d = kv->head_dim, first, end;
    size_t qf = query_floats(d);
    float *qb = ws_queries(ws, d);
    prepare(ops, d, qs, nq, scale, qb, &first, &end);
    run_segment(ops, kv, qs, nq, ws, first, end, seg);
    for (int i = 0; i < nq; i++) memcpy(states[i], qb + i * qf + d, attn_state_floats(d) * sizeof(float));
}

/* ---- dispatch ----------------------------------------------------------------- */

static int cpu_level(void) {
    const cpu_features *f = cpu_get();
    int avx512 = f->avx512f && f->avx512bw && f->avx512vl && f->avx2 && f->fma && f->f16c;
    if (avx512 && f->avx512bf16 && f->amxbf16) return ATTN_LEVEL_AMX;
    if (avx512) return ATTN_LEVEL_AVX512;
    if (f->avx2 && f->fma && f->f16c) return ATTN_LEVEL_AVX2;
    return ATTN_LEVEL_SCALAR;
}

/* A build with -DATTN_QK_INT8=0 scores q8_0 keys in float32 at every
 * level, as before int8 scoring (for benchmarks of the two). */
#ifndef ATTN_QK_INT8
#define ATTN_QK_INT8 1
#endif

/* The kernels for heads of d stored as t at a level: the AMX ones first,
 * then (q8_0 keys, AVX-512 VNNI) the int8 scoring ones, then the float32
 * ones of the highest level that has d. */
static const attn_ops *ops_for(int level, int d, kvq_type t) {
    if (level > cpu_level()) level = cpu_level();
    const attn_ops *o = NULL;
    if (level >= ATTN_LEVEL_AMX) o = attn_ops_amx(d);
    if (!o && ATTN_QK_INT8 && level >= ATTN_LEVEL_AVX512 && t == KVQ_Q8_0 && cpu_get()->avx512vnni)
        o = attn_ops_vnni_q8(d);
    if (!o && level >= ATTN_LEVEL_AVX512) o = attn_ops_avx512(d);
    if (!o && level >= ATTN_LEVEL_AVX2) o = attn_ops_avx2(d);
    return o ? o : &attn_ops_scalar;
}

int attn_qk_int8(int level, int head_dim, kvq_type t) {
    return t == KVQ_Q8_0 && ops_for(level, head_dim, t) == attn_ops_vnni_q8(head_dim);
}

const char *attn_numerics_level(int level, int head_dim, kvq_type t, char *buf, size_t cap) {
    const attn_ops *o = ops_for(level, head_dim, t);
    const char *base = o == attn_ops_amx(head_dim)   ? "cpu+attn-amx"
                       : o == attn_ops_avx2(head_dim) ? "cpu+attn-avx2"
                       : o == &attn_ops_scalar        ? "cpu+attn-scalar"
                                                      : "cpu";
    char kv[64];
    const char *id = kvq_numerics(t, base, kv, sizeof kv);
    snprintf(buf, cap, "%s%s", id, attn_qk_int8(level, head_dim, t) ? "+qk-i8" : "");
    return buf;
}

const char *attn_numerics(int head_dim, kvq_type t, char *buf, size_t cap) {
    return attn_numerics_level(cpu_level(), head_dim, t, buf, cap);
}

void attn_run_ops(const attn_ops *ops, const attn_kv *kv, const attn_query *qs, int nq, float scale, float *ws) {
    run_ops(ops, kv, qs, nq, scale, ws);
}

void attn_run_level(int level, const attn_kv *kv, const attn_query *qs, int nq, float scale, float *ws) {
    run_ops(ops_for(level, kv->head_dim, kv->type), kv, qs, nq, scale, ws);
}

void attn_run_seg_level(int level, const attn_kv *kv, const attn_query *qs, int nq, float scale, int seg,
                        float *const *states, float *ws) {
    run_seg_ops(ops_for(level, kv->head_dim, kv->type), kv, qs, nq, scale, seg, states, ws);
}

void attn_run_seg(const attn_kv *kv, const attn_query *qs, int nq, float scale, int seg, float *const *states,
                  float *ws) {
    attn_run_seg_level(cpu_level(), kv, qs, nq, scale, seg, states, ws);
}

int attn_level(void) {
    return cpu_level();
}

void attn_run(const attn_kv *kv, const attn_query *qs, int nq, float scale, float *ws) {
    attn_run_level(cpu_level(), kv, qs, nq, scale, ws);
}
