/* emu.cpp - tools/cuda_emu's runtime: launches, fibers, barriers, graphs,
 * and cuda.h's device and memory calls on host memory.
 *
 * A launch runs its grid's blocks one after another; a block's threads
 * are fibers run in thread order until each waits at a barrier or ends
 * (a switch is emu_switch's few instructions: ucontext's swapcontext made
 * a system call each time, half the emulator's time). A warp barrier releases when its 32 threads wait at it (or
 * have exited), the block barrier when every thread does; when no fiber
 * can go on, the launch aborts naming the block (a barrier some threads
 * never reach: a real GPU hangs or is undefined there). Graph capture
 * records launches (their arguments by value, as CUDA freezes them) and
 * replays them; a copy or memset while recording is an error, as there.
 * The tensor-core instructions are emu_mma_s8 (cuda_mmq.cu) and
 * emu_mma_f16 (attention): PTX's fragment layouts, an exchange through
 * memory between two warp barriers, so those kernels run as written. Not for the build: tools/cuda_emu/build.sh
 * links it instead of cuda_rt.cu. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "cuda_fp16.h"
#include "cuda_runtime.h"
extern "C" {
#include "backend/cuda/cuda.h"
}
#include "backend/cuda/cuda_int.h"

thread_local dim3 threadIdx;
dim3 blockIdx, blockDim, gridDim;
cudaStream_t g_stream;

enum { READY, AT_BLOCK, AT_WARP, DONE };
enum { STACK = 256 * 1024, MAX_THREADS = 1024 };

#if !defined(__x86_64__)
#error "cuda_emu's fiber switch is x86-64 assembly"
#endif
/* Saves the callee-saved registers on the current stack, stores its
 * pointer in *from, continues on to (the System V ABI: the rest is the
 * caller's to save; SSE and x87 control words are the same everywhere). */
extern "C" void emu_switch(void **from, void *to);
__asm__(".text\n.globl emu_switch\n.type emu_switch,@function\nemu_switch:\n"
        "pushq %rbp\npushq %rbx\npushq %r12\npushq %r13\npushq %r14\npushq %r15\n"
        "movq %rsp, (%rdi)\nmovq %rsi, %rsp\n"
        "popq %r15\npopq %r14\npopq %r13\npopq %r12\npopq %rbx\npopq %rbp\nret\n");

static void *g_sched;              /* the scheduler's stack pointer while a fiber runs */
static std::vector<void *> g_ctx; /* each fiber's, while it waits */
static std::vector<int> g_state;
static std::vector<char *> g_stacks;
static int g_cur;
static float g_xch[MAX_THREADS];
static std::function<void()> *g_body;
alignas(16) static char g_dyn_smem[128 * 1024];

void *emu_dyn_smem(void) { return g_dyn_smem; }

static void wait_at(int s) {
    g_state[g_cur] = s;
    emu_switch(&g_ctx[g_cur], g_sched);
}

void __syncthreads() { wait_at(AT_BLOCK); }
void __syncwarp() { wait_at(AT_WARP); }

float __shfl_xor_sync(unsigned mask, float v, int lane_xor) {
    int t = threadIdx.x;
    g_xch[t] = v;
    __syncwarp();
    float r = g_xch[(t & ~31) | ((t & 31) ^ lane_xor)];
    __syncwarp();
    return r;
}

/* The int and double forms move the bits through the same exchange. */
template <class T>
static T shfl_bits(T v, int src_of_lane_xor, int is_xor) {
    static_assert(sizeof(T) <= sizeof(double), "one slot a thread");
    static double slot[MAX_THREADS];
    int t = threadIdx.x, src = is_xor ? (t & 31) ^ src_of_lane_xor : src_of_lane_xor & 31;
    memcpy(&slot[t], &v, sizeof v);
    __syncwarp();
    T r;
    memcpy(&r, &slot[(t & ~31) | src], sizeof r);
    __syncwarp();
    return r;
}
int __shfl_xor_sync(unsigned, int v, int lane_xor) { return shfl_bits(v, lane_xor, 1); }
double __shfl_xor_sync(unsigned, double v, int lane_xor) { return shfl_bits(v, lane_xor, 1); }
int __shfl_sync(unsigned, int v, int src_lane) { return shfl_bits(v, src_lane, 0); }

