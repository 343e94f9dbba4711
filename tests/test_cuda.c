/* test_cuda.c - the CUDA backend (backend/cuda/cuda.h) and the GPU forward
 * pass (model/forward_cuda.h).
 *
 * cuda_* tests run everywhere: without a GPU (or without the backend) the
 * failure must be a clear one. gpu_* tests need a CUDA GPU and run only
 * under STRATA_TEST_GPU=1 (`make test-gpu`): every kernel against the CPU
 * implementation or a float64 reference, batch invariance bit for bit
 * (a row alone, inside batches of any size, in any chunking), and whole
 * synthetic models against the CPU backend and the float64 reference
 * logits of tools/ref_forward.py. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/cuda/cuda.h"
#include "backend/delta.h"
#include "backend/quant_act_impl.h"
#include "backend/vexp.h"
#include "base/fp16.h"
#include "base/mem.h"
#include "model/engine.h"
#include "model/forward_cuda.h"
#include "model/forward_int.h"
#include "model/moe.h"
#include "test.h"
#include "test_util.h"

static const char *MODELS[] = {"llama-f32", "llama-f16", "llama-bf16", "llama-q8_0", "llama-q4_0", "llama-q4_1",
                               "llama-q4_k", "llama-q5_k", "llama-q6_k", "qwen2-q5_0", "qwen3-q5_1"};
#define N_MODELS (int)(sizeof MODELS / sizeof MODELS[0])

static const char *model_path(const char *name) {
    static char p[512];
    snprintf(p, sizeof p, "%s.gguf", test_data("models/"));
    snprintf(p + strlen(p) - 5, sizeof p - strlen(p) + 5, "%s.gguf", name);
    return p;
}

/* xorshift floats in [-1, 1) */
/* A generated test model, or NULL after failing the test with the reason. */
static model *load_test_model(const char *name) {
    model *m;
    strata_err err = {0};
    if (!model_load(&m, model_path(name), &err)) return m;
    test_fail(__FILE__, __LINE__, "%s", err.msg);
    return NULL;
}

static float frand(uint32_t *s) {
    *s ^= *s << 13, *s ^= *s >> 17, *s ^= *s << 5;
    return (float)((*s >> 8) / 8388608.0 - 1.0);
}

/* A generated model (tests/data/gen/models/NAME.gguf) on the GPU with
 * ctx positions; NULL and a recorded failure when either step fails. */
static fwdc *open_gpu_model(const char *name, int ctx, model **m) {
    fwdc *c = NULL;
    strata_err err = {0};
    if (model_load(m, model_path(name), &err)) {
        test_fail(__FILE__, __LINE__, "%s: %s", name, err.msg);
        return NULL;
    }
    if (fwdc_new(&c, *m, ctx, 512, &err)) {
        test_fail(__FILE__, __LINE__, "%s: %s", name, err.msg);
        model_free(*m);
        return NULL;
    }
    return c;
}

/* n token ids in [0, n_vocab - 1), seeded. */
static void random_tokens(int32_t *tok, int n, int n_vocab, uint32_t seed) {
    for (int t = 0; t < n; t++) tok[t] = (int32_t)((frand(&seed) + 1) * 0.5f * (n_vocab - 1));
}

static float *rand_vec(size_t n, uint32_t seed) {
    float *v = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) v[i] = frand(&seed);
    return v;
}

static void *to_dev(const void *src, size_t bytes) {
    strata_err err = {0};
    void *d = cuda_alloc(bytes, &err);
    CHECK_MSG(d, "cuda_alloc: %s", err.msg);
    if (d && src && cuda_upload(d, src, bytes, &err)) test_fail(__FILE__, __LINE__, "upload: %s", err.msg);
    return d;
}

static void from_dev(void *dst, const void *d, size_t bytes) {
    strata_err err = {0};
    if (cuda_download(dst, d, bytes, &err)) test_fail(__FILE__, __LINE__, "download: %s", err.msg);
}

static int gpu_up(void) {
    strata_err err = {0};
    if (cuda_open(&err)) {
        test_fail(__FILE__, __LINE__, "cuda_open: %s", err.msg);
        return 0;
    }
    printf("     device: %s\n", cuda_device_name());
    return 1;
}

/* ---- everywhere ------------------------------------------------------------ */

TEST(cuda_device_check_is_clear) {
    strata_err err = {0};
    int rc = cuda_open(&err);
    if (rc == 0) {
        CHECK(cuda_built());
        CHECK(strlen(cuda_device_name()) > 0);
        return;
    }
    CHECK_EQ_INT(rc, STRATA_EUNSUPPORTED);
    CHECK_MSG(strstr(err.msg, "no CUDA") || strstr(err.msg, "without the CUDA backend"), "unclear: %s", err.msg);
    /* The engine says the same, and an unknown device is refused. */
    engine *e = NULL;
    engine_params p = {.model_path = model_path("llama-q4_1"), .device = "cuda"};
    strata_err e2 = {0};
    CHECK_EQ_INT(engine_open(&e, &p, &e2), STRATA_EUNSUPPORTED);
    CHECK_STR(e2.msg, err.msg);
    p.device = "tpu";
    CHECK_EQ_INT(engine_open(&e, &p, &e2), STRATA_EINVAL);
    CHECK(strstr(e2.msg, "tpu") != NULL);
    CHECK(e == NULL);
}

/* The generated model name opens on the GPU pass (`run`, `bench`) and
 * in the server's GPU pool (`serve --device cuda`, two sequences):
 * without a GPU the error is the device's, with one both open (slots:
 * the pool keeps sliding-window slots). */
static void check_opens_on_the_gpu(const char *name, int slots) {
    strata_err gpu = {0};
    int no_gpu = cuda_open(&gpu);
    engine_params one = {.model_path = model_path(name), .device = "cuda", .n_ctx = 64};
    engine_params pool = {.model_path = model_path(name), .device = "cuda", .n_seq = 2, .n_ctx = 64};
    const engine_params *ps[] = {&one, &pool};
    for (int i = 0; i < 2; i++) {
        engine *e = NULL;
        strata_err err = {0};
        int rc = engine_open(&e, ps[i], &err);
        if (no_gpu) {
            CHECK_EQ_INT(rc, no_gpu);
            CHECK_STR(err.msg, gpu.msg);
            CHECK(e == NULL);
        } else {
            CHECK_MSG(rc == 0, "%s on the GPU (%s): %s", name, i ? "pool" : "one sequence", err.msg);
            CHECK(i == 0 || !slots || (e && e->kv.swa_layer && e->kv.n_slots > 0)); /* the pool has its slots */
            engine_close(e);
        }
    }
}

/* Gemma 3 on the GPU pass and in the GPU pool (its sliding layers' parts
 * in the pool's slots). */
TEST(cuda_gemma3_on_the_gpu_pass_and_in_the_gpu_pool) { check_opens_on_the_gpu("gemma3-q8_0", 1); }

/* qwen35 on the GPU pass and in the GPU pool (each sequence's recurrent
 * state in the pool's device memory), and the mixture-of-experts models
 * (qwen3moe, qwen35moe); gpt-oss is refused, by name. */
TEST(cuda_qwen35_and_moe_on_the_gpu_pass_and_in_the_gpu_pool) {
    check_opens_on_the_gpu("qwen35-f32", 0);
    check_opens_on_the_gpu("qwen3moe-q8_0", 0);
    check_opens_on_the_gpu("qwen35moe-f32", 0);
    engine *e = NULL;
    strata_err err = {0};
    engine_params pm = {.model_path = model_path("gpt-oss-mxfp4"), .device = "cuda", .n_ctx = 64};
    if (access(pm.model_path, R_OK) != 0) { /* make testdata makes it; the GPU machine's data step does not */
        printf("     (no %s here: gpt-oss's refusal is checked where make testdata ran)\n", pm.model_path);
        return;
    }
    CHECK_EQ_INT(engine_open(&e, &pm, &err), STRATA_EUNSUPPORTED);
    CHECK_MSG(strstr(err.msg, "gpt-oss (architecture)"), "%s", err.msg);
    CHECK(e == NULL);
}

/* ---- kernels ----------------------------------------------------------------- */

/* A weight of each type from the synthetic models: ffn_gate (k = n_embd)
 * and ffn_down (k = n_ff; Q6_K in llama-q4_k) of layer 0. */
typedef struct wcase {
    model *m;
    const model_tensor *t;
} wcase;

static double dot_ref(const float *w, const float *x, int k, double *mag) {
    double s = 0, a = 0;
    for (int i = 0; i < k; i++) s += (double)w[i] * x[i], a += fabs((double)w[i] * x[i]);
    *mag = a;
    return s;
}

static double dot_ref_d(const float *w, const double *x, int k, double *mag) {
    double s = 0, a = 0;
    for (int i = 0; i < k; i++) s += w[i] * x[i], a += fabs(w[i] * x[i]);
    *mag = a;
    return s;
}

/* x as the 8-bit path sees it: each block of blk (32, or a K-quant's
 * 256 as the CPU's Q8_K) quantized as the CPU does (q8_block) and scaled
 * back, d * q, in double. */
static double *q8_view(const float *x, size_t n, int blk) {
    double *v = xmalloc(n * sizeof(double));
    int8_t q[256];
    for (size_t b = 0; b < n; b += blk) {
        float d = q8_block(x + b, q, blk);
        for (int j = 0; j < blk; j++) v[b + j] = (double)d * q[j];
    }
    return v;
}

/* GPU matmul of n random rows against the float64 dot of the CPU's
 * dequantized weights, with x itself (float path) or with its 8-bit view
 * (cuda_matmul_q8 types): float32 sums over exact per-block integer dots,
 * so a few ulps of sum |w x|, where the 8-bit rounding itself is ~1e-3. A
 * wrong fragment layout or scale is off by O(1). */
static void check_matmul(const model_tensor *t, int n, uint32_t seed) {
    int k = (int)t->cols, rows = (int)t->rows, q8 = cuda_matmul_q8(t->type);
    float *x = rand_vec((size_t)n * k, seed), *y = xmalloc((size_t)n * rows * sizeof(float));
    float *wrow = xmalloc((size_t)k * sizeof(float));
    double *xv = q8 ? q8_view(x, (size_t)n * k, quant_get(t->type)->blck == 256 ? 256 : 32) : NULL;
    void *dw = to_dev(t->data, t->row_bytes * rows);
    float *dx = to_dev(x, (size_t)n * k * sizeof(float)), *dy = to_dev(NULL, (size_t)n * rows * sizeof(float));
    strata_err err = {0};
    if (cuda_matmul(t->type, dw, t->row_bytes, rows, k, dx, n, dy, &err)) test_fail(__FILE__, __LINE__, "%s", err.msg);
    from_dev(y, dy, (size_t)n * rows * sizeof(float));
    double worst = 0;
    for (int r = 0; r < rows; r++) {
        quant_dequant_row(t->type, (const uint8_t *)t->data + (size_t)r * t->row_bytes, wrow, k);
        for (int i = 0; i < n; i++) {
            double mag, ref = q8 ? dot_ref_d(wrow, xv + (size_t)i * k, k, &mag) : dot_ref(wrow, x + (size_t)i * k, k, &mag);
            double e = fabs(y[(size_t)i * rows + r] - ref) / (mag + 1e-30);
            if (e > worst) worst = e;
        }
    }
    /* 8-bit path: the min's term (mw * sx) is added to the products' sum
     * unfused, so its rounding is against a larger magnitude. */
    CHECK_MSG(worst < (q8 ? 3e-5 : 4e-6), "%s %dx%d: error %.3g of sum |w x|", quant_name(t->type), rows, k, worst);
    printf("     %-5s %5d x %4d, %d tokens%s: max error %.2g of sum |w x|\n", quant_name(t->type), rows, k, n,
           q8 ? " (8-bit x)" : "", worst);
    cuda_free(dw), cuda_free(dx), cuda_free(dy);
    free(x), free(y), free(wrow), free(xv);
}

TEST(gpu_matmul_matches_cpu_dequant) {
    if (!gpu_up()) return;
    for (int i = 0; i < N_MODELS; i++) {
        model *m = load_test_model(MODELS[i]);
        if (!m) continue;
        check_matmul(&m->layers[0].w_gate, 11, 1u + i);
        check_matmul(&m->layers[0].w_down, 3, 7u + i);
        check_matmul(&m->layers[0].w_down, 70, 5u + i); /* two token tiles of 64, one partial */
        check_matmul(&m->tok_embd, 1, 9u + i);
        model_free(m);
    }
}

