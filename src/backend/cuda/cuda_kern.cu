/* cuda_kern.cu - the CUDA kernels of cuda.h: quantized matmul, embedding
 * rows, RMSNorm, RoPE, SwiGLU, K/V stores, causal attention, argmax.
 *
 * Built with -fmad=false: no multiply-add is fused unless written as
 * fmaf(), so the dequantization gives the CPU reference's bits (d*q + m
 * rounded twice, as numpy) and RoPE the CPU's rotation bits.
 *
 * Batch invariance: each output element's reduction order depends on the
 * shapes only. Matmul, float path (F32, F16, BF16 and the K-quants; the
 * legacy quants go to cuda_mmq.cu): one warp per (row, token); lane l
 * takes 8-element chunks l, l + 32, ... of the row in order; lanes are
 * added by a fixed butterfly, and lane 0's sum is written. Tokens are
 * tiled 8 per warp so a dequantized chunk serves 8 tokens, but each token
 * has its own accumulator and the same instructions whatever the tile
 * holds. Attention: a block per (KV head, tile of query tokens, segment
 * of keys), each (token, head) with its own state and operations.
 * No atomics anywhere. Does not: paging. */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "backend/cuda/cuda.h"
}
#include "backend/cuda/cuda_int.h"

/* ---- dequantization: 8 elements (chunk c) of a GGUF row ------------------ */

__device__ __forceinline__ float ld_h(const uint8_t *p) {
    return __half2float(__ushort_as_half((unsigned short)(p[0] | (p[1] << 8))));
}

__device__ __forceinline__ uint32_t ld_u32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* Q4_0 / Q4_1 / Q5_0 / Q5_1: 32-element blocks of `bytes`. */
template <int HAS_MIN, int HAS_QH, int BYTES>
__device__ __forceinline__ void dq_legacy(const uint8_t *row, int c, float w[8]) {
    const uint8_t *b = row + (size_t)(c >> 2) * BYTES;
    float d = ld_h(b), m = HAS_MIN ? ld_h(b + 2) : 0.0f;
    const uint8_t *p = b + (HAS_MIN ? 4 : 2);
    uint32_t qh = HAS_QH ? ld_u32(p) : 0;
    const uint8_t *qs = p + (HAS_QH ? 4 : 0);
    const int off = HAS_MIN ? 0 : (HAS_QH ? 16 : 8);
#pragma unroll
    for (int i = 0; i < 8; i++) {
        int j = (c & 3) * 8 + i;
        int q = (j < 16 ? qs[j] & 15 : qs[j - 16] >> 4) | (int)(((qh >> j) & 1) << 4);
        w[i] = HAS_MIN ? d * (float)q + m : d * (float)(q - off);
    }
}

__device__ __forceinline__ void dq_q8_0(const uint8_t *row, int c, float w[8]) {
    const uint8_t *b = row + (size_t)(c >> 2) * 34;
    float d = ld_h(b);
#pragma unroll
    for (int i = 0; i < 8; i++) w[i] = (float)(int8_t)b[2 + (c & 3) * 8 + i] * d;
}

/* Q4_K / Q5_K: 256-element super-blocks; sub-block j of 32 has scale and
 * min packed 6-bit in scales[12] (backend/quant_impl.h, quant_kscale). */
template <int FIVE>
__device__ __forceinline__ void dq_q45k(const uint8_t *row, int c, float w[8]) {
    const uint8_t *b = row + (size_t)(c >> 5) * (FIVE ? 176 : 144);
    float d = ld_h(b), dmin = ld_h(b + 2);
    const uint8_t *s = b + 4, *qh = b + 16, *qs = b + (FIVE ? 48 : 16);
    int e0 = (c & 31) * 8, j = e0 >> 5, sc, m;
    kq_scale_min(s, j, sc, m);
    float dl = d * (float)sc, dm = dmin * (float)m;
    const uint8_t *q = qs + 32 * (j >> 1);
#pragma unroll
    for (int i = 0; i < 8; i++) {
        int l = (e0 & 31) + i, v = (j & 1) ? q[l] >> 4 : q[l] & 15;
        if (FIVE) v |= ((qh[l] >> j) & 1) << 4;
        w[i] = dl * (float)v - dm;
    }
}

__device__ __forceinline__ void dq_q6k(const uint8_t *row, int c, float w[8]) {
    const uint8_t *b = row + (size_t)(c >> 5) * 210;
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    float d = ld_h(b + 208);
#pragma unroll
    for (int i = 0; i < 8; i++) {
        int e = (c & 31) * 8 + i, h = e >> 7, s = (e >> 6) & 1, j = e & 63;
        int lo = (ql[h * 64 + j] >> (4 * s)) & 15;
        int hi = (qh[h * 32 + (j & 31)] >> (2 * (2 * s + (j >> 5)))) & 3;
        float dl = d * (float)sc[e >> 4];
        w[i] = dl * (float)((lo | (hi << 4)) - 32);
    }
}

template <int T>
__device__ __forceinline__ void dq8(const uint8_t *row, int c, float w[8]) {
    if (T == QT_F32) {
        const float *f = (const float *)row + c * 8; /* F32 rows are 4-aligned */
#pragma unroll
        for (int i = 0; i < 8; i++) w[i] = f[i];
    } else if (T == QT_F16) {
#pragma unroll
        for (int i = 0; i < 8; i++) w[i] = ld_h(row + (c * 8 + i) * 2);
    } else if (T == QT_BF16) {
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint8_t *p = row + (c * 8 + i) * 2;
            w[i] = __uint_as_float((uint32_t)(p[0] | (p[1] << 8)) << 16);
        }
    } else if (T == QT_Q4_0) {
        dq_legacy<0, 0, 18>(row, c, w);
    } else if (T == QT_Q4_1) {
        dq_legacy<1, 0, 20>(row, c, w);
    } else if (T == QT_Q5_0) {
        dq_legacy<0, 1, 22>(row, c, w);
    } else if (T == QT_Q5_1) {
        dq_legacy<1, 1, 24>(row, c, w);
    } else if (T == QT_Q8_0) {
        dq_q8_0(row, c, w);
    } else if (T == QT_Q4_K) {
        dq_q45k<0>(row, c, w);
    } else if (T == QT_Q5_K) {
        dq_q45k<1>(row, c, w);
    } else if (T == QT_Q6_K) {
        dq_q6k(row, c, w);
    }
}

/* ---- matmul ---------------------------------------------------------------- */

#define MM_T 8     /* tokens per warp */
#define MM_R_MIN 8 /* tokens from which a warp takes 2 rows (x loads shared) */

/* Warp: R weight rows (wr[i]; nr of them real) x tokens [t0, t0 + 8).
 * Whatever R, the rows and the tile's token count, each (row, token)
 * gets the same operations: lane l's chunks in order (8 products, the
 * first a multiply, then 7 fmaf; the chunk's sum added to the lane's),
 * then the butterfly; lane 0's acc holds the results. */
template <int T, int R>
__device__ __forceinline__ void mm_warp(const uint8_t *const wr[R], int nr, int k, const float *__restrict__ x,
                                        int t0, int nt, float acc[R][MM_T]) {
    int lane = threadIdx.x & 31, nc = k / 8;
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
        for (int t = 0; t < MM_T; t++) acc[i][t] = 0.0f;
    for (int c = lane; c < nc; c += 32) {
        float wv[R][8];
#pragma unroll
        for (int i = 0; i < R; i++)
            if (i < nr) dq8<T>(wr[i], c, wv[i]);
#pragma unroll
        for (int t = 0; t < MM_T; t++) {
            if (t >= nt) break;
            const float4 *xp = (const float4 *)(x + (size_t)(t0 + t) * k + (size_t)c * 8);
            float4 a = __ldg(xp), b = __ldg(xp + 1);
#pragma unroll
            for (int i = 0; i < R; i++) {
                float s = wv[i][0] * a.x;
                s = fmaf(wv[i][1], a.y, s);
                s = fmaf(wv[i][2], a.z, s);
                s = fmaf(wv[i][3], a.w, s);
                s = fmaf(wv[i][4], b.x, s);
                s = fmaf(wv[i][5], b.y, s);
                s = fmaf(wv[i][6], b.z, s);
                s = fmaf(wv[i][7], b.w, s);
                acc[i][t] += s;
            }
        }
    }
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
        for (int t = 0; t < MM_T; t++) {
            if (t >= nt) break; /* nt is the warp's: the shuffles stay full; decode sums 1 token, not 8 */
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) acc[i][t] += __shfl_xor_sync(FULL, acc[i][t], o);
        }
}

