/* test_jsonschema_kw.c - the JSON Schema keywords of issue 23 item 3, one
 * table row each: outputs the guard must accept whole and outputs it must
 * refuse (fed byte by byte), the keywords reported as unenforced instead
 * of refused, malformed schemas that still fail, the mask against
 * byte-by-byte acceptance inside constrained strings, and sampling from
 * random logits under the mask with each output's strings checked by an
 * independent matcher (PCRE2, UTF mode, code-point lengths).
 *
 * jsonschema_kw_*       bare guard or the tiny synthetic tokenizer.
 * real_jsonschema_kw_*  the real SmolLM2 vocabulary (STRATA_MODEL). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <math.h>
#include <pcre2.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "test.h"
#include "test_util.h"
#include "text/jsonguard.h"
#include "text/jsonregex.h"
#include "text/jsonschema.h"
#include "text/tokenizer.h"

/* 1 iff text is accepted byte by byte and complete under schema s. */
static int accepts(json_schema *s, const char *text) {
    json_guard *g = json_guard_new_schema(NULL, s);
    int ok = 1;
    for (size_t i = 0; text[i] && ok; i++) ok = json_guard_feed(g, text + i, 1) == 0;
    ok = ok && json_guard_done(g);
    json_guard_free(g);
    return ok;
}

/* ---- one row per keyword ------------------------------------------------------ */

typedef struct kw_case {
    const char *schema;
    const char *ok[6], *bad[8];
} kw_case;