/* y of n tokens in chunks cycling through sizes (0-terminated). */
static float *matmul_chunked(const model_tensor *t, float *dx, int n, const int *chunks, float *dy) {
    int k = (int)t->cols, rows = (int)t->rows;
    void *dw = to_dev(t->data, t->row_bytes * rows);
    strata_err err = {0};
    for (int done = 0, ci = 0; done < n; ci++) {
        if (!chunks[ci]) ci = 0;
        int c = chunks[ci] < n - done ? chunks[ci] : n - done;
        if (cuda_matmul(t->type, dw, t->row_bytes, rows, k, dx + (size_t)done * k, c, dy + (size_t)done * rows, &err))
            test_fail(__FILE__, __LINE__, "%s", err.msg);
        done += c;
    }
    float *y = xmalloc((size_t)n * rows * sizeof(float));
    from_dev(y, dy, (size_t)n * rows * sizeof(float));
    cuda_free(dw);
    return y;
}

/* t times N random tokens in each chunk plan (np of them): one chunk's bits. */
static void check_chunk_plans(const model_tensor *t, int N, const int *const plans[], int np, uint32_t seed,
                              const char *name) {
    static const int all[] = {100000, 0};
    float *x = rand_vec((size_t)N * t->cols, seed);
    float *dx = to_dev(x, (size_t)N * t->cols * sizeof(float)), *dy = to_dev(NULL, (size_t)N * t->rows * 4);
    float *ref = matmul_chunked(t, dx, N, all, dy);
    for (int p = 0; p < np; p++) {
        float *y = matmul_chunked(t, dx, N, plans[p], dy);
        CHECK_MSG(memcmp(y, ref, (size_t)N * t->rows * 4) == 0, "%s: chunk plan %d changes bits", name, p);
        free(y);
    }
    cuda_free(dx), cuda_free(dy), free(x), free(ref);
}

TEST(gpu_matmul_batch_invariance) {
    if (!gpu_up()) return;
    static const int one[] = {1, 0}, uneven[] = {7, 1, 13, 3, 9, 2, 0}, eights[] = {8, 16, 0};
    const int *plans[] = {one, uneven, eights};
    for (int i = 0; i < N_MODELS; i++) {
        model *m = load_test_model(MODELS[i]);
        if (!m) continue;
        check_chunk_plans(&m->layers[0].w_down, 150, plans, 3, 77u + i, MODELS[i]); /* three tiles of 64 tokens at once */
        model_free(m);
    }
}

/* Decode rows that start only 2-byte aligned (an odd number of 18-, 22-
 * or 34-byte blocks, or of Q6_K's 210-byte super-blocks, a row: k_mmv's
 * lanes read their blocks themselves there, not staged through shared
 * memory): w_down's blocks viewed as rows of 15 blocks (Q6_K: 3
 * super-blocks). Against the CPU's dequantized dot, and decode (1 and
 * uneven chunks) against prefill, bit for bit. */
TEST(gpu_matmul_unaligned_rows) {
    if (!gpu_up()) return;
    static const int one[] = {1, 0}, uneven[] = {7, 1, 13, 3, 0};
    const int *plans[] = {one, uneven};
    enum { NB = 15 };
    for (int i = 0; i < N_MODELS; i++) {
        model *m = load_test_model(MODELS[i]);
        if (!m) continue;
        const model_tensor *t = &m->layers[0].w_down;
        int64_t nb = t->cols / 32, vb = t->type == QT_Q6_K ? 24 : NB; /* Q4_K and Q5_K rows: 144 or 176 bytes */
        if (cuda_matmul_q8(t->type) && (quant_get(t->type)->blck == 32 || t->type == QT_Q6_K) && nb >= vb) {
            model_tensor v = *t;
            v.cols = 32 * vb, v.row_bytes = t->row_bytes * (size_t)vb / (size_t)nb, v.rows = t->rows * nb / vb;
            check_matmul(&v, 1, 31u + i);
            check_matmul(&v, 3, 37u + i);
            check_chunk_plans(&v, 40, plans, 2, 41u + i, MODELS[i]);
        }
        model_free(m);
    }
}

/* Prefill's staged chunks (k_mmq_st: 8 blocks a chunk, two stages) over
 * rows of 3+ chunks, the last partial for the legacy types: w_down's
 * (or w_gate's) blocks viewed as rows of 26 blocks (24, three
 * super-blocks, for the K-quants). Against the CPU's dequantized dot, and prefill against
 * decode and uneven chunks, bit for bit. */
TEST(gpu_matmul_long_rows) {
    if (!gpu_up()) return;
    static const int one[] = {1, 0}, uneven[] = {7, 1, 13, 3, 0};
    const int *plans[] = {one, uneven};
    for (int i = 0; i < N_MODELS; i++) {
        model *m = load_test_model(MODELS[i]);
        if (!m) continue;
        const model_tensor *t = &m->layers[0].w_down;
        if (t->type == QT_Q6_K) t = &m->layers[0].w_gate; /* a Q4_K_M mix's down: 210-byte super-blocks, not staged */
        int64_t nb = t->cols / 32, NB = quant_get(t->type)->blck == 32 ? 26 : 24;
        if (cuda_matmul_q8(t->type) && t->rows * nb >= 8 * NB) {
            model_tensor v = *t;
            v.cols = 32 * NB, v.row_bytes = t->row_bytes * (size_t)NB / (size_t)nb, v.rows = t->rows * nb / NB;
            check_matmul(&v, 11, 43u + i);
            check_matmul(&v, 70, 47u + i);
            check_chunk_plans(&v, 40, plans, 2, 53u + i, MODELS[i]);
        }
        model_free(m);
    }
}

TEST(gpu_embed_rows_are_the_cpu_dequant_bits) {
    if (!gpu_up()) return;
    for (int i = 0; i < N_MODELS; i++) {
        model *m = load_test_model(MODELS[i]);
        if (!m) continue;
        strata_err err = {0};
        const model_tensor *t = &m->tok_embd;
        int32_t tok[5] = {0, 3, (int32_t)t->rows - 1, 17, 3};
        int dim = (int)t->cols;
        void *dw = to_dev(t->data, t->row_bytes * t->rows);
        int32_t *dt = to_dev(tok, sizeof tok);
        float *dx = to_dev(NULL, 5 * (size_t)dim * 4), *x = xmalloc(5 * (size_t)dim * 4), *ref = xmalloc((size_t)dim * 4);
        if (cuda_embed(dx, t->type, dw, t->row_bytes, dim, dt, 5, 1.0f, &err)) test_fail(__FILE__, __LINE__, "%s", err.msg);
        from_dev(x, dx, 5 * (size_t)dim * 4);
        for (int j = 0; j < 5; j++) {
            quant_dequant_row(t->type, (const uint8_t *)t->data + (size_t)tok[j] * t->row_bytes, ref, dim);
            CHECK_MSG(memcmp(ref, x + (size_t)j * dim, (size_t)dim * 4) == 0, "%s row %d differs", MODELS[i], tok[j]);
        }
        cuda_free(dw), cuda_free(dt), cuda_free(dx), free(x), free(ref);
        model_free(m);
    }
}

static double max_rel(const float *a, const float *b, size_t n) {
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        if (!(fabs((double)a[i] - b[i]) <= d)) d = fabs((double)a[i] - b[i]);
        if (fabs((double)b[i]) > r) r = fabs((double)b[i]);
    }
    return d / (r > 0 ? r : 1);
}

TEST(gpu_norm_rope_swiglu_match_cpu) {
    if (!gpu_up()) return;
    enum { N = 9, D = 576, H = 9, HD = 64 };
    float *x = rand_vec(N * D, 5), *w = rand_vec(D, 6), *u = rand_vec(N * D, 7), *out = xmalloc(N * D * 4);
    float *ref = xmalloc(N * D * 4);
    float *dx = to_dev(x, N * D * 4), *dw = to_dev(w, D * 4), *du = to_dev(u, N * D * 4), *dy = to_dev(NULL, N * D * 4);
    /* RMSNorm */
    cuda_rmsnorm(dy, dx, dw, N, D, 1e-5f);
    from_dev(out, dy, N * D * 4);
    for (int t = 0; t < N; t++) fwd__rmsnorm(ref + t * D, x + t * D, w, D, 1e-5f);
    CHECK_MSG(max_rel(out, ref, N * D) < 1e-6, "rmsnorm: %.3g", max_rel(out, ref, N * D));
    /* RoPE, both pairings, at positions far apart (angles in double) */
    for (int neox = 0; neox < 2; neox++) {
        int32_t pos[N];
        float inv[HD / 2];
        for (int t = 0; t < N; t++) pos[t] = t * 1013 + 5;
        for (int i = 0; i < HD / 2; i++) inv[i] = (float)pow(100000.0, -2.0 * i / HD);
        int32_t *dp = to_dev(pos, sizeof pos);
        float *di = to_dev(inv, sizeof inv);
        cuda_upload(dy, x, N * D * 4, NULL);
        cuda_rope(dy, N, D, H, HD, HD, neox, dp, di, 1.0f);
        from_dev(out, dy, N * D * 4);
        memcpy(ref, x, N * D * 4);
        for (int t = 0; t < N; t++)
            for (int h = 0; h < H; h++)
                for (int i = 0; i < HD / 2; i++) {
                    double th = (double)pos[t] * inv[i];
                    float c = (float)cos(th), s = (float)sin(th), *v = ref + t * D + h * HD;
                    int a = neox ? i : 2 * i, b = neox ? i + HD / 2 : 2 * i + 1;
                    float x0 = v[a], x1 = v[b];
                    v[a] = x0 * c - x1 * s;
                    v[b] = x0 * s + x1 * c;
                }
        CHECK_MSG(max_rel(out, ref, N * D) < 1e-6, "rope neox=%d: %.3g", neox, max_rel(out, ref, N * D));
        cuda_free(dp), cuda_free(di);
    }
    /* SwiGLU */
    cuda_upload(dy, x, N * D * 4, NULL);
    cuda_swiglu(dy, du, N * D);
    from_dev(out, dy, N * D * 4);
    for (int i = 0; i < N * D; i++) ref[i] = x[i] / (1.0f + expf(-x[i])) * u[i];
    CHECK_MSG(max_rel(out, ref, N * D) < 1e-6, "swiglu: %.3g", max_rel(out, ref, N * D));
    cuda_free(dx), cuda_free(dw), cuda_free(du), cuda_free(dy);
    free(x), free(w), free(u), free(out), free(ref);
}

/* Attention of n tokens at positions [0, n) over K/V stored by the GPU,
 * in chunks (0-terminated sizes), all into out; max_end of each call as
 * the forward pass gives it, or the whole context (grow = 0: as a decode
 * graph does). */
static void attn_chunked(float *dout, float *dpart, const float *dq, uint16_t *dkc, uint16_t *dvc, int32_t *dpos, int n,
                         int nh, int nkv, int hd, const int *chunks, int grow) {
    strata_err err = {0};
    for (int done = 0, ci = 0; done < n; ci++) {
        if (!chunks[ci]) ci = 0;
        int c = chunks[ci] < n - done ? chunks[ci] : n - done;
        if (cuda_attention(dout + (size_t)done * nh * hd, dpart, dq + (size_t)done * nh * hd, dkc, dvc, dpos + done, c,
                           grow ? done + c : n, n, nh, nkv, hd, 0.125f, &err))
            test_fail(__FILE__, __LINE__, "%s", err.msg);
        done += c;
    }
}

