/* disk_snap.c - recurrent-state snapshots in the disk tier (see disk.h):
 * one file per snapshot, DIR/ab/<hex of its key>.rs, in the block file
 * format (disk_file.h, kv dtype DISK_STATE_F32).
 *
 * Writes go through the blocks' bounded queue and writer thread (a copy
 * is queued and the call returns; temp file, fsync, rename off the hot
 * path); a snapshot still queued is served from its copy. Snapshot
 * files are not in the block index but in a list of their own (rebuilt
 * from headers at open), counted in the tier's bytes and budget, and
 * deleted when a block they need is evicted (disk__snap_drop_on). */
#include "cache/disk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "base/mem.h"
#include "cache/disk_file.h"
#include "cache/disk_int.h"

/* A queued snapshot's job (or the one being written), or NULL. Locked. */
static djob *queued(disk_store *d, const cache_hash *key) {
    for (djob *j = d->head; j; j = j->next)
        if (j->snap && memcmp(j->h.b, key->b, 32) == 0) return j;
    djob *w = d->writing;
    return w && w->snap && memcmp(w->h.b, key->b, 32) == 0 ? w : NULL;
}

int disk_snap_put(disk_store *d, const cache_hash *key, const cache_hash *boundary, const int32_t *tokens, int r,
                  const float *state, size_t n) {
    if (!d->has_thread || r < 0 || r >= DISK_MAX_TOKENS) return STRATA_EINVAL; /* read-only or tool store */
    char path[4200];
    disk_file_path_ext(d->dir, key, ".rs", path, sizeof path, NULL, 0);
    if (access(path, F_OK) == 0) return 0; /* never written twice */
    uint64_t bytes = n * sizeof(float), tb = 4ull * (uint64_t)r;
    djob *j = malloc(sizeof *j + tb + bytes);
    if (!j) return STRATA_ENOMEM;
    *j = (djob){.h = *key, .parent = *boundary, .n_tokens = (uint32_t)r, .payload = bytes, .snap = 1};
    j->tokens = (int32_t *)(j + 1);
    j->kv = (uint8_t *)j->tokens + tb;
    memcpy(j->tokens, tokens, tb);
    memcpy(j->kv, state, bytes); /* the copy, outside the lock */
    pthread_mutex_lock(&d->mu);
    int rc = 0;
    if (queued(d, key)) {
        free(j);
    } else if (d->st.pending_bytes + bytes > d->o.max_pending_bytes) {
        d->st.dropped++;
        free(j);
        rc = STRATA_EBUSY;
    } else {
        if (d->tail) d->tail->next = j;
        else d->head = j;
        d->tail = j;
        d->st.pending++;
        d->st.pending_bytes += bytes;
        pthread_cond_signal(&d->cv_work);
    }
    pthread_mutex_unlock(&d->mu);
    return rc;
}

int disk_snap_get(disk_store *d, const cache_hash *key, float *dst, size_t n) {
    char path[4200], name[80], hex[65];
    pthread_mutex_lock(&d->mu);
    djob *j = queued(d, key);
    if (j && j->payload == n * sizeof(float)) { /* not written yet: served from its copy */
        memcpy(dst, j->kv, j->payload);
        d->st.snap_reads++;
        pthread_mutex_unlock(&d->mu);
        return 0;
    }
    pthread_mutex_unlock(&d->mu);
    disk_file_path_ext(d->dir, key, ".rs", path, sizeof path, NULL, 0);
    disk_expect ex = {.hash = key, .model_fp = d->o.model_fp, .kv_dtype = DISK_STATE_F32,
                      .payload_bytes = n * sizeof(float)};
    disk_hdr h;
    strata_err e = {0};
    int rc = disk_file_load(path, &ex, &h, NULL, dst, n * sizeof(float), &e);
    if (rc == 0) {
        pthread_mutex_lock(&d->mu);
        d->st.snap_reads++;
        pthread_mutex_unlock(&d->mu);
        return 0;
    }
    memset(dst, 0, n * sizeof(float));
    if (rc == STRATA_EFORMAT) {
        cache_hash_hex(key, hex);
        snprintf(name, sizeof name, "%s.rs", hex);
        pthread_mutex_lock(&d->mu);
        disk__quarantine(d, path, name, e.msg);
        pthread_mutex_unlock(&d->mu);
    }
    return rc;
}

/* ---- the list of snapshot files ---- */

static long snap_find(const disk_store *d, const cache_hash *key) {
    for (size_t i = 0; i < d->n_snaps; i++)
        if (memcmp(d->snaps[i].key.b, key->b, 32) == 0) return (long)i;
    return -1;
}

void disk__snap_note(disk_store *d, const cache_hash *key, const cache_hash *boundary, uint32_t r, uint64_t bytes,
                     double keep_until) {
    if (snap_find(d, key) >= 0) return;
    XGROW(d->snaps, d->cap_snaps, d->n_snaps + 1, 64);
    d->snaps[d->n_snaps++] = (dsnap){*key, *boundary, r, bytes, keep_until};
    d->st.bytes += bytes;
    d->st.snap_files++;
}

