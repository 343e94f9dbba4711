/* store.c - the tier walk, background loads, publishing and the end of a
 * request (see store.h).
 *
 * A lookup goes block by block: a block the live index has is attached;
 * where it has none, the first lower tier holding that block gives a run
 * (every following block it holds and memory does not), read into blocks
 * reserved at the end of the sequence on a thread of its own. Where whole
 * blocks stop matching, the best partial match (a tail, or a full block
 * matching in part) of any tier is read with the run if it beats memory's.
 * Only load_take touches the index and the pool again. */
#include "cache/store.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/mem.h"
#include "cache/spill.h"

struct cache_store {
    kv_pool *kv;
    live_cache *live;
    store_opts o;
    cache_tier tiers[STORE_MAX_TIERS];
    int n_tiers;
    policy_recent *recent; /* prompts of the last requests, for the auto scope */
    snap_table *snaps;     /* recurrent-state snapshots, or NULL (no recurrent layers) */
    float *snap_buf;       /* one state: read from a lower tier, or from a device pool */
    void *blk_buf;         /* one block's payload: gathered for a write, read for its sliding part */
    int32_t *blk_tok;      /* its tokens */
    spill_queue *spills;   /* a device pool's evicted blocks on their way down (or NULL) */
    store_stats st;
};

/* The live pool evicted the block (or tail) named h: the snapshot at its
 * end needs it, so its memory copy goes too (a lower tier's stays). */
static void snap_block_evicted(void *ctx, const cache_hash *h) {
    cache_store *st = ctx;
    snap_entry *e = snap_find(st->snaps, h);
    if (e) snap_drop_data(st->snaps, e);
}

cache_store *store_new(kv_pool *kv, const store_opts *o) {
    cache_store *st = xcalloc(1, sizeof *st);
    st->kv = kv;
    st->o = *o;
    st->live = live_new(kv, o->attn_per_pos);
    st->recent = policy_recent_new(POLICY_RECENT_MAX);
    st->blk_buf = xaligned(kv->block_bytes);
    st->blk_tok = xmalloc((size_t)kv->block_tokens * sizeof(int32_t));
    if (o->snap_floats) {
        live_on_evict(st->live, snap_block_evicted, st);
        st->snaps = snap_new(o->snap_budget_bytes);
        st->snap_buf = xmalloc(o->snap_floats * sizeof(float));
    }
    return st;
}

void store_free(cache_store *st) {
    if (!st) return;
    spillq_free(st->spills); /* waits for the queued copies down: the tiers are still open */
    live_free(st->live);
    policy_recent_free(st->recent);
    snap_free(st->snaps);
    free(st->snap_buf);
    free(st->blk_buf);
    free(st->blk_tok);
    free(st);
}

typedef struct snap_listing {
    cache_store *st;
    int tier;
} snap_listing;

/* A snapshot a tier holds joins the index; a mark it kept (a restart)
 * comes with it, as a block's does (carried_retention). */
static void snap_listed(void *ctx, const cache_hash *key, const cache_hash *boundary, int r) {
    snap_listing *l = ctx;
    snap_entry *e = snap_add(l->st->snaps, key, boundary, r, -1);
    const cache_tier *t = &l->st->tiers[l->tier];
    e->tiers |= 1u << l->tier;
    double left = t->snap_retained_s ? t->snap_retained_s(t->self, key) : 0;
    if (left > 0) snap_touch(l->st->snaps, e, left);
}

/* What a queued copy down is for (spill.h's kind). */
enum { COPY_SPILL, COPY_PUBLISH };

/* A copy of a block (or tail) to every lower tier; the tails there that
 * it holds whole go. */
static void write_all(cache_store *st, const cache_hash *h, const cache_hash *prev, const int32_t *t, int n,
                      const void *kv) {
    for (int k = 0; k < st->n_tiers; k++) {
        const cache_tier *tr = &st->tiers[k];
        if (tr->write(tr->self, h, prev, t, n, kv) == 0) tr->drop_superseded(tr->self, prev, t, n);
    }
}

/* A block's bytes, downloaded from the device pool: a published block's to
 * every tier (as write_through would have written them), a spilled one's
 * to the first tier below. */
static void copy_done(void *ctx, int kind, const cache_hash *h, const cache_hash *prev, const int32_t *tokens, int n,
                      const void *kv) {
    cache_store *st = ctx;
    if (kind == COPY_PUBLISH) {
        write_all(st, h, prev, tokens, n, kv);
        st->st.publish_written++;
        return;
    }
    const cache_tier *t = &st->tiers[0];
    if (t->write(t->self, h, prev, tokens, n, kv) == 0) st->st.spilled_blocks++;
}

/* The same, downloaded and waited for here: the queue refused the copy
 * (no pinned memory, a device error). What it holds goes first, so the
 * tiers still get the writes in the order asked (kv_block_read waits for
 * the compute stream anyway). */
static void copy_now(cache_store *st, int kind, int b, const cache_hash *h, const cache_hash *prev,
                     const int32_t *tokens, int n) {
    if (st->spills) spillq_drain(st->spills, 1);
    const void *kv = kv_block_read(st->kv, b, st->blk_buf);
    if (kv) copy_done(st, kind, h, prev, tokens, n, kv); /* else (never while its sequence holds it) no sliding part */
}

/* A device pool's block or tail about to be evicted (live.h): it moves
 * down to the first tier below (the RAM tier) unless that tier holds it
 * already or will (written through when published, unless evicted since;
 * a publish's copy may still be queued). The download is queued and the
 * pool reuses the block at once (spill.h); only if it cannot be queued
 * does the host wait for it here. */
