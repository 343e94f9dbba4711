/* test_sample.c - sampler: greedy, reproducibility, truncation, penalties,
 * log-probabilities. Distribution tests draw many tokens and compare the
 * frequencies with the exact expected probabilities; the tolerances are
 * about 4 standard deviations, and the seeds are fixed, so they do not
 * flake. */
#include <stdlib.h>

#include "model/sample.h"
#include "test.h"

#define N_DRAWS 20000

static sample_params params(float temp, int top_k, float top_p, float min_p) {
    sample_params p = sample_params_default();
    p.temperature = temp;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.seed = 12345;
    return p;
}

/* Logits whose softmax is exactly probs (up to rounding). */
static void logits_from_probs(const double *probs, int n, float *out) {
    for (int i = 0; i < n; i++) out[i] = probs[i] > 0 ? (float)log(probs[i]) : -INFINITY;
}

/* Deterministic pseudo-random logits in [-scale, scale). */
static void random_logits(float *l, int n, unsigned seed, float scale) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        l[i] = scale * ((float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f);
    }
}

static void frequencies(sampler *s, const float *logits, int n, double *freq) {
    for (int i = 0; i < n; i++) freq[i] = 0;
    for (int d = 0; d < N_DRAWS; d++) {
        int32_t t = sample_next(s, logits, n, d);
        CHECK(t >= 0 && t < n);
        if (t >= 0 && t < n) freq[t] += 1.0 / N_DRAWS;
    }
}

static void check_freqs(const double *got, const double *want, int n) {
    for (int i = 0; i < n; i++) CHECK_NEAR(got[i], want[i], 0.015);
}

TEST(sample_greedy_argmax) {
    float l[6] = {0.1f, 2.0f, -1.0f, 3.5f, 3.5f, 0.0f};
    sample_params p = params(0.0f, 0, 1.0f, 0.0f);
    sampler *s = sample_new(&p);
    CHECK_EQ_INT(sample_next(s, l, 6, 0), 3); /* tie 3/4 goes to the lower id */
    l[4] = 3.6f;
    CHECK_EQ_INT(sample_next(s, l, 6, 0), 4);
    sample_free(s);
    const float temps[3] = {-1.0f, 1e-30f, NAN}; /* all greedy */
    for (int i = 0; i < 3; i++) {
        p.temperature = temps[i];
        s = sample_new(&p);
        CHECK_EQ_INT(sample_next(s, l, 6, 0), 4);
        sample_free(s);
    }
    sample_free(NULL);
}

TEST(sample_seed_reproducible) {
    enum { N = 1000, DRAWS = 300 };
    static float l[N];
    random_logits(l, N, 7, 3.0f);
    sample_params p = params(0.9f, 50, 0.95f, 0.02f);
    sampler *a = sample_new(&p), *b = sample_new(&p);
    p.seed = 54321;
    sampler *c = sample_new(&p);
    int same_ab = 1, same_ac = 1;
    for (int i = 0; i < DRAWS; i++) {
        int32_t ta = sample_next(a, l, N, i), tb = sample_next(b, l, N, i), tc = sample_next(c, l, N, i);
        same_ab &= ta == tb;
        same_ac &= ta == tc;
    }
    CHECK(same_ab);
    CHECK(!same_ac);
    sample_free(a);
    sample_free(b);
    sample_free(c);
}

/* The draw of a position depends on (seed, position) alone: a sampler
 * that drew other positions before (in any order, any number of times)
 * gives the same token at position 37 as a fresh one, which is what lets
 * speculative decoding sample a verified row exactly as one-at-a-time
 * decoding would. Positions differ from each other, and seeds too. */
TEST(sample_is_function_of_seed_and_position) {
    enum { N = 1000 };
    static float l[N];
    random_logits(l, N, 11, 3.0f);
    sample_params p = params(1.0f, 0, 1.0f, 0.0f);
    sampler *fresh = sample_new(&p), *used = sample_new(&p);
    for (int i = 0; i < 100; i++) sample_next(used, l, N, 1000 - i * 7);
    int32_t want[64];
    for (int pos = 0; pos < 64; pos++) want[pos] = sample_next(fresh, l, N, pos);
    int same = 1, distinct = 0;
    for (int pos = 63; pos >= 0; pos--) { /* backwards: the order of calls does not matter either */
        same &= sample_next(used, l, N, pos) == want[pos];
        same &= sample_next(used, l, N, pos) == want[pos]; /* asking twice gives the same */
    }
    for (int pos = 1; pos < 64; pos++) distinct += want[pos] != want[0];
    CHECK(same);
    CHECK(distinct > 32); /* a flat-ish distribution over 1000 tokens: positions draw apart */
    p.seed = 777;
    sampler *other = sample_new(&p);
    int differs = 0;
    for (int pos = 0; pos < 64; pos++) differs += sample_next(other, l, N, pos) != want[pos];
    CHECK(differs > 32);
    sample_free(fresh);
    sample_free(used);
    sample_free(other);
}

