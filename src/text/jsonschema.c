/* jsonschema.c - compiles a JSON Schema into the nodes, tries and string
 * automata the guard walks (see jsonschema.h for what is enforced and
 * jsonschema_int.h for the compiled form).
 *
 * One recursive pass over the schema: each subschema becomes a node. A
 * $ref compiles its target once, to a node every use shares (so recursive
 * schemas are finite graphs); allOf, and constraints beside a $ref, are
 * merged into one schema first (jsonschema_merge.c); constraints beside
 * anyOf/oneOf are merged into each branch; anyOf and oneOf become a
 * JS_UNION keyed by the first byte of the value, or a JS_DISC when several
 * object branches are told apart by one property. Then: refs are resolved
 * to their targets, and each node learns how deep its shortest value
 * nests (mind*), which keeps recursion from dead ends. Keywords that are
 * not enforced are recorded with their place (json_schema_unenforced).
 * Refusals are for malformed schemas, limits and schemas no value
 * satisfies. Does not: validate values (the guard does, as they are
 * generated). */
#include "text/jsonschema_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "base/utf8.h"

#define MAX_NOTES 16 /* unenforced keywords kept (the rest are counted) */
#define SHOW_NOTES 4 /* of which json_schema_unenforced names */

typedef struct cctx {
    json_schema *s;
    const json_t *doc;      /* the whole schema */
    const json_t *base;     /* the resource local $refs resolve in: doc, or the nearest subschema with an $id */
    json_t **enum_vals;     /* per node: its allowed values (JS_DISC uses them) */
    int cap_nodes, cap_prop, cap_trie, cap_disc, cap_str, cap_dfa;
    const json_t **memo;    /* $ref targets compiled so far ... */
    int *memo_node;         /* ... and their JS_REF nodes */
    int n_memo, cap_memo;
    char notes[MAX_NOTES][160];
    int n_notes, n_more;
    int nest; /* subschemas being compiled, one inside the other */
    char *why;
    size_t cap;
    int failed;
} cctx;

#define MAX_NEST 128 /* subschema nesting (the compiler recurses on it) */
#define TOOL_ID "strata:tool:" /* $id given to each tool's parameters (call_schema) */

static int fail(cctx *c, const char *fmt, ...) {
    if (c->failed) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->why, c->cap, fmt, ap);
    va_end(ap);
    c->failed = 1;
    return -1;
}

/* Records a keyword left unenforced ("pattern at #/properties/zip"). */
static void note(cctx *c, const char *fmt, ...) {
    char buf[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    for (int i = 0; i < c->n_notes; i++)
        if (!strcmp(c->notes[i], buf)) return;
    if (c->n_notes < MAX_NOTES) memcpy(c->notes[c->n_notes++], buf, sizeof buf);
    else c->n_more++;
}

/* ---- growing the tables ------------------------------------------------- */

static int node_new(cctx *c, int kind) {
    json_schema *s = c->s;
    if (s->n_nodes >= JSON_SCHEMA_MAX_NODES)
        return fail(c, "schema too large: more than %d nodes", JSON_SCHEMA_MAX_NODES);
    if (s->n_nodes == c->cap_nodes) {
        c->cap_nodes = mem_grown_cap(c->cap_nodes, s->n_nodes + 1, 64);
        s->node = xrealloc(s->node, (size_t)c->cap_nodes * sizeof *s->node);
        c->enum_vals = xrealloc(c->enum_vals, (size_t)c->cap_nodes * sizeof *c->enum_vals);
    }
    js_node *n = &s->node[s->n_nodes];
    memset(n, 0, sizeof *n);
    n->kind = (uint8_t)kind;
    n->keys = n->enums = -1;
    n->addl = n->items = n->str = n->pnames = JS_NONE;
    n->max_props = n->max_items = UINT32_MAX;
    for (int i = 0; i < JS_N_SLOTS; i++) n->slot[i] = JS_NONE;
    c->enum_vals[s->n_nodes] = NULL;
    return s->n_nodes++;
}

/* A node no value satisfies (false, or contradicting keywords). */
static int never_node(cctx *c) { return node_new(c, JS_VALUE); }

static int trie_new(cctx *c, uint8_t byte) {
    json_schema *s = c->s;
    if (s->n_trie >= JSON_SCHEMA_MAX_TRIE)
        return fail(c, "schema too large: property names and enum values over %d bytes", JSON_SCHEMA_MAX_TRIE);
    XGROW(s->trie, c->cap_trie, s->n_trie + 1, 256);
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
        c->cap_prop = mem_grown_cap(c->cap_prop, s->n_prop + 1, 64);
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
        c->cap_disc = mem_grown_cap(c->cap_disc, s->n_disc + 1, 16);
        s->disc_branch = xrealloc(s->disc_branch, (size_t)c->cap_disc * sizeof(uint16_t));
        s->disc_prop = xrealloc(s->disc_prop, (size_t)c->cap_disc * sizeof(uint16_t));
    }
    s->disc_branch[s->n_disc] = branch;
    s->disc_prop[s->n_disc++] = prop;
}

static int str_new(cctx *c, js_str v) {
    json_schema *s = c->s;
    XGROW(s->str, c->cap_str, s->n_str + 1, 16);
    s->str[s->n_str] = v;
    return s->n_str++;
}

static int dfa_add(cctx *c, jre_dfa d) {
    json_schema *s = c->s;
    XGROW(s->dfa, c->cap_dfa, s->n_dfa + 1, 8);
    s->dfa[s->n_dfa] = d;
    return s->n_dfa++;
}

/* ---- keywords --------------------------------------------------------------- */

/* Keywords of validation that are not enforced: compiled as annotations
 * and reported. Any other keyword not enforced below constrains nothing
 * (titles, descriptions, vendor extensions) and is ignored, as validators
 * do. */
static const char *const UNENFORCED[] = {
    "patternProperties", "not", "if", "then", "else", "prefixItems", "uniqueItems", "contains", "minContains",
    "maxContains", "dependentRequired", "dependentSchemas", "dependencies", "unevaluatedProperties",
    "unevaluatedItems", "additionalItems", "$dynamicRef", "$recursiveRef", "contentSchema", NULL};
static const char *const CONSTRAINTS[] = {
    "type", "properties", "required", "additionalProperties", "minProperties", "maxProperties", "items",
    "minItems", "maxItems", "enum", "const", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "anyOf", "oneOf", "allOf", "$ref", "minLength", "maxLength", "pattern", "format", "propertyNames", "multipleOf", NULL};

static int in_list(const char *const *list, const char *k) {
    for (int i = 0; list[i]; i++)
        if (!strcmp(list[i], k)) return 1;
    return 0;
}

static void note_keywords(cctx *c, const json_t *sch, const char *path) {
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)sch, k, v) if (in_list(UNENFORCED, k)) note(c, "%s at %s", k, path);
    if (json_object_get(sch, JSM_ONEOF_CUT)) note(c, "oneOf at %s (allOf of oneOfs: only the first 64 combinations)", path);
}

/* Constraining keywords of sch other than `except` (and nullable). */
static int n_constraints(const json_t *sch, const char *except) {
    int n = 0;
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)sch, k, v) n += in_list(CONSTRAINTS, k) && strcmp(k, except);
    return n;
}

static int type_bit(const char *name) {
    static const char *const NAMES[] = {"object", "array", "string", "integer", "number", "boolean", "null"};
    for (int i = 0; i < 7; i++)
        if (!strcmp(name, NAMES[i])) return 1 << i;
    return !strcmp(name, "never") ? 128 : 0; /* jsonschema_merge.c: an empty intersection */
}

