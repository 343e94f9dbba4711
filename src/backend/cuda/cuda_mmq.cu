/* cuda_mmq.cu - the quantized matmul on the tensor cores (Q4_0, Q4_1,
 * Q5_0, Q5_1, Q8_0 weights, and the K-quants: Q4_K and Q5_K, whose
 * 32-element sub-blocks' d is d * scale and min -dmin * min, as the CPU
 * dequantizes them, and Q6_K, whose 16-element halves of a 32-block have
 * scales of their own): activations quantized to 8 bits per block of
 * 32, integer products by mma.sync m16n8k32 (s8 x s8 -> s32), one
 * 32-block per mma (Q6_K: one a half, the other half's weights zero), so
 * each block's integer dot is exact whatever the order of its products.
 *
 * Activations: block b of token t gets d = amax / 127, q = round(x * 127
 * / amax) (half away from zero) and s = d * sum(q): the CPU's Q8_1
 * quantization (backend/quant_act_impl.h, q8_block), the same int8
 * values (mq_xblock, one thread per block: max and integer sums are
 * exact). For the K-quants amax is that of the block's super-block of
 * 256, as the CPU's Q8_K: the same int8 values and d as the CPU's.
 *
 * Numerics of one output (row r, token t), fixed by k alone: for the
 * 32-blocks b = 0, 1, ... in order,
 *     v = (float)isum_b * (dw_b * dx_b)      [+ mw_b * sx_b for Q4_1/Q5_1]
 *     acc = acc + v
 * where isum_b is the exact integer dot of the weight block's integers
 * (the 4/5/8-bit values, offset by -8/-16 for Q4_0/Q5_0) with the
 * activation block's int8; for Q6_K, sc_lo * isum_lo + sc_hi * isum_hi,
 * the halves' dots times their int8 scales (exact: under 2^25), and dw
 * the super-block's d. No split over k, no atomics.
 *
 * Two kernels compute exactly that:
 * - prefill (n > 8): k_q8x quantizes x once into a buffer, then k_mmq
 *   takes tiles of 16 rows (SwiGLU: 16 of gate and the same 16 of up) x
 *   32 tokens a warp on the tensor cores (mma.sync m16n8k32 s8, one
 *   32-block per mma), both operands straight from global memory (a
 *   4-byte word of a block's quants holds two of the A fragment's
 *   k-groups: its low nibbles are elements 0-15, its high ones 16-31);
 *   where rows start 4-byte aligned, k_mmq_st does the same from chunks
 *   of both operands staged in shared memory by a block's warps;
 * - decode (n <= 8): k_mmv, a warp a row, a lane a block (dp4a against
 *   x quantized once a block in shared memory), the terms then added in
 *   block order by shuffles: many warps in flight (decode is
 *   latency-bound), no separate pass. Rows starting 4-byte aligned are
 *   staged: the warp copies 32 blocks at a time into shared memory with
 *   coalesced 4-byte loads before each lane reads its block there.
 * Kernel choice, tile and the rows a warp takes only place the work, so
 * a row's bits are the same in any batch, chunk or fused launch
 * (tests/test_cuda.c checks it with memcmp). */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_int.h"

int mmq_type(qtype t) {
    return t == QT_Q4_0 || t == QT_Q4_1 || t == QT_Q5_0 || t == QT_Q5_1 || t == QT_Q8_0 || t == QT_Q4_K || t == QT_Q5_K ||
           t == QT_Q6_K;
}

/* Types whose 32-blocks have a min (the term's mw * sx). */
template <int T>
__host__ __device__ constexpr int mq_min() {
    return T == QT_Q4_1 || T == QT_Q5_1 || T == QT_Q4_K || T == QT_Q5_K;
}

/* A weight block's loads: from global memory by the read-only path, or
 * (S = 1) from a warp's staged copy in shared memory (mv_stage). */
template <int S>
__device__ __forceinline__ unsigned short ldu16(const uint8_t *p) {
    return S ? *(const unsigned short *)p : __ldg((const unsigned short *)p);
}

template <int S>
__device__ __forceinline__ uint32_t ldu32(const uint8_t *p) { /* 4-byte aligned */
    return S ? *(const uint32_t *)p : __ldg((const unsigned int *)p);
}

template <int S = 0>
__device__ __forceinline__ uint32_t ld16x2(const uint8_t *p) { /* 2-byte aligned */
    return (uint32_t)ldu16<S>(p) | ((uint32_t)ldu16<S>(p + 2) << 16);
}

template <int S = 0>
__device__ __forceinline__ float ldhf(const uint8_t *p) {
    return __half2float(__ushort_as_half(ldu16<S>(p)));
}

/* Types whose 32-blocks' halves have scales of their own (mq_wscales). */
template <int T>
__host__ __device__ constexpr int mq_split() {
    return T == QT_Q6_K;
}

/* Bits 0-3 of x to bit 4 of bytes 0-3 (Q5's fifth bits). */
__device__ __forceinline__ uint32_t hbits(uint32_t x) {
    return ((x & 1u) << 4) | ((x & 2u) << 11) | ((x & 4u) << 18) | ((x & 8u) << 25);
}

/* Weight block b of a row, lane group t (0-3): lo = its int8 values
 * 4t..4t+3, hi = 16+4t..16+4t+3 (the mma's k order), d, and m (the min;
 * 0 without one). */
