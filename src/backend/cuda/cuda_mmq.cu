/* cuda_mmq.cu - the quantized matmul on the tensor cores (Q4_0, Q4_1,
 * Q5_0, Q5_1, Q8_0 weights): activations quantized to 8 bits per block
 * of 32, integer products by mma.sync m16n8k32 (s8 x s8 -> s32), one
 * 32-block per mma, so each block's integer dot is exact whatever the
 * order of its products.
 *
 * Activations: block b of token t gets d = amax / 127, q = round(x * 127
 * / amax) (half away from zero) and s = d * sum(q): the CPU's Q8_1
 * quantization (backend/quant_act_impl.h, q8_block), the same int8
 * values. Each block computes it for its own token tile and k chunk into
 * shared memory: no extra launch, no buffer; a (token, block) pair always
 * gets the same bytes, whichever block computes it.
 *
 * Numerics of one output (row r, token t), fixed by k alone: for the
 * 32-blocks b = 0, 1, ... in order,
 *     v = (float)isum_b * (dw_b * dx_b)      [+ mw_b * sx_b for Q4_1/Q5_1]
 *     acc = acc + v
 * where isum_b is the exact integer dot of the weight block's integers
 * (the 4/5/8-bit values, offset by -8/-16 for Q4_0/Q5_0) with the
 * activation block's int8. No split over k, no atomics: the token tile
 * (8 or 64 tokens), the rows a warp takes and the launch's parts only
 * place the work, so a row's bits are the same in any batch, chunk or
 * fused launch (tests/test_cuda.c checks it with memcmp).
 *
 * Layout: a block of MM_WARPS warps; warp w takes MR tiles of 16 rows
 * (SwiGLU: 16 rows of gate and the same 16 of up) against NT tiles of 8
 * tokens; weights are read straight from global memory (each 4-byte word
 * of quants serves two k-groups of the mma's A fragment: a block's low
 * nibbles are its elements 0-15, its high nibbles 16-31), the tile's
 * quantized activations from shared memory. */
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "backend/cuda/cuda_int.h"

int mmq_type(qtype t) { return t == QT_Q4_0 || t == QT_Q4_1 || t == QT_Q5_0 || t == QT_Q5_1 || t == QT_Q8_0; }

__device__ __forceinline__ uint32_t ld16x2(const uint8_t *p) { /* 2-byte aligned */
    const unsigned short *h = (const unsigned short *)p;
    return (uint32_t)__ldg(h) | ((uint32_t)__ldg(h + 1) << 16);
}

__device__ __forceinline__ float ldhf(const uint8_t *p) {
    return __half2float(__ushort_as_half(__ldg((const unsigned short *)p)));
}

/* Bits 0-3 of x to bit 4 of bytes 0-3 (Q5's fifth bits). */
__device__ __forceinline__ uint32_t hbits(uint32_t x) {
    return ((x & 1u) << 4) | ((x & 2u) << 11) | ((x & 4u) << 18) | ((x & 8u) << 25);
}

/* Weight block b of a row, lane group t (0-3): lo = its int8 values
 * 4t..4t+3, hi = 16+4t..16+4t+3 (the mma's k order), d, and m (the min;
 * 0 without one). */
template <int T>
__device__ __forceinline__ void mq_wblock(const uint8_t *row, int b, int t, uint32_t &lo, uint32_t &hi, float &d,
                                          float &m) {
    if (T == QT_Q4_0) {
        const uint8_t *p = row + (size_t)b * 18;
        uint32_t w = ld16x2(p + 2 + 4 * t);
        d = ldhf(p), m = 0.0f;
        lo = __vsub4(w & 0x0f0f0f0fu, 0x08080808u);
        hi = __vsub4((w >> 4) & 0x0f0f0f0fu, 0x08080808u);
    } else if (T == QT_Q4_1) {
        const uint8_t *p = row + (size_t)b * 20;
        uint32_t w = __ldg((const unsigned int *)(p + 4 + 4 * t));
        d = ldhf(p), m = ldhf(p + 2);
        lo = w & 0x0f0f0f0fu;
        hi = (w >> 4) & 0x0f0f0f0fu;
    } else if (T == QT_Q5_0) {
        const uint8_t *p = row + (size_t)b * 22;
        uint32_t qh = ld16x2(p + 2), w = ld16x2(p + 6 + 4 * t);
        d = ldhf(p), m = 0.0f;
        lo = __vsub4((w & 0x0f0f0f0fu) | hbits(qh >> (4 * t)), 0x10101010u);
        hi = __vsub4(((w >> 4) & 0x0f0f0f0fu) | hbits(qh >> (16 + 4 * t)), 0x10101010u);
    } else if (T == QT_Q5_1) {
        const uint8_t *p = row + (size_t)b * 24;
        uint32_t qh = __ldg((const unsigned int *)(p + 4)), w = __ldg((const unsigned int *)(p + 8 + 4 * t));
        d = ldhf(p), m = ldhf(p + 2);
        lo = (w & 0x0f0f0f0fu) | hbits(qh >> (4 * t));
        hi = ((w >> 4) & 0x0f0f0f0fu) | hbits(qh >> (16 + 4 * t));
    } else { /* Q8_0 */
        const uint8_t *p = row + (size_t)b * 34;
        d = ldhf(p), m = 0.0f;
        lo = ld16x2(p + 2 + 4 * t);
        hi = ld16x2(p + 18 + 4 * t);
    }
}

