/* tok_spm.c - SentencePiece-style tokenization ("llama" vocabularies).
 *
 * Spaces become U+2581, the text is split into UTF-8 characters, and the
 * adjacent pair whose concatenation is a token with the highest score is
 * merged until no pair is a token (ties: leftmost first). A final symbol
 * that is not a token goes out as byte tokens <0xXX>. This is llama.cpp's
 * SPM tokenizer; it differs from sentencepiece's own unigram search, and
 * llama.cpp's is the one whose ids we must match.
 * Does not: add BOS/EOS or split special tokens (tokenizer.c). */
#include <stdio.h>
#include <string.h>

#include "text/tok_internal.h"

static const char SPACE_MARK[] = "\xE2\x96\x81"; /* U+2581 */

void spm_setup(tokenizer *t) {
    for (int b = 0; b < 256; b++) {
        char hex[8];
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        int32_t id = strtab_find(&t->str, hex, 6);
        if (id < 0) { /* llama.cpp falls back to the raw byte as a token */
            char c = (char)b;
            id = strtab_find(&t->str, &c, 1);
        }
        t->byte_tok[b] = id < t->n_vocab ? id : -1;
    }
}

static int spm_better(const tok_pair *a, const tok_pair *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

/* Queue (l, r) if their concatenation is any token (control and byte
 * tokens included, as in llama.cpp), scored by that token. */
static void try_pair(const tokenizer *t, tok_scratch *s, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    uint32_t size = s->syms[l].len + s->syms[r].len;
    int32_t id = strtab_find(&t->str, s->text + s->syms[l].off, size);
    if (id < 0 || id >= t->n_vocab) return;
    tok_pair p = {t->scores[id], 0, l, r, size, id};
    heap_push(s, &p, spm_better);
}

/* Escaped text (optional leading space, ' ' -> U+2581) into s->text. */
static void escape(tok_scratch *s, const char *text, size_t len, int space_prefix) {
    scratch_text_reserve(s, (len + 1) * 3);
    size_t n = 0;
    if (space_prefix) {
        memcpy(s->text, SPACE_MARK, 3);
        n = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(s->text + n, SPACE_MARK, 3);
            n += 3;
        } else {
            s->text[n++] = text[i];
        }
    }
    s->text_len = n;
}

/* One symbol per UTF-8 character, its length read from the lead byte only
 * (llama.cpp does not validate continuation bytes here). */
static size_t split_chars(tok_scratch *s) {
    static const uint8_t lead_len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    size_t n = 0;
    for (size_t off = 0; off < s->text_len; n++) {
        size_t k = lead_len[(unsigned char)s->text[off] >> 4];
        if (k > s->text_len - off) k = s->text_len - off;
        off += k;
    }
    tok_sym *sym = scratch_syms(s, n);
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        size_t k = lead_len[(unsigned char)s->text[off] >> 4];
        if (k > s->text_len - off) k = s->text_len - off;
        sym[i] = (tok_sym){(uint32_t)off, (uint32_t)k, (int32_t)i - 1,
                           i + 1 < n ? (int32_t)i + 1 : -1, -1};
        off += k;
    }
    return n;
}

static void emit(const tokenizer *t, tok_scratch *s, tok_ids *out) {
    for (int32_t i = s->n_syms ? 0 : -1; i >= 0; i = s->syms[i].next) {
        const tok_sym *y = &s->syms[i];
        int32_t id = strtab_find(&t->str, s->text + y->off, y->len);
        if (id >= 0 && id < t->n_vocab) {
            ids_push(out, id);
            continue;
        }
        for (uint32_t j = 0; j < y->len; j++) { /* byte fallback */
            int32_t b = t->byte_tok[(unsigned char)s->text[y->off + j]];
            if (b < 0) b = t->unk; /* llama.cpp would throw here */
            if (b >= 0) ids_push(out, b);
        }
    }
}

/* A pair is stale when either side was merged away or grew since it was
 * queued: the byte sizes no longer add up to the queued size. */
void spm_encode(const tokenizer *t, tok_scratch *s, const char *text, size_t len,
                int space_prefix, tok_ids *out) {
    escape(s, text, len, space_prefix);
    size_t n = split_chars(s);
    s->n_heap = 0;
    for (size_t i = 1; i < n; i++) try_pair(t, s, (int32_t)i - 1, (int32_t)i);
    tok_pair p;
    while (heap_pop(s, &p, spm_better)) {
        tok_sym *a = &s->syms[p.left], *b = &s->syms[p.right];
        if (a->len == 0 || b->len == 0 || a->len + b->len != p.size) continue; /* stale */
        a->len += b->len;
        b->len = 0;
        a->next = b->next;
        if (b->next >= 0) s->syms[b->next].prev = p.left;
        try_pair(t, s, a->prev, p.left);
        try_pair(t, s, p.left, a->next);
    }
    emit(t, s, out);
}
