/* kv.c - block allocation, refcounts, copy-on-write and the sliding parts
 * of sliding-window layers (see kv.h). */
#include "model/kv.h"

#include <stdlib.h>
#include <string.h>

#include "backend/attn.h"
#include "base/mem.h"

/* ---- pool ------------------------------------------------------------------ */

/* Which layers slide, and each layer's index within its part. */
static int init_layers(kv_pool *p, const kv_pool_opts *o) {
    int n_swa_layer = 0;
    p->layer_at = xmalloc((size_t)o->n_layer * sizeof(int));
    for (int l = 0; l < o->n_layer; l++) n_swa_layer += o->swa_layer && o->n_swa > 0 && o->swa_layer[l];
    if (n_swa_layer > 0) {
        p->swa_layer = xcalloc((size_t)o->n_layer, 1);
        p->n_swa = o->n_swa;
    }
    int at[2] = {0, 0};
    for (int l = 0; l < o->n_layer; l++) {
        int sw = p->swa_layer && o->swa_layer[l];
        if (p->swa_layer) p->swa_layer[l] = (uint8_t)sw;
        p->layer_at[l] = at[sw]++;
    }
    return n_swa_layer;
}

static void init_slots(kv_pool *p, int n_slots) {
    p->n_slots = n_slots;
    p->swa_mem = xaligned(p->swa_bytes * (size_t)n_slots);
    p->swa_slot = xmalloc((size_t)p->n_blocks * sizeof(int));
    p->swa_hold = xcalloc((size_t)p->n_blocks, sizeof(int));
    for (int b = 0; b < p->n_blocks; b++) p->swa_slot[b] = -1;
    p->slot_block = xmalloc((size_t)n_slots * sizeof(int));
    p->slot_released = xcalloc((size_t)n_slots, sizeof(uint64_t));
    p->slot_free = xmalloc((size_t)n_slots * sizeof(int));
    for (int i = 0; i < n_slots; i++) {
        p->slot_block[i] = -1;
        p->slot_free[i] = n_slots - 1 - i;
    }
    p->n_slot_free = n_slots;
}

/* The payload memory: host memory, or the device's (no sliding parts
 * there: their slots would need device copies of their own). */
static int alloc_mem(kv_pool *p, const kv_pool_opts *o, int n_swa_layer, strata_err *err) {
    size_t bytes = p->glob_bytes ? p->glob_bytes * (size_t)o->n_blocks : 64;
    if (!o->dev) {
        p->mem = xaligned(bytes);
        return 0;
    }
    if (n_swa_layer > 0)
        return strata_errf(err, STRATA_EUNSUPPORTED, "kv pool on %s: sliding-window layers are not supported there",
                           o->dev->name);
    strata_err e = {0};
    p->mem = devmem_alloc(o->dev, bytes, &e);
    if (!p->mem)
        return strata_errf(err, STRATA_ENOMEM, "kv pool: %d blocks (%.1f MiB) in %s memory: %s", o->n_blocks,
                           bytes / 1048576.0, o->dev->name, e.msg);
    p->dev = o->dev;
    p->read_ev = xcalloc((size_t)o->n_blocks, sizeof *p->read_ev);
    return 0;
}

size_t kv_layer_block_bytes(kvq_type type, int kv_dim, int block_tokens) {
    return (size_t)2 * block_tokens * kvq_halves(type, (size_t)kv_dim) * sizeof(uint16_t);
}

