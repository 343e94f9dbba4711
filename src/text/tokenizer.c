/* tokenizer.c - loading a vocabulary from GGUF, tok_encode's dispatch, and
 * token pieces (id -> text).
 *
 * Load reads tokenizer.ggml.{model, pre, tokens, scores, token_type,
 * merges, *_token_id, add_*}, copies every string it keeps (the GGUF file
 * may be closed afterwards), and precomputes each token's output text.
 * Encode splits the input at special tokens (tok_special.c) and hands the
 * text between them to BPE (tok_bpe.c) or SPM (tok_spm.c). A tokenizer is
 * read-only after load, so one may serve many threads at once; each call
 * keeps its scratch buffers on its own.
 * Does not: add BOS/EOS (callers use tok_add_bos/tok_bos) or render chat. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "text/tok_internal.h"

static const char SPACE_MARK[] = "\xE2\x96\x81"; /* U+2581, SPM's space */

void tok_free(tokenizer *t) {
    if (!t) return;
    if (t->kind == TOK_BPE) bpe_free(t);
    strtab_clear(&t->str);
    free(t->scores);
    free(t->attr);
    free(t->eog);
    free(t->specials);
    free(t->pieces);
    free(t->piece_off);
    free(t->piece_len);
    free(t);
}

/* ---- loading ------------------------------------------------------------------ */

static uint16_t attr_of_type(int32_t type) {
    switch (type) {
    case TT_NORMAL: return TA_NORMAL;
    case TT_UNKNOWN: return TA_UNKNOWN;
    case TT_CONTROL: return TA_CONTROL;
    case TT_USER: return TA_USER;
    case TT_UNUSED: return TA_UNUSED;
    case TT_BYTE: return TA_BYTE;
    default: return 0; /* undefined: no text, never matched */
    }
}

/* An optional per-token array: absent is fine, but if present it must have
 * an accepted element type and cover every token (as llama.cpp checks). */
static int optional_array(const gguf_file *f, const char *key, gguf_vtype a, gguf_vtype b,
                          int32_t n_vocab, const gguf_kv **out, strata_err *err) {
    const gguf_kv *kv = gguf_find(f, key);
    *out = NULL;
    if (!kv) return 0;
    if (kv->type != GGUF_ARRAY || (kv->arr_type != a && kv->arr_type != b))
        return strata_errf(err, STRATA_EFORMAT, "%s: wrong type (%s); vocabulary not loaded", key,
                           gguf_vtype_name(kv->type == GGUF_ARRAY ? kv->arr_type : kv->type));
    if (kv->arr_n < (uint64_t)n_vocab)
        return strata_errf(err, STRATA_EFORMAT, "%s: %llu entries for %d tokens; vocabulary not loaded",
                           key, (unsigned long long)kv->arr_n, n_vocab);
    *out = kv;
    return 0;
}

/* Token texts into the string table (ids = token ids), scores and types. */
static int load_tokens(tokenizer *t, const gguf_file *f, strata_err *err) {
    const gguf_str *toks;
    uint64_t n;
    int rc = gguf_get_str_arr(f, "tokenizer.ggml.tokens", &toks, &n, err);
    if (rc) return rc;
    if (n == 0 || n > INT32_MAX)
        return strata_errf(err, STRATA_EFORMAT, "tokenizer.ggml.tokens: %llu tokens; not loaded",
                           (unsigned long long)n);
    t->n_vocab = (int32_t)n;
    const gguf_kv *sc, *ty;
    if ((rc = optional_array(f, "tokenizer.ggml.scores", GGUF_FLOAT32, GGUF_INT32, t->n_vocab, &sc, err)) ||
        (rc = optional_array(f, "tokenizer.ggml.token_type", GGUF_INT32, GGUF_INT32, t->n_vocab, &ty, err)))
        return rc;
    strtab_init(&t->str, t->n_vocab);
    t->scores = xcalloc((size_t)n, sizeof *t->scores);
    t->attr = xmalloc((size_t)n * sizeof *t->attr);
    for (int32_t i = 0; i < t->n_vocab; i++) {
        char empty[32];
        const char *s = toks[i].ptr;
        size_t len = toks[i].len;
        if (len == 0) { /* llama.cpp renames empty tokens the same way */
            len = (size_t)snprintf(empty, sizeof empty, "[EMPTY_%d]", i);
            s = empty;
        }
        int added;
        int32_t id = strtab_intern(&t->str, s, len, &added);
        if (!added)
            return strata_errf(err, STRATA_EFORMAT,
                               "tokenizer.ggml.tokens: token %d repeats token %d; not loaded", i, id);
        int32_t type = TT_NORMAL;
        if (ty) memcpy(&type, ty->data + 4 * (size_t)i, 4);
        t->attr[i] = ty ? attr_of_type(type) : TA_NORMAL;
        if (sc && sc->arr_type == GGUF_FLOAT32) memcpy(&t->scores[i], sc->data + 4 * (size_t)i, 4);
        if (sc && sc->arr_type == GGUF_INT32) {
            int32_t v;
            memcpy(&v, sc->data + 4 * (size_t)i, 4);
            t->scores[i] = (float)v;
        }
    }
    return 0;
}

