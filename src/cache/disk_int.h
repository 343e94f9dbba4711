/* disk_int.h - what the disk tier's files share (see disk.h): the index
 * entry, the write job, the store itself, and the internal calls between
 * disk.c (index, usage file, open and close, eviction, lookups),
 * disk_io.c (the writer thread's queue, readers, prefetch) and
 * disk_tools.c (the maintenance behind `strata cache`). Not for use
 * outside src/cache/disk*.c. */
#ifndef STRATA_CACHE_DISK_INT_H
#define STRATA_CACHE_DISK_INT_H

#include <pthread.h>
#include <stdint.h>

#include "cache/disk.h"
#include "cache/disk_file.h"

#define PENDING_DEFAULT (256ull << 20)

#define STALE_TMP_S 3600 /* a temp file this old is dead whatever its pid says */

enum { ST_GHOST, ST_PENDING, ST_PRESENT };

typedef struct djob {
    struct djob *next;
    cache_hash h, parent;
    uint32_t n_tokens;
    int32_t *tokens;
    uint8_t *kv;
    uint64_t payload; /* bytes at kv: block_bytes, or a snapshot's state */
    int snap;         /* a recurrent-state snapshot (disk_snap.c): no index entry */
    double keep_until; /* a snapshot's retention mark, if set while queued (unix seconds) */
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

/* A snapshot file on disk (disk_snap.c): not in the block index, but
 * counted in st.bytes and deleted with the block it hangs on. */
typedef struct dsnap {
    cache_hash key, boundary;
    uint32_t r;
    uint64_t bytes;
    double keep_until; /* unix seconds: retained until then (0: not); kept in the usage file */
} dsnap;

struct disk_store {
    disk_opts o;
    char *dir;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_idle;
    pthread_t thread;
    int has_thread, stop, busy, warned;
    djob *writing;     /* the job the writer has taken off the queue, until finished */
    unsigned seq;
    djob *head, *tail;
    dent *slots;
    size_t cap, used;
    uint8_t (*models)[32]; /* distinct fingerprints (one unless all_models) */
    int n_models;
    int32_t *scan_tok; /* header token ids while the index is rebuilt */
    dsnap *snaps;      /* snapshot files of this model */
    size_t n_snaps, cap_snaps;
    disk_stats st;
};

/* ---- calls between the disk tier's files (the caller holds d->mu where
 * the function works on the index) ---- */

double disk__decayed_hits(const dent *e, double now);
uint64_t disk__evict_locked(disk_store *d, uint64_t budget);
void disk__get_finish(disk_store *d, const cache_hash *h, int rc, const char *path, const strata_err *e);
void disk__ix_drop_block(disk_store *d, long i);
long disk__ix_find(const disk_store *d, const cache_hash *h);
double disk__now_wall(void);
void disk__quarantine(disk_store *d, const char *path, const char *name, const char *why);
void *disk__writer_main(void *arg);
void disk__note_use(disk_store *d, dent *e, int hit);
/* Snapshots (disk_snap.c): the list is rebuilt at open; one is noted when
 * written; those on a block go when it is evicted. Locked. */
void disk__snap_scan(disk_store *d);
void disk__snap_note(disk_store *d, const cache_hash *key, const cache_hash *boundary, uint32_t r, uint64_t bytes,
                     double keep_until);
/* The usage file's records of retained snapshots (out: room for n_snaps),
 * and one record read back; 1 when it named a snapshot. Locked. */
size_t disk__snap_usage(const disk_store *d, disk_usage_rec *out);
int disk__snap_usage_load(disk_store *d, const disk_usage_rec *r);
void disk__snap_drop_on(disk_store *d, const cache_hash *h);
long disk__ix_add_block(disk_store *d, const cache_hash *h, const cache_hash *parent, int state, const int32_t *tokens,
                        uint32_t n_tokens);

#endif
