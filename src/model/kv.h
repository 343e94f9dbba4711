/* kv.h - paged KV memory: fixed-size token blocks shared by sequences.
 *
 * A block holds B consecutive positions of one sequence for every layer:
 *   block b: [layer][K|V][B][kv_dim] as IEEE half floats,
 * contiguous, so a block can later be hashed, copied to RAM or written to
 * disk as one object (DESIGN.md, "Blocks and hashes"). Blocks are
 * refcounted: several sequences may share a prefix's blocks; writing into
 * a shared block first copies it (copy on write).
 * A sequence is a block table plus a length; truncating it to any position
 * is free (the cache branches there).
 * Does not: hash, index or evict blocks (that is cache/). */
#ifndef STRATA_KV_H
#define STRATA_KV_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* Optional owner of blocks nobody references any more (the prefix cache):
 * keep(ctx, b) returns 1 to hold block b instead of freeing it; reclaim(ctx)
 * gives back one held block (its choice) when the free list is empty, or
 * -1; frozen(ctx, b) says b is published, so writing into it copies it
 * first. Mechanism here, policy there. */
typedef struct kv_keeper {
    void *ctx;
    int (*keep)(void *ctx, int block);
    int (*reclaim)(void *ctx);
    int (*frozen)(void *ctx, int block); /* 1: published, never written in place */
} kv_keeper;

typedef struct kv_pool {
    int block_tokens; /* B */
    int n_layer, kv_dim;
    int n_blocks;
    size_t block_bytes;
    uint16_t *mem;   /* n_blocks * block_bytes */
    int *refcount;   /* per block */
    int *free_list;  /* stack of free block ids */
    int n_free;
    kv_keeper keeper; /* zeroed: unreferenced blocks are freed */
} kv_pool;

typedef struct kv_seq {
    int n_pos;      /* positions filled */
    int n_alloc;    /* capacity of blocks[] */
    int n_blocks;   /* blocks in the table */
    int *blocks;
    /* Recurrent layers' state (qwen35): rs_floats floats that summarise
     * positions [0, rs_pos); owned by the sequence, NULL until the
     * forward pass makes it. Unlike K/V it cannot be cut back to an
     * earlier position: a sequence truncated below rs_pos (other than
     * to 0) can no longer be extended (forward.c refuses). */
    float *rs;
    size_t rs_floats;
    int rs_pos;
} kv_seq;

int kv_pool_init(kv_pool *p, int n_layer, int kv_dim, int block_tokens, int n_blocks,
                 strata_err *err);
void kv_pool_destroy(kv_pool *p);

/* K or V rows [B][kv_dim] of one layer in one block. */
static inline uint16_t *kv_rows(const kv_pool *p, int block, int layer, int is_v) {
    size_t per_half = (size_t)p->block_tokens * p->kv_dim;
    return p->mem + (size_t)block * (p->block_bytes / 2) + ((size_t)layer * 2 + is_v) * per_half;
}

void kv_seq_init(kv_seq *s);
/* Drops the sequence's references to its blocks. */
void kv_seq_release(kv_pool *p, kv_seq *s);
/* Makes positions [0, n_pos_new) writable: allocates blocks and copies any
 * shared block that will be written. STRATA_ERANGE when the pool is full. */
int kv_seq_reserve(kv_pool *p, kv_seq *s, int n_pos_new, strata_err *err);
/* Forgets positions >= n (n <= n_pos); frees now-unused whole blocks,
 * reserved ones past n_pos included. */
void kv_seq_truncate(kv_pool *p, kv_seq *s, int n);
/* New sequence sharing the first n positions of src (refcounts bumped).
 * A recurrent state is copied when it covers exactly those n positions. */
void kv_seq_fork(kv_pool *p, const kv_seq *src, int n, kv_seq *dst);
/* Appends an existing full block (refcount bumped) to an empty-tailed
 * sequence: how a cached prefix is attached. */
void kv_seq_attach(kv_pool *p, kv_seq *s, int block);
/* Sets the recurrent state of s to a copy of n floats summarising
 * positions [0, pos) (a snapshot), pos <= s->n_pos. */
void kv_seq_set_state(kv_seq *s, const float *state, size_t n, int pos);
/* Gives back a block the keeper holds (no sequence references it): it
 * joins the free list. For the keeper, when it stops holding one. */
void kv_block_give_back(kv_pool *p, int block);

#endif
