/* cuda_int.h - what the backend's .cu files share, not for C callers.
 * g_stream: the one stream every kernel and copy of the process goes on
 * (created by cuda_open), so decode steps can be captured as a graph. The
 * CUDA context is per process anyway; this is its queue. The matmul job
 * (one launch of up to MM_PARTS matmuls over the same x, with an
 * epilogue) is built in cuda_kern.cu and run there (float path) or in
 * cuda_mmq.cu (8-bit activations on the tensor cores). */
#ifndef STRATA_CUDA_INT_H
#define STRATA_CUDA_INT_H

#include <cuda_runtime.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

extern "C" {
#include "backend/quant.h"
#include "backend/vexp_impl.h"
#include "base/err.h"
}

extern cudaStream_t g_stream;

#define FULL 0xffffffffu
#define MM_WARPS 4 /* warps per matmul block */

/* A launch covers up to MM_PARTS matmuls of one weight type and k over
 * the same x (Q, K and V; gate and up), each part's rows its own warps;
 * the epilogue stores, adds to the output (the residual), or (SwiGLU:
 * parts 0 and 1 are gate and up, a warp takes rows of each) writes
 * silu(gate) * up to part 0's output. */
#define MM_PARTS 3
enum { MM_STORE, MM_ADD, MM_SWIGLU };

struct mm_part {
    const uint8_t *w;
    float *y;
    int rows, warps; /* warps: the part's warps (filled in by the launcher) */
};

/* A mixture of experts' group: m (at most CUDA_MOE_TILE) of expert e's
 * slots from slot s0 (rows of x and y); m = 0 past the step's groups
 * (cuda_moe_group writes them). */
struct mm_group {
    int e, s0, m;
};

/* norm_w (the 8-bit decode kernel only, cuda_matmul_norms): x's rows are RMS
 * normed with these weights and eps first, k_rmsnorm's bits. */
struct mm_job {
    mm_part p[MM_PARTS];
    int np, mode, k, n;
    size_t row_bytes;
    const float *x;
    const float *norm_w;
    float eps;
};

/* A job's groups (cuda_matmul_experts): block z of the launch takes g[z]
 * (z < n), its parts' weights w_step bytes an expert further on, x's and
 * y's rows its slots; x has rows rows (every slot). The job's n is the
 * tokens, which picks the kernel (a group has at most n slots). A
 * parameter of its own: a larger mm_job made ptxas spill in k_mmv. g
 * NULL: none. */
struct mm_groups {
    const mm_group *g;
    size_t w_step;
    int n, rows;
};

/* This block's tokens (x and y rows) [t0, t1), its blockIdx.y-th tile of
 * `tile` (0: all), and the weights' offset: job's, or those of its group
 * (blockIdx.z). 0: none (the whole block leaves). G = 0: a kernel built
 * for jobs without groups (no registers held for them). */
template <int G>
__device__ __forceinline__ int mm_rows_of(const mm_job &job, const mm_groups &grp, int tile, int &t0, int &t1,
                                          size_t &w_off) {
    t0 = blockIdx.y * tile, t1 = job.n, w_off = 0;
    if (!G || !grp.g) return t0 < t1;
    mm_group g = grp.g[blockIdx.z];
    t0 += g.s0, t1 = g.s0 + g.m, w_off = (size_t)g.e * grp.w_step;
    return t0 < t1;
}

/* The part of job that warp gw of the launch works on (parts take
 * consecutive warps), with gw made the warp's index within it; -1 past
 * the parts (such a warp leaves, whole). Constant indices: the job stays
 * in parameter space. */
__device__ __forceinline__ int mm_part_of(const mm_job &job, int &gw, mm_part &P) {
    int part = -1;
    P = job.p[0];
#pragma unroll
    for (int i = 0; i < MM_PARTS; i++) {
        if (part >= 0 || i >= job.np) continue;
        if (gw < job.p[i].warps) part = i, P = job.p[i];
        else gw -= job.p[i].warps;
    }
    return part;
}

/* The RMS norm's scale of row x (dim floats), 1 / sqrt(mean(x^2) + eps),
 * in one order for any block of 128 or 256 threads: RMS_LANES strided
 * partial sums (fmaf, in index order), each 32 of them by a butterfly,
 * then those in order; a block of 128 takes two partial sums a thread.
 * k_rmsnorm and the decode matmul's fold (k_mmv) share it, so the same
 * bits. red: RMS_LANES / 32 floats of shared memory; block-wide. */
