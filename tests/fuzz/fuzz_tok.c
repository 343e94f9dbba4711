/* fuzz_tok.c - libFuzzer target: the tokenizer on arbitrary bytes.
 * The first byte picks the vocabulary (SmolLM2's byte-level BPE, or the
 * generated SPM one) and whether special tokens are parsed; the rest is
 * the text. Encoding must succeed on any bytes (invalid UTF-8 included),
 * every id must be in range, and decoding the ids must not fail.
 * Vocabularies: $STRATA_FUZZ_BPE (default: the SmolLM2 model,
 * models/SmolLM2-135M-Instruct.Q4_1.gguf) and $STRATA_FUZZ_SPM (default:
 * tests/data/gen/tok/spm.gguf), loaded once. A vocabulary that is not
 * there is skipped (the other still runs); with neither, every input
 * aborts so a missing file is not mistaken for a clean run. */
#include <stdlib.h>

#include "fuzz_util.h"
#include "model/gguf.h"
#include "text/tokenizer.h"

static tokenizer *load_vocab(const char *env, const char *fallback) {
    const char *path = getenv(env) ? getenv(env) : fallback;
    gguf_file *f = NULL;
    tokenizer *t = NULL;
    strata_err err;
    if (gguf_open(&f, path, &err) == 0 && tok_load(&t, f, &err) != 0) t = NULL;
    gguf_close(f);
    if (!t) fprintf(stderr, "fuzz_tok: no vocabulary from %s\n", path);
    return t;
}

static tokenizer *vocab(int which) {
    static tokenizer *v[2];
    static int loaded;
    if (!loaded) {
        v[0] = load_vocab("STRATA_FUZZ_BPE", "models/SmolLM2-135M-Instruct.Q4_1.gguf");
        v[1] = load_vocab("STRATA_FUZZ_SPM", "tests/data/gen/tok/spm.gguf");
        if (!v[0] && !v[1]) abort();
        loaded = 1;
    }
    return v[which] ? v[which] : v[!which];
}

static void check_ids(const tokenizer *t, const int32_t *ids, size_t n) {
    char piece[256];
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= tok_n_vocab(t)) abort();
        if (tok_piece(t, ids[i], 1, piece, sizeof piece) < 0) abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    const tokenizer *t = vocab(data[0] & 1);
    int parse_special = (data[0] >> 1) & 1;
    int32_t *ids = NULL;
    size_t n = 0;
    strata_err err;
    if (tok_encode(t, (const char *)data + 1, size - 1, parse_special, &ids, &n, &err) != 0) abort();
    check_ids(t, ids, n);
    free(ids);
    return 0;
}
