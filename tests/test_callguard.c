/* test_callguard.c - native tool calls held to the declared tools
 * (text/callguard.h): what each format lets through, the mask against
 * accepting token by token, and random sampling under the mask. Uses the
 * tiny generated model's vocabulary (byte-level BPE, markers are text). */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "test_util.h"
#include "text/callguard.h"
#include "text/jsonschema.h"
#include "text/tokenizer.h"

#define TINY "models/llama-q4_1.gguf"

static const char *TOOLS =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"tz\":{\"enum\":[\"UTC\",\"CET\"]}},\"required\":[\"tz\"],\"additionalProperties\":false}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"days\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":7}},\"required\":[\"days\"]}}}]";

typedef struct fixture {
    tokenizer *t;
    json_vocab *v;
    json_schema *call;
    tc_format f;
} fixture;

static int setup(fixture *fx, tc_format f, const char *forced) {
    memset(fx, 0, sizeof *fx);
    fx->t = test_load_tokenizer(test_data(TINY));
    if (!fx->t) return -1;
    fx->v = json_vocab_new(fx->t);
    json_t *tools = json_loads(TOOLS, 0, NULL);
    char why[256];
    fx->call = json_schema_tool_call(tools, forced, f == TC_LLAMA3 ? "parameters" : "arguments", why, sizeof why);
    CHECK_MSG(fx->call != NULL, "%s", why);
    json_decref(tools);
    fx->f = f;
    return fx->call ? 0 : -1;
}

static void teardown(fixture *fx) {
    json_schema_free(fx->call);
    json_vocab_free(fx->v);
    tok_free(fx->t);
}

/* 0 if text goes through a fresh guard, else -1. */
static int feed(const fixture *fx, const char *text) {
    call_guard *g = call_guard_new(fx->v, fx->f, fx->call);
    int rc = call_guard_feed(g, text, strlen(text));
    call_guard_free(g);
    return rc;
}

TEST(callguard_hermes_feed) {
    fixture fx;
    if (setup(&fx, TC_HERMES, NULL)) return;
    CHECK_EQ_INT(feed(&fx, "Let me check. <tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}}\n"
                           "</tool_call>\n<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"days\":3}}</tool_call>"
                           " Done, <b>tags</b> and {json} are free text."), 0);
    CHECK_EQ_INT(feed(&fx, "<tool_call>{\"name\": \"rm_rf\""), -1);                      /* undeclared */
    CHECK_EQ_INT(feed(&fx, "<tool_call>{\"name\": \"get_time\", \"arguments\": {\"tz\": \"PST\"}}"), -1);
    CHECK_EQ_INT(feed(&fx, "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"days\": 9}}"), -1);
    CHECK_EQ_INT(feed(&fx, "<tool_call>{\"arguments\": {}, \"name\": \"get_time\"}"), -1); /* name first */
    CHECK_EQ_INT(feed(&fx, "<tool_call>{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}} and more"), -1);
    CHECK_EQ_INT(feed(&fx, "<tool_call> hello"), -1);
    /* reasoning may mention the marker (the parser ignores it there too) */
    CHECK_EQ_INT(feed(&fx, "<think>I could write <tool_call>{oops</think>\n<tool_call>{\"name\": \"get_time\", "
                           "\"arguments\": {\"tz\": \"CET\"}}</tool_call>"), 0);
    CHECK_EQ_INT(feed(&fx, "<think>hm</think><tool_call>{oops"), -1);
    call_guard *g = call_guard_new(fx.v, TC_HERMES, fx.call);
    CHECK(!call_guard_in_call(g));
    CHECK_EQ_INT(call_guard_feed(g, "x <tool_call>", 13), 0);
    CHECK(call_guard_in_call(g));
    call_guard_free(g);
    teardown(&fx);
}