unsigned __ballot_sync(unsigned, int pred) {
    static unsigned bit[MAX_THREADS];
    int t = threadIdx.x;
    bit[t] = pred ? 1u << (t & 31) : 0u;
    __syncwarp();
    unsigned r = 0;
    for (int i = 0; i < 32; i++) r |= bit[(t & ~31) | i];
    __syncwarp();
    return r;
}

float __shfl_sync(unsigned mask, float v, int src_lane) {
    int t = threadIdx.x;
    g_xch[t] = v;
    __syncwarp();
    float r = g_xch[(t & ~31) | (src_lane & 31)];
    __syncwarp();
    return r;
}

/* The tensor cores' mma.sync for one warp: each lane publishes its
 * fragments (mma_publish, then a warp barrier), takes its four outputs
 * from everyone's, and a barrier ends the product. PTX ISA, "Matrix
 * Fragments for mma.m16n8k32" (s8) and "mma.m16n8k16" (f16): lane l is
 * group g = l / 4, thread t = l % 4 of it; a register holds E elements (4
 * int8 or 2 halves, the lowest first), k runs to 8 E. A (16 rows, by
 * row): a[i] holds row g + 8 (i % 2), columns E t + 4 E (i / 2) + 0..E-1;
 * B (by column): b0 rows E t + 0..E-1, b1 those + 4 E, column g; C: c[i]
 * row g + 8 (i / 2), column 2 t + i % 2. */
static uint32_t g_mma_a[MAX_THREADS][4], g_mma_b[MAX_THREADS][2];

static void mma_publish(const uint32_t a[4], uint32_t b0, uint32_t b1) {
    int t = threadIdx.x;
    for (int i = 0; i < 4; i++) g_mma_a[t][i] = a[i];
    g_mma_b[t][0] = b0, g_mma_b[t][1] = b1;
    __syncwarp();
}

/* The register holding A's (row, k) and B's (k, col), in the calling lane's warp. */
template <int E>
static uint32_t mma_a(int row, int k) {
    return g_mma_a[(threadIdx.x & ~31) + (row % 8) * 4 + (k % (4 * E)) / E][row / 8 + 2 * (k / (4 * E))];
}
template <int E>
static uint32_t mma_b(int k, int col) {
    return g_mma_b[(threadIdx.x & ~31) + col * 4 + (k % (4 * E)) / E][k / (4 * E)];
}

static int8_t mma_byte(uint32_t w, int j) { return (int8_t)(w >> (8 * j)); }

static float mma_half(uint32_t w, int j) {
    __half h;
    uint16_t u = (uint16_t)(w >> (16 * j));
    memcpy(&h, &u, 2);
    return (float)h;
}

/* m16n8k32, s8 x s8 -> s32, a zero accumulator: exact integer sums. */
void emu_mma_s8(int c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    int l = threadIdx.x & 31;
    mma_publish(a, b0, b1);
    for (int i = 0; i < 4; i++) {
        int row = l / 4 + 8 * (i / 2), col = 2 * (l % 4) + i % 2, sum = 0;
        for (int k = 0; k < 32; k++) sum += mma_byte(mma_a<4>(row, k), k % 4) * mma_byte(mma_b<4>(k, col), k % 4);
        c[i] = sum;
    }
    __syncwarp();
}

/* m16n8k16, half x half -> float, c accumulated: each output adds its 16
 * products (exact in float) to c in k order, some fixed order as the
 * hardware's is (its bits may differ; the kernels' tests compare the
 * emulated GPU with itself and with tolerances). */
