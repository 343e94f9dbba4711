/* jsonschema.c - compiles a JSON Schema into the nodes and tries the
 * guard walks (see jsonschema.h for what is supported and
 * jsonschema_int.h for the compiled form).
 *
 * One recursive pass over the schema: each subschema becomes a node;
 * $ref is expanded in place (so a recursive $ref is refused), anyOf and
 * oneOf become a JS_UNION keyed by the first byte of the value, or a
 * JS_DISC when several branches are objects. Every refusal names the
 * keyword and the JSON pointer of the subschema. Does not: validate
 * values (the guard does, while they are generated). */
#include "text/jsonschema_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"

typedef struct cctx {
    json_schema *s;
    const json_t *doc;      /* the whole schema, for $ref */
    json_t **enum_vals;     /* per node: its allowed values (JS_DISC uses them) */
    int cap_nodes, cap_prop, cap_trie, cap_disc;
    const json_t *refs[64]; /* $refs being expanded (recursion check) */
    int n_refs;
    char *why;
    size_t cap;
    int failed;
} cctx;

static int fail(cctx *c, const char *fmt, ...) {
    if (c->failed) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->why, c->cap, fmt, ap);
    va_end(ap);
    c->failed = 1;
    return -1;
}

/* ---- growing the tables ------------------------------------------------- */

static int node_new(cctx *c, int kind) {
    json_schema *s = c->s;
    if (s->n_nodes >= JSON_SCHEMA_MAX_NODES)
        return fail(c, "schema too large: more than %d nodes (after expanding $ref)", JSON_SCHEMA_MAX_NODES);
    if (s->n_nodes == c->cap_nodes) {
        c->cap_nodes = c->cap_nodes ? c->cap_nodes * 2 : 64;
        s->node = xrealloc(s->node, (size_t)c->cap_nodes * sizeof *s->node);
        c->enum_vals = xrealloc(c->enum_vals, (size_t)c->cap_nodes * sizeof *c->enum_vals);
    }
    js_node *n = &s->node[s->n_nodes];
    memset(n, 0, sizeof *n);
    n->kind = (uint8_t)kind;
    n->keys = n->enums = -1;
    n->addl = n->items = JS_NONE;
    n->max_props = n->max_items = UINT32_MAX;
    for (int i = 0; i < JS_N_SLOTS; i++) n->slot[i] = JS_NONE;
    c->enum_vals[s->n_nodes] = NULL;
    return s->n_nodes++;
}

static int trie_new(cctx *c, uint8_t byte) {
    json_schema *s = c->s;
    if (s->n_trie >= JSON_SCHEMA_MAX_TRIE)
        return fail(c, "schema too large: property names and enum values over %d bytes", JSON_SCHEMA_MAX_TRIE);
    if (s->n_trie == c->cap_trie) {
        c->cap_trie = c->cap_trie ? c->cap_trie * 2 : 256;
        s->trie = xrealloc(s->trie, (size_t)c->cap_trie * sizeof *s->trie);
    }
    s->trie[s->n_trie] = (js_trie){.child = -1, .next = -1, .term = -1, .byte = byte};
    return s->n_trie++;
}

/* Adds text under root with terminal index term (the first one wins for
 * equal texts). Key tries record term in `below` along the path. */
static int trie_add(cctx *c, int32_t root, const char *text, size_t len, int term) {
    int32_t t = root;
    for (size_t i = 0; i < len; i++) {
        if (term < 64) c->s->trie[t].below |= 1ull << term;
        int32_t k = js_trie_child(c->s, t, (unsigned char)text[i]);
        if (k < 0) {
            if ((k = trie_new(c, (uint8_t)text[i])) < 0) return -1;
            c->s->trie[k].next = c->s->trie[t].child;
            c->s->trie[t].child = k;
        }
        t = k;
    }
    if (term < 64) c->s->trie[t].below |= 1ull << term;
    if (c->s->trie[t].term < 0) c->s->trie[t].term = term;
    return 0;
}

/* Adds a value's compact JSON text to a trie. */
static int trie_add_value(cctx *c, int32_t root, const json_t *v, int term) {
    char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    int rc = trie_add(c, root, text, strlen(text), term);
    free(text);
    return rc;
}

