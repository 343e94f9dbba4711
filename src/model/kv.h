/* kv.h - paged KV memory: fixed-size token blocks shared by sequences.
 *
 * A block holds B consecutive positions of one sequence for every layer.
 * Its payload, the object the cache hashes, copies and writes to disk, is
 *   f16:  [layer][K|V][B][kv_dim]            (token-major)
 *   q8_0, q4_0: [layer][K|V][KV head][B][head_dim] (head-major)
 * in the pool's KV type (backend/kvq.h: q8_0 at 17/16 bytes a value,
 * q4_0 at 9/16), as
 * the forward pass stored them (DESIGN.md, "Blocks and hashes"); every
 * tier holds these bytes as they are. A quantized type keeps each head's rows
 * together: attention reads one KV head at a time, and a head's 68-byte
 * rows (head size 64) interleaved with the other heads' would pull in
 * the cache lines they share with them (f16 keeps the layout caches were
 * written in). Blocks are refcounted: several
 * sequences may share a prefix's blocks; writing into a shared block
 * first copies it (copy on write). A sequence is a block table plus a
 * length; truncating it to any position is free (the cache branches there).
 *
 * Sliding-window layers (gemma3): a query at position p on such a layer
 * reads only positions from p + 1 - n_swa on (from the start of that
 * position's 64-key attention tile). So a block's memory is split in two:
 * its global part (every other layer), always present, in `mem`; and its
 * sliding part (the sliding layers), in one of a few slots of `swa_mem`,
 * or none. A sequence holds the sliding parts of its window only
 * (kv_seq_reserve takes the window of the next query and lets the older
 * ones go); a part no sequence holds stays with its block (the cache may
 * still want it) until a slot is needed: then the one let go longest ago
 * is taken, and its block has no sliding part any more. Such a block is
 * still good for every position a later query does not see through a
 * sliding layer; to continue right after it, its sliding part must come
 * back from a tier below (kv_block_import_swa), else the forward pass
 * refuses (kv_seq_reserve: STRATA_EINVAL). With no sliding layers there
 * are no slots, and a block's payload is its memory (kv_block_view).
 *
 * Device pools (kv_pool_opts.dev, backend/devmem.h): the payload memory,
 * `mem` and the sliding parts' slots `swa_mem`, is device memory (a
 * GPU's), in the same layout and block size; ids, refcounts, slot
 * assignments and the free lists stay here on the host. kv_rows then
 * gives device addresses (for the device's kernels only), kv_block_view
 * NULL, and payloads move by device copies, one per run of adjacent
 * layers of one part (a block without sliding layers: one copy):
 * kv_block_read downloads after the kernels queued so far (compute
 * stream), kv_block_write and kv_block_import_swa upload on the copy
 * stream (the store's loader, a thread of its own; the scheduler's
 * thread for a window's part), copy on write copies on the device (the
 * compute stream), kv_block_read_async queues a download (a published
 * block's copy to the tiers, an evicted one's down a tier) without
 * waiting for it.
 * Why the copy stream needs only the read events before an upload:
 * blocks and slots are handed out between the scheduler's steps, and
 * each step ends by downloading its logits (the compute stream is idle
 * then), so no kernel still reads a block or slot the pool gives to a
 * load; a queued download of a published or evicted block may still read
 * it, and the upload waits for that download's event on the device:
 * read_ev for the block's global part, slot_ev for the slot (a slot
 * taken from an unheld block may still be read by that block's
 * download).
 * Does not: hash, index or evict blocks (that is cache/). */
