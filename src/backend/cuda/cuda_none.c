/* cuda_none.c - cuda.h in a build without nvcc (CUDA=0 or no toolkit):
 * cuda_open says so, and nothing else may be called after it fails. */
#include "backend/cuda/cuda.h"

#define NO_CUDA "this strata was built without the CUDA backend (no nvcc at build time; `make CUDA=1`)"

int cuda_built(void) { return 0; }
int cuda_open(strata_err *err) { return strata_errf(err, STRATA_EUNSUPPORTED, NO_CUDA); }
const char *cuda_device_name(void) { return "none"; }
void *cuda_alloc(size_t bytes, strata_err *err) {
    strata_errf(err, STRATA_EUNSUPPORTED, NO_CUDA);
    return NULL;
}
void cuda_free(void *d_p) {}
int cuda_upload(void *d_dst, const void *src, size_t bytes, strata_err *err) {
    return strata_errf(err, STRATA_EUNSUPPORTED, NO_CUDA);
}
int cuda_download(void *dst, const void *d_src, size_t bytes, strata_err *err) {
    return strata_errf(err, STRATA_EUNSUPPORTED, NO_CUDA);
}
int cuda_sync(strata_err *err) { return strata_errf(err, STRATA_EUNSUPPORTED, NO_CUDA); }
int cuda_supports(qtype t) { return 0; }
int cuda_matmul_q8(qtype t) { return 0; }
int cuda_matmul_reserve(int n, int k, strata_err *err) { return strata_errf(err, STRATA_EUNSUPPORTED, NO_CUDA); }
int cuda_matmul(qtype t, const void *d_w, size_t row_bytes, int rows, int k, const float *d_x, int n, float *d_y,
                strata_err *err) {
    return strata_errf(err, STRATA_EUNSUPPORTED, NO_CUDA);
}
int cuda_matmul_multi(qtype t, size_t row_bytes, int k, const float *d_x, int n, int np, const void *const d_w[],
                      const int rows[], float *const d_y[], int add, const float *d_norm_w, float eps,
                      strata_err *err) {
    return strata_errf(err, STRATA_EUNSUPPORTED, NO_CUDA);
}
int cuda_matmul_swiglu(qtype t, size_t row_bytes, int rows, int k, const float *d_x, int n, const void *d_gate,
                       const void *d_up, float *d_y, const float *d_norm_w, float eps, strata_err *err) {
    return strata_errf(err, STRATA_EUNSUPPORTED, NO_CUDA);
}
int cuda_matmul_norms(qtype t, int n) { return 0; }
int cuda_embed(float *d_x, qtype t, const void *d_emb, size_t row_bytes, int dim, const int32_t *d_tok, int n,
               float scale, strata_err *err) {
    return strata_errf(err, STRATA_EUNSUPPORTED, NO_CUDA);
}
void cuda_rmsnorm(float *d_out, const float *d_x, const float *d_w, int n_rows, int dim, float eps) {}
void cuda_rope(float *d_x, int n, int row_len, int n_heads, int head_dim, int rope_dim, int neox,
               const int32_t *d_pos, const float *d_inv_freq, float pos_div) {}
void cuda_swiglu(float *d_g, const float *d_u, size_t n) {}
void cuda_geglu(float *d_g, const float *d_u, size_t n) {}
void cuda_add(float *d_x, const float *d_y, size_t n) {}
void cuda_add_rows(float *d_x, const float *d_b, int n, int dim) {}
void cuda_gather(float *d_dst, const float *d_src, const int32_t *d_rows, int n, int dim) {}
void cuda_moe_add(float *d_x, const float *d_y, const int32_t *d_slot, const float *d_w, int n, int k, int dim,
                  const float *d_sh_y, const float *d_sh_s) {}
int cuda_moe_init(strata_err *err) { return strata_errf(err, STRATA_EUNSUPPORTED, NO_CUDA); }
int cuda_moe_route(const float *d_logits, int n, const cuda_moe_gating *g, int32_t *d_ids, float *d_w,
                   strata_err *err) {
    return strata_errf(err, STRATA_EUNSUPPORTED, NO_CUDA);
}
int cuda_moe_group(const int32_t *d_ids, int n, int k, int n_expert, int32_t *d_first, int32_t *d_slot_of,
                   int32_t *d_slot_tok, int32_t *d_groups, strata_err *err) {
    return strata_errf(err, STRATA_EUNSUPPORTED, NO_CUDA);
}
int cuda_matmul_experts(qtype t, const void *d_w, const void *d_up, size_t step, size_t row_bytes, int rows, int k,
                        const float *d_x, int n, int slots, const int32_t *d_groups, int n_groups, float *d_y,
                        strata_err *err) {
    return strata_errf(err, STRATA_EUNSUPPORTED, NO_CUDA);
}
void cuda_kv_store(uint16_t *d_kc, uint16_t *d_vc, const float *d_k, const float *d_v, const int32_t *d_pos,
                   int n, int kvd) {}
void cuda_rope_kv_store(float *d_q, float *d_k, const float *d_v, uint16_t *d_kc, uint16_t *d_vc, int n, int n_head,
                        int n_head_kv, int head_dim, int rope_dim, int neox, const int32_t *d_pos,
                        const float *d_inv_freq, float pos_div) {}
