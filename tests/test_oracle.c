/* test_oracle.c - the engine against llama.cpp on the default model, on
 * Gemma 3 270M (tests/data/oracle/gemma3/, when STRATA_GEMMA3_MODEL is set)
 * and on the tiny generated qwen35, qwen3moe, qwen35moe and gpt-oss models
 * (tests/data/oracle/tiny/).
 *
 * tests/data/oracle/ (tools/oracle_refs.py) holds, per prompt, llama.cpp's
 * tokens, its argmax at every position and full logit rows at a few
 * positions. Both engines quantize activations to 8 bits, differently, so
 * logits differ by noise of a few tenths; a real bug (rope, mask, layout)
 * gives differences of several units and wrong tokens.
 *
 * Checked, per prompt: at every stored row max |ours - llama.cpp| <=
 * ORACLE_MAX_ABS; the next-token prediction (last position) is the same,
 * or llama.cpp's runner-up where its own top two are within the margin;
 * at every position where llama.cpp's top-1 leads its runner-up by more
 * than ORACLE_MARGIN, our top-1 is the same token. */
#include <math.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/attn.h"
#include "backend/quant.h"
#include "base/mem.h"
#include "model/engine.h"
#include "model/mtp.h"
#include "test.h"
#include "test_util.h"

#define CHUNK 256
/* Gemma 3 270M: measured max 1.23-1.94, RMS 0.18-0.88; without the
 * sliding window 22.8 and 10.2 (tests/data/oracle/gemma3/README.md). One
 * row's RMS is noise of that size: any change in rounding (attention,
 * the matmuls' float steps) moves prompt 06's last row (1435 tokens) by
 * 0.2-0.9, and against a float64 forward pass (tools/ref_forward.py) the
 * rows are all about as far from the truth as llama.cpp's (0.59): 0.35
 * (avx512) and 0.95 (amx) with the legacy kernels' one-chain numerics,
 * 1.02 and 0.72 before (2026-11-27), when they were 0.88, 0.42, 0.48 and
 * 0.25 from llama.cpp's. The bounds are ~1.3x the worst measured. */
#define GEMMA3_MAX_ABS 2.5f
#define GEMMA3_MAX_RMS 1.2f

/* Where a suite's files are and how close we must be. */
typedef struct oracle_suite {
    const char *dir;
    float max_abs, max_rms, margin;
    int min_cases;
} oracle_suite;

/* llama.cpp's own rows lie up to 1.46 from a float64 forward pass of the
 * same weights (tools/ref_forward.py, prompt 11, position 65), and ours as
 * far on the other side; the RMS difference is the sharper check. Measured
 * RMS 0.15-0.29 (AVX-512) and 0.15-0.37 (AVX2: prompt 12, 0.29 before the
 * tiled attention changed its rounding, the top-1 still agreeing at all
 * 758 decided positions); the attention kernels themselves are held to
 * float64 in test_attn.c. */
static const oracle_suite SMOLLM2 = {"tests/data/oracle", 2.0f, 0.40f, 1.0f, 10};
static const oracle_suite GEMMA3 = {"tests/data/oracle/gemma3", GEMMA3_MAX_ABS, GEMMA3_MAX_RMS, 1.0f, 4};
/* Tiny qwen35, F32 weights: neither engine quantizes activations, so the
 * rows differ only by F16 K/V and summation order (measured: max 0.0022,
 * rms 0.0002 on the 70-token prompt, logits up to 7.2). Rotating the two
 * M-RoPE pairs that text leaves still gives max 0.010, rms 0.00075
 * (tools/ref_forward.py against the same refs). */
