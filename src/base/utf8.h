/* utf8.h - UTF-8 byte-level helpers, written once: validating a sequence,
 * cutting at a character boundary, counting, decoding and encoding, and
 * cleaning invalid bytes to U+FFFD. Text from models and clients passes
 * through all of these; one definition keeps their edge cases (C0/C1 and
 * F5..FF leads, overlongs, surrogates) the same everywhere. */
#ifndef STRATA_BASE_UTF8_H
#define STRATA_BASE_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Length (1..4) of the strictly valid sequence at s[0, n) (RFC 3629: no
 * overlongs, surrogates or values past U+10FFFF), 0 if invalid or cut. */
size_t utf8_valid_seq(const char *s, size_t n);

/* Length of s[0, len) without a trailing incomplete sequence: the longest
 * prefix that does not end inside a character (what a stream may emit
 * while the rest of the character is still to come). */
size_t utf8_cut(const char *s, size_t len);

/* Code points in s[0, n) (every byte that is not a continuation byte). */
size_t utf8_chars(const char *s, size_t n);

/* llama.cpp's lenient decoder: the lead byte gives the length, only the
 * continuation bytes' top bits are checked; otherwise one byte (*used = 1)
 * decodes to U+FFFD. n >= 1. */
uint32_t utf8_decode_lenient(const char *s, size_t n, size_t *used);

/* Bytes utf8_put writes for c (1..4). */
int utf8_len(uint32_t c);

/* Encodes c at out; returns the bytes written (1..4). */
size_t utf8_put(char *out, uint32_t c);

/* A malloc'd copy of text with every invalid byte (and surrogate or value
 * past U+10FFFF) as U+FFFD and overlong forms re-encoded, as llama.cpp
 * decodes them; NULL when text is valid already (nothing to copy). */
char *utf8_clean(const char *text, size_t len, size_t *out_len);

#endif