#ifndef STRATA_KV_H
#define STRATA_KV_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/devmem.h"
#include "backend/kvq.h"
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
    kvq_type type;   /* how K/V values are stored */
    int row_halves;  /* one token's row of one layer's K or V, in halves */
    int head_stride; /* halves from one position's row of a KV head to the next's */
    int head_off;    /* halves from one KV head's rows to the next head's */
    int n_blocks;
    size_t block_bytes; /* payload of one block, every layer */
    uint16_t *mem;   /* global parts: n_blocks * glob_bytes */
    int *refcount;   /* per block */
    int *free_list;  /* stack of free block ids */
    int n_free;
    kv_keeper keeper; /* zeroed: unreferenced blocks are freed */
    /* Layers: index within their part; swa_layer[l] 1 for a sliding
     * layer (NULL: none, and the fields below are zero). */
    int *layer_at;
    uint8_t *swa_layer;
    int n_swa;             /* window of the sliding layers, positions */
    size_t glob_bytes, swa_bytes; /* per block: global part, sliding part */
    uint16_t *swa_mem;     /* n_slots * swa_bytes */
    int n_slots;
    int *swa_slot;         /* per block: its sliding part's slot, or -1 */
    int *swa_hold;         /* per block: holders of its sliding part (sequences, pins) */
    int *slot_block;       /* per slot: the block it belongs to, or -1 */
    uint64_t *slot_released; /* per slot: when its block lost its last holder */
    uint64_t swa_clock;
    int *slot_free;
    int n_slot_free;
    long swa_reclaimed;    /* sliding parts taken from unheld blocks */
    const devmem *dev;     /* NULL: mem is host memory; else device memory of dev */
    /* Device pools: per block, the end of the last download queued from
     * it (kv_block_read_async), or NULL; an upload into the block waits
     * for it on the device, not on the host. slot_ev: the same per slot
     * (the download read the slot's block's sliding part there). */
    devmem_event **read_ev, **slot_ev;
} kv_pool;

/* What a pool holds. swa_layer NULL (or no layer set): no sliding part. */
typedef struct kv_pool_opts {
    int n_layer, kv_dim, block_tokens, n_blocks;
    const uint8_t *swa_layer; /* per layer, 1: sliding window of n_swa */
    int n_swa, n_slots;       /* window; sliding parts in memory at once */
    kvq_type type;            /* zero: f16; q8_0, q4_0 need head_dim % 32 == 0 */
    int head_dim;             /* values per KV head (0: kv_dim, one head) */
    const devmem *dev;        /* payload memory on this device (NULL: host); outlives the pool */
} kv_pool_opts;

typedef struct kv_seq {
    int n_pos;      /* positions filled */
    int n_alloc;    /* capacity of blocks[] */
    int n_blocks;   /* blocks in the table */
    int *blocks;
    /* Recurrent layers' state (qwen35): rs_floats floats that summarise
     * positions [0, rs_pos); owned by the sequence, NULL until the
     * forward pass makes it; in the pool's payload memory (kv_state_*:
     * the GPU's for a pool on the device). Unlike K/V it cannot be cut back to an
     * earlier position: a sequence truncated below rs_pos (other than
     * to 0) can no longer be extended (forward.c refuses). */
    float *rs;
    size_t rs_floats;
    int rs_pos;
    /* Sliding parts it holds: those of blocks [swa_lo, swa_hi). */
    int swa_lo, swa_hi;
} kv_seq;

int kv_pool_init(kv_pool *p, int n_layer, int kv_dim, int block_tokens, int n_blocks,
                 strata_err *err);
int kv_pool_init_opts(kv_pool *p, const kv_pool_opts *o, strata_err *err);
/* Bytes of one layer's K and V in a block of block_tokens positions, rows
 * of kv_dim values stored as type (a budget's arithmetic, engine.c, mtp.c). */
size_t kv_layer_block_bytes(kvq_type type, int kv_dim, int block_tokens);
void kv_pool_destroy(kv_pool *p);

/* 1 when layer keeps its rows in the sliding part. */
static inline int kv_layer_slides(const kv_pool *p, int layer) { return p->swa_layer && p->swa_layer[layer]; }

/* Where a layer's rows live: a unit of its part, a block of the global
 * part (`mem`) or a slot of the sliding part (`swa_mem`), units
 * kv_unit_halves apart. A device kernel addresses any block's rows from
 * unit 0's and a table of units (kv_block_unit), as the paged attention
 * does. */
