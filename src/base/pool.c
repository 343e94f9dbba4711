/* pool.c - spin-then-sleep thread pool (see pool.h). */
#include "base/pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/mem.h"

#define SPIN_ITERS 50000 /* polls before sleeping on the condition variable */
#define YIELD_AFTER 2000 /* pause-polls (~ a few microseconds) before yielding */

/* Job g lives in slot[g & 1], written before gen becomes g. A worker
 * reads the slot of the gen it saw and checks gen again afterwards (a
 * seqlock): the slot is rewritten only for job g + 2, which cannot be
 * posted before job g + 1 is over, and that needs this worker unless
 * job g + 1 is a pool_run_any one. */
typedef struct {
    _Atomic(pool_fn) fn;
    _Atomic(void *) ctx;
    atomic_int any; /* posted by pool_run_any */
} pool_job;

struct pool {
    int n;
    pthread_t *threads;
    pool_job slot[2];
    atomic_uint gen;     /* bumped once per job */
    atomic_int pending;  /* pool_run: workers still running the current job */
    atomic_uint open;    /* pool_run_any: gen of the job workers may still join, 0 if none */
    atomic_int active;   /* pool_run_any: workers inside its fn (or about to check `open`) */
    atomic_int stop;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    int sleepers; /* guarded by mu */
};

typedef struct {
    pool *p;
    int ith;
} worker_arg;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Pause briefly, then give the core away: on a loaded machine a waiter
 * that keeps spinning steals the time the thread it waits for needs. */
static inline void backoff(int i) {
    if (i < YIELD_AFTER) cpu_relax();
    else sched_yield();
}

static unsigned wait_for_job(pool *p, unsigned seen) {
    for (int i = 0; i < SPIN_ITERS; i++) {
        unsigned g = atomic_load_explicit(&p->gen, memory_order_acquire);
        if (g != seen) return g;
        backoff(i);
    }
    pthread_mutex_lock(&p->mu);
    p->sleepers++;
    while (atomic_load(&p->gen) == seen) pthread_cond_wait(&p->wake, &p->mu);
    p->sleepers--;
    pthread_mutex_unlock(&p->mu);
    return atomic_load(&p->gen);
}

/* A worker's share of job g. For a pool_run_any job, registering in
 * `active` and then reading `open` (both sequentially consistent) pairs
 * with the caller closing `open` and then reading `active`: either the
 * caller waits for this worker, or the worker sees the job closed. */
static void run_share(pool *p, unsigned g, pool_fn fn, void *ctx, int any, int ith) {
    if (!any) {
        fn(ctx, ith, p->n);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
        return;
    }
    atomic_fetch_add(&p->active, 1);
    if (atomic_load(&p->open) == g) fn(ctx, ith, p->n);
    atomic_fetch_sub(&p->active, 1);
}

static void *worker_main(void *argp) {
    worker_arg a = *(worker_arg *)argp;
    free(argp);
    pool *p = a.p;
    unsigned seen = 0;
    for (;;) {
        unsigned g = wait_for_job(p, seen);
        if (atomic_load(&p->stop)) return NULL;
        pool_job *s = &p->slot[g & 1];
        pool_fn fn = atomic_load(&s->fn);
        void *ctx = atomic_load(&s->ctx);
        int any = atomic_load(&s->any);
        seen = g;
        /* Moved on already: job g was a pool_run_any one, finished without us. */
        if (atomic_load(&p->gen) != g) continue;
        run_share(p, g, fn, ctx, any, a.ith);
    }
}

pool *pool_new(int n_threads) {
    if (n_threads <= 0) n_threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n_threads <= 0) n_threads = 1;
    pool *p = xcalloc(1, sizeof *p);
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    p->threads = xcalloc((size_t)n_threads, sizeof(pthread_t));
    for (int i = 1; i < n_threads; i++) {
        worker_arg *a = xmalloc(sizeof *a);
        *a = (worker_arg){p, i};
        pthread_create(&p->threads[i], NULL, worker_main, a);
    }
    return p;
}

static void publish(pool *p) {
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    pthread_mutex_lock(&p->mu);
    if (p->sleepers) pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
}

/* Writes job gen + 1 into its slot and publishes it; returns its gen. */
static unsigned post(pool *p, pool_fn fn, void *ctx, int any) {
    unsigned g = atomic_load(&p->gen) + 1; /* only the caller's thread bumps gen */
    pool_job *s = &p->slot[g & 1];
    atomic_store(&s->fn, fn);
    atomic_store(&s->ctx, ctx);
    atomic_store(&s->any, any);
    if (any) atomic_store(&p->open, g);
    else atomic_store(&p->pending, p->n - 1);
    publish(p);
    return g;
}

/* The caller runs its share, then waits: for every worker (pool_run), or
 * for the workers already inside fn after closing the job (any). */
static void run_job(pool *p, pool_fn fn, void *ctx, int any) {
    if (p->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    post(p, fn, ctx, any);
    fn(ctx, 0, p->n);
    if (any) atomic_store(&p->open, 0);
    atomic_int *busy = any ? &p->active : &p->pending;
    for (int i = 0; atomic_load(busy) > 0; i++) backoff(i);
}

void pool_run(pool *p, pool_fn fn, void *ctx) { run_job(p, fn, ctx, 0); }

void pool_run_any(pool *p, pool_fn fn, void *ctx) { run_job(p, fn, ctx, 1); }

int pool_size(const pool *p) { return p->n; }

void pool_free(pool *p) {
    if (!p) return;
    atomic_store(&p->stop, 1);
    publish(p);
    for (int i = 1; i < p->n; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    free(p->threads);
    free(p);
}
