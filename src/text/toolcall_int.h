/* toolcall_int.h - what toolcall.c and toolcall_json.c share (not a public
 * API): a growable byte buffer, an incremental JSON structure scanner, and
 * JSON string/UTF-8 helpers.
 *
 * The scanner exists because tool calls must stream: it sees the JSON one
 * byte at a time and reports keys and the start and end of every value
 * with its position, so the parser can emit a call's name the moment its
 * string closes and copy argument bytes out as they arrive. It checks the
 * structure strictly (brackets, commas, colons, escapes, number and
 * literal spelling) but keeps no tree; jansson validates what we output. */
#ifndef STRATA_TOOLCALL_INT_H
#define STRATA_TOOLCALL_INT_H

#include <stddef.h>

/* Growable buffer, always NUL-terminated once anything was added. */
typedef struct tc_buf {
    char *p;
    size_t len, cap;
} tc_buf;

void tc_buf_add(tc_buf *b, const void *s, size_t n);
void tc_buf_addc(tc_buf *b, char c);
void tc_buf_clear(tc_buf *b);
void tc_buf_free(tc_buf *b);

/* Deepest JSON nesting accepted in model output. */
#define TC_JSON_MAX_DEPTH 128

/* Callbacks return 0 to go on, anything else to stop the scan (it is
 * returned by tc_jscan_byte). depth is the number of open containers
 * around the key or value (0: the root value). Positions are offsets in
 * the scanner's doc buffer; spans are [start, end) and include quotes. */
typedef struct tc_jscan_cb {
    void *ctx;
    int (*key)(void *ctx, int depth, size_t start, size_t end);
    int (*begin)(void *ctx, int depth, char first, size_t at);
    int (*end)(void *ctx, int depth, size_t start, size_t end);
} tc_jscan_cb;

typedef struct tc_jscan {
    tc_buf doc;  /* every byte fed, so spans can be read back */
    tc_jscan_cb cb;
    int st, depth, hex_left, in_key;
    size_t tok;  /* start of the current string, number or literal */
    char stack[TC_JSON_MAX_DEPTH + 1];
    size_t vstart[TC_JSON_MAX_DEPTH + 1];         /* value being read at depth */
    size_t key_s[TC_JSON_MAX_DEPTH + 1], key_e[TC_JSON_MAX_DEPTH + 1];
    const char *why; /* reason of the last scan error */
} tc_jscan;

#define TC_JSCAN_DONE 1   /* tc_jscan_byte: the root value is complete */
#define TC_JSCAN_ERR (-1) /* tc_jscan_byte: not JSON; why says what */

/* Starts a new document (the root must be an object or an array). */
void tc_jscan_reset(tc_jscan *js, const tc_jscan_cb *cb);
void tc_jscan_free(tc_jscan *js);
/* Feeds one byte: 0, TC_JSCAN_DONE, TC_JSCAN_ERR or a callback's code. */
int tc_jscan_byte(tc_jscan *js, unsigned char c);
/* 1 if c, fed next, would be whitespace outside any string. */
int tc_jscan_insignificant(const tc_jscan *js, unsigned char c);
/* 1 if the next byte fed lands inside a string (not in an escape). */
int tc_jscan_in_string(const tc_jscan *js);
/* 1 if the key of the value being read at depth is exactly `name`. */
int tc_jscan_key_is(const tc_jscan *js, int depth, const char *name);

/* Appends c to out as compact JSON would hold it: a raw control
 * character inside a string becomes its escape, anything else is copied.
 * Whitespace outside strings is the caller's business (it skips it). */
void tc_json_put(tc_buf *out, unsigned char c, int in_string);

/* Compacts a whole JSON text (drops whitespace outside strings, escapes
 * raw control characters inside them) into out. */
void tc_json_compact(const char *s, size_t n, tc_buf *out);

/* Decodes the body of a JSON string (no quotes) into UTF-8. Stops before
 * an escape that is not complete yet unless final; a lone surrogate
 * becomes U+FFFD. Sets *used to the bytes consumed; -1 on a bad escape. */
int tc_json_unescape(const char *s, size_t n, int final, tc_buf *out, size_t *used);

/* Length of the longest prefix of s that does not end inside a UTF-8
 * sequence that more bytes could still complete. */
size_t tc_utf8_complete(const char *s, size_t n);

#endif