TEST(callguard_llama3_feed) {
    fixture fx;
    if (setup(&fx, TC_LLAMA3, NULL)) return;
    CHECK_EQ_INT(feed(&fx, "  {\"name\": \"get_time\", \"parameters\": {\"tz\": \"CET\"}}; "
                           "{\"name\": \"get_weather\", \"parameters\": {\"days\": 1}}"), 0);
    CHECK_EQ_INT(feed(&fx, "The answer is {\"name\": \"anything\"}"), 0); /* not at the start: content */
    CHECK_EQ_INT(feed(&fx, "{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}"), -1);
    CHECK_EQ_INT(feed(&fx, "{\"name\": \"get_time\", \"parameters\": {\"tz\": \"CET\"}} then text"), -1);
    CHECK_EQ_INT(feed(&fx, "{\"city\": \"Paris\"}"), -1);
    teardown(&fx);
}

TEST(callguard_mistral_feed) {
    fixture fx;
    if (setup(&fx, TC_MISTRAL, NULL)) return;
    CHECK_EQ_INT(feed(&fx, "ok [TOOL_CALLS] [{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}}, "
                           "{\"name\": \"get_weather\", \"arguments\": {\"days\": 2}}] bye"), 0);
    CHECK_EQ_INT(feed(&fx, "[TOOL_CALLS]get_time[ARGS]{\"whatever\": 1}"), 0); /* the name form: free */
    CHECK_EQ_INT(feed(&fx, "[TOOL_CALLS][{\"name\": \"nope\""), -1);
    CHECK_EQ_INT(feed(&fx, "[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}} x"), -1);
    teardown(&fx);
}

TEST(callguard_harmony_feed) {
    fixture fx;
    if (setup(&fx, TC_HARMONY, NULL)) return;
    /* the model's order, then the template's (recipient first), after reasoning */
    CHECK_EQ_INT(feed(&fx, "<|channel|>analysis<|message|>Call to=functions.rm_rf? no.<|end|><|start|>assistant"
                           "<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{\"tz\": \"UTC\"}"), 0);
    CHECK_EQ_INT(feed(&fx, " to=functions.get_weather<|channel|>commentary json<|message|>{\"days\": 3} <|end|>"
                           "<|start|>assistant<|channel|>final<|message|>Done {json} is free text."), 0);
    CHECK_EQ_INT(feed(&fx, "<|channel|>commentary to=functions.rm_rf"), -1);                   /* undeclared */
    CHECK_EQ_INT(feed(&fx, "<|channel|>commentary to=functions.get_ti <|message|>"), -1);      /* cut name */
    CHECK_EQ_INT(feed(&fx, "<|channel|>commentary to=functions.get_time<|message|>{\"tz\": \"PST\"}"), -1);
    CHECK_EQ_INT(feed(&fx, "<|channel|>commentary to=functions.get_weather<|message|>{\"days\": 9}"), -1);
    CHECK_EQ_INT(feed(&fx, "<|channel|>commentary to=functions.get_weather<|message|>{\"days\": 2}}"), -1);
    CHECK_EQ_INT(feed(&fx, "<|channel|>commentary to=functions.get_weather<|message|>[1]"), -1);
    call_guard *g = call_guard_new(fx.v, TC_HARMONY, fx.call);
    CHECK_EQ_INT(call_guard_feed(g, "<|channel|>commentary to=functions.", 35), 0);
    CHECK(call_guard_in_call(g));
    call_guard_free(g);
    teardown(&fx);
}

TEST(callguard_forced_name) {
    fixture fx;
    if (setup(&fx, TC_HERMES, "get_weather")) return;
    CHECK_EQ_INT(feed(&fx, "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"days\": 7}}</tool_call>"), 0);
    CHECK_EQ_INT(feed(&fx, "<tool_call>{\"name\": \"get_time\""), -1);
    teardown(&fx);
}

/* After prefix, the mask allows exactly the tokens a fresh guard fed
 * prefix accepts (an independent path: bytes through call_guard_accept). */