size_t cuda_attention_scratch(int max_tok, int n_head, int head_dim, int max_ctx) { return 0; }
int cuda_attention(float *d_out, float *d_scratch, const float *d_q, const uint16_t *d_kc, const uint16_t *d_vc,
                   const int32_t *d_pos, int n, int max_end, int max_ctx, int n_head, int n_head_kv, int head_dim,
                   float scale, strata_err *err) {
    return strata_errf(err, STRATA_EUNSUPPORTED, NO_CUDA);
}
int cuda_attention_window(float *d_out, float *d_scratch, const float *d_q, const uint16_t *d_kc,
                          const uint16_t *d_vc, const int32_t *d_pos, int n, int max_end, int max_ctx, int n_head,
                          int n_head_kv, int head_dim, float scale, int n_swa, strata_err *err) {
    return strata_errf(err, STRATA_EUNSUPPORTED, NO_CUDA);
}
void cuda_argmax(int32_t *d_idx, const float *d_x, int n_rows, int n) {}
void cuda_kv_store_at(uint16_t *d_kc, uint16_t *d_vc, const float *d_k, const float *d_v, const int64_t *d_dst,
                      const int32_t *d_pos, int n, int kvd) {}
void cuda_rope_kv_store_at(float *d_q, float *d_k, const float *d_v, uint16_t *d_kc, uint16_t *d_vc,
                           const int64_t *d_dst, int n, int n_head, int n_head_kv, int head_dim, int rope_dim,
                           int neox, const int32_t *d_pos, const float *d_inv_freq, float pos_div,
                           const float *d_q_norm, const float *d_k_norm, float eps) {}
int cuda_attention_paged(float *d_out, float *d_scratch, const float *d_q, const uint16_t *d_kc, const uint16_t *d_vc,
                         const int32_t *d_table, int block_tokens, size_t block_halves, const int32_t *d_pos, int n,
                         const int32_t *d_blocks, const int32_t *h_blocks, int n_blocks, int one_block_a_run,
                         int max_end, int max_ctx, int n_head, int n_head_kv, int head_dim, float scale, int n_swa,
                         strata_err *err) {
    return strata_errf(err, STRATA_EUNSUPPORTED, NO_CUDA);
}
int cuda_attention_block_tokens(int n_head, int n_head_kv, int head_dim) { return 0; }
int cuda_delta_init(strata_err *err) { return strata_errf(err, STRATA_EUNSUPPORTED, NO_CUDA); }
void cuda_zero(void *d_p, size_t bytes) {}
int cuda_delta_conv(float *d_y, const float *d_x, float *d_state, const float *d_w, int n, int channels, int d_conv,
                    strata_err *err) {
    return strata_errf(err, STRATA_EUNSUPPORTED, NO_CUDA);
}
int cuda_delta_gates(float *d_qkv, float *d_beta, float *d_decay, const float *d_dt, const float *d_a, int n,
                     int channels, int dim, int n_k_heads, int n_v_heads, float eps, strata_err *err) {
    return strata_errf(err, STRATA_EUNSUPPORTED, NO_CUDA);
}
int cuda_delta_rule(float *d_o, float *d_state, const float *d_qkv, const float *d_beta, const float *d_decay, int n,
                    int channels, int dim, int n_k_heads, int n_v_heads, float scale, strata_err *err) {
    return strata_errf(err, STRATA_EUNSUPPORTED, NO_CUDA);
}
int cuda_delta_conv_runs(float *d_y, const float *d_x, const cuda_delta_run *d_runs, int n_runs, int max_n,
                         size_t state_off, const float *d_w, int channels, int d_conv, strata_err *err) {
    return strata_errf(err, STRATA_EUNSUPPORTED, NO_CUDA);
}
int cuda_delta_rule_runs(float *d_o, const cuda_delta_run *d_runs, int n_runs, size_t state_off, const float *d_qkv,
                         const float *d_beta, const float *d_decay, int channels, int dim, int n_k_heads,
                         int n_v_heads, float scale, strata_err *err) {
    return strata_errf(err, STRATA_EUNSUPPORTED, NO_CUDA);
}
int cuda_delta_gated_norm(float *d_o, const float *d_z, const float *d_w, int n, int n_v_heads, int dim, float eps,
                          strata_err *err) {
    return strata_errf(err, STRATA_EUNSUPPORTED, NO_CUDA);
}
void cuda_gate_split(float *d_q, float *d_gate, const float *d_qg, int n, int n_head, int head_dim) {}
void cuda_sigmoid_mul(float *d_o, const float *d_g, size_t n) {}
const devmem *cuda_devmem(void) { return NULL; }
int cuda_graph_begin(strata_err *err) { return strata_errf(err, STRATA_EUNSUPPORTED, NO_CUDA); }
int cuda_graph_end(cuda_graph **out, strata_err *err) { return strata_errf(err, STRATA_EUNSUPPORTED, NO_CUDA); }
int cuda_graph_run(cuda_graph *g, strata_err *err) { return strata_errf(err, STRATA_EUNSUPPORTED, NO_CUDA); }
void cuda_graph_free(cuda_graph *g) {}
