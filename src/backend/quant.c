/* quant.c - type traits, reference dequantization, activation conversion
 * and the run-time choice of gemm kernel level.
 *
 * Dequantization here is the reference: it reproduces the gguf Python
 * package bit for bit (same float operations in the same order, each
 * rounded to float, no fused multiply-add), which tests/test_quant.c
 * checks. The gemm kernels live in quant_scalar.c, quant_avx2.c and
 * quant_avx512.c. Does not: threads, allocate, or know about files. */
#include "backend/quant_impl.h"
#include "backend/quant_act_impl.h"

#include "base/cpu.h"
#include "base/fp16.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* act_type F32 means the kernel takes the activations unconverted. */
static const quant_traits TRAITS[QT_COUNT] = {
    [QT_F32] = {"F32", 1, 4, QT_F32, 1},
    [QT_F16] = {"F16", 1, 2, QT_F32, 1},
    [QT_BF16] = {"BF16", 1, 2, QT_F32, 1},
    [QT_Q4_0] = {"Q4_0", QK, QB_Q4_0, QT_Q8_0, 1},
    [QT_Q4_1] = {"Q4_1", QK, QB_Q4_1, QT_Q8_1, 1},
    [QT_Q5_0] = {"Q5_0", QK, QB_Q5_0, QT_Q8_0, 1},
    [QT_Q5_1] = {"Q5_1", QK, QB_Q5_1, QT_Q8_1, 1},
    [QT_Q8_0] = {"Q8_0", QK, QB_Q8_0, QT_Q8_0, 1},
    [QT_Q8_1] = {"Q8_1", QK, 36, QT_Q8_1, 0},
    [QT_Q2_K] = {"Q2_K", QK_K, 84, QT_Q8_K, 0},
    [QT_Q3_K] = {"Q3_K", QK_K, 110, QT_Q8_K, 0},
    [QT_Q4_K] = {"Q4_K", QK_K, QB_Q4_K, QT_Q8_K, 1},
    [QT_Q5_K] = {"Q5_K", QK_K, QB_Q5_K, QT_Q8_K, 1},
    [QT_Q6_K] = {"Q6_K", QK_K, QB_Q6_K, QT_Q8_K, 1},
    [QT_Q8_K] = {"Q8_K", QK_K, 292, QT_Q8_K, 0},
    [QT_MXFP4] = {"MXFP4", QK, QB_MXFP4, QT_Q8_0, 1},
};

const quant_traits *quant_get(uint32_t type) {
    if (type >= QT_COUNT || !TRAITS[type].name) return NULL;
    return &TRAITS[type];
}

/* Names of ggml types Strata cannot load, for clear error messages. */
static const char *const OTHER_NAMES[QT_COUNT] = {
    [16] = "IQ2_XXS", [17] = "IQ2_XS", [18] = "IQ3_XXS", [19] = "IQ1_S", [20] = "IQ4_NL",
    [21] = "IQ3_S", [22] = "IQ2_S", [23] = "IQ4_XS", [24] = "I8", [25] = "I16", [26] = "I32",
    [27] = "I64", [28] = "F64", [29] = "IQ1_M", [34] = "TQ1_0", [35] = "TQ2_0",
};

const char *quant_name(uint32_t type) {
    static _Thread_local char buf[24];
    const quant_traits *tr = quant_get(type);
    if (tr) return tr->name;
    if (type < QT_COUNT && OTHER_NAMES[type]) return OTHER_NAMES[type];
    snprintf(buf, sizeof buf, "unknown type id %u", type);
    return buf;
}

size_t quant_row_bytes(qtype t, int64_t n) {
    const quant_traits *tr = quant_get(t);
    return tr ? (size_t)(n / tr->blck) * tr->bytes : 0;
}