template <int T, int R>
__global__ void k_matmul(const mm_job job, const mm_groups grp) {
    int gw = blockIdx.x * MM_WARPS + (threadIdx.x >> 5);
    mm_part P;
    int part = mm_part_of(job, gw, P);
    if (part < 0) return; /* whole warps leave: the shuffles below stay full */
    int t0, t1;
    size_t w_off;
    if (!mm_rows_of<1>(job, grp, MM_T, t0, t1, w_off)) return; /* a group of fewer slots than the grid's */
    int nt = min(MM_T, t1 - t0);
    P.w += w_off;
    const uint8_t *wr[R];
    int r0, nr;
    if (job.mode == MM_SWIGLU) { /* R == 2: gate row r0, up row r0 */
        r0 = gw, nr = R;
        wr[0] = P.w + (size_t)r0 * job.row_bytes;
        wr[R - 1] = job.p[1].w + w_off + (size_t)r0 * job.row_bytes;
    } else {
        r0 = gw * R, nr = min(R, P.rows - r0);
#pragma unroll
        for (int i = 0; i < R; i++) wr[i] = P.w + (size_t)(r0 + (i < nr ? i : 0)) * job.row_bytes;
    }
    float acc[R][MM_T];
    mm_warp<T, R>(wr, nr, job.k, job.x, t0, nt, acc);
    if ((threadIdx.x & 31) != 0) return;
#pragma unroll
    for (int t = 0; t < MM_T; t++) {
        if (t >= nt) break;
        float *y = P.y + (size_t)(t0 + t) * P.rows + r0;
        if (job.mode == MM_SWIGLU) {
            y[0] = swiglu1(acc[0][t], acc[R - 1][t]);
            continue;
        }
#pragma unroll
        for (int i = 0; i < R; i++)
            if (i < nr) y[i] = job.mode == MM_ADD ? y[i] + acc[i][t] : acc[i][t];
    }
}

template <int T>
__global__ void k_embed(float *x, const uint8_t *emb, size_t row_bytes, int dim, const int32_t *tok, float scale) {
    const uint8_t *row = emb + (size_t)tok[blockIdx.x] * row_bytes;
    float *out = x + (size_t)blockIdx.x * dim;
    for (int c = threadIdx.x; c < dim / 8; c += blockDim.x) {
        float wv[8];
        dq8<T>(row, c, wv);
#pragma unroll
        for (int i = 0; i < 8; i++) out[c * 8 + i] = scale != 1.0f ? wv[i] * scale : wv[i];
    }
}

#define TYPES(X) \
    X(QT_F32) X(QT_F16) X(QT_BF16) X(QT_Q4_0) X(QT_Q4_1) X(QT_Q5_0) X(QT_Q5_1) X(QT_Q8_0) X(QT_Q4_K) X(QT_Q5_K) X(QT_Q6_K)

extern "C" int cuda_matmul_q8(qtype t) { return mmq_type(t); }

extern "C" int cuda_supports(qtype t) {
#define SUP(q) if (t == q) return 1;
    TYPES(SUP)
#undef SUP
    return 0;
}

static int check_shape(qtype t, int k, strata_err *err) {
    if (!cuda_supports(t)) return strata_errf(err, STRATA_EUNSUPPORTED, "cuda: no kernel for weight type %s", quant_name(t));
    int blk = quant_get(t)->blck < 32 ? 32 : quant_get(t)->blck;
    if (k % blk) return strata_errf(err, STRATA_EINVAL, "cuda: row of %d %s values is not whole %d-blocks", k, quant_name(t), blk);
    return 0;
}

/* Queues job (parts, mode, n, k, x set; warps filled in here). */
static int mm_launch(qtype t, mm_job job, strata_err *err, mm_groups grp = mm_groups{NULL, 0, 0, 0}) {
    int rc = check_shape(t, job.k, err);
    if (rc || job.n <= 0) return rc;
    if (job.norm_w && !cuda_matmul_norms(t, job.n))
        return strata_errf(err, STRATA_EINVAL, "cuda: a %s matmul of %d tokens cannot apply the RMS norm itself",
                           quant_name(t), job.n);
    if (mmq_type(t)) return mmq_launch(t, job, grp, err);
    /* Decode keeps one row per warp (more warps in flight); from MM_R_MIN
     * tokens a warp takes two rows and loads each x chunk once for both.
     * SwiGLU: always two, row r of gate and of up. */
    int R = job.mode == MM_SWIGLU || job.n >= MM_R_MIN ? 2 : 1, warps = 0;
    for (int i = 0; i < job.np; i++) {
        job.p[i].warps = job.mode == MM_SWIGLU ? (i == 0 ? job.p[0].rows : 0) : (job.p[i].rows + R - 1) / R;
        warps += job.p[i].warps;
    }
    if (warps == 0) return 0;
    int tokens = grp.g && job.n > CUDA_MOE_TILE ? CUDA_MOE_TILE : job.n; /* a group's most */
    dim3 grid((warps + MM_WARPS - 1) / MM_WARPS, (tokens + MM_T - 1) / MM_T, grp.g ? grp.n : 1);
#define LAUNCH(q)                                                                   \
    if (t == q) {                                                                   \
        if (R == 1) k_matmul<q, 1><<<grid, 32 * MM_WARPS, 0, g_stream>>>(job, grp); \
        else k_matmul<q, 2><<<grid, 32 * MM_WARPS, 0, g_stream>>>(job, grp);        \
    }
    TYPES(LAUNCH)
#undef LAUNCH
    return 0;
}

static mm_job mm_job_of(int mode, int k, const float *d_x, int n, size_t row_bytes) {
    mm_job job;
    memset(&job, 0, sizeof job);
    job.mode = mode, job.k = k, job.x = d_x, job.n = n, job.row_bytes = row_bytes;
    return job;
}

extern "C" int cuda_matmul(qtype t, const void *d_w, size_t row_bytes, int rows, int k, const float *d_x, int n,
                           float *d_y, strata_err *err) {
    mm_job job = mm_job_of(MM_STORE, k, d_x, n, row_bytes);
    job.np = rows > 0;
    job.p[0] = (mm_part){(const uint8_t *)d_w, d_y, rows, 0};
    return mm_launch(t, job, err);
}

extern "C" int cuda_matmul_multi(qtype t, size_t row_bytes, int k, const float *d_x, int n, int np,
                                 const void *const d_w[], const int rows[], float *const d_y[], int add,
                                 const float *d_norm_w, float eps, strata_err *err) {
    if (np < 1 || np > MM_PARTS)
        return strata_errf(err, STRATA_EINVAL, "cuda: %d matmuls in one launch (1 to %d)", np, MM_PARTS);
    mm_job job = mm_job_of(add ? MM_ADD : MM_STORE, k, d_x, n, row_bytes);
    job.np = np, job.norm_w = d_norm_w, job.eps = eps;
    for (int i = 0; i < np; i++) job.p[i] = (mm_part){(const uint8_t *)d_w[i], d_y[i], rows[i], 0};
    return mm_launch(t, job, err);
}

extern "C" int cuda_matmul_swiglu(qtype t, size_t row_bytes, int rows, int k, const float *d_x, int n,
                                  const void *d_gate, const void *d_up, float *d_y, const float *d_norm_w, float eps,
                                  strata_err *err) {
    mm_job job = mm_job_of(MM_SWIGLU, k, d_x, n, row_bytes);
    job.np = 2, job.norm_w = d_norm_w, job.eps = eps;
    job.p[0] = (mm_part){(const uint8_t *)d_gate, d_y, rows, 0};
    job.p[1] = (mm_part){(const uint8_t *)d_up, NULL, rows, 0};
    return mm_launch(t, job, err);
}

extern "C" int cuda_matmul_experts(qtype t, const void *d_w, const void *d_up, size_t step, size_t row_bytes,
                                   int rows, int k, const float *d_x, int n, int slots, const int32_t *d_groups,
                                   int n_groups, float *d_y, strata_err *err) {
    mm_job job = mm_job_of(d_up ? MM_SWIGLU : MM_STORE, k, d_x, n, row_bytes);
    job.np = d_up ? 2 : 1;
    job.p[0] = (mm_part){(const uint8_t *)d_w, d_y, rows, 0};
    if (d_up) job.p[1] = (mm_part){(const uint8_t *)d_up, NULL, rows, 0};
    return n_groups > 0 ? mm_launch(t, job, err, mm_groups{(const mm_group *)d_groups, step, n_groups, slots}) : 0;
}

extern "C" int cuda_embed(float *d_x, qtype t, const void *d_emb, size_t row_bytes, int dim, const int32_t *d_tok,
                          int n, float scale, strata_err *err) {
    int rc = check_shape(t, dim, err);
    if (rc || n <= 0) return rc;
    const uint8_t *e = (const uint8_t *)d_emb;
#define LAUNCH(q) \
    if (t == q) k_embed<q><<<n, 128, 0, g_stream>>>(d_x, e, row_bytes, dim, d_tok, scale);
    TYPES(LAUNCH)
#undef LAUNCH
    return 0;
}

