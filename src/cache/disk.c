/* disk.c - the disk tier's store: index, background writer, eviction,
 * quarantine (see disk.h; the file format is in disk_file.c).
 *
 * The index is an open-addressing hash table keyed by block hash. Besides
 * stored and queued blocks it holds "ghost" entries: hashes that are not
 * stored but are the parent of something that is (a prompt's root, or a
 * block lost to quarantine). Each entry counts its children, so "is a
 * leaf" is one lookup and a parent joins the eviction candidates the
 * moment its last child goes, whatever order files were found in.
 * Eviction follows the policy's one order (policy_evict_key).
 * Does not: decide retention policy, touch the live pool. */
#include "cache/disk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/fs.h"
#include "base/log.h"
#include "base/mem.h"
#include "cache/disk_file.h"
#include "cache/policy.h"

#define PROTECT_MS_DEFAULT 10000
#define PENDING_DEFAULT (256ull << 20)

#define STALE_TMP_S 3600 /* a temp file this old is dead whatever its pid says */

enum { ST_GHOST, ST_PENDING, ST_PRESENT };

typedef struct djob {
    struct djob *next;
    cache_hash h, parent;
    uint32_t n_tokens;
    int32_t *tokens;
    uint8_t *kv;
} djob;

typedef struct dent {
    cache_hash h, parent;
    uint8_t used, state;
    uint16_t model;        /* index into models[] */
    uint32_t n_children;   /* stored or queued entries naming this as parent */
    uint32_t n_tails;      /* of those, tails (fewer than B tokens) */
    uint32_t n_tokens;
    uint64_t bytes;        /* file size */
    double last_use;       /* unix seconds */
    double hits;           /* decayed to last_use */
    double fresh_until;    /* monotonic seconds; not evicted before */
    double keep_until;     /* unix seconds: retained (policy.h) until then */
    djob *job;             /* ST_PENDING: the queued copy */
    int32_t *tok;          /* its n_tokens token ids, for partial matches; NULL for ghosts */
} dent;

struct disk_store {
    disk_opts o;
    char *dir;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_idle;
    pthread_t thread;
    int has_thread, stop, busy, warned;
    unsigned seq;
    djob *head, *tail;
    dent *slots;
    size_t cap, used;
    uint8_t (*models)[32]; /* distinct fingerprints (one unless all_models) */
    int n_models;
    int32_t *scan_tok; /* header token ids while the index is rebuilt */
    disk_stats st;
};

/* ---- time ---- */

static double now_wall(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static double now_mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static double protect_s(const disk_store *d) {
    return (d->o.protect_ms ? d->o.protect_ms : PROTECT_MS_DEFAULT) / 1000.0;
}

/* ---- index: linear probing, backward-shift deletion ---- */

static size_t home_slot(const disk_store *d, const cache_hash *h) {
    uint64_t k;
    memcpy(&k, h->b, 8); /* SHA-256 bytes are already uniform */
    return (size_t)k & (d->cap - 1);
}

static long ix_find(const disk_store *d, const cache_hash *h) {
    for (size_t i = home_slot(d, h);; i = (i + 1) & (d->cap - 1)) {
        if (!d->slots[i].used) return -1;
        if (memcmp(d->slots[i].h.b, h->b, 32) == 0) return (long)i;
    }
}

static void ix_place(disk_store *d, const dent *e) {
    size_t i = home_slot(d, &e->h);
    while (d->slots[i].used) i = (i + 1) & (d->cap - 1);
    d->slots[i] = *e;
}

static void ix_grow(disk_store *d) {
    dent *old = d->slots;
    size_t old_cap = d->cap;
    d->cap = old_cap ? old_cap * 2 : 1024;
    d->slots = xcalloc(d->cap, sizeof(dent));
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].used) ix_place(d, &old[i]);
    free(old);
}

/* A new ghost entry for h (not present before). May move other entries. */
static long ix_insert(disk_store *d, const cache_hash *h) {
    if ((d->used + 1) * 2 > d->cap) ix_grow(d);
    dent e = {.h = *h, .used = 1, .state = ST_GHOST};
    ix_place(d, &e);
    d->used++;
    return ix_find(d, h);
}

/* Empties slot i (its tokens already freed or moved) and shifts the
 * entries after it back; a vacated slot is zeroed whole, so no stale copy
 * of a moved entry's token pointer is left to free twice. */
static void ix_remove(disk_store *d, size_t i) {
    size_t mask = d->cap - 1, j = i;
    d->slots[i] = (dent){0};
    d->used--;
    for (;;) {
        j = (j + 1) & mask;
        if (!d->slots[j].used) return;
        size_t k = home_slot(d, &d->slots[j].h);
        /* Move j back into the hole unless its home lies in (i, j]. */
        int stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (stays) continue;
        d->slots[i] = d->slots[j];
        d->slots[j] = (dent){0};
        i = j;
    }
}

static int is_tail(const disk_store *d, uint32_t n_tokens) { return n_tokens < d->o.block_tokens; }

