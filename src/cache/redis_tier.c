/* redis_tier.c - the shared tier on Redis (see redis_tier.h): the local
 * presence cache, pipelined probes and reads, the tail lists behind
 * partial matches, expiry refreshes, the write queue and its thread.
 * Three connections, so a long read never holds up a probe on the
 * scheduler's thread and neither ever waits behind a write.
 *
 * Keys (values of both are checked on every read, never trusted):
 *   strata:kv:<hex hash>        a block or tail: a block file byte for byte
 *   strata:tails:<hex parent>   hash: field = 32 raw bytes of a tail's hash,
 *                               value = its token ids (int32 LE, 1..B-1) */
#include "cache/redis_tier.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/mem.h"
#include "cache/disk_file.h"
#include "cache/policy.h"
#include "cache/redis_conn.h"

#define KEY_PREFIX "strata:kv:"
#define TAILS_PREFIX "strata:tails:"
#define TAILS_KEY_BYTES (sizeof TAILS_PREFIX + 64)
#define TAIL_MAX 32        /* tails listed under one parent; past it some go at random */
#define TAIL_CACHE 8       /* parents whose tail list was fetched lately */
#define TAIL_FRESH_MS 1000.0
#define PART_RING 8        /* partial matches handed to the store, for their read */
#define PART_TTL_MS 30000.0
#define REFRESH_SLOTS 4096 /* expiries pushed lately (direct-mapped, lossy) */
#define REFRESH_SLACK 16   /* a TTL is pushed again once 1/16 of it has passed */
#define EXPIRE_JOB_BYTES 256
#define SEEN_BUCKETS 16384 /* x SEEN_WAYS hashes known present: 2 MiB */
#define SEEN_WAYS 4
#define MISS_RING 16       /* recent "absent" answers, trusted for MISS_TTL_MS */
#define MISS_TTL_MS 1000.0
#define PROBE_CHUNK 32     /* EXISTS per pipelined round of a run */
#define CLOSE_DRAIN_MS 2000.0

/* One job of the writer thread: a block or tail to store (PUT), or an
 * expiry to push on a key already stored (EXPIRE: never rewrites the value). */
typedef enum { JOB_PUT, JOB_EXPIRE, JOB_SNAP, JOB_SNAP_EXPIRE } job_kind;

typedef struct wjob {
    struct wjob *next;
    job_kind kind;
    cache_hash h, parent;
    int n_tokens;      /* PUT: B, or fewer for a tail; EXPIRE: 0, or a tail's count (its list is pushed too) */
    long long ttl_ms;  /* expiry from now (policy_shared_ttl_ms); 0: none */
    uint64_t bytes;    /* counted against the queue bound */
    int32_t *tokens;   /* PUT: token ids, then the payload, in one allocation */
    uint64_t payload;  /* SNAP: bytes of the state after the r token ids (n_tokens: r) */
} wjob;

/* The tails Redis lists under one parent, as fetched (a probe round or
 * best_child) and trusted for TAIL_FRESH_MS. */
typedef struct tail_list {
    cache_hash parent;
    double t; /* when fetched; 0: empty slot */
    int n;
    cache_hash h[TAIL_MAX];
    int n_tok[TAIL_MAX];
    int32_t *tok; /* TAIL_MAX x block_tokens */
} tail_list;

/* An expiry pushed lately: until (clock_ms; INFINITY: none). */
typedef struct refr_ent {
    cache_hash h;
    double until;
    cache_hash parent; /* a tail's (n_tok > 0): its list is pushed with it */
    int n_tok;
} refr_ent;

/* A partial match handed to the store: its read checks the token count and
 * that parent and token ids hash to its name. */
typedef struct part_info {
    cache_hash h, parent;
    int n_tok;
    double t;
} part_info;

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
    refr_ent *refr; /* expiries pushed lately, REFRESH_SLOTS direct-mapped */
    tail_list tails[TAIL_CACHE];
    int tails_next;
    part_info part[PART_RING];
    int part_next;
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
    atomic_long hits, misses, dropped, rejected, writes, skips, expires, tail_hits;
};

void redis_tier_key(const cache_hash *h, char out[REDIS_KEY_BYTES]) {
    memcpy(out, KEY_PREFIX, sizeof KEY_PREFIX - 1);
    cache_hash_hex(h, out + sizeof KEY_PREFIX - 1);
}

void redis_tier_tails_key(const cache_hash *parent, char out[REDIS_TAILS_KEY_BYTES]) {
    memcpy(out, TAILS_PREFIX, sizeof TAILS_PREFIX - 1);
    cache_hash_hex(parent, out + sizeof TAILS_PREFIX - 1);
}

/* Token ids as stored in a tail list: int32 little-endian. */
static void tok_put(uint8_t *out, const int32_t *t, int n) {
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 4; k++) out[4 * i + k] = (uint8_t)((uint32_t)t[i] >> (8 * k));
}