static inline size_t kv_unit_halves(const kv_pool *p, int layer) {
    return (kv_layer_slides(p, layer) ? p->swa_bytes : p->glob_bytes) / 2;
}
static inline uint16_t *kv_unit_rows(const kv_pool *p, int unit, int layer, int is_v) {
    size_t per_half = (size_t)p->block_tokens * p->row_halves;
    size_t off = ((size_t)p->layer_at[layer] * 2 + is_v) * per_half;
    return (kv_layer_slides(p, layer) ? p->swa_mem : p->mem) + (size_t)unit * kv_unit_halves(p, layer) + off;
}
/* Block b's unit on layer: b, or on a sliding layer its slot (-1: none). */
static inline int kv_block_unit(const kv_pool *p, int b, int layer) {
    return kv_layer_slides(p, layer) ? p->swa_slot[b] : b;
}

/* K or V rows [B][row_halves] of one layer in one block. A sliding layer's
 * rows exist only while the block has its sliding part. */
static inline uint16_t *kv_rows(const kv_pool *p, int block, int layer, int is_v) {
    int u = kv_block_unit(p, block, layer);
    assert(u >= 0);
    return kv_unit_rows(p, u, layer, is_v);
}

/* The row of position 0 of KV head h of one layer in one block; the row
 * of position i is i * p->head_stride halves further (the layouts above). */
static inline uint16_t *kv_head_rows(const kv_pool *p, int block, int layer, int is_v, int h) {
    return kv_rows(p, block, layer, is_v) + (size_t)h * p->head_off;
}

/* ---- sliding-window parts (no-ops for a pool without sliding layers) ---- */

/* Sliding parts a sequence holds at most: its window and the block being
 * filled, plus a chunk of max_chunk positions (the forward pass's batch). */
int kv_swa_slots_per_seq(int block_tokens, int n_swa, int max_chunk);
/* The first block a query at position pos reads on a sliding layer (0
 * with no sliding layers). */
int kv_swa_first_block(const kv_pool *p, int pos);
/* 1 when block b's sliding part is in memory (always, with no sliding layers). */
int kv_block_has_swa(const kv_pool *p, int b);
/* The last block of s that a query at s->n_pos would read on a sliding
 * layer and that has no sliding part, or -1 (none: s can continue). */
int kv_seq_window_missing(const kv_pool *p, const kv_seq *s);
/* s holds the sliding parts of the window of a query at s->n_pos (and of
 * every block after it), letting older ones go. STRATA_EINVAL, naming
 * the positions, when one of them is not in memory. */
int kv_seq_hold_window(kv_pool *p, kv_seq *s, strata_err *err);
/* A pin: one more holder of b's sliding part (it cannot be taken). */
void kv_block_pin(kv_pool *p, int b);
void kv_block_unpin(kv_pool *p, int b);

/* ---- a block's payload (block_bytes, the layout above) ---- */

/* The payload in place when the pool keeps it contiguous (no sliding
 * layers), else NULL. */
void *kv_block_view(const kv_pool *p, int b);
/* The payload of b: in place, or gathered into scratch (block_bytes);
 * downloaded into scratch from a device pool (NULL if the device fails).
 * NULL when b's sliding part is not in memory. */
const void *kv_block_read(const kv_pool *p, int b, void *scratch);
/* Queues a download of b's payload into dst (host memory the device
 * copies to without staging: devmem_host_alloc) on the compute stream,
 * after the kernels queued so far, and returns at once: *done is an event
 * that is done when dst holds the bytes (the caller frees it,
 * devmem_event_free). b may be given out again right away: the kernels
 * that write into it next run after the copy (the same stream), and an
 * upload into it (kv_block_write_async, the copy stream) first waits for
 * the copy on the device. A host pool copies at once (*done NULL; the
 * sliding part must be in memory). < 0 (err) when the device fails. */
