/* devmem.h - device memory as the KV tiers see it: allocate and free
 * device memory and pinned host memory, copy between them asynchronously
 * on one of two streams, and order work with events.
 *
 * Why an interface: the tier logic (a KV pool in GPU memory, the RAM tier
 * in pinned host memory, copies up and down the tiers) must be tested on
 * machines without a GPU. The CUDA backend implements it
 * (cuda_devmem(), backend/cuda/cuda.h); the unit tests implement it in
 * plain host memory with delayed and reordered copies
 * (tests/fake_dev.c), so a missing wait shows up as wrong bytes there.
 *
 * Streams: DEVMEM_COMPUTE is the queue the kernels run on (a copy there
 * runs after the kernels queued before it); DEVMEM_COPY runs beside it,
 * so copies up from the RAM tier or the disk overlap with compute. Work
 * on one stream runs in order; the two streams are ordered only by
 * events (devmem_wait) or by the host waiting (devmem_sync). A copy reads
 * its source when it runs, not when it is queued: the source must stay
 * unchanged until the copy is known done.
 * Does not: compute, or know about blocks (model/kv.c, cache/ram_tier.c). */
#ifndef STRATA_DEVMEM_H
#define STRATA_DEVMEM_H

#include <stddef.h>

#include "base/err.h"

enum { DEVMEM_COMPUTE = 0, DEVMEM_COPY = 1, DEVMEM_STREAMS = 2 };
typedef enum { DEVMEM_H2D, DEVMEM_D2H, DEVMEM_D2D } devmem_dir;

typedef struct devmem_event devmem_event; /* opaque: a point in a stream */

typedef struct devmem_ops {
    /* Device memory; NULL and a reason (STRATA_ENOMEM) when refused. */
    void *(*alloc)(void *self, size_t bytes, strata_err *err);
    void (*free)(void *self, void *d); /* NULL is fine */
    /* Host memory the device copies from and to without staging (pinned). */
    void *(*host_alloc)(void *self, size_t bytes, strata_err *err);
    void (*host_free)(void *self, void *h); /* NULL is fine */
    /* Queues a copy of bytes on stream; returns once queued. */
    int (*copy)(void *self, int stream, void *dst, const void *src, size_t bytes, devmem_dir dir, strata_err *err);
    /* A point after everything queued on stream so far; NULL + err on failure. */
    devmem_event *(*record)(void *self, int stream, strata_err *err);
    /* 1 when the work before ev is done, 0 not yet, < 0 an error. */
    int (*done)(void *self, devmem_event *ev, strata_err *err);
    /* Work queued on stream from now on starts after ev (the host does not wait). */
    int (*wait)(void *self, int stream, devmem_event *ev, strata_err *err);
    void (*event_free)(void *self, devmem_event *ev); /* NULL is fine */
    /* The host waits until everything queued on stream is done; reports
     * the first error of that work. */
    int (*sync)(void *self, int stream, strata_err *err);
} devmem_ops;

typedef struct devmem {
    const char *name; /* "cuda", "fake" */
    const devmem_ops *ops;
    void *self;
} devmem;

static inline void *devmem_alloc(const devmem *d, size_t bytes, strata_err *err) {
    return d->ops->alloc(d->self, bytes, err);
}
static inline void devmem_free(const devmem *d, void *p) { d->ops->free(d->self, p); }
static inline void *devmem_host_alloc(const devmem *d, size_t bytes, strata_err *err) {
    return d->ops->host_alloc(d->self, bytes, err);
}
static inline void devmem_host_free(const devmem *d, void *h) { d->ops->host_free(d->self, h); }
static inline int devmem_copy(const devmem *d, int stream, void *dst, const void *src, size_t bytes, devmem_dir dir,
                              strata_err *err) {
    return d->ops->copy(d->self, stream, dst, src, bytes, dir, err);
}
static inline devmem_event *devmem_record(const devmem *d, int stream, strata_err *err) {
    return d->ops->record(d->self, stream, err);
}
static inline int devmem_done(const devmem *d, devmem_event *ev, strata_err *err) {
    return d->ops->done(d->self, ev, err);
}
static inline int devmem_wait(const devmem *d, int stream, devmem_event *ev, strata_err *err) {
    return d->ops->wait(d->self, stream, ev, err);
}
static inline void devmem_event_free(const devmem *d, devmem_event *ev) { d->ops->event_free(d->self, ev); }
static inline int devmem_sync(const devmem *d, int stream, strata_err *err) {
    return d->ops->sync(d->self, stream, err);
}

/* A copy, then the host waits for it: for the few places that need the
 * bytes at once (a publish's copy down, a test). */
int devmem_copy_sync(const devmem *d, int stream, void *dst, const void *src, size_t bytes, devmem_dir dir,
                     strata_err *err);

#endif
