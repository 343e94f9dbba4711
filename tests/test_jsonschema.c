/* test_jsonschema.c - schema-constrained JSON: the compiler's size
 * limits, the guard with a schema on outputs that
 * must pass and prefixes that must be refused, the mask against
 * byte-by-byte acceptance, and sampling from random logits under the mask,
 * each finished output checked against the schema by a separate checker.
 *
 * jsonschema_*       compiler and bare guard, or the tiny synthetic
 *                    model's tokenizer (tests/data/gen/models/llama-q4_1.gguf).
 * real_jsonschema_*  the real SmolLM2 vocabulary (STRATA_MODEL).
 * Keyword by keyword (lengths, pattern, format, allOf, recursion, ...):
 * test_jsonschema_kw.c. */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "test_util.h"
#include "text/jsonguard.h"
#include "text/jsonschema.h"
#include "text/tokenizer.h"

/* 1 iff text is accepted whole and complete under schema s. */
static int accepts(json_schema *s, const char *text) {
    json_guard *g = json_guard_new_schema(NULL, s);
    int ok = json_guard_feed(g, text, strlen(text)) == 0 && json_guard_done(g);
    json_guard_free(g);
    return ok;
}

/* ---- the compiler ----------------------------------------------------------- */

TEST(jsonschema_size_limits) {
    char why[512] = "";
    /* 65 properties */
    json_t *props = json_object();
    for (int i = 0; i < 65; i++) {
        char k[16];
        snprintf(k, sizeof k, "p%d", i);
        json_object_set_new(props, k, json_pack("{s:s}", "type", "string"));
    }
    json_t *sch = json_pack("{s:s,s:o}", "type", "object", "properties", props);
    CHECK(json_schema_compile(sch, why, sizeof why) == NULL);
    CHECK_MSG(strstr(why, "more than 64 properties"), "%s", why);
    json_decref(sch);
    /* 64 x 64 distinct leaves: over the node limit ($ref targets are
     * shared, so the same through one $ref compiles: 64 + 64 nodes) */
    json_t *outer = json_object(), *shared = json_object();
    for (int i = 0; i < 64; i++) {
        char k[16];
        snprintf(k, sizeof k, "p%d", i);
        json_t *inner = json_object();
        for (int j = 0; j < 64; j++) {
            char q[16];
            snprintf(q, sizeof q, "q%d", j);
            json_object_set_new(inner, q, json_pack("{s:s,s:i}", "type", "integer", "maximum", i * 64 + j));
        }
        json_object_set_new(outer, k, json_pack("{s:s,s:o}", "type", "object", "properties", inner));
        json_object_set_new(shared, k, json_pack("{s:s}", "$ref", "#/$defs/leaf"));
    }
    sch = json_pack("{s:s,s:o}", "type", "object", "properties", outer);
    CHECK(json_schema_compile(sch, why, sizeof why) == NULL);
    CHECK_MSG(strstr(why, "schema too large"), "%s", why);
    json_decref(sch);
    json_t *leaf = json_pack("{s:s,s:{s:{s:s}}}", "type", "object", "properties", "q", "type", "integer");
    sch = json_pack("{s:s,s:o,s:{s:o}}", "type", "object", "properties", shared, "$defs", "leaf", leaf);
    json_schema *s = json_schema_compile(sch, why, sizeof why);
    CHECK_MSG(s != NULL, "%s", why);
    CHECK_MSG(s && json_schema_n_nodes(s) < 200, "%d nodes", s ? json_schema_n_nodes(s) : 0);
    json_schema_free(s);
    json_decref(sch);
}

TEST(jsonschema_refcount) {
    char why[256];
    json_schema *s = test_compile_schema("{\"type\":\"object\"}", why, sizeof why);
    CHECK(s != NULL);
    json_guard *g = json_guard_new_schema(NULL, s);
    json_schema_free(s); /* the guard keeps its own reference */
    CHECK_EQ_INT(json_guard_feed(g, "{\"a\":[1,{}]}", 12), 0);
    CHECK(json_guard_done(g));
    json_guard_free(g);
    json_schema_free(NULL);
}

/* ---- the guard with a schema ---------------------------------------------------- */

static const char *const PERSON =
    "{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\"},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":120},"
    "\"city\":{\"enum\":[\"Paris\",\"Rome\",\"Oslo\"]},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":2},"
    "\"score\":{\"type\":\"number\",\"minimum\":-1,\"maximum\":1},"
    "\"n\":{\"type\":[\"number\",\"null\"]},"
    "\"meta\":{\"$ref\":\"#/$defs/meta\"},"
    "\"any\":{}},"
    "\"required\":[\"name\",\"age\"],\"additionalProperties\":false,"
    "\"$defs\":{\"meta\":{\"anyOf\":[{\"type\":\"boolean\"},{\"type\":\"object\",\"properties\":{\"k\":{\"const\":1}},"
    "\"required\":[\"k\"]}]}}}";

