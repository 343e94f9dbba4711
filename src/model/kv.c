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

/* The slots' bookkeeping (their memory is alloc_mem's). */
static void init_slots(kv_pool *p, int n_slots) {
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

/* Device memory for what, or a reason naming it. */
static void *dev_alloc(const devmem *dev, size_t bytes, const char *what, int n, strata_err *err) {
    strata_err e = {0};
    void *d = devmem_alloc(dev, bytes, &e);
    if (!d)
        strata_errf(err, STRATA_ENOMEM, "kv pool: %d %s (%.1f MiB) in %s memory: %s", n, what, bytes / 1048576.0,
                    dev->name, e.msg);
    return d;
}

/* The payload memory, global parts and n_slots sliding parts: host
 * memory, or the device's (then the per-block and per-slot read events
 * too). */
static int alloc_mem(kv_pool *p, const kv_pool_opts *o, int n_slots, strata_err *err) {
    size_t bytes = p->glob_bytes ? p->glob_bytes * (size_t)o->n_blocks : 64, swa = p->swa_bytes * (size_t)n_slots;
    p->n_slots = n_slots;
    if (!o->dev) {
        p->mem = xaligned(bytes);
        if (n_slots > 0) p->swa_mem = xaligned(swa);
        return 0;
    }
    p->dev = o->dev; /* from here kv_pool_destroy frees on the device */
    if (!(p->mem = dev_alloc(o->dev, bytes, "blocks", o->n_blocks, err))) return STRATA_ENOMEM;
    if (n_slots > 0 && !(p->swa_mem = dev_alloc(o->dev, swa, "sliding-window slots", n_slots, err)))
        return STRATA_ENOMEM;
    p->read_ev = xcalloc((size_t)o->n_blocks, sizeof *p->read_ev);
    p->slot_ev = xcalloc((size_t)(n_slots > 0 ? n_slots : 1), sizeof *p->slot_ev);
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
    int rc = alloc_mem(p, o, n_swa_layer > 0 ? o->n_slots : 0, err);
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
        for (int i = 0; p->slot_ev && i < p->n_slots; i++) devmem_event_free(p->dev, p->slot_ev[i]);
        free(p->read_ev), free(p->slot_ev);
        devmem_free(p->dev, p->mem);
        devmem_free(p->dev, p->swa_mem);
    } else {
        free(p->mem);
        free(p->swa_mem);
    }
    void *bufs[] = {p->refcount, p->free_list, p->layer_at, p->swa_layer, p->swa_slot,
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

/* Copies between a payload and b's rows (to_pool: into b), the global
 * part always and the sliding part when b has one (swa_only: that part
 * alone). One copy per run of adjacent layers of one part: they are
 * adjacent in the payload and in the part alike (layer_at counts up
 * within a part), so a pool without sliding layers copies its block in
 * one piece. A device pool queues the copies on stream. */
static int payload_copy(const kv_pool *p, int b, uint16_t *payload, int to_pool, int swa_only, int stream,
                        strata_err *err) {
    size_t layer = (size_t)2 * p->block_tokens * p->row_halves; /* halves of one layer's K and V */
    for (int l = 0, e; l < p->n_layer; l = e) {
        int sw = kv_layer_slides(p, l), rc = 0;
        for (e = l + 1; e < p->n_layer && kv_layer_slides(p, e) == sw; e++) {}
        if ((sw && p->swa_slot[b] < 0) || (swa_only && !sw)) continue;
        uint16_t *rows = kv_rows(p, b, l, 0), *pl = payload + (size_t)l * layer;
        size_t n = (size_t)(e - l) * layer * sizeof(uint16_t);
        if (!p->dev) memcpy(to_pool ? rows : pl, to_pool ? pl : rows, n);
        else if (to_pool) rc = devmem_copy(p->dev, stream, rows, pl, n, DEVMEM_H2D, err);
        else rc = devmem_copy(p->dev, stream, pl, rows, n, DEVMEM_D2H, err);
        if (rc) return rc;
    }
    return 0;
}

/* Device pools: the copy stream's next work (an upload into b: its
 * global part unless swa_only, its slot) starts after the queued
 * downloads that still read them (an eviction's, a publish's). */
static int wait_reads(const kv_pool *p, int b, int swa_only, strata_err *err) {
    int sl = p->swa_layer ? p->swa_slot[b] : -1, rc = 0;
    if (!swa_only && p->read_ev[b]) rc = devmem_wait(p->dev, DEVMEM_COPY, p->read_ev[b], err);
    if (!rc && sl >= 0 && p->slot_ev[sl]) rc = devmem_wait(p->dev, DEVMEM_COPY, p->slot_ev[sl], err);
    return rc;
}

/* *at: a new event after the compute stream's work so far (the old one freed). */
static int mark(const kv_pool *p, devmem_event **at, strata_err *err) {
    devmem_event *ev = devmem_record(p->dev, DEVMEM_COMPUTE, err);
    if (!ev) return err && err->code ? err->code : STRATA_EIO;
    devmem_event_free(p->dev, *at);
    *at = ev;
    return 0;
}

const void *kv_block_read(const kv_pool *p, int b, void *scratch) {
    void *v = kv_block_view(p, b);
    if (v) return v;
    if (!kv_block_has_swa(p, b)) return NULL;
    if (!p->dev) {
        payload_copy(p, b, scratch, 0, 0, 0, NULL);
        return scratch;
    }
    /* after the kernels that wrote it; waited for even when a copy fails
     * (the queued ones still write into scratch) */
    int bad = payload_copy(p, b, scratch, 0, 0, DEVMEM_COMPUTE, NULL) != 0;
    bad |= devmem_sync(p->dev, DEVMEM_COMPUTE, NULL) != 0;
    return bad ? NULL : scratch;
}

int kv_block_read_async(kv_pool *p, int b, void *dst, devmem_event **done, strata_err *err) {
    *done = NULL;
    if (!kv_block_has_swa(p, b))
        return strata_errf(err, STRATA_EINVAL, "kv pool: block %d has no sliding part to read", b);
    if (!p->dev) {
        const void *v = kv_block_read(p, b, dst);
        if (v != dst) memcpy(dst, v, p->block_bytes);
        return 0;
    }
    /* the caller's event, and the pool's for the next upload into b and
     * into its slot */
    strata_err e = {0};
    int sl = p->swa_layer ? p->swa_slot[b] : -1;
    if (payload_copy(p, b, dst, 0, 0, DEVMEM_COMPUTE, &e) || mark(p, &p->read_ev[b], &e) ||
        (sl >= 0 && mark(p, &p->slot_ev[sl], &e)) || mark(p, done, &e))
        return strata_errf(err, e.code ? e.code : STRATA_EIO, "%s", e.msg);
    return 0;
}

int kv_block_write_async(const kv_pool *p, int b, const void *src, strata_err *err) {
    if (p->dev) {
        int rc = wait_reads(p, b, 0, err);
        return rc ? rc : payload_copy(p, b, (uint16_t *)src, 1, 0, DEVMEM_COPY, err);
    }
    void *v = kv_block_view(p, b);
    if (v) memcpy(v, src, p->block_bytes);
    else payload_copy(p, b, (uint16_t *)src, 1, 0, 0, NULL);
    return 0;
}

int kv_pool_wait_writes(const kv_pool *p, strata_err *err) {
    return p->dev ? devmem_sync(p->dev, DEVMEM_COPY, err) : 0;
}

int kv_block_write(const kv_pool *p, int b, const void *src, strata_err *err) {
    int rc = kv_block_write_async(p, b, src, err);
    return rc ? rc : kv_pool_wait_writes(p, err);
}

/* A device pool's import: on the copy stream after the downloads still
 * reading the slot, then waited for (the caller reuses src at once). A
 * failed one leaves b without its sliding part (its bytes are unknown),
 * unless it is held. */
static int import_on_device(kv_pool *p, int b, const void *src, strata_err *err) {
    int rc = wait_reads(p, b, 1, err);
    if (!rc) rc = payload_copy(p, b, (uint16_t *)src, 1, 1, DEVMEM_COPY, err);
    int rc2 = devmem_sync(p->dev, DEVMEM_COPY, rc ? NULL : err); /* also after a failed copy: src is read */
    if ((rc || rc2) && p->swa_hold[b] == 0) slot_give_back(p, b);
    return rc ? rc : rc2;
}

int kv_block_import_swa(kv_pool *p, int b, const void *src, strata_err *err) {
    if (!p->swa_layer) return 0;
    if (p->swa_slot[b] < 0 && slot_alloc(p, b) < 0)
        return strata_errf(err, STRATA_ERANGE, "kv pool: all %d sliding-window slots in use", p->n_slots);
    if (p->dev) return import_on_device(p, b, src, err);
    return payload_copy(p, b, (uint16_t *)src, 1, 1, 0, NULL);
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
    kv_state_free(p, s->rs);
    kv_seq_init(s);
}

/* ---- recurrent states (qwen35), where the pool's payload is ---------------- */

float *kv_state_alloc(const kv_pool *p, size_t n, strata_err *err) {
    if (!p->dev) return xcalloc(n, sizeof(float));
    return dev_alloc(p->dev, n * sizeof(float), "recurrent states", 1, err);
}

void kv_state_free(const kv_pool *p, float *rs) {
    if (p->dev) devmem_free(p->dev, rs);
    else free(rs);
}

int kv_state_copy(const kv_pool *p, float *dst, const float *src, size_t n, strata_err *err) {
    if (!p->dev) {
        memcpy(dst, src, n * sizeof(float));
        return 0;
    }
    return devmem_copy(p->dev, DEVMEM_COMPUTE, dst, src, n * sizeof(float), DEVMEM_D2D, err);
}

int kv_seq_state_read(const kv_pool *p, const kv_seq *s, float *host, strata_err *err) {
    if (!p->dev) {
        memcpy(host, s->rs, s->rs_floats * sizeof(float));
        return 0;
    }
    int rc = devmem_copy(p->dev, DEVMEM_COMPUTE, host, s->rs, s->rs_floats * sizeof(float), DEVMEM_D2H, err);
    return rc ? rc : devmem_sync(p->dev, DEVMEM_COMPUTE, err);
}

static void table_grow(kv_seq *s, int need) {
    XGROW(s->blocks, s->n_alloc, need, 8);
}

/* Unit `from` of a part (the global parts, or the slots: bytes each) to
 * unit `to`: on a device, in stream order with the kernels that wrote
 * the one and will write the other. */
static int part_copy(const kv_pool *p, uint16_t *mem, size_t bytes, int to, int from, strata_err *err) {
    uint16_t *dst = mem + (size_t)to * (bytes / 2), *src = mem + (size_t)from * (bytes / 2);
    if (p->dev) return devmem_copy(p->dev, DEVMEM_COMPUTE, dst, src, bytes, DEVMEM_D2D, err);
    memcpy(dst, src, bytes);
    return 0;
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
    int rc = part_copy(p, p->mem, p->glob_bytes, nb, old, err);
    if (!rc && p->swa_layer) rc = part_copy(p, p->swa_mem, p->swa_bytes, p->swa_slot[nb], p->swa_slot[old], err);
    if (rc) {
        block_free(p, nb);
        return rc;
    }
    if (p->swa_layer) {
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
    if (src->rs && src->rs_pos == n) { /* device memory refused: the fork has no state (it restarts at 0) */
        strata_err err = {0};
        float *rs = kv_state_alloc(p, src->rs_floats, &err);
        if (rs && kv_state_copy(p, rs, src->rs, src->rs_floats, &err) == 0) {
            dst->rs = rs;
            dst->rs_floats = src->rs_floats;
            dst->rs_pos = n;
        } else {
            kv_state_free(p, rs);
        }
    }
}

int kv_seq_set_state(const kv_pool *p, kv_seq *s, const float *state, size_t n, int pos, strata_err *err) {
    if (!s->rs || s->rs_floats != n) {
        kv_state_free(p, s->rs);
        s->rs_floats = 0, s->rs_pos = 0;
        if (!(s->rs = kv_state_alloc(p, n, err))) return STRATA_ENOMEM;
        s->rs_floats = n;
    }
    int rc = 0;
    if (!p->dev) memcpy(s->rs, state, n * sizeof(float));
    else if (!(rc = devmem_copy(p->dev, DEVMEM_COMPUTE, s->rs, state, n * sizeof(float), DEVMEM_H2D, err)))
        rc = devmem_sync(p->dev, DEVMEM_COMPUTE, err); /* the caller's buffer is read by then */
    s->rs_pos = rc ? 0 : pos;
    return rc;
}