static const kw_case CASES[] = {
    {"{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}},\"required\":[\"s\"]}",
     {"{\"s\":\"ab\"}", "{\"s\":\"abc\"}", "{\"s\":\"\\u00e9\\u00e9\"}", "{\"s\":\"\xc3\xa9\xc3\xa9\xc3\xa9\"}",
      "{\"s\":\"\\ud83d\\ude00x\"}", "{\"s\":\"a\\n\"}"},
     {"{\"s\":\"a\"}", "{\"s\":\"abcd\"}", "{\"s\":\"\"}", "{\"s\":\"\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\"}", "{\"s\":\"\\n\\n\\n\\n\"}"}},
    {"{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\",\"pattern\":\"^[a-z0-9-]+$\"}},\"required\":[\"id\"]}",
     {"{\"id\":\"a-1\"}", "{\"id\":\"abc\"}"},
     {"{\"id\":\"\"}", "{\"id\":\"A\"}", "{\"id\":\"a b\"}", "{\"id\":\"a\\n\"}", "{\"id\":\"\\u0061\"}"}},
    {"{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"pattern\":\"ab+c\",\"maxLength\":6}}}",
     {"{\"s\":\"abc\"}", "{\"s\":\"xxabbc\"}", "{\"s\":\"abcxyz\"}", "{}"},
     {"{\"s\":\"ac\"}", "{\"s\":\"xxxabc\\\"\"}", "{\"s\":\"xxxxabc\"}"}},
    {"{\"type\":\"object\",\"properties\":{\"when\":{\"type\":\"string\",\"format\":\"date-time\"},\"day\":{\"format\":\"date\",\"type\":\"string\"},"
     "\"at\":{\"type\":\"string\",\"format\":\"time\"}}}",
     {"{\"when\":\"2024-05-01T13:45:00Z\",\"day\":\"1999-12-31\",\"at\":\"08:00:00+02:00\"}", "{\"when\":\"2024-05-01t13:45:00.25-05:30\"}"},
     {"{\"when\":\"x\"}", "{\"when\":\"2024-02-30T00:00:00Z\"}", "{\"when\":\"2024-05-01T25:00:00Z\"}", "{\"day\":\"2024-13-01\"}",
      "{\"at\":\"08:00:00\"}", "{\"when\":\"2024-05-01\"}"}},
    {"{\"type\":\"object\",\"properties\":{\"e\":{\"type\":\"string\",\"format\":\"email\"},\"u\":{\"type\":\"string\",\"format\":\"uuid\"},"
     "\"v4\":{\"type\":\"string\",\"format\":\"ipv4\"},\"v6\":{\"type\":\"string\",\"format\":\"ipv6\"},\"uri\":{\"type\":\"string\",\"format\":\"uri\"}}}",
     {"{\"e\":\"a.b@x-y.org\",\"u\":\"123e4567-e89b-12d3-a456-426614174000\",\"v4\":\"10.0.255.1\",\"v6\":\"fe80::1\",\"uri\":\"https://x.org/a?b=1#c\"}",
      "{\"v6\":\"::\"}", "{\"v6\":\"1:2:3:4:5:6:7:8\"}"},
     {"{\"e\":\"ab\"}", "{\"u\":\"123e4567e89b12d3a456426614174000\"}", "{\"v4\":\"256.0.0.1\"}", "{\"v4\":\"01.0.0.1\"}",
      "{\"v6\":\"1::2::3\"}", "{\"uri\":\"no scheme\"}"}},
    {"{\"type\":\"object\",\"properties\":{\"to\":{\"type\":\"string\",\"allOf\":[{},{}]},"
     "\"n\":{\"allOf\":[{\"type\":\"integer\",\"minimum\":0},{\"maximum\":9},{\"type\":[\"integer\",\"string\"]}]}},"
     "\"allOf\":[{\"required\":[\"to\"]},{\"properties\":{\"k\":{\"const\":1}},\"required\":[\"k\"]}]}",
     {"{\"to\":\"x\",\"k\":1}", "{\"k\":1,\"to\":\"\",\"n\":9}"},
     {"{\"to\":\"x\"}", "{\"k\":1}", "{\"to\":1,\"k\":1}", "{\"to\":\"x\",\"k\":1,\"n\":10}", "{\"to\":\"x\",\"k\":1,\"n\":\"1\"}"}},
    {"{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}},\"additionalProperties\":false},"
     "{\"properties\":{\"a\":{\"maxLength\":1},\"b\":{}}}]}",
     {"{\"a\":\"x\"}", "{}"},
     {"{\"a\":\"xy\"}", "{\"b\":1}"}},
    {"{\"type\":\"object\",\"properties\":{\"t\":{\"$ref\":\"#/$defs/node\"}},\"required\":[\"t\"],"
     "\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},\"kids\":{\"type\":\"array\","
     "\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\"],\"additionalProperties\":false}}}",
     {"{\"t\":{\"v\":1}}", "{\"t\":{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[{\"v\":3,\"kids\":[]}]},{\"v\":4}]}}"},
     {"{\"t\":{}}", "{\"t\":{\"v\":1,\"kids\":[{}]}}", "{\"t\":{\"v\":1,\"kids\":[{\"v\":\"x\"}]}}"}},
    {"{\"$defs\":{\"Node\":{\"type\":\"object\",\"properties\":{\"value\":{\"type\":\"integer\"},"
     "\"next\":{\"anyOf\":[{\"$ref\":\"#/$defs/Node\"},{\"type\":\"null\"}]}},\"required\":[\"value\",\"next\"]}},"
     "\"$ref\":\"#/$defs/Node\"}",
     {"{\"value\":1,\"next\":null}", "{\"value\":1,\"next\":{\"value\":2,\"next\":null}}"},
     {"{\"value\":1}", "{\"value\":1,\"next\":{\"value\":2}}", "{\"value\":1,\"next\":1}"}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#/$defs/A\"}},"
     "\"$defs\":{\"A\":{\"anyOf\":[{\"$ref\":\"#/$defs/A\"},{\"type\":\"string\",\"maxLength\":2}]}}}",
     {"{\"a\":\"xy\"}", "{}"},
     {"{\"a\":1}", "{\"a\":\"xyz\"}", "{\"a\":{}}"}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"$id\":\"https://x/a\",\"type\":\"object\",\"properties\":{"
     "\"b\":{\"$ref\":\"#/$defs/B\"},\"c\":{\"$ref\":\"#/$defs/C\"}},\"$defs\":{\"C\":{\"const\":\"in\"}}}},"
     "\"$defs\":{\"B\":{\"type\":\"integer\"},\"C\":{\"const\":\"out\"}}}",
     {"{\"a\":{\"b\":1,\"c\":\"in\"}}"},
     {"{\"a\":{\"b\":\"x\"}}", "{\"a\":{\"c\":\"out\"}}"}},
    {"{\"type\":\"object\",\"properties\":{\"x\":{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
     "\"required\":[\"a\"],\"additionalProperties\":false},{\"type\":\"object\",\"properties\":{\"b\":{\"type\":\"string\"}},"
     "\"required\":[\"b\"],\"additionalProperties\":false}]},\"y\":{\"anyOf\":[{\"type\":\"string\"},{\"enum\":[\"q\",1]}]}}}",
     {"{\"x\":{\"a\":1}}", "{\"y\":\"anything\"}", "{\"y\":1}"},
     {"{\"x\":{\"a\":1,\"b\":\"s\"}}", "{\"x\":{\"b\":1}}", "{\"x\":{}}", "{\"y\":2}"}},
    {"{\"type\":\"object\",\"properties\":{\"c\":{\"const\":{\"k\":[1,true]}},\"e\":{\"enum\":[[1,2],\"s\",null]}}}",
     {"{\"c\":{\"k\":[1,true]}}", "{\"e\":[1,2]}", "{\"e\":\"s\"}", "{\"e\":null}"},
     {"{\"c\":{\"k\":[1]}}", "{\"c\":{}}", "{\"e\":[1]}", "{\"e\":[1,2,3]}", "{\"c\":{\"k\": [1,true]}}"}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}},"
     "\"oneOf\":[{\"required\":[\"a\"]},{\"required\":[\"b\"]}]}",
     {"{\"a\":1}"},
     {"{\"a\":1,\"b\":2}", "{}", "{\"b\":2}"}},
    {"{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"number\",\"multipleOf\":5,\"minimum\":3,\"maximum\":40},"
     "\"m\":{\"type\":\"integer\",\"multipleOf\":7,\"maximum\":-1}}}",
     {"{\"n\":5}", "{\"n\":40}", "{\"n\":10,\"m\":-7}", "{\"m\":-700}"},
     {"{\"n\":3}", "{\"n\":7}", "{\"n\":45}", "{\"n\":0}", "{\"n\":-5}", "{\"n\":5.0}", "{\"m\":-1}", "{\"m\":0}"}},
    {"{\"type\":\"object\",\"propertyNames\":{\"pattern\":\"^[a-z]+$\",\"maxLength\":3},\"additionalProperties\":{\"type\":\"integer\"}}",
     {"{\"ab\":1,\"xyz\":2}", "{}"},
     {"{\"Ab\":1}", "{\"abcd\":1}", "{\"ab\":\"x\"}", "{\"\":1}"}},
    {"{\"type\":\"object\",\"properties\":{\"m\":{\"type\":\"object\",\"propertyNames\":false},"
     "\"e\":{\"type\":\"object\",\"propertyNames\":{\"enum\":[\"x\",\"y\"]},\"additionalProperties\":{\"type\":\"integer\"}}}}",
     {"{\"m\":{}}", "{\"e\":{\"y\":1,\"x\":2}}"},
     {"{\"m\":{\"a\":1}}", "{\"e\":{\"z\":1}}", "{\"e\":{\"x\":\"s\"}}", "{\"e\":{\"x\":1,\"x\":2}}"}},
    {"{\"type\":\"object\",\"properties\":{\"l\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":1},\"minItems\":1,\"maxItems\":2}}}",
     {"{\"l\":[\"a\"]}", "{\"l\":[\"a\",\"\"]}"},
     {"{\"l\":[]}", "{\"l\":[\"a\",\"b\",\"c\"]}", "{\"l\":[\"ab\"]}"}},
};