static const oracle_suite QWEN35_TINY = {"tests/data/oracle/tiny", 0.006f, 0.0005f, 0.05f, 1};
/* Tiny qwen3moe, F32: measured max 0.0105, rms 0.0011 (qwen35moe-f32 fits
 * QWEN35_TINY: 0.003, 0.0003). Ours is within 1e-5 of the float64
 * reference with F16 K/V (tools/ref_forward.py); the rest is llama.cpp's
 * own rounding, larger here with two attention layers of two: its K.Q
 * takes Q as F16 and its softmax weights go to F16 before V (rounding the
 * float64 reference the same way brings it to max 0.0029, rms 0.00025 of
 * llama.cpp's rows), amplified by the router's softmax. */
static const oracle_suite QWEN3MOE_TINY = {"tests/data/oracle/tiny", 0.02f, 0.002f, 0.05f, 1};
/* Tiny MoE models in the Q4_K_M mix and Q8_0: both engines round
 * activations to 8 bits, differently (as for the real model, SMOLLM2's
 * bounds), and a near-tie in the router may pick another expert in one of
 * them, which moves that position's row by up to ~1 (measured max 0.81,
 * rms 0.11-0.19, logits up to 7). */
static const oracle_suite MOE_TINY_QUANT = {"tests/data/oracle/tiny", 2.0f, 0.40f, 1.0f, 1};

typedef struct oracle_case {
    int n_tok, n_rows, n_vocab;
    int32_t *tokens, *argmax, *rows;
    float *margin; /* llama.cpp top-1 minus top-2 per position */
    int32_t *second; /* llama.cpp's runner-up per position */
    float *logits; /* n_rows x n_vocab */
} oracle_case;

static int32_t *read_ints(char *line, int n) {
    int32_t *v = xcalloc((size_t)n + 1, sizeof(int32_t));
    char *p = line;
    for (int i = 0; i < n; i++) v[i] = (int32_t)strtol(p, &p, 10);
    return v;
}

static void parse_line(oracle_case *c, char *line) {
    if (strncmp(line, "n_tokens ", 9) == 0) {
        c->n_tok = atoi(line + 9);
        c->margin = xcalloc((size_t)c->n_tok, sizeof(float));
        c->second = xcalloc((size_t)c->n_tok, sizeof(int32_t));
    } else if (strncmp(line, "n_vocab ", 8) == 0) {
        c->n_vocab = atoi(line + 8);
    } else if (strncmp(line, "tokens ", 7) == 0) {
        c->tokens = read_ints(line + 7, c->n_tok);
    } else if (strncmp(line, "argmax ", 7) == 0) {
        c->argmax = read_ints(line + 7, c->n_tok);
    } else if (strncmp(line, "rows ", 5) == 0) {
        for (char *p = line + 5; *p; p++) c->n_rows += (*p == ' ');
        c->n_rows += 1;
        c->rows = read_ints(line + 5, c->n_rows);
    } else if (strncmp(line, "top ", 4) == 0 && c->margin) {
        char *p = line + 4;
        long pos = strtol(p, &p, 10);
        strtol(p, &p, 10);
        float l1 = strtof(p, &p);
        long id2 = strtol(p, &p, 10);
        float l2 = strtof(p, &p);
        if (pos >= 0 && pos < c->n_tok) {
            c->margin[pos] = l1 - l2;
            c->second[pos] = (int32_t)id2;
        }
    }
}

static int read_case(const oracle_suite *su, const char *nn, oracle_case *c) {
    char path[256];
    memset(c, 0, sizeof *c);
    snprintf(path, sizeof path, "%s/%s.txt", su->dir, nn);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t cap = 1 << 20;
    char *line = xmalloc(cap);
    while (fgets(line, (int)cap, f)) parse_line(c, line);
    free(line);
    fclose(f);
    if (!c->tokens || !c->argmax || !c->rows || c->n_vocab <= 0) return -1;
    snprintf(path, sizeof path, "%s/%s.bin", su->dir, nn);
    f = fopen(path, "rb");
    if (!f) return -1;
    size_t n = (size_t)c->n_rows * c->n_vocab;
    c->logits = xmalloc(n * sizeof(float));
    size_t got = fread(c->logits, sizeof(float), n, f);
    fclose(f);
    return got == n ? 0 : -1;
}

