/* model_moe.c - mixture-of-experts hyperparameters and tensors
 * (qwen3moe, qwen35moe, gpt-oss), as llama.cpp reads its GGUF.
 *
 * Keys: expert_count, expert_used_count, expert_feed_forward_length
 * (default feed_forward_length / expert_used_count, as llama.cpp),
 * expert_shared_feed_forward_length (qwen35moe; default
 * feed_forward_length). Both architectures route with a softmax over all
 * experts, keep the top expert_used_count and renormalise their weights
 * (llama.cpp passes norm_w = true and no scale for them); gpt-oss takes
 * the top expert_used_count raw logits (its router has a bias) and a
 * softmax over them, and its experts use the clamped SwiGLU.
 * Tensors per layer: ffn_gate_inp [n_embd -> n_expert] (the router),
 * ffn_gate_exps / ffn_up_exps [n_expert][n_ff_exp][n_embd] (or one
 * ffn_gate_up_exps [n_expert][2 n_ff_exp][n_embd], gate rows first),
 * ffn_down_exps [n_expert][n_embd][n_ff_exp]; optional biases
 * (ffn_gate_inp.bias, ffn_*_exps.bias); qwen35moe's shared expert
 * ffn_gate_inp_shexp [n_embd] and ffn_{gate,up,down}_shexp. Expert
 * stacks stay in the map: an expert is a slice of it (moe_expert).
 * Does not: run anything (moe.c). */
#include <stdio.h>
#include <string.h>

#include "model/model_int.h"

/* Bounds far above real models (Qwen3: 128 experts, 8 used). */
#define MOE_MAX_EXPERTS 4096

int model__moe_hparams(model *m, strata_err *err) {
    model_hparams *hp = &m->hp;
    hp->n_expert = hp->n_expert_used = hp->n_ff_exp = hp->n_ff_shexp = 0;
    if (model__arch_u32(m, "expert_count", &hp->n_expert, 0, err) ||
        model__arch_u32(m, "expert_used_count", &hp->n_expert_used, 0, err) ||
        model__arch_u32(m, "expert_feed_forward_length", &hp->n_ff_exp, 1, err) ||
        model__arch_u32(m, "expert_shared_feed_forward_length", &hp->n_ff_shexp, 1, err))
        return STRATA_EFORMAT;
    if (hp->n_expert <= 0 || hp->n_expert > MOE_MAX_EXPERTS)
        return strata_errf(err, STRATA_EFORMAT, "%s: %s.expert_count = %d (must be 1..%d)", m->gguf->path,
                           hp->arch_name, hp->n_expert, MOE_MAX_EXPERTS);
    if (hp->n_expert_used <= 0 || hp->n_expert_used > hp->n_expert)
        return strata_errf(err, STRATA_EFORMAT, "%s: %s.expert_used_count = %d with %d experts (must be 1..%d)",
                           m->gguf->path, hp->arch_name, hp->n_expert_used, hp->n_expert, hp->n_expert);
    if (hp->n_ff_exp == 0) hp->n_ff_exp = hp->n_ff / hp->n_expert_used;
    if (hp->n_ff_exp <= 0)
        return strata_errf(err, STRATA_EFORMAT, "%s: %s.expert_feed_forward_length missing or 0", m->gguf->path,
                           hp->arch_name);
    if (hp->arch == ARCH_QWEN35MOE && hp->n_ff_shexp == 0) hp->n_ff_shexp = hp->n_ff;
    hp->expert_gating = MOE_GATE_SOFTMAX;
    hp->expert_act = MOE_ACT_SILU;
    hp->expert_norm = 1;
    hp->expert_scale = 0;
    if (hp->arch == ARCH_GPTOSS) { /* llama.cpp: SOFTMAX_WEIGHT, SWIGLU_OAI_MOE, norm_w false */
        hp->expert_gating = MOE_GATE_SOFTMAX_WEIGHT;
        hp->expert_act = MOE_ACT_SWIGLU_OAI;
        hp->expert_norm = 0;
    }
    return 0;
}

/* Binds the 3-D tensor `name` as n_expert matrices of rows x cols. */
static int bind_experts(model *m, model_experts *x, const char *name, int64_t cols, int64_t rows, strata_err *err) {
    memset(x, 0, sizeof *x);
    const gguf_tensor *g = gguf_find_tensor(m->gguf, name);
    int ne = m->hp.n_expert;
    if (!g) return strata_errf(err, STRATA_EFORMAT, "%s: missing tensor '%s'", m->gguf->path, name);
    if (g->ne[0] != cols || g->ne[1] != rows || g->ne[2] != ne || g->ne[3] != 1)
        return strata_errf(err, STRATA_EFORMAT,
                           "%s: tensor '%s' has shape [%lld, %lld, %lld], expected [%lld, %lld, %d]", m->gguf->path,
                           name, (long long)g->ne[0], (long long)g->ne[1], (long long)g->ne[2], (long long)cols,
                           (long long)rows, ne);
    const quant_traits *q = quant_get(g->type);
    if (!q || !q->is_weight)
        return strata_errf(err, STRATA_EUNSUPPORTED, "%s: tensor '%s' has unsupported type %s", m->gguf->path, name,
                           quant_name(g->type));
    x->m = (model_tensor){.data = g->data, .type = (qtype)g->type, .cols = cols, .rows = rows,
                          .row_bytes = quant_row_bytes((qtype)g->type, cols)};
    x->n_expert = ne;
    x->expert_bytes = x->m.row_bytes * (size_t)rows;
    return 0;
}

