/* tok_bpe.c - byte-level BPE ("gpt2" vocabularies): GPT-2 byte mapping,
 * merge ranks, and merging one pre-token at a time.
 *
 * A pre-token's bytes are mapped to printable code points (GPT-2's
 * bytes_to_unicode), each mapped byte starts as one symbol, and the
 * adjacent pair with the lowest merge rank is merged until none is left
 * (ties: leftmost first), as llama.cpp does with its priority queue.
 * Merge parts and results are interned next to the tokens, so a pair is
 * looked up by two integer ids; strings that are not tokens get ids past
 * n_vocab and are emitted through llama.cpp's one-byte fallback.
 * Does not: split text into pre-tokens (tok_pretok.c) or handle special
 * tokens (tok_special.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "text/tok_internal.h"

/* ---- GPT-2 byte <-> code point mapping ------------------------------------ */

/* Printable bytes map to themselves; the other 68 to U+0100.. in order. */
static uint32_t byte_to_cp(int b, int *next_extra) {
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))
        return (uint32_t)b;
    return 256u + (uint32_t)(*next_extra)++;
}

static void setup_byte_maps(tokenizer *t) {
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        uint32_t cp = byte_to_cp(b, &extra);
        t->byte_enc_len[b] = (uint8_t)utf8_put(t->byte_enc[b], cp);
    }
}

/* The byte a mapped code point stands for, or -1. */
static int cp_to_byte(uint32_t cp) {
    if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF))
        return (int)cp;
    if (cp < 256 || cp >= 256 + 68) return -1;
    int n = 0;
    for (int b = 0; b < 256; b++) { /* the n-th unprintable byte */
        int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        if (!printable && n++ == (int)(cp - 256)) return b;
    }
    return -1;
}

char *bpe_decode_text(const tokenizer *t, const char *text, size_t len, size_t *out_len) {
    (void)t;
    size_t cap = len + 16, n = 0;
    char *o = xmalloc(cap);
    for (size_t i = 0; i < len;) {
        size_t used;
        uint32_t cp = utf8_decode_lenient(text + i, len - i, &used);
        int b = cp_to_byte(cp);
        if (b >= 0) {
            o[n++] = (char)b;
        } else { /* llama.cpp writes the unmappable code point out like this */
            char u[4], hex[16];
            size_t k = utf8_put(u, cp), need = n + 16 + 2 * k + len;
            XGROW(o, cap, need, 64);
            n += (size_t)sprintf(o + n, "[UNK_BYTE_0x");
            for (size_t j = 0; j < k; j++) {
                snprintf(hex, sizeof hex, "%02x", (unsigned char)u[j]);
                memcpy(o + n, hex, 2);
                n += 2;
            }
            memcpy(o + n, text, len);
            n += len;
            o[n++] = ']';
        }
        XGROW(o, cap, n + 8, 64);
        i += used;
    }
    *out_len = n;
    return o;
}

/* ---- merges ------------------------------------------------------------------ */

