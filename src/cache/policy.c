/* policy.c - eviction value, retention order and the learned boundary
 * (see policy.h). */
#include "cache/policy.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
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

double policy_attn_cost_per_pos(int n_layer, int n_embd, int n_head, int n_head_kv, int head_dim, int n_ff) {
    double q = (double)n_head * head_dim, kv = (double)n_head_kv * head_dim;
    double weights = n_layer * ((double)n_embd * (2 * q + 2 * kv) + 3.0 * n_embd * n_ff);
    return weights > 0 ? n_layer * 2.0 * q / weights : 0;
}

/* Above any value and any clock the tiers use (unix seconds included). */
#define RETAINED_KEY 1e12

double policy_evict_key(double value, double keep_until, double now) {
    return keep_until > now ? RETAINED_KEY + keep_until : value;
}

int policy_evict_before(double value_a, double keep_until_a, double value_b, double keep_until_b, double now) {
    double a = policy_evict_key(value_a, keep_until_a, now), b = policy_evict_key(value_b, keep_until_b, now);
    return a < b ? -1 : a > b ? 1 : 0;
}

/* ---- retention marks ------------------------------------------------------- */

static int add_mark(cache_mark *marks, int n, int end, double ttl_s) {
    if (end > 0 && n < POLICY_MAX_MARKS) marks[n++] = (cache_mark){end, ttl_s};
    return n;
}

int policy_prompt_marks(const int *msg_bounds, size_t n_msgs, const unsigned char *system, int has_tools,
                        const policy_break *breaks, int n_breaks, cache_mark *marks) {
    size_t k = 0;
    int n = 0;
    while (k < n_msgs && system[k]) k++;
    if (k > 0 || has_tools) n = add_mark(marks, n, msg_bounds[k], POLICY_ANCHOR_TTL_S);
    for (int i = 0; i < n_breaks; i++)
        n = add_mark(marks, n, msg_bounds[breaks[i].n_messages < n_msgs ? breaks[i].n_messages : n_msgs],
                     breaks[i].ttl_s);
    return n;
}

long long policy_shared_ttl_ms(double mark_ttl_s, double dflt_s) {
    if (!(dflt_s > 0)) return 0; /* no expiry configured: marks cannot lengthen "never" */
    double s = mark_ttl_s > dflt_s ? mark_ttl_s : dflt_s;
    return (long long)(s * 1000.0 + 0.5);
}

/* ---- client marks and scope ---------------------------------------------------- */

policy_break policy_key_break(size_t n_messages) {
    return (policy_break){n_messages > 0 ? n_messages - 1 : 0, POLICY_ANCHOR_TTL_S};
}

int policy_ttl_parse(const char *text, double *ttl_s) {
    double v;
    char unit = 0, extra;
    *ttl_s = POLICY_BREAK_TTL_S;
    if (!text) return 0;
    if (sscanf(text, "%lf%c%c", &v, &unit, &extra) != 2 || !unit || !strchr("smh", unit) || !isfinite(v) || !(v > 0))
        return -1;
    *ttl_s = v * (unit == 'h' ? 3600 : unit == 'm' ? 60 : 1);
    return *ttl_s <= POLICY_MAX_TTL_S ? 0 : -1;
}

int policy_scope_tokens(long long n, cache_scope *out) {
    if (n < 0 || n >= POLICY_SCOPE_MAX_TOKENS) return -1;
    *out = n ? (cache_scope){SCOPE_TOKENS, (int)n} : (cache_scope){SCOPE_OFF, 0};
    return 0;
}

int policy_scope_parse(const char *t, cache_scope *out) {
    char *end;
    if (!t || !*t) return -1;
    if (!strcmp(t, "off")) *out = (cache_scope){SCOPE_OFF, 0};
    else if (!strcmp(t, "full")) *out = (cache_scope){SCOPE_FULL, 0};
    else if (!strcmp(t, "auto")) *out = (cache_scope){SCOPE_AUTO, POLICY_AUTO_LOOK};
    else if (!strncmp(t, "auto:", 5)) {
        long n = strtol(t + 5, &end, 10);
        if (end == t + 5 || *end || n < 1 || n > POLICY_RECENT_MAX) return -1;
        *out = (cache_scope){SCOPE_AUTO, (int)n};
    } else {
        long long n = strtoll(t, &end, 10);
        if (*end || *t == '-' || *t == '+') return -1;
        return policy_scope_tokens(n, out);
    }
    return 0;
}

int policy_publish_limit(policy_recent *r, const cache_scope *sc, const cache_scope *dflt, const int32_t *prompt,
                         int n, const int *bounds, int n_bounds) {
    if (sc->kind == SCOPE_DEFAULT) sc = dflt;
    switch (sc->kind) {
    case SCOPE_OFF: return 0;
    case SCOPE_TOKENS: return sc->n;
    case SCOPE_AUTO: return policy_auto_boundary(r, prompt, n, sc->n, bounds, n_bounds);
    default: return INT_MAX;
    }
}

/* ---- snapshot positions ------------------------------------------------- */

static void snap_cand(int *best, int at, int from, int end) {
    if (at >= from && at <= end && (*best < 0 || at < *best)) *best = at;
}

int policy_snap_next(int pos, int n_prompt, int limit, int every, int B, const int *bounds, int n_bounds,
                     const cache_mark *marks, int n_marks, int min_gap) {
    int end = n_prompt < limit ? n_prompt : limit, best = -1, from = pos + (min_gap > 1 ? min_gap : 1);
    if (end <= pos) return -1;
    long long step = (long long)every * B, at = step > 0 ? ((from - 1) / step + 1) * step : 0;
    if (every > 0 && at <= end) snap_cand(&best, (int)at, from, end); /* no int overflow at huge N */
    for (int i = 0; i < n_bounds; i++) snap_cand(&best, bounds[i], from, end);
    for (int i = 0; i < n_marks; i++) snap_cand(&best, marks[i].end, from, end);
    snap_cand(&best, limit, from, end);
    snap_cand(&best, n_prompt, from, end);
    return best >= 0 ? best : end; /* the end, however close */
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

int policy_auto_boundary(policy_recent *r, const int32_t *prompt, int n, int n_look, const int *bounds,
                         int n_bounds) {
    int best = 0;
    if (n_look > r->cap) n_look = r->cap;
    for (int k = 1; k <= n_look; k++) {
        int i = (r->next - k + r->cap) % r->cap;
        if (!r->prompt[i]) continue;
        int len = mem_common_prefix_i32(r->prompt[i], r->n[i], prompt, n);
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
