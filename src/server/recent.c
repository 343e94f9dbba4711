/* recent.c - the ring of recent request records (see recent.h). */
#include "server/recent.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/fs.h"
#include "base/mem.h"
#include "base/strbuf.h"

#define RECENT_MAGIC "STRRCNT1"
#define RECENT_MAX_FILE (256u << 20) /* a saved ring larger than this is not ours (16384 records of ~2 KiB fit) */

/* Keys only the page reads: the prompt's message list and text around the
 * first difference are bulky (and the text is the client's), so the trace
 * line leaves them out. */
static const char *const PAGE_ONLY[] = {"messages", "excerpt"};

typedef struct entry {
    json_t *rec; /* NULL: empty */
    long id, rev;
} entry;

struct recent_ring {
    pthread_mutex_t mu;
    entry *e;
    int cap, head, n; /* the oldest at head; n in use */
    long next_id, rev;
};

recent_ring *recent_new(int cap) {
    if (cap <= 0) return NULL;
    recent_ring *r = xcalloc(1, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
    r->e = xcalloc((size_t)cap, sizeof(entry));
    r->cap = cap;
    r->next_id = 1;
    return r;
}

void recent_free(recent_ring *r) {
    if (!r) return;
    for (int i = 0; i < r->cap; i++) json_decref(r->e[i].rec);
    free(r->e);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

/* Appends rec as record id (the oldest leaves when full); the caller holds mu. */
static void push_locked(recent_ring *r, long id, json_t *rec) {
    entry *slot = &r->e[(r->head + r->n) % r->cap];
    if (r->n == r->cap) { /* full: the slot is the oldest's */
        json_decref(slot->rec);
        r->head = (r->head + 1) % r->cap;
    } else {
        r->n++;
    }
    json_object_set_new(rec, "id", json_integer(id));
    *slot = (entry){.rec = rec, .id = id, .rev = ++r->rev};
    if (id >= r->next_id) r->next_id = id + 1;
}

long recent_open(recent_ring *r, const char *tenant, json_t *rec) {
    if (!r) {
        json_decref(rec);
        return 0;
    }
    if (tenant) json_object_set_new(rec, "tenant", json_string(tenant));
    pthread_mutex_lock(&r->mu);
    long id = r->next_id;
    push_locked(r, id, rec);
    pthread_mutex_unlock(&r->mu);
    return id;
}

/* The record with this id, or NULL when it left the ring; the caller holds mu. */
static entry *find_locked(recent_ring *r, long id) {
    for (int k = 0; r && id > 0 && k < r->n; k++) {
        entry *e = &r->e[(r->head + k) % r->cap];
        if (e->id == id) return e;
    }
    return NULL;
}

/* One trace line: the record less the page-only keys. malloc'd. */
static char *trace_line(const json_t *rec) {
    json_t *t = json_copy((json_t *)rec); /* shallow: the values are shared, not changed */
    for (size_t i = 0; i < sizeof PAGE_ONLY / sizeof PAGE_ONLY[0]; i++) json_object_del(t, PAGE_ONLY[i]);
    char *line = json_dumps(t, JSON_COMPACT);
    json_decref(t);
    return line;
}

/* A record never changes once others may hold it: closing puts a merged
 * copy in its place (values shared, not copied). So a reader takes
 * references under the lock and writes JSON outside it, and the
 * scheduler never waits for a page's poll. */
void recent_close(recent_ring *r, long id, json_t *facts, FILE *trace) {
    json_t *rec = NULL;
    if (r) pthread_mutex_lock(&r->mu);
    entry *e = find_locked(r, id);
    if (e) {
        json_t *merged = json_copy(e->rec);
        json_object_update(merged, facts);
        json_decref(e->rec);
        e->rec = merged;
        e->rev = ++r->rev;
        rec = json_incref(merged);
    }
    if (r) pthread_mutex_unlock(&r->mu);
    char *line = trace ? trace_line(rec ? rec : facts) : NULL;
    json_decref(rec);
    json_decref(facts);
    if (line) {
        fputs(line, trace);
        fputc('\n', trace);
        fflush(trace);
    }
    free(line);
}

/* Whether rec is tenant's (NULL: anyone's; "": a request without one). */
static int tenant_matches(const json_t *rec, const char *tenant) {
    if (!tenant) return 1;
    const char *t = json_string_value(json_object_get(rec, "tenant"));
    return !strcmp(t ? t : "", tenant);
}

json_t *recent_list(recent_ring *r, long since, const char *tenant, long *rev) {
    json_t *out = json_array();
    *rev = 0;
    if (!r) return out;
    pthread_mutex_lock(&r->mu);
    for (int k = 0; k < r->n; k++) {
        const entry *e = &r->e[(r->head + k) % r->cap];
        if (e->rev > since && tenant_matches(e->rec, tenant)) json_array_append(out, e->rec); /* shared, never changed */
    }
    *rev = r->rev;
    pthread_mutex_unlock(&r->mu);
    return out;
}

int recent_save(recent_ring *r, const char *path, const uint8_t model_fp[32]) {
    if (!r) return 0;
    long rev;
    json_t *all = recent_list(r, 0, NULL, &rev);
    strbuf b = {0};
    size_t i;
    json_t *rec;
    json_array_foreach(all, i, rec) {
        char *line = json_dumps(rec, JSON_COMPACT);
        strbuf_puts(&b, line);
        strbuf_add(&b, "\n", 1);
        free(line);
    }
    json_decref(all);
    int rc = fs_save_framed(path, RECENT_MAGIC, model_fp, b.s ? b.s : "", b.len);
    strbuf_free(&b);
    return rc;
}

/* One saved line as a record: an object with a positive integer id. */
static json_t *parse_line(const char *line, size_t len) {
    json_error_t je;
    json_t *rec = json_loadb(line, len, 0, &je);
    if (json_is_object(rec) && json_integer_value(json_object_get(rec, "id")) > 0) return rec;
    json_decref(rec);
    return NULL;
}

int recent_load(recent_ring *r, const char *path, const uint8_t model_fp[32], int *bad) {
    *bad = 0;
    if (!r) return 0;
    size_t len;
    uint8_t *body = fs_load_framed(path, RECENT_MAGIC, model_fp, RECENT_MAX_FILE, &len);
    if (!body) return -1;
    pthread_mutex_lock(&r->mu);
    for (size_t at = 0; at < len;) {
        const char *line = (const char *)body + at, *nl = memchr(line, '\n', len - at);
        size_t n = nl ? (size_t)(nl - line) : len - at;
        at += n + 1;
        if (n == 0) continue;
        json_t *rec = parse_line(line, n);
        if (!rec) {
            (*bad)++;
            continue;
        }
        push_locked(r, (long)json_integer_value(json_object_get(rec, "id")), rec);
    }
    pthread_mutex_unlock(&r->mu);
    free(body);
    return 0;
}
