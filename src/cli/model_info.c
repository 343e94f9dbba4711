/* model_info.c - `strata model info FILE`: what a GGUF file holds and
 * whether Strata can run it. */
#include <stdio.h>
#include <string.h>

#include "backend/quant.h"
#include "cli/cli.h"
#include "model/model.h"
#include "text/tokenizer.h"

static void print_str_key(const gguf_file *f, const char *label, const char *key) {
    gguf_str s;
    if (gguf_find(f, key) && !gguf_get_str(f, key, &s, NULL))
        printf("%-16s %.*s\n", label, (int)(s.len < 200 ? s.len : 200), s.ptr);
}

static void print_type_histogram(const gguf_file *f) {
    int counts[QT_COUNT] = {0}, other = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        uint32_t t = f->tensors[i].type;
        if (t < QT_COUNT) counts[t]++;
        else other++;
    }
    printf("%-16s", "tensor types");
    for (int t = 0; t < QT_COUNT; t++)
        if (counts[t]) printf(" %s:%d", quant_name((uint32_t)t), counts[t]);
    if (other) printf(" other:%d", other);
    printf("\n");
}

static void print_hparams(const model *m) {
    const model_hparams *hp = &m->hp;
    printf("%-16s %s\n", "architecture", hp->arch_name);
    printf("%-16s layers %d, embd %d, ffn %d, heads %d (kv %d), head dim %d, vocab %d\n",
           "hyperparameters", hp->n_layer, hp->n_embd, hp->n_ff, hp->n_head, hp->n_head_kv,
           hp->head_dim, hp->n_vocab);
    if (hp->n_rec_layer)
        printf("%-16s %d gated delta-net layers (conv %d, %d key / %d value heads of %d), %d attention\n",
               "recurrent", hp->n_rec_layer, hp->ssm_d_conv, hp->ssm_n_k_heads, hp->ssm_n_v_heads,
               hp->ssm_d_state, hp->n_kv_layer);
    if (hp->n_expert)
        printf("%-16s %d of %d per token, %d wide (%s%s)%s\n", "experts", hp->n_expert_used, hp->n_expert,
               hp->n_ff_exp,
               hp->expert_gating == MOE_GATE_SIGMOID ? "sigmoid"
               : hp->expert_gating == MOE_GATE_SOFTMAX_WEIGHT ? "top-k then softmax"
               : "softmax",
               hp->expert_norm ? ", renormalised" : "", hp->n_ff_shexp ? ", plus a shared expert" : "");
    printf("%-16s %d\n", "train context", hp->n_ctx_train);
    printf("%-16s base %g, dims %d, %s%s\n", "rope", hp->rope_base, hp->rope_dim,
           hp->rope_neox ? "neox" : "normal",
           hp->rope_scale == ROPE_SCALE_LINEAR ? ", linear scaling"
           : hp->rope_scale == ROPE_SCALE_YARN ? ", yarn scaling"
           : m->rope_freqs.data ? ", llama3 freq factors" : "");
    printf("%-16s %s\n", "output", m->tied_output ? "tied to token embedding" : "own matrix");
    printf("%-16s %.1f MiB\n", "weights", model_weight_bytes(m) / 1048576.0);
    /* What one token reads: every weight but the embedding table's other
     * rows and (MoE) the experts it is not routed to. */
    model_active a = model_active_per_token(m);
    printf("%-16s %.2fM of %.2fM parameters, %.1f MiB of weights read per token\n", "active",
           a.params / 1e6, a.total_params / 1e6, a.bytes / 1048576.0);
}

static int info(const char *path) {
    strata_err err = {0};
    model *m;
    if (model_load(&m, path, &err)) {
        fprintf(stderr, "strata model info: %s\n", err.msg);
        return 1;
    }
    const gguf_file *f = m->gguf;
    printf("%-16s %s (GGUF v%u, %llu tensors, %llu metadata keys)\n", "file", path, f->version,
           (unsigned long long)f->n_tensors, (unsigned long long)f->n_kv);
    print_str_key(f, "name", "general.name");
    print_hparams(m);
    print_type_histogram(f);
    gguf_str kind = {"none", 4}, pre = {"default", 7};
    if (gguf_find(f, "tokenizer.ggml.model")) gguf_get_str(f, "tokenizer.ggml.model", &kind, NULL);
    if (gguf_find(f, "tokenizer.ggml.pre")) gguf_get_str(f, "tokenizer.ggml.pre", &pre, NULL);
    printf("%-16s %.*s (pre-tokenizer %.*s)\n", "tokenizer", (int)kind.len, kind.ptr,
           (int)(pre.len < 64 ? pre.len : 64), pre.ptr);
    printf("%-16s %s\n", "chat template", gguf_find(f, "tokenizer.chat_template") ? "present" : "absent");
    model_free(m);
    return 0;
}

int cli_model(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[2], "info") == 0) return info(argv[3]);
    fprintf(stderr, "usage: strata model info FILE\n");
    return 2;
}
