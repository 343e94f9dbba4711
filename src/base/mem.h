/* mem.h - allocation helpers. Out of memory is not recoverable for these:
 * they print the requested size and abort. */
#ifndef STRATA_MEM_H
#define STRATA_MEM_H

#include <stddef.h>

void *xmalloc(size_t n);
void *xcalloc(size_t count, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
/* 64-byte aligned block (for SIMD rows); release with free(). */
void *xaligned(size_t n);

#endif