static int prop_new(cctx *c, const char *name) {
    json_schema *s = c->s;
    if (s->n_prop == c->cap_prop) {
        c->cap_prop = c->cap_prop ? c->cap_prop * 2 : 64;
        s->prop = xrealloc(s->prop, (size_t)c->cap_prop * sizeof *s->prop);
        s->prop_name = xrealloc(s->prop_name, (size_t)c->cap_prop * sizeof *s->prop_name);
    }
    s->prop[s->n_prop] = JS_NONE;
    s->prop_name[s->n_prop] = xstrdup(name);
    return s->n_prop++;
}

static void disc_add(cctx *c, uint16_t branch, uint16_t prop) {
    json_schema *s = c->s;
    if (s->n_disc == c->cap_disc) {
        c->cap_disc = c->cap_disc ? c->cap_disc * 2 : 16;
        s->disc_branch = xrealloc(s->disc_branch, (size_t)c->cap_disc * sizeof(uint16_t));
        s->disc_prop = xrealloc(s->disc_prop, (size_t)c->cap_disc * sizeof(uint16_t));
    }
    s->disc_branch[s->n_disc] = branch;
    s->disc_prop[s->n_disc++] = prop;
}

/* ---- keywords --------------------------------------------------------------- */

static const char *const ANNOTATIONS[] = {
    "title", "description", "default", "examples", "format", "$schema", "$id", "$comment", "deprecated",
    "readOnly", "writeOnly", "strict", "discriminator", "$defs", "definitions", "contentEncoding",
    "contentMediaType", NULL};
static const char *const CONSTRAINTS[] = {
    "type", "properties", "required", "additionalProperties", "minProperties", "maxProperties", "items",
    "minItems", "maxItems", "enum", "const", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "anyOf", "oneOf", "allOf", "$ref", "nullable", NULL};

static int in_list(const char *const *list, const char *k) {
    for (int i = 0; list[i]; i++)
        if (!strcmp(list[i], k)) return 1;
    return 0;
}

/* Every keyword of sch is one we enforce or one that constrains nothing. */
static int check_keywords(cctx *c, const json_t *sch, const char *path) {
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)sch, k, v) {
        if (in_list(ANNOTATIONS, k) || in_list(CONSTRAINTS, k)) continue;
        return fail(c, "unsupported JSON Schema keyword '%s' at %s", k, path);
    }
    return 0;
}

/* The constraining keywords of sch other than `except`: anyOf, $ref and
 * allOf stand alone. */
static int n_constraints(const json_t *sch, const char *except) {
    int n = 0;
    for (int i = 0; CONSTRAINTS[i]; i++)
        n += strcmp(CONSTRAINTS[i], except) && strcmp(CONSTRAINTS[i], "nullable") && json_object_get(sch, CONSTRAINTS[i]);
    return n;
}

static int type_bit(const char *name) {
    static const char *const NAMES[] = {"object", "array", "string", "integer", "number", "boolean", "null"};
    for (int i = 0; i < 7; i++)
        if (!strcmp(name, NAMES[i])) return 1 << i;
    return 0;
}

static int parse_types(cctx *c, const json_t *t, const char *path) {
    if (json_is_string(t)) {
        int b = type_bit(json_string_value(t));
        return b ? b : fail(c, "unknown type '%s' at %s", json_string_value(t), path);
    }
    int types = 0;
    size_t i;
    const json_t *e;
    if (!json_is_array(t) || !json_array_size(t)) return fail(c, "'type' must be a name or a list of names at %s", path);
    json_array_foreach(t, i, e) {
        int b = json_is_string(e) ? type_bit(json_string_value(e)) : 0;
        if (!b) return fail(c, "unknown type in 'type' at %s", path);
        types |= b;
    }
    return types;
}

static int value_type(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_STRING: return JT_STR;
    case JSON_INTEGER: return JT_INT;
    case JSON_REAL: return JT_NUM;
    case JSON_TRUE: case JSON_FALSE: return JT_BOOL;
    case JSON_NULL: return JT_NULL;
    default: return 0;
    }
}

/* A non-negative integer keyword, or dflt when absent. */
static int get_count(cctx *c, const json_t *sch, const char *k, uint32_t dflt, uint32_t *out, const char *path) {
    const json_t *v = json_object_get(sch, k);
    *out = dflt;
    if (!v) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0) return fail(c, "'%s' must be a non-negative integer at %s", k, path);
    *out = json_integer_value(v) > UINT32_MAX - 1 ? UINT32_MAX - 1 : (uint32_t)json_integer_value(v);
    return 0;
}