static void snap_remove(disk_store *d, size_t i) {
    char path[4200];
    disk_file_path_ext(d->dir, &d->snaps[i].key, ".rs", path, sizeof path, NULL, 0);
    if (unlink(path) && errno != ENOENT) log_warn("disk cache: evict %s: %s", path, strerror(errno));
    d->st.bytes -= d->snaps[i].bytes;
    d->st.snap_files--;
    d->snaps[i] = d->snaps[--d->n_snaps];
}

/* A snapshot at the end of block h, or past the boundary h (inside the
 * block after it), cannot be used without h: it goes with it. */
void disk__snap_drop_on(disk_store *d, const cache_hash *h) {
    for (size_t i = 0; i < d->n_snaps;) {
        if (memcmp(d->snaps[i].key.b, h->b, 32) == 0 || memcmp(d->snaps[i].boundary.b, h->b, 32) == 0) snap_remove(d, i);
        else i++;
    }
}

/* Reads the header (and the file's size) of the snapshot file named by h:
 * 0, or an error whose e->msg says why (STRATA_EFORMAT: damaged, or it
 * names another snapshot or holds no state). */
static int read_snap_header(const char *path, const cache_hash *h, disk_hdr *hdr, uint64_t *size, strata_err *e) {
    int fd = disk_file_open(path, size, e), rc = fd;
    if (fd >= 0) {
        rc = disk_file_read_header(fd, *size, hdr, NULL, e);
        close(fd);
    }
    if (!rc && (memcmp(hdr->hash.b, h->b, 32) != 0 || hdr->kv_dtype != DISK_STATE_F32))
        rc = STRATA_EFORMAT, snprintf(e->msg, sizeof e->msg, "header names another snapshot");
    return rc;
}

/* One DIR/ab/<hex>.rs at open: its header checks out (else quarantined)
 * and it is this model's (else left alone). */
static void scan_one_snap(void *ctx, const char *path, const char *name, const cache_hash *h) {
    disk_store *d = ctx;
    strata_err e = {0};
    disk_hdr hdr;
    uint64_t size;
    int rc = read_snap_header(path, h, &hdr, &size, &e);
    if (rc == STRATA_EFORMAT) {
        disk__quarantine(d, path, name, e.msg);
        return;
    }
    if (rc == 0 && memcmp(hdr.model_fp, d->o.model_fp, 32) == 0)
        disk__snap_note(d, &hdr.hash, &hdr.parent, hdr.n_tokens, size, 0);
}

static void walk(const char *dir, void (*fn)(void *, const char *, const char *, const cache_hash *), void *ctx);

/* Rebuilds the list; a snapshot whose block and boundary are both gone
 * (its tail was superseded and the longer block evicted) is deleted. */
void disk__snap_scan(disk_store *d) {
    walk(d->dir, scan_one_snap, d);
    for (size_t i = 0; i < d->n_snaps;) {
        long k = disk__ix_find(d, &d->snaps[i].key), b = disk__ix_find(d, &d->snaps[i].boundary);
        if ((k >= 0 && d->slots[k].state != ST_GHOST) || (b >= 0 && d->slots[b].state != ST_GHOST)) i++;
        else snap_remove(d, i);
    }
}

/* ---- retention marks ---- */

void disk_snap_retain(disk_store *d, const cache_hash *key, double ttl_s) {
    double until = disk__now_wall() + ttl_s;
    pthread_mutex_lock(&d->mu);
    long i = snap_find(d, key);
    djob *j = i < 0 ? queued(d, key) : NULL;
    double *mark = i >= 0 ? &d->snaps[i].keep_until : j ? &j->keep_until : NULL;
    if (mark && until > *mark) *mark = until;
    pthread_mutex_unlock(&d->mu);
}

double disk_snap_retained_s(disk_store *d, const cache_hash *key) {
    double now = disk__now_wall(), left = 0;
    pthread_mutex_lock(&d->mu);
    long i = snap_find(d, key);
    djob *j = i < 0 ? queued(d, key) : NULL;
    double until = i >= 0 ? d->snaps[i].keep_until : j ? j->keep_until : 0;
    if (until > now) left = until - now;
    pthread_mutex_unlock(&d->mu);
    return left;
}

size_t disk__snap_usage(const disk_store *d, disk_usage_rec *out) {
    size_t n = 0;
    double now = disk__now_wall();
    for (size_t i = 0; i < d->n_snaps; i++)
        if (d->snaps[i].keep_until > now) out[n++] = (disk_usage_rec){d->snaps[i].key, 0, now, d->snaps[i].keep_until};
    return n;
}

int disk__snap_usage_load(disk_store *d, const disk_usage_rec *r) {
    long i = snap_find(d, &r->hash);
    if (i < 0) return 0;
    if (r->keep_until > d->snaps[i].keep_until) d->snaps[i].keep_until = r->keep_until;
    return 1;
}

