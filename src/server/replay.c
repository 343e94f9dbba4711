/* replay.c - text hash -> generated token ids, bounded LRU (replay.h).
 * A linear table is enough at the default size: lookups happen once per
 * assistant message per request, far from the per-token hot path. */
#include "server/replay.h"

#include <openssl/sha.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"

typedef struct entry {
    uint8_t key[32];
    int32_t *ids;
    size_t n;
    uint64_t used; /* logical clock of the last put/get */
} entry;

struct replay_store {
    pthread_mutex_t mu;
    entry *e;
    size_t cap, len;
    uint64_t clock;
};

replay_store *replay_new(size_t max_entries) {
    replay_store *r = xcalloc(1, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
    r->cap = max_entries ? max_entries : 1;
    r->e = xcalloc(r->cap, sizeof(entry));
    return r;
}

void replay_free(replay_store *r) {
    if (!r) return;
    for (size_t i = 0; i < r->len; i++) free(r->e[i].ids);
    free(r->e);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

static entry *find(replay_store *r, const uint8_t key[32]) {
    for (size_t i = 0; i < r->len; i++)
        if (memcmp(r->e[i].key, key, 32) == 0) return &r->e[i];
    return NULL;
}

/* A free entry, evicting the least recently used when full. */
static entry *take_slot(replay_store *r) {
    if (r->len < r->cap) return &r->e[r->len++];
    entry *old = &r->e[0];
    for (size_t i = 1; i < r->len; i++)
        if (r->e[i].used < old->used) old = &r->e[i];
    free(old->ids);
    return old;
}

void replay_put(replay_store *r, const char *text, size_t len, const int32_t *ids, size_t n) {
    if (!r || n == 0) return;
    uint8_t key[32];
    SHA256((const uint8_t *)text, len, key);
    pthread_mutex_lock(&r->mu);
    entry *e = find(r, key);
    if (!e) {
        e = take_slot(r);
        memcpy(e->key, key, 32);
    } else {
        free(e->ids);
    }
    e->ids = xmalloc(n * sizeof(int32_t));
    memcpy(e->ids, ids, n * sizeof(int32_t));
    e->n = n;
    e->used = ++r->clock;
    pthread_mutex_unlock(&r->mu);
}

int32_t *replay_get(replay_store *r, const char *text, size_t len, size_t *n) {
    if (!r || len == 0) return NULL;
    uint8_t key[32];
    SHA256((const uint8_t *)text, len, key);
    int32_t *out = NULL;
    pthread_mutex_lock(&r->mu);
    entry *e = find(r, key);
    if (e) {
        e->used = ++r->clock;
        out = xmalloc(e->n * sizeof(int32_t));
        memcpy(out, e->ids, e->n * sizeof(int32_t));
        *n = e->n;
    }
    pthread_mutex_unlock(&r->mu);
    return out;
}
