/* test_attn.c - the attention kernels (backend/attn): agreement with a
 * float64 softmax at every level, and batch invariance: a query's output
 * is bit-identical whether it is computed alone (decode), with the other
 * heads of its group, or in any block of prefill queries, at depths on
 * and off the 64-key tile boundaries, with and without a sliding window;
 * and key segments (ATTN_SEG) computed one call each and folded give
 * attn_run's bits. The same for keys/values stored as q8_0 or q4_0 (backend/kvq.h),
 * whose tiles widen to the same floats at every level. */
#include <stdlib.h>

#include "backend/attn.h"
#include "base/fp16.h"
#include "base/mem.h"
#include "test.h"
#include "test_util.h"

#define BT 16 /* block_tokens of the synthetic cache */

/* A synthetic paged cache: n_pos positions of n_kvh heads of d dims,
 * stored as type (rows of row_h halves). */
typedef struct cache {
    int n_pos, n_kvh, d, n_blocks, row_h;
    kvq_type type;
    uint16_t *k, *v;                /* [block][BT][row_h] */
    const uint16_t **kb, **vb;      /* block tables of head 0 (others: + h * d) */
    const uint16_t **kbh, **vbh;    /* scratch tables for one head */
} cache;

static uint32_t rng = 1;
static float frand(void) {
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static void cache_new_type(cache *c, int n_pos, int n_kvh, int d, kvq_type type) {
    c->n_pos = n_pos, c->n_kvh = n_kvh, c->d = d, c->type = type;
    c->n_blocks = (n_pos + BT - 1) / BT;
    c->row_h = (int)kvq_halves(type, (size_t)n_kvh * d);
    size_t rows = (size_t)c->n_blocks * BT, n = rows * c->row_h;
    c->k = xmalloc(n * 2), c->v = xmalloc(n * 2);
    float *kr = xmalloc((size_t)n_kvh * d * 4), *vr = xmalloc((size_t)n_kvh * d * 4);
    for (size_t r = 0; r < rows; r++) {
        for (int i = 0; i < n_kvh * d; i++) kr[i] = frand() * 2.0f, vr[i] = frand();
        kvq_write_row(type, kr, c->k + r * c->row_h, n_kvh * d);
        kvq_write_row(type, vr, c->v + r * c->row_h, n_kvh * d);
    }
    free(kr), free(vr);
    c->kbh = xmalloc((size_t)c->n_blocks * sizeof(*c->kbh));
    c->vbh = xmalloc((size_t)c->n_blocks * sizeof(*c->vbh));
}

static void cache_new(cache *c, int n_pos, int n_kvh, int d) { cache_new_type(c, n_pos, n_kvh, d, KVQ_F16); }

static void cache_free(cache *c) {
    free(c->k), free(c->v), free(c->kbh), free(c->vbh);
}

static attn_kv cache_head(cache *c, int h) {
    size_t row = (size_t)c->row_h, head = kvq_halves(c->type, (size_t)h * c->d);
    for (int i = 0; i < c->n_blocks; i++) {
        c->kbh[i] = c->k + (size_t)i * BT * row + head;
        c->vbh[i] = c->v + (size_t)i * BT * row + head;
    }
    return (attn_kv){c->kbh, c->vbh, BT, (int)row, c->d, c->type};
}

/* float64 softmax attention of q over keys [first, end) of head h, with
 * the sink logit as one more softmax term without a value (NULL: none). */
static void ref_attn(const cache *c, int h, const double *q, int first, int end, double scale, const float *sink,
                     double *out) {
    size_t row = (size_t)c->row_h, head = kvq_halves(c->type, (size_t)h * c->d);
    double *s = xmalloc((size_t)end * sizeof(double)), mx = -1e300, sum = 0;
    for (int j = first; j < end; j++) {
        const uint16_t *k = c->k + (size_t)j * row + head;
        double dot = 0;
        for (int i = 0; i < c->d; i++) dot += q[i] * kvq_at(c->type, k, i);
        s[j] = dot * scale;
        if (s[j] > mx) mx = s[j];
    }
    for (int i = 0; i < c->d; i++) out[i] = 0;
    for (int j = first; j < end; j++) {
        double p = exp(s[j] - mx);
        sum += p;
        const uint16_t *v = c->v + (size_t)j * row + head;
        for (int i = 0; i < c->d; i++) out[i] += p * kvq_at(c->type, v, i);
    }
    if (sink) sum += exp(*sink - mx);
    for (int i = 0; i < c->d; i++) out[i] /= sum;
    free(s);
}

static const char *LEVEL[] = {"scalar", "avx2", "avx512", "amx"};


/* Sinks (gpt-oss): none, one below the scores, one far above them (the
 * state is rescaled to it). */
static const float SINK_LO = -1.5f, SINK_HI = 12.0f;
static const float *const SINKS[] = {NULL, &SINK_LO, &SINK_HI};
#define N_SINKS 3

/* The query as a level scores it, scale applied: q * scale, or where
 * the level scores q8_0 keys in int8 (attn_qk_int8) that row quantized
 * as the kernel does (kvq_quant_q8) and read back exactly. */
static void scored_query(int level, const cache *c, const float *q, float scale, double *qd) {
    int d = c->d;
    float *x = xmalloc((size_t)d * 4), sc[512 / KVQ_BLOCK];
    int8_t q8[512];
    for (int i = 0; i < d; i++) x[i] = q[i] * scale, qd[i] = x[i];
    if (attn_qk_int8(level, d, c->type)) {
        kvq_quant_q8(x, d, q8, sc);
        for (int i = 0; i < d; i++) qd[i] = (double)q8[i] * sc[i / KVQ_BLOCK];
    }
    free(x);
}

/* One query at head dim d over keys [first, end) of a cache of n
 * positions, at every level, against float64 (of the query the level
 * scores: scored_query): for each end in depths, without a window and
 * with one starting at window_first(end). Where the query is quantized,
 * also against float64 of the exact query, within qerr_max. */
static void check_vs_float64_type(kvq_type type, int d, int n, const int *depths, int n_depths,
                                  int (*window_first)(int end)) {
    cache c;
    cache_new_type(&c, n, 2, d, type);
    float *q = xmalloc((size_t)d * 4), *out = xmalloc((size_t)d * 4);
    double *ref = xmalloc((size_t)d * 8), *qd = xmalloc((size_t)d * 8), *qx = xmalloc((size_t)d * 8);
    float *ws = xaligned(attn_ws_floats(d, 1) * sizeof(float));
    for (int i = 0; i < d; i++) q[i] = frand(), qx[i] = q[i];
    for (int level = 0; level <= attn_level(); level++)
        for (int k = 0; k < n_depths; k++)
            for (int w = 0; w < 2 * N_SINKS; w++) {
                int end = depths[k], first = w % 2 ? window_first(end) : 0;
                const float *sink = SINKS[w / 2];
                attn_kv kv = cache_head(&c, 1);
                attn_query aq = {q, out, first, end, sink};
                attn_run_level(level, &kv, &aq, 1, 0.125f, ws);
                scored_query(level, &c, q, 0.125f, qd);
                ref_attn(&c, 1, qd, first, end, 1.0, sink, ref);
                double err = 0;
                for (int i = 0; i < d; i++) err = fmax(err, fabs(out[i] - ref[i]));
                CHECK_MSG(err < 2e-5, "%s %s d=%d keys [%d,%d) sink %g: max error %g", LEVEL[level], kvq_name(type), d,
                          first, end, sink ? *sink : -INFINITY, err);
                if (!attn_qk_int8(level, d, type)) continue;
                /* The query's own rounding: at most half a step (1/254 of its
                 * block's largest value) per dim; with these keys (|k| <= 2)
                 * and values (|v| <= 1) measured up to 4.1e-3 (d 256, few
                 * keys); a wrong scale or block would be ~0.1 and more. */
                ref_attn(&c, 1, qx, first, end, 0.125, sink, ref);
                err = 0;
                for (int i = 0; i < d; i++) err = fmax(err, fabs(out[i] - ref[i]));
                CHECK_MSG(err < 1e-2, "%s %s int8 scores, d=%d keys [%d,%d): max error %g from the exact query",
                          LEVEL[level], kvq_name(type), d, first, end, err);
            }
    free(q), free(out), free(ref), free(qd), free(qx), free(ws);
    cache_free(&c);
}

static void check_vs_float64(int d, int n, const int *depths, int n_depths, int (*window_first)(int end)) {
    check_vs_float64_type(KVQ_F16, d, n, depths, n_depths, window_first);
}

static int last_100(int end) { return end > 100 ? end - 100 : 0; }

TEST(attn_matches_float64) {
    static const int dims[] = {64, 256, 40, 12};
    static const int depths[] = {1, 7, 63, 64, 65, 200, 1000};
    for (int di = 0; di < 4; di++) check_vs_float64(dims[di], 1000, depths, 7, last_100);
}

/* n tokens at positions 0..n-1, 3 query heads per KV head: prefill in
 * query blocks of `blk` tokens (all heads of a block in one call) against
 * decode (one call per token with its 3 heads) and one head alone. */
static void check_paths_type(kvq_type type, int level, int d, int n, int window, int blk) {
    int hpg = 3;
    cache c;
    cache_new_type(&c, n, 1, d, type);
    float *q = xmalloc((size_t)n * hpg * d * 4);
    for (size_t i = 0; i < (size_t)n * hpg * d; i++) q[i] = frand();
    float *pre = xmalloc((size_t)n * hpg * d * 4), *dec = xmalloc((size_t)n * hpg * d * 4);
    float *one = xmalloc((size_t)d * 4);
    attn_query *qs = xmalloc((size_t)n * hpg * sizeof(*qs));
    float *ws = xaligned(attn_ws_floats(d, blk * hpg) * sizeof(float));
    attn_kv kv = cache_head(&c, 0);
    for (int t0 = 0; t0 < n; t0 += blk) {
        int nq = 0;
        for (int t = t0; t < n && t < t0 + blk; t++)
            for (int h = 0; h < hpg; h++) {
                int first = window && t + 1 > window ? t + 1 - window : 0;
                qs[nq++] = (attn_query){q + ((size_t)t * hpg + h) * d, pre + ((size_t)t * hpg + h) * d, first, t + 1, SINKS[h % N_SINKS]};
            }
        attn_run_level(level, &kv, qs, nq, 0.125f, ws);
    }
    for (int t = 0; t < n; t++) {
        int first = window && t + 1 > window ? t + 1 - window : 0;
        for (int h = 0; h < hpg; h++)
            qs[h] = (attn_query){q + ((size_t)t * hpg + h) * d, dec + ((size_t)t * hpg + h) * d, first, t + 1, SINKS[h % N_SINKS]};
        attn_run_level(level, &kv, qs, hpg, 0.125f, ws);
        for (int h = 0; h < hpg; h++) { /* heads 0, 1 go as a pair (tile_step2) in the group */
            attn_query alone = {q + ((size_t)t * hpg + h) * d, one, first, t + 1, SINKS[h % N_SINKS]};
            attn_run_level(level, &kv, &alone, 1, 0.125f, ws);
            CHECK_MSG(memcmp(one, dec + ((size_t)t * hpg + h) * d, (size_t)d * 4) == 0,
                      "%s d=%d window %d: position %d: head %d alone differs from its group", LEVEL[level], d,
                      window, t, h);
        }
    }
    for (int t = 0; t < n; t++)
        if (memcmp(pre + (size_t)t * hpg * d, dec + (size_t)t * hpg * d, (size_t)hpg * d * 4)) {
            test_fail(__FILE__, __LINE__, "%s %s d=%d window %d blocks of %d: position %d: prefill differs from decode",
                      LEVEL[level], kvq_name(type), d, window, blk, t);
            break;
        }
    free(q), free(pre), free(dec), free(one), free(qs), free(ws);
    cache_free(&c);
}

static void check_paths(int level, int d, int n, int window, int blk) {
    check_paths_type(KVQ_F16, level, d, n, window, blk);
}

TEST(attn_prefill_equals_decode) {
    for (int level = 0; level <= attn_level(); level++) {
        check_paths(level, 64, 300, 0, 32);  /* depths 1..300: on and off tile edges */
        check_paths(level, 64, 300, 0, 7);   /* query blocks across tile edges; 21 queries: steps of 8, 8, 5 */
        check_paths(level, 64, 300, 0, 2);   /* 6 queries a call: the avx512 step of 4 + 2 */
        check_paths(level, 64, 300, 100, 32); /* sliding window starting mid-tile */
        check_paths(level, 256, 140, 50, 13); /* 39 queries: steps of 8 and 7 */
        check_paths(level, 160, 140, 50, 13); /* AMX: a 32-dim value block after the 64s */
        check_paths(level, 40, 90, 0, 16);   /* head_dim without a SIMD kernel */
    }
}

/* Deep queries: prefill blocks at depth (as after a cached prefix or a
 * long chunked prompt) against decode at the same positions. */
TEST(attn_prefill_equals_decode_deep) {
    int d = 64, n = 2200, hpg = 3;
    static const int probe[] = {1023, 1024, 1025, 1500, 2047, 2199};
    cache c;
    cache_new(&c, n, 1, d);
    float *q = xmalloc((size_t)hpg * d * 4), *a = xmalloc((size_t)hpg * d * 4), *b = xmalloc((size_t)hpg * d * 4);
    float *ws = xaligned(attn_ws_floats(d, 32 * hpg) * sizeof(float));
    attn_query qs[32 * 3];
    attn_kv kv = cache_head(&c, 0);
    for (int level = 0; level <= attn_level(); level++)
        for (int k = 0; k < 6; k++) {
            int t = probe[k], t0 = t - 17 < 0 ? 0 : t - 17, nq = 0;
            for (int i = 0; i < hpg * d; i++) q[i] = frand();
            /* a block of 20 tokens whose 18th is t (other rows: same q, other depths) */
            for (int u = t0; u < t0 + 20 && u < n; u++)
                for (int h = 0; h < hpg; h++)
                    qs[nq++] = (attn_query){q + h * d, u == t ? a + h * d : b + h * d, 0, u + 1, SINKS[h % N_SINKS]};
            attn_run_level(level, &kv, qs, nq, 0.125f, ws);
            for (int h = 0; h < hpg; h++) qs[h] = (attn_query){q + h * d, b + h * d, 0, t + 1, SINKS[h % N_SINKS]};
            attn_run_level(level, &kv, qs, hpg, 0.125f, ws);
            CHECK_MSG(memcmp(a, b, (size_t)hpg * d * 4) == 0, "%s: depth %d: prefill block differs from decode",
                      LEVEL[level], t + 1);
        }
    free(q), free(a), free(b), free(ws);
    cache_free(&c);
}

/* Queries past several key segments against float64, with and without a
 * window that starts inside a segment. */
static int last_two_thirds(int end) { return end / 3; }

TEST(attn_segments_match_float64) {
    static const int dims[] = {64, 256};
    static const int depths[] = {ATTN_SEG + 1, 2 * ATTN_SEG + 52, 2 * ATTN_SEG + 300};
    for (int di = 0; di < 2; di++) check_vs_float64(dims[di], 2 * ATTN_SEG + 300, depths, 3, last_two_thirds);
}

/* One query group at position t: attn_run in one call against its
 * segments computed one call each (last segment first, as another thread
 * might) and folded; memcmp. */
static void check_split(int level, cache *c, int t, int window, int hpg, const float *q, float *ws) {
    int d = c->d, first = window && t + 1 > window ? t + 1 - window : 0, s0 = first / ATTN_SEG;
    int nseg = t / ATTN_SEG - s0 + 1;
    size_t sf = attn_state_floats(d);
    float *whole = xmalloc((size_t)hpg * d * 4), *split = xmalloc((size_t)hpg * d * 4);
    float *st = xmalloc((size_t)hpg * nseg * sf * 4), *stp[8];
    attn_query qs[8];
    attn_kv kv = cache_head(c, 0);
    for (int h = 0; h < hpg; h++)
        qs[h] = (attn_query){q + (size_t)h * d, whole + (size_t)h * d, first, t + 1, SINKS[h % N_SINKS]};
    attn_run_level(level, &kv, qs, hpg, 0.125f, ws);
    for (int s = nseg - 1; s >= 0; s--) {
        for (int h = 0; h < hpg; h++) stp[h] = st + ((size_t)h * nseg + s) * sf;
        attn_run_seg_level(level, &kv, qs, hpg, 0.125f, s0 + s, stp, ws);
    }
    for (int h = 0; h < hpg; h++) attn_fold(d, st + (size_t)h * nseg * sf, nseg, qs[h].sink, split + (size_t)h * d);
    CHECK_MSG(memcmp(whole, split, (size_t)hpg * d * 4) == 0, "%s d=%d window %d: position %d: split segments differ",
              LEVEL[level], d, window, t);
    free(whole), free(split), free(st);
}

TEST(attn_segments_split_equals_whole) {
    static const int probe[] = {ATTN_SEG - 1, ATTN_SEG, ATTN_SEG + 1, 2 * ATTN_SEG + 5, 3 * ATTN_SEG + 99};
    static const int dims[] = {64, 256, 40};
    int hpg = 3;
    for (int di = 0; di < 3; di++) {
        int d = dims[di];
        cache c;
        cache_new(&c, 3 * ATTN_SEG + 100, 1, d);
        float *q = xmalloc((size_t)hpg * d * 4), *ws = xaligned(attn_ws_floats(d, hpg) * sizeof(float));
        for (int i = 0; i < hpg * d; i++) q[i] = frand();
        for (int level = 0; level <= attn_level(); level++)
            for (int k = 0; k < 5; k++)
                for (int w = 0; w < 2; w++) check_split(level, &c, probe[k], w ? ATTN_SEG + 500 : 0, hpg, q, ws);
        free(q), free(ws);
        cache_free(&c);
    }
}

/* Prefill blocks that straddle segment edges against decode there. */
TEST(attn_prefill_equals_decode_segments) {
    for (int level = 0; level <= attn_level(); level++) {
        check_paths(level, 64, ATTN_SEG + 200, 0, 32);
        check_paths(level, 256, ATTN_SEG + 70, 300, 13);
    }
}

/* An f16 row (F16C where the CPU has it) holds f32_to_fp16's bytes for
 * every float: a sweep of all exponents with odd mantissas (ties, the
 * subnormal and overflow edges), infinities and quiet and signalling NaNs
 * (F16C would quiet those: their 8 take the scalar path), rows of 1-40
 * values (the 8-value steps and their tails). */
TEST(kvq_f16_row_keeps_the_scalar_bytes) {
    enum { N = 4096 };
    static float x[N];
    static uint16_t row[N];
    for (int i = 0; i < N; i++) {
        uint32_t bits = (uint32_t)i * 1048573u + (uint32_t)i * (uint32_t)i * 97u;
        memcpy(&x[i], &bits, 4);
    }
    const uint32_t special[] = {0x7f800000u, 0xff800000u, 0x7fc00001u, 0x7f800001u, 0xffa00000u,
                                0x477ff000u, 0x477fefffu, 0x38800000u, 0x337fffffu, 0x33000001u};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) memcpy(&x[100 + 9 * i], &special[i], 4);
    int bad = 0;
    for (int n = 1; n <= 40; n++) {
        kvq_write_row(KVQ_F16, x, row, n);
        for (int i = 0; i < n; i++) bad += row[i] != f32_to_fp16(x[i]);
    }
    kvq_write_row(KVQ_F16, x, row, N);
    for (int i = 0; i < N; i++) bad += row[i] != f32_to_fp16(x[i]);
    CHECK_EQ_INT(bad, 0);
}