TEST(jsonschema_kw_accepts_and_refuses) {
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
        char why[512] = "";
        json_schema *s = test_compile_schema(CASES[i].schema, why, sizeof why);
        CHECK_MSG(s != NULL, "case %zu: %s", i, why);
        if (!s) continue;
        CHECK_MSG(json_schema_unenforced(s) == NULL, "case %zu: unenforced %s", i, json_schema_unenforced(s));
        for (int k = 0; k < 6 && CASES[i].ok[k]; k++) CHECK_MSG(accepts(s, CASES[i].ok[k]), "case %zu refused %s", i, CASES[i].ok[k]);
        for (int k = 0; k < 8 && CASES[i].bad[k]; k++) CHECK_MSG(!accepts(s, CASES[i].bad[k]), "case %zu accepted %s", i, CASES[i].bad[k]);
        json_schema_free(s);
    }
}

/* Refusals at the first byte with no completion: a dead end is never
 * entered. */
TEST(jsonschema_kw_refuses_early) {
    char why[512];
    json_schema *s = test_compile_schema(CASES[1].schema, why, sizeof why); /* ^[a-z0-9-]+$ */
    json_guard *g = json_guard_new_schema(NULL, s);
    CHECK_EQ_INT(json_guard_feed(g, "{\"id\":\"", 7), 0);
    CHECK_EQ_INT(json_guard_feed(g, "\"", 1), -1); /* empty: + needs one */
    CHECK_EQ_INT(json_guard_feed(g, "A", 1), -1);
    CHECK_EQ_INT(json_guard_feed(g, "\\", 1), -1); /* no escape decodes to [a-z0-9-] */
    CHECK_EQ_INT(json_guard_feed(g, "a", 1), 0);
    json_guard_free(g);
    json_schema_free(s);
    s = test_compile_schema(CASES[3].schema, why, sizeof why); /* date-time */
    g = json_guard_new_schema(NULL, s);
    CHECK_EQ_INT(json_guard_feed(g, "{\"when\":\"2024-02-3", 18), -1); /* no February 3x */
    json_guard_reset(g);
    CHECK_EQ_INT(json_guard_feed(g, "{\"when\":\"2024-02-2", 18), 0);
    CHECK_EQ_INT(json_guard_feed(g, "9", 1), -1); /* February 29 is left out */
    json_guard_free(g);
    json_schema_free(s);
}