/* Registers a stored or queued block of n_tokens (its ids in tokens): its
 * parent (ghost if absent) gains a child. Returns the block's slot (ghost
 * entries keep their child count). */
static long ix_add_block(disk_store *d, const cache_hash *h, const cache_hash *parent, int state, const int32_t *tokens,
                         uint32_t n_tokens) {
    long p = ix_find(d, parent);
    if (p < 0) p = ix_insert(d, parent);
    d->slots[p].n_children++;
    d->slots[p].n_tails += is_tail(d, n_tokens);
    long i = ix_find(d, h);
    if (i < 0) i = ix_insert(d, h);
    dent *e = &d->slots[i];
    e->parent = *parent;
    e->state = (uint8_t)state;
    e->n_tokens = n_tokens;
    e->tok = xmalloc(4ull * (n_tokens ? n_tokens : 1));
    memcpy(e->tok, tokens, 4ull * n_tokens);
    return i;
}

/* Forgets a block (the file is already gone or going): its parent loses
 * a child, and entries left with neither a file nor children vanish. */
static void ix_drop_block(disk_store *d, long i) {
    dent *e = &d->slots[i];
    cache_hash parent = e->parent;
    int tail = is_tail(d, e->n_tokens);
    if (e->state == ST_PRESENT) d->st.files--, d->st.bytes -= e->bytes;
    free(e->tok);
    e->tok = NULL;
    if (e->n_children) {
        dent keep = {.h = e->h, .used = 1, .state = ST_GHOST, .n_children = e->n_children, .n_tails = e->n_tails};
        *e = keep;
    } else {
        ix_remove(d, (size_t)i);
    }
    long p = ix_find(d, &parent);
    if (p < 0) return;
    dent *pe = &d->slots[p];
    if (pe->n_children) pe->n_children--;
    if (tail && pe->n_tails) pe->n_tails--;
    if (pe->state == ST_GHOST && pe->n_children == 0) ix_remove(d, (size_t)p);
}

static uint16_t model_index(disk_store *d, const uint8_t fp[32]) {
    for (int i = 0; i < d->n_models; i++)
        if (memcmp(d->models[i], fp, 32) == 0) return (uint16_t)i;
    if (d->n_models == UINT16_MAX) return 0;
    d->models = xrealloc(d->models, (size_t)(d->n_models + 1) * 32);
    memcpy(d->models[d->n_models], fp, 32);
    return (uint16_t)d->n_models++;
}

/* ---- recency and hits ---- */

static double decayed_hits(const dent *e, double now) { return policy_decay(e->hits, now - e->last_use); }

static void note_use(disk_store *d, dent *e, int hit) {
    double now = now_wall();
    e->hits = decayed_hits(e, now) + (hit ? 1.0 : 0.0);
    e->last_use = now;
    e->fresh_until = now_mono() + protect_s(d);
}

/* The policy's order (policy_evict_key; lower goes first). The index
 * does not know a block's depth, so its value counts tokens, hits and
 * recency, not attention's share. */
static double evict_score(const dent *e, double now) {
    double value = policy_value(0, (int)e->n_tokens, 0, e->hits, now - e->last_use);
    return policy_evict_key(value, e->keep_until, now);
}

/* ---- quarantine ---- */

/* Moves a damaged file out of the way (DIR/quarantine/NAME.UNIXTIME) so it
 * is never indexed again but can still be examined; deletes it when even
 * that fails. Caller holds the lock (or is alone, at open). */
static void quarantine(disk_store *d, const char *path, const char *name, const char *why) {
    char dst[4400];
    d->st.quarantined++;
    if (d->o.read_only) {
        log_warn("disk cache: %s: %s; skipped (read-only, left in place)", path, why);
        return;
    }
    snprintf(dst, sizeof dst, "%s/%s/%s.%ld", d->dir, DISK_QUARANTINE, name, (long)time(NULL));
    if (rename(path, dst) == 0) {
        log_warn("disk cache: %s: %s; skipped, moved to %s", path, why, dst);
    } else {
        unlink(path);
        log_warn("disk cache: %s: %s; skipped and deleted (quarantine failed: %s)", path, why, strerror(errno));
    }
}

/* ---- eviction ---- */

typedef struct hitem {
    double score;
    cache_hash h;
} hitem;

typedef struct heap {
    hitem *a;
    size_t n, cap;
} heap;

