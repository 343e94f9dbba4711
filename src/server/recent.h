/* recent.h - the last N requests' records, kept in memory: one JSON object
 * per request holding what the cache did for it and why. The same record
 * is the request's --trace line and what GET /ui/state hands to the page
 * (server/ui.c), so the facts are written once.
 *
 * A record is opened by the HTTP thread when the request is submitted
 * (who asked, which conversation, the prompt's messages, where it first
 * differs from a recent prompt, the text around that) and closed by the
 * scheduler when the request ends (tokens from each tier, blocks,
 * timings, finish: sched.c). Closing merges the two halves, writes the
 * trace line, and marks the record changed; a reader asks for the records
 * changed since a revision, of one tenant or of all. The oldest record
 * leaves when the ring is full. Thread-safe (one mutex, held for pointer work
 * only: readers take references and write JSON outside it).
 * Does not: decide anything, or know HTTP (server/ui.c serves the page). */
#ifndef STRATA_RECENT_H
#define STRATA_RECENT_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

typedef struct recent_ring recent_ring;

/* cap records at most; cap <= 0 gives NULL, a ring that keeps nothing
 * (every call below accepts NULL, and recent_close still writes the trace). */
recent_ring *recent_new(int cap);
void recent_free(recent_ring *r); /* NULL is fine */

/* Adds a running request's record (takes ownership of rec, an object);
 * tenant (copied; NULL: none) is whose it is. Returns its id (> 0), which
 * the record also carries as "id"; 0 for a NULL ring (rec is freed). */
long recent_open(recent_ring *r, const char *tenant, json_t *rec);

/* Ends record id: facts (owned) are merged into it and, when trace is
 * not NULL, the merged record is written to it as one JSON line, less
 * the page-only keys (the prompt's message list and text excerpt). A
 * record already gone from the ring (or id 0) is traced from facts alone. */
void recent_close(recent_ring *r, long id, json_t *facts, FILE *trace);

/* The records changed after revision `since` (0: all), oldest first, of
 * one tenant (NULL: every tenant's; "": requests without a tenant); the
 * ring's revision now in *rev. A new array (the caller's reference) of
 * records shared with the ring: read them, never change them (a record is
 * replaced, not changed, when it closes). */
json_t *recent_list(recent_ring *r, long since, const char *tenant, long *rev);

/* The ring beside the disk tier, so the page still shows the requests
 * before a restart: JSON lines (one record each, oldest first, its tenant
 * as "tenant") in base/fs.h's frame for this model, written atomically.
 * Records read back go in as closed ones, ids continuing after the
 * largest; a line that is not a record object is skipped and counted in
 * *bad. -1 when the file cannot be written, or is missing or damaged
 * (then nothing is loaded). */
int recent_save(recent_ring *r, const char *path, const uint8_t model_fp[32]);
int recent_load(recent_ring *r, const char *path, const uint8_t model_fp[32], int *bad);

#endif
