/* draft.h - prompt-lookup drafting: guessing the next tokens of a
 * sequence from its own context, for speculative decoding.
 *
 * Agent replies copy their context heavily (a file re-emitted with one
 * change, the arguments of the previous tool call, paths). When the last
 * few tokens of a sequence occurred earlier in it, the tokens that
 * followed there are a cheap guess of what comes next. The caller
 * verifies the guess in one forward batch and keeps only the tokens the
 * sampler itself picks (server/sched_spec.c), so a guess never changes
 * the output, only how many tokens one forward pass yields.
 * Does not: verify, sample, or know about the model. */
#ifndef STRATA_DRAFT_H
#define STRATA_DRAFT_H

#include <stdint.h>

#define DRAFT_NGRAM_MAX 4 /* longest suffix looked up */
#define DRAFT_NGRAM_MIN 2 /* shortest: a single token matches too often to pay */

/* Up to max_draft tokens that followed the most recent earlier occurrence
 * of the longest suffix of toks[0..n) (DRAFT_NGRAM_MAX tokens down to
 * DRAFT_NGRAM_MIN) into out; returns how many (0: no suffix occurred
 * before, else max_draft). A continuation that reaches the end of toks
 * repeats itself (a run with period n - start of continuation).
 * O(n * ngram). */
int draft_lookup(const int32_t *toks, int n, int max_draft, int32_t *out);

/* Drafting from a predicted output (OpenAI's "prediction": the file an
 * edit will mostly re-emit): up to max_draft tokens of pred[0..n_pred)
 * that continue the reply so far, reply[0..n_reply). A reply shorter than
 * DRAFT_NGRAM_MIN that pred begins with continues from there; a longer one
 * from the occurrence in pred of its longest suffix (DRAFT_NGRAM_MAX down
 * to DRAFT_NGRAM_MIN) nearest the reply's own length (reply and
 * prediction run roughly in step). Returns how many (0: no match; fewer
 * than max_draft where pred ends). */
int draft_predicted(const int32_t *pred, int n_pred, const int32_t *reply, int n_reply, int max_draft,
                    int32_t *out);

#endif