/* ---- q8_0 keys/values ---- */

/* A row written as q8_0 reads back within half a step of its block's
 * scale (plus the scale's own rounding to a half: 127 q * 2^-11), takes 17/32 of the f16 row's bytes, and an all-zero block stays
 * zero (scale 0). */
TEST(kvq_q8_0_row_round_trip) {
    float x[96], y[96];
    uint16_t row[3 * KVQ_Q8_0_BLOCK_HALVES];
    for (int i = 0; i < 64; i++) x[i] = frand() * (i < 32 ? 0.01f : 3.0f);
    for (int i = 64; i < 96; i++) x[i] = 0;
    kvq_write_row(KVQ_Q8_0, x, row, 96);
    kvq_read_row(KVQ_Q8_0, row, y, 96);
    for (int b = 0; b < 3; b++) {
        float amax = 0;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[b * 32 + i]));
        for (int i = 0; i < 32; i++)
            CHECK_MSG(fabsf(y[b * 32 + i] - x[b * 32 + i]) <= amax / 127 * (0.5f + 127.0f / 2048) + 1e-12f,
                      "value %d: %g read back as %g", b * 32 + i, x[b * 32 + i], y[b * 32 + i]);
    }
    for (int i = 64; i < 96; i++) CHECK(y[i] == 0.0f);
    CHECK_EQ_INT((int)kvq_halves(KVQ_Q8_0, 256) * 2, 272); /* 256 values: 272 bytes, f16 512 */
    CHECK_EQ_INT((int)kvq_halves(KVQ_F16, 256) * 2, 512);
}

