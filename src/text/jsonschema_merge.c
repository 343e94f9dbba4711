/* jsonschema_merge.c - allOf as one schema: the JSON-level rewriting the
 * compiler (jsonschema.c) does before it builds nodes.
 *
 * jsm_merge(roots, a, b) returns one schema that a value satisfies iff it
 * satisfies both a and b, as far as the enforced keywords go: types
 * intersect, properties and required merge (a property one side lacks is
 * held to that side's additionalProperties), bounds tighten, enums
 * intersect, patterns and formats accumulate (as lists, which the
 * compiler intersects), items/propertyNames/additionalProperties become
 * allOf of both, and anyOf/oneOf on both sides become the union of the
 * pairs. A $ref on either side is replaced by its target first (one
 * level; refs below stay refs). Other keywords keep the first value (the
 * compiler reports unenforced ones). Does not: compile, or check
 * anything: a contradiction (types with no intersection, an empty enum)
 * is left for the compiler to find. */
#include <stdlib.h>
#include <string.h>

#include "text/jsonschema_int.h"

/* "#" and local JSON pointers ("#/$defs/a", "#/properties/x/items/0"),
 * ~0 and ~1 unescaped; percent-encoding is not decoded. */
static const json_t *resolve_in(const json_t *doc, const char *ref) {
    if (ref[0] != '#' || (ref[1] && ref[1] != '/')) return NULL;
    const json_t *t = doc;
    for (const char *p = ref + 1; *p == '/' && t;) {
        char name[256];
        size_t k = 0;
        for (p++; *p && *p != '/' && k + 1 < sizeof name; p++) {
            if (*p == '~' && (p[1] == '0' || p[1] == '1')) name[k++] = p[1] == '0' ? '~' : '/', p++;
            else name[k++] = *p;
        }
        name[k] = 0;
        if (json_is_array(t)) {
            char *end;
            long i = strtol(name, &end, 10);
            t = *name && !*end && i >= 0 ? json_array_get(t, (size_t)i) : NULL;
        } else {
            t = json_object_get(t, name);
        }
    }
    return t;
}

const json_t *jsm_resolve_ref(const jsm_roots *r, const char *ref) {
    const json_t *t = resolve_in(r->base, ref);
    return t || r->base == r->doc ? t : resolve_in(r->doc, ref); /* lenient: a root-relative ref under an $id */
}

static const char *const TYPE_NAMES[] = {"object", "array", "string", "integer", "number", "boolean", "null"};

static int type_bits(const json_t *t) {
    int bits = 0;
    size_t i;
    const json_t *e;
    if (json_is_string(t)) t = json_pack("[O]", t);
    else json_incref((json_t *)t);
    json_array_foreach(t, i, e) for (int k = 0; k < 7; k++) if (json_is_string(e) && !strcmp(json_string_value(e), TYPE_NAMES[k]))
        bits |= 1 << k;
    json_decref((json_t *)t);
    return bits;
}

/* type: the intersection ("number" includes "integer"). */
static json_t *merge_type(const json_t *a, const json_t *b) {
    int x = type_bits(a), y = type_bits(b);
    if (x & 16) x |= 8;
    if (y & 16) y |= 8;
    int both = x & y;
    json_t *out = json_array();
    for (int k = 0; k < 7; k++)
        if ((both >> k) & 1 && !(k == 3 && (both & 16))) json_array_append_new(out, json_string(TYPE_NAMES[k]));
    if (!json_array_size(out)) json_array_append_new(out, json_string("never")); /* the compiler says why */
    return out;
}

static json_t *all_of(const json_t *a, const json_t *b) {
    if (!a || json_is_true(a) || (json_is_object(a) && !json_object_size(a))) return json_incref((json_t *)b);
    if (!b || json_is_true(b) || (json_is_object(b) && !json_object_size(b))) return json_incref((json_t *)a);
    if (json_is_false(a) || json_is_false(b)) return json_false();
    return json_pack("{s:[O,O]}", "allOf", a, b);
}

