/* pool.h - persistent CPU thread pool for data-parallel kernels.
 *
 * pool_run(p, fn, ctx) calls fn(ctx, i, n) on every thread i of n (the
 * caller is thread 0) and returns when all are done. Workers spin briefly
 * between jobs (a forward pass issues hundreds of small jobs per token),
 * then sleep on a condition variable when idle. pool_run_any runs jobs
 * that do not need every thread.
 * Does not: queue work or run jobs concurrently; one job at a time. */
#ifndef STRATA_POOL_H
#define STRATA_POOL_H

typedef void (*pool_fn)(void *ctx, int ith, int nth);
typedef struct pool pool;

pool *pool_new(int n_threads); /* n_threads <= 0: one per online core */
void pool_free(pool *p);       /* NULL is fine */
int pool_size(const pool *p);
void pool_run(pool *p, pool_fn fn, void *ctx);
/* Like pool_run for a job whose fn takes its work from shared counters
 * (so any one thread can finish it alone): returns once the caller's fn
 * is done and no worker is still inside fn; a worker that has not begun
 * by then skips the job instead of being waited for. On a busy machine
 * a worker the scheduler has parked no longer stalls every step. */
void pool_run_any(pool *p, pool_fn fn, void *ctx);

/* Even split of [0, n) for thread ith of nth. */
static inline void pool_range(long n, int ith, int nth, long *lo, long *hi) {
    *lo = n * ith / nth;
    *hi = n * (ith + 1) / nth;
}

#endif
