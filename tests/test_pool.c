/* test_pool.c - the thread pool: pool_run (every thread runs once) and
 * pool_run_any (shared-counter jobs; late workers skip), interleaved. */
#include <stdatomic.h>
#include <string.h>

#include "base/pool.h"
#include "test.h"

enum { UNITS = 97, THREADS = 3 };

typedef struct {
    atomic_int next;
    atomic_int done[UNITS]; /* times each unit ran */
    atomic_int calls[THREADS];
} any_job;

static void any_fn(void *p, int ith, int nth) {
    any_job *j = p;
    atomic_fetch_add(&j->calls[ith], 1);
    for (int u; (u = atomic_fetch_add(&j->next, 1)) < UNITS;) atomic_fetch_add(&j->done[u], 1);
}

typedef struct {
    atomic_int ran[THREADS];
} all_job;

static void all_fn(void *p, int ith, int nth) {
    all_job *j = p;
    atomic_fetch_add(&j->ran[ith], 1);
}

/* Thousands of short jobs of both kinds back to back (the stack slot of
 * each job is reused at once, as forward.c does): every unit of an any
 * job runs exactly once, every thread runs an all job exactly once, and
 * no late worker touches a finished job. */
TEST(pool_run_any_and_run_interleaved) {
    pool *p = pool_new(THREADS);
    int bad = 0;
    for (int it = 0; it < 5000; it++) {
        any_job a;
        memset(&a, 0, sizeof a);
        pool_run_any(p, any_fn, &a);
        for (int u = 0; u < UNITS; u++) bad += atomic_load(&a.done[u]) != 1;
        bad += atomic_load(&a.calls[0]) != 1; /* the caller always takes part */
        memset(&a, 0x55, sizeof a);          /* a late worker would now run wild */
        if (it % 3 == 0) {
            all_job b;
            memset(&b, 0, sizeof b);
            pool_run(p, all_fn, &b);
            for (int t = 0; t < THREADS; t++) bad += atomic_load(&b.ran[t]) != 1;
        }
    }
    CHECK_EQ_INT(bad, 0);
    pool_free(p);
}