static void free_case(oracle_case *c) {
    free(c->tokens), free(c->argmax), free(c->rows), free(c->margin), free(c->second), free(c->logits);
}

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

typedef struct oracle_stats {
    float max_abs;
    double sq_sum;
    long n_sq;
    int positions, decided, agree;
} oracle_stats;

static void compare_row(const oracle_suite *su, const oracle_case *c, const float *ours, int pos,
                        oracle_stats *st) {
    int V = c->n_vocab, a = argmax(ours, V);
    st->positions++;
    if (c->margin[pos] > su->margin) {
        st->decided++;
        st->agree += a == c->argmax[pos];
        CHECK_MSG(a == c->argmax[pos], "position %d: top-1 %d, llama.cpp %d (margin %.2f)", pos, a,
                  c->argmax[pos], c->margin[pos]);
    }
    /* The next token: the same, or when llama.cpp itself nearly ties, one
     * of its two best. */
    if (pos == c->n_tok - 1)
        CHECK_MSG(a == c->argmax[pos] || (c->margin[pos] <= su->margin && a == c->second[pos]),
                  "next token: ours %d, llama.cpp %d (runner-up %d, margin %.2f)", a, c->argmax[pos],
                  c->second[pos], c->margin[pos]);
    for (int r = 0; r < c->n_rows; r++) {
        if (c->rows[r] != pos) continue;
        const float *ref = c->logits + (size_t)r * V;
        st->n_sq += V;
        for (int i = 0; i < V; i++) {
            float d = fabsf(ours[i] - ref[i]);
            if (d > st->max_abs) st->max_abs = d;
            st->sq_sum += (double)d * d;
        }
    }
}

/* The logits of every position of tokens[0..n) as one sequence, in
 * prefill chunks of CHUNK; NULL (a recorded failure) when the pass fails. */
static float *eval_all(engine *e, const int32_t *tokens, int n_tok, const char *nn) {
    int V = e->m->hp.n_vocab;
    float *logits = xmalloc((size_t)n_tok * V * sizeof(float));
    kv_seq s, *seqs[CHUNK];
    kv_seq_init(&s);
    int32_t pos[CHUNK];
    int8_t want[CHUNK];
    strata_err err = {0};
    for (int done = 0; done < n_tok; done += CHUNK) {
        int n = n_tok - done < CHUNK ? n_tok - done : CHUNK;
        for (int i = 0; i < n; i++) seqs[i] = &s, pos[i] = done + i, want[i] = 1;
        fwd_batch b = {.n = n, .tokens = tokens + done, .seqs = seqs, .pos = pos, .want = want};
        if (fwd_run(e->fwd, &b, logits + (size_t)done * V, &err)) {
            test_fail(__FILE__, __LINE__, "%s: %s", nn, err.msg);
            free(logits);
            logits = NULL;
            break;
        }
    }
    kv_seq_release(&e->kv, &s);
    return logits;
}

static void run_case(const oracle_suite *su, engine *e, const char *nn) {
    oracle_case c;
    if (read_case(su, nn, &c)) {
        test_fail(__FILE__, __LINE__, "oracle case %s unreadable", nn);
        return;
    }
    int V = c.n_vocab;
    CHECK_EQ_INT(V, e->m->hp.n_vocab);
    oracle_stats st = {0};
    float *logits = V == e->m->hp.n_vocab ? eval_all(e, c.tokens, c.n_tok, nn) : NULL;
    for (int i = 0; logits && i < c.n_tok; i++) compare_row(su, &c, logits + (size_t)i * V, i, &st);
    double rms = st.n_sq ? sqrt(st.sq_sum / (double)st.n_sq) : 0;
    printf("    oracle %s: %d tokens, %d rows: max |diff| %.3f, rms %.3f; top-1 agrees at %d/%d decided positions\n",
           nn, c.n_tok, c.n_rows, st.max_abs, rms, st.agree, st.decided);
    CHECK_MSG(st.max_abs <= su->max_abs, "%s: max |diff| %.3f > %.2f", nn, st.max_abs, su->max_abs);
    CHECK_MSG(rms <= su->max_rms, "%s: rms diff %.3f > %.2f", nn, rms, su->max_rms);
    free(logits);
    free_case(&c);
}