static void heap_push(heap *hp, double score, const cache_hash *h) {
    if (hp->n == hp->cap) {
        hp->cap = hp->cap ? hp->cap * 2 : 64;
        hp->a = xrealloc(hp->a, hp->cap * sizeof(hitem));
    }
    size_t i = hp->n++;
    while (i && hp->a[(i - 1) / 2].score > score) {
        hp->a[i] = hp->a[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    hp->a[i] = (hitem){score, *h};
}

static hitem heap_pop(heap *hp) {
    hitem top = hp->a[0], last = hp->a[--hp->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= hp->n) break;
        if (c + 1 < hp->n && hp->a[c + 1].score < hp->a[c].score) c++;
        if (hp->a[c].score >= last.score) break;
        hp->a[i] = hp->a[c];
        i = c;
    }
    if (hp->n) hp->a[i] = last;
    return top;
}

static int evictable(const dent *e, double mono) {
    return e->used && e->state == ST_PRESENT && e->n_children == 0 && e->fresh_until <= mono;
}

/* Deletes one block's file and forgets it. The unlink happens under the
 * lock on purpose: a concurrent put of the same hash must not have its
 * new file deleted by an eviction decided before it. */
static void evict_one(disk_store *d, long i) {
    char path[4200];
    disk_file_path(d->dir, &d->slots[i].h, path, sizeof path, NULL, 0);
    if (unlink(path) && errno != ENOENT) log_warn("disk cache: evict %s: %s", path, strerror(errno));
    ix_drop_block(d, i);
    d->st.evicted++;
}

/* Leaf-first, lowest score first, never a protected block; a parent joins
 * the candidates once its last child is gone. Caller holds the lock. */
static uint64_t evict_locked(disk_store *d, uint64_t budget) {
    if (d->st.bytes <= budget) return 0;
    double wall = now_wall(), mono = now_mono();
    heap hp = {0};
    for (size_t i = 0; i < d->cap; i++)
        if (evictable(&d->slots[i], mono)) heap_push(&hp, evict_score(&d->slots[i], wall), &d->slots[i].h);
    uint64_t n = 0;
    while (d->st.bytes > budget && hp.n) {
        hitem it = heap_pop(&hp);
        long i = ix_find(d, &it.h);
        if (i < 0 || !evictable(&d->slots[i], mono)) continue;
        cache_hash parent = d->slots[i].parent;
        evict_one(d, i);
        n++;
        long p = ix_find(d, &parent);
        if (p >= 0 && evictable(&d->slots[p], mono)) heap_push(&hp, evict_score(&d->slots[p], wall), &parent);
    }
    if (d->st.bytes > budget)
        log_debug("disk cache: over budget by %llu bytes; the rest is recent or has children",
                  (unsigned long long)(d->st.bytes - budget));
    free(hp.a);
    return n;
}

/* ---- writer thread ---- */

/* After a write passes the budget, evict a little further (1/64 of the
 * budget, in whole blocks) so a store at its budget rescans its index
 * once per many writes, not on every one. Small budgets get no slack. */
static uint64_t low_water(const disk_store *d) {
    uint64_t fb = disk_file_bytes(d->o.block_tokens, d->o.block_bytes);
    return d->o.budget_bytes - (d->o.budget_bytes / 64 / fb) * fb;
}

static void note_write_error(disk_store *d, int sys_errno, const strata_err *e) {
    d->st.write_errors++;
    if (d->warned) {
        log_debug("disk cache: write dropped: %s", e->msg);
        return;
    }
    d->warned = 1;
    log_warn("disk cache: write failed (%s): %s; dropping disk writes that fail, serving from memory "
             "(warned once)", strerror(sys_errno), e->msg);
}

/* Records the outcome of one write. Caller holds the lock. */
static void finish_job(disk_store *d, djob *j, int rc, int sys_errno, const strata_err *e) {
    long i = ix_find(d, &j->h);
    uint64_t fbytes = disk_file_bytes(j->n_tokens, d->o.block_bytes);
    if (i >= 0 && d->slots[i].state == ST_PENDING) {
        dent *en = &d->slots[i];
        en->job = NULL;
        if (rc == 0) {
            en->state = ST_PRESENT;
            en->bytes = fbytes;
            note_use(d, en, 0); /* just written: protected */
            d->st.files++, d->st.bytes += fbytes;
        } else {
            ix_drop_block(d, i);
        }
    }
    if (rc == 0) d->st.writes++, d->st.write_bytes += fbytes;
    else note_write_error(d, sys_errno, e);
    d->st.pending--;
    d->st.pending_bytes -= d->o.block_bytes;
    free(j);
}

static void write_job(disk_store *d, djob *j, unsigned seq) {
    disk_hdr h = {.version = DISK_FORMAT_VERSION, .kv_dtype = d->o.kv_dtype,
                  .n_tokens = j->n_tokens, .payload_bytes = d->o.block_bytes,
                  .hash = j->h, .parent = j->parent};
    memcpy(h.model_fp, d->o.model_fp, 32);
    strata_err e = {0};
    int sys_errno = 0;
    int rc = disk_file_write(d->dir, &h, j->tokens, j->kv, seq, &sys_errno, &e);
    pthread_mutex_lock(&d->mu);
    finish_job(d, j, rc, sys_errno, &e);
    if (d->o.budget_bytes && d->st.bytes > d->o.budget_bytes) evict_locked(d, low_water(d));
    d->busy = 0;
    if (!d->head) pthread_cond_broadcast(&d->cv_idle);
}

static void *writer_main(void *arg) {
    disk_store *d = arg;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while (!d->head && !d->stop) pthread_cond_wait(&d->cv_work, &d->mu);
        if (!d->head) break; /* stopping and drained */
        djob *j = d->head;
        d->head = j->next;
        if (!d->head) d->tail = NULL;
        d->busy = 1;
        unsigned seq = d->seq++;
        pthread_mutex_unlock(&d->mu);
        write_job(d, j, seq); /* returns with the lock held */
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

/* ---- open: rebuild the index from headers ---- */

static int pid_alive(long pid) {
    return pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM);
}

/* A temp file is a leftover when its writer is dead or it is very old.
 * Our own pid counts as dead: this store's writer has not started yet. */
static void clean_tmp(disk_store *d, const disk_dirent *e) {
    struct stat st;
    if (stat(e->path, &st)) return;
    int old = time(NULL) - st.st_mtime > STALE_TMP_S;
    if (!old && e->tmp_pid != (long)getpid() && pid_alive(e->tmp_pid)) return;
    if (unlink(e->path) == 0) d->st.temp_removed++;
}

/* 1 when the header belongs to this store (model, geometry). A tail
 * holds fewer than B tokens in a whole block's payload. */
static int header_is_ours(const disk_store *d, const disk_hdr *h) {
    if (d->o.all_models) return 1;
    return memcmp(h->model_fp, d->o.model_fp, 32) == 0 && h->n_tokens >= 1 && h->n_tokens <= d->o.block_tokens &&
           h->payload_bytes == d->o.block_bytes && h->kv_dtype == d->o.kv_dtype;
}

static void index_file(disk_store *d, const disk_hdr *h, const int32_t *tokens, const struct stat *st) {
    long i = ix_add_block(d, &h->hash, &h->parent, ST_PRESENT, tokens, h->n_tokens);
    dent *en = &d->slots[i];
    en->bytes = (uint64_t)st->st_size;
    en->model = model_index(d, h->model_fp);
    en->last_use = (double)st->st_mtim.tv_sec + st->st_mtim.tv_nsec / 1e9;
    d->st.files++, d->st.bytes += en->bytes;
}

static int scan_one(void *ctx, const disk_dirent *e) {
    disk_store *d = ctx;
    if (e->is_tmp) {
        if (!d->o.read_only) clean_tmp(d, e);
        return 0;
    }
    strata_err err = {0};
    disk_hdr h;
    struct stat st;
    int fd = open(e->path, O_RDONLY | O_CLOEXEC);
    int rc = fd < 0 ? strata_errf(&err, STRATA_EIO, "cannot open: %s", strerror(errno))
             : fstat(fd, &st) ? strata_errf(&err, STRATA_EIO, "stat: %s", strerror(errno))
                              : disk_file_read_header(fd, (uint64_t)st.st_size, &h, d->scan_tok, &err);
    if (fd >= 0) close(fd);
    if (!rc && memcmp(h.hash.b, e->hash.b, 32) != 0) rc = strata_errf(&err, STRATA_EFORMAT, "header names another block");
    if (rc == STRATA_EUNSUPPORTED || (!rc && !header_is_ours(d, &h))) d->st.foreign++;
    else if (rc == STRATA_EFORMAT) quarantine(d, e->path, e->name, err.msg);
    else if (rc) log_warn("disk cache: %s: %s; skipped", e->path, err.msg);
    else index_file(d, &h, d->scan_tok, &st);
    return 0;
}

/* Hit counts and recency go to the usage file, so the next run's
 * eviction order starts where this one left off. */
static void save_usage(disk_store *d) {
    if (!d->has_thread) return; /* tool, read-only, or never fully opened */
    disk_usage_rec *r = xmalloc((d->st.files + 1) * sizeof *r);
    size_t n = 0;
    for (size_t i = 0; i < d->cap && n <= d->st.files; i++) {
        const dent *e = &d->slots[i];
        if (e->used && e->state == ST_PRESENT) r[n++] = (disk_usage_rec){e->h, e->hits, e->last_use, e->keep_until};
    }
    strata_err err = {0};
    if (disk_usage_write(d->dir, d->o.model_fp, r, n, &err)) log_warn("disk cache: %s; hit counts not kept", err.msg);
    free(r);
}

static void load_usage_one(void *ctx, const disk_usage_rec *r) {
    disk_store *d = ctx;
    long i = ix_find(d, &r->hash);
    if (i < 0 || d->slots[i].state != ST_PRESENT || !(r->hits >= 0) || !(r->last_use >= 0)) return;
    dent *e = &d->slots[i];
    if (r->last_use > e->last_use) e->last_use = r->last_use;
    e->hits = policy_decay(r->hits, e->last_use - r->last_use);
    if (r->keep_until > e->keep_until) e->keep_until = r->keep_until;
}

/* Creates the directory tree and proves it is writable. */
static int prepare_dir(disk_store *d, strata_err *err) {
    char q[4200];
    struct stat st;
    if (d->o.read_only) {
        if (stat(d->dir, &st) || !S_ISDIR(st.st_mode))
            return strata_errf(err, STRATA_EIO, "disk cache %s: no such directory", d->dir);
        return 0;
    }
    if (fs_mkdir_p(d->dir))
        return strata_errf(err, STRATA_EIO, "disk cache %s: cannot create: %s", d->dir, strerror(errno));
    snprintf(q, sizeof q, "%s/.probe-%ld", d->dir, (long)getpid());
    int fd = open(q, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return strata_errf(err, STRATA_EIO, "disk cache %s: not writable: %s", d->dir, strerror(errno));
    close(fd);
    unlink(q);
    snprintf(q, sizeof q, "%s/%s", d->dir, DISK_QUARANTINE);
    if (mkdir(q, 0755) && errno != EEXIST)
        return strata_errf(err, STRATA_EIO, "disk cache %s: cannot create: %s", q, strerror(errno));
    return 0;
}

static int check_opts(const disk_opts *o, strata_err *err) {
    if (!o || !o->dir || !*o->dir) return strata_errf(err, STRATA_EINVAL, "disk cache: no directory given");
    if (strlen(o->dir) > 3000) return strata_errf(err, STRATA_EINVAL, "disk cache: directory path too long");
    if (o->all_models) return 0;
    if (!o->block_tokens || o->block_tokens > DISK_MAX_TOKENS || !o->block_bytes)
        return strata_errf(err, STRATA_EINVAL, "disk cache: bad block geometry (%u tokens, %llu bytes)",
                           o->block_tokens, (unsigned long long)o->block_bytes);
    return 0;
}

static disk_store *store_new(const disk_opts *o) {
    disk_store *d = xcalloc(1, sizeof *d);
    d->o = *o;
    d->dir = xstrdup(o->dir);
    d->o.dir = d->dir;
    if (!d->o.max_pending_bytes) d->o.max_pending_bytes = PENDING_DEFAULT;
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv_work, NULL);
    pthread_cond_init(&d->cv_idle, NULL);
    ix_grow(d);
    if (!o->all_models) model_index(d, o->model_fp);
    return d;
}

int disk_open(disk_store **out, const disk_opts *o, strata_err *err) {
    *out = NULL;
    int rc = check_opts(o, err);
    if (rc) return rc;
    disk_store *d = store_new(o);
    if (!rc) rc = prepare_dir(d, err);
    d->scan_tok = xmalloc(4ull * DISK_MAX_TOKENS);
    if (!rc) rc = disk_file_scan(d->dir, scan_one, d, err);
    free(d->scan_tok);
    d->scan_tok = NULL;
    if (!rc) disk_usage_read(d->dir, o->all_models ? NULL : o->model_fp, load_usage_one, d);
    if (!rc && o->budget_bytes && !o->read_only) evict_locked(d, o->budget_bytes); /* it may have shrunk */
    if (!rc && !o->read_only && !o->all_models) {
        if (pthread_create(&d->thread, NULL, writer_main, d) == 0) d->has_thread = 1;
        else rc = strata_errf(err, STRATA_EIO, "disk cache: cannot start the writer thread");
    }
    if (rc) {
        disk_close(d);
        return rc;
    }
    log_info("disk cache dir=%s files=%llu bytes=%llu foreign=%llu quarantined=%llu temp_removed=%llu",
             d->dir, (unsigned long long)d->st.files, (unsigned long long)d->st.bytes,
             (unsigned long long)d->st.foreign, (unsigned long long)d->st.quarantined,
             (unsigned long long)d->st.temp_removed);
    *out = d;
    return 0;
}

void disk_close(disk_store *d) {
    if (!d) return;
    if (d->has_thread) {
        pthread_mutex_lock(&d->mu);
        d->stop = 1;
        pthread_cond_signal(&d->cv_work);
        pthread_mutex_unlock(&d->mu);
        pthread_join(d->thread, NULL);
    }
    save_usage(d);
    for (djob *j = d->head, *n; j; j = n) n = j->next, free(j); /* none after a drain */
    for (size_t i = 0; i < d->cap; i++)
        if (d->slots[i].used) free(d->slots[i].tok);
    pthread_cond_destroy(&d->cv_idle);
    pthread_cond_destroy(&d->cv_work);
    pthread_mutex_destroy(&d->mu);
    free(d->slots);
    free(d->models);
    free(d->dir);
    free(d);
}

/* ---- the hot-path calls ---- */

int disk_has(disk_store *d, const cache_hash *h) {
    pthread_mutex_lock(&d->mu);
    long i = ix_find(d, h);
    int has = i >= 0 && d->slots[i].state != ST_GHOST;
    pthread_mutex_unlock(&d->mu);
    return has;
}

static djob *job_new(const disk_store *d, const cache_hash *h, const cache_hash *parent,
                     const int32_t *tokens, uint32_t n_tokens, const void *kv) {
    size_t tb = 4ull * n_tokens;
    djob *j = malloc(sizeof *j + tb + d->o.block_bytes);
    if (!j) return NULL;
    j->next = NULL;
    j->h = *h;
    j->parent = *parent;
    j->n_tokens = n_tokens;
    j->tokens = (int32_t *)(j + 1);
    j->kv = (uint8_t *)j->tokens + tb;
    memcpy(j->tokens, tokens, tb);
    memcpy(j->kv, kv, d->o.block_bytes);
    return j;
}

/* 1 when h need not be queued (stored, queued, or no room). Locked. */
static int put_refused(disk_store *d, const cache_hash *h, int *rc) {
    long i = ix_find(d, h);
    *rc = 0;
    if (i >= 0 && d->slots[i].state != ST_GHOST) return 1;
    if (d->st.pending_bytes + d->o.block_bytes > d->o.max_pending_bytes) {
        d->st.dropped++;
        *rc = STRATA_EBUSY;
        return 1;
    }
    return 0;
}

int disk_put(disk_store *d, const cache_hash *h, const cache_hash *parent, const int32_t *tokens,
             const void *kv) {
    return disk_put_n(d, h, parent, tokens, d->o.block_tokens, kv);
}

int disk_put_n(disk_store *d, const cache_hash *h, const cache_hash *parent, const int32_t *tokens, int n_tokens,
               const void *kv) {
    if (!d->has_thread) return STRATA_EINVAL; /* read-only or tool store */
    if (n_tokens < 1 || (uint32_t)n_tokens > d->o.block_tokens) return STRATA_EINVAL;
    int rc;
    pthread_mutex_lock(&d->mu);
    int refused = put_refused(d, h, &rc);
    pthread_mutex_unlock(&d->mu);
    if (refused) return rc;
    djob *j = job_new(d, h, parent, tokens, (uint32_t)n_tokens, kv); /* the copy, outside the lock */
    if (!j) return STRATA_ENOMEM;
    pthread_mutex_lock(&d->mu);
    if (put_refused(d, h, &rc)) { /* another thread queued it meanwhile */
        pthread_mutex_unlock(&d->mu);
        free(j);
        return rc;
    }
    long i = ix_add_block(d, h, parent, ST_PENDING, tokens, (uint32_t)n_tokens);
    d->slots[i].job = j;
    d->slots[i].model = 0;
    d->slots[i].last_use = now_wall();
    if (d->tail) d->tail->next = j;
    else d->head = j;
    d->tail = j;
    d->st.pending++;
    d->st.pending_bytes += d->o.block_bytes;
    pthread_cond_signal(&d->cv_work);
    pthread_mutex_unlock(&d->mu);
    return 0;
}

/* A queued block is served from its copy. Locked. */
static void get_pending(disk_store *d, dent *e, void *dst, int32_t *tokens_out) {
    memcpy(dst, e->job->kv, d->o.block_bytes);
    if (tokens_out) memcpy(tokens_out, e->job->tokens, 4ull * e->n_tokens);
    note_use(d, e, 1);
    d->st.reads++;
}

/* After a file read: count it, or forget/quarantine what failed. Locked. */
static void get_finish(disk_store *d, const cache_hash *h, int rc, const char *path, const strata_err *e) {
    long i = ix_find(d, h);
    if (rc == 0) {
        d->st.reads++;
        d->st.read_bytes += d->o.block_bytes;
        return;
    }
    if (i < 0 || d->slots[i].state != ST_PRESENT) return; /* evicted meanwhile */
    if (rc == STRATA_EFORMAT) {
        char hex[65], name[80];
        cache_hash_hex(h, hex);
        snprintf(name, sizeof name, "%s.kv", hex);
        quarantine(d, path, name, e->msg);
    }
    ix_drop_block(d, i); /* unreadable or gone: a miss from now on */
}

int disk_get(disk_store *d, const cache_hash *h, void *dst, int32_t *tokens_out, strata_err *err) {
    char path[4200], hex[65];
    cache_hash_hex(h, hex);
    if (d->o.all_models) return strata_errf(err, STRATA_EINVAL, "disk cache: get on a tool store");
    pthread_mutex_lock(&d->mu);
    long i = ix_find(d, h);
    int state = i >= 0 ? d->slots[i].state : ST_GHOST;
    uint32_t n_tokens = i >= 0 ? d->slots[i].n_tokens : 0;
    if (state == ST_PENDING) get_pending(d, &d->slots[i], dst, tokens_out);
    if (state == ST_PRESENT) note_use(d, &d->slots[i], 1); /* protected while we read */
    pthread_mutex_unlock(&d->mu);
    if (state == ST_PENDING) return 0;
    if (state == ST_GHOST) return strata_errf(err, STRATA_EIO, "disk block %.12s: not stored", hex);
    disk_file_path(d->dir, h, path, sizeof path, NULL, 0);
    disk_expect ex = {.hash = h, .model_fp = d->o.model_fp, .n_tokens = n_tokens,
                      .kv_dtype = d->o.kv_dtype, .payload_bytes = d->o.block_bytes};
    disk_hdr hdr;
    strata_err e = {0};
    int rc = disk_file_load(path, &ex, &hdr, tokens_out, dst, d->o.block_bytes, &e);
    pthread_mutex_lock(&d->mu);
    get_finish(d, h, rc, path, &e);
    pthread_mutex_unlock(&d->mu);
    if (rc) memset(dst, 0, d->o.block_bytes); /* a failed read leaves nothing usable behind */
    if (rc == STRATA_EFORMAT)
        return strata_errf(err, rc, "disk block %.12s: %s; quarantined, not loaded", hex, e.msg);
    if (rc) return strata_errf(err, rc, "disk block %.12s: %s; skipped", hex, e.msg);
    return 0;
}

typedef struct get_batch {
    disk_store *d;
    const cache_hash *h;
    void *const *dst;
    int32_t *const *tokens;
    int *rc;
    int n;
    atomic_int next;
} get_batch;

static void *get_worker(void *arg) {
    get_batch *g = arg;
    for (int i; (i = atomic_fetch_add(&g->next, 1)) < g->n;) {
        strata_err err = {0};
        g->rc[i] = disk_get(g->d, &g->h[i], g->dst[i], g->tokens ? g->tokens[i] : NULL, &err);
    }
    return NULL;
}

/* Starts the device on every file of the run, in order, ahead of the
 * readers: each reader waits for its file (a small header read, then the
 * payload), then faults, copies and checksums it, so with only the
 * readers' own reads the device idles between files. WILLNEED blocks
 * when the device queue is full, so this runs at the device's pace. */
static void *prefetch_main(void *arg) {
    get_batch *g = arg;
    char path[4200];
    for (int i = 0; i < g->n; i++) {
        if (i < atomic_load(&g->next)) continue; /* a reader is on it already */
        disk_file_path(g->d->dir, &g->h[i], path, sizeof path, NULL, 0);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue; /* queued or gone: disk_get sorts it out */
        posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED);
        close(fd);
    }
    return NULL;
}

