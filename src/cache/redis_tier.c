/* redis_tier.c - the shared tier on Redis (see redis_tier.h): the local
 * presence cache, pipelined probes and reads, the write queue and its
 * thread. Three connections, so a long read never holds up a probe on the
 * scheduler's thread and neither ever waits behind a write. */
#include "cache/redis_tier.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/mem.h"
#include "cache/disk_file.h"
#include "cache/redis_conn.h"

#define KEY_PREFIX "strata:kv:"
#define SEEN_BUCKETS 16384 /* x SEEN_WAYS hashes known present: 2 MiB */
#define SEEN_WAYS 4
#define MISS_RING 16       /* recent "absent" answers, trusted for MISS_TTL_MS */
#define MISS_TTL_MS 1000.0
#define PROBE_CHUNK 32     /* EXISTS per pipelined round of a run */
#define CLOSE_DRAIN_MS 2000.0

typedef struct wjob {
    struct wjob *next;
    cache_hash h, parent;
    int n_tokens;
    int32_t *tokens; /* then the payload, in the same allocation */
} wjob;

struct redis_tier {
    redis_tier_opts o;
    redis_url url;
    redis_health health;
    /* Known present: a lossy set-associative cache (a forgotten key costs
     * one EXISTS, never a wrong answer: a read re-verifies everything). */
    pthread_mutex_t seen_mu;
    cache_hash *seen;
    unsigned char *seen_next; /* round-robin victim per bucket */
    struct { cache_hash h; double t; } miss[MISS_RING];
    int miss_next;
    /* Probes (scheduler thread, loader fallbacks) and reads (loader thread). */
    pthread_mutex_t probe_mu, read_mu;
    redis_conn probe, reader, writer;
    /* The write queue, its bound, the writer thread. */
    pthread_mutex_t q_mu;
    pthread_cond_t q_cv;
    wjob *q_head, *q_tail;
    uint64_t q_bytes;
    int stopping, started;
    double drain_until; /* at close: what is still queued then is dropped */
    pthread_t th;
    uint8_t *enc; /* the writer's encode buffer: one block file */
    atomic_long hits, misses, dropped, rejected, writes, skips;
};

void redis_tier_key(const cache_hash *h, char out[REDIS_KEY_BYTES]) {
    memcpy(out, KEY_PREFIX, sizeof KEY_PREFIX - 1);
    cache_hash_hex(h, out + sizeof KEY_PREFIX - 1);
}

/* ---- the local presence cache ---- */

static size_t seen_bucket(const cache_hash *h) {
    uint64_t x;
    memcpy(&x, h->b, 8);
    return (size_t)(x % SEEN_BUCKETS) * SEEN_WAYS;
}

static int seen_has(redis_tier *r, const cache_hash *h) {
    size_t b = seen_bucket(h);
    pthread_mutex_lock(&r->seen_mu);
    int found = 0;
    for (int w = 0; w < SEEN_WAYS && !found; w++) found = memcmp(r->seen[b + w].b, h->b, 32) == 0;
    pthread_mutex_unlock(&r->seen_mu);
    return found;
}

static void seen_add(redis_tier *r, const cache_hash *h) {
    size_t b = seen_bucket(h);
    pthread_mutex_lock(&r->seen_mu);
    int w;
    for (w = 0; w < SEEN_WAYS && memcmp(r->seen[b + w].b, h->b, 32) != 0; w++) {}
    if (w == SEEN_WAYS) {
        w = r->seen_next[b / SEEN_WAYS]++ % SEEN_WAYS;
        r->seen[b + w] = *h;
    }
    for (int i = 0; i < MISS_RING; i++) /* no longer absent */
        if (memcmp(r->miss[i].h.b, h->b, 32) == 0) r->miss[i].t = 0;
    pthread_mutex_unlock(&r->seen_mu);
}

static void seen_drop(redis_tier *r, const cache_hash *h) {
    size_t b = seen_bucket(h);
    pthread_mutex_lock(&r->seen_mu);
    for (int w = 0; w < SEEN_WAYS; w++)
        if (memcmp(r->seen[b + w].b, h->b, 32) == 0) memset(&r->seen[b + w], 0, sizeof(cache_hash));
    pthread_mutex_unlock(&r->seen_mu);
}

