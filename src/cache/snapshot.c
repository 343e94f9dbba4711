/* snapshot.c - the store's index of recurrent-state snapshots (see
 * snapshot.h): lookups by key and by boundary, the memory budget, LRU
 * eviction with retained entries last.
 *
 * Entries are few (a snapshot per message boundary, prompt end and every
 * N blocks of the prompts still cached, each MiBs at real sizes), so the
 * index is a plain array of pointers searched linearly: at 1,000 entries
 * a lookup is a few microseconds, far below the cost of one state copy.
 * Entries are allocated one by one so a pointer stays valid until that
 * entry goes. */
#include "cache/snapshot.h"

#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/mem.h"

struct snap_table {
    snap_entry **e;
    int n, cap;
    size_t budget;
    snap_stats st;
};

static double now_s(void) { return clock_ms() / 1000.0; }

snap_table *snap_new(size_t budget_bytes) {
    snap_table *t = xcalloc(1, sizeof *t);
    t->budget = budget_bytes;
    return t;
}

static void entry_free(snap_entry *e) {
    if (!e) return;
    free(e->data);
    free(e);
}

void snap_free(snap_table *t) {
    if (!t) return;
    for (int i = 0; i < t->n; i++) entry_free(t->e[i]);
    free(t->e);
    free(t);
}

snap_entry *snap_find(snap_table *t, const cache_hash *key) {
    for (int i = 0; i < t->n; i++)
        if (memcmp(t->e[i]->key.b, key->b, 32) == 0) return t->e[i];
    return NULL;
}

int snap_under(snap_table *t, const cache_hash *boundary, snap_entry **out, int cap) {
    int n = 0;
    for (int i = 0; i < t->n && n < cap; i++)
        if (memcmp(t->e[i]->boundary.b, boundary->b, 32) == 0) out[n++] = t->e[i];
    return n;
}

snap_entry *snap_add(snap_table *t, const cache_hash *key, const cache_hash *boundary, int r, int pos) {
    snap_entry *e = snap_find(t, key);
    if (e) return e;
    XGROW(t->e, t->cap, t->n + 1, 16);
    e = xcalloc(1, sizeof *e);
    e->key = *key;
    e->boundary = *boundary;
    e->r = r;
    e->pos = pos;
    e->last_use = now_s();
    t->e[t->n++] = e;
    t->st.entries = t->n;
    return e;
}

static void remove_at(snap_table *t, int i) {
    entry_free(t->e[i]);
    t->e[i] = t->e[--t->n];
    t->st.entries = t->n;
}

void snap_drop_data(snap_table *t, snap_entry *e) {
    if (e->data) {
        t->st.bytes -= e->n_floats * sizeof(float);
        free(e->data);
        e->data = NULL;
    }
    if (e->tiers) return;
    for (int i = 0; i < t->n; i++)
        if (t->e[i] == e) {
            remove_at(t, i);
            return;
        }
}

/* The memory copy to drop first: unretained before retained, then least
 * recently used; never `keep`. -1 when none. */
static int victim(const snap_table *t, const snap_entry *keep) {
    int best = -1;
    double now = now_s();
    for (int i = 0; i < t->n; i++) {
        const snap_entry *e = t->e[i];
        if (e == keep || !e->data) continue;
        if (best < 0) {
            best = i;
            continue;
        }
        const snap_entry *b = t->e[best];
        int er = e->keep_until > now, br = b->keep_until > now;
        if (er != br ? !er : e->last_use < b->last_use) best = i;
    }
    return best;
}

int snap_set_data(snap_table *t, snap_entry *e, const float *data, size_t n) {
    size_t bytes = n * sizeof(float);
    if (t->budget && bytes > t->budget) return -1;
    if (!e->data || e->n_floats != n) {
        if (e->data) t->st.bytes -= e->n_floats * sizeof(float);
        free(e->data);
        e->data = xmalloc(bytes);
        e->n_floats = n;
        t->st.bytes += bytes;
    }
    memcpy(e->data, data, bytes);
    e->last_use = now_s();
    t->st.stored++;
    while (t->budget && t->st.bytes > t->budget) {
        int v = victim(t, e);
        if (v < 0) break;
        t->st.evicted++;
        snap_drop_data(t, t->e[v]);
    }
    return 0;
}

void snap_touch(snap_table *t, snap_entry *e, double keep_s) {
    (void)t;
    double now = now_s();
    e->last_use = now;
    if (keep_s > 0 && now + keep_s > e->keep_until) e->keep_until = now + keep_s;
}

void snap_count_restore(snap_table *t) { t->st.restored++; }

void snap_get_stats(const snap_table *t, snap_stats *out) { *out = t->st; }