/* properties: each name held to both sides (a side without it: its
 * additionalProperties, if any). */
static void merge_props(json_t *dst, const json_t *b) {
    const json_t *pa = json_object_get(dst, "properties"), *pb = json_object_get(b, "properties");
    const json_t *aa = json_object_get(dst, "additionalProperties"), *ab = json_object_get(b, "additionalProperties");
    json_t *out = json_object(), *v;
    const char *k;
    json_object_foreach((json_t *)pa, k, v) {
        const json_t *o = json_object_get(pb, k);
        json_object_set_new(out, k, all_of(v, o ? o : ab));
    }
    json_object_foreach((json_t *)pb, k, v) if (!json_object_get(pa, k)) json_object_set_new(out, k, all_of(aa, v));
    json_object_set_new(dst, "properties", out);
}

static void union_required(json_t *dst, const json_t *b) {
    json_t *req = json_object_get(dst, "required"), *v;
    size_t i;
    if (!json_is_array(req)) json_object_set_new(dst, "required", req = json_array());
    json_array_foreach(b, i, v) {
        int seen = 0;
        size_t j;
        json_t *w;
        json_array_foreach(req, j, w) seen |= json_equal(v, w);
        if (!seen) json_array_append(req, v);
    }
}

static json_t *enum_values(const json_t *s) {
    json_t *e = json_object_get(s, "enum"), *c = json_object_get(s, "const");
    if (c) return json_pack("[O]", c);
    return json_is_array(e) ? json_incref(e) : NULL;
}

/* enum/const: the values in both (const becomes a one-value enum). */
static void merge_enum(json_t *dst, const json_t *b) {
    json_t *x = enum_values(dst), *y = enum_values(b);
    if (!y) {
        json_decref(x);
        return;
    }
    json_t *out = json_array(), *v, *w;
    size_t i, j;
    json_array_foreach(y, i, w) {
        int keep = !x;
        json_array_foreach(x, j, v) keep |= json_equal(v, w);
        if (keep) json_array_append(out, w);
    }
    json_object_del(dst, "const");
    json_object_set_new(dst, "enum", out);
    json_decref(x), json_decref(y);
}

/* A keyword whose values accumulate into a list (pattern, format). */
static void accumulate(json_t *dst, const char *k, const json_t *v) {
    json_t *cur = json_object_get(dst, k), *list = json_array();
    if (json_is_array(cur)) json_array_extend(list, cur);
    else if (cur) json_array_append(list, cur);
    if (json_is_array(v)) json_array_extend(list, (json_t *)v);
    else json_array_append(list, (json_t *)v);
    json_object_set_new(dst, k, list);
}

static const char *const LOWER[] = {"minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties", NULL};
static const char *const UPPER[] = {"maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties", NULL};

static int in(const char *const *list, const char *k) {
    for (int i = 0; list[i]; i++)
        if (!strcmp(list[i], k)) return 1;
    return 0;
}

/* The union of pairs: anyOf [a_i] and anyOf [b_j] -> anyOf [allOf a_i b_j]
 * (oneOf likewise: exactly one pair holds iff exactly one of each does). */
static json_t *pairs(const json_t *x, const json_t *y) {
    json_t *out = json_array(), *u, *v;
    size_t i, j;
    json_array_foreach(x, i, u) json_array_foreach(y, j, v) if (json_array_size(out) < 64)
        json_array_append_new(out, all_of(u, v));
    return out;
}

