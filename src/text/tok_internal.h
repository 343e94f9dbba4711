/* tok_internal.h - what the tokenizer's modules share; not a public API.
 *
 *   tokenizer.c  load from GGUF, accessors, tok_encode dispatch, pieces
 *   tok_special.c token attributes, EOG set, special-token partitioning
 *   tok_strtab.c interned strings (token text -> id) with a hash index
 *   tok_bpe.c    byte-level BPE: merges, GPT-2 byte mapping, word merging
 *   tok_spm.c    SentencePiece-style merging by score, byte fallback
 *   tok_pretok.c pre-tokenizer regex sets (PCRE2)
 *
 * The rules mirror llama.cpp's (src/llama-vocab.cpp) so that ids match it
 * exactly; where we knowingly differ, the code says so. */
#ifndef STRATA_TOK_INTERNAL_H
#define STRATA_TOK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "model/gguf.h"

#include "base/utf8.h"
#include "text/tokenizer.h"

/* Token attributes, a bit set derived from GGUF token types and names. */
enum {
    TA_UNKNOWN = 1 << 0,
    TA_UNUSED = 1 << 1,
    TA_NORMAL = 1 << 2,
    TA_CONTROL = 1 << 3,
    TA_USER = 1 << 4,
    TA_BYTE = 1 << 5,
    TA_LSTRIP = 1 << 6, /* eat spaces left of the special token */
    TA_RSTRIP = 1 << 7, /* eat spaces right of it */
};

/* GGUF tokenizer.ggml.token_type values. */
enum { TT_UNDEFINED = 0, TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3,
       TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };

/* ---- interned strings: dense ids, exact-bytes lookup ---------------------- */
typedef struct tok_strtab {
    char *pool;          /* all strings back to back, each NUL-terminated */
    size_t pool_len, pool_cap;
    uint32_t *off, *len; /* per id */
    int32_t n, cap;
    int32_t *slots;      /* open addressing: id or -1 */
    uint32_t mask;       /* slots - 1 (power of two) */
} tok_strtab;

void strtab_init(tok_strtab *s, int32_t expect);
void strtab_clear(tok_strtab *s);
int32_t strtab_find(const tok_strtab *s, const char *p, size_t n); /* -1 if absent */
/* Id of the string, adding it if new; *added says which. */
int32_t strtab_intern(tok_strtab *s, const char *p, size_t n, int *added);
static inline const char *strtab_str(const tok_strtab *s, int32_t id) {
    return s->pool + s->off[id];
}

/* ---- growable id list ------------------------------------------------------ */
typedef struct tok_ids {
    int32_t *v;
    size_t n, cap;
} tok_ids;

void ids_push(tok_ids *o, int32_t id);

/* ---- scratch buffers of one tok_encode call (the tokenizer is const) ----- */
typedef struct tok_sym {
    uint32_t off, len; /* bytes in the work text */
    int32_t prev, next;
    int32_t id;        /* interned id of the text, -1 if none */
} tok_sym;

typedef struct tok_pair {
    float score;   /* SPM: higher first */
    int32_t rank;  /* BPE: lower first */
    int32_t left, right;
    uint32_t size; /* bytes of the merged text when queued (staleness check) */
    int32_t result;
} tok_pair;

typedef struct tok_scratch {
    char *text;           /* byte-encoded word (BPE) or escaped fragment (SPM) */
    size_t text_len, text_cap;
    tok_sym *syms;
    size_t n_syms, cap_syms;
    tok_pair *heap;
    size_t n_heap, cap_heap;
    uint32_t *spans;      /* pre-token (offset, length) pairs, two buffers */
    size_t n_spans, cap_spans;
    uint32_t *spans2;
    size_t cap_spans2;
    void *match_data;     /* pcre2_match_data, created lazily */
} tok_scratch;

