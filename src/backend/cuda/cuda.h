/* cuda.h - the CUDA backend's C interface: one device, plain device
 * buffers, and the kernels the llama-family forward pass needs.
 *
 * Every pointer named d_* is device memory (cuda_alloc). Kernels run in
 * order on one stream; cuda_download and cuda_sync wait for them and
 * report the first error any of them hit (a launch failure, a fault), so
 * callers check errors at those points. Without nvcc the build links
 * cuda_none.c instead: cuda_open then says the binary has no CUDA backend.
 *
 * Batch invariance (DESIGN.md): every kernel computes each output element
 * with a reduction order fixed by the shapes alone (k, head_dim, the key
 * positions), never by the number of tokens in the call, their order or
 * the grid; no atomics in any reduction. So a token's row has the same
 * bits alone, in any batch and in any chunking (tests/test_cuda.c checks
 * this on the GPU with memcmp).
 * Does not: know about models (model/forward_cuda.c drives these). */
#ifndef STRATA_CUDA_H
#define STRATA_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "backend/devmem.h"
#include "backend/quant.h"
#include "base/err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The numerics of this backend's forward pass, mixed into the model
 * fingerprint of every block hash (cache_numerics_fingerprint): its bits
 * are not the CPU's. Bump the number whenever any kernel's result bits
 * change (another summation order, another rounding), so blocks computed
 * by the old kernels are never served to the new ones. cuda-2: 8-bit
 * activations and tensor cores for the legacy quants (cuda_matmul_q8).
 * cuda-3: attention on the tensor cores (q and the softmax weights in
 * half, cuda_kern.cu), and Q4_K / Q5_K on the 8-bit path. cuda-4: Q6_K
 * on the 8-bit path (a Q4_K_M file's down, V and output rows), and the
 * K-quants' inputs rounded per 256 as the CPU's Q8_K (the same int8 and
 * d: an MoE model's near ties route as the CPU's do). cuda-5: a mixture
 * of experts routed on the device (cuda_moe_route: the softmax's double
 * sum over lanes, in index order on the host before).
 * It names qwen35's kernels too (cuda_delta.cu, added under cuda-2: no
 * GPU block of a qwen35 model existed before them); their bits are the
 * same on every GPU, so no per-model or per-level suffix (the CPU's
 * delta_numerics has one: its kernels differ by level). */
#define CUDA_NUMERICS "cuda-5"

/* 1 when this binary was built with the CUDA backend. */
int cuda_built(void);
/* Opens device 0 (once per process; later calls return the first
 * result). Fails with a clear reason when the binary has no CUDA backend,
 * no driver is loaded or no GPU is present. */
int cuda_open(strata_err *err);
/* "NVIDIA H100 80GB HBM3, sm_90, 132 SMs" (after cuda_open). */
const char *cuda_device_name(void);

void *cuda_alloc(size_t bytes, strata_err *err); /* NULL + err on failure */
void cuda_free(void *d_p);                        /* NULL is fine */
int cuda_upload(void *d_dst, const void *src, size_t bytes, strata_err *err);
/* Waits for the queued kernels, then copies; reports their first error. */
int cuda_download(void *dst, const void *d_src, size_t bytes, strata_err *err);
int cuda_sync(strata_err *err);

/* Weight types the matmul and embedding kernels read. */
int cuda_supports(qtype t);

/* d_y[t * rows + r] = dot(weight row r, d_x[t * k ..]) for t < n, r < rows.
 * Weights in their GGUF layout, row_bytes apart; k % 32 == 0 (% 256 for
 * the K-quants). Two paths, chosen by the weight type alone:
 * - cuda_matmul_q8(t) (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K): x
 *   quantized to 8 bits per 32-block as the CPU's Q8_1 (d = amax / 127,
 *   round half away; for the K-quants amax over the block's 256, as the
 *   CPU's Q8_K), each block's integer dot exact (tensor cores; Q6_K: its
 *   halves' dots times their scales), the blocks' terms (float)isum *
 *   (dw * dx) [+ mw * sx] added in block order;
 * - the others: float x on dequantized weights; lane l of a warp sums the
 *   8-element chunks l, l + 32, ... in order, then a fixed butterfly adds
 *   the lanes. */
int cuda_matmul_q8(qtype t);
/* Sizes the 8-bit path's activation buffer (one per process) for n
 * tokens of k: call it before recording a graph, in which the buffer
 * cannot grow (such a matmul fails with STRATA_EINVAL). */
int cuda_matmul_reserve(int n, int k, strata_err *err);
int cuda_matmul(qtype t, const void *d_w, size_t row_bytes, int rows, int k, const float *d_x, int n,
                float *d_y, strata_err *err);
