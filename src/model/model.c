/* model.c - hyperparameters from metadata and tensor binding (model.h). */
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "model/model_int.h"

typedef struct arch_info {
    const char *name;
    model_arch arch;
    int rope_neox;
} arch_info;

static const arch_info ARCHES[] = {
    {"llama", ARCH_LLAMA, 0},
    {"qwen2", ARCH_QWEN2, 1},
    {"qwen3", ARCH_QWEN3, 1},
    {"gemma3", ARCH_GEMMA3, 1},
    {"qwen35", ARCH_QWEN35, 1}, /* interleaved M-RoPE rotates NeoX pairs */
    {"qwen3moe", ARCH_QWEN3MOE, 1},
    {"qwen35moe", ARCH_QWEN35MOE, 1},
    {"gpt-oss", ARCH_GPTOSS, 1},
};

static int is_moe(model_arch a) { return a == ARCH_QWEN3MOE || a == ARCH_QWEN35MOE || a == ARCH_GPTOSS; }
static int is_qwen35(model_arch a) { return a == ARCH_QWEN35 || a == ARCH_QWEN35MOE; }

static int find_arch(model *m, strata_err *err) {
    gguf_str s;
    if (gguf_get_str(m->gguf, "general.architecture", &s, err)) return err ? err->code : -1;
    for (size_t i = 0; i < sizeof ARCHES / sizeof ARCHES[0]; i++) {
        if (!gguf_str_eq(s, ARCHES[i].name)) continue;
        m->hp.arch = ARCHES[i].arch;
        m->hp.rope_neox = ARCHES[i].rope_neox;
        snprintf(m->hp.arch_name, sizeof m->hp.arch_name, "%s", ARCHES[i].name);
        return 0;
    }
    return strata_errf(err, STRATA_EUNSUPPORTED,
                       "%s: unsupported architecture '%.*s' (supported: llama, qwen2, qwen3, gemma3, qwen35, qwen3moe, qwen35moe, gpt-oss)",
                       m->gguf->path, (int)(s.len < 64 ? s.len : 64), s.ptr);
}

/* "{arch}.suffix" getters; optional ones keep the default when absent. */
int model__arch_u32(const model *m, const char *suffix, int *out, int optional, strata_err *err) {
    char key[128];
    uint32_t v;
    snprintf(key, sizeof key, "%s.%s", m->hp.arch_name, suffix);
    if (optional && !gguf_find(m->gguf, key)) return 0;
    int rc = gguf_get_u32(m->gguf, key, &v, err);
    if (rc) return rc;
    if (v > (1u << 30)) return strata_errf(err, STRATA_EFORMAT, "%s: %s = %u is implausible", m->gguf->path, key, v);
    *out = (int)v;
    return 0;
}

static int arch_f32(const model *m, const char *suffix, float *out, int optional, strata_err *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->hp.arch_name, suffix);
    if (optional && !gguf_find(m->gguf, key)) return 0;
    return gguf_get_f32(m->gguf, key, out, err);
}

static int read_rope_scaling(model *m, strata_err *err) {
    model_hparams *hp = &m->hp;
    char key[128];
    gguf_str type = {0};
    hp->rope_scale = ROPE_SCALE_NONE;
    hp->rope_factor = 1.0f;
    hp->yarn_beta_fast = 32.0f;
    hp->yarn_beta_slow = 1.0f;
    hp->yarn_attn_factor = 1.0f;
    hp->rope_orig_ctx = hp->n_ctx_train;
    snprintf(key, sizeof key, "%s.rope.scaling.type", hp->arch_name);
    if (gguf_find(m->gguf, key) && gguf_get_str(m->gguf, key, &type, err)) return STRATA_EFORMAT;
    if (arch_f32(m, "rope.scaling.factor", &hp->rope_factor, 1, err)) return STRATA_EFORMAT;
    if (model__arch_u32(m, "rope.scaling.original_context_length", &hp->rope_orig_ctx, 1, err))
        return STRATA_EFORMAT;
    if (type.len == 0 || gguf_str_eq(type, "none")) return 0;
    if (gguf_str_eq(type, "linear")) hp->rope_scale = ROPE_SCALE_LINEAR;
    else if (gguf_str_eq(type, "yarn")) hp->rope_scale = ROPE_SCALE_YARN;
    else if (gguf_str_eq(type, "llama3")) return 0; /* factors come as rope_freqs.weight */
    else
        return strata_errf(err, STRATA_EUNSUPPORTED, "%s: unsupported rope scaling '%.*s'",
                           m->gguf->path, (int)type.len, type.ptr);
    if (!(hp->rope_factor > 0))
        return strata_errf(err, STRATA_EFORMAT, "%s: rope scaling factor %g", m->gguf->path,
                           hp->rope_factor);
    return 0;
}

