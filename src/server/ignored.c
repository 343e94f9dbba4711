/* ignored.c - the list of what a request asked for and did not get
 * (see ignored.h). */
#include "server/ignored.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/mem.h"

int ignored_note(req_ignored *ig, char *why, size_t cap, const char *fmt, ...) {
    char entry[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(entry, sizeof entry, fmt, ap);
    va_end(ap);
    if (ig && ig->strict) {
        snprintf(why, cap, "%s (refused: --strict-requests)", entry);
        return -1;
    }
    if (!ig) return 0;
    if (strstr(ig->text, entry)) return 0; /* once per distinct entry */
    ig->n++;
    size_t n = strlen(entry), sep = ig->len ? 2 : 0;
    if (ig->len + sep + n <= IGNORED_MAX_TEXT) {
        memcpy(ig->text + ig->len, "; ", sep);
        memcpy(ig->text + ig->len + sep, entry, n + 1);
        ig->len += sep + n;
    } else if (!strstr(ig->text, "; ...")) {
        memcpy(ig->text + ig->len, "; ...", 6); /* the count is in n */
        ig->len += 5;
    }
    return 0;
}

const char *ignored_text(const req_ignored *ig) { return ig && ig->n ? ig->text : ""; }

char *ignored_header_value(const req_ignored *ig) {
    if (!ig || !ig->n) return NULL;
    char *v = xstrdup(ig->text);
    for (char *p = v; *p; p++) /* request text (tool names, types) may hold anything */
        if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e) *p = '?';
    return v;
}