/* q4_0: within one step (amax / 8) of the value (the top nibble is 7,
 * so the side opposite the largest magnitude clips), 9/32 the f16 bytes,
 * and the value of largest magnitude comes back exactly (nibble 0). */
TEST(kvq_q4_0_row_round_trip) {
    float x[64], y[64];
    uint16_t row[2 * KVQ_Q4_0_BLOCK_HALVES];
    for (int i = 0; i < 64; i++) x[i] = frand() * (i < 32 ? 0.02f : 5.0f);
    x[40] = -6.0f; /* the largest magnitude of block 1, negative */
    kvq_write_row(KVQ_Q4_0, x, row, 64);
    kvq_read_row(KVQ_Q4_0, row, y, 64);
    for (int b = 0; b < 2; b++) {
        float amax = 0;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[b * 32 + i]));
        for (int i = 0; i < 32; i++)
            CHECK_MSG(fabsf(y[b * 32 + i] - x[b * 32 + i]) <= amax / 8 * 1.01f, "value %d: %g read back as %g",
                      b * 32 + i, x[b * 32 + i], y[b * 32 + i]);
    }
    CHECK(y[40] == -6.0f);
    CHECK_EQ_INT((int)kvq_halves(KVQ_Q4_0, 256) * 2, 144);
}

