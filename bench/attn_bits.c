/* attn_bits.c - a hash of one attention level's output bits over many
 * call shapes (`make build/attn-bits`, bench/README.md): build it at two
 * commits and diff the two outputs to show that a kernel change kept every
 * bit (the tests check that a row's bits do not depend on its company, not
 * that they are the bits of an older build).
 *
 * Shapes: K/V f16, q8_0, q4_0; head_dim 64, 256, 128, 32, 48; depths 1 to
 * 4160 (on and off tile edges, across segment edges); 1 to 64 tokens of 1
 * to 5 heads (so 1 to 320 queries a call: every step width); windows and
 * sinks on some; each call's output, then every 7th query alone.
 *   build/attn-bits [LEVEL (2: avx512; 0 scalar, 1 avx2, 3 amx)] */
#include <stdio.h>
#include <stdlib.h>

#include "attn_cache.h"
#include "backend/attn.h"
#include "base/mem.h"

static uint64_t hash = 1469598103934665603ull; /* FNV-1a */
static void mix(const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) hash = (hash ^ b[i]) * 1099511628211ull;
}

/* One call of n_tok tokens x hpg heads ending at depth (window: keys per
 * query, 0 all), then every 7th query alone; outputs into the hash. */
static void run(int level, kvq_type t, int d, int depth, int n_tok, int hpg, int window, float qscale) {
    bench_cache c;
    bench_cache_new(&c, t, d, (depth + BENCH_BT - 1) / BENCH_BT + 1);
    int nq = n_tok * hpg;
    float *q = xmalloc((size_t)nq * d * 4), *out = xmalloc((size_t)nq * d * 4), sink = 0.5f;
    for (int i = 0; i < nq * d; i++) q[i] = bench_frand() * qscale;
    attn_query *qs = xmalloc((size_t)nq * sizeof(*qs));
    for (int i = 0; i < nq; i++) {
        int end = depth - n_tok + i / hpg + 1, first = window && end > window ? end - window : 0;
        qs[i] = (attn_query){q + (size_t)i * d, out + (size_t)i * d, first, end, i % 5 == 0 ? &sink : NULL};
    }
    float *ws = xaligned(attn_ws_floats(d, nq) * sizeof(float));
    attn_run_level(level, &c.kv, qs, nq, 0.125f, ws);
    mix(out, (size_t)nq * d * 4);
    for (int i = 0; i < nq; i += 7) {
        attn_run_level(level, &c.kv, qs + i, 1, 0.125f, ws);
        mix(out + (size_t)i * d, (size_t)d * 4);
    }
    bench_cache_free(&c);
    free(q), free(out), free(qs), free(ws);
}

int main(int argc, char **argv) {
    int level = argc > 1 ? atoi(argv[1]) : ATTN_LEVEL_AVX512;
    static const int dims[] = {64, 256, 128, 32, 48}, depths[] = {1, 5, 63, 64, 65, 130, 300, 2047, 2100, 4160};
    static const int toks[] = {1, 2, 3, 7, 32, 64}, hpgs[] = {1, 2, 3, 4, 5};
    static const kvq_type types[] = {KVQ_F16, KVQ_Q8_0, KVQ_Q4_0};
    printf("attention level %d (the CPU's: %d)\n", level, attn_level());
    for (int ti = 0; ti < 3; ti++)
        for (int di = 0; di < 5; di++) {
            int d = dims[di];
            if (types[ti] != KVQ_F16 && d % KVQ_BLOCK) continue;
            uint64_t h0 = hash;
            for (int de = 0; de < 10; de++)
                for (int to = 0; to < 6; to++) {
                    if (toks[to] > depths[de] || (d >= 256 && depths[de] > 2100 && toks[to] > 32)) continue;
                    int window = de % 3 == 0 ? 0 : 100 + de * 37;
                    run(level, types[ti], d, depths[de], toks[to], hpgs[(de + to) % 5], window, to % 2 ? 1.0f : 8.0f);
                }
            printf("%s d %d: %016llx\n", kvq_name(types[ti]), d, (unsigned long long)(hash ^ h0));
        }
    printf("all: %016llx\n", (unsigned long long)hash);
    return 0;
}