static void check_attention(int n, int nh, int nkv, int hd) {
    static const int all[] = {100000, 0}, one[] = {1, 0}, uneven[] = {5, 1, 130, 17, 0};
    int kvd = nkv * hd, qd = nh * hd;
    float *q = rand_vec((size_t)n * qd, 11), *k = rand_vec((size_t)n * kvd, 12), *v = rand_vec((size_t)n * kvd, 13);
    int32_t *pos = xmalloc((size_t)n * 4);
    for (int i = 0; i < n; i++) pos[i] = i;
    float *dq = to_dev(q, (size_t)n * qd * 4), *dk = to_dev(k, (size_t)n * kvd * 4), *dv = to_dev(v, (size_t)n * kvd * 4);
    int32_t *dp = to_dev(pos, (size_t)n * 4);
    uint16_t *dkc = to_dev(NULL, (size_t)n * kvd * 2), *dvc = to_dev(NULL, (size_t)n * kvd * 2);
    float *dout = to_dev(NULL, (size_t)n * qd * 4), *out = xmalloc((size_t)n * qd * 4), *o2 = xmalloc((size_t)n * qd * 4);
    float *dpart = to_dev(NULL, cuda_attention_scratch(n, nh, hd, n) * sizeof(float));
    cuda_kv_store(dkc, dvc, dk, dv, dp, n, kvd);
    attn_chunked(dout, dpart, dq, dkc, dvc, dp, n, nh, nkv, hd, all, 1);
    from_dev(out, dout, (size_t)n * qd * 4);
    /* float64 reference over the half-rounded q, K and V (the kernel's
     * inputs to the tensor cores); the kernel's weights are rounded to
     * half too (relative 2^-11 each, normalized by their own sum): within
     * 2^-10 of max |v| = 1 */
    double worst = 0, *s = xmalloc((size_t)n * sizeof(double));
    for (int i = 0; i < n; i++)
        for (int h = 0; h < nh; h++) {
            int g = h / (nh / nkv);
            double mx = -1e300, sum = 0;
            for (int p = 0; p <= i; p++) {
                double a = 0;
                for (int d = 0; d < hd; d++)
                    a += (double)fp16_to_f32(f32_to_fp16(q[(size_t)i * qd + h * hd + d])) *
                         fp16_to_f32(f32_to_fp16(k[(size_t)p * kvd + g * hd + d]));
                s[p] = a * 0.125;
                if (s[p] > mx) mx = s[p];
            }
            for (int p = 0; p <= i; p++) sum += (s[p] = exp(s[p] - mx));
            for (int d = 0; d < hd; d++) {
                double o = 0;
                for (int p = 0; p <= i; p++) o += s[p] * fp16_to_f32(f32_to_fp16(v[(size_t)p * kvd + g * hd + d]));
                double e = fabs(out[(size_t)i * qd + h * hd + d] - o / sum);
                if (e > worst) worst = e;
            }
        }
    CHECK_MSG(worst < 1.0 / 1024, "attention n=%d hd=%d: max error %.3g", n, hd, worst);
    printf("     attention %d tokens, %d/%d heads of %d: max error %.2g\n", n, nh, nkv, hd, worst);
    /* decode one by one, uneven chunks, a grid over the whole context: the same bits */
    const int *plans[] = {one, uneven, one, all};
    for (int pl = 0; pl < 4; pl++) {
        memset(o2, 0xff, (size_t)n * qd * 4); /* NaN: a row the plan does not write fails */
        cuda_upload(dout, o2, (size_t)n * qd * 4, NULL);
        attn_chunked(dout, dpart, dq, dkc, dvc, dp, n, nh, nkv, hd, plans[pl], pl < 2);
        from_dev(o2, dout, (size_t)n * qd * 4);
        CHECK_MSG(memcmp(o2, out, (size_t)n * qd * 4) == 0, "attention hd=%d: plan %d changes bits", hd, pl);
    }
    cuda_free(dq), cuda_free(dk), cuda_free(dv), cuda_free(dp), cuda_free(dkc), cuda_free(dvc), cuda_free(dout);
    cuda_free(dpart);
    free(q), free(k), free(v), free(pos), free(out), free(o2), free(s);
}

TEST(gpu_attention_matches_float64_and_is_batch_invariant) {
    if (!gpu_up()) return;
    /* segments of CUDA_ATTN_SEG keys: 700 tokens cross two boundaries */
    check_attention(700, 9, 3, 64);
    check_attention(300, 4, 2, 128);
    check_attention(300, 2, 1, 256); /* a segment's 8 tiles through decode's ring of shared memory */
    check_attention(90, 8, 1, 128);
}

TEST(gpu_argmax_first_largest) {
    if (!gpu_up()) return;
    enum { R = 4, V = 49152 };
    float *x = rand_vec(R * V, 3);
    x[0 * V + 100] = 5, x[0 * V + 40000] = 5; /* tie: the first */
    x[1 * V + 7] = NAN, x[1 * V + 9000] = 3;   /* NaN never wins */
    for (int i = 0; i < V; i++) x[2 * V + i] = -INFINITY;
    x[3 * V + V - 1] = 2;
    float *dx = to_dev(x, R * V * 4);
    int32_t *di = to_dev(NULL, R * 4), idx[R];
    cuda_argmax(di, dx, R, V);
    from_dev(idx, di, sizeof idx);
    CHECK_EQ_INT(idx[0], 100);
    CHECK_EQ_INT(idx[1], 9000);
    CHECK_EQ_INT(idx[2], 0);
    CHECK_EQ_INT(idx[3], V - 1);
    cuda_free(dx), cuda_free(di), free(x);
}

/* ---- whole models ------------------------------------------------------------- */

static int read_ref(const char *name, ref_logits *r) {
    char p[512];
    snprintf(p, sizeof p, "%s", model_path(name));
    strcpy(p + strlen(p) - 5, ".ref");
    return test_read_ref_logits(p, r);
}

/* The fixture's float64 reference and its model on the GPU (4096
 * positions); NULL after a recorded failure. */
static fwdc *open_ref_case(const char *name, ref_logits *r, model **m) {
    if (read_ref(name, r)) {
        test_fail(__FILE__, __LINE__, "%s: no reference logits (make testdata)", name);
        return NULL;
    }
    return open_gpu_model(name, 4096, m);
}

/* Every position's logits on the GPU, in chunks (0-terminated sizes). */
static float *gpu_logits(fwdc *c, const int32_t *tok, int n, int V, const int *chunks) {
    float *out = xmalloc((size_t)n * V * 4);
    strata_err err = {0};
    for (int done = 0, ci = 0; done < n; ci++) {
        if (!chunks[ci]) ci = 0;
        int k = chunks[ci] < n - done ? chunks[ci] : n - done;
        if (fwdc_run(c, tok + done, k, done, 1, out + (size_t)done * V, &err)) test_fail(__FILE__, __LINE__, "%s", err.msg);
        done += k;
    }
    return out;
}

/* Every position's logits on the CPU backend (one chunk). */
static float *cpu_logits(const char *path, const int32_t *tok, int n, int V) {
    engine *e = NULL;
    engine_params p = {.model_path = path, .n_threads = 2, .n_ctx = 4096, .max_batch = 512};
    strata_err err = {0};
    if (engine_open(&e, &p, &err)) {
        test_fail(__FILE__, __LINE__, "%s", err.msg);
        return NULL;
    }
    float *out = xmalloc((size_t)n * V * 4);
    kv_seq s;
    kv_seq_init(&s);
    kv_seq **seqs = xmalloc((size_t)n * sizeof *seqs);
    int32_t *pos = xmalloc((size_t)n * 4);
    int8_t *want = xmalloc((size_t)n);
    for (int i = 0; i < n; i++) seqs[i] = &s, pos[i] = i, want[i] = 1;
    fwd_batch b = {.n = n, .tokens = tok, .seqs = seqs, .pos = pos, .want = want};
    if (fwd_run(e->fwd, &b, out, &err)) test_fail(__FILE__, __LINE__, "%s", err.msg);
    kv_seq_release(&e->kv, &s);
    free(seqs), free(pos), free(want);
    engine_close(e);
    return out;
}