/* A new connection may face a Redis restarted empty: forget everything. */
static void seen_clear(redis_tier *r) {
    pthread_mutex_lock(&r->seen_mu);
    memset(r->seen, 0, (size_t)SEEN_BUCKETS * SEEN_WAYS * sizeof(cache_hash));
    memset(r->miss, 0, sizeof r->miss);
    pthread_mutex_unlock(&r->seen_mu);
}

/* Redis said absent a moment ago: the same request asks again while it
 * plans a run (and then the partial match), so one EXISTS per miss. */
static int missed_recently(redis_tier *r, const cache_hash *h) {
    double now = clock_ms();
    int found = 0;
    pthread_mutex_lock(&r->seen_mu);
    for (int i = 0; i < MISS_RING && !found; i++)
        found = r->miss[i].t > now - MISS_TTL_MS && memcmp(r->miss[i].h.b, h->b, 32) == 0;
    pthread_mutex_unlock(&r->seen_mu);
    return found;
}

static void note_miss(redis_tier *r, const cache_hash *h) {
    atomic_fetch_add(&r->misses, 1);
    pthread_mutex_lock(&r->seen_mu);
    r->miss[r->miss_next].h = *h;
    r->miss[r->miss_next].t = clock_ms();
    r->miss_next = (r->miss_next + 1) % MISS_RING;
    pthread_mutex_unlock(&r->seen_mu);
}

/* ---- probes ---- */

/* The probe connection (probe_mu held), clearing the presence cache on a
 * new one. */
static redisContext *probe_ctx(redis_tier *r) {
    int fresh;
    redisContext *c = redis_conn_get(&r->probe, &fresh);
    if (fresh) seen_clear(r);
    return c;
}

/* One pipelined round of EXISTS for hs[0..n): how many from the first
 * Redis holds (each one found is remembered); -1 when the connection failed. */
static int probe_round(redis_tier *r, redisContext *c, const cache_hash *hs, int n) {
    char key[REDIS_KEY_BYTES];
    for (int i = 0; i < n; i++) {
        redis_tier_key(&hs[i], key);
        redisAppendCommand(c, "EXISTS %s", key);
    }
    int run = 0, broken = 0, stop = 0;
    for (int i = 0; i < n; i++) { /* every reply is read, or the pipeline desyncs */
        redisReply *rep = NULL;
        if (redisGetReply(c, (void **)&rep) != REDIS_OK || !rep) {
            broken = 1;
            break;
        }
        int there = rep->type == REDIS_REPLY_INTEGER && rep->integer == 1;
        freeReplyObject(rep);
        if (there && !stop) seen_add(r, &hs[i]), run++;
        else if (!stop) stop = 1, note_miss(r, &hs[i]);
    }
    if (broken) redis_conn_fail(&r->probe, NULL);
    return broken ? -1 : run;
}

/* How many of hs[0..n) from the first Redis holds: the presence cache
 * first, then rounds of pipelined EXISTS for the rest. */
static int has_run(void *self, const cache_hash *hs, int n) {
    redis_tier *r = self;
    int k = 0;
    while (k < n && seen_has(r, &hs[k])) k++;
    if (k == n || missed_recently(r, &hs[k])) return k;
    pthread_mutex_lock(&r->probe_mu);
    redisContext *c = probe_ctx(r);
    while (c && k < n) {
        int m = n - k < PROBE_CHUNK ? n - k : PROBE_CHUNK, got = probe_round(r, c, hs + k, m);
        if (got < 0) break;
        k += got;
        if (got < m) break;
    }
    pthread_mutex_unlock(&r->probe_mu);
    return k;
}

static int has(void *self, const cache_hash *h) { return has_run(self, h, 1); }

/* No partial matches from Redis: that would need an index of children
 * per parent and a round trip at the end of every chain (see the header). */
static int best_child(void *self, const cache_hash *parent, const int32_t *tokens, int n, cache_hash *h,
                      int *n_tokens) {
    return 0;
}

/* ---- reads ---- */

/* Verifies one value and copies it into the pool block: 0, or
 * STRATA_EFORMAT (rejected, counted, never loaded). */
