/* draft.c - prompt-lookup drafting (see draft.h).
 *
 * A linear scan backwards from the end, per suffix length: the most
 * recent occurrence is the likeliest to be continued the same way (the
 * latest version of a file, the previous call). A hash index would make
 * a lookup O(1), but a scan of a 32k-token context is ~30 us, against a
 * decode step of ~10-50 ms on the CPU. */
#include "model/draft.h"

#include <string.h>

/* Start of the most recent occurrence of toks[n-g..n) that begins before
 * n-g (so at least one token follows it), or -1. */
static int last_occurrence(const int32_t *toks, int n, int g) {
    const int32_t *suf = toks + n - g;
    for (int i = n - g - 1; i >= 0; i--)
        if (toks[i] == suf[0] && memcmp(toks + i, suf, (size_t)g * sizeof *toks) == 0) return i;
    return -1;
}

/* Start of the occurrence in src[0..n_src) of pat[0..g) that has a token
 * after it and ends nearest position near, or -1. */
static int nearest_occurrence(const int32_t *src, int n_src, const int32_t *pat, int g, int near) {
    int best = -1, best_d = 0;
    for (int i = 0; i + g < n_src; i++) {
        if (src[i] != pat[0] || memcmp(src + i, pat, (size_t)g * sizeof *src)) continue;
        int d = i + g > near ? i + g - near : near - (i + g);
        if (best < 0 || d < best_d) best = i, best_d = d;
    }
    return best;
}

static int copy_from(const int32_t *src, int n_src, int from, int max_draft, int32_t *out) {
    int k = n_src - from < max_draft ? n_src - from : max_draft;
    memcpy(out, src + from, (size_t)k * sizeof *out);
    return k;
}

int draft_predicted(const int32_t *pred, int n_pred, const int32_t *reply, int n_reply, int max_draft,
                    int32_t *out) {
    if (max_draft <= 0 || n_pred <= 0 || n_reply < 0) return 0;
    if (n_reply < DRAFT_NGRAM_MIN)
        return n_reply < n_pred && !memcmp(pred, reply, (size_t)n_reply * sizeof *pred)
                   ? copy_from(pred, n_pred, n_reply, max_draft, out)
                   : 0;
    for (int g = n_reply < DRAFT_NGRAM_MAX ? n_reply : DRAFT_NGRAM_MAX; g >= DRAFT_NGRAM_MIN; g--) {
        int at = nearest_occurrence(pred, n_pred, reply + n_reply - g, g, n_reply);
        if (at >= 0) return copy_from(pred, n_pred, at + g, max_draft, out);
    }
    return 0;
}

int draft_lookup(const int32_t *toks, int n, int max_draft, int32_t *out) {
    if (max_draft <= 0) return 0;
    for (int g = DRAFT_NGRAM_MAX; g >= DRAFT_NGRAM_MIN; g--) {
        if (n <= g) continue;
        int at = last_occurrence(toks, n, g);
        if (at < 0) continue;
        /* The continuation; where it reaches the end of toks it goes on
         * with itself (a run that repeats with period n - from). */
        int from = at + g;
        for (int j = 0; j < max_draft; j++) out[j] = from + j < n ? toks[from + j] : out[from + j - n];
        return max_draft;
    }
    return 0;
}
