/* cuda_delta.cu - qwen35's kernels (cuda.h, "qwen35"): the gated
 * delta-net layer (the short causal conv with its state, the gates, the
 * delta rule with its state, the gated RMS norm) and the gated attention's
 * extras (the gate split off the Q rows, the output times sigmoid(gate)).
 *
 * Each kernel does the CPU's float operations in the CPU's order
 * (model/deltanet.c; backend/delta.c's scalar kernel, the reference;
 * libm's expf, as backend/vexp.h computes it), so given the same inputs
 * it gives the CPU reference's bits, but for the decay's logf:
 *  - expf is glibc's, step for step as backend/vexp_avx512.c takes it:
 *    in double, its FMAs, its table of 2^(i/32) (vexp__exp2_32, copied to
 *    the device by cuda_delta_init), and glibc's branches for |x| >= 88
 *    (-inf, inf and NaN, overflow past 0x1.62e42ep6, underflow below
 *    -0x1.9fe368p6; between those the main path, as glibc's);
 *  - logf (softplus, in the decay) is log in double rounded to float:
 *    correctly rounded but for inputs within ~2^-29 of a tie, where
 *    glibc's logf (0.82 ulp at most) may round the other way: an ulp;
 *  - sums are the CPU's chains: delta_dot's 8 chains and fixed tree for
 *    the delta rule's dots and the q/k L2 norms (8 threads a vector,
 *    thread c the chain of elements c, c + 8, ..., the tree by xor
 *    shuffles 1, 2, 4: ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))
 *    in every thread); the gated norm's sum of squares one chain in
 *    element order (fwd__rmsnorm); the conv's taps oldest first;
 *  - built with -fmad=false: a * b + c is two roundings, as in the CPU's
 *    base build (the scalar kernels have no FMA).
 * The avx2 / avx512 delta kernels the CPU engine picks by level have
 * other bits (FMA, other chains; delta.h): the GPU follows the scalar one
 * on every machine and for every state size.
 *
 * Batch invariance: the conv and the delta rule walk the call's tokens in
 * order (a thread per channel, 8 threads per state row), the state in
 * registers across the call and in device memory between calls, so a
 * token's bits are the same alone, in any chunk or in one prefill. The
 * other kernels are per token. No atomics; no sum's order depends on the
 * grid or on n.
 * Does not: several sequences a call (the state is one sequence's: the
 * one-sequence pass, model/forward_cuda.c), snapshots of the state. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

extern "C" {
#include "backend/cuda/cuda.h"
}
#include "backend/cuda/cuda_int.h"

/* ---- glibc's expf ------------------------------------------------------------ */

__device__ double g_exp2[32]; /* 2^(i/32): vexp__exp2_32, by cuda_delta_init */

extern "C" int cuda_delta_init(strata_err *err) {
    static int done;
    return exp_table_upload(g_exp2, &done, err);
}

__device__ __forceinline__ float exp_glibc(float x) { return exp_glibc(x, g_exp2); }

/* g / (1 + e^-g): vexp_silu_mul's element (without u). */
__device__ __forceinline__ float silu_glibc(float g) { return g / (1.0f + exp_glibc(-g)); }

/* delta_dot's tree over the 8 threads of an aligned group, each holding
 * its chain: every thread gets ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)).
 * The whole warp must call it. */
__device__ __forceinline__ float tree8(float a) {
    a += __shfl_xor_sync(FULL, a, 1);
    a += __shfl_xor_sync(FULL, a, 2);
    return a + __shfl_xor_sync(FULL, a, 4);
}

static int check_dim(int dim, strata_err *err) {
    if (dim > 0 && dim % 8 == 0 && dim <= CUDA_DELTA_MAX_DIM) return 0;
    return strata_errf(err, STRATA_EUNSUPPORTED, "cuda delta net: state size %d (a multiple of 8, at most %d)", dim,
                       CUDA_DELTA_MAX_DIM);
}

extern "C" void cuda_zero(void *d_p, size_t bytes) {
    if (bytes) cudaMemsetAsync(d_p, 0, bytes, g_stream);
}

/* ---- the conv -------------------------------------------------------------------- */

#define DN_KMAX 16 /* model_qwen35.c bounds d_conv */