static int take_value(redis_tier *r, const cache_hash *h, const redisReply *rep, void *dst, int32_t *tokens) {
    disk_expect ex = {.hash = h, .model_fp = r->o.model_fp, .n_tokens = r->o.block_tokens,
                      .kv_dtype = r->o.kv_dtype, .payload_bytes = r->o.block_bytes};
    disk_hdr hd;
    strata_err e = {0};
    int rc = disk_file_decode((const uint8_t *)rep->str, rep->len, &ex, &hd, tokens, dst, r->o.block_bytes, &e);
    if (rc) {
        atomic_fetch_add(&r->rejected, 1);
        char hex[65];
        cache_hash_hex(h, hex);
        log_warn("redis cache: value of %.16s.. rejected: %s; not loaded, deleted", hex, e.msg);
    }
    return rc;
}

/* Deletes values that failed verification, so a good copy can be written
 * again (a replica writes only what Redis does not hold). */
static void delete_rejected(redis_tier *r, redisContext *c, const cache_hash *h, const int *rc, int n) {
    char key[REDIS_KEY_BYTES];
    for (int i = 0; i < n; i++) {
        if (rc[i] != STRATA_EFORMAT) continue;
        redis_tier_key(&h[i], key);
        redisReply *rep = redisCommand(c, "DEL %s", key);
        if (!rep) {
            redis_conn_fail(&r->reader, NULL);
            return;
        }
        freeReplyObject(rep);
    }
}

/* One reply of the pipeline into block i: rc[i]. -1 when the connection broke. */
static int read_one(redis_tier *r, redisContext *c, const cache_hash *h, void *dst, int32_t *tokens, int *rc) {
    redisReply *rep = NULL;
    if (redisGetReply(c, (void **)&rep) != REDIS_OK || !rep) return -1;
    if (rep->type == REDIS_REPLY_STRING) *rc = take_value(r, h, rep, dst, tokens);
    else *rc = STRATA_EIO; /* gone: evicted, or Redis restarted empty */
    if (rep->type == REDIS_REPLY_NIL) atomic_fetch_add(&r->misses, 1);
    else if (rep->type == REDIS_REPLY_ERROR) redis_conn_error_reply(&r->reader, "GET", rep->str);
    freeReplyObject(rep);
    return 0;
}

static int read_many(void *self, const cache_hash *h, void *const *dst, int32_t *const *tokens_out, int n, int *rc) {
    redis_tier *r = self;
    for (int i = 0; i < n; i++) rc[i] = STRATA_EIO;
    pthread_mutex_lock(&r->read_mu);
    int fresh;
    redisContext *c = redis_conn_get(&r->reader, &fresh);
    char key[REDIS_KEY_BYTES];
    for (int i = 0; c && i < n; i++) {
        redis_tier_key(&h[i], key);
        redisAppendCommand(c, "GET %s", key);
    }
    /* A whole run is bounded too, not only each socket wait: a Redis that
     * is slow but still sending gives up after the timeout per block on
     * average (the rest comes from the next tier, or is computed). */
    double deadline = clock_ms() + (double)r->o.timeout_ms * (n + 1);
    int i = 0;
    for (; c && i < n; i++)
        if (read_one(r, c, &h[i], dst[i], tokens_out[i], &rc[i]) || (i + 1 < n && clock_ms() > deadline)) {
            redis_conn_fail(&r->reader, NULL); /* replies still due: the connection cannot be reused */
            c = NULL;
        }
    if (c) delete_rejected(r, c, h, rc, n);
    pthread_mutex_unlock(&r->read_mu);
    int ok = 0;
    for (i = 0; i < n; i++) {
        if (rc[i]) {
            memset(dst[i], 0, r->o.block_bytes);
            seen_drop(r, &h[i]);
        } else {
            atomic_fetch_add(&r->hits, 1);
            seen_add(r, &h[i]);
        }
    }
    while (ok < n && rc[ok] == 0) ok++;
    return ok;
}

/* ---- writes ---- */

static uint64_t job_bytes(const redis_tier *r) { return r->o.block_bytes + 4ull * r->o.block_tokens; }

/* Sends one block unless Redis holds it: EXISTS first (a round trip is
 * cheaper than a megabyte), then SET NX (another replica may race us). */