/* ---- elementwise ------------------------------------------------------------- */

__global__ void k_rmsnorm(float *out, const float *x, const float *w, int dim, float eps) {
    __shared__ float red[RMS_LANES / 32];
    const float *xr = x + (size_t)blockIdx.x * dim;
    float *o = out + (size_t)blockIdx.x * dim;
    float scale = rms_scale(xr, dim, eps, red);
#pragma unroll 4
    for (int i = threadIdx.x; i < dim; i += blockDim.x) o[i] = xr[i] * scale * w[i];
}

extern "C" void cuda_rmsnorm(float *d_out, const float *d_x, const float *d_w, int n_rows, int dim, float eps) {
    if (n_rows > 0) k_rmsnorm<<<n_rows, RMS_LANES, 0, g_stream>>>(d_out, d_x, d_w, dim, eps);
}

/* Angles in double, then the CPU's float rotation (forward.c rope_heads):
 * the block's threads rotate the n_q heads of row q and the n_k of row k
 * (k may be NULL) at position pos. Each frequency's cos and sin are
 * computed once for all the heads (ROPE_CHUNK at a time, in shared
 * memory: the same doubles, so the same floats). A pair whose inverse
 * frequency is 0 keeps its values (qwen35's M-RoPE pairs of the text's
 * zero position: forward.c's rope_off skips them). */
#define ROPE_CHUNK 128

#define LOAD_U 4 /* elements a thread loads before it uses and stores them (RoPE's pairs, the K/V store's) */

/* A thread's pairs load together, then rotate and store: each pair is
 * its own, so the order of loads and stores changes no value. */
__device__ __forceinline__ void rope_heads(float *xr, int n_heads, int head_dim, int rope_dim, int neox, int i0, int m,
                                           const float2 *cs, const float *fr) {
    int half = rope_dim / 2;
    for (int base = threadIdx.x; base < n_heads * m; base += LOAD_U * blockDim.x) {
        float x0[LOAD_U], x1[LOAD_U];
        int at[LOAD_U], i[LOAD_U];
#pragma unroll
        for (int u = 0; u < LOAD_U; u++) {
            int idx = base + u * blockDim.x;
            i[u] = idx < n_heads * m && fr[idx % m] != 0.0f ? idx % m : -1;
            if (i[u] < 0) continue;
            int f = i0 + i[u];
            at[u] = (idx / m) * head_dim + (neox ? f : 2 * f);
            x0[u] = xr[at[u]], x1[u] = xr[at[u] + (neox ? half : 1)];
        }
#pragma unroll
        for (int u = 0; u < LOAD_U; u++) {
            if (i[u] < 0) continue;
            float ct = cs[i[u]].x, st = cs[i[u]].y;
            xr[at[u]] = x0[u] * ct - x1[u] * st;
            xr[at[u] + (neox ? half : 1)] = x0[u] * st + x1[u] * ct;
        }
    }
}

__device__ void rope_rows(float *q, int n_q, float *k, int n_k, int head_dim, int rope_dim, int neox, int pos,
                          const float *inv_freq, float pos_div) {
    __shared__ float2 cs[ROPE_CHUNK];
    __shared__ float fr[ROPE_CHUNK]; /* the chunk's inverse frequencies */
    for (int i0 = 0; i0 < rope_dim / 2; i0 += ROPE_CHUNK) {
        int m = min(ROPE_CHUNK, rope_dim / 2 - i0);
        __syncthreads(); /* the last chunk's readers are done */
        for (int i = threadIdx.x; i < m; i += blockDim.x) {
            fr[i] = inv_freq[i0 + i];
            double theta = (double)pos * fr[i];
            if (pos_div != 1.0f) theta /= pos_div;
            cs[i].x = (float)cos(theta);
            cs[i].y = (float)sin(theta);
        }
        __syncthreads();
        rope_heads(q, n_q, head_dim, rope_dim, neox, i0, m, cs, fr);
        if (k) rope_heads(k, n_k, head_dim, rope_dim, neox, i0, m, cs, fr);
    }
}

__global__ void k_rope(float *x, int row_len, int n_heads, int head_dim, int rope_dim, int neox, const int32_t *pos,
                       const float *inv_freq, float pos_div) {
    rope_rows(x + (size_t)blockIdx.x * row_len, n_heads, NULL, 0, head_dim, rope_dim, neox, pos[blockIdx.x], inv_freq,
              pos_div);
}

extern "C" void cuda_rope(float *d_x, int n, int row_len, int n_heads, int head_dim, int rope_dim, int neox,
                          const int32_t *d_pos, const float *d_inv_freq, float pos_div) {
    if (n > 0) k_rope<<<n, 128, 0, g_stream>>>(d_x, row_len, n_heads, head_dim, rope_dim, neox, d_pos, d_inv_freq, pos_div);
}

/* Where a position's K and V rows are, in halves from the caches' bases:
 * contiguous caches [pos][kvd] (table NULL), or the paged pool of
 * model/kv.h (a device pool): position p of a sequence is in block
 * table[p / B], blk halves from one block to the next, row p % B of it
 * (the bases are a layer's K and V rows of block 0). The same loads
 * either way, so paging changes no bit. */
struct kv_ref {
    const int32_t *table;
    int B;
    size_t blk;
};

__device__ __forceinline__ size_t kv_row_at(const kv_ref &r, int p, int kvd) {
    return r.table ? (size_t)r.table[p / r.B] * r.blk + (size_t)(p % r.B) * kvd : (size_t)p * kvd;
}

/* Token t's cache row: dst[t] (a paged pool's row, computed by the host)
 * or its position's row of contiguous caches. */
__device__ __forceinline__ size_t kv_dst_row(const int64_t *dst, const int32_t *pos, int t, int kvd) {
    return dst ? (size_t)dst[t] : (size_t)pos[t] * kvd;
}

/* The block's threads: K and V rows of token src at position dst to the half caches. */
__device__ __forceinline__ void kv_store_row(__half *kc, __half *vc, const float *k, const float *v, size_t dst,
                                             size_t src, int kvd) {
    for (int base = threadIdx.x; base < kvd; base += LOAD_U * blockDim.x) { /* loads together, then stores */
        float kk[LOAD_U], vv[LOAD_U];
#pragma unroll
        for (int u = 0; u < LOAD_U; u++) {
            int i = base + u * blockDim.x;
            if (i < kvd) kk[u] = k[src + i], vv[u] = v[src + i];
        }
#pragma unroll
        for (int u = 0; u < LOAD_U; u++) {
            int i = base + u * blockDim.x;
            if (i < kvd) kc[dst + i] = __float2half_rn(kk[u]), vc[dst + i] = __float2half_rn(vv[u]);
        }
    }
}

/* The RMS norm of each of n_heads heads of x (head_dim floats, weights
 * w) in place, a warp a head: k_rmsnorm's scale (rms_scale_warp) and
 * expression, so its bits. A lane reads and writes its own elements. */
__device__ void head_norms(float *x, int n_heads, int head_dim, const float *w, float eps) {
    int lane = threadIdx.x & 31;
    for (int h = threadIdx.x >> 5; h < n_heads; h += blockDim.x >> 5) {
        float *xh = x + (size_t)h * head_dim, scale = rms_scale_warp(xh, head_dim, eps);
        for (int i = lane; i < head_dim; i += 32) xh[i] = xh[i] * scale * w[i];
    }
}

/* cuda_rmsnorm of q's and k's heads (q_norm, k_norm: NULL for none),
 * cuda_rope on q and on k, then cuda_kv_store, in one launch (a block per
 * token). */
__global__ void k_rope_store(float *q, float *k, const float *v, __half *kc, __half *vc, const int64_t *dst,
                             int n_head, int n_head_kv, int head_dim, int rope_dim, int neox, const int32_t *pos,
                             const float *inv_freq, float pos_div, const float *q_norm, const float *k_norm,
                             float eps) {
    int t = blockIdx.x, p = pos[t], nq = n_head * head_dim, kvd = n_head_kv * head_dim;
    if (q_norm) head_norms(q + (size_t)t * nq, n_head, head_dim, q_norm, eps);
    if (k_norm) head_norms(k + (size_t)t * kvd, n_head_kv, head_dim, k_norm, eps);
    __syncthreads(); /* the normed heads, written by other warps, are what RoPE reads */
    rope_rows(q + (size_t)t * nq, n_head, k + (size_t)t * kvd, n_head_kv, head_dim, rope_dim, neox, p, inv_freq,
              pos_div);
    __syncthreads(); /* the rotated k, written by other threads, is what goes to the cache */
    kv_store_row(kc, vc, k, v, kv_dst_row(dst, pos, t, kvd), (size_t)t * kvd, kvd);
}