static void merge_key(json_t *dst, const char *k, const json_t *v) {
    const json_t *cur = json_object_get(dst, k);
    if (!strcmp(k, "properties") || !strcmp(k, "enum") || !strcmp(k, "const") || !strcmp(k, "$id")) return; /* done apart */
    if (!strcmp(k, "required")) union_required(dst, v);
    else if (!cur) json_object_set(dst, k, (json_t *)v);
    else if (!strcmp(k, "type")) json_object_set_new(dst, k, merge_type(cur, v));
    else if (!strcmp(k, "pattern") || !strcmp(k, "format") || !strcmp(k, "multipleOf")) accumulate(dst, k, v);
    else if (!strcmp(k, "items") || !strcmp(k, "additionalProperties") || !strcmp(k, "propertyNames"))
        json_object_set_new(dst, k, all_of(cur, v));
    else if (!strcmp(k, "anyOf") || !strcmp(k, "oneOf")) {
        if (json_array_size(cur) * json_array_size(v) > 64 && k[0] == 'o') /* cut: the compiler reports it */
            json_object_set_new(dst, JSM_ONEOF_CUT, json_true());
        json_object_set_new(dst, k, pairs(cur, v));
    }
    else if (in(LOWER, k) && json_is_number(cur) && json_is_number(v)) {
        if (json_number_value(v) > json_number_value(cur)) json_object_set(dst, k, (json_t *)v);
    } else if (in(UPPER, k) && json_is_number(cur) && json_is_number(v)) {
        if (json_number_value(v) < json_number_value(cur)) json_object_set(dst, k, (json_t *)v);
    }
    /* anything else: the first value stays */
}

static json_t *merge(const jsm_roots *doc, const json_t *a, const json_t *b, int depth);

json_t *jsm_merge(const jsm_roots *doc, const json_t *a, const json_t *b) { return merge(doc, a, b, 0); }

/* depth bounds the expansion: a $ref or allOf that comes back to itself
 * gives NULL. */
static json_t *merge(const jsm_roots *doc, const json_t *a, const json_t *b, int depth) {
    if (depth > 48) return NULL;
    for (int hops = 0; json_is_object(b) && json_is_string(json_object_get(b, "$ref")) && hops < 32; hops++) {
        const json_t *t = jsm_resolve_ref(doc, json_string_value(json_object_get(b, "$ref")));
        if (!t) break; /* the compiler reports it */
        json_t *rest = json_deep_copy(b);
        json_object_del(rest, "$ref");
        json_t *m = merge(doc, t, rest, depth + 1);
        json_decref(rest);
        json_t *r = m ? merge(doc, a, m, depth + 1) : NULL;
        json_decref(m);
        return r;
    }
    if (json_is_false(a) || json_is_false(b)) return json_false();
    json_t *dst = json_is_object(a) ? json_deep_copy(a) : json_object();
    json_object_del(dst, "$id"); /* a merged copy is no resource: its refs resolve where it came from */
    if (!json_is_object(b)) return dst;
    if (json_is_string(json_object_get(dst, "$ref"))) { /* a's own $ref: expand it too */
        json_t *empty = json_object(), *r = merge(doc, empty, dst, depth + 1);
        json_decref(empty), json_decref(dst);
        dst = r;
        if (!json_is_object(dst)) return dst;
    }
    const json_t *all = json_object_get(b, "allOf"), *v;
    if (json_is_array(all)) { /* b's own allOf first */
        json_t *bb = json_deep_copy(b), *m = json_object();
        json_object_del(bb, "allOf");
        size_t i;
        json_array_foreach(all, i, v) {
            json_t *n = m ? merge(doc, m, v, depth + 1) : NULL;
            json_decref(m);
            m = n;
        }
        json_t *n = m ? merge(doc, m, bb, depth + 1) : NULL;
        json_t *r = n ? merge(doc, dst, n, depth + 1) : NULL;
        json_decref(m), json_decref(bb), json_decref(dst), json_decref(n);
        return r;
    }
    if (json_object_get(dst, "properties") || json_object_get(b, "properties")) merge_props(dst, b);
    merge_enum(dst, b);
    const char *k;
    json_object_foreach((json_t *)b, k, v) merge_key(dst, k, v);
    return dst;
}