int disk_get_many(disk_store *d, const cache_hash *h, void *const *dst, int32_t *const *tokens_out, int n, int *rc) {
    get_batch g = {d, h, dst, tokens_out, rc, n, 0};
    pthread_t th[DISK_READERS], pf;
    int n_th = 0, has_pf = n > 1 && pthread_create(&pf, NULL, prefetch_main, &g) == 0;
    /* This thread reads too; helpers only when there is more than a block. */
    while (n_th < DISK_READERS - 1 && n_th + 1 < n && pthread_create(&th[n_th], NULL, get_worker, &g) == 0) n_th++;
    get_worker(&g);
    for (int i = 0; i < n_th; i++) pthread_join(th[i], NULL);
    if (has_pf) pthread_join(pf, NULL);
    int ok = 0;
    while (ok < n && rc[ok] == 0) ok++;
    return ok;
}

void disk_touch(disk_store *d, const cache_hash *h) {
    pthread_mutex_lock(&d->mu);
    long i = ix_find(d, h);
    if (i >= 0 && d->slots[i].state != ST_GHOST) note_use(d, &d->slots[i], 1);
    pthread_mutex_unlock(&d->mu);
}

void disk_retain(disk_store *d, const cache_hash *h, double ttl_s) {
    double until = now_wall() + ttl_s;
    pthread_mutex_lock(&d->mu);
    long i = ix_find(d, h);
    if (i >= 0 && d->slots[i].state != ST_GHOST && until > d->slots[i].keep_until) d->slots[i].keep_until = until;
    pthread_mutex_unlock(&d->mu);
}