extern "C" void cuda_rope_kv_store_at(float *d_q, float *d_k, const float *d_v, uint16_t *d_kc, uint16_t *d_vc,
                                      const int64_t *d_dst, int n, int n_head, int n_head_kv, int head_dim,
                                      int rope_dim, int neox, const int32_t *d_pos, const float *d_inv_freq,
                                      float pos_div, const float *d_q_norm, const float *d_k_norm, float eps) {
    if (n > 0)
        k_rope_store<<<n, 128, 0, g_stream>>>(d_q, d_k, d_v, (__half *)d_kc, (__half *)d_vc, d_dst, n_head,
                                              n_head_kv, head_dim, rope_dim, neox, d_pos, d_inv_freq, pos_div,
                                              d_q_norm, d_k_norm, eps);
}

extern "C" void cuda_rope_kv_store(float *d_q, float *d_k, const float *d_v, uint16_t *d_kc, uint16_t *d_vc, int n,
                                   int n_head, int n_head_kv, int head_dim, int rope_dim, int neox,
                                   const int32_t *d_pos, const float *d_inv_freq, float pos_div) {
    cuda_rope_kv_store_at(d_q, d_k, d_v, d_kc, d_vc, NULL, n, n_head, n_head_kv, head_dim, rope_dim, neox, d_pos,
                          d_inv_freq, pos_div, NULL, NULL, 0.0f);
}

__global__ void k_swiglu(float *g, const float *u, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) g[i] = swiglu1(g[i], u[i]);
}

/* backend/act_impl.h's act__exp_clamped and act__gelu_mul, the same
 * float steps (gemma's GELU, tanh form, times up). */
__device__ __forceinline__ float exp_clamped(float x) {
    const float shift = 12582912.0f; /* 1.5 * 2^23 */
    x = fminf(fmaxf(x, -87.0f), 88.0f);
    float t = x * 1.44269504088896341f + shift;
    float n = t - shift;
    float r = x - n * 0.693359375f - n * -2.12194440e-4f;
    float p = 1.98412698e-4f;
    p = p * r + 1.38888889e-3f;
    p = p * r + 8.33333333e-3f;
    p = p * r + 4.16666667e-2f;
    p = p * r + 1.66666667e-1f;
    p = p * r + 0.5f;
    p = p * r * r + r + 1.0f;
    return __int_as_float(__float_as_int(p) + (__float_as_int(t) - 0x4B400000) * (1 << 23));
}

__global__ void k_geglu(float *g, const float *u, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = g[i], y = 0.79788456080286535588f * x * (1.0f + 0.044715f * x * x);
    g[i] = x / (1.0f + exp_clamped(-2.0f * y)) * u[i];
}

extern "C" void cuda_geglu(float *d_g, const float *d_u, size_t n) {
    if (n) k_geglu<<<(unsigned)((n + 255) / 256), 256, 0, g_stream>>>(d_g, d_u, n);
}

__global__ void k_add(float *x, const float *y, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += y[i];
}

extern "C" void cuda_swiglu(float *d_g, const float *d_u, size_t n) {
    if (n) k_swiglu<<<(unsigned)((n + 255) / 256), 256, 0, g_stream>>>(d_g, d_u, n);
}

extern "C" void cuda_add(float *d_x, const float *d_y, size_t n) {
    if (n) k_add<<<(unsigned)((n + 255) / 256), 256, 0, g_stream>>>(d_x, d_y, n);
}

__global__ void k_add_rows(float *x, const float *b, int dim) {
    float *r = x + (size_t)blockIdx.x * dim;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) r[i] += b[i];
}

extern "C" void cuda_add_rows(float *d_x, const float *d_b, int n, int dim) {
    if (n > 0) k_add_rows<<<n, 128, 0, g_stream>>>(d_x, d_b, dim);
}

__global__ void k_gather(float *dst, const float *src, const int32_t *rows, int dim) {
    const float *s = src + (size_t)rows[blockIdx.x] * dim;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) dst[(size_t)blockIdx.x * dim + i] = s[i];
}

extern "C" void cuda_gather(float *d_dst, const float *d_src, const int32_t *d_rows, int n, int dim) {
    if (n > 0) k_gather<<<n, 128, 0, g_stream>>>(d_dst, d_src, d_rows, dim);
}

/* Token blockIdx.x's experts' rows times their weights, best first
 * (model/moe.c's combine_row order), then the shared expert's row times
 * sigmoid of its gate, added to the residual row. */
__global__ void k_moe_add(float *x, const float *y, const int32_t *slot, const float *w, int k, int dim,
                          const float *sh_y, const float *sh_s) {
    size_t t = blockIdx.x;
    float s = sh_y ? 1.0f / (1.0f + expf(-sh_s[t])) : 0.0f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float o = 0.0f;
        for (int j = 0; j < k; j++) {
            float v = y[(size_t)slot[t * k + j] * dim + i] * w[t * k + j];
            o = j ? o + v : v;
        }
        if (sh_y) o = o + sh_y[t * dim + i] * s;
        x[t * dim + i] += o;
    }
}

extern "C" void cuda_moe_add(float *d_x, const float *d_y, const int32_t *d_slot, const float *d_w, int n, int k,
                             int dim, const float *d_sh_y, const float *d_sh_s) {
    if (n > 0) k_moe_add<<<n, 128, 0, g_stream>>>(d_x, d_y, d_slot, d_w, k, dim, d_sh_y, d_sh_s);
}

__global__ void k_kv_store(__half *kc, __half *vc, const float *k, const float *v, const int64_t *dst,
                           const int32_t *pos, int kvd) {
    kv_store_row(kc, vc, k, v, kv_dst_row(dst, pos, blockIdx.x, kvd), (size_t)blockIdx.x * kvd, kvd);
}

extern "C" void cuda_kv_store_at(uint16_t *d_kc, uint16_t *d_vc, const float *d_k, const float *d_v,
                                 const int64_t *d_dst, const int32_t *d_pos, int n, int kvd) {
    if (n > 0) k_kv_store<<<n, 128, 0, g_stream>>>((__half *)d_kc, (__half *)d_vc, d_k, d_v, d_dst, d_pos, kvd);
}

extern "C" void cuda_kv_store(uint16_t *d_kc, uint16_t *d_vc, const float *d_k, const float *d_v,
                              const int32_t *d_pos, int n, int kvd) {
    cuda_kv_store_at(d_kc, d_vc, d_k, d_v, NULL, d_pos, n, kvd);
}

/* ---- attention ----------------------------------------------------------------- */

/* Keys are cut into segments of CUDA_ATTN_SEG positions at fixed
 * places, and segments into tiles of AT_KT. A block takes (KV head g, qt
 * query tokens, segment s): its rows are the (token, head) pairs of its
 * tokens and g's query heads (row = token * hpg + head), in m-tiles of
 * 16 rows, and each K/V tile is staged in shared memory once for all of
 * them. The products are the tensor cores' (mma.sync m16n8k16: half
 * inputs, float sums): a warp takes one m-tile's scores against the
 * tile's 32 keys (q rounded to half, head_dim in steps of 16, in order),
 * their online softmax in float (a row's max and sum over its quad of
 * lanes in a fixed order), the weights rounded to half, and their product
 * with V for its part of the output columns: a block of mt m-tiles gives
 * each 4 / mt warps, each 1 / (4 / mt) of head_dim (an m-tile's warps
 * score the same keys alike). A row takes the keys from its first (its
 * window) to its own position; in a tile without any of them its weights
 * are zero and its rescale one, so the tile leaves it as it was. Each
 * (token, head, segment) writes its online-softmax state (m, l,
 * o[head_dim]); k_attn_fold folds a token's segments in segment order.
 * What an output computes depends only on its row's query and key
 * positions, never on qt, the row's place in its m-tile, or which warp
 * and column part computes it: prefill, decode and any batch give the
 * same bits (gpu_attention_* compares them with memcmp). */
#define AT_THREADS 128
#define AT_WARPS (AT_THREADS / 32)
#define AT_KT 32        /* keys per tile */
#define AT_MAX_DIM 256
#define AT_MAX_GROUP 16 /* query heads per KV head */
#define AT_MAX_ROWS 64  /* (token, head) rows a block: four m-tiles */
#define AT_PAD 4        /* half2 past each staged row: a quad's lanes' rows fall in other banks */
#define AT_SLD 40       /* floats a row of shared scores (16 lanes' float2 stores in other banks) */

__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(FULL, v, 1));
    return fmaxf(v, __shfl_xor_sync(FULL, v, 2));
}

/* The quad's four values in one order for all four lanes ((a + b) + (c + d)). */
__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(FULL, v, 1);
    return v + __shfl_xor_sync(FULL, v, 2);
}

