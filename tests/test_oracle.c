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
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "model/engine.h"
#include "test.h"

#define CHUNK 256
/* Gemma 3 270M: measured max 1.23-1.54, RMS 0.18-0.74; without the
 * sliding window 22.8 and 10.2 (tests/data/oracle/gemma3/README.md). One
 * row's RMS is noise of that size: any change in attention rounding moves
 * prompt 06's last row by 0.2-0.7, and against a float64 forward pass the
 * rows that are 0.47-0.74 from llama.cpp are 0.22-0.24 from the truth
 * (llama.cpp: 0.59). */
#define GEMMA3_MAX_ABS 2.0f
#define GEMMA3_MAX_RMS 0.8f

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

static void run_case(const oracle_suite *su, engine *e, const char *nn) {
    oracle_case c;
    if (read_case(su, nn, &c)) {
        test_fail(__FILE__, __LINE__, "oracle case %s unreadable", nn);
        return;
    }
    int V = c.n_vocab;
    CHECK_EQ_INT(V, e->m->hp.n_vocab);
    float *logits = xmalloc((size_t)CHUNK * V * sizeof(float));
    kv_seq s, *seqs[CHUNK];
    kv_seq_init(&s);
    int32_t pos[CHUNK];
    int8_t want[CHUNK];
    oracle_stats st = {0};
    strata_err err = {0};
    for (int done = 0; done < c.n_tok; done += CHUNK) {
        int n = c.n_tok - done < CHUNK ? c.n_tok - done : CHUNK;
        for (int i = 0; i < n; i++) seqs[i] = &s, pos[i] = done + i, want[i] = 1;
        fwd_batch b = {.n = n, .tokens = c.tokens + done, .seqs = seqs, .pos = pos, .want = want};
        if (fwd_run(e->fwd, &b, logits, &err)) {
            test_fail(__FILE__, __LINE__, "%s: %s", nn, err.msg);
            break;
        }
        for (int i = 0; i < n; i++) compare_row(su, &c, logits + (size_t)i * V, done + i, &st);
    }
    double rms = st.n_sq ? sqrt(st.sq_sum / (double)st.n_sq) : 0;
    printf("    oracle %s: %d tokens, %d rows: max |diff| %.3f, rms %.3f; top-1 agrees at %d/%d decided positions\n",
           nn, c.n_tok, c.n_rows, st.max_abs, rms, st.agree, st.decided);
    CHECK_MSG(st.max_abs <= su->max_abs, "%s: max |diff| %.3f > %.2f", nn, st.max_abs, su->max_abs);
    CHECK_MSG(rms <= su->max_rms, "%s: rms diff %.3f > %.2f", nn, rms, su->max_rms);
    kv_seq_release(&e->kv, &s);
    free(logits);
    free_case(&c);
}

static void run_suite(const oracle_suite *su, const char *model_path) {
    strata_err err = {0};
    engine_params p = {.model_path = model_path, .n_ctx = 4096, .max_batch = CHUNK};
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
