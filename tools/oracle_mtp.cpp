// oracle_mtp.cpp - llama.cpp's logits of a qwen35 file's MTP block, for
// tests/test_mtp.c (mtp_block_matches_llama_cpp). Built only against the
// oracle llama.cpp tree (make oracle-mtp-refs), never part of Strata.
//
//   oracle_mtp MODEL.gguf OUT.bin TOKEN [TOKEN ...]
//
// Runs the trunk over the tokens with llama.cpp's nextn embeddings on
// (h_nextn: the output-normed final hidden state of every position), then
// an MTP context (LLAMA_CONTEXT_TYPE_MTP, the draft head over the same
// weights) over the same tokens at the same positions, token q paired with
// the trunk's state at q - 1 and zeros at q = 0, as llama.cpp's draft-mtp
// pairs them (common/speculative.cpp). OUT.bin: the .ref layout of
// tools/testdata_reflogits.py: u32 n_tokens, u32 n_vocab, i32 tokens[n],
// f32 logits[n][n_vocab].
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "llama.h"
#include "llama-ext.h"

static void die(const char *what) {
    fprintf(stderr, "oracle_mtp: %s\n", what);
    exit(1);
}

// One batch of tokens[0, n) at positions 0.., every row wanted, each with
// the state row embd[q] when embd is not empty.
static void run(llama_context *ctx, const std::vector<llama_token> &toks, const std::vector<std::vector<float>> &embd) {
    llama_batch_ext *b = llama_batch_ext_init(ctx);
    for (size_t q = 0; q < toks.size(); q++) {
        int32_t idx = llama_batch_ext_add_token(b, 0, toks[q]);
        if (idx < 0) die("batch add failed");
        llama_pos pos[4] = {(llama_pos)q, 0, 0, 0};
        llama_batch_ext_set_pos(b, idx, pos);
        if (!embd.empty() && !llama_batch_ext_set_embd_token(b, idx, {embd[q].data(), 1, embd[q].size()}))
            die("set_embd_token failed");
        llama_batch_ext_set_output_logits(b, idx, true);
    }
    if (llama_process(ctx, LLAMA_PROCESS_TYPE_DECODE, b) != 0) die("llama_process failed");
    llama_batch_ext_free(b);
}

int main(int argc, char **argv) {
    if (argc < 4) die("usage: oracle_mtp MODEL.gguf OUT.bin TOKEN [TOKEN ...]");
    std::vector<llama_token> toks;
    for (int i = 3; i < argc; i++) toks.push_back(atoi(argv[i]));
    const int n = (int)toks.size();
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.load_mtp = true;
    llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) die("cannot load the model");
    if (llama_model_n_layer_nextn(model) < 1) die("the model has no MTP block");
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 512, cp.n_batch = 512, cp.n_ubatch = 512, cp.n_threads = cp.n_threads_batch = 2;
    llama_context *tgt = llama_init_from_model(model, cp);
    if (!tgt) die("cannot make the trunk's context");
    llama_set_embeddings_nextn(tgt, true, false);
    run(tgt, toks, {});
    const int E = llama_model_n_embd(model);
    const float *h = llama_get_embeddings_nextn(tgt);
    if (!h) die("no nextn embeddings");
    std::vector<std::vector<float>> hp(n, std::vector<float>(E, 0.0f));
    for (int q = 1; q < n; q++) memcpy(hp[q].data(), h + (size_t)(q - 1) * E, E * sizeof(float));
    llama_context_params dp = cp;
    dp.ctx_type = LLAMA_CONTEXT_TYPE_MTP;
    dp.ctx_other = tgt;
    dp.n_rs_seq = 0;
    llama_context *dft = llama_init_from_model(model, dp);
    if (!dft) die("cannot make the MTP context");
    llama_set_embeddings_nextn(dft, true, true);
    run(dft, toks, hp);
    const int V = llama_vocab_n_tokens(llama_model_get_vocab(model));
    FILE *f = fopen(argv[2], "wb");
    if (!f) die("cannot write the output");
    uint32_t hdr[2] = {(uint32_t)n, (uint32_t)V};
    fwrite(hdr, sizeof hdr, 1, f);
    fwrite(toks.data(), sizeof(int32_t), n, f);
    for (int q = 0; q < n; q++) fwrite(llama_get_logits_ith(dft, q), sizeof(float), V, f);
    fclose(f);
    llama_free(dft);
    llama_free(tgt);
    llama_model_free(model);
    return 0;
}
