/* err.c - filling strata_err records, and formatting messages that stay
 * valid UTF-8 when a buffer cuts them. */
#include "base/err.h"
#include "base/utf8.h"

#include <stdio.h>
#include <string.h>

size_t strata_vfmt(char *buf, size_t cap, const char *fmt, va_list ap) {
    int n = vsnprintf(buf, cap, fmt, ap);
    size_t len = n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
    len = utf8_cut(buf, len);
    buf[len] = 0;
    return len;
}

size_t strata_fmt(char *buf, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    size_t len = strata_vfmt(buf, cap, fmt, ap);
    va_end(ap);
    return len;
}

int strata_errf(strata_err *err, int code, const char *fmt, ...) {
    if (!err) return code;
    va_list ap;
    va_start(ap, fmt);
    strata_vfmt(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    err->code = code;
    return code;
}

const char *strata_strerror(int code) {
    switch (code) {
    case STRATA_OK: return "OK";
    case STRATA_EINVAL: return "EINVAL";
    case STRATA_EIO: return "EIO";
    case STRATA_ENOMEM: return "ENOMEM";
    case STRATA_EFORMAT: return "EFORMAT";
    case STRATA_EUNSUPPORTED: return "EUNSUPPORTED";
    case STRATA_ERANGE: return "ERANGE";
    case STRATA_EBUSY: return "EBUSY";
    default: return "EUNKNOWN";
    }
}
