/* sample.c - token sampling: penalties, top_k, top_p, min_p, temperature.
 *
 * The candidate set is an array of (logit, id). With top_k it is the k best
 * tokens, found with a size-k min-heap in one pass (O(n log k)), sorted
 * best first. Without top_k, top_p buckets the probability mass by logit
 * and sorts only the buckets that hold the nucleus, so a 150k vocabulary
 * is never sorted whole. min_p and the draw need no order at all.
 *
 * "Best" is a total order: higher logit first, then lower id. That, a
 * fixed scan order and our own PRNG make every step deterministic.
 * Does not: allocate per call once the buffers have grown to n_vocab. */
#include "model/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"

typedef struct cand {
    float logit;
    int32_t id;
} cand;

struct sampler {
    sample_params p;
    int32_t *hist;    /* accepted tokens, oldest first */
    size_t n_hist, cap_hist;
    float *work;      /* penalized copy of the logits */
    float *weight;    /* unnormalized probabilities of the candidates */
    cand *cands;      /* candidate set */
    int32_t *win;     /* sorted copy of the penalty window */
    int cap_vocab;    /* capacity of work and cands */
};

/* ---- PRNG: xoshiro256**, seeded through splitmix64 ---- */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(uint64_t s[4]) {
    uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

/* Uniform in [0, 1) with 53 random bits. */
static double rng_uniform(uint64_t s[4]) {
    return (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
}

/* The draw for position pos under seed: a generator of its own, seeded
 * by splitmix64 from (seed, pos), so the number drawn for a position
 * never depends on how many draws came before it (speculative decoding
 * samples a position, and may throw the rows after it away). */
static double rng_at(uint64_t seed, uint64_t pos) {
    uint64_t x = seed, st[4];
    x ^= splitmix64(&(uint64_t){pos ^ 0x6a09e667f3bcc909ULL});
    for (int i = 0; i < 4; i++) st[i] = splitmix64(&x);
    return rng_uniform(st);
}

uint64_t sample_choice_seed(uint64_t seed, int k) {
    if (k == 0) return seed;
    uint64_t x = seed + (uint64_t)(k - 1) * 0x9e3779b97f4a7c15ULL; /* splitmix64 adds the constant once more */
    return splitmix64(&x);
}

/* ---- lifecycle ---- */

sample_params sample_params_default(void) {
    return (sample_params){.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f,
                           .repeat_penalty = 1.0f, .presence_penalty = 0.0f,
                           .frequency_penalty = 0.0f, .penalty_last_n = 64, .seed = 0};
}

sampler *sample_new(const sample_params *p) {
    sampler *s = xcalloc(1, sizeof *s);
    s->p = p ? *p : sample_params_default();
    return s;
}

void sample_free(sampler *s) {
    if (!s) return;
    free(s->hist);
    free(s->work);
    free(s->weight);
    free(s->cands);
    free(s->win);
    free(s);
}

void sample_reset(sampler *s) { s->n_hist = 0; }

/* Keeps at most 2N entries so a long generation does not grow the
 * history without bound; the window only ever reads the last N. */
void sample_accept(sampler *s, int32_t token) {
    int last_n = s->p.penalty_last_n;
    if (last_n == 0) return;
    if (last_n > 0 && s->n_hist >= 2 * (size_t)last_n) {
        memmove(s->hist, s->hist + s->n_hist - last_n, (size_t)last_n * sizeof *s->hist);
        s->n_hist = (size_t)last_n;
    }
    XGROW(s->hist, s->cap_hist, s->n_hist + 1, 64);
    s->hist[s->n_hist++] = token;
}

static void reserve_vocab(sampler *s, int n_vocab) {
    if (n_vocab <= s->cap_vocab) return;
    s->work = xrealloc(s->work, (size_t)n_vocab * sizeof *s->work);
    s->weight = xrealloc(s->weight, (size_t)n_vocab * sizeof *s->weight);
    s->cands = xrealloc(s->cands, (size_t)n_vocab * sizeof *s->cands);
    s->cap_vocab = n_vocab;
}

/* ---- penalties ---- */

static int penalties_on(const sample_params *p) {
    return p->penalty_last_n != 0 &&
           (p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f ||
            p->frequency_penalty != 0.0f);
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static void penalize(const sample_params *p, float *w, int32_t id, int count) {
    float l = w[id];
    if (p->repeat_penalty != 1.0f)
        l = l > 0 ? l / p->repeat_penalty : l * p->repeat_penalty;
    w[id] = l - p->presence_penalty - (float)count * p->frequency_penalty;
}

/* logits with the request's biases added: a copy in s->work, or logits
 * itself when there are none. */
static const float *apply_bias(sampler *s, const float *logits, int n_vocab) {
    if (s->p.n_bias == 0) return logits;
    memcpy(s->work, logits, (size_t)n_vocab * sizeof *s->work);
    for (int i = 0; i < s->p.n_bias; i++) {
        const sample_bias *b = &s->p.bias[i];
        if (b->id >= 0 && b->id < n_vocab) s->work[b->id] = b->bias <= -100.0f ? -INFINITY : s->work[b->id] + b->bias;
    }
    return s->work;
}

/* Biased logits (apply_bias), then each distinct token of the window
 * penalized once (repeat, presence) and per occurrence (frequency), in
 * s->work. The window is sorted so equal ids sit together: no per-vocab
 * count table. */
static const float *apply_penalties(sampler *s, const float *logits, int n_vocab) {
    logits = apply_bias(s, logits, n_vocab);
    if (!penalties_on(&s->p) || s->n_hist == 0) return logits;
    size_t n = s->n_hist;
    if (s->p.penalty_last_n > 0 && n > (size_t)s->p.penalty_last_n) n = (size_t)s->p.penalty_last_n;
    s->win = xrealloc(s->win, n * sizeof *s->win);
    memcpy(s->win, s->hist + s->n_hist - n, n * sizeof *s->win);
    qsort(s->win, n, sizeof *s->win, cmp_i32);
    if (logits != s->work) memcpy(s->work, logits, (size_t)n_vocab * sizeof *s->work);
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && s->win[j] == s->win[i]) j++;
        if (s->win[i] >= 0 && s->win[i] < n_vocab) penalize(&s->p, s->work, s->win[i], (int)(j - i));
        i = j;
    }
    return s->work;
}

/* ---- selection ---- */

static int better(cand a, cand b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

/* NaN and -inf can never be chosen (a masked token stays masked). */
static int usable(float l) { return l == l && l != -INFINITY; }

/* First index of the largest value; NaN never wins. */
static int32_t argmax(const float *w, int n) {
    int32_t best = 0;
    float bv = -INFINITY;
    for (int i = 0; i < n; i++)
        if (w[i] > bv) bv = w[i], best = i;
    return best;
}

/* Min-heap on "better": the root is the worst of the kept k. */
static void sift_down(cand *h, int n, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && better(h[m], h[l])) m = l;
        if (r < n && better(h[m], h[r])) m = r;
        if (m == i) return;
        cand t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

/* The k best usable entries of w, best first, into out; returns count. */
static int select_top(const float *w, int n, int k, cand *out) {
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (!usable(w[i])) continue;
        cand c = {w[i], i};
        if (m < k) {
            out[m++] = c;
            if (m == k)
                for (int j = k / 2 - 1; j >= 0; j--) sift_down(out, k, j);
        } else if (better(c, out[0])) {
            out[0] = c;
            sift_down(out, k, 0);
        }
    }
    if (m < k)
        for (int j = m / 2 - 1; j >= 0; j--) sift_down(out, m, j);
    for (int end = m - 1; end > 0; end--) { /* heap sort: worst to the back */
        cand t = out[0];
        out[0] = out[end];
        out[end] = t;
        sift_down(out, end, 0);
    }
    return m;
}

static int all_usable(const float *w, int n, cand *out) {
    int m = 0;
    for (int i = 0; i < n; i++)
        if (usable(w[i])) out[m++] = (cand){w[i], i};
    return m;
}

static float max_logit(const cand *c, int n) {
    float m = -INFINITY;
    for (int i = 0; i < n; i++)
        if (c[i].logit > m) m = c[i].logit;
    return m;
}

/* exp(x) for x <= 0, in plain float arithmetic: 2^n * poly(r) with
 * x = n ln2 + r, |r| <= ln2/2, relative error ~1e-7. Not libm's expf:
 * this gives the same bits with any libm, so a seed replays anywhere. */
static inline float exp_neg(float x) {
    x = x < -87.0f ? -87.0f : x; /* e^-87 ~ 1.6e-38: as good as 0 */
    float n = (float)(int)(x * 1.44269504f - 0.5f); /* round, x <= 0 */
    float r = x - n * 0.693145751953125f - n * 1.428606765330187e-6f;
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 +
              r * (1.0f / 120 + r * (1.0f / 720))))));
    union { uint32_t u; float f; } b = {.u = (uint32_t)((int)n + 127) << 23};
    return p * b.f;
}