static void send_job(redis_tier *r, redisContext *c, wjob *j) {
    char key[REDIS_KEY_BYTES];
    redis_tier_key(&j->h, key);
    redisReply *rep = redisCommand(c, "EXISTS %s", key);
    int there = rep && rep->type == REDIS_REPLY_INTEGER && rep->integer == 1;
    if (rep) freeReplyObject(rep);
    if (!rep) goto broken;
    if (there) {
        atomic_fetch_add(&r->skips, 1);
        return;
    }
    disk_hdr h = {.version = DISK_FORMAT_VERSION, .kv_dtype = r->o.kv_dtype, .n_tokens = (uint32_t)j->n_tokens,
                  .payload_bytes = r->o.block_bytes, .hash = j->h, .parent = j->parent};
    memcpy(h.model_fp, r->o.model_fp, 32);
    disk_file_encode(&h, j->tokens, j->tokens + j->n_tokens, r->enc);
    rep = redisCommand(c, "SET %s %b NX", key, r->enc, (size_t)disk_file_bytes(h.n_tokens, h.payload_bytes));
    if (!rep) goto broken;
    if (rep->type == REDIS_REPLY_ERROR) { /* OOM at maxmemory with noeviction, READONLY replica, ... */
        redis_conn_error_reply(&r->writer, "SET", rep->str);
        atomic_fetch_add(&r->dropped, 1);
        seen_drop(r, &j->h);
    } else {
        atomic_fetch_add(rep->type == REDIS_REPLY_NIL ? &r->skips : &r->writes, 1);
    }
    freeReplyObject(rep);
    return;
broken:
    redis_conn_fail(&r->writer, NULL);
    atomic_fetch_add(&r->dropped, 1);
    seen_drop(r, &j->h);
}

/* The next job, or NULL when stopping with nothing left; *late when it
 * is past the drain deadline of a close. */
static wjob *next_job(redis_tier *r, int *late) {
    pthread_mutex_lock(&r->q_mu);
    while (!r->q_head && !r->stopping) pthread_cond_wait(&r->q_cv, &r->q_mu);
    wjob *j = r->q_head;
    if (j && !(r->q_head = j->next)) r->q_tail = NULL;
    if (j) r->q_bytes -= job_bytes(r);
    *late = r->stopping && clock_ms() > r->drain_until;
    pthread_mutex_unlock(&r->q_mu);
    return j;
}

static void *writer_main(void *arg) {
    redis_tier *r = arg;
    wjob *j;
    int late, fresh;
    while ((j = next_job(r, &late))) {
        redisContext *c = late ? NULL : redis_conn_get(&r->writer, &fresh);
        if (c) send_job(r, c, j);
        else {
            atomic_fetch_add(&r->dropped, 1); /* down (or past the drain at close) */
            seen_drop(r, &j->h);
        }
        free(j->tokens);
        free(j);
    }
    return NULL;
}

/* Copies the block into the queue. Tails are not written (no partial
 * matches from Redis); a block known present or queued is not queued again. */
static int write(void *self, const cache_hash *h, const cache_hash *parent, const int32_t *tokens, int n_tokens,
                 const void *kv) {
    redis_tier *r = self;
    if ((uint32_t)n_tokens != r->o.block_tokens) return STRATA_EUNSUPPORTED;
    if (seen_has(r, h)) return 0;
    pthread_mutex_lock(&r->q_mu);
    int full = r->q_bytes + job_bytes(r) > r->o.queue_bytes || r->stopping;
    if (!full) r->q_bytes += job_bytes(r);
    pthread_mutex_unlock(&r->q_mu);
    if (full) {
        atomic_fetch_add(&r->dropped, 1);
        return STRATA_EBUSY;
    }
    wjob *j = xcalloc(1, sizeof *j);
    j->h = *h, j->parent = *parent, j->n_tokens = n_tokens;
    j->tokens = xmalloc(job_bytes(r));
    memcpy(j->tokens, tokens, 4ull * (size_t)n_tokens);
    memcpy(j->tokens + n_tokens, kv, r->o.block_bytes);
    seen_add(r, h); /* queued counts as held: never queued twice */
    pthread_mutex_lock(&r->q_mu);
    if (r->q_tail) r->q_tail->next = j;
    else r->q_head = j;
    r->q_tail = j;
    pthread_cond_signal(&r->q_cv);
    pthread_mutex_unlock(&r->q_mu);
    return 0;
}