static void check_mask(const fixture *fx, const char *prefix) {
    int32_t n = tok_n_vocab(fx->t);
    float *logits = calloc((size_t)n, sizeof(float));
    call_guard *g = call_guard_new(fx->v, fx->f, fx->call);
    CHECK_EQ_INT(call_guard_feed(g, prefix, strlen(prefix)), 0);
    int allowed = call_guard_mask(g, logits), count = 0;
    for (int32_t id = 0; id < n; id++) {
        call_guard *h = call_guard_new(fx->v, fx->f, fx->call);
        call_guard_feed(h, prefix, strlen(prefix));
        int ok = call_guard_accept(h, id) == 0;
        call_guard_free(h);
        count += ok;
        CHECK_MSG(ok == !isinf(logits[id]), "after '%s': token %d ('%s') mask %d, accept %d", prefix, id,
                  test_token_text(fx->t, id, &(int){0}), !isinf(logits[id]), ok);
        if (ok != !isinf(logits[id])) break;
    }
    CHECK_EQ_INT(allowed, count);
    call_guard_free(g);
    free(logits);
}

TEST(callguard_mask_matches_accept) {
    static const struct { tc_format f; const char *prefix; } CASES[] = {
        {TC_HERMES, ""}, {TC_HERMES, "hi <tool_call"}, {TC_HERMES, "<tool_call>"},
        {TC_HERMES, "<tool_call>{\"name\": \"get_"}, {TC_HERMES, "<tool_call>{\"name\": \"get_time\", \"arguments\": {"},
        {TC_HERMES, "<tool_call>{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}}"},
        {TC_HERMES, "<tool_call>{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}}\n</tool"},
        {TC_HERMES, "<think>so <tool_call"}, {TC_HERMES, "<think>ok</think> <tool_call"},
        {TC_LLAMA3, ""}, {TC_LLAMA3, "  "}, {TC_LLAMA3, "{\"name\": \"get_weather\", \"parameters\": {\"days\": 2}}"},
        {TC_LLAMA3, "text"}, {TC_MISTRAL, "[TOOL_CALLS"}, {TC_MISTRAL, "[TOOL_CALLS]"},
        {TC_MISTRAL, "[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}"},
        {TC_HARMONY, ""}, {TC_HARMONY, "<|channel|>commentary to=functions"},
        {TC_HARMONY, "<|channel|>commentary to=functions.get_"}, {TC_HARMONY, "<|channel|>commentary to=functions.get_time"},
        {TC_HARMONY, "<|channel|>commentary to=functions.get_time <|constrain|>json<|message"},
        {TC_HARMONY, "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"},
        {TC_HARMONY, "<|channel|>commentary to=functions.get_weather<|message|>{\"days\": 2"},
        {TC_HARMONY, "<|channel|>commentary to=functions.get_weather<|message|>{\"days\": 2}"},
        {TC_HARMONY, "<|channel|>analysis<|message|>to=functions."},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        fixture fx;
        if (setup(&fx, CASES[i].f, NULL)) return;
        check_mask(&fx, CASES[i].prefix);
        teardown(&fx);
    }
}

static double rng_unit(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return (double)(*s >> 11) / 9007199254740992.0;
}

/* Greedy sampling from random logits under the mask, after the forced
 * opening `open`, the tokens of `push` favoured more each step (towards
 * closing): the text written (opening included) into text, its length
 * into *used; 1 when the call closed within 300 steps. */
