/* live.c - hash index and idle-block LRU over the KV pool (see live.h).
 *
 * The index is an open-addressing table from block hash to block id
 * (linear probing, tombstones on removal), sized at twice the pool so it
 * never fills. Blocks no sequence references but the index names sit in
 * a doubly linked LRU list; the pool reclaims from its head. */
#include "cache/live.h"

#include <stdlib.h>
#include <string.h>

#include "base/mem.h"

enum { SLOT_EMPTY = 0, SLOT_USED = 1, SLOT_TOMB = 2 };

typedef struct slot {
    cache_hash h;
    int block;
    int state;
} slot;

struct live_cache {
    kv_pool *kv;
    slot *map;
    size_t cap; /* power of two */
    int *entry_of;       /* block -> map index, or -1 */
    int *prev, *next;    /* LRU links per block; -1 ends */
    char *idle;          /* block is in the LRU list */
    int lru_head, lru_tail;
    disk_store *disk; /* NULL: no disk tier */
    live_stats st;
};

/* ---- hash table ------------------------------------------------------------ */

static size_t probe_start(const live_cache *c, const cache_hash *h) {
    uint64_t k;
    memcpy(&k, h->b, 8); /* SHA-256 output is uniform: its first bytes index well */
    return (size_t)k & (c->cap - 1);
}

static int map_find(const live_cache *c, const cache_hash *h) {
    for (size_t i = probe_start(c, h), n = 0; n < c->cap; i = (i + 1) & (c->cap - 1), n++) {
        if (c->map[i].state == SLOT_EMPTY) return -1;
        if (c->map[i].state == SLOT_USED && memcmp(c->map[i].h.b, h->b, 32) == 0) return (int)i;
    }
    return -1;
}

static int map_insert(live_cache *c, const cache_hash *h, int block) {
    size_t i = probe_start(c, h);
    while (c->map[i].state == SLOT_USED) i = (i + 1) & (c->cap - 1);
    c->map[i] = (slot){*h, block, SLOT_USED};
    return (int)i;
}

/* ---- idle LRU ----------------------------------------------------------------- */

static void lru_remove(live_cache *c, int b) {
    if (!c->idle[b]) return;
    if (c->prev[b] >= 0) c->next[c->prev[b]] = c->next[b];
    else c->lru_head = c->next[b];
    if (c->next[b] >= 0) c->prev[c->next[b]] = c->prev[b];
    else c->lru_tail = c->prev[b];
    c->idle[b] = 0;
    c->st.idle_blocks--;
}

static void lru_push(live_cache *c, int b) {
    c->prev[b] = c->lru_tail;
    c->next[b] = -1;
    if (c->lru_tail >= 0) c->next[c->lru_tail] = b;
    else c->lru_head = b;
    c->lru_tail = b;
    c->idle[b] = 1;
    c->st.idle_blocks++;
}

/* ---- pool hooks ------------------------------------------------------------------ */

static int keep_hook(void *ctx, int b) {
    live_cache *c = ctx;
    if (c->entry_of[b] < 0) return 0;
    lru_push(c, b);
    return 1;
}

static int reclaim_hook(void *ctx) {
    live_cache *c = ctx;
    int b = c->lru_head;
    if (b < 0) return -1;
    lru_remove(c, b);
    c->map[c->entry_of[b]].state = SLOT_TOMB;
    c->entry_of[b] = -1;
    c->st.cached_blocks--;
    c->st.evicted_blocks++;
    return b;
}

static int frozen_hook(void *ctx, int b) { return ((live_cache *)ctx)->entry_of[b] >= 0; }

/* ---- public ------------------------------------------------------------------------ */

live_cache *live_new(kv_pool *kv) {
    live_cache *c = xcalloc(1, sizeof *c);
    c->kv = kv;
    c->cap = 16;
    while (c->cap < (size_t)kv->n_blocks * 2) c->cap *= 2;
    c->map = xcalloc(c->cap, sizeof(slot));
    c->entry_of = xmalloc((size_t)kv->n_blocks * sizeof(int));
    c->prev = xmalloc((size_t)kv->n_blocks * sizeof(int));
    c->next = xmalloc((size_t)kv->n_blocks * sizeof(int));
    c->idle = xcalloc((size_t)kv->n_blocks, 1);
    for (int i = 0; i < kv->n_blocks; i++) c->entry_of[i] = -1;
    c->lru_head = c->lru_tail = -1;
    kv->keeper = (kv_keeper){c, keep_hook, reclaim_hook, frozen_hook};
    return c;
}