static void tname(char *out, size_t cap, int il, const char *suffix) {
    snprintf(out, cap, "blk.%d.%s%s", il, suffix, strchr(suffix, '.') ? "" : ".weight");
}

/* gate and up: two stacks, or one merged ffn_gate_up_exps whose experts
 * hold their gate rows then their up rows (both views of one slice). */
static int bind_gate_up(model *m, int il, model_moe *x, strata_err *err) {
    int64_t e = m->hp.n_embd, f = m->hp.n_ff_exp;
    char n[96];
    tname(n, sizeof n, il, "ffn_gate_up_exps");
    if (gguf_find_tensor(m->gguf, n)) {
        if (bind_experts(m, &x->gate, n, e, 2 * f, err)) return STRATA_EFORMAT;
        x->gate.m.rows = f;
        x->up = x->gate;
        x->up.m.data = (const uint8_t *)x->gate.m.data + (size_t)f * x->gate.m.row_bytes;
        return 0;
    }
    tname(n, sizeof n, il, "ffn_gate_exps");
    if (bind_experts(m, &x->gate, n, e, f, err)) return STRATA_EFORMAT;
    tname(n, sizeof n, il, "ffn_up_exps");
    return bind_experts(m, &x->up, n, e, f, err);
}

/* One bias row per expert ([n_expert][rows], F32), optional. */
static int bind_bias(model *m, int il, const char *suffix, model_tensor *t, int64_t rows, strata_err *err) {
    char n[96];
    tname(n, sizeof n, il, suffix);
    return model__bind(m, t, n, rows, m->hp.n_expert, 1, err);
}

int model__moe_bind(model *m, int il, strata_err *err) {
    const model_hparams *hp = &m->hp;
    model_moe *x = &m->layers[il].moe;
    int64_t e = hp->n_embd, f = hp->n_ff_exp, fs = hp->n_ff_shexp;
    char n[96];
    tname(n, sizeof n, il, "ffn_gate_inp");
    if (model__bind(m, &x->router, n, e, hp->n_expert, 0, err) || bind_gate_up(m, il, x, err))
        return STRATA_EFORMAT;
    tname(n, sizeof n, il, "ffn_down_exps");
    if (bind_experts(m, &x->down, n, f, e, err)) return STRATA_EFORMAT;
    tname(n, sizeof n, il, "ffn_gate_inp.bias");
    if (model__bind(m, &x->router_b, n, hp->n_expert, 0, 1, err) || bind_bias(m, il, "ffn_gate_exps.bias", &x->gate_b, f, err) ||
        bind_bias(m, il, "ffn_up_exps.bias", &x->up_b, f, err) ||
        bind_bias(m, il, "ffn_down_exps.bias", &x->down_b, e, err))
        return STRATA_EFORMAT;
    if (fs == 0) return 0;
    char g[96], u[96], d[96];
    tname(n, sizeof n, il, "ffn_gate_inp_shexp");
    tname(g, sizeof g, il, "ffn_gate_shexp");
    tname(u, sizeof u, il, "ffn_up_shexp");
    tname(d, sizeof d, il, "ffn_down_shexp");
    if (model__bind(m, &x->sh_gate_inp, n, e, 0, 0, err) || model__bind(m, &x->sh_gate, g, e, fs, 0, err) ||
        model__bind(m, &x->sh_up, u, e, fs, 0, err) || model__bind(m, &x->sh_down, d, fs, e, 0, err))
        return STRATA_EFORMAT;
    return 0;
}

model_active model_active_per_token(const model *m) {
    const model_hparams *hp = &m->hp;
    const gguf_file *f = m->gguf;
    model_active a = {0};
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        int64_t n = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
        a.total_params += n;
        if (t->data == m->tok_embd.data && !m->tied_output) { /* one row is read */
            a.params += t->ne[0];
            a.bytes += t->nbytes / (size_t)t->ne[1];
        } else if (hp->n_expert > 0 && t->ne[2] == hp->n_expert && t->n_dims == 3) {
            a.params += n / hp->n_expert * hp->n_expert_used;
            a.bytes += t->nbytes / (size_t)hp->n_expert * (size_t)hp->n_expert_used;
        } else {
            a.params += n;
            a.bytes += t->nbytes;
        }
    }
    return a;
}