static void spill(void *ctx, int b, const cache_hash *h, const cache_hash *prev, const int32_t *tokens, int n) {
    cache_store *st = ctx;
    const cache_tier *t = &st->tiers[0];
    if (t->has(t->self, h) || spillq_has(st->spills, h)) return;
    if (spillq_push(st->spills, COPY_SPILL, b, h, prev, tokens, n, NULL))
        copy_now(st, COPY_SPILL, b, h, prev, tokens, n);
}

/* Copies down that have finished are written (the host does not wait). */
static void spill_poll(cache_store *st) {
    if (st->spills) spillq_drain(st->spills, 0);
}

/* The tiers are about to be asked about h: a queued copy of it is waited
 * for and written first, so they answer as if it had been written when
 * it was asked for. */
static void settle(cache_store *st, const cache_hash *h) {
    if (st->spills) spillq_wait_for(st->spills, h);
}

void store_flush_spills(cache_store *st) {
    if (st->spills) spillq_drain(st->spills, 1);
}

void store_add_tier(cache_store *st, const cache_tier *t) {
    if (st->n_tiers >= STORE_MAX_TIERS) return;
    st->tiers[st->n_tiers++] = *t;
    if (st->n_tiers == 1 && st->kv->dev) {
        st->spills = spillq_new(st->kv, copy_done, st);
        live_on_spill(st->live, spill, st);
    }
    snap_listing l = {st, st->n_tiers - 1};
    if (st->snaps && t->snap_list) t->snap_list(t->self, snap_listed, &l); /* what survived a restart */
}

void store_root(const cache_store *st, const char *tenant, const char *salt, cache_hash *root) {
    cache_hash_root_for(root, st->o.model_fp, tenant, salt);
}

void store_get_stats(const cache_store *st, store_stats *out) {
    *out = st->st;
    if (st->spills) {
        spillq_stats ss;
        spillq_get_stats(st->spills, &ss);
        out->spill_pending = spillq_pending(st->spills);
        out->spill_waits = ss.waits;
        out->spill_errors = ss.errors;
    }
    live_get_stats(st->live, &out->live);
    if (st->snaps) snap_get_stats(st->snaps, &out->snap);
}

/* ---- the key chain ------------------------------------------------------------ */

void store_seq_init(const cache_store *st, store_seq *q, const store_request *rq) {
    memset(q, 0, sizeof *q);
    q->rq = rq;
    q->part_block = -1;
    q->snap_restored = q->snap_restored_tier = -1;
    /* The auto scope needs the prompt: decided once attached (nothing is
     * published before). */
    const cache_scope *sc = rq->scope.kind == SCOPE_DEFAULT ? &st->o.default_scope : &rq->scope;
    if (sc->kind != SCOPE_AUTO) q->publish_limit = policy_publish_limit(NULL, sc, sc, NULL, 0, NULL, 0);
}

/* The chain hash before block i. */
static const cache_hash *chain_prev(const store_seq *q, int i) { return i ? &q->chain[i - 1] : &q->rq->root; }

/* The hash of block i of tokens: computed once per request, blocks in order. */
static const cache_hash *chain_at(cache_store *st, store_seq *q, const int32_t *tokens, int i) {
    int B = st->kv->block_tokens;
    while (q->n_chain <= i) {
        XGROW(q->chain, q->cap_chain, q->n_chain + 1, 64);
        cache_hash_block(&q->chain[q->n_chain], chain_prev(q, q->n_chain), tokens + (size_t)q->n_chain * B, B);
        q->n_chain++;
        q->n_hashes++;
        st->st.hashes++;
    }
    return &q->chain[i];
}

/* ---- background loads ------------------------------------------------------------ */

/* A partial match in a lower tier, where the chain of whole blocks ends:
 * len tokens of block h (n_tok tokens: a tail, or a full block matching
 * in part), held by tier `tier`. */
typedef struct part_match {
    cache_hash h;
    int n_tok, len, tier;
} part_match;

/* A run of n blocks from tier `tier` (and perhaps one partial match)
 * being read into blocks reserved at the end of a sequence. */
struct store_load {
    pthread_t th;
    int threaded;
    atomic_int done;
    const cache_tier *tiers;
    int n_tiers, tier;
    cache_hash prev, *hs; /* chain hash before the run; the run's hashes (then the part's) */
    int n, first, ok;     /* full blocks; index of the first in the sequence; loaded prefix */
    part_match part;      /* len 0: none */
    int *from;            /* tier each item was read from */
    kv_pool *kv;
    int *blocks;          /* pool block of each item */
    uint8_t *scratch;     /* group items' payloads when the pool is not contiguous, else NULL */
    int group;            /* items read at once */
    void **dst;
    int32_t **tok, *got, *want; /* read and expected token ids */
    int *rc;
};

static int load_items(const store_load *l) { return l->n + (l->part.len > 0); }

/* Items whose read failed come from the next tier that holds them. */
static void read_fallback(store_load *l, int i) {
    for (int k = l->from[i] + 1; k < l->n_tiers && l->rc[i]; k++) {
        const cache_tier *t = &l->tiers[k];
        if (!t->has(t->self, &l->hs[i])) continue;
        if (t->read_many(t->self, &l->hs[i], &l->dst[i], &l->tok[i], 1, &l->rc[i]) == 1) l->from[i] = k;
    }
}

/* Reads items [i0, i1): run items from the run's tier at once (the part
 * too when the same tier holds it), failed ones from the next tiers; a
 * payload read into scratch is then written into its block. */