/* ---- the rest of the interface, and life cycle ---- */

static int drop_superseded(void *self, const cache_hash *parent, const int32_t *tokens, int n) { return 0; }
static void touch(void *self, const cache_hash *h) {}                 /* Redis's LFU counts reads itself */
static void retain(void *self, const cache_hash *h, double ttl_s) {}  /* not applied: see the header */
static double retained_s(void *self, const cache_hash *h) { return 0; }

cache_tier redis_tier_iface(redis_tier *r) {
    return (cache_tier){.name = "redis", .self = r, .has = has, .has_run = has_run, .best_child = best_child,
                        .read_many = read_many, .write = write, .drop_superseded = drop_superseded, .touch = touch,
                        .retain = retain, .retained_s = retained_s};
}

static void conn_init(redis_tier *r, redis_conn *c, const char *role) {
    *c = (redis_conn){.url = &r->url, .timeout_ms = r->o.timeout_ms, .role = role, .health = &r->health};
}

int redis_tier_open(redis_tier **out, const redis_tier_opts *o, strata_err *err) {
    *out = NULL;
    redis_url url;
    int rc = redis_url_parse(o->url, &url, err);
    if (rc) return rc;
    redis_tier *r = xcalloc(1, sizeof *r);
    r->o = *o;
    r->o.url = NULL; /* the caller's string need not outlive the call */
    r->url = url;
    if (!r->o.queue_bytes) r->o.queue_bytes = 64ull << 20;
    if (r->o.timeout_ms <= 0) r->o.timeout_ms = 100;
    r->seen = xcalloc((size_t)SEEN_BUCKETS * SEEN_WAYS, sizeof(cache_hash));
    r->seen_next = xcalloc(SEEN_BUCKETS, 1);
    r->enc = xmalloc(disk_file_bytes(o->block_tokens, o->block_bytes));
    pthread_mutex_init(&r->seen_mu, NULL), pthread_mutex_init(&r->probe_mu, NULL);
    pthread_mutex_init(&r->read_mu, NULL), pthread_mutex_init(&r->q_mu, NULL);
    pthread_cond_init(&r->q_cv, NULL);
    conn_init(r, &r->probe, "probe"), conn_init(r, &r->reader, "reader"), conn_init(r, &r->writer, "writer");
    pthread_mutex_lock(&r->probe_mu);
    if (probe_ctx(r)) log_info("redis cache: connected to %s:%d db %d", url.host, url.port, url.db);
    pthread_mutex_unlock(&r->probe_mu);
    if (!(r->started = pthread_create(&r->th, NULL, writer_main, r) == 0)) {
        redis_tier_close(r);
        return strata_errf(err, STRATA_EIO, "redis cache: cannot start the writer thread");
    }
    *out = r;
    return 0;
}

void redis_tier_close(redis_tier *r) {
    if (!r) return;
    pthread_mutex_lock(&r->q_mu);
    r->stopping = 1;
    r->drain_until = clock_ms() + CLOSE_DRAIN_MS;
    pthread_cond_broadcast(&r->q_cv);
    pthread_mutex_unlock(&r->q_mu);
    if (r->started) pthread_join(r->th, NULL);
    redis_conn_close(&r->probe), redis_conn_close(&r->reader), redis_conn_close(&r->writer);
    pthread_mutex_destroy(&r->seen_mu), pthread_mutex_destroy(&r->probe_mu);
    pthread_mutex_destroy(&r->read_mu), pthread_mutex_destroy(&r->q_mu);
    pthread_cond_destroy(&r->q_cv);
    free(r->seen), free(r->seen_next), free(r->enc);
    free(r);
}

void redis_tier_get_stats(redis_tier *r, redis_tier_stats *s) {
    pthread_mutex_lock(&r->q_mu);
    s->queued_bytes = (long)r->q_bytes;
    pthread_mutex_unlock(&r->q_mu);
    s->hits = atomic_load(&r->hits), s->misses = atomic_load(&r->misses);
    s->errors = atomic_load(&r->health.errors), s->dropped_writes = atomic_load(&r->dropped);
    s->rejected = atomic_load(&r->rejected), s->writes = atomic_load(&r->writes);
    s->write_skips = atomic_load(&r->skips);
    s->up = atomic_load(&r->health.up);
}
