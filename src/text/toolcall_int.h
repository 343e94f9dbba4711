/* toolcall_int.h - what toolcall.c and toolcall_json.c share (not a public
 * API): JSON string/UTF-8 helpers beside the streaming scanner
 * (jsonscan.h). */
#ifndef STRATA_TOOLCALL_INT_H
#define STRATA_TOOLCALL_INT_H

#include <stddef.h>

#include "text/jsonscan.h"

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


#endif
