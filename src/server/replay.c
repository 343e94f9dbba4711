/* replay.c - text hash -> generated token ids, bounded LRU (replay.h).
 * A linear table is enough at the default size: lookups happen once per
 * assistant message per request, far from the per-token hot path. */
#include "server/replay.h"

#include <openssl/sha.h>
#include <stdio.h>
#include <unistd.h>
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

/* ---- persistence -------------------------------------------------------- */

typedef struct wbuf {
    uint8_t *p;
    size_t len, cap;
} wbuf;

static void put(wbuf *b, const void *data, size_t n) {
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2;
        b->p = xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
}

int replay_save(replay_store *r, const char *path, const uint8_t model_fp[32]) {
    wbuf b = {0};
    pthread_mutex_lock(&r->mu);
    uint64_t count = r->len;
    put(&b, "STRRPLY1", 8);
    put(&b, model_fp, 32);
    put(&b, &count, 8);
    for (size_t i = 0; i < r->len; i++) {
        uint64_t n = r->e[i].n;
        put(&b, r->e[i].key, 32);
        put(&b, &n, 8);
        put(&b, r->e[i].ids, n * sizeof(int32_t));
    }
    pthread_mutex_unlock(&r->mu);
    uint8_t sum[32];
    SHA256(b.p, b.len, sum);
    put(&b, sum, 32);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp%d", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    int ok = f && fwrite(b.p, 1, b.len, f) == b.len;
    if (f) ok = (fflush(f) == 0 && fsync(fileno(f)) == 0 && fclose(f) == 0) && ok;
    ok = ok && rename(tmp, path) == 0;
    if (!ok) unlink(tmp);
    free(b.p);
    return ok ? 0 : -1;
}

static int load_entries(replay_store *r, const uint8_t *p, size_t len) {
    uint64_t count;
    size_t off = 40;
    memcpy(&count, p + off, 8);
    off += 8;
    for (uint64_t i = 0; i < count; i++) {
        uint64_t n;
        if (off + 40 > len) return -1;
        memcpy(&n, p + off + 32, 8);
        if (n > (len - off - 40) / sizeof(int32_t)) return -1;
        int32_t *ids = xmalloc((size_t)(n ? n : 1) * sizeof(int32_t));
        memcpy(ids, p + off + 40, n * sizeof(int32_t));
        pthread_mutex_lock(&r->mu);
        entry *e = find(r, p + off);
        if (!e) {
            e = take_slot(r);
            memcpy(e->key, p + off, 32);
        } else {
            free(e->ids);
        }
        e->ids = ids;
        e->n = (size_t)n;
        e->used = ++r->clock;
        pthread_mutex_unlock(&r->mu);
        off += 40 + n * sizeof(int32_t);
    }
    return off == len ? 0 : -1;
}

int replay_load(replay_store *r, const char *path, const uint8_t model_fp[32]) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (size < 8 + 32 + 8 + 32 || size > (1L << 30)) {
        fclose(f);
        return -1;
    }
    uint8_t *p = xmalloc((size_t)size);
    int ok = fread(p, 1, (size_t)size, f) == (size_t)size;
    fclose(f);
    uint8_t sum[32];
    size_t body = (size_t)size - 32;
    if (ok) SHA256(p, body, sum);
    ok = ok && !memcmp(p, "STRRPLY1", 8) && !memcmp(p + 8, model_fp, 32) && !memcmp(sum, p + body, 32);
    int rc = ok ? load_entries(r, p, body) : -1;
    free(p);
    return rc;
}