int kv_pool_init_opts(kv_pool *p, const kv_pool_opts *o, strata_err *err) {
    memset(p, 0, sizeof *p);
    if (o->block_tokens <= 0 || o->n_blocks <= 0)
        return strata_errf(err, STRATA_EINVAL, "kv pool: %d blocks of %d tokens", o->n_blocks, o->block_tokens);
    p->block_tokens = o->block_tokens;
    p->n_layer = o->n_layer;
    p->kv_dim = o->kv_dim;
    p->n_blocks = o->n_blocks;
    p->type = o->type;
    int hd = o->head_dim > 0 ? o->head_dim : o->kv_dim;
    if (o->type != KVQ_F16 && (hd % KVQ_BLOCK != 0 || o->kv_dim % hd != 0))
        return strata_errf(err, STRATA_EINVAL, "kv pool: %s heads of %d values (not a multiple of %d)",
                           kvq_name(o->type), hd, KVQ_BLOCK);
    p->row_halves = (int)kvq_halves(o->type, (size_t)o->kv_dim);
    int head_halves = (int)kvq_halves(o->type, (size_t)hd);
    int head_major = o->type != KVQ_F16; /* kv.h: quantized types keep each head's rows together */
    p->head_stride = head_major ? head_halves : p->row_halves;
    p->head_off = head_major ? o->block_tokens * head_halves : head_halves;
    size_t per_layer = kv_layer_block_bytes(o->type, o->kv_dim, o->block_tokens);
    int n_swa_layer = init_layers(p, o);
    if (n_swa_layer > 0 && o->n_slots <= 0) {
        kv_pool_destroy(p);
        return strata_errf(err, STRATA_EINVAL, "kv pool: %d sliding layers but no slots for them", n_swa_layer);
    }
    p->block_bytes = (size_t)o->n_layer * per_layer;
    p->glob_bytes = (size_t)(o->n_layer - n_swa_layer) * per_layer;
    p->swa_bytes = (size_t)n_swa_layer * per_layer;
    int rc = alloc_mem(p, o, n_swa_layer, err);
    if (rc) {
        kv_pool_destroy(p);
        return rc;
    }
    p->refcount = xcalloc((size_t)o->n_blocks, sizeof(int));
    p->free_list = xmalloc((size_t)o->n_blocks * sizeof(int));
    for (int i = 0; i < o->n_blocks; i++) p->free_list[i] = o->n_blocks - 1 - i;
    p->n_free = o->n_blocks;
    if (n_swa_layer > 0) init_slots(p, o->n_slots);
    return 0;
}

int kv_pool_init(kv_pool *p, int n_layer, int kv_dim, int block_tokens, int n_blocks, strata_err *err) {
    kv_pool_opts o = {.n_layer = n_layer, .kv_dim = kv_dim, .block_tokens = block_tokens, .n_blocks = n_blocks};
    return kv_pool_init_opts(p, &o, err);
}

void kv_pool_destroy(kv_pool *p) {
    if (p->dev) {
        for (int b = 0; p->read_ev && b < p->n_blocks; b++) devmem_event_free(p->dev, p->read_ev[b]);
        free(p->read_ev);
        devmem_free(p->dev, p->mem);
    } else {
        free(p->mem);
    }
    void *bufs[] = {p->refcount, p->free_list, p->layer_at, p->swa_layer, p->swa_mem, p->swa_slot,
                    p->swa_hold, p->slot_block, p->slot_released, p->slot_free};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    memset(p, 0, sizeof *p);
}

/* ---- sliding parts ------------------------------------------------------------ */

int kv_swa_slots_per_seq(int B, int n_swa, int max_chunk) {
    /* The window's first tile starts up to a tile before it, and a block
     * more on each end where positions do not fall on block edges. */
    return (n_swa + ATTN_KV_TILE + B - 1) / B + 1 + (max_chunk + B - 1) / B + 1;
}

int kv_swa_first_block(const kv_pool *p, int pos) {
    int first = pos + 1 - p->n_swa;
    if (!p->swa_layer || first <= 0) return 0;
    return first / ATTN_KV_TILE * ATTN_KV_TILE / p->block_tokens; /* the kernel reads whole tiles */
}

int kv_block_has_swa(const kv_pool *p, int b) { return !p->swa_layer || p->swa_slot[b] >= 0; }

static void slot_give_back(kv_pool *p, int b) {
    int sl = p->swa_slot[b];
    p->swa_slot[b] = -1;
    p->slot_block[sl] = -1;
    p->slot_free[p->n_slot_free++] = sl;
}

/* A slot for b: a free one, else the sliding part let go longest ago
 * (its block keeps its global part). -1 when every one is held. */
static int slot_alloc(kv_pool *p, int b) {
    int sl = -1;
    if (p->n_slot_free > 0) {
        sl = p->slot_free[--p->n_slot_free];
    } else {
        for (int i = 0; i < p->n_slots; i++) {
            int o = p->slot_block[i];
            if (p->swa_hold[o] == 0 && (sl < 0 || p->slot_released[i] < p->slot_released[sl])) sl = i;
        }
        if (sl < 0) return -1;
        p->swa_slot[p->slot_block[sl]] = -1;
        p->swa_reclaimed++;
    }
    p->slot_block[sl] = b;
    p->swa_slot[b] = sl;
    p->slot_released[sl] = ++p->swa_clock; /* unheld from now on, the newest */
    return sl;
}

void kv_block_pin(kv_pool *p, int b) {
    if (p->swa_layer) p->swa_hold[b]++;
}

void kv_block_unpin(kv_pool *p, int b) {
    if (!p->swa_layer || --p->swa_hold[b] > 0 || p->swa_slot[b] < 0) return;
    p->slot_released[p->swa_slot[b]] = ++p->swa_clock;
}

