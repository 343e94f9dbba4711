/* dates.h - the dates a chat template wrote into prompts lately.
 *
 * A template that calls strftime_now (gpt-oss's "Current date:", Llama
 * 3.2's "Today Date:") renders a conversation differently once the day
 * changes, and its whole prompt would be prefilled again from the date
 * on. The server remembers the last DATES_KEEP distinct texts the
 * template wrote, with a time that writes each, so server/prompt.c can
 * render a conversation with the day it began (README, "Cache
 * behaviour"). The list is saved beside the disk tier at each change and
 * loaded at start: a conversation continued the next day after a restart
 * is found on the disk tier under its old date. Thread-safe.
 * Does not: render, or decide which date a request gets (prompt.c). */
#ifndef STRATA_DATES_H
#define STRATA_DATES_H

#include <stddef.h>

#define DATES_KEEP 8
#define DATES_TEXT_MAX 64 /* longer texts (a template's odd format) are not remembered */

typedef struct date_list date_list;

/* path: the file the list lives in (loaded now; a missing or damaged file
 * gives an empty list), or NULL: memory only. */
date_list *dates_new(const char *path);
void dates_free(date_list *d); /* NULL is fine */

/* The template wrote text (len bytes) when rendering at time t (seconds
 * since the epoch). A text not in the list takes the place of the oldest
 * and the list is saved. */
void dates_note(date_list *d, long long t, const char *text, size_t len);

/* The times of the remembered texts other than text (len bytes), newest
 * first: at most cap into out; returns how many. */
int dates_others(date_list *d, const char *text, size_t len, long long *out, int cap);

#endif
