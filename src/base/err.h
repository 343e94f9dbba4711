/* err.h - error codes and the error record every fallible call fills.
 *
 * Functions return 0 on success or a negative STRATA_E* code, and write a
 * one-line reason into the caller's strata_err: what failed, on which
 * object, why. Only main() turns an error into an exit status. */
#ifndef STRATA_ERR_H
#define STRATA_ERR_H

#include <stdarg.h>
#include <stddef.h>

enum {
    STRATA_OK = 0,
    STRATA_EINVAL = -1,      /* bad argument or request */
    STRATA_EIO = -2,         /* read/write/open failed */
    STRATA_ENOMEM = -3,      /* allocation refused (only where recoverable) */
    STRATA_EFORMAT = -4,     /* malformed file or data */
    STRATA_EUNSUPPORTED = -5,/* valid but not implemented (type, arch) */
    STRATA_ERANGE = -6,      /* value out of range (context full, ...) */
    STRATA_EBUSY = -7,       /* no capacity now; retry later */
};

typedef struct strata_err {
    int code;
    char msg[512];
} strata_err;

/* Fill err (if not NULL) with code and a printf-style reason; returns code. */
int strata_errf(strata_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Messages quote user text (model names, block types, template text) and
 * end up in JSON error bodies, which must be valid UTF-8: a message cut by
 * a fixed buffer in the middle of a character would make the JSON build
 * fail and the client get no error object. These cut at a character
 * boundary instead. */

/* vsnprintf into buf[cap] (cap > 0) that never leaves a partial UTF-8
 * character at the end, whether this call truncated or the last %s did.
 * Returns the length written. */
size_t strata_vfmt(char *buf, size_t cap, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
size_t strata_fmt(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Short name of a code, e.g. "EFORMAT". */
const char *strata_strerror(int code);

#endif