template <int T, int S = 0>
__device__ __forceinline__ void mq_wblock(const uint8_t *row, int b, int t, uint32_t &lo, uint32_t &hi, float &d,
                                          float &m) {
    if (T == QT_Q4_0) {
        const uint8_t *p = row + (size_t)b * 18;
        uint32_t w = ld16x2<S>(p + 2 + 4 * t);
        d = ldhf<S>(p), m = 0.0f;
        lo = __vsub4(w & 0x0f0f0f0fu, 0x08080808u);
        hi = __vsub4((w >> 4) & 0x0f0f0f0fu, 0x08080808u);
    } else if (T == QT_Q4_1) {
        const uint8_t *p = row + (size_t)b * 20;
        uint32_t w = ldu32<S>(p + 4 + 4 * t);
        d = ldhf<S>(p), m = ldhf<S>(p + 2);
        lo = w & 0x0f0f0f0fu;
        hi = (w >> 4) & 0x0f0f0f0fu;
    } else if (T == QT_Q5_0) {
        const uint8_t *p = row + (size_t)b * 22;
        uint32_t qh = ld16x2<S>(p + 2), w = ld16x2<S>(p + 6 + 4 * t);
        d = ldhf<S>(p), m = 0.0f;
        lo = __vsub4((w & 0x0f0f0f0fu) | hbits(qh >> (4 * t)), 0x10101010u);
        hi = __vsub4(((w >> 4) & 0x0f0f0f0fu) | hbits(qh >> (16 + 4 * t)), 0x10101010u);
    } else if (T == QT_Q5_1) {
        const uint8_t *p = row + (size_t)b * 24;
        uint32_t qh = ldu32<S>(p + 4), w = ldu32<S>(p + 8 + 4 * t);
        d = ldhf<S>(p), m = ldhf<S>(p + 2);
        lo = (w & 0x0f0f0f0fu) | hbits(qh >> (4 * t));
        hi = ((w >> 4) & 0x0f0f0f0fu) | hbits(qh >> (16 + 4 * t));
    } else if (T == QT_Q4_K || T == QT_Q5_K) { /* 32-block b: sub-block b % 8 of super-block b / 8 */
        constexpr int FIVE = T == QT_Q5_K;
        const uint8_t *p = row + (size_t)(b >> 3) * (FIVE ? 176 : 144);
        int j = b & 7, sc, mn;
        kq_scale_min(p + 4, j, sc, mn);
        d = ldhf<S>(p) * (float)sc, m = -(ldhf<S>(p + 2) * (float)mn); /* dq_q45k's d * sc and dmin * m */
        const uint8_t *q = p + (FIVE ? 48 : 16) + 32 * (j >> 1); /* sub-blocks 2i and 2i + 1: low, high nibbles */
        lo = (ldu32<S>(q + 4 * t) >> (4 * (j & 1))) & 0x0f0f0f0fu;
        hi = (ldu32<S>(q + 16 + 4 * t) >> (4 * (j & 1))) & 0x0f0f0f0fu;
        if (FIVE) { /* the fifth bit: bit j of qh[element] */
            lo |= ((ldu32<S>(p + 16 + 4 * t) >> j) & 0x01010101u) << 4;
            hi |= ((ldu32<S>(p + 32 + 4 * t) >> j) & 0x01010101u) << 4;
        }
    } else if (T == QT_Q6_K) { /* 32-block b: elements 32 (b % 8) ... of super-block b / 8, dq_q6k's layout */
        const uint8_t *p = row + (size_t)(b >> 3) * 210;
        int j = b & 7, nib = (j >> 1) & 1, sh = 2 * (2 * nib + (j & 1)); /* low or high nibbles; qh's 2 bits */
        const uint8_t *ql = p + 64 * (j >> 2) + 32 * (j & 1), *qh = p + 128 + 32 * (j >> 2);
        uint32_t l0 = ld16x2<S>(ql + 4 * t), l1 = ld16x2<S>(ql + 16 + 4 * t);
        uint32_t h0 = ld16x2<S>(qh + 4 * t), h1 = ld16x2<S>(qh + 16 + 4 * t);
        d = ldhf<S>(p + 208), m = 0.0f;
        lo = __vsub4(((l0 >> (4 * nib)) & 0x0f0f0f0fu) | (((h0 >> sh) & 0x03030303u) << 4), 0x20202020u);
        hi = __vsub4(((l1 >> (4 * nib)) & 0x0f0f0f0fu) | (((h1 >> sh) & 0x03030303u) << 4), 0x20202020u);
    } else { /* Q8_0 */
        const uint8_t *p = row + (size_t)b * 34;
        d = ldhf<S>(p), m = 0.0f;
        lo = ld16x2<S>(p + 2 + 4 * t);
        hi = ld16x2<S>(p + 18 + 4 * t);
    }
}

/* A split type's scales of 32-block b's halves (elements 0-15, 16-31):
 * Q6_K's int8 scales 2 (b % 8) and 2 (b % 8) + 1 of its super-block;
 * 1 and 1 for the others. */
template <int T, int S = 0>
__device__ __forceinline__ void mq_wscales(const uint8_t *row, int b, int &slo, int &shi) {
    if constexpr (mq_split<T>()) {
        unsigned short v = ldu16<S>(row + (size_t)(b >> 3) * 210 + 192 + 2 * (b & 7));
        slo = (int8_t)(v & 0xff), shi = (int8_t)(v >> 8);
    } else {
        slo = shi = 1;
    }
}

/* A block's integer dot from its halves' (the header's isum_b). */
template <int T>
__device__ __forceinline__ int mq_isum(int ilo, int ihi, int slo, int shi) {
    return mq_split<T>() ? slo * ilo + shi * ihi : ilo + ihi;
}

/* c = A (16 x 32 s8, rows g and g + 8 of the lane) x B (32 x 8 s8). */
__device__ __forceinline__ void mma_s8(int c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
#if defined(CUDA_EMU) /* tools/cuda_emu: the same product, PTX's fragment layout */
    emu_mma_s8(c, a, b0, b1);
#else
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%10,%11,%12,%13};"
                 : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0), "r"(0), "r"(0), "r"(0));
#endif
}

/* One block's term of one output (the header's expression). */
template <int MIN>
__device__ __forceinline__ float mq_term(int isum, float dw, float dx, float mw, float sx) {
    float v = (float)isum * (dw * dx);
    return MIN ? v + mw * sx : v;
}

/* Round half away from zero (quant_act_impl.h round_q). */
__device__ __forceinline__ int mq_round(float v) { return (int)(v + (v >= 0.0f ? 0.5f : -0.5f)); }

/* Blocks of 32 sharing an activation scale for weight type T: 1, or 8
 * for the K-quants (their 256-element super-block: the CPU's Q8_K). */
__host__ __device__ constexpr int mq_group(int t) { return t == QT_Q4_K || t == QT_Q5_K || t == QT_Q6_K ? 8 : 1; }

/* One activation block of 32 floats (16-byte aligned) into v (nw: RMS
 * norm weights, x * scale * nw first, k_rmsnorm's expression; or NULL);
 * returns its largest |x| (a NaN never wins). */
__device__ __forceinline__ float mq_xload(const float *x, float4 v[8], const float *nw, float scale) {
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        v[i] = __ldg((const float4 *)x + i);
        if (nw) {
            float4 g = __ldg((const float4 *)nw + i);
            v[i] = make_float4(v[i].x * scale * g.x, v[i].y * scale * g.y, v[i].z * scale * g.z, v[i].w * scale * g.w);
        }
        float a = fabsf(v[i].x);
        amax = a > amax ? a : amax;
        a = fabsf(v[i].y), amax = a > amax ? a : amax;
        a = fabsf(v[i].z), amax = a > amax ? a : amax;
        a = fabsf(v[i].w), amax = a > amax ? a : amax;
    }
    return amax;
}

/* A block of v to 8 bits at the scale of amax, q8_block's operations
 * (the integer sum is exact, so any order gives these bits). w: the int8
 * values, 4 a word; d = amax / 127; s = d * sum(q). */