/* ---- the recursion ------------------------------------------------------------- */

static int compile(cctx *c, const json_t *sch, const char *path, int depth);

static int child(cctx *c, const json_t *sch, const char *path, const char *fmt, const char *a, int depth) {
    char sub[512];
    snprintf(sub, sizeof sub, "%s/", path);
    size_t n = strlen(sub);
    snprintf(sub + n, sizeof sub - n, fmt, a);
    return compile(c, sch, sub, depth);
}

/* #, #/$defs/x, #/definitions/x (one level of JSON pointer, ~0 ~1 unescaped). */
static const json_t *resolve_ref(cctx *c, const char *ref, const char *path) {
    if (!strcmp(ref, "#")) return c->doc;
    const char *kinds[] = {"#/$defs/", "#/definitions/"}, *keys[] = {"$defs", "definitions"};
    for (int i = 0; i < 2; i++) {
        size_t n = strlen(kinds[i]);
        if (strncmp(ref, kinds[i], n)) continue;
        char name[256];
        size_t k = 0;
        for (const char *p = ref + n; *p && k + 1 < sizeof name; p++) {
            if (*p == '/') break;
            if (*p == '~' && (p[1] == '0' || p[1] == '1')) name[k++] = p[1] == '0' ? '~' : '/', p++;
            else name[k++] = *p;
        }
        name[k] = 0;
        const json_t *t = json_object_get(json_object_get(c->doc, keys[i]), name);
        if (t) return t;
    }
    fail(c, "unsupported $ref '%s' at %s (only #, #/$defs/NAME and #/definitions/NAME)", ref, path);
    return NULL;
}

static int compile_ref(cctx *c, const json_t *sch, const char *path, int depth) {
    const char *ref = json_string_value(json_object_get(sch, "$ref"));
    if (!ref) return fail(c, "'$ref' must be a string at %s", path);
    if (n_constraints(sch, "$ref")) return fail(c, "unsupported JSON Schema keyword '$ref' beside other constraints at %s", path);
    const json_t *t = resolve_ref(c, ref, path);
    if (!t) return -1;
    for (int i = 0; i < c->n_refs; i++)
        if (c->refs[i] == t) return fail(c, "unsupported recursive $ref '%s' at %s", ref, path);
    if (c->n_refs == 64) return fail(c, "$ref nested too deep at %s", path);
    c->refs[c->n_refs++] = t;
    int r = compile(c, t, ref, depth);
    c->n_refs--;
    return r;
}

static int compile_object(cctx *c, int id, const json_t *sch, const char *path, int depth);
static int compile_array(cctx *c, int id, const json_t *sch, const char *path, int depth);
static int compile_scalars(cctx *c, int id, const json_t *sch, const char *path);
static int compile_union(cctx *c, const json_t *branches, const char *kw, const char *path, int depth);

static int infer_types(const json_t *sch) {
    int t = 0;
    if (json_object_get(sch, "properties") || json_object_get(sch, "required") ||
        json_object_get(sch, "additionalProperties") || json_object_get(sch, "minProperties") ||
        json_object_get(sch, "maxProperties"))
        t |= JT_OBJ;
    if (json_object_get(sch, "items") || json_object_get(sch, "minItems") || json_object_get(sch, "maxItems"))
        t |= JT_ARR;
    if (json_object_get(sch, "minimum") || json_object_get(sch, "maximum") ||
        json_object_get(sch, "exclusiveMinimum") || json_object_get(sch, "exclusiveMaximum"))
        t |= JT_NUM;
    return t;
}

/* A schema with type, enum/const and per-type keywords. */
static int compile_value(cctx *c, const json_t *sch, const char *path, int depth) {
    const json_t *type = json_object_get(sch, "type");
    int types = type ? parse_types(c, type, path) : infer_types(sch);
    if (types < 0) return -1;
    int has_enum = json_object_get(sch, "enum") || json_object_get(sch, "const");
    if (!types && !has_enum) return node_new(c, JS_ANY); /* nullable alone adds nothing */
    if (!types) types = JT_ALL & ~(JT_OBJ | JT_ARR);
    if (json_is_true(json_object_get(sch, "nullable"))) types |= JT_NULL;
    if (types & JT_NUM) types |= JT_INT;
    int id = node_new(c, JS_VALUE);
    if (id < 0) return -1;
    c->s->node[id].types = (uint8_t)types;
    if ((types & JT_OBJ) && compile_object(c, id, sch, path, depth) < 0) return -1;
    if ((types & JT_ARR) && compile_array(c, id, sch, path, depth) < 0) return -1;
    if (compile_scalars(c, id, sch, path) < 0) return -1;
    return id;
}

