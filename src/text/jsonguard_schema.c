/* jsonguard_schema.c - the schema automaton that runs beside the JSON
 * syntax automaton (see jsonguard_int.h and jsonschema_int.h).
 *
 * Each byte is first judged by the schema, from the syntax state before
 * it (which says where in the JSON text the byte falls), then by the
 * syntax. The schema side keeps:
 *   - a frame per open constrained object/array: its node, the properties
 *     written (a bitmask: each once; '}' needs every required one) and a
 *     count of keys or items (min/max);
 *   - for the value being written: its node, a trie position while a key
 *     or enum value is matched, the integer part of a bounded number, and
 *     in a constrained string its automaton state and character count;
 *   - `free`: inside a value of any shape (a JS_ANY node, an object or
 *     array without constraints), where only the syntax is checked until
 *     the syntax depth comes back to where it began.
 * As in the syntax automaton, a byte is refused as soon as no completion
 * exists (key prefixes of properties not yet written, integer prefixes
 * with no completion in bounds, ',' when no property or item can follow,
 * a string byte after which the pattern cannot match within the lengths,
 * a container or key whose shortest value needs more frames than are
 * left), so an accepted prefix is never a dead end. Does not: compile schemas
 * (jsonschema.c) or walk the vocabulary (jsonguard.c). */
#include "text/jsonguard_int.h"

#include <math.h>

