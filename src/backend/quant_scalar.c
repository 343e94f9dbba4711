/* quant_scalar.c - portable reference gemm kernels for every weight type.
 *
 * One dot product per (row, token) pair, computed by the same function for
 * every pair, so batch invariance holds by construction. Integer parts are
 * exact; the float steps per block are each family's, in block order: the
 * legacy formats' (dot_legacy) and MXFP4's and the K-quants' are every
 * SIMD level's too (avx2's legacy kernels excepted), the float formats'
 * their own. These are the slow fallback and the yardstick the SIMD levels
 * are tested against; they make no attempt at speed. Does not: SIMD,
 * threads. */
#include "backend/quant_impl.h"

#include "base/fp16.h"

#include <math.h>

typedef float (*dot_fn)(const uint8_t *w, const void *x, int64_t k);

static float h2f(const uint8_t *p) { return fp16_to_f32(quant_rd16(p)); }

/* The 32 activation quants of block b in element order (the row keeps
 * them in the grouped lane layout of quant_impl.h). */
static void act_block(const void *x, int64_t nb, int64_t b, int8_t *q) {
    const int8_t *qs = qa8_qs(x, nb);
    for (int e = 0; e < QK; e++) q[e] = qs[qa8_qoff(b, e)];
}

/* The legacy formats (Q4_0..Q8_0), the arithmetic every level keeps (the
 * same bits at scalar, avx2, avx512 and amx): per block b in order, the
 * exact integer sum of the weight quants as unsigned bytes u (Q4_0, Q5_0,
 * Q4_1, Q5_1: q; Q8_0: q + 128) times the activation quants, then
 *     acc  = fma(isum, dw * dx, acc)
 *     accm = fma(m, s, accm)
 * with m the block's minimum (Q4_1, Q5_1: the stored one; Q4_0: -8 dw,
 * Q5_0: -16 dw, Q8_0: -128 dw) and s = dx * sum(x quants); the result is
 * acc + accm. One chain per (row, token) pair, block after block: a SIMD
 * kernel may put rows, tokens or pairs in its lanes, never blocks. */
typedef struct {
    int bytes, qs_off, qh_off; /* qh_off 0: no fifth bits */
    int has_min;               /* Q4_1, Q5_1: a stored minimum */
    float m_of_d;              /* else m = m_of_d * dw */
} legacy_fmt;

static const legacy_fmt fmt_q4_0 = {QB_Q4_0, 2, 0, 0, -8.0f};
static const legacy_fmt fmt_q4_1 = {QB_Q4_1, 4, 0, 1, 0};
static const legacy_fmt fmt_q5_0 = {QB_Q5_0, 6, 2, 0, -16.0f};
static const legacy_fmt fmt_q5_1 = {QB_Q5_1, 8, 4, 1, 0};
static const legacy_fmt fmt_q8_0 = {QB_Q8_0, 2, 0, 0, -128.0f};

/* The 32 unsigned weight quants of one block in element order. */
static void legacy_u(const legacy_fmt *f, const uint8_t *blk, int *u) {
    const uint8_t *qs = blk + f->qs_off;
    if (f->bytes == QB_Q8_0) {
        for (int j = 0; j < QK; j++) u[j] = (int8_t)qs[j] + 128;
        return;
    }
    uint32_t qh = f->qh_off ? quant_rd32(blk + f->qh_off) : 0;
    for (int j = 0; j < 16; j++) {
        u[j] = (qs[j] & 15) | (((qh >> j) & 1) << 4);
        u[j + 16] = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
    }
}

static float dot_legacy(const legacy_fmt *f, const uint8_t *w, const void *x, int64_t k) {
    int64_t nb = k / QK;
    const float *xd = qa8_d(x), *xs = qa8_s(x, nb);
    float acc = 0, accm = 0;
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = w + b * f->bytes;
        int u[QK], isum = 0;
        int8_t xb[QK];
        act_block(x, nb, b, xb);
        legacy_u(f, blk, u);
        for (int j = 0; j < QK; j++) isum += u[j] * xb[j];
        acc = fmaf((float)isum, h2f(blk) * xd[qa8_slot(b)], acc);
    }
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = w + b * f->bytes;
        float m = f->has_min ? h2f(blk + 2) : f->m_of_d * h2f(blk);
        accm = fmaf(m, xs[qa8_slot(b)], accm);
    }
    return acc + accm;
}

