/* test_util.h - helpers several test files share. */
#ifndef STRATA_TEST_UTIL_H
#define STRATA_TEST_UTIL_H

#include <jansson.h>

#include "model/engine.h"
#include "text/jsonguard.h"
#include "text/tokenizer.h"

/* Loads the tokenizer of a GGUF file and closes the file at once (the
 * tokenizer must not keep pointers into the map). NULL and a failed check
 * on error. */
tokenizer *test_load_tokenizer(const char *path);

/* A whole file, NUL-terminated (*len without the NUL; len may be NULL),
 * or NULL if it cannot be read. Caller frees. */
char *test_read_file(const char *path, size_t *len);

/* Kernel levels 0..n-1 each computed the same thing into out[l] (bytes
 * long), under numerics ids id[l] (names[l]: the levels' names): every
 * two levels whose bytes differ must have other ids (a cache keyed by the
 * id must not serve one level's blocks to the other). Returns how many
 * pairs differed. what: the case, for the failure message. */
int test_levels_differ_by_id(const char *what, int n, void *const *out, size_t bytes, const char *const *id,
                             const char *const *names);

/* A fresh directory under /tmp (static buffer: one at a time), and its
 * removal with everything in it, read-only parts included. */
char *test_tmpdir_new(void);
void test_tmpdir_free(const char *dir);

/* Runs `./strata ARGS` (STRATA_BIN overrides the binary), its stdout and
 * stderr into out (NUL-terminated); returns its exit status. */
int test_run_strata(const char *args, char *out, size_t cap);

/* A token's text without specials, *len bytes (static buffer). */
const char *test_token_text(const tokenizer *t, int32_t id, int *len);

/* Checks that the JSON guard's mask after prefix (schema may be NULL: plain
 * JSON) allows exactly the tokens json_guard_feed accepts byte by byte
 * after it (an independent path: bytes, no trie). */
void test_mask_matches_feed(const tokenizer *t, const json_vocab *v, json_schema *schema, const char *prefix);

/* Reference logits of a test model (tools/testdata_reflogits.py): "u32
 * n_tok | u32 n_vocab | i32 tokens[n_tok] | f32 logits[n_tok][n_vocab]". */
typedef struct ref_logits {
    int n_tok, n_vocab;
    int32_t *tokens;
    float *logits; /* [n_tok][n_vocab] */
} ref_logits;
/* 0, or -1 when the file is missing or short; free tokens and logits. */
int test_read_ref_logits(const char *path, ref_logits *r);

/* The trunk's output-normed final hidden states (fwd_keep_hidden, the
 * MTP block's input) of tokens[0, n) in one pass on a fresh sequence of
 * e; n <= e->max_batch. Caller frees (n x n_embd floats). */
float *test_trunk_hidden(engine *e, const int32_t *toks, int n);

/* A schema compiled from JSON text (NULL with why set, also for text that
 * is not JSON). */
json_schema *test_compile_schema(const char *text, char *why, size_t cap);

/* splitmix64 -> [0, 1): the tests' seeded random numbers. */
double test_unit_random(uint64_t *state);

/* One output sampled under a guard on schema from random logits (seeded;
 * the closers ", } and ] pushed up by push * step, so runs end), its bytes
 * in text (room for cap * 512) and *used. Returns 1 when an EOG token
 * ended it, 0 at the cap of tokens; a stuck mask or a refused token is a
 * recorded failure (and returns 0). */
int test_sample_guarded(const tokenizer *t, const json_vocab *v, json_schema *schema, uint64_t seed, int cap,
                        float push, char *text, size_t *used);

/* Guarded sampling under the schema in JSON text, seeds 1..seeds, at most
 * cap tokens each: every run that ends (EOG) must be JSON that valid()
 * accepts (a recorded failure otherwise, with the seed, why and the text),
 * and at least half the runs must end. Prints how many ended. */
void test_schema_sampling(const char *model, const char *schema, int seeds, int cap,
                          int (*valid)(const json_t *o, char *why, size_t cap));

#endif