void live_free(live_cache *c) {
    if (!c) return;
    /* Idle blocks go back to the pool's free list. */
    while (c->lru_head >= 0) {
        int b = reclaim_hook(c);
        c->kv->free_list[c->kv->n_free++] = b;
    }
    memset(&c->kv->keeper, 0, sizeof c->kv->keeper);
    free(c->map), free(c->entry_of), free(c->prev), free(c->next), free(c->idle);
    free(c);
}

void live_set_disk(live_cache *c, disk_store *d) { c->disk = d; }

void live_cursor_init(live_cursor *cur, const cache_hash *root) {
    cur->n_blocks = 0;
    cur->last = *root;
}

/* Loads block h from disk into a new block at the end of s and indexes it.
 * The tokens in the file must equal ours (a check on top of the hash). */
static int load_from_disk(live_cache *c, const cache_hash *h, const int32_t *tokens, kv_seq *s) {
    int B = c->kv->block_tokens;
    int32_t got[4096];
    if (B > 4096 || kv_seq_reserve(c->kv, s, s->n_pos + B, NULL)) return -1;
    int b = s->blocks[s->n_blocks - 1];
    strata_err err = {0};
    if (disk_get(c->disk, h, kv_rows(c->kv, b, 0, 0), got, &err) ||
        memcmp(got, tokens, (size_t)B * sizeof(int32_t)) != 0) {
        c->st.disk_errors++;
        kv_seq_truncate(c->kv, s, s->n_pos); /* gives the reserved block back */
        return -1;
    }
    s->n_pos += B;
    if (map_find(c, h) < 0) {
        c->entry_of[b] = map_insert(c, h, b);
        c->st.cached_blocks++;
    }
    return 0;
}

int live_attach(live_cache *c, live_cursor *cur, const int32_t *tokens, int n_max, kv_seq *s, int *from_disk) {
    int B = c->kv->block_tokens, got = 0, disk = 0;
    c->st.lookups++;
    while ((cur->n_blocks + 1) * B <= n_max) {
        const int32_t *bt = tokens + (size_t)cur->n_blocks * B;
        cache_hash h;
        cache_hash_block(&h, &cur->last, bt, B);
        int e = map_find(c, &h);
        if (e >= 0) {
            int b = c->map[e].block;
            lru_remove(c, b);
            kv_seq_attach(c->kv, s, b);
            if (c->disk) disk_touch(c->disk, &h);
        } else if (!c->disk || !disk_has(c->disk, &h) || load_from_disk(c, &h, bt, s)) {
            break;
        } else {
            disk += B;
        }
        cur->last = h;
        cur->n_blocks++;
        got += B;
    }
    c->st.hit_tokens += got - disk;
    c->st.disk_hit_tokens += disk;
    if (from_disk) *from_disk = disk;
    return got;
}

void live_publish(live_cache *c, live_cursor *cur, const int32_t *tokens, const kv_seq *s, int n_limit) {
    int B = c->kv->block_tokens, end = s->n_pos < n_limit ? s->n_pos : n_limit;
    while ((cur->n_blocks + 1) * B <= end) {
        cache_hash h;
        cache_hash_block(&h, &cur->last, tokens + (size_t)cur->n_blocks * B, B);
        int b = s->blocks[cur->n_blocks];
        if (map_find(c, &h) < 0 && c->entry_of[b] < 0) { /* never store a block twice */
            c->entry_of[b] = map_insert(c, &h, b);
            c->st.cached_blocks++;
            c->st.published_blocks++;
        }
        /* A copy goes to the writer thread (a no-op if already stored). */
        if (c->disk) disk_put(c->disk, &h, &cur->last, tokens + (size_t)cur->n_blocks * B, kv_rows(c->kv, b, 0, 0));
        cur->last = h;
        cur->n_blocks++;
    }
}

void live_get_stats(const live_cache *c, live_stats *out) { *out = c->st; }