/* ---- reported, not refused; and what is still refused --------------------------- */

TEST(jsonschema_kw_unenforced_reported) {
    static const struct { const char *schema, *says; } R[] = {
        {"{\"type\":\"object\",\"not\":{}}", "not at #"},
        {"{\"type\":\"object\",\"properties\":{\"t\":{\"type\":\"array\",\"uniqueItems\":true}}}", "uniqueItems at #/properties/t"},
        {"{\"type\":\"object\",\"properties\":{\"z\":{\"type\":\"string\",\"pattern\":\"(?=a)b\"}}}", "pattern at #/properties/z (lookaround)"},
        {"{\"type\":\"object\",\"properties\":{\"h\":{\"type\":\"string\",\"format\":\"hostname\"}}}", "format 'hostname' at #/properties/h"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"items\":[{}]}}}", "items (a list) at #/properties/a"},
        {"{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\",\"multipleOf\":0.5}}}", "multipleOf at #/properties/x (not a whole number)"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"oneOf\":[{\"type\":\"string\"},{\"type\":\"string\",\"maxLength\":2}]}}}",
         "oneOf at #/properties/a (branches overlap"},
        {"{\"type\":\"object\",\"patternProperties\":{\"a\":{}},\"uniqueItems\":true,\"if\":{},\"then\":{},\"else\":{},\"contains\":{}}", "and 2 more"},
    };
    for (size_t i = 0; i < sizeof R / sizeof *R; i++) {
        char why[512] = "";
        json_schema *s = test_compile_schema(R[i].schema, why, sizeof why);
        CHECK_MSG(s != NULL, "refused %s: %s", R[i].schema, why);
        if (!s) continue;
        const char *u = json_schema_unenforced(s);
        CHECK_MSG(u && strstr(u, R[i].says), "'%s' does not say '%s'", u ? u : "(null)", R[i].says);
        CHECK(accepts(s, "{}"));
        json_schema_free(s);
    }
}