/* c = A (16 x 32 s8, rows g and g + 8 of the lane) x B (32 x 8 s8). */
__device__ __forceinline__ void mma_s8(int c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%10,%11,%12,%13};"
                 : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0), "r"(0), "r"(0), "r"(0));
}

/* One block's term of one output (the header's expression). */
template <int MIN>
__device__ __forceinline__ float mq_term(int isum, float dw, float dx, float mw, float sx) {
    float v = (float)isum * (dw * dx);
    return MIN ? v + mw * sx : v;
}

/* Round half away from zero (quant_act_impl.h round_q). */
__device__ __forceinline__ int mq_round(float v) { return (int)(v + (v >= 0.0f ? 0.5f : -0.5f)); }

/* The activations' 8-bit form, once per launch (every row tile reads
 * it): 8 threads per (token, 32-block), 4 values each. xq [n][k] int8,
 * xd and xs [n][k / 32]: d and d * sum(q). */
__global__ void k_q8x(int8_t *xq, float *xd, float *xs, const float *__restrict__ x, int k, int pairs) {
    int task = blockIdx.x * blockDim.x + threadIdx.x, pair = task >> 3, sub = task & 7, nb = k / 32;
    /* whole groups of 8 leave together: the shuffles below stay within live lanes */
    if (pair >= pairs) return;
    int tok = pair / nb, blk = pair % nb;
    float4 v = __ldg((const float4 *)(x + (size_t)tok * k + blk * 32 + sub * 4));
    float a = fabsf(v.x), amax = 0.0f; /* q8_block's order-free maximum (a NaN never wins) */
    amax = a > amax ? a : amax;
    a = fabsf(v.y), amax = a > amax ? a : amax;
    a = fabsf(v.z), amax = a > amax ? a : amax;
    a = fabsf(v.w), amax = a > amax ? a : amax;
    unsigned grp = 0xffu << (threadIdx.x & 24); /* this pair's 8 lanes */
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(grp, amax, o));
    float d = amax / 127.0f, id = amax > 0.0f ? 127.0f / amax : 0.0f;
    int q0 = mq_round(v.x * id), q1 = mq_round(v.y * id), q2 = mq_round(v.z * id), q3 = mq_round(v.w * id);
    int sum = q0 + q1 + q2 + q3;
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) sum += __shfl_xor_sync(grp, sum, o);
    ((uint32_t *)xq)[(size_t)tok * (k / 4) + blk * 8 + sub] =
        (uint32_t)(q0 & 255) | ((uint32_t)(q1 & 255) << 8) | ((uint32_t)(q2 & 255) << 16) | ((uint32_t)q3 << 24);
    if (sub == 0) {
        xd[(size_t)tok * nb + blk] = d;
        xs[(size_t)tok * nb + blk] = d * (float)sum;
    }
}

/* Warp: MR tiles of 16 rows x NT tiles of 8 tokens; the quants of both
 * operands straight from global memory (each k-block's loads are
 * independent of the sums, so they are in flight ahead of them). */