/* Two halves as the 32-bit register an mma operand takes (lo in the low bits). */
__device__ __forceinline__ uint32_t halves_bits(__half lo, __half hi) {
    return (uint32_t)__half_as_ushort(lo) | (uint32_t)__half_as_ushort(hi) << 16;
}

__device__ __forceinline__ uint32_t h2_bits(__half2 h) { return halves_bits(h.x, h.y); }

/* c += A (16 x 16 half, rows g and g + 8 of the lane) x B (16 x 8 half),
 * float sums (PTX's fragment layout for m16n8k16). */
__device__ __forceinline__ void mma_f16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
#if defined(CUDA_EMU) /* tools/cuda_emu: the same product, PTX's fragment layout */
    emu_mma_f16(c, a, b0, b1);
#else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

static int attn_segs(int max_ctx) { return (max_ctx + CUDA_ATTN_SEG - 1) / CUDA_ATTN_SEG; }

/* m-tiles of a block of rows (1, 2 or 4: the warps split evenly). */
static __host__ __device__ int attn_mtiles(int rows) { return rows <= 16 ? 1 : rows <= 32 ? 2 : 4; }

/* The most rows a block: four m-tiles, two where head_dim > 128 (a warp's
 * outputs stay within 64 floats a lane). */
static int attn_max_rows(int D) { return D > 128 ? 32 : AT_MAX_ROWS; }

/* Query tokens a block (a launch parameter only: a row's bits do not
 * depend on it): the most rows, or 32 or 16 where that leaves fewer than
 * two blocks an SM. */
static int attn_qt(int n, int n_head_kv, int segs, int hpg, int D) {
    static int env = -1; /* STRATA_CUDA_ATTN_QT: a fixed qt, to time the choice */
    if (env < 0) {
        const char *e = getenv("STRATA_CUDA_ATTN_QT");
        env = e ? atoi(e) : 0;
    }
    int qt = attn_max_rows(D) / hpg; /* >= 2: hpg <= AT_MAX_GROUP */
    if (env > 0) return env < qt ? env : qt;
    for (int rows = 32; rows >= 16; rows /= 2)
        if ((long)n_head_kv * segs * ((n + qt - 1) / qt) < 2 * 132) qt = rows / hpg > 0 ? rows / hpg : 1;
    return qt;
}

/* The K/V tile's half2 in shared memory: K rows, then V rows, each
 * padded by AT_PAD. */
static __host__ __device__ int attn_tile_h2(int D) { return 2 * AT_KT * (D / 2 + AT_PAD); }

/* Bytes of k_attn_seg's shared memory: the m-tiles' queries in half and
 * their shared scores, and `stages` K/V tiles (more than one: a ring,
 * the next stages - 1 tiles loading while this one is used). */
static size_t attn_smem(int rows, int D, int stages) {
    int mt = attn_mtiles(rows);
    return sizeof(__half2) * ((size_t)16 * mt * (D / 2 + AT_PAD) + (size_t)stages * attn_tile_h2(D)) +
           sizeof(float) * 16 * mt * AT_SLD;
}

/* The most a launch needs to run at all (rows * head_dim <= 32 * 256,
 * two tiles): 87.5 KiB; attn_init refuses a device with less. */
#define AT_SMEM_MIN (attn_smem(32, AT_MAX_DIM, 2))

/* Tiles a segment: a decode launch keeps them all in flight where
 * shared memory holds them. */
#define AT_SEG_TILES (CUDA_ATTN_SEG / AT_KT)

/* Dynamic shared memory a k_attn_seg launch may use (attn_init). */
static size_t g_attn_smem_max;

/* Starts copying the tile's K rows and V rows into sk and sv (rows of
 * D / 2 + AT_PAD half2), 16 bytes a copy, rows past nk zero: a group of
 * this thread's copies, committed (cp_async_wait waits; all in flight at
 * once, however the loop is unrolled). The rows' places in the caches
 * are rows[0..nk) (halves from the bases: one table lookup a row, done
 * once a segment). */
__device__ void attn_stage(__half2 *sk, __half2 *sv, const __half *kc, const __half *vc, const size_t *rows, int nk,
                           int D) {
    int C = D / 8, ld = D / 2 + AT_PAD; /* 16-byte chunks a row; a chunk is 4 half2 */
#pragma unroll 1
    for (int x = threadIdx.x; x < AT_KT * C; x += AT_THREADS) {
        int j = x / C, c = x % C;
        uint4 *dk = (uint4 *)&sk[j * ld + 4 * c], *dv = (uint4 *)&sv[j * ld + 4 * c];
        if (j < nk) {
            cp_async<16>(dk, (const uint4 *)(kc + rows[j]) + c);
            cp_async<16>(dv, (const uint4 *)(vc + rows[j]) + c);
        } else {
            *dk = *dv = make_uint4(0, 0, 0, 0);
        }
    }
    cp_async_commit();
}

/* A query at position p reads keys [attn_lo(p), p]: all of them, or the
 * last n_swa on a sliding-window layer (n_swa > 0). */
__device__ __forceinline__ int attn_lo(int p, int n_swa) { return n_swa > 0 && p + 1 - n_swa > 0 ? p + 1 - n_swa : 0; }

/* One tile's scores for the warp's m-tile: s[j] holds keys 8 j + 2 t +
 * 0..1 (t = lane % 4) of rows lane / 4 (s[j][0..1]) and lane / 4 + 8
 * (s[j][2..3]), sums over head_dim in steps of 16, in order. The m-tile's
 * `parts` warps share the work: this one computes the groups j of 8 keys
 * with j % parts == part. */
__device__ __forceinline__ void attn_scores(float s[4][4], const __half2 *qa, const __half2 *sk, int D2, int ld,
                                            int parts, int part) {
    int gq = (threadIdx.x & 31) >> 2, tq = threadIdx.x & 3;
    const __half2 *qb = qa + 8 * ld;
#pragma unroll
    for (int j = 0; j < 4; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
    for (int kk = 0; kk < D2; kk += 8) {
        uint32_t a[4] = {h2_bits(qa[kk]), h2_bits(qb[kk]), h2_bits(qa[kk + 4]), h2_bits(qb[kk + 4])};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            if (j % parts != part) continue;
            const __half2 *kb = sk + (8 * j + gq) * ld + kk + tq;
            mma_f16(s[j], a, h2_bits(kb[0]), h2_bits(kb[4]));
        }
    }
}

/* The m-tile's warps exchange their groups of scores through ss (16 rows
 * of AT_SLD floats): each then holds all four. Block-wide (a barrier). */
__device__ __forceinline__ void attn_share_scores(float s[4][4], float *ss, int parts, int part) {
    int gq = (threadIdx.x & 31) >> 2, tq = threadIdx.x & 3;
#pragma unroll
    for (int j = 0; j < 4; j++)
        if (j % parts == part) {
            *(float2 *)&ss[gq * AT_SLD + 8 * j + 2 * tq] = make_float2(s[j][0], s[j][1]);
            *(float2 *)&ss[(gq + 8) * AT_SLD + 8 * j + 2 * tq] = make_float2(s[j][2], s[j][3]);
        }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < 4; j++)
        if (j % parts != part) {
            float2 a = *(const float2 *)&ss[gq * AT_SLD + 8 * j + 2 * tq];
            float2 b = *(const float2 *)&ss[(gq + 8) * AT_SLD + 8 * j + 2 * tq];
            s[j][0] = a.x, s[j][1] = a.y, s[j][2] = b.x, s[j][3] = b.y;
        }
}

/* One row's online-softmax step over a tile (h: the lane's row lane / 4
 * + 8 h, its keys [lo, hi) of the tile): the scores scaled and masked
 * into weights rounded to half (w), the row's max m and sum l carried,
 * the rescale of its outputs returned (1 without keys here). */
__device__ __forceinline__ float attn_softmax_row(float s[4][4], float w[4][4], int h, int lo, int hi, float scale,
                                                  float &m, float &l) {
    int tq = threadIdx.x & 3, any = hi > lo && hi > 0;
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            int key = 8 * j + 2 * tq + e;
            s[j][2 * h + e] = key >= lo && key < hi ? s[j][2 * h + e] * scale : -INFINITY;
            mx = fmaxf(mx, s[j][2 * h + e]);
        }
    mx = quad_max(mx);
    float mn = any ? fmaxf(m, mx) : m, c = any ? expf(m - mn) : 1.0f, sum = 0.0f; /* c = 0 on the row's first keys */
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            int key = 8 * j + 2 * tq + e;
            float p = key >= lo && key < hi ? __half2float(__float2half_rn(expf(s[j][2 * h + e] - mn))) : 0.0f;
            w[j][2 * h + e] = p;
            sum += p;
        }
    sum = quad_sum(sum);
    l = l * c + sum;
    m = mn;
    return c;
}

/* ---- the fold: a token's segments' states into its output ------------------------ */

