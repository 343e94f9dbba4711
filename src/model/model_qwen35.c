/* model_qwen35.c - Qwen3.5 / 3.6 dense ("qwen35") and mixture-of-experts
 * ("qwen35moe": the same layers with model_moe.c's feed-forward)
 * hyperparameters and tensors, as llama.cpp reads its GGUF.
 *
 * The model interleaves two kinds of layers, both followed by the usual
 * SwiGLU feed-forward (normed by post_attention_norm):
 *   - gated full attention (every full_attention_interval-th layer, 4 by
 *     default: layers 3, 7, 11, ...): attn_q gives per head a query and
 *     an output gate [q | gate] (2 x head_dim rows), attn_k / attn_v, QK
 *     RMS norms, partial interleaved M-RoPE, attn_output;
 *   - gated delta net (the others): attn_qkv [q|k|v conv channels],
 *     attn_gate (z), ssm_conv1d, ssm_dt.bias, ssm_a, ssm_beta, ssm_alpha,
 *     ssm_norm, ssm_out.
 * Keys: ssm.conv_kernel, ssm.inner_size, ssm.state_size (head size),
 * ssm.time_step_rank (value heads), ssm.group_count (key heads),
 * rope.dimension_sections (4 ints), full_attention_interval or
 * attention.recurrent_layers (one bool per layer).
 * Files with nextn_predict_layers > 0 carry multi-token-prediction
 * blocks after the trunk (counted in block_count): qwen35's first one is
 * bound into m->mtp (a full-attention block plus blk.N.nextn.eh_proj,
 * enorm, hnorm and the optional shared_head_norm, shared_head_head,
 * embed_tokens, as llama.cpp names them); qwen35moe's (experts) and any
 * further ones are skipped, as llama.cpp's main pass skips them all.
 * Does not: run anything (forward.c, deltanet.c, mtp.c). */
#include <stdio.h>
#include <string.h>

#include "backend/conv.h"
#include "model/model_int.h"

static int check_ssm(const model *m, strata_err *err) {
    const model_hparams *hp = &m->hp;
    /* Bounds far above real models keep every product below in int range. */
    if (hp->ssm_d_conv < 1 || hp->ssm_d_conv > CONV_MAX_K || hp->ssm_d_state <= 0 || hp->ssm_d_state > 4096 ||
        hp->ssm_n_v_heads <= 0 || hp->ssm_n_v_heads > 4096 || hp->ssm_n_k_heads <= 0 ||
        hp->ssm_n_v_heads % hp->ssm_n_k_heads ||
        (int64_t)hp->ssm_d_inner != (int64_t)hp->ssm_d_state * hp->ssm_n_v_heads)
        return strata_errf(err, STRATA_EFORMAT,
                           "%s: inconsistent ssm keys (conv_kernel %d, inner_size %d, state_size %d, "
                           "time_step_rank %d, group_count %d)",
                           m->gguf->path, hp->ssm_d_conv, hp->ssm_d_inner, hp->ssm_d_state,
                           hp->ssm_n_v_heads, hp->ssm_n_k_heads);
    return 0;
}

/* rope.dimension_sections: 4 int32 or uint32 (llama.cpp also accepts one
 * value repeated; real files have the array). */
static int read_sections(model *m, strata_err *err) {
    model_hparams *hp = &m->hp;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.dimension_sections", hp->arch_name);
    const gguf_kv *kv = gguf_find(m->gguf, key);
    gguf_vtype type = kv && kv->type == GGUF_ARRAY && kv->arr_type == GGUF_UINT32 ? GGUF_UINT32 : GGUF_INT32;
    const void *el;
    uint64_t n;
    if (gguf_get_arr(m->gguf, key, type, &el, &n, err)) return STRATA_EFORMAT;
    if (n < 4) return strata_errf(err, STRATA_EFORMAT, "%s: %s has %llu entries, expected 4", m->gguf->path, key,
                                  (unsigned long long)n);
    int32_t v[4];
    memcpy(v, el, sizeof v); /* metadata arrays are not aligned in the map */
    int sum = 0;
    for (int i = 0; i < 4; i++) {
        if (v[i] < 0 || v[i] > 4096)
            return strata_errf(err, STRATA_EFORMAT, "%s: %s[%d] = %d", m->gguf->path, key, i, v[i]);
        hp->rope_sections[i] = v[i];
        sum += v[i];
    }
    if (sum <= 0 || sum > hp->head_dim / 2)
        return strata_errf(err, STRATA_EFORMAT, "%s: %s sum to %d (head dim %d)", m->gguf->path, key, sum,
                           hp->head_dim);
    return 0;
}

