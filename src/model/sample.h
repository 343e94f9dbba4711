/* sample.h - choosing the next token from a row of logits.
 *
 * A sampler holds the sampling parameters, its own PRNG and the history
 * of accepted tokens (for the repetition penalties). The steps run in a
 * fixed order, as in llama.cpp's default chain:
 *
 *   logit bias -> penalties -> top_k -> top_p -> min_p -> temperature -> draw
 *
 * top_p and min_p look at the probabilities before temperature, so the
 * temperature only reshapes the surviving tokens. temperature <= 0 (in
 * fact below 1e-6) is greedy: penalties, then the argmax (ties go to the
 * lowest id).
 *
 * Reproducible: the same params (seed included), the same accepted tokens,
 * the same logits and the same position give the same token on every
 * machine; each position's draw comes from xoshiro256** seeded by
 * splitmix64 from (seed, position), never rand().
 * Cost: O(n_vocab) per call plus O(n_vocab log k) for top_k; top_p without
 * top_k grows a partial selection only until it holds the nucleus.
 * Does not: compute logits, know about the tokenizer or stop strings. */
#ifndef STRATA_SAMPLE_H
#define STRATA_SAMPLE_H

#include <stdint.h>

#define SAMPLE_MAX_BIAS 300 /* logit_bias entries a request may set */

/* A bias added to one token's logit before everything else; -100 or
 * below bans the token (its logit becomes -inf), as the OpenAI API
 * documents -100 to act. */
typedef struct sample_bias {
    int32_t id;
    float bias;
} sample_bias;

typedef struct sample_params {
    float temperature;       /* <= 0: greedy */
    int top_k;               /* <= 0 or >= n_vocab: off */
    float top_p;             /* >= 1: off */
    float min_p;             /* <= 0: off; keep p >= min_p * p_max */
    float repeat_penalty;    /* 1: off; CTRL-style divide/multiply */
    float presence_penalty;  /* 0: off; subtracted once per seen token */
    float frequency_penalty; /* 0: off; subtracted once per occurrence */
    int penalty_last_n;      /* window of accepted tokens; 0 off, -1 all */
    uint64_t seed;
    int n_bias;              /* entries of bias (ids past the vocabulary are skipped) */
    sample_bias bias[SAMPLE_MAX_BIAS];
} sample_params;

typedef struct sampler sampler;

/* Neutral defaults: temperature 1, no truncation, no penalties, window 64,
 * seed 0. Callers overwrite what the request sets. */
sample_params sample_params_default(void);

/* The seed of sample k of several independent ones from one request (an
 * OpenAI request's choices, n > 1): seed itself for k = 0 (the first is
 * the request with n = 1), else splitmix64 of seed + k * 2^64/phi, a
 * fixed function of (seed, k), so the same request gives the same
 * choices again. */
uint64_t sample_choice_seed(uint64_t seed, int k);

sampler *sample_new(const sample_params *p);
void sample_free(sampler *s); /* NULL is fine */

/* Record a token (prompt or generated) for the penalty window. */
void sample_accept(sampler *s, int32_t token);
/* Forget the history (the penalty window). */
void sample_reset(sampler *s);

/* The token id for position pos of the sequence (where the token will
 * sit) from logits[0..n_vocab). logits is not modified. The randomness
 * is a function of (seed, pos) alone, not of the calls made before:
 * speculative decoding, which samples a position from a verified row and
 * may discard the rows after it, draws what one-at-a-time decoding draws. */
int32_t sample_next(sampler *s, const float *logits, int n_vocab, int64_t pos);

/* The n most likely tokens under log-softmax(logits), most likely first
 * (ties: lower id first). Writes ids[] and logprobs[]; returns how many
 * (min(n, n_vocab)). Temperature and penalties are not applied: these are
 * the model's own log-probabilities, as the OpenAI API reports them. */
int sample_top_logprobs(const float *logits, int n_vocab, int n, int32_t *ids,
                        float *logprobs);

/* log-softmax(logits)[id]. */
float sample_logprob(const float *logits, int n_vocab, int32_t id);

#endif