TEST(jsonschema_guard_accepts) {
    char why[512];
    json_schema *s = test_compile_schema(PERSON, why, sizeof why);
    CHECK_MSG(s != NULL, "%s", why);
    if (!s) return;
    static const char *const OK[] = {
        "{\"name\":\"x\",\"age\":5}",
        " {\"age\" : 120 , \"name\":\"a\\\"b\",\"tags\":[\"a\",\"b\"],\"city\":\"Rome\",\"n\":null}",
        "{\"name\":\"x\",\"age\":0,\"n\":-1.5e3,\"score\":-0.25}",
        "{\"name\":\"x\",\"age\":7,\"meta\":{\"k\":1},\"any\":[1,{\"q\":[]}]}",
        "{\"name\":\"\",\"age\":99,\"meta\":false,\"tags\":[],\"any\":\"s\"}",
    };
    for (size_t i = 0; i < sizeof OK / sizeof *OK; i++) CHECK_MSG(accepts(s, OK[i]), "refused %s", OK[i]);
    json_schema_free(s);
}

TEST(jsonschema_guard_refuses) {
    char why[512];
    json_schema *s = test_compile_schema(PERSON, why, sizeof why);
    if (!s) return;
    static const char *const BAD[] = {
        "{\"name\":\"x\"}",                       /* age is required */
        "{\"name\":\"x\",\"age\":121}",           /* above maximum */
        "{\"name\":\"x\",\"age\":-1}",            /* below minimum */
        "{\"name\":\"x\",\"age\":1.5}",           /* integer */
        "{\"name\":\"x\",\"age\":1e2}",           /* integer */
        "{\"nam\":1}",                            /* undeclared key */
        "{\"name\":\"x\",\"name\":\"y\",\"age\":1}", /* a key twice */
        "{\"name\":\"x\",\"age\":1,\"extra\":1}",
        "{\"name\":\"x\",\"age\":1,\"city\":\"Berlin\"}",
        "{\"name\":\"x\",\"age\":1,\"city\":\"Parisx\"}",
        "{\"name\":\"x\",\"age\":1,\"tags\":[\"a\",\"b\",\"c\"]}",
        "{\"name\":5,\"age\":1}",
        "{\"name\":\"x\",\"age\":1,\"score\":1.5}",
        "{\"name\":\"x\",\"age\":1,\"score\":2}",
        "{\"name\":\"x\",\"age\":1,\"meta\":{}}",
        "{\"name\":\"x\",\"age\":1,\"meta\":{\"k\":2}}",
        "{\"name\":\"x\",\"age\":1,\"meta\":null}",
        "{\"name\":\"x\",\"age\":1,\"n\":\"1\"}",
    };
    for (size_t i = 0; i < sizeof BAD / sizeof *BAD; i++) CHECK_MSG(!accepts(s, BAD[i]), "accepted %s", BAD[i]);
    /* refusals come at the first byte with no valid completion */
    json_guard *g = json_guard_new_schema(NULL, s);
    CHECK_EQ_INT(json_guard_feed(g, "{\"name\":\"x\",\"age\":12", 20), 0);
    CHECK_EQ_INT(json_guard_feed(g, "1", 1), -1); /* 121 > 120 */
    CHECK_EQ_INT(json_guard_feed(g, "0", 1), 0);  /* 120 */
    json_guard_free(g);
    g = json_guard_new_schema(NULL, s);
    CHECK_EQ_INT(json_guard_feed(g, "{\"name\":\"x\",\"age\":13", 20), 0);
    CHECK_EQ_INT(json_guard_feed(g, "0", 1), -1); /* 130 > 120, and longer is worse */
    CHECK_EQ_INT(json_guard_feed(g, "}", 1), 0);
    CHECK(json_guard_done(g));
    json_guard_free(g);
    json_schema_free(s);
}

static const char *const TOOLS =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"type\":\"string\"},\"unit\":{\"enum\":[\"c\",\"f\"]}},\"required\":[\"city\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"add\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}},\"required\":[\"a\",\"b\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"ping\"}}]";

static json_schema *tools_schema(const char *forced, int required) {
    char why[512];
    json_t *tools = json_loads(TOOLS, 0, NULL);
    json_schema *s = json_schema_tools(tools, forced, required, why, sizeof why);
    CHECK_MSG(s != NULL, "%s", why);
    json_decref(tools);
    return s;
}