static float dot_q4_0(const uint8_t *w, const void *x, int64_t k) { return dot_legacy(&fmt_q4_0, w, x, k); }
static float dot_q4_1(const uint8_t *w, const void *x, int64_t k) { return dot_legacy(&fmt_q4_1, w, x, k); }
static float dot_q5_0(const uint8_t *w, const void *x, int64_t k) { return dot_legacy(&fmt_q5_0, w, x, k); }
static float dot_q5_1(const uint8_t *w, const void *x, int64_t k) { return dot_legacy(&fmt_q5_1, w, x, k); }
static float dot_q8_0(const uint8_t *w, const void *x, int64_t k) { return dot_legacy(&fmt_q8_0, w, x, k); }

/* Q4_K and Q5_K: scales apply in integers; only two float terms per
 * super-block (d * sum and dmin * min-sum), rounded apart (ISO C: no FMA
 * contraction). These steps are every level's (quant_avx512.c, "the
 * K-quants' level-independent float steps"), as are Q6_K's: the SIMD and
 * AMX kernels make the same exact integers, so they give these bits. */
static float dot_q45k(const uint8_t *w, const void *x, int64_t k, int five) {
    int64_t nb = k / QK_K;
    const float *xd = qak_d(x);
    const int16_t *bs = qak_bsums(x, nb);
    const int8_t *xq = qak_qs(x, nb);
    float acc = 0, accm = 0;
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = w + b * (five ? QB_Q5_K : QB_Q4_K);
        const uint8_t *qh = blk + 16, *qs = blk + (five ? 48 : 16);
        const int8_t *xb = xq + b * QK_K;
        int isum = 0, msum = 0;
        for (int j = 0; j < 8; j++) {
            int sc, m, s = 0;
            quant_kscale(blk + 4, j, &sc, &m);
            for (int l = 0; l < 32; l++) {
                int v = (j & 1) ? qs[32 * (j / 2) + l] >> 4 : qs[32 * (j / 2) + l] & 15;
                if (five) v |= ((qh[l] >> j) & 1) << 4;
                s += v * xb[32 * j + l];
            }
            isum += sc * s;
            msum += m * (bs[16 * b + 2 * j] + bs[16 * b + 2 * j + 1]);
        }
        acc += (h2f(blk) * xd[b]) * (float)isum;
        accm += (h2f(blk + 2) * xd[b]) * (float)msum;
    }
    return acc - accm;
}

static float dot_q4_k(const uint8_t *w, const void *x, int64_t k) {
    return dot_q45k(w, x, k, 0);
}
static float dot_q5_k(const uint8_t *w, const void *x, int64_t k) {
    return dot_q45k(w, x, k, 1);
}

static float dot_q6_k(const uint8_t *w, const void *x, int64_t k) {
    int64_t nb = k / QK_K;
    const float *xd = qak_d(x);
    const int8_t *xq = qak_qs(x, nb);
    float acc = 0;
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = w + b * QB_Q6_K, *ql = blk, *qh = blk + 128;
        const int8_t *sc = (const int8_t *)(blk + 192), *xb = xq + b * QK_K;
        int isum = 0;
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int i = 0; i < 16; i++) {
                int e = 16 * g + i, h = e / 128, hs = (e / 64) & 1, j = e % 64;
                int lo = (ql[h * 64 + j] >> (4 * hs)) & 15;
                int hi = (qh[h * 32 + j % 32] >> (2 * (2 * hs + j / 32))) & 3;
                s += ((lo | (hi << 4)) - 32) * xb[e];
            }
            isum += sc[g] * s;
        }
        acc += (fp16_to_f32(quant_rd16(blk + 208)) * xd[b]) * (float)isum;
    }
    return acc;
}

/* MXFP4, in the order every level keeps (the same bits at each): lane p
 * of group G holds block 16G + qa8_lane(p), as the activation layout has
 * it; per group, lane p adds (float)isum * (dw * dx), a product and a sum
 * rounded apart (no FMA); a row ends with the 16 lanes summed by one fixed
 * tree (halves, quarters, pairs: quant_mx_hsum16). Blocks past the row
 * (padding lanes) add exact zeros: their activation scale is 0. */
