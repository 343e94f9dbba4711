/* jsonschema_int.h - the compiled form of a JSON Schema, shared by the
 * compiler (jsonschema.c) and the guard's schema automaton
 * (jsonguard_schema.c). Not a public API.
 *
 * A schema is an array of nodes; index 0 is the root. Names of properties
 * and enum values are matched byte by byte in tries of their JSON text
 * (Jansson's compact dump, quotes included for enum strings): the guard
 * keeps one trie position, so matching is a state of two bytes. */
#ifndef STRATA_JSONSCHEMA_INT_H
#define STRATA_JSONSCHEMA_INT_H

#include <stdatomic.h>
#include <stdint.h>

#include "text/jsonregex.h"
#include "text/jsonschema.h"

/* JSON types, one bit each. A node allowing JT_NUM allows integers too. */
enum { JT_OBJ = 1, JT_ARR = 2, JT_STR = 4, JT_INT = 8, JT_NUM = 16, JT_BOOL = 32, JT_NULL = 64, JT_ALL = 127 };

/* The six kinds of value a first byte can start ('{', '[', '"', a number,
 * t/f, n): union branches are chosen by it. */
enum { JS_SLOT_OBJ, JS_SLOT_ARR, JS_SLOT_STR, JS_SLOT_NUM, JS_SLOT_BOOL, JS_SLOT_NULL, JS_N_SLOTS };

enum {
    JS_ANY,   /* any JSON value: the guard checks only syntax below it */
    JS_VALUE, /* types and the constraints below */
    JS_UNION, /* anyOf/oneOf: slot[] names the branch per kind of value */
    JS_DISC,  /* objects told apart by the value of one property, written first */
    JS_REF,   /* compile time only: a $ref whose target is items (see fix_refs) */
};

#define JS_NONE 0xFFFF /* no node */
#define JS_INF 255     /* mind*: no value can be written */

/* A string's constraints: length in code points and an automaton
 * (jsonregex.h: pattern and format together), dfa -1: none. */
typedef struct js_str {
    uint32_t min, max; /* max UINT32_MAX: none */
    int32_t dfa;
} js_str;

typedef struct js_node {
    uint8_t kind, types;
    uint16_t slot[JS_N_SLOTS]; /* JS_UNION */
    /* objects */
    uint16_t n_props, first_prop; /* value node of property i: prop[first_prop + i] */
    int32_t keys;                 /* trie of the property names (terminal = index), -1: any key */
    uint16_t addl;                /* value node when keys == -1 */
    uint64_t required;
    uint32_t min_props, max_props;
    /* arrays */
    uint16_t items;
    uint32_t min_items, max_items;
    /* scalars */
    int32_t enums; /* trie of the allowed values (terminal = index), -1: none */
    uint8_t has_lo, has_hi, lo_excl, hi_excl;
    double lo, hi;   /* bounds as written */
    double ilo, ihi; /* the same bounds on integers (inclusive) */
    int64_t mult;    /* multipleOf (integers only), 0: none */
    /* JS_DISC: keys is the one-name trie of the discriminator, items the
     * node of its value (a string enum); terminal v of that enum picks
     * branch disc_branch[first_disc + v], where the discriminator is
     * property disc_prop[first_disc + v]. */
    uint16_t first_disc;
    uint16_t str;    /* strings (values; or keys of an any-key object): js_str index, JS_NONE */
    uint16_t pnames; /* objects with any key: the keys' js_str (propertyNames), JS_NONE */
    /* Frames (nested constrained containers) the shortest valid value
     * needs: as a whole, as an object, as an array (JS_INF: none). The
     * guard opens a container only where its shortest value fits under
     * JSON_SCHEMA_MAX_DEPTH, so recursive schemas have no dead end. */
    uint8_t mind, mind_obj, mind_arr;
    uint8_t keys_mind; /* objects: the largest mind of a writable property */
    uint64_t keys_ok;  /* objects: properties whose value can be written at all */
    uint64_t keys_off; /* objects: properties never written (a oneOf branch kept apart from the others) */
} js_node;

typedef struct js_trie {
    int32_t child, next; /* first child, next sibling; -1: none */
    int32_t term;        /* index of the name/value ending here, -1: none */
    uint64_t below;      /* key tries: properties whose names pass here */
    uint8_t byte;
} js_trie;

struct json_schema {
    atomic_int refs;
    js_node *node;
    int n_nodes, root;
    uint16_t *prop; /* property value nodes */
    char **prop_name; /* their names (JS_DISC is built from them) */
    int n_prop;
    js_trie *trie;
    int n_trie;
    uint16_t *disc_branch, *disc_prop; /* JS_DISC tables */
    int n_disc;
    js_str *str;
    int n_str;
    jre_dfa *dfa;
    int n_dfa;
    char *unenforced; /* json_schema_unenforced, NULL: none */
};

/* jsonschema_merge.c: allOf as one schema, and $ref lookup. */
#define JSM_ONEOF_CUT "x-strata-oneOf-cut" /* a merged oneOf kept only 64 of its pairs */
typedef struct jsm_roots {
    const json_t *base; /* where local $refs resolve: the nearest subschema with an $id */
    const json_t *doc;  /* the whole schema: tried when base has no such place */
} jsm_roots;
json_t *jsm_merge(const jsm_roots *roots, const json_t *a, const json_t *b);
const json_t *jsm_resolve_ref(const jsm_roots *roots, const char *ref);

/* The child of trie node t for byte c, or -1. */
static inline int32_t js_trie_child(const json_schema *s, int32_t t, unsigned c) {
    for (int32_t k = s->trie[t].child; k >= 0; k = s->trie[k].next)
        if (s->trie[k].byte == c) return k;
    return -1;
}

#endif