static void read_group(store_load *l, int i0, int i1) {
    int together = l->part.len > 0 && l->part.tier == l->tier, run_end = l->n + together;
    for (int i = i0; l->scratch && i < i1; i++) l->dst[i] = l->scratch + (size_t)(i - i0) * l->kv->block_bytes;
    const cache_tier *t = &l->tiers[l->tier];
    int r1 = run_end < i1 ? run_end : i1;
    if (r1 > i0) t->read_many(t->self, &l->hs[i0], &l->dst[i0], &l->tok[i0], r1 - i0, &l->rc[i0]);
    if (l->part.len > 0 && !together && l->n >= i0 && l->n < i1) {
        const cache_tier *pt = &l->tiers[l->part.tier];
        pt->read_many(pt->self, &l->hs[l->n], &l->dst[l->n], &l->tok[l->n], 1, &l->rc[l->n]);
    }
    for (int i = i0; i < i1 && i < l->n; i++) read_fallback(l, i);
    if (!l->scratch) return;
    /* Uploads of the group queued together (a device pool's copy stream
     * runs them while the scheduler computes), then one wait: the scratch
     * is read again by the next group. A failed upload fails its item. */
    for (int i = i0; i < i1; i++)
        if (l->rc[i] == 0) l->rc[i] = kv_block_write_async(l->kv, l->blocks[i], l->dst[i], NULL);
    if (kv_pool_wait_writes(l->kv, NULL))
        for (int i = i0; i < i1; i++) l->rc[i] = l->rc[i] ? l->rc[i] : STRATA_EIO;
}

static void *load_main(void *arg) {
    store_load *l = arg;
    int items = load_items(l);
    for (int i0 = 0; i0 < items; i0 += l->group) read_group(l, i0, i0 + l->group < items ? i0 + l->group : items);
    for (l->ok = 0; l->ok < items && l->rc[l->ok] == 0; l->ok++) {}
    atomic_store(&l->done, 1);
    return NULL;
}

static void load_free(store_load *l) {
    free(l->hs), free(l->from), free(l->dst), free(l->tok), free(l->got), free(l->want), free(l->rc);
    free(l->blocks), free(l->scratch);
    free(l);
}

static void load_join(store_load *l) {
    if (l->threaded) pthread_join(l->th, NULL);
    l->threaded = 0;
}

/* Reserves n whole blocks and, with extra, the block of a part of len
 * tokens, at the end of s: the ones a query right after them reads on a
 * sliding layer get their sliding part (held by s), the others are
 * filled in their global part only. */
static int load_reserve(cache_store *st, kv_seq *s, int n, int extra, int len) {
    int B = st->kv->block_tokens, first = s->n_blocks, items = n + extra;
    int from = kv_swa_first_block(st->kv, s->n_pos + n * B + (extra ? len : 0));
    return kv_seq_reserve_load(st->kv, s, s->n_pos + items * B, first + items - (from > first ? from : first), NULL);
}

/* Blocks read at once when their payloads go through scratch memory. */
#define LOAD_GROUP 16

/* Where each item is read to: its block in place, or scratch memory
 * (LOAD_GROUP payloads, reused) written into the block after the read. */
static void load_targets(cache_store *st, store_load *l, const kv_seq *s, int items) {
    l->kv = st->kv;
    l->blocks = xmalloc((size_t)items * sizeof(int));
    l->group = items;
    for (int i = 0; i < items; i++) {
        l->blocks[i] = s->blocks[l->first + i];
        l->dst[i] = kv_block_view(st->kv, l->blocks[i]);
    }
    if (items > 0 && !l->dst[0]) {
        l->group = LOAD_GROUP;
        l->scratch = xaligned(st->kv->block_bytes * LOAD_GROUP);
    }
}

/* Reserves n blocks (and one for the part, if any) at the end of s, fewer
 * if the pool is short, and starts reading the run hs (and the part) into
 * them. NULL when not one block fits. */
static store_load *load_start(cache_store *st, int tier, const cache_hash *prev, const cache_hash *hs,
                              const int32_t *tokens, int n, const part_match *part, kv_seq *s) {
    int B = st->kv->block_tokens, extra = part->len > 0;
    while (n + extra > 0 && load_reserve(st, s, n, extra, part->len)) /* as much as the pool holds */
        if (extra) extra = 0;
        else n /= 2;
    if (n + extra == 0) return NULL;
    int items = n + extra;
    store_load *l = xcalloc(1, sizeof *l);
    l->tiers = st->tiers;
    l->n_tiers = st->n_tiers;
    l->tier = n > 0 ? tier : part->tier;
    l->prev = *prev;
    l->n = n;
    if (extra) l->part = *part;
    l->first = s->n_pos / B;
    l->hs = xmalloc((size_t)items * sizeof *l->hs);
    if (n > 0) memcpy(l->hs, hs, (size_t)n * sizeof *l->hs); /* hs is NULL with no whole block */
    if (extra) l->hs[n] = part->h;
    l->want = xmalloc(((size_t)n * B + (size_t)l->part.len) * sizeof(int32_t) + 1);
    memcpy(l->want, tokens, ((size_t)n * B + (size_t)l->part.len) * sizeof(int32_t));
    l->from = xmalloc((size_t)items * sizeof(int));
    l->dst = xmalloc((size_t)items * sizeof *l->dst);
    l->tok = xmalloc((size_t)items * sizeof *l->tok);
    l->got = xmalloc((size_t)items * B * sizeof(int32_t));
    l->rc = xmalloc((size_t)items * sizeof(int));
    for (int i = 0; i < items; i++) {
        l->from[i] = i < n ? l->tier : part->tier;
        l->tok[i] = l->got + (size_t)i * B;
    }
    load_targets(st, l, s, items);
    l->threaded = pthread_create(&l->th, NULL, load_main, l) == 0;
    if (!l->threaded) load_main(l);
    return l;
}

/* Seconds of retention the tier that served h remembers for it (anchors
 * and cache_control marks outlive a restart). */