/* w[i] = exp((c[i].logit - m) * inv_t); returns their sum. Four partial
 * sums in a fixed order: faster than one chain, still deterministic. */
static double weights(const cand *c, int n, float m, float inv_t, float *w) {
    for (int i = 0; i < n; i++) w[i] = exp_neg((c[i].logit - m) * inv_t);
    double z[4] = {0, 0, 0, 0};
    int i = 0;
    for (; i + 4 <= n; i += 4)
        for (int j = 0; j < 4; j++) z[j] += w[i + j];
    for (; i < n; i++) z[0] += w[i];
    return (z[0] + z[1]) + (z[2] + z[3]);
}

/* Length of the shortest prefix of sorted c whose share of z reaches p. */
static int nucleus_len(const cand *c, int n, float m, double z, float p) {
    double cum = 0;
    for (int i = 0; i < n; i++) {
        cum += exp_neg(c[i].logit - m);
        if (cum >= p * z) return i + 1;
    }
    return n;
}

static int cmp_cand(const void *a, const void *b) {
    const cand *x = a, *y = b;
    return better(*x, *y) ? -1 : better(*y, *x) ? 1 : 0;
}

#define NB 128       /* buckets of top_p_full */
#define NB_RANGE 32  /* logit span they cover below the max */

/* top_p over all n candidates (unsorted) without sorting them all: a
 * histogram of probability mass by distance below the max logit finds the
 * bucket where the nucleus ends; only the tokens in it and above get
 * sorted, then the exact cut is made. */