template <int T, int NT, int MR>
__global__ void __launch_bounds__(MM_WARPS * 32) k_mmq(const mm_job job, const int8_t *__restrict__ xq,
                                                       const float *__restrict__ xd, const float *__restrict__ xs) {
    constexpr int MIN = T == QT_Q4_1 || T == QT_Q5_1;
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int gw = blockIdx.x * MM_WARPS + (threadIdx.x >> 5), part = -1;
    mm_part P = job.p[0];
#pragma unroll
    for (int i = 0; i < MM_PARTS; i++) { /* constant indices: the job stays in parameter space */
        if (part >= 0 || i >= job.np) continue;
        if (gw < job.p[i].warps) part = i, P = job.p[i];
        else gw -= job.p[i].warps;
    }
    if (part < 0) return;
    const int swiglu = job.mode == MM_SWIGLU, k = job.k, n = job.n, nb = k / 32, t0 = blockIdx.y * NT * 8;
    int rbase[MR];
    const uint8_t *wlo[MR], *whi[MR]; /* rows rbase + g and rbase + g + 8 (clamped to a real row) */
#pragma unroll
    for (int i = 0; i < MR; i++) {
        rbase[i] = swiglu ? gw * 16 : (gw * MR + i) * 16;
        const uint8_t *w = swiglu && i == 1 ? job.p[1].w : P.w;
        int ra = rbase[i] + g, rb = ra + 8;
        wlo[i] = w + (size_t)(ra < P.rows ? ra : 0) * job.row_bytes;
        whi[i] = w + (size_t)(rb < P.rows ? rb : 0) * job.row_bytes;
    }
    /* the lane's tokens, clamped to real ones (the others' sums are dropped) */
    const uint32_t *xb[NT];
    int tk0[NT], tk1[NT];
#pragma unroll
    for (int j = 0; j < NT; j++) {
        int tb = t0 + j * 8;
        xb[j] = (const uint32_t *)(xq + (size_t)min(tb + g, n - 1) * k) + t;
        tk0[j] = min(tb + 2 * t, n - 1) * nb, tk1[j] = min(tb + 2 * t + 1, n - 1) * nb;
    }
    float acc[MR][NT][4];
#pragma unroll
    for (int i = 0; i < MR; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int c = 0; c < 4; c++) acc[i][j][c] = 0.0f;
    /* U k-blocks at a time: all their loads first, then their sums in
     * block order (decode has few warps: its latency is the loads') */
    constexpr int U = NT == 1 ? 8 : 2;
    for (int b0 = 0; b0 < nb; b0 += U) {
        uint32_t a[U][MR][4], bx[U][NT][2];
        float dlo[U][MR], dhi[U][MR], mlo[U][MR], mhi[U][MR], dx[U][NT][2], sx[U][NT][2];
#pragma unroll
        for (int u = 0; u < U; u++) {
            int b = b0 + u;
            if (b >= nb) break;
#pragma unroll
            for (int i = 0; i < MR; i++) {
                mq_wblock<T>(wlo[i], b, t, a[u][i][0], a[u][i][2], dlo[u][i], mlo[u][i]);
                mq_wblock<T>(whi[i], b, t, a[u][i][1], a[u][i][3], dhi[u][i], mhi[u][i]);
            }
#pragma unroll
            for (int j = 0; j < NT; j++) {
                bx[u][j][0] = __ldg(xb[j] + b * 8), bx[u][j][1] = __ldg(xb[j] + b * 8 + 4);
                dx[u][j][0] = __ldg(xd + tk0[j] + b), dx[u][j][1] = __ldg(xd + tk1[j] + b);
                sx[u][j][0] = MIN ? __ldg(xs + tk0[j] + b) : 0.0f, sx[u][j][1] = MIN ? __ldg(xs + tk1[j] + b) : 0.0f;
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (b0 + u >= nb) break;
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int i = 0; i < MR; i++) {
                    int c[4];
                    mma_s8(c, a[u][i], bx[u][j][0], bx[u][j][1]);
                    acc[i][j][0] = acc[i][j][0] + mq_term<MIN>(c[0], dlo[u][i], dx[u][j][0], mlo[u][i], sx[u][j][0]);
                    acc[i][j][1] = acc[i][j][1] + mq_term<MIN>(c[1], dlo[u][i], dx[u][j][1], mlo[u][i], sx[u][j][1]);
                    acc[i][j][2] = acc[i][j][2] + mq_term<MIN>(c[2], dhi[u][i], dx[u][j][0], mhi[u][i], sx[u][j][0]);
                    acc[i][j][3] = acc[i][j][3] + mq_term<MIN>(c[3], dhi[u][i], dx[u][j][1], mhi[u][i], sx[u][j][1]);
                }
        }
    }
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int c = 0; c < 4; c++) {
            int tok = t0 + j * 8 + 2 * t + (c & 1), r = rbase[0] + g + (c >> 1) * 8;
            if (tok >= n) continue;
            if (swiglu) {
                if (r < P.rows) P.y[(size_t)tok * P.rows + r] = swiglu1(acc[0][j][c], acc[MR - 1][j][c]);
                continue;
            }
#pragma unroll
            for (int i = 0; i < MR; i++) {
                int ri = rbase[i] + g + (c >> 1) * 8;
                if (ri >= P.rows) continue;
                float *y = P.y + (size_t)tok * P.rows + ri;
                *y = job.mode == MM_ADD ? *y + acc[i][j][c] : acc[i][j][c];
            }
        }
}

