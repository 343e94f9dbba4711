/* model.h - a loaded model: hyperparameters and weight views.
 *
 * model_load reads the architecture's hyperparameters from GGUF metadata
 * and binds every tensor it needs, checking names, shapes and types, so
 * the forward pass never meets a surprise. Weights stay in the read-only
 * map owned by the model. Supported: llama (Llama 2/3, SmolLM2, TinyLlama,
 * Mistral), qwen2 (QKV bias), qwen3 (QK-norm), gemma3 (QK-norm, pre and
 * post norms, GELU, scaled embeddings, sliding-window layers interleaved
 * with global ones, each kind with its own RoPE base), qwen35 (Qwen3.5/3.6
 * dense: gated delta-net recurrent layers interleaved with gated full
 * attention layers; model_qwen35.c), and the mixture-of-experts
 * variants qwen3moe (qwen3 attention) and qwen35moe (the qwen35 hybrid
 * with a shared expert), model_moe.c, and gpt-oss (attention with
 * biases and sinks, sliding window 128 on even layers, YaRN everywhere,
 * experts with biases and a clamped SwiGLU, usually in MXFP4).
 * Does not: run anything (forward.c) or tokenize (text/). */
#ifndef STRATA_MODEL_H
#define STRATA_MODEL_H

#include <stdint.h>

#include "backend/quant.h"
#include "base/err.h"
#include "model/gguf.h"

typedef enum {
    ARCH_LLAMA, ARCH_QWEN2, ARCH_QWEN3, ARCH_GEMMA3, ARCH_QWEN35, ARCH_QWEN3MOE, ARCH_QWEN35MOE, ARCH_GPTOSS
} model_arch;

/* How router logits become expert weights (llama.cpp's gating funcs):
 * softmax over all experts then top-k; sigmoid per expert then top-k;
 * top-k of the raw logits then softmax over the chosen (gpt-oss). */
typedef enum { MOE_GATE_SOFTMAX, MOE_GATE_SIGMOID, MOE_GATE_SOFTMAX_WEIGHT } moe_gating;
/* The experts' gated activation: SiLU(gate) * up; or gpt-oss's clamped
 * SwiGLU, g = min(gate, 7), g * sigmoid(1.702 g) * (clamp(up, -7, 7) + 1)
 * (llama.cpp's swiglu_oai). */
typedef enum { MOE_ACT_SILU, MOE_ACT_SWIGLU_OAI } moe_act;

typedef enum { ROPE_SCALE_NONE, ROPE_SCALE_LINEAR, ROPE_SCALE_YARN } rope_scaling;

typedef struct model_hparams {
    model_arch arch;
    char arch_name[32];
    int n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, n_vocab, n_ctx_train;
    float rms_eps;
    float rope_base;
    int rope_dim;  /* rotated dimensions per head (<= head_dim) */
    int rope_neox; /* 1: rotate (i, i+d/2) pairs; 0: adjacent pairs */
    rope_scaling rope_scale;
    float rope_factor;     /* linear/yarn factor (1 = none) */
    int rope_orig_ctx;     /* yarn: original context length */
    float yarn_beta_fast, yarn_beta_slow, yarn_attn_factor;
    float attn_scale;     /* multiplies q.k (1/sqrt(head_dim) unless the arch says) */
    float embd_scale;     /* multiplies the token embeddings (gemma: sqrt(n_embd)) */
    float logit_softcap;  /* final logits: cap * tanh(x / cap); 0 = none */
    int ffn_gelu;         /* 1: GELU(gate) * up (tanh form); 0: SiLU(gate) * up */
    /* Sliding-window attention: layers with swa set see only the last
     * n_swa positions (the query's included); with swa_rope (gemma3) they
     * rotate with rope_base_swa, without rope scaling, else as the other
     * layers (gpt-oss). n_swa 0: no such layers. */
    int n_swa;
    int swa_rope;
    float rope_base_swa;
    /* Layers that keep K/V (all but recurrent ones): the KV pool's layers. */
    int n_kv_layer;
    /* qwen35 (gated delta net), llama.cpp's ssm.* keys: conv kernel
     * width, inner (value) size, head size (keys and values), value heads
     * (time_step_rank) and key heads (group_count). n_rec_layer 0: none. */
    int n_rec_layer;
    int ssm_d_conv, ssm_d_inner, ssm_d_state, ssm_n_v_heads, ssm_n_k_heads;
    int attn_gate;         /* qwen35: Q rows carry a sigmoid output gate per head */
    int n_nextn;           /* qwen35: MTP blocks stored after the n_layer trunk blocks */
    int rope_sections[4];  /* qwen35 interleaved M-RoPE sections (text: see forward.c) */
    /* Mixture of experts (n_expert 0: a dense feed-forward): each token's
     * top n_expert_used experts of n_expert, each a SwiGLU of n_ff_exp;
     * n_ff_shexp: the shared expert's width (0: none). The chosen
     * weights are renormalised to sum 1 when expert_norm, then times
     * expert_scale unless it is 0 or 1 (llama.cpp's w_scale). */
    int n_expert, n_expert_used, n_ff_exp, n_ff_shexp;
    moe_gating expert_gating;
    moe_act expert_act;
    int expert_norm;
    float expert_scale;
} model_hparams;