size_t quant_act_row_bytes(qtype act, int64_t n) {
    switch (act) {
    case QT_Q8_0:
    case QT_Q8_1: return (size_t)qa8_nbp(n / QK) * (8 + QK);
    case QT_Q8_K: return (size_t)(n / QK_K) * (4 + 32 + QK_K);
    case QT_F32: return (size_t)n * 4;
    default: return 0;
    }
}

size_t quant_act_bytes_for(qtype wt, int64_t k) {
    const quant_traits *tr = quant_get(wt);
    return tr ? quant_act_row_bytes(tr->act_type, k) : 0;
}

/* ---- reference dequantization, one block per call ------------------- */

static float h2f(const uint8_t *p) { return fp16_to_f32(quant_rd16(p)); }

/* Q4_0/Q4_1/Q5_0/Q5_1 share everything but the header and the offset. */
static void dq_legacy(const uint8_t *b, float *y, int has_min, int has_qh) {
    float d = h2f(b), m = has_min ? h2f(b + 2) : 0;
    const uint8_t *p = b + (has_min ? 4 : 2);
    uint32_t qh = has_qh ? quant_rd32(p) : 0;
    const uint8_t *qs = p + (has_qh ? 4 : 0);
    int off = has_min ? 0 : (has_qh ? 16 : 8);
    for (int j = 0; j < QK; j++) {
        int q = (j < 16 ? qs[j] & 15 : qs[j - 16] >> 4) | (((qh >> j) & 1) << 4);
        if (has_min) {
            float t = d * (float)q; /* two roundings, as numpy: d*q + m */
            y[j] = t + m;
        } else {
            y[j] = d * (float)(q - off);
        }
    }
}

static void dq_q8_0(const uint8_t *b, float *y) {
    float d = h2f(b);
    for (int j = 0; j < QK; j++) y[j] = (float)(int8_t)b[2 + j] * d;
}

/* Q4_K and Q5_K: y = (d*sc) * q - (dmin*m), each product rounded. */
static void dq_q45k(const uint8_t *b, float *y, int five) {
    float d = h2f(b), dmin = h2f(b + 2);
    const uint8_t *sc6 = b + 4, *qh = b + 16, *qs = b + (five ? 48 : 16);
    for (int j = 0; j < 8; j++) {
        int sc, m;
        quant_kscale(sc6, j, &sc, &m);
        float dl = d * (float)sc, dm = dmin * (float)m;
        const uint8_t *q = qs + 32 * (j / 2);
        for (int l = 0; l < 32; l++) {
            int v = (j & 1) ? q[l] >> 4 : q[l] & 15;
            if (five) v |= ((qh[l] >> j) & 1) << 4;
            float t = dl * (float)v;
            y[32 * j + l] = t - dm;
        }
    }
}

static void dq_q6k(const uint8_t *b, float *y) {
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    float d = h2f(b + 208);
    for (int e = 0; e < QK_K; e++) {
        int h = e / 128, s = (e / 64) & 1, j = e % 64;
        int lo = (ql[h * 64 + j] >> (4 * s)) & 15;
        int hi = (qh[h * 32 + j % 32] >> (2 * (2 * s + j / 32))) & 3;
        float dl = d * (float)sc[e / 16];
        y[e] = dl * (float)((lo | (hi << 4)) - 32);
    }
}

/* kv[q] * 2^(e-128): one rounding, as ggml and the gguf package. */
static void dq_mxfp4(const uint8_t *b, float *y) {
    float d = quant_e8m0_half(b[0]);
    for (int j = 0; j < QK; j++)
        y[j] = d * (float)quant_mxfp4_kv[j < 16 ? b[1 + j] & 15 : b[1 + j - 16] >> 4];
}