#define RMS_LANES 256
__device__ __forceinline__ float rms_scale(const float *x, int dim, float eps, float *red) {
#pragma unroll 2
    for (int vt = threadIdx.x; vt < RMS_LANES; vt += blockDim.x) {
        float ss = 0.0f;
#pragma unroll 4 /* the loads go out together; the fmaf chain stays in index order */
        for (int i = vt; i < dim; i += RMS_LANES) ss = fmaf(x[i], x[i], ss);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(FULL, ss, o);
        if ((vt & 31) == 0) red[vt >> 5] = ss;
    }
    __syncthreads();
    float s = 0.0f;
    for (int i = 0; i < RMS_LANES / 32; i++) s += red[i];
    __syncthreads(); /* red can be used again */
    return 1.0f / sqrtf(s / (float)dim + eps);
}

/* rms_scale's value for one warp alone (x: dim floats): the same
 * partial sums, butterflies and order (lane l takes the RMS_LANES
 * partial sums 32 w + l), so the same bits. */
__device__ __forceinline__ float rms_scale_warp(const float *x, int dim, float eps) {
    int lane = threadIdx.x & 31;
    float s = 0.0f;
    for (int w = 0; w < RMS_LANES / 32; w++) {
        float ss = 0.0f;
        for (int i = 32 * w + lane; i < dim; i += RMS_LANES) ss = fmaf(x[i], x[i], ss);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(FULL, ss, o);
        s += ss;
    }
    return 1.0f / sqrtf(s / (float)dim + eps);
}

/* Q4_K / Q5_K: sub-block j's 6-bit scale and min from the super-block's
 * scales[12] (backend/quant_impl.h, quant_kscale). */
__device__ __forceinline__ void kq_scale_min(const uint8_t *s, int j, int &sc, int &m) {
    if (j < 4) {
        sc = s[j] & 63;
        m = s[j + 4] & 63;
    } else {
        sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
        m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* expf(x) with glibc's bits (the CPU's libm), given its table of 2^(i/32)
 * in device memory (exp_table_upload: each .cu file that uses it keeps
 * its own copy, there being no relocatable device code): k = round(x
 * 32/ln2) by the shift constant, r = x 32/ln2 - k in one FMA, 2^(k/32)
 * from the table entry k mod 32 with k div 32 added to its exponent, the
 * cubic in r, one rounding; glibc's branches for |x| >= 88 (-inf, inf
 * and NaN, overflow past 0x1.62e42ep6, underflow below -0x1.9fe368p6). */
__device__ __forceinline__ float exp_glibc(float x, const double *exp2_32) {
    uint32_t ux = __float_as_uint(x), ax = ux & 0x7fffffffu;
    if (ax >= VEXP_SPECIAL_ABS) { /* glibc's checks; the rest falls through to its main path */
        if (ux == 0xff800000u) return 0.0f;          /* -inf */
        if (ax >= 0x7f800000u) return x + x;         /* inf, NaN */
        if (x > 0x1.62e42ep6f) return INFINITY;      /* overflow */
        if (x < -0x1.9fe368p6f) return 0.0f;         /* underflow */
    }
    double xd = (double)x, z = fma(VEXP_INV_LN2_N, xd, VEXP_SHIFT);
    uint64_t ki = (uint64_t)__double_as_longlong(z), i = ki & 31;
    double r = fma(VEXP_INV_LN2_N, xd, -(z - VEXP_SHIFT));
    uint64_t s = (uint64_t)__double_as_longlong(exp2_32[i]) - (i << 47) + (ki << 47);
    double p = fma(VEXP_C0, r, VEXP_C1), q = fma(VEXP_C2, r, 1.0);
    p = fma(p, r * r, q);
    return (float)(p * __longlong_as_double((long long)s));
}

/* Fills a .cu file's copy of exp_glibc's table (on the stream), once:
 * *done says it is. */
