/* quant_work.c - the per-thread work buffer of the SIMD matmul kernels
 * (quant_work, quant_impl.h): the avx2 and avx512 legacy prefill's
 * prepared rows, the amx level's tile layouts. Plain C, built without
 * level flags, so every level may call it. Does not: any arithmetic. */
#include "backend/quant_impl.h"

#include "base/mem.h"

#include <pthread.h>
#include <stdlib.h>

/* Kept across calls (freed when the thread ends): a fresh ~0.5 MiB
 * malloc per call came from new pages each time (glibc trims the heap top
 * on free), and clearing them was 3% of the amx kernel's time. */
typedef struct {
    uint8_t *p;
    size_t cap;
} work_buf;
static pthread_key_t work_key;
static pthread_once_t work_once = PTHREAD_ONCE_INIT;

static void work_free(void *b) {
    free(((work_buf *)b)->p);
    free(b);
}
static void work_init(void) { pthread_key_create(&work_key, work_free); }

uint8_t *quant_work(size_t n) {
    pthread_once(&work_once, work_init);
    work_buf *b = pthread_getspecific(work_key);
    if (!b) {
        b = xcalloc(1, sizeof *b);
        pthread_setspecific(work_key, b);
    }
    if (b->cap < n) {
        free(b->p);
        b->p = xaligned(n);
        b->cap = n;
    }
    return b->p;
}