void emu_mma_f16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    int l = threadIdx.x & 31;
    mma_publish(a, b0, b1);
    for (int i = 0; i < 4; i++) {
        int row = l / 4 + 8 * (i / 2), col = 2 * (l % 4) + i % 2;
        float acc = c[i];
        for (int k = 0; k < 16; k++) acc += mma_half(mma_a<2>(row, k), k % 2) * mma_half(mma_b<2>(k, col), k % 2);
        c[i] = acc;
    }
    __syncwarp();
}

/* A fiber's first frame: runs the kernel body as thread g_cur, then
 * leaves for good. */
static void fiber(void) {
    int t = g_cur;
    (*g_body)();
    g_state[t] = DONE;
    void *gone;
    emu_switch(&gone, g_sched);
}

/* A stack whose first switch enters fiber(): six zero registers, then
 * fiber's address for emu_switch's ret, at a call's alignment. */
static void *fiber_stack(char *base) {
    uintptr_t top = ((uintptr_t)(base + STACK) & ~(uintptr_t)15) - 8; /* rsp at entry: 8 mod 16 */
    void **sp = (void **)top;
    *--sp = (void *)fiber;
    for (int i = 0; i < 6; i++) *--sp = NULL;
    return sp;
}

/* Warps whose threads all wait at a warp barrier (or have ended) go on. */
static int release_warps(unsigned n) {
    int any = 0;
    for (unsigned w0 = 0; w0 < n; w0 += 32) {
        unsigned w1 = w0 + 32 < n ? w0 + 32 : n;
        int waiting = 0, all = 1;
        for (unsigned t = w0; t < w1; t++) waiting |= g_state[t] == AT_WARP, all &= g_state[t] == AT_WARP || g_state[t] == DONE;
        if (!waiting || !all) continue;
        for (unsigned t = w0; t < w1; t++)
            if (g_state[t] == AT_WARP) g_state[t] = READY;
        any = 1;
    }
    return any;
}

/* 1 when every thread ended; else the block barrier released, or abort. */
static int release_block(unsigned n) {
    int waiting = 0, all = 1, done = 1;
    for (unsigned t = 0; t < n; t++) {
        waiting |= g_state[t] == AT_BLOCK;
        all &= g_state[t] == AT_BLOCK || g_state[t] == DONE;
        done &= g_state[t] == DONE;
    }
    if (done) return 1;
    if (!waiting || !all) {
        fprintf(stderr, "cuda_emu: block (%u,%u,%u): threads wait at barriers the others never reach\n", blockIdx.x,
                blockIdx.y, blockIdx.z);
        abort();
    }
    for (unsigned t = 0; t < n; t++)
        if (g_state[t] == AT_BLOCK) g_state[t] = READY;
    return 0;
}

static void run_block(unsigned n, std::function<void()> &body) {
    while (g_stacks.size() < n) g_stacks.push_back((char *)malloc(STACK));
    g_ctx.resize(n);
    g_state.assign(n, READY);
    g_body = &body;
    for (unsigned t = 0; t < n; t++) g_ctx[t] = fiber_stack(g_stacks[t]);
    for (;;) {
        int ran = 0;
        for (unsigned t = 0; t < n; t++)
            if (g_state[t] == READY) {
                g_cur = (int)t;
                threadIdx = dim3(t);
                emu_switch(&g_sched, g_ctx[t]);
                ran = 1;
            }
        if (ran || release_warps(n)) continue;
        if (release_block(n)) return;
    }
}

static void run_grid(dim3 grid, dim3 block, std::function<void()> body) {
    if (block.x > MAX_THREADS || block.y != 1 || block.z != 1) {
        fprintf(stderr, "cuda_emu: a block of %u x %u x %u threads\n", block.x, block.y, block.z);
        abort();
    }
    blockDim = block, gridDim = grid;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                blockIdx = dim3(x, y, z);
                run_block(block.x, body);
            }
}

static std::vector<std::function<void()>> *g_rec; /* non-NULL: recording a graph */

void emu_launch(dim3 grid, dim3 block, size_t smem, std::function<void()> body) {
    if (smem > sizeof g_dyn_smem) {
        fprintf(stderr, "cuda_emu: %zu bytes of dynamic shared memory\n", smem);
        abort();
    }
    if (g_rec) g_rec->push_back([=] { run_grid(grid, block, body); });
    else run_grid(grid, block, body);
}