static int argmax_row(const float *x, int V) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* Rows whose top choice in `ref` is clear (a margin over the runner-up of
 * more than `clear` of the row's range) and which `x` picks otherwise;
 * *n_same counts the rows where both pick the same, clear or not. */
static int clear_disagreements(const float *x, const float *ref, int n, int V, float clear, int *n_same) {
    int bad = 0;
    *n_same = 0;
    for (int t = 0; t < n; t++) {
        const float *c = ref + (size_t)t * V;
        int a = argmax_row(c, V), g = argmax_row(x + (size_t)t * V, V);
        float second = -INFINITY, lo = c[0], hi = c[a];
        for (int i = 0; i < V; i++) {
            if (i != a && c[i] > second) second = c[i];
            if (c[i] < lo) lo = c[i];
        }
        *n_same += a == g;
        if (a != g && c[a] - second > clear * (hi - lo)) {
            const float *y = x + (size_t)t * V;
            printf("     row %d: the reference picks %d by %.4f of its range, this picks %d (%.4f above %d's)\n", t, a,
                   (c[a] - second) / (hi - lo), g, (y[g] - y[a]) / (hi - lo), a);
            bad++;
        }
    }
    return bad;
}

TEST(gpu_forward_matches_cpu_and_float64) {
    if (!gpu_up()) return;
    static const int one_chunk[] = {4096, 0};
    for (int i = 0; i < N_MODELS; i++) {
        ref_logits r;
        model *m;
        fwdc *c = open_ref_case(MODELS[i], &r, &m);
        if (!c) continue;
        int n = r.n_tok, V = r.n_vocab, same = 0;
        float *g = gpu_logits(c, r.tokens, n, V, one_chunk), *cpu = cpu_logits(model_path(MODELS[i]), r.tokens, n, V);
        double vs_ref = max_rel(g, r.logits, (size_t)n * V), vs_cpu = cpu ? max_rel(g, cpu, (size_t)n * V) : 1;
        /* Float activations and F16 K/V: well under the CPU's 8-bit bound
         * (0.05); the 8-bit path (cuda_matmul_q8) has the CPU's bound, its
         * logits 0.02-0.03 of the range from float64's (measured), so a
         * choice is clear to it from a margin of 2% (llama-q4_1's row 13,
         * 1.2%, flips with attention's half q and weights, cuda-3) */
        int q8 = cuda_matmul_q8(m->tok_embd.type) || cuda_matmul_q8(m->layers[0].w_gate.type);
        float clear = q8 ? 0.02f : 0.01f;
        int same_cpu = 0, bad = clear_disagreements(g, r.logits, n, V, clear, &same);
        if (cpu) clear_disagreements(g, cpu, n, V, clear, &same_cpu);
        printf("     %-11s %d tokens: GPU vs float64 %.2g, GPU vs CPU %.2g of the logit range; "
               "greedy = float64's %d/%d, = CPU's %d/%d\n", MODELS[i], n, vs_ref, vs_cpu, same, n, same_cpu, n);
        CHECK_MSG(vs_ref < (q8 ? 0.05 : 0.01), "%s: GPU vs float64 %.4f", MODELS[i], vs_ref);
        CHECK_MSG(vs_cpu < 0.05, "%s: GPU vs CPU %.4f", MODELS[i], vs_cpu);
        CHECK_MSG(bad == 0, "%s: %d rows where float64's clear greedy choice is not the GPU's", MODELS[i], bad);
        free(g), free(cpu), free(r.tokens), free(r.logits);
        fwdc_free(c);
        model_free(m);
    }
}

/* A whole generated model over its reference tokens: GPU vs float64 and
 * vs the CPU backend below tol (of the logit range), no row where
 * float64's clear greedy choice is not the GPU's, and every row's bits
 * the same in one chunk, token by token and in uneven chunks (batch
 * invariance). */
static void check_whole_model(const char *name, double tol) {
    static const int one_chunk[] = {4096, 0}, decode[] = {1, 0}, uneven[] = {1, 7, 3, 13, 2, 0};
    ref_logits r;
    model *m;
    fwdc *c = open_ref_case(name, &r, &m);
    if (!c) return;
    int n = r.n_tok, V = r.n_vocab, same = 0, same_cpu = 0;
    float *g = gpu_logits(c, r.tokens, n, V, one_chunk), *cpu = cpu_logits(model_path(name), r.tokens, n, V);
    double vs_ref = max_rel(g, r.logits, (size_t)n * V), vs_cpu = cpu ? max_rel(g, cpu, (size_t)n * V) : 1;
    double cpu_ref = cpu ? max_rel(cpu, r.logits, (size_t)n * V) : 1;
    int bad = clear_disagreements(g, r.logits, n, V, 0.01f, &same);
    if (cpu) clear_disagreements(g, cpu, n, V, 0.01f, &same_cpu);
    printf("     %-15s %d tokens: GPU vs float64 %.2g, GPU vs CPU %.2g, CPU vs float64 %.2g of the logit range; "
           "greedy = float64's %d/%d, = CPU's %d/%d\n", name, n, vs_ref, vs_cpu, cpu_ref, same, n, same_cpu, n);
    CHECK_MSG(vs_ref < tol, "%s: GPU vs float64 %.4f", name, vs_ref);
    CHECK_MSG(vs_cpu < tol, "%s: GPU vs CPU %.4f", name, vs_cpu);
    CHECK_MSG(bad == 0, "%s: %d rows where float64's clear greedy choice is not the GPU's", name, bad);
    const int *plans[] = {decode, uneven};
    for (int k = 0; k < 2; k++) {
        fwdc_free(c);
        model_free(m);
        if (!(c = open_gpu_model(name, 4096, &m))) break;
        float *h = gpu_logits(c, r.tokens, n, V, plans[k]);
        CHECK_MSG(memcmp(h, g, (size_t)n * V * 4) == 0, "%s: %s gives other bits than one chunk", name,
                  k ? "uneven chunks" : "token by token");
        free(h);
    }
    free(g), free(cpu), free(r.tokens), free(r.logits);
    if (c) fwdc_free(c), model_free(m);
}

/* Gemma 3 on the GPU (sliding-window attention, GELU, post norms, the
 * embedding scale): the tiny fixture (window 16) over its 24 reference
 * tokens, past the window, with the bounds of the other whole models on
 * the 8-bit path (Q8_0 weights): 0.05 of the logit range. */
TEST(gpu_gemma3_matches_cpu_and_float64_past_its_window) {
    if (!gpu_up()) return;
    model *m = NULL;
    strata_err err = {0};
    ref_logits r;
    if (model_load(&m, model_path("gemma3-q8_0"), &err) || read_ref("gemma3-q8_0", &r)) {
        test_fail(__FILE__, __LINE__, "gemma3-q8_0: %s", err.msg);
        model_free(m);
        return;
    }
    CHECK_MSG(m->hp.n_swa > 0 && r.n_tok > m->hp.n_swa, "the fixture's %d tokens pass its window of %d", r.n_tok,
              m->hp.n_swa);
    free(r.tokens), free(r.logits);
    model_free(m);
    check_whole_model("gemma3-q8_0", 0.05);
}

/* Mixture of experts on the GPU (moe_cuda.c: routed on the device as the
 * CPU routes, experts over their slots, the weighted sum, qwen35moe's
 * shared expert and its delta-net layers; token by token is the decode
 * graph, all experts of a matmul one launch): qwen3moe in float weights and
 * on the 8-bit path, qwen35moe in float weights and in K-quants, within
 * the CPU's bound (0.05 of the logit range: an expert chosen differently
 * at a near tie would show as a large error, not a small one). For these
 * models the float64 reference rounds every matmul input to 8 bits as
 * the engines' 8-bit paths do (tools/ref_forward.py, so that its routing
 * is theirs; a K-quant's per 256, as both engines since cuda-4): the CPU
 * is within 0.0072 of it on qwen3moe-q8_0, the H100 within 4.5e-7
 * (2026-11-27). qwen35moe-q4_k_m was 0.12 from it while the GPU rounded
 * K-quant inputs per 32 (some near ties routed elsewhere). */
TEST(gpu_moe_matches_cpu_and_float64) {
    if (!gpu_up()) return;
    const char *names[] = {"qwen3moe-f32", "qwen3moe-q8_0", "qwen35moe-f32", "qwen35moe-q4_k_m"};
    for (int i = 0; i < 4; i++) check_whole_model(names[i], 0.05);
}

/* Units in the last place between two floats of one sign. */
static long ulps_apart(float a, float b) {
    int32_t ia, ib;
    memcpy(&ia, &a, 4), memcpy(&ib, &b, 4);
    return labs((long)ia - (long)ib);
}

/* The device, and its router's table (cuda_moe_init). */
static int moe_up(void) {
    strata_err err = {0};
    if (!gpu_up()) return 0;
    if (!cuda_moe_init(&err)) return 1;
    test_fail(__FILE__, __LINE__, "cuda_moe_init: %s", err.msg);
    return 0;
}

/* The device's routing (cuda_moe_route, cuda_moe_group) against the
 * CPU's moe_route and moe_group on the same logits: the same experts in
 * the same order (ties, planted in every token, to the lower id), the
 * same slots and groups, the same weights bit for bit (glibc's expf; the
 * softmax's double sum over lanes is exact here: the exps span less than
 * 2^29), for each gating, with and without renormalisation and scale, up
 * to 1024 experts and 32 a token, one token to a prefill's worth. */
static void check_routing(int n, int ne, int k, moe_gating gating, int norm, float scale, uint32_t seed) {
    model_hparams hp;
    memset(&hp, 0, sizeof hp);
    hp.n_expert = ne, hp.n_expert_used = k, hp.expert_gating = gating, hp.expert_norm = norm, hp.expert_scale = scale;
    cuda_moe_gating g = {ne, k, gating == MOE_GATE_SIGMOID    ? CUDA_GATE_SIGMOID
                                : gating == MOE_GATE_SOFTMAX ? CUDA_GATE_SOFTMAX
                                                             : CUDA_GATE_SOFTMAX_WEIGHT,
                         norm, scale};
    float *lg = rand_vec((size_t)n * ne, seed), *p = xmalloc((size_t)ne * sizeof(float));
    for (int t = 0; t < n; t++) { /* a tie: the token's largest logit again, at a higher id */
        float *row = lg + (size_t)t * ne;
        int best = 0;
        for (int i = 1; i < ne; i++) best = row[i] > row[best] ? i : best;
        row[(best + 1 + t % (ne - 1)) % ne] = row[best] * 3.0f + 1.0f, row[best] = row[best] * 3.0f + 1.0f;
    }
    size_t pairs = (size_t)n * k;
    int ng = cuda_moe_groups(n, k, ne), *ids = xmalloc(pairs * sizeof(int)), *first = xmalloc((ne + 1) * sizeof(int));
    int *fill = xmalloc(ne * sizeof(int)), *slot_of = xmalloc(pairs * sizeof(int)),
        *slot_tok = xmalloc(pairs * sizeof(int));
    float *w = xmalloc(pairs * sizeof(float));
    for (int t = 0; t < n; t++) moe_route(&hp, lg + (size_t)t * ne, p, ids + (size_t)t * k, w + (size_t)t * k);
    moe_group(ids, n, k, ne, first, fill, slot_of, slot_tok, NULL);
    float *d_lg = to_dev(lg, (size_t)n * ne * 4), *d_w = to_dev(NULL, pairs * 4);
    int32_t *d_ids = to_dev(NULL, pairs * 4), *d_first = to_dev(NULL, (ne + 1) * 4), *d_of = to_dev(NULL, pairs * 4);
    int32_t *d_tok = to_dev(NULL, pairs * 4), *d_groups = to_dev(NULL, (size_t)ng * CUDA_GROUP_INTS * 4);
    int32_t *g_ids = xmalloc(pairs * 4), *g_first = xmalloc((ne + 1) * 4), *g_of = xmalloc(pairs * 4);
    int32_t *g_tok = xmalloc(pairs * 4), *g_groups = xmalloc((size_t)ng * CUDA_GROUP_INTS * 4);
    float *g_w = xmalloc(pairs * 4);
    strata_err err = {0};
    if (cuda_moe_route(d_lg, n, &g, d_ids, d_w, &err) ||
        cuda_moe_group(d_ids, n, k, ne, d_first, d_of, d_tok, d_groups, &err)) {
        test_fail(__FILE__, __LINE__, "%d tokens, %d of %d experts: %s", n, k, ne, err.msg);
    } else {
        from_dev(g_ids, d_ids, pairs * 4), from_dev(g_w, d_w, pairs * 4), from_dev(g_first, d_first, (ne + 1) * 4);
        from_dev(g_of, d_of, pairs * 4), from_dev(g_tok, d_tok, pairs * 4);
        from_dev(g_groups, d_groups, (size_t)ng * CUDA_GROUP_INTS * 4);
        long worst = 0;
        for (size_t i = 0; i < pairs; i++) worst = ulps_apart(g_w[i], w[i]) > worst ? ulps_apart(g_w[i], w[i]) : worst;
        CHECK_MSG(memcmp(g_ids, ids, pairs * 4) == 0, "n %d, %d of %d, gating %d: the experts", n, k, ne, gating);
        CHECK_MSG(worst == 0, "n %d, %d of %d, gating %d norm %d: weights %ld ulps from the CPU's", n, k, ne, gating,
                  norm, worst);
        CHECK_MSG(memcmp(g_first, first, (ne + 1) * 4) == 0 && memcmp(g_of, slot_of, pairs * 4) == 0 &&
                      memcmp(g_tok, slot_tok, pairs * 4) == 0,
                  "n %d, %d of %d: the slots", n, k, ne);
        int at = 0; /* the groups: each expert's slots in pieces of CUDA_MOE_TILE, in order, then empty entries */
        for (int e = 0; e < ne; e++)
            for (int s0 = first[e]; s0 < first[e + 1] && at < ng; s0 += CUDA_MOE_TILE) {
                const int32_t *G = g_groups + (size_t)at++ * CUDA_GROUP_INTS;
                int m = first[e + 1] - s0 < CUDA_MOE_TILE ? first[e + 1] - s0 : CUDA_MOE_TILE;
                CHECK_MSG(G[0] == e && G[1] == s0 && G[2] == m, "n %d: group %d", n, at - 1);
            }
        CHECK_MSG(first[ne] == n * k, "n %d: %d slots", n, first[ne]);
        for (; at < ng; at++)
            CHECK_MSG(g_groups[(size_t)at * CUDA_GROUP_INTS + 2] == 0, "n %d: group %d is empty", n, at);
    }
    void *dev[] = {d_lg, d_w, d_ids, d_first, d_of, d_tok, d_groups};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) cuda_free(dev[i]);
    void *host[] = {lg, p, ids, first, fill, slot_of, slot_tok, w, g_ids, g_first, g_of, g_tok, g_groups, g_w};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
}

TEST(gpu_moe_routing_matches_the_cpu) {
    if (!moe_up()) return;
    check_routing(1, 128, 8, MOE_GATE_SOFTMAX, 1, 0.0f, 1);
    check_routing(5, 60, 4, MOE_GATE_SOFTMAX, 0, 2.5f, 2);
    check_routing(70, 128, 8, MOE_GATE_SOFTMAX, 1, 0.0f, 3);
    check_routing(3, 256, 8, MOE_GATE_SIGMOID, 1, 2.5f, 4);
    check_routing(9, 32, 4, MOE_GATE_SOFTMAX_WEIGHT, 0, 0.0f, 5);
    check_routing(2, 1024, 32, MOE_GATE_SOFTMAX, 1, 0.0f, 6);
    check_routing(33, 8, 1, MOE_GATE_SOFTMAX, 0, 0.0f, 7);
    check_routing(300, 16, 4, MOE_GATE_SOFTMAX, 1, 0.0f, 8); /* experts of 75 slots: groups of 32, 32 and 11 */
}

/* cuda_matmul_experts (a step's experts, one launch for all its groups)
 * against cuda_matmul over each expert's slots, bit for bit: a model's
 * w_gate and w_up viewed as stacks of 4 experts (SwiGLU, against
 * cuda_matmul_swiglu) and w_down as 4 experts (plain), for every weight
 * type, 1, 3 and 8 tokens routed by the device (the decode kernels), 40
 * and 100 (prefill's: experts of more than 32 slots, in groups). */
static void check_experts(const model *m, int n, uint32_t seed, const char *name) {
    enum { NE = 4, K = 2 };
    const model_tensor *gt = &m->layers[0].w_gate, *ut = &m->layers[0].w_up, *dt = &m->layers[0].w_down;
    const model_tensor *stacks[2][2] = {{gt, ut}, {dt, NULL}};
    for (int s = 0; s < 2; s++) {
        const model_tensor *w = stacks[s][0], *up = stacks[s][1];
        int rows = (int)w->rows / NE, k = (int)w->cols, slots = n * K;
        size_t step = (size_t)rows * w->row_bytes, bytes = step * NE, ybytes = (size_t)slots * rows * 4;
        void *d_w = to_dev(w->data, bytes), *d_up = up ? to_dev(up->data, bytes) : NULL;
        float *x = rand_vec((size_t)slots * k, seed), *lg = rand_vec((size_t)n * NE, seed + 1);
        float *d_x = to_dev(x, (size_t)slots * k * 4), *d_lg = to_dev(lg, (size_t)n * NE * 4),
              *d_rw = to_dev(NULL, slots * 4);
        float *d_y = to_dev(NULL, ybytes), *d_ref = to_dev(NULL, ybytes);
        int32_t *d_ids = to_dev(NULL, slots * 4), *d_first = to_dev(NULL, (NE + 1) * 4),
                *d_of = to_dev(NULL, slots * 4);
        int first[NE + 1], ng = cuda_moe_groups(n, K, NE);
        int32_t *d_tok = to_dev(NULL, slots * 4), *d_groups = to_dev(NULL, (size_t)ng * CUDA_GROUP_INTS * 4);
        float *y = xmalloc(ybytes), *ref = xmalloc(ybytes);
        cuda_moe_gating g = {NE, K, CUDA_GATE_SOFTMAX, 1, 0.0f};
        strata_err err = {0};
        int rc = cuda_moe_route(d_lg, n, &g, d_ids, d_rw, &err) ||
                 cuda_moe_group(d_ids, n, K, NE, d_first, d_of, d_tok, d_groups, &err) ||
                 cuda_matmul_experts(w->type, d_w, d_up, step, w->row_bytes, rows, k, d_x, n, slots, d_groups, ng, d_y,
                                     &err);
        if (!rc) from_dev(first, d_first, sizeof first);
        for (int e = 0; e < NE && !rc; e++) {
            int m0 = first[e], cnt = first[e + 1] - m0;
            const uint8_t *we = (const uint8_t *)d_w + e * step, *ue = up ? (const uint8_t *)d_up + e * step : NULL;
            const float *xe = d_x + (size_t)m0 * k;
            float *ye = d_ref + (size_t)m0 * rows;
            if (!cnt) continue;
            rc = up ? cuda_matmul_swiglu(w->type, w->row_bytes, rows, k, xe, cnt, we, ue, ye, NULL, 0.0f, &err)
                    : cuda_matmul(w->type, we, w->row_bytes, rows, k, xe, cnt, ye, &err);
        }
        if (rc) {
            test_fail(__FILE__, __LINE__, "%s, %d tokens: %s", name, n, err.msg);
        } else {
            from_dev(y, d_y, ybytes), from_dev(ref, d_ref, ybytes);
            CHECK_MSG(memcmp(y, ref, ybytes) == 0, "%s, %s, %d tokens: grouped != one expert at a time", name,
                      up ? "SwiGLU" : "plain", n);
        }
        void *dev[] = {d_w, d_up, d_x, d_lg, d_rw, d_y, d_ref, d_ids, d_first, d_of, d_tok, d_groups};
        for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) cuda_free(dev[i]);
        free(x), free(lg), free(y), free(ref);
    }
}

