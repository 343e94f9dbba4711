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

struct pool {
    int n;
    pthread_t *threads;
    pool_fn fn;
    void *ctx;
    atomic_uint gen;     /* bumped once per job */
    atomic_int pending;  /* workers still running the current job */
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

static void *worker_main(void *argp) {
    worker_arg a = *(worker_arg *)argp;
    free(argp);
    pool *p = a.p;
    unsigned seen = 0;
    for (;;) {
        seen = wait_for_job(p, seen);
        if (atomic_load(&p->stop)) return NULL;
        p->fn(p->ctx, a.ith, p->n);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
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

void pool_run(pool *p, pool_fn fn, void *ctx) {
    if (p->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store(&p->pending, p->n - 1);
    publish(p);
    fn(ctx, 0, p->n);
    for (int i = 0; atomic_load_explicit(&p->pending, memory_order_acquire) > 0; i++) backoff(i);
}

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