static uint64_t pair_key(int32_t a, int32_t b) {
    return (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1; /* 0 marks an empty slot */
}

static uint32_t key_slot(uint64_t k, uint32_t mask) {
    k ^= k >> 33;
    k *= 0xFF51AFD7ED558CCDull;
    k ^= k >> 33;
    return (uint32_t)k & mask;
}

/* First occurrence wins, as in llama.cpp (a duplicate merge keeps its
 * earlier, better rank). */
static void merges_put(tok_merges *m, int32_t a, int32_t b, int32_t rank, int32_t result) {
    uint64_t k = pair_key(a, b);
    uint32_t i = key_slot(k, m->mask);
    while (m->keys[i] && m->keys[i] != k) i = (i + 1) & m->mask;
    if (m->keys[i]) return;
    m->keys[i] = k;
    m->rank[i] = rank;
    m->result[i] = result;
}

static int merges_get(const tok_merges *m, int32_t a, int32_t b, int32_t *rank, int32_t *result) {
    uint64_t k = pair_key(a, b);
    for (uint32_t i = key_slot(k, m->mask); m->keys[i]; i = (i + 1) & m->mask)
        if (m->keys[i] == k) {
            *rank = m->rank[i];
            *result = m->result[i];
            return 1;
        }
    return 0;
}

/* Each merge is "left right", split at the first space after the first
 * byte (so a left part may itself be a space); without one it is ignored. */
static void load_merges(tokenizer *t, const gguf_str *ms, uint64_t n) {
    uint32_t cap = 1024;
    while (cap < n * 2 + 2) cap <<= 1;
    t->merges.keys = xcalloc(cap, sizeof *t->merges.keys);
    t->merges.rank = xmalloc(cap * sizeof *t->merges.rank);
    t->merges.result = xmalloc(cap * sizeof *t->merges.result);
    t->merges.mask = cap - 1;
    char *both = NULL;
    size_t both_cap = 0;
    for (uint64_t i = 0; i < n; i++) {
        const char *s = ms[i].ptr;
        size_t len = ms[i].len;
        const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
        if (!sp) continue;
        size_t la = (size_t)(sp - s), lb = len - la - 1;
        if (la + lb > both_cap) both = xrealloc(both, both_cap = (la + lb) * 2 + 16);
        memcpy(both, s, la);
        memcpy(both + la, sp + 1, lb);
        int32_t a = strtab_intern(&t->str, s, la, NULL);
        int32_t b = strtab_intern(&t->str, sp + 1, lb, NULL);
        int32_t r = strtab_intern(&t->str, both, la + lb, NULL);
        merges_put(&t->merges, a, b, (int32_t)i, r);
    }
    free(both);
}

int bpe_load(tokenizer *t, const gguf_file *f, const char *pre, strata_err *err) {
    int rc = pretok_new(&t->pre, pre, &t->ignore_merges, err);
    if (rc) return rc;
    const gguf_str *ms;
    uint64_t n;
    rc = gguf_get_str_arr(f, "tokenizer.ggml.merges", &ms, &n, err);
    if (rc) return rc;
    if (n > INT32_MAX)
        return strata_errf(err, STRATA_EFORMAT, "tokenizer.ggml.merges: %llu merges; too many",
                           (unsigned long long)n);
    setup_byte_maps(t);
    load_merges(t, ms, n);
    for (int b = 0; b < 256; b++) {
        t->byte_sym[b] = strtab_find(&t->str, t->byte_enc[b], t->byte_enc_len[b]);
        char c = (char)b;
        int32_t id = strtab_find(&t->str, &c, 1);
        t->single_tok[b] = id < t->n_vocab ? id : -1;
    }
    return 0;
}

void bpe_free(tokenizer *t) {
    pretok_free(t->pre);
    free(t->merges.keys);
    free(t->merges.rank);
    free(t->merges.result);
}

/* ---- merging one word ---------------------------------------------------------- */

static int bpe_better(const tok_pair *a, const tok_pair *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static void try_pair(const tokenizer *t, tok_scratch *s, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const tok_sym *a = &s->syms[l], *b = &s->syms[r];
    tok_pair p;
    if (a->id < 0 || b->id < 0 || !merges_get(&t->merges, a->id, b->id, &p.rank, &p.result))
        return;
    p.score = 0;
    p.left = l;
    p.right = r;
    p.size = a->len + b->len;
    heap_push(s, &p, bpe_better);
}

/* Map the word's bytes (GPT-2 mapping) into s->text, one symbol each. */
static size_t byte_encode(const tokenizer *t, tok_scratch *s, const char *w, size_t len) {
    scratch_text_reserve(s, len * 2 + 1);
    tok_sym *sym = scratch_syms(s, len);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char b = (unsigned char)w[i];
        memcpy(s->text + n, t->byte_enc[b], 2);
        sym[i] = (tok_sym){(uint32_t)n, t->byte_enc_len[b], (int32_t)i - 1,
                           i + 1 < len ? (int32_t)i + 1 : -1, t->byte_sym[b]};
        n += t->byte_enc_len[b];
    }
    s->text_len = n;
    return n;
}

/* Merge until no adjacent pair has a rank. The left symbol absorbs the
 * right one, so a queued pair is stale exactly when a side is empty or
 * its sizes changed; text comparison (llama.cpp) is not needed. */
static void merge_all(const tokenizer *t, tok_scratch *s, size_t n_syms) {
    s->n_heap = 0;
    for (size_t i = 1; i < n_syms; i++) try_pair(t, s, (int32_t)i - 1, (int32_t)i);
    tok_pair p;
    while (heap_pop(s, &p, bpe_better)) {
        tok_sym *a = &s->syms[p.left], *b = &s->syms[p.right];
        if (a->len == 0 || b->len == 0 || a->len + b->len != p.size) continue; /* stale */
        a->len += b->len;
        a->id = p.result;
        b->len = 0;
        a->next = b->next;
        if (b->next >= 0) s->syms[b->next].prev = p.left;
        try_pair(t, s, a->prev, p.left);
        try_pair(t, s, p.left, a->next);
    }
}

/* Final symbols to ids; a symbol that is not a token goes out byte by byte
 * of its mapped text, as one-byte tokens where those exist (llama.cpp). */
static void emit(const tokenizer *t, tok_scratch *s, tok_ids *out) {
    for (int32_t i = s->n_syms ? 0 : -1; i >= 0; i = s->syms[i].next) {
        const tok_sym *y = &s->syms[i];
        if (y->id >= 0 && y->id < t->n_vocab) {
            ids_push(out, y->id);
            continue;
        }
        for (uint32_t j = 0; j < y->len; j++) {
            int32_t id = t->single_tok[(unsigned char)s->text[y->off + j]];
            if (id >= 0) ids_push(out, id);
        }
    }
}

static void encode_word(const tokenizer *t, tok_scratch *s, const char *w, size_t len,
                        tok_ids *out) {
    size_t n = byte_encode(t, s, w, len);
    if (t->ignore_merges) { /* llama3-style: a whole word in the vocab wins */
        int32_t id = strtab_find(&t->str, s->text, n);
        if (id >= 0 && id < t->n_vocab) {
            ids_push(out, id);
            return;
        }
    }
    merge_all(t, s, len);
    emit(t, s, out);
}

int bpe_encode(const tokenizer *t, tok_scratch *s, const char *text, size_t len, tok_ids *out,
               strata_err *err) {
    size_t clean_len = 0;
    char *clean = utf8_clean(text, len, &clean_len);
    if (clean) {
        text = clean;
        len = clean_len;
    }
    int rc = pretok_split(t->pre, s, text, len, err);
    for (size_t k = 0; rc == 0 && k < s->n_spans; k += 2)
        encode_word(t, s, text + s->spans[k], s->spans[k + 1], out);
    free(clean);
    return rc;
}
