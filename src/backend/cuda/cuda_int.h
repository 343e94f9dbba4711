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

extern "C" {
#include "backend/quant.h"
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

struct mm_job {
    mm_part p[MM_PARTS];
    int np, mode, k, n;
    size_t row_bytes;
    const float *x;
};

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

/* silu(g) * u: k_swiglu's expression, so fused and separate give the same bits. */
__device__ __forceinline__ float swiglu1(float g, float u) { return g / (1.0f + expf(-g)) * u; }

/* cuda_mmq.cu: 1 when type t's matmuls run there (mmq_launch queues job:
 * the activations' 8-bit pass, then the matmul). */
int mmq_type(qtype t);
int mmq_launch(qtype t, mm_job job, strata_err *err);
/* The decode matmul's limits, once at cuda_open: up to optin_bytes of
 * shared memory (the device's opt-in limit a block), at most one wave of
 * blocks over sms multiprocessors. */
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

/* cuda_kern.cu: lets the attention kernels use their shared memory;
 * cuda_open calls it once. */
int attn_raise_smem(strata_err *err);

#endif