/* s lets go of every sliding part it holds. */
static void seq_unhold(kv_pool *p, kv_seq *s) {
    for (int i = s->swa_lo; i < s->swa_hi; i++) kv_block_unpin(p, s->blocks[i]);
    s->swa_lo = s->swa_hi = 0;
}

/* s holds exactly the sliding parts of blocks [lo, hi) (all in memory). */
static void seq_hold_range(kv_pool *p, kv_seq *s, int lo, int hi) {
    for (int i = lo; i < hi; i++) kv_block_pin(p, s->blocks[i]);
    seq_unhold(p, s);
    s->swa_lo = lo, s->swa_hi = hi;
}

int kv_seq_window_missing(const kv_pool *p, const kv_seq *s) {
    if (!p->swa_layer) return -1;
    for (int i = s->n_blocks - 1; i >= kv_swa_first_block(p, s->n_pos); i--)
        if (p->swa_slot[s->blocks[i]] < 0) return i;
    return -1;
}

int kv_seq_hold_window(kv_pool *p, kv_seq *s, strata_err *err) {
    if (!p->swa_layer) return 0;
    int m = kv_seq_window_missing(p, s), B = p->block_tokens;
    if (m >= 0)
        return strata_errf(err, STRATA_EINVAL,
                           "position %d: the sliding-window K/V of positions %d-%d is no longer in memory "
                           "(outside an earlier window); restore it from the cache or start the sequence again",
                           s->n_pos, m * B, m * B + B - 1);
    seq_hold_range(p, s, kv_swa_first_block(p, s->n_pos), s->n_blocks);
    return 0;
}

/* ---- payload ------------------------------------------------------------------- */

void *kv_block_view(const kv_pool *p, int b) {
    return p->swa_layer || p->dev ? NULL : p->mem + (size_t)b * (p->glob_bytes / 2);
}

/* Block b's payload in a device pool (no sliding parts there: one piece). */
static uint16_t *dev_block(const kv_pool *p, int b) { return p->mem + (size_t)b * (p->glob_bytes / 2); }

/* Copies between a payload and b's rows: to_pool, the global part always
 * and the sliding part when b has one (swa_only: that part alone). */
static void payload_copy(const kv_pool *p, int b, uint16_t *payload, int to_pool, int swa_only) {
    size_t half = (size_t)p->block_tokens * p->row_halves, n = 2 * half * sizeof(uint16_t);
    for (int l = 0; l < p->n_layer; l++) {
        int sw = p->swa_layer[l];
        if ((sw && p->swa_slot[b] < 0) || (swa_only && !sw)) continue;
        uint16_t *rows = kv_rows(p, b, l, 0), *pl = payload + (size_t)l * 2 * half;
        if (to_pool) memcpy(rows, pl, n);
        else memcpy(pl, rows, n);
    }
}

const void *kv_block_read(const kv_pool *p, int b, void *scratch) {
    void *v = kv_block_view(p, b);
    if (v) return v;
    if (p->dev) /* after the kernels that wrote it */
        return devmem_copy_sync(p->dev, DEVMEM_COMPUTE, scratch, dev_block(p, b), p->block_bytes, DEVMEM_D2H, NULL)
                   ? NULL
                   : scratch;
    if (p->swa_slot[b] < 0) return NULL;
    payload_copy(p, b, scratch, 0, 0);
    return scratch;
}

int kv_block_read_async(kv_pool *p, int b, void *dst, devmem_event **done, strata_err *err) {
    *done = NULL;
    if (!p->dev) {
        const void *v = kv_block_read(p, b, dst);
        if (!v) return strata_errf(err, STRATA_EINVAL, "kv pool: block %d has no sliding part to read", b);
        if (v != dst) memcpy(dst, v, p->block_bytes);
        return 0;
    }
    strata_err e = {0};
    if (devmem_copy(p->dev, DEVMEM_COMPUTE, dst, dev_block(p, b), p->block_bytes, DEVMEM_D2H, &e))
        return strata_errf(err, e.code, "%s", e.msg);
    /* two events: the caller's, and the pool's for the next upload into b */
    devmem_event *mine = devmem_record(p->dev, DEVMEM_COMPUTE, &e);
    if (mine && !(*done = devmem_record(p->dev, DEVMEM_COMPUTE, &e))) devmem_event_free(p->dev, mine), mine = NULL;
    if (!mine) return strata_errf(err, e.code ? e.code : STRATA_EIO, "%s", e.msg);
    devmem_event_free(p->dev, p->read_ev[b]);
    p->read_ev[b] = mine;
    return 0;
}

