/* cuda_runtime.h (host emulation) - the parts of CUDA that strata's .cu
 * files use, for tools/cuda_emu: kernels become host functions, a
 * launch runs the grid's blocks one after another, a block's threads as
 * fibers (emu.cpp). Not the real header: convert.py's output includes
 * it instead (-I tools/cuda_emu/inc). See tools/cuda_emu/README.md. */
#pragma once
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <algorithm>
#include <functional>

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct float2 {
    float x, y;
};
static inline float2 make_float2(float x, float y) { return float2{x, y}; }
struct float4 {
    float x, y, z, w;
};
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
struct uint4 {
    unsigned x, y, z, w;
};
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }
extern thread_local dim3 threadIdx;
extern dim3 blockIdx, blockDim, gridDim;

typedef int cudaError_t;
typedef void *cudaStream_t;
enum cudaStreamCaptureStatus { cudaStreamCaptureStatusNone = 0, cudaStreamCaptureStatusActive = 1 };
/* device memory is host memory; the stream runs each launch when queued (emu.cpp) */
cudaError_t cudaMalloc(void **p, size_t n);
cudaError_t cudaFree(void *p);
cudaError_t cudaStreamIsCapturing(cudaStream_t, cudaStreamCaptureStatus *s);
static inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return 0; }
enum { cudaSuccess = 0, cudaMemcpyHostToDevice = 1 };
static inline const char *cudaGetErrorString(cudaError_t) { return "cuda_emu"; }
/* the emulator's dynamic shared memory is one 128 KiB buffer: any limit up to it holds */
enum { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
template <class F>
static inline cudaError_t cudaFuncSetAttribute(F, int, int bytes) { return bytes <= 128 * 1024 ? cudaSuccess : 1; }
/* a kernel's static shared memory is not counted here (the emulator's
 * __shared__ arrays are plain statics) */
struct cudaFuncAttributes {
    size_t sharedSizeBytes;
};
template <class F>
static inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *a, F) {
    a->sharedSizeBytes = 0;
    return cudaSuccess;
}
/* blocks run one at a time here */
template <class F>
static inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, F, int, size_t) {
    *n = 1;
    return cudaSuccess;
}
void emu_memset(void *p, int v, size_t n);
static inline cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t) {
    emu_memset(p, v, n);
    return cudaSuccess;
}
template <class T>
static inline cudaError_t cudaMemcpyToSymbolAsync(T &sym, const void *src, size_t n, size_t off, int, cudaStream_t) {
    memcpy((char *)&sym + off, src, n);
    return cudaSuccess;
}

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __shared__ static /* blocks run one at a time: one copy serves each in turn */

/* Barriers and shuffles with CUDA's semantics (emu.cpp): a warp barrier
 * releases when its 32 threads wait at it (or have exited), the block
 * barrier when all do; a shuffle is a write, a warp barrier, a read and
 * another barrier. */
void __syncthreads();
void __syncwarp();
float __shfl_xor_sync(unsigned mask, float v, int lane_xor);
float __shfl_sync(unsigned mask, float v, int src_lane);
int __shfl_xor_sync(unsigned mask, int v, int lane_xor);
double __shfl_xor_sync(unsigned mask, double v, int lane_xor);
int __shfl_sync(unsigned mask, int v, int src_lane);
/* bit i: lane i's pred, a warp collective like the shuffles */
unsigned __ballot_sync(unsigned mask, int pred);
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
/* mma.sync.m16n8k32.row.col.s32.s8.s8.s32 with a zero accumulator, for the
 * calling lane's fragments (PTX's layout: emu.cpp), a warp collective */
void emu_mma_s8(int c[4], const uint32_t a[4], uint32_t b0, uint32_t b1);
/* mma.sync.m16n8k16.row.col.f32.f16.f16.f32, c accumulated in place */
void emu_mma_f16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1);

/* The SIMD-in-a-word intrinsics: a 4-way dot of signed bytes plus c, and
 * a per-byte difference modulo 256. */
static inline int __dp4a(int a, int b, int c) {
    for (int i = 0; i < 4; i++) c += (int)(int8_t)(a >> (8 * i)) * (int)(int8_t)(b >> (8 * i));
    return c;
}
static inline unsigned __vsub4(unsigned a, unsigned b) {
    unsigned r = 0;
    for (int i = 0; i < 4; i++) r |= ((((a >> (8 * i)) & 255u) - ((b >> (8 * i)) & 255u)) & 255u) << (8 * i);
    return r;
}

static inline uint32_t __float_as_uint(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline int __float_as_int(float f) { int u; memcpy(&u, &f, 4); return u; }
static inline float __int_as_float(int u) { float f; memcpy(&f, &u, 4); return f; }
static inline long long __double_as_longlong(double d) { long long u; memcpy(&u, &d, 8); return u; }
static inline double __longlong_as_double(long long u) { double d; memcpy(&d, &u, 8); return d; }
template <class T>
static inline T __ldg(const T *p) { return *p; }
template <class T>
static inline T __ldcg(const T *p) { return *p; }
/* One block runs at a time, its threads in turn: memory is in order, an
 * atomic a plain update. */
static inline void __threadfence() {}
static inline int atomicAdd(int *p, int v) {
    int old = *p;
    *p = old + v;
    return old;
}
using std::max;
using std::min;

/* What convert.py turns `k<<<grid, block, smem, stream>>>(args)` into,
 * and `extern __shared__ T name[]` (one buffer, 128 KiB). */
void emu_launch(dim3 grid, dim3 block, size_t smem, std::function<void()> body);
void *emu_dyn_smem(void);
