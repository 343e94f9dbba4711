/* log.h - the one logging call: levels, key=value fields, a reason; each
 * line starts with a UTC timestamp. The level and the sink are among the
 * few allowed globals (see STYLE.md). */
#ifndef STRATA_LOG_H
#define STRATA_LOG_H

enum { LOG_DEBUG = 0, LOG_INFO = 1, LOG_WARN = 2, LOG_ERROR = 3 };

extern int g_log_level;
/* Printed after the level when set: the test runner marks the warnings
 * its negative tests provoke on purpose ("expected"). */
extern const char *g_log_tag;

void log_msg(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends log lines to path from now on (instead of stderr); -1 with
 * errno if it cannot be opened. */
int log_to_file(const char *path);

#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

#endif
