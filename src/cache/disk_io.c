/* disk_io.c - the disk tier's I/O (see disk.h): the bounded write queue
 * and its writer thread (temp file, fsync, rename, eviction past the
 * budget), puts, and reads: one block, or a run by DISK_READERS threads
 * with a prefetch thread starting the device ahead of them. */
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
    d->writing = NULL;
    d->st.pending--;
    d->st.pending_bytes -= j->payload;
    if (j->snap) { /* not indexed: the store's snapshot table knows it */
        uint64_t fb = disk_file_bytes(j->n_tokens, j->payload);
        if (rc == 0) d->st.snap_writes++, d->st.snap_write_bytes += fb, disk__snap_note(d, &j->h, &j->parent, j->n_tokens, fb, j->keep_until);
        else note_write_error(d, sys_errno, e);
        free(j);
        return;
    }
    long i = disk__ix_find(d, &j->h);
    uint64_t fbytes = disk_file_bytes(j->n_tokens, d->o.block_bytes);
    if (i >= 0 && d->slots[i].state == ST_PENDING) {
        dent *en = &d->slots[i];
        en->job = NULL;
        if (rc == 0) {
            en->state = ST_PRESENT;
            en->bytes = fbytes;
            disk__note_use(d, en, 0); /* just written: protected */
            d->st.files++, d->st.bytes += fbytes;
        } else {
            disk__ix_drop_block(d, i);
        }
    }
    if (rc == 0) d->st.writes++, d->st.write_bytes += fbytes;
    else note_write_error(d, sys_errno, e);
    free(j);
}

static void write_job(disk_store *d, djob *j, unsigned seq) {
    disk_hdr h = {.version = DISK_FORMAT_VERSION, .kv_dtype = j->snap ? DISK_STATE_F32 : d->o.kv_dtype,
                  .n_tokens = j->n_tokens, .payload_bytes = j->payload,
                  .hash = j->h, .parent = j->parent};
    memcpy(h.model_fp, d->o.model_fp, 32);
    strata_err e = {0};
    int sys_errno = 0;
    int rc = disk_file_write(d->dir, &h, j->tokens, j->kv, seq, &sys_errno, &e);
    pthread_mutex_lock(&d->mu);
    finish_job(d, j, rc, sys_errno, &e);
    if (d->o.budget_bytes && d->st.bytes > d->o.budget_bytes) disk__evict_locked(d, low_water(d));
    d->busy = 0;
    if (!d->head) pthread_cond_broadcast(&d->cv_idle);
}

void *disk__writer_main(void *arg) {
    disk_store *d = arg;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while (!d->head && !d->stop) pthread_cond_wait(&d->cv_work, &d->mu);
        if (!d->head) break; /* stopping and drained */
        djob *j = d->head;
        d->head = j->next;
        if (!d->head) d->tail = NULL;
        d->busy = 1;
        d->writing = j;
        unsigned seq = d->seq++;
        pthread_mutex_unlock(&d->mu);
        write_job(d, j, seq); /* returns with the lock held */
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
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
    j->payload = d->o.block_bytes;
    j->snap = 0;
    j->keep_until = 0;
    memcpy(j->tokens, tokens, tb);
    memcpy(j->kv, kv, d->o.block_bytes);
    return j;
}

/* 1 when h need not be queued (stored, queued, or no room). Locked. */
static int put_refused(disk_store *d, const cache_hash *h, int *rc) {
    long i = disk__ix_find(d, h);
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
    long i = disk__ix_add_block(d, h, parent, ST_PENDING, tokens, (uint32_t)n_tokens);
    d->slots[i].job = j;
    d->slots[i].model = 0;
    d->slots[i].last_use = disk__now_wall();
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
    disk__note_use(d, e, 1);
    d->st.reads++;
}

/* After a file read: count it, or forget/disk__quarantine what failed. Locked. */
void disk__get_finish(disk_store *d, const cache_hash *h, int rc, const char *path, const strata_err *e) {
    long i = disk__ix_find(d, h);
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
        disk__quarantine(d, path, name, e->msg);
    }
    disk__ix_drop_block(d, i); /* unreadable or gone: a miss from now on */
}

int disk_get(disk_store *d, const cache_hash *h, void *dst, int32_t *tokens_out, strata_err *err) {
    char path[4200], hex[65];
    cache_hash_hex(h, hex);
    if (d->o.all_models) return strata_errf(err, STRATA_EINVAL, "disk cache: get on a tool store");
    pthread_mutex_lock(&d->mu);
    long i = disk__ix_find(d, h);
    int state = i >= 0 ? d->slots[i].state : ST_GHOST;
    uint32_t n_tokens = i >= 0 ? d->slots[i].n_tokens : 0;
    if (state == ST_PENDING) get_pending(d, &d->slots[i], dst, tokens_out);
    if (state == ST_PRESENT) disk__note_use(d, &d->slots[i], 1); /* protected while we read */
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
    disk__get_finish(d, h, rc, path, &e);
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
        uint64_t size;
        int fd = disk_file_open(path, &size, NULL);
        if (fd < 0) continue; /* queued, gone or no file: disk_get sorts it out */
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

void disk_flush(disk_store *d) {
    pthread_mutex_lock(&d->mu);
    while (d->has_thread && (d->head || d->busy)) pthread_cond_wait(&d->cv_idle, &d->mu);
    pthread_mutex_unlock(&d->mu);
}
