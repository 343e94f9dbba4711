/* replay.h - exact replay of generated assistant turns.
 *
 * For every assistant reply the server returns, it remembers the exact
 * token ids the model generated, keyed by a hash of the text it returned.
 * When a later request carries that text back (as an assistant message,
 * in either API), the prompt uses those ids instead of re-tokenizing the
 * text, so turn N+1's prompt extends turn N's tokens exactly and the
 * prefix cache matches through the reply. Bounded (least recently used
 * out); thread-safe.
 * Does not: persist across restarts yet. */
#ifndef STRATA_REPLAY_H
#define STRATA_REPLAY_H

#include <stddef.h>
#include <stdint.h>

typedef struct replay_store replay_store;

replay_store *replay_new(size_t max_entries);
void replay_free(replay_store *r); /* NULL is fine */
void replay_put(replay_store *r, const char *text, size_t len, const int32_t *ids, size_t n);
/* A malloc'd copy of the ids remembered for text, or NULL. */
int32_t *replay_get(replay_store *r, const char *text, size_t len, size_t *n);

#endif