#define FOLD_THREADS 64     /* k_attn_fold's block */
#define FOLD_CHUNK 256      /* segments whose weights k_attn_fold holds at once */
#define FOLD_WARP_CHUNK 64  /* ... and a warp of decode's fold in its attention launch */
#define AT_ARRIVE_MAX 8192  /* (query block, KV head) counters: decode folds in its launch up to this many */

/* A fold's threads: k_attn_fold's block, or one warp (W: decode's fold
 * in the attention launch), and their barrier. */
template <int W>
__device__ __forceinline__ void fold_sync() {
    if (W) __syncwarp();
    else __syncthreads();
}

/* A state's float: past L1 in decode's fold (other blocks of the launch
 * wrote it), a plain load in k_attn_fold's (a launch before wrote it). */
template <int W>
__device__ __forceinline__ float fold_ld(const float *p) {
    return W ? __ldcg(p) : *p;
}

/* The largest m of a token's ns segments (states st floats apart): the
 * threads each take every N-th, then a tree (a max is the same in any
 * order; of +0 and -0 either may come out, and e^(m - M) is the same for
 * both). */
template <int W>
__device__ float fold_max(const float *ps, size_t st, int ns) {
    constexpr int N = W ? 32 : FOLD_THREADS;
    float m = -INFINITY;
    for (int s = threadIdx.x % N; s < ns; s += N) m = fmaxf(m, fold_ld<W>(ps + s * st));
    for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(FULL, m, o));
    if constexpr (W) {
        return m;
    } else {
        __shared__ float warp_max[FOLD_THREADS / 32];
        if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = m;
        __syncthreads();
        m = warp_max[0];
        for (int w = 1; w < FOLD_THREADS / 32; w++) m = fmaxf(m, warp_max[w]);
        return m;
    }
}

/* Token i's head h: its segments' states folded in segment order into
 * its output row (one segment: o / l, the same bits as no fold). Each
 * segment's weight e^(m - M) is computed once, by one thread, into
 * shared memory (sw, with its l in sl: FC floats each) a chunk of
 * segments at a time; every thread then sums l and its columns of o over
 * them in segment order (the loads of o's rows go out together: the loop
 * is unrolled, the sums are not reordered). The same operations for any
 * thread count and chunk: k_attn_fold and decode's fold give the same
 * bits. */
template <int W, int FC>
__device__ void fold_token_head(float *out, const float *part, const int32_t *pos, int i, int h, int n_head, int D,
                                int seg_cap, int n_swa, float *sw, float *sl) {
    constexpr int N = W ? 32 : FOLD_THREADS, NO = AT_MAX_DIM / N;
    int t = threadIdx.x % N, s0 = attn_lo(pos[i], n_swa) / CUDA_ATTN_SEG;
    int ns = (pos[i] + CUDA_ATTN_SEG) / CUDA_ATTN_SEG - s0; /* its segments: s0, s0 + 1, ... */
    size_t st = (size_t)D + 2;
    const float *ps = part + (((size_t)i * n_head + h) * seg_cap + s0) * st;
    float M = fold_max<W>(ps, st, ns), L = 0.0f, O[NO] = {};
    for (int c0 = 0; c0 < ns; c0 += FC) {
        int m = min(FC, ns - c0);
        const float *pc = ps + c0 * st;
        fold_sync<W>(); /* the last chunk's readers are done */
        for (int s = t; s < m; s += N) {
            sw[s] = expf(fold_ld<W>(pc + s * st) - M);
            sl[s] = fold_ld<W>(pc + s * st + 1);
        }
        fold_sync<W>();
        for (int s = 0; s < m; s++) L += sl[s] * sw[s];
#pragma unroll
        for (int j = 0; j < NO; j++) {
            int d = t + j * N;
            if (d >= D) break;
#pragma unroll 8
            for (int s = 0; s < m; s++) O[j] += fold_ld<W>(pc + s * st + 2 + d) * sw[s];
        }
    }
#pragma unroll
    for (int j = 0; j < NO; j++) {
        int d = t + j * N;
        if (d < D) out[((size_t)i * n_head + h) * D + d] = O[j] / L;
    }
}

/* A block a (head, token) (prefill's fold, after its attention launch). */
__global__ void __launch_bounds__(FOLD_THREADS) k_attn_fold(float *out, const float *part, const int32_t *pos,
                                                            int n_head, int D, int seg_cap, int n_swa) {
    __shared__ float sw[FOLD_CHUNK], sl[FOLD_CHUNK];
    fold_token_head<0, FOLD_CHUNK>(out, part, pos, blockIdx.y, blockIdx.x, n_head, D, seg_cap, n_swa, sw, sl);
}

/* Decode's fold inside its attention launch (a block of queries a run:
 * the tokens [i0, i0 + nq)): each block of KV head g counts itself in
 * its (query block, g) counter once its states are written (a block of a
 * segment without keys too); the last to arrive folds the rows of g's
 * query heads, a warp a row, into out, and sets the count back to zero
 * for the next launch. Saves
 * k_attn_fold's launch, a wait between two kernels in every attention
 * layer of a decode step. scratch: 2 FOLD_WARP_CHUNK floats a warp of
 * shared memory the block is done with. Not inlined: the fold's
 * registers (a lane's 8 columns of head_dim 256, their loads in flight)
 * stay out of the attention loop's (ptxas spilled there). */
__device__ __noinline__ void attn_arrive(int *arrive, float *out, const float *part, const int32_t *pos, int i0, int nq,
                                         int g, int hpg, int n_head, int D, int seg_cap, int n_swa, float *scratch) {
    __shared__ int s_last;
    int *count = arrive + (size_t)blockIdx.y * gridDim.x + g;
    __threadfence(); /* this block's states, before its count */
    __syncthreads();
    if (threadIdx.x == 0) s_last = atomicAdd(count, 1) == (int)gridDim.z - 1;
    __syncthreads();
    if (!s_last) return;
    __threadfence(); /* the others' counts, before their states (loaded past L1) */
    int warp = threadIdx.x >> 5;
    float *sw = scratch + warp * 2 * FOLD_WARP_CHUNK, *sl = sw + FOLD_WARP_CHUNK;
    for (int r = warp; r < nq * hpg; r += AT_WARPS)
        fold_token_head<1, FOLD_WARP_CHUNK>(out, part, pos, i0 + r / hpg, g * hpg + r % hpg, n_head, D, seg_cap,
                                            n_swa, sw, sl);
    if (threadIdx.x == 0) *count = 0;
}

template <int NT>
__global__ void __launch_bounds__(AT_THREADS, 4)
    k_attn_seg(float *part, const float *q, const __half *kc, const __half *vc, kv_ref kr, const int32_t *pos, int n,
               int qt, const int32_t *yb, int n_head, int n_head_kv, int D, float scale, int seg_cap, int n_swa,
               int stages, int *arrive, float *folded) {
    int g = blockIdx.x, s = blockIdx.z, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int hpg = n_head / n_head_kv, kvd = n_head_kv * D, k0 = s * CUDA_ATTN_SEG, D2 = D / 2, ld = D2 + AT_PAD;
    /* the block's tokens [i0, i0 + nq): one run's, from the list yb (a
     * batch of sequences: its table's place too), or the call's y-th qt */
    int i0 = yb ? yb[3 * blockIdx.y] : blockIdx.y * qt, nq = yb ? yb[3 * blockIdx.y + 1] : min(qt, n - i0);
    if (yb && kr.table) kr.table += yb[3 * blockIdx.y + 2];
    int rows = nq * hpg, mt = attn_mtiles(rows);
    int parts = AT_WARPS / mt, mtile = warp % mt, cpart = warp / mt, nt = D / (8 * parts), gq = lane >> 2, tq = lane & 3;
    /* each token's keys in this segment: [s_beg, s_end), none when s_end <= s_beg */
    __shared__ int s_end[AT_MAX_ROWS], s_beg[AT_MAX_ROWS];
    __shared__ size_t s_row[CUDA_ATTN_SEG]; /* key k0 + j's K and V rows of head g: halves from the bases */
    if (tid < nq) {
        s_end[tid] = min(k0 + CUDA_ATTN_SEG, pos[i0 + tid] + 1);
        s_beg[tid] = max(k0, attn_lo(pos[i0 + tid], n_swa));
    }
    __syncthreads();
    int kend = k0, kbeg = k0 + CUDA_ATTN_SEG;
    for (int tt = 0; tt < nq; tt++)
        if (s_end[tt] > s_beg[tt]) kend = max(kend, s_end[tt]), kbeg = min(kbeg, s_beg[tt]);
    extern __shared__ uint4 smem16[]; /* 16-byte aligned: the tiles' copies are */
    if (kend <= k0) { /* the whole block: no token has keys here */
        if (arrive) attn_arrive(arrive, folded, part, pos, i0, nq, g, hpg, n_head, D, seg_cap, n_swa, (float *)smem16);
        return;
    }
    /* the keys the tiles load, from the first tile's (kend and kbeg are
     * the block's, so s_row is read after the loop's first barrier); a
     * key of the first tile before kbeg is no row's (its weight is zero)
     * and may lie in a pool block before a sliding window, with no slot
     * (blocks of fewer than AT_KT tokens): it reads kbeg's row */
    int tfirst = k0 + (kbeg - k0) / AT_KT * AT_KT;
    for (int j = tfirst - k0 + tid; j < kend - k0; j += AT_THREADS)
        s_row[j] = kv_row_at(kr, max(k0 + j, kbeg), kvd) + (size_t)g * D;
    /* shared memory, sized by the launch (attn_smem): the m-tiles' shared
     * scores, their queries in half (rows past the block's zero), the K/V
     * tiles (a ring of `stages` slots: the block's i-th tile in slot i % stages) */
    float *sscore = (float *)smem16;
    __half2 *sq = (__half2 *)(sscore + 16 * mt * AT_SLD), *tiles = sq + 16 * mt * ld;
    int tile_h2 = attn_tile_h2(D), ahead = (stages - 1) * AT_KT;
    for (int x = tid; x < 16 * mt * D2; x += AT_THREADS) {
        int r = x / D2, d2 = x % D2;
        float2 v = make_float2(0.0f, 0.0f);
        if (r < rows) v = ((const float2 *)(q + ((size_t)(i0 + r / hpg) * n_head + (size_t)g * hpg + r % hpg) * D))[d2];
        sq[r * ld + d2] = __floats2half2_rn(v.x, v.y);
    }
    /* the lane's two rows (lane / 4 and lane / 4 + 8 of its m-tile): their
     * keys in the segment, max, sum and outputs (o[u]: columns cpart * D /
     * parts + 8 u + 2 t + 0..1, the rows as the scores) */
    int lo[2], hi[2];
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, o[NT][4];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int r = 16 * mtile + gq + 8 * h;
        lo[h] = r < rows ? s_beg[r / hpg] : 1;
        hi[h] = r < rows ? s_end[r / hpg] : 0;
    }