/* Run blockIdx.z of a run table (runs non-NULL: its tokens and state,
 * state_off floats in), or the call's one run (n tokens from 0, state). */
__device__ __forceinline__ int dn_run(const cuda_delta_run *runs, size_t state_off, float **state, int *n) {
    if (!runs) return 0;
    cuda_delta_run r = runs[blockIdx.z];
    *state = r.state + state_off;
    *n = r.n;
    return r.t0;
}

/* A thread per channel over the call's tokens in order: y = 0 + h_0 w_0
 * + ... + h_(K-2) w_(K-2) + x w_(K-1) (h_0 the oldest input; deltanet.c's
 * conv_sum), then SiLU. state: [K - 1][channels], the oldest row first;
 * w: ssm_conv1d as stored, [channels][K]. y may be x: a thread reads
 * its element before writing it. */
__global__ void k_dn_conv(float *y, const float *x, float *state, const float *w, int n, int C, int K,
                          const cuda_delta_run *runs, size_t state_off) {
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= C) return;
    size_t t0 = (size_t)dn_run(runs, state_off, &state, &n);
    y += t0 * C, x += t0 * C;
    int R = K - 1;
    float h[DN_KMAX], wk[DN_KMAX], wl = w[(size_t)ch * K + R];
#pragma unroll
    for (int k = 0; k < DN_KMAX - 1; k++) {
        wk[k] = k < R ? w[(size_t)ch * K + k] : 0.0f;
        h[k] = k < R ? state[(size_t)k * C + ch] : 0.0f;
    }
    for (int t = 0; t < n; t++) {
        float xv = x[(size_t)t * C + ch], acc = 0.0f;
#pragma unroll
        for (int k = 0; k < DN_KMAX - 1; k++)
            if (k < R) acc += h[k] * wk[k];
#pragma unroll
        for (int k = 0; k < DN_KMAX - 1; k++) /* the oldest out, x in */
            if (k < R - 1) h[k] = h[k + 1];
            else if (k == R - 1) h[k] = xv;
        y[(size_t)t * C + ch] = silu_glibc(acc + xv * wl);
    }
#pragma unroll
    for (int k = 0; k < DN_KMAX - 1; k++)
        if (k < R) state[(size_t)k * C + ch] = h[k];
}

/* The same outputs a thread per (token blockIdx.y, channel): the taps
 * read inputs only (x, or the state for the first K - 1 tokens), never
 * outputs, so the tokens need not go in order; the same sum in the same
 * order, so the same bits. y must not be x; the state is left as it was
 * (k_dn_conv_state moves it on, after every token has read it). */
__global__ void k_dn_conv_tok(float *y, const float *x, const float *state, const float *w, int n, int C, int K,
                              const cuda_delta_run *runs, size_t state_off) {
    int ch = blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y;
    float *st = (float *)state;
    size_t t0 = (size_t)dn_run(runs, state_off, &st, &n);
    if (ch >= C || t >= n) return;
    y += t0 * C, x += t0 * C;
    int R = K - 1;
    float acc = 0.0f;
    for (int k = 0; k < R; k++) { /* tap k: the input at time t - R + k (the state's row t + k before time 0) */
        int at = t - R + k;
        float h = at >= 0 ? x[(size_t)at * C + ch] : st[(size_t)(t + k) * C + ch];
        acc += h * w[(size_t)ch * K + k];
    }
    float xv = x[(size_t)t * C + ch];
    y[(size_t)t * C + ch] = silu_glibc(acc + xv * w[(size_t)ch * K + R]);
}

/* The state after n tokens: its rows are the last K - 1 inputs, oldest
 * first (x's, or the old state's while n < K - 1); a thread a channel. */
__global__ void k_dn_conv_state(float *state, const float *x, int n, int C, int K, const cuda_delta_run *runs,
                                size_t state_off) {
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    size_t t0 = (size_t)dn_run(runs, state_off, &state, &n);
    if (ch >= C || n <= 0) return;
    x += t0 * C;
    int R = K - 1;
    float h[DN_KMAX];
#pragma unroll
    for (int k = 0; k < DN_KMAX - 1; k++) { /* all read before any is written: row n + k may be row k' < k */
        int at = n - R + k;
        h[k] = k >= R ? 0.0f : at >= 0 ? x[(size_t)at * C + ch] : state[(size_t)(n + k) * C + ch];
    }
#pragma unroll
    for (int k = 0; k < DN_KMAX - 1; k++)
        if (k < R) state[(size_t)k * C + ch] = h[k];
}