void emu_memset(void *p, int v, size_t n) {
    if (g_rec) {
        fprintf(stderr, "cuda_emu: a memset while recording a graph\n");
        abort();
    }
    memset(p, v, n);
}

struct cuda_graph {
    std::vector<std::function<void()>> ops;
};

static int not_recording(const char *what, strata_err *err) {
    return g_rec ? strata_errf(err, STRATA_EINVAL, "cuda_emu: %s while recording a graph", what) : 0;
}

extern "C" {
int cuda_built(void) { return 1; }
/* 3 "multiprocessors" of one block each: the decode matmul's warps then
 * take several rows even in the tests' small matrices (its rows' loop runs) */
int cuda_open(strata_err *err) { return attn_init(128 * 1024, err) || mmv_init(128 * 1024, 3, err); }
const char *cuda_device_name(void) { return "cuda_emu (the host, emulated)"; }
void *cuda_alloc(size_t bytes, strata_err *err) { return calloc(1, bytes ? bytes : 1); }
void cuda_free(void *d_p) { free(d_p); }
int cuda_upload(void *d_dst, const void *src, size_t bytes, strata_err *err) {
    if (not_recording("an upload", err)) return STRATA_EINVAL;
    memcpy(d_dst, src, bytes);
    return 0;
}
int cuda_download(void *dst, const void *d_src, size_t bytes, strata_err *err) {
    if (not_recording("a download", err)) return STRATA_EINVAL;
    memcpy(dst, d_src, bytes);
    return 0;
}
int cuda_sync(strata_err *err) { return not_recording("a sync", err); }
/* Device memory is host memory: copies happen when queued (every event
 * is done at once), so the tiers' logic runs in order, never overlapped. */
static void *dm_alloc(void *self, size_t bytes, strata_err *err) { return calloc(1, bytes ? bytes : 1); }
static void dm_free(void *self, void *p) { free(p); }
static int dm_copy(void *self, int stream, void *dst, const void *src, size_t bytes, devmem_dir dir, strata_err *err) {
    if (not_recording("a copy", err)) return STRATA_EINVAL;
    memcpy(dst, src, bytes);
    return 0;
}
static devmem_event *dm_record(void *self, int stream, strata_err *err) { return (devmem_event *)malloc(1); }
static int dm_done(void *self, devmem_event *ev, strata_err *err) { return 1; }
static int dm_wait(void *self, int stream, devmem_event *ev, strata_err *err) { return 0; }
static void dm_event_free(void *self, devmem_event *ev) { free(ev); }
static int dm_sync(void *self, int stream, strata_err *err) { return 0; }
static const devmem_ops g_dm_ops = {dm_alloc, dm_free, dm_alloc, dm_free, dm_copy,
                                    dm_record, dm_done, dm_wait, dm_event_free, dm_sync};
static const devmem g_devmem = {"cuda_emu", &g_dm_ops, NULL};
const devmem *cuda_devmem(void) { return &g_devmem; }
int cuda_graph_begin(strata_err *err) {
    if (g_rec) return strata_errf(err, STRATA_EINVAL, "cuda_emu: a graph inside a graph");
    g_rec = new std::vector<std::function<void()>>();
    return 0;
}
int cuda_graph_end(cuda_graph **out, strata_err *err) {
    *out = new cuda_graph{*g_rec};
    delete g_rec;
    g_rec = NULL;
    return 0;
}
int cuda_graph_run(cuda_graph *g, strata_err *err) {
    for (auto &op : g->ops) op();
    return 0;
}
void cuda_graph_free(cuda_graph *g) { delete g; }
}

cudaError_t cudaMalloc(void **p, size_t n) { return (*p = calloc(1, n ? n : 1)) ? cudaSuccess : 2; }
cudaError_t cudaFree(void *p) {
    free(p);
    return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t, cudaStreamCaptureStatus *s) {
    *s = g_rec ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
    return cudaSuccess;
}