TEST(gpu_matmul_experts_keep_the_bits) {
    if (!moe_up()) return;
    for (int i = 0; i < N_MODELS; i++) {
        model *m = load_test_model(MODELS[i]);
        if (!m) continue;
        static const int tokens[] = {1, 3, 8, 40, 100};
        for (int j = 0; j < 5; j++) check_experts(m, tokens[j], 90u + (uint32_t)(i * 8 + j), MODELS[i]);
        model_free(m);
    }
}

/* ---- qwen35 (cuda_delta.cu) ---------------------------------------------------- */

/* The CPU's delta-net steps 2 and 3 (deltanet.c's conv_run and gates, with
 * delta_dot, libm's expf and logf) on n tokens of C channels, in place:
 * qkv (conv input, then output), st ([K - 1][C], oldest first, updated),
 * beta, g (alpha in, the decay out). */
static void ref_conv_gates(float *qkv, float *st, const float *w, float *beta, float *g, const float *dt,
                           const float *a, int n, int C, int K, int S, int hk, int hv, float eps) {
    for (int ch = 0; ch < C; ch++)
        for (int t = 0; t < n; t++) {
            float acc = 0.0f, x = qkv[(size_t)t * C + ch];
            for (int k = 0; k < K - 1; k++) acc += st[(size_t)k * C + ch] * w[ch * K + k];
            for (int k = 0; k + 1 < K - 1; k++) st[(size_t)k * C + ch] = st[(size_t)(k + 1) * C + ch];
            if (K > 1) st[(size_t)(K - 2) * C + ch] = x;
            qkv[(size_t)t * C + ch] = acc + x * w[ch * K + K - 1];
        }
    vexp_silu_mul(qkv, qkv, NULL, (size_t)n * C);
    for (int t = 0; t < n; t++) {
        for (int v = 0; v < 2 * hk; v++) {
            float *x = qkv + (size_t)t * C + (size_t)v * S, scale = 1.0f / sqrtf(delta_dot(x, x, S) + eps);
            for (int i = 0; i < S; i++) x[i] *= scale;
        }
        for (int h = 0; h < hv; h++) {
            float *b = beta + t * hv + h, *d = g + t * hv + h, sp = *d + dt[h];
            *b = 1.0f / (1.0f + expf(-*b));
            *d = expf((sp > 20.0f ? sp : logf(1.0f + expf(sp))) * a[h]);
        }
    }
}

/* The delta-net kernels against the CPU's steps on random inputs (state
 * size S), the GPU run in the chunks of plan (0-terminated): the conv and
 * the q/k norms, beta, the delta rule (state and output) and the gated
 * norm with the CPU reference's bits (the delta rule: backend/delta.c's
 * scalar kernel, fed the GPU's gates); the decay within an ulp (logf).
 * The conv in place (token by token), or into another buffer (a thread
 * per token from 16 tokens a chunk). */
static void check_delta_kernels(int S, const int *plan, int in_place) {
    enum { HK = 2, HV = 4, K = 4, N = 37 };
    int qk = HK * S, C = 2 * qk + HV * S, vd = HV * S;
    float eps = 1e-6f, scale = 1.0f / sqrtf((float)S);
    size_t nS = (size_t)HV * S * S;
    float *x = rand_vec((size_t)N * C, 11), *w = rand_vec((size_t)C * K, 12), *st = rand_vec((size_t)(K - 1) * C, 13);
    float *beta = rand_vec(N * HV, 14), *g = rand_vec(N * HV, 15), *dt = rand_vec(HV, 16), *a = rand_vec(HV, 17);
    float *S0 = rand_vec(nS, 18), *z = rand_vec((size_t)N * vd, 19), *nw = rand_vec(S, 20);
    for (int h = 0; h < HV; h++) a[h] = -(0.1f + 0.9f * fabsf(a[h])); /* A < 0, as -exp(A_log) */
    for (int i = 0; i < N * HV; i++) g[i] *= 12.0f;
    g[1] = 25.0f; /* softplus past 20: x itself */
    for (size_t i = 0; i < nS; i++) S0[i] *= 0.1f;
    float *dx = to_dev(x, (size_t)N * C * 4), *dw = to_dev(w, (size_t)C * K * 4), *dst = to_dev(st, (size_t)(K - 1) * C * 4);
    float *db = to_dev(beta, N * HV * 4), *dg = to_dev(g, N * HV * 4), *ddt = to_dev(dt, HV * 4), *da = to_dev(a, HV * 4);
    float *dS = to_dev(S0, nS * 4), *dz = to_dev(z, (size_t)N * vd * 4), *dnw = to_dev(nw, S * 4);
    float *dout = to_dev(NULL, (size_t)N * vd * 4), *dy = in_place ? dx : to_dev(NULL, (size_t)N * C * 4);
    strata_err err = {0};
    for (int done = 0, ci = 0; done < N; ci++) {
        if (!plan[ci]) ci = 0;
        int k = plan[ci] < N - done ? plan[ci] : N - done;
        float *q = dy + (size_t)done * C;
        if (cuda_delta_conv(q, dx + (size_t)done * C, dst, dw, k, C, K, &err) ||
            cuda_delta_gates(q, db + done * HV, dg + done * HV, ddt, da, k, C, S, HK, HV, eps, &err) ||
            cuda_delta_rule(dout + (size_t)done * vd, dS, q, db + done * HV, dg + done * HV, k, C, S, HK, HV, scale, &err))
            test_fail(__FILE__, __LINE__, "S %d: %s", S, err.msg);
        done += k;
    }
    float *gq = xmalloc((size_t)N * C * 4), *gst = xmalloc((size_t)(K - 1) * C * 4), *gb = xmalloc(N * HV * 4);
    float *gg = xmalloc(N * HV * 4), *gS = xmalloc(nS * 4), *go = xmalloc((size_t)N * vd * 4);
    from_dev(gq, dy, (size_t)N * C * 4), from_dev(gst, dst, (size_t)(K - 1) * C * 4);
    from_dev(gb, db, N * HV * 4), from_dev(gg, dg, N * HV * 4), from_dev(gS, dS, nS * 4);
    from_dev(go, dout, (size_t)N * vd * 4);
    ref_conv_gates(x, st, w, beta, g, dt, a, N, C, K, S, HK, HV, eps);
    int conv_v = 1, norm_qk = 1;
    for (int t = 0; t < N; t++) {
        conv_v &= memcmp(gq + (size_t)t * C + 2 * qk, x + (size_t)t * C + 2 * qk, (size_t)vd * 4) == 0;
        norm_qk &= memcmp(gq + (size_t)t * C, x + (size_t)t * C, (size_t)2 * qk * 4) == 0;
    }
    CHECK_MSG(conv_v, "S %d: the conv (v channels) differs from the CPU's bits", S);
    CHECK_MSG(norm_qk, "S %d: the conv and L2 norm (q, k channels) differ from the CPU's bits", S);
    CHECK_MSG(memcmp(gst, st, (size_t)(K - 1) * C * 4) == 0, "S %d: the conv state", S);
    CHECK_MSG(memcmp(gb, beta, N * HV * 4) == 0, "S %d: beta", S);
    long worst = 0;
    int same = 0;
    for (int i = 0; i < N * HV; i++) {
        long u = ulps_apart(gg[i], g[i]);
        worst = u > worst ? u : worst, same += u == 0;
    }
    printf("     S %d: decay = CPU's on %d of %d, at most %ld ulp apart (logf)\n", S, same, N * HV, worst);
    CHECK_MSG(worst <= 1, "S %d: decay %ld ulps from the CPU's", S, worst);
    /* the delta rule: delta.c's scalar kernel on the GPU's own conv output and gates */
    float *ro = xmalloc((size_t)N * vd * 4);
    for (int h = 0; h < HV; h++) {
        delta_run r = {.k = gq + qk + (h % HK) * S, .q = gq + (h % HK) * S, .v = gq + 2 * qk + h * S, .beta = gb + h,
                       .decay = gg + h, .o = ro + h * S, .x_stride = (size_t)C, .g_stride = HV,
                       .o_stride = (size_t)vd, .n_tok = N};
        delta_rows_level(0, &r, S0 + (size_t)h * S * S, S, 0, S, scale);
    }
    CHECK_MSG(memcmp(go, ro, (size_t)N * vd * 4) == 0, "S %d: the delta rule's output", S);
    CHECK_MSG(memcmp(gS, S0, nS * 4) == 0, "S %d: the delta state", S);
    /* the gated norm, on the GPU's output (both sides) */
    memcpy(ro, go, (size_t)N * vd * 4);
    if (cuda_delta_gated_norm(dout, dz, dnw, N, HV, S, eps, &err)) test_fail(__FILE__, __LINE__, "%s", err.msg);
    from_dev(go, dout, (size_t)N * vd * 4);
    for (int r = 0; r < N * HV; r++) {
        fwd__rmsnorm(ro + (size_t)r * S, ro + (size_t)r * S, nw, S, eps);
        vexp_silu_mul(ro + (size_t)r * S, z + (size_t)r * S, ro + (size_t)r * S, (size_t)S);
    }
    CHECK_MSG(memcmp(go, ro, (size_t)N * vd * 4) == 0, "S %d: the gated norm", S);
    void *dev[] = {dx, dw, dst, db, dg, ddt, da, dS, dz, dnw, dout};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) cuda_free(dev[i]);
    if (!in_place) cuda_free(dy);
    void *host[] = {x, w, st, beta, g, dt, a, S0, z, nw, gq, gst, gb, gg, gS, go, ro};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
}

/* qwen35's kernels keep the CPU reference's bits (the decay aside: an
 * ulp), in one call and in uneven chunks, at state sizes 32 (the test
 * models'), 128 (the 0.8B's) and 24 (a block's rows past the state's); the attention's output gate (glibc's
 * expf, its overflow and underflow branches included) and gate split. */
TEST(gpu_qwen35_kernels_keep_the_cpu_bits) {
    if (!gpu_up()) return;
    strata_err err = {0};
    if (cuda_delta_init(&err)) {
        test_fail(__FILE__, __LINE__, "%s", err.msg);
        return;
    }
    static const int one[] = {64, 0}, uneven[] = {1, 7, 3, 13, 2, 0}, long_ones[] = {2, 17, 1, 0};
    static const int sizes[] = {32, 128, 24}; /* 24: the last block of 16 rows holds 8 */
    for (int si = 0; si < 3; si++) {
        int S = sizes[si];
        check_delta_kernels(S, one, 1);
        check_delta_kernels(S, uneven, 0);
        check_delta_kernels(S, one, 0);       /* 37 tokens: a thread per token */
        check_delta_kernels(S, long_ones, 0); /* 17 after 2: the first taps from the state */
    }
    /* sigmoid gate: o * 1 / (1 + e^-g) over a sweep, e^-g alone past g < -17 */
    enum { NG = 4096 + 12 };
    float *gv = xmalloc(NG * 4), *o = xmalloc(NG * 4), *ref = xmalloc(NG * 4);
    static const float edge[12] = {88.0f, -88.0f, 88.7228f, -88.7228f, 103.97f, -103.97f, 87.4f, 110.0f, -110.0f,
                                   0.0f, INFINITY, -INFINITY};
    for (int i = 0; i < NG; i++) {
        gv[i] = i < 12 ? edge[i] : -110.0f + 130.0f * (float)(i - 12) / 4096.0f;
        o[i] = 1.0f + (float)(i % 7) * 0.25f;
    }
    memcpy(ref, o, NG * 4);
    vexp_sigmoid_mul_level(0, ref, gv, NG); /* libm's expf per element */
    float *dgv = to_dev(gv, NG * 4), *dov = to_dev(o, NG * 4);
    cuda_sigmoid_mul(dov, dgv, NG);
    from_dev(o, dov, NG * 4);
    int diff = 0;
    for (int i = 0; i < NG; i++) diff += memcmp(o + i, ref + i, 4) != 0;
    CHECK_MSG(diff == 0, "sigmoid gate: %d of %d differ from libm's expf path", diff, NG);
    cuda_free(dgv), cuda_free(dov), free(gv), free(o), free(ref);
    /* gate split: [token][head][q | gate] */
    enum { T = 3, H = 5, D = 64 };
    float *qg = rand_vec(T * H * 2 * D, 21), *q = xmalloc(T * H * D * 4), *gt = xmalloc(T * H * D * 4);
    float *dqg = to_dev(qg, sizeof(float) * T * H * 2 * D), *dq = to_dev(NULL, T * H * D * 4), *dgt = to_dev(NULL, T * H * D * 4);
    cuda_gate_split(dq, dgt, dqg, T, H, D);
    from_dev(q, dq, T * H * D * 4), from_dev(gt, dgt, T * H * D * 4);
    int bad = 0;
    for (int th = 0; th < T * H; th++)
        bad += memcmp(q + th * D, qg + th * 2 * D, D * 4) != 0 || memcmp(gt + th * D, qg + th * 2 * D + D, D * 4) != 0;
    CHECK_EQ_INT(bad, 0);
    cuda_free(dqg), cuda_free(dq), cuda_free(dgt), free(qg), free(q), free(gt);
}

