/* jsonguard.h - constrained sampling for response_format json_object: the
 * model can only write a valid JSON object, then end.
 *
 * A json_guard is an incremental JSON validator (a pushdown automaton over
 * bytes) plus the vocabulary: before each sampling step json_guard_mask
 * sets to -INFINITY the logit of every token whose bytes would not keep the
 * output a prefix of a valid JSON object; json_guard_accept then advances
 * the automaton by the chosen token. Once the top-level object is closed
 * only end-of-generation tokens are allowed. Control tokens (empty text
 * without show_special) are never allowed.
 *
 * The language is RFC 8259 JSON with a top-level object and these limits,
 * so that every output also parses with Jansson into int64/double and a
 * small model cannot loop forever on one construct:
 *   - nesting depth <= JSON_GUARD_MAX_DEPTH;
 *   - integer part of a number <= 18 digits, exponent <= 2 digits;
 *   - no \u0000, \u escapes pair surrogates correctly, strings are valid
 *     UTF-8 (no overlongs, no encoded surrogates);
 *   - at most JSON_GUARD_MAX_WS whitespace bytes in a row;
 *   - no leading text other than whitespace, nothing after the object.
 * With a schema (json_guard_new_schema) the output must also validate
 * against it (jsonguard_schema.c). Does not: sample (the caller does,
 * from the masked logits). */
#ifndef STRATA_JSONGUARD_H
#define STRATA_JSONGUARD_H

#include <stddef.h>
#include <stdint.h>

#include "text/jsonschema.h"
#include "text/tokenizer.h"

#define JSON_GUARD_MAX_DEPTH 64
#define JSON_GUARD_MAX_WS 32 /* a newline and an indentation 7 levels deep; a model stuck on blanks moves on */

/* Every token's bytes and a trie over them, built once per tokenizer.
 * Read-only after json_vocab_new: share it between requests and threads.
 * It copies what it needs; t may be freed afterwards. */
typedef struct json_vocab json_vocab;
json_vocab *json_vocab_new(const tokenizer *t);
void json_vocab_free(json_vocab *v); /* NULL is fine */

/* One generation's state. v is borrowed and must outlive the guard; v may
 * be NULL for a bare validator (json_guard_feed only). Not thread-safe:
 * one guard per sequence. */
typedef struct json_guard json_guard;
json_guard *json_guard_new(const json_vocab *v);
/* The same, with the output held to schema as well (jsonschema.h): the
 * guard takes a reference; NULL is json_guard_new. */
json_guard *json_guard_new_schema(const json_vocab *v, json_schema *schema);
void json_guard_free(json_guard *g); /* NULL is fine */

/* Sets logits[id] = -INFINITY (logits has tok_n_vocab entries) for every
 * token not allowed next. Returns how many stay allowed; 0 means stuck
 * (no token can continue: the caller ends the request with an error). */
int json_guard_mask(json_guard *g, float *logits);

/* Advances by the chosen token. Returns 0, or -1 if the token was not
 * allowed (the state is then unchanged). An EOG token is allowed only
 * once done. */
int json_guard_accept(json_guard *g, int32_t token);

/* Advances by n raw bytes (the validator alone). Returns 0 if the output
 * is still a valid prefix, else -1 and the state is unchanged. */
int json_guard_feed(json_guard *g, const char *bytes, size_t n);

/* The top-level object is complete. */
int json_guard_done(const json_guard *g);

/* Back to before the object (a new value under the same schema). */
void json_guard_reset(json_guard *g);
/* 1 if n raw bytes would keep the output a valid prefix; the state is
 * left as it is. */
int json_guard_try(const json_guard *g, const char *bytes, size_t n);

/* The vocabulary as the guard sees it (text/callguard.c walks it too):
 * its size, a token's text (what tok_piece gives without special
 * tokens; empty for control tokens) and whether it ends generation. */
int32_t json_vocab_size(const json_vocab *v);
const char *json_vocab_text(const json_vocab *v, int32_t id, size_t *len);
int json_vocab_is_eog(const json_vocab *v, int32_t id);

#endif
