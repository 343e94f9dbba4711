/* resp_store.c - recent Responses API responses by id (resp_store.h).
 * A linear table, as in replay.c: it is searched once per request that
 * names an id, far from any per-token path, and holds a few thousand
 * entries at most. */
#include "server/resp_store.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/fs.h"
#include "base/mem.h"

typedef struct rs_entry {
    cache_hash ns;
    char *id, *response, *input;
    size_t bytes;  /* of the three strings */
    uint64_t used; /* logical clock of the last put/get */
} rs_entry;

struct resp_store {
    pthread_mutex_t mu;
    rs_entry *e;
    size_t len, cap, bytes, max_bytes;
    uint64_t clock;
};

resp_store *resp_store_new(size_t max_entries, size_t max_bytes) {
    resp_store *rs = xcalloc(1, sizeof *rs);
    pthread_mutex_init(&rs->mu, NULL);
    rs->cap = max_entries ? max_entries : 1;
    rs->max_bytes = max_bytes;
    rs->e = xcalloc(rs->cap, sizeof(rs_entry));
    return rs;
}

static void entry_clear(rs_entry *e) {
    free(e->id);
    free(e->response);
    free(e->input);
    memset(e, 0, sizeof *e);
}

void resp_store_free(resp_store *rs) {
    if (!rs) return;
    for (size_t i = 0; i < rs->len; i++) entry_clear(&rs->e[i]);
    free(rs->e);
    pthread_mutex_destroy(&rs->mu);
    free(rs);
}

static rs_entry *find(resp_store *rs, const cache_hash *ns, const char *id) {
    for (size_t i = 0; i < rs->len; i++)
        if (!strcmp(rs->e[i].id, id) && !memcmp(rs->e[i].ns.b, ns->b, 32)) return &rs->e[i];
    return NULL;
}

/* Drops entry e; the last entry moves into its place. */
static void drop(resp_store *rs, rs_entry *e) {
    rs->bytes -= e->bytes;
    entry_clear(e);
    rs_entry *last = &rs->e[--rs->len];
    if (e != last) *e = *last;
    memset(last, 0, sizeof *last);
}

static rs_entry *oldest(resp_store *rs) {
    rs_entry *old = &rs->e[0];
    for (size_t i = 1; i < rs->len; i++)
        if (rs->e[i].used < old->used) old = &rs->e[i];
    return old;
}

/* Takes ownership of the three strings. */
static void insert(resp_store *rs, const cache_hash *ns, char *id, char *response, char *input) {
    size_t bytes = strlen(id) + strlen(response) + strlen(input);
    rs_entry *e = find(rs, ns, id);
    if (e) drop(rs, e);
    if (rs->max_bytes && bytes > rs->max_bytes) { /* would evict everything and still not fit */
        free(id), free(response), free(input);
        return;
    }
    while (rs->len && (rs->len == rs->cap || (rs->max_bytes && rs->bytes + bytes > rs->max_bytes)))
        drop(rs, oldest(rs));
    e = &rs->e[rs->len++];
    *e = (rs_entry){.ns = *ns, .id = id, .response = response, .input = input, .bytes = bytes, .used = ++rs->clock};
    rs->bytes += bytes;
}

void resp_store_put(resp_store *rs, const cache_hash *ns, const char *id, const char *response, const char *input) {
    if (!rs) return;
    char *a = xstrdup(id), *b = xstrdup(response), *c = xstrdup(input);
    pthread_mutex_lock(&rs->mu);
    insert(rs, ns, a, b, c);
    pthread_mutex_unlock(&rs->mu);
}

int resp_store_get(resp_store *rs, const cache_hash *ns, const char *id, char **response, char **input) {
    if (!rs) return -1;
    pthread_mutex_lock(&rs->mu);
    rs_entry *e = find(rs, ns, id);
    if (e) {
        e->used = ++rs->clock;
        if (response) *response = xstrdup(e->response);
        if (input) *input = xstrdup(e->input);
    }
    pthread_mutex_unlock(&rs->mu);
    return e ? 0 : -1;
}