#pragma unroll
    for (int u = 0; u < NT; u++) o[u][0] = o[u][1] = o[u][2] = o[u][3] = 0.0f;
    /* tiles at fixed places (k0 + a multiple of AT_KT), from the one
     * holding the first key; with a ring of stages, each tile's copies
     * start stages - 1 tiles before it is used (the arithmetic, and so
     * the bits, are the same either way) */
    int fill = 0, use = 0; /* the slots of the tile whose copies start next and of the tile used next */
    for (int t0 = tfirst - ahead; t0 < kend; t0 += AT_KT) { /* the first stages - 1 passes only start copies */
        __syncthreads(); /* the last tile's readers are done (and sq and s_row are in) */
        int tn = t0 + ahead; /* the tile whose copies start now */
        if (tn < kend) {
            __half2 *b = tiles + fill * tile_h2;
            attn_stage(b, b + AT_KT * ld, kc, vc, s_row + (tn - k0), min(AT_KT, kend - tn), D);
            fill = fill + 1 < stages ? fill + 1 : 0;
        }
        if (t0 < tfirst) continue;
        /* this tile's copies; the later tiles' (as many as were started) may go on */
        cp_async_wait_upto(min(stages - 1, (kend - 1 - t0) / AT_KT));
        __syncthreads();
        const __half2 *sk = tiles + use * tile_h2, *sv = sk + AT_KT * ld;
        use = use + 1 < stages ? use + 1 : 0;
        float sc[4][4], w[4][4];
        attn_scores(sc, sq + (16 * mtile + gq) * ld + tq, sk, D2, ld, parts, cpart);
        if (parts > 1) attn_share_scores(sc, sscore + 16 * mtile * AT_SLD, parts, cpart); /* block-uniform */
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float c = attn_softmax_row(sc, w, h, lo[h] - t0, min(hi[h] - t0, AT_KT), scale, m[h], l[h]);
#pragma unroll
            for (int u = 0; u < NT; u++) o[u][2 * h] *= c, o[u][2 * h + 1] *= c;
        }
        /* outputs += weights (16 x 32) x V (32 x the part's columns), keys
         * in two steps of 16 */
        const __half *vh = (const __half *)sv;
        int lv = 2 * ld; /* halves a V row */
#pragma unroll
        for (int ks = 0; ks < 2; ks++) {
            uint32_t a[4] = {h2_bits(__floats2half2_rn(w[2 * ks][0], w[2 * ks][1])),
                             h2_bits(__floats2half2_rn(w[2 * ks][2], w[2 * ks][3])),
                             h2_bits(__floats2half2_rn(w[2 * ks + 1][0], w[2 * ks + 1][1])),
                             h2_bits(__floats2half2_rn(w[2 * ks + 1][2], w[2 * ks + 1][3]))};
            const __half *v0 = vh + (16 * ks + 2 * tq) * lv + cpart * (D / parts) + gq;
#pragma unroll
            for (int u = 0; u < NT; u++)
                if (u < nt)
                    mma_f16(o[u], a, halves_bits(v0[8 * u], v0[8 * u + lv]),
                            halves_bits(v0[8 * u + 8 * lv], v0[8 * u + 9 * lv]));
        }
    }
    /* state of (token i, head h, segment s): m, l, o[D]; tokens without
     * keys here write nothing (the fold stops at their last segment) */
    size_t st = (size_t)D + 2;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int r = 16 * mtile + gq + 8 * h;
        if (r >= rows || s_end[r / hpg] <= s_beg[r / hpg]) continue;
        float *out = part + (((size_t)(i0 + r / hpg) * n_head + (size_t)g * hpg + r % hpg) * seg_cap + s) * st;
        if (cpart == 0 && tq == 0) out[0] = m[h], out[1] = l[h];
#pragma unroll
        for (int u = 0; u < NT; u++)
            if (u < nt) {
                int col = cpart * (D / parts) + 8 * u + 2 * tq;
                out[2 + col] = o[u][2 * h], out[3 + col] = o[u][2 * h + 1];
            }
    }
    if (arrive) attn_arrive(arrive, folded, part, pos, i0, nq, g, hpg, n_head, D, seg_cap, n_swa, sscore);
}

/* Decode's fold counts (attn_arrive): zero between launches; and whether
 * decode folds in its attention launch (STRATA_CUDA_ATTN_FOLD=0: never,
 * to time the choice). Set by attn_init. */
static int *g_attn_arrive;
static int g_attn_fold_in = 1;

/* The kernels may use the opt-in limit less their static shared memory
 * (allow_smem); two tiles of head_dim 256, 32 rows of queries and their
 * scores (87.5 KiB) must fit. */
int attn_init(int optin_bytes, strata_err *err) {
    decltype(&k_attn_seg<2>) kernels[] = {k_attn_seg<2>, k_attn_seg<4>, k_attn_seg<8>, k_attn_seg<16>};
    int bytes = 0;
    cudaError_t e = allow_smem_left(kernels, optin_bytes, &bytes);
    if (e == cudaSuccess && bytes < (int)AT_SMEM_MIN)
        return strata_errf(err, STRATA_EUNSUPPORTED,
                           "cuda: attention needs %d bytes of shared memory a block, the device allows %d",
                           (int)AT_SMEM_MIN, bytes);
    if (e != cudaSuccess)
        return strata_errf(err, STRATA_EUNSUPPORTED, "cuda: allowing attention %d bytes of shared memory: %s", bytes,
                           cudaGetErrorString(e));
    g_attn_smem_max = (size_t)bytes;
    if ((e = cudaMalloc((void **)&g_attn_arrive, AT_ARRIVE_MAX * sizeof(int))) != cudaSuccess ||
        (e = cudaMemsetAsync(g_attn_arrive, 0, AT_ARRIVE_MAX * sizeof(int), g_stream)) != cudaSuccess)
        return strata_errf(err, STRATA_EUNSUPPORTED, "cuda: attention's fold counts: %s", cudaGetErrorString(e));
    const char *f = getenv("STRATA_CUDA_ATTN_FOLD");
    g_attn_fold_in = !(f && !strcmp(f, "0"));
    return 0;
}

/* K/V tiles a block keeps in shared memory (a launch parameter only: the
 * bits do not depend on it). A launch whose queries fit one tile
 * (decode: a block or two an SM, each waiting on its every load
 * otherwise) keeps a segment's tiles in flight, as many as shared memory
 * holds (2 at least: attn_init); a prefill's many blocks hide the loads
 * by each other, and more tiles would cost it blocks an SM (H100,
 * 2026-11-27: two tiles on every launch made pp512 9-26% slower): one,
 * loaded before use. STRATA_CUDA_ATTN_STAGES=n: n for every launch
 * (where shared memory holds them), to time the choice. */
