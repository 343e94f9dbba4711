/* dates.c - the dates a chat template wrote lately (see dates.h). */
#include "server/dates.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/mem.h"

typedef struct date_entry {
    long long t;
    char text[DATES_TEXT_MAX + 1];
} date_entry;

struct date_list {
    pthread_mutex_t mu;
    date_entry e[DATES_KEEP];
    int n;
    char *path;
};

static int find_locked(const date_list *d, const char *text, size_t len) {
    for (int i = 0; i < d->n; i++)
        if (strlen(d->e[i].text) == len && !memcmp(d->e[i].text, text, len)) return i;
    return -1;
}

/* A text fit to keep: short, one line (the file holds a line each). */
static int keepable(const char *text, size_t len) {
    return len > 0 && len <= DATES_TEXT_MAX && !memchr(text, '\n', len) && !memchr(text, '\0', len);
}

/* Adds an entry, in place of the oldest when full. 1 when added. */
static int add_locked(date_list *d, long long t, const char *text, size_t len) {
    if (!keepable(text, len) || find_locked(d, text, len) >= 0) return 0;
    int at = d->n < DATES_KEEP ? d->n++ : 0;
    for (int i = 1; at == 0 && d->n == DATES_KEEP && i < d->n; i++)
        if (d->e[i].t < d->e[at].t) at = i;
    d->e[at].t = t;
    memcpy(d->e[at].text, text, len);
    d->e[at].text[len] = 0;
    return 1;
}

/* One line per entry, "TIME TEXT", written whole then renamed over the
 * old file, so a crash leaves one list or the other. */
static void save_locked(const date_list *d) {
    if (!d->path) return;
    size_t pl = strlen(d->path) + 8;
    char *tmp = xmalloc(pl);
    snprintf(tmp, pl, "%s.tmp", d->path);
    FILE *f = fopen(tmp, "w");
    int ok = f != NULL;
    for (int i = 0; ok && i < d->n; i++) ok = fprintf(f, "%lld %s\n", d->e[i].t, d->e[i].text) > 0;
    if (f && fclose(f)) ok = 0;
    if (!ok || rename(tmp, d->path)) {
        log_warn("template dates: cannot save %s", d->path);
        remove(tmp);
    }
    free(tmp);
}

static void load(date_list *d) {
    FILE *f = fopen(d->path, "r");
    char line[DATES_TEXT_MAX + 32];
    while (f && fgets(line, sizeof line, f)) {
        char *sp = strchr(line, ' '), *end;
        long long t = strtoll(line, &end, 10);
        size_t len = sp ? strcspn(sp + 1, "\n") : 0;
        if (sp && end == sp && t > 0) add_locked(d, t, sp + 1, len);
    }
    if (f) fclose(f);
}

date_list *dates_new(const char *path) {
    date_list *d = xcalloc(1, sizeof *d);
    pthread_mutex_init(&d->mu, NULL);
    if (path) {
        d->path = xstrdup(path);
        load(d);
    }
    return d;
}

void dates_free(date_list *d) {
    if (!d) return;
    pthread_mutex_destroy(&d->mu);
    free(d->path);
    free(d);
}

void dates_note(date_list *d, long long t, const char *text, size_t len) {
    pthread_mutex_lock(&d->mu);
    if (add_locked(d, t, text, len)) save_locked(d);
    pthread_mutex_unlock(&d->mu);
}

static int newer_first(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

int dates_others(date_list *d, const char *text, size_t len, long long *out, int cap) {
    long long all[DATES_KEEP];
    int n = 0;
    pthread_mutex_lock(&d->mu);
    for (int i = 0; i < d->n; i++)
        if (strlen(d->e[i].text) != len || memcmp(d->e[i].text, text, len)) all[n++] = d->e[i].t;
    pthread_mutex_unlock(&d->mu);
    qsort(all, (size_t)n, sizeof all[0], newer_first);
    if (n > cap) n = cap;
    memcpy(out, all, (size_t)(n > 0 ? n : 0) * sizeof all[0]);
    return n;
}