/* The recurrent state's rules on the GPU, on c after n tokens: going
 * back is refused (the state cannot be rewound) and leaves it as it was;
 * continuing at n works. */
static void check_state_rules(fwdc *c, const int32_t *tok, int n, int V) {
    strata_err err = {0};
    float *row = xmalloc((size_t)V * 4);
    CHECK_EQ_INT(fwdc_state_end(c), n);
    CHECK_EQ_INT(fwdc_run(c, tok, 1, n / 2, 0, row, &err), STRATA_EINVAL);
    CHECK_MSG(strstr(err.msg, "cannot be rewound"), "%s", err.msg);
    CHECK_EQ_INT(fwdc_state_end(c), n);
    CHECK_MSG(fwdc_run(c, tok, 1, n, 0, row, &err) == 0, "continuing: %s", err.msg);
    CHECK_EQ_INT(fwdc_state_end(c), n + 1);
    free(row);
}

/* qwen35 on the GPU (delta-net layers, gated attention, M-RoPE) over each
 * fixture's reference tokens: against the float64 reference and the CPU
 * backend, and bit for bit against itself token by token (graph, then
 * kernel by kernel), in uneven chunks, and started again at 0 on the
 * same state. Bounds: qwen35-f32 (float weights: no 8-bit activations on
 * either side) GPU vs float64 < 0.01 of the logit range, vs CPU < 0.05,
 * and no row where float64's clear greedy choice is not the GPU's (the
 * CPU's own error there: 2e-4); qwen35-mix (Q4_K / Q6_K / BF16 on the
 * float path, Q8_0 beta, alpha and attn_k on the 8-bit one) vs float64
 * < 0.12, the CPU test's bound for it (the delta net amplifies activation
 * rounding: test_forward.c; the CPU's own error is 0.081, 8-bit
 * activations on every matmul), vs CPU < 0.15 (at most the two errors'
 * sum; a wrong layer gives errors of order 1). */
TEST(gpu_qwen35_matches_cpu_and_float64) {
    if (!gpu_up()) return;
    static const int one_chunk[] = {4096, 0}, decode[] = {1, 0}, uneven[] = {1, 7, 3, 13, 2, 0};
    const char *names[] = {"qwen35-f32", "qwen35-mix"};
    const double tol_ref[] = {0.01, 0.12}, tol_cpu[] = {0.05, 0.15};
    for (int i = 0; i < 2; i++) {
        ref_logits r;
        model *m;
        fwdc *c = open_ref_case(names[i], &r, &m);
        if (!c) continue;
        int n = r.n_tok, V = r.n_vocab, same = 0, same_cpu = 0;
        float *g = gpu_logits(c, r.tokens, n, V, one_chunk), *cpu = cpu_logits(model_path(names[i]), r.tokens, n, V);
        double vs_ref = max_rel(g, r.logits, (size_t)n * V), vs_cpu = cpu ? max_rel(g, cpu, (size_t)n * V) : 1;
        int bad = clear_disagreements(g, r.logits, n, V, 0.01f, &same);
        if (cpu) clear_disagreements(g, cpu, n, V, 0.01f, &same_cpu);
        printf("     %-10s %d tokens: GPU vs float64 %.2g, GPU vs CPU %.2g of the logit range; "
               "greedy = float64's %d/%d, = CPU's %d/%d\n", names[i], n, vs_ref, vs_cpu, same, n, same_cpu, n);
        CHECK_MSG(vs_ref < tol_ref[i], "%s: GPU vs float64 %.4f", names[i], vs_ref);
        CHECK_MSG(vs_cpu < tol_cpu[i], "%s: GPU vs CPU %.4f", names[i], vs_cpu);
        if (i == 0) CHECK_MSG(bad == 0, "%s: %d rows where float64's clear greedy choice is not the GPU's", names[i], bad);
        /* the same state started again at 0, then every chunking on fresh passes */
        float *h = gpu_logits(c, r.tokens, n, V, one_chunk);
        CHECK_MSG(memcmp(h, g, (size_t)n * V * 4) == 0, "%s: started again at 0, other bits", names[i]);
        free(h);
        check_state_rules(c, r.tokens, n, V);
        const int *plans[] = {decode, decode, uneven};
        for (int k = 0; k < 3; k++) {
            fwdc_free(c);
            model_free(m);
            if (!(c = open_gpu_model(names[i], 4096, &m))) break;
            fwdc_use_graphs(c, k != 1);
            h = gpu_logits(c, r.tokens, n, V, plans[k]);
            CHECK_MSG(memcmp(h, g, (size_t)n * V * 4) == 0, "%s: %s gives other bits than one chunk", names[i],
                      k == 0 ? "token by token" : k == 1 ? "token by token without the graph" : "uneven chunks");
            free(h);
        }
        free(g), free(cpu), free(r.tokens), free(r.logits);
        if (c) fwdc_free(c), model_free(m);
    }
    /* the GPU's blocks are never the CPU's: its numerics id names its kernels */
    engine *eg = NULL, *ec = NULL;
    engine_params pg = {.model_path = model_path("qwen35-f32"), .device = "cuda", .n_ctx = 64};
    engine_params pc = {.model_path = model_path("qwen35-f32"), .n_threads = 1, .n_ctx = 64};
    strata_err err = {0};
    if (engine_open(&eg, &pg, &err) || engine_open(&ec, &pc, &err)) test_fail(__FILE__, __LINE__, "%s", err.msg);
    else {
        CHECK_STR(engine_numerics(eg), CUDA_NUMERICS);
        CHECK(strcmp(engine_numerics(eg), engine_numerics(ec)) != 0);
    }
    engine_close(eg), engine_close(ec);
}

TEST(gpu_forward_batch_invariance) {
    if (!gpu_up()) return;
    static const int one_chunk[] = {4096, 0}, decode[] = {1, 0}, uneven[] = {1, 7, 3, 13, 2, 0};
    const char *names[] = {"llama-q4_1", "llama-q8_0", "qwen3-q5_1"};
    for (int i = 0; i < 3; i++) {
        model *m;
        fwdc *c = open_gpu_model(names[i], 4096, &m);
        if (!c) continue;
        enum { N = 300 }; /* two attention segments */
        int V = m->hp.n_vocab;
        int32_t tok[N];
        random_tokens(tok, N, V, 99);
        float *ref = gpu_logits(c, tok, N, V, one_chunk);
        const int *plans[] = {decode, uneven, decode};
        for (int p = 0; p < 3; p++) {
            fwdc_use_graphs(c, p < 2); /* decode steps as a graph, then kernel by kernel */
            float *x = gpu_logits(c, tok, N, V, plans[p]);
            CHECK_MSG(memcmp(x, ref, (size_t)N * V * 4) == 0, "%s: plan %d changes bits", names[i], p);
            free(x);
        }
        fwdc_use_graphs(c, 1);
        strata_err err = {0};
        /* Going back: positions [40, N) again after [0, N) give the same bits. */
        float *tail = xmalloc((size_t)(N - 40) * V * 4), *last = xmalloc((size_t)V * 4);
        if (fwdc_run(c, tok + 40, N - 40, 40, 1, tail, &err)) test_fail(__FILE__, __LINE__, "%s", err.msg);
        CHECK(memcmp(tail, ref + (size_t)40 * V, (size_t)(N - 40) * V * 4) == 0);
        /* Last-row logits and the GPU's greedy pick agree with the full rows. */
        int32_t id = -1;
        if (fwdc_run(c, tok + N - 1, 1, N - 1, 0, last, &err) || fwdc_argmax(c, &id, &err))
            test_fail(__FILE__, __LINE__, "%s", err.msg);
        CHECK(memcmp(last, ref + (size_t)(N - 1) * V, (size_t)V * 4) == 0);
        CHECK_EQ_INT(id, argmax_row(last, V));
        free(ref), free(tail), free(last);
        fwdc_free(c);
        model_free(m);
    }
}

/* Greedy generation: GPU and CPU pick the same tokens, step by step, on
 * the F32 model (the CPU's activations are F32 there too: only summation
 * order and libm differ). */
TEST(gpu_greedy_generation_matches_cpu) {
    if (!gpu_up()) return;
    enum { STEPS = 32 };
    const char *path = model_path("llama-f32");
    engine *ec = NULL, *eg = NULL;
    engine_params p = {.model_path = path, .n_threads = 2, .n_ctx = 256};
    strata_err err = {0};
    if (engine_open(&ec, &p, &err)) test_fail(__FILE__, __LINE__, "%s", err.msg);
    p.device = "cuda";
    if (engine_open(&eg, &p, &err)) test_fail(__FILE__, __LINE__, "%s", err.msg);
    if (!ec || !eg) return;
    int V = ec->m->hp.n_vocab, same = 0;
    float *lc = xmalloc((size_t)V * 4), *lg = xmalloc((size_t)V * 4);
    kv_seq sc, sg;
    kv_seq_init(&sc), kv_seq_init(&sg);
    int32_t prompt[4] = {1, 20, 30, 40}, tc, tg;
    if (engine_eval(ec, &sc, prompt, 4, lc, &err) || engine_eval(eg, &sg, prompt, 4, lg, &err))
        test_fail(__FILE__, __LINE__, "%s", err.msg);
    for (int i = 0; i < STEPS; i++) {
        tc = argmax_row(lc, V), tg = argmax_row(lg, V);
        if (tc != tg) break;
        same++;
        if (engine_eval(ec, &sc, &tc, 1, lc, &err) || engine_eval(eg, &sg, &tg, 1, lg, &err))
            test_fail(__FILE__, __LINE__, "%s", err.msg);
    }
    printf("     llama-f32: %d of %d greedy steps agree\n", same, STEPS);
    CHECK_EQ_INT(same, STEPS);
    engine_seq_release(ec, &sc), engine_seq_release(eg, &sg);
    free(lc), free(lg);
    engine_close(ec), engine_close(eg);
}

/* The 8-bit decode kernel's RMS norm in the launch (Q/K/V, and gate/up
 * with SwiGLU) against cuda_rmsnorm and the same launch on its output:
 * the same bits. */
static void check_norm_in_launch(const model_layer *L, const float *dx, int n, int k, void *const dw[3],
                                 const int rows[3], const void *dg, const void *du, int f, uint32_t seed) {
    strata_err err = {0};
    float *nw = rand_vec((size_t)k, seed), *dnw = to_dev(nw, (size_t)k * 4), *dxn = to_dev(NULL, (size_t)n * k * 4);
    cuda_rmsnorm(dxn, dx, dnw, n, k, 1e-5f);
    float *da[3], *db[3], *a = NULL, *b = NULL;
    for (int j = 0; j < 3; j++) da[j] = to_dev(NULL, (size_t)n * rows[j] * 4), db[j] = to_dev(NULL, (size_t)n * rows[j] * 4);
    if (cuda_matmul_multi(L->wq.type, L->wq.row_bytes, k, dxn, n, 3, (const void *const *)dw, rows, da, 0, NULL, 0.0f,
                          &err) ||
        cuda_matmul_multi(L->wq.type, L->wq.row_bytes, k, dx, n, 3, (const void *const *)dw, rows, db, 0, dnw, 1e-5f,
                          &err))
        test_fail(__FILE__, __LINE__, "%s", err.msg);
    for (int j = 0; j < 3; j++) {
        size_t bytes = (size_t)n * rows[j] * 4;
        a = xrealloc(a, bytes), b = xrealloc(b, bytes);
        from_dev(a, da[j], bytes), from_dev(b, db[j], bytes);
        CHECK_MSG(memcmp(a, b, bytes) == 0, "n=%d: part %d with the norm in the launch differs", n, j);
    }
    for (int j = 0; j < 3; j++) cuda_free(da[j]), cuda_free(db[j]);
    float *dsa = to_dev(NULL, (size_t)n * f * 4), *dsb = to_dev(NULL, (size_t)n * f * 4);
    if (cuda_matmul_swiglu(L->w_gate.type, L->w_gate.row_bytes, f, k, dxn, n, dg, du, dsa, NULL, 0.0f, &err) ||
        cuda_matmul_swiglu(L->w_gate.type, L->w_gate.row_bytes, f, k, dx, n, dg, du, dsb, dnw, 1e-5f, &err))
        test_fail(__FILE__, __LINE__, "%s", err.msg);
    a = xrealloc(a, (size_t)n * f * 4), b = xrealloc(b, (size_t)n * f * 4);
    from_dev(a, dsa, (size_t)n * f * 4), from_dev(b, dsb, (size_t)n * f * 4);
    CHECK_MSG(memcmp(a, b, (size_t)n * f * 4) == 0, "n=%d: SwiGLU with the norm in the launch differs", n);
    cuda_free(dsa), cuda_free(dsb), cuda_free(dnw), cuda_free(dxn);
    free(nw), free(a), free(b);
}