/* Fused launches (decode is launch-bound: fewer, larger kernels), each
 * (row, token) with cuda_matmul's operations, so the same bits as the
 * separate calls. cuda_matmul_multi: np (1 to 3) matmuls of one weight
 * type, row_bytes and k over the same d_x (Q, K, V), d_y[i] = W_i x, or
 * d_y[i] += W_i x with add (the residual: cuda_matmul then cuda_add).
 * cuda_matmul_swiglu: d_y = silu(W_gate x) * (W_up x) (cuda_matmul twice,
 * then cuda_swiglu). Both take d_norm_w: NULL, or (only where
 * cuda_matmul_norms says so) x's rows are RMS normed with these weights
 * and eps first, cuda_rmsnorm's bits (one kernel less a norm). */
int cuda_matmul_multi(qtype t, size_t row_bytes, int k, const float *d_x, int n, int np, const void *const d_w[],
                      const int rows[], float *const d_y[], int add, const float *d_norm_w, float eps,
                      strata_err *err);
int cuda_matmul_swiglu(qtype t, size_t row_bytes, int rows, int k, const float *d_x, int n, const void *d_gate,
                       const void *d_up, float *d_y, const float *d_norm_w, float eps, strata_err *err);
/* 1 when those launches of type t over n tokens can apply the RMS norm
 * (the 8-bit decode kernel: legacy quants, up to 8 tokens). */
int cuda_matmul_norms(qtype t, int n);
/* d_x[i * dim ..] = dequantized row d_tok[i] of the embedding (the CPU's
 * quant_dequant_row bits), times scale when scale != 1. */
int cuda_embed(float *d_x, qtype t, const void *d_emb, size_t row_bytes, int dim, const int32_t *d_tok, int n,
               float scale, strata_err *err);
/* d_out[i] = d_x[i] / rms(d_x[i]) * d_w over n_rows rows of dim (in place ok). */
void cuda_rmsnorm(float *d_out, const float *d_x, const float *d_w, int n_rows, int dim, float eps);
/* RoPE on n_heads heads (head_dim floats apart) of each of n rows (row_len
 * floats apart) at positions d_pos, angle pos / pos_div * d_inv_freq[i],
 * computed in double as the CPU does; neox: pairs (i, i + rope_dim/2). */
void cuda_rope(float *d_x, int n, int row_len, int n_heads, int head_dim, int rope_dim, int neox,
               const int32_t *d_pos, const float *d_inv_freq, float pos_div);
/* d_g[i] = silu(d_g[i]) * d_u[i]. */
void cuda_swiglu(float *d_g, const float *d_u, size_t n);
/* d_g[i] = gelu(d_g[i]) * d_u[i], GELU in its tanh form (gemma; the CPU's
 * act_gelu_tanh_mul, backend/act.h, with the same float steps). */
void cuda_geglu(float *d_g, const float *d_u, size_t n);
/* d_x[i] += d_y[i]. */
void cuda_add(float *d_x, const float *d_y, size_t n);
/* d_x[t * dim + i] += d_b[i] for t < n (a bias on every row). */
void cuda_add_rows(float *d_x, const float *d_b, int n, int dim);
/* Rows d_src[d_rows[i]] to d_dst[i] (dim floats each). */
void cuda_gather(float *d_dst, const float *d_src, const int32_t *d_rows, int n, int dim);
/* Mixture of experts, per token t < n: d_x[t] += sum over j < k, in j
 * order, of d_w[t k + j] * d_y[d_slot[t k + j]] (its experts' output
 * rows, best first), + sigmoid(d_sh_s[t]) * d_sh_y[t] when d_sh_y (a
 * shared expert). Rows of dim floats. */
void cuda_moe_add(float *d_x, const float *d_y, const int32_t *d_slot, const float *d_w, int n, int k, int dim,
                  const float *d_sh_y, const float *d_sh_s);
/* A mixture of experts' routing on the device (cuda_moe.cu), so that no
 * step waits on the host (a decode step stays one graph). cuda_moe_route:
 * per token t < n, from its n_expert router logits, model/moe.c's
 * moe_route (gating, the k best with ties to the lower id, the weights'
 * softmax or renormalisation, scale) -> d_ids[t k + j], d_w[t k + j]: its
 * bits (glibc's expf; the softmax's double sum over lanes, the same sum
 * unless the exps span more than 2^29); cuda_moe_init first, once.
 * cuda_moe_group: moe_group's slots (the
 * pairs grouped by expert, tokens in batch order): d_first[e] (n_expert +
 * 1 entries; NULL: not wanted), d_slot_of[t k + j], d_slot_tok[slot], and d_groups:
 * cuda_moe_groups(n, k, n_expert) entries of CUDA_GROUP_INTS ints (expert,
 * first slot, slots), each expert's slots in groups of up to
 * CUDA_MOE_TILE, the experts in order, then entries of 0 slots. */
