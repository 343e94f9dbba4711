/* sse.c - server-sent event buffer (see sse.h). */
#include "server/sse.h"

#include <stdlib.h>
#include <string.h>

#include "base/mem.h"

void sse_raw(sse_buf *b, const char *s, size_t n) {
    if (b->off == b->len) b->off = b->len = 0; /* drained: reuse from the start */
    b->data = xrealloc(b->data, b->len + n + 1);
    memcpy(b->data + b->len, s, n);
    b->len += n;
}

static void add_str(sse_buf *b, const char *s) { sse_raw(b, s, strlen(s)); }

void sse_event(sse_buf *b, const char *name, json_t *obj) {
    char *js = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    if (name) {
        add_str(b, "event: ");
        add_str(b, name);
        add_str(b, "\n");
    }
    add_str(b, "data: ");
    add_str(b, js ? js : "{}");
    add_str(b, "\n\n");
    free(js);
}

void sse_comment(sse_buf *b, const char *text) {
    add_str(b, ": ");
    add_str(b, text);
    add_str(b, "\n\n");
}

int sse_empty(const sse_buf *b) { return b->off == b->len; }

size_t sse_take(sse_buf *b, char *out, size_t max) {
    size_t n = b->len - b->off;
    if (n > max) n = max;
    memcpy(out, b->data + b->off, n);
    b->off += n;
    return n;
}

void sse_free(sse_buf *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}
