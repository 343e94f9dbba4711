/* tok_special.c - special token ids, token attributes, the end-of-generation
 * set, and splitting input text at special tokens.
 *
 * llama.cpp decides much of this from token *names* rather than metadata
 * (a "<|im_end|>" is end-of-generation and control even when the GGUF says
 * otherwise); ids must match llama.cpp's, so the same rules are applied.
 * Where llama.cpp picks among several candidates in hash-map order, we
 * pick the lowest id (deterministic; the candidates agree in practice).
 *
 * Matching in the input: control and unknown tokens only when the caller
 * sets parse_special; user-defined tokens always (as llama.cpp and the HF
 * tokenizers do: they are ordinary vocabulary words that must not be
 * split). Each special token, longest text first, cuts every occurrence
 * out of the text still unsplit.
 * Does not: tokenize the text between specials (tok_bpe.c, tok_spm.c). */
#include <ctype.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/mem.h"
#include "text/tok_internal.h"

static int is_named(const tokenizer *t, int32_t id, const char *const *names) {
    const char *s = strtab_str(&t->str, id);
    size_t n = t->str.len[id];
    for (; *names; names++)
        if (strlen(*names) == n && memcmp(*names, s, n) == 0) return 1;
    return 0;
}

/* Name lists (llama.cpp's, incl. the fullwidth DeepSeek spellings). */
static const char *const EOT_NAMES[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>", "_<EOT>", "[EOT]", "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
    "<end_of_utterance>", NULL};
static const char *const EOM_NAMES[] = {"<|eom_id|>", NULL};
static const char *const FIM_PRE_NAMES[] = {
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>",
    "<PRE>", "\xE2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>", NULL};
static const char *const FIM_SUF_NAMES[] = {
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81hole\xEF\xBD\x9C>",
    "<SUF>", "\xE2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>", NULL};
static const char *const FIM_MID_NAMES[] = {
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>",
    "<MID>", "\xE2\x96\x81<MID>", "<|code_middle|>", "<|middle|>", NULL};
static const char *const FIM_PAD_NAMES[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>",
                                            "[PAD]", NULL};
static const char *const FIM_REP_NAMES[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>",
                                            "<reponame>", NULL};
