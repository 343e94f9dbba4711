/* jsonload.c - JSON read the nearest way (see jsonload.h). */
#include "text/jsonload.h"

#include <stdlib.h>
#include <string.h>

#include "base/strbuf.h"

/* An integer literal of digits [d, e) (after any '-') that no 64-bit
 * integer holds. */
static int beyond_int64(const char *d, const char *e, int negative) {
    while (d < e - 1 && *d == '0') d++;
    size_t n = (size_t)(e - d);
    const char *max = negative ? "9223372036854775808" : "9223372036854775807";
    return n > 19 || (n == 19 && memcmp(d, max, 19) > 0);
}

/* The value of the 4 hex digits at s, or -1. */
static long hex4(const char *s, size_t left) {
    if (left < 4) return -1;
    char h[5] = {s[0], s[1], s[2], s[3], 0}, *end;
    long v = strtol(h, &end, 16);
    return end == h + 4 ? v : -1;
}

/* At buf[i] = '\\' inside a string: the length of the escape, with an
 * unpaired surrogate written as \uFFFD into b (from *from on). */
static size_t escape(const char *buf, size_t len, size_t i, strbuf *b, size_t *from, int *n) {
    if (i + 1 >= len || buf[i + 1] != 'u') return 2;
    long v = hex4(buf + i + 2, len - i - 2);
    if (v < 0xD800 || v > 0xDFFF) return 6;
    if (v <= 0xDBFF && i + 7 < len && buf[i + 6] == '\\' && buf[i + 7] == 'u') {
        long lo = hex4(buf + i + 8, len - i - 8);
        if (lo >= 0xDC00 && lo <= 0xDFFF) return 12; /* a pair */
    }
    strbuf_add(b, buf + *from, i - *from);
    strbuf_puts(b, "\\uFFFD");
    *from = i + 6;
    ++*n;
    return 6;
}

/* At buf[i], the first character of a number: its length, with an
 * integer beyond 64 bits written as a real ("...e0") into b. */
static size_t number(const char *buf, size_t len, size_t i, strbuf *b, size_t *from, int *n) {
    size_t digits = i + (buf[i] == '-'), j = digits;
    while (j < len && buf[j] >= '0' && buf[j] <= '9') j++;
    size_t end = j;
    while (j < len && strchr("0123456789.eE+-", buf[j])) j++; /* the rest of a real */
    if (j == end && end > digits && beyond_int64(buf + digits, buf + end, buf[i] == '-')) {
        strbuf_add(b, buf + *from, end - *from);
        strbuf_puts(b, "e0");
        *from = end;
        ++*n;
    }
    return j - i;
}

/* buf rewritten as above; *n: how many values changed. */
static char *rewrite(const char *buf, size_t len, size_t *out_len, int *n) {
    strbuf b = {0};
    size_t i = 0, from = 0;
    int in_str = 0;
    *n = 0;
    while (i < len) {
        char ch = buf[i];
        if (in_str && ch == '\\') i += escape(buf, len, i, &b, &from, n);
        else if (ch == '"') in_str = !in_str, i++;
        else if (!in_str && (ch == '-' || (ch >= '0' && ch <= '9'))) i += number(buf, len, i, &b, &from, n);
        else i++;
    }
    if (from < len) strbuf_add(&b, buf + from, len - from);
    *out_len = b.len;
    return strbuf_take(&b);
}

json_t *json_load_lenient_string(const json_t *s) {
    return json_is_string(s) ? json_load_lenient(json_string_value(s), json_string_length(s), 0, NULL, NULL) : NULL;
}

json_t *json_load_lenient(const char *buf, size_t len, size_t flags, json_error_t *je, int *n_near) {
    json_error_t first;
    int n = 0;
    json_t *root = json_loadb(buf, len, flags, &first);
    if (!root) {
        size_t n_out;
        char *near = rewrite(buf, len, &n_out, &n);
        if (n) root = json_loadb(near, n_out, flags, NULL);
        free(near);
    }
    if (!root && je) *je = first;
    if (n_near) *n_near = root ? n : 0;
    return root;
}