/* Gemma 3 as llama.cpp reads it: inputs scaled by sqrt(n_embd), GELU
 * feed-forward, local layers with RoPE base 10000 (or rope.freq_base_swa)
 * and attention scale 1/sqrt(head_dim), except the 27B (62 layers), which
 * scales by 1/sqrt(n_embd / n_head) (query_pre_attn_scalar). */
static int read_gemma3(model *m, strata_err *err) {
    model_hparams *hp = &m->hp;
    hp->embd_scale = sqrtf((float)hp->n_embd);
    hp->ffn_gelu = 1;
    hp->swa_rope = 1;
    if (hp->n_layer == 62) hp->attn_scale = 1.0f / sqrtf((float)(hp->n_embd / hp->n_head));
    if (model__arch_u32(m, "attention.sliding_window", &hp->n_swa, 1, err) ||
        arch_f32(m, "rope.freq_base_swa", &hp->rope_base_swa, 1, err))
        return STRATA_EFORMAT;
    return 0;
}

/* gpt-oss as llama.cpp reads it: a sliding window (every even layer, the
 * pattern's default period being 2) that rotates as the full layers do,
 * YaRN included (rope_freq_scale_train_swa = rope_freq_scale_train). */
static int read_gptoss(model *m, strata_err *err) {
    model_hparams *hp = &m->hp;
    if (model__arch_u32(m, "attention.sliding_window", &hp->n_swa, 0, err)) return STRATA_EFORMAT;
    if (hp->n_swa <= 0)
        return strata_errf(err, STRATA_EFORMAT, "%s: %s.attention.sliding_window = %d", m->gguf->path, hp->arch_name,
                           hp->n_swa);
    return 0;
}