static int compile(cctx *c, const json_t *sch, const char *path, int depth) {
    if (c->failed) return -1;
    if (json_is_true(sch)) return node_new(c, JS_ANY);
    if (!json_is_object(sch)) return fail(c, "a schema must be an object or true at %s", path);
    if (check_keywords(c, sch, path)) return -1;
    if (json_object_get(sch, "$ref")) return compile_ref(c, sch, path, depth);
    const json_t *all = json_object_get(sch, "allOf");
    if (all) {
        if (!json_is_array(all) || json_array_size(all) != 1 || n_constraints(sch, "allOf"))
            return fail(c, "unsupported JSON Schema keyword 'allOf' (only a single schema) at %s", path);
        return child(c, json_array_get(all, 0), path, "allOf/%s", "0", depth);
    }
    const char *kw = json_object_get(sch, "anyOf") ? "anyOf" : json_object_get(sch, "oneOf") ? "oneOf" : NULL;
    if (kw) {
        if (n_constraints(sch, kw)) return fail(c, "unsupported JSON Schema keyword '%s' beside other constraints at %s", kw, path);
        return compile_union(c, json_object_get(sch, kw), kw, path, depth);
    }
    return compile_value(c, sch, path, depth);
}

/* ---- objects and arrays ---------------------------------------------------------- */

/* Properties and the required ones (a required name without a schema is
 * a property of any value). */
static int compile_props(cctx *c, int id, const json_t *sch, const char *path, int depth) {
    const json_t *props = json_object_get(sch, "properties"), *req = json_object_get(sch, "required"), *v;
    if (props && !json_is_object(props)) return fail(c, "'properties' must be an object at %s", path);
    if (req && !json_is_array(req)) return fail(c, "'required' must be an array at %s", path);
    json_t *all = json_object();
    const char *k;
    json_object_foreach((json_t *)props, k, v) json_object_set(all, k, (json_t *)v);
    size_t i;
    json_array_foreach(req, i, v) if (json_is_string(v) && !json_object_get(all, json_string_value(v)))
        json_object_set_new(all, json_string_value(v), json_true());
    if (json_object_size(all) > JSON_SCHEMA_MAX_PROPS) {
        json_decref(all);
        return fail(c, "schema too large: more than %d properties at %s", JSON_SCHEMA_MAX_PROPS, path);
    }
    int n = (int)json_object_size(all), first = c->s->n_prop, root = n || json_is_false(json_object_get(sch, "additionalProperties")) ? trie_new(c, 0) : -1;
    for (int p = 0; p < n; p++) prop_new(c, "");
    int p = 0;
    json_object_foreach(all, k, v) {
        free(c->s->prop_name[first + p]);
        c->s->prop_name[first + p] = xstrdup(k);
        int vn = child(c, v, path, "properties/%s", k, depth + 1);
        json_t *name = json_string(k);
        int rc = vn < 0 ? -1 : trie_add_value(c, root, name, p);
        json_decref(name);
        if (rc < 0) break;
        c->s->prop[first + p] = (uint16_t)vn;
        p++;
    }
    json_decref(all);
    if (c->failed) return -1;
    js_node *nd = &c->s->node[id];
    nd->n_props = (uint16_t)n, nd->first_prop = (uint16_t)first, nd->keys = root;
    json_array_foreach(req, i, v) for (int q = 0; q < n; q++)
        if (json_is_string(v) && !strcmp(c->s->prop_name[first + q], json_string_value(v))) nd->required |= 1ull << q;
    return 0;
}

