/* fake_dev.c - the fake device of fake_dev.h: allocations in host memory,
 * two op queues (streams) run a step at a time in a seeded random order.
 *
 * Every call into the device first runs a few queued ops (0 to 2, drawn),
 * so queued work completes at unpredictable later points; sync runs ops
 * until its stream is empty. A stream's head op runs only when it is
 * runnable (a wait op needs its event done), and the stream to step is
 * drawn among the runnable ones. One mutex: the store's loader thread and
 * the scheduler call it at once, as they do the CUDA runtime. */
#include "fake_dev.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "test.h"

enum { OP_COPY, OP_EVENT, OP_WAIT };

struct devmem_event {
    int done, freed;
    devmem_event *next; /* every event, freed ones too: ops may still name them */
};

typedef struct op {
    int kind;
    void *dst;
    const void *src;
    size_t bytes;
    devmem_dir dir;
    devmem_event *ev;
    long seq; /* queue order over both streams */
} op;

typedef struct queue {
    op *ops;
    int head, n, cap;
} queue;

typedef struct alloc_rec {
    uint8_t *p;
    size_t bytes;
    int host;
} alloc_rec;

struct fake_dev {
    devmem dm;
    pthread_mutex_t mu;
    unsigned rng;
    queue q[DEVMEM_STREAMS];
    long seq;
    alloc_rec *allocs;
    int n_allocs, cap_allocs;
    int fail_at[2]; /* per kind (0 device, 1 host): allocations left before one fails; 0 none */
    int held;       /* fake_dev_hold: queued work runs only when the host waits for it */
    devmem_event *events;
    fake_dev_stats st;
};

static unsigned draw(fake_dev *f, unsigned n) {
    f->rng = f->rng * 1103515245u + 12345u;
    return (f->rng >> 16) % n;
}

/* ---- memory ------------------------------------------------------------------- */

static int find_alloc(const fake_dev *f, const void *p, size_t bytes, int host) {
    const uint8_t *b = p;
    for (int i = 0; i < f->n_allocs; i++) {
        const alloc_rec *a = &f->allocs[i];
        if (a->host == host && b >= a->p && b + bytes <= a->p + a->bytes) return i;
    }
    return -1;
}

static void *do_alloc(fake_dev *f, size_t bytes, int host, strata_err *err) {
    pthread_mutex_lock(&f->mu);
    void *p = NULL;
    if (f->fail_at[host] > 0 && --f->fail_at[host] == 0) {
        strata_errf(err, STRATA_ENOMEM, "fake device: out of %s memory (%zu bytes refused)", host ? "pinned host" : "device",
                    bytes);
    } else {
        if (f->n_allocs == f->cap_allocs) {
            f->cap_allocs = f->cap_allocs ? 2 * f->cap_allocs : 16;
            f->allocs = xrealloc(f->allocs, (size_t)f->cap_allocs * sizeof *f->allocs);
        }
        p = xaligned(bytes ? bytes : 1);
        memset(p, 0xA5, bytes); /* not zero: device memory starts as garbage */
        f->allocs[f->n_allocs++] = (alloc_rec){p, bytes, host};
        if (host) f->st.host_allocs++, f->st.host_bytes += bytes;
        else f->st.dev_allocs++, f->st.dev_bytes += bytes;
    }
    pthread_mutex_unlock(&f->mu);
    return p;
}

static void do_free(fake_dev *f, void *p, int host) {
    if (!p) return;
    pthread_mutex_lock(&f->mu);
    for (int i = 0; i < f->n_allocs; i++) {
        alloc_rec *a = &f->allocs[i];
        if (a->p != p || a->host != host) continue;
        if (host) f->st.host_allocs--, f->st.host_bytes -= a->bytes;
        else f->st.dev_allocs--, f->st.dev_bytes -= a->bytes;
        free(a->p);
        f->allocs[i] = f->allocs[--f->n_allocs];
        break;
    }
    pthread_mutex_unlock(&f->mu);
}