/* The fused launches give the separate kernels' bits: Q/K/V of layer 0 in
 * one cuda_matmul_multi against three cuda_matmul; the residual form
 * against cuda_matmul + cuda_add; gate/up with SwiGLU against two
 * cuda_matmul + cuda_swiglu. Every weight type, 1 token (one row a warp;
 * the 8-bit path's 8-token tile), 3, 11 and 70 (two rows a warp; 64-token
 * tiles, one partial). */
TEST(gpu_fused_matmuls_keep_the_bits) {
    if (!gpu_up()) return;
    static const int ns[] = {1, 3, 11, 70};
    for (int i = 0; i < N_MODELS; i++) {
        model *m = load_test_model(MODELS[i]);
        if (!m) continue;
        strata_err err = {0};
        const model_layer *L = &m->layers[0];
        const model_tensor *w3[] = {&L->wq, &L->wk, &L->wv}, *g = &L->w_gate, *u = &L->w_up;
        int k = (int)L->wq.cols, f = (int)g->rows, same = L->wq.type == L->wk.type && L->wq.type == L->wv.type;
        for (int ni = 0; ni < 4; ni++) {
            int n = ns[ni];
            float *x = rand_vec((size_t)n * k, 500u + 7 * i + ni), *dx = to_dev(x, (size_t)n * k * 4);
            void *dw[3];
            float *ya[3], *yb[3], *dya[3], *dyb[3];
            int rows[3];
            for (int j = 0; j < 3; j++) {
                rows[j] = (int)w3[j]->rows;
                size_t yb_ = (size_t)n * rows[j] * 4;
                dw[j] = to_dev(w3[j]->data, w3[j]->row_bytes * rows[j]);
                ya[j] = xmalloc(yb_), yb[j] = xmalloc(yb_);
                float *init = rand_vec((size_t)n * rows[j], 900u + j); /* the residual both forms add to */
                dya[j] = to_dev(init, yb_), dyb[j] = to_dev(init, yb_);
                free(init);
            }
            float *tmp = to_dev(NULL, (size_t)n * (rows[0] > f ? rows[0] : f) * 4);
            /* Q/K/V (when one type) and the residual form of Q alone. */
            if (same) {
                for (int j = 0; j < 3; j++)
                    if (cuda_matmul(w3[j]->type, dw[j], w3[j]->row_bytes, rows[j], k, dx, n, dya[j], &err))
                        test_fail(__FILE__, __LINE__, "%s", err.msg);
                if (cuda_matmul_multi(L->wq.type, L->wq.row_bytes, k, dx, n, 3, (const void *const *)dw, rows, dyb, 0,
                                      NULL, 0.0f, &err))
                    test_fail(__FILE__, __LINE__, "%s", err.msg);
                for (int j = 0; j < 3; j++) {
                    from_dev(ya[j], dya[j], (size_t)n * rows[j] * 4), from_dev(yb[j], dyb[j], (size_t)n * rows[j] * 4);
                    CHECK_MSG(memcmp(ya[j], yb[j], (size_t)n * rows[j] * 4) == 0, "%s n=%d: fused part %d differs",
                              MODELS[i], n, j);
                }
            }
            if (cuda_matmul(L->wq.type, dw[0], L->wq.row_bytes, rows[0], k, dx, n, tmp, &err))
                test_fail(__FILE__, __LINE__, "%s", err.msg);
            cuda_add(dya[0], tmp, (size_t)n * rows[0]);
            if (cuda_matmul_multi(L->wq.type, L->wq.row_bytes, k, dx, n, 1, (const void *const *)dw, rows, dyb, 1, NULL,
                                  0.0f, &err))
                test_fail(__FILE__, __LINE__, "%s", err.msg);
            from_dev(ya[0], dya[0], (size_t)n * rows[0] * 4), from_dev(yb[0], dyb[0], (size_t)n * rows[0] * 4);
            CHECK_MSG(memcmp(ya[0], yb[0], (size_t)n * rows[0] * 4) == 0, "%s n=%d: fused residual add differs",
                      MODELS[i], n);
            /* gate/up + SwiGLU */
            void *dg = to_dev(g->data, g->row_bytes * f), *du = to_dev(u->data, u->row_bytes * f);
            float *sa = xmalloc((size_t)n * f * 4), *sb = xmalloc((size_t)n * f * 4);
            float *dga = to_dev(NULL, (size_t)n * f * 4), *dgb = to_dev(NULL, (size_t)n * f * 4);
            if (cuda_matmul(g->type, dg, g->row_bytes, f, k, dx, n, dga, &err) ||
                cuda_matmul(u->type, du, u->row_bytes, f, k, dx, n, tmp, &err))
                test_fail(__FILE__, __LINE__, "%s", err.msg);
            cuda_swiglu(dga, tmp, (size_t)n * f);
            if (cuda_matmul_swiglu(g->type, g->row_bytes, f, k, dx, n, dg, du, dgb, NULL, 0.0f, &err))
                test_fail(__FILE__, __LINE__, "%s", err.msg);
            from_dev(sa, dga, (size_t)n * f * 4), from_dev(sb, dgb, (size_t)n * f * 4);
            CHECK_MSG(memcmp(sa, sb, (size_t)n * f * 4) == 0, "%s n=%d: fused SwiGLU differs", MODELS[i], n);
            if (same && cuda_matmul_norms(L->wq.type, n))
                check_norm_in_launch(L, dx, n, k, dw, rows, dg, du, f, 40u + ni);
            for (int j = 0; j < 3; j++) cuda_free(dw[j]), cuda_free(dya[j]), cuda_free(dyb[j]), free(ya[j]), free(yb[j]);
            cuda_free(tmp), cuda_free(dx), cuda_free(dg), cuda_free(du), cuda_free(dga), cuda_free(dgb);
            free(x), free(sa), free(sb);
        }
        model_free(m);
    }
}

/* A whole model with the fused launches (the default) and with the
 * separate kernels (STRATA_CUDA_FUSE=0's path): the same logits, bit for
 * bit, in prefill and in decode steps with and without the graph. */
TEST(gpu_forward_fusion_keeps_the_bits) {
    if (!gpu_up()) return;
    static const int one_chunk[] = {4096, 0}, decode[] = {1, 0};
    /* qwen35moe-q4_k_m: its delta-net in-projections take their norm in the launch */
    const char *names[] = {"llama-q4_1", "llama-q4_k", "qwen2-q5_0", "qwen3-q5_1", "qwen35moe-q4_k_m"};
    for (int i = 0; i < 5; i++) {
        model *m;
        fwdc *c = open_gpu_model(names[i], 1024, &m);
        if (!c) continue;
        enum { N = 270 }; /* two attention segments */
        int V = m->hp.n_vocab;
        int32_t tok[N];
        random_tokens(tok, N, V, 1234 + i);
        fwdc_use_fusion(c, 0);
        float *ref = gpu_logits(c, tok, N, V, one_chunk), *ref_dec = gpu_logits(c, tok, N, V, decode);
        CHECK_MSG(memcmp(ref, ref_dec, (size_t)N * V * 4) == 0, "%s: separate kernels: decode differs", names[i]);
        fwdc_use_fusion(c, 1);
        for (int p = 0; p < 3; p++) {
            fwdc_use_graphs(c, p != 2);
            float *x = gpu_logits(c, tok, N, V, p == 0 ? one_chunk : decode);
            CHECK_MSG(memcmp(x, ref, (size_t)N * V * 4) == 0, "%s: fused plan %d changes bits", names[i], p);
            free(x);
        }
        free(ref), free(ref_dec);
        fwdc_free(c);
        model_free(m);
    }
}

/* ---- the paged pass (serve --device cuda) ------------------------------------ */

/* Runs batch tokens [0, n) (seqs, positions pos) through the paged pass,
 * every row wanted; logits to out (n x V). */
static int paged_run(fwdc *c, const int32_t *tok, kv_seq **seqs, const int32_t *pos, int n, float *out) {
    int8_t want[512];
    for (int t = 0; t < n; t++) want[t] = 1;
    fwd_batch b = {.n = n, .tokens = tok, .seqs = seqs, .pos = pos, .want = want};
    strata_err err = {0};
    int rc = fwdc_run_batch(c, &b, out, &err);
    if (rc) test_fail(__FILE__, __LINE__, "fwdc_run_batch: %s", err.msg);
    return rc;
}

/* The paged pool's options for m, as engine.c shapes them: a sliding
 * layer's K/V in slots (gemma3), enough for three sequences and one more. */
static kv_pool_opts paged_opts(const model *m, uint8_t *swa) {
    kv_pool_opts po = {.n_layer = m->hp.n_kv_layer, .kv_dim = m->hp.n_head_kv * m->hp.head_dim,
                       .block_tokens = 16, .n_blocks = 64, .head_dim = m->hp.head_dim, .dev = cuda_devmem()};
    int any = 0;
    for (int il = 0; il < m->hp.n_layer; il++) {
        int kl = m->layers[il].kv_layer, sw = m->layers[il].swa && m->hp.n_swa > 0;
        if (kl >= 0) swa[kl] = (uint8_t)sw, any |= sw;
    }
    if (any) po.swa_layer = swa, po.n_swa = m->hp.n_swa, po.n_slots = 4 * kv_swa_slots_per_seq(16, m->hp.n_swa, 512);
    return po;
}

/* m's paged pass (512 positions a sequence, batches of 512) over a new
 * pool kv shaped by paged_opts; NULL, no pool and a recorded failure
 * when either step fails. */
static fwdc *open_paged(model *m, kv_pool *kv, const char *name) {
    uint8_t swa[256] = {0};
    kv_pool_opts po = paged_opts(m, swa);
    strata_err err = {0};
    fwdc *c = NULL;
    if (kv_pool_init_opts(kv, &po, &err)) {
        test_fail(__FILE__, __LINE__, "%s: %s", name, err.msg);
        return NULL;
    }
    if (fwdc_new_paged(&c, m, kv, 512, 512, &err)) {
        test_fail(__FILE__, __LINE__, "%s: %s", name, err.msg);
        kv_pool_destroy(kv);
        return NULL;
    }
    return c;
}

/* Two sequences in one paged pool, prefilled together in uneven chunks,
 * then decoded together, and a third forked from the first inside a
 * block (copy on write on the device): every row has the bits of the
 * contiguous one-sequence pass over the same tokens.
 * Gemma 3 (window 16): its sliding layers read their slots through
 * tables of slots, only their window (cuda_attention_paged's n_swa). */