TEST(jsonschema_kw_malformed_refused) {
    static const struct { const char *schema, *says; } R[] = {
        {"{\"type\":5}", "'type' must be"},
        {"{\"type\":\"objekt\"}", "unknown type"},
        {"{\"type\":\"array\"}", "root schema must allow an object"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"http://x/y\"}}}", "unresolvable $ref"},
        {"{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"minLength\":-1}}}", "'minLength' must be"},
        {"{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"pattern\":5}}}", "'pattern' must be a string"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#\"}},\"required\":[\"a\"]}", "no object satisfies"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":0}},\"required\":[\"a\"]}", "no object satisfies"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":\"x^\"}},\"required\":[\"a\"]}", "no object satisfies"},
        {"{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}", "cycle of $refs"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"allOf\":[{\"$ref\":\"#/properties/a\"}]}}}", "expands without end"},
    };
    for (size_t i = 0; i < sizeof R / sizeof *R; i++) {
        char why[512] = "";
        json_schema *s = test_compile_schema(R[i].schema, why, sizeof why);
        CHECK_MSG(!s, "compiled: %s", R[i].schema);
        CHECK_MSG(strstr(why, R[i].says) != NULL, "'%s' does not say '%s'", why, R[i].says);
        json_schema_free(s);
    }
}

/* A recursive schema nests only as deep as the guard keeps frames; past
 * that it must still close (no dead end): a chain of required children
 * ends where an optional one is left out. */
TEST(jsonschema_kw_recursion_depth) {
    char why[512];
    json_schema *s = test_compile_schema("{\"type\":\"object\",\"properties\":{\"next\":{\"$ref\":\"#\"},\"v\":{\"type\":\"integer\"}}}", why,
                                  sizeof why);
    CHECK_MSG(s != NULL, "%s", why);
    json_guard *g = json_guard_new_schema(NULL, s);
    int depth = 0;
    while (json_guard_feed(g, "{\"next\":", 8) == 0) depth++;
    CHECK_MSG(depth >= 8 && depth <= JSON_SCHEMA_MAX_DEPTH, "depth %d", depth);
    CHECK_EQ_INT(json_guard_feed(g, "{}", 2), 0);
    for (int i = 0; i < depth; i++) CHECK_EQ_INT(json_guard_feed(g, "}", 1), 0);
    CHECK(json_guard_done(g));
    json_guard_free(g);
    json_schema_free(s);
}

/* ---- the automaton against PCRE2 ----------------------------------------------- */

/* Strings drawn from a small alphabet: jre_matches agrees with PCRE2 (UTF,
 * unanchored search) on every one where the pattern is enforced. */
TEST(jsonschema_kw_regex_vs_pcre2) {
    static const char *const P[] = {"^[a-z0-9-]+$", "ab+c", "^(a|bc)*$", "^\\d{2,3}$", "x.y", "^[^a]b?$", "(?:ab){2}",
                                    "^a{0,2}b$", "^$", "c$", "^\\w+\\s\\W$", "[\\d.]+"};
    const char alpha[] = "abcx019.-y \n";
    uint64_t seed = 7;
    for (size_t i = 0; i < sizeof P / sizeof *P; i++) {
        jre_dfa d;
        char why[128];
        CHECK_MSG(jre_compile(P[i], &d, why, sizeof why) == JRE_OK, "%s: %s", P[i], why);
        int err;
        PCRE2_SIZE off;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)P[i], PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_DOLLAR_ENDONLY, &err, &off, NULL);
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
        for (int k = 0; k < 3000; k++) {
            char str[8];
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            int len = (int)(seed >> 60) % 7;
            for (int j = 0; j < len; j++) str[j] = alpha[(seed >> (8 + 5 * j)) % (sizeof alpha - 1)];
            int want = pcre2_match(re, (PCRE2_SPTR)str, (size_t)len, 0, 0, md, NULL) >= 0;
            int got = jre_matches(&d, str, (size_t)len);
            if (want != got) {
                test_fail(__FILE__, __LINE__, "pattern %s on '%.*s': dfa %d, pcre2 %d", P[i], len, str, got, want);
                break;
            }
        }
        pcre2_match_data_free(md);
        pcre2_code_free(re);
        jre_free(&d);
    }
}

/* ---- the mask, and sampling under it ---------------------------------------------- */

static const char *const STRINGS =
    "{\"type\":\"object\",\"properties\":{"
    "\"id\":{\"type\":\"string\",\"pattern\":\"^[a-z0-9-]+$\",\"maxLength\":12},"
    "\"when\":{\"type\":\"string\",\"format\":\"date-time\"},"
    "\"name\":{\"type\":\"string\",\"minLength\":2,\"maxLength\":8},"
    "\"mail\":{\"type\":\"string\",\"format\":\"email\",\"maxLength\":40},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"pattern\":\"^#\\\\w+$\",\"maxLength\":10},\"maxItems\":3},"
    "\"note\":{\"type\":\"string\",\"maxLength\":30},"
    "\"city\":{\"type\":\"string\",\"pattern\":\"^[^0-9]+$\",\"maxLength\":20}},"
    "\"required\":[\"id\",\"when\",\"name\"],\"additionalProperties\":false}";

static const char *const STR_PREFIXES[] = {
    "{\"id\":\"", "{\"id\":\"ab-", "{\"id\":\"abcdefghijk", "{\"when\":\"20", "{\"when\":\"2024-0", "{\"when\":\"2024-02-2",
    "{\"when\":\"2024-01-01T23:59:59", "{\"name\":\"", "{\"name\":\"x", "{\"name\":\"abcdefg", "{\"name\":\"\\",
    "{\"mail\":\"a@b", "{\"tags\":[\"#", "{\"note\":\"", "{\"note\":\"\xc3", "{\"note\":\"abcdefghijabcdefghijabcdefghi",
    "{\"city\":\"Z\xc3", "{\"city\":\"\xe2\x82", "{\"city\":\"abcdefghijklmnopqrs", "{\"city\":\"a\\"};