static void dq_block(qtype t, const uint8_t *b, float *y) {
    switch (t) {
    case QT_Q4_0: dq_legacy(b, y, 0, 0); break;
    case QT_Q4_1: dq_legacy(b, y, 1, 0); break;
    case QT_Q5_0: dq_legacy(b, y, 0, 1); break;
    case QT_Q5_1: dq_legacy(b, y, 1, 1); break;
    case QT_Q8_0: dq_q8_0(b, y); break;
    case QT_Q4_K: dq_q45k(b, y, 0); break;
    case QT_Q5_K: dq_q45k(b, y, 1); break;
    case QT_Q6_K: dq_q6k(b, y); break;
    case QT_MXFP4: dq_mxfp4(b, y); break;
    default: break;
    }
}

void quant_dequant_row(qtype t, const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    if (t == QT_F32) {
        memcpy(dst, src, (size_t)n * 4);
    } else if (t == QT_F16) {
        for (int64_t i = 0; i < n; i++) dst[i] = fp16_to_f32(quant_rd16(p + 2 * i));
    } else if (t == QT_BF16) {
        for (int64_t i = 0; i < n; i++) dst[i] = bf16_to_f32(quant_rd16(p + 2 * i));
    } else {
        const quant_traits *tr = quant_get(t);
        if (!tr || !tr->is_weight) return;
        for (int64_t i = 0; i < n / tr->blck; i++)
            dq_block(t, p + (size_t)i * tr->bytes, dst + i * tr->blck);
    }
}

/* ---- activation conversion ------------------------------------------ */

/* The wider builds of quant_act_impl.h's code (quant_act_avx2.c,
 * quant_act_avx512.c): the same bytes. */
void quant_act_row_avx2(qtype act, const float *x, void *dst, int64_t n);
void quant_act_row_avx512(qtype act, const float *x, void *dst, int64_t n);

void quant_act_row_level(int level, qtype act, const float *x, void *dst, int64_t n) {
    if (level > quant_level()) level = quant_level();
    if (level >= QUANT_AVX512) quant_act_row_avx512(act, x, dst, n);
    else if (level >= QUANT_AVX2) quant_act_row_avx2(act, x, dst, n);
    else quant__act_row(act, x, dst, n);
}

void quant_act_row(qtype act, const float *x, void *dst, int64_t n) {
    quant_act_row_level(quant_level(), act, x, dst, n);
}

void quant_act_part_avx2(qtype act, const float *x, void *dst, int64_t n, int64_t i0, int64_t i1);
void quant_act_part_avx512(qtype act, const float *x, void *dst, int64_t n, int64_t i0, int64_t i1);

void quant_act_part_level(int level, qtype act, const float *x, void *dst, int64_t n, int64_t i0, int64_t i1) {
    if (level > quant_level()) level = quant_level();
    if (level >= QUANT_AVX512) quant_act_part_avx512(act, x, dst, n, i0, i1);
    else if (level >= QUANT_AVX2) quant_act_part_avx2(act, x, dst, n, i0, i1);
    else quant__act_part_with(act, x, dst, n, i0, i1, act_q8_blk_c);
}

void quant_act_part(qtype act, const float *x, void *dst, int64_t n, int64_t i0, int64_t i1) {
    quant_act_part_level(quant_level(), act, x, dst, n, i0, i1);
}

/* ---- kernel dispatch ------------------------------------------------- */

int quant_level(void) {
    const cpu_features *f = cpu_get();
    int avx2 = f->avx2 && f->fma && f->f16c;
    if (avx2 && f->avx512f && f->avx512bw && f->avx512vl && f->avx512vnni)
        return f->amxint8 ? QUANT_AMX : QUANT_AVX512;
    return avx2 ? QUANT_AVX2 : QUANT_SCALAR;
}

const char *quant_numerics_level(int level) {
    if (level > quant_level()) level = quant_level();
    return level >= QUANT_AVX512 ? "" : level == QUANT_AVX2 ? "+mm-avx2" : "+mm-scalar";
}

const char *quant_numerics(void) { return quant_numerics_level(quant_level()); }