double disk_retained_s(disk_store *d, const cache_hash *h) {
    double now = now_wall(), left = 0;
    pthread_mutex_lock(&d->mu);
    long i = ix_find(d, h);
    if (i >= 0 && d->slots[i].state != ST_GHOST && d->slots[i].keep_until > now) left = d->slots[i].keep_until - now;
    pthread_mutex_unlock(&d->mu);
    return left;
}

/* Token ids of e shared with tokens[0..n). */
static int common_prefix(const dent *e, const int32_t *tokens, int n) {
    return mem_common_prefix_i32(e->tok, (int)e->n_tokens, tokens, n);
}

/* 1 when e is a stored or queued block continuing parent. */
static int child_of(const dent *e, const cache_hash *parent) {
    return e->used && e->state != ST_GHOST && e->tok && memcmp(e->parent.b, parent->b, 32) == 0;
}

int disk_best_child(disk_store *d, const cache_hash *parent, const int32_t *tokens, int n, cache_hash *h,
                    int *n_tokens) {
    int best = 0;
    pthread_mutex_lock(&d->mu);
    long p = ix_find(d, parent);
    /* A full scan, but only where something continues parent. */
    for (size_t i = 0; p >= 0 && d->slots[p].n_children && i < d->cap; i++) {
        const dent *e = &d->slots[i];
        if (!child_of(e, parent)) continue;
        int m = common_prefix(e, tokens, n);
        if (m > best) best = m, *h = e->h, *n_tokens = (int)e->n_tokens;
    }
    pthread_mutex_unlock(&d->mu);
    return best;
}

