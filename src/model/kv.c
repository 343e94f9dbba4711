/* kv.c - block allocation, refcounts and copy-on-write (see kv.h). */
#include "model/kv.h"

#include <stdlib.h>
#include <string.h>

#include "base/mem.h"

int kv_pool_init(kv_pool *p, int n_layer, int kv_dim, int block_tokens, int n_blocks,
                 strata_err *err) {
    memset(p, 0, sizeof *p);
    if (block_tokens <= 0 || n_blocks <= 0)
        return strata_errf(err, STRATA_EINVAL, "kv pool: %d blocks of %d tokens", n_blocks,
                           block_tokens);
    p->block_tokens = block_tokens;
    p->n_layer = n_layer;
    p->kv_dim = kv_dim;
    p->n_blocks = n_blocks;
    p->block_bytes = (size_t)n_layer * 2 * block_tokens * kv_dim * sizeof(uint16_t);
    p->mem = xaligned(p->block_bytes * (size_t)n_blocks);
    p->refcount = xcalloc((size_t)n_blocks, sizeof(int));
    p->free_list = xmalloc((size_t)n_blocks * sizeof(int));
    for (int i = 0; i < n_blocks; i++) p->free_list[i] = n_blocks - 1 - i;
    p->n_free = n_blocks;
    return 0;
}

void kv_pool_destroy(kv_pool *p) {
    free(p->mem);
    free(p->refcount);
    free(p->free_list);
    memset(p, 0, sizeof *p);
}

static void table_grow(kv_seq *s, int need);

static int block_alloc(kv_pool *p) {
    int b = -1;
    if (p->n_free > 0) b = p->free_list[--p->n_free];
    else if (p->keeper.reclaim) b = p->keeper.reclaim(p->keeper.ctx);
    if (b >= 0) p->refcount[b] = 1;
    return b;
}

static void block_unref(kv_pool *p, int b) {
    if (--p->refcount[b] > 0) return;
    if (p->keeper.keep && p->keeper.keep(p->keeper.ctx, b)) return;
    p->free_list[p->n_free++] = b;
}

void kv_block_give_back(kv_pool *p, int b) { p->free_list[p->n_free++] = b; }

void kv_seq_attach(kv_pool *p, kv_seq *s, int block) {
    table_grow(s, s->n_blocks + 1);
    s->blocks[s->n_blocks++] = block;
    p->refcount[block]++;
    s->n_pos = s->n_blocks * p->block_tokens;
}

void kv_seq_init(kv_seq *s) { memset(s, 0, sizeof *s); }

void kv_seq_release(kv_pool *p, kv_seq *s) {
    for (int i = 0; i < s->n_blocks; i++) block_unref(p, s->blocks[i]);
    free(s->blocks);
    free(s->rs);
    kv_seq_init(s);
}

static void table_grow(kv_seq *s, int need) {
    if (need <= s->n_alloc) return;
    int cap = s->n_alloc ? s->n_alloc : 8;
    while (cap < need) cap *= 2;
    s->blocks = xrealloc(s->blocks, (size_t)cap * sizeof(int));
    s->n_alloc = cap;
}

/* The block that positions from s->n_pos on will write into, if shared,
 * is replaced by a private copy. */
static int unshare_tail(kv_pool *p, kv_seq *s, strata_err *err) {
    int bi = s->n_pos / p->block_tokens;
    if (s->n_pos % p->block_tokens == 0 || bi >= s->n_blocks) return 0;
    int old = s->blocks[bi];
    int frozen = p->keeper.frozen && p->keeper.frozen(p->keeper.ctx, old);
    if (p->refcount[old] == 1 && !frozen) return 0;
    int nb = block_alloc(p);
    if (nb < 0) return strata_errf(err, STRATA_ERANGE, "kv pool full (%d blocks)", p->n_blocks);
    memcpy(p->mem + (size_t)nb * (p->block_bytes / 2), p->mem + (size_t)old * (p->block_bytes / 2),
           p->block_bytes);
    block_unref(p, old);
    s->blocks[bi] = nb;
    return 0;
}

int kv_seq_reserve(kv_pool *p, kv_seq *s, int n_pos_new, strata_err *err) {
    int need = (n_pos_new + p->block_tokens - 1) / p->block_tokens;
    int rc = unshare_tail(p, s, err);
    if (rc) return rc;
    table_grow(s, need);
    int had = s->n_blocks;
    while (s->n_blocks < need) {
        int b = block_alloc(p);
        if (b < 0) { /* undo: the sequence is as it was */
            while (s->n_blocks > had) block_unref(p, s->blocks[--s->n_blocks]);
            return strata_errf(err, STRATA_ERANGE, "kv pool full: need %d more blocks, all %d in use",
                               need - had, p->n_blocks);
        }
        s->blocks[s->n_blocks++] = b;
    }
    return 0;
}

void kv_seq_truncate(kv_pool *p, kv_seq *s, int n) {
    if (n > s->n_pos) return;
    int keep = (n + p->block_tokens - 1) / p->block_tokens;
    while (s->n_blocks > keep) block_unref(p, s->blocks[--s->n_blocks]);
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
