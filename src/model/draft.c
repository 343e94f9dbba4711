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
