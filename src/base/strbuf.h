/* strbuf.h - a growing NUL-terminated byte string (for text built piece
 * by piece: prompts from content parts, reports). Out of memory aborts,
 * as with xmalloc. */
#ifndef STRATA_STRBUF_H
#define STRATA_STRBUF_H

#include <stddef.h>

typedef struct strbuf {
    char *s;    /* NUL-terminated once anything was added; NULL before */
    size_t len; /* bytes, without the NUL */
    size_t cap;
} strbuf;

void strbuf_add(strbuf *b, const char *data, size_t n);
void strbuf_puts(strbuf *b, const char *text); /* text NULL: nothing */
/* The string, owned by the caller ("" when nothing was added); b is empty after. */
char *strbuf_take(strbuf *b);
void strbuf_free(strbuf *b);

#endif
