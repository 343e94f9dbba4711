/* cuda_moe.cu - a mixture of experts' routing on the device: each
 * token's experts and weights from its router logits (k_moe_route, model/
 * moe.c's moe_route) and the batch's (token, expert) pairs grouped by
 * expert (k_moe_group, moe_group's slots), so that no step waits for a
 * copy back and a decode step stays one graph. The experts' matmuls then
 * take the groups (cuda_matmul_experts, cuda_kern.cu).
 *
 * Numerics: moe_route's steps in its order where the order changes bits
 * (top k with ties to the lower id; the weights' renormalisation summed
 * in j order), glibc's expf (exp_glibc), and the softmax's sum in double
 * as the CPU's, over lanes rather than in index order: the same double
 * unless the exps span more than 2^29 (the sum then rounds), so the
 * CPU's weights for the same logits. A token's result depends on its
 * logits alone: batch invariant. */
#include <cuda_runtime.h>

#include "backend/cuda/cuda_int.h"

extern "C" {
#include "backend/cuda/cuda.h"
}

#define ROUTE_WARPS 4

static_assert(sizeof(mm_group) == CUDA_GROUP_INTS * sizeof(int32_t), "groups are uploaded and read as int triples");
static_assert(CUDA_MOE_MAX_EXPERTS <= 1024, "k_moe_group: a thread an expert, in one block");

__device__ double g_moe_exp2[32]; /* exp_glibc's table, by cuda_moe_init */

extern "C" int cuda_moe_init(strata_err *err) {
    static int done;
    return exp_table_upload(g_moe_exp2, &done, err);
}

__device__ __forceinline__ float exp_f(float x) { return exp_glibc(x, g_moe_exp2); }

/* The lane's ne / 32 values (index lane + 32 q), softmaxed across the warp. */
__device__ __forceinline__ void warp_softmax(float (&v)[32], int ne, int lane) {
    float mx = -INFINITY;
#pragma unroll
    for (int q = 0; q < 32; q++)
        if (lane + 32 * q < ne) mx = v[q] > mx ? v[q] : mx;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float b = __shfl_xor_sync(FULL, mx, o);
        mx = b > mx ? b : mx;
    }
    double sum = 0.0;
#pragma unroll
    for (int q = 0; q < 32; q++)
        if (lane + 32 * q < ne) sum += v[q] = exp_f(v[q] - mx);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(FULL, sum, o);
    float inv = (float)(1.0 / sum);
#pragma unroll
    for (int q = 0; q < 32; q++) v[q] *= inv;
}

/* The best of the lane's untaken values (the lowest index among equals),
 * then across the warp: every lane gets (value, index). */
__device__ __forceinline__ void warp_best(const float (&v)[32], unsigned taken, int ne, int lane, float &bv, int &bi) {
    bi = -1, bv = 0.0f;
#pragma unroll
    for (int q = 0; q < 32; q++)
        if (lane + 32 * q < ne && !(taken >> q & 1u) && (bi < 0 || v[q] > bv)) bv = v[q], bi = lane + 32 * q;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(FULL, bv, o);
        int oi = __shfl_xor_sync(FULL, bi, o);
        if (oi >= 0 && (bi < 0 || ov > bv || (ov == bv && oi < bi))) bv = ov, bi = oi;
    }
}

/* A warp a token: lane j < k ends with its j-th expert and weight. */
__global__ void __launch_bounds__(ROUTE_WARPS * 32) k_moe_route(const float *logits, int n, cuda_moe_gating g,
                                                                 int32_t *ids, float *w) {
    const int lane = threadIdx.x & 31, t = blockIdx.x * ROUTE_WARPS + (threadIdx.x >> 5), ne = g.n_expert, k = g.k;
    if (t >= n) return; /* whole warps */
    float v[32];
#pragma unroll
    for (int q = 0; q < 32; q++) v[q] = lane + 32 * q < ne ? logits[(size_t)t * ne + lane + 32 * q] : 0.0f;
    if (g.gating == CUDA_GATE_SOFTMAX) warp_softmax(v, ne, lane);
    else if (g.gating == CUDA_GATE_SIGMOID)
#pragma unroll
        for (int q = 0; q < 32; q++) v[q] = 1.0f / (1.0f + exp_f(-v[q]));
    unsigned taken = 0;
    float wj = 0.0f;
    int id = 0;
    for (int j = 0; j < k; j++) {
        float bv;
        int bi;
        warp_best(v, taken, ne, lane, bv, bi);
        if ((bi & 31) == lane) taken |= 1u << (bi >> 5);
        if (lane == j) wj = bv, id = bi;
    }
    if (g.gating == CUDA_GATE_SOFTMAX_WEIGHT) { /* over the k chosen */
        float kw[32];
#pragma unroll
        for (int q = 0; q < 32; q++) kw[q] = q == 0 ? wj : 0.0f;
        warp_softmax(kw, k, lane);
        wj = kw[0];
    }
    if (g.norm) {
        float sum = 0.0f; /* in j order, as the CPU */
        for (int j = 0; j < k; j++) sum += __shfl_sync(FULL, wj, j);
        if (sum < 6.103515625e-5f) sum = 6.103515625e-5f;
        wj /= sum;
    }
    if (g.scale != 0.0f && g.scale != 1.0f) wj *= g.scale;
    if (lane < k) ids[(size_t)t * k + lane] = id, w[(size_t)t * k + lane] = wj;
}