/* The choices of one request (OpenAI n > 1) sample under seeds derived
 * from the request's: the first is the request's own (so choice 0 is the
 * n = 1 reply), the others are a fixed function of (seed, k), distinct,
 * and draw apart from each other. */
TEST(sample_choice_seeds) {
    enum { N = 1000, K = 128 };
    static float l[N];
    random_logits(l, N, 5, 3.0f);
    uint64_t seeds[K];
    for (int k = 0; k < K; k++) seeds[k] = sample_choice_seed(0x5eed, k);
    CHECK(seeds[0] == 0x5eed);
    CHECK(sample_choice_seed(0, 0) == 0 && sample_choice_seed(~0ULL, 0) == ~0ULL);
    int distinct = 1;
    for (int a = 0; a < K; a++)
        for (int b = a + 1; b < K; b++) distinct &= seeds[a] != seeds[b];
    CHECK(distinct);
    for (int k = 1; k < K; k++) CHECK(sample_choice_seed(0x5eed, k) == seeds[k]); /* the same request, the same seeds */
    CHECK(sample_choice_seed(1, 1) != sample_choice_seed(2, 1));
    sample_params p = params(1.0f, 0, 1.0f, 0.0f);
    int32_t first[16];
    for (int k = 0; k < 4; k++) {
        p.seed = seeds[k];
        sampler *s = sample_new(&p);
        int same = 0;
        for (int pos = 0; pos < 16; pos++) {
            int32_t t = sample_next(s, l, N, pos);
            if (k == 0) first[pos] = t;
            else same += t == first[pos];
        }
        if (k) CHECK_MSG(same < 8, "choice %d drew %d of 16 tokens like choice 0", k, same);
        sample_free(s);
    }
}

TEST(sample_top_k1_is_greedy) {
    enum { N = 5000 };
    static float l[N];
    sample_params p = params(1.5f, 1, 1.0f, 0.0f);
    sampler *s = sample_new(&p);
    for (unsigned r = 0; r < 50; r++) {
        random_logits(l, N, r + 1, 4.0f);
        float best = l[0];
        int32_t arg = 0;
        for (int i = 1; i < N; i++)
            if (l[i] > best) best = l[i], arg = i;
        CHECK_EQ_INT(sample_next(s, l, N, r), arg);
    }
    sample_free(s);
}

TEST(sample_temperature_matches_softmax) {
    const double probs[4] = {0.4, 0.3, 0.2, 0.1};
    float l[4];
    double got[4], want[4], z = 0;
    logits_from_probs(probs, 4, l);
    sample_params p = params(1.0f, 0, 1.0f, 0.0f);
    sampler *s = sample_new(&p);
    frequencies(s, l, 4, got);
    check_freqs(got, probs, 4);
    sample_free(s);
    /* T = 0.5 squares the probabilities (then renormalizes). */
    for (int i = 0; i < 4; i++) z += probs[i] * probs[i];
    for (int i = 0; i < 4; i++) want[i] = probs[i] * probs[i] / z;
    p.temperature = 0.5f;
    s = sample_new(&p);
    frequencies(s, l, 4, got);
    check_freqs(got, want, 4);
    sample_free(s);
}

TEST(sample_top_k_renormalizes) {
    const double probs[5] = {0.1, 0.4, 0.05, 0.3, 0.15};
    const double want[5] = {0, 0.4 / 0.85, 0, 0.3 / 0.85, 0.15 / 0.85};
    float l[5];
    double got[5];
    logits_from_probs(probs, 5, l);
    sample_params p = params(1.0f, 3, 1.0f, 0.0f);
    sampler *s = sample_new(&p);
    frequencies(s, l, 5, got);
    check_freqs(got, want, 5);
    CHECK(got[0] == 0 && got[2] == 0);
    sample_free(s);
}

/* {0.5, 0.3, 0.15, 0.05}, top_p 0.75: the nucleus is {0, 1}. Both paths:
 * with top_k (sorted set) and without (growing selection). */
TEST(sample_top_p_excludes_tail) {
    const double probs[4] = {0.3, 0.05, 0.5, 0.15};
    const double want[4] = {0.3 / 0.8, 0, 0.5 / 0.8, 0};
    float l[4];
    double got[4];
    logits_from_probs(probs, 4, l);
    for (int top_k = 0; top_k <= 3; top_k += 3) {
        sample_params p = params(1.0f, top_k, 0.75f, 0.0f);
        sampler *s = sample_new(&p);
        frequencies(s, l, 4, got);
        check_freqs(got, want, 4);
        CHECK(got[1] == 0 && got[3] == 0);
        sample_free(s);
    }
}

