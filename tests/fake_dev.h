/* fake_dev.h - a device for backend/devmem.h in plain host memory, for
 * testing the tier logic without a GPU.
 *
 * It behaves like a GPU where that matters to the callers: "device"
 * memory is its own allocations (a copy whose direction does not match
 * the pointers fails, and is counted); a copy runs later than it is
 * queued, when some later call happens to drive the device, and reads its
 * source then (a caller that reuses the source before waiting gets the
 * new bytes, as with a real asynchronous copy); the two streams run in an
 * order drawn from a seeded generator, so copy-stream work overtakes
 * compute-stream work and the reverse unless events order them. It can
 * refuse the n-th allocation, and it counts live allocations and events,
 * so a test can check that nothing leaked. */
#ifndef STRATA_TEST_FAKE_DEV_H
#define STRATA_TEST_FAKE_DEV_H

#include <stddef.h>

#include "backend/devmem.h"

typedef struct fake_dev fake_dev;

typedef struct fake_dev_stats {
    int dev_allocs, host_allocs, events; /* live now */
    size_t dev_bytes, host_bytes;        /* live now */
    long copies[3];                      /* run, by devmem_dir */
    long on_stream[DEVMEM_STREAMS];      /* copies run, by stream */
    long misuse;                         /* copies refused: pointers not of the direction */
    long reordered;                      /* ops that ran while older work of the other stream waited */
} fake_dev_stats;

fake_dev *fake_dev_new(unsigned seed);
/* Frees what is still allocated (a test checks the stats first). */
void fake_dev_free(fake_dev *f);
/* Checks (test.h) that nothing is left, no allocation, no event, and no
 * copy was refused as misuse, then frees f. */
void fake_dev_free_clean(fake_dev *f);
const devmem *fake_dev_mem(fake_dev *f);
/* The n-th device (host: host_alloc) allocation from now fails (1: the
 * next one); 0: none. */
void fake_dev_fail_alloc(fake_dev *f, int nth, int host);
/* on: a busy device (long kernels ahead of everything queued): nothing
 * queued runs until the host waits for a stream (devmem_sync), which then
 * runs both streams in the seeded order until that stream is done; off:
 * as before. So a test can make sure copies are still queued when the
 * host goes on. */
void fake_dev_hold(fake_dev *f, int on);
void fake_dev_stats_get(fake_dev *f, fake_dev_stats *out);
/* Ops queued and not run yet, on both streams. */
int fake_dev_pending(fake_dev *f);

#endif