__device__ __forceinline__ void mq_xquant(const float4 v[8], float amax, uint32_t w[8], float &d, float &s) {
    d = amax / 127.0f;
    float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        int q0 = mq_round(v[i].x * id), q1 = mq_round(v[i].y * id), q2 = mq_round(v[i].z * id), q3 = mq_round(v[i].w * id);
        sum += q0 + q1 + q2 + q3;
        w[i] = (uint32_t)(q0 & 255) | ((uint32_t)(q1 & 255) << 8) | ((uint32_t)(q2 & 255) << 16) | ((uint32_t)q3 << 24);
    }
    s = d * (float)sum;
}

/* A lane's activation block of 32 to its 8-bit form, the block's scale
 * that of its group of G (mq_group): the G consecutive lanes (blocks)
 * take the largest |x| of them all (a max: the same in any order). Every
 * lane of the warp calls it (the shuffles are the warp's): a lane past
 * the real blocks (a whole group) takes the last one, and drops it. */
template <int G>
__device__ __forceinline__ void mq_xblock(const float *x, uint32_t w[8], float &d, float &s, const float *nw = NULL,
                                          float scale = 1.0f) {
    float4 v[8];
    float amax = mq_xload(x, v, nw, scale);
#pragma unroll
    for (int o = 1; o < G; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(FULL, amax, o));
    mq_xquant(v, amax, w, d, s);
}

/* The activations' 8-bit form, once per prefill launch (every row tile
 * reads it): a thread per (token, 32-block), G of them a scale
 * (mq_group; k = 32 nb with nb a multiple of G, so a group is one
 * token's). xq [n][k] int8, xd and xs [n][k / 32]: d and d * sum(q). x's
 * rows are k apart, so block pair = tok * nb + blk starts at 32 pair in
 * x and in xq. */
template <int G>
__global__ void k_q8x(int8_t *xq, float *xd, float *xs, const float *__restrict__ x, int pairs) {
    int pair = blockIdx.x * blockDim.x + threadIdx.x, at = min(pair, pairs - 1); /* all lanes: the group's shuffles */
    uint32_t w[8];
    float d, s;
    mq_xblock<G>(x + (size_t)at * 32, w, d, s);
    if (pair >= pairs) return;
    xd[pair] = d, xs[pair] = s;
    uint4 *o = (uint4 *)(xq + (size_t)pair * 32);
    o[0] = make_uint4(w[0], w[1], w[2], w[3]);
    o[1] = make_uint4(w[4], w[5], w[6], w[7]);
}

/* Weight block b of a row, all four lane groups (mq_wblock's values). */
struct mv_wblock {
    uint32_t lo[4], hi[4];
    float d, m;
    int slo, shi; /* the halves' scales (mq_wscales) */
};

template <int T, int S = 0>
__device__ __forceinline__ void mv_wload(const uint8_t *row, int b, mv_wblock &w) {
#pragma unroll
    for (int t = 0; t < 4; t++) mq_wblock<T, S>(row, b, t, w.lo[t], w.hi[t], w.d, w.m);
    mq_wscales<T, S>(row, b, w.slo, w.shi);
}

/* The bytes of 32 32-blocks (four K-quant super-blocks: Q6_K's 32-block
 * is 26.25 bytes), and the 4-byte words of a warp's chunk of a row: 32
 * blocks (a lane each), a lane's share of them. m blocks from a 4-byte
 * aligned start are m * mv_chunk_bytes / 128 bytes. */
template <int T>
__host__ __device__ constexpr int mv_chunk_bytes() {
    return T == QT_Q6_K ? 4 * 210
                        : 32 * (T == QT_Q4_0 || T == QT_Q4_K ? 18 : T == QT_Q4_1 ? 20 : T == QT_Q5_0 || T == QT_Q5_K ? 22
                                : T == QT_Q5_1 ? 24 : 34);
}
template <int T>
__host__ __device__ constexpr int mv_chunk_words() { return mv_chunk_bytes<T>() / 4; }
/* The words of blocks [b0, b0 + m) of a 4-byte aligned row (b0 a
 * multiple of 8: whole super-blocks), and where they start. */
template <int T>
__host__ __device__ constexpr int mv_words(int m) { return m * mv_chunk_bytes<T>() / 128; }
template <int T>
__host__ __device__ constexpr size_t mv_offset(int b0) { return (size_t)b0 * mv_chunk_bytes<T>() / 32; }
template <int T>
__host__ __device__ constexpr int mv_lane_words() { return (mv_chunk_words<T>() + 31) / 32; }

/* Staged (S = 1): a warp copies each 32-block chunk of its row(s) into
 * shared memory with 4-byte loads across its lanes (each request 128
 * contiguous bytes), then every lane reads its own block there: a lane
 * reading its 18-34-byte block straight from global memory makes each
 * request span 18-34 sectors, 9-17 times over. Rows must start 4-byte
 * aligned (row_bytes % 4 == 0: any row of Q4_1 and Q5_1, an even number
 * of blocks for the others); the same values either way, so the same
 * bits. mv_first: a row's first chunk, loaded while x is quantized (its
 * blocks, or S: the lane's words of it). */
template <int T, int S>
struct mv_first {
    mv_wblock blk[2];
};
template <int T>
struct mv_first<T, 1> {
    uint32_t w[2][mv_lane_words<T>()];
};

template <int T>
__device__ __forceinline__ void mv_words_load(const uint8_t *p, int words, uint32_t (&w)[mv_lane_words<T>()]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < mv_lane_words<T>(); i++)
        if (lane + 32 * i < words) w[i] = __ldg((const unsigned int *)p + lane + 32 * i);
}

template <int T>
__device__ __forceinline__ void mv_words_store(uint32_t *st, int words, const uint32_t (&w)[mv_lane_words<T>()]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < mv_lane_words<T>(); i++)
        if (lane + 32 * i < words) st[lane + 32 * i] = w[i];
}

/* One row's output (SwiGLU: its gate and up rows') for token tok, by a
 * whole warp, x's 8-bit form in shared memory: lane l takes 32-blocks l,
 * l + 32, ..., the exact integer dot by dp4a and the block's term; the
 * terms are added in block order, lane 0's then lane 1's ..., by shuffles
 * (8 issued before their adds: a chain of adds, not of shuffles). w0 (if
 * have_w0): the row's first chunk, loaded already; stage (S): the warp's
 * 2 mv_chunk_words of shared memory, and once w0 is there, the first
 * chunk of the warp's next row (next: its rows; NULL: none) loads into
 * w0 while this row is summed (a warp's rows are otherwise each a wait
 * on memory: the logits matmul's 248,320 rows are ~120 a warp). */