/* Tokens from which the conv takes a thread per token (two launches);
 * fewer go through k_dn_conv's one launch, token by token. */
#define DN_CONV_PARALLEL 16

static int conv_go(float *d_y, const float *d_x, float *d_state, const float *d_w, int n, int channels, int d_conv,
                   const cuda_delta_run *d_runs, size_t state_off, int n_runs, strata_err *err) {
    if (d_conv < 1 || d_conv > DN_KMAX)
        return strata_errf(err, STRATA_EUNSUPPORTED, "cuda delta net: conv kernel %d (1 to %d)", d_conv, DN_KMAX);
    if (n <= 0 || channels <= 0 || n_runs <= 0) return 0;
    unsigned cb = (unsigned)((channels + 127) / 128);
    if (n < DN_CONV_PARALLEL || d_y == d_x) {
        k_dn_conv<<<dim3(cb, 1, n_runs), 128, 0, g_stream>>>(d_y, d_x, d_state, d_w, n, channels, d_conv, d_runs,
                                                            state_off);
        return 0;
    }
    k_dn_conv_tok<<<dim3(cb, n, n_runs), 128, 0, g_stream>>>(d_y, d_x, d_state, d_w, n, channels, d_conv, d_runs,
                                                            state_off);
    k_dn_conv_state<<<dim3(cb, 1, n_runs), 128, 0, g_stream>>>(d_state, d_x, n, channels, d_conv, d_runs, state_off);
    return 0;
}

extern "C" int cuda_delta_conv(float *d_y, const float *d_x, float *d_state, const float *d_w, int n, int channels,
                               int d_conv, strata_err *err) {
    return conv_go(d_y, d_x, d_state, d_w, n, channels, d_conv, NULL, 0, 1, err);
}

extern "C" int cuda_delta_conv_runs(float *d_y, const float *d_x, const cuda_delta_run *d_runs, int n_runs,
                                    int max_n, size_t state_off, const float *d_w, int channels, int d_conv,
                                    strata_err *err) {
    return conv_go(d_y, d_x, NULL, d_w, max_n, channels, d_conv, d_runs, state_off, n_runs, err);
}

/* ---- the gates ------------------------------------------------------------------- */

/* Block per token: q and k heads L2-normed (x / sqrt(delta_dot(x, x) +
 * eps), 8 threads a head), then per value head beta = sigmoid(beta) and
 * the decay exp(softplus(alpha + dt) * A) (deltanet.c's gates). A
 * thread's elements load into registers together before its chain of
 * squares (decode is one block: a load a link of the chain was ~10 us a
 * launch on the H200). */
__global__ void k_dn_gates(float *qkv, float *beta, float *dec, const float *dt, const float *a, int C, int S, int hk,
                           int hv, float eps) {
    constexpr int EM = CUDA_DELTA_MAX_DIM / 8;
    int t = blockIdx.x, c = threadIdx.x & 7, ne = S / 8;
    float *row = qkv + (size_t)t * C;
    for (int v0 = 0; v0 < 2 * hk; v0 += blockDim.x / 8) { /* vectors: q heads, then k heads */
        int v = v0 + (int)threadIdx.x / 8, live = v < 2 * hk; /* a group past them only joins the shuffles */
        float *x = row + (size_t)v * S, xv[EM], acc = 0.0f;
#pragma unroll
        for (int m = 0; m < EM; m++) xv[m] = live && m < ne ? x[c + 8 * m] : 0.0f;
#pragma unroll
        for (int m = 0; m < EM; m++)
            if (m < ne) acc += xv[m] * xv[m];
        float scale = 1.0f / sqrtf(tree8(acc) + eps); /* a thread rewrites only the elements it read */
#pragma unroll
        for (int m = 0; m < EM; m++)
            if (live && m < ne) x[c + 8 * m] = xv[m] * scale;
    }
    for (int h = threadIdx.x; h < hv; h += blockDim.x) {
        float *bt = beta + (size_t)t * hv + h, *g = dec + (size_t)t * hv + h;
        *bt = 1.0f / (1.0f + exp_glibc(-*bt));
        float sp = *g + dt[h]; /* softplus(x): x past 20, else log(1 + e^x) */
        if (!(sp > 20.0f)) sp = (float)log((double)(1.0f + exp_glibc(sp)));
        *g = exp_glibc(sp * a[h]);
    }
}