static void *dev_alloc(void *self, size_t bytes, strata_err *err) { return do_alloc(self, bytes, 0, err); }
static void dev_free(void *self, void *d) { do_free(self, d, 0); }
static void *host_alloc(void *self, size_t bytes, strata_err *err) { return do_alloc(self, bytes, 1, err); }
static void host_free(void *self, void *h) { do_free(self, h, 1); }

/* ---- streams ------------------------------------------------------------------- */

static void push(fake_dev *f, int stream, op o) {
    queue *q = &f->q[stream];
    if (q->head > 0 && q->head == q->n) q->head = q->n = 0;
    if (q->n == q->cap) {
        q->cap = q->cap ? 2 * q->cap : 16;
        q->ops = xrealloc(q->ops, (size_t)q->cap * sizeof(op));
    }
    o.seq = f->seq++;
    q->ops[q->n++] = o;
}

static int runnable(const fake_dev *f, int stream) {
    const queue *q = &f->q[stream];
    if (q->head == q->n) return 0;
    const op *o = &q->ops[q->head];
    return o->kind != OP_WAIT || o->ev->done;
}

/* Runs the head op of stream. */
static void run_head(fake_dev *f, int stream) {
    queue *q = &f->q[stream];
    op *o = &q->ops[q->head++];
    const queue *other = &f->q[1 - stream];
    if (other->head < other->n && other->ops[other->head].seq < o->seq) f->st.reordered++;
    if (o->kind == OP_COPY) {
        memmove(o->dst, o->src, o->bytes);
        f->st.copies[o->dir]++;
        f->st.on_stream[stream]++;
    } else if (o->kind == OP_EVENT) {
        o->ev->done = 1;
    }
}

/* Runs one op of a stream drawn among the runnable ones; 0 when none is. */
static int step(fake_dev *f) {
    int r[DEVMEM_STREAMS], n = 0;
    for (int s = 0; s < DEVMEM_STREAMS; s++)
        if (runnable(f, s)) r[n++] = s;
    if (n == 0) return 0;
    run_head(f, r[draw(f, (unsigned)n)]);
    return 1;
}

/* The delay: each call lets the device get a little further, or not. */
static void progress(fake_dev *f) {
    if (f->held) return;
    for (unsigned k = draw(f, 3); k > 0 && step(f); k--) {}
}

static int copy(void *self, int stream, void *dst, const void *src, size_t bytes, devmem_dir dir, strata_err *err) {
    fake_dev *f = self;
    pthread_mutex_lock(&f->mu);
    int dst_dev = dir != DEVMEM_D2H, src_dev = dir != DEVMEM_H2D, rc = 0;
    int dst_ok = dst_dev ? find_alloc(f, dst, bytes, 0) >= 0 : find_alloc(f, dst, 1, 0) < 0;
    int src_ok = src_dev ? find_alloc(f, src, bytes, 0) >= 0 : find_alloc(f, src, 1, 0) < 0;
    if (!dst_ok || !src_ok) {
        f->st.misuse++;
        rc = strata_errf(err, STRATA_EINVAL, "fake device: copy of %zu bytes: %s is not %s memory", bytes,
                         !dst_ok ? "the destination" : "the source", (!dst_ok ? dst_dev : src_dev) ? "device" : "host");
    } else {
        push(f, stream, (op){.kind = OP_COPY, .dst = dst, .src = src, .bytes = bytes, .dir = dir});
        progress(f);
    }
    pthread_mutex_unlock(&f->mu);
    return rc;
}

static devmem_event *record(void *self, int stream, strata_err *err) {
    fake_dev *f = self;
    pthread_mutex_lock(&f->mu);
    devmem_event *ev = xcalloc(1, sizeof *ev);
    ev->next = f->events;
    f->events = ev;
    f->st.events++;
    push(f, stream, (op){.kind = OP_EVENT, .ev = ev});
    progress(f);
    pthread_mutex_unlock(&f->mu);
    return ev;
}

