/* mem.c - allocation that aborts with the size on failure. */
#include "base/mem.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void oom(size_t n) {
    fprintf(stderr, "strata: out of memory allocating %zu bytes\n", n);
    abort();
}

void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) oom(n);
    return p;
}

void *xcalloc(size_t count, size_t size) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) oom(count * size);
    return p;
}

void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) oom(n);
    return q;
}

char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = xmalloc(n);
    memcpy(p, s, n);
    return p;
}

void *xaligned(size_t n) {
    void *p = NULL;
    size_t rounded = (n + 63) & ~(size_t)63;
    if (posix_memalign(&p, 64, rounded ? rounded : 64) != 0) oom(n);
    return p;
}

size_t mem_grown_cap(size_t cap, size_t need, size_t first) {
    if (!cap) cap = first ? first : 1;
    while (cap < need) {
        if (cap > SIZE_MAX / 2) oom(need);
        cap *= 2;
    }
    return cap;
}

void *xgrow(void *items, size_t size, size_t need, size_t *cap, size_t first) {
    if (need <= *cap) return items;
    size_t n = mem_grown_cap(*cap, need, first);
    if (size && n > SIZE_MAX / size) oom(SIZE_MAX);
    items = xrealloc(items, n * size);
    *cap = n;
    return items;
}