TEST(kvq_names_and_head_sizes) {
    kvq_type t = KVQ_Q8_0;
    strata_err err = {0};
    CHECK_EQ_INT(kvq_parse(NULL, &t, &err), 0);
    CHECK_EQ_INT(t, KVQ_F16);
    CHECK_EQ_INT(kvq_parse("q8_0", &t, &err), 0);
    CHECK_EQ_INT(t, KVQ_Q8_0);
    CHECK_EQ_INT(kvq_parse("q4_0", &t, &err), 0);
    CHECK_EQ_INT(t, KVQ_Q4_0);
    CHECK_EQ_INT(kvq_parse("q4", &t, &err), STRATA_EINVAL);
    CHECK(strstr(err.msg, "q4") && strstr(err.msg, "f16, q8_0 or q4_0"));
    CHECK_EQ_INT(kvq_check(KVQ_Q4_0, 48, &err), STRATA_EINVAL);
    CHECK(strstr(err.msg, "--kv-type q4_0") && strstr(err.msg, "head size 48"));
    CHECK_EQ_INT(kvq_check(KVQ_Q8_0, 64, &err), 0);
    CHECK_EQ_INT(kvq_check(KVQ_F16, 40, &err), 0);
    CHECK_EQ_INT(kvq_check(KVQ_Q8_0, 40, &err), STRATA_EINVAL);
    CHECK(strstr(err.msg, "head size 40") && strstr(err.msg, "multiple of 32"));
    char buf[64];
    CHECK(strcmp(kvq_numerics(KVQ_F16, "cpu", buf, sizeof buf), "cpu") == 0); /* old caches stay valid */
    CHECK(strcmp(kvq_numerics(KVQ_Q8_0, "cpu", buf, sizeof buf), "cpu+kv-q8_0") == 0);
}

