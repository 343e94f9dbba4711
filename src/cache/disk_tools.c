/* disk_tools.c - maintenance of a disk tier directory, for `strata cache`
 * (see disk.h, "for `strata cache`"): evict to a budget, list, verify,
 * purge. */
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

/* ---- tools ---- */

uint64_t disk_evict_to(disk_store *d, uint64_t budget_bytes) {
    pthread_mutex_lock(&d->mu);
    d->o.budget_bytes = budget_bytes;
    uint64_t n = d->o.read_only ? 0 : disk__evict_locked(d, budget_bytes);
    pthread_mutex_unlock(&d->mu);
    return n;
}

void disk_foreach(disk_store *d, void (*fn)(void *ctx, const disk_block_info *b), void *ctx) {
    pthread_mutex_lock(&d->mu);
    double now = disk__now_wall();
    for (size_t i = 0; i < d->cap; i++) {
        const dent *e = &d->slots[i];
        if (!e->used || e->state == ST_GHOST) continue;
        long p = disk__ix_find(d, &e->parent);
        disk_block_info b = {.hash = e->h, .parent = e->parent, .n_tokens = e->n_tokens,
                             .n_children = e->n_children, .bytes = e->bytes, .last_use = e->last_use,
                             .hits = disk__decayed_hits(e, now), .pending = e->state == ST_PENDING,
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
    long i = disk__ix_find(d, h);
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
    disk__get_finish(d, h, rc, path, &fe);
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
    uint64_t snaps;
    disk_snap_count(dir, &snaps, NULL, 1); /* recurrent-state snapshots (.rs) */
    *n_files = pc.n + snaps;
    return 0;
}