static const char *const FIM_SEP_NAMES[] = {"<|file_sep|>", NULL};
static const char *const EOG_NAMES[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", "[e~[", NULL};
/* gpt-oss: always rendered, never control (llama.cpp's workaround) */
static const char *const ALWAYS_USER_NAMES[] = {"<|channel|>", "<|message|>", "<|start|>",
                                                "<|constrain|>", NULL};

/* ---- special ids from metadata ---------------------------------------------- */

static const struct {
    const char *key;
    size_t field; /* offset of the int32_t in tokenizer */
} ID_KEYS[] = {
    {"tokenizer.ggml.bos_token_id", offsetof(tokenizer, bos)},
    {"tokenizer.ggml.eos_token_id", offsetof(tokenizer, eos)},
    {"tokenizer.ggml.eot_token_id", offsetof(tokenizer, eot)},
    {"tokenizer.ggml.eom_token_id", offsetof(tokenizer, eom)},
    {"tokenizer.ggml.unknown_token_id", offsetof(tokenizer, unk)},
    {"tokenizer.ggml.seperator_token_id", offsetof(tokenizer, sep)}, /* GGUF's spelling */
    {"tokenizer.ggml.padding_token_id", offsetof(tokenizer, pad)},
    {"tokenizer.ggml.mask_token_id", offsetof(tokenizer, mask)},
    {"tokenizer.ggml.fim_pre_token_id", offsetof(tokenizer, fim_pre)},
    {"tokenizer.ggml.fim_suf_token_id", offsetof(tokenizer, fim_suf)},
    {"tokenizer.ggml.fim_mid_token_id", offsetof(tokenizer, fim_mid)},
    {"tokenizer.ggml.fim_pad_token_id", offsetof(tokenizer, fim_pad)},
    {"tokenizer.ggml.fim_rep_token_id", offsetof(tokenizer, fim_rep)},
    {"tokenizer.ggml.fim_sep_token_id", offsetof(tokenizer, fim_sep)},
    {"tokenizer.ggml.prefix_token_id", offsetof(tokenizer, fim_pre)}, /* deprecated names */
    {"tokenizer.ggml.suffix_token_id", offsetof(tokenizer, fim_suf)},
    {"tokenizer.ggml.middle_token_id", offsetof(tokenizer, fim_mid)},
};

/* llama.cpp's defaults per kind, then the metadata; an id outside the
 * vocabulary is ignored with a warning (the default stays). */
static int read_special_ids(tokenizer *t, const gguf_file *f, strata_err *err) {
    int32_t *all[] = {&t->bos, &t->eos, &t->eot, &t->eom, &t->unk, &t->sep, &t->pad, &t->mask,
                      &t->fim_pre, &t->fim_suf, &t->fim_mid, &t->fim_pad, &t->fim_rep, &t->fim_sep};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) *all[i] = -1;
    if (t->kind == TOK_SPM) {
        t->bos = 1, t->eos = 2, t->unk = 0;
    } else {
        t->bos = 11, t->eos = 11; /* llama.cpp's GPT-2 defaults */
    }
    for (size_t i = 0; i < sizeof ID_KEYS / sizeof ID_KEYS[0]; i++) {
        int32_t *id = (int32_t *)((char *)t + ID_KEYS[i].field);
        if (*id >= t->n_vocab) *id = -1;
        if (!gguf_find(f, ID_KEYS[i].key)) continue;
        uint32_t v;
        int rc = gguf_get_u32(f, ID_KEYS[i].key, &v, err);
        if (rc) return rc;
        if (v < (uint32_t)t->n_vocab) *id = (int32_t)v;
        else log_warn("tokenizer: %s=%u is outside the vocabulary (%d); ignored",
                      ID_KEYS[i].key, v, t->n_vocab);
    }
    return 0;
}

/* ---- attributes and the EOG set -------------------------------------------- */

/* First (lowest id) token named in names, if *id is still unset; it is
 * made a control token, as llama.cpp does. */
static void detect_by_name(tokenizer *t, int32_t *id, const char *const *names) {
    if (*id >= 0) return;
    for (int32_t i = 0; i < t->n_vocab; i++)
        if (is_named(t, i, names)) {
            *id = i;
            t->attr[i] |= TA_CONTROL;
            return;
        }
}

static void mark_unused(tokenizer *t) {
    for (int32_t i = 0; i < t->n_vocab; i++)
        if ((t->attr[i] & TA_CONTROL) && memmem(strtab_str(&t->str, i), t->str.len[i], "unused", 6))
            t->attr[i] |= TA_UNUSED;
}

static int32_t eog_named(const tokenizer *t, const char *name) {
    for (int32_t i = 0; i < t->n_vocab; i++)
        if (t->eog[i] && strlen(name) == t->str.len[i] &&
            memcmp(strtab_str(&t->str, i), name, t->str.len[i]) == 0)
            return i;
    return -1;
}

/* Two llama.cpp corrections: with <|return|>/<|call|> (gpt-oss) or
 * <|calls|>/<|flush|> (solar-open), <|end|> is not EOG but user-defined;
 * with <|tool_response> or <|plamo:eos|>, </s> is a normal token. */
static void eog_exceptions(tokenizer *t) {
    int32_t ret = eog_named(t, "<|return|>"), call = eog_named(t, "<|call|>");
    int32_t calls = eog_named(t, "<|calls|>"), flush = eog_named(t, "<|flush|>");
    int32_t end = eog_named(t, "<|end|>");
    if (end >= 0 && ((ret >= 0 && call >= 0) || ((call >= 0 || calls >= 0) && flush >= 0))) {
        t->eog[end] = 0;
        t->attr[end] = TA_USER;
    }
    int32_t s = eog_named(t, "</s>");
    if (s >= 0 && (eog_named(t, "<|tool_response>") >= 0 || eog_named(t, "<|plamo:eos|>") >= 0)) {
        t->eog[s] = 0;
        t->attr[s] = TA_NORMAL;
    }
}

static void build_eog(tokenizer *t) {
    t->eog = xcalloc((size_t)t->n_vocab, 1);
    int32_t fims[] = {t->fim_pad, t->fim_rep, t->fim_sep};
    for (int i = 0; i < 3; i++)
        if (fims[i] >= 0) t->eog[fims[i]] = 1;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        if (is_named(t, i, EOG_NAMES)) {
            t->eog[i] = 1;
            t->attr[i] |= TA_CONTROL;
        }
        if (is_named(t, i, ALWAYS_USER_NAMES)) t->attr[i] = TA_USER;
    }
    int32_t ends[] = {t->eos, t->eot, t->eom};
    for (int i = 0; i < 3; i++)
        if (ends[i] >= 0) t->eog[ends[i]] = 1;
    eog_exceptions(t);
}

/* ---- the special-token list ---------------------------------------------------- */

static int by_len_desc(const void *a, const void *b, void *ctx) {
    const tokenizer *t = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (t->str.len[x] != t->str.len[y]) return t->str.len[x] > t->str.len[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}

static void build_specials(tokenizer *t) {
    t->specials = xmalloc((size_t)t->n_vocab * sizeof *t->specials);
    t->n_specials = 0;
    for (int32_t i = 0; i < t->n_vocab; i++)
        if (t->attr[i] & (TA_CONTROL | TA_USER | TA_UNKNOWN)) t->specials[t->n_specials++] = i;
    qsort_r(t->specials, (size_t)t->n_specials, sizeof *t->specials, by_len_desc, t);
}

/* Phi-3 (by general.name, as llama.cpp): specials eat spaces to their right. */
static void phi3_rstrip(tokenizer *t, const gguf_file *f) {
    gguf_str name;
    if (gguf_get_str(f, "general.name", &name, NULL)) return;
    char low[256];
    size_t n = name.len < sizeof low - 1 ? name.len : sizeof low - 1;
    for (size_t i = 0; i < n; i++) low[i] = (char)tolower((unsigned char)name.ptr[i]);
    low[n] = 0;
    if (!strstr(low, "phi-3") && !strstr(low, "phi3")) return;
    for (int32_t k = 0; k < t->n_specials; k++) t->attr[t->specials[k]] |= TA_RSTRIP;
    static const char *const on[] = {"</s>", NULL}, *const off[] = {"<unk>", "<s>", "<|endoftext|>", NULL};
    for (int32_t i = 0; i < t->n_vocab; i++) {
        if (is_named(t, i, on)) t->attr[i] |= TA_RSTRIP;
        if (is_named(t, i, off)) t->attr[i] &= (uint16_t)~TA_RSTRIP;
    }
}

int special_setup(tokenizer *t, const gguf_file *f, strata_err *err) {
    int rc = read_special_ids(t, f, err);
    if (rc) return rc;
    detect_by_name(t, &t->eot, EOT_NAMES);
    detect_by_name(t, &t->eom, EOM_NAMES);
    detect_by_name(t, &t->fim_pre, FIM_PRE_NAMES);
    detect_by_name(t, &t->fim_suf, FIM_SUF_NAMES);
    detect_by_name(t, &t->fim_mid, FIM_MID_NAMES);
    detect_by_name(t, &t->fim_pad, FIM_PAD_NAMES);
    detect_by_name(t, &t->fim_rep, FIM_REP_NAMES);
    detect_by_name(t, &t->fim_sep, FIM_SEP_NAMES);
    mark_unused(t);
    build_eog(t);
    build_specials(t);
    phi3_rstrip(t, f);
    return 0;
}

/* ---- partitioning input text ---------------------------------------------------- */

typedef struct frag_list {
    tok_frag *v;
    size_t n, cap;
} frag_list;

static void frag_push(frag_list *l, size_t off, size_t len, int32_t id) {
    XGROW(l->v, l->cap, l->n + 1, 16);
    l->v[l->n++] = (tok_frag){off, len, id};
}

/* Cut every occurrence of special token id out of text fragment f. */
static void split_fragment(const tokenizer *t, const char *text, const tok_frag *f, int32_t id,
                           frag_list *out) {
    const char *tok = strtab_str(&t->str, id);
    size_t tl = t->str.len[id], pos = f->off, end = f->off + f->len;
    uint16_t a = t->attr[id];
    for (;;) {
        const char *m = memmem(text + pos, end - pos, tok, tl);
        if (!m) break;
        size_t at = (size_t)(m - text), left = at;
        if (a & TA_LSTRIP)
            while (left > pos && isspace((unsigned char)text[left - 1])) left--;
        if (left > pos) frag_push(out, pos, left - pos, -1);
        frag_push(out, 0, 0, id);
        pos = at + tl;
        if (a & TA_RSTRIP)
            while (pos < end && isspace((unsigned char)text[pos])) pos++;
    }
    if (pos < end) frag_push(out, pos, end - pos, -1);
}

/* Bigrams present in text: lets most specials be skipped without a scan. */
static void bigram_map(const char *text, size_t len, uint64_t *bm) {
    memset(bm, 0, 8192);
    for (size_t i = 0; i + 1 < len; i++) {
        unsigned k = (unsigned)(unsigned char)text[i] << 8 | (unsigned char)text[i + 1];
        bm[k >> 6] |= 1ull << (k & 63);
    }
}

static int may_occur(const tokenizer *t, int32_t id, const char *text, size_t len,
                     const uint64_t *bm) {
    const unsigned char *s = (const unsigned char *)strtab_str(&t->str, id);
    size_t n = t->str.len[id];
    if (n == 0 || n > len) return 0;
    if (n == 1) return memchr(text, s[0], len) != NULL;
    for (size_t i = 0; i + 1 < n; i++) {
        unsigned k = (unsigned)s[i] << 8 | s[i + 1];
        if (!(bm[k >> 6] & (1ull << (k & 63)))) return 0;
    }
    return 1;
}

tok_frag *special_partition(const tokenizer *t, const char *text, size_t len, int parse_special,
                            size_t *n) {
    frag_list cur = {0}, next = {0};
    if (len) frag_push(&cur, 0, len, -1);
    uint64_t *bm = t->n_specials && len ? xmalloc(8192) : NULL;
    if (bm) bigram_map(text, len, bm);
    for (int32_t k = 0; bm && k < t->n_specials; k++) {
        int32_t id = t->specials[k];
        if (!parse_special && (t->attr[id] & (TA_CONTROL | TA_UNKNOWN))) continue;
        if (!may_occur(t, id, text, len, bm)) continue;
        next.n = 0;
        for (size_t i = 0; i < cur.n; i++) {
            if (cur.v[i].id >= 0) frag_push(&next, 0, 0, cur.v[i].id);
            else split_fragment(t, text, &cur.v[i], id, &next);
        }
        frag_list tmp = cur;
        cur = next;
        next = tmp;
    }
    free(bm);
    free(next.v);
    *n = cur.n;
    return cur.v;
}
