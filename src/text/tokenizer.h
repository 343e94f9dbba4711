/* tokenizer.h - text <-> token ids, from the vocabulary in a GGUF file.
 *
 * Kinds: byte-level BPE ("gpt2" in tokenizer.ggml.model) with the
 * pre-tokenizer named by tokenizer.ggml.pre (smollm, llama-bpe, qwen2,
 * gpt2 default, ...), and SentencePiece-style ("llama": scores, byte
 * fallback). Output ids equal llama.cpp's for the same vocabulary
 * (tests/test_tokenizer.c compares thousands of strings; see
 * src/text/README.md for the few known differences on invalid input).
 * Control tokens (<|im_start|>, <s>, ...) are matched in the input only
 * when the caller passes parse_special; otherwise their text is ordinary
 * text, so user content can never produce them. User-defined tokens (GGUF
 * type 4, e.g. <think> in some vocabularies) are always matched, as in
 * llama.cpp and the HF tokenizers: they are vocabulary words, not markup.
 * A tokenizer is read-only after tok_load: share it between threads.
 * Does not: add BOS/EOS (callers ask tok_add_bos) or render chat. */
#ifndef STRATA_TOKENIZER_H
#define STRATA_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

typedef struct gguf_file gguf_file; /* model/gguf.h */
typedef struct tokenizer tokenizer;

typedef enum { TOK_BPE = 1, TOK_SPM = 2 } tok_kind;

/* Copies what it needs: f may be closed afterwards. A malformed or
 * unsupported vocabulary gives STRATA_EFORMAT / STRATA_EUNSUPPORTED. */
int tok_load(tokenizer **out, const gguf_file *f, strata_err *err);
void tok_free(tokenizer *t); /* NULL is fine */

/* Encode len bytes of text (any bytes; invalid UTF-8 is handled as
 * llama.cpp does). *ids is malloc'd, never NULL on success (caller frees),
 * *n its count. SPM vocabularies add their space prefix at the start and
 * after each special token, as llama.cpp does with add_special off. */
int tok_encode(const tokenizer *t, const char *text, size_t len, int parse_special,
               int32_t **ids, size_t *n, strata_err *err);

/* Bytes of one token as output text (byte-level mapping undone, SPM's
 * U+2581 turned into a space, <0xAB> byte tokens into the byte). Writes at
 * most cap bytes; returns the full length (may exceed cap), or -1 for an
 * out-of-range id. Control tokens give their text only if show_special. */
int tok_piece(const tokenizer *t, int32_t id, int show_special, char *buf, size_t cap);

tok_kind tok_get_kind(const tokenizer *t);
int32_t tok_n_vocab(const tokenizer *t);
int32_t tok_bos(const tokenizer *t);  /* -1 if none */
int32_t tok_eos(const tokenizer *t);  /* -1 if none */
int tok_add_bos(const tokenizer *t);  /* the vocabulary asks for BOS */
/* End of generation: eos, eot, <|im_end|>, <|eot_id|>, <|endoftext|>, ... */
int tok_is_eog(const tokenizer *t, int32_t id);
/* Id of the token whose text is exactly s, or -1. */
int32_t tok_find(const tokenizer *t, const char *s);

#endif