extern "C" int cuda_delta_gates(float *d_qkv, float *d_beta, float *d_decay, const float *d_dt, const float *d_a,
                                int n, int channels, int dim, int n_k_heads, int n_v_heads, float eps,
                                strata_err *err) {
    if (check_dim(dim, err)) return err ? err->code : STRATA_EUNSUPPORTED;
    if (n > 0)
        k_dn_gates<<<n, 128, 0, g_stream>>>(d_qkv, d_beta, d_decay, d_dt, d_a, channels, dim, n_k_heads, n_v_heads,
                                            eps);
    return 0;
}

/* ---- the delta rule ---------------------------------------------------------------- */

#define DN_ROWS 16 /* state rows a block: 8 threads a row, 128 threads */
#define DN_TILE 8  /* tokens whose k, q, v, beta and decay a block stages at once */

/* One tile's inputs in shared memory: the tokens' k and q (of key head
 * h % hk), the block's rows of v, beta and decay. */
struct dn_tile {
    float k[DN_TILE][CUDA_DELTA_MAX_DIM], q[DN_TILE][CUDA_DELTA_MAX_DIM];
    float v[DN_TILE][DN_ROWS], beta[DN_TILE], decay[DN_TILE];
};

/* Starts the copies of tokens [t0, t0 + nt) into tl (cp.async: they run
 * while the block works on the tile before) and commits them as this
 * thread's group; v past the state's last row reads 0. */
__device__ void dn_stage(dn_tile *tl, const float *kb, const float *qb, const float *vb, const float *beta,
                         const float *dec, int t0, int nt, int C, int S, int hv, int h, int rows) {
    for (int x = threadIdx.x; x < nt * S; x += blockDim.x) {
        int tt = x / S, i = x % S;
        cp_async<4>(&tl->k[tt][i], kb + (size_t)(t0 + tt) * C + i);
        cp_async<4>(&tl->q[tt][i], qb + (size_t)(t0 + tt) * C + i);
    }
    for (int x = threadIdx.x; x < nt * DN_ROWS; x += blockDim.x) {
        int tt = x / DN_ROWS, jj = x % DN_ROWS;
        if (jj < rows) cp_async<4>(&tl->v[tt][jj], vb + (size_t)(t0 + tt) * C + jj);
        else tl->v[tt][jj] = 0.0f;
    }
    if (threadIdx.x < nt) {
        cp_async<4>(&tl->beta[threadIdx.x], beta + (size_t)(t0 + threadIdx.x) * hv + h);
        cp_async<4>(&tl->decay[threadIdx.x], dec + (size_t)(t0 + threadIdx.x) * hv + h);
    }
    cp_async_commit();
}

/* Value head blockIdx.y, rows [DN_ROWS blockIdx.x, + DN_ROWS) of its
 * state S ([dim][dim], row j = value dim j, as delta.h): thread c of row
 * j's group holds S[j][c + 8 m] (m < dim / 8 <= E) in registers across
 * the call's tokens. Per token, delta.c's row_scalar: S *= decay;
 * d = (v - S k) beta; S += d k; o = (S q) scale, the dots delta_dot's.
 * The tokens' inputs come through shared memory a tile of DN_TILE at a
 * time, the next tile's copies in flight while this one is used: a
 * token's step waits on its two sums, not on memory (prefill's tokens
 * one after another are what the layer's time is). */
