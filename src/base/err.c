/* err.c - filling strata_err records. */
#include "base/err.h"

#include <stdarg.h>
#include <stdio.h>

int strata_errf(strata_err *err, int code, const char *fmt, ...) {
    if (!err) return code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
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
