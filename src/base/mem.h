/* mem.h - allocation helpers. Out of memory is not recoverable for these:
 * they print the requested size and abort. */
#ifndef STRATA_MEM_H
#define STRATA_MEM_H

#include <stddef.h>
#include <stdint.h>

void *xmalloc(size_t n);
void *xcalloc(size_t count, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
/* 64-byte aligned block (for SIMD rows); release with free(). */
void *xaligned(size_t n);

/* Length of the common prefix of a[0..na) and b[0..nb) (token ids). */
static inline int mem_common_prefix_i32(const int32_t *a, int na, const int32_t *b, int nb) {
    int m = 0;
    while (m < na && m < nb && a[m] == b[m]) m++;
    return m;
}

#endif