template <int T, int S>
__device__ __forceinline__ void mmv_row(const mm_job &job, const mm_part &P, int gw, int tok, mv_first<T, S> &w0,
                                        int have_w0, const uint4 *xlo, const uint4 *xhi, const float *xd,
                                        const float *xs, uint32_t *stage, size_t w_off,
                                        const uint8_t *const next[2]) {
    constexpr int MIN = mq_min<T>(), CW = mv_chunk_words<T>();
    const int lane = threadIdx.x & 31, swiglu = job.mode == MM_SWIGLU, nb = job.k / 32, nr = swiglu ? 2 : 1;
    const uint8_t *wr[2] = {P.w + (size_t)gw * job.row_bytes, job.p[1].w + w_off + (size_t)gw * job.row_bytes};
    float acc[2] = {0.0f, 0.0f};
    for (int b0 = 0; b0 < nb; b0 += 32) {
        int b = b0 + lane, m = min(32, nb - b0);
        if constexpr (S) {
            __syncwarp(); /* the last chunk's readers are done */
#pragma unroll
            for (int r = 0; r < 2; r++) {
                if (r >= nr) break;
                if (b0 == 0 && have_w0) {
                    mv_words_store<T>(stage + r * CW, mv_words<T>(m), w0.w[r]);
                    if (next[0]) mv_words_load<T>(next[r], mv_words<T>(min(32, nb)), w0.w[r]);
                } else {
                    uint32_t w[mv_lane_words<T>()];
                    mv_words_load<T>(wr[r] + mv_offset<T>(b0), mv_words<T>(m), w);
                    mv_words_store<T>(stage + r * CW, mv_words<T>(m), w);
                }
            }
            __syncwarp();
        }
        float v[2] = {0.0f, 0.0f};
        if (b < nb) {
            uint4 l = xlo[b], h = xhi[b];
            uint32_t xw[8] = {l.x, l.y, l.z, l.w, h.x, h.y, h.z, h.w};
#pragma unroll
            for (int r = 0; r < 2; r++) {
                if (r >= nr) break;
                mv_wblock w;
                if constexpr (S) mv_wload<T, 1>((const uint8_t *)(stage + r * CW), lane, w);
                else if (b0 == 0 && have_w0) w = w0.blk[r];
                else mv_wload<T>(wr[r], b, w);
                int ilo = 0, ihi = 0;
#pragma unroll
                for (int t = 0; t < 4; t++) {
                    ilo = __dp4a((int)w.lo[t], (int)xw[t], ilo);
                    ihi = __dp4a((int)w.hi[t], (int)xw[4 + t], ihi);
                }
                v[r] = mq_term<MIN>(mq_isum<T>(ilo, ihi, w.slo, w.shi), w.d, xd[b], w.m, xs[b]);
            }
        }
#pragma unroll 1
        for (int i0 = 0; i0 < m; i0 += 8)
#pragma unroll
            for (int r = 0; r < 2; r++) {
                if (r >= nr) break;
                float t[8];
#pragma unroll
                for (int i = 0; i < 8; i++) t[i] = __shfl_sync(FULL, v[r], i0 + i);
#pragma unroll
                for (int i = 0; i < 8; i++)
                    if (i0 + i < m) acc[r] = acc[r] + t[i];
            }
    }
    if (lane != 0) return;
    float *y = P.y + (size_t)tok * P.rows + gw;
    if (swiglu) *y = swiglu1(acc[0], acc[1]);
    else *y = job.mode == MM_ADD ? *y + acc[0] : acc[0];
}

/* Decode (n <= 8 tokens): a warp per row (SwiGLU: row r of gate and of
 * up), mmv_row's operations: those of the tensor-core kernel, so the same
 * bits. Per token the block's threads first quantize x into shared
 * memory (mq_xblock, a thread a 32-block: once a block, not once a row;
 * with the job's RMS norm applied first when it has one), the warps'
 * first weight chunks loading meanwhile. A launch of fewer warps than
 * rows (mmv_go caps the grid at g_mmv_blocks: a 248,320-row logits
 * matmul) has warp w take rows w, w + the launch's warps, ...: x is
 * quantized once a block for all of them. Shared memory: mmv_smem. */
template <int T, int S, int G>
__global__ void __launch_bounds__(MM_WARPS * 32) k_mmv(const mm_job job, const mm_groups grp) {
    extern __shared__ uint4 mv_x[]; /* block b's int8: words 0-3 at [b], 4-7 at [nb + b]; then d, s; then stages */
    __shared__ float red[RMS_LANES / 32];
    const int lane = threadIdx.x & 31, w_first = blockIdx.x * MM_WARPS + (threadIdx.x >> 5), nw = gridDim.x * MM_WARPS;
    const int k = job.k, nb = k / 32, nr = job.mode == MM_SWIGLU ? 2 : 1;
    uint4 *xlo = mv_x, *xhi = mv_x + nb;
    float *xd = (float *)(mv_x + 2 * nb), *xs = xd + nb;
    uint32_t *stage = (uint32_t *)(xs + nb) + (threadIdx.x >> 5) * 2 * mv_chunk_words<T>();
    int t0, t1;
    size_t w_off;
    if (!mm_rows_of<G>(job, grp, 0, t0, t1, w_off)) return; /* an empty group: the whole block */
    for (int tok = t0; tok < t1; tok++) {
        /* a warp past the parts computes nothing but still quantizes and meets the barriers */
        mm_part P;
        int gw = w_first;
        const int active = mm_part_of(job, gw, P) >= 0;
        P.w += w_off;
        mv_first<T, S> w0;
#pragma unroll
        for (int r = 0; r < 2; r++) {
            if (!active || r >= nr) continue;
            const uint8_t *row = (r ? job.p[1].w + w_off : P.w) + (size_t)gw * job.row_bytes;
            if constexpr (S) mv_words_load<T>(row, mv_words<T>(min(32, nb)), w0.w[r]);
            else if (lane < nb) mv_wload<T>(row, lane, w0.blk[r]);
        }
        __syncthreads(); /* the last token's readers are done */
        float scale = job.norm_w ? rms_scale(job.x + (size_t)tok * k, k, job.eps, red) : 1.0f; /* block-uniform */
        for (int xb = threadIdx.x; xb - lane < nb; xb += MM_WARPS * 32) { /* whole warps: mq_xblock's shuffles */
            uint32_t q[8];
            float d, s;
            int at = min(xb, nb - 1);
            mq_xblock<mq_group(T)>(job.x + (size_t)tok * k + (size_t)at * 32, q, d, s,
                                   job.norm_w ? job.norm_w + (size_t)at * 32 : NULL, scale);
            if (xb >= nb) continue;
            xd[xb] = d, xs[xb] = s;
            xlo[xb] = make_uint4(q[0], q[1], q[2], q[3]);
            xhi[xb] = make_uint4(q[4], q[5], q[6], q[7]);
        }
        __syncthreads();
        for (int vw = w_first; active; vw += nw) { /* the warp's rows */
            gw = vw;
            if (mm_part_of(job, gw, P) < 0) break;
            P.w += w_off;
            const uint8_t *next[2] = {NULL, NULL};
            mm_part Pn;
            int ng = vw + nw;
            if (S && mm_part_of(job, ng, Pn) >= 0) {
                next[0] = Pn.w + w_off + (size_t)ng * job.row_bytes;
                next[1] = job.p[1].w + w_off + (size_t)ng * job.row_bytes;
            }
            mmv_row<T, S>(job, P, gw, tok, w0, S || vw == w_first, xlo, xhi, xd, xs, stage, w_off, next);
        }
    }
}

