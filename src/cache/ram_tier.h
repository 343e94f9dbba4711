/* ram_tier.h - the RAM tier: KV blocks in host memory between a GPU's
 * live pool and the disk (DESIGN.md, "Tiers": `--cache-ram-mb`).
 *
 * A tier like any other (tier.h): blocks and tails named by their chain
 * hash, holding a pool block's payload byte for byte. Its memory is one
 * allocation of whole block slots made at open, through the device's
 * host allocator (backend/devmem.h: pinned, so uploads to the GPU run on
 * the copy stream without staging), or plain memory without a device.
 * Inclusive: the store writes every published block through to it (one
 * download per block, which the disk write needs anyway), so the GPU
 * pool can drop a block at once; the store moves an evicted live block
 * here when this tier does not hold it (store.c, spill). When full it
 * evicts by the policy's one order (leaf first: a block no held block
 * continues; then policy_evict_key, retained blocks last) and moves the
 * block down first: written to the tier below when that one does not
 * hold it. Only a pool on a device (the GPU) has it: on the CPU backend
 * `--cache-ram-mb` is more of the live pool itself.
 * Thread safety: one mutex; reads come from the store's loader thread.
 * Does not: snapshots (a qwen35 model does not run on the GPU). */
#ifndef STRATA_CACHE_RAM_TIER_H
#define STRATA_CACHE_RAM_TIER_H

#include <stddef.h>

#include "backend/devmem.h"
#include "cache/tier.h"

typedef struct ram_tier ram_tier;

typedef struct ram_tier_opts {
    size_t budget_bytes;     /* whole blocks of block_bytes fit in it */
    size_t block_bytes;      /* a pool block's payload */
    int block_tokens;        /* B */
    double attn_per_pos;     /* policy_attn_cost_per_pos, for policy_value */
    const devmem *dev;       /* host memory from the device (pinned); NULL: plain */
    const cache_tier *below; /* where an evicted block goes when it does not hold it (NULL: none) */
} ram_tier_opts;

typedef struct ram_tier_stats {
    int blocks, slots;       /* held now, room for */
    long hits, writes;       /* blocks (and tails) read; stored */
    long evicted, moved_down; /* dropped to make room; of them, written below first */
    long lost;               /* evicted with no tier below holding them */
} ram_tier_stats;

/* STRATA_EINVAL when not one block fits the budget; STRATA_ENOMEM (the
 * device's reason) when the memory is refused. Nothing is kept on failure. */
int ram_tier_open(ram_tier **out, const ram_tier_opts *o, strata_err *err);
void ram_tier_close(ram_tier *r); /* NULL is fine */
cache_tier ram_tier_iface(ram_tier *r);
/* Where evicted blocks go from now on (NULL: nowhere; they are lost);
 * below stays alive as long as r is used. */
void ram_tier_set_below(ram_tier *r, const cache_tier *below);
void ram_tier_get_stats(ram_tier *r, ram_tier_stats *out);

#endif