static double carried_retention(const cache_tier *t, const cache_hash *h) { return t->retained_s(t->self, h); }

/* The loaded partial block, at the end of s's full blocks, joins the
 * cache (indexed if full, a tail if not) when its tokens are the ones
 * asked for and hash to its name; the caller's truncation then leaves it
 * idle for attach_partial to find. Returns the block, or -1. */
static int promote_part(cache_store *st, store_load *l, kv_seq *s, const cache_hash *prev) {
    int B = st->kv->block_tokens, bi = l->first + l->n;
    const int32_t *got = l->tok[l->n];
    cache_hash h; /* a check of what was read, not a key of the request */
    cache_hash_block(&h, prev, got, l->part.n_tok);
    if (memcmp(h.b, l->part.h.b, 32) != 0 || memcmp(got, l->want + (size_t)l->n * B, (size_t)l->part.len * 4) != 0) {
        st->st.load_errors++;
        return -1;
    }
    double keep = carried_retention(&st->tiers[l->from[l->n]], &h);
    if (live_add(st->live, s, bi, l->part.n_tok < B ? NULL : &h, prev, got, l->part.n_tok, keep)) return -1;
    return s->blocks[bi];
}

/* Waits for q's read; keeps the loaded prefix whose tokens match ours (a
 * check on top of the hash), indexes it, promotes the partial block if
 * the whole run came in, gives the other reserved blocks back. Returns
 * the blocks appended to s. */
static int load_take(cache_store *st, store_seq *q, kv_seq *s) {
    store_load *l = q->load;
    int B = st->kv->block_tokens, ok;
    load_join(l);
    ok = l->ok < l->n ? l->ok : l->n;
    for (int i = 0; i < ok; i++)
        if (memcmp(l->tok[i], l->want + (size_t)i * B, (size_t)B * sizeof(int32_t)) != 0) ok = i;
    st->st.load_errors += l->ok < load_items(l) || ok < l->n;
    for (int i = 0; i < ok; i++, s->n_pos += B) {
        double keep = carried_retention(&st->tiers[l->from[i]], &l->hs[i]);
        live_add(st->live, s, l->first + i, &l->hs[i], i ? &l->hs[i - 1] : &l->prev, l->want + (size_t)i * B, B, keep);
    }
    q->n_blocks += ok;
    q->n_cached_lower += ok * B;
    for (int i = 0; i < ok; i++) q->n_cached_tier[l->from[i]] += B;
    q->part_block = ok == l->n && l->ok > l->n ? promote_part(st, l, s, ok ? &l->hs[ok - 1] : &l->prev) : -1;
    q->part_tier = l->from[l->n < load_items(l) ? l->n : 0];
    kv_seq_truncate(st->kv, s, s->n_pos); /* gives unused reserved blocks back; a promoted one stays cached */
    load_free(l);
    q->load = NULL;
    return ok;
}

/* ---- the walk ---------------------------------------------------------------------- */

/* The first lower tier holding h, or -1. */
static int tier_with(cache_store *st, const cache_hash *h) {
    settle(st, h); /* on its way down from the GPU pool: worth the wait (a hit, not a recompute) */
    for (int k = 0; k < st->n_tiers; k++)
        if (st->tiers[k].has(st->tiers[k].self, h)) return k;
    return -1;
}

/* How many blocks from block `at` on (below max_blocks) tier k holds and
 * the live index does not; a tier that answers runs is asked once. */
static int run_length(cache_store *st, store_seq *q, const int32_t *tokens, int k, int at, int max_blocks) {
    const cache_tier *t = &st->tiers[k];
    int n = 0;
    if (t->has_run) {
        while (at + n < max_blocks && live_find(st->live, chain_at(st, q, tokens, at + n)) < 0) n++;
        return n ? t->has_run(t->self, &q->chain[at], n) : 0;
    }
    while (at + n < max_blocks) {
        const cache_hash *h = chain_at(st, q, tokens, at + n);
        if (live_find(st->live, h) >= 0 || !t->has(t->self, h)) break;
        n++;
    }
    return n;
}

/* Where the chain of whole blocks ends at block `at`, the best partial
 * match of the lower tiers if it beats every one in memory; part->len 0
 * when there is none or the chain goes on in memory. */
static void find_part(cache_store *st, store_seq *q, const int32_t *tokens, int at, int n_max, part_match *part) {
    int B = st->kv->block_tokens, off = at * B, live_len;
    part->len = 0;
    if (st->n_tiers == 0 || off >= n_max) return;
    if (off + B <= n_max && live_find(st->live, chain_at(st, q, tokens, at)) >= 0) return;
    const cache_hash *prev = chain_prev(q, at);
    if (st->spills) spillq_wait_for_child(st->spills, prev); /* a tail on its way down is a candidate */
    for (int k = 0; k < st->n_tiers; k++) {
        part_match m = {.tier = k};
        m.len = st->tiers[k].best_child(st->tiers[k].self, prev, tokens + off, n_max - off, &m.h, &m.n_tok);
        if (m.len > part->len) *part = m;
    }
    live_best_partial(st->live, prev, tokens + off, n_max - off, &live_len);
    if (part->len <= live_len) part->len = 0;
}

/* The read of what the lower tiers hold from block q->n_blocks on: a run
 * from the first tier holding the next block, and the partial match
 * after it. NULL when they hold nothing there (or the pool is full). */