static const kvq_type QUANT[] = {KVQ_Q8_0, KVQ_Q4_0};

TEST(attn_quant_kv_matches_float64) {
    static const int dims[] = {64, 256, 32, 160}; /* 160: the AMX kernels' 32-dim value block */
    static const int depths[] = {1, 7, 63, 64, 65, 200, 1000};
    static const int deep[] = {ATTN_SEG + 1, 2 * ATTN_SEG + 52};
    for (int ti = 0; ti < 2; ti++) {
        for (int di = 0; di < 4; di++) check_vs_float64_type(QUANT[ti], dims[di], 1000, depths, 7, last_100);
        check_vs_float64_type(QUANT[ti], 128, 2 * ATTN_SEG + 60, deep, 2, last_two_thirds);
    }
}

TEST(attn_quant_kv_prefill_equals_decode) {
    for (int ti = 0; ti < 2; ti++)
        for (int level = 0; level <= attn_level(); level++) {
            check_paths_type(QUANT[ti], level, 64, 300, 0, 32);
            check_paths_type(QUANT[ti], level, 64, 300, 100, 7);
            check_paths_type(QUANT[ti], level, 256, 140, 50, 13);
            check_paths_type(QUANT[ti], level, 96, ATTN_SEG + 90, 0, 32); /* 3 blocks a head, past a segment edge */
        }
}