static void run_suite_kv(const oracle_suite *su, const char *model_path, kvq_type kv_type) {
    strata_err err = {0};
    engine_params p = {.model_path = model_path, .n_ctx = 4096, .max_batch = CHUNK, .kv_type = kv_type};
    engine *e;
    if (engine_open(&e, &p, &err)) {
        test_fail(__FILE__, __LINE__, "%s", err.msg);
        return;
    }
    char path[256];
    snprintf(path, sizeof path, "%s/index.txt", su->dir);
    FILE *idx = fopen(path, "r");
    CHECK(idx != NULL);
    char line[512], nn[16];
    int n_cases = 0;
    while (idx && fgets(line, sizeof line, idx)) {
        if (line[0] == '#' || sscanf(line, "%15s", nn) != 1) continue;
        run_case(su, e, nn);
        n_cases++;
    }
    if (idx) fclose(idx);
    CHECK(n_cases >= su->min_cases);
    engine_close(e);
}

static void run_suite(const oracle_suite *su, const char *model_path) {
    run_suite_kv(su, model_path, KVQ_F16);
}

/* SHA-256 of a file as 64 hex digits; "" when unreadable. */
static void file_sha256(const char *path, char hex[65]) {
    hex[0] = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return;
    size_t cap = 1 << 20, len = 0, n;
    unsigned char *buf = xmalloc(cap), md[32];
    while ((n = fread(buf + len, 1, cap - len, f)) > 0)
        if ((len += n) == cap) buf = xrealloc(buf, cap *= 2);
    fclose(f);
    SHA256(buf, len, md);
    free(buf);
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
}

/* The committed refs are for one exact fixture file: its SHA-256 is in
 * the index, so a changed generator fails here, not as a logits diff. */
static int tiny_fixture_matches(const char *name, const char *path) {
    char line[256], nm[64], want[80] = "", got[65];
    FILE *idx = fopen("tests/data/oracle/tiny/index.txt", "r");
    while (idx && fgets(line, sizeof line, idx)) {
        int n_tok;
        if (line[0] != '#' && sscanf(line, "%63s %d %79s", nm, &n_tok, want) == 3 && !strcmp(nm, name)) break;
        want[0] = 0;
    }
    if (idx) fclose(idx);
    file_sha256(path, got);
    CHECK_MSG(want[0] && !strcmp(want, got),
              "%s: SHA-256 %s, refs made for %s (make testdata, or tools/oracle_refs.py --tiny ... --only %s)",
              path, got, want[0] ? want : "(none)", name);
    return want[0] && !strcmp(want, got);
}

/* One tiny fixture model against its llama.cpp refs. */
static void run_tiny(const oracle_suite *su, const char *name) {
    char rel[96];
    snprintf(rel, sizeof rel, "models/%s.gguf", name);
    const char *path = test_data(rel);
    if (!tiny_fixture_matches(name, path)) return;
    strata_err err = {0};
    engine_params p = {.model_path = path, .n_ctx = 1024, .max_batch = CHUNK, .block_tokens = 16};
    engine *e;
    if (engine_open(&e, &p, &err)) {
        test_fail(__FILE__, __LINE__, "%s", err.msg);
        return;
    }
    run_case(su, e, name);
    engine_close(e);
}

TEST(qwen35_tiny_matches_llama_cpp) {
    run_tiny(&QWEN35_TINY, "qwen35-f32");
}

/* Mixture of experts, F32: no activation quantization in either engine,
 * so routing and logits must agree as closely as qwen35-f32's. */
