/* live.c - hash index, partial matches and scored eviction over the KV
 * pool (see live.h).
 *
 * The index is an open-addressing table from block hash to block id
 * (linear probing, tombstones on removal), sized at twice the pool so it
 * never fills. Each cached pool block has a record: its index entry (full
 * blocks) or none (tails), its tokens and the chain hash before it (for
 * partial matches), its parent block (to evict leaves first), use and hits
 * (policy_value) and a retention end. Where whole blocks stop matching,
 * the blocks that continue the same chain are scanned for the longest
 * token match; when the pool runs dry, reclaim_hook scans the idle leaves:
 * one pass over the pool each, microseconds next to the compute they
 * save. */
#include "cache/live.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/mem.h"

enum { SLOT_EMPTY = 0, SLOT_USED = 1, SLOT_TOMB = 2 };

typedef struct slot {
    cache_hash h;
    int block;
    int state;
} slot;

/* What the cache knows of one pool block. */
typedef struct brec {
    int entry;        /* index slot of a published block, or -1 */
    int parent;       /* cached block this one continues, or -1 */
    int n_children;   /* cached blocks and tails continuing this one */
    int depth;        /* tokens before it */
    char idle;        /* cached, no sequence uses it */
    int n_tok;        /* tokens held: B (published) or fewer (a tail); 0: not cached */
    cache_hash prev;  /* chain hash before the block */
    double last_use, hits, keep_until; /* ms (clock_ms), decayed count, ms */
} brec;