static int done(void *self, devmem_event *ev, strata_err *err) {
    fake_dev *f = self;
    pthread_mutex_lock(&f->mu);
    progress(f);
    int d = ev->done;
    pthread_mutex_unlock(&f->mu);
    return d;
}

static int wait_ev(void *self, int stream, devmem_event *ev, strata_err *err) {
    fake_dev *f = self;
    pthread_mutex_lock(&f->mu);
    push(f, stream, (op){.kind = OP_WAIT, .ev = ev});
    progress(f);
    pthread_mutex_unlock(&f->mu);
    return 0;
}

static void event_free(void *self, devmem_event *ev) {
    fake_dev *f = self;
    if (!ev) return;
    pthread_mutex_lock(&f->mu);
    if (!ev->freed) f->st.events--;
    ev->freed = 1; /* the memory stays until fake_dev_free: a queued op may name it */
    pthread_mutex_unlock(&f->mu);
}

static int sync_stream(void *self, int stream, strata_err *err) {
    fake_dev *f = self;
    pthread_mutex_lock(&f->mu);
    int rc = 0;
    while (f->q[stream].head < f->q[stream].n) {
        if (runnable(f, stream) && draw(f, 2)) run_head(f, stream);
        else if (!step(f)) {
            rc = strata_errf(err, STRATA_EIO, "fake device: stream %d waits for an event nothing will record", stream);
            break;
        }
    }
    pthread_mutex_unlock(&f->mu);
    return rc;
}

static const devmem_ops fake_ops = {dev_alloc, dev_free, host_alloc, host_free, copy,
                                    record,    done,     wait_ev,    event_free, sync_stream};

/* ---- public ---------------------------------------------------------------------- */

fake_dev *fake_dev_new(unsigned seed) {
    fake_dev *f = xcalloc(1, sizeof *f);
    f->dm = (devmem){.name = "fake", .ops = &fake_ops, .self = f};
    f->rng = seed * 2654435761u + 1;
    pthread_mutex_init(&f->mu, NULL);
    return f;
}

void fake_dev_free(fake_dev *f) {
    if (!f) return;
    for (int i = 0; i < f->n_allocs; i++) free(f->allocs[i].p);
    for (devmem_event *e = f->events, *n; e; e = n) {
        n = e->next;
        free(e);
    }
    for (int s = 0; s < DEVMEM_STREAMS; s++) free(f->q[s].ops);
    free(f->allocs);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

void fake_dev_free_clean(fake_dev *f) {
    fake_dev_stats fs;
    fake_dev_stats_get(f, &fs);
    CHECK_MSG(fs.dev_allocs + fs.host_allocs == 0, "fake device: %d device and %d host allocations left", fs.dev_allocs,
              fs.host_allocs);
    CHECK_MSG(fs.events == 0, "fake device: %d events left", fs.events);
    CHECK_MSG(fs.misuse == 0, "fake device: %ld copies refused as misuse", fs.misuse);
    fake_dev_free(f);
}

const devmem *fake_dev_mem(fake_dev *f) { return &f->dm; }

void fake_dev_fail_alloc(fake_dev *f, int nth, int host) { f->fail_at[host ? 1 : 0] = nth; }

void fake_dev_hold(fake_dev *f, int on) {
    pthread_mutex_lock(&f->mu);
    f->held = on;
    pthread_mutex_unlock(&f->mu);
}

void fake_dev_stats_get(fake_dev *f, fake_dev_stats *out) {
    pthread_mutex_lock(&f->mu);
    *out = f->st;
    pthread_mutex_unlock(&f->mu);
}

int fake_dev_pending(fake_dev *f) {
    pthread_mutex_lock(&f->mu);
    int n = 0;
    for (int s = 0; s < DEVMEM_STREAMS; s++) n += f->q[s].n - f->q[s].head;
    pthread_mutex_unlock(&f->mu);
    return n;
}
