/* sse.h - a buffer of server-sent events waiting to be written.
 * API handlers append events; the HTTP stream producer drains it. */
#ifndef STRATA_SSE_H
#define STRATA_SSE_H

#include <jansson.h>
#include <stddef.h>

typedef struct sse_buf {
    char *data;
    size_t len, off;
} sse_buf;

void sse_raw(sse_buf *b, const char *s, size_t n);
/* "event: NAME\n" (if name) + "data: JSON\n\n"; takes ownership of obj. */
void sse_event(sse_buf *b, const char *name, json_t *obj);
/* ": text\n\n" - a comment line (keep-alive, progress). */
void sse_comment(sse_buf *b, const char *text);
int sse_empty(const sse_buf *b);
/* Moves up to max buffered bytes to out; returns how many. */
size_t sse_take(sse_buf *b, char *out, size_t max);
void sse_free(sse_buf *b);

#endif