enum { CUDA_GATE_SOFTMAX, CUDA_GATE_SIGMOID, CUDA_GATE_SOFTMAX_WEIGHT };
#define CUDA_MOE_MAX_EXPERTS 1024
#define CUDA_MOE_MAX_USED 32
#define CUDA_MOE_TILE 32
#define CUDA_GROUP_INTS 3
typedef struct cuda_moe_gating {
    int n_expert, k, gating, norm; /* norm: the k weights renormalised to sum 1 */
    float scale;                   /* 0 or 1: none */
} cuda_moe_gating;
int cuda_moe_init(strata_err *err);
int cuda_moe_route(const float *d_logits, int n, const cuda_moe_gating *g, int32_t *d_ids, float *d_w,
                   strata_err *err);
/* At most one partial group an expert: the non-empty experts (at most
 * n k, at most n_expert) plus n k / CUDA_MOE_TILE. */
static inline int cuda_moe_groups(int n, int k, int n_expert) {
    return (n * k < n_expert ? n * k : n_expert) + n * k / CUDA_MOE_TILE;
}
int cuda_moe_group(const int32_t *d_ids, int n, int k, int n_expert, int32_t *d_first, int32_t *d_slot_of,
                   int32_t *d_slot_tok, int32_t *d_groups, strata_err *err);
/* The experts' matmuls of n tokens' slots rows of d_x, one launch: for
 * each of the n_groups groups of d_groups (cuda_moe_group's), expert e's
 * matrix (d_w + e * step bytes) times d_x's rows of its slots into d_y's;
 * with d_up (same type, rows and step) SwiGLU of gate d_w and up d_up, as
 * cuda_matmul_swiglu. cuda_matmul's bits for each row (the kernel is
 * chosen by n, as there); nothing read on the host, so a graph may hold
 * it. */
int cuda_matmul_experts(qtype t, const void *d_w, const void *d_up, size_t step, size_t row_bytes, int rows, int k,
                        const float *d_x, int n, int slots, const int32_t *d_groups, int n_groups, float *d_y,
                        strata_err *err);
/* K and V rows of n tokens to half-float caches [pos][kvd] at d_pos. */
void cuda_kv_store(uint16_t *d_kc, uint16_t *d_vc, const float *d_k, const float *d_v, const int32_t *d_pos,
                   int n, int kvd);
/* cuda_rope on d_q (n_head heads) and d_k (n_head_kv), then
 * cuda_kv_store of the rotated d_k and d_v, in one launch. */
void cuda_rope_kv_store(float *d_q, float *d_k, const float *d_v, uint16_t *d_kc, uint16_t *d_vc, int n, int n_head,
                        int n_head_kv, int head_dim, int rope_dim, int neox, const int32_t *d_pos,
                        const float *d_inv_freq, float pos_div);
/* Causal attention: token i's query head h reads key/value positions
 * [0, d_pos[i]] of KV head h / (n_head / n_head_kv) in the caches
 * [pos][n_head_kv * head_dim]; q and out are [n][n_head * head_dim].
 * Keys are cut into segments of CUDA_ATTN_SEG positions at fixed places,
 * each computed by its own block for all query heads of a KV head (an
 * online softmax over 32-key tiles), and a token's segment states are
 * folded in segment order: prefill, decode and any batch give a query the
 * same bits. max_end: the largest d_pos + 1 of the call (it sizes the
 * grid; a larger one only adds blocks that leave at once); max_ctx: the
 * positions d_scratch was sized for (cuda_attention_scratch floats).
 * head_dim a multiple of 32 up to 256, at most 16 query heads per KV
 * head. The products are the tensor cores' (q and the softmax weights
 * rounded to half, float sums). */
#define CUDA_ATTN_SEG 256
size_t cuda_attention_scratch(int max_tok, int n_head, int head_dim, int max_ctx);
int cuda_attention(float *d_out, float *d_scratch, const float *d_q, const uint16_t *d_kc, const uint16_t *d_vc,
                   const int32_t *d_pos, int n, int max_end, int max_ctx, int n_head, int n_head_kv, int head_dim,
                   float scale, strata_err *err);