/* The 8-bit activations' buffer (one per process, like the stream it is
 * used on), grown as needed but never while a graph is being recorded:
 * cuda_matmul_reserve sizes it beforehand (the forward pass does, for its
 * largest batch), and a shortfall while recording is an error. */
static int8_t *g_xq;
static size_t g_xq_cap;

static int xq_reserve(size_t bytes, strata_err *err) {
    if (bytes <= g_xq_cap) return 0;
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    cudaStreamIsCapturing(g_stream, &cs);
    size_t want = bytes > ((size_t)8 << 20) ? bytes : ((size_t)8 << 20);
    if (cs != cudaStreamCaptureStatusNone)
        return strata_errf(err, STRATA_EINVAL, "cuda: 8-bit activations need %zu bytes while recording a graph", bytes);
    cudaStreamSynchronize(g_stream); /* the old buffer's readers are done */
    cudaFree(g_xq);
    g_xq_cap = 0;
    cudaError_t e = cudaMalloc((void **)&g_xq, want);
    if (e != cudaSuccess) {
        g_xq = NULL;
        return strata_errf(err, STRATA_ENOMEM, "cuda: %zu bytes for 8-bit activations: %s", want, cudaGetErrorString(e));
    }
    g_xq_cap = want;
    return 0;
}

/* Tiles: 32 tokens a warp for prefill, 8 for decode (the same bits:
 * each output's operations do not depend on the tile). A warp takes 16
 * rows (more warps in flight for the small matrices), SwiGLU 16 of gate
 * and the same 16 of up. */
template <int T>
static void mmq_go(mm_job job, const int8_t *xq, const float *xd, const float *xs) {
    int swiglu = job.mode == MM_SWIGLU, warps = 0;
    for (int i = 0; i < job.np; i++) {
        job.p[i].warps = swiglu ? (i == 0 ? (job.p[0].rows + 15) / 16 : 0) : (job.p[i].rows + 15) / 16;
        warps += job.p[i].warps;
    }
    if (warps == 0) return;
    int big = job.n > 8, tile = big ? 32 : 8;
    dim3 grid((warps + MM_WARPS - 1) / MM_WARPS, (job.n + tile - 1) / tile);
    if (big && swiglu) k_mmq<T, 4, 2><<<grid, MM_WARPS * 32, 0, g_stream>>>(job, xq, xd, xs);
    else if (big) k_mmq<T, 4, 1><<<grid, MM_WARPS * 32, 0, g_stream>>>(job, xq, xd, xs);
    else if (swiglu) k_mmq<T, 1, 2><<<grid, MM_WARPS * 32, 0, g_stream>>>(job, xq, xd, xs);
    else k_mmq<T, 1, 1><<<grid, MM_WARPS * 32, 0, g_stream>>>(job, xq, xd, xs);
}

extern "C" int cuda_matmul_reserve(int n, int k, strata_err *err) {
    return xq_reserve((size_t)n * k + 2 * (size_t)n * (k / 32) * sizeof(float), err);
}

int mmq_launch(qtype t, mm_job job, strata_err *err) {
    size_t nb = (size_t)job.n * (job.k / 32), qbytes = (size_t)job.n * job.k;
    int rc = cuda_matmul_reserve(job.n, job.k, err);
    if (rc) return rc;
    int8_t *xq = g_xq;
    float *xd = (float *)(g_xq + qbytes), *xs = xd + nb;
    k_q8x<<<(unsigned)((nb * 8 + 255) / 256), 256, 0, g_stream>>>(xq, xd, xs, job.x, job.k, (int)nb);
    switch (t) {
    case QT_Q4_0: mmq_go<QT_Q4_0>(job, xq, xd, xs); break;
    case QT_Q4_1: mmq_go<QT_Q4_1>(job, xq, xd, xs); break;
    case QT_Q5_0: mmq_go<QT_Q5_0>(job, xq, xd, xs); break;
    case QT_Q5_1: mmq_go<QT_Q5_1>(job, xq, xd, xs); break;
    case QT_Q8_0: mmq_go<QT_Q8_0>(job, xq, xd, xs); break;
    default: break;
    }
    return 0;
}
