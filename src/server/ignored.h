/* ignored.h - what a request asked for that this server cannot honour.
 *
 * DESIGN.md, principle 7: a request the official API would accept is
 * served. A part the server cannot honour (a hosted tool such as
 * web_search, a JSON Schema keyword the guard does not enforce, an image
 * for a text-only model) is left out, the rest is served, and what was
 * left out is listed here. The list goes to the reply's x-strata-ignored
 * header, the request's log line and its --trace line. Under
 * --strict-requests each entry is a 400 instead (the note's text is the
 * error). Does not: decide what is honoured (the API parsers do). */
#ifndef STRATA_IGNORED_H
#define STRATA_IGNORED_H

#include <stddef.h>

#define IGNORED_MAX_TEXT 900 /* bytes of "; "-joined entries; more are counted, not listed */

typedef struct req_ignored {
    int strict;   /* --strict-requests: every note is an error */
    int n;        /* entries noted (listed or not) */
    size_t len;   /* of text */
    char text[IGNORED_MAX_TEXT + 32];
} req_ignored;

/* Notes one thing left out, e.g. "tools[3]: hosted tool 'web_search' (not
 * offered to the model)". Returns 0; under strict, -1 with why set to
 * the same text (the caller answers 400). ig NULL: nothing is kept. */
int ignored_note(req_ignored *ig, char *why, size_t cap, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* The list ("" when nothing was left out), and the list as an HTTP
 * header value (printable ASCII only; malloc'd, NULL when empty). */
const char *ignored_text(const req_ignored *ig);
char *ignored_header_value(const req_ignored *ig);

#endif