TEST(moe_tiny_f32_matches_llama_cpp) {
    run_tiny(&QWEN3MOE_TINY, "qwen3moe-f32");
    run_tiny(&QWEN35_TINY, "qwen35moe-f32");
}

/* ... and in the quant types the real files ship in. */
TEST(moe_tiny_quant_matches_llama_cpp) {
    run_tiny(&MOE_TINY_QUANT, "qwen3moe-q4_k_m");
    run_tiny(&MOE_TINY_QUANT, "qwen3moe-q8_0");
    run_tiny(&MOE_TINY_QUANT, "qwen35moe-q4_k_m");
}

TEST(real_fwd_matches_llama_cpp) {
    run_suite(&SMOLLM2, test_real_model());
}

/* q8_0 K/V against llama.cpp's own q8_0 K/V rows (tools/oracle_refs.py
 * --kv-type q8_0: flash attention, whose CPU path quantizes Q to q8_0 for
 * q8_0 K, as Strata does with AVX-512 VNNI, backend/attn.h
 * attn_qk_int8), the same prompts and bounds as f16, first and last rows
 * stored. Measured: SmolLM2 max 1.26, rms <= 0.35 with int8 scoring
 * (AVX-512 VNNI), 1.36 / 0.34 at avx2 (float32 scoring; at avx512 the
 * float32 scoring flips two near ties, margin 1.03); Gemma 3 (float32 or
 * AMX scoring) max 1.65, rms <= 0.55. Against the f16 refs q8_0 K/V is
 * a slightly other model: SmolLM2 max 3.28 with float32 scoring (a top-1
 * flip at margin 1.07), 2.66 with int8 scoring. The position llama.cpp
 * decides by 1.03 (prompts 03 and 13, position 9: 5646 over 5905; the
 * float64 reference with f16 K/V: by 1.08) is that near tie: since the
 * legacy kernels' one-chain numerics (2026-11-27) ours puts 5905 ahead by
 * 0.16 with int8 scoring too (rms 0.09-0.37, as before), so a position
 * counts as decided above 1.1 here. */
static const oracle_suite SMOLLM2_Q8 = {"tests/data/oracle/kv-q8_0", 2.0f, 0.40f, 1.1f, 10};
/* Gemma 3 with q8_0 K/V: any change of float rounding reaches the K/V as
 * other int8 roundings, whole quantization steps, so prompt 06's last row
 * moves further than with f16 (2026-11-27, the legacy kernels' one-chain
 * numerics at every level: max 2.12 / rms 1.04 at scalar, 1.34 / 0.26 at
 * avx2, 2.10 / 1.03 at avx512, 1.95 / 0.69 at amx; with the earlier ones
 * avx2 gave 2.62 / 1.59). The top-1 check is the same; the bounds are
 * ~1.2x the worst level measured. */
static const oracle_suite GEMMA3_Q8 = {"tests/data/oracle/gemma3/kv-q8_0", 2.6f, 1.3f, 1.0f, 4};

TEST(real_fwd_q8_0_kv_matches_llama_cpp) {
    run_suite_kv(&SMOLLM2_Q8, test_real_model(), KVQ_Q8_0);
}

TEST(gemma3_fwd_q8_0_kv_matches_llama_cpp) {
    run_suite_kv(&GEMMA3_Q8, test_gemma3_model(), KVQ_Q8_0);
}

TEST(gemma3_fwd_matches_llama_cpp) {
    run_suite(&GEMMA3, test_gemma3_model());
}

/* Tiny gpt-oss (tools/testdata_gptoss.py): sinks, sliding window 128 on
 * even layers (the 450-token harmony prompt passes it), YaRN, biases,
 * top-k-then-softmax routing, the clamped SwiGLU. With F32 experts
 * neither engine quantizes activations: measured max 0.007, rms 0.001 at
 * every position (AVX-512). With MXFP4 experts (as gpt-oss ships) both
 * quantize the experts' inputs to 8 bits (llama.cpp's block scales in
 * F16, ours in F32), and a near-tie in a router then sends a token to
 * another expert: measured max 2.34, rms 0.10, spikes at a few positions
 * only (the F32 twin shows the architecture is exact). */
