/* snapshot.h - recurrent-state snapshots: the block store's second payload
 * kind (DESIGN.md, "Blocks and hashes").
 *
 * A model with recurrent layers (qwen35) cannot resume from K/V alone: it
 * also needs every recurrent layer's state (conv + delta state, kv_seq.rs)
 * as it was after the prefix's last token. A snapshot is that state at a
 * position P, attached to the chain hash that names tokens[0..P): the hash
 * of the full block ending at P, or of the tail (partial block) ending
 * there. It is filed under its *boundary*: the chain hash at the last
 * block boundary at or before P (the root for P < B), with r = P mod B
 * tokens past it (r = 0: the key is the boundary itself). So the store
 * finds the longest snapshot of a prompt by walking its block boundaries
 * backwards and hashing only the few tails that a snapshot names.
 *
 * This table is the store's index of snapshots: those in memory (data) and
 * those a lower tier holds (tiers, a bit per tier in the store's order),
 * counted against a byte budget of their own (data only) and evicted
 * least recently used first, retained ones after every other.
 * Single-threaded (the scheduler's thread, like the store).
 * Does not: read or write files (disk_snap.c), decide positions (policy.c). */
#ifndef STRATA_CACHE_SNAPSHOT_H
#define STRATA_CACHE_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>

#include "cache/hash.h"

typedef struct snap_entry {
    cache_hash key;      /* chain hash of tokens[0..pos) */
    cache_hash boundary; /* chain hash at pos - r (== key when r == 0) */
    int r;               /* tokens past the boundary, 0..B-1 */
    int pos;             /* P: tokens the state summarises */
    float *data;         /* the state in memory, or NULL (lower tiers only) */
    size_t n_floats;
    unsigned tiers;      /* bit k: lower tier k holds it */
    double last_use;     /* monotonic seconds */
    double keep_until;   /* monotonic seconds: retained until then (0: not) */
} snap_entry;

typedef struct snap_stats {
    long stored, restored, evicted, dropped_lower; /* counts since start */
    long entries;        /* in the index now */
    size_t bytes;        /* state bytes held in memory now */
} snap_stats;

typedef struct snap_table snap_table;

snap_table *snap_new(size_t budget_bytes);
void snap_free(snap_table *t); /* NULL is fine */

snap_entry *snap_find(snap_table *t, const cache_hash *key);
/* Entries filed under boundary, at most cap into out; returns how many. */
int snap_under(snap_table *t, const cache_hash *boundary, snap_entry **out, int cap);
/* The entry for key (made if new; the boundary, r and pos of a new one). */
snap_entry *snap_add(snap_table *t, const cache_hash *key, const cache_hash *boundary, int r, int pos);
/* Keeps a copy of n floats as e's state in memory, then evicts others
 * (never e) past the budget. Returns 0, or -1 when the state alone is
 * over the budget (nothing kept). Pointers from snap_find/under may move. */
int snap_set_data(snap_table *t, snap_entry *e, const float *data, size_t n);
/* A use: recency. keep_s > 0: retained at least that long from now. */
void snap_touch(snap_table *t, snap_entry *e, double keep_s);
/* Forgets e's memory copy; the entry goes when no tier holds it either. */
void snap_drop_data(snap_table *t, snap_entry *e);
void snap_get_stats(const snap_table *t, snap_stats *out);
void snap_count_restore(snap_table *t);

#endif
