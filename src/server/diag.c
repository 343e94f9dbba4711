/* diag.c - recent prompts and the first difference (see diag.h). */
#include "server/diag.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"

typedef struct recent {
    cache_hash ns;
    int32_t *ids;
    int n;
} recent;

struct diag_store {
    pthread_mutex_t mu;
    recent r[DIAG_RECENT];
    int next;
};

diag_store *diag_new(void) {
    diag_store *d = xcalloc(1, sizeof *d);
    pthread_mutex_init(&d->mu, NULL);
    return d;
}

void diag_free(diag_store *d) {
    if (!d) return;
    for (int i = 0; i < DIAG_RECENT; i++) free(d->r[i].ids);
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

static void remember(diag_store *d, const cache_hash *ns, const int32_t *ids, int n) {
    recent *r = &d->r[d->next];
    d->next = (d->next + 1) % DIAG_RECENT;
    if (n > DIAG_MAX_TOKENS) n = DIAG_MAX_TOKENS;
    free(r->ids);
    r->ids = xmalloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
    memcpy(r->ids, ids, (size_t)n * sizeof(int32_t));
    r->n = n;
    r->ns = *ns;
}

void diag_observe(diag_store *d, const cache_hash *ns, const int32_t *ids, int n, cache_diag *out) {
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&d->mu);
    int shared, i = most_similar(d, ns, ids, n, &shared);
    /* Diverged: the new prompt leaves the old one before its end. A
     * prompt that only extends it (the next turn) is not a miss. */
    if (i >= 0 && shared > 0 && shared < d->r[i].n && shared < n) {
        out->diverged = 1;
        out->first_diff = shared;
        out->lost = (d->r[i].n < n ? d->r[i].n : n) - shared;
    }
    remember(d, ns, ids, n);
    pthread_mutex_unlock(&d->mu);
}

int diag_message_at(const int *msg_ends, int n_msgs, int pos) {
    for (int k = 0; msg_ends && k < n_msgs; k++)
        if (msg_ends[k + 1] >= 0 && pos < msg_ends[k + 1]) return k;
    return -1;
}
