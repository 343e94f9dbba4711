/* policy.c - eviction value, retention order and the learned boundary
 * (see policy.h). */
#include "cache/policy.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"

/* A block last used this long ago is worth half of one used just now. */
#define RECENCY_HALF_S 60.0

double policy_decay(double hits, double age_s) {
    return age_s > 0 ? hits * exp2(-age_s / POLICY_HIT_HALF_LIFE_S) : hits;
}

double policy_value(int depth_tokens, int n_tokens, double attn_per_pos, double hits, double age_s) {
    double cost = n_tokens * (1.0 + attn_per_pos * (depth_tokens + n_tokens / 2.0));
    if (age_s < 0) age_s = 0;
    return cost * (1.0 + policy_decay(hits, age_s)) / (1.0 + age_s / RECENCY_HALF_S);
}

int policy_evict_before(double value_a, double keep_until_a, double value_b, double keep_until_b, double now) {
    int kept_a = keep_until_a > now, kept_b = keep_until_b > now;
    if (kept_a != kept_b) return kept_a ? 1 : -1;
    if (kept_a && keep_until_a != keep_until_b) return keep_until_a < keep_until_b ? -1 : 1;
    return value_a < value_b ? -1 : value_a > value_b ? 1 : 0;
}

/* ---- learned boundary ---------------------------------------------------- */

struct policy_recent {
    int cap, next;
    int32_t **prompt;
    int *n;
};

policy_recent *policy_recent_new(int cap) {
    policy_recent *r = xcalloc(1, sizeof *r);
    r->cap = cap;
    r->prompt = xcalloc((size_t)cap, sizeof *r->prompt);
    r->n = xcalloc((size_t)cap, sizeof *r->n);
    return r;
}

void policy_recent_free(policy_recent *r) {
    if (!r) return;
    for (int i = 0; i < r->cap; i++) free(r->prompt[i]);
    free(r->prompt), free(r->n), free(r);
}

static int common_prefix(const int32_t *a, int na, const int32_t *b, int nb) {
    int len = 0;
    while (len < na && len < nb && a[len] == b[len]) len++;
    return len;
}

int policy_auto_boundary(policy_recent *r, const int32_t *prompt, int n, int n_look, const int *bounds,
                         int n_bounds) {
    int best = 0;
    if (n_look > r->cap) n_look = r->cap;
    for (int k = 1; k <= n_look; k++) {
        int i = (r->next - k + r->cap) % r->cap;
        if (!r->prompt[i]) continue;
        int len = common_prefix(r->prompt[i], r->n[i], prompt, n);
        if (len > best) best = len;
    }
    /* A prefix shared only part way into a message (two tasks that start
     * with the same words) is not a stable boundary: cut to the message. */
    if (bounds && best < n) {
        int cut = 0;
        for (int i = 0; i < n_bounds && bounds[i] <= best; i++) cut = bounds[i];
        best = cut;
    }
    free(r->prompt[r->next]);
    r->prompt[r->next] = xmalloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
    memcpy(r->prompt[r->next], prompt, (size_t)n * sizeof(int32_t));
    r->n[r->next] = n;
    r->next = (r->next + 1) % r->cap;
    return best;
}