int disk_drop_tails(disk_store *d, const cache_hash *parent, const int32_t *tokens, int n) {
    char path[4200];
    cache_hash *gone = NULL;
    size_t n_gone = 0;
    pthread_mutex_lock(&d->mu);
    long p = ix_find(d, parent);
    for (size_t i = 0; p >= 0 && d->slots[p].n_tails && i < d->cap; i++) {
        const dent *e = &d->slots[i];
        if (!child_of(e, parent) || e->state != ST_PRESENT || e->n_children || (int)e->n_tokens >= n ||
            common_prefix(e, tokens, n) < (int)e->n_tokens)
            continue;
        gone = xrealloc(gone, (n_gone + 1) * sizeof *gone);
        gone[n_gone++] = e->h;
    }
    /* Dropped after the scan: a deletion moves other entries. */
    for (size_t k = 0; k < n_gone; k++) {
        long i = ix_find(d, &gone[k]);
        disk_file_path(d->dir, &gone[k], path, sizeof path, NULL, 0);
        if (unlink(path) && errno != ENOENT) log_warn("disk cache: drop %s: %s", path, strerror(errno));
        ix_drop_block(d, i);
        d->st.superseded++;
    }
    pthread_mutex_unlock(&d->mu);
    free(gone);
    return (int)n_gone;
}

