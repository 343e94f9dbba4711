/* test_dates.c - the dates a chat template wrote lately (server/dates.c):
 * the newest DATES_KEEP distinct texts kept, the others of a text newest
 * first, and the list saved at each change and loaded at start. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/dates.h"
#include "test.h"
#include "test_util.h"

#define DAY 86400LL
#define T0 1773144000LL /* 2026-03-10 12:00 UTC */

static void note(date_list *d, int day) {
    char text[32];
    snprintf(text, sizeof text, "2026-03-%02d", 10 + day);
    dates_note(d, T0 + day * DAY, text, strlen(text));
}

TEST(dates_keep_the_newest_and_persist) {
    char *dir = test_tmpdir_new(), path[512];
    snprintf(path, sizeof path, "%s/dates-x.bin", dir);
    date_list *d = dates_new(path);
    long long out[DATES_KEEP];
    CHECK_EQ_INT(dates_others(d, "2026-03-10", 10, out, DATES_KEEP), 0);
    for (int day = 0; day <= DATES_KEEP; day++) note(d, day); /* one more than kept: day 0 goes */
    note(d, 3);                                               /* known: no change */
    dates_note(d, T0, "two\nlines", 9);                       /* not one line: not kept */
    int n = dates_others(d, "2026-03-18", 10, out, DATES_KEEP);
    CHECK_EQ_INT(n, DATES_KEEP - 1);
    for (int i = 0; i < n; i++) CHECK_EQ_INT(out[i], T0 + (DATES_KEEP - 1 - i) * DAY); /* days 7..1 */
    CHECK_EQ_INT(dates_others(d, "2026-03-18", 10, out, 2), 2);
    CHECK_EQ_INT(out[1], T0 + (DATES_KEEP - 2) * DAY);
    dates_free(d);
    /* A restart: the same list, a damaged line skipped. */
    FILE *f = fopen(path, "a");
    CHECK(f != NULL);
    if (f) fputs("garbage\n-5 1969\n", f), fclose(f);
    d = dates_new(path);
    n = dates_others(d, "nothing", 7, out, DATES_KEEP);
    CHECK_EQ_INT(n, DATES_KEEP);
    CHECK_EQ_INT(out[0], T0 + DATES_KEEP * DAY);
    CHECK_EQ_INT(out[DATES_KEEP - 1], T0 + DAY);
    dates_free(d);
    /* Memory only: nothing written. */
    d = dates_new(NULL);
    note(d, 0);
    CHECK_EQ_INT(dates_others(d, "x", 1, out, DATES_KEEP), 1);
    dates_free(d);
    test_tmpdir_free(dir);
}