static int compile_object(cctx *c, int id, const json_t *sch, const char *path, int depth) {
    if (depth + 1 > JSON_SCHEMA_MAX_DEPTH) return fail(c, "schema nests objects/arrays deeper than %d at %s", JSON_SCHEMA_MAX_DEPTH, path);
    if (compile_props(c, id, sch, path, depth) < 0) return -1;
    const json_t *ap = json_object_get(sch, "additionalProperties");
    if (c->s->node[id].keys < 0) {
        int a = ap && !json_is_boolean(ap) ? child(c, ap, path, "%s", "additionalProperties", depth + 1) : node_new(c, JS_ANY);
        if (a < 0) return -1;
        c->s->node[id].addl = (uint16_t)a;
    }
    js_node *nd = &c->s->node[id];
    if (get_count(c, sch, "minProperties", 0, &nd->min_props, path) ||
        get_count(c, sch, "maxProperties", UINT32_MAX, &nd->max_props, path))
        return -1;
    int n_req = __builtin_popcountll(nd->required);
    if (nd->min_props > nd->max_props || (uint32_t)n_req > nd->max_props ||
        (nd->keys >= 0 && nd->min_props > nd->n_props))
        return fail(c, "no object satisfies minProperties/maxProperties/required at %s", path);
    return 0;
}

static int compile_array(cctx *c, int id, const json_t *sch, const char *path, int depth) {
    if (depth + 1 > JSON_SCHEMA_MAX_DEPTH) return fail(c, "schema nests objects/arrays deeper than %d at %s", JSON_SCHEMA_MAX_DEPTH, path);
    const json_t *items = json_object_get(sch, "items");
    if (json_is_array(items)) return fail(c, "unsupported JSON Schema keyword 'items' as a list (tuple) at %s", path);
    int it = items ? child(c, items, path, "%s", "items", depth + 1) : node_new(c, JS_ANY);
    if (it < 0) return -1;
    js_node *nd = &c->s->node[id];
    nd->items = (uint16_t)it;
    if (get_count(c, sch, "minItems", 0, &nd->min_items, path) || get_count(c, sch, "maxItems", UINT32_MAX, &nd->max_items, path))
        return -1;
    if (nd->min_items > nd->max_items) return fail(c, "minItems is above maxItems at %s", path);
    return 0;
}

/* ---- scalars: bounds and enums ---------------------------------------------------- */

#define MAX_MAG 999999999999999999.0 /* 18 digits: the guard's integer limit */

/* minimum/maximum/exclusive* (numbers, or draft-4 booleans). */
static int compile_bounds(cctx *c, js_node *nd, const json_t *sch, const char *path) {
    const json_t *mn = json_object_get(sch, "minimum"), *mx = json_object_get(sch, "maximum");
    const json_t *xmn = json_object_get(sch, "exclusiveMinimum"), *xmx = json_object_get(sch, "exclusiveMaximum");
    if ((mn && !json_is_number(mn)) || (mx && !json_is_number(mx)) || (xmn && !json_is_number(xmn) && !json_is_boolean(xmn)) ||
        (xmx && !json_is_number(xmx) && !json_is_boolean(xmx)))
        return fail(c, "minimum/maximum must be numbers at %s", path);
    nd->lo = -MAX_MAG, nd->hi = MAX_MAG;
    if (mn) nd->has_lo = 1, nd->lo = json_number_value(mn), nd->lo_excl = json_is_true(xmn);
    if (mx) nd->has_hi = 1, nd->hi = json_number_value(mx), nd->hi_excl = json_is_true(xmx);
    if (json_is_number(xmn) && (!nd->has_lo || json_number_value(xmn) >= nd->lo))
        nd->has_lo = 1, nd->lo = json_number_value(xmn), nd->lo_excl = 1;
    if (json_is_number(xmx) && (!nd->has_hi || json_number_value(xmx) <= nd->hi))
        nd->has_hi = 1, nd->hi = json_number_value(xmx), nd->hi_excl = 1;
    nd->ilo = nd->lo_excl ? floor(nd->lo) + 1 : ceil(nd->lo);
    nd->ihi = nd->hi_excl ? ceil(nd->hi) - 1 : floor(nd->hi);
    if (nd->ilo < -MAX_MAG) nd->ilo = -MAX_MAG;
    if (nd->ihi > MAX_MAG) nd->ihi = MAX_MAG;
    if ((nd->has_lo || nd->has_hi) && (nd->types & JT_INT) && nd->ilo > nd->ihi)
        return fail(c, "unsupported bounds at %s: no integer within minimum/maximum", path);
    return 0;
}

