/* log.c - log lines to stderr: "strata LEVEL message". */
#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>

int g_log_level = LOG_INFO;

void log_msg(int level, const char *fmt, ...) {
    static const char *names[] = {"debug", "info", "warn", "error"};
    if (level < g_log_level) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "strata %s %s\n", names[level & 3], line);
}
