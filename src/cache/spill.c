/* spill.c - queued copies down the tiers from a device pool (see spill.h).
 * A ring of SPILLQ_SLOTS slots, each a pinned staging buffer of one block
 * payload (allocated on first use), the block's name and tokens, and the
 * event that ends its download. Downloads go on the compute stream, so
 * they finish in queue order; the ring is drained from its head. */
#include "cache/spill.h"

#include <stdlib.h>
#include <string.h>

#include "base/mem.h"

typedef struct spill_slot {
    void *buf; /* pinned: block_bytes */
    devmem_event *ev;
    int kind; /* the caller's, for done */
    cache_hash h, prev;
    int32_t *tok;
    int n;
} spill_slot;

struct spill_queue {
    kv_pool *kv;
    const devmem *dev;
    spillq_done_fn done;
    void *ctx;
    spill_slot slots[SPILLQ_SLOTS];
    int head, count;
    spillq_stats st;
};

spill_queue *spillq_new(kv_pool *kv, spillq_done_fn done, void *ctx) {
    spill_queue *q = xcalloc(1, sizeof *q);
    q->kv = kv;
    q->dev = kv->dev;
    q->done = done;
    q->ctx = ctx;
    for (int i = 0; i < SPILLQ_SLOTS; i++) q->slots[i].tok = xmalloc((size_t)kv->block_tokens * sizeof(int32_t));
    return q;
}

void spillq_free(spill_queue *q) {
    if (!q) return;
    spillq_drain(q, 1);
    for (int i = 0; i < SPILLQ_SLOTS; i++) {
        if (q->slots[i].buf) devmem_host_free(q->dev, q->slots[i].buf);
        free(q->slots[i].tok);
    }
    free(q);
}

/* The head's copy: finished (1, handed to done), not yet (0; with wait
 * the host waits, so never 0), or failed (< 0, dropped). Either way but
 * 0 the slot is free again. */
static int finish_head(spill_queue *q, int wait) {
    spill_slot *s = &q->slots[q->head];
    int d = s->ev ? devmem_done(q->dev, s->ev, NULL) : 1;
    if (d == 0 && !wait) return 0;
    if (d == 0) {
        q->st.waits++;
        d = devmem_sync(q->dev, DEVMEM_COMPUTE, NULL) ? -1 : devmem_done(q->dev, s->ev, NULL);
    }
    if (d == 1) {
        q->done(q->ctx, s->kind, &s->h, &s->prev, s->tok, s->n, s->buf);
        q->st.done++;
    } else {
        q->st.errors++; /* the device failed the copy: the block is not written anywhere */
    }
    devmem_event_free(q->dev, s->ev);
    s->ev = NULL;
    q->head = (q->head + 1) % SPILLQ_SLOTS;
    q->count--;
    return d == 1 ? 1 : -1;
}

void spillq_drain(spill_queue *q, int wait) {
    while (q->count > 0 && finish_head(q, wait) != 0) {}
}

/* How far from the head the last copy named h (by_prev: filed after h)
 * is, or -1. */
static int find(const spill_queue *q, const cache_hash *h, int by_prev) {
    for (int k = q->count - 1; k >= 0; k--) {
        const spill_slot *s = &q->slots[(q->head + k) % SPILLQ_SLOTS];
        if (memcmp((by_prev ? &s->prev : &s->h)->b, h->b, sizeof h->b) == 0) return k;
    }
    return -1;
}

int spillq_has(const spill_queue *q, const cache_hash *h) { return find(q, h, 0) >= 0; }

/* Every copy up to k from the head, waited for and handed to done. */
static int wait_through(spill_queue *q, int k) {
    for (int j = 0; j <= k; j++) finish_head(q, 1);
    return k >= 0;
}

int spillq_wait_for(spill_queue *q, const cache_hash *h) { return wait_through(q, find(q, h, 0)); }

int spillq_wait_for_child(spill_queue *q, const cache_hash *prev) { return wait_through(q, find(q, prev, 1)); }

int spillq_push(spill_queue *q, int kind, int b, const cache_hash *h, const cache_hash *prev, const int32_t *tokens,
                int n, strata_err *err) {
    spillq_drain(q, 0);
    if (q->count == SPILLQ_SLOTS) finish_head(q, 1); /* every slot busy: the oldest first */
    int i = (q->head + q->count) % SPILLQ_SLOTS;
    spill_slot *s = &q->slots[i];
    if (!s->buf && !(s->buf = devmem_host_alloc(q->dev, q->kv->block_bytes, err))) return err ? err->code : STRATA_ENOMEM;
    int rc = kv_block_read_async(q->kv, b, s->buf, &s->ev, err);
    if (rc) return rc;
    s->kind = kind;
    s->h = *h;
    s->prev = *prev;
    s->n = n < q->kv->block_tokens ? n : q->kv->block_tokens;
    memcpy(s->tok, tokens, (size_t)s->n * sizeof(int32_t));
    q->count++;
    q->st.queued++;
    return 0;
}

int spillq_pending(const spill_queue *q) { return q->count; }

void spillq_get_stats(const spill_queue *q, spillq_stats *out) { *out = q->st; }
