/* gen.h - one generation as an API handler sees it: submit tokens, then
 * pull released text (stop strings applied, UTF-8 whole) until finished.
 * Shared by the OpenAI and Anthropic handlers, streamed or not. */
#ifndef STRATA_GEN_H
#define STRATA_GEN_H

#include "server/sched.h"
#include "server/textout.h"
#include "text/tokenizer.h"

typedef struct gen_params {
    sample_params sampling;
    int max_tokens;
    int n_logprobs;
    const char *stops[TEXTOUT_MAX_STOPS];
    int n_stops;
    const char *cache_salt;
} gen_params;

typedef struct gen {
    sched_req *req;
    const tokenizer *tok;
    textout text;
    int n_seen;            /* tokens pulled from the scheduler */
    sched_status st;
    int done;              /* finished and all text released */
    int stopped_by_string; /* a stop string ended it (we cancelled the rest) */
    sched_token *tokens;   /* every generated token (for logprobs and replay) */
    int n_tokens, cap_tokens;
} gen;

int gen_start(gen *g, sched *s, const tokenizer *tok, const int32_t *ids, int n,
              const gen_params *p, strata_err *err);
/* Waits up to timeout_ms; returns newly released text (may be empty). */
size_t gen_pull(gen *g, int timeout_ms, const char **text);
/* "stop" or "length" (OpenAI words; cancelled/error map to "stop"). */
const char *gen_finish_word(const gen *g);
void gen_cancel(gen *g);
void gen_end(gen *g);

#endif