template <int E>
__global__ void __launch_bounds__(128) k_dn_delta(float *o, float *state, const float *qkv, const float *beta,
                                                  const float *dec, int n, int C, int S, int hk, int hv, float scale,
                                                  const cuda_delta_run *runs, size_t state_off) {
    __shared__ dn_tile tiles[2];
    size_t tr = (size_t)dn_run(runs, state_off, &state, &n); /* the run's first token in the call */
    o += tr * hv * S, qkv += tr * C, beta += tr * hv, dec += tr * hv;
    int h = blockIdx.y, c = threadIdx.x & 7, jr = threadIdx.x >> 3, j = blockIdx.x * DN_ROWS + jr, ne = S / 8;
    int live = j < S, qk = hk * S; /* a row past S (S % 16 == 8) runs along on row 0 and stores nothing */
    int rows = min(DN_ROWS, S - (int)blockIdx.x * DN_ROWS);
    float *row = state + ((size_t)h * S + (live ? j : 0)) * S;
    const float *kb = qkv + qk + (size_t)(h % hk) * S, *qb = qkv + (size_t)(h % hk) * S;
    const float *vb = qkv + 2 * (size_t)qk + (size_t)h * S + (size_t)blockIdx.x * DN_ROWS;
    if (n > 0) dn_stage(&tiles[0], kb, qb, vb, beta, dec, 0, min(DN_TILE, n), C, S, hv, h, rows);
    float r[E];
#pragma unroll
    for (int m = 0; m < E; m++) r[m] = m < ne ? row[c + 8 * m] : 0.0f;
    for (int t0 = 0, b = 0; t0 < n; t0 += DN_TILE, b ^= 1) {
        int nt = min(DN_TILE, n - t0);
        __syncthreads(); /* the tile before is used up: its buffer takes the next one */
        if (t0 + DN_TILE < n) dn_stage(&tiles[b ^ 1], kb, qb, vb, beta, dec, t0 + DN_TILE, min(DN_TILE, n - t0 - DN_TILE),
                                       C, S, hv, h, rows);
        else cp_async_commit(); /* an empty group: the wait below counts the same */
        cp_async_wait<1>(); /* this tile's copies (the next one's go on) */
        __syncthreads();
        const dn_tile *tl = &tiles[b];
        for (int tt = 0; tt < nt; tt++) {
            float decay = tl->decay[tt], a = 0.0f, bs = 0.0f;
#pragma unroll
            for (int m = 0; m < E; m++)
                if (m < ne) {
                    r[m] = r[m] * decay;
                    a += r[m] * tl->k[tt][c + 8 * m];
                }
            float d = (tl->v[tt][jr] - tree8(a)) * tl->beta[tt];
#pragma unroll
            for (int m = 0; m < E; m++)
                if (m < ne) {
                    r[m] += d * tl->k[tt][c + 8 * m];
                    bs += r[m] * tl->q[tt][c + 8 * m];
                }
            bs = tree8(bs);
            if (live && c == 0) o[(size_t)(t0 + tt) * hv * S + (size_t)h * S + j] = bs * scale;
        }
    }
    if (live) {
#pragma unroll
        for (int m = 0; m < E; m++)
            if (m < ne) row[c + 8 * m] = r[m];
    }
}

/* k_dn_delta's launch for the state size: a block per 16 rows of each
 * value head, of each run (grid z). */
static int delta_rule_go(float *d_o, float *d_state, const float *d_qkv, const float *d_beta, const float *d_decay,
                         int n, int channels, int dim, int n_k_heads, int n_v_heads, float scale,
                         const cuda_delta_run *d_runs, size_t state_off, int n_runs) {
    dim3 grid((dim + DN_ROWS - 1) / DN_ROWS, n_v_heads, n_runs);
    int e = dim / 8;
#define DN_GO(E)                                                                                          \
    k_dn_delta<E><<<grid, 128, 0, g_stream>>>(d_o, d_state, d_qkv, d_beta, d_decay, n, channels, dim, n_k_heads, \
                                              n_v_heads, scale, d_runs, state_off)
    if (e <= 4) DN_GO(4);
    else if (e <= 8) DN_GO(8);
    else if (e <= 16) DN_GO(16);
    else DN_GO(32);
#undef DN_GO
    return 0;
}

extern "C" int cuda_delta_rule(float *d_o, float *d_state, const float *d_qkv, const float *d_beta,
                               const float *d_decay, int n, int channels, int dim, int n_k_heads, int n_v_heads,
                               float scale, strata_err *err) {
    if (check_dim(dim, err)) return err ? err->code : STRATA_EUNSUPPORTED;
    if (n <= 0) return 0;
    return delta_rule_go(d_o, d_state, d_qkv, d_beta, d_decay, n, channels, dim, n_k_heads, n_v_heads, scale, NULL, 0,
                         1);
}