template <class T>
static int exp_table_upload(T &table, int *done, strata_err *err) {
    static_assert(sizeof table == sizeof vexp__exp2_32, "the table of 2^(i/32)");
    if (*done) return 0;
    cudaError_t e = cudaMemcpyToSymbolAsync(table, vexp__exp2_32, sizeof table, 0, cudaMemcpyHostToDevice, g_stream);
    if (e != cudaSuccess) return strata_errf(err, STRATA_EIO, "cuda: the exp table: %s", cudaGetErrorString(e));
    *done = 1;
    return 0;
}

/* silu(g) * u: k_swiglu's expression, so fused and separate give the same bits. */
__device__ __forceinline__ float swiglu1(float g, float u) { return g / (1.0f + expf(-g)) * u; }

/* cuda_mmq.cu: 1 when type t's matmuls run there (mmq_launch queues job:
 * the activations' 8-bit pass, then the matmul). */
int mmq_type(qtype t);
int mmq_launch(qtype t, mm_job job, mm_groups grp, strata_err *err);
/* The 8-bit matmuls' limits, once at cuda_open: the decode kernel up to
 * optin_bytes of shared memory (the device's opt-in limit a block), at
 * most one wave of blocks over sms multiprocessors; the staged prefill
 * kernel its two stages. */
int mmv_init(int optin_bytes, int sms, strata_err *err);

/* Lets each of kernels use up to bytes of dynamic shared memory (past the
 * default 48 KiB a launch must be allowed first; not inside a graph's
 * capture, so at cuda_open). */
template <class F, size_t N>
static cudaError_t allow_smem(F (&kernels)[N], int bytes) {
    cudaError_t e = cudaSuccess;
    for (size_t i = 0; i < N && e == cudaSuccess; i++)
        e = cudaFuncSetAttribute(kernels[i], cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    return e;
}

/* allow_smem with what the device's opt-in limit a block (optin_bytes)
 * leaves past the kernels' largest static shared memory (the limit holds
 * both): *bytes, the dynamic shared memory a launch of them may ask. */
template <class F, size_t N>
static cudaError_t allow_smem_left(F (&kernels)[N], int optin_bytes, int *bytes) {
    cudaError_t e = cudaSuccess;
    *bytes = optin_bytes;
    for (size_t i = 0; i < N && e == cudaSuccess; i++) {
        cudaFuncAttributes a;
        e = cudaFuncGetAttributes(&a, kernels[i]);
        if (e == cudaSuccess && optin_bytes - (int)a.sharedSizeBytes < *bytes)
            *bytes = optin_bytes - (int)a.sharedSizeBytes;
    }
    return e == cudaSuccess ? allow_smem(kernels, *bytes) : e;
}

/* A copy of B bytes (4, or 16 with both addresses 16-byte aligned: a
 * quarter of the instructions) from global to shared memory that does
 * not wait (sm_80's cp.async: the next tile's loads overlap this tile's
 * arithmetic); cp_async_commit closes this thread's group of them,
 * cp_async_wait<N> waits until at most N of its committed groups are
 * pending (then a barrier, for the other threads' copies). A plain copy
 * where there is no cp.async (the emulator, the host pass). */
template <int B>
__device__ __forceinline__ void cp_async(void *dst, const void *src) {
    static_assert(B == 4 || B == 16, "cp.async copies 4 or 16 bytes here");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    if (B == 16) asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src));
    else asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(d), "l"(src));
#else
    memcpy(dst, src, B);
#endif
}

__device__ __forceinline__ void cp_async_commit(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}

template <int N>
__device__ __forceinline__ void cp_async_wait(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

/* cp_async_wait<n> for an n known at run time: at most n groups left
 * pending (past 7, 7: waiting for more than asked is only slower). */
__device__ __forceinline__ void cp_async_wait_upto(int n) {
    switch (n) {
    case 0: cp_async_wait<0>(); break;
    case 1: cp_async_wait<1>(); break;
    case 2: cp_async_wait<2>(); break;
    case 3: cp_async_wait<3>(); break;
    case 4: cp_async_wait<4>(); break;
    case 5: cp_async_wait<5>(); break;
    case 6: cp_async_wait<6>(); break;
    default: cp_async_wait<7>(); break;
    }
}

/* cuda_kern.cu: lets the attention kernels use up to optin_bytes of
 * shared memory a block (the device's opt-in limit; decode's launches
 * keep as many K/V tiles in flight as it holds); cuda_open calls it once. */
int attn_init(int optin_bytes, strata_err *err);

#endif