/* k_mmv's shared memory for rows of k: a 32-block's 32 int8, d and s;
 * staged, each warp's two chunks. */
template <int T>
static size_t mmv_smem(int k, int staged) {
    return (size_t)(k / 32) * (2 * sizeof(uint4) + 2 * sizeof(float)) +
           (staged ? (size_t)MM_WARPS * 2 * mv_chunk_words<T>() * sizeof(uint32_t) : 0);
}

/* The first of a warp's 16 rows in its tile i of MR (SwiGLU: its 16
 * rows of gate, then the same of up), and row r's bytes in that tile's
 * matrix (past the part's rows: row 0, whose sums are dropped). */
__device__ __forceinline__ int mq_rbase(const mm_job &job, int gw, int i, int MR) {
    return job.mode == MM_SWIGLU ? gw * 16 : (gw * MR + i) * 16;
}
__device__ __forceinline__ const uint8_t *mq_row(const mm_job &job, const mm_part &P, int i, int r, size_t w_off) {
    const uint8_t *w = job.mode == MM_SWIGLU && i == 1 ? job.p[1].w + w_off : P.w + w_off;
    return w + (size_t)(r < P.rows ? r : 0) * job.row_bytes;
}

/* The block's integer dots of a fragment (mq_isum's, each output's): one
 * mma, or for a split type one a half (the other half's weights zero),
 * the halves' dots times rows g's (sc[0], sc[1]) and g + 8's (sc[2],
 * sc[3]) scales. */
template <int T>
__device__ __forceinline__ void mq_isums(int c[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, const int (&sc)[4]) {
    if constexpr (mq_split<T>()) {
        const uint32_t alo[4] = {a[0], a[1], 0u, 0u}, ahi[4] = {0u, 0u, a[2], a[3]};
        int clo[4], chi[4];
        mma_s8(clo, alo, b0, b1);
        mma_s8(chi, ahi, b0, b1);
#pragma unroll
        for (int e = 0; e < 4; e++) c[e] = mq_isum<T>(clo[e], chi[e], sc[(e >> 1) * 2], sc[(e >> 1) * 2 + 1]);
    } else {
        mma_s8(c, a, b0, b1);
    }
}

/* One 32-block's terms added to a warp's sums (MR tiles of 16 rows x NT
 * tiles of 8 tokens): the fragments of the block's weights (a, d, m and
 * the halves' scales of the lane's rows g and g + 8) and activations (b,
 * d, s of its tokens). */
template <int T, int NT, int MR>
__device__ __forceinline__ void mq_block_sums(float (&acc)[MR][NT][4], const uint32_t (&a)[MR][4],
                                              const uint32_t (&bx)[NT][2], const float (&dlo)[MR],
                                              const float (&dhi)[MR], const float (&mlo)[MR], const float (&mhi)[MR],
                                              const int (&sc)[MR][4], const float (&dx)[NT][2],
                                              const float (&sx)[NT][2]) {
    constexpr int MIN = mq_min<T>();
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int i = 0; i < MR; i++) {
            int c[4];
            mq_isums<T>(c, a[i], bx[j][0], bx[j][1], sc[i]);
            acc[i][j][0] = acc[i][j][0] + mq_term<MIN>(c[0], dlo[i], dx[j][0], mlo[i], sx[j][0]);
            acc[i][j][1] = acc[i][j][1] + mq_term<MIN>(c[1], dlo[i], dx[j][1], mlo[i], sx[j][1]);
            acc[i][j][2] = acc[i][j][2] + mq_term<MIN>(c[2], dhi[i], dx[j][0], mhi[i], sx[j][0]);
            acc[i][j][3] = acc[i][j][3] + mq_term<MIN>(c[3], dhi[i], dx[j][1], mhi[i], sx[j][1]);
        }
}