static int parse_types(cctx *c, const json_t *t, const char *path) {
    if (json_is_string(t)) {
        int b = type_bit(json_string_value(t));
        return b ? b & JT_ALL : fail(c, "unknown type '%s' at %s", json_string_value(t), path);
    }
    int types = 0;
    size_t i;
    const json_t *e;
    if (!json_is_array(t) || !json_array_size(t)) return fail(c, "'type' must be a name or a list of names at %s", path);
    json_array_foreach(t, i, e) {
        int b = json_is_string(e) ? type_bit(json_string_value(e)) : 0;
        if (!b) return fail(c, "unknown type in 'type' at %s", path);
        types |= b & JT_ALL;
    }
    return types;
}

static int value_type(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return JT_OBJ;
    case JSON_ARRAY: return JT_ARR;
    case JSON_STRING: return JT_STR;
    case JSON_INTEGER: return JT_INT;
    case JSON_REAL: return JT_NUM;
    case JSON_TRUE: case JSON_FALSE: return JT_BOOL;
    default: return JT_NULL;
    }
}

/* A non-negative integer keyword, or dflt when absent. */
static int get_count(cctx *c, const json_t *sch, const char *k, uint32_t dflt, uint32_t *out, const char *path) {
    const json_t *v = json_object_get(sch, k);
    *out = dflt;
    if (!v) return 0;
    if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) && json_real_value(v) >= 0) {
        double x = json_real_value(v);
        *out = x > UINT32_MAX - 1 ? UINT32_MAX - 1 : (uint32_t)x;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0) return fail(c, "'%s' must be a non-negative integer at %s", k, path);
    *out = json_integer_value(v) > UINT32_MAX - 1 ? UINT32_MAX - 1 : (uint32_t)json_integer_value(v);
    return 0;
}

/* ---- the recursion ------------------------------------------------------------- */

static int compile(cctx *c, const json_t *sch, const char *path);

static void subpath(char *out, size_t cap, const char *path, const char *fmt, const char *a) {
    snprintf(out, cap, "%s/", path);
    size_t n = strlen(out);
    snprintf(out + n, cap - n, fmt, a);
}

static int child(cctx *c, const json_t *sch, const char *path, const char *fmt, const char *a) {
    char sub[512];
    subpath(sub, sizeof sub, path, fmt, a);
    return compile(c, sch, sub);
}

/* A $ref alone: its target compiled once, shared by every use. The use
 * gets a JS_REF node now (the target may be on its way, for recursion);
 * fix_refs points uses at targets at the end. */
static int compile_ref(cctx *c, const json_t *sch, const char *path) {
    const char *ref = json_string_value(json_object_get(sch, "$ref"));
    if (!ref) return fail(c, "'$ref' must be a string at %s", path);
    const json_t *t = jsm_resolve_ref(&(jsm_roots){c->base, c->doc}, ref);
    if (!t) return fail(c, "unresolvable $ref '%s' at %s (only local ones: #, #/$defs/NAME, #/definitions/NAME, ...)", ref, path);
    for (int i = 0; i < c->n_memo; i++)
        if (c->memo[i] == t) return c->memo_node[i];
    int r = node_new(c, JS_REF);
    if (r < 0) return -1;
    if (c->n_memo == c->cap_memo) {
        c->cap_memo = mem_grown_cap(c->cap_memo, c->n_memo + 1, 16);
        c->memo = xrealloc(c->memo, (size_t)c->cap_memo * sizeof *c->memo);
        c->memo_node = xrealloc(c->memo_node, (size_t)c->cap_memo * sizeof *c->memo_node);
    }
    c->memo[c->n_memo] = t, c->memo_node[c->n_memo++] = r;
    int id = compile(c, t, ref);
    if (id < 0) return -1;
    c->s->node[r].items = (uint16_t)id;
    return r;
}

/* The node a JS_REF stands for, or -1 while its target is being compiled
 * (or for a cycle of refs with nothing between). */
static int deref(const json_schema *s, int n) {
    for (int hops = 0; n != JS_NONE && s->node[n].kind == JS_REF; hops++) {
        if (hops > s->n_nodes) return -1;
        n = s->node[n].items;
    }
    return n == JS_NONE ? -1 : n;
}

static int compile_object(cctx *c, int id, const json_t *sch, const char *path);
static int compile_array(cctx *c, int id, const json_t *sch, const char *path);
static int compile_scalars(cctx *c, int id, const json_t *sch, const char *path);
static int compile_string(cctx *c, const json_t *sch, const char *path, int *impossible);
static int compile_union(cctx *c, const json_t *branches, const char *kw, const char *path);