void disk_snap_foreach(disk_store *d, void (*fn)(void *ctx, const cache_hash *key, const cache_hash *boundary, int r),
                       void *ctx) {
    pthread_mutex_lock(&d->mu);
    size_t n = d->n_snaps;
    dsnap *copy = xmalloc((n ? n : 1) * sizeof *copy);
    if (n) memcpy(copy, d->snaps, n * sizeof *copy); /* snaps is NULL while empty */
    pthread_mutex_unlock(&d->mu);
    for (size_t i = 0; i < n; i++) fn(ctx, &copy[i].key, &copy[i].boundary, (int)copy[i].r);
    free(copy);
}

/* Calls fn(ctx, path, name, hash) for every DIR/ab/<hex>.rs. */
static void walk(const char *dir, void (*fn)(void *, const char *, const char *, const cache_hash *), void *ctx) {
    DIR *dp = opendir(dir);
    if (!dp) return;
    struct dirent *de, *fe;
    char sub[4200], path[4600];
    while ((de = readdir(dp))) {
        if (strlen(de->d_name) != 2 || !strchr("0123456789abcdef", de->d_name[0]) ||
            !strchr("0123456789abcdef", de->d_name[1]))
            continue;
        snprintf(sub, sizeof sub, "%s/%s", dir, de->d_name);
        DIR *fp = opendir(sub);
        if (!fp) continue;
        while ((fe = readdir(fp))) {
            cache_hash h;
            if (!disk_file_name_hash_ext(fe->d_name, ".rs", &h) || strncmp(fe->d_name, de->d_name, 2) != 0) continue;
            snprintf(path, sizeof path, "%s/%s", sub, fe->d_name);
            fn(ctx, path, fe->d_name, &h);
        }
        closedir(fp);
    }
    closedir(dp);
}

/* ---- `strata cache verify` ---- */

typedef struct verify_ctx {
    disk_store *d;
    void (*bad)(void *ctx, const char *path, const char *why);
    void *ctx;
    uint64_t ok, n_bad;
} verify_ctx;

/* 1 when fp is the fingerprint of a model with blocks in this directory. Locked. */
static int known_model(const disk_store *d, const uint8_t fp[32]) {
    for (int i = 0; i < d->n_models; i++)
        if (memcmp(d->models[i], fp, 32) == 0) return 1;
    return 0;
}

/* Why one snapshot file cannot be loaded (into why), or 0: header (magic,
 * version, header CRC, the name's hash, state dtype), the whole file's
 * CRC, a model with blocks here, and a block it needs (the one it ends,
 * or its boundary). */
static int verify_one_file(disk_store *d, const char *path, const cache_hash *h, char *why, size_t cap) {
    strata_err e = {0};
    disk_hdr hdr;
    uint64_t size;
    int rc = read_snap_header(path, h, &hdr, &size, &e);
    if (!rc) {
        float *buf = xmalloc(hdr.payload_bytes ? hdr.payload_bytes : 1);
        disk_expect ex = {.hash = h, .model_fp = hdr.model_fp, .n_tokens = hdr.n_tokens, .kv_dtype = DISK_STATE_F32,
                          .payload_bytes = hdr.payload_bytes};
        rc = disk_file_load(path, &ex, &hdr, NULL, buf, hdr.payload_bytes, &e);
        free(buf);
    }
    if (rc) return snprintf(why, cap, "%s", e.msg), 1;
    pthread_mutex_lock(&d->mu);
    int model = known_model(d, hdr.model_fp);
    long k = disk__ix_find(d, h), b = disk__ix_find(d, &hdr.parent);
    int blocks = (k >= 0 && d->slots[k].state != ST_GHOST) || (b >= 0 && d->slots[b].state != ST_GHOST);
    pthread_mutex_unlock(&d->mu);
    if (!model) return snprintf(why, cap, "of a model with no blocks in this cache"), 1;
    if (!blocks) return snprintf(why, cap, "the blocks it needs are gone"), 1;
    return 0;
}

static void verify_cb(void *ctx, const char *path, const char *name, const cache_hash *h) {
    verify_ctx *v = ctx;
    char why[600];
    if (!verify_one_file(v->d, path, h, why, sizeof why)) {
        v->ok++;
        return;
    }
    v->n_bad++;
    v->bad(v->ctx, path, why);
    pthread_mutex_lock(&v->d->mu);
    disk__quarantine(v->d, path, name, why);
    pthread_mutex_unlock(&v->d->mu);
}

uint64_t disk_snap_verify(disk_store *d, void (*bad)(void *ctx, const char *path, const char *why), void *ctx,
                          uint64_t *n_bad) {
    verify_ctx v = {d, bad, ctx, 0, 0};
    walk(d->dir, verify_cb, &v);
    *n_bad = v.n_bad;
    return v.ok;
}

typedef struct count_ctx {
    uint64_t files, bytes;
    int remove;
} count_ctx;

static void count_cb(void *ctx, const char *path, const char *name, const cache_hash *h) {
    count_ctx *c = ctx;
    struct stat st;
    if (stat(path, &st) == 0) c->bytes += (uint64_t)st.st_size;
    if (!c->remove || unlink(path) == 0) c->files++;
}

void disk_snap_count(const char *dir, uint64_t *files, uint64_t *bytes, int remove) {
    count_ctx c = {0, 0, remove};
    walk(dir, count_cb, &c);
    *files = c.files;
    if (bytes) *bytes = c.bytes;
}