static store_load *plan_load(cache_store *st, store_seq *q, const int32_t *tokens, int n_max, kv_seq *s) {
    int B = st->kv->block_tokens, at = q->n_blocks, max_blocks = n_max / B, n = 0, k = -1;
    if (st->n_tiers == 0) return NULL;
    if (at < max_blocks && (k = tier_with(st, chain_at(st, q, tokens, at))) >= 0)
        n = run_length(st, q, tokens, k, at, max_blocks);
    part_match part = {0};
    /* A partial match only where no tier goes on with a whole block (else
     * the next run takes it from there). */
    if (at + n >= max_blocks || tier_with(st, chain_at(st, q, tokens, at + n)) < 0)
        find_part(st, q, tokens, at + n, n_max, &part);
    if (n == 0 && part.len == 0) return NULL;
    const cache_hash *run = n ? &q->chain[at] : NULL;
    return load_start(st, k, chain_prev(q, at), run, tokens + (size_t)at * B, n, &part, s);
}

/* A live block serves block q->n_blocks: attached, and the tiers below
 * hear of the hit. */
static void attach_live(cache_store *st, store_seq *q, int b, kv_seq *s) {
    const cache_hash *h = &q->chain[q->n_blocks];
    live_attach(st->live, b, s);
    settle(st, h); /* a touch before the write would be lost */
    for (int k = 0; k < st->n_tiers; k++) st->tiers[k].touch(st->tiers[k].self, h);
    q->n_blocks++;
}

/* Attaches whole blocks from the cursor on: live ones, and runs read from
 * the lower tiers (waited for, or with async, started and left running:
 * then it stops there). */
static void attach_blocks(cache_store *st, store_seq *q, const int32_t *tokens, int n_max, kv_seq *s, int async) {
    int B = st->kv->block_tokens, max_blocks = n_max / B;
    while (q->n_blocks <= max_blocks) {
        if (q->n_blocks < max_blocks) {
            int b = live_find(st->live, chain_at(st, q, tokens, q->n_blocks));
            if (b >= 0) {
                attach_live(st, q, b, s);
                continue;
            }
        }
        if (!(q->load = plan_load(st, q, tokens, n_max, s)) || async) break;
        int want = q->load->n, had_part = q->load->part.len > 0, got = load_take(st, q, s);
        if (got < want || had_part || got == 0) break;
    }
}

/* The cache counts follow a cut from q->n_cached back to P: tokens leave
 * the lower tiers' counts last-added first, then memory's. */
static void uncount_cut(cache_store *st, store_seq *q, int P) {
    int cut = q->n_cached - P;
    for (int k = st->n_tiers - 1; k >= 0 && cut > 0 && q->n_cached_lower > P; k--) {
        int d = q->n_cached_tier[k] < cut ? q->n_cached_tier[k] : cut;
        if (d > q->n_cached_lower - P) d = q->n_cached_lower - P;
        q->n_cached_tier[k] -= d, q->n_cached_lower -= d, cut -= d;
        st->st.tier_hit_tokens[k] -= d, st->st.lower_hit_tokens -= d;
    }
    st->st.hit_tokens -= cut;
    q->n_cached = P;
    /* The blocks from the cut on are computed again: the cursor goes back,
     * so they are published as they fill (a copy in memory lacking its
     * sliding part takes theirs; a tier missing one gets it). */
    int nb = P / st->kv->block_tokens;
    if (q->n_blocks > nb) q->n_blocks = nb;
    if (q->n_attached_blocks > nb) q->n_attached_blocks = nb;
}

/* ---- the sliding window of a hit ------------------------------------------------- */

/* Block b (cached) gets its sliding part back from the first tier that
 * holds it under b's name with b's tokens. 0 when it did. */
static int window_fetch(cache_store *st, store_seq *q, int b) {
    cache_hash h;
    const int32_t *want;
    int n = live_name(st->live, b, &h, &want);
    if (n > 0) settle(st, &h);
    for (int k = 0; n > 0 && k < st->n_tiers; k++) {
        const cache_tier *t = &st->tiers[k];
        void *dst = st->blk_buf;
        int32_t *tok = st->blk_tok;
        int rc = 0;
        if (!t->has(t->self, &h)) continue;
        if (t->read_many(t->self, &h, &dst, &tok, 1, &rc) != 1 || rc ||
            memcmp(tok, want, (size_t)n * sizeof(int32_t)) != 0) {
            st->st.load_errors++;
            continue;
        }
        if (kv_block_import_swa(st->kv, b, st->blk_buf, NULL)) return -1; /* every slot held */
        q->n_window_reloaded++;
        st->st.window_reloaded_blocks++;
        return 0;
    }
    return -1;
}

typedef struct pins {
    int *b, n, cap;
} pins;

static void pin(kv_pool *kv, pins *p, int b) {
    XGROW(p->b, p->cap, p->n + 1, 16);
    kv_block_pin(kv, p->b[p->n++] = b);
}

/* A hit continues right after its last token only where every sliding
 * part that token's window reads is in memory: a missing one is read
 * back from a tier below; where none has it, s is cut back to that
 * block's start (and again, until the window is whole). The parts found
 * are pinned while others are read, so reading one never drops another;
 * at the end s holds its window. Returns s->n_pos. */
static int window_restore(cache_store *st, store_seq *q, kv_seq *s) {
    pins p = {0};
    for (int i = kv_swa_first_block(st->kv, s->n_pos); i < s->n_blocks; i++)
        if (kv_block_has_swa(st->kv, s->blocks[i])) pin(st->kv, &p, s->blocks[i]);
    for (int m; (m = kv_seq_window_missing(st->kv, s)) >= 0;) {
        if (window_fetch(st, q, s->blocks[m]) == 0) pin(st->kv, &p, s->blocks[m]);
        else kv_seq_truncate(st->kv, s, m * st->kv->block_tokens);
    }
    kv_seq_hold_window(st->kv, s, NULL); /* cannot fail: nothing is missing */
    for (int i = 0; i < p.n; i++) kv_block_unpin(st->kv, p.b[i]);
    free(p.b);
    if (s->n_pos < q->n_cached) {
        q->n_window_cut += q->n_cached - s->n_pos;
        st->st.window_cut_tokens += q->n_cached - s->n_pos;
        uncount_cut(st, q, s->n_pos);
    }
    return s->n_pos;
}