static void tok_get(int32_t *t, const uint8_t *in, int n) {
    for (int i = 0; i < n; i++)
        t[i] = (int32_t)((uint32_t)in[4 * i] | (uint32_t)in[4 * i + 1] << 8 | (uint32_t)in[4 * i + 2] << 16 |
                         (uint32_t)in[4 * i + 3] << 24);
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
    memset(r->refr, 0, (size_t)REFRESH_SLOTS * sizeof *r->refr);
    for (int i = 0; i < TAIL_CACHE; i++) r->tails[i].t = 0;
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

/* ---- tail lists: what continues a parent in part ---- */

/* The cached list of parent's tails if fetched lately (seen_mu held), or NULL. */
static tail_list *tails_find(redis_tier *r, const cache_hash *parent) {
    double now = clock_ms();
    for (int i = 0; i < TAIL_CACHE; i++)
        if (r->tails[i].t > now - TAIL_FRESH_MS && memcmp(r->tails[i].parent.b, parent->b, 32) == 0) return &r->tails[i];
    return NULL;
}

/* A tail of ours is queued: the list Redis gave a moment ago is stale. */
static void tails_forget(redis_tier *r, const cache_hash *parent) {
    pthread_mutex_lock(&r->seen_mu);
    tail_list *l = tails_find(r, parent);
    if (l) l->t = 0;
    pthread_mutex_unlock(&r->seen_mu);
}

/* Remembers an HGETALL reply as parent's tail list. An entry that is not
 * a 32-byte hash and 1..B-1 token ids is counted as rejected; returns 1
 * when there was one (the caller deletes the list: it is rebuilt by the
 * next tails written). */
static int tails_keep(redis_tier *r, const cache_hash *parent, const redisReply *rep) {
    int B = (int)r->o.block_tokens, bad = rep->type != REDIS_REPLY_ARRAY;
    pthread_mutex_lock(&r->seen_mu);
    tail_list *l = tails_find(r, parent);
    if (!l) l = &r->tails[r->tails_next++ % TAIL_CACHE];
    l->parent = *parent, l->t = clock_ms(), l->n = 0;
    for (size_t i = 0; !bad && i + 1 < rep->elements; i += 2) {
        const redisReply *f = rep->element[i], *v = rep->element[i + 1];
        if (f->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING || f->len != 32 || v->len % 4 ||
            v->len < 4 || v->len / 4 >= (size_t)B) {
            bad = 1;
            break;
        }
        if (l->n == TAIL_MAX) continue; /* another replica keeps more: the first TAIL_MAX */
        memcpy(l->h[l->n].b, f->str, 32);
        l->n_tok[l->n] = (int)(v->len / 4);
        tok_get(l->tok + (size_t)l->n * B, (const uint8_t *)v->str, l->n_tok[l->n]);
        l->n++;
    }
    if (bad) l->n = 0;
    pthread_mutex_unlock(&r->seen_mu);
    if (bad) {
        atomic_fetch_add(&r->rejected, 1);
        char hex[65];
        cache_hash_hex(parent, hex);
        log_warn("redis cache: tail list of %.16s.. malformed; rejected, deleted", hex);
    }
    return bad;
}

/* Fetches parent's tail list on the probe connection (probe_mu held). */
static void tails_fetch(redis_tier *r, redisContext *c, const cache_hash *parent) {
    char key[REDIS_TAILS_KEY_BYTES];
    redis_tier_tails_key(parent, key);
    redisReply *rep = redisCommand(c, "HGETALL %s", key);
    if (!rep) {
        redis_conn_fail(&r->probe, NULL);
        return;
    }
    int bad = tails_keep(r, parent, rep);
    freeReplyObject(rep);
    if (bad && (rep = redisCommand(c, "DEL %s", key))) freeReplyObject(rep);
    else if (bad) redis_conn_fail(&r->probe, NULL);
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

/* One pipelined round for hs[0..n): EXISTS of each block and the tail
 * list under it, so the tails continuing the run where it ends come in the
 * same round trip (kept for best_child). Returns how many from the first
 * Redis holds (each one found is remembered); -1 when the connection failed. */
static int probe_round(redis_tier *r, redisContext *c, const cache_hash *hs, int n) {
    char key[REDIS_TAILS_KEY_BYTES];
    for (int i = 0; i < n; i++) {
        redis_tier_key(&hs[i], key);
        redisAppendCommand(c, "EXISTS %s", key);
        redis_tier_tails_key(&hs[i], key);
        redisAppendCommand(c, "HGETALL %s", key);
    }
    int run = 0, broken = 0, stop = 0, bad_list = -1;
    redisReply *end_list = NULL; /* the tails under the last block found so far */
    for (int i = 0; i < n; i++) { /* every reply is read, or the pipeline desyncs */
        redisReply *rep = NULL, *list = NULL;
        if (redisGetReply(c, (void **)&rep) != REDIS_OK || !rep || redisGetReply(c, (void **)&list) != REDIS_OK ||
            !list) {
            if (rep) freeReplyObject(rep);
            broken = 1;
            break;
        }
        int there = rep->type == REDIS_REPLY_INTEGER && rep->integer == 1;
        freeReplyObject(rep);
        if (there && !stop) {
            seen_add(r, &hs[i]), run++;
            if (end_list) freeReplyObject(end_list);
            end_list = list, list = NULL;
        } else if (!stop) {
            stop = 1, note_miss(r, &hs[i]);
        }
        if (list) freeReplyObject(list);
    }
    if (!broken && end_list && tails_keep(r, &hs[run - 1], end_list)) bad_list = run - 1;
    if (end_list) freeReplyObject(end_list);
    if (broken) redis_conn_fail(&r->probe, NULL);
    else if (bad_list >= 0) {
        redis_tier_tails_key(&hs[bad_list], key);
        redisReply *d = redisCommand(c, "DEL %s", key);
        if (d) freeReplyObject(d);
        else redis_conn_fail(&r->probe, NULL);
    }
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
        c = r->probe.c;
    }
    pthread_mutex_unlock(&r->probe_mu);
    return k;
}

static int has(void *self, const cache_hash *h) { return has_run(self, h, 1); }

/* Remembers a partial match handed to the store, for its read. */
static void part_note(redis_tier *r, const cache_hash *h, const cache_hash *parent, int n_tok) {
    pthread_mutex_lock(&r->seen_mu);
    r->part[r->part_next] = (part_info){.h = *h, .parent = *parent, .n_tok = n_tok, .t = clock_ms()};
    r->part_next = (r->part_next + 1) % PART_RING;
    pthread_mutex_unlock(&r->seen_mu);
}

/* The partial match h, if one was handed out lately: 1 and *out. */
static int part_find(redis_tier *r, const cache_hash *h, part_info *out) {
    double now = clock_ms();
    int found = 0;
    pthread_mutex_lock(&r->seen_mu);
    for (int i = 0; i < PART_RING && !found; i++)
        if (r->part[i].t > now - PART_TTL_MS && memcmp(r->part[i].h.b, h->b, 32) == 0) *out = r->part[i], found = 1;
    pthread_mutex_unlock(&r->seen_mu);
    return found;
}

/* The tail under parent sharing the longest prefix with tokens[0..n): from
 * the list a probe round just brought, or one HGETALL. The value is read
 * and checked (token count, and parent and tokens hashing to its name)
 * like any other before the store uses it. */
static int best_child(void *self, const cache_hash *parent, const int32_t *tokens, int n, cache_hash *h,
                      int *n_tokens) {
    redis_tier *r = self;
    int B = (int)r->o.block_tokens, best = 0;
    pthread_mutex_lock(&r->seen_mu);
    int cached = tails_find(r, parent) != NULL;
    pthread_mutex_unlock(&r->seen_mu);
    if (!cached) {
        pthread_mutex_lock(&r->probe_mu);
        redisContext *c = probe_ctx(r);
        if (c) tails_fetch(r, c, parent);
        pthread_mutex_unlock(&r->probe_mu);
    }
    pthread_mutex_lock(&r->seen_mu);
    tail_list *l = tails_find(r, parent);
    for (int i = 0; l && i < l->n; i++) {
        int m = l->n_tok[i] < n ? l->n_tok[i] : n, len = 0;
        const int32_t *t = l->tok + (size_t)i * B;
        while (len < m && t[len] == tokens[len]) len++;
        if (len > best) best = len, *h = l->h[i], *n_tokens = l->n_tok[i];
    }
    pthread_mutex_unlock(&r->seen_mu);
    if (best > 0) part_note(r, h, parent, *n_tokens);
    return best;
}

/* ---- expiry: retention marks and use become key TTLs ---- */

static long long ttl_longer(long long a, long long b) { return a == 0 || b == 0 ? 0 : a > b ? a : b; }

static refr_ent *refr_slot(redis_tier *r, const cache_hash *h) {
    uint64_t x;
    memcpy(&x, h->b + 8, 8);
    return &r->refr[x % REFRESH_SLOTS];
}

static void refresh_forget(redis_tier *r, const cache_hash *h) {
    pthread_mutex_lock(&r->seen_mu);
    refr_ent *e = refr_slot(r, h);
    if (memcmp(e->h.b, h->b, 32) == 0) memset(e, 0, sizeof *e);
    pthread_mutex_unlock(&r->seen_mu);
}

/* 1 when h's expiry was pushed to at least `until` (less the slack) lately;
 * else notes that it is about to be (seen_mu taken). A tail's parent
 * (*parent, *n_tok > 0) is remembered with it and filled in for a caller
 * that does not know it (touch, retain), so its list is pushed too. */
static int refresh_known(redis_tier *r, const cache_hash *h, double until, long long ttl_ms, cache_hash *parent,
                         int *n_tok) {
    pthread_mutex_lock(&r->seen_mu);
    refr_ent *e = refr_slot(r, h);
    int same = memcmp(e->h.b, h->b, 32) == 0;
    if (same && !*n_tok && e->n_tok) *parent = e->parent, *n_tok = e->n_tok;
    int known = same && e->until >= until - (double)ttl_ms / REFRESH_SLACK;
    if (!known) e->h = *h, e->until = until, e->parent = *parent, e->n_tok = *n_tok;
    pthread_mutex_unlock(&r->seen_mu);
    return known;
}

/* A queued PUT of h takes the longer expiry instead (SET ... PX): 1 if one was queued. */
static int raise_queued(redis_tier *r, const cache_hash *h, long long ttl_ms) {
    int found = 0;
    pthread_mutex_lock(&r->q_mu);
    for (wjob *j = r->q_head; j && !found; j = j->next)
        if (j->kind == JOB_PUT && memcmp(j->h.b, h->b, 32) == 0) j->ttl_ms = ttl_longer(j->ttl_ms, ttl_ms), found = 1;
    pthread_mutex_unlock(&r->q_mu);
    return found;
}

static int enqueue(redis_tier *r, wjob *j);

/* Pushes h's expiry to ttl_ms from now (0: none) by the writer thread,
 * unless it was pushed that far lately; with parent (a tail's), its tail
 * list too. Never on the caller's path beyond a queue insert. */
static void refresh(redis_tier *r, const cache_hash *h, const cache_hash *parent, int n_tok, long long ttl_ms) {
    if (!(r->o.ttl_s > 0)) return; /* nothing expires: nothing to push */
    double until = ttl_ms ? clock_ms() + (double)ttl_ms : INFINITY;
    cache_hash p = {{0}};
    if (parent) p = *parent;
    else n_tok = 0;
    if (refresh_known(r, h, until, ttl_ms, &p, &n_tok) || raise_queued(r, h, ttl_ms)) return;
    wjob *j = xcalloc(1, sizeof *j);
    j->kind = JOB_EXPIRE, j->h = *h, j->ttl_ms = ttl_ms, j->bytes = EXPIRE_JOB_BYTES;
    j->parent = p, j->n_tokens = n_tok; /* n_tok 0: no list to push */
    if (enqueue(r, j)) {
        free(j);
        refresh_forget(r, h); /* not pushed after all */
    }
}

/* ---- reads ---- */

/* Verifies one value and copies it into the pool block: 0, or
 * STRATA_EFORMAT (rejected, counted, never loaded). A partial match (pi)
 * must hold its token count, and its parent and token ids must hash to
 * its name. */
static int take_value(redis_tier *r, const cache_hash *h, const part_info *pi, const redisReply *rep, void *dst,
                      int32_t *tokens) {
    disk_expect ex = {.hash = h, .model_fp = r->o.model_fp, .n_tokens = pi ? (uint32_t)pi->n_tok : r->o.block_tokens,
                      .kv_dtype = r->o.kv_dtype, .payload_bytes = r->o.block_bytes};
    disk_hdr hd;
    strata_err e = {0};
    int rc = disk_file_decode((const uint8_t *)rep->str, rep->len, &ex, &hd, tokens, dst, r->o.block_bytes, &e);
    if (rc == 0 && pi) {
        cache_hash x;
        cache_hash_block(&x, &pi->parent, tokens, pi->n_tok);
        if (memcmp(x.b, h->b, 32) != 0 || memcmp(hd.parent.b, pi->parent.b, 32) != 0)
            rc = strata_errf(&e, STRATA_EFORMAT, "its parent and token ids do not hash to its name");
    }
    if (rc) {
        atomic_fetch_add(&r->rejected, 1);
        char hex[65];
        cache_hash_hex(h, hex);
        log_warn("redis cache: value of %.16s.. rejected: %s; not loaded, deleted", hex, e.msg);
    }
    return rc;
}

/* Deletes values that failed verification, so a good copy can be written
 * again (a replica writes only what Redis does not hold), and takes a
 * partial match whose value failed or was gone off its tail list. */
static void delete_rejected(redis_tier *r, redisContext *c, const cache_hash *h, const part_info *pi,
                            const int *gone, const int *rc, int n) {
    char key[REDIS_TAILS_KEY_BYTES];
    for (int i = 0; i < n; i++) {
        redisReply *rep = NULL;
        if (rc[i] == STRATA_EFORMAT) {
            redis_tier_key(&h[i], key);
            if (!(rep = redisCommand(c, "DEL %s", key))) break;
            freeReplyObject(rep);
        }
        if (pi[i].n_tok && (rc[i] == STRATA_EFORMAT || gone[i])) {
            redis_tier_tails_key(&pi[i].parent, key);
            if (!(rep = redisCommand(c, "HDEL %s %b", key, h[i].b, (size_t)32))) break;
            freeReplyObject(rep);
            tails_forget(r, &pi[i].parent);
        }
    }
    if (!c->err) return;
    redis_conn_fail(&r->reader, NULL);
}

/* One reply of the pipeline into block i: rc[i]. -1 when the connection broke. */
static int read_one(redis_tier *r, redisContext *c, const cache_hash *h, const part_info *pi, void *dst,
                    int32_t *tokens, int *rc, int *gone) {
    redisReply *rep = NULL;
    if (redisGetReply(c, (void **)&rep) != REDIS_OK || !rep) return -1;
    if (rep->type == REDIS_REPLY_STRING) *rc = take_value(r, h, pi->n_tok ? pi : NULL, rep, dst, tokens);
    else *rc = STRATA_EIO; /* gone: evicted, expired, or Redis restarted empty */
    if (rep->type == REDIS_REPLY_NIL) atomic_fetch_add(&r->misses, 1), *gone = 1;
    else if (rep->type == REDIS_REPLY_ERROR) redis_conn_error_reply(&r->reader, "GET", rep->str);
    freeReplyObject(rep);
    return 0;
}

/* What was read is used: its expiry starts again (the default, or a
 * tail's with its list). */
static void read_done(redis_tier *r, const cache_hash *h, const part_info *pi, int rc) {
    if (rc) {
        seen_drop(r, h);
        return;
    }
    atomic_fetch_add(&r->hits, 1);
    if (pi->n_tok && pi->n_tok < (int)r->o.block_tokens) atomic_fetch_add(&r->tail_hits, 1);
    seen_add(r, h);
    refresh(r, h, pi->n_tok ? &pi->parent : NULL, pi->n_tok, policy_shared_ttl_ms(0, r->o.ttl_s));
}

static int read_many(void *self, const cache_hash *h, void *const *dst, int32_t *const *tokens_out, int n, int *rc) {
    redis_tier *r = self;
    part_info *pi = xcalloc((size_t)n, sizeof *pi); /* n_tok 0: a whole block of a run */
    int *gone = xcalloc((size_t)n, sizeof *gone);
    for (int i = 0; i < n; i++) rc[i] = STRATA_EIO, part_find(r, &h[i], &pi[i]);
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
        if (read_one(r, c, &h[i], &pi[i], dst[i], tokens_out[i], &rc[i], &gone[i]) ||
            (i + 1 < n && clock_ms() > deadline)) {
            redis_conn_fail(&r->reader, NULL); /* replies still due: the connection cannot be reused */
            c = NULL;
        }
    if (c) delete_rejected(r, c, h, pi, gone, rc, n);
    pthread_mutex_unlock(&r->read_mu);
    int ok = 0;
    for (i = 0; i < n; i++) {
        if (rc[i]) memset(dst[i], 0, r->o.block_bytes);
        read_done(r, &h[i], &pi[i], rc[i]);
    }
    while (ok < n && rc[ok] == 0) ok++;
    free(pi), free(gone);
    return ok;
}

/* ---- writes ---- */

/* n pipelined replies (commands already appended) into rep[]; -1 when the
 * connection broke (what came is freed). */
static int replies(redisContext *c, redisReply **rep, int n) {
    int i = 0;
    while (i < n && redisGetReply(c, (void **)&rep[i]) == REDIS_OK && rep[i]) i++;
    if (i == n) return 0;
    while (i-- > 0) freeReplyObject(rep[i]);
    return -1;
}

static void free_replies(redisReply **rep, int n) {
    for (int i = 0; i < n; i++) freeReplyObject(rep[i]);
}

/* PEXPIRE that only lengthens (GT; a key without expiry counts as
 * infinite), or PERSIST for none: appended, one reply. */
static void append_expire(redisContext *c, const char *key, long long ttl_ms) {
    if (ttl_ms) redisAppendCommand(c, "PEXPIRE %s %lld GT", key, ttl_ms);
    else redisAppendCommand(c, "PERSIST %s", key);
}

/* A tail list's expiry: set if it has none yet (a list HSET just created
 * has none), then lengthened like a block's: appended, two replies. */
static void append_list_expire(redisContext *c, const char *key, long long ttl_ms) {
    if (ttl_ms) redisAppendCommand(c, "PEXPIRE %s %lld NX", key, ttl_ms);
    else redisAppendCommand(c, "PING");
    append_expire(c, key, ttl_ms);
}

/* The tail j joins its parent's list (its token ids, with the expiry of
 * the longest-lived tail on it); a list past TAIL_MAX loses others at
 * random, their values too. 0, or -1 when the connection broke. */
static int list_add(redis_tier *r, redisContext *c, const wjob *j) {
    char lkey[REDIS_TAILS_KEY_BYTES], key[REDIS_KEY_BYTES];
    redis_tier_tails_key(&j->parent, lkey);
    uint8_t *enc = xmalloc(4ull * (size_t)j->n_tokens);
    tok_put(enc, j->tokens, j->n_tokens);
    redisAppendCommand(c, "HSET %s %b %b", lkey, j->h.b, (size_t)32, enc, 4ull * (size_t)j->n_tokens);
    free(enc);
    append_list_expire(c, lkey, j->ttl_ms);
    redisAppendCommand(c, "HLEN %s", lkey);
    redisReply *rep[4];
    if (replies(c, rep, 4)) return -1;
    long long len = rep[3]->type == REDIS_REPLY_INTEGER ? rep[3]->integer : 0;
    if (rep[0]->type == REDIS_REPLY_ERROR) redis_conn_error_reply(&r->writer, "HSET", rep[0]->str);
    free_replies(rep, 4);
    if (len <= TAIL_MAX) return 0;
    redisReply *pick = redisCommand(c, "HRANDFIELD %s %lld", lkey, len - TAIL_MAX);
    if (!pick) return -1;
    int sent = 0;
    for (size_t i = 0; pick->type == REDIS_REPLY_ARRAY && i < pick->elements; i++) {
        const redisReply *f = pick->element[i];
        if (f->type != REDIS_REPLY_STRING || (f->len == 32 && memcmp(f->str, j->h.b, 32) == 0)) continue;
        redisAppendCommand(c, "HDEL %s %b", lkey, f->str, f->len);
        sent++;
        if (f->len != 32) continue;
        cache_hash x;
        memcpy(x.b, f->str, 32);
        redis_tier_key(&x, key);
        redisAppendCommand(c, "DEL %s", key);
        sent++;
    }
    freeReplyObject(pick);
    for (int i = 0; i < sent; i++) {
        redisReply *x = NULL;
        if (redisGetReply(c, (void **)&x) != REDIS_OK || !x) return -1;
        freeReplyObject(x);
    }
    return 0;
}

/* The tails under j's parent that j now holds whole (a shorter prefix of
 * its tokens) go, value and list entry: as disk_drop_tails. 0, or -1 when
 * the connection broke. */
static int drop_held_tails(redis_tier *r, redisContext *c, const wjob *j) {
    char lkey[REDIS_TAILS_KEY_BYTES], key[REDIS_KEY_BYTES];
    redis_tier_tails_key(&j->parent, lkey);
    redisReply *list = redisCommand(c, "HGETALL %s", lkey);
    if (!list) return -1;
    int sent = 0, n_t;
    int32_t *t = xmalloc(4ull * r->o.block_tokens);
    for (size_t i = 0; list->type == REDIS_REPLY_ARRAY && i + 1 < list->elements; i += 2) {
        const redisReply *f = list->element[i], *v = list->element[i + 1];
        if (f->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING || f->len != 32 || v->len % 4) continue;
        n_t = (int)(v->len / 4);
        if (n_t >= j->n_tokens || memcmp(f->str, j->h.b, 32) == 0) continue;
        tok_get(t, (const uint8_t *)v->str, n_t);
        if (memcmp(t, j->tokens, 4ull * (size_t)n_t) != 0) continue;
        cache_hash x;
        memcpy(x.b, f->str, 32);
        redis_tier_key(&x, key);
        redisAppendCommand(c, "DEL %s", key);
        redisAppendCommand(c, "HDEL %s %b", lkey, f->str, (size_t)32);
        sent += 2;
    }
    free(t);
    freeReplyObject(list);
    for (int i = 0; i < sent; i++) {
        redisReply *x = NULL;
        if (redisGetReply(c, (void **)&x) != REDIS_OK || !x) return -1;
        freeReplyObject(x);
    }
    return 0;
}

/* Sends one block or tail unless Redis holds it: EXISTS first (a round
 * trip is cheaper than a megabyte), then SET NX with its expiry (another
 * replica may race us); a key already there only has its expiry pushed.
 * A tail joins its parent's list; the tails it holds whole go. */
static void send_put(redis_tier *r, redisContext *c, wjob *j) {
    char key[REDIS_KEY_BYTES];
    int tail = j->n_tokens < (int)r->o.block_tokens;
    redis_tier_key(&j->h, key);
    redisReply *rep = redisCommand(c, "EXISTS %s", key);
    int there = rep && rep->type == REDIS_REPLY_INTEGER && rep->integer == 1;
    if (rep) freeReplyObject(rep);
    if (!rep) goto broken;
    if (there) { /* another replica's: used now, so it lives on */
        atomic_fetch_add(&r->skips, 1);
        if (!(r->o.ttl_s > 0)) return;
        append_expire(c, key, j->ttl_ms);
        if (replies(c, &rep, 1)) goto broken_after;
        freeReplyObject(rep);
        return;
    }
    disk_hdr h = {.version = DISK_FORMAT_VERSION, .kv_dtype = r->o.kv_dtype, .n_tokens = (uint32_t)j->n_tokens,
                  .payload_bytes = r->o.block_bytes, .hash = j->h, .parent = j->parent};
    memcpy(h.model_fp, r->o.model_fp, 32);
    disk_file_encode(&h, j->tokens, j->tokens + j->n_tokens, r->enc);
    size_t len = (size_t)disk_file_bytes(h.n_tokens, h.payload_bytes);
    rep = j->ttl_ms ? redisCommand(c, "SET %s %b NX PX %lld", key, r->enc, len, j->ttl_ms)
                    : redisCommand(c, "SET %s %b NX", key, r->enc, len);
    if (!rep) goto broken;
    int refused = rep->type == REDIS_REPLY_ERROR, stored = rep->type != REDIS_REPLY_NIL && !refused;
    if (refused) { /* OOM at maxmemory with noeviction, READONLY replica, ... */
        redis_conn_error_reply(&r->writer, "SET", rep->str);
        atomic_fetch_add(&r->dropped, 1);
        seen_drop(r, &j->h);
    } else {
        atomic_fetch_add(stored ? &r->writes : &r->skips, 1);
    }
    freeReplyObject(rep);
    if (!stored) return;
    if ((tail && list_add(r, c, j)) || drop_held_tails(r, c, j)) goto broken_after;
    return;
broken:
    atomic_fetch_add(&r->dropped, 1);
    seen_drop(r, &j->h);
broken_after:
    redis_conn_fail(&r->writer, NULL);
}

/* Pushes an expiry on a stored key (and a tail's list): never rewrites the value. */
static void send_expire(redis_tier *r, redisContext *c, wjob *j) {
    char key[REDIS_KEY_BYTES], lkey[REDIS_TAILS_KEY_BYTES];
    redis_tier_key(&j->h, key);
    append_expire(c, key, j->ttl_ms);
    int n = 1;
    if (j->n_tokens) {
        redis_tier_tails_key(&j->parent, lkey);
        append_list_expire(c, lkey, j->ttl_ms);
        n += 2;
    }
    redisReply *rep[3];
    if (replies(c, rep, n)) {
        redis_conn_fail(&r->writer, NULL);
        return;
    }
    atomic_fetch_add(&r->expires, 1);
    for (int i = 0; i < n; i++) /* GT and NX need Redis 7.0: older ones refuse them */
        if (rep[i]->type == REDIS_REPLY_ERROR) redis_conn_error_reply(&r->writer, "PEXPIRE", rep[i]->str);
    free_replies(rep, n);
}

/* The next job, or NULL when stopping with nothing left; *late when it
 * is past the drain deadline of a close. */
static wjob *next_job(redis_tier *r, int *late) {
    pthread_mutex_lock(&r->q_mu);
    while (!r->q_head && !r->stopping) pthread_cond_wait(&r->q_cv, &r->q_mu);
    wjob *j = r->q_head;
    if (j && !(r->q_head = j->next)) r->q_tail = NULL;
    if (j) r->q_bytes -= j->bytes;
    *late = r->stopping && clock_ms() > r->drain_until;
    pthread_mutex_unlock(&r->q_mu);
    return j;
}

static void send_snap(redis_tier *r, redisContext *c, wjob *j);
static void send_snap_expire(redis_tier *r, redisContext *c, wjob *j);

static void *writer_main(void *arg) {
    redis_tier *r = arg;
    wjob *j;
    int late, fresh;
    while ((j = next_job(r, &late))) {
        redisContext *c = late ? NULL : redis_conn_get(&r->writer, &fresh);
        if (c && j->kind == JOB_PUT) send_put(r, c, j);
        else if (c && j->kind == JOB_SNAP) send_snap(r, c, j);
        else if (c && j->kind == JOB_SNAP_EXPIRE) send_snap_expire(r, c, j);
        else if (c) send_expire(r, c, j);
        else {
            atomic_fetch_add(&r->dropped, 1); /* down (or past the drain at close) */
            if (j->kind == JOB_PUT) seen_drop(r, &j->h);
        }
        free(j->tokens);
        free(j);
    }
    return NULL;
}

/* Appends j to the queue within its bound: 0, or STRATA_EBUSY (dropped,
 * counted; the caller still owns j). */
static int enqueue(redis_tier *r, wjob *j) {
    pthread_mutex_lock(&r->q_mu);
    int full = r->q_bytes + j->bytes > r->o.queue_bytes || r->stopping;
    if (!full) {
        r->q_bytes += j->bytes;
        if (r->q_tail) r->q_tail->next = j;
        else r->q_head = j;
        r->q_tail = j;
        pthread_cond_signal(&r->q_cv);
    }
    pthread_mutex_unlock(&r->q_mu);
    if (full) atomic_fetch_add(&r->dropped, 1);
    return full ? STRATA_EBUSY : 0;
}

/* Copies the block (or tail: fewer than B tokens) into the queue with the
 * default expiry (a retention mark lengthens it before it is sent, or
 * later with PEXPIRE); a block known present or queued is not queued again. */
static int write(void *self, const cache_hash *h, const cache_hash *parent, const int32_t *tokens, int n_tokens,
                 const void *kv) {
    redis_tier *r = self;
    if (n_tokens < 1 || (uint32_t)n_tokens > r->o.block_tokens) return STRATA_EINVAL;
    if (seen_has(r, h)) return 0;
    wjob *j = xcalloc(1, sizeof *j);
    j->kind = JOB_PUT, j->h = *h, j->parent = *parent, j->n_tokens = n_tokens;
    j->ttl_ms = policy_shared_ttl_ms(0, r->o.ttl_s);
    j->bytes = r->o.block_bytes + 4ull * (uint64_t)n_tokens;
    j->tokens = xmalloc(j->bytes);
    memcpy(j->tokens, tokens, 4ull * (size_t)n_tokens);
    memcpy(j->tokens + n_tokens, kv, r->o.block_bytes);
    seen_add(r, h); /* queued counts as held: never queued twice */
    if (n_tokens < (int)r->o.block_tokens) tails_forget(r, parent);
    cache_hash p = *parent;
    int n_tail = n_tokens < (int)r->o.block_tokens ? n_tokens : 0;
    refresh_known(r, h, j->ttl_ms ? clock_ms() + (double)j->ttl_ms : INFINITY, j->ttl_ms, &p, &n_tail);
    if (enqueue(r, j)) {
        seen_drop(r, h);
        free(j->tokens), free(j);
        return STRATA_EBUSY;
    }
    return 0;
}

/* ---- the rest of the interface, and life cycle ---- */

/* The writer drops the tails a block holds whole when it stores it. */
static int drop_superseded(void *self, const cache_hash *parent, const int32_t *tokens, int n) { return 0; }

/* A hit in a tier above: the block's expiry starts again (only for keys
 * known present: a probe would cost more than the refresh saves). */
static void touch(void *self, const cache_hash *h) {
    redis_tier *r = self;
    if (r->o.ttl_s > 0 && seen_has(r, h)) refresh(r, h, NULL, 0, policy_shared_ttl_ms(0, r->o.ttl_s));
}

/* A retention mark: the key lives at least ttl_s after this use
 * (policy_shared_ttl_ms decides; a PUT still queued takes it as PX). */
static void retain(void *self, const cache_hash *h, double ttl_s) {
    redis_tier *r = self;
    refresh(r, h, NULL, 0, policy_shared_ttl_ms(ttl_s, r->o.ttl_s));
}

static double retained_s(void *self, const cache_hash *h) { return 0; } /* Redis's TTL is not a local mark */

/* ---- recurrent-state snapshots (snapshot.h) ----
 *
 * A snapshot is the value strata:rs:<hex of its key>: the bytes of its
 * disk file (disk_snap.c's format, kv dtype DISK_STATE_F32), verified on
 * every read like a block. The snapshots filed under a boundary are
 * listed in strata:rsl:<hex of the boundary> (field: the key's 32 bytes;
 * value: r, int32 little-endian), so a replica that never saw them finds
 * the candidates of a whole prompt in one pipelined round (snap_probe).
 * Both expire like blocks (the default after the write); the store's
 * index remembers which it read. */

#define SNAP_PREFIX "strata:rs:"
#define SNAP_LIST_PREFIX "strata:rsl:"
#define SNAP_KEY_BYTES 80

static void snap_key(const char *prefix, const cache_hash *h, char out[SNAP_KEY_BYTES]) {
    char hex[65];
    cache_hash_hex(h, hex);
    snprintf(out, SNAP_KEY_BYTES, "%s%s", prefix, hex);
}

static void send_snap(redis_tier *r, redisContext *c, wjob *j) {
    char key[SNAP_KEY_BYTES], lkey[SNAP_KEY_BYTES];
    snap_key(SNAP_PREFIX, &j->h, key);
    snap_key(SNAP_LIST_PREFIX, &j->parent, lkey);
    disk_hdr h = {.version = DISK_FORMAT_VERSION, .kv_dtype = DISK_STATE_F32, .n_tokens = (uint32_t)j->n_tokens,
                  .payload_bytes = j->payload, .hash = j->h, .parent = j->parent};
    memcpy(h.model_fp, r->o.model_fp, 32);
    size_t len = (size_t)disk_file_bytes(h.n_tokens, h.payload_bytes);
    uint8_t *buf = xmalloc(len), rv[4];
    disk_file_encode(&h, j->tokens, j->tokens + j->n_tokens, buf);
    tok_put(rv, &j->n_tokens, 1);
    int n = 2;
    if (j->ttl_ms) { /* the list's expiry only lengthens: another snapshot on it may be retained */
        redisAppendCommand(c, "SET %s %b NX PX %lld", key, buf, len, j->ttl_ms);
        redisAppendCommand(c, "HSET %s %b %b", lkey, j->h.b, (size_t)32, rv, (size_t)4);
        append_list_expire(c, lkey, j->ttl_ms), n += 2;
    } else {
        redisAppendCommand(c, "SET %s %b NX", key, buf, len);
        redisAppendCommand(c, "HSET %s %b %b", lkey, j->h.b, (size_t)32, rv, (size_t)4);
    }
    free(buf);
    redisReply *rep[4];
    if (replies(c, rep, n)) {
        atomic_fetch_add(&r->dropped, 1);
        redis_conn_fail(&r->writer, NULL);
        return;
    }
    if (rep[0]->type == REDIS_REPLY_ERROR) {
        redis_conn_error_reply(&r->writer, "SET", rep[0]->str);
        atomic_fetch_add(&r->dropped, 1);
    } else {
        atomic_fetch_add(rep[0]->type == REDIS_REPLY_NIL ? &r->skips : &r->writes, 1);
    }
    free_replies(rep, n);
}

/* Queues a copy (the store writes each snapshot once per tier). */
static int snap_write(void *self, const cache_hash *key, const cache_hash *boundary, const int32_t *tokens, int nr,
                      const float *state, size_t n) {
    redis_tier *r = self;
    if (nr < 0 || (uint32_t)nr >= r->o.block_tokens) return STRATA_EINVAL;
    wjob *j = xcalloc(1, sizeof *j);
    j->kind = JOB_SNAP, j->h = *key, j->parent = *boundary, j->n_tokens = nr;
    j->ttl_ms = policy_shared_ttl_ms(0, r->o.ttl_s);
    j->payload = n * sizeof(float);
    j->bytes = 4ull * (uint64_t)nr + j->payload;
    j->tokens = xmalloc(j->bytes);
    memcpy(j->tokens, tokens, 4ull * (size_t)nr);
    memcpy(j->tokens + nr, state, j->payload);
    if (enqueue(r, j)) {
        free(j->tokens), free(j);
        return STRATA_EBUSY;
    }
    return 0;
}

/* A retention mark on a snapshot (store.c retain_snaps): its value and its
 * boundary's list live at least as long as the mark's blocks
 * (policy_shared_ttl_ms; PEXPIRE GT, never shortened). Queued behind the
 * snapshot's own write, so it lands after the SET. */
static void snap_retain(void *self, const cache_hash *key, const cache_hash *boundary, double ttl_s) {
    redis_tier *r = self;
    if (!(r->o.ttl_s > 0)) return; /* nothing expires */
    wjob *j = xcalloc(1, sizeof *j);
    j->kind = JOB_SNAP_EXPIRE, j->h = *key, j->parent = *boundary, j->bytes = EXPIRE_JOB_BYTES;
    j->ttl_ms = policy_shared_ttl_ms(ttl_s, r->o.ttl_s);
    if (enqueue(r, j)) free(j);
}

static void send_snap_expire(redis_tier *r, redisContext *c, wjob *j) {
    char key[SNAP_KEY_BYTES], lkey[SNAP_KEY_BYTES];
    snap_key(SNAP_PREFIX, &j->h, key);
    snap_key(SNAP_LIST_PREFIX, &j->parent, lkey);
    append_expire(c, key, j->ttl_ms);
    append_expire(c, lkey, j->ttl_ms);
    redisReply *rep[2];
    if (replies(c, rep, 2)) {
        redis_conn_fail(&r->writer, NULL);
        return;
    }
    atomic_fetch_add(&r->expires, 1);
    for (int i = 0; i < 2; i++)
        if (rep[i]->type == REDIS_REPLY_ERROR) redis_conn_error_reply(&r->writer, "PEXPIRE", rep[i]->str);
    free_replies(rep, 2);
}

/* GET and verify (magic, version, fingerprint, name, dtype, size, CRCs);
 * a rejected value is counted, deleted and never loaded. */
static int snap_read(void *self, const cache_hash *key, float *dst, size_t n) {
    redis_tier *r = self;
    char k[SNAP_KEY_BYTES];
    snap_key(SNAP_PREFIX, key, k);
    int rc = STRATA_EIO, fresh;
    pthread_mutex_lock(&r->read_mu);
    redisContext *c = redis_conn_get(&r->reader, &fresh);
    redisReply *rep = c ? redisCommand(c, "GET %s", k) : NULL;
    if (c && !rep) redis_conn_fail(&r->reader, NULL);
    if (rep && rep->type == REDIS_REPLY_STRING) {
        disk_expect ex = {.hash = key, .model_fp = r->o.model_fp, .kv_dtype = DISK_STATE_F32,
                          .payload_bytes = n * sizeof(float)};
        disk_hdr hd;
        strata_err e = {0};
        rc = disk_file_decode((const uint8_t *)rep->str, rep->len, &ex, &hd, NULL, dst, n * sizeof(float), &e);
        if (rc) {
            atomic_fetch_add(&r->rejected, 1);
            log_warn("redis cache: snapshot %.16s.. rejected: %s; not loaded, deleted", k + sizeof SNAP_PREFIX - 1, e.msg);
            redisReply *d = redisCommand(c, "DEL %s", k);
            if (d) freeReplyObject(d);
            else redis_conn_fail(&r->reader, NULL);
        }
    } else if (rep && rep->type == REDIS_REPLY_NIL) {
        atomic_fetch_add(&r->misses, 1);
    }
    if (rep) freeReplyObject(rep);
    pthread_mutex_unlock(&r->read_mu);
    if (rc) memset(dst, 0, n * sizeof(float));
    else atomic_fetch_add(&r->hits, 1);
    return rc;
}

/* The snapshots listed under each of boundaries[0..n): one pipelined
 * round of HGETALL; malformed entries are skipped. */
static void snap_probe(void *self, const cache_hash *boundaries, int n,
                       void (*fn)(void *ctx, const cache_hash *key, const cache_hash *boundary, int r), void *ctx) {
    redis_tier *r = self;
    char k[SNAP_KEY_BYTES];
    pthread_mutex_lock(&r->probe_mu);
    redisContext *c = probe_ctx(r);
    for (int i = 0; c && i < n; i++) {
        snap_key(SNAP_LIST_PREFIX, &boundaries[i], k);
        redisAppendCommand(c, "HGETALL %s", k);
    }
    for (int i = 0; c && i < n; i++) {
        redisReply *rep = NULL;
        if (redisGetReply(c, (void **)&rep) != REDIS_OK || !rep) {
            redis_conn_fail(&r->probe, NULL);
            break;
        }
        for (size_t e = 0; rep->type == REDIS_REPLY_ARRAY && e + 1 < rep->elements; e += 2) {
            const redisReply *f = rep->element[e], *v = rep->element[e + 1];
            if (f->type != REDIS_REPLY_STRING || f->len != 32 || v->type != REDIS_REPLY_STRING || v->len != 4) continue;
            cache_hash key;
            int32_t nr;
            memcpy(key.b, f->str, 32);
            tok_get(&nr, (const uint8_t *)v->str, 1);
            if (nr >= 0 && (uint32_t)nr < r->o.block_tokens) fn(ctx, &key, &boundaries[i], nr);
        }
        freeReplyObject(rep);
    }
    pthread_mutex_unlock(&r->probe_mu);
}

cache_tier redis_tier_iface(redis_tier *r) {
    return (cache_tier){.name = "redis", .self = r, .has = has, .has_run = has_run, .best_child = best_child,
                        .read_many = read_many, .write = write, .drop_superseded = drop_superseded, .touch = touch,
                        .retain = retain, .retained_s = retained_s, .snap_write = snap_write, .snap_read = snap_read,
                        .snap_retain = snap_retain,
                        .snap_probe = snap_probe};
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
    r->refr = xcalloc(REFRESH_SLOTS, sizeof *r->refr);
    for (int i = 0; i < TAIL_CACHE; i++) r->tails[i].tok = xcalloc((size_t)TAIL_MAX * o->block_tokens, sizeof(int32_t));
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
    for (int i = 0; i < TAIL_CACHE; i++) free(r->tails[i].tok);
    free(r->seen), free(r->seen_next), free(r->refr), free(r->enc);
    free(r);
}

void redis_tier_get_stats(redis_tier *r, redis_tier_stats *s) {
    pthread_mutex_lock(&r->q_mu);
    s->queued_bytes = (long)r->q_bytes;
    pthread_mutex_unlock(&r->q_mu);
    s->hits = atomic_load(&r->hits), s->misses = atomic_load(&r->misses);
    s->errors = atomic_load(&r->health.errors), s->dropped_writes = atomic_load(&r->dropped);
    s->rejected = atomic_load(&r->rejected), s->writes = atomic_load(&r->writes);
    s->write_skips = atomic_load(&r->skips), s->expires = atomic_load(&r->expires);
    s->tail_hits = atomic_load(&r->tail_hits);
    s->up = atomic_load(&r->health.up);
}