int kv_block_read_async(kv_pool *p, int b, void *dst, devmem_event **done, strata_err *err);
/* Writes payload src into b: the global part, and the sliding part when
 * b has a slot. Safe on a thread of its own for a block only its caller's
 * sequence holds. A device pool uploads on the copy stream (after the
 * queued downloads of b and of its slot) and waits for it; < 0 (err)
 * when the device fails. */
int kv_block_write(const kv_pool *p, int b, const void *src, strata_err *err);
/* The same, queued: on a device pool src must stay unchanged until
 * kv_pool_wait_writes returns (a host pool copies at once). Several
 * uploads then one wait: the loader's group of blocks in one go. */
int kv_block_write_async(const kv_pool *p, int b, const void *src, strata_err *err);
int kv_pool_wait_writes(const kv_pool *p, strata_err *err);
/* Gives b a sliding part (a slot, unheld) filled from payload src.
 * STRATA_ERANGE when every slot is held. A device pool uploads on the
 * copy stream (after a queued download still reading the slot) and waits
 * for it, so src may be reused at once; < 0 (err) when the device fails
 * (b then has no sliding part, unless something holds it). */
int kv_block_import_swa(kv_pool *p, int b, const void *src, strata_err *err);

void kv_seq_init(kv_seq *s);
/* Drops the sequence's references to its blocks. */
void kv_seq_release(kv_pool *p, kv_seq *s);
/* Makes positions [0, n_pos_new) writable for queries from s->n_pos on:
 * allocates blocks and copies any shared block that will be written; s
 * holds the sliding parts of those queries' window and of the new blocks
 * (kv_seq_hold_window). STRATA_ERANGE when the pool (or its sliding
 * slots) is full, STRATA_EINVAL when the window is not in memory. */
int kv_seq_reserve(kv_pool *p, kv_seq *s, int n_pos_new, strata_err *err);
/* Appends blocks up to position n_pos_new to be filled from a tier below
 * (kv_block_write, on a thread of its own): only the last swa_blocks of
 * them get a sliding part, held by s (the window where a hit will
 * continue), and s lets its other holds go. STRATA_ERANGE when full. */
int kv_seq_reserve_load(kv_pool *p, kv_seq *s, int n_pos_new, int swa_blocks, strata_err *err);
/* Forgets positions >= n (n <= n_pos); frees now-unused whole blocks,
 * reserved ones past n_pos included. */
void kv_seq_truncate(kv_pool *p, kv_seq *s, int n);
/* New sequence sharing the first n positions of src (refcounts bumped).
 * A recurrent state is copied when it covers exactly those n positions
 * (none where device memory for it is refused: the fork restarts at 0). */
void kv_seq_fork(kv_pool *p, const kv_seq *src, int n, kv_seq *dst);
/* Appends an existing full block (refcount bumped) to an empty-tailed
 * sequence: how a cached prefix is attached. */
void kv_seq_attach(kv_pool *p, kv_seq *s, int block);
/* Sets the recurrent state of s to a copy of n floats in host memory
 * summarising positions [0, pos) (a snapshot), pos <= s->n_pos; on a
 * device, uploaded before it returns. Fails (no state left: it restarts
 * at 0) where device memory is refused. */
int kv_seq_set_state(const kv_pool *p, kv_seq *s, const float *state, size_t n, int pos, strata_err *err);
/* A copy of s's state (s->rs_floats floats) in host memory, downloaded
 * before it returns on a device: what a snapshot keeps. */
int kv_seq_state_read(const kv_pool *p, const kv_seq *s, float *host, strata_err *err);
/* Memory for a recurrent state of n floats where p keeps its payload
 * (device memory, or zeroed host memory), its free, and a copy within
 * that memory (on a device, queued in order with the kernels). */
float *kv_state_alloc(const kv_pool *p, size_t n, strata_err *err);
void kv_state_free(const kv_pool *p, float *rs);
int kv_state_copy(const kv_pool *p, float *dst, const float *src, size_t n, strata_err *err);
/* Gives back a block the keeper holds (no sequence references it): it
 * joins the free list. For the keeper, when it stops holding one. */
void kv_block_give_back(kv_pool *p, int block);

#endif