/* After the whole blocks: the longest partial match, shared (the
 * sequence's first write copies it); then the lookup is done: counts,
 * the sliding window made whole (or the hit cut back), and the scope
 * now that the prompt is known. */
static int attach_partial(cache_store *st, store_seq *q, const int32_t *tokens, int n_tokens, int n_max, kv_seq *s) {
    int got = s->n_pos, tail = 0;
    const cache_hash *prev = chain_prev(q, q->n_blocks);
    int tb = got < n_max ? live_best_partial(st->live, prev, tokens + got, n_max - got, &tail) : -1;
    if (tb >= 0) {
        live_attach_part(st->live, tb, s, tail);
        if (tb == q->part_block) q->n_cached_lower += tail, q->n_cached_tier[q->part_tier] += tail;
        else st->st.tail_hit_tokens += tail;
    }
    q->n_cached = s->n_pos;
    q->n_attached_blocks = q->n_blocks;
    q->load_ms = clock_ms() - q->t_begin;
    st->st.hit_tokens += q->n_cached - q->n_cached_lower;
    st->st.lower_hit_tokens += q->n_cached_lower;
    for (int k = 0; k < st->n_tiers; k++) st->st.tier_hit_tokens[k] += q->n_cached_tier[k];
    window_restore(st, q, s);
    const store_request *rq = q->rq;
    q->publish_limit =
        policy_publish_limit(st->recent, &rq->scope, &st->o.default_scope, tokens, n_tokens, rq->bounds, rq->n_bounds);
    return s->n_pos;
}

int store_attach_begin(cache_store *st, store_seq *q, const int32_t *tokens, int n_tokens, int n_max, kv_seq *s) {
    q->t_begin = clock_ms();
    spill_poll(st);
    st->st.lookups++;
    attach_blocks(st, q, tokens, n_max, s, 1);
    return q->load ? s->n_pos : attach_partial(st, q, tokens, n_tokens, n_max, s);
}

int store_loading(const store_seq *q) { return q->load != NULL; }

int store_load_ready(const store_seq *q) { return q->load && atomic_load(&q->load->done); }

int store_attach_end(cache_store *st, store_seq *q, const int32_t *tokens, int n_tokens, int n_max, kv_seq *s) {
    int want = q->load->n, had_part = q->load->part.len > 0;
    int n = load_take(st, q, s);
    if (n == want && !had_part) attach_blocks(st, q, tokens, n_max, s, 0); /* what follows */
    return attach_partial(st, q, tokens, n_tokens, n_max, s);
}

int store_attach(cache_store *st, store_seq *q, const int32_t *tokens, int n_tokens, int n_max, kv_seq *s) {
    q->t_begin = clock_ms();
    spill_poll(st);
    st->st.lookups++;
    attach_blocks(st, q, tokens, n_max, s, 0);
    return attach_partial(st, q, tokens, n_tokens, n_max, s);
}

/* ---- publishing and the end of a request ---------------------------------------------- */

/* Block (or tail) b, named h, copied to every lower tier (write_all). A
 * device pool's download is queued (spill.h) and the tiers get the bytes
 * when it finishes, in the order asked; the host waits for it here only
 * if it cannot be queued. A host pool's payload is read in place. */
static void write_through(cache_store *st, const cache_hash *h, const cache_hash *prev, const int32_t *t, int n,
                          int b) {
    if (!st->n_tiers) return;
    if (st->spills) {
        if (spillq_push(st->spills, COPY_PUBLISH, b, h, prev, t, n, NULL) == 0) st->st.publish_queued++;
        else copy_now(st, COPY_PUBLISH, b, h, prev, t, n);
        return;
    }
    const void *kv = kv_block_read(st->kv, b, st->blk_buf); /* a host pool: in place, or gathered */
    if (kv) write_all(st, h, prev, t, n, kv); /* else (never while its sequence holds it) the sliding part is gone */
}

void store_will_publish(const cache_store *st, const store_seq *q, int n_prompt, int n_cached, int *fresh,
                        int *fresh_1h) {
    int B = st->kv->block_tokens, from = q->n_blocks * B > n_cached ? q->n_blocks * B : n_cached;
    int to = (n_prompt < q->publish_limit ? n_prompt : q->publish_limit) / B * B, long_end = 0;
    for (int i = 0; i < q->rq->n_marks; i++)
        if (q->rq->marks[i].ttl_s >= POLICY_LONG_TTL_S && q->rq->marks[i].end > long_end) long_end = q->rq->marks[i].end;
    *fresh = to > from ? to - from : 0;
    int to_1h = long_end < to ? long_end : to;
    *fresh_1h = to_1h > from ? to_1h - from : 0;
}

/* Block b recomputes a block indexed under h whose sliding part is gone
 * (a hit was cut back there, no tier below holding it): the indexed copy
 * takes b's sliding part, so the next hit there is whole. */
static void window_refill(cache_store *st, const cache_hash *h, int b) {
    int o = live_find(st->live, h);
    if (o < 0 || o == b || kv_block_has_swa(st->kv, o)) return;
    const void *kv = kv_block_read(st->kv, b, st->blk_buf);
    if (kv && kv_block_import_swa(st->kv, o, kv, NULL) == 0) st->st.window_refilled_blocks++;
}