/* add_bos / add_eos / add_space_prefix: llama.cpp's defaults, then keys. */
static int read_flags(tokenizer *t, const gguf_file *f, strata_err *err) {
    t->add_bos = t->kind == TOK_SPM || t->ignore_merges; /* llama3-family BPE */
    t->add_eos = 0;
    t->add_space_prefix = t->kind == TOK_SPM;
    static const struct { const char *key; size_t field; } keys[] = {
        {"tokenizer.ggml.add_bos_token", offsetof(tokenizer, add_bos)},
        {"tokenizer.ggml.add_eos_token", offsetof(tokenizer, add_eos)},
        {"tokenizer.ggml.add_space_prefix", offsetof(tokenizer, add_space_prefix)},
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        if (!gguf_find(f, keys[i].key)) continue;
        int rc = gguf_get_bool(f, keys[i].key, (int *)((char *)t + keys[i].field), err);
        if (rc) return rc;
    }
    return 0;
}

/* Output text of token i for show_special (the llama.cpp piece rules). */
static char *make_piece(const tokenizer *t, int32_t i, size_t *len) {
    const char *s = strtab_str(&t->str, i);
    size_t n = t->str.len[i];
    uint16_t a = t->attr[i];
    if (a & (TA_UNKNOWN | TA_CONTROL | TA_USER)) {
        char *o = xmalloc(n + 1);
        memcpy(o, s, n);
        *len = n;
        return o;
    }
    if ((a & TA_NORMAL) && t->kind == TOK_BPE) return bpe_decode_text(t, s, n, len);
    if (a & TA_NORMAL) { /* SPM: U+2581 back to a space */
        char *o = xmalloc(n + 1);
        size_t k = 0;
        for (size_t j = 0; j < n;) {
            if (j + 3 <= n && memcmp(s + j, SPACE_MARK, 3) == 0) {
                o[k++] = ' ';
                j += 3;
            } else {
                o[k++] = s[j++];
            }
        }
        *len = k;
        return o;
    }
    if (a & TA_BYTE) { /* "<0xAB>": the two hex digits after "<0x" */
        char hex[3] = {n > 3 ? s[3] : 0, n > 4 ? s[4] : 0, 0};
        char *o = xmalloc(1);
        o[0] = (char)strtol(hex, NULL, 16);
        *len = 1;
        return o;
    }
    *len = 0; /* unused or undefined */
    return NULL;
}

/* All pieces are computed once at load (about 0.5 MB for 50k tokens) so
 * that tok_piece, called once per generated token, is a memcpy. */
static void build_pieces(tokenizer *t) {
    size_t cap = 1 << 16, used = 0;
    t->pieces = xmalloc(cap);
    t->piece_off = xmalloc((size_t)t->n_vocab * sizeof *t->piece_off);
    t->piece_len = xmalloc((size_t)t->n_vocab * sizeof *t->piece_len);
    for (int32_t i = 0; i < t->n_vocab; i++) {
        size_t n;
        char *p = make_piece(t, i, &n);
        XGROW(t->pieces, cap, used + n, cap);
        if (n) memcpy(t->pieces + used, p, n);
        t->piece_off[i] = (uint32_t)used;
        t->piece_len[i] = (uint32_t)n;
        used += n;
        free(p);
    }
}

static int load_kind(tokenizer *t, const gguf_file *f, strata_err *err) {
    gguf_str model;
    int rc = gguf_get_str(f, "tokenizer.ggml.model", &model, err);
    if (rc) return rc;
    if (gguf_str_eq(model, "gpt2")) {
        t->kind = TOK_BPE;
    } else if (gguf_str_eq(model, "llama")) {
        t->kind = TOK_SPM;
    } else {
        char *m = gguf_str_dup(model);
        rc = strata_errf(err, STRATA_EUNSUPPORTED,
                         "tokenizer.ggml.model '%.64s': unsupported (gpt2 and llama are); not loaded", m);
        free(m);
    }
    return rc;
}