static int top_p_full(sampler *s, int n) {
    cand *c = s->cands;
    float m = max_logit(c, n), scale = NB / (float)NB_RANGE;
    double z = weights(c, n, m, 1.0f, s->weight), bmass[NB] = {0}, cum = 0;
    for (int i = 0; i < n; i++) {
        float d = (m - c[i].logit) * scale;
        bmass[d < NB - 1 ? (int)d : NB - 1] += s->weight[i];
    }
    int last = 0;
    while (last < NB - 1 && (cum += bmass[last]) < s->p.top_p * z) last++;
    int k = 0;
    for (int i = 0; i < n; i++) {
        float d = (m - c[i].logit) * scale;
        if ((d < NB - 1 ? (int)d : NB - 1) <= last) c[k++] = c[i];
    }
    qsort(c, (size_t)k, sizeof *c, cmp_cand);
    return nucleus_len(c, k, m, z, s->p.top_p);
}

/* Keeps tokens with p >= min_p * p_max, in their current order. min_p is
 * capped at 1 so the most likely token always survives. */
static int cut_min_p(cand *c, int n, float min_p) {
    float floor = max_logit(c, n) + logf(min_p < 1.0f ? min_p : 1.0f);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (c[i].logit >= floor) c[m++] = c[i];
    return m;
}

/* Draw from softmax(logit / temperature) over c, with the uniform
 * number of position pos. */
static int32_t draw(sampler *s, const cand *c, int n, uint64_t pos) {
    float m = max_logit(c, n);
    double z = weights(c, n, m, 1.0f / s->p.temperature, s->weight);
    double u = rng_at(s->p.seed, pos) * z, cum = 0;
    for (int i = 0; i < n; i++) {
        cum += s->weight[i];
        if (u < cum) return c[i].id;
    }
    return c[n - 1].id; /* u rounded up to z */
}

/* ---- the chain ---- */

/* Candidate set after top_k and top_p; returns its size (0: none usable). */
static int truncate_set(sampler *s, const float *w, int n_vocab) {
    const sample_params *p = &s->p;
    if (p->top_k > 0 && p->top_k < n_vocab) {
        int n = select_top(w, n_vocab, p->top_k, s->cands);
        if (n > 0 && p->top_p < 1.0f) {
            float m = s->cands[0].logit;
            double z = weights(s->cands, n, m, 1.0f, s->weight);
            n = nucleus_len(s->cands, n, m, z, p->top_p);
        }
        return n;
    }
    int n = all_usable(w, n_vocab, s->cands);
    if (n > 0 && p->top_p < 1.0f) n = top_p_full(s, n);
    return n;
}

int32_t sample_next(sampler *s, const float *logits, int n_vocab, int64_t pos) {
    if (n_vocab <= 0) return -1;
    reserve_vocab(s, n_vocab);
    const float *w = apply_penalties(s, logits, n_vocab);
    /* Below 1e-6 the softmax is the argmax anyway, and 1/T would overflow;
     * the best token survives every truncation, so this is exact. */
    if (!(s->p.temperature > 1e-6f)) return argmax(w, n_vocab);
    int n = truncate_set(s, w, n_vocab);
    if (n == 0) return argmax(w, n_vocab);
    if (s->p.min_p > 0.0f) n = cut_min_p(s->cands, n, s->p.min_p);
    return draw(s, s->cands, n, (uint64_t)pos);
}

/* ---- log-probabilities ---- */

static double log_sum_exp(const float *logits, int n) {
    float m = -INFINITY;
    for (int i = 0; i < n; i++)
        if (logits[i] > m) m = logits[i];
    if (m == -INFINITY) return m;
    double z = 0;
    for (int i = 0; i < n; i++)
        if (usable(logits[i])) z += exp((double)logits[i] - m);
    return m + log(z);
}

int sample_top_logprobs(const float *logits, int n_vocab, int n, int32_t *ids,
                        float *logprobs) {
    if (n <= 0 || n_vocab <= 0) return 0;
    if (n > n_vocab) n = n_vocab;
    cand *c = xmalloc((size_t)n * sizeof *c);
    int got = select_top(logits, n_vocab, n, c);
    double lse = log_sum_exp(logits, n_vocab);
    for (int i = 0; i < got; i++) {
        ids[i] = c[i].id;
        logprobs[i] = (float)((double)c[i].logit - lse);
    }
    free(c);
    return got;
}

float sample_logprob(const float *logits, int n_vocab, int32_t id) {
    if (id < 0 || id >= n_vocab) return -INFINITY;
    return (float)((double)logits[id] - log_sum_exp(logits, n_vocab));
}
