/* jsonscan.h - the incremental JSON structure scanner (toolcall_json.c),
 * the one streaming JSON scanner of the server.
 *
 * It exists because model output must be followed as it streams: it sees
 * the JSON one byte at a time and reports keys and the start and end of
 * every value with its position, so the tool-call parser can emit a
 * call's name the moment its string closes and copy argument bytes out as
 * they arrive, and a forced call ends the moment its arguments close
 * (server/gen.c). It checks the structure strictly (brackets, commas,
 * colons, escapes, number and literal spelling) but keeps no tree;
 * jansson validates what we output. (jsonguard.c keeps its own compact
 * state: it is copied once per vocabulary trie node while masking.) */
#ifndef STRATA_TEXT_JSONSCAN_H
#define STRATA_TEXT_JSONSCAN_H

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

/* Callbacks (each may be NULL) return 0 to go on, anything else to stop
 * the scan (it is returned by tc_jscan_byte). depth is the number of open containers
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

/* Follows the string member `key` of a JSON object's root as the object
 * streams in, and decodes that string's text as it grows: each byte is
 * scanned and decoded once. (A custom tool's input, server/resp_tools.c:
 * parsing the whole arguments again per token was quadratic in the length
 * of a patch.) */
typedef struct tc_member_stream {
    tc_jscan js;
    const char *key; /* borrowed */
    size_t body, used, end; /* the string's body starts at body, is decoded up to used, ends at end */
    int state;
} tc_member_stream;

void tc_member_stream_init(tc_member_stream *ms, const char *key);
void tc_member_stream_free(tc_member_stream *ms);
/* s[0..n) is the whole text so far (the bytes seen before, then new ones).
 * Appends to out the member's text decoded since the last call: an escape
 * cut at the end waits for its rest. 0, or -1 (nothing appended) once the
 * text cannot be followed this way: not JSON, the member not a string or
 * given twice. The caller then parses the whole text instead. */
int tc_member_stream_next(tc_member_stream *ms, const char *s, size_t n, tc_buf *out);

/* A JSON text (malloc'd) that completes the first n bytes of an object
 * cut off part way (a tool call's arguments stopped by max_tokens): an
 * open string is closed, a trailing member that cannot stand (a key
 * without its value, a cut number or literal) is dropped, and the open
 * containers are closed. NULL when s is not the start of a JSON object. */
char *tc_json_close_partial(const char *s, size_t n);

#endif