static float dot_mxfp4(const uint8_t *w, const void *x, int64_t k) {
    int64_t nb = k / QK;
    const float *xd = qa8_d(x);
    float acc[QA8_GROUP] = {0};
    for (int64_t b0 = 0; b0 < nb; b0 += QA8_GROUP)
        for (int p = 0; p < QA8_GROUP; p++) {
            int64_t b = b0 + qa8_lane(p);
            int isum = 0;
            float dw = 0;
            if (b < nb) {
                const uint8_t *blk = w + b * QB_MXFP4;
                int8_t xb[QK];
                act_block(x, nb, b, xb);
                for (int j = 0; j < QK; j++)
                    isum += quant_mxfp4_kv[j < 16 ? blk[1 + j] & 15 : blk[1 + j - 16] >> 4] * xb[j];
                dw = quant_e8m0_half(blk[0]);
            }
            float dd = dw * xd[b0 + p];
            acc[p] = acc[p] + (float)isum * dd;
        }
    return quant_mx_hsum16(acc);
}

/* Float formats: eight running sums, reduced pairwise at the end, so long
 * rows do not lose precision in one accumulator. */
static float dot_float(const uint8_t *w, const float *x, int64_t k, qtype t) {
    float acc[8] = {0};
    for (int64_t i = 0; i < k; i++) {
        float v = t == QT_F32   ? ((const float *)(const void *)w)[i]
                  : t == QT_F16 ? fp16_to_f32(quant_rd16(w + 2 * i))
                                : bf16_to_f32(quant_rd16(w + 2 * i));
        acc[i & 7] += v * x[i];
    }
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) +
           ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

static float dot_f32(const uint8_t *w, const void *x, int64_t k) {
    return dot_float(w, x, k, QT_F32);
}
static float dot_f16(const uint8_t *w, const void *x, int64_t k) {
    return dot_float(w, x, k, QT_F16);
}
static float dot_bf16(const uint8_t *w, const void *x, int64_t k) {
    return dot_float(w, x, k, QT_BF16);
}

static void gemm_pairs(dot_fn dot, const void *w, size_t wrb, int64_t k,
                       const void *xq, size_t xrb, int n_tok, float *y,
                       int64_t ldy, int r0, int r1) {
    for (int t = 0; t < n_tok; t++) {
        const void *x = (const uint8_t *)xq + (size_t)t * xrb;
        for (int r = r0; r < r1; r++)
            y[t * ldy + r] = dot((const uint8_t *)w + (size_t)r * wrb, x, k);
    }
}

#define SCALAR_GEMM(name)                                                     \
    static void gemm_##name(const void *w, size_t wrb, int64_t k,             \
                            const void *xq, size_t xrb, int n_tok, float *y,  \
                            int64_t ldy, int r0, int r1) {                    \
        gemm_pairs(dot_##name, w, wrb, k, xq, xrb, n_tok, y, ldy, r0, r1);    \
    }
SCALAR_GEMM(q4_0)
SCALAR_GEMM(q4_1)
SCALAR_GEMM(q5_0)
SCALAR_GEMM(q5_1)
SCALAR_GEMM(q8_0)
SCALAR_GEMM(q4_k)
SCALAR_GEMM(q5_k)
SCALAR_GEMM(q6_k)
SCALAR_GEMM(f32)
SCALAR_GEMM(f16)
SCALAR_GEMM(bf16)
SCALAR_GEMM(mxfp4)

quant_gemm_fn quant_scalar_kernel(qtype t) {
    switch (t) {
    case QT_Q4_0: return gemm_q4_0;
    case QT_Q4_1: return gemm_q4_1;
    case QT_Q5_0: return gemm_q5_0;
    case QT_Q5_1: return gemm_q5_1;
    case QT_Q8_0: return gemm_q8_0;
    case QT_Q4_K: return gemm_q4_k;
    case QT_Q5_K: return gemm_q5_k;
    case QT_Q6_K: return gemm_q6_k;
    case QT_F32: return gemm_f32;
    case QT_F16: return gemm_f16;
    case QT_BF16: return gemm_bf16;
    case QT_MXFP4: return gemm_mxfp4;
    default: return NULL;
    }
}