static int load_bpe(tokenizer *t, const gguf_file *f, strata_err *err) {
    char pre[128] = "";
    if (gguf_find(f, "tokenizer.ggml.pre")) {
        gguf_str s;
        int rc = gguf_get_str(f, "tokenizer.ggml.pre", &s, err);
        if (rc) return rc;
        if (s.len >= sizeof pre)
            return strata_errf(err, STRATA_EUNSUPPORTED, "tokenizer.ggml.pre: %llu bytes; unknown",
                               (unsigned long long)s.len);
        memcpy(pre, s.ptr, s.len);
        pre[s.len] = 0;
    }
    return bpe_load(t, f, pre, err);
}

int tok_load(tokenizer **out, const gguf_file *f, strata_err *err) {
    *out = NULL;
    if (!f) return strata_errf(err, STRATA_EINVAL, "tok_load: no GGUF file");
    tokenizer *t = xcalloc(1, sizeof *t);
    int rc = load_kind(t, f, err);
    if (!rc) rc = load_tokens(t, f, err);
    if (!rc && t->kind == TOK_BPE) rc = load_bpe(t, f, err);
    if (!rc && t->kind == TOK_SPM) spm_setup(t);
    if (!rc) rc = read_flags(t, f, err);
    if (!rc) rc = special_setup(t, f, err);
    if (rc) {
        tok_free(t);
        return rc;
    }
    build_pieces(t);
    *out = t;
    return 0;
}

/* ---- encoding ------------------------------------------------------------------- */

/* Fragments between special tokens are encoded one by one, and never
 * merged across a special: BPE and SPM both restart after one. */
int tok_encode(const tokenizer *t, const char *text, size_t len, int parse_special,
               int32_t **ids, size_t *n, strata_err *err) {
    *ids = NULL;
    *n = 0;
    if (!t || (!text && len)) return strata_errf(err, STRATA_EINVAL, "tok_encode: no tokenizer or text");
    size_t n_frags;
    tok_frag *frags = special_partition(t, text, len, parse_special, &n_frags);
    tok_scratch s = {0};
    tok_ids out = {0};
    int rc = 0, prev_special = 1; /* SPM: a space prefix at the start and after specials */
    for (size_t i = 0; i < n_frags && rc == 0; i++) {
        const tok_frag *fr = &frags[i];
        if (fr->id >= 0) {
            ids_push(&out, fr->id);
            prev_special = 1;
            continue;
        }
        if (t->kind == TOK_BPE)
            rc = bpe_encode(t, &s, text + fr->off, fr->len, &out, err);
        else
            spm_encode(t, &s, text + fr->off, fr->len, t->add_space_prefix && prev_special, &out);
        prev_special = 0;
    }
    free(frags);
    scratch_free(&s);
    if (rc) {
        free(out.v);
        return rc;
    }
    *ids = out.v ? out.v : xmalloc(sizeof **ids);
    *n = out.n;
    return 0;
}

/* ---- pieces and accessors ----------------------------------------------------- */

int tok_piece(const tokenizer *t, int32_t id, int show_special, char *buf, size_t cap) {
    if (!t || id < 0 || id >= t->n_vocab) return -1;
    if (!show_special && (t->attr[id] & (TA_CONTROL | TA_UNKNOWN))) return 0;
    size_t n = t->piece_len[id];
    if (buf && cap) memcpy(buf, t->pieces + t->piece_off[id], n < cap ? n : cap);
    return (int)n;
}

tok_kind tok_get_kind(const tokenizer *t) { return t->kind; }
int32_t tok_n_vocab(const tokenizer *t) { return t->n_vocab; }
int32_t tok_bos(const tokenizer *t) { return t->bos; }
int32_t tok_eos(const tokenizer *t) { return t->eos; }
int tok_add_bos(const tokenizer *t) { return t->add_bos && t->bos >= 0; }

int tok_is_eog(const tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && t->eog[id];
}

int32_t tok_find(const tokenizer *t, const char *s) {
    int32_t id = strtab_find(&t->str, s, strlen(s));
    return id < t->n_vocab ? id : -1;
}