void store_publish(cache_store *st, store_seq *q, const int32_t *tokens, const kv_seq *s) {
    int B = st->kv->block_tokens, end = s->n_pos < q->publish_limit ? s->n_pos : q->publish_limit;
    spill_poll(st);
    while ((q->n_blocks + 1) * B <= end) {
        int i = q->n_blocks, b = s->blocks[i];
        const int32_t *bt = tokens + (size_t)i * B;
        const cache_hash *h = chain_at(st, q, tokens, i), *prev = chain_prev(q, i);
        if (live_add(st->live, s, i, h, prev, bt, B, 0) == 0) st->st.published_blocks++; /* never twice */
        else window_refill(st, h, b);
        write_through(st, h, prev, bt, B, b);
        q->n_blocks++;
    }
}

/* The partial last block stays as a tail (in memory and below) if every
 * full block before it was published. */
static void keep_tail(cache_store *st, store_seq *q, const int32_t *tokens, const kv_seq *s) {
    int B = st->kv->block_tokens, n = s->n_pos % B, bi = s->n_pos / B;
    if (n == 0 || q->n_blocks != bi || bi >= s->n_blocks) return;
    const cache_hash *prev = chain_prev(q, bi);
    const int32_t *t = tokens + (size_t)bi * B;
    if (!live_keep_tail(st->live, s, prev, t, n) || st->n_tiers == 0) return;
    cache_hash h;
    cache_hash_block(&h, prev, t, n);
    q->n_hashes++;
    st->st.hashes++;
    write_through(st, &h, prev, t, n, s->blocks[bi]);
}

void store_keep_tail(cache_store *st, store_seq *q, const int32_t *tokens, const kv_seq *s) {
    if (s->n_pos <= q->publish_limit) keep_tail(st, q, tokens, s);
}

/* The cached blocks of s that start before position end are kept at
 * least ttl_s from now, in every tier. */
static void retain(cache_store *st, const kv_seq *s, int end, double ttl_s) {
    int B = st->kv->block_tokens;
    for (int i = 0; i < s->n_blocks && i * B < end && i * B < s->n_pos; i++) {
        const cache_hash *h = live_retain(st->live, s->blocks[i], ttl_s);
        if (h) settle(st, h); /* a mark before the write would be lost */
        for (int k = 0; h && k < st->n_tiers; k++) st->tiers[k].retain(st->tiers[k].self, h, ttl_s);
    }
}

/* Snapshots this request stored, below a mark's end, are kept as long as
 * the mark's blocks: in memory and in every tier that takes marks on
 * snapshots (disk: kept in the usage file; Redis: the keys' expiry). */
static void retain_snaps(cache_store *st, const store_seq *q, int end, double ttl_s) {
    if (!st->snaps) return;
    int n = q->n_snap_stored < STORE_SNAP_MAX ? q->n_snap_stored : STORE_SNAP_MAX;
    for (int i = 0; i < n; i++) {
        snap_entry *e = q->snap_stored_at[i] <= end ? snap_find(st->snaps, &q->snap_keys[i]) : NULL;
        if (!e) continue;
        snap_touch(st->snaps, e, ttl_s);
        for (int k = 0; k < st->n_tiers; k++)
            if (st->tiers[k].snap_retain) st->tiers[k].snap_retain(st->tiers[k].self, &e->key, &e->boundary, ttl_s);
    }
}

void store_finish(cache_store *st, store_seq *q, const int32_t *tokens, const kv_seq *s, int keep) {
    spill_poll(st);
    if (q->load) { /* dropped while its prefix was read: wait before the blocks go */
        load_join(q->load);
        load_free(q->load);
        q->load = NULL;
        q->load_ms = clock_ms() - q->t_begin;
    }
    if (keep) store_keep_tail(st, q, tokens, s);
    for (int i = 0; i < q->rq->n_marks; i++) {
        retain(st, s, q->rq->marks[i].end, q->rq->marks[i].ttl_s);
        retain_snaps(st, q, q->rq->marks[i].end, q->rq->marks[i].ttl_s);
    }
    free(q->chain);
    q->chain = NULL;
    q->n_chain = q->cap_chain = 0;
}

/* ---- recurrent-state snapshots ------------------------------------------------------ */

int store_has_snapshots(const cache_store *st) { return st->snaps != NULL; }

int store_snap_next(const cache_store *st, const store_seq *q, int pos, int n_prompt) {
    if (!st->snaps) return -1;
    const store_request *rq = q->rq;
    return policy_snap_next(pos, n_prompt, q->publish_limit, st->o.snap_every_blocks, st->kv->block_tokens,
                            rq->bounds, rq->n_bounds, rq->marks, rq->n_marks, st->kv->block_tokens);
}

/* The name of position P (> 0) of tokens: its boundary (chain hash at
 * the last block start at or before P), r = P mod B, and the key (the
 * boundary when r is 0, else the hash of the r tokens after it). */
static void snap_name(cache_store *st, store_seq *q, const int32_t *tokens, int P, cache_hash *key,
                      cache_hash *boundary, int *r) {
    int B = st->kv->block_tokens, k = P / B;
    if (k) chain_at(st, q, tokens, k - 1);
    *boundary = *chain_prev(q, k);
    *r = P % B;
    if (*r == 0) {
        *key = *boundary;
        return;
    }
    cache_hash_block(key, boundary, tokens + (size_t)k * B, *r);
    q->n_hashes++;
    st->st.hashes++;
}

/* The state of e, in memory or read from the first lower tier holding it
 * (then kept in memory too); a tier whose copy fails to read loses its
 * bit. NULL when none could be had. *tier: where it came from (-1: memory). */
