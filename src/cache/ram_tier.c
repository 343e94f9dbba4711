/* ram_tier.c - the RAM tier (ram_tier.h): fixed block slots in one host
 * allocation, a chained hash index over them, scored eviction that moves
 * a block down before dropping it.
 *
 * The index chains slots by the first bytes of their hash (SHA-256 output
 * is uniform), one bucket per slot: lookups are a step or two. Eviction
 * scans the slots (one pass, when the tier is full and a block comes in:
 * microseconds next to the download that brought it). */
#include "cache/ram_tier.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/mem.h"
#include "cache/policy.h"

typedef struct rslot {
    cache_hash h, parent;
    int n_tok;        /* 0: free */
    int next;         /* next slot in its bucket, or -1 */
    int n_children;   /* held blocks continuing this one */
    double last_use, hits, keep_until; /* ms (clock_ms), decayed count, ms */
} rslot;

struct ram_tier {
    ram_tier_opts o;
    pthread_mutex_t mu;
    uint8_t *mem;     /* n_slots * block_bytes */
    int32_t *tok;     /* n_slots * block_tokens */
    rslot *slots;
    int *bucket;      /* n_slots heads, -1 empty */
    int n_slots;
    int *free_list, n_free;
    ram_tier_stats st;
};

/* ---- index ------------------------------------------------------------------ */

static int bucket_of(const ram_tier *r, const cache_hash *h) {
    uint64_t k;
    memcpy(&k, h->b, 8);
    return (int)(k % (uint64_t)r->n_slots);
}

static int find(const ram_tier *r, const cache_hash *h) {
    for (int i = r->bucket[bucket_of(r, h)]; i >= 0; i = r->slots[i].next)
        if (memcmp(r->slots[i].h.b, h->b, 32) == 0) return i;
    return -1;
}

static void unlink_slot(ram_tier *r, int i) {
    int *at = &r->bucket[bucket_of(r, &r->slots[i].h)];
    while (*at != i) at = &r->slots[*at].next;
    *at = r->slots[i].next;
}

static uint8_t *payload(const ram_tier *r, int i) { return r->mem + (size_t)i * r->o.block_bytes; }
static int32_t *tokens_at(const ram_tier *r, int i) { return r->tok + (size_t)i * r->o.block_tokens; }

/* ---- eviction ---------------------------------------------------------------- */

static void note_use(rslot *s, int hit) {
    double now = clock_ms();
    s->hits = policy_decay(s->hits, (now - s->last_use) / 1000.0) + (hit ? 1.0 : 0.0);
    s->last_use = now;
}

/* The slot to give up: a leaf if there is one, lowest in the policy's
 * order (the tier knows no depth: a block's value counts its tokens, as
 * on disk). */
static int victim(const ram_tier *r) {
    double now = clock_ms(), best_k = 0;
    int best = -1, best_leaf = 0;
    for (int i = 0; i < r->n_slots; i++) {
        const rslot *s = &r->slots[i];
        if (s->n_tok == 0) continue;
        int leaf = s->n_children == 0;
        double v = policy_value(0, s->n_tok, r->o.attn_per_pos, s->hits, (now - s->last_use) / 1000.0);
        double k = policy_evict_key(v, s->keep_until / 1000.0, now / 1000.0);
        if (best >= 0 && (leaf < best_leaf || (leaf == best_leaf && k >= best_k))) continue;
        best = i, best_k = k, best_leaf = leaf;
    }
    return best;
}

static void release_slot(ram_tier *r, int i) {
    rslot *s = &r->slots[i];
    unlink_slot(r, i);
    int p = find(r, &s->parent);
    if (p >= 0) r->slots[p].n_children--;
    s->n_tok = 0;
    r->free_list[r->n_free++] = i;
    r->st.blocks--;
}

/* Evicts one block, written to the tier below first when that tier does
 * not hold it (the tier below copies the bytes before it returns). */
