/* diag.c - recent prompts and the first difference (see diag.h). */
#include "server/diag.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"

typedef struct recent {
    cache_hash ns;
    int32_t *ids;
    int n;
    char id[64]; /* the reply's id (by-reply ring only) */
} recent;

struct diag_store {
    pthread_mutex_t mu;
    recent r[DIAG_RECENT];     /* recent prompts, for diag_observe */
    recent by_reply[DIAG_RECENT]; /* prompts by reply id, for the Anthropic beta */
    int next, next_reply;
};

diag_store *diag_new(void) {
    diag_store *d = xcalloc(1, sizeof *d);
    pthread_mutex_init(&d->mu, NULL);
    return d;
}

void diag_free(diag_store *d) {
    if (!d) return;
    for (int i = 0; i < DIAG_RECENT; i++) free(d->r[i].ids), free(d->by_reply[i].ids);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

/* The recent prompt of ns sharing the longest prefix with ids; its length
 * in *shared. -1 when there is none. */
static int most_similar(const diag_store *d, const cache_hash *ns, const int32_t *ids, int n, int *shared) {
    int best = -1;
    *shared = 0;
    for (int i = 0; i < DIAG_RECENT; i++) {
        const recent *r = &d->r[i];
        if (!r->ids || memcmp(r->ns.b, ns->b, 32) != 0) continue;
        int m = mem_common_prefix_i32(r->ids, r->n, ids, n);
        if (best < 0 || m > *shared) best = i, *shared = m;
    }
    return best;
}

/* Replaces r with a copy of ids (at most DIAG_MAX_TOKENS). */
static void keep(recent *r, const cache_hash *ns, const int32_t *ids, int n) {
    if (n > DIAG_MAX_TOKENS) n = DIAG_MAX_TOKENS;
    free(r->ids);
    r->ids = xmalloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
    memcpy(r->ids, ids, (size_t)n * sizeof(int32_t));
    r->n = n;
    r->ns = *ns;
}

static void remember(diag_store *d, const cache_hash *ns, const int32_t *ids, int n) {
    keep(&d->r[d->next], ns, ids, n);
    d->next = (d->next + 1) % DIAG_RECENT;
}

/* The difference of ids from old (old_n tokens), if it leaves it before its end. */
static void compare(const int32_t *old, int old_n, const int32_t *ids, int n, cache_diag *out) {
    int shared = mem_common_prefix_i32(old, old_n, ids, n);
    memset(out, 0, sizeof *out);
    if (shared < old_n && shared < n) {
        out->diverged = 1;
        out->first_diff = shared;
        out->lost = (old_n < n ? old_n : n) - shared;
        out->n_was = old_n - shared < DIAG_EXCERPT ? old_n - shared : DIAG_EXCERPT;
        memcpy(out->was, old + shared, (size_t)out->n_was * sizeof(int32_t));
    }
}

void diag_observe(diag_store *d, const cache_hash *ns, const int32_t *ids, int n, cache_diag *out) {
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&d->mu);
    int shared, i = most_similar(d, ns, ids, n, &shared);
    /* Diverged: the new prompt leaves the old one before its end. A
     * prompt that only extends it (the next turn) is not a miss. */
    if (i >= 0 && shared > 0) compare(d->r[i].ids, d->r[i].n, ids, n, out);
    remember(d, ns, ids, n);
    pthread_mutex_unlock(&d->mu);
}

int diag_shared(diag_store *d, const cache_hash *ns, const int32_t *ids, int n) {
    int shared;
    pthread_mutex_lock(&d->mu);
    most_similar(d, ns, ids, n, &shared);
    pthread_mutex_unlock(&d->mu);
    return shared;
}

void diag_remember_reply(diag_store *d, const char *reply_id, const cache_hash *ns, const int32_t *ids, int n) {
    pthread_mutex_lock(&d->mu);
    recent *r = &d->by_reply[d->next_reply];
    d->next_reply = (d->next_reply + 1) % DIAG_RECENT;
    keep(r, ns, ids, n);
    snprintf(r->id, sizeof r->id, "%s", reply_id);
    pthread_mutex_unlock(&d->mu);
}

int diag_compare_reply(diag_store *d, const char *reply_id, const cache_hash *ns, const int32_t *ids, int n,
                       cache_diag *out) {
    int found = 0;
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&d->mu);
    for (int i = 0; i < DIAG_RECENT && !found; i++) {
        const recent *r = &d->by_reply[i];
        if (!r->ids || strcmp(r->id, reply_id) || memcmp(r->ns.b, ns->b, 32)) continue; /* another tenant's: unknown */
        compare(r->ids, r->n, ids, n, out);
        found = 1;
    }
    pthread_mutex_unlock(&d->mu);
    return found;
}

int diag_message_at(const int *msg_ends, int n_msgs, int pos) {
    for (int k = 0; msg_ends && k < n_msgs; k++)
        if (msg_ends[k + 1] >= 0 && pos < msg_ends[k + 1]) return k;
    return -1;
}