TEST(gpu_paged_forward_keeps_the_contiguous_bits) {
    if (!gpu_up()) return;
    /* gemma3: windows of 16, in slots; qwen3moe: experts grouped over two sequences */
    const char *names[] = {"llama-q4_1", "qwen3-q5_1", "gemma3-q8_0", "qwen3moe-q8_0"};
    for (int i = 0; i < 4; i++) {
        model *m;
        fwdc *ref_c = open_gpu_model(names[i], 512, &m);
        if (!ref_c) continue;
        enum { NA = 300, NB = 150, FORK = 250, NC = 280 };
        int V = m->hp.n_vocab;
        static const int one[] = {512, 0};
        int32_t a[NA], bt[NB], cc[NC];
        random_tokens(a, NA, V, 5), random_tokens(bt, NB, V, 6);
        memcpy(cc, a, FORK * sizeof(int32_t));
        random_tokens(cc + FORK, NC - FORK, V, 7);
        float *ra = gpu_logits(ref_c, a, NA, V, one), *rb = gpu_logits(ref_c, bt, NB, V, one);
        float *rc = gpu_logits(ref_c, cc, NC, V, one);
        fwdc_free(ref_c);
        kv_pool kv;
        fwdc *c = open_paged(m, &kv, names[i]);
        if (!c) {
            free(ra), free(rb), free(rc);
            model_free(m);
            continue;
        }
        CHECK(i != 2 || kv.n_slots > 0);
        kv_seq sa, sb, sc;
        kv_seq_init(&sa), kv_seq_init(&sb);
        float *out = xmalloc((size_t)512 * V * 4);
        int32_t tok[512], pos[512];
        kv_seq *seqs[512];
        /* chunks: A [0,100) + B [0,70), then A [100,300) + B [70,149) */
        int plan[2][4] = {{0, 100, 0, 70}, {100, NA, 70, NB - 1}};
        for (int p = 0; p < 2; p++) {
            int n = 0;
            for (int t = plan[p][0]; t < plan[p][1]; t++, n++) tok[n] = a[t], pos[n] = t, seqs[n] = &sa;
            for (int t = plan[p][2]; t < plan[p][3]; t++, n++) tok[n] = bt[t], pos[n] = t, seqs[n] = &sb;
            if (paged_run(c, tok, seqs, pos, n, out)) break;
            int na = plan[p][1] - plan[p][0];
            CHECK_MSG(memcmp(out, ra + (size_t)plan[p][0] * V, (size_t)na * V * 4) == 0, "%s: A, chunk %d", names[i], p);
            CHECK_MSG(memcmp(out + (size_t)na * V, rb + (size_t)plan[p][2] * V, (size_t)(n - na) * V * 4) == 0,
                      "%s: B, chunk %d", names[i], p);
        }
        /* a decode step of B beside a fork of A that writes into a shared block */
        kv_seq_fork(&kv, &sa, FORK, &sc);
        int n = 0;
        tok[n] = bt[NB - 1], pos[n] = NB - 1, seqs[n++] = &sb;
        for (int t = FORK; t < NC; t++, n++) tok[n] = cc[t], pos[n] = t, seqs[n] = &sc;
        if (!paged_run(c, tok, seqs, pos, n, out)) {
            CHECK_MSG(memcmp(out, rb + (size_t)(NB - 1) * V, (size_t)V * 4) == 0, "%s: B's decode step", names[i]);
            CHECK_MSG(memcmp(out + V, rc + (size_t)FORK * V, (size_t)(NC - FORK) * V * 4) == 0, "%s: the fork", names[i]);
            CHECK(sc.blocks[FORK / 16] != sa.blocks[FORK / 16]); /* copied before the write */
        }
        /* A again from its last position: its shared block was left as it was */
        tok[0] = a[NA - 1], pos[0] = NA - 1, seqs[0] = &sa;
        if (!paged_run(c, tok, seqs, pos, 1, out))
            CHECK_MSG(memcmp(out, ra + (size_t)(NA - 1) * V, (size_t)V * 4) == 0, "%s: A after the fork", names[i]);
        kv_seq_release(&kv, &sa), kv_seq_release(&kv, &sb), kv_seq_release(&kv, &sc);
        CHECK_EQ_INT(kv.n_free, kv.n_blocks);
        free(out), free(ra), free(rb), free(rc);
        fwdc_free(c);
        kv_pool_destroy(&kv);
        model_free(m);
    }
}

/* qwen35 in the paged pool (serve --device cuda): two sequences prefilled
 * together in uneven chunks, then decoded together, each on its own
 * recurrent state in the pool's device memory, have the one-sequence
 * pass's bits; a fork at a sequence's end takes a copy of its state
 * (both go on alike); a state read back to the host (a snapshot) and set
 * on a fresh sequence holding the same blocks continues with the same
 * bits; going back is refused before anything changes. */
TEST(gpu_qwen35_paged_keeps_the_one_sequence_bits) {
    if (!gpu_up()) return;
    const char *name = "qwen35-f32";
    model *m;
    fwdc *ref_c = open_gpu_model(name, 512, &m);
    if (!ref_c) return;
    enum { NA = 120, NB = 90, NX = 10 };
    int V = m->hp.n_vocab;
    static const int one[] = {512, 0};
    int32_t a[NA + NX], bt[NB];
    random_tokens(a, NA + NX, V, 8), random_tokens(bt, NB, V, 9);
    float *ra = gpu_logits(ref_c, a, NA + NX, V, one), *rb = gpu_logits(ref_c, bt, NB, V, one);
    fwdc_free(ref_c);
    kv_pool kv;
    strata_err err = {0};
    fwdc *c = open_paged(m, &kv, name);
    if (!c) {
        free(ra), free(rb);
        model_free(m);
        return;
    }
    kv_seq sa, sb, sc, sd;
    kv_seq_init(&sa), kv_seq_init(&sb), kv_seq_init(&sd);
    float *out = xmalloc((size_t)512 * V * 4);
    int32_t tok[512], pos[512];
    kv_seq *seqs[512];
    /* A [0,37) + B [0,20), A [37,NA) + B [20,NB-1), then B's last token alone */
    int plan[3][4] = {{0, 37, 0, 20}, {37, NA, 20, NB - 1}, {NA, NA, NB - 1, NB}};
    for (int p = 0; p < 3; p++) {
        int n = 0;
        for (int t = plan[p][0]; t < plan[p][1]; t++, n++) tok[n] = a[t], pos[n] = t, seqs[n] = &sa;
        for (int t = plan[p][2]; t < plan[p][3]; t++, n++) tok[n] = bt[t], pos[n] = t, seqs[n] = &sb;
        if (paged_run(c, tok, seqs, pos, n, out)) break;
        int na = plan[p][1] - plan[p][0];
        CHECK_MSG(memcmp(out, ra + (size_t)plan[p][0] * V, (size_t)na * V * 4) == 0, "A, chunk %d", p);
        CHECK_MSG(memcmp(out + (size_t)na * V, rb + (size_t)plan[p][2] * V, (size_t)(n - na) * V * 4) == 0,
                  "B, chunk %d", p);
    }
    CHECK(sa.rs && sb.rs && sa.rs != sb.rs && sa.rs_pos == NA && sb.rs_pos == NB);
    /* going back on A: refused, A unchanged */
    tok[0] = a[NA - 1], pos[0] = NA - 1, seqs[0] = &sa;
    fwd_batch back = {.n = 1, .tokens = tok, .seqs = seqs, .pos = pos};
    CHECK_EQ_INT(fwdc_run_batch(c, &back, out, &err), STRATA_EINVAL);
    CHECK_MSG(strstr(err.msg, "cannot be rewound"), "%s", err.msg);
    CHECK(sa.n_pos == NA && sa.rs_pos == NA);
    /* a fork of A at its end, and a snapshot of A set on D over A's blocks */
    kv_seq_fork(&kv, &sa, NA, &sc);
    CHECK(sc.rs && sc.rs != sa.rs && sc.rs_pos == NA);
    float *snap = xmalloc(sa.rs_floats * sizeof(float));
    CHECK_EQ_INT(kv_seq_state_read(&kv, &sa, snap, &err), 0);
    kv_seq_fork(&kv, &sa, NA, &sd);
    kv_state_free(&kv, sd.rs); /* as a resume finds it: K/V cached, the state from a snapshot */
    sd.rs = NULL, sd.rs_floats = 0, sd.rs_pos = 0;
    CHECK_EQ_INT(kv_seq_set_state(&kv, &sd, snap, sa.rs_floats, NA, &err), 0);
    kv_seq *conts[] = {&sa, &sc, &sd};
    for (int k = 0; k < 3; k++) { /* each continues A's text: the reference's bits */
        int n = 0;
        for (int t = NA; t < NA + NX; t++, n++) tok[n] = a[t], pos[n] = t, seqs[n] = conts[k];
        if (!paged_run(c, tok, seqs, pos, n, out))
            CHECK_MSG(memcmp(out, ra + (size_t)NA * V, (size_t)NX * V * 4) == 0, "continuation %d (%s)", k,
                      k == 0 ? "A" : k == 1 ? "the fork" : "the snapshot");
    }
    /* a sequence started again at 0 on an old state: zeroed, the cold bits */
    kv_seq_truncate(&kv, &sb, 0);
    int n = 0;
    for (int t = 0; t < NB; t++, n++) tok[n] = bt[t], pos[n] = t, seqs[n] = &sb;
    if (!paged_run(c, tok, seqs, pos, n, out)) CHECK_MSG(memcmp(out, rb, (size_t)NB * V * 4) == 0, "B again from 0");
    kv_seq_release(&kv, &sa), kv_seq_release(&kv, &sb), kv_seq_release(&kv, &sc), kv_seq_release(&kv, &sd);
    CHECK_EQ_INT(kv.n_free, kv.n_blocks);
    free(snap), free(out), free(ra), free(rb);
    fwdc_free(c);
    kv_pool_destroy(&kv);
    model_free(m);
}

/* Paged decode steps as graphs (forward_cuda.c, paged_graph): two
 * sequences prefilled together, then decoded together for DS steps, one
 * token each (the graph for two tokens, recorded on the first step and
 * replayed), have the one-sequence pass's bits, with graphs and without;
 * Gemma 3's window in slots, qwen35's states (one launch over both
 * runs) and qwen3moe's experts (routed in the graph) included. Then a batch where one sequence has two runs (A, B, A
 * again: no graph, qwen35's runs launched one after the other) keeps
 * them too. */
TEST(gpu_paged_decode_graph_keeps_the_bits) {
    if (!gpu_up()) return;
    const char *names[] = {"llama-q4_1", "gemma3-q8_0", "qwen35-f32", "qwen3moe-q8_0"};
    for (int i = 0; i < 4; i++) {
        model *m;
        fwdc *ref_c = open_gpu_model(names[i], 512, &m);
        if (!ref_c) continue;
        enum { PA = 40, PB = 30, DS = 12, NA = PA + DS + 2, NB = PB + DS + 1 };
        int V = m->hp.n_vocab;
        static const int one[] = {512, 0};
        int32_t a[NA], bt[NB];
        random_tokens(a, NA, V, 21), random_tokens(bt, NB, V, 22);
        float *ra = gpu_logits(ref_c, a, NA, V, one), *rb = gpu_logits(ref_c, bt, NB, V, one);
        fwdc_free(ref_c);
        for (int graphs = 1; graphs >= 0; graphs--) {
            kv_pool kv;
            fwdc *c = open_paged(m, &kv, names[i]);
            if (!c) continue;
            fwdc_use_graphs(c, graphs);
            kv_seq sa, sb;
            kv_seq_init(&sa), kv_seq_init(&sb);
            float *out = xmalloc((size_t)512 * V * 4);
            int32_t tok[512], pos[512];
            kv_seq *seqs[512];
            int n = 0;
            for (int t = 0; t < PA; t++, n++) tok[n] = a[t], pos[n] = t, seqs[n] = &sa;
            for (int t = 0; t < PB; t++, n++) tok[n] = bt[t], pos[n] = t, seqs[n] = &sb;
            int ok = paged_run(c, tok, seqs, pos, n, out) == 0;
            for (int st = 0; st < DS && ok; st++) { /* B first: the runs' order is the batch's */
                tok[0] = bt[PB + st], pos[0] = PB + st, seqs[0] = &sb;
                tok[1] = a[PA + st], pos[1] = PA + st, seqs[1] = &sa;
                ok = paged_run(c, tok, seqs, pos, 2, out) == 0;
                CHECK_MSG(!ok || memcmp(out, rb + (size_t)(PB + st) * V, (size_t)V * 4) == 0, "%s (graphs %d): B, step %d",
                          names[i], graphs, st);
                CHECK_MSG(!ok || memcmp(out + V, ra + (size_t)(PA + st) * V, (size_t)V * 4) == 0,
                          "%s (graphs %d): A, step %d", names[i], graphs, st);
            }
            /* A, B, A again: A has two runs in one call */
            tok[0] = a[PA + DS], pos[0] = PA + DS, seqs[0] = &sa;
            tok[1] = bt[PB + DS], pos[1] = PB + DS, seqs[1] = &sb;
            tok[2] = a[PA + DS + 1], pos[2] = PA + DS + 1, seqs[2] = &sa;
            if (ok && !paged_run(c, tok, seqs, pos, 3, out)) {
                CHECK_MSG(memcmp(out, ra + (size_t)(PA + DS) * V, (size_t)V * 4) == 0, "%s: A's first run", names[i]);
                CHECK_MSG(memcmp(out + V, rb + (size_t)(PB + DS) * V, (size_t)V * 4) == 0, "%s: B between", names[i]);
                CHECK_MSG(memcmp(out + 2 * (size_t)V, ra + (size_t)(PA + DS + 1) * V, (size_t)V * 4) == 0,
                          "%s: A's second run", names[i]);
            }
            kv_seq_release(&kv, &sa), kv_seq_release(&kv, &sb);
            free(out);
            fwdc_free(c);
            kv_pool_destroy(&kv);
        }
        free(ra), free(rb);
        model_free(m);
    }
}