static void evict_one(ram_tier *r) {
    int i = victim(r);
    const rslot *s = &r->slots[i];
    const cache_tier *b = r->o.below;
    if (b && !b->has(b->self, &s->h)) {
        if (b->write(b->self, &s->h, &s->parent, tokens_at(r, i), s->n_tok, payload(r, i)) == 0) r->st.moved_down++;
        else r->st.lost++;
    } else if (!b) {
        r->st.lost++;
    }
    r->st.evicted++;
    release_slot(r, i);
}

/* ---- the tier interface ---------------------------------------------------------- */

static int has(void *self, const cache_hash *h) {
    ram_tier *r = self;
    pthread_mutex_lock(&r->mu);
    int i = find(r, h);
    pthread_mutex_unlock(&r->mu);
    return i >= 0;
}

static int best_child(void *self, const cache_hash *parent, const int32_t *tokens, int n, cache_hash *h,
                      int *n_tokens) {
    ram_tier *r = self;
    int best = 0;
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->n_slots; i++) {
        const rslot *s = &r->slots[i];
        if (s->n_tok == 0 || memcmp(s->parent.b, parent->b, 32) != 0) continue;
        int m = mem_common_prefix_i32(tokens_at(r, i), s->n_tok, tokens, n);
        if (m > best) best = m, *h = s->h, *n_tokens = s->n_tok;
    }
    pthread_mutex_unlock(&r->mu);
    return best;
}

static int read_many(void *self, const cache_hash *h, void *const *dst, int32_t *const *tokens_out, int n, int *rc) {
    ram_tier *r = self;
    int ok = 0, prefix = 1;
    pthread_mutex_lock(&r->mu);
    for (int k = 0; k < n; k++) {
        int i = find(r, &h[k]);
        rc[k] = i < 0 ? STRATA_EIO : 0; /* evicted since the store asked */
        if (rc[k]) {
            memset(dst[k], 0, r->o.block_bytes);
            prefix = 0;
            continue;
        }
        memcpy(dst[k], payload(r, i), r->o.block_bytes);
        memcpy(tokens_out[k], tokens_at(r, i), (size_t)r->slots[i].n_tok * sizeof(int32_t));
        note_use(&r->slots[i], 1);
        r->st.hits++;
        ok += prefix;
    }
    pthread_mutex_unlock(&r->mu);
    return ok;
}

/* Held blocks continuing h (written before it: a tail moved down from
 * the GPU pool may come after its children), so h is no leaf. */
static int children_held(const ram_tier *r, const cache_hash *h) {
    int n = 0;
    for (int i = 0; i < r->n_slots; i++)
        n += r->slots[i].n_tok > 0 && memcmp(r->slots[i].parent.b, h->b, 32) == 0;
    return n;
}

static int write(void *self, const cache_hash *h, const cache_hash *parent, const int32_t *tokens, int n_tokens,
                 const void *kv) {
    ram_tier *r = self;
    pthread_mutex_lock(&r->mu);
    if (find(r, h) >= 0) { /* stored once */
        pthread_mutex_unlock(&r->mu);
        return 0;
    }
    if (r->n_free == 0) evict_one(r);
    int i = r->free_list[--r->n_free], b = bucket_of(r, h), p = find(r, parent);
    rslot *s = &r->slots[i];
    *s = (rslot){.h = *h, .parent = *parent, .n_tok = n_tokens, .next = r->bucket[b], .last_use = clock_ms(),
                 .n_children = children_held(r, h)};
    r->bucket[b] = i;
    if (p >= 0) r->slots[p].n_children++;
    memcpy(payload(r, i), kv, r->o.block_bytes);
    memcpy(tokens_at(r, i), tokens, (size_t)n_tokens * sizeof(int32_t));
    r->st.writes++;
    r->st.blocks++;
    pthread_mutex_unlock(&r->mu);
    return 0;
}

/* Tails under parent that tokens[0..n) holds whole: the block just
 * written (here and below) says it all. */