/* A warp's sums to their outputs (stored, added, or SwiGLU of gate and up). */
template <int NT, int MR>
__device__ __forceinline__ void mq_store(const mm_job &job, const mm_part &P, const float (&acc)[MR][NT][4],
                                         const int (&rbase)[MR], int t0, int t1, int g, int t) {
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int c = 0; c < 4; c++) {
            int tok = t0 + j * 8 + 2 * t + (c & 1), r = rbase[0] + g + (c >> 1) * 8;
            if (tok >= t1) continue;
            if (job.mode == MM_SWIGLU) {
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

/* Warp: MR tiles of 16 rows x NT tiles of 8 tokens; the quants of both
 * operands straight from global memory (each k-block's loads are
 * independent of the sums, so they are in flight ahead of them). */
template <int T, int NT, int MR>
__global__ void __launch_bounds__(MM_WARPS * 32) k_mmq(const mm_job job, const mm_groups grp,
                                                       const int8_t *__restrict__ xq, const float *__restrict__ xd,
                                                       const float *__restrict__ xs) {
    constexpr int MIN = mq_min<T>();
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int gw = blockIdx.x * MM_WARPS + (threadIdx.x >> 5);
    mm_part P;
    int part = mm_part_of(job, gw, P), t0, t1;
    size_t w_off;
    if (part < 0 || !mm_rows_of<1>(job, grp, NT * 8, t0, t1, w_off)) return;
    const int k = job.k, nb = k / 32;
    int rbase[MR];
    const uint8_t *wlo[MR], *whi[MR]; /* rows rbase + g and rbase + g + 8 (clamped to a real row) */
#pragma unroll
    for (int i = 0; i < MR; i++) {
        rbase[i] = mq_rbase(job, gw, i, MR);
        wlo[i] = mq_row(job, P, i, rbase[i] + g, w_off), whi[i] = mq_row(job, P, i, rbase[i] + g + 8, w_off);
    }
    /* the lane's tokens, clamped to real ones (the others' sums are dropped) */
    const uint32_t *xb[NT];
    int tk0[NT], tk1[NT];
#pragma unroll
    for (int j = 0; j < NT; j++) {
        int tb = t0 + j * 8;
        xb[j] = (const uint32_t *)(xq + (size_t)min(tb + g, t1 - 1) * k) + t;
        tk0[j] = min(tb + 2 * t, t1 - 1) * nb, tk1[j] = min(tb + 2 * t + 1, t1 - 1) * nb;
    }
    float acc[MR][NT][4] = {};
    /* U k-blocks at a time: all their loads first, then their sums in
     * block order */
    constexpr int U = 2;
    for (int b0 = 0; b0 < nb; b0 += U) {
        uint32_t a[U][MR][4], bx[U][NT][2];
        float dlo[U][MR], dhi[U][MR], mlo[U][MR], mhi[U][MR], dx[U][NT][2], sx[U][NT][2];
        int sc[U][MR][4];
#pragma unroll
        for (int u = 0; u < U; u++) {
            int b = b0 + u;
            if (b >= nb) break;
#pragma unroll
            for (int i = 0; i < MR; i++) {
                mq_wblock<T>(wlo[i], b, t, a[u][i][0], a[u][i][2], dlo[u][i], mlo[u][i]);
                mq_wblock<T>(whi[i], b, t, a[u][i][1], a[u][i][3], dhi[u][i], mhi[u][i]);
                mq_wscales<T>(wlo[i], b, sc[u][i][0], sc[u][i][1]);
                mq_wscales<T>(whi[i], b, sc[u][i][2], sc[u][i][3]);
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
            mq_block_sums<T, NT, MR>(acc, a[u], bx[u], dlo[u], dhi[u], mlo[u], mhi[u], sc[u], dx[u], sx[u]);
        }
    }
    mq_store<NT, MR>(job, P, acc, rbase, t0, t1, g, t);
}

/* Prefill staged (k_mmq_st): the block's 4 warps share each chunk of
 * MQ_KC 32-blocks (a K-quant's super-block) of their 32 tokens'
 * activations, and each warp its rows' chunk, copied into shared memory
 * by cp.async while the block sums the chunk before (two stages): every
 * load of k_mmq went to global memory from each warp alone, a few
 * k-blocks ahead. The same fragments from there, the same sums in block
 * order, so the same bits. Rows must start 4-byte aligned. */
#define MQ_KC 8
#define MQ_XW (MQ_KC * 8 + 4) /* words a token's chunk: its blocks' int8, padded (other banks for other tokens) */

template <int T>
__host__ __device__ constexpr int mq_chunk_words() { return mv_words<T>(MQ_KC); }

/* Types whose rows k_mmq_st can stage: a chunk of MQ_KC blocks is whole
 * words (not Q6_K's 210-byte super-blocks: k_mmq takes them). */
template <int T>
__host__ __device__ constexpr int mq_stageable() { return MQ_KC * mv_chunk_bytes<T>() % 128 == 0; }

template <int T, int MR>
struct mq_stage {
    uint32_t x[32][MQ_XW];
    float xd[32][MQ_KC], xs[32][MQ_KC];
    uint32_t w[MM_WARPS][MR * 16][mq_chunk_words<T>()];
};

/* Starts the copies of chunk b0's activations (all threads) and of the
 * warp's rows (live warps), as this thread's group. */
template <int T, int MR>
__device__ void mq_stage_chunk(mq_stage<T, MR> *st, const mm_job &job, const mm_part &P, int live, const int (&rbase)[MR],
                               const int8_t *xq, const float *xd, const float *xs, int t0, int t1, size_t w_off,
                               int b0) {
    int nb = job.k / 32, nc = min(MQ_KC, nb - b0), lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    for (int x = threadIdx.x; x < 32 * nc * 8; x += blockDim.x) {
        int tk = x / (nc * 8), o = x % (nc * 8), tok = min(t0 + tk, t1 - 1);
        cp_async<4>(&st->x[tk][o], xq + (size_t)tok * job.k + (size_t)b0 * 32 + 4 * o);
    }
    for (int x = threadIdx.x; x < 32 * nc; x += blockDim.x) {
        int tk = x / nc, j = x % nc, tok = min(t0 + tk, t1 - 1);
        cp_async<4>(&st->xd[tk][j], xd + (size_t)tok * nb + b0 + j);
        cp_async<4>(&st->xs[tk][j], xs + (size_t)tok * nb + b0 + j);
    }
    if (live) {
        int words = mv_words<T>(nc); /* whole: b0 and the row's end are 4-byte aligned */
        for (int x = lane; x < MR * 16 * words; x += 32) {
            int r = x / words, o = x % words, i = MR > 1 && r >= 16; /* constant indices: registers */
            const uint8_t *row = mq_row(job, P, i, (i ? rbase[MR - 1] : rbase[0]) + r % 16, w_off);
            cp_async<4>(&st->w[w][r][o], row + mv_offset<T>(b0) + 4 * o);
        }
    }
    cp_async_commit();
}

template <int T, int MR>
__global__ void __launch_bounds__(MM_WARPS * 32) k_mmq_st(const mm_job job, const mm_groups grp,
                                                          const int8_t *__restrict__ xq, const float *__restrict__ xd,
                                                          const float *__restrict__ xs) {
    constexpr int MIN = mq_min<T>(), NT = 4;
    extern __shared__ uint4 mq_smem[];
    mq_stage<T, MR> *st = (mq_stage<T, MR> *)mq_smem;
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, w = threadIdx.x >> 5;
    int gw = blockIdx.x * MM_WARPS + w;
    mm_part P;
    int live = mm_part_of(job, gw, P) >= 0, t0, t1; /* a warp past the parts still copies and waits with the block */
    size_t w_off;
    if (!mm_rows_of<1>(job, grp, NT * 8, t0, t1, w_off)) return; /* the whole block */
    const int nb = job.k / 32;
    int rbase[MR];
#pragma unroll
    for (int i = 0; i < MR; i++) rbase[i] = mq_rbase(job, gw, i, MR);
    float acc[MR][NT][4] = {};
    mq_stage_chunk<T, MR>(&st[0], job, P, live, rbase, xq, xd, xs, t0, t1, w_off, 0);
    for (int b0 = 0, s = 0; b0 < nb; b0 += MQ_KC, s ^= 1) {
        __syncthreads(); /* the chunk before is summed: its stage takes the next */
        if (b0 + MQ_KC < nb)
            mq_stage_chunk<T, MR>(&st[s ^ 1], job, P, live, rbase, xq, xd, xs, t0, t1, w_off, b0 + MQ_KC);
        else cp_async_commit(); /* an empty group: the wait counts the same */
        cp_async_wait<1>();
        __syncthreads();
        if (!live) continue;
        const mq_stage<T, MR> *c = &st[s];
        for (int b = 0; b < min(MQ_KC, nb - b0); b++) {
            uint32_t a[MR][4], bx[NT][2];
            float dlo[MR], dhi[MR], mlo[MR], mhi[MR], dx[NT][2], sx[NT][2];
            int sc[MR][4];
#pragma unroll
            for (int i = 0; i < MR; i++) {
                mq_wblock<T, 1>((const uint8_t *)c->w[w][i * 16 + g], b, t, a[i][0], a[i][2], dlo[i], mlo[i]);
                mq_wblock<T, 1>((const uint8_t *)c->w[w][i * 16 + g + 8], b, t, a[i][1], a[i][3], dhi[i], mhi[i]);
                mq_wscales<T, 1>((const uint8_t *)c->w[w][i * 16 + g], b, sc[i][0], sc[i][1]);
                mq_wscales<T, 1>((const uint8_t *)c->w[w][i * 16 + g + 8], b, sc[i][2], sc[i][3]);
            }
#pragma unroll
            for (int j = 0; j < NT; j++) {
                bx[j][0] = c->x[j * 8 + g][b * 8 + t], bx[j][1] = c->x[j * 8 + g][b * 8 + t + 4];
                dx[j][0] = c->xd[j * 8 + 2 * t][b], dx[j][1] = c->xd[j * 8 + 2 * t + 1][b];
                sx[j][0] = MIN ? c->xs[j * 8 + 2 * t][b] : 0.0f, sx[j][1] = MIN ? c->xs[j * 8 + 2 * t + 1][b] : 0.0f;
            }
            mq_block_sums<T, NT, MR>(acc, a, bx, dlo, dhi, mlo, mhi, sc, dx, sx);
        }
    }
    if (live) mq_store<NT, MR>(job, P, acc, rbase, t0, t1, g, t);
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

/* Whether prefill stages its chunks (k_mmq_st; STRATA_CUDA_MMQ_STAGE=0:
 * never, to time the choice; set by mmv_init). */
static int g_mmq_stage = 1;

/* Prefill (n > 8): a warp takes 16 rows (SwiGLU: 16 of gate and the
 * same 16 of up) x 32 tokens (a group's up to 32 slots), 4 warps a block
 * over the rows. */
template <int T>
static void mmq_go(mm_job job, mm_groups grp, const int8_t *xq, const float *xd, const float *xs) {
    int swiglu = job.mode == MM_SWIGLU, warps = 0;
    for (int i = 0; i < job.np; i++) {
        job.p[i].warps = swiglu ? (i == 0 ? (job.p[0].rows + 15) / 16 : 0) : (job.p[i].rows + 15) / 16;
        warps += job.p[i].warps;
    }
    if (warps == 0) return;
    dim3 grid((warps + MM_WARPS - 1) / MM_WARPS, grp.g ? 1 : (job.n + 31) / 32, grp.g ? grp.n : 1);
    if constexpr (mq_stageable<T>()) {
        if (g_mmq_stage && job.row_bytes % 4 == 0) { /* an expert's rows start aligned too: whole rows */
            size_t smem = 2 * (swiglu ? sizeof(mq_stage<T, 2>) : sizeof(mq_stage<T, 1>));
            if (swiglu) k_mmq_st<T, 2><<<grid, MM_WARPS * 32, smem, g_stream>>>(job, grp, xq, xd, xs);
            else k_mmq_st<T, 1><<<grid, MM_WARPS * 32, smem, g_stream>>>(job, grp, xq, xd, xs);
            return;
        }
    }
    if (swiglu) k_mmq<T, 4, 2><<<grid, MM_WARPS * 32, 0, g_stream>>>(job, grp, xq, xd, xs);
    else k_mmq<T, 4, 1><<<grid, MM_WARPS * 32, 0, g_stream>>>(job, grp, xq, xd, xs);
}

/* The most blocks a decode matmul launches: as many as the device holds
 * at once (one wave; its warps then take several rows each), set by
 * mmv_init. */
static int g_mmv_blocks = 1024;

/* k_mmv's shared memory past 48 KiB (k past ~37,000): up to what the
 * device allows a block. */
static size_t g_mmv_smem_max = 48 * 1024;

/* Staged weight loads where rows allow them (STRATA_CUDA_MMV_STAGE=0:
 * never, to time the choice; set by mmv_init). */
static int g_mmv_stage = 1;

/* Decode: a warp a row (SwiGLU: a row of each). */
template <int T>
static int mmv_go(mm_job job, mm_groups grp, strata_err *err) {
    int swiglu = job.mode == MM_SWIGLU, warps = 0, staged = g_mmv_stage && job.row_bytes % 4 == 0;
    size_t smem = mmv_smem<T>(job.k, staged);
    if (smem > g_mmv_smem_max)
        return strata_errf(err, STRATA_EUNSUPPORTED, "cuda matmul: rows of %d past what the decode kernel's shared "
                           "memory holds (%zu bytes)", job.k, g_mmv_smem_max);
    for (int i = 0; i < job.np; i++) {
        job.p[i].warps = swiglu ? (i == 0 ? job.p[0].rows : 0) : job.p[i].rows;
        warps += job.p[i].warps;
    }
    int groups = grp.g ? grp.n : 1, most = g_mmv_blocks / groups > 0 ? g_mmv_blocks / groups : 1;
    int blocks = (warps + MM_WARPS - 1) / MM_WARPS;
    if (blocks > most) blocks = most;
    if (warps == 0) return 0;
    dim3 grid(blocks, 1, groups);
    if (grp.g && staged) k_mmv<T, 1, 1><<<grid, MM_WARPS * 32, smem, g_stream>>>(job, grp);
    else if (grp.g) k_mmv<T, 0, 1><<<grid, MM_WARPS * 32, smem, g_stream>>>(job, grp);
    else if (staged) k_mmv<T, 1, 0><<<grid, MM_WARPS * 32, smem, g_stream>>>(job, grp);
    else k_mmv<T, 0, 0><<<grid, MM_WARPS * 32, smem, g_stream>>>(job, grp);
    return 0;
}

/* Lets the decode kernels for jobs with groups (G = 1) or without use
 * the shared memory their static memory leaves (*bytes, the least). */
template <int G>
static cudaError_t mmv_allow(int optin_bytes, int *bytes) {
    decltype(&k_mmv<QT_Q4_0, 0, G>) kernels[] = {
        k_mmv<QT_Q4_0, 0, G>, k_mmv<QT_Q4_1, 0, G>, k_mmv<QT_Q5_0, 0, G>, k_mmv<QT_Q5_1, 0, G>,
        k_mmv<QT_Q8_0, 0, G>, k_mmv<QT_Q4_K, 0, G>, k_mmv<QT_Q5_K, 0, G>, k_mmv<QT_Q6_K, 0, G>,
        k_mmv<QT_Q4_0, 1, G>, k_mmv<QT_Q4_1, 1, G>, k_mmv<QT_Q5_0, 1, G>, k_mmv<QT_Q5_1, 1, G>,
        k_mmv<QT_Q8_0, 1, G>, k_mmv<QT_Q4_K, 1, G>, k_mmv<QT_Q5_K, 1, G>, k_mmv<QT_Q6_K, 1, G>};
    int left = 0;
    cudaError_t e = allow_smem_left(kernels, optin_bytes, &left);
    if (left < *bytes) *bytes = left;
    return e;
}

int mmv_init(int optin_bytes, int sms, strata_err *err) {
    /* the dynamic gets what the kernels' static memory (the norm's partial sums) leaves */
    int dynamic = optin_bytes;
    cudaError_t e = mmv_allow<0>(optin_bytes, &dynamic);
    if (e == cudaSuccess) e = mmv_allow<1>(optin_bytes, &dynamic);
    if (e != cudaSuccess)
        return strata_errf(err, STRATA_EUNSUPPORTED, "cuda: allowing the decode matmul %d bytes of shared memory: %s",
                           dynamic, cudaGetErrorString(e));
    g_mmv_smem_max = (size_t)dynamic;
    const char *st = getenv("STRATA_CUDA_MMV_STAGE");
    g_mmv_stage = !(st && !strcmp(st, "0"));
    int staged_bytes = (int)(2 * sizeof(mq_stage<QT_Q8_0, 2>)); /* the largest */
    decltype(&k_mmq_st<QT_Q4_0, 1>) prefill[] = {
        k_mmq_st<QT_Q4_0, 1>, k_mmq_st<QT_Q4_1, 1>, k_mmq_st<QT_Q5_0, 1>, k_mmq_st<QT_Q5_1, 1>, k_mmq_st<QT_Q8_0, 1>,
        k_mmq_st<QT_Q4_K, 1>, k_mmq_st<QT_Q5_K, 1>, k_mmq_st<QT_Q4_0, 2>, k_mmq_st<QT_Q4_1, 2>, k_mmq_st<QT_Q5_0, 2>,
        k_mmq_st<QT_Q5_1, 2>, k_mmq_st<QT_Q8_0, 2>, k_mmq_st<QT_Q4_K, 2>, k_mmq_st<QT_Q5_K, 2>};
    if ((e = allow_smem(prefill, staged_bytes)) != cudaSuccess)
        return strata_errf(err, STRATA_EUNSUPPORTED, "cuda: allowing the prefill matmul %d bytes of shared memory: %s",
                           staged_bytes, cudaGetErrorString(e));
    const char *pst = getenv("STRATA_CUDA_MMQ_STAGE");
    g_mmq_stage = !(pst && !strcmp(pst, "0"));
    int per_sm = 0; /* with a 4096-column row's shared memory (14 KiB staged): registers bound it */
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k_mmv<QT_Q8_0, 1, 0>, MM_WARPS * 32,
                                                      mmv_smem<QT_Q8_0>(4096, 1));
    if (e != cudaSuccess || per_sm < 1) per_sm = 1;
    g_mmv_blocks = per_sm * (sms > 0 ? sms : 1);
    return 0;
}

extern "C" int cuda_matmul_reserve(int n, int k, strata_err *err) {
    return xq_reserve((size_t)n * k + 2 * (size_t)n * (k / 32) * sizeof(float), err);
}

#define MQ_DECODE 8 /* tokens up to which k_mmv runs */

/* The 8-bit decode kernel (k_mmv) applies a job's RMS norm itself. */
extern "C" int cuda_matmul_norms(qtype t, int n) { return mmq_type(t) && n <= MQ_DECODE; }

int mmq_launch(qtype t, mm_job job, mm_groups grp, strata_err *err) {
    if (job.n <= MQ_DECODE) {
        switch (t) {
        case QT_Q4_0: return mmv_go<QT_Q4_0>(job, grp, err);
        case QT_Q4_1: return mmv_go<QT_Q4_1>(job, grp, err);
        case QT_Q5_0: return mmv_go<QT_Q5_0>(job, grp, err);
        case QT_Q5_1: return mmv_go<QT_Q5_1>(job, grp, err);
        case QT_Q8_0: return mmv_go<QT_Q8_0>(job, grp, err);
        case QT_Q4_K: return mmv_go<QT_Q4_K>(job, grp, err);
        case QT_Q5_K: return mmv_go<QT_Q5_K>(job, grp, err);
        case QT_Q6_K: return mmv_go<QT_Q6_K>(job, grp, err);
        default: return 0;
        }
    }
    int rows = grp.g ? grp.rows : job.n; /* x's: with groups, every slot */
    size_t nb = (size_t)rows * (job.k / 32), qbytes = (size_t)rows * job.k;
    int rc = cuda_matmul_reserve(rows, job.k, err);
    if (rc) return rc;
    int8_t *xq = g_xq;
    float *xd = (float *)(g_xq + qbytes), *xs = xd + nb;
    if (mq_group(t) == 8)
        k_q8x<8><<<(unsigned)((nb + 127) / 128), 128, 0, g_stream>>>(xq, xd, xs, job.x, (int)nb);
    else
        k_q8x<1><<<(unsigned)((nb + 127) / 128), 128, 0, g_stream>>>(xq, xd, xs, job.x, (int)nb);
    switch (t) {
    case QT_Q4_0: mmq_go<QT_Q4_0>(job, grp, xq, xd, xs); break;
    case QT_Q4_1: mmq_go<QT_Q4_1>(job, grp, xq, xd, xs); break;
    case QT_Q5_0: mmq_go<QT_Q5_0>(job, grp, xq, xd, xs); break;
    case QT_Q5_1: mmq_go<QT_Q5_1>(job, grp, xq, xd, xs); break;
    case QT_Q8_0: mmq_go<QT_Q8_0>(job, grp, xq, xd, xs); break;
    case QT_Q4_K: mmq_go<QT_Q4_K>(job, grp, xq, xd, xs); break;
    case QT_Q5_K: mmq_go<QT_Q5_K>(job, grp, xq, xd, xs); break;
    case QT_Q6_K: mmq_go<QT_Q6_K>(job, grp, xq, xd, xs); break;
    default: break;
    }
    return 0;
}
