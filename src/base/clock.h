/* clock.h - monotonic time for timings, wall time for records. */
#ifndef STRATA_CLOCK_H
#define STRATA_CLOCK_H

#include <time.h>

static inline double clock_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* CPU time of the whole process (every thread), in ms: what a
 * measurement costs on a machine shared with other jobs, where the wall
 * time mostly measures them. */
static inline double clock_cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Wall-clock seconds since the epoch (for records shown to people). */
static inline double clock_wall_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#endif