static int read_hparams(model *m, strata_err *err) {
    model_hparams *hp = &m->hp;
    /* MoE files may have no dense feed-forward (feed_forward_length 0 or absent). */
    if (model__arch_u32(m, "block_count", &hp->n_layer, 0, err) ||
        model__arch_u32(m, "embedding_length", &hp->n_embd, 0, err) ||
        model__arch_u32(m, "feed_forward_length", &hp->n_ff, is_moe(hp->arch), err) ||
        model__arch_u32(m, "attention.head_count", &hp->n_head, 0, err))
        return STRATA_EFORMAT;
    hp->n_head_kv = hp->n_head;
    hp->n_ctx_train = 4096;
    hp->rope_base = 10000.0f;
    hp->rms_eps = 1e-6f;
    if (model__arch_u32(m, "attention.head_count_kv", &hp->n_head_kv, 1, err) ||
        model__arch_u32(m, "context_length", &hp->n_ctx_train, 1, err) ||
        arch_f32(m, "rope.freq_base", &hp->rope_base, 1, err) ||
        arch_f32(m, "attention.layer_norm_rms_epsilon", &hp->rms_eps, 1, err))
        return STRATA_EFORMAT;
    if (hp->n_layer <= 0 || hp->n_embd <= 0 || hp->n_head <= 0 || hp->n_head_kv <= 0 ||
        hp->n_head % hp->n_head_kv)
        return strata_errf(err, STRATA_EFORMAT,
                           "%s: inconsistent hyperparameters (layers %d, embd %d, heads %d/%d)",
                           m->gguf->path, hp->n_layer, hp->n_embd, hp->n_head, hp->n_head_kv);
    hp->head_dim = hp->n_embd / hp->n_head;
    if (model__arch_u32(m, "attention.key_length", &hp->head_dim, 1, err)) return STRATA_EFORMAT;
    int v_len = hp->head_dim;
    if (model__arch_u32(m, "attention.value_length", &v_len, 1, err)) return STRATA_EFORMAT;
    if (v_len != hp->head_dim || hp->head_dim <= 0 || hp->head_dim % 2)
        return strata_errf(err, STRATA_EUNSUPPORTED, "%s: head dims k=%d v=%d not supported",
                           m->gguf->path, hp->head_dim, v_len);
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    hp->embd_scale = 1.0f;
    hp->rope_base_swa = 10000.0f;
    if (arch_f32(m, "final_logit_softcapping", &hp->logit_softcap, 1, err)) return STRATA_EFORMAT;
    if (hp->arch == ARCH_GEMMA3 && read_gemma3(m, err)) return STRATA_EFORMAT;
    if (hp->arch == ARCH_GPTOSS && read_gptoss(m, err)) return STRATA_EFORMAT;
    hp->n_kv_layer = hp->n_layer;
    hp->rope_dim = hp->head_dim;
    if (model__arch_u32(m, "rope.dimension_count", &hp->rope_dim, 1, err)) return STRATA_EFORMAT;
    if (hp->rope_dim > hp->head_dim || hp->rope_dim % 2)
        return strata_errf(err, STRATA_EFORMAT, "%s: rope.dimension_count %d vs head dim %d",
                           m->gguf->path, hp->rope_dim, hp->head_dim);
    if (read_rope_scaling(m, err)) return STRATA_EFORMAT;
    if (is_qwen35(hp->arch) && model__qwen35_hparams(m, err)) return STRATA_EFORMAT;
    return is_moe(hp->arch) ? model__moe_hparams(m, err) : 0;
}

/* Binds a tensor and checks its shape: cols x rows (rows 0 = a vector). */
int model__bind(model *m, model_tensor *t, const char *name, int64_t cols, int64_t rows, int optional,
                strata_err *err) {
    memset(t, 0, sizeof *t);
    const gguf_tensor *g = gguf_find_tensor(m->gguf, name);
    if (!g) {
        if (optional) return 0;
        return strata_errf(err, STRATA_EFORMAT, "%s: missing tensor '%s'", m->gguf->path, name);
    }
    int64_t want_rows = rows ? rows : 1;
    if (g->ne[0] != cols || g->ne[1] != want_rows || g->ne[2] != 1 || g->ne[3] != 1)
        return strata_errf(err, STRATA_EFORMAT,
                           "%s: tensor '%s' has shape [%lld, %lld, %lld], expected [%lld, %lld]",
                           m->gguf->path, name, (long long)g->ne[0], (long long)g->ne[1],
                           (long long)g->ne[2], (long long)cols, (long long)want_rows);
    const quant_traits *q = quant_get(g->type);
    if (!q || !q->is_weight)
        return strata_errf(err, STRATA_EUNSUPPORTED,
                           "%s: tensor '%s' has unsupported type %s", m->gguf->path, name,
                           quant_name(g->type));
    if (rows == 0 && g->type != QT_F32)
        return strata_errf(err, STRATA_EUNSUPPORTED, "%s: tensor '%s' must be F32, is %s",
                           m->gguf->path, name, q->name);
    t->data = g->data;
    t->type = (qtype)g->type;
    t->cols = cols;
    t->rows = want_rows;
    t->row_bytes = quant_row_bytes(t->type, cols);
    return 0;
}