static int cmp_desc(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

/* A large vocabulary with a few likely tokens: the nucleus found by the
 * growing selection must equal the one a full sort gives. */
TEST(sample_top_p_large_vocab) {
    enum { N = 150000 };
    float *l = malloc(N * sizeof *l);
    random_logits(l, N, 99, 2.0f);
    for (int i = 0; i < 300; i++) l[(i * 7919) % N] += 9.0f; /* 300 likely ones */
    /* Brute force: sort everything, find the logit where the mass reaches
     * top_p = 0.9; no drawn token may lie below it. */
    float *sorted = malloc(N * sizeof *sorted);
    memcpy(sorted, l, N * sizeof *l);
    qsort(sorted, N, sizeof *sorted, cmp_desc);
    double z = 0, cum = 0;
    float m = sorted[0];
    for (int i = 0; i < N; i++) z += exp((double)l[i] - m);
    float thresh = sorted[N - 1];
    for (int i = 0; i < N; i++) {
        cum += exp((double)sorted[i] - m);
        if (cum >= 0.9 * z) {
            thresh = sorted[i];
            break;
        }
    }
    sample_params p = params(1.0f, 0, 0.9f, 0.0f);
    sampler *s = sample_new(&p);
    int outside = 0;
    for (int d = 0; d < 500; d++) outside += l[sample_next(s, l, N, d)] < thresh;
    CHECK_EQ_INT(outside, 0);
    sample_free(s);
    free(sorted);
    free(l);
}

/* {0.4, 0.3, 0.2, 0.1}, min_p 0.3: floor 0.12 keeps the first three. */
TEST(sample_min_p_excludes_low) {
    const double probs[4] = {0.1, 0.2, 0.3, 0.4};
    const double want[4] = {0, 2.0 / 9, 3.0 / 9, 4.0 / 9};
    float l[4];
    double got[4];
    logits_from_probs(probs, 4, l);
    for (int top_k = 0; top_k <= 4; top_k += 4) {
        sample_params p = params(1.0f, top_k, 1.0f, 0.3f);
        sampler *s = sample_new(&p);
        frequencies(s, l, 4, got);
        check_freqs(got, want, 4);
        CHECK(got[0] == 0);
        sample_free(s);
    }
}

TEST(sample_masked_never_chosen) {
    float l[8] = {-INFINITY, 1.0f, -INFINITY, 1.0f, -INFINITY, NAN, 1.0f, -INFINITY};
    sample_params p = params(1.0f, 0, 1.0f, 0.0f);
    sampler *s = sample_new(&p);
    for (int d = 0; d < 1000; d++) {
        int32_t t = sample_next(s, l, 8, d);
        CHECK_MSG(t == 1 || t == 3 || t == 6, "drew masked token %d", t);
    }
    sample_free(s);
}

TEST(sample_repeat_penalty_changes_argmax) {
    float l[4] = {2.0f, 1.9f, -0.5f, -0.6f};
    sample_params p = params(0.0f, 0, 1.0f, 0.0f);
    p.repeat_penalty = 1.5f;
    sampler *s = sample_new(&p);
    CHECK_EQ_INT(sample_next(s, l, 4, 0), 0);
    sample_accept(s, 0); /* 2.0 / 1.5 = 1.33 < 1.9 */
    CHECK_EQ_INT(sample_next(s, l, 4, 0), 1);
    CHECK(l[0] == 2.0f); /* the caller's logits are untouched */
    sample_free(s);
    /* Negative logits are multiplied: -0.5 * 1.5 = -0.75 < -0.6. */
    float neg[2] = {-0.5f, -0.6f};
    s = sample_new(&p);
    sample_accept(s, 0);
    sample_accept(s, 0); /* repeat applies once, not per occurrence */
    CHECK_EQ_INT(sample_next(s, neg, 2, 0), 1);
    sample_free(s);
}

TEST(sample_presence_frequency_penalties) {
    float l[3] = {2.0f, 1.8f, 1.0f};
    sample_params p = params(0.0f, 0, 1.0f, 0.0f);
    p.frequency_penalty = 0.1f;
    sampler *s = sample_new(&p);
    sample_accept(s, 0);
    CHECK_EQ_INT(sample_next(s, l, 3, 0), 0); /* 1.9 > 1.8 */
    sample_accept(s, 0);
    sample_accept(s, 0);
    CHECK_EQ_INT(sample_next(s, l, 3, 0), 1); /* 1.7 < 1.8 */
    sample_free(s);
    p.frequency_penalty = 0.0f;
    p.presence_penalty = 0.25f;
    s = sample_new(&p);
    for (int i = 0; i < 5; i++) sample_accept(s, 0);
    CHECK_EQ_INT(sample_next(s, l, 3, 0), 1); /* 1.75 once, however many */
    sample_reset(s);
    CHECK_EQ_INT(sample_next(s, l, 3, 0), 0);
    sample_free(s);
}

TEST(sample_penalty_window) {
    float l[8] = {2.0f, 1.9f, 0, 0, 0, 0, 0, 0};
    sample_params p = params(0.0f, 0, 1.0f, 0.0f);
    p.repeat_penalty = 2.0f;
    p.penalty_last_n = 3;
    sampler *s = sample_new(&p);
    sample_accept(s, 0);
    CHECK_EQ_INT(sample_next(s, l, 8, 0), 1);
    for (int i = 0; i < 3; i++) sample_accept(s, 5 + i % 2); /* 0 leaves */
    CHECK_EQ_INT(sample_next(s, l, 8, 0), 0);
    for (int i = 0; i < 100; i++) sample_accept(s, 7); /* history compacts */
    sample_accept(s, 0);
    CHECK_EQ_INT(sample_next(s, l, 8, 0), 1);
    sample_accept(s, 99); /* out of range ids are ignored */
    CHECK_EQ_INT(sample_next(s, l, 8, 0), 1);
    sample_free(s);
    p.penalty_last_n = 0; /* window 0: penalties off */
    s = sample_new(&p);
    sample_accept(s, 0);
    CHECK_EQ_INT(sample_next(s, l, 8, 0), 0);
    sample_free(s);
}

TEST(sample_top_logprobs_values) {
    float l[5] = {1.0f, 3.0f, 2.0f, 3.0f, -INFINITY};
    double z = exp(1.0) + 2 * exp(3.0) + exp(2.0), lse = log(z);
    int32_t ids[8];
    float lp[8];
    CHECK_EQ_INT(sample_top_logprobs(l, 5, 3, ids, lp), 3);
    CHECK_EQ_INT(ids[0], 1); /* tie with 3: lower id first */
    CHECK_EQ_INT(ids[1], 3);
    CHECK_EQ_INT(ids[2], 2);
    CHECK_NEAR(lp[0], 3.0 - lse, 1e-6);
    CHECK_NEAR(lp[2], 2.0 - lse, 1e-6);
    CHECK_NEAR(sample_logprob(l, 5, 0), 1.0 - lse, 1e-6);
    CHECK(sample_logprob(l, 5, 4) == -INFINITY);
    CHECK(sample_logprob(l, 5, 5) == -INFINITY);
    /* n larger than the usable tokens: only the 4 finite ones come back. */
    CHECK_EQ_INT(sample_top_logprobs(l, 5, 8, ids, lp), 4);
    double sum = 0;
    for (int i = 0; i < 4; i++) sum += exp(lp[i]);
    CHECK_NEAR(sum, 1.0, 1e-5);
}

/* logit_bias: added before everything else; -100 bans a token even when
 * it is the only one left; ids past the vocabulary are skipped. */
TEST(sample_logit_bias) {
    float l[4] = {3.0f, 2.0f, 1.0f, 0.5f};
    sample_params p = params(0.0f, 0, 1.0f, 0.0f);
    p.bias[p.n_bias++] = (sample_bias){0, -1.5f}; /* 1.5 < 2.0: token 1 wins greedy */
    p.bias[p.n_bias++] = (sample_bias){99, 50.0f};
    sampler *s = sample_new(&p);
    CHECK_EQ_INT(sample_next(s, l, 4, 0), 1);
    sample_free(s);
    p.n_bias = 0;
    p.bias[p.n_bias++] = (sample_bias){3, 100.0f}; /* exclusive, greedy or sampled */
    p.temperature = 1.0f;
    s = sample_new(&p);
    for (int pos = 0; pos < 200; pos++) CHECK_EQ_INT(sample_next(s, l, 4, pos), 3);
    sample_free(s);
    p.n_bias = 0;
    for (int i = 0; i < 3; i++) p.bias[p.n_bias++] = (sample_bias){i, -100.0f};
    p.repeat_penalty = 1.3f; /* the ban holds through the penalties' copy too */
    s = sample_new(&p);
    sample_accept(s, 3);
    for (int pos = 0; pos < 200; pos++) CHECK_EQ_INT(sample_next(s, l, 4, pos), 3);
    sample_free(s);
    CHECK(l[0] == 3.0f && l[3] == 0.5f); /* the caller's logits untouched */
}
