/* textout.c - stop strings and UTF-8-safe release (see textout.h). */
#include "server/textout.h"

#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "base/utf8.h"

void textout_init(textout *t) { memset(t, 0, sizeof *t); }

void textout_free(textout *t) {
    free(t->buf);
    for (int i = 0; i < t->n_stops; i++) free(t->stops[i]);
    memset(t, 0, sizeof *t);
}

int textout_add_stop(textout *t, const char *s) {
    if (!*s || t->n_stops == TEXTOUT_MAX_STOPS) return -1;
    t->stops[t->n_stops++] = xstrdup(s);
    return 0;
}

/* Searches only where a stop could newly appear: from the end of the old
 * text minus the longest stop string. */
static int find_stop(textout *t, size_t old_len) {
    for (int i = 0; i < t->n_stops; i++) {
        size_t sl = strlen(t->stops[i]);
        size_t from = old_len >= sl ? old_len - sl + 1 : 0;
        if (from < t->released) from = t->released;
        const char *hit = t->len >= from ? memmem(t->buf + from, t->len - from, t->stops[i], sl) : NULL;
        if (hit) {
            t->len = (size_t)(hit - t->buf);
            t->stopped = 1;
            t->hit = i;
            return 1;
        }
    }
    return 0;
}

int textout_append(textout *t, const char *piece, size_t n) {
    if (t->stopped) return 1;
    XGROW(t->buf, t->cap, t->len + n + 1, 256);
    size_t old = t->len;
    memcpy(t->buf + t->len, piece, n);
    t->len += n;
    t->buf[t->len] = 0;
    return find_stop(t, old);
}

/* Longest suffix of the text that is a proper prefix of a stop string. */
static size_t stop_prefix_tail(const textout *t) {
    size_t best = 0;
    for (int i = 0; i < t->n_stops; i++) {
        size_t sl = strlen(t->stops[i]);
        for (size_t k = sl - 1; k > best; k--)
            if (k <= t->len && memcmp(t->buf + t->len - k, t->stops[i], k) == 0) {
                best = k;
                break;
            }
    }
    return best;
}

size_t textout_release(textout *t, int final, const char **p) {
    size_t end = t->len;
    if (!final && !t->stopped) {
        size_t hold = stop_prefix_tail(t), cut = t->len - utf8_cut(t->buf, t->len);
        end -= hold > cut ? hold : cut;
    }
    if (end <= t->released) {
        *p = t->buf ? t->buf + t->released : "";
        return 0;
    }
    *p = t->buf + t->released;
    size_t n = end - t->released;
    t->released = end;
    return n;
}