int resp_store_delete(resp_store *rs, const cache_hash *ns, const char *id) {
    if (!rs) return -1;
    pthread_mutex_lock(&rs->mu);
    rs_entry *e = find(rs, ns, id);
    if (e) drop(rs, e);
    pthread_mutex_unlock(&rs->mu);
    return e ? 0 : -1;
}

size_t resp_store_count(resp_store *rs) {
    pthread_mutex_lock(&rs->mu);
    size_t n = rs->len;
    pthread_mutex_unlock(&rs->mu);
    return n;
}

/* ---- persistence (layout in resp_store.h) -------------------------------- */

static int by_use(const void *a, const void *b) {
    uint64_t x = (*(rs_entry *const *)a)->used, y = (*(rs_entry *const *)b)->used;
    return x < y ? -1 : x > y;
}

static uint8_t *put_bytes(uint8_t *p, const void *data, size_t n) {
    memcpy(p, data, n);
    return p + n;
}

/* The body: count, then the entries oldest first, so loading them in
 * order restores their recency. Called under the lock. */
static uint8_t *encode(resp_store *rs, size_t *len) {
    rs_entry **order = xmalloc((rs->len ? rs->len : 1) * sizeof *order);
    for (size_t i = 0; i < rs->len; i++) order[i] = &rs->e[i];
    qsort(order, rs->len, sizeof *order, by_use);
    *len = 8 + rs->len * (32 + 12) + rs->bytes;
    uint8_t *buf = xmalloc(*len), *p = buf;
    uint64_t count = rs->len;
    p = put_bytes(p, &count, 8);
    for (size_t i = 0; i < rs->len; i++) {
        const rs_entry *e = order[i];
        uint32_t n[3] = {(uint32_t)strlen(e->id), (uint32_t)strlen(e->response), (uint32_t)strlen(e->input)};
        p = put_bytes(p, e->ns.b, 32);
        p = put_bytes(p, n, sizeof n);
        p = put_bytes(p, e->id, n[0]);
        p = put_bytes(p, e->response, n[1]);
        p = put_bytes(p, e->input, n[2]);
    }
    free(order);
    return buf;
}

int resp_store_save(resp_store *rs, const char *path, const uint8_t model_fp[32]) {
    size_t len;
    pthread_mutex_lock(&rs->mu);
    uint8_t *body = encode(rs, &len);
    pthread_mutex_unlock(&rs->mu);
    int rc = fs_save_framed(path, "STRRESP1", model_fp, body, len);
    free(body);
    return rc;
}

static char *take_string(const uint8_t *p, uint32_t n) {
    char *s = xmalloc((size_t)n + 1);
    memcpy(s, p, n);
    s[n] = 0;
    return s;
}

/* Checks every length against the body before keeping anything, so a
 * file that decodes badly leaves the store as it was. */
static int decode(resp_store *rs, const uint8_t *p, size_t len, int keep) {
    uint64_t count;
    if (len < 8) return -1;
    memcpy(&count, p, 8);
    size_t off = 8;
    for (uint64_t i = 0; i < count; i++) {
        uint32_t n[3];
        if (len - off < 44) return -1;
        memcpy(n, p + off + 32, sizeof n);
        size_t need = (size_t)n[0] + n[1] + n[2];
        if (len - off - 44 < need) return -1;
        const uint8_t *s = p + off + 44;
        if (keep) {
            cache_hash ns;
            memcpy(ns.b, p + off, 32);
            insert(rs, &ns, take_string(s, n[0]), take_string(s + n[0], n[1]), take_string(s + n[0] + n[1], n[2]));
        }
        off += 44 + need;
    }
    return off == len ? 0 : -1;
}

int resp_store_load(resp_store *rs, const char *path, const uint8_t model_fp[32]) {
    size_t len;
    uint8_t *p = fs_load_framed(path, "STRRESP1", model_fp, (size_t)1 << 31, &len);
    int rc = p ? decode(rs, p, len, 0) : -1;
    if (!rc) {
        pthread_mutex_lock(&rs->mu);
        decode(rs, p, len, 1);
        pthread_mutex_unlock(&rs->mu);
    }
    free(p);
    return rc;
}
