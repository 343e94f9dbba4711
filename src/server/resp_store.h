/* resp_store.h - the Responses API's store of recent responses.
 *
 * POST /v1/responses keeps each response (unless "store": false) so a
 * later request can continue it with previous_response_id, and GET and
 * DELETE /v1/responses/{id} can find it. An entry holds the response
 * object as returned and the whole conversation it answered (every input
 * item, earlier turns expanded), both as JSON text: continuing needs
 * nothing but the one entry, so evicting an older turn never breaks a
 * newer one. Entries live in a namespace (the tenant, server_replay_ns):
 * one API key never finds another's responses.
 *
 * Bounded by entries and bytes, least recently used out; thread-safe.
 * Persisted beside the disk tier (resp_store_save at shutdown,
 * resp_store_load at start) so a restart does not break a session that
 * continues by id. Does not: parse or render items (api_responses.c). */
#ifndef STRATA_RESP_STORE_H
#define STRATA_RESP_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "cache/hash.h"

typedef struct resp_store resp_store;

resp_store *resp_store_new(size_t max_entries, size_t max_bytes);
void resp_store_free(resp_store *rs); /* NULL is fine */

/* Keeps copies of the response and input texts under (ns, id), replacing
 * an entry of that id; an entry larger than the byte budget is not kept. */
void resp_store_put(resp_store *rs, const cache_hash *ns, const char *id, const char *response, const char *input);
/* 0 and malloc'd copies (either out pointer may be NULL), or -1 when no
 * such entry (never stored, deleted, evicted, or another namespace's). */
int resp_store_get(resp_store *rs, const cache_hash *ns, const char *id, char **response, char **input);
/* 0 if the entry was there and is gone, -1 if there was none. */
int resp_store_delete(resp_store *rs, const cache_hash *ns, const char *id);
size_t resp_store_count(resp_store *rs);

/* File: "STRRESP1" | model fp[32] | u64 count | count x {ns[32] |
 * u32 id_len | u32 response_len | u32 input_len | id | response | input},
 * least recently used first | SHA-256 of everything before it. Written
 * to a temp file and renamed. Loading checks magic, model and checksum: a
 * file failing any check is ignored (-1), never half-loaded. */
int resp_store_save(resp_store *rs, const char *path, const uint8_t model_fp[32]);
int resp_store_load(resp_store *rs, const char *path, const uint8_t model_fp[32]);

#endif