int kv_block_write_async(const kv_pool *p, int b, const void *src, strata_err *err) {
    if (p->dev) {
        /* after a download that may still read b's old bytes (an eviction's) */
        int rc = p->read_ev[b] ? devmem_wait(p->dev, DEVMEM_COPY, p->read_ev[b], err) : 0;
        return rc ? rc : devmem_copy(p->dev, DEVMEM_COPY, dev_block(p, b), src, p->block_bytes, DEVMEM_H2D, err);
    }
    void *v = kv_block_view(p, b);
    if (v) memcpy(v, src, p->block_bytes);
    else payload_copy(p, b, (uint16_t *)src, 1, 0);
    return 0;
}

int kv_pool_wait_writes(const kv_pool *p, strata_err *err) {
    return p->dev ? devmem_sync(p->dev, DEVMEM_COPY, err) : 0;
}

int kv_block_write(const kv_pool *p, int b, const void *src, strata_err *err) {
    int rc = kv_block_write_async(p, b, src, err);
    return rc ? rc : kv_pool_wait_writes(p, err);
}

int kv_block_import_swa(kv_pool *p, int b, const void *src, strata_err *err) {
    if (!p->swa_layer) return 0;
    if (p->swa_slot[b] < 0 && slot_alloc(p, b) < 0)
        return strata_errf(err, STRATA_ERANGE, "kv pool: all %d sliding-window slots in use", p->n_slots);
    payload_copy(p, b, (uint16_t *)src, 1, 1);
    return 0;
}

/* ---- blocks ------------------------------------------------------------------- */

static void table_grow(kv_seq *s, int need);

/* A free block (with_swa: and a sliding part), or -1. */
static int block_alloc(kv_pool *p, int with_swa) {
    int b = -1;
    if (p->n_free > 0) b = p->free_list[--p->n_free];
    else if (p->keeper.reclaim) b = p->keeper.reclaim(p->keeper.ctx);
    if (b < 0) return -1;
    if (p->swa_layer && p->swa_slot[b] >= 0 && !with_swa) slot_give_back(p, b); /* a cached block's */
    if (p->swa_layer && p->swa_slot[b] < 0 && with_swa && slot_alloc(p, b) < 0) {
        p->free_list[p->n_free++] = b;
        return -1;
    }
    p->refcount[b] = 1;
    return b;
}

static void block_free(kv_pool *p, int b) {
    if (p->swa_layer && p->swa_slot[b] >= 0) slot_give_back(p, b);
    p->free_list[p->n_free++] = b;
}

static void block_unref(kv_pool *p, int b) {
    if (--p->refcount[b] > 0) return;
    if (p->keeper.keep && p->keeper.keep(p->keeper.ctx, b)) return;
    block_free(p, b);
}

void kv_block_give_back(kv_pool *p, int b) { block_free(p, b); }

/* Drops s's last block (and its hold on the block's sliding part). */
static void seq_pop(kv_pool *p, kv_seq *s) {
    int i = --s->n_blocks;
    if (i >= s->swa_lo && i < s->swa_hi) {
        kv_block_unpin(p, s->blocks[i]);
        s->swa_hi = i;
    }
    if (s->swa_lo > s->swa_hi) s->swa_lo = s->swa_hi;
    block_unref(p, s->blocks[i]);
}

void kv_seq_attach(kv_pool *p, kv_seq *s, int block) {
    table_grow(s, s->n_blocks + 1);
    s->blocks[s->n_blocks++] = block;
    p->refcount[block]++;
    s->n_pos = s->n_blocks * p->block_tokens;
}

void kv_seq_init(kv_seq *s) { memset(s, 0, sizeof *s); }

void kv_seq_release(kv_pool *p, kv_seq *s) {
    seq_unhold(p, s);
    for (int i = 0; i < s->n_blocks; i++) block_unref(p, s->blocks[i]);
    free(s->blocks);
    free(s->rs);
    kv_seq_init(s);
}

static void table_grow(kv_seq *s, int need) {
    XGROW(s->blocks, s->n_alloc, need, 8);
}

/* The block that positions from s->n_pos on will write into, if shared,
 * is replaced by a private copy (both parts; s holds its window, so the
 * old block's sliding part is in memory). */
