/* disk.c - the disk tier's store: index, background writer, eviction,
 * quarantine (see disk.h; the file format is in disk_file.c).
 *
 * The index is an open-addressing hash table keyed by block hash. Besides
 * stored and queued blocks it holds "ghost" entries: hashes that are not
 * stored but are the parent of something that is (a prompt's root, or a
 * block lost to quarantine). Each entry counts its children, so "is a
 * leaf" is one lookup and a parent joins the eviction candidates the
 * moment its last child goes, whatever order files were found in.
 * Eviction follows the policy's one order (policy_evict_key). The writer
 * queue and the readers are in disk_io.c, `strata cache`'s maintenance in
 * disk_tools.c.
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
#include "cache/disk_int.h"

/* ---- time ---- */

double disk__now_wall(void) {
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
    return (d->o.protect_ms ? d->o.protect_ms : POLICY_PROTECT_MS) / 1000.0;
}

/* ---- index: linear probing, backward-shift deletion ---- */

static size_t home_slot(const disk_store *d, const cache_hash *h) {
    uint64_t k;
    memcpy(&k, h->b, 8); /* SHA-256 bytes are already uniform */
    return (size_t)k & (d->cap - 1);
}

long disk__ix_find(const disk_store *d, const cache_hash *h) {
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
    return disk__ix_find(d, h);
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
long disk__ix_add_block(disk_store *d, const cache_hash *h, const cache_hash *parent, int state, const int32_t *tokens,
                         uint32_t n_tokens) {
    long p = disk__ix_find(d, parent);
    if (p < 0) p = ix_insert(d, parent);
    d->slots[p].n_children++;
    d->slots[p].n_tails += is_tail(d, n_tokens);
    long i = disk__ix_find(d, h);
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
void disk__ix_drop_block(disk_store *d, long i) {
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
    long p = disk__ix_find(d, &parent);
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

double disk__decayed_hits(const dent *e, double now) { return policy_decay(e->hits, now - e->last_use); }

void disk__note_use(disk_store *d, dent *e, int hit) {
    double now = disk__now_wall();
    e->hits = disk__decayed_hits(e, now) + (hit ? 1.0 : 0.0);
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

/* ---- disk__quarantine ---- */

/* Moves a damaged file out of the way (DIR/disk__quarantine/NAME.UNIXTIME) so it
 * is never indexed again but can still be examined; deletes it when even
 * that fails. Caller holds the lock (or is alone, at open). */
void disk__quarantine(disk_store *d, const char *path, const char *name, const char *why) {
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
        log_warn("disk cache: %s: %s; skipped and deleted (disk__quarantine failed: %s)", path, why, strerror(errno));
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
    XGROW(hp->a, hp->cap, hp->n + 1, 64);
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
    disk__snap_drop_on(d, &d->slots[i].h); /* snapshots need it: they go too */
    disk__ix_drop_block(d, i);
    d->st.evicted++;
}

/* Leaf-first, lowest score first, never a protected block; a parent joins
 * the candidates once its last child is gone. Caller holds the lock. */
uint64_t disk__evict_locked(disk_store *d, uint64_t budget) {
    if (d->st.bytes <= budget) return 0;
    double wall = disk__now_wall(), mono = now_mono();
    heap hp = {0};
    for (size_t i = 0; i < d->cap; i++)
        if (evictable(&d->slots[i], mono)) heap_push(&hp, evict_score(&d->slots[i], wall), &d->slots[i].h);
    uint64_t n = 0;
    while (d->st.bytes > budget && hp.n) {
        hitem it = heap_pop(&hp);
        long i = disk__ix_find(d, &it.h);
        if (i < 0 || !evictable(&d->slots[i], mono)) continue;
        cache_hash parent = d->slots[i].parent;
        evict_one(d, i);
        n++;
        long p = disk__ix_find(d, &parent);
        if (p >= 0 && evictable(&d->slots[p], mono)) heap_push(&hp, evict_score(&d->slots[p], wall), &parent);
    }
    if (d->st.bytes > budget)
        log_debug("disk cache: over budget by %llu bytes; the rest is recent or has children",
                  (unsigned long long)(d->st.bytes - budget));
    free(hp.a);
    return n;
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

/* 1 when h is a KV block (not a snapshot) stored as another KV type than
 * ours: written by a server with another --kv-type. Its fingerprint
 * differs too (the type is in the numerics), so it is never asked for;
 * counted to say why a cache that looks warm is not used. */
static int other_kv_type(const disk_store *d, const disk_hdr *h) {
    return !d->o.all_models && h->kv_dtype != DISK_STATE_F32 && h->kv_dtype != d->o.kv_dtype;
}

static void index_file(disk_store *d, const disk_hdr *h, const int32_t *tokens, const struct stat *st) {
    long i = disk__ix_add_block(d, &h->hash, &h->parent, ST_PRESENT, tokens, h->n_tokens);
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
    uint64_t size = 0;
    int fd = disk_file_open(e->path, &size, &err);
    int rc = fd < 0 ? fd
             : fstat(fd, &st) ? strata_errf(&err, STRATA_EIO, "stat: %s", strerror(errno))
                              : disk_file_read_header(fd, size, &h, d->scan_tok, &err);
    if (fd >= 0) close(fd);
    if (!rc && memcmp(h.hash.b, e->hash.b, 32) != 0) rc = strata_errf(&err, STRATA_EFORMAT, "header names another block");
    if (rc == STRATA_EUNSUPPORTED || (!rc && !header_is_ours(d, &h))) {
        d->st.foreign++;
        if (!rc && other_kv_type(d, &h)) d->st.other_kv_type++, d->st.other_kv_dtype = h.kv_dtype;
    }
    else if (rc == STRATA_EFORMAT) disk__quarantine(d, e->path, e->name, err.msg);
    else if (rc) log_warn("disk cache: %s: %s; skipped", e->path, err.msg);
    else index_file(d, &h, d->scan_tok, &st);
    return 0;
}

/* Hit counts and recency go to the usage file, so the next run's
 * eviction order starts where this one left off. */
static void save_usage(disk_store *d) {
    if (!d->has_thread) return; /* tool, read-only, or never fully opened */
    disk_usage_rec *r = xmalloc((d->st.files + 1 + d->n_snaps) * sizeof *r);
    size_t n = 0;
    for (size_t i = 0; i < d->cap && n <= d->st.files; i++) {
        const dent *e = &d->slots[i];
        if (e->used && e->state == ST_PRESENT) r[n++] = (disk_usage_rec){e->h, e->hits, e->last_use, e->keep_until};
    }
    n += disk__snap_usage(d, r + n); /* snapshots' marks: the same records, named by their key */
    strata_err err = {0};
    if (disk_usage_write(d->dir, d->o.model_fp, r, n, &err)) log_warn("disk cache: %s; hit counts not kept", err.msg);
    free(r);
}

static void load_usage_one(void *ctx, const disk_usage_rec *r) {
    disk_store *d = ctx;
    long i = disk__ix_find(d, &r->hash);
    if (i < 0 && disk__snap_usage_load(d, r)) return;
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
    if (!rc && !o->all_models) disk__snap_scan(d); /* first: the usage file carries snapshots' marks */
    if (!rc) disk_usage_read(d->dir, o->all_models ? NULL : o->model_fp, load_usage_one, d);
    if (!rc && o->budget_bytes && !o->read_only) disk__evict_locked(d, o->budget_bytes); /* it may have shrunk */
    if (!rc && !o->read_only && !o->all_models) {
        if (pthread_create(&d->thread, NULL, disk__writer_main, d) == 0) d->has_thread = 1;
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
    free(d->snaps);
    free(d->models);
    free(d->dir);
    free(d);
}

/* ---- the hot-path calls ---- */

int disk_has(disk_store *d, const cache_hash *h) {
    pthread_mutex_lock(&d->mu);
    long i = disk__ix_find(d, h);
    int has = i >= 0 && d->slots[i].state != ST_GHOST;
    pthread_mutex_unlock(&d->mu);
    return has;
}

void disk_touch(disk_store *d, const cache_hash *h) {
    pthread_mutex_lock(&d->mu);
    long i = disk__ix_find(d, h);
    if (i >= 0 && d->slots[i].state != ST_GHOST) disk__note_use(d, &d->slots[i], 1);
    pthread_mutex_unlock(&d->mu);
}

void disk_retain(disk_store *d, const cache_hash *h, double ttl_s) {
    double until = disk__now_wall() + ttl_s;
    pthread_mutex_lock(&d->mu);
    long i = disk__ix_find(d, h);
    if (i >= 0 && d->slots[i].state != ST_GHOST && until > d->slots[i].keep_until) d->slots[i].keep_until = until;
    pthread_mutex_unlock(&d->mu);
}

double disk_retained_s(disk_store *d, const cache_hash *h) {
    double now = disk__now_wall(), left = 0;
    pthread_mutex_lock(&d->mu);
    long i = disk__ix_find(d, h);
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
    long p = disk__ix_find(d, parent);
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
    long p = disk__ix_find(d, parent);
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
        long i = disk__ix_find(d, &gone[k]);
        disk_file_path(d->dir, &gone[k], path, sizeof path, NULL, 0);
        if (unlink(path) && errno != ENOENT) log_warn("disk cache: drop %s: %s", path, strerror(errno));
        disk__ix_drop_block(d, i);
        d->st.superseded++;
    }
    pthread_mutex_unlock(&d->mu);
    free(gone);
    return (int)n_gone;
}

void disk_get_stats(disk_store *d, disk_stats *out) {
    pthread_mutex_lock(&d->mu);
    *out = d->st;
    pthread_mutex_unlock(&d->mu);
}

