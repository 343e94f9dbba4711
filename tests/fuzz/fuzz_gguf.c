/* fuzz_gguf.c - libFuzzer target: a GGUF file of arbitrary bytes.
 * gguf_open must validate everything (header, metadata, tensor infos)
 * before returning, so every typed getter and the tokenizer loader are
 * then run over what it accepted; none may read outside the map.
 * Seeds: tests/fuzz/corpus/gguf (tiny generated models and vocabularies). */
#include <stdlib.h>

#include "fuzz_util.h"
#include "model/gguf.h"
#include "text/chat.h"
#include "text/render.h"
#include "text/tokenizer.h"

/* Every getter on every key, with the key's own type and with others. */
static void touch_metadata(const gguf_file *f) {
    strata_err err;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        char *key = gguf_str_dup(f->kv[i].key);
        uint32_t u;
        int64_t l;
        float x;
        int b;
        gguf_str s;
        const void *elems;
        const gguf_str *strs;
        uint64_t n;
        gguf_get_u32(f, key, &u, &err);
        gguf_get_i64(f, key, &l, &err);
        gguf_get_f32(f, key, &x, &err);
        gguf_get_bool(f, key, &b, &err);
        gguf_get_str(f, key, &s, &err);
        gguf_get_arr(f, key, f->kv[i].arr_type, &elems, &n, &err);
        gguf_get_str_arr(f, key, &strs, &n, &err);
        free(key);
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        char *name = gguf_str_dup(f->tensors[i].name);
        gguf_find_tensor(f, name);
        free(name);
    }
}

/* A vocabulary that loads must encode and decode without harm. */
static void touch_tokenizer(const gguf_file *f) {
    tokenizer *t = NULL;
    strata_err err;
    if (tok_load(&t, f, &err) != 0) return;
    static const char text[] = "Hello <|im_start|>user\n world 123 \xc3\xa9\xff";
    int32_t *ids = NULL;
    size_t n = 0;
    if (tok_encode(t, text, sizeof text - 1, 1, &ids, &n, &err) == 0) {
        char piece[64];
        for (size_t i = 0; i < n; i++) tok_piece(t, ids[i], 1, piece, sizeof piece);
        free(ids);
    }
    renderer *r = NULL; /* the GGUF's chat template (or a built-in format) loads or fails cleanly */
    if (render_new(&r, f, t, NULL, &err) == 0) render_free(r);
    tok_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64];
    int fd = fuzz_memfd(data, size, path, sizeof path);
    if (fd < 0) return 0;
    gguf_file *f = NULL;
    strata_err err;
    if (gguf_open(&f, path, &err) == 0) {
        touch_metadata(f);
        touch_tokenizer(f);
        gguf_close(f);
    }
    close(fd);
    return 0;
}
