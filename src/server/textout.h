/* textout.h - generated text as it grows: stop strings and safe release.
 *
 * Pieces of detokenized output are appended; a stop string ends the text
 * at its first byte. Text is released for streaming only when it cannot
 * turn out to be the start of a stop string or a cut UTF-8 character, so
 * a client never sees bytes that are taken back. */
#ifndef STRATA_TEXTOUT_H
#define STRATA_TEXTOUT_H

#include <stddef.h>

#define TEXTOUT_MAX_STOPS 8

typedef struct textout {
    char *buf;
    size_t len, cap;
    size_t released; /* bytes handed out so far */
    char *stops[TEXTOUT_MAX_STOPS];
    int n_stops;
    int stopped;     /* a stop string was found; buf ends before it */
    int hit;         /* index of that stop string */
} textout;

void textout_init(textout *t);
void textout_free(textout *t);
/* Copies the stop string; returns -1 when the table is full or s is empty. */
int textout_add_stop(textout *t, const char *s);
/* Appends a piece (ignored once stopped). Returns 1 if it hit a stop string. */
int textout_append(textout *t, const char *piece, size_t n);
/* New releasable text: sets *p and returns its length, and marks it
 * released. final: the generation is over, release everything left. */
size_t textout_release(textout *t, int final, const char **p);

#endif