static int unshare_tail(kv_pool *p, kv_seq *s, strata_err *err) {
    int bi = s->n_pos / p->block_tokens;
    if (s->n_pos % p->block_tokens == 0 || bi >= s->n_blocks) return 0;
    int old = s->blocks[bi];
    int frozen = p->keeper.frozen && p->keeper.frozen(p->keeper.ctx, old);
    if (p->refcount[old] == 1 && !frozen) return 0;
    int nb = block_alloc(p, 1);
    if (nb < 0) return strata_errf(err, STRATA_ERANGE, "kv pool full (%d blocks)", p->n_blocks);
    uint16_t *dst = p->mem + (size_t)nb * (p->glob_bytes / 2), *src = p->mem + (size_t)old * (p->glob_bytes / 2);
    if (p->dev) { /* in stream order with the kernels that wrote old and will write nb */
        int rc = devmem_copy(p->dev, DEVMEM_COMPUTE, dst, src, p->glob_bytes, DEVMEM_D2D, err);
        if (rc) {
            block_free(p, nb);
            return rc;
        }
    } else {
        memcpy(dst, src, p->glob_bytes);
    }
    if (p->swa_layer) {
        memcpy(p->swa_mem + (size_t)p->swa_slot[nb] * (p->swa_bytes / 2),
               p->swa_mem + (size_t)p->swa_slot[old] * (p->swa_bytes / 2), p->swa_bytes);
        kv_block_pin(p, nb); /* the hold moves with the table entry (bi is in s's window) */
        kv_block_unpin(p, old);
    }
    block_unref(p, old);
    s->blocks[bi] = nb;
    return 0;
}

/* Appends blocks up to need; the last swa_new of them get a sliding part
 * held by s ([swa_lo, swa_hi) grows with them). Undone on failure. */
static int append_blocks(kv_pool *p, kv_seq *s, int need, int swa_new, strata_err *err) {
    table_grow(s, need);
    int had = s->n_blocks;
    while (s->n_blocks < need) {
        int with_swa = p->swa_layer && s->n_blocks >= need - swa_new;
        int b = block_alloc(p, with_swa);
        if (b < 0) { /* undo: the sequence is as it was */
            while (s->n_blocks > had) seq_pop(p, s);
            return strata_errf(err, STRATA_ERANGE, "kv pool full: need %d more blocks, all %d in use%s",
                               need - had, p->n_blocks, with_swa ? " (or every sliding-window slot held)" : "");
        }
        s->blocks[s->n_blocks++] = b;
        if (with_swa) {
            kv_block_pin(p, b);
            if (s->swa_hi < s->n_blocks - 1) s->swa_lo = s->n_blocks - 1; /* a range starts here */
            s->swa_hi = s->n_blocks;
        }
    }
    return 0;
}

int kv_seq_reserve(kv_pool *p, kv_seq *s, int n_pos_new, strata_err *err) {
    int need = (n_pos_new + p->block_tokens - 1) / p->block_tokens;
    int rc = kv_seq_hold_window(p, s, err);
    if (rc) return rc;
    if ((rc = unshare_tail(p, s, err))) return rc;
    return append_blocks(p, s, need, need, err);
}

int kv_seq_reserve_load(kv_pool *p, kv_seq *s, int n_pos_new, int swa_blocks, strata_err *err) {
    seq_unhold(p, s);
    return append_blocks(p, s, (n_pos_new + p->block_tokens - 1) / p->block_tokens, swa_blocks, err);
}

void kv_seq_truncate(kv_pool *p, kv_seq *s, int n) {
    if (n > s->n_pos) return;
    int keep = (n + p->block_tokens - 1) / p->block_tokens;
    while (s->n_blocks > keep) seq_pop(p, s);
    s->n_pos = n;
}

void kv_seq_fork(kv_pool *p, const kv_seq *src, int n, kv_seq *dst) {
    kv_seq_init(dst);
    if (n > src->n_pos) n = src->n_pos;
    int nb = (n + p->block_tokens - 1) / p->block_tokens;
    table_grow(dst, nb);
    for (int i = 0; i < nb; i++) {
        dst->blocks[i] = src->blocks[i];
        p->refcount[dst->blocks[i]]++;
    }
    dst->n_blocks = nb;
    dst->n_pos = n;
    if (src->rs && src->rs_pos == n) {
        dst->rs = xmalloc(src->rs_floats * sizeof(float));
        memcpy(dst->rs, src->rs, src->rs_floats * sizeof(float));
        dst->rs_floats = src->rs_floats;
        dst->rs_pos = n;
    }
}

void kv_seq_set_state(kv_seq *s, const float *state, size_t n, int pos) {
    if (!s->rs || s->rs_floats != n) {
        free(s->rs);
        s->rs = xmalloc(n * sizeof(float));
        s->rs_floats = n;
    }
    memcpy(s->rs, state, n * sizeof(float));
    s->rs_pos = pos;
}
