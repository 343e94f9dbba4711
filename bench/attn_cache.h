/* attn_cache.h - a paged K/V cache of one head filled with pseudo-random
 * rows (keys in [-2, 2), values in [-1, 1)), stored as a KV type, for the
 * attention benchmarks (attn_kern.c, attn_bits.c). Header-only: each
 * benchmark is one file. */
#ifndef STRATA_BENCH_ATTN_CACHE_H
#define STRATA_BENCH_ATTN_CACHE_H

#include <stdint.h>
#include <stdlib.h>

#include "backend/attn.h"
#include "base/mem.h"

#define BENCH_BT 64 /* positions per block */

static uint32_t bench_rng = 7;
static inline float bench_frand(void) {
    bench_rng = bench_rng * 1664525u + 1013904223u;
    return (float)((bench_rng >> 8) & 0xffff) / 32768.0f - 1.0f;
}

typedef struct {
    uint16_t *k, *v;
    const uint16_t **kb, **vb;
    attn_kv kv;
} bench_cache;

/* n_blocks blocks of BENCH_BT rows of head_dim d, stored as t. */
static inline void bench_cache_new(bench_cache *c, kvq_type t, int d, int n_blocks) {
    int row = (int)kvq_halves(t, (size_t)d);
    c->k = xmalloc((size_t)n_blocks * BENCH_BT * row * 2), c->v = xmalloc((size_t)n_blocks * BENCH_BT * row * 2);
    float *x = xmalloc((size_t)d * 4);
    for (int r = 0; r < n_blocks * BENCH_BT; r++) {
        for (int i = 0; i < d; i++) x[i] = bench_frand() * 2;
        kvq_write_row(t, x, c->k + (size_t)r * row, d);
        for (int i = 0; i < d; i++) x[i] = bench_frand();
        kvq_write_row(t, x, c->v + (size_t)r * row, d);
    }
    free(x);
    c->kb = xmalloc((size_t)n_blocks * sizeof(*c->kb)), c->vb = xmalloc((size_t)n_blocks * sizeof(*c->vb));
    for (int i = 0; i < n_blocks; i++)
        c->kb[i] = c->k + (size_t)i * BENCH_BT * row, c->vb[i] = c->v + (size_t)i * BENCH_BT * row;
    c->kv = (attn_kv){c->kb, c->vb, BENCH_BT, row, d, t};
}

static inline void bench_cache_free(bench_cache *c) {
    free(c->k), free(c->v), free(c->kb), free(c->vb);
}

#endif