/* The SIMD tile fill widens q8_0 and q4_0 rows to exactly the scalar
 * floats (so levels differ in the steps only, as with f16). */
TEST(attn_quant_kv_fill_is_the_same_at_every_level) {
    if (attn_level() < 1) return;
    static const int dims[] = {32, 64, 256};
    for (int di = 0; di < 6; di++) {
        int d = dims[di % 3];
        cache c;
        cache_new_type(&c, 200, 2, d, QUANT[di / 3]);
        attn_kv kv = cache_head(&c, 1);
        float *k0 = xaligned((size_t)2 * ATTN_KV_TILE * d * 4), *v0 = k0 + (size_t)ATTN_KV_TILE * d;
        float *k1 = xaligned((size_t)2 * ATTN_KV_TILE * d * 4), *v1 = k1 + (size_t)ATTN_KV_TILE * d;
        for (int t0 = 0; t0 < 200; t0 += ATTN_KV_TILE) {
            attn_ops_scalar.tile_fill(&kv, t0, 170, k0, v0);
            attn_fill_avx2(&kv, t0, 170, k1, v1);
            CHECK_MSG(memcmp(k0, k1, (size_t)2 * ATTN_KV_TILE * d * 4) == 0, "d=%d tile at %d: fills differ", d, t0);
        }
        free(k0), free(k1);
        cache_free(&c);
    }
}