static const oracle_suite GPTOSS_F32 = {"tests/data/oracle/tiny", 0.02f, 0.002f, 0.05f, 1};
static const oracle_suite GPTOSS_MXFP4 = {"tests/data/oracle/tiny", 3.0f, 0.20f, 1.0f, 1};

TEST(gptoss_tiny_matches_llama_cpp) {
    run_tiny(&GPTOSS_F32, "gpt-oss-f32");
    run_tiny(&GPTOSS_MXFP4, "gpt-oss-mxfp4");
}

/* gpt-oss, both engines against the float64 reference of the same weights
 * (tools/ref_forward.py: sinks, sliding window 128 on even layers, YaRN,
 * biases, top-k-then-softmax routing, the clamped SwiGLU, MXFP4 decoded by
 * its own code; NAME.ref, written by make testdata over the 450 tokens of
 * the committed llama.cpp refs). The reference rounds what Strata rounds
 * (K/V to F16, the MXFP4 experts' inputs to 8 bits), so ours sits on it.
 * Per engine: the median position's max |diff| (precision), how many
 * positions are more than ROUTE_FLIP off (with F32 experts: a router
 * near-tie sent a token to another expert, which moves its row by tenths
 * or units), and the RMS over all. A wrong reference fails both engines'
 * bounds; without sinks, YaRN or the window it is 0.37-1.4 (rms) from
 * llama.cpp's F32 rows. */
#define ROUTE_FLIP 0.05f

typedef struct ref_bound {
    const char *name;
    float ours_median, ours_rms; /* Strata - reference */
    int ours_flips;
    float peer_median, peer_rms; /* llama.cpp - reference */
    int peer_flips;
} ref_bound;

typedef struct diff_acc {
    float *row_max; /* per position */
    int n_rows, flips;
    double sq_sum;
    long n;
} diff_acc;