void disk_flush(disk_store *d) {
    pthread_mutex_lock(&d->mu);
    while (d->has_thread && (d->head || d->busy)) pthread_cond_wait(&d->cv_idle, &d->mu);
    pthread_mutex_unlock(&d->mu);
}

void disk_get_stats(disk_store *d, disk_stats *out) {
    pthread_mutex_lock(&d->mu);
    *out = d->st;
    pthread_mutex_unlock(&d->mu);
}

/* ---- tools ---- */

uint64_t disk_evict_to(disk_store *d, uint64_t budget_bytes) {
    pthread_mutex_lock(&d->mu);
    d->o.budget_bytes = budget_bytes;
    uint64_t n = d->o.read_only ? 0 : evict_locked(d, budget_bytes);
    pthread_mutex_unlock(&d->mu);
    return n;
}

void disk_foreach(disk_store *d, void (*fn)(void *ctx, const disk_block_info *b), void *ctx) {
    pthread_mutex_lock(&d->mu);
    double now = now_wall();
    for (size_t i = 0; i < d->cap; i++) {
        const dent *e = &d->slots[i];
        if (!e->used || e->state == ST_GHOST) continue;
        long p = ix_find(d, &e->parent);
        disk_block_info b = {.hash = e->h, .parent = e->parent, .n_tokens = e->n_tokens,
                             .n_children = e->n_children, .bytes = e->bytes, .last_use = e->last_use,
                             .hits = decayed_hits(e, now), .pending = e->state == ST_PENDING,
                             .parent_stored = p >= 0 && d->slots[p].state != ST_GHOST};
        memcpy(b.model_fp, d->models[e->model], 32);
        fn(ctx, &b);
    }
    pthread_mutex_unlock(&d->mu);
}