static int is_ws(unsigned c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static int is_digit(unsigned c) { return c - '0' < 10u; }

static int is_number_mode(int mode) { return mode >= JG_MINUS && mode <= JG_EXP; }

/* Bytes that may continue a number (the syntax refuses the wrong ones). */
static int number_char(unsigned c) { return is_digit(c) || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-'; }

static int slot_of(unsigned c) {
    switch (c) {
    case '{': return JS_SLOT_OBJ;
    case '[': return JS_SLOT_ARR;
    case '"': return JS_SLOT_STR;
    case 't': case 'f': return JS_SLOT_BOOL;
    case 'n': return JS_SLOT_NULL;
    }
    return c == '-' || is_digit(c) ? JS_SLOT_NUM : -1;
}

static const js_node *node_at(const json_schema *s, int n) { return &s->node[n]; }

/* The node that describes a value of this kind under node n, or JS_NONE. */
static int resolve(const json_schema *s, int n, int slot) {
    static const int BITS[JS_N_SLOTS] = {JT_OBJ, JT_ARR, JT_STR, JT_INT | JT_NUM, JT_BOOL, JT_NULL};
    const js_node *nd = node_at(s, n);
    while (nd->kind == JS_UNION) { /* nested through a $ref; the compiler cut cycles */
        if ((n = nd->slot[slot]) == JS_NONE) return JS_NONE;
        nd = node_at(s, n);
    }
    if (nd->kind == JS_ANY) return n;
    if (nd->kind == JS_DISC) return slot == JS_SLOT_OBJ ? n : JS_NONE;
    return (nd->types & BITS[slot]) ? n : JS_NONE;
}

/* Values the schema does not look inside: only the syntax is checked. */
static int is_free(const json_schema *s, int n, int slot) {
    const js_node *nd = node_at(s, n);
    if (nd->kind == JS_ANY) return 1;
    if (nd->kind != JS_VALUE) return 0;
    if (slot == JS_SLOT_OBJ)
        return nd->keys < 0 && node_at(s, nd->addl)->kind == JS_ANY && nd->min_props == 0 && nd->max_props == UINT32_MAX &&
               nd->pnames == JS_NONE;
    if (slot == JS_SLOT_ARR)
        return node_at(s, nd->items)->kind == JS_ANY && nd->min_items == 0 && nd->max_items == UINT32_MAX;
    return 0;
}

static js_frame *top(jg_full *st) { return &st->fr[st->depth - 1]; }

static int in_object(const jg_full *st) { return (int)((st->syn.stack >> (st->syn.depth - 1)) & 1); }

static int push_frame(jg_full *st, int node) {
    if (st->depth >= JSON_SCHEMA_MAX_DEPTH) return 0; /* compile refuses deeper schemas */
    st->fr[st->depth] = (js_frame){.node = (uint16_t)node};
    st->depth++;
    return 1;
}

/* A value is complete. If it was the discriminator of a JS_DISC object,
 * its enum index (term) picks the branch. Clears the value's fields so
 * that equal situations give equal states (the mask cache). */
static void value_done(const json_schema *s, jg_full *st, int term) {
    if (st->depth && term >= 0) {
        js_frame *f = top(st);
        const js_node *d = node_at(s, f->node);
        if (d->kind == JS_DISC) {
            f->node = s->disc_branch[d->first_disc + term];
            f->seen = 1ull << s->disc_prop[d->first_disc + term];
        }
    }
    st->node = st->lit = 0;
    st->neg = 0;
    st->mag = 0;
    st->sc = st->q = 0;
    st->nch = 0;
}

/* ---- numbers -------------------------------------------------------------- */

static int bounded(const js_node *nd) { return nd->has_lo || nd->has_hi || nd->mult; }

/* Is there an integer in [lo, hi] (and a multiple of multipleOf)? */
static int has_value(const js_node *nd, double lo, double hi) {
    if (!nd->mult) return lo <= hi;
    double k = (double)nd->mult;
    return ceil(lo / k) * k <= hi;
}

static double pow10i(int j) {
    static const double P[19] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9,
                                 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18};
    return P[j];
}

/* Can an integer part of k digits starting with mag (0 alone: exactly
 * zero) still end in bounds? Appending j digits gives the magnitudes
 * [mag*10^j, mag*10^j + 10^j - 1]; at most 18 digits in all. */
static int int_viable(const js_node *nd, int neg, int64_t mag, int k, int zero) {
    if (!bounded(nd)) return 1;
    if (zero) return nd->ilo <= 0 && nd->ihi >= 0;
    for (int j = 0; k + j <= 18; j++) {
        double a = (double)mag * pow10i(j), b = a + pow10i(j) - 1;
        double lo = neg ? -b : a, hi = neg ? -a : b;
        if (has_value(nd, fmax(lo, nd->ilo), fmin(hi, nd->ihi))) return 1;
    }
    return 0;
}

static int in_bounds(const js_node *nd, double x) {
    if (nd->has_lo && (nd->lo_excl ? x <= nd->lo : x < nd->lo)) return 0;
    if (nd->has_hi && (nd->hi_excl ? x >= nd->hi : x > nd->hi)) return 0;
    return 1;
}

/* A fraction after the integer part puts the value anywhere between it
 * and the next integer away from zero: allowed when all of that is in
 * bounds (so no fraction digit can leave them). */
static int fraction_ok(const js_node *nd, int neg, int64_t mag) {
    double v = neg ? -(double)mag : (double)mag;
    return in_bounds(nd, v) && in_bounds(nd, neg ? v - 1 : v + 1);
}

static int begin_number(const js_node *nd, jg_full *st, unsigned c) {
    st->neg = c == '-';
    st->mag = st->neg ? 0 : (int64_t)(c - '0');
    if (!st->neg) return int_viable(nd, 0, st->mag, 1, c == '0');
    return !bounded(nd) || has_value(nd, nd->ilo, fmin(0, nd->ihi)); /* some x <= 0 */
}

/* A byte that continues a number (pre-state st). */
static int number_byte(const json_schema *s, jg_full *st, unsigned c) {
    const js_node *nd = node_at(s, st->node);
    int mode = st->syn.mode;
    if (st->lit) {
        int32_t k = js_trie_child(s, st->lit - 1, c);
        st->lit = (uint16_t)(k + 1);
        return k >= 0;
    }
    if (is_digit(c) && (mode == JG_MINUS || mode == JG_INT)) {
        if (!bounded(nd)) return 1;
        int k = mode == JG_MINUS ? 1 : st->syn.n + 1;
        st->mag = st->mag * 10 + (int64_t)(c - '0');
        return int_viable(nd, st->neg, st->mag, k, mode == JG_MINUS && c == '0');
    }
    int frac = c == '.', expo = (c == 'e' || c == 'E') && (mode == JG_INT || mode == JG_ZERO || mode == JG_FRAC);
    if (!frac && !expo) return 1;
    if (!(nd->types & JT_NUM)) return 0; /* integer: no fraction, no exponent */
    if (!bounded(nd)) return 1;
    return frac && fraction_ok(nd, st->neg, st->mag);
}

/* The number ended (the byte after it is not part of it). */
static int number_end(const json_schema *s, jg_full *st) {
    const js_node *nd = node_at(s, st->node);
    int term = -1;
    if (st->lit) {
        if ((term = s->trie[st->lit - 1].term) < 0) return 0;
    } else if (bounded(nd) && (st->syn.mode == JG_INT || st->syn.mode == JG_ZERO)) {
        double v = st->neg ? -(double)st->mag : (double)st->mag;
        if (v < nd->ilo || v > nd->ihi || (nd->mult && st->mag % nd->mult)) return 0;
    }
    value_done(s, st, term);
    return 1;
}

/* ---- strings held to lengths, a pattern or a format -------------------------- */

/* The decoded byte of a one-letter escape, or -1 (\u and invalid ones). */
static int escape_byte(unsigned c) {
    switch (c) {
    case '"': case '\\': case '/': return (int)c;
    case 'b': return 8;
    case 'f': return 12;
    case 'n': return 10;
    case 'r': return 13;
    case 't': return 9;
    }
    return -1;
}

/* nch is kept only where a length bound needs it, so that inside an
 * unbounded pattern the state repeats and the guard's mask cache hits. */
static uint32_t counted(const js_str *k, uint32_t n) { return k->min || k->max != UINT32_MAX ? n : 0; }

static void string_begin(jg_full *st, int str) {
    st->sc = (uint16_t)(str + 1);
    st->q = 0;
    st->nch = 0;
}

/* Can the automaton take decoded byte b (a new character: n is the count
 * with it) and still end in a match of the right length? */
static int dfa_byte(const js_str *k, const jre_dfa *d, jg_str_state *x, unsigned b, uint32_t n) {
    uint16_t q = d->next[(size_t)x->q * 256 + b];
    if (!jre_viable(d, q, n, k->min, k->max)) return 0;
    x->q = q;
    x->nch = counted(k, n);
    return 1;
}

/* A byte inside a string held to js_str sc (1-based), before the syntax
 * steps x->syn. Characters are counted at their first byte, an escape at
 * its '\\' (a surrogate pair once); the automaton reads the decoded bytes,
 * so under a pattern or format an escape is one of the one-letter ones
 * (\u is not written). */
static int str_byte(const json_schema *s, int sc, jg_str_state *x, unsigned c) {
    const js_str *k = &s->str[sc - 1];
    const jre_dfa *d = k->dfa >= 0 ? &s->dfa[k->dfa] : NULL;
    int mode = x->syn.mode;
    if (mode == JG_STR) {
        if (c == '"') return x->nch >= k->min && (!d || d->acc[x->q]);
        if (c >= 0x80 && c < 0xC0) return 1; /* the syntax refuses it */
        if (x->nch >= k->max) return 0;
        if (!d) return x->nch = counted(k, x->nch + 1), 1;
        if (c != '\\') return dfa_byte(k, d, x, c, x->nch + 1);
        static const char ESC[] = "\"\\/bfnrt";
        for (int i = 0; ESC[i]; i++) { /* some escape must continue */
            jg_str_state t = *x;
            if (dfa_byte(k, d, &t, (unsigned)escape_byte((unsigned char)ESC[i]), x->nch + 1)) return x->nch = counted(k, x->nch + 1), 1;
        }
        return 0;
    }
    if (!d) return 1;
    if (mode == JG_UTF8) return dfa_byte(k, d, x, c, x->nch);
    if (mode == JG_ESC) {
        int b = escape_byte(c);
        return b >= 0 && dfa_byte(k, d, x, (unsigned)b, x->nch);
    }
    return 0; /* \u: not under an automaton */
}

static int constrained_byte(const json_schema *s, jg_full *st, unsigned c) {
    jg_str_state x = {st->syn, st->q, st->nch};
    if (!str_byte(s, st->sc, &x, c)) return 0;
    st->q = x.q, st->nch = x.nch;
    return 1;
}

int jg_string_step(const json_schema *s, int sc, jg_str_state *x, unsigned c) {
    return str_byte(s, sc, x, c) && jg_step(&x->syn, c);
}

/* ---- values, keys, containers ------------------------------------------------ */

/* Frames the value of node r needs, written as slot. */
static int need_frames(const json_schema *s, int r, int slot) {
    const js_node *nd = node_at(s, r);
    if (slot == JS_SLOT_OBJ) return nd->kind == JS_ANY ? 0 : nd->mind_obj;
    if (slot == JS_SLOT_ARR) return nd->kind == JS_ANY ? 0 : nd->mind_arr;
    return 0;
}

/* Can some value of node n still be begun here (depth)? */
static int fits(const json_schema *s, const jg_full *st, int n) { return st->depth + node_at(s, n)->mind <= JSON_SCHEMA_MAX_DEPTH; }

static int begin_value(const json_schema *s, jg_full *st, int n, unsigned c) {
    int slot = slot_of(c);
    if (slot < 0) return 0;
    if (st->depth && !in_object(st)) { /* an array item */
        js_frame *f = top(st);
        if (f->count >= node_at(s, f->node)->max_items) return 0;
        f->count++;
    }
    int r = resolve(s, n, slot);
    if (r == JS_NONE || st->depth + need_frames(s, r, slot) > JSON_SCHEMA_MAX_DEPTH) return 0;
    const js_node *rn = node_at(s, r);
    if ((slot == JS_SLOT_OBJ || slot == JS_SLOT_ARR) && rn->kind == JS_VALUE && rn->enums >= 0) {
        int32_t k = js_trie_child(s, rn->enums, c); /* an object/array enum value: its exact text */
        st->free = (uint8_t)(st->syn.depth + 1);
        st->node = (uint16_t)r;
        st->lit = (uint16_t)(k + 1);
        return k >= 0;
    }
    if (is_free(s, r, slot)) {
        st->free = (uint8_t)(st->syn.depth + 1);
        return 1;
    }
    if (slot == JS_SLOT_OBJ) return push_frame(st, r);
    if (slot == JS_SLOT_ARR) {
        if (!push_frame(st, r)) return 0;
        st->node = node_at(s, r)->items;
        return 1;
    }
    st->node = (uint16_t)r;
    const js_node *nd = node_at(s, r);
    if (nd->enums >= 0) {
        int32_t k = js_trie_child(s, nd->enums, c);
        st->lit = (uint16_t)(k + 1);
        return k >= 0;
    }
    if (slot == JS_SLOT_STR && nd->str != JS_NONE) string_begin(st, nd->str);
    return slot == JS_SLOT_NUM ? begin_number(nd, st, c) : 1;
}

/* Properties of the top object that may still be written: not yet
 * written, with a value that can be written at all, and near the depth
 * limit one that fits. */
static uint64_t keys_allowed(const json_schema *s, const jg_full *st) {
    const js_frame *f = &st->fr[st->depth - 1];
    const js_node *nd = node_at(s, f->node);
    uint64_t left = ~f->seen & nd->keys_ok;
    if (nd->kind == JS_VALUE && st->depth + nd->keys_mind > JSON_SCHEMA_MAX_DEPTH)
        for (uint64_t m = left & ((nd->n_props < 64 ? 1ull << nd->n_props : 0) - 1); m; m &= m - 1)
            if (!fits(s, st, s->prop[nd->first_prop + __builtin_ctzll(m)])) left &= ~(m & -m);
    return left;
}

static uint64_t keys_left(const json_schema *s, const jg_full *st) {
    const js_node *nd = node_at(s, st->fr[st->depth - 1].node);
    int32_t q = js_trie_child(s, nd->keys, '"');
    return q < 0 ? 0 : s->trie[q].below & keys_allowed(s, st);
}

static int begin_key(const json_schema *s, jg_full *st) {
    js_frame *f = top(st);
    const js_node *nd = node_at(s, f->node);
    if (f->count >= nd->max_props) return 0;
    if (nd->keys < 0) { /* any key (held to propertyNames), its value to additionalProperties */
        if (!fits(s, st, nd->addl)) return 0;
        if (nd->pnames != JS_NONE) string_begin(st, nd->pnames);
        return 1;
    }
    if (!keys_left(s, st)) return 0;
    st->lit = (uint16_t)(js_trie_child(s, nd->keys, '"') + 1);
    return 1;
}

/* A byte of a key (pre-state st); the closing quote picks the property. */
static int key_byte(const json_schema *s, jg_full *st, unsigned c, int closing) {
    js_frame *f = top(st);
    const js_node *nd = node_at(s, f->node);
    if (!st->lit) { /* any key: its value follows additionalProperties */
        if (st->sc && !constrained_byte(s, st, c)) return 0;
        if (closing) f->count++, st->node = nd->addl, st->sc = st->q = 0, st->nch = 0;
        return 1;
    }
    int32_t k = js_trie_child(s, st->lit - 1, c);
    if (k < 0 || !(s->trie[k].below & keys_allowed(s, st))) return 0;
    st->lit = (uint16_t)(k + 1);
    if (!closing) return 1;
    int term = s->trie[k].term;
    f->seen |= 1ull << term;
    f->count++;
    st->node = nd->kind == JS_DISC ? nd->items : s->prop[nd->first_prop + term];
    st->lit = 0;
    return 1;
}

/* A byte inside a string (pre-state st in a string mode). */
static int string_byte(const json_schema *s, jg_full *st, unsigned c) {
    int closing = st->syn.mode == JG_STR && c == '"';
    if (st->syn.aux & AUX_KEY) return key_byte(s, st, c, closing);
    if (!st->lit) {
        if (st->sc && !constrained_byte(s, st, c)) return 0;
        if (closing) value_done(s, st, -1);
        return 1;
    }
    int32_t k = js_trie_child(s, st->lit - 1, c);
    if (k < 0) return 0;
    st->lit = (uint16_t)(k + 1);
    if (!closing) return 1;
    if (s->trie[k].term < 0) return 0;
    value_done(s, st, s->trie[k].term);
    return 1;
}

static int close_container(const json_schema *s, jg_full *st, int object) {
    js_frame *f = top(st);
    const js_node *nd = node_at(s, f->node);
    if (object && (nd->kind == JS_DISC || (nd->required & ~f->seen) || f->count < nd->min_props)) return 0;
    if (!object && f->count < nd->min_items) return 0;
    st->depth--;
    memset(&st->fr[st->depth], 0, sizeof st->fr[0]);
    value_done(s, st, -1);
    return 1;
}

static int comma(const json_schema *s, jg_full *st) {
    js_frame *f = top(st);
    const js_node *nd = node_at(s, f->node);
    if (!in_object(st)) {
        if (f->count >= nd->max_items || !fits(s, st, nd->items)) return 0;
        st->node = nd->items;
        return 1;
    }
    if (f->count >= nd->max_props) return 0;
    return nd->keys < 0 ? fits(s, st, nd->addl) : keys_left(s, st) != 0;
}

/* Between tokens (pre-state mode): where values, keys and closers go. */
static int struct_byte(const json_schema *s, jg_full *st, int mode, unsigned c) {
    if (is_ws(c)) return 1;
    switch (mode) {
    case JG_START: return c == '{' && begin_value(s, st, s->root, c);
    case JG_VALUE: return begin_value(s, st, st->node, c);
    case JG_ARR_FIRST: return c == ']' ? close_container(s, st, 0) : begin_value(s, st, st->node, c);
    case JG_OBJ_FIRST:
        if (c == '}') return close_container(s, st, 1);
        /* fall through */
    case JG_KEY: return c == '"' && begin_key(s, st);
    case JG_COLON: return 1;
    case JG_AFTER:
        if (c == ',') return comma(s, st);
        if (c == '}' || c == ']') return close_container(s, st, c == '}');
        return 1;
    }
    return 0;
}

static int literal_byte(const json_schema *s, jg_full *st, unsigned c) {
    int32_t k = st->lit ? js_trie_child(s, st->lit - 1, c) : -1;
    if (st->lit && k < 0) return 0;
    if (st->lit) st->lit = (uint16_t)(k + 1);
    if (!jg_step(&st->syn, c)) return 0;
    if (st->syn.mode == JG_AFTER) value_done(s, st, st->lit ? s->trie[st->lit - 1].term : -1);
    return 1;
}

/* Inside a free value: syntax only, until it is complete. */
static int free_byte(const json_schema *s, jg_full *st, unsigned c) {
    if (st->lit) { /* an object/array enum value: byte by byte its text */
        int32_t k = js_trie_child(s, st->lit - 1, c);
        if (k < 0) return 0;
        st->lit = (uint16_t)(k + 1);
    }
    if (!jg_step(&st->syn, c)) return 0;
    if (st->syn.depth == st->free - 1 && (st->syn.mode == JG_AFTER || st->syn.mode == JG_DONE)) {
        int term = st->lit ? s->trie[st->lit - 1].term : -1;
        if (st->lit && term < 0) return 0;
        st->free = 0;
        value_done(s, st, term);
    }
    return 1;
}

int jg_schema_step(const json_schema *s, jg_full *st, unsigned c) {
    if (!s) return jg_step(&st->syn, c);
    int mode = st->syn.mode;
    if (is_number_mode(mode) && !number_char(c)) { /* the number ends before c */
        if (st->free && st->syn.depth == st->free - 1) {
            st->free = 0;
            value_done(s, st, -1);
        } else if (!st->free && !number_end(s, st)) {
            return 0;
        }
        if (!st->free) return struct_byte(s, st, JG_AFTER, c) && jg_step(&st->syn, c);
    }
    if (st->free) return free_byte(s, st, c);
    if (mode <= JG_AFTER) return struct_byte(s, st, mode, c) && jg_step(&st->syn, c);
    if (mode <= JG_UTF8) return string_byte(s, st, c) && jg_step(&st->syn, c);
    if (mode <= JG_EXP) return number_byte(s, st, c) && jg_step(&st->syn, c);
    if (mode == JG_LIT) return literal_byte(s, st, c);
    return 0; /* JG_DONE */
}
