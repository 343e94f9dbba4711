/* utf8.c - UTF-8 validation, boundaries, decoding, encoding and cleaning. */
#include "base/utf8.h"

#include <string.h>

#include "base/mem.h"

size_t utf8_valid_seq(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    unsigned char b = p[0];
    if (b < 0x80) return 1;
    /* Lead bytes: C2..DF start 2, E0..EF 3, F0..F4 4; C0, C1 and F5..FF
     * never appear in UTF-8. */
    size_t k = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC2 ? 2 : 0;
    if (k == 0 || b > 0xF4 || k > n) return 0;
    for (size_t i = 1; i < k; i++)
        if ((p[i] & 0xC0) != 0x80) return 0;
    if (b == 0xE0 && p[1] < 0xA0) return 0; /* overlong */
    if (b == 0xED && p[1] >= 0xA0) return 0; /* surrogate */
    if (b == 0xF0 && p[1] < 0x90) return 0; /* overlong */
    if (b == 0xF4 && p[1] >= 0x90) return 0; /* > U+10FFFF */
    return k;
}

size_t utf8_cut(const char *s, size_t len) {
    /* The last character starts at most 3 continuation bytes back. */
    for (size_t back = 1; back <= 4 && back <= len; back++) {
        unsigned char c = (unsigned char)s[len - back];
        if ((c & 0xC0) == 0x80) continue;
        size_t need = c >= 0xF8 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return need > back ? len - back : len;
    }
    return len;
}

size_t utf8_chars(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

uint32_t utf8_decode_lenient(const char *s, size_t n, size_t *used) {
    const unsigned char *p = (const unsigned char *)s;
    unsigned char b = p[0];
    *used = 1;
    if (b < 0x80) return b;
    size_t k = !(b & 0x40) ? 0 : !(b & 0x20) ? 2 : !(b & 0x10) ? 3 : !(b & 0x08) ? 4 : 0;
    if (k == 0 || k > n) return 0xFFFD;
    for (size_t i = 1; i < k; i++)
        if ((p[i] & 0xC0) != 0x80) return 0xFFFD;
    uint32_t c = b & (0x7F >> k);
    for (size_t i = 1; i < k; i++) c = (c << 6) | (p[i] & 0x3F);
    *used = k;
    return c;
}

int utf8_len(uint32_t c) { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; }

size_t utf8_put(char *out, uint32_t c) {
    int n = utf8_len(c);
    if (n == 1) {
        out[0] = (char)c;
        return 1;
    }
    for (int i = n - 1; i > 0; i--, c >>= 6) out[i] = (char)(0x80 | (c & 0x3F));
    out[0] = (char)((0xF00 >> n) | c);
    return (size_t)n;
}

char *utf8_clean(const char *text, size_t len, size_t *out_len) {
    size_t i = 0;
    while (i < len) {
        size_t k = utf8_valid_seq(text + i, len - i);
        if (!k) break;
        i += k;
    }
    if (i == len) return NULL;
    /* Re-encode what llama.cpp decodes: overlong forms become the proper
     * encoding as there; surrogates and values past U+10FFFF, which
     * llama.cpp keeps or rejects, become U+FFFD here (PCRE2 needs valid
     * UTF-8). Every other invalid byte is one U+FFFD, as there. */
    char *o = xmalloc(len * 3 + 4);
    memcpy(o, text, i);
    size_t n = i;
    while (i < len) {
        size_t used;
        uint32_t c = utf8_decode_lenient(text + i, len - i, &used);
        if ((c >= 0xD800 && c < 0xE000) || c > 0x10FFFF) c = 0xFFFD;
        n += utf8_put(o + n, c);
        i += used;
    }
    *out_len = n;
    return o;
}