struct live_cache {
    kv_pool *kv;
    slot *map;
    size_t cap; /* power of two */
    brec *rec;  /* per pool block */
    int32_t *tok; /* per pool block: B token ids (rec.n_tok of them valid) */
    double attn_per_pos;
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

/* ---- block records ------------------------------------------------------------ */

static int is_cached(const live_cache *c, int b) { return c->rec[b].n_tok > 0; }

static int32_t *tokens_of(const live_cache *c, int b) { return c->tok + (size_t)b * c->kv->block_tokens; }

static void touch(live_cache *c, int b, int hit) {
    brec *r = &c->rec[b];
    double now = clock_ms();
    r->hits = policy_decay(r->hits, (now - r->last_use) / 1000.0) + (hit ? 1.0 : 0.0);
    r->last_use = now;
}

static void set_idle(live_cache *c, int b, int idle) {
    if (c->rec[b].idle == idle) return;
    c->rec[b].idle = (char)idle;
    c->st.idle_blocks += idle ? 1 : -1;
}

/* Starts caching block b: n tokens after chain hash prev, continuing
 * cached block p (-1: none), at depth tokens. */
static void cache_block(live_cache *c, int b, const cache_hash *prev, const int32_t *tokens, int n, int p, int depth) {
    brec *r = &c->rec[b];
    r->n_tok = n;
    r->prev = *prev;
    memcpy(tokens_of(c, b), tokens, (size_t)n * sizeof(int32_t));
    r->parent = p;
    r->depth = depth;
    if (p >= 0) c->rec[p].n_children++;
    r->hits = 0;
    r->keep_until = 0;
    touch(c, b, 0);
    if (n < c->kv->block_tokens) c->st.tails++;
}

/* A full block, findable by its hash h. */
static void index_block(live_cache *c, int b, const cache_hash *h, const cache_hash *prev, const int32_t *tokens, int p,
                        int depth) {
    c->rec[b].entry = map_insert(c, h, b);
    cache_block(c, b, prev, tokens, c->kv->block_tokens, p, depth);
    c->st.cached_blocks++;
}

/* Forgets everything cached about b (which no sequence uses). */
static void uncache(live_cache *c, int b) {
    brec *r = &c->rec[b];
    if (r->entry >= 0) {
        c->map[r->entry].state = SLOT_TOMB;
        r->entry = -1;
        c->st.cached_blocks--;
    }
    if (r->n_tok > 0 && r->n_tok < c->kv->block_tokens) c->st.tails--;
    r->n_tok = 0;
    if (r->parent >= 0) c->rec[r->parent].n_children--;
    r->parent = -1;
    set_idle(c, b, 0);
    /* Only when no leaf was left: orphans keep their KV, not the link. */
    if (r->n_children > 0)
        for (int i = 0; i < c->kv->n_blocks; i++)
            if (c->rec[i].parent == b) c->rec[i].parent = -1;
    r->n_children = 0;
}

/* ---- pool hooks ------------------------------------------------------------------ */

static int keep_hook(void *ctx, int b) {
    live_cache *c = ctx;
    if (!is_cached(c, b)) return 0;
    set_idle(c, b, 1);
    return 1;
}

static double value_of(const live_cache *c, int b, double now) {
    const brec *r = &c->rec[b];
    return policy_value(r->depth, r->n_tok, c->attn_per_pos, r->hits, (now - r->last_use) / 1000.0);
}

/* The idle block to give up: a leaf if there is one, lowest in the
 * policy's order. */
static int reclaim_hook(void *ctx) {
    live_cache *c = ctx;
    double now = clock_ms(), best_v = 0;
    int best = -1, best_leaf = 0;
    for (int b = 0; b < c->kv->n_blocks; b++) {
        const brec *r = &c->rec[b];
        if (!r->idle) continue;
        int leaf = r->n_children == 0;
        double v = value_of(c, b, now);
        if (best >= 0) {
            if (leaf != best_leaf) {
                if (!leaf) continue;
            } else if (policy_evict_before(v, r->keep_until, best_v, c->rec[best].keep_until, now) >= 0) {
                continue;
            }
        }
        best = b, best_v = v, best_leaf = leaf;
    }
    if (best < 0) return -1;
    c->st.evicted_blocks++;
    c->st.evicted_retained += c->rec[best].keep_until > now;
    uncache(c, best);
    return best;
}

static int frozen_hook(void *ctx, int b) { return is_cached((live_cache *)ctx, b); }

/* ---- public ------------------------------------------------------------------------ */

live_cache *live_new(kv_pool *kv) {
    live_cache *c = xcalloc(1, sizeof *c);
    c->kv = kv;
    c->cap = 16;
    while (c->cap < (size_t)kv->n_blocks * 2) c->cap *= 2;
    c->map = xcalloc(c->cap, sizeof(slot));
    c->rec = xcalloc((size_t)kv->n_blocks, sizeof(brec));
    c->tok = xmalloc((size_t)kv->n_blocks * kv->block_tokens * sizeof(int32_t));
    for (int i = 0; i < kv->n_blocks; i++) c->rec[i].entry = c->rec[i].parent = -1;
    kv->keeper = (kv_keeper){c, keep_hook, reclaim_hook, frozen_hook};
    return c;
}

void live_free(live_cache *c) {
    if (!c) return;
    /* Idle blocks go back to the pool's free list. */
    for (int b = 0; b < c->kv->n_blocks; b++)
        if (c->rec[b].idle) c->kv->free_list[c->kv->n_free++] = b;
    memset(&c->kv->keeper, 0, sizeof c->kv->keeper);
    free(c->map), free(c->rec), free(c->tok);
    free(c);
}

void live_set_disk(live_cache *c, disk_store *d) { c->disk = d; }

void live_set_cost(live_cache *c, double attn_per_pos) { c->attn_per_pos = attn_per_pos; }

void live_cursor_init(live_cursor *cur, const cache_hash *root) {
    cur->n_blocks = 0;
    cur->last = *root;
}

/* The cached block before position pos of s (its parent), or -1. */
static int parent_in(const live_cache *c, const kv_seq *s, int block_index) {
    if (block_index == 0) return -1;
    int p = s->blocks[block_index - 1];
    return c->rec[p].entry >= 0 ? p : -1;
}

/* How many blocks from tokens on (at most max) the disk tier has and the
 * live tier does not, chained from hash `last`; their hashes in hs. */
static int disk_run(const live_cache *c, const cache_hash *last, const int32_t *tokens, int max, cache_hash *hs) {
    int B = c->kv->block_tokens, n = 0;
    for (const cache_hash *prev = last; n < max; prev = &hs[n++]) {
        cache_hash_block(&hs[n], prev, tokens + (size_t)n * B, B);
        if (map_find(c, &hs[n]) >= 0 || !disk_has(c->disk, &hs[n])) break;
    }
    return n;
}

/* A partial match on disk, where the chain ends: len tokens of the
 * block h (n_tok tokens: a tail, or a full block matching in part). */
typedef struct disk_part {
    cache_hash h;
    int n_tok, len;
} disk_part;

/* A run of blocks being read from disk into blocks reserved at the end of
 * a sequence, on a thread of its own, perhaps followed by one partial
 * match; only load_finish touches the cache and the pool again. */
struct live_load {
    pthread_t th;
    int threaded;
    atomic_int done;
    disk_store *d;
    cache_hash prev, *hs; /* chain hash before the run; the run's hashes (then the part's) */
    int n, first, ok;     /* full blocks; index of the first in the sequence; loaded prefix */
    disk_part part;       /* len 0: none */
    void **dst;
    int32_t **tok, *got, *want; /* read and expected token ids */
    int *rc;
};

static int load_items(const live_load *l) { return l->n + (l->part.len > 0); }

static void *load_main(void *arg) {
    live_load *l = arg;
    l->ok = disk_get_many(l->d, l->hs, l->dst, l->tok, load_items(l), l->rc);
    atomic_store(&l->done, 1);
    return NULL;
}

static void load_free(live_load *l) {
    free(l->hs), free(l->dst), free(l->tok), free(l->got), free(l->want), free(l->rc);
    free(l);
}

/* Reserves n blocks (and one for part, if any) at the end of s, fewer if
 * the pool is short, and starts reading the run hs (and the part) into
 * them. NULL when not one block fits. */
static live_load *load_start(live_cache *c, const cache_hash *prev, const cache_hash *hs, const int32_t *tokens, int n,
                             const disk_part *part, kv_seq *s) {
    int B = c->kv->block_tokens, extra = part->len > 0;
    while (n + extra > 0 && kv_seq_reserve(c->kv, s, s->n_pos + (n + extra) * B, NULL)) /* as much as the pool holds */
        if (extra) extra = 0;
        else n /= 2;
    if (n + extra == 0) return NULL;
    int items = n + extra;
    live_load *l = xcalloc(1, sizeof *l);
    l->d = c->disk;
    l->prev = *prev;
    l->n = n;
    if (extra) l->part = *part;
    l->first = s->n_pos / B;
    l->hs = xmalloc((size_t)items * sizeof *l->hs);
    memcpy(l->hs, hs, (size_t)n * sizeof *l->hs);
    if (extra) l->hs[n] = part->h;
    l->want = xmalloc(((size_t)n * B + (size_t)l->part.len) * sizeof(int32_t) + 1);
    memcpy(l->want, tokens, ((size_t)n * B + (size_t)l->part.len) * sizeof(int32_t));
    l->dst = xmalloc((size_t)items * sizeof *l->dst);
    l->tok = xmalloc((size_t)items * sizeof *l->tok);
    l->got = xmalloc((size_t)items * B * sizeof(int32_t));
    l->rc = xmalloc((size_t)items * sizeof(int));
    for (int i = 0; i < items; i++) {
        l->dst[i] = kv_rows(c->kv, s->blocks[l->first + i], 0, 0);
        l->tok[i] = l->got + (size_t)i * B;
    }
    l->threaded = pthread_create(&l->th, NULL, load_main, l) == 0;
    if (!l->threaded) load_main(l);
    return l;
}

/* A block read from disk keeps the retention the disk remembers for it
 * (anchors and cache_control marks outlive a restart). */
static void carry_retention(live_cache *c, int b, const cache_hash *h) {
    double left = disk_retained_s(c->disk, h);
    if (left > 0) c->rec[b].keep_until = clock_ms() + left * 1000.0;
}

/* The loaded partial block, at the end of s's full blocks, joins the
 * cache (indexed if full, a tail if not) when its tokens are the ones
 * asked for and hash to its name; the caller's truncation then leaves it
 * idle for attach_partial to find. Returns the block, or -1. */
static int promote_part(live_cache *c, live_load *l, kv_seq *s, const cache_hash *prev) {
    int B = c->kv->block_tokens, bi = l->first + l->n, b = s->blocks[bi];
    const int32_t *got = l->tok[l->n];
    cache_hash h;
    cache_hash_block(&h, prev, got, l->part.n_tok);
    if (memcmp(h.b, l->part.h.b, 32) != 0 || memcmp(got, l->want + (size_t)l->n * B, (size_t)l->part.len * 4) != 0) {
        c->st.disk_errors++;
        return -1;
    }
    if (l->part.n_tok < B) {
        cache_block(c, b, prev, got, l->part.n_tok, parent_in(c, s, bi), s->n_pos);
    } else {
        if (map_find(c, &h) >= 0) return -1; /* published meanwhile: that one serves */
        index_block(c, b, &h, prev, got, parent_in(c, s, bi), s->n_pos);
    }
    carry_retention(c, b, &h);
    return b;
}

/* Waits for the read; keeps the loaded prefix whose tokens match ours (a
 * check on top of the hash), indexes it, promotes the partial block if
 * the whole run came in, gives the other reserved blocks back. Returns
 * the blocks appended to s, the hash of the last in *last, the promoted
 * block (or -1) in *part_block; frees l. */
static int load_finish(live_cache *c, live_load *l, kv_seq *s, cache_hash *last, int *part_block) {
    int B = c->kv->block_tokens, ok;
    if (l->threaded) pthread_join(l->th, NULL);
    ok = l->ok < l->n ? l->ok : l->n;
    for (int i = 0; i < ok; i++)
        if (memcmp(l->tok[i], l->want + (size_t)i * B, (size_t)B * sizeof(int32_t)) != 0) ok = i;
    c->st.disk_errors += l->ok < load_items(l) || ok < l->n;
    for (int i = 0; i < ok; i++, s->n_pos += B) {
        int b = s->blocks[l->first + i];
        if (map_find(c, &l->hs[i]) >= 0) continue;
        index_block(c, b, &l->hs[i], i ? &l->hs[i - 1] : &l->prev, l->want + (size_t)i * B, parent_in(c, s, l->first + i),
                    s->n_pos);
        carry_retention(c, b, &l->hs[i]);
    }
    if (ok > 0) *last = l->hs[ok - 1];
    *part_block = ok == l->n && l->ok > l->n ? promote_part(c, l, s, ok ? &l->hs[ok - 1] : &l->prev) : -1;
    kv_seq_truncate(c->kv, s, s->n_pos); /* gives unused reserved blocks back; a promoted one stays cached */
    load_free(l);
    return ok;
}

/* The cached block after chain hash prev (a tail, or a full block that
 * matches only in part) whose tokens match most of tokens[0..n); its
 * match length in *len. */
static int best_partial(const live_cache *c, const cache_hash *prev, const int32_t *tokens, int n, int *len) {
    int best = -1;
    *len = 0;
    for (int b = 0; b < c->kv->n_blocks; b++) {
        const brec *r = &c->rec[b];
        if (r->n_tok == 0 || memcmp(r->prev.b, prev->b, 32) != 0) continue;
        const int32_t *t = tokens_of(c, b);
        int m = 0;
        while (m < r->n_tok && m < n && t[m] == tokens[m]) m++;
        if (m > *len) best = b, *len = m;
    }
    return best;
}

/* Attaches the live block named h (index entry e) to s. */
static void attach_live(live_cache *c, int e, kv_seq *s) {
    int b = c->map[e].block;
    set_idle(c, b, 0);
    touch(c, b, 1);
    kv_seq_attach(c->kv, s, b);
    if (c->disk) disk_touch(c->disk, &c->map[e].h);
}

/* Where the chain of whole blocks ends at block index at (chain hash
 * last), the partial match on disk if it beats every one in memory;
 * part->len 0 when there is none or the chain goes on in memory. */
static void find_disk_part(const live_cache *c, const cache_hash *last, const int32_t *tokens, int at, int n_max,
                           disk_part *part) {
    int B = c->kv->block_tokens, off = at * B, live_len;
    part->len = 0;
    if (!c->disk || off >= n_max) return;
    if (off + B <= n_max) {
        cache_hash next;
        cache_hash_block(&next, last, tokens + off, B);
        if (map_find(c, &next) >= 0) return;
    }
    int len = disk_best_child(c->disk, last, tokens + off, n_max - off, &part->h, &part->n_tok);
    best_partial(c, last, tokens + off, n_max - off, &live_len);
    if (len > live_len) part->len = len;
}

/* Attaches whole blocks from where cur stands: live ones, and runs read
 * from disk (waited for, or with pending set, started and left running:
 * then it stops there), the last run followed by the partial match on
 * disk when that is the best one (then promoted into the pool for
 * attach_partial: *part_block). Adds to *disk the tokens loaded. */
static void attach_blocks(live_cache *c, live_cursor *cur, const int32_t *tokens, int n_max, kv_seq *s, int *disk,
                          int *part_block, live_load **pending) {
    int B = c->kv->block_tokens, max_blocks = n_max / B;
    cache_hash *run = c->disk ? xmalloc(((size_t)max_blocks + 1) * sizeof *run) : NULL;
    *part_block = -1;
    while (cur->n_blocks <= max_blocks) {
        const int32_t *bt = tokens + (size_t)cur->n_blocks * B;
        cache_hash h;
        int e = -1;
        if (cur->n_blocks < max_blocks) {
            cache_hash_block(&h, &cur->last, bt, B);
            e = map_find(c, &h);
        }
        if (e >= 0) {
            attach_live(c, e, s);
            cur->last = h;
            cur->n_blocks++;
            continue;
        }
        disk_part part = {0};
        int n = run ? disk_run(c, &cur->last, bt, max_blocks - cur->n_blocks, run) : 0;
        find_disk_part(c, n ? &run[n - 1] : &cur->last, tokens, cur->n_blocks + n, n_max, &part);
        live_load *l = n > 0 || part.len > 0 ? load_start(c, &cur->last, run, bt, n, &part, s) : NULL;
        if (!l) break;
        if (pending) {
            *pending = l;
            break;
        }
        int want = l->n, had_part = l->part.len > 0, got = load_finish(c, l, s, &cur->last, part_block);
        cur->n_blocks += got;
        *disk += got * B;
        if (got < want || had_part || got == 0) break;
    }
    free(run);
}

/* After the whole blocks: the longest partial match, shared (the
 * sequence's first write copies it). part_block: a block just loaded from
 * disk (its tokens count as disk hits). Counts the lookup's hits. */
static int attach_partial(live_cache *c, const live_cursor *cur, const int32_t *tokens, int n_max, kv_seq *s, int *disk,
                          int part_block) {
    int got = s->n_pos, tail = 0;
    int tb = got < n_max ? best_partial(c, &cur->last, tokens + got, n_max - got, &tail) : -1;
    if (tb >= 0) {
        set_idle(c, tb, 0);
        touch(c, tb, 1);
        kv_seq_attach(c->kv, s, tb);
        s->n_pos = got + tail;
        if (tb == part_block) *disk += tail;
        else c->st.tail_hit_tokens += tail;
    }
    c->st.hit_tokens += s->n_pos - *disk;
    c->st.disk_hit_tokens += *disk;
    return s->n_pos;
}

int live_attach(live_cache *c, live_cursor *cur, const int32_t *tokens, int n_max, kv_seq *s, int *from_disk) {
    int disk = 0, part_block;
    c->st.lookups++;
    attach_blocks(c, cur, tokens, n_max, s, &disk, &part_block, NULL);
    int n = attach_partial(c, cur, tokens, n_max, s, &disk, part_block);
    if (from_disk) *from_disk = disk;
    return n;
}

int live_attach_begin(live_cache *c, live_cursor *cur, const int32_t *tokens, int n_max, kv_seq *s, live_load **pending) {
    int disk = 0, part_block;
    *pending = NULL;
    c->st.lookups++;
    attach_blocks(c, cur, tokens, n_max, s, &disk, &part_block, pending);
    return *pending ? s->n_pos : attach_partial(c, cur, tokens, n_max, s, &disk, part_block);
}

int live_load_ready(live_load *l) { return atomic_load(&l->done); }

int live_attach_end(live_cache *c, live_cursor *cur, const int32_t *tokens, int n_max, kv_seq *s, live_load *l,
                    int *from_disk) {
    int want = l->n, had_part = l->part.len > 0, part_block;
    int n = load_finish(c, l, s, &cur->last, &part_block);
    int disk = n * c->kv->block_tokens;
    cur->n_blocks += n;
    if (n == want && !had_part) attach_blocks(c, cur, tokens, n_max, s, &disk, &part_block, NULL); /* what follows */
    int got = attach_partial(c, cur, tokens, n_max, s, &disk, part_block);
    if (from_disk) *from_disk = disk;
    return got;
}

void live_load_cancel(live_load *l) {
    if (!l) return;
    if (l->threaded) pthread_join(l->th, NULL);
    load_free(l);
}
void live_publish(live_cache *c, live_cursor *cur, const int32_t *tokens, const kv_seq *s, int n_limit) {
    int B = c->kv->block_tokens, end = s->n_pos < n_limit ? s->n_pos : n_limit;
    while ((cur->n_blocks + 1) * B <= end) {
        cache_hash h;
        cache_hash_block(&h, &cur->last, tokens + (size_t)cur->n_blocks * B, B);
        int b = s->blocks[cur->n_blocks];
        if (map_find(c, &h) < 0 && !is_cached(c, b)) { /* never store a block twice */
            index_block(c, b, &h, &cur->last, tokens + (size_t)cur->n_blocks * B, parent_in(c, s, cur->n_blocks),
                        cur->n_blocks * B);
            c->st.published_blocks++;
        }
        /* A copy goes to the writer thread (a no-op if already stored);
         * the tails on disk this block holds whole go. */
        if (c->disk && disk_put(c->disk, &h, &cur->last, tokens + (size_t)cur->n_blocks * B, kv_rows(c->kv, b, 0, 0)) == 0)
            disk_drop_tails(c->disk, &cur->last, tokens + (size_t)cur->n_blocks * B, B);
        cur->last = h;
        cur->n_blocks++;
    }
}

/* A kept tail goes to disk too, so a restart finds it; the shorter tails
 * it extends go. */
static void put_tail(live_cache *c, const cache_hash *prev, const int32_t *t, int n, int b) {
    cache_hash h;
    if (!c->disk) return;
    cache_hash_block(&h, prev, t, n);
    if (disk_put_n(c->disk, &h, prev, t, n, kv_rows(c->kv, b, 0, 0)) == 0) disk_drop_tails(c->disk, prev, t, n);
}

void live_keep_tail(live_cache *c, const live_cursor *cur, const int32_t *tokens, const kv_seq *s) {
    int B = c->kv->block_tokens, n = s->n_pos % B, bi = s->n_pos / B;
    if (n == 0 || cur->n_blocks != bi || bi >= s->n_blocks) return;
    int b = s->blocks[bi];
    if (is_cached(c, b)) return; /* attached, never written */
    const int32_t *t = tokens + (size_t)bi * B;
    for (int o = 0; o < c->kv->n_blocks; o++) {
        brec *r = &c->rec[o];
        if (r->n_tok == 0 || memcmp(r->prev.b, cur->last.b, 32) != 0) continue;
        const int32_t *ot = tokens_of(c, o);
        if (r->n_tok >= n && memcmp(ot, t, (size_t)n * sizeof(int32_t)) == 0) return; /* says it already */
        if (r->idle && r->n_tok < n && memcmp(ot, t, (size_t)r->n_tok * sizeof(int32_t)) == 0) {
            uncache(c, o); /* a shorter tail this one extends */
            c->kv->free_list[c->kv->n_free++] = o;
        }
    }
    cache_block(c, b, &cur->last, t, n, parent_in(c, s, bi), bi * B);
    put_tail(c, &cur->last, t, n, b);
}

void live_retain(live_cache *c, const kv_seq *s, int end, double ttl_s) {
    int B = c->kv->block_tokens;
    double until = clock_ms() + ttl_s * 1000.0;
    for (int i = 0; i < s->n_blocks && i * B < end && i * B < s->n_pos; i++) {
        brec *r = &c->rec[s->blocks[i]];
        if (!is_cached(c, s->blocks[i])) continue;
        if (until > r->keep_until) r->keep_until = until;
        if (c->disk && r->entry >= 0) disk_retain(c->disk, &c->map[r->entry].h, ttl_s);
    }
}

void live_get_stats(const live_cache *c, live_stats *out) { *out = c->st; }
