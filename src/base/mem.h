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

/* The capacity an array grows to so that it holds `need` items: `cap`
 * doubled (starting from `first` when it is 0) until it does. */
size_t mem_grown_cap(size_t cap, size_t need, size_t first);
/* Room for `need` items of `size` bytes in `items`, whose capacity is
 * *cap: grows *cap by mem_grown_cap and reallocates when it is short.
 * Returns the array, moved or not. */
void *xgrow(void *items, size_t size, size_t need, size_t *cap, size_t first);
/* xgrow for an array variable and a capacity of any integer type: the one
 * grow-an-array step of the tree. */
#define XGROW(arr, cap, need, first)                                                     \
    do {                                                                                 \
        if ((size_t)(need) > (size_t)(cap)) {                                            \
            size_t xgrow_cap_ = (size_t)(cap);                                           \
            (arr) = xgrow((arr), sizeof *(arr), (size_t)(need), &xgrow_cap_, (first));   \
            (cap) = xgrow_cap_;                                                          \
        }                                                                                \
    } while (0)

/* Length of the common prefix of a[0..na) and b[0..nb) (token ids). */
static inline int mem_common_prefix_i32(const int32_t *a, int na, const int32_t *b, int nb) {
    int m = 0;
    while (m < na && m < nb && a[m] == b[m]) m++;
    return m;
}

#endif