int disk_verify(disk_store *d, const cache_hash *h, strata_err *err) {
    char path[4200], hex[65];
    cache_hash_hex(h, hex);
    pthread_mutex_lock(&d->mu);
    long i = ix_find(d, h);
    dent e = i >= 0 ? d->slots[i] : (dent){0};
    pthread_mutex_unlock(&d->mu);
    if (e.state != ST_PRESENT) return strata_errf(err, STRATA_EIO, "disk block %.12s: not stored", hex);
    uint64_t payload = e.bytes - disk_file_bytes(e.n_tokens, 0);
    void *buf = xmalloc(payload ? payload : 1);
    disk_file_path(d->dir, h, path, sizeof path, NULL, 0);
    disk_expect ex = {.hash = h, .model_fp = d->models[e.model], .n_tokens = e.n_tokens, .payload_bytes = payload};
    disk_hdr hdr;
    strata_err fe = {0};
    int rc = disk_file_load(path, &ex, &hdr, NULL, buf, payload, &fe);
    free(buf);
    pthread_mutex_lock(&d->mu);
    get_finish(d, h, rc, path, &fe);
    pthread_mutex_unlock(&d->mu);
    if (rc) return strata_errf(err, rc, "%s: %s", path, fe.msg);
    return 0;
}

typedef struct purge_ctx {
    uint64_t n;
} purge_ctx;

static int purge_one(void *ctx, const disk_dirent *e) {
    if (unlink(e->path) == 0) ((purge_ctx *)ctx)->n++;
    return 0;
}

int disk_purge(const char *dir, uint64_t *n_files, strata_err *err) {
    purge_ctx pc = {0};
    *n_files = 0;
    int rc = disk_file_scan(dir, purge_one, &pc, err);
    if (rc) return rc;
    char q[4200], f[4600];
    snprintf(q, sizeof q, "%s/%s", dir, DISK_QUARANTINE);
    DIR *dp = opendir(q);
    for (struct dirent *de; dp && (de = readdir(dp));) {
        if (de->d_name[0] == '.') continue;
        snprintf(f, sizeof f, "%s/%s", q, de->d_name);
        if (unlink(f) == 0) pc.n++;
    }
    if (dp) closedir(dp);
    dp = opendir(dir); /* usage files describe blocks that are gone now */
    for (struct dirent *de; dp && (de = readdir(dp));) {
        if (strncmp(de->d_name, "usage-", 6) != 0) continue;
        snprintf(f, sizeof f, "%s/%s", dir, de->d_name);
        unlink(f);
    }
    if (dp) closedir(dp);
    *n_files = pc.n;
    return 0;
}