static int bind_layer(model *m, int il, strata_err *err) {
    const model_hparams *hp = &m->hp;
    model_layer *L = &m->layers[il];
    int64_t e = hp->n_embd, q = (int64_t)hp->n_head * hp->head_dim;
    int64_t kv = (int64_t)hp->n_head_kv * hp->head_dim, f = hp->n_ff;
    int gptoss = hp->arch == ARCH_GPTOSS, qkv_bias = hp->arch == ARCH_QWEN2 || gptoss, gemma3 = hp->arch == ARCH_GEMMA3;
    int qk_norm = hp->arch == ARCH_QWEN3 || hp->arch == ARCH_QWEN3MOE || gemma3, moe = hp->n_expert > 0;
    char n[18][64];
    /* gpt-oss's post_attention_norm is its feed-forward's input norm (where
     * gemma3's norms the attention's output) */
    static const char *suffix[18] = {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                                     "attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_q_norm",
                                     "attn_k_norm", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down",
                                     "post_attention_norm", "post_ffw_norm", "attn_output.bias", "attn_sinks"};
    for (int i = 0; i < 18; i++)
        snprintf(n[i], sizeof n[i], "blk.%d.%s%s", il, suffix[i], strchr(suffix[i], '.') ? "" : ".weight");
    int rc = model__bind(m, &L->attn_norm, n[0], e, 0, 0, err) || model__bind(m, &L->wq, n[1], e, q, 0, err) ||
             model__bind(m, &L->wk, n[2], e, kv, 0, err) || model__bind(m, &L->wv, n[3], e, kv, 0, err) ||
             model__bind(m, &L->wo, n[4], q, e, 0, err) || model__bind(m, &L->bq, n[5], q, 0, !qkv_bias, err) ||
             model__bind(m, &L->bk, n[6], kv, 0, !qkv_bias, err) || model__bind(m, &L->bv, n[7], kv, 0, !qkv_bias, err) ||
             model__bind(m, &L->q_norm, n[8], hp->head_dim, 0, !qk_norm, err) ||
             model__bind(m, &L->k_norm, n[9], hp->head_dim, 0, !qk_norm, err) ||
             model__bind(m, &L->ffn_norm, n[gptoss ? 14 : 10], e, 0, 0, err) ||
             (moe ? model__moe_bind(m, il, err)
                  : model__bind(m, &L->w_gate, n[11], e, f, 0, err) || model__bind(m, &L->w_up, n[12], e, f, 0, err) ||
                        model__bind(m, &L->w_down, n[13], f, e, 0, err)) ||
             (gemma3 && (model__bind(m, &L->post_attn_norm, n[14], e, 0, 0, err) ||
                         model__bind(m, &L->post_ffn_norm, n[15], e, 0, 0, err))) ||
             model__bind(m, &L->bo, n[16], e, 0, !gptoss, err) ||
             model__bind(m, &L->sinks, n[17], hp->n_head, 0, !gptoss, err);
    return rc ? (err ? err->code : STRATA_EFORMAT) : 0;
}

/* Which layers slide: attention.sliding_window_pattern as one bool per
 * layer, or as a period P (layer il slides unless il % P == P - 1, so
 * every P-th layer is global); Gemma 3's default period is 6, gpt-oss's 2. This is
 * llama.cpp's reading of the same keys (set_swa_pattern). */
static int mark_swa_layers(model *m, strata_err *err) {
    const model_hparams *hp = &m->hp;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", hp->arch_name);
    const gguf_kv *kv = gguf_find(m->gguf, key);
    if (kv && kv->type == GGUF_ARRAY) {
        const void *el;
        uint64_t n;
        if (gguf_get_arr(m->gguf, key, GGUF_BOOL, &el, &n, err)) return STRATA_EFORMAT;
        if (n != (uint64_t)hp->n_layer)
            return strata_errf(err, STRATA_EFORMAT, "%s: %s has %llu entries for %d layers", m->gguf->path,
                               key, (unsigned long long)n, hp->n_layer);
        for (int il = 0; il < hp->n_layer; il++) m->layers[il].swa = ((const uint8_t *)el)[il] != 0;
        return 0;
    }
    int period = hp->arch == ARCH_GPTOSS ? 2 : 6; /* llama.cpp's defaults */
    if (model__arch_u32(m, "attention.sliding_window_pattern", &period, 1, err)) return STRATA_EFORMAT;
    for (int il = 0; il < hp->n_layer; il++)
        m->layers[il].swa = period == 0 || il % period < period - 1;
    return 0;
}