static void check_string_prefixes(const char *model) {
    tokenizer *t = test_load_tokenizer(model);
    if (!t) return;
    char why[512];
    json_schema *s = test_compile_schema(STRINGS, why, sizeof why);
    CHECK_MSG(s != NULL, "%s", why);
    json_vocab *v = json_vocab_new(t);
    for (size_t i = 0; s && i < sizeof STR_PREFIXES / sizeof *STR_PREFIXES; i++) test_mask_matches_feed(t, v, s, STR_PREFIXES[i]);
    json_vocab_free(v);
    json_schema_free(s);
    tok_free(t);
}

/* An independent check of STRINGS on a parsed output: PCRE2 for the
 * patterns (the formats by a looser PCRE2 pattern of their shape), code
 * points for the lengths. */
static int pcre_ok(const char *pat, const char *s) {
    int err;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_DOLLAR_ENDONLY, &err, &off, NULL);
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int ok = pcre2_match(re, (PCRE2_SPTR)s, PCRE2_ZERO_TERMINATED, 0, 0, md, NULL) >= 0;
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    return ok;
}

static size_t cps(const char *s) {
    size_t n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

static int strings_valid(const json_t *o, char *why, size_t cap) {
    const char *k;
    const json_t *v;
    if (!json_is_object(o) || !json_object_get(o, "id") || !json_object_get(o, "when") || !json_object_get(o, "name"))
        return snprintf(why, cap, "required missing"), 0;
    json_object_foreach((json_t *)o, k, v) {
        const char *sv = json_string_value(v);
        int ok = 1;
        if (!strcmp(k, "id")) ok = sv && pcre_ok("^[a-z0-9-]+$", sv) && cps(sv) <= 12;
        else if (!strcmp(k, "when")) ok = sv && pcre_ok("^\\d{4}-\\d\\d-\\d\\d[Tt]\\d\\d:\\d\\d:\\d\\d(\\.\\d+)?([Zz]|[+-]\\d\\d:\\d\\d)$", sv);
        else if (!strcmp(k, "name")) ok = sv && cps(sv) >= 2 && cps(sv) <= 8;
        else if (!strcmp(k, "mail")) ok = sv && pcre_ok("^[^@\\s]+@[^@\\s]+$", sv) && cps(sv) <= 40;
        else if (!strcmp(k, "note")) ok = sv && cps(sv) <= 30;
        else if (!strcmp(k, "city")) ok = sv && pcre_ok("^[^0-9]+$", sv) && cps(sv) <= 20;
        else if (!strcmp(k, "tags")) {
            size_t i;
            const json_t *e;
            ok = json_array_size(v) <= 3;
            json_array_foreach(v, i, e) ok &= json_is_string(e) && pcre_ok("^#\\w+$", json_string_value(e)) && cps(json_string_value(e)) <= 10;
        } else ok = 0;
        if (!ok) return snprintf(why, cap, "bad '%s'", k), 0;
    }
    return 1;
}

static void check_string_sampling(const char *model, int seeds) {
    test_schema_sampling(model, STRINGS, seeds, 500, strings_valid);
}

TEST(jsonschema_kw_tiny_mask_matches_feed) { check_string_prefixes(test_data("models/llama-q4_1.gguf")); }

TEST(jsonschema_kw_tiny_sampling) { check_string_sampling(test_data("models/llama-q4_1.gguf"), 60); }

TEST(real_jsonschema_kw_mask_matches_feed) { check_string_prefixes(test_real_model()); }

TEST(real_jsonschema_kw_sampling) { check_string_sampling(test_real_model(), 30); }

/* The cost of a mask call inside strings under each kind of constraint
 * (uncached: every call starts from a fresh guard), next to a free
 * string. Prints times; asserts only that masks allow something. */
TEST(real_jsonschema_kw_speed) {
    tokenizer *t = test_load_tokenizer(test_real_model());
    if (!t) return;
    static const struct { const char *what, *schema; } K[] = {
        {"free string", "{\"type\":\"string\"}"},
        {"maxLength 200", "{\"type\":\"string\",\"maxLength\":200}"},
        {"^[a-z0-9-]+$", "{\"type\":\"string\",\"pattern\":\"^[a-z0-9-]+$\"}"},
        {"pattern .*x.*", "{\"type\":\"string\",\"pattern\":\"x\"}"},
        {"format date-time", "{\"type\":\"string\",\"format\":\"date-time\"}"},
        {"format uri", "{\"type\":\"string\",\"format\":\"uri\"}"},
        {"format email", "{\"type\":\"string\",\"format\":\"email\"}"},
    };
    json_vocab *v = json_vocab_new(t);
    float *logits = calloc((size_t)tok_n_vocab(t), sizeof(float));
    const int reps = 20;
    for (size_t i = 0; i < sizeof K / sizeof *K; i++) {
        char text[512], why[256];
        snprintf(text, sizeof text, "{\"type\":\"object\",\"properties\":{\"s\":%s}}", K[i].schema);
        json_schema *s = test_compile_schema(text, why, sizeof why);
        CHECK_MSG(s != NULL, "%s", why);
        if (!s) continue;
        double total = 0, steady = 0;
        int allowed = 0, steps = 0;
        for (int r = 0; r < reps; r++) {
            json_guard *g = json_guard_new_schema(v, s);
            json_guard_feed(g, "{\"s\":\"", 6);
            double a = clock_ms();
            allowed = json_guard_mask(g, logits);
            total += clock_ms() - a;
            json_guard_free(g);
        }
        uint64_t seed = 5; /* then 40 tokens into the string, as generation goes */
        json_guard *g = json_guard_new_schema(v, s);
        json_guard_feed(g, "{\"s\":\"", 6);
        for (int k = 0; k < 40; k++) {
            for (int32_t j = 0; j < tok_n_vocab(t); j++) logits[j] = (float)test_unit_random(&seed);
            double a = clock_ms();
            int n = json_guard_mask(g, logits);
            steady += clock_ms() - a, steps++;
            CHECK(n > 0);
            int32_t best = -1;
            for (int32_t j = 0; j < tok_n_vocab(t); j++) {
                size_t len;
                const char *p = json_vocab_text(v, j, &len);
                if (!isinf(logits[j]) && !memchr(p, '"', len) && (best < 0 || logits[j] > logits[best])) best = j;
            }
            if (best < 0 || json_guard_accept(g, best)) break; /* only the closing quote is left */
        }
        json_guard_free(g);
        CHECK(allowed > 0);
        printf("    %-18s first mask %.3f ms, then %.3f ms per token over %d; %d tokens allowed at first\n", K[i].what,
               total / reps, steady / steps, steps, allowed);
        json_schema_free(s);
    }
    free(logits);
    json_vocab_free(v);
    tok_free(t);
}

/* Tool parameters are documents of their own: their "#/$defs/.." and "#"
 * refs resolve inside them, not in the wrapper the tool formats build
 * (pydantic puts $defs in every model with a nested one). */
TEST(jsonschema_kw_tool_refs_resolve_in_parameters) {
    const char *tools_text =
        "[{\"type\":\"function\",\"function\":{\"name\":\"plan\",\"parameters\":{\"type\":\"object\","
        "\"properties\":{\"steps\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/Step\"}},\"sub\":{\"$ref\":\"#\"}},"
        "\"required\":[\"steps\"],\"$defs\":{\"Step\":{\"type\":\"object\",\"properties\":{\"run\":{\"type\":\"string\","
        "\"pattern\":\"^[a-z]+$\"}},\"required\":[\"run\"],\"additionalProperties\":false}}}}},"
        "{\"name\":\"other\",\"input_schema\":{\"type\":\"object\",\"properties\":{\"x\":{\"$ref\":\"#/definitions/X\"}},"
        "\"definitions\":{\"X\":{\"enum\":[1,2]}}}}]";
    json_t *tools = json_loads(tools_text, 0, NULL);
    char why[512] = "";
    json_schema *s = json_schema_tools(tools, NULL, 1, why, sizeof why);
    CHECK_MSG(s != NULL, "%s", why);
    if (s) {
        CHECK(accepts(s, "{\"tool_calls\":[{\"name\":\"plan\",\"arguments\":{\"steps\":[{\"run\":\"ab\"}],"
                         "\"sub\":{\"steps\":[]}}},{\"name\":\"other\",\"arguments\":{\"x\":2}}]}"));
        CHECK(!accepts(s, "{\"tool_calls\":[{\"name\":\"plan\",\"arguments\":{\"steps\":[{\"run\":\"A\"}]}}]}"));
        CHECK(!accepts(s, "{\"tool_calls\":[{\"name\":\"plan\",\"arguments\":{\"steps\":[],\"sub\":{}}}]}"));
        CHECK(!accepts(s, "{\"tool_calls\":[{\"name\":\"other\",\"arguments\":{\"x\":3}}]}"));
    }
    json_schema_free(s);
    /* what is not enforced is named by tool */
    json_t *t2 = json_loads("[{\"name\":\"Bash\",\"input_schema\":{\"type\":\"object\",\"properties\":{\"c\":"
                            "{\"type\":\"string\",\"not\":{\"const\":\"rm\"}}}}}]", 0, NULL);
    s = json_schema_tools(t2, NULL, 1, why, sizeof why);
    CHECK_MSG(s && json_schema_unenforced(s) && !strcmp(json_schema_unenforced(s), "not at tool Bash #/properties/c"), "%s",
              s && json_schema_unenforced(s) ? json_schema_unenforced(s) : why);
    json_schema_free(s);
    json_decref(t2);
    s = json_schema_tool_call(tools, "plan", "arguments", why, sizeof why);
    CHECK_MSG(s != NULL, "%s", why);
    if (s) CHECK(accepts(s, "{\"name\":\"plan\",\"arguments\":{\"steps\":[{\"run\":\"x\"}]}}"));
    json_schema_free(s);
    json_decref(tools);
}

/* A tool that takes no arguments ({"type": "object", "properties": {}},
 * as the llm CLI and pydantic declare one) gets {} only: a model that
 * invents an argument makes the tool fail. A map keeps its keys. */
TEST(jsonschema_empty_properties_take_no_key) {
    char why[256];
    json_t *none = json_loads("{\"type\":\"object\",\"properties\":{}}", 0, NULL);
    json_t *map = json_loads("{\"type\":\"object\",\"properties\":{},\"additionalProperties\":{\"type\":\"string\"}}", 0, NULL);
    json_schema *s = json_schema_compile(none, why, sizeof why), *m = json_schema_compile(map, why, sizeof why);
    CHECK(s && m);
    json_vocab *v = NULL;
    json_guard *g = s ? json_guard_new_schema(v, s) : NULL, *gm = m ? json_guard_new_schema(v, m) : NULL;
    CHECK(g && json_guard_feed(g, "{}", 2) == 0 && json_guard_done(g));
    json_guard_free(g);
    g = s ? json_guard_new_schema(v, s) : NULL;
    CHECK(g && json_guard_feed(g, "{\"a\"", 4) != 0);
    CHECK(gm && json_guard_feed(gm, "{\"a\":\"b\"}", 9) == 0 && json_guard_done(gm));
    json_guard_free(g), json_guard_free(gm);
    json_schema_free(s), json_schema_free(m);
    json_decref(none), json_decref(map);
}

/* The generic tool format's text answer must be something a client can
 * see: `{"content": ""}` or blanks reached Claude Code as an empty text
 * block after hundreds of output tokens. */
TEST(jsonschema_generic_answer_is_not_blank) {
    char why[256];
    json_t *tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}}]",
                               0, NULL);
    json_schema *s = json_schema_tools(tools, NULL, 0, why, sizeof why);
    CHECK(s != NULL);
    static const struct { const char *out; int ok; } CASES[] = {
        {"{\"content\":\"\"}", 0}, {"{\"content\":\"  \\n \"}", 0}, {"{\"content\":\" a\"}", 1},
        {"{\"tool_calls\":[{\"name\":\"f\",\"arguments\":{}}]}", 1}};
    for (size_t i = 0; s && i < sizeof CASES / sizeof CASES[0]; i++) {
        json_guard *g = json_guard_new_schema(NULL, s);
        int ok = json_guard_feed(g, CASES[i].out, strlen(CASES[i].out)) == 0 && json_guard_done(g);
        CHECK_MSG(ok == CASES[i].ok, "%s", CASES[i].out);
        json_guard_free(g);
    }
    json_schema_free(s);
    json_decref(tools);
}