static void diff_add(diff_acc *d, const float *a, const float *b, int n) {
    float m = 0;
    for (int i = 0; i < n; i++) {
        float x = fabsf(a[i] - b[i]);
        if (x > m) m = x;
        d->sq_sum += (double)x * x;
    }
    d->n += n;
    d->row_max[d->n_rows++] = m;
    d->flips += m > ROUTE_FLIP;
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Prints and checks one engine's distance; frees the accumulator. */
static void diff_check(const char *name, const char *who, diff_acc *d, float median_max, float rms_max,
                       int flips_max) {
    double rms = d->n ? sqrt(d->sq_sum / (double)d->n) : 0;
    qsort(d->row_max, (size_t)d->n_rows, sizeof(float), cmp_float);
    float median = d->n_rows ? d->row_max[d->n_rows / 2] : INFINITY, worst = d->n_rows ? d->row_max[d->n_rows - 1] : 0;
    printf("    %s, %s - float64 reference, %d positions: median row max %.4f, max %.3f, rms %.5f, %d over %.2f\n", name,
           who, d->n_rows, median, worst, rms, d->flips, ROUTE_FLIP);
    CHECK_MSG(median <= median_max && rms <= rms_max && d->flips <= flips_max,
              "%s: %s median %.4f rms %.5f flips %d (bounds %.4f, %.5f, %d)", name, who, median, rms, d->flips,
              median_max, rms_max, flips_max);
    free(d->row_max);
}

/* The reference, llama.cpp's refs and the fixture all for the same tokens
 * and weights; 0 when they are. */
static int ref_inputs(const char *name, ref_logits *r, oracle_case *c) {
    char rel[96];
    snprintf(rel, sizeof rel, "models/%s.ref", name);
    if (test_read_ref_logits(test_data(rel), r)) {
        test_fail(__FILE__, __LINE__, "%s: missing reference (make testdata)", test_data(rel));
        return -1;
    }
    snprintf(rel, sizeof rel, "models/%s.gguf", name);
    if (!tiny_fixture_matches(name, test_data(rel)) || read_case(&GPTOSS_F32, name, c)) {
        free(r->tokens), free(r->logits);
        return -1;
    }
    int same = c->n_tok == r->n_tok && c->n_vocab == r->n_vocab && c->n_rows == c->n_tok &&
               !memcmp(c->tokens, r->tokens, (size_t)r->n_tok * sizeof(int32_t));
    CHECK_MSG(same, "%s: the reference and llama.cpp's refs are for other tokens", name);
    if (same) return 0;
    free(r->tokens), free(r->logits), free_case(c);
    return -1;
}

static void bound_against_reference(const ref_bound *rb) {
    ref_logits r;
    oracle_case c;
    if (ref_inputs(rb->name, &r, &c)) return;
    char rel[96];
    snprintf(rel, sizeof rel, "models/%s.gguf", rb->name);
    strata_err err = {0};
    engine_params p = {.model_path = test_data(rel), .n_ctx = 1024, .max_batch = CHUNK, .block_tokens = 16};
    engine *e;
    float *ours = NULL;
    if (engine_open(&e, &p, &err)) {
        test_fail(__FILE__, __LINE__, "%s", err.msg);
    } else {
        ours = eval_all(e, r.tokens, r.n_tok, rb->name);
        engine_close(e);
    }
    int V = r.n_vocab;
    diff_acc d_ours = {.row_max = xcalloc((size_t)r.n_tok, sizeof(float))};
    diff_acc d_peer = {.row_max = xcalloc((size_t)c.n_rows, sizeof(float))};
    for (int t = 0; ours && t < r.n_tok; t++) diff_add(&d_ours, ours + (size_t)t * V, r.logits + (size_t)t * V, V);
    for (int k = 0; k < c.n_rows; k++)
        diff_add(&d_peer, c.logits + (size_t)k * V, r.logits + (size_t)c.rows[k] * V, V);
    diff_check(rb->name, "Strata", &d_ours, rb->ours_median, rb->ours_rms, rb->ours_flips);
    diff_check(rb->name, "llama.cpp", &d_peer, rb->peer_median, rb->peer_rms, rb->peer_flips);
    free(ours);
    free(r.tokens), free(r.logits);
    free_case(&c);
}

/* Measured (AVX-512 / AVX2 / scalar): F32, Strata median 0.0003-0.0004,
 * rms 0.00012-0.00013, no position off; llama.cpp median 0.0029, rms
 * 0.00095 (its F16 rounding inside attention). Clamp (a third of the gate
 * values past 7): Strata 0.0001-0.0002, rms 0.0001, none off; llama.cpp
 * 0.0049, and 2 positions where a router near-tie (gaps down to 8e-5)
 * went the other way for it (max 5.8, rms 0.082). MXFP4: 8-bit inputs make
 * the pass chaotic at this scale (the reference itself moves by median
 * 0.061, rms 0.087, 358 positions off when its embeddings move by 1e-6
 * relative), so the bounds are coarse: Strata median 0.046-0.050, rms
 * 0.055-0.074; llama.cpp (F16 block scales) 0.075, rms 0.10; a reference
 * without the 8-bit rounding lies 0.156 (median) from this one. */
TEST(gptoss_tiny_both_engines_near_reference) {
    static const ref_bound bounds[] = {
        {"gpt-oss-f32", 0.002f, 0.0005f, 0, 0.01f, 0.003f, 2},
        {"gpt-oss-clamp-f32", 0.002f, 0.0005f, 0, 0.01f, 0.15f, 4},
        {"gpt-oss-mxfp4", 0.1f, 0.12f, 450, 0.15f, 0.2f, 450},
    };
    for (size_t i = 0; i < sizeof bounds / sizeof bounds[0]; i++) bound_against_reference(&bounds[i]);
}

/* qwen35's MTP block (model/mtp.h) against llama.cpp's draft head
 * (LLAMA_CONTEXT_TYPE_MTP over the same weights; tools/oracle_mtp.cpp,
 * make oracle-mtp-refs) on the fixture with one, over the tiny qwen35
 * prompt's 70 tokens, token q paired with the trunk's state at q - 1.
 * F32 weights: F16 K/V and summation order apart, the same numbers
 * (measured: max 0.0004, rms 0.00004, logits up to 6.4, top-1 the same at
 * all 70; llama.cpp against the float64 reference of tools/ref_forward.py,
 * mtp_forward: max 0.0023, rms 0.0002, so all three read the block alike:
 * h at q - 1, [enorm(embed) | hnorm(h)], shared_head_norm). */
TEST(mtp_tiny_matches_llama_cpp) {
    const char *path = test_data("bad/qwen35-f32-mtp.gguf");
    char want[80] = "", got[65];
    FILE *f = fopen("tests/data/oracle/tiny/qwen35-f32-mtp.mtp.sha256", "r");
    if (!f || fscanf(f, "%79s", want) != 1) want[0] = 0;
    if (f) fclose(f);
    file_sha256(path, got);
    if (!want[0] || strcmp(want, got)) {
        test_fail(__FILE__, __LINE__, "%s: SHA-256 %s, refs made for %s (make testdata oracle-mtp-refs)", path, got,
                  want[0] ? want : "(none)");
        return;
    }
    ref_logits r;
    if (test_read_ref_logits("tests/data/oracle/tiny/qwen35-f32-mtp.mtp.bin", &r)) {
        test_fail(__FILE__, __LINE__, "no llama.cpp MTP refs (make oracle-mtp-refs)");
        return;
    }
    strata_err err = {0};
    engine_params p = {.model_path = path, .n_threads = 2, .n_ctx = 1024, .max_batch = 128, .block_tokens = 16};
    engine *e = NULL;
    mtp *d = NULL;
    if (engine_open(&e, &p, &err) ||
        mtp_new(&d, e->m, e->threads, 1, 512, 4, e->max_batch, 16, KVQ_F16, &err)) {
        test_fail(__FILE__, __LINE__, "%s", err.msg);
        engine_close(e);
        return;
    }
    int V = r.n_vocab, n = r.n_tok, agree = 0;
    CHECK_EQ_INT(e->m->hp.n_vocab, V);
    float *h = test_trunk_hidden(e, r.tokens, n), *ours = xmalloc((size_t)n * V * sizeof(float));
    CHECK(mtp_eval(d, r.tokens, h, n, ours, NULL, &err) == 0);
    double maxd = 0, sq = 0;
    for (size_t i = 0; i < (size_t)n * V; i++) {
        double dd = fabs((double)ours[i] - r.logits[i]);
        if (dd > maxd) maxd = dd;
        sq += dd * dd;
    }
    for (int q = 0; q < n; q++) {
        const float *a = ours + (size_t)q * V, *b = r.logits + (size_t)q * V;
        int ia = 0, ib = 0;
        for (int v = 1; v < V; v++) ia = a[v] > a[ia] ? v : ia, ib = b[v] > b[ib] ? v : ib;
        agree += ia == ib;
    }
    double rms = sqrt(sq / ((double)n * V));
    printf("    mtp vs llama.cpp: %d positions, max |diff| %.4f, rms %.5f, top-1 agrees at %d\n", n, maxd, rms, agree);
    CHECK_MSG(maxd <= QWEN35_TINY.max_abs && rms <= QWEN35_TINY.max_rms, "max %.4f rms %.5f", maxd, rms);
    CHECK_EQ_INT(agree, n);
    free(h), free(ours), free(r.tokens), free(r.logits);
    mtp_free(d);
    engine_close(e);
}