/* The same, on a sliding-window layer (gemma3): token i reads positions
 * [d_pos[i] + 1 - n_swa, d_pos[i]] only (n_swa 0: all, cuda_attention).
 * The same tiles and per-row arithmetic: a row's bits still depend only
 * on its query and key positions. (Not yet run on a GPU.) */
int cuda_attention_window(float *d_out, float *d_scratch, const float *d_q, const uint16_t *d_kc,
                          const uint16_t *d_vc, const int32_t *d_pos, int n, int max_end, int max_ctx, int n_head,
                          int n_head_kv, int head_dim, float scale, int n_swa, strata_err *err);
/* Paged K/V (a KV pool in device memory, model/kv.h): the same kernels
 * with each token's cache row given, so the same bits as the contiguous
 * caches above. d_kc, d_vc: one layer's K and V rows of block 0 of the
 * pool (kv_rows(pool, 0, layer, 0 / 1)); d_dst[i]: halves from there to
 * token i's row (block * block_halves + (pos % B) * kvd, from the host).
 * Attention takes a batch of runs (a run: consecutive tokens of one
 * sequence) in one launch, as query blocks: block i is the call's tokens
 * [b[0], b[0] + b[1]) of one run (b = 3 i of the list, on the device in
 * d_blocks and the same on the host in h_blocks, which shapes the launch;
 * b[1] at most cuda_attention_block_tokens), whose positions p are in
 * pool blocks d_table[b[2] + p / block_tokens]; one_block_a_run: each run
 * is one block (decode: its K/V tiles kept in flight, its fold in the
 * launch). A row's bits are those of its run alone. A sliding-window layer (n_swa > 0, as
 * cuda_attention_window) keeps its rows in the pool's slots: d_kc, d_vc
 * are then slot 0's rows, block_halves the slots' stride, d_table the
 * blocks' slots, and an entry before the window of the call's first token
 * (-1: no slot) is never read: tiles before a row's window are skipped
 * whole, a tile's keys before the first window's start read its start's
 * row (weight zero either way), and every row of the call starts at or
 * after the first's.
 * (Not yet run on a GPU: `serve --device cuda`, src/backend/cuda/README.md.) */
void cuda_kv_store_at(uint16_t *d_kc, uint16_t *d_vc, const float *d_k, const float *d_v, const int64_t *d_dst,
                      const int32_t *d_pos, int n, int kvd);
/* ... with each head of d_q and d_k RMS-normed first (cuda_rmsnorm's
 * bits) when d_q_norm / d_k_norm (head_dim weights) are not NULL. */
void cuda_rope_kv_store_at(float *d_q, float *d_k, const float *d_v, uint16_t *d_kc, uint16_t *d_vc,
                           const int64_t *d_dst, int n, int n_head, int n_head_kv, int head_dim, int rope_dim,
                           int neox, const int32_t *d_pos, const float *d_inv_freq, float pos_div,
                           const float *d_q_norm, const float *d_k_norm, float eps);
int cuda_attention_paged(float *d_out, float *d_scratch, const float *d_q, const uint16_t *d_kc, const uint16_t *d_vc,
                         const int32_t *d_table, int block_tokens, size_t block_halves, const int32_t *d_pos, int n,
                         const int32_t *d_blocks, const int32_t *h_blocks, int n_blocks, int one_block_a_run,
                         int max_end, int max_ctx, int n_head, int n_head_kv, int head_dim, float scale, int n_swa,
                         strata_err *err);
int cuda_attention_block_tokens(int n_head, int n_head_kv, int head_dim);

/* ---- qwen35 (cuda_delta.cu) --------------------------------------------------
 * The gated delta-net layer of model/deltanet.c and the gated attention's
 * extras, for one sequence a call. Each kernel does the CPU's float steps
 * in the CPU's order (backend/delta.c's scalar kernel, libm's expf as
 * glibc computes it), so with the same inputs it gives the CPU
 * reference's bits, the decay's logf aside (an ulp at most). States
 * ([layer] in device memory) carry over between calls: a token's bits
 * are the same in any chunking. dim: the state size (ssm.state_size),
 * a multiple of 8 up to CUDA_DELTA_MAX_DIM; d_qkv rows: channels floats,
 * [q heads | k heads | v heads] (n_k_heads, n_k_heads, n_v_heads of dim). */
#define CUDA_DELTA_MAX_DIM 256
/* Copies the table the kernels' expf reads to the device; once per
 * process (later calls do nothing), before any graph is recorded. */