/* Levels whose attention gives other bits have other numerics ids
 * (attn_numerics_level, part of the engine's id): 16 queries at depths up
 * to 150, for the head sizes of the models served and each KV type. */
TEST(attn_levels_with_other_bits_have_other_ids) {
    static const int dims[] = {64, 128, 256};
    enum { N = 150, NQ = 16 };
    int differ = 0;
    for (int ti = 0; ti < 3; ti++)
        for (int di = 0; di < 3; di++) {
            kvq_type type = ti == 0 ? KVQ_F16 : QUANT[ti - 1];
            int d = dims[di];
            cache c;
            cache_new_type(&c, N, 1, d, type);
            attn_kv kv = cache_head(&c, 0);
            float *q = xmalloc((size_t)NQ * d * 4), *out[ATTN_LEVEL_AMX + 1];
            float *ws = xaligned(attn_ws_floats(d, NQ) * sizeof(float));
            for (int i = 0; i < NQ * d; i++) q[i] = frand();
            for (int l = 0; l <= attn_level(); l++) {
                attn_query qs[NQ];
                out[l] = xmalloc((size_t)NQ * d * 4);
                for (int i = 0; i < NQ; i++) qs[i] = (attn_query){q + i * d, out[l] + i * d, 0, N - NQ + i + 1, NULL};
                attn_run_level(l, &kv, qs, NQ, 0.125f, ws);
            }
            char ids[ATTN_LEVEL_AMX + 1][96], what[32];
            const char *id[ATTN_LEVEL_AMX + 1];
            for (int l = 0; l <= attn_level(); l++) id[l] = attn_numerics_level(l, d, type, ids[l], sizeof ids[l]);
            snprintf(what, sizeof what, "%s d=%d", kvq_name(type), d);
            differ += test_levels_differ_by_id(what, attn_level() + 1, (void *const *)out, (size_t)NQ * d * 4, id, LEVEL);
            for (int l = 0; l <= attn_level(); l++) free(out[l]);
            free(q), free(ws);
            cache_free(&c);
        }
    if (attn_level() > ATTN_LEVEL_SCALAR) CHECK(differ > 0);
}
