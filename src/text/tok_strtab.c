/* tok_strtab.c - interned byte strings with dense ids and a hash index.
 *
 * The vocabulary is loaded into one of these so that token ids equal
 * string ids; BPE then interns merge parts and merge results that are not
 * tokens after them. Lookup is by exact bytes (embedded NULs allowed).
 * Also here: the small growable buffers every encode call uses.
 * Does not: delete strings (a table lives as long as its tokenizer). */
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "text/tok_internal.h"

/* 64-bit multiply-mix over 8-byte words; token texts are short, so this
 * stays a handful of cycles per lookup. */
static uint64_t hash_bytes(const char *p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xFF51AFD7ED558CCDull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xC2B2AE3D27D4EB4Full;
        h ^= h >> 29;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, n);
    h = (h ^ w) * 0x165667B19E3779F9ull;
    h ^= h >> 32;
    return h;
}

/* Slots are kept at most half full, so probe runs stay short. */
void strtab_init(tok_strtab *s, int32_t expect) {
    memset(s, 0, sizeof *s);
    uint32_t cap = 64;
    while (cap < (uint32_t)expect * 2u + 2u) cap <<= 1;
    s->slots = xmalloc(cap * sizeof *s->slots);
    memset(s->slots, 0xff, cap * sizeof *s->slots);
    s->mask = cap - 1;
    s->cap = expect > 16 ? expect : 16;
    s->off = xmalloc((size_t)s->cap * sizeof *s->off);
    s->len = xmalloc((size_t)s->cap * sizeof *s->len);
}

void strtab_clear(tok_strtab *s) {
    free(s->pool);
    free(s->off);
    free(s->len);
    free(s->slots);
    memset(s, 0, sizeof *s);
}

int32_t strtab_find(const tok_strtab *s, const char *p, size_t n) {
    if (!s->slots) return -1;
    for (uint32_t i = (uint32_t)hash_bytes(p, n) & s->mask;; i = (i + 1) & s->mask) {
        int32_t id = s->slots[i];
        if (id < 0) return -1;
        if (s->len[id] == n && memcmp(s->pool + s->off[id], p, n) == 0) return id;
    }
}

/* Double the slot array and re-insert every id. */
static void grow_slots(tok_strtab *s) {
    uint32_t cap = (s->mask + 1) * 2;
    free(s->slots);
    s->slots = xmalloc(cap * sizeof *s->slots);
    memset(s->slots, 0xff, cap * sizeof *s->slots);
    s->mask = cap - 1;
    for (int32_t id = 0; id < s->n; id++) {
        uint32_t i = (uint32_t)hash_bytes(s->pool + s->off[id], s->len[id]) & s->mask;
        while (s->slots[i] >= 0) i = (i + 1) & s->mask;
        s->slots[i] = id;
    }
}

/* Strings are stored by offset, not pointer: the pool may move when it
 * grows, and ids stay valid. */
static int32_t append(tok_strtab *s, const char *p, size_t n) {
    if (s->n == s->cap) {
        s->cap *= 2;
        s->off = xrealloc(s->off, (size_t)s->cap * sizeof *s->off);
        s->len = xrealloc(s->len, (size_t)s->cap * sizeof *s->len);
    }
    XGROW(s->pool, s->pool_cap, s->pool_len + n + 1, 4096);
    memcpy(s->pool + s->pool_len, p, n);
    s->pool[s->pool_len + n] = '\0';
    s->off[s->n] = (uint32_t)s->pool_len;
    s->len[s->n] = (uint32_t)n;
    s->pool_len += n + 1;
    return s->n++;
}

int32_t strtab_intern(tok_strtab *s, const char *p, size_t n, int *added) {
    if ((uint32_t)(s->n + 1) * 2u > s->mask + 1) grow_slots(s);
    uint32_t i = (uint32_t)hash_bytes(p, n) & s->mask;
    for (;; i = (i + 1) & s->mask) {
        int32_t id = s->slots[i];
        if (id < 0) break;
        if (s->len[id] == n && memcmp(s->pool + s->off[id], p, n) == 0) {
            if (added) *added = 0;
            return id;
        }
    }
    int32_t id = append(s, p, n);
    s->slots[i] = id;
    if (added) *added = 1;
    return id;
}

/* ---- small buffers ---------------------------------------------------------- */

void ids_push(tok_ids *o, int32_t id) {
    XGROW(o->v, o->cap, o->n + 1, 64);
    o->v[o->n++] = id;
}

void scratch_text_reserve(tok_scratch *s, size_t n) {
    XGROW(s->text, s->text_cap, n, 512);
}

tok_sym *scratch_syms(tok_scratch *s, size_t n) {
    XGROW(s->syms, s->cap_syms, n, 128);
    s->n_syms = n;
    return s->syms;
}

/* The merge queues delete lazily: a pair made stale by an earlier merge
 * stays in the heap and is skipped when popped, which is cheaper than
 * finding and removing it (and is what llama.cpp does, so ties resolve
 * the same way). */
void heap_push(tok_scratch *s, const tok_pair *p, pair_better better) {
    XGROW(s->heap, s->cap_heap, s->n_heap + 1, 128);
    size_t i = s->n_heap++;
    while (i > 0) { /* sift up */
        size_t parent = (i - 1) / 2;
        if (!better(p, &s->heap[parent])) break;
        s->heap[i] = s->heap[parent];
        i = parent;
    }
    s->heap[i] = *p;
}

int heap_pop(tok_scratch *s, tok_pair *out, pair_better better) {
    if (s->n_heap == 0) return 0;
    *out = s->heap[0];
    tok_pair last = s->heap[--s->n_heap];
    size_t i = 0, n = s->n_heap;
    for (;;) { /* sift the last element down from the root */
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && better(&s->heap[c + 1], &s->heap[c])) c++;
        if (!better(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n) s->heap[i] = last;
    return 1;
}

void scratch_free(tok_scratch *s) {
    free(s->text);
    free(s->syms);
    free(s->heap);
    free(s->spans);
    free(s->spans2);
    pretok_match_data_free(s->match_data);
    memset(s, 0, sizeof *s);
}