static int in_bounds(const js_node *nd, double x) {
    if (nd->has_lo && (nd->lo_excl ? x <= nd->lo : x < nd->lo)) return 0;
    if (nd->has_hi && (nd->hi_excl ? x >= nd->hi : x > nd->hi)) return 0;
    return 1;
}

/* enum/const: the values allowed by the types and bounds, into a trie.
 * Bounds then stop applying: the trie alone decides. */
static int compile_enum(cctx *c, int id, const json_t *sch, const char *path) {
    const json_t *en = json_object_get(sch, "enum"), *cn = json_object_get(sch, "const"), *v;
    if (en && !json_is_array(en)) return fail(c, "'enum' must be an array at %s", path);
    json_t *vals = json_array();
    size_t i;
    json_array_foreach(en, i, v) json_array_append(vals, (json_t *)v);
    if (cn) json_array_append(vals, (json_t *)cn);
    json_t *keep = json_array();
    int types = 0;
    js_node *nd = &c->s->node[id];
    json_array_foreach(vals, i, v) {
        int t = value_type(v);
        if (!t) {
            json_decref(vals), json_decref(keep);
            return fail(c, "unsupported JSON Schema keyword '%s' with an object or array value at %s", cn ? "const" : "enum", path);
        }
        if (cn && !json_equal(v, cn)) continue; /* enum and const together: both */
        int allowed = (nd->types & t) && (t != JT_NUM || (nd->types & JT_NUM));
        if (!allowed || ((t & (JT_INT | JT_NUM)) && !in_bounds(nd, json_number_value(v)))) continue;
        json_array_append(keep, (json_t *)v);
        types |= t == JT_NUM ? JT_NUM | JT_INT : t;
    }
    json_decref(vals);
    if (!json_array_size(keep)) {
        json_decref(keep);
        return fail(c, "no value satisfies enum/const with the other constraints at %s", path);
    }
    int root = trie_new(c, 0);
    json_array_foreach(keep, i, v) if (root < 0 || trie_add_value(c, root, v, (int)i) < 0) break;
    nd = &c->s->node[id];
    nd->enums = root, nd->types = (uint8_t)types, nd->has_lo = nd->has_hi = 0;
    c->enum_vals[id] = keep;
    return c->failed ? -1 : 0;
}

static int compile_scalars(cctx *c, int id, const json_t *sch, const char *path) {
    js_node *nd = &c->s->node[id];
    if (compile_bounds(c, nd, sch, path)) return -1;
    if ((nd->has_lo || nd->has_hi) && !(nd->types & JT_INT)) nd->has_lo = nd->has_hi = 0;
    if (!json_object_get(sch, "enum") && !json_object_get(sch, "const")) return 0;
    if (nd->types & (JT_OBJ | JT_ARR))
        return fail(c, "unsupported JSON Schema keyword 'enum' on an object or array type at %s", path);
    return compile_enum(c, id, sch, path);
}

/* ---- anyOf / oneOf ------------------------------------------------------------------- */

static int slot_types(const js_node *nd, int slot) {
    static const int BITS[JS_N_SLOTS] = {JT_OBJ, JT_ARR, JT_STR, JT_INT | JT_NUM, JT_BOOL, JT_NULL};
    if (nd->kind == JS_DISC) return slot == JS_SLOT_OBJ;
    return (nd->types & BITS[slot]) != 0;
}

/* The property of object node b named name, or -1. */
static int prop_index(const json_schema *s, const js_node *b, const char *name) {
    for (int q = 0; q < b->n_props; q++)
        if (!strcmp(s->prop_name[b->first_prop + q], name)) return q;
    return -1;
}

/* Can property `name` tell the branches apart? Each branch declares it as
 * an enum/const of strings only, and no value is in two branches. */
static int disc_candidate(cctx *c, const int *br, int n, const char *name) {
    json_t *seen = json_object();
    int ok = 1;
    for (int b = 0; b < n && ok; b++) {
        const js_node *nd = &c->s->node[br[b]];
        int q = nd->kind == JS_VALUE && nd->keys >= 0 ? prop_index(c->s, nd, name) : -1;
        const json_t *vals = q >= 0 ? c->enum_vals[c->s->prop[nd->first_prop + q]] : NULL;
        size_t i;
        const json_t *v;
        ok = vals && c->s->node[c->s->prop[nd->first_prop + q]].types == JT_STR;
        json_array_foreach(vals, i, v) {
            if (!ok) break;
            ok = !json_object_get(seen, json_string_value(v));
            json_object_set_new(seen, json_string_value(v), json_true());
        }
    }
    json_decref(seen);
    return ok;
}