static int sample_call(const fixture *fx, const char *open, const char *const *push, uint64_t seed, char *text,
                       size_t cap, size_t *used) {
    int32_t n = tok_n_vocab(fx->t);
    float *logits = malloc(sizeof(float) * (size_t)n);
    call_guard *g = call_guard_new(fx->v, fx->f, fx->call);
    CHECK_EQ_INT(call_guard_feed(g, open, strlen(open)), 0);
    *used = (size_t)snprintf(text, cap, "%s", open);
    uint64_t rng = seed * 0x9e3779b97f4a7c15ull;
    for (int step = 0; step < 300 && call_guard_in_call(g); step++) {
        for (int32_t i = 0; i < n; i++) logits[i] = (float)(rng_unit(&rng) * 4.0);
        for (const char *const *c = push; *c; c++) {
            int32_t id = tok_find(fx->t, *c);
            if (id >= 0) logits[id] += (float)step * 0.1f;
        }
        CHECK(call_guard_mask(g, logits) > 0);
        int32_t best = -1;
        for (int32_t i = 0; i < n; i++)
            if (!isinf(logits[i]) && (best < 0 || logits[i] > logits[best])) best = i;
        CHECK_EQ_INT(call_guard_accept(g, best), 0);
        int len;
        const char *p = test_token_text(fx->t, best, &len);
        if (*used + (size_t)len < cap) memcpy(text + *used, p, (size_t)len), *used += (size_t)len;
    }
    int closed = !call_guard_in_call(g);
    call_guard_free(g);
    free(logits);
    return closed;
}

/* A closed call is one of TOOLS with arguments its schema accepts. */
static void check_call(const char *name, const json_t *args, const char *text, size_t used) {
    CHECK_MSG(name && json_is_object(args), "not a call: %.*s", (int)used, text);
    if (!name || !json_is_object(args)) return;
    if (!strcmp(name, "get_time")) {
        const char *tz = json_string_value(json_object_get(args, "tz"));
        CHECK(tz && (!strcmp(tz, "UTC") || !strcmp(tz, "CET")) && json_object_size(args) == 1);
    } else {
        CHECK(!strcmp(name, "get_weather"));
        json_int_t d = json_integer_value(json_object_get(args, "days"));
        CHECK(d >= 1 && d <= 7);
    }
}

/* Sampling from random logits under the mask, after a forced opening:
 * every call that closes is a declared tool with valid arguments. */
TEST(callguard_hermes_sampling) {
    fixture fx;
    if (setup(&fx, TC_HERMES, NULL)) return;
    static const char *const push[] = {"\"", "}", NULL};
    const char *open = "<tool_call>\n{\"name\": \"";
    int closed = 0;
    for (uint64_t seed = 1; seed <= 60; seed++) {
        char text[8192];
        size_t used;
        if (!sample_call(&fx, open, push, seed, text, sizeof text, &used)) continue;
        closed++;
        json_t *call = json_loadb(text + strlen("<tool_call>\n"), used - strlen("<tool_call>\n"), 0, NULL);
        check_call(json_string_value(json_object_get(call, "name")), json_object_get(call, "arguments"), text, used);
        json_decref(call);
    }
    CHECK_MSG(closed >= 30, "only %d of 60 calls closed", closed);
    teardown(&fx);
}

/* Harmony: sampling under the mask from the forced opening (a recipient
 * in the functions namespace, the name still open): every call that
 * closes parses (toolcall.h) as a declared tool with valid arguments. */
TEST(callguard_harmony_sampling) {
    fixture fx;
    if (setup(&fx, TC_HARMONY, NULL)) return;
    static const char *const push[] = {"\"", "}", "<", "|", ">", " ", NULL};
    int closed = 0;
    for (uint64_t seed = 1; seed <= 40; seed++) {
        char text[8192];
        size_t used;
        if (!sample_call(&fx, "<|channel|>commentary to=functions.", push, seed, text, sizeof text, &used)) continue;
        closed++;
        tc_parser *tp = tc_new(TC_HARMONY);
        const tc_event *ev;
        int nev;
        strata_err err = {0};
        CHECK_MSG(tc_feed(tp, text, used, 1, &ev, &nev, &err) == 0, "%s: %.*s", err.msg, (int)used, text);
        const char **names, **args;
        int nc = tc_calls(tp, &names, &args);
        CHECK_MSG(nc == 1, "%d calls in %.*s", nc, (int)used, text);
        json_t *a = nc == 1 ? json_loads(args[0], 0, NULL) : NULL;
        check_call(nc == 1 ? names[0] : NULL, a, text, used);
        json_decref(a);
        tc_free(tp);
    }
    CHECK_MSG(closed >= 20, "only %d of 40 calls closed", closed);
    teardown(&fx);
}