static int infer_types(const json_t *sch) {
    static const char *const OBJ[] = {"properties", "required", "additionalProperties", "minProperties", "maxProperties", "propertyNames", NULL};
    static const char *const ARR[] = {"items", "minItems", "maxItems", NULL};
    static const char *const NUM[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", NULL};
    static const char *const STR[] = {"minLength", "maxLength", "pattern", "format", NULL};
    const char *const *lists[] = {OBJ, ARR, NUM, STR};
    const int bits[] = {JT_OBJ, JT_ARR, JT_NUM, JT_STR};
    int t = 0;
    for (int l = 0; l < 4; l++)
        for (int i = 0; lists[l][i]; i++)
            if (json_object_get(sch, lists[l][i])) t |= bits[l];
    return t;
}

static int enum_types(const json_t *sch) {
    const json_t *en = json_object_get(sch, "enum"), *cn = json_object_get(sch, "const"), *v;
    int t = cn ? value_type(cn) : 0;
    size_t i;
    json_array_foreach(en, i, v) t |= value_type(v);
    if (t & JT_NUM) t |= JT_INT;
    return t ? t : JT_ALL;
}

/* A schema with type, enum/const and per-type keywords. */
static int compile_value(cctx *c, const json_t *sch, const char *path) {
    const json_t *type = json_object_get(sch, "type");
    int types = type ? parse_types(c, type, path) : infer_types(sch);
    if (types < 0) return -1;
    int has_enum = json_object_get(sch, "enum") || json_object_get(sch, "const");
    if (!type && !types && !has_enum) return node_new(c, JS_ANY); /* nullable alone adds nothing */
    if (!type && !types) types = enum_types(sch); /* an enum/const alone: the types of its values */
    if (json_is_true(json_object_get(sch, "nullable"))) types |= JT_NULL;
    if (types & JT_NUM) types |= JT_INT;
    int id = node_new(c, JS_VALUE);
    if (id < 0) return -1;
    c->s->node[id].types = (uint8_t)types;
    if (types & JT_STR) {
        int impossible = 0, st = compile_string(c, sch, path, &impossible);
        if (st < -1) return -1;
        if (impossible) c->s->node[id].types &= (uint8_t)~JT_STR;
        c->s->node[id].str = st < 0 ? JS_NONE : (uint16_t)st;
    }
    types = c->s->node[id].types;
    if ((types & JT_OBJ) && compile_object(c, id, sch, path) < 0) return -1;
    if ((types & JT_ARR) && compile_array(c, id, sch, path) < 0) return -1;
    if (compile_scalars(c, id, sch, path) < 0) return -1;
    return id;
}

/* allOf, or constraints beside a $ref: one merged schema. */
static int compile_merged(cctx *c, const json_t *sch, const char *path) {
    json_t *m = json_deep_copy(sch), *all = json_object_get(m, "allOf"), *v;
    json_incref(all);
    json_object_del(m, "allOf");
    json_t *base = json_object(), *r = jsm_merge(&(jsm_roots){c->base, c->doc}, base, m);
    json_decref(base), json_decref(m);
    size_t i;
    json_array_foreach(all, i, v) {
        json_t *n = r ? jsm_merge(&(jsm_roots){c->base, c->doc}, r, v) : NULL;
        json_decref(r);
        r = n;
    }
    json_decref(all);
    if (!r) return fail(c, "allOf/$ref at %s expands without end (a recursive $ref beside other keywords)", path);
    const char *ref = json_string_value(json_object_get(r, "$ref"));
    if (ref && !jsm_resolve_ref(&(jsm_roots){c->base, c->doc}, ref)) {
        fail(c, "unresolvable $ref '%s' at %s (only local ones: #, #/$defs/NAME, #/definitions/NAME, ...)", ref, path);
        json_decref(r); /* after: ref points into r */
        return -1;
    }
    int id = json_is_object(r) && (json_object_get(r, "allOf") || json_object_get(r, "$ref"))
                 ? fail(c, "allOf/$ref at %s could not be merged (a malformed allOf or $ref in a branch)", path)
                 : compile(c, r, path);
    json_decref(r);
    return id;
}

/* anyOf/oneOf beside other constraints: those merged into each branch. */
static int compile_distributed(cctx *c, const json_t *sch, const char *kw, const char *path) {
    json_t *rest = json_deep_copy(sch), *branches = json_array(), *b;
    json_object_del(rest, kw);
    size_t i;
    json_array_foreach(json_object_get(sch, kw), i, b) {
        json_t *m = jsm_merge(&(jsm_roots){c->base, c->doc}, rest, b);
        if (!m) {
            json_decref(rest), json_decref(branches);
            return fail(c, "%s at %s expands without end", kw, path);
        }
        json_array_append_new(branches, m);
    }
    json_decref(rest);
    int id = compile_union(c, branches, kw, path);
    json_decref(branches);
    return id;
}

static int compile_one(cctx *c, const json_t *sch, const char *path);

static int compile(cctx *c, const json_t *sch, const char *path) {
    if (c->failed) return -1;
    if (c->nest >= MAX_NEST) return fail(c, "schema nests deeper than %d subschemas at %s", MAX_NEST, path);
    const json_t *base = c->base;
    const char *idv = json_string_value(json_object_get(sch, "$id"));
    char tool_path[300];
    if (idv) c->base = sch; /* a resource of its own (merged copies have none) */
    if (idv && !strncmp(idv, TOOL_ID, strlen(TOOL_ID))) { /* places inside a tool's parameters: "tool NAME #/.." */
        snprintf(tool_path, sizeof tool_path, "tool %s #", idv + strlen(TOOL_ID));
        path = tool_path;
    }
    c->nest++;
    int id = compile_one(c, sch, path);
    c->nest--;
    c->base = base;
    return id;
}

static int compile_one(cctx *c, const json_t *sch, const char *path) {
    if (json_is_true(sch)) return node_new(c, JS_ANY);
    if (json_is_false(sch)) return never_node(c);
    if (!json_is_object(sch)) return fail(c, "a schema must be an object or a boolean at %s", path);
    note_keywords(c, sch, path);
    const json_t *all = json_object_get(sch, "allOf");
    if (all && !json_is_array(all)) return fail(c, "'allOf' must be an array at %s", path);
    const json_t *ref = json_object_get(sch, "$ref");
    if (ref && !json_is_string(ref)) return fail(c, "'$ref' must be a string at %s", path);
    if (all || (ref && n_constraints(sch, "$ref"))) return compile_merged(c, sch, path);
    if (json_object_get(sch, "$ref")) return compile_ref(c, sch, path);
    const char *kw = json_object_get(sch, "anyOf") ? "anyOf" : json_object_get(sch, "oneOf") ? "oneOf" : NULL;
    if (kw) {
        if (!json_is_array(json_object_get(sch, kw)) || !json_array_size(json_object_get(sch, kw)))
            return fail(c, "'%s' must be a non-empty array at %s", kw, path);
        if (n_constraints(sch, kw)) return compile_distributed(c, sch, kw, path);
        return compile_union(c, json_object_get(sch, kw), kw, path);
    }
    return compile_value(c, sch, path);
}

/* ---- strings: lengths, pattern, format -------------------------------------------- */

/* format names as patterns (jsonregex.h). Dates leave out February 29
 * (it depends on the year) and leap seconds: a narrowing. */
#define MD "((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))"
#define DATE "[1-9][0-9]{3}-" MD
#define TIME "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
#define H16 "[0-9a-fA-F]{1,4}"
static const char *const FORMATS[][2] = {
    {"date-time", "^" DATE "[Tt]" TIME "$"},
    {"date", "^" DATE "$"},
    {"time", "^" TIME "$"},
    {"email", "^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?"
              "(\\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*$"},
    {"uuid", "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"},
    {"ipv4", "^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])$"},
    {"ipv6", "^((" H16 ":){7}" H16 "|(" H16 ":){1,7}:|(" H16 ":){1,6}:" H16 "|(" H16 ":){1,5}(:" H16 "){1,2}|(" H16
             ":){1,4}(:" H16 "){1,3}|(" H16 ":){1,3}(:" H16 "){1,4}|(" H16 ":){1,2}(:" H16 "){1,5}|" H16 ":(:" H16
             "){1,6}|:((:" H16 "){1,7}|:))$"},
    {"uri", "^[A-Za-z][A-Za-z0-9+.-]*:([A-Za-z0-9._~:/?#@!$&'()*+,;=-]|\\[|\\]|%[0-9A-Fa-f]{2})*$"},
};

static const char *format_pattern(const char *name) {
    for (size_t i = 0; i < sizeof FORMATS / sizeof *FORMATS; i++)
        if (!strcmp(FORMATS[i][0], name)) return FORMATS[i][1];
    return NULL;
}

/* A string or a list of strings (merged allOf) as a list. */
static json_t *as_list(const json_t *v) {
    if (!v) return json_array();
    return json_is_array(v) ? json_incref((json_t *)v) : json_pack("[O]", v);
}

/* One automaton for every pattern and known format of sch, intersected
 * into *acc (-1: none yet). Unsupported ones are noted; a regex no string
 * matches sets *impossible. */
static int string_automata(cctx *c, const json_t *sch, const char *path, jre_dfa *acc, int *have, int *impossible) {
    const char *const KW[2] = {"pattern", "format"};
    for (int k = 0; k < 2; k++) {
        json_t *list = as_list(json_object_get(sch, KW[k])), *v;
        size_t i;
        json_array_foreach(list, i, v) {
            const char *text = json_string_value(v), *re = k ? (text ? format_pattern(text) : NULL) : text;
            if (!text) {
                json_decref(list);
                if (*have) jre_free(acc), *have = 0;
                return fail(c, "'%s' must be a string at %s", KW[k], path);
            }
            if (!re) {
                note(c, "format '%s' at %s", text, path);
                continue;
            }
            jre_dfa d, both;
            char why[128];
            int rc = jre_compile(re, &d, why, sizeof why);
            if (rc == JRE_EMPTY) *impossible = 1;
            if (rc) {
                if (rc != JRE_EMPTY) note(c, "%s at %s (%s)", KW[k], path, why);
                continue;
            }
            if (!*have) {
                *acc = d, *have = 1;
                continue;
            }
            rc = jre_intersect(acc, &d, &both);
            if (rc == JRE_EMPTY) *impossible = 1;
            if (rc == JRE_OK) jre_free(acc), *acc = both;
            else if (rc != JRE_EMPTY) note(c, "%s at %s (with another pattern: too large)", KW[k], path);
            jre_free(&d);
        }
        json_decref(list);
    }
    return 0;
}

/* minLength/maxLength/pattern/format of a string: a js_str index, -1 for
 * none, -2 on error. *impossible: no string satisfies them. */
static int compile_string(cctx *c, const json_t *sch, const char *path, int *impossible) {
    js_str k = {.dfa = -1};
    if (get_count(c, sch, "minLength", 0, &k.min, path) || get_count(c, sch, "maxLength", UINT32_MAX, &k.max, path))
        return -2;
    jre_dfa d;
    int have = 0;
    if (string_automata(c, sch, path, &d, &have, impossible)) return -2;
    if (*impossible || k.min > k.max) {
        if (have) jre_free(&d);
        *impossible = 1;
        return -1;
    }
    if (have && !jre_viable(&d, 0, 0, k.min, k.max)) {
        if (k.max < JRE_LEN_BITS || !jre_viable(&d, 0, 0, 0, UINT32_MAX)) { /* exact: no string */
            jre_free(&d);
            *impossible = 1;
            return -1;
        }
        note(c, "minLength/maxLength at %s (with a pattern, lengths of 64+ characters)", path);
        k.min = 0, k.max = UINT32_MAX;
    }
    if (have) k.dfa = dfa_add(c, d);
    if (k.dfa < 0 && k.min == 0 && k.max == UINT32_MAX) return -1;
    return str_new(c, k);
}

/* Does string value v satisfy js_str st (JS_NONE: yes)? */
static int str_ok(const json_schema *s, int st, const json_t *v) {
    if (st == JS_NONE) return 1;
    const js_str *k = &s->str[st];
    const char *t = json_string_value(v);
    size_t n = json_string_length(v);
    size_t len = utf8_chars(t, n);
    if (len < k->min || len > k->max) return 0;
    return k->dfa < 0 || jre_matches(&s->dfa[k->dfa], t, n);
}

/* ---- objects and arrays ---------------------------------------------------------- */

/* propertyNames: a js_str for the keys, or an enum of names (*names).
 * Other keywords in it are noted. */
static int compile_pnames(cctx *c, const json_t *sch, const char *path, const json_t **names) {
    const json_t *pn = json_object_get(sch, "propertyNames");
    *names = NULL;
    if (!pn || json_is_true(pn)) return JS_NONE;
    if (json_is_false(pn)) return -3; /* no name at all: only {} */
    char sub[512];
    subpath(sub, sizeof sub, path, "%s", "propertyNames");
    if (!json_is_object(pn)) {
        note(c, "propertyNames at %s", path);
        return JS_NONE;
    }
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)pn, k, v) if (in_list(CONSTRAINTS, k) && strcmp(k, "minLength") && strcmp(k, "maxLength") &&
                                                strcmp(k, "pattern") && strcmp(k, "format") && strcmp(k, "enum") &&
                                                strcmp(k, "type")) note(c, "%s at %s", k, sub);
    *names = json_object_get(pn, "enum");
    if (!json_is_array(*names)) *names = NULL;
    int impossible = 0, st = compile_string(c, pn, sub, &impossible);
    if (st < -1) return -2;
    if (impossible) return -3; /* no name at all */
    return st < 0 ? JS_NONE : st;
}