TEST(jsonschema_tool_calls) {
    json_schema *s = tools_schema(NULL, 1);
    if (!s) return;
    CHECK(accepts(s, "{\"tool_calls\": [{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": -2}}]}"));
    CHECK(accepts(s, "{\"tool_calls\":[{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}},"
                     "{\"name\":\"ping\",\"arguments\":{\"x\":[1]}}]}"));
    CHECK(!accepts(s, "{\"tool_calls\":[{\"name\":\"Paris\",\"arguments\":{}}]}"));        /* undeclared */
    CHECK(!accepts(s, "{\"tool_calls\":[{\"name\":\"add\",\"arguments\":{\"city\":\"x\"}}]}")); /* other tool's args */
    CHECK(!accepts(s, "{\"tool_calls\":[{\"name\":\"add\",\"arguments\":{\"a\":1}}]}"));     /* b required */
    CHECK(!accepts(s, "{\"tool_calls\":[{\"arguments\":{},\"name\":\"ping\"}]}"));            /* name first */
    CHECK(!accepts(s, "{\"tool_calls\":[]}"));                                             /* at least one */
    CHECK(!accepts(s, "{\"content\":\"hi\"}"));                                            /* required */
    json_schema_free(s);
    s = tools_schema(NULL, 0); /* auto: content or calls */
    CHECK(accepts(s, "{\"content\":\"hi\"}"));
    CHECK(accepts(s, "{\"tool_calls\":[{\"name\":\"ping\",\"arguments\":{}}]}"));
    CHECK(!accepts(s, "{}"));
    CHECK(!accepts(s, "{\"tool_calls\":[{\"name\":\"pong\",\"arguments\":{}}]}"));
    json_schema_free(s);
    s = tools_schema("add", 1); /* named: only that tool */
    CHECK(accepts(s, "{\"tool_calls\": [{\"name\": \"add\", \"arguments\": {\"b\":2,\"a\":1}}]}"));
    CHECK(!accepts(s, "{\"tool_calls\": [{\"name\": \"ping\", \"arguments\": {}}]}"));
    json_schema_free(s);
}

static const char *const PREFIXES[] = {
    "", "{", "{\"", "{\"na", "{\"name\":", "{\"name\":\"a", "{\"name\":\"a\",", "{\"name\":\"a\",\"age\":1",
    "{\"age\":-", "{\"age\":3,\"city\":\"R", "{\"age\":3,\"tags\":[", "{\"age\":3,\"tags\":[\"x\",",
    "{\"age\":3,\"score\":0", "{\"age\":3,\"score\":0.", "{\"age\":3,\"meta\":", "{\"age\":3,\"meta\":{",
    "{\"age\":3,\"any\":{\"q\":[", "{\"name\":\"a\",\"age\":1}",
};

static void check_prefixes(const char *model) {
    tokenizer *t = test_load_tokenizer(model);
    if (!t) return;
    char why[512];
    json_schema *s = test_compile_schema(PERSON, why, sizeof why);
    json_vocab *v = json_vocab_new(t);
    for (size_t i = 0; i < sizeof PREFIXES / sizeof *PREFIXES; i++) test_mask_matches_feed(t, v, s, PREFIXES[i]);
    json_vocab_free(v);
    json_schema_free(s);
    tok_free(t);
}

/* An independent check of PERSON on a parsed output. */
static int person_valid(const json_t *o, char *why, size_t cap) {
    const char *k;
    const json_t *v;
    if (!json_is_string(json_object_get(o, "name")) || !json_is_integer(json_object_get(o, "age"))) {
        snprintf(why, cap, "name/age missing or mistyped");
        return 0;
    }
    json_object_foreach((json_t *)o, k, v) {
        int ok = 1;
        if (!strcmp(k, "age")) ok = json_integer_value(v) >= 0 && json_integer_value(v) <= 120;
        else if (!strcmp(k, "city")) ok = json_is_string(v) && strstr("|Paris|Rome|Oslo|", json_string_value(v)) && *json_string_value(v);
        else if (!strcmp(k, "tags")) ok = json_is_array(v) && json_array_size(v) <= 2;
        else if (!strcmp(k, "score")) ok = json_is_number(v) && json_number_value(v) >= -1 && json_number_value(v) <= 1;
        else if (!strcmp(k, "n")) ok = json_is_number(v) || json_is_null(v);
        else if (!strcmp(k, "meta")) ok = json_is_boolean(v) || (json_is_object(v) && json_integer_value(json_object_get(v, "k")) == 1);
        else ok = !strcmp(k, "name") || !strcmp(k, "any");
        if (!ok) {
            snprintf(why, cap, "bad '%s'", k);
            return 0;
        }
    }
    return 1;
}

static void check_sampling(const char *model, int seeds) {
    test_schema_sampling(model, PERSON, seeds, 400, person_valid);
}

TEST(jsonschema_tiny_mask_matches_feed) { check_prefixes(test_data("models/llama-q4_1.gguf")); }

TEST(jsonschema_tiny_sampling) { check_sampling(test_data("models/llama-q4_1.gguf"), 100); }

TEST(real_jsonschema_mask_matches_feed) { check_prefixes(test_real_model()); }

TEST(real_jsonschema_sampling) { check_sampling(test_real_model(), 30); }