/* An inclusive scan of each thread's v over the block (blockDim.x a
 * power of two), in s (blockDim.x ints); the block's total in *total. */
__device__ int block_scan(int v, int *s, int *total) {
    const int tid = threadIdx.x, nt = blockDim.x;
    s[tid] = v;
    __syncthreads();
    for (int off = 1; off < nt; off <<= 1) {
        int a = tid >= off ? s[tid - off] : 0;
        __syncthreads();
        s[tid] += a;
        __syncthreads();
    }
    int r = s[tid];
    *total = s[nt - 1];
    __syncthreads(); /* s is free again */
    return r;
}

/* One block of a power of two threads, at least n_expert: thread e counts
 * expert e's pairs, scans give its first slot and its first group (its
 * slots in groups of CUDA_MOE_TILE), then a warp an expert places its
 * pairs in token order (a ballot a 32 tokens). */
__global__ void k_moe_group(const int32_t *ids, int n, int k, int ne, int32_t *first, int32_t *slot_of,
                            int32_t *slot_tok, mm_group *groups, int n_groups) {
    __shared__ int cnt[CUDA_MOE_MAX_EXPERTS], scan[CUDA_MOE_MAX_EXPERTS];
    const int tid = threadIdx.x, lane = tid & 31, nt = blockDim.x;
    cnt[tid] = 0;
    __syncthreads();
    for (int i = tid; i < n * k; i += nt) atomicAdd(&cnt[ids[i]], 1); /* integers: any order, one sum */
    __syncthreads();
    const int c = tid < ne ? cnt[tid] : 0, tiles = (c + CUDA_MOE_TILE - 1) / CUDA_MOE_TILE;
    int slots, all_tiles;
    const int f = block_scan(c, scan, &slots) - c, g0 = block_scan(tiles, scan, &all_tiles) - tiles;
    if (first && tid < ne) first[tid] = f;
    for (int i = 0; i < tiles; i++)
        groups[g0 + i] = mm_group{tid, f + i * CUDA_MOE_TILE, min(CUDA_MOE_TILE, c - i * CUDA_MOE_TILE)};
    if (first && tid == 0) first[ne] = slots;
    for (int g = all_tiles + tid; g < n_groups; g += nt) groups[g] = mm_group{0, 0, 0};
    scan[tid] = f;
    __syncthreads();
    for (int e = tid >> 5; e < ne; e += nt / 32) { /* whole warps: the ballot */
        const int ce = cnt[e];
        for (int t0 = 0, run = 0; t0 < n && run < ce; t0 += 32) {
            int t = t0 + lane, found = -1;
            if (t < n)
                for (int j = 0; j < k; j++)
                    if (ids[(size_t)t * k + j] == e) found = j;
            unsigned mask = __ballot_sync(FULL, found >= 0);
            if (found >= 0) {
                int s = scan[e] + run + __popc(mask & ((1u << lane) - 1u));
                slot_of[(size_t)t * k + found] = s;
                slot_tok[s] = t;
            }
            run += __popc(mask);
        }
    }
}

extern "C" int cuda_moe_route(const float *d_logits, int n, const cuda_moe_gating *g, int32_t *d_ids, float *d_w,
                              strata_err *err) {
    if (g->n_expert < 1 || g->n_expert > CUDA_MOE_MAX_EXPERTS || g->k < 1 || g->k > CUDA_MOE_MAX_USED ||
        g->k > g->n_expert)
        return strata_errf(err, STRATA_EUNSUPPORTED,
                           "cuda: routing %d of %d experts (the device routes up to %d of %d)", g->k, g->n_expert,
                           CUDA_MOE_MAX_USED, CUDA_MOE_MAX_EXPERTS);
    if (n > 0)
        k_moe_route<<<(n + ROUTE_WARPS - 1) / ROUTE_WARPS, ROUTE_WARPS * 32, 0, g_stream>>>(d_logits, n, *g, d_ids,
                                                                                            d_w);
    return 0;
}

extern "C" int cuda_moe_group(const int32_t *d_ids, int n, int k, int n_expert, int32_t *d_first, int32_t *d_slot_of,
                              int32_t *d_slot_tok, int32_t *d_groups, strata_err *err) {
    if (n_expert < 1 || n_expert > CUDA_MOE_MAX_EXPERTS || (long long)n * k > INT32_MAX / 2)
        return strata_errf(err, STRATA_EUNSUPPORTED, "cuda: grouping %d tokens' %d experts of %d on the device", n, k,
                           n_expert);
    /* a thread an expert at least; a prefill's many tokens get every warp
     * the block can have for placing the pairs (a warp an expert at a time) */
    int threads = n * k > 64 ? CUDA_MOE_MAX_EXPERTS : 32;
    while (threads < n_expert) threads *= 2;
    if (n > 0)
        k_moe_group<<<1, threads, 0, g_stream>>>(d_ids, n, k, n_expert, d_first, d_slot_of, d_slot_tok,
                                                 (mm_group *)d_groups, cuda_moe_groups(n, k, n_expert));
    return 0;
}