void scratch_free(tok_scratch *s);
void scratch_text_reserve(tok_scratch *s, size_t n);
tok_sym *scratch_syms(tok_scratch *s, size_t n);

/* Binary heap of pairs; `better(a, b)` says a pops before b. */
typedef int (*pair_better)(const tok_pair *a, const tok_pair *b);
void heap_push(tok_scratch *s, const tok_pair *p, pair_better better);
int heap_pop(tok_scratch *s, tok_pair *out, pair_better better);

/* ---- pre-tokenizer ---------------------------------------------------------- */
typedef struct tok_pretok tok_pretok;

/* Regex set for a tokenizer.ggml.pre name; *ignore_merges is set for the
 * families where llama.cpp emits a whole pre-token that is in the vocab. */
int pretok_new(tok_pretok **out, const char *name, int *ignore_merges, strata_err *err);
void pretok_free(tok_pretok *p);
/* Split valid UTF-8 text into pre-tokens: s->spans gets (offset, length)
 * pairs covering text in order. Returns 0 or STRATA_EINVAL (regex error). */
int pretok_split(const tok_pretok *p, tok_scratch *s, const char *text, size_t len,
                 strata_err *err);
void pretok_match_data_free(void *md); /* NULL is fine */

/* ---- the tokenizer ---------------------------------------------------------- */
typedef struct tok_merges {
    uint64_t *keys;   /* (left id << 32 | right id) + 1; 0 = empty slot */
    int32_t *rank, *result;
    uint32_t mask;
} tok_merges;

struct tokenizer {
    tok_kind kind;
    int32_t n_vocab;
    tok_strtab str;    /* ids < n_vocab are tokens; BPE adds merge-only strings */
    float *scores;
    uint16_t *attr;
    uint8_t *eog;      /* per token: end of generation */

    /* special ids (-1 if none), as llama.cpp resolves them */
    int32_t bos, eos, eot, eom, unk, sep, pad, mask;
    int32_t fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
    int add_bos, add_eos, add_space_prefix;

    int32_t *specials; /* control/user-defined/unknown ids, longest text first */
    int32_t n_specials;

    char *pieces;      /* decoded text of every token, back to back */
    uint32_t *piece_off, *piece_len;

    /* BPE */
    tok_pretok *pre;
    int ignore_merges;
    tok_merges merges;
    char byte_enc[256][3];    /* GPT-2 byte -> UTF-8 of its code point */
    uint8_t byte_enc_len[256];
    int32_t byte_sym[256];    /* interned id of byte_enc[b], -1 if none */
    int32_t single_tok[256];  /* token whose text is the one byte b, or -1 */

    /* SPM */
    int32_t byte_tok[256];    /* <0xXX> token (or the raw byte's), -1 if none */
};

/* tok_special.c */
typedef struct tok_frag {
    size_t off, len; /* raw text, when id < 0 */
    int32_t id;      /* special token, or -1 for text */
} tok_frag;

int special_setup(tokenizer *t, const gguf_file *f, strata_err *err);
/* Split text at special tokens (llama.cpp's order: longest token text
 * first, every occurrence). Returns a malloc'd array, *n entries. */
tok_frag *special_partition(const tokenizer *t, const char *text, size_t len,
                            int parse_special, size_t *n);

/* tok_bpe.c */
int bpe_load(tokenizer *t, const gguf_file *f, const char *pre, strata_err *err);
void bpe_free(tokenizer *t);
int bpe_encode(const tokenizer *t, tok_scratch *s, const char *text, size_t len, tok_ids *out,
               strata_err *err);
/* Token text with the GPT-2 byte mapping undone (llama.cpp's rules). */
char *bpe_decode_text(const tokenizer *t, const char *text, size_t len, size_t *out_len);

/* tok_spm.c */
void spm_setup(tokenizer *t);
void spm_encode(const tokenizer *t, tok_scratch *s, const char *text, size_t len,
                int space_prefix, tok_ids *out);

#endif
