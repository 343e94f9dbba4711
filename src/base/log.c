/* log.c - log lines "TIMESTAMP strata LEVEL message" to stderr or to the
 * file log_to_file opened. */
#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <sys/time.h>
#include <time.h>

int g_log_level = LOG_INFO;
const char *g_log_tag;
static FILE *g_log_file; /* NULL: stderr */

int log_to_file(const char *path) {
    FILE *f = fopen(path, "a");
    if (!f) return -1;
    setvbuf(f, NULL, _IOLBF, 0); /* a line at a time: tail -f sees each one */
    if (g_log_file) fclose(g_log_file);
    g_log_file = f;
    return 0;
}

/* UTC to the millisecond, ISO 8601. */
static void timestamp(char out[32]) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    size_t n = strftime(out, 32, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, 32 - n, ".%03dZ", (int)(tv.tv_usec / 1000));
}

void log_msg(int level, const char *fmt, ...) {
    static const char *names[] = {"debug", "info", "warn", "error"};
    if (level < g_log_level) return;
    char line[1024], ts[32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    timestamp(ts);
    fprintf(g_log_file ? g_log_file : stderr, "%s strata %s%s%s%s %s\n", ts, names[level & 3], g_log_tag ? " (" : "",
            g_log_tag ? g_log_tag : "", g_log_tag ? ")" : "", line);
}