/* A weight matrix [rows][cols] (cols = ne[0]) or vector (rows = 1). */
typedef struct model_tensor {
    const void *data; /* NULL when the optional tensor is absent */
    qtype type;
    int64_t cols, rows;
    size_t row_bytes;
} model_tensor;

/* A stack of n_expert matrices [n_expert][rows][cols] (a 3-D GGUF
 * tensor): expert e's matrix starts e * expert_bytes into the map;
 * moe_expert() (model/moe.h) views it as a model_tensor. */
typedef struct model_experts {
    model_tensor m; /* expert 0's matrix; rows, cols, row_bytes per expert */
    int n_expert;
    size_t expert_bytes;
} model_experts;

/* A layer's mixture-of-experts feed-forward (model_moe.c binds it). */
typedef struct model_moe {
    model_tensor router;               /* ffn_gate_inp: n_embd -> n_expert logits */
    model_tensor router_b;             /* ffn_gate_inp.bias, optional */
    model_experts gate, up, down;      /* ffn_{gate,up,down}_exps */
    model_tensor gate_b, up_b, down_b; /* ffn_*_exps.bias: [n_expert][rows] F32, optional */
    /* Shared expert (qwen35moe): a SwiGLU every token runs, times
     * sigmoid(sh_gate_inp . x); absent when sh_up.data is NULL. */
    model_tensor sh_gate_inp, sh_gate, sh_up, sh_down;
} model_moe;

typedef struct model_layer {
    model_tensor attn_norm, wq, wk, wv, wo;
    model_tensor bq, bk, bv;         /* qwen2, gpt-oss */
    model_tensor bo;                 /* gpt-oss: attn_output.bias */
    model_tensor sinks;              /* gpt-oss: attn_sinks, one logit per query head (backend/attn.h) */
    model_tensor q_norm, k_norm;     /* qwen3 */
    model_tensor ffn_norm, w_gate, w_up, w_down;
    model_tensor post_attn_norm, post_ffn_norm; /* gemma3: on each block's output */
    int swa;                                    /* sliding-window layer (hparams.n_swa) */
    /* qwen35 recurrent (gated delta net) layer: in-projections of the
     * conv channels (q|k|v) and of the output gate z, the depthwise conv
     * kernel [conv_dim][d_conv] (F32), per value head dt bias and A
     * (= -exp(A_log)), beta and alpha projections, the gated norm's
     * weight [head dim] and the out-projection. */
    int recurrent;
    int kv_layer;  /* this layer's index in the KV pool (-1: recurrent) */
    int rec_layer; /* this layer's index in a sequence's recurrent state */
    model_tensor ssm_qkv, ssm_gate, ssm_conv1d, ssm_dt, ssm_a, ssm_beta, ssm_alpha, ssm_norm, ssm_out;
    model_moe moe; /* hp.n_expert > 0: replaces w_gate / w_up / w_down */
} model_layer;

/* qwen35's multi-token-prediction (MTP, "nextn") block, stored after the
 * trunk (blk.<n_layer>.*): the token after next from the embedding of
 * the next token and the trunk's last hidden state (model/mtp.h runs it).
 * eh_proj [2 n_embd -> n_embd] over [enorm(embed) | hnorm(hidden)], then
 * one full-attention qwen35 block, then head_norm and head. embd, head
 * and head_norm are the block's own (nextn.embed_tokens,
 * nextn.shared_head_head, nextn.shared_head_norm) or else the trunk's,
 * as llama.cpp falls back. */
typedef struct model_mtp {
    model_layer layer; /* attention only: kv_layer 0 of the drafter's own KV */
    model_tensor eh_proj, enorm, hnorm;
    model_tensor embd, head_norm, head;
} model_mtp;

typedef struct model {
    gguf_file *gguf;
    model_hparams hp;
    model_tensor tok_embd, output_norm, output; /* output = tok_embd if tied */
    model_tensor rope_freqs;                    /* llama3 per-dim divisors, optional */
    model_layer *layers;
    int tied_output;
    int has_mtp; /* qwen35 with nextn_predict_layers > 0: mtp is bound */
    model_mtp mtp;
} model;

int model_load(model **out, const char *path, strata_err *err);
void model_free(model *m); /* NULL is fine */

/* Whether any tensor is Q4_K, Q5_K or Q6_K: their CPU kernels' numerics
 * are in the engine's numerics id ("+kq-int", engine_numerics). */
int model_has_kquant(const model *m);
/* Whether any tensor is Q4_0, Q4_1, Q5_0, Q5_1 or Q8_0: their kernels'
 * float steps changed too ("+lg-chain", engine_numerics). */
int model_has_legacy(const model *m);

/* Number of weight bytes (for info and benchmarks). */
size_t model_weight_bytes(const model *m);

/* What one token costs (model_moe.c): the weights a token's forward pass
 * reads (every tensor but the embedding table, of which one row, and of
 * each expert stack only n_expert_used of n_expert experts) as parameters
 * and as bytes. For a dense model: all parameters but the embedding
 * table's other rows. */
typedef struct model_active {
    int64_t params, total_params;
    size_t bytes;
} model_active;
model_active model_active_per_token(const model *m);

#endif