extern "C" int cuda_delta_rule_runs(float *d_o, const cuda_delta_run *d_runs, int n_runs, size_t state_off,
                                    const float *d_qkv, const float *d_beta, const float *d_decay, int channels,
                                    int dim, int n_k_heads, int n_v_heads, float scale, strata_err *err) {
    if (check_dim(dim, err)) return err ? err->code : STRATA_EUNSUPPORTED;
    if (n_runs <= 0) return 0;
    return delta_rule_go(d_o, NULL, d_qkv, d_beta, d_decay, 0, channels, dim, n_k_heads, n_v_heads, scale, d_runs,
                         state_off, n_runs);
}

/* ---- the gated norm ------------------------------------------------------------------ */

/* A warp per (token, value head): o = rmsnorm(o) * w (fwd__rmsnorm: the
 * sum of squares one chain in element order, (x * scale) * w), then
 * times SiLU(z) (vexp_silu_mul(o, z, o): SiLU(z) * o). The row is staged
 * in shared memory; every lane runs the chain (the same value). */
__global__ void __launch_bounds__(128) k_dn_gated_norm(float *o, const float *z, const float *w, int rows, int S,
                                                       float eps) {
    constexpr int EL = CUDA_DELTA_MAX_DIM / 32; /* a lane's elements at most */
    __shared__ float sx[4][CUDA_DELTA_MAX_DIM];
    int wi = threadIdx.x >> 5, lane = threadIdx.x & 31, r = blockIdx.x * 4 + wi;
    if (r >= rows) return; /* whole warps */
    float *x = o + (size_t)r * S, *s = sx[wi], zl[EL], wl[EL];
    const float *zr = z + (size_t)r * S;
#pragma unroll
    for (int e = 0; e < EL; e++) { /* the lane's loads together (decode: few warps, each waiting otherwise) */
        int i = lane + 32 * e;
        if (i < S) s[i] = x[i], zl[e] = zr[i], wl[e] = w[i];
    }
    __syncwarp();
    float ss = 0.0f;
#pragma unroll 8
    for (int i = 0; i < S; i++) ss += s[i] * s[i];
    float scale = 1.0f / sqrtf(ss / (float)S + eps);
#pragma unroll
    for (int e = 0; e < EL; e++) {
        int i = lane + 32 * e;
        if (i < S) x[i] = silu_glibc(zl[e]) * (s[i] * scale * wl[e]);
    }
}

extern "C" int cuda_delta_gated_norm(float *d_o, const float *d_z, const float *d_w, int n, int n_v_heads, int dim,
                                     float eps, strata_err *err) {
    if (check_dim(dim, err)) return err ? err->code : STRATA_EUNSUPPORTED;
    int rows = n * n_v_heads;
    if (rows > 0) k_dn_gated_norm<<<(rows + 3) / 4, 128, 0, g_stream>>>(d_o, d_z, d_w, rows, dim, eps);
    return 0;
}

/* ---- the gated attention's extras ------------------------------------------------------ */

/* Q rows [head][q | gate] (2 head_dim each) to q and gate ([head][head_dim]). */
__global__ void k_gate_split(float *q, float *gate, const float *qg, size_t n, int d) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    size_t hd = i / d, at = hd * 2 * d + i % d; /* hd: (token, head) */
    q[i] = qg[at];
    gate[i] = qg[at + d];
}

extern "C" void cuda_gate_split(float *d_q, float *d_gate, const float *d_qg, int n, int n_head, int head_dim) {
    size_t all = (size_t)n * n_head * head_dim;
    if (all) k_gate_split<<<(unsigned)((all + 255) / 256), 256, 0, g_stream>>>(d_q, d_gate, d_qg, all, head_dim);
}

/* o *= 1 / (1 + e^-g): vexp_sigmoid_mul's element. */
__global__ void k_sigmoid_mul(float *o, const float *g, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) o[i] = o[i] * (1.0f / (1.0f + exp_glibc(-g[i])));
}

extern "C" void cuda_sigmoid_mul(float *d_o, const float *d_g, size_t n) {
    if (n) k_sigmoid_mul<<<(unsigned)((n + 255) / 256), 256, 0, g_stream>>>(d_o, d_g, n);
}