static int bind_all(model *m, strata_err *err) {
    const model_hparams *hp = &m->hp;
    const gguf_tensor *emb = gguf_find_tensor(m->gguf, "token_embd.weight");
    if (!emb) return strata_errf(err, STRATA_EFORMAT, "%s: missing tensor 'token_embd.weight'", m->gguf->path);
    m->hp.n_vocab = (int)emb->ne[1];
    if (model__bind(m, &m->tok_embd, "token_embd.weight", hp->n_embd, hp->n_vocab, 0, err) ||
        model__bind(m, &m->output_norm, "output_norm.weight", hp->n_embd, 0, 0, err) ||
        model__bind(m, &m->output, "output.weight", hp->n_embd, hp->n_vocab, 1, err) ||
        model__bind(m, &m->rope_freqs, "rope_freqs.weight", hp->rope_dim / 2, 0, 1, err))
        return err ? err->code : STRATA_EFORMAT;
    if (!m->output.data) {
        m->output = m->tok_embd;
        m->tied_output = 1;
    }
    m->layers = xcalloc((size_t)hp->n_layer, sizeof(model_layer));
    if (is_qwen35(hp->arch)) return model__qwen35_bind_layers(m, err);
    for (int il = 0; il < hp->n_layer; il++) {
        m->layers[il].kv_layer = il;
        int rc = bind_layer(m, il, err);
        if (rc) return rc;
    }
    return hp->n_swa > 0 ? mark_swa_layers(m, err) : 0;
}

int model_load(model **out, const char *path, strata_err *err) {
    *out = NULL;
    model *m = xcalloc(1, sizeof *m);
    int rc = gguf_open(&m->gguf, path, err);
    if (!rc) rc = find_arch(m, err);
    if (!rc) rc = read_hparams(m, err);
    if (!rc) rc = bind_all(m, err);
    if (rc) {
        model_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

void model_free(model *m) {
    if (!m) return;
    gguf_close(m->gguf);
    free(m->layers);
    free(m);
}

/* Their CPU kernels make each super-block's integer sum exactly, then
 * fixed float steps: the same bits at every level (backend/README.md,
 * "K-quants: one integer per super-block"); before, each level summed 8
 * or 16 partial lanes in float. The K/V of such a model changed with it,
 * so its numerics id carries "+kq-int" (engine.c) and blocks cached under
 * the old id are never served; a model of legacy or float weights keeps
 * its id, and its caches stay valid. */
/* Whether any tensor has one of the n types. */
static int has_type(const model *m, const uint32_t *types, int n) {
    for (uint64_t i = 0; i < m->gguf->n_tensors; i++)
        for (int j = 0; j < n; j++)
            if (m->gguf->tensors[i].type == types[j]) return 1;
    return 0;
}

int model_has_kquant(const model *m) {
    static const uint32_t kq[] = {QT_Q4_K, QT_Q5_K, QT_Q6_K};
    return has_type(m, kq, 3);
}

int model_has_legacy(const model *m) {
    static const uint32_t lg[] = {QT_Q4_0, QT_Q4_1, QT_Q5_0, QT_Q5_1, QT_Q8_0};
    return has_type(m, lg, 5);
}

size_t model_weight_bytes(const model *m) {
    size_t total = 0;
    for (uint64_t i = 0; i < m->gguf->n_tensors; i++) total += m->gguf->tensors[i].nbytes;
    return total;
}
