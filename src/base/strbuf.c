/* strbuf.c - a growing byte string (see strbuf.h). */
#include "base/strbuf.h"

#include <stdlib.h>
#include <string.h>

#include "base/mem.h"

void strbuf_add(strbuf *b, const char *data, size_t n) {
    XGROW(b->s, b->cap, b->len + n + 1, 64);
    if (n) memcpy(b->s + b->len, data, n);
    b->len += n;
    b->s[b->len] = 0;
}

void strbuf_puts(strbuf *b, const char *text) {
    if (text) strbuf_add(b, text, strlen(text));
}

char *strbuf_take(strbuf *b) {
    char *s = b->s ? b->s : xstrdup("");
    *b = (strbuf){0};
    return s;
}

void strbuf_free(strbuf *b) {
    free(b->s);
    *b = (strbuf){0};
}