/* Several object branches: a JS_DISC on the first property that tells
 * them apart; the output writes it first. */
static int make_disc(cctx *c, const int *br, int n, const char *path) {
    const js_node *first = &c->s->node[br[0]];
    const char *name = NULL;
    for (int q = 0; first->kind == JS_VALUE && q < first->n_props && !name; q++)
        if (disc_candidate(c, br, n, c->s->prop_name[first->first_prop + q])) name = c->s->prop_name[first->first_prop + q];
    if (!name)
        return fail(c, "unsupported anyOf/oneOf at %s: object branches must share a property whose const/enum strings tell them apart", path);
    int id = node_new(c, JS_DISC), keys = trie_new(c, 0), vals = trie_new(c, 0), vn = node_new(c, JS_VALUE);
    if (id < 0 || keys < 0 || vals < 0 || vn < 0) return -1;
    c->s->node[vn].types = JT_STR, c->s->node[vn].enums = vals;
    c->s->node[id].items = (uint16_t)vn; /* the discriminator's value */
    json_t *jn = json_string(name);
    trie_add_value(c, keys, jn, 0);
    json_decref(jn);
    c->s->node[id].types = JT_OBJ;
    c->s->node[id].keys = keys, c->s->node[id].enums = vals, c->s->node[id].first_disc = (uint16_t)c->s->n_disc;
    int term = 0;
    for (int b = 0; b < n; b++) {
        const js_node *nd = &c->s->node[br[b]];
        int q = prop_index(c->s, nd, name);
        size_t i;
        const json_t *v;
        json_array_foreach(c->enum_vals[c->s->prop[nd->first_prop + q]], i, v) {
            if (trie_add_value(c, vals, v, term++) < 0) return -1;
            disc_add(c, (uint16_t)br[b], (uint16_t)q);
        }
    }
    return c->failed ? -1 : id;
}

static int compile_union(cctx *c, const json_t *branches, const char *kw, const char *path, int depth) {
    if (!json_is_array(branches) || !json_array_size(branches)) return fail(c, "'%s' must be a non-empty array at %s", kw, path);
    int n = (int)json_array_size(branches), n_obj = 0, objs[64];
    if (n > 64) return fail(c, "schema too large: more than 64 branches in '%s' at %s", kw, path);
    uint16_t slot[JS_N_SLOTS];
    for (int i = 0; i < JS_N_SLOTS; i++) slot[i] = JS_NONE;
    for (int i = 0; i < n; i++) {
        char idx[16];
        snprintf(idx, sizeof idx, "%d", i);
        int b = child(c, json_array_get(branches, (size_t)i), path, kw[0] == 'a' ? "anyOf/%s" : "oneOf/%s", idx, depth);
        if (b < 0) return -1;
        const js_node *nd = &c->s->node[b];
        if (nd->kind == JS_ANY) return b;          /* one branch takes anything */
        for (int s = 0; s < JS_N_SLOTS; s++) {
            int b2 = nd->kind == JS_UNION ? nd->slot[s] : b;
            if (b2 == JS_NONE || (nd->kind != JS_UNION && !slot_types(nd, s))) continue;
            if (s == JS_SLOT_OBJ && n_obj < 64) objs[n_obj++] = b2;
            else if (slot[s] != JS_NONE && slot[s] != b2)
                return fail(c, "unsupported %s at %s: branches overlap in JSON type (allowed: different types, or objects told apart by a const property)", kw, path);
            slot[s] = (uint16_t)b2;
        }
    }
    if (n_obj > 1) {
        int d = make_disc(c, objs, n_obj, path);
        if (d < 0) return -1;
        slot[JS_SLOT_OBJ] = (uint16_t)d;
    }
    int id = node_new(c, JS_UNION);
    if (id < 0) return -1;
    memcpy(c->s->node[id].slot, slot, sizeof slot);
    for (int s = 0; s < JS_N_SLOTS; s++)
        if (slot[s] != JS_NONE) c->s->node[id].types |= (uint8_t)(s == JS_SLOT_NUM ? c->s->node[slot[s]].types & (JT_INT | JT_NUM) : (1 << (s < 3 ? s : s + 1)));
    return id;
}