int cuda_delta_init(strata_err *err);
/* bytes of d_p set to 0 (queued on the stream). */
void cuda_zero(void *d_p, size_t bytes);
/* The short causal conv over n tokens, then SiLU: per channel,
 * y = h_0 w_0 + ... + h_(K-2) w_(K-2) + x w_(K-1) with h the channel's
 * last K - 1 inputs, oldest first (d_state: [K - 1][channels], updated);
 * d_w: ssm_conv1d, [channels][K]. d_y may be d_x (then token by token;
 * otherwise from 16 tokens a thread per token: the same bits). */
int cuda_delta_conv(float *d_y, const float *d_x, float *d_state, const float *d_w, int n, int channels, int d_conv,
                    strata_err *err);
/* Per token, in place: q and k heads L2-normed (x / sqrt(sum x^2 + eps));
 * d_beta[t * n_v_heads + h] = sigmoid(beta); d_decay = exp(softplus(alpha
 * + d_dt[h]) * d_a[h]) (d_decay holds alpha on the way in). */
int cuda_delta_gates(float *d_qkv, float *d_beta, float *d_decay, const float *d_dt, const float *d_a, int n,
                     int channels, int dim, int n_k_heads, int n_v_heads, float eps, strata_err *err);
/* The delta rule per value head h (key head h % n_k_heads) over n tokens
 * in order, on d_state ([n_v_heads][dim][dim], row j = value dim j):
 * S *= decay; d = beta (v - S k); S += d k^T; o = (S q) scale, to d_o
 * ([n][n_v_heads * dim]). */
int cuda_delta_rule(float *d_o, float *d_state, const float *d_qkv, const float *d_beta, const float *d_decay, int n,
                    int channels, int dim, int n_k_heads, int n_v_heads, float scale, strata_err *err);
/* Several sequences a launch (the paged pass): a run is tokens [t0,
 * t0 + n) of the call, one sequence's, and its state (every recurrent
 * layer's; a layer's is state_off floats in). The _runs kernels take a
 * table of n_runs in device memory and give each run the bits of the
 * one-run call on its tokens and state (grid z is the run). */
typedef struct cuda_delta_run {
    int t0, n;
    float *state;
} cuda_delta_run;
/* max_n: the most tokens a run has (the conv's grid). */
int cuda_delta_conv_runs(float *d_y, const float *d_x, const cuda_delta_run *d_runs, int n_runs, int max_n,
                         size_t state_off, const float *d_w, int channels, int d_conv, strata_err *err);
int cuda_delta_rule_runs(float *d_o, const cuda_delta_run *d_runs, int n_runs, size_t state_off, const float *d_qkv,
                         const float *d_beta, const float *d_decay, int channels, int dim, int n_k_heads,
                         int n_v_heads, float scale, strata_err *err);
/* d_o's n x n_v_heads rows of dim: RMS-normed times d_w, then times SiLU(d_z). */
int cuda_delta_gated_norm(float *d_o, const float *d_z, const float *d_w, int n, int n_v_heads, int dim, float eps,
                          strata_err *err);
/* Q rows that carry a gate ([n][n_head][q | gate], head_dim each): the q
 * parts to d_q, the gates to d_gate ([n][n_head * head_dim] each). */
void cuda_gate_split(float *d_q, float *d_gate, const float *d_qg, int n, int n_head, int head_dim);
/* d_o[i] *= 1 / (1 + exp(-d_g[i])) (the attention output's gate). */
void cuda_sigmoid_mul(float *d_o, const float *d_g, size_t n);

/* The device's memory as backend/devmem.h sees it (after cuda_open; NULL
 * before or without the backend): the kernels' stream is DEVMEM_COMPUTE,
 * a second stream carries DEVMEM_COPY (uploads from the RAM tier and
 * the disk overlap with the kernels), host memory is pinned
 * (cudaHostAlloc). A KV pool on it lives in GPU memory. */
const devmem *cuda_devmem(void);

/* d_idx[i] = first index of the largest value of row i (NaN never wins). */
void cuda_argmax(int32_t *d_idx, const float *d_x, int n_rows, int n);

/* Graphs (decode steps): cuda_graph_begin records the kernels queued
 * after it instead of running them, cuda_graph_end turns the record into
 * a graph, cuda_graph_run replays it. Arguments are frozen at capture:
 * buffers must stay put, and what changes from one replay to the next
 * (token ids, positions) must be read from device memory. No copies while
 * recording. */
typedef struct cuda_graph cuda_graph;
int cuda_graph_begin(strata_err *err);
int cuda_graph_end(cuda_graph **out, strata_err *err);
int cuda_graph_run(cuda_graph *g, strata_err *err);
void cuda_graph_free(cuda_graph *g); /* NULL is fine */

#ifdef __cplusplus
}
#endif

#endif