int model__qwen35_hparams(model *m, strata_err *err) {
    model_hparams *hp = &m->hp;
    hp->attn_gate = 1;
    if (model__arch_u32(m, "ssm.conv_kernel", &hp->ssm_d_conv, 0, err) ||
        model__arch_u32(m, "ssm.inner_size", &hp->ssm_d_inner, 0, err) ||
        model__arch_u32(m, "ssm.state_size", &hp->ssm_d_state, 0, err) ||
        model__arch_u32(m, "ssm.time_step_rank", &hp->ssm_n_v_heads, 0, err) ||
        model__arch_u32(m, "ssm.group_count", &hp->ssm_n_k_heads, 0, err))
        return STRATA_EFORMAT;
    if (check_ssm(m, err)) return STRATA_EFORMAT;
    /* block_count counts the MTP draft blocks stored after the trunk. */
    int nextn = 0;
    if (model__arch_u32(m, "nextn_predict_layers", &nextn, 1, err)) return STRATA_EFORMAT;
    if (nextn >= hp->n_layer)
        return strata_errf(err, STRATA_EUNSUPPORTED, "%s: %d of %d blocks are MTP layers: no trunk to run",
                           m->gguf->path, nextn, hp->n_layer);
    hp->n_layer -= nextn;
    hp->n_nextn = nextn;
    return read_sections(m, err);
}

/* Which layers are recurrent: attention.recurrent_layers (bools), else
 * every layer but each full_attention_interval-th (default 4). */
static int mark_layers(model *m, strata_err *err) {
    model_hparams *hp = &m->hp;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.recurrent_layers", hp->arch_name);
    const uint8_t *flags = NULL;
    if (gguf_find(m->gguf, key)) {
        const void *el;
        uint64_t n;
        if (gguf_get_arr(m->gguf, key, GGUF_BOOL, &el, &n, err)) return STRATA_EFORMAT;
        if (n < (uint64_t)hp->n_layer)
            return strata_errf(err, STRATA_EFORMAT, "%s: %s has %llu entries for %d layers", m->gguf->path, key,
                               (unsigned long long)n, hp->n_layer);
        flags = el;
    }
    int interval = 4;
    if (model__arch_u32(m, "full_attention_interval", &interval, 1, err)) return STRATA_EFORMAT;
    if (!flags && interval <= 0)
        return strata_errf(err, STRATA_EFORMAT, "%s: full_attention_interval is 0", m->gguf->path);
    hp->n_kv_layer = hp->n_rec_layer = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        model_layer *L = &m->layers[il];
        L->recurrent = flags ? flags[il] != 0 : (il + 1) % interval != 0;
        L->kv_layer = L->recurrent ? -1 : hp->n_kv_layer++;
        L->rec_layer = L->recurrent ? hp->n_rec_layer++ : -1;
    }
    if (hp->n_kv_layer == 0) /* the KV pool needs one layer; a purely recurrent file is not qwen35 */
        return strata_errf(err, STRATA_EFORMAT, "%s: no full-attention layer", m->gguf->path);
    return 0;
}

static void layer_name(char *out, size_t cap, int il, const char *suffix) {
    snprintf(out, cap, "blk.%d.%s%s", il, suffix, strchr(suffix, '.') || !strcmp(suffix, "ssm_a") ? "" : ".weight");
}

/* One tensor of layer il: suffix as in llama.cpp's names. */
static int bind_l(model *m, int il, model_tensor *t, const char *suffix, int64_t cols, int64_t rows,
                  strata_err *err) {
    char name[96];
    layer_name(name, sizeof name, il, suffix);
    return model__bind(m, t, name, cols, rows, 0, err);
}

/* Gated attention tensors of block il into L (a trunk layer, or the MTP block's). */
static int bind_attention(model *m, int il, model_layer *L, strata_err *err) {
    const model_hparams *hp = &m->hp;
    int64_t e = hp->n_embd, q = (int64_t)hp->n_head * hp->head_dim, kv = (int64_t)hp->n_head_kv * hp->head_dim;
    return bind_l(m, il, &L->wq, "attn_q", e, 2 * q, err) || bind_l(m, il, &L->wk, "attn_k", e, kv, err) ||
           bind_l(m, il, &L->wv, "attn_v", e, kv, err) || bind_l(m, il, &L->wo, "attn_output", q, e, err) ||
           bind_l(m, il, &L->q_norm, "attn_q_norm", hp->head_dim, 0, err) ||
           bind_l(m, il, &L->k_norm, "attn_k_norm", hp->head_dim, 0, err);
}