/* ---- entry points -------------------------------------------------------------------- */

static int root_takes_object(const json_schema *s) {
    const js_node *r = &s->node[s->root];
    if (r->kind == JS_UNION) return r->slot[JS_SLOT_OBJ] != JS_NONE;
    return r->kind == JS_ANY || r->kind == JS_DISC || (r->types & JT_OBJ);
}

json_schema *json_schema_compile(const json_t *schema, char *why, size_t cap) {
    cctx c = {.doc = schema, .why = why, .cap = cap};
    c.s = xcalloc(1, sizeof *c.s);
    atomic_init(&c.s->refs, 1);
    int root = compile(&c, schema, "#", 0);
    if (root >= 0) {
        c.s->root = root;
        if (!root_takes_object(c.s)) root = fail(&c, "the root schema must allow an object (the reply is one JSON object)");
    }
    for (int i = 0; i < c.s->n_nodes; i++) json_decref(c.enum_vals[i]);
    free(c.enum_vals);
    if (root < 0) {
        json_schema_free(c.s);
        return NULL;
    }
    return c.s;
}

/* One call: {"name": {"const": NAME}, <args_key>: PARAMETERS}. */
static json_t *call_schema(const json_t *tool, const char *args_key) {
    const json_t *fn = json_object_get(tool, "function");
    if (!json_is_object(fn)) fn = tool;
    const json_t *params = json_object_get(fn, "parameters");
    if (!params || json_is_null(params)) params = json_object_get(fn, "input_schema");
    json_t *args = params && !json_is_null(params) ? json_deep_copy(params) : json_pack("{s:s}", "type", "object");
    return json_pack("{s:s,s:{s:{s:O},s:o},s:[s,s],s:b}", "type", "object", "properties", "name", "const",
                     json_object_get(fn, "name"), args_key, args, "required", "name", args_key,
                     "additionalProperties", 0);
}

/* The call schemas of the declared tools (only `forced`, when set). */
static json_t *call_schemas(const json_t *tools, const char *forced, const char *args_key) {
    json_t *calls = json_array(), *t;
    size_t i;
    json_array_foreach(tools, i, t) {
        const json_t *fn = json_object_get(t, "function");
        const char *name = json_string_value(json_object_get(json_is_object(fn) ? fn : t, "name"));
        if (name && (!forced || !strcmp(name, forced))) json_array_append_new(calls, call_schema(t, args_key));
    }
    return calls;
}

json_schema *json_schema_tool_call(const json_t *tools, const char *forced, const char *args_key, char *why,
                                   size_t cap) {
    json_t *calls = call_schemas(tools, forced, args_key);
    json_t *sch = json_array_size(calls) == 1 ? json_incref(json_array_get(calls, 0)) : json_pack("{s:O}", "anyOf", calls);
    json_decref(calls);
    json_schema *s = json_schema_compile(sch, why, cap);
    json_decref(sch);
    return s;
}

json_schema *json_schema_tools(const json_t *tools, const char *forced, int required, char *why, size_t cap) {
    json_t *calls = call_schemas(tools, forced, "arguments");
    json_t *list = json_pack("{s:s,s:{s:o},s:i}", "type", "array", "items", "anyOf", calls, "minItems", 1);
    json_t *sch = json_pack("{s:s,s:{s:o},s:b,s:i}", "type", "object", "properties", "tool_calls", list,
                            "additionalProperties", 0, "minProperties", 1);
    if (required) json_object_set_new(sch, "required", json_pack("[s]", "tool_calls"));
    else json_object_set_new(json_object_get(sch, "properties"), "content", json_pack("{s:s}", "type", "string"));
    json_schema *s = json_schema_compile(sch, why, cap);
    json_decref(sch);
    return s;
}

json_schema *json_schema_ref(json_schema *s) {
    if (s) atomic_fetch_add(&s->refs, 1);
    return s;
}

void json_schema_free(json_schema *s) {
    if (!s || atomic_fetch_sub(&s->refs, 1) > 1) return;
    for (int i = 0; i < s->n_prop; i++) free(s->prop_name[i]);
    free(s->prop_name), free(s->prop), free(s->node), free(s->trie), free(s->disc_branch), free(s->disc_prop);
    free(s);
}

int json_schema_n_nodes(const json_schema *s) { return s->n_nodes; }