/* A name allowed by propertyNames. */
static int name_ok(const json_schema *s, int pn, const json_t *names, const char *name) {
    json_t *js = json_string(name);
    int ok = str_ok(s, pn, js);
    if (names) {
        int found = 0;
        size_t i;
        const json_t *v;
        json_array_foreach(names, i, v) found |= json_equal(v, js);
        ok &= found;
    }
    json_decref(js);
    return ok;
}

/* Properties and the required ones (a required name without a schema is
 * a property of any value; an enum of propertyNames on an object without
 * properties declares them, held to additionalProperties). */
static int compile_props(cctx *c, int id, const json_t *sch, const char *path, int pn, const json_t *names) {
    const json_t *props = json_object_get(sch, "properties"), *req = json_object_get(sch, "required"), *v;
    const json_t *ap = json_object_get(sch, "additionalProperties");
    if (props && !json_is_object(props)) return fail(c, "'properties' must be an object at %s", path);
    if (req && !json_is_array(req)) return fail(c, "'required' must be an array at %s", path);
    json_t *all = json_object();
    const char *k;
    size_t i;
    json_object_foreach((json_t *)props, k, v) json_object_set(all, k, (json_t *)v);
    json_array_foreach(req, i, v) if (json_is_string(v) && !json_object_get(all, json_string_value(v)))
        json_object_set_new(all, json_string_value(v), ap ? json_incref((json_t *)ap) : json_true());
    if (names && !props) {
        json_array_foreach(names, i, v) if (json_is_string(v) && !json_object_get(all, json_string_value(v)))
            json_object_set_new(all, json_string_value(v), ap ? json_incref((json_t *)ap) : json_true());
    }
    if (json_object_size(all) > JSON_SCHEMA_MAX_PROPS) {
        json_decref(all);
        return fail(c, "schema too large: more than %d properties at %s", JSON_SCHEMA_MAX_PROPS, path);
    }
    int n = (int)json_object_size(all), first = c->s->n_prop;
    /* Declared keys only; an empty "properties" without an
     * additionalProperties schema declares none (a tool that takes no
     * arguments: {"type": "object", "properties": {}}). */
    int closed = n || json_is_false(ap) || names || (props && !json_is_object(ap));
    int root = closed ? trie_new(c, 0) : -1;
    for (int p = 0; p < n; p++) prop_new(c, "");
    int p = 0;
    json_object_foreach(all, k, v) {
        free(c->s->prop_name[first + p]);
        c->s->prop_name[first + p] = xstrdup(k);
        int vn = name_ok(c->s, pn, names, k) ? child(c, v, path, "properties/%s", k) : never_node(c);
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

static int compile_object(cctx *c, int id, const json_t *sch, const char *path) {
    const json_t *names;
    int pn = compile_pnames(c, sch, path, &names);
    if (pn == -2) return -1;
    json_t *none = NULL;
    if (pn == -3) names = none = json_array(), pn = JS_NONE; /* no key can be written */
    int rc = compile_props(c, id, sch, path, pn, names);
    json_decref(none);
    if (rc < 0) return -1;
    const json_t *ap = json_object_get(sch, "additionalProperties");
    if (c->s->node[id].keys < 0) {
        int a = ap && !json_is_boolean(ap) ? child(c, ap, path, "%s", "additionalProperties") : node_new(c, JS_ANY);
        if (a < 0) return -1;
        c->s->node[id].addl = (uint16_t)a;
        c->s->node[id].pnames = (uint16_t)pn;
    }
    js_node *nd = &c->s->node[id];
    if (get_count(c, sch, "minProperties", 0, &nd->min_props, path) ||
        get_count(c, sch, "maxProperties", UINT32_MAX, &nd->max_props, path))
        return -1;
    if (nd->keys < 0 && nd->min_props > 0) /* keys are not remembered: a repeated one counts twice */
        note(c, "minProperties at %s (an object of any keys may repeat a key)", path);
    int n_req = __builtin_popcountll(nd->required);
    if (nd->min_props > nd->max_props || (uint32_t)n_req > nd->max_props || (nd->keys >= 0 && nd->min_props > nd->n_props))
        nd->types &= (uint8_t)~JT_OBJ; /* no object: mind says so where it matters */
    return 0;
}

static int compile_array(cctx *c, int id, const json_t *sch, const char *path) {
    const json_t *items = json_object_get(sch, "items");
    if (json_is_array(items)) note(c, "items (a list) at %s", path);
    int it = items && !json_is_array(items) ? child(c, items, path, "%s", "items") : node_new(c, JS_ANY);
    if (it < 0) return -1;
    js_node *nd = &c->s->node[id];
    nd->items = (uint16_t)it;
    if (get_count(c, sch, "minItems", 0, &nd->min_items, path) || get_count(c, sch, "maxItems", UINT32_MAX, &nd->max_items, path))
        return -1;
    if (nd->min_items > nd->max_items) nd->types &= (uint8_t)~JT_ARR;
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
    if ((nd->has_lo || nd->has_hi) && nd->ilo > nd->ihi) nd->types &= (uint8_t)~(JT_INT | JT_NUM); /* no integer in bounds */
    return 0;
}

/* multipleOf: a whole number k is enforced on integers (the value is then
 * written as an integer); a fractional one is reported. */
static int compile_multiple(cctx *c, int id, const json_t *sch, const char *path) {
    const json_t *m = json_object_get(sch, "multipleOf");
    if (!m) return 0;
    if (json_is_array(m)) { /* several, from allOf: the first enforced, the rest reported */
        note(c, "multipleOf (several) at %s", path);
        m = json_array_get(m, 0);
    }
    if (!json_is_number(m) || json_number_value(m) <= 0) return fail(c, "'multipleOf' must be a number above 0 at %s", path);
    double k = json_number_value(m);
    js_node *nd = &c->s->node[id];
    if (k != floor(k) || k > 1e15) {
        if (nd->types & (JT_INT | JT_NUM)) note(c, "multipleOf at %s (not a whole number)", path);
        return 0;
    }
    nd->mult = (int64_t)k;
    if (nd->types & JT_NUM) nd->types &= (uint8_t)~JT_NUM;
    double first = ceil(nd->ilo / k) * k;
    if (first > nd->ihi) nd->types &= (uint8_t)~JT_INT; /* no multiple in bounds */
    return 0;
}

static int in_bounds(const js_node *nd, double x) {
    if (nd->has_lo && (nd->lo_excl ? x <= nd->lo : x < nd->lo)) return 0;
    if (nd->has_hi && (nd->hi_excl ? x >= nd->hi : x > nd->hi)) return 0;
    return 1;
}

/* Does v satisfy what node nd enforces on scalars (types, bounds, string
 * constraints)? For enum filtering and oneOf overlap checks. */
static int scalar_ok(const json_schema *s, const js_node *nd, const json_t *v) {
    int t = value_type(v);
    if (!(nd->types & t) || (t == JT_NUM && !(nd->types & JT_NUM))) return 0;
    if ((t & (JT_INT | JT_NUM)) && (nd->has_lo || nd->has_hi) && !in_bounds(nd, json_number_value(v))) return 0;
    if ((t & (JT_INT | JT_NUM)) && nd->mult && fmod(json_number_value(v), (double)nd->mult) != 0) return 0;
    return t != JT_STR || str_ok(s, nd->str, v);
}

/* enum/const: the values allowed by the other keywords, into a trie
 * (objects and arrays too: written as their compact text). Bounds and
 * string constraints then stop applying: the trie alone decides. */
static int compile_enum(cctx *c, int id, const json_t *sch, const char *path) {
    const json_t *en = json_object_get(sch, "enum"), *cn = json_object_get(sch, "const"), *v;
    if (en && !json_is_array(en)) return fail(c, "'enum' must be an array at %s", path);
    json_t *keep = json_array();
    size_t i;
    json_t *vals = json_array();
    json_array_foreach(en, i, v) json_array_append(vals, (json_t *)v);
    if (cn) json_array_append(vals, (json_t *)cn);
    int types = 0;
    int shaped = infer_types(sch) & (JT_OBJ | JT_ARR); /* objects/arrays with constraints of their own */
    json_array_foreach(vals, i, v) {
        if (cn && !json_equal(v, cn)) continue; /* enum and const together: both */
        if (!scalar_ok(c->s, &c->s->node[id], v)) continue;
        if ((value_type(v) & (JT_OBJ | JT_ARR)) && shaped) {
            note(c, "%s (an object or array beside other constraints) at %s", cn ? "const" : "enum", path);
            continue;
        }
        json_array_append(keep, (json_t *)v);
        types |= value_type(v) == JT_NUM ? JT_NUM | JT_INT : value_type(v);
    }
    json_decref(vals);
    js_node *nd = &c->s->node[id];
    nd->has_lo = nd->has_hi = 0, nd->mult = 0, nd->str = JS_NONE, nd->types = (uint8_t)types;
    if (!json_array_size(keep)) { /* no value: a node of nothing */
        json_decref(keep);
        return 0;
    }
    int root = trie_new(c, 0);
    json_array_foreach(keep, i, v) if (root < 0 || trie_add_value(c, root, v, (int)i) < 0) break;
    c->s->node[id].enums = root;
    c->enum_vals[id] = keep;
    return c->failed ? -1 : 0;
}

static int compile_scalars(cctx *c, int id, const json_t *sch, const char *path) {
    js_node *nd = &c->s->node[id];
    if (compile_bounds(c, nd, sch, path) || compile_multiple(c, id, sch, path)) return -1;
    nd = &c->s->node[id];
    if ((nd->has_lo || nd->has_hi || nd->mult) && !(nd->types & JT_INT)) nd->has_lo = nd->has_hi = 0, nd->mult = 0;
    if (!json_object_get(sch, "enum") && !json_object_get(sch, "const")) return 0;
    return compile_enum(c, id, sch, path);
}

/* ---- anyOf / oneOf ------------------------------------------------------------------- */

static const int SLOT_BITS[JS_N_SLOTS] = {JT_OBJ, JT_ARR, JT_STR, JT_INT | JT_NUM, JT_BOOL, JT_NULL};

static int slot_types(const js_node *nd, int slot) {
    if (nd->kind == JS_DISC) return slot == JS_SLOT_OBJ;
    return (nd->types & SLOT_BITS[slot]) != 0;
}

/* The property of object node b named name, or -1. */
static int prop_index(const json_schema *s, const js_node *b, const char *name) {
    for (int q = 0; q < b->n_props; q++)
        if (!strcmp(s->prop_name[b->first_prop + q], name)) return q;
    return -1;
}

/* Can property `name` tell the branches apart? Each branch declares it
 * required, as an enum/const of strings only, and no value is in two
 * branches. */
static int disc_candidate(cctx *c, const int *br, int n, const char *name) {
    json_t *seen = json_object();
    int ok = 1;
    for (int b = 0; b < n && ok; b++) {
        const js_node *nd = &c->s->node[br[b]];
        int q = nd->kind == JS_VALUE && nd->keys >= 0 ? prop_index(c->s, nd, name) : -1;
        int vn = q >= 0 ? deref(c->s, c->s->prop[nd->first_prop + q]) : -1;
        const json_t *vals = vn >= 0 ? c->enum_vals[vn] : NULL;
        size_t i;
        const json_t *v;
        ok = vals && c->s->node[vn].types == JT_STR;
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
 * them apart (the output writes it first), or -2 when none does. */
static int make_disc(cctx *c, const int *br, int n) {
    const js_node *first = &c->s->node[br[0]];
    const char *name = NULL;
    for (int q = 0; first->kind == JS_VALUE && q < first->n_props && !name; q++)
        if (disc_candidate(c, br, n, c->s->prop_name[first->first_prop + q])) name = c->s->prop_name[first->first_prop + q];
    if (!name) return -2;
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
        json_array_foreach(c->enum_vals[deref(c->s, c->s->prop[nd->first_prop + q])], i, v) {
            if (trie_add_value(c, vals, v, term++) < 0) return -1;
            disc_add(c, (uint16_t)br[b], (uint16_t)q);
        }
    }
    c->s->node[id].n_props = (uint16_t)term; /* JS_DISC: its table entries */
    return c->failed ? -1 : id;
}

static int in_values(const json_t *list, const json_t *v) {
    size_t i;
    const json_t *w;
    json_array_foreach(list, i, w) if (json_equal(v, w)) return 1;
    return 0;
}

/* Every value the output can take at slot under node p fails node o
 * (oneOf needs it). Checked where it is cheap to know; 0 means "maybe
 * not". */
static int disjoint(cctx *c, int p, int o, int slot) {
    const json_schema *s = c->s;
    const js_node *P = &s->node[p], *O = &s->node[o];
    if (P->kind != JS_VALUE || O->kind != JS_VALUE) return 0;
    if (c->enum_vals[p]) { /* each value P can write fails O */
        size_t i;
        const json_t *v;
        json_array_foreach(c->enum_vals[p], i, v) {
            if (!(SLOT_BITS[slot] & value_type(v))) continue;
            if (c->enum_vals[o] ? in_values(c->enum_vals[o], v) : scalar_ok(s, O, v)) return 0;
        }
        return 1;
    }
    if (slot == JS_SLOT_NUM && !(P->types & JT_NUM) && (P->has_lo || P->has_hi) && (O->has_lo || O->has_hi) && !c->enum_vals[o])
        return P->ihi < O->ilo || P->ilo > O->ihi;
    if (slot != JS_SLOT_OBJ || P->keys < 0 || O->keys < 0) return 0;
    for (int q = 0; q < P->n_props; q++) /* P writes a required key O has not declared */
        if (((P->required >> q) & 1) && prop_index(s, O, s->prop_name[P->first_prop + q]) < 0) return 1;
    for (int q = 0; q < O->n_props; q++) /* O requires a key P never writes */
        if (((O->required >> q) & 1) && prop_index(s, P, s->prop_name[O->first_prop + q]) < 0) return 1;
    return 0;
}

static void compute_depths(json_schema *s);

/* Frames a value of node n written as slot needs (after compute_depths). */
static int slot_need(const json_schema *s, int n, int slot);

static int slot_mind(const json_schema *s, int n, int slot) { return slot_need(s, n, slot); }

/* oneOf over objects that overlap: a copy of the written branch that
 * never writes, for each other branch, one property that branch requires
 * (and this one does not), so the output fails every other branch. -1
 * when some branch has no such property, -2 on error. */
static int exclusive_object(cctx *c, int pick, const int *cand, int n) {
    const js_node *P = &c->s->node[pick];
    if (P->kind != JS_VALUE || P->keys < 0) return -1;
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        if (cand[i] == pick || disjoint(c, pick, cand[i], JS_SLOT_OBJ)) continue;
        const js_node *O = &c->s->node[cand[i]];
        int found = 0;
        for (int q = 0; O->kind == JS_VALUE && q < O->n_props && !found; q++) {
            if (!((O->required >> q) & 1)) continue;
            int p = prop_index(c->s, P, c->s->prop_name[O->first_prop + q]);
            if (p >= 0 && !((P->required >> p) & 1)) off |= 1ull << p, found = 1;
        }
        if (!found) return -1;
    }
    int id = node_new(c, JS_VALUE);
    if (id < 0) return -2;
    c->s->node[id] = c->s->node[pick];
    c->s->node[id].keys_off = off;
    return id;
}

/* Several branches for one kind of value: enum branches merge into one
 * trie (for oneOf: the values in exactly one); otherwise one branch is
 * written (any value of it satisfies anyOf; for oneOf it must be
 * disjoint from the others, or the overlap is reported). */
static int slot_choice(cctx *c, const int *cand, int n, int slot, int one, const char *path) {
    int all_enum = 1;
    for (int i = 0; i < n; i++) all_enum &= c->enum_vals[cand[i]] != NULL && c->s->node[cand[i]].kind == JS_VALUE;
    if (all_enum && slot != JS_SLOT_OBJ && slot != JS_SLOT_ARR) {
        int id = node_new(c, JS_VALUE), root = trie_new(c, 0), term = 0;
        if (id < 0 || root < 0) return -1;
        json_t *keep = json_array(), *v;
        for (int i = 0; i < n; i++) {
            size_t k;
            json_array_foreach(c->enum_vals[cand[i]], k, v) {
                int count = 0;
                for (int j = 0; j < n; j++) {
                    size_t m;
                    json_t *w;
                    json_array_foreach(c->enum_vals[cand[j]], m, w) if (json_equal(v, w)) {
                        count++;
                        break;
                    }
                }
                int dup = 0;
                size_t m;
                json_t *w;
                json_array_foreach(keep, m, w) dup |= json_equal(v, w);
                if (dup || (one && count > 1) || !(SLOT_BITS[slot] & value_type(v))) continue;
                json_array_append(keep, v);
                if (trie_add_value(c, root, v, term++) < 0) break;
                c->s->node[id].types |= (uint8_t)(value_type(v) == JT_NUM ? JT_NUM | JT_INT : value_type(v));
            }
        }
        c->s->node[id].enums = root;
        c->enum_vals[id] = keep;
        return c->failed ? -1 : id;
    }
    compute_depths(c->s); /* what is known so far: skip branches no value satisfies */
    int pick = cand[0];
    for (int i = n - 1; i >= 0; i--)
        if (slot_mind(c->s, cand[i], slot) < JS_INF) pick = cand[i];
    for (int i = 0; i < n; i++) { /* prefer a branch without constraints for this kind */
        const js_node *nd = &c->s->node[cand[i]];
        if (nd->kind == JS_VALUE && !c->enum_vals[cand[i]] && nd->str == JS_NONE && !nd->has_lo && !nd->has_hi && !nd->mult &&
            slot != JS_SLOT_OBJ && slot != JS_SLOT_ARR && (slot != JS_SLOT_NUM || (nd->types & JT_NUM))) {
            pick = cand[i];
            break;
        }
    }
    for (int i = 0; one && i < n; i++)
        if (cand[i] != pick && !disjoint(c, pick, cand[i], slot)) {
            int x = slot == JS_SLOT_OBJ ? exclusive_object(c, pick, cand, n) : -1;
            if (x >= 0 || x == -2) return x == -2 ? -1 : x;
            note(c, "oneOf at %s (branches overlap: held to one of them, not to only one)", path);
            break;
        }
    return pick;
}

/* The kinds of value (slot bits) a schema's JSON can allow, a superset
 * (for a union branch whose node is not built yet). */
static int json_slots(cctx *c, const json_t *sch, int depth) {
    static const int TYPE_SLOT[7] = {1 << JS_SLOT_OBJ, 1 << JS_SLOT_ARR, 1 << JS_SLOT_STR, 1 << JS_SLOT_NUM,
                                     1 << JS_SLOT_NUM, 1 << JS_SLOT_BOOL, 1 << JS_SLOT_NULL};
    const int ALL = (1 << JS_N_SLOTS) - 1;
    if (json_is_false(sch)) return 0;
    if (!json_is_object(sch) || depth > 16) return ALL;
    const json_t *ref = json_object_get(sch, "$ref"), *t = json_object_get(sch, "type"), *v;
    int bits = ALL;
    if (json_is_string(ref)) {
        const json_t *target = jsm_resolve_ref(&(jsm_roots){c->base, c->doc}, json_string_value(ref));
        bits &= target ? json_slots(c, target, depth + 1) : ALL;
    }
    if (t) {
        int tb = json_is_string(t) ? type_bit(json_string_value(t)) : 0, k = 0;
        size_t i;
        json_array_foreach(t, i, v) if (json_is_string(v)) tb |= type_bit(json_string_value(v));
        for (int b = 0; b < 7; b++) k |= (tb >> b) & 1 ? TYPE_SLOT[b] : 0;
        if (json_is_true(json_object_get(sch, "nullable"))) k |= 1 << JS_SLOT_NULL;
        bits &= k;
    }
    const char *const KW[2] = {"anyOf", "oneOf"};
    for (int w = 0; w < 2; w++) {
        const json_t *br = json_object_get(sch, KW[w]);
        if (!json_is_array(br)) continue;
        int u = 0;
        size_t i;
        json_array_foreach(br, i, v) u |= json_slots(c, v, depth + 1);
        bits &= u;
    }
    const json_t *all = json_object_get(sch, "allOf");
    size_t i;
    json_array_foreach(all, i, v) bits &= json_slots(c, v, depth + 1);
    return bits;
}

static int ref_slots(cctx *c, int ref_node) {
    for (int i = 0; i < c->n_memo; i++)
        if (c->memo_node[i] == ref_node) return json_slots(c, c->memo[i], 0);
    return (1 << JS_N_SLOTS) - 1;
}

static int compile_union(cctx *c, const json_t *branches, const char *kw, const char *path) {
    int n = (int)json_array_size(branches), one = kw[0] == 'o';
    if (n > 64) return fail(c, "schema too large: more than 64 branches in '%s' at %s", kw, path);
    int cand[JS_N_SLOTS][64], n_cand[JS_N_SLOTS] = {0};
    for (int i = 0; i < n; i++) {
        char idx[16];
        snprintf(idx, sizeof idx, "%d", i);
        int b = child(c, json_array_get(branches, (size_t)i), path, one ? "oneOf/%s" : "anyOf/%s", idx);
        if (b < 0) return -1;
        int r = deref(c->s, b);
        if (r < 0) { /* a $ref whose target is still being compiled (recursion): by the kinds its JSON allows */
            int bits = ref_slots(c, b);
            for (int s = 0; s < JS_N_SLOTS; s++)
                if ((bits >> s) & 1) cand[s][n_cand[s]++] = b;
            continue;
        }
        b = r;
        const js_node *nd = &c->s->node[b];
        if (nd->kind == JS_ANY) {
            if (one && n > 1) note(c, "oneOf at %s (a branch takes any value: held to it, not to only one)", path);
            return b;
        }
        for (int s = 0; s < JS_N_SLOTS; s++) {
            int b2 = nd->kind == JS_UNION ? nd->slot[s] : b;
            if (b2 == JS_NONE || (nd->kind != JS_UNION && !slot_types(nd, s))) continue;
            int dup = 0;
            for (int k = 0; k < n_cand[s]; k++) dup |= cand[s][k] == b2;
            if (!dup) cand[s][n_cand[s]++] = b2;
        }
    }
    uint16_t slot[JS_N_SLOTS];
    for (int s = 0; s < JS_N_SLOTS; s++) {
        slot[s] = JS_NONE;
        if (!n_cand[s]) continue;
        int id = n_cand[s] == 1 ? cand[s][0] : -2;
        if (id == -2 && s == JS_SLOT_OBJ) id = make_disc(c, cand[s], n_cand[s]);
        if (id == -2) id = slot_choice(c, cand[s], n_cand[s], s, one, path);
        if (id < 0) return -1;
        slot[s] = (uint16_t)id;
    }
    int id = node_new(c, JS_UNION);
    if (id < 0) return -1;
    memcpy(c->s->node[id].slot, slot, sizeof slot);
    for (int s = 0; s < JS_N_SLOTS; s++)
        if (slot[s] != JS_NONE)
            c->s->node[id].types |= (uint8_t)(s == JS_SLOT_NUM && c->s->node[slot[s]].kind == JS_VALUE
                                                  ? c->s->node[slot[s]].types & (JT_INT | JT_NUM)
                                                  : SLOT_BITS[s]);
    return id;
}

/* ---- after the pass: refs, depths ------------------------------------------------------ */

/* Points every use of a JS_REF at its target. */
static int fix_refs(cctx *c) {
    json_schema *s = c->s;
#define FIX(field)                                                                                                    \
    do {                                                                                                              \
        if ((field) != JS_NONE) {                                                                                     \
            int t_ = deref(s, (field));                                                                               \
            if (t_ < 0) return fail(c, "unsupported $ref: a cycle of $refs with no value between");                  \
            (field) = (uint16_t)t_;                                                                                   \
        }                                                                                                             \
    } while (0)
    for (int i = 0; i < s->n_nodes; i++) {
        js_node *nd = &s->node[i];
        if (nd->kind == JS_REF) continue;
        for (int k = 0; k < JS_N_SLOTS; k++) FIX(nd->slot[k]);
        FIX(nd->addl);
        FIX(nd->items);
    }
    for (int i = 0; i < s->n_prop; i++) FIX(s->prop[i]);
    for (int i = 0; i < s->n_disc; i++) FIX(s->disc_branch[i]);
    int r = deref(s, s->root);
    if (r < 0) return fail(c, "unsupported $ref: a cycle of $refs with no value between");
    s->root = r;
#undef FIX
    /* A union slot that leads back to a union on its way (A = anyOf [A, ..]
     * by a $ref) adds no value: cut it (the least fixed point). */
    for (int i = 0; i < s->n_nodes; i++) {
        if (s->node[i].kind != JS_UNION) continue;
        for (int k = 0; k < JS_N_SLOTS; k++) {
            int n = s->node[i].slot[k], hops = 0;
            while (n != JS_NONE && s->node[n].kind == JS_UNION && n != i && hops++ <= s->n_nodes) n = s->node[n].slot[k];
            if (n == i || hops > s->n_nodes) s->node[i].slot[k] = JS_NONE;
        }
    }
    return 0;
}

static int sat_add(int a, int b) { return a + b >= JS_INF ? JS_INF : a + b; }

static int cmp_u8(const void *a, const void *b) { return *(const uint8_t *)a - *(const uint8_t *)b; }

/* Frames the shortest object under nd needs. */
/* A node's mind; JS_INF for one not compiled yet (compute_depths also
 * runs during the compile: see slot_choice). */
static int nmind(const json_schema *s, int n) { return n == JS_NONE ? JS_INF : s->node[n].mind; }

static int mind_object(const json_schema *s, const js_node *nd) {
    if (!(nd->types & JT_OBJ) || (nd->keys < 0 && nd->addl == JS_NONE)) return JS_INF;
    if (nd->keys < 0 && s->node[nd->addl].kind == JS_ANY && nd->min_props == 0 && nd->max_props == UINT32_MAX &&
        nd->pnames == JS_NONE)
        return 0; /* free: no frame */
    int need = 0, n_req = 0;
    uint8_t opt[64];
    int n_opt = 0;
    for (int q = 0; q < nd->n_props; q++) {
        int m = nmind(s, s->prop[nd->first_prop + q]);
        if ((nd->required >> q) & 1) need = m > need ? m : need, n_req++;
        else if (!((nd->keys_off >> q) & 1)) opt[n_opt++] = (uint8_t)m;
    }
    uint32_t extra = nd->min_props > (uint32_t)n_req ? nd->min_props - (uint32_t)n_req : 0;
    if (extra && nd->keys < 0) need = s->node[nd->addl].mind > need ? s->node[nd->addl].mind : need;
    else if (extra) {
        if (extra > (uint32_t)n_opt) return JS_INF;
        qsort(opt, (size_t)n_opt, 1, cmp_u8);
        need = opt[extra - 1] > need ? opt[extra - 1] : need;
    }
    return sat_add(need, 1);
}

static int mind_array(const json_schema *s, const js_node *nd) {
    if (!(nd->types & JT_ARR) || nd->items == JS_NONE) return JS_INF;
    if (s->node[nd->items].kind == JS_ANY && nd->min_items == 0 && nd->max_items == UINT32_MAX) return 0;
    return sat_add(nd->min_items ? s->node[nd->items].mind : 0, 1);
}

/* Frames a value of kind slot needs under node n (through nested unions
 * and, during the compile, refs); JS_INF if n takes no such value. */
static int slot_need(const json_schema *s, int n, int slot) {
    for (int hops = 0; n != JS_NONE && hops <= s->n_nodes; hops++) {
        const js_node *nd = &s->node[n];
        if (nd->kind == JS_UNION) n = nd->slot[slot];
        else if (nd->kind == JS_REF) n = nd->items;
        else if (nd->kind == JS_ANY) return 0;
        else if (nd->kind == JS_DISC) return slot == JS_SLOT_OBJ ? nd->mind_obj : JS_INF;
        else if (!(nd->types & SLOT_BITS[slot])) return JS_INF;
        else return slot == JS_SLOT_OBJ ? nd->mind_obj : slot == JS_SLOT_ARR ? nd->mind_arr : 0;
    }
    return JS_INF;
}

/* One node's depths from the current ones; 1 if they changed. */
static int mind_update(json_schema *s, js_node *nd) {
    int mo = JS_INF, ma = JS_INF, m = JS_INF;
    if (nd->kind == JS_ANY) mo = ma = m = 0;
    else if (nd->kind == JS_REF) { /* during compile: its target, once known */
        if (nd->items == JS_NONE) return 0;
        const js_node *t = &s->node[nd->items];
        m = t->mind, mo = t->mind_obj, ma = t->mind_arr;
    } else if (nd->kind == JS_UNION) {
        for (int k = 0; k < JS_N_SLOTS; k++) {
            int v = slot_need(s, nd->slot[k], k);
            if (k == JS_SLOT_OBJ) mo = v;
            if (k == JS_SLOT_ARR) ma = v;
            m = v < m ? v : m;
        }
    } else if (nd->kind == JS_DISC) { /* every branch must fit: the discriminator may pick any */
        mo = 0;
        for (int i = nd->first_disc; i < nd->first_disc + nd->n_props; i++)
            mo = s->node[s->disc_branch[i]].mind_obj > mo ? s->node[s->disc_branch[i]].mind_obj : mo;
        m = mo;
    } else if (nd->kind == JS_VALUE) {
        if (nd->enums >= 0) m = nd->types ? 0 : JS_INF, mo = (nd->types & JT_OBJ) ? 0 : JS_INF, ma = (nd->types & JT_ARR) ? 0 : JS_INF;
        else {
            mo = mind_object(s, nd), ma = mind_array(s, nd);
            m = (nd->types & ~(JT_OBJ | JT_ARR)) ? 0 : (mo < ma ? mo : ma);
        }
    } else return 0;
    int changed = nd->mind != m || nd->mind_obj != mo || nd->mind_arr != ma;
    nd->mind = (uint8_t)m, nd->mind_obj = (uint8_t)mo, nd->mind_arr = (uint8_t)ma;
    return changed;
}

/* Depths to a fixed point (from "impossible" down, so recursion settles on
 * the shortest values), then each object's writable properties. */
static void compute_depths(json_schema *s) {
    for (int i = 0; i < s->n_nodes; i++) s->node[i].mind = s->node[i].mind_obj = s->node[i].mind_arr = JS_INF;
    for (int changed = 1, round = 0; changed && round < 4 * JS_INF; round++) {
        changed = 0;
        for (int i = 0; i < s->n_nodes; i++) changed |= mind_update(s, &s->node[i]);
    }
    for (int i = 0; i < s->n_nodes; i++) {
        js_node *nd = &s->node[i];
        nd->keys_ok = nd->kind == JS_DISC, nd->keys_mind = 0;
        for (int q = 0; nd->kind == JS_VALUE && q < nd->n_props; q++) {
            int m = nmind(s, s->prop[nd->first_prop + q]);
            if (m >= JS_INF || ((nd->keys_off >> q) & 1)) continue;
            nd->keys_ok |= 1ull << q;
            if (m > nd->keys_mind) nd->keys_mind = (uint8_t)m;
        }
    }
}

static char *unenforced_text(const cctx *c) {
    if (!c->n_notes) return NULL;
    char buf[1024];
    size_t n = 0;
    int shown = c->n_notes < SHOW_NOTES ? c->n_notes : SHOW_NOTES;
    for (int i = 0; i < shown; i++) n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s", i ? "; " : "", c->notes[i]);
    int more = c->n_notes - shown + c->n_more;
    if (more) snprintf(buf + n, sizeof buf - n, "; and %d more", more);
    return xstrdup(buf);
}

/* ---- entry points -------------------------------------------------------------------- */

static int root_takes_object(const json_schema *s) {
    const js_node *r = &s->node[s->root];
    if (r->kind == JS_UNION) return slot_need(s, s->root, JS_SLOT_OBJ) <= JSON_SCHEMA_MAX_DEPTH;
    return r->kind == JS_ANY || (r->mind_obj <= JSON_SCHEMA_MAX_DEPTH);
}

json_schema *json_schema_compile(const json_t *schema, char *why, size_t cap) {
    cctx c = {.doc = schema, .base = schema, .why = why, .cap = cap};
    c.s = xcalloc(1, sizeof *c.s);
    atomic_init(&c.s->refs, 1);
    int root = compile(&c, schema, "#");
    if (root >= 0) {
        c.s->root = root;
        if (fix_refs(&c) < 0) root = -1;
    }
    if (root >= 0) {
        compute_depths(c.s);
        const js_node *r = &c.s->node[c.s->root];
        if (r->kind == JS_VALUE && !(r->types & JT_OBJ) && r->enums < 0 && r->types)
            root = fail(&c, "the root schema must allow an object (the reply is one JSON object)");
        else if (!root_takes_object(c.s))
            root = fail(&c, slot_need(c.s, c.s->root, JS_SLOT_OBJ) < JS_INF
                                ? "no value of the schema fits in %d nested objects/arrays"
                                : "no object satisfies the schema (contradicting keywords, or required values no value satisfies)",
                        JSON_SCHEMA_MAX_DEPTH);
    }
    for (int i = 0; i < c.s->n_nodes; i++) json_decref(c.enum_vals[i]);
    free(c.enum_vals), free(c.memo), free(c.memo_node);
    if (root < 0) {
        json_schema_free(c.s);
        return NULL;
    }
    c.s->unenforced = unenforced_text(&c);
    return c.s;
}

/* One call: {"name": {"const": NAME}, <args_key>: PARAMETERS}. */
static json_t *call_schema(const json_t *tool, const char *args_key) {
    const json_t *fn = json_object_get(tool, "function");
    if (!json_is_object(fn)) fn = tool;
    const json_t *params = json_object_get(fn, "parameters");
    if (!params || json_is_null(params)) params = json_object_get(fn, "input_schema");
    json_t *args = params && !json_is_null(params) ? json_deep_copy(params) : json_pack("{s:s}", "type", "object");
    if (json_is_object(args) && !json_object_get(args, "$id")) { /* its own resource: its "#/$defs/.." refs resolve in it */
        char id[300];
        snprintf(id, sizeof id, "%s%s", TOOL_ID, json_string_value(json_object_get(fn, "name")) ? json_string_value(json_object_get(fn, "name")) : "?");
        json_object_set_new(args, "$id", json_string(id));
    }
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
    else /* an answer the client can see: not empty, not only whitespace */
        json_object_set_new(json_object_get(sch, "properties"), "content",
                            json_pack("{s:s,s:s}", "type", "string", "pattern", "\\S"));
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
    for (int i = 0; i < s->n_dfa; i++) jre_free(&s->dfa[i]);
    free(s->prop_name), free(s->prop), free(s->node), free(s->trie), free(s->disc_branch), free(s->disc_prop);
    free(s->str), free(s->dfa), free(s->unenforced);
    free(s);
}

int json_schema_n_nodes(const json_schema *s) { return s->n_nodes; }

const char *json_schema_unenforced(const json_schema *s) { return s->unenforced; }