static int bind_deltanet(model *m, int il, strata_err *err) {
    const model_hparams *hp = &m->hp;
    model_layer *L = &m->layers[il];
    int64_t e = hp->n_embd, hv = hp->ssm_n_v_heads, vd = hp->ssm_d_inner;
    int64_t conv = 2 * (int64_t)hp->ssm_n_k_heads * hp->ssm_d_state + vd;
    int rc = bind_l(m, il, &L->ssm_qkv, "attn_qkv", e, conv, err) ||
             bind_l(m, il, &L->ssm_gate, "attn_gate", e, vd, err) ||
             bind_l(m, il, &L->ssm_conv1d, "ssm_conv1d", hp->ssm_d_conv, conv, err) ||
             bind_l(m, il, &L->ssm_dt, "ssm_dt.bias", hv, 0, err) || bind_l(m, il, &L->ssm_a, "ssm_a", hv, 0, err) ||
             bind_l(m, il, &L->ssm_beta, "ssm_beta", e, hv, err) ||
             bind_l(m, il, &L->ssm_alpha, "ssm_alpha", e, hv, err) ||
             bind_l(m, il, &L->ssm_norm, "ssm_norm", hp->ssm_d_state, 0, err) ||
             bind_l(m, il, &L->ssm_out, "ssm_out", vd, e, err);
    if (rc) return rc;
    if (L->ssm_conv1d.type != QT_F32)
        return strata_errf(err, STRATA_EUNSUPPORTED, "%s: tensor 'blk.%d.ssm_conv1d.weight' must be F32, is %s",
                           m->gguf->path, il, quant_name(L->ssm_conv1d.type));
    return 0;
}

static int bind_layer(model *m, int il, strata_err *err) {
    const model_hparams *hp = &m->hp;
    model_layer *L = &m->layers[il];
    int64_t e = hp->n_embd, f = hp->n_ff;
    /* post_attention_norm is the feed-forward's input norm here; qwen35moe's
     * feed-forward is a mixture of experts with a shared expert. */
    int rc = bind_l(m, il, &L->attn_norm, "attn_norm", e, 0, err) ||
             bind_l(m, il, &L->ffn_norm, "post_attention_norm", e, 0, err) ||
             (hp->n_expert > 0 ? model__moe_bind(m, il, err)
                               : bind_l(m, il, &L->w_gate, "ffn_gate", e, f, err) ||
                                     bind_l(m, il, &L->w_up, "ffn_up", e, f, err) ||
                                     bind_l(m, il, &L->w_down, "ffn_down", f, e, err)) ||
             (L->recurrent ? bind_deltanet(m, il, err) : bind_attention(m, il, L, err));
    return rc ? (err ? err->code : STRATA_EFORMAT) : 0;
}

/* blk.<il>.nextn.<suffix>.weight: cols x rows (rows 0: an F32 vector). */
static int bind_nextn(model *m, int il, model_tensor *t, const char *suffix, int64_t cols, int64_t rows,
                      int optional, strata_err *err) {
    char name[96];
    snprintf(name, sizeof name, "blk.%d.nextn.%s.weight", il, suffix);
    return model__bind(m, t, name, cols, rows, optional, err);
}

/* The MTP block after the trunk (llama.cpp's load_block_mtp): a dense
 * full-attention block, then the nextn tensors; the head, its norm and
 * the embedding fall back to the trunk's. Any of them missing or
 * mis-shaped fails the load, naming the tensor. */
static int bind_mtp(model *m, strata_err *err) {
    const model_hparams *hp = &m->hp;
    int il = hp->n_layer;
    model_mtp *x = &m->mtp;
    model_layer *L = &x->layer;
    int64_t e = hp->n_embd, f = hp->n_ff, V = hp->n_vocab;
    int rc = bind_l(m, il, &L->attn_norm, "attn_norm", e, 0, err) ||
             bind_l(m, il, &L->ffn_norm, "post_attention_norm", e, 0, err) ||
             bind_l(m, il, &L->w_gate, "ffn_gate", e, f, err) || bind_l(m, il, &L->w_up, "ffn_up", e, f, err) ||
             bind_l(m, il, &L->w_down, "ffn_down", f, e, err) || bind_attention(m, il, L, err) ||
             bind_nextn(m, il, &x->eh_proj, "eh_proj", 2 * e, e, 0, err) ||
             bind_nextn(m, il, &x->enorm, "enorm", e, 0, 0, err) || bind_nextn(m, il, &x->hnorm, "hnorm", e, 0, 0, err) ||
             bind_nextn(m, il, &x->embd, "embed_tokens", e, V, 1, err) ||
             bind_nextn(m, il, &x->head, "shared_head_head", e, V, 1, err) ||
             bind_nextn(m, il, &x->head_norm, "shared_head_norm", e, 0, 1, err);
    if (rc) return err ? err->code : STRATA_EFORMAT;
    L->kv_layer = 0, L->rec_layer = -1;
    if (!x->embd.data) x->embd = m->tok_embd;
    if (!x->head.data) x->head = m->output;
    if (!x->head_norm.data) x->head_norm = m->output_norm;
    m->has_mtp = 1;
    return 0;
}

int model__qwen35_bind_layers(model *m, strata_err *err) {
    int rc = mark_layers(m, err);
    for (int il = 0; il < m->hp.n_layer && !rc; il++) rc = bind_layer(m, il, err);
    if (!rc && m->hp.n_nextn > 0 && m->hp.arch == ARCH_QWEN35) rc = bind_mtp(m, err);
    return rc;
}