static int attn_stages(int one_tile_of_queries, int rows, int D) {
    static int env = -1;
    if (env < 0) {
        const char *e = getenv("STRATA_CUDA_ATTN_STAGES");
        env = e ? atoi(e) : 0;
    }
    int want = env > 0 ? env : one_tile_of_queries ? AT_SEG_TILES : 1, stages = 1;
    while (stages < want && stages < AT_SEG_TILES && attn_smem(rows, D, stages + 1) <= g_attn_smem_max) stages++;
    return stages;
}

extern "C" size_t cuda_attention_scratch(int max_tok, int n_head, int head_dim, int max_ctx) {
    return (size_t)max_tok * n_head * attn_segs(max_ctx) * (head_dim + 2);
}

extern "C" int cuda_attention_block_tokens(int n_head, int n_head_kv, int head_dim) {
    return n_head_kv > 0 && n_head % n_head_kv == 0 ? attn_max_rows(head_dim) / (n_head / n_head_kv) : 0;
}

/* The query blocks of a launch: a run's tokens each (yb: a list of n_yb,
 * none past max_nq tokens; decode: each is its run's only one), or the
 * call's n tokens, one run, qt a block (yb NULL: decode when one block
 * holds them all). */
struct attn_blocks {
    const int32_t *yb;
    int n_yb, max_nq, decode;
};

static int attention(float *d_out, float *d_scratch, const float *d_q, const uint16_t *d_kc, const uint16_t *d_vc,
                     const kv_ref &kr, const attn_blocks &qb, const int32_t *d_pos, int n, int max_end, int max_ctx,
                     int n_head, int n_head_kv, int head_dim, float scale, int n_swa, strata_err *err) {
    if (head_dim > AT_MAX_DIM || head_dim % 32 || n_head_kv <= 0 || n_head % n_head_kv ||
        n_head / n_head_kv > AT_MAX_GROUP)
        return strata_errf(err, STRATA_EUNSUPPORTED,
                           "cuda attention: head_dim %d, %d heads over %d KV heads (head_dim a multiple of 32 up to "
                           "%d, at most %d query heads a KV head)",
                           head_dim, n_head, n_head_kv, AT_MAX_DIM, AT_MAX_GROUP);
    if (max_end > max_ctx)
        return strata_errf(err, STRATA_EINVAL, "cuda attention: keys up to %d past the scratch's %d", max_end, max_ctx);
    if (((uintptr_t)d_kc | (uintptr_t)d_vc) % 16 || kr.blk % 8)
        return strata_errf(err, STRATA_EINVAL, "cuda attention: K/V rows not 16-byte aligned (the tiles' copies)");
    if (n <= 0) return 0;
    int seg_cap = attn_segs(max_ctx), segs = attn_segs(max_end), hpg = n_head / n_head_kv;
    int qt = qb.yb ? cuda_attention_block_tokens(n_head, n_head_kv, head_dim)
                   : attn_qt(n, n_head_kv, segs, hpg, head_dim);
    int rows = (qb.yb ? qb.max_nq : qt < n ? qt : n) * hpg;
    int nt = head_dim / (8 * (AT_WARPS / attn_mtiles(rows))); /* a full block's; the last's is no more */
    dim3 grid(n_head_kv, qb.yb ? qb.n_yb : (n + qt - 1) / qt, segs);
    int decode = qb.yb ? qb.decode : grid.y == 1;
    int stages = attn_stages(decode, rows, head_dim);
    size_t smem = attn_smem(rows, head_dim, stages);
    int *arrive = decode && grid.x * grid.y <= AT_ARRIVE_MAX && g_attn_fold_in ? g_attn_arrive : NULL;
    const __half *kh = (const __half *)d_kc, *vh = (const __half *)d_vc;
#define AT_GO(t)                                                                                                   \
    k_attn_seg<t><<<grid, AT_THREADS, smem, g_stream>>>(d_scratch, d_q, kh, vh, kr, d_pos, n, qt, qb.yb, n_head,  \
                                                         n_head_kv, head_dim, scale, seg_cap, n_swa, stages, arrive, \
                                                         d_out)
    if (nt <= 2) AT_GO(2);
    else if (nt <= 4) AT_GO(4);
    else if (nt <= 8) AT_GO(8);
    else AT_GO(16);
#undef AT_GO
    if (!arrive)
        k_attn_fold<<<dim3(n_head, n), FOLD_THREADS, 0, g_stream>>>(d_out, d_scratch, d_pos, n_head, head_dim, seg_cap,
                                                                    n_swa);
    return 0;
}

extern "C" int cuda_attention(float *d_out, float *d_scratch, const float *d_q, const uint16_t *d_kc,
                              const uint16_t *d_vc, const int32_t *d_pos, int n, int max_end, int max_ctx, int n_head,
                              int n_head_kv, int head_dim, float scale, strata_err *err) {
    kv_ref contiguous = {NULL, 1, 0};
    attn_blocks one_run = {NULL, 0, 0, 0};
    return attention(d_out, d_scratch, d_q, d_kc, d_vc, contiguous, one_run, d_pos, n, max_end, max_ctx, n_head,
                     n_head_kv, head_dim, scale, 0, err);
}

extern "C" int cuda_attention_window(float *d_out, float *d_scratch, const float *d_q, const uint16_t *d_kc,
                                     const uint16_t *d_vc, const int32_t *d_pos, int n, int max_end, int max_ctx,
                                     int n_head, int n_head_kv, int head_dim, float scale, int n_swa,
                                     strata_err *err) {
    kv_ref contiguous = {NULL, 1, 0};
    attn_blocks one_run = {NULL, 0, 0, 0};
    return attention(d_out, d_scratch, d_q, d_kc, d_vc, contiguous, one_run, d_pos, n, max_end, max_ctx, n_head,
                     n_head_kv, head_dim, scale, n_swa, err);
}

extern "C" int cuda_attention_paged(float *d_out, float *d_scratch, const float *d_q, const uint16_t *d_k,
                                    const uint16_t *d_v, const int32_t *d_table, int block_tokens,
                                    size_t block_halves, const int32_t *d_pos, int n, const int32_t *d_blocks,
                                    const int32_t *h_blocks, int n_blocks, int one_block_a_run, int max_end,
                                    int max_ctx, int n_head, int n_head_kv, int head_dim, float scale, int n_swa,
                                    strata_err *err) {
    if (!d_table || block_tokens <= 0)
        return strata_errf(err, STRATA_EINVAL, "cuda attention: a paged call without a block table");
    int most = cuda_attention_block_tokens(n_head, n_head_kv, head_dim), max_nq = 0;
    for (int i = 0; i < n_blocks; i++) {
        const int32_t *b = h_blocks + 3 * i;
        if (b[1] <= 0 || b[1] > most || b[0] < 0 || b[0] + b[1] > n || b[2] < 0)
            return strata_errf(err, STRATA_EINVAL, "cuda attention: query block %d (tokens [%d, %d) of %d, at most %d)",
                               i, b[0], b[0] + b[1], n, most);
        if (b[1] > max_nq) max_nq = b[1];
    }
    if (n_blocks <= 0 || n_blocks > 65535)
        return strata_errf(err, STRATA_EINVAL, "cuda attention: %d query blocks", n_blocks);
    kv_ref paged = {d_table, block_tokens, block_halves};
    attn_blocks runs = {d_blocks, n_blocks, max_nq, one_block_a_run};
    return attention(d_out, d_scratch, d_q, d_k, d_v, paged, runs, d_pos, n, max_end, max_ctx, n_head, n_head_kv,
                     head_dim, scale, n_swa, err);
}

/* ---- argmax ----------------------------------------------------------------------- */

/* First index of the largest value; NaN never wins (as sample.c's argmax:
 * a row of NaN and -inf gives 0). */
__global__ void k_argmax(int32_t *idx, const float *x, int n) {
    __shared__ float bv[256];
    __shared__ int bi[256];
    const float *r = x + (size_t)blockIdx.x * n;
    float best = -INFINITY;
    int at = n;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        if (r[i] > best) best = r[i], at = i;
    bv[threadIdx.x] = best;
    bi[threadIdx.x] = at;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            float v = bv[threadIdx.x + s];
            int j = bi[threadIdx.x + s];
            if (v > bv[threadIdx.x] || (v == bv[threadIdx.x] && j < bi[threadIdx.x])) bv[threadIdx.x] = v, bi[threadIdx.x] = j;
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) idx[blockIdx.x] = bi[0] < n ? bi[0] : 0;
}

extern "C" void cuda_argmax(int32_t *d_idx, const float *d_x, int n_rows, int n) {
    if (n_rows > 0) k_argmax<<<n_rows, 256, 0, g_stream>>>(d_idx, d_x, n);
}