static const float *snap_fetch(cache_store *st, snap_entry *e, int *tier) {
    size_t n = st->o.snap_floats;
    *tier = -1;
    if (e->data) return e->n_floats == n ? e->data : NULL;
    for (int k = 0; k < st->n_tiers; k++) {
        const cache_tier *t = &st->tiers[k];
        if (!(e->tiers & (1u << k)) || !t->snap_read) continue;
        if (t->snap_read(t->self, &e->key, st->snap_buf, n) == 0) {
            *tier = k;
            return st->snap_buf;
        }
        e->tiers &= ~(1u << k);
        st->st.load_errors++;
    }
    return NULL;
}

/* The snapshots filed under boundary k (positions k*B + r <= n), longest
 * first, whose key matches tokens: the first whose state can be had. */
static int snap_try_boundary(cache_store *st, store_seq *q, const int32_t *tokens, int k, int n, const float **data,
                             int *tier) {
    int B = st->kv->block_tokens;
    snap_entry *c[64];
    int m = snap_under(st->snaps, chain_prev(q, k), c, 64);
    for (;;) {
        int best = -1;
        for (int i = 0; i < m; i++)
            if (c[i] && k * B + c[i]->r <= n && k * B + c[i]->r > 0 && (best < 0 || c[i]->r > c[best]->r)) best = i;
        if (best < 0) return -1;
        snap_entry *e = c[best];
        c[best] = NULL;
        cache_hash key, boundary;
        int r;
        snap_name(st, q, tokens, k * B + e->r, &key, &boundary, &r);
        if (memcmp(key.b, e->key.b, 32) != 0) continue;
        if (!(*data = snap_fetch(st, e, tier))) {
            if (!e->data && !e->tiers) snap_drop_data(st->snaps, e); /* held nowhere now: forgotten */
            continue;
        }
        snap_touch(st->snaps, e, 0);
        if (*tier >= 0) snap_set_data(st->snaps, e, *data, st->o.snap_floats); /* may free others: c[] is done */
        return k * B + r;
    }
}

/* Shared tiers are asked what other replicas stored under the prompt's
 * block boundaries (one round each), so the walk below sees them too. */
static void snap_probe_tiers(cache_store *st, store_seq *q, const int32_t *tokens, int n) {
    int B = st->kv->block_tokens, nb = n / B + 1;
    cache_hash *bs = NULL;
    for (int k = 0; k < st->n_tiers; k++) {
        const cache_tier *t = &st->tiers[k];
        if (!t->snap_probe) continue;
        if (!bs) {
            bs = xmalloc((size_t)nb * sizeof *bs);
            for (int i = 0; i < nb; i++) {
                if (i) chain_at(st, q, tokens, i - 1);
                bs[i] = *chain_prev(q, i);
            }
        }
        snap_listing l = {st, k};
        t->snap_probe(t->self, bs, nb, snap_listed, &l);
    }
    free(bs);
}

int store_snap_restore(cache_store *st, store_seq *q, const int32_t *tokens, kv_seq *s) {
    if (!st->snaps) return s->n_pos;
    int B = st->kv->block_tokens, n = s->n_pos, P = 0, tier = -1;
    snap_probe_tiers(st, q, tokens, n);
    const float *data = NULL;
    for (int k = n / B; k >= 0 && P <= 0; k--) P = snap_try_boundary(st, q, tokens, k, n, &data, &tier);
    if (P < 0) P = 0;
    strata_err err = {0};
    if (P > 0 && kv_seq_set_state(st->kv, s, data, st->o.snap_floats, P, &err)) {
        log_warn("cache: a recurrent-state snapshot at position %d not restored (prefilled again): %s", P, err.msg);
        P = 0;
    }
    kv_seq_truncate(st->kv, s, P);
    if (P > 0) snap_count_restore(st->snaps);
    uncount_cut(st, q, P);
    q->snap_restored = P;
    q->snap_restored_tier = P > 0 ? tier : -1;
    return P;
}

void store_snap_save(cache_store *st, store_seq *q, const int32_t *tokens, const kv_seq *s) {
    int P = s->rs_pos;
    if (!st->snaps || !s->rs || P <= 0 || P > s->n_pos || P > q->publish_limit || s->rs_floats != st->o.snap_floats)
        return;
    cache_hash key, boundary;
    int r;
    snap_name(st, q, tokens, P, &key, &boundary, &r);
    snap_entry *e = snap_add(st->snaps, &key, &boundary, r, P);
    const float *rs = s->rs;
    if (st->kv->dev) { /* a device pool's: the memory copy of this name, else downloaded (once) */
        strata_err err = {0};
        rs = e->data;
        if (!rs && kv_seq_state_read(st->kv, s, st->snap_buf, &err) == 0) rs = st->snap_buf;
        if (!rs) {
            log_warn("cache: a recurrent-state snapshot at position %d not kept: %s", P, err.msg);
            if (!e->tiers) snap_drop_data(st->snaps, e); /* held nowhere: not a snapshot */
            return;
        }
    }
    int in_memory = e->data || snap_set_data(st->snaps, e, rs, s->rs_floats) == 0; /* 0: over the whole budget */
    snap_touch(st->snaps, e, 0);
    for (int k = 0; k < st->n_tiers; k++) { /* never twice: a tier's bit says it holds it */
        const cache_tier *t = &st->tiers[k];
        if (!t->snap_write || (e->tiers & (1u << k))) continue;
        if (t->snap_write(t->self, &key, &boundary, tokens + (P - r), r, rs, s->rs_floats) == 0) e->tiers |= 1u << k;
    }
    if (!in_memory && !e->tiers) {
        snap_drop_data(st->snaps, e); /* held nowhere: not a snapshot */
        return;
    }
    if (q->n_snap_stored < STORE_SNAP_MAX) {
        q->snap_stored_at[q->n_snap_stored] = P;
        q->snap_keys[q->n_snap_stored] = key;
    }
    q->n_snap_stored++;
}
