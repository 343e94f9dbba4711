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

#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/mem.h"
#include "cache/policy.h"

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
    void (*on_evict)(void *ctx, const cache_hash *h); /* or NULL */
    void *evict_ctx;
    live_spill_fn on_spill; /* or NULL */
    void *spill_ctx;
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
            } else if (policy_evict_before(v, r->keep_until / 1000.0, best_v, c->rec[best].keep_until / 1000.0,
                                           now / 1000.0) >= 0) {
                continue;
            }
        }
        best = b, best_v = v, best_leaf = leaf;
    }
    if (best < 0) return -1;
    c->st.evicted_blocks++;
    c->st.evicted_retained += c->rec[best].keep_until > now;
    if (c->on_evict || c->on_spill) { /* the name of what goes: its index entry, or a tail's hash */
        cache_hash h;
        const int32_t *t;
        int n = live_name(c, best, &h, &t);
        if (c->on_spill) c->on_spill(c->spill_ctx, best, &h, &c->rec[best].prev, t, n);
        if (c->on_evict) c->on_evict(c->evict_ctx, &h);
    }
    uncache(c, best);
    return best;
}

void live_on_evict(live_cache *c, void (*fn)(void *ctx, const cache_hash *h), void *ctx) {
    c->on_evict = fn;
    c->evict_ctx = ctx;
}

void live_on_spill(live_cache *c, live_spill_fn fn, void *ctx) {
    c->on_spill = fn;
    c->spill_ctx = ctx;
}

static int frozen_hook(void *ctx, int b) { return is_cached((live_cache *)ctx, b); }

/* ---- public ------------------------------------------------------------------------ */

live_cache *live_new(kv_pool *kv, double attn_per_pos) {
    live_cache *c = xcalloc(1, sizeof *c);
    c->kv = kv;
    c->attn_per_pos = attn_per_pos;
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
        if (c->rec[b].idle) kv_block_give_back(c->kv, b);
    memset(&c->kv->keeper, 0, sizeof c->kv->keeper);
    free(c->map), free(c->rec), free(c->tok);
    free(c);
}

int live_find(const live_cache *c, const cache_hash *h) {
    int e = map_find(c, h);
    return e >= 0 ? c->map[e].block : -1;
}

int live_is_cached(const live_cache *c, int b) { return is_cached(c, b); }

int live_name(const live_cache *c, int b, cache_hash *h, const int32_t **tokens) {
    const brec *r = &c->rec[b];
    if (r->n_tok == 0) return 0;
    if (r->entry >= 0) *h = c->map[r->entry].h;
    else cache_hash_block(h, &r->prev, tokens_of(c, b), r->n_tok);
    *tokens = tokens_of(c, b);
    return r->n_tok;
}

/* The cached block before block index bi of s (its parent), or -1. */
static int parent_in(const live_cache *c, const kv_seq *s, int bi) {
    if (bi == 0) return -1;
    int p = s->blocks[bi - 1];
    return c->rec[p].entry >= 0 ? p : -1;
}

static void use(live_cache *c, int b) {
    set_idle(c, b, 0);
    touch(c, b, 1);
}

void live_attach(live_cache *c, int b, kv_seq *s) {
    use(c, b);
    kv_seq_attach(c->kv, s, b);
}

void live_attach_part(live_cache *c, int b, kv_seq *s, int len) {
    int at = s->n_pos;
    use(c, b);
    kv_seq_attach(c->kv, s, b);
    s->n_pos = at + len;
}

int live_best_partial(const live_cache *c, const cache_hash *prev, const int32_t *tokens, int n, int *len) {
    int best = -1;
    *len = 0;
    for (int b = 0; b < c->kv->n_blocks; b++) {
        const brec *r = &c->rec[b];
        if (r->n_tok == 0 || memcmp(r->prev.b, prev->b, 32) != 0) continue;
        int m = mem_common_prefix_i32(tokens_of(c, b), r->n_tok, tokens, n);
        if (m > *len) best = b, *len = m;
    }
    return best;
}

int live_add(live_cache *c, const kv_seq *s, int bi, const cache_hash *h, const cache_hash *prev,
             const int32_t *tokens, int n, double keep_s) {
    int b = s->blocks[bi], B = c->kv->block_tokens;
    if (is_cached(c, b) || (h && map_find(c, h) >= 0)) return -1;
    if (h) index_block(c, b, h, prev, tokens, parent_in(c, s, bi), bi * B);
    else cache_block(c, b, prev, tokens, n, parent_in(c, s, bi), bi * B);
    if (keep_s > 0) c->rec[b].keep_until = clock_ms() + keep_s * 1000.0;
    return 0;
}

int live_keep_tail(live_cache *c, const kv_seq *s, const cache_hash *prev, const int32_t *t, int n) {
    int bi = s->n_pos / c->kv->block_tokens;
    if (is_cached(c, s->blocks[bi])) return 0; /* attached, never written */
    for (int o = 0; o < c->kv->n_blocks; o++) {
        brec *r = &c->rec[o];
        if (r->n_tok == 0 || memcmp(r->prev.b, prev->b, 32) != 0) continue;
        const int32_t *ot = tokens_of(c, o);
        if (r->n_tok >= n && memcmp(ot, t, (size_t)n * sizeof(int32_t)) == 0) return 0; /* says it already */
        if (r->idle && r->n_tok < n && memcmp(ot, t, (size_t)r->n_tok * sizeof(int32_t)) == 0) {
            uncache(c, o); /* a shorter tail this one extends */
            kv_block_give_back(c->kv, o);
        }
    }
    live_add(c, s, bi, NULL, prev, t, n, 0);
    return 1;
}

const cache_hash *live_retain(live_cache *c, int b, double ttl_s) {
    brec *r = &c->rec[b];
    if (!is_cached(c, b)) return NULL;
    double until = clock_ms() + ttl_s * 1000.0;
    if (until > r->keep_until) r->keep_until = until;
    return r->entry >= 0 ? &c->map[r->entry].h : NULL;
}

void live_get_stats(const live_cache *c, live_stats *out) { *out = c->st; }