const char *quant_level_name(int level) {
    static const char *names[QUANT_LEVELS] = {"scalar", "avx2", "avx512", "amx"};
    return level >= 0 && level < QUANT_LEVELS ? names[level] : "?";
}

quant_gemm_fn quant_kernel_at(int level, qtype t) {
    quant_gemm_fn fn = NULL;
    if (level >= QUANT_AMX) fn = quant_amx_kernel(t);
    if (!fn && level >= QUANT_AVX512) fn = quant_avx512_kernel(t);
    if (!fn && level >= QUANT_AVX2) fn = quant_avx2_kernel(t);
    if (!fn) fn = quant_scalar_kernel(t);
    return fn;
}

void quant_gemm_level(int level, qtype wt, const void *w, size_t w_row_bytes,
                      int64_t k, const void *xq, size_t xq_row_bytes,
                      int n_tok, float *y, int64_t ldy, int r0, int r1) {
    if (n_tok <= 0 || r1 <= r0) return;
    quant_gemm_fn fn = quant_kernel_at(level, wt);
    if (fn) fn(w, w_row_bytes, k, xq, xq_row_bytes, n_tok, y, ldy, r0, r1);
}

void quant_gemm(qtype wt, const void *w, size_t w_row_bytes, int64_t k,
                const void *xq, size_t xq_row_bytes, int n_tok, float *y,
                int64_t ldy, int r0, int r1) {
    quant_gemm_level(quant_level(), wt, w, w_row_bytes, k, xq, xq_row_bytes,
                     n_tok, y, ldy, r0, r1);
}

/* ---- activations laid out once per matmul ---------------------------- */

size_t quant_xtiles_bytes_level(int level, qtype wt, int64_t k, int n_tok) {
    if (level > quant_level()) level = quant_level();
    if (level < QUANT_AMX) return 0;
    return quant_amx_xtile_bytes(wt, k, n_tok) * (size_t)((n_tok + QUANT_XTILE - 1) / QUANT_XTILE);
}

size_t quant_xtiles_bytes(qtype wt, int64_t k, int n_tok) {
    return quant_xtiles_bytes_level(quant_level(), wt, k, n_tok);
}

void quant_xtiles(qtype wt, int64_t k, const void *xq, size_t xq_row_bytes, int n_tok, int i0, int i1, void *xt) {
    /* quant_amx_xtiles checks wt, k and n_tok itself */
    if (quant_level() >= QUANT_AMX) quant_amx_xtiles(wt, k, xq, xq_row_bytes, n_tok, i0, i1, xt);
}

const void *quant_xtiles_at(qtype wt, int64_t k, const void *xt, int t0) {
    if (!xt) return NULL;
    return (const uint8_t *)xt + (size_t)(t0 / QUANT_XTILE) * quant_amx_xtile_bytes(wt, k, QUANT_XTILE);
}

void quant_gemm_xt_level(int level, qtype wt, const void *w, size_t w_row_bytes, int64_t k, const void *xq,
                         size_t xq_row_bytes, const void *xt, int n_tok, float *y, int64_t ldy, int r0, int r1) {
    if (n_tok <= 0 || r1 <= r0) return;
    if (xt && quant_xtiles_bytes_level(level, wt, k, n_tok))
        quant_amx_gemm_xt(wt, w, w_row_bytes, k, xt, n_tok, y, ldy, r0, r1);
    else
        quant_gemm_level(level, wt, w, w_row_bytes, k, xq, xq_row_bytes, n_tok, y, ldy, r0, r1);
}

void quant_gemm_xt(qtype wt, const void *w, size_t w_row_bytes, int64_t k, const void *xq, size_t xq_row_bytes,
                   const void *xt, int n_tok, float *y, int64_t ldy, int r0, int r1) {
    quant_gemm_xt_level(quant_level(), wt, w, w_row_bytes, k, xq, xq_row_bytes, xt, n_tok, y, ldy, r0, r1);
}