static int drop_superseded(void *self, const cache_hash *parent, const int32_t *tokens, int n) {
    ram_tier *r = self;
    int dropped = 0;
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->n_slots; i++) {
        const rslot *s = &r->slots[i];
        if (s->n_tok == 0 || s->n_tok >= n || memcmp(s->parent.b, parent->b, 32) != 0) continue;
        if (memcmp(tokens_at(r, i), tokens, (size_t)s->n_tok * sizeof(int32_t)) != 0) continue;
        release_slot(r, i);
        dropped++;
    }
    pthread_mutex_unlock(&r->mu);
    return dropped;
}

static void touch(void *self, const cache_hash *h) {
    ram_tier *r = self;
    pthread_mutex_lock(&r->mu);
    int i = find(r, h);
    if (i >= 0) note_use(&r->slots[i], 1);
    pthread_mutex_unlock(&r->mu);
}

static void retain(void *self, const cache_hash *h, double ttl_s) {
    ram_tier *r = self;
    double until = clock_ms() + ttl_s * 1000.0;
    pthread_mutex_lock(&r->mu);
    int i = find(r, h);
    if (i >= 0 && until > r->slots[i].keep_until) r->slots[i].keep_until = until;
    pthread_mutex_unlock(&r->mu);
}

static double retained_s(void *self, const cache_hash *h) {
    ram_tier *r = self;
    pthread_mutex_lock(&r->mu);
    int i = find(r, h);
    double left = i >= 0 ? (r->slots[i].keep_until - clock_ms()) / 1000.0 : 0;
    pthread_mutex_unlock(&r->mu);
    return left > 0 ? left : 0;
}

/* ---- life cycle ------------------------------------------------------------------ */

int ram_tier_open(ram_tier **out, const ram_tier_opts *o, strata_err *err) {
    *out = NULL;
    size_t n = o->block_bytes ? o->budget_bytes / o->block_bytes : 0;
    if (n == 0 || n > (size_t)1 << 30)
        return strata_errf(err, STRATA_EINVAL, "RAM tier: %zu MiB holds %zu blocks of %.2f MiB (--cache-ram-mb)",
                           o->budget_bytes >> 20, n, o->block_bytes / 1048576.0);
    size_t bytes = n * o->block_bytes;
    strata_err e = {0};
    uint8_t *mem = o->dev ? devmem_host_alloc(o->dev, bytes, &e) : xaligned(bytes);
    if (!mem)
        return strata_errf(err, STRATA_ENOMEM, "RAM tier: %zu blocks (%.1f MiB) of pinned host memory from %s: %s", n,
                           bytes / 1048576.0, o->dev->name, e.msg);
    ram_tier *r = xcalloc(1, sizeof *r);
    r->o = *o;
    r->mem = mem;
    r->n_slots = (int)n;
    r->tok = xmalloc(n * (size_t)o->block_tokens * sizeof(int32_t));
    r->slots = xcalloc(n, sizeof(rslot));
    r->bucket = xmalloc(n * sizeof(int));
    r->free_list = xmalloc(n * sizeof(int));
    for (int i = 0; i < r->n_slots; i++) r->bucket[i] = -1, r->free_list[i] = r->n_slots - 1 - i;
    r->n_free = r->n_slots;
    r->st.slots = r->n_slots;
    pthread_mutex_init(&r->mu, NULL);
    *out = r;
    return 0;
}

void ram_tier_close(ram_tier *r) {
    if (!r) return;
    if (r->o.dev) devmem_host_free(r->o.dev, r->mem);
    else free(r->mem);
    free(r->tok), free(r->slots), free(r->bucket), free(r->free_list);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

cache_tier ram_tier_iface(ram_tier *r) {
    return (cache_tier){.name = "ram", .self = r, .has = has, .best_child = best_child, .read_many = read_many,
                        .write = write, .drop_superseded = drop_superseded, .touch = touch, .retain = retain,
                        .retained_s = retained_s};
}

void ram_tier_set_below(ram_tier *r, const cache_tier *below) {
    pthread_mutex_lock(&r->mu);
    r->o.below = below;
    pthread_mutex_unlock(&r->mu);
}

void ram_tier_get_stats(ram_tier *r, ram_tier_stats *out) {
    pthread_mutex_lock(&r->mu);
    *out = r->st;
    pthread_mutex_unlock(&r->mu);
}
