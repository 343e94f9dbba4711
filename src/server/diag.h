/* diag.h - cache diagnostics: where a request's cached prefix ended and,
 * when its prompt differs from a recent prompt of the same tenant, where
 * the first difference lies and what it cost, so a client sees why a turn
 * was slow (a changed system prompt, an edited message) without reading
 * the server's trace.
 *
 * The store remembers the last DIAG_RECENT prompts per server (token ids,
 * at most DIAG_MAX_TOKENS each, keyed by the tenant's namespace so tenants
 * see nothing of each other); a new prompt is compared with the one that
 * shares its longest prefix. Thread-safe.
 * Does not: change what is cached (policy.c decides that). */
#ifndef STRATA_DIAG_H
#define STRATA_DIAG_H

#include <stdint.h>

#include "cache/hash.h"

#define DIAG_RECENT 16
#define DIAG_MAX_TOKENS 131072
#define DIAG_EXCERPT 48 /* tokens of the earlier prompt kept from its first difference on (the /ui page shows them) */

typedef struct diag_store diag_store;

diag_store *diag_new(void);
void diag_free(diag_store *d); /* NULL is fine */

/* A prompt against the recent ones: diverged when it leaves the most
 * similar recent prompt before that one's end (an edit, not an
 * extension). */
typedef struct cache_diag {
    int diverged;  /* 1: first_diff and lost are set */
    int first_diff;/* token position of the first difference */
    int lost;      /* tokens both prompts have past it: reusable had the prompt not changed */
    int32_t was[DIAG_EXCERPT]; /* the earlier prompt's tokens from first_diff on (what was there) */
    int n_was;
} cache_diag;

/* Compares ids (n tokens, namespace ns) with the recent prompts and
 * remembers it. */
void diag_observe(diag_store *d, const cache_hash *ns, const int32_t *ids, int n, cache_diag *out);

/* The longest prefix ids (n tokens) shares with a recent prompt of ns,
 * without remembering it (0: none). */
int diag_shared(diag_store *d, const cache_hash *ns, const int32_t *ids, int n);

/* Anthropic's cache-diagnosis beta compares a request with the one whose
 * reply had a given id. These remember a request's prompt under its reply
 * id (the last DIAG_RECENT of them) and compare a new prompt with it:
 * 1 when found (out filled, with diverged 0 when the new prompt extends
 * it), 0 when the id is unknown or expired. */
void diag_remember_reply(diag_store *d, const char *reply_id, const cache_hash *ns, const int32_t *ids, int n);
int diag_compare_reply(diag_store *d, const char *reply_id, const cache_hash *ns, const int32_t *ids, int n,
                       cache_diag *out);

/* The message holding token position pos: msg_ends[k] (k = 0..n_msgs) is
 * where the first k messages end (-1: unknown). -1 when not known. */
int diag_message_at(const int *msg_ends, int n_msgs, int pos);

#endif
