/* test_toolcall.c - the streaming tool-call parser: every format, single
 * and parallel calls, content around calls, malformed output, held-back
 * markers, and the generic system prompt.
 *
 * Most tests go through parse_all(), which feeds the same output whole
 * and in pieces of 1, 2, 3 and 7 bytes and checks that the events always
 * add up to the same content and calls, that call events come in order
 * (BEGIN, ARGS..., END), that every text and argument event is whole
 * UTF-8, and that the ARGS of each call add up to tc_calls' arguments. */
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "text/jsonload.h"
#include "text/jsonscan.h"
#include "text/toolcall.h"

#define MAX_CALLS 8

typedef struct result {
    int rc;
    char content[4096];
    char reasoning[4096];
    int n;
    char names[MAX_CALLS][64];
    char args[MAX_CALLS][1024];
} result;

static void cat(char *dst, size_t cap, const char *s, size_t n) {
    size_t l = strlen(dst);
    if (l + n >= cap) n = cap - l - 1;
    memcpy(dst + l, s, n);
    dst[l + n] = '\0';
}

/* 1 if s[0..n) is whole UTF-8 (no sequence cut at either end). */
static int whole_utf8(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        size_t k = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
        if (k == 0 || i + k > n) return 0;
        for (size_t j = 1; j < k; j++)
            if (((unsigned char)s[i + j] & 0xC0) != 0x80) return 0;
        i += k;
    }
    return 1;
}

/* Events are checked for whole UTF-8 only when the output itself is. */
static int g_input_utf8;

/* Per-call event order: 0 none, 1 begun, 2 ended. */
static void check_event(const tc_event *e, int *state, result *r) {
    if (e->kind == TC_EV_TEXT) {
        CHECK(e->index == -1);
        CHECK_MSG(!g_input_utf8 || whole_utf8(e->text, e->len), "text event cuts UTF-8");
        cat(r->content, sizeof r->content, e->text, e->len);
        return;
    }
    if (e->kind == TC_EV_REASONING) {
        CHECK(e->index == -1);
        CHECK_MSG(!g_input_utf8 || whole_utf8(e->text, e->len), "reasoning event cuts UTF-8");
        cat(r->reasoning, sizeof r->reasoning, e->text, e->len);
        return;
    }
    CHECK(e->index >= 0 && e->index < MAX_CALLS);
    if (e->index < 0 || e->index >= MAX_CALLS) return;
    int i = e->index;
    if (e->kind == TC_EV_CALL_BEGIN) {
        CHECK_MSG(state[i] == 0, "call %d begun twice", i);
        CHECK_MSG(i == 0 || state[i - 1] == 2, "call %d begun before call %d ended", i, i - 1);
        state[i] = 1;
        cat(r->names[i], sizeof r->names[i], e->text, e->len);
        if (i + 1 > r->n) r->n = i + 1;
    } else if (e->kind == TC_EV_CALL_ARGS) {
        CHECK_MSG(state[i] == 1, "args of call %d outside BEGIN..END", i);
        CHECK_MSG(!g_input_utf8 || whole_utf8(e->text, e->len), "args event cuts UTF-8");
        CHECK(e->len > 0);
        cat(r->args[i], sizeof r->args[i], e->text, e->len);
    } else {
        CHECK_MSG(state[i] == 1, "call %d ended without a begin", i);
        CHECK(e->len == 0 && e->text[0] == '\0');
        state[i] = 2;
    }
}

/* Feeds out in pieces of `step` bytes (0: all at once). */
static void parse_step(tc_format f, const char *out, size_t step, result *r) {
    memset(r, 0, sizeof *r);
    tc_parser *p = tc_new(f);
    size_t len = strlen(out), at = 0;
    g_input_utf8 = whole_utf8(out, len);
    int state[MAX_CALLS] = {0};
    strata_err err = {0};
    do {
        size_t k = step == 0 || len - at < step ? len - at : step;
        int final = at + k == len;
        const tc_event *evs;
        int n;
        r->rc = tc_feed(p, out + at, k, final, &evs, &n, &err);
        for (int i = 0; i < n; i++) check_event(&evs[i], state, r);
        at += k;
        if (r->rc) break;
    } while (at < len);
    if (r->rc == 0) {
        const char **names, **args;
        int nc = tc_calls(p, &names, &args);
        CHECK_EQ_INT(nc, r->n);
        for (int i = 0; i < nc && i < MAX_CALLS; i++) {
            CHECK_EQ_INT(state[i], 2);
            CHECK_STR(names[i], r->names[i]);
            CHECK_STR(args[i], r->args[i]);
        }
    } else {
        CHECK_EQ_INT(err.code, STRATA_EFORMAT);
        CHECK(strlen(err.msg) > 0);
    }
    tc_free(p);
}

static void same(const result *a, const result *b, size_t step) {
    CHECK_MSG(a->rc == b->rc, "step %zu: rc %d vs %d", step, a->rc, b->rc);
    if (a->rc) return; /* events before an error may differ by piece size */
    CHECK_MSG(!strcmp(a->content, b->content), "step %zu: content \"%s\" vs \"%s\"", step,
              a->content, b->content);
    CHECK_MSG(!strcmp(a->reasoning, b->reasoning), "step %zu: reasoning \"%s\" vs \"%s\"", step,
              a->reasoning, b->reasoning);
    CHECK_EQ_INT(a->n, b->n);
    for (int i = 0; i < a->n; i++) {
        CHECK_STR(a->names[i], b->names[i]);
        CHECK_STR(a->args[i], b->args[i]);
    }
}

static result R; /* the whole-feed result of the last parse_all */

static void parse_all(tc_format f, const char *out) {
    static const size_t steps[] = {1, 2, 3, 7};
    parse_step(f, out, 0, &R);
    for (size_t i = 0; i < sizeof steps / sizeof *steps; i++) {
        result r;
        parse_step(f, out, steps[i], &r);
        same(&R, &r, steps[i]);
    }
}

static void expect_call(int i, const char *name, const char *args) {
    CHECK_MSG(i < R.n, "call %d missing (have %d)", i, R.n);
    CHECK_STR(R.names[i], name);
    CHECK_STR(R.args[i], args);
}

TEST(toolcall_detect) {
    CHECK_EQ_INT(tc_detect("{% for t in tools %}<tool_call>{{ t }}</tool_call>"), TC_HERMES);
    CHECK_EQ_INT(tc_detect("{{ '<|python_tag|>' }}"), TC_LLAMA3);
    CHECK_EQ_INT(tc_detect("<|start_header_id|>ipython<|end_header_id|>"), TC_LLAMA3);
    CHECK_EQ_INT(tc_detect("[AVAILABLE_TOOLS]...[TOOL_CALLS]"), TC_MISTRAL);
    CHECK_EQ_INT(tc_detect("<|im_start|>{{ m.content }}"), TC_GENERIC);
    CHECK_EQ_INT(tc_detect(NULL), TC_GENERIC);
    CHECK_EQ_INT(tc_detect("{{- \"<|start|>assistant<|channel|>final<|message|>\" }}"), TC_HARMONY);
    CHECK_STR(tc_format_name(TC_HARMONY), "harmony");
    CHECK_STR(tc_format_name(TC_HERMES), "hermes");
}

TEST(toolcall_plain_text_unchanged) {
    static const char *texts[] = {
        "Hello, world!", "a < b and c > d", "<toolbox> is not a tag", "x <tool_cal",
        "array [1, 2] and [TOOL_CALL", "  spaced  \n\n", "héllo wörld — 你好 🎉",
        "{not json", "[TOOL_CALLS", "", "<", "<think", "<|python_ta", "``", "```json",
        "```python\nprint(1)\n```", "```json\n{\"result\": 1}\n```", "```\n\nhi",
    };
    tc_format fmts[] = {TC_NONE, TC_HERMES, TC_LLAMA3, TC_MISTRAL, TC_GENERIC, TC_HARMONY};
    for (size_t f = 0; f < 6; f++)
        for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
            parse_all(fmts[f], texts[i]);
            CHECK_EQ_INT(R.rc, 0);
            CHECK_EQ_INT(R.n, 0);
            CHECK_MSG(!strcmp(R.content, texts[i]), "%s: \"%s\" became \"%s\"",
                      tc_format_name(fmts[f]), texts[i], R.content);
        }
}

TEST(toolcall_none_ignores_markers) {
    const char *s = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
    parse_all(TC_NONE, s);
    CHECK_EQ_INT(R.n, 0);
    CHECK_STR(R.content, s);
}

TEST(toolcall_hermes_single) {
    parse_all(TC_HERMES, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                         "{\"city\": \"Paris\", \"days\": [1, 2]}}\n</tool_call>");
    CHECK_EQ_INT(R.rc, 0);
    CHECK_EQ_INT(R.n, 1);
    expect_call(0, "get_weather", "{\"city\":\"Paris\",\"days\":[1,2]}");
    CHECK_STR(R.content, "");
}

TEST(toolcall_hermes_parallel_with_content) {
    parse_all(TC_HERMES,
              "Let me check both.\n\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n"
              "</tool_call>\n<tool_call>\n{\"arguments\": {\"y\": \"é \\\" \\u00e9\"}, "
              "\"name\": \"b\"}\n</tool_call>\n");
    CHECK_EQ_INT(R.rc, 0);
    CHECK_EQ_INT(R.n, 2);
    CHECK_STR(R.content, "Let me check both.");
    expect_call(0, "a", "{\"x\":1}");
    expect_call(1, "b", "{\"y\":\"é \\\" \\u00e9\"}"); /* escapes kept as written */
}

TEST(toolcall_hermes_qwen3_think) {
    /* A marker inside the reasoning is not a call. */
    parse_all(TC_HERMES, "<think>\nI could use <tool_call> here.\n</think>\n\n"
                         "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>");
    CHECK_EQ_INT(R.rc, 0);
    CHECK_EQ_INT(R.n, 1);
    CHECK_STR(R.content, "<think>\nI could use <tool_call> here.\n</think>");
    expect_call(0, "f", "{}");
}

TEST(toolcall_hermes_string_and_missing_args) {
    parse_all(TC_HERMES, "<tool_call>{\"name\": \"s\", \"arguments\": "
                         "\"{\\\"q\\\": \\\"a b\\\", \\\"n\\\": 2}\"}</tool_call>"
                         "<tool_call>{\"name\": \"now\"}</tool_call>"
                         "<tool_call>{\"name\": \"z\", \"arguments\": null}</tool_call>");
    CHECK_EQ_INT(R.rc, 0);
    CHECK_EQ_INT(R.n, 3);
    expect_call(0, "s", "{\"q\":\"a b\",\"n\":2}");
    expect_call(1, "now", "{}");
    expect_call(2, "z", "{}");
}

TEST(toolcall_hermes_text_after_and_lenient_close) {
    parse_all(TC_HERMES, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": true}}\n"
                         "</tool_call>\nDone here.");
    CHECK_EQ_INT(R.rc, 0);
    CHECK_STR(R.content, "Done here.");
    /* Output that stops right after the JSON (</tool_call> was a stop
     * string, say) still gives the call. */
    parse_all(TC_HERMES, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_");
    CHECK_EQ_INT(R.rc, 0);
    CHECK_EQ_INT(R.n, 1);
    CHECK_STR(R.content, "");
}

TEST(toolcall_args_normalised) {
    /* Whitespace goes, raw control characters in strings become escapes,
     * Unicode and number spelling stay. */
    parse_all(TC_HERMES, "<tool_call>\n{ \"name\" : \"w\" ,\n \"arguments\" : {\n  \"code\": "
                         "\"line1\nline2\ttab\",\n  \"n\": -1.50e+3 , \"u\": \"日本 🎉\" }\n}\n"
                         "</tool_call>");
    CHECK_EQ_INT(R.rc, 0);
    expect_call(0, "w", "{\"code\":\"line1\\nline2\\ttab\",\"n\":-1.50e+3,\"u\":\"日本 🎉\"}");
}

TEST(toolcall_name_streams_early) {
    tc_parser *p = tc_new(TC_HERMES);
    const tc_event *e;
    int n;
    strata_err err;
    const char *a = "Hi <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa";
    CHECK_EQ_INT(tc_feed(p, a, strlen(a), 0, &e, &n, &err), 0);
    CHECK_EQ_INT(n, 3);
    CHECK(e[0].kind == TC_EV_TEXT && !strcmp(e[0].text, "Hi"));
    CHECK(e[1].kind == TC_EV_CALL_BEGIN && !strcmp(e[1].text, "get_weather") && e[1].index == 0);
    CHECK(e[2].kind == TC_EV_CALL_ARGS && !strcmp(e[2].text, "{\"city\":\"Pa"));
    const char *b = "ris\"}}\n</tool_call>";
    CHECK_EQ_INT(tc_feed(p, b, strlen(b), 0, &e, &n, &err), 0);
    CHECK_EQ_INT(n, 2);
    CHECK(e[0].kind == TC_EV_CALL_ARGS && !strcmp(e[0].text, "ris\"}"));
    CHECK(e[1].kind == TC_EV_CALL_END && e[1].index == 0);
    CHECK_EQ_INT(tc_feed(p, "", 0, 1, &e, &n, &err), 0);
    CHECK_EQ_INT(n, 0);
    tc_free(p);
}

TEST(toolcall_partial_marker_held_then_released) {
    tc_parser *p = tc_new(TC_HERMES);
    const tc_event *e;
    int n;
    strata_err err;
    CHECK_EQ_INT(tc_feed(p, "a <too", 6, 0, &e, &n, &err), 0);
    CHECK_EQ_INT(n, 1);
    CHECK_STR(e[0].text, "a"); /* " <too" could start a call */
    CHECK_EQ_INT(tc_feed(p, "lbox> b", 7, 0, &e, &n, &err), 0);
    CHECK_EQ_INT(n, 1);
    CHECK_STR(e[0].text, " <toolbox> b");
    CHECK_EQ_INT(tc_feed(p, " < c", 4, 0, &e, &n, &err), 0);
    CHECK_EQ_INT(n, 1);
    CHECK_STR(e[0].text, " < c");
    CHECK_EQ_INT(tc_feed(p, " <", 2, 0, &e, &n, &err), 0);
    CHECK_EQ_INT(n, 0); /* a call may follow, and spaces before it are not content */
    CHECK_EQ_INT(tc_feed(p, "", 0, 1, &e, &n, &err), 0);
    CHECK_EQ_INT(n, 1);
    CHECK_STR(e[0].text, " <");
    tc_free(p);
}

TEST(toolcall_utf8_never_cut) {
    /* One byte at a time, a text event never ends inside a character. */
    parse_all(TC_HERMES, "🎉é<tool_call>{\"name\":\"f\",\"arguments\":{\"k\":\"日本\"}}</tool_call>");
    CHECK_EQ_INT(R.rc, 0);
    CHECK_STR(R.content, "🎉é");
    expect_call(0, "f", "{\"k\":\"日本\"}");
}

TEST(toolcall_llama3) {
    parse_all(TC_LLAMA3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}");
    CHECK_EQ_INT(R.rc, 0);
    expect_call(0, "get_weather", "{\"city\":\"Oslo\"}");
    CHECK_STR(R.content, "");
    parse_all(TC_LLAMA3, "<|python_tag|>{\"type\": \"function\", \"name\": \"f\", "
                         "\"parameters\": {\"a\": 1}}");
    CHECK_EQ_INT(R.rc, 0);
    expect_call(0, "f", "{\"a\":1}");
    CHECK_STR(R.content, "");
    parse_all(TC_LLAMA3, "\n {\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", "
                         "\"arguments\": {\"x\": null}}\n");
    CHECK_EQ_INT(R.n, 2);
    expect_call(0, "a", "{}");
    expect_call(1, "b", "{\"x\":null}");
    CHECK_STR(R.content, "");
}

TEST(toolcall_llama3_not_a_call) {
    /* JSON that is not a call, and a call that does not start the reply,
     * are content. */
    const char *j = "{\"answer\": 42, \"name\": \"x\"}";
    parse_all(TC_LLAMA3, j);
    CHECK_EQ_INT(R.n, 0);
    CHECK_STR(R.content, j);
    const char *t = "Sure: {\"name\": \"f\", \"parameters\": {}}";
    parse_all(TC_LLAMA3, t);
    CHECK_EQ_INT(R.n, 0);
    CHECK_STR(R.content, t);
    parse_all(TC_LLAMA3, "<|python_tag|>brave_search.call(query=\"x\")");
    CHECK_EQ_INT(R.n, 0);
    CHECK_STR(R.content, "<|python_tag|>brave_search.call(query=\"x\")");
}

TEST(toolcall_mistral_array) {
    parse_all(TC_MISTRAL, "[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"q\": \"x\"}, "
                          "\"id\": \"abc123def\"}, {\"name\": \"b\", \"arguments\": {}}]");
    CHECK_EQ_INT(R.rc, 0);
    CHECK_EQ_INT(R.n, 2);
    expect_call(0, "a", "{\"q\":\"x\"}");
    expect_call(1, "b", "{}");
    CHECK_STR(R.content, "");
}

TEST(toolcall_mistral_name_args) {
    parse_all(TC_MISTRAL, "Checking.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Rome\"}"
                          "[TOOL_CALLS]get_time[CALL_ID]a1b2c3d4e[ARGS]{}");
    CHECK_EQ_INT(R.rc, 0);
    CHECK_EQ_INT(R.n, 2);
    CHECK_STR(R.content, "Checking.");
    expect_call(0, "get_weather", "{\"city\":\"Rome\"}");
    expect_call(1, "get_time", "{}");
}

TEST(toolcall_generic_calls) {
    parse_all(TC_GENERIC, "{\"tool_calls\": [{\"name\": \"a\", \"arguments\": {\"x\": [1, {\"y\": 2}]}},"
                          " {\"type\": \"function\", \"function\": {\"name\": \"b\", "
                          "\"arguments\": \"{\\\"k\\\": 1}\"}}]}");
    CHECK_EQ_INT(R.rc, 0);
    CHECK_EQ_INT(R.n, 2);
    expect_call(0, "a", "{\"x\":[1,{\"y\":2}]}");
    expect_call(1, "b", "{\"k\":1}");
    CHECK_STR(R.content, "");
    parse_all(TC_GENERIC, "  {\"name\": \"bare\", \"arguments\": {}}  ");
    expect_call(0, "bare", "{}");
    CHECK_STR(R.content, "");
}

TEST(toolcall_generic_content) {
    parse_all(TC_GENERIC, "{\"content\": \"Hi \\\"you\\\"\\n\\u00e9\\ud83c\\udf89 日本\"}\n");
    CHECK_EQ_INT(R.rc, 0);
    CHECK_EQ_INT(R.n, 0);
    CHECK_STR(R.content, "Hi \"you\"\né🎉 日本");
    /* Content streams as it is generated, before the JSON closes. */
    tc_parser *p = tc_new(TC_GENERIC);
    const tc_event *e;
    int n;
    strata_err err;
    const char *a = "{\"content\": \"Hello wor";
    CHECK_EQ_INT(tc_feed(p, a, strlen(a), 0, &e, &n, &err), 0);
    CHECK_EQ_INT(n, 1);
    CHECK_STR(e[0].text, "Hello wor");
    tc_free(p);
    /* Other JSON, or no JSON at all, is plain content. */
    parse_all(TC_GENERIC, "{\"result\": 3}");
    CHECK_STR(R.content, "{\"result\": 3}");
}

TEST(toolcall_generic_fenced) {
    parse_all(TC_GENERIC, "```json\n{\"tool_calls\": [{\"name\": \"f\", \"arguments\": "
                          "{\"a\": 1}}]}\n```\n");
    CHECK_EQ_INT(R.rc, 0);
    CHECK_STR(R.content, "");
    expect_call(0, "f", "{\"a\":1}");
    parse_all(TC_LLAMA3, "```\n{\"name\": \"g\", \"parameters\": {}}\n```");
    CHECK_EQ_INT(R.rc, 0);
    CHECK_STR(R.content, "");
    expect_call(0, "g", "{}");
}

TEST(toolcall_generic_content_and_calls) {
    parse_all(TC_GENERIC, "{\"content\": \"Looking.\", \"tool_calls\": [{\"name\": \"f\", "
                          "\"arguments\": {}}]}");
    CHECK_EQ_INT(R.rc, 0);
    CHECK_STR(R.content, "Looking.");
    expect_call(0, "f", "{}");
}

TEST(toolcall_malformed) {
    static const struct { tc_format f; const char *s; } bad[] = {
        {TC_HERMES, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1"},   /* unterminated */
        {TC_HERMES, "text <tool_call>"},                                         /* empty */
        {TC_HERMES, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": tru}}</tool_call>"},
        {TC_HERMES, "<tool_call>{\"name\": \"f\" \"arguments\": {}}</tool_call>"},
        {TC_HERMES, "<tool_call>{\"arguments\": {\"a\": 1}}</tool_call>"},        /* no name */
        {TC_HERMES, "<tool_call>{\"name\": \"\", \"arguments\": {}}</tool_call>"},
        {TC_HERMES, "<tool_call>{\"name\": 3, \"arguments\": {}}</tool_call>"},
        {TC_HERMES, "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>"},
        {TC_HERMES, "<tool_call>{\"name\": \"f\", \"arguments\": \"not json\"}</tool_call>"},
        {TC_HERMES, "<tool_call>get_weather(city='x')</tool_call>"},
        {TC_HERMES, "<tool_call>{\"name\": \"f\", \"arguments\": {}}} junk"},
        {TC_HERMES, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 01}}</tool_call>"},
        {TC_HERMES, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": \"\\x\"}}</tool_call>"},
        {TC_LLAMA3, "{\"name\": \"f\", \"parameters\": {\"a\": "},
        {TC_LLAMA3, "{\"parameters\": {}}"},
        {TC_MISTRAL, "[TOOL_CALLS]"},
        {TC_MISTRAL, "[TOOL_CALLS][{\"arguments\": {}}]"},
        {TC_MISTRAL, "[TOOL_CALLS]get weather[ARGS]{}"},
        {TC_MISTRAL, "[TOOL_CALLS]f[ARGS]{\"a\": }"},
        {TC_MISTRAL, "[TOOL_CALLS]f[ARGS]\"x\""},
        {TC_MISTRAL, "[TOOL_CALLS]f"},
        {TC_GENERIC, "{\"tool_calls\": [{\"name\": \"f\", \"arguments\": {}}"},
        {TC_GENERIC, "{\"tool_calls\": [\"f\"]}"},
        {TC_GENERIC, "{\"content\": 5}"},
        {TC_HARMONY, "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\": "},
        {TC_HARMONY, "<|channel|>commentary to=functions.f <|constrain|>json<|message|>[1]"},
        {TC_HARMONY, "<|channel|>commentary to=functions.f json<|message|>{} trailing"},
        {TC_HARMONY, "<|channel|>commentary to=functions.f json<|message|>"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        parse_all(bad[i].f, bad[i].s);
        CHECK_MSG(R.rc == STRATA_EFORMAT, "case %zu (%s) gave %d", i, bad[i].s, R.rc);
    }
}

TEST(toolcall_error_is_sticky) {
    tc_parser *p = tc_new(TC_HERMES);
    const tc_event *e;
    int n;
    strata_err err = {0};
    const char *s = "ok <tool_call>{\"name\": 1}";
    CHECK_EQ_INT(tc_feed(p, s, strlen(s), 0, &e, &n, &err), STRATA_EFORMAT);
    CHECK_EQ_INT(n, 1); /* the content before the fault is still delivered */
    CHECK_STR(e[0].text, "ok");
    CHECK(strstr(err.msg, "name") != NULL);
    CHECK_EQ_INT(tc_feed(p, "x", 1, 1, &e, &n, &err), STRATA_EFORMAT);
    CHECK_EQ_INT(n, 0);
    tc_free(p);
    tc_free(NULL);
}

TEST(toolcall_deep_nesting_rejected) {
    char s[2048] = "<tool_call>{\"name\": \"f\", \"arguments\": ";
    for (int i = 0; i < 300; i++) strcat(s, "[");
    parse_step(TC_HERMES, s, 0, &R);
    CHECK_EQ_INT(R.rc, STRATA_EFORMAT);
}

TEST(toolcall_generic_prompt) {
    json_error_t je;
    json_t *tools = json_loads(
        "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": "
        "\"Weather for a city.\", \"parameters\": {\"type\": \"object\", \"properties\": "
        "{\"city\": {\"type\": \"string\"}}}}}, {\"name\": \"now\", \"input_schema\": {}}]",
        0, &je);
    CHECK(tools != NULL);
    char *s = tc_generic_system_prompt(tools, NULL, 0);
    CHECK(s && strstr(s, "- get_weather: Weather for a city."));
    CHECK(strstr(s, "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}"));
    CHECK(strstr(s, "- now\n"));
    CHECK(strstr(s, "{\"tool_calls\": [{\"name\": \"<tool name>\", \"arguments\": {<arguments>}}]}"));
    CHECK(strstr(s, "{\"content\": \"<your answer>\"}"));
    free(s);
    s = tc_generic_system_prompt(tools, "now", 0);
    CHECK(s && strstr(s, "You must call the tool \"now\"") && !strstr(s, "\"content\""));
    free(s);
    s = tc_generic_system_prompt(tools, NULL, 1);
    CHECK(s && strstr(s, "at least one tool") && !strstr(s, "\"content\""));
    free(s);
    json_t *empty = json_array();
    CHECK(tc_generic_system_prompt(empty, NULL, 0) == NULL);
    CHECK(tc_generic_system_prompt(NULL, NULL, 0) == NULL);
    json_decref(empty);
    json_decref(tools);
}

/* Mutated outputs (bytes replaced, dropped, duplicated) never crash, give
 * 0 or STRATA_EFORMAT, and parse the same whole or in pieces. */
TEST(toolcall_fuzz_consistent) {
    static const struct { tc_format f; const char *s; } seeds[] = {
        {TC_HERMES, "Hi <think>x</think> <tool_call>\n{\"name\": \"a\", \"arguments\": "
                    "{\"k\": [1, \"v\\\"\", {\"z\": null}]}}\n</tool_call>\n<tool_call>{\"name\": "
                    "\"b\", \"arguments\": \"{\\\"q\\\": 1}\"}</tool_call> end"},
        {TC_LLAMA3, " <|python_tag|>{\"type\": \"function\", \"name\": \"f\", \"parameters\": "
                    "{\"a\": -1.5e3, \"b\": \"é\"}}; {\"name\": \"g\", \"parameters\": {}}"},
        {TC_MISTRAL, "ok [TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"x\": true}}] "
                     "[TOOL_CALLS]b[CALL_ID]xy[ARGS]{\"y\": [false]}"},
        {TC_GENERIC, "{\"content\": \"a\\u00e9\\ud83c\\udf89\\n\", \"tool_calls\": [{\"name\": "
                     "\"f\", \"arguments\": {\"p\": \"日本\"}}, {\"function\": {\"name\": \"g\"}}]}"},
        {TC_GENERIC, "```json\n{\"tool_call\": {\"name\": \"f\", \"arguments\": null}}\n```"},
        {TC_HARMONY, "<|channel|>analysis<|message|>think é<|end|><|start|>assistant<|channel|>commentary "
                     "to=functions.f <|constrain|>json<|message|>{\"k\": [1, \"v\"]}<|call|>"},
    };
    static const char alphabet[] = "{}[]\":, \n\\u<>/tool_cal[TOOL_CALLS]ARGSnamearguments1e.-|=";
    unsigned seed = 12345;
    char buf[512];
    for (int it = 0; it < 3000; it++) {
        int k = it % 6;
        size_t n = strlen(seeds[k].s);
        memcpy(buf, seeds[k].s, n + 1);
        for (int m = 0; m < 1 + it % 3; m++) {
            seed = seed * 1103515245u + 12345u;
            size_t at = (seed >> 8) % n;
            int op = (seed >> 20) % 3;
            if (op == 0) buf[at] = alphabet[(seed >> 4) % (sizeof alphabet - 1)];
            else if (op == 1) memmove(buf + at, buf + at + 1, n - at), n--;
            else if (n + 1 < sizeof buf) memmove(buf + at + 1, buf + at, n - at + 1), n++;
        }
        parse_all(seeds[k].f, buf);
        CHECK_MSG(R.rc == 0 || R.rc == STRATA_EFORMAT, "rc %d", R.rc);
    }
}

/* A cut tool call's arguments become the JSON object they were on the way
 * to: strings closed, a member without its value dropped, containers
 * closed. */
TEST(toolcall_close_partial_arguments) {
    static const char *const cases[][2] = {
        {"{", "{}"},
        {"{\"city\": \"Par", "{\"city\": \"Par\"}"},
        {"{\"city\": \"Paris\", \"days\": [1, 2", "{\"city\": \"Paris\", \"days\": [1, 2]}"},
        {"{\"city\": \"Paris\", \"n\": 1.", "{\"city\": \"Paris\"}"},
        {"{\"city\": \"Paris\", \"da", "{\"city\": \"Paris\"}"},
        {"{\"city\": \"Paris\",", "{\"city\": \"Paris\"}"},
        {"{\"a\": {\"b\": true", "{\"a\": {\"b\": true}}"},
        {"{\"a\": {\"b\": tr", "{\"a\": {}}"},
        {"{\"q\": \"x\\u00", "{}"},
        {"{\"q\": \"x\\\\u00", "{\"q\": \"x\\\\u00\"}"},
        {"{\"a\": 1}", "{\"a\": 1}"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *got = tc_json_close_partial(cases[i][0], strlen(cases[i][0]));
        CHECK_MSG(got && !strcmp(got, cases[i][1]), "'%s' -> '%s', want '%s'", cases[i][0], got ? got : "(null)",
                  cases[i][1]);
        json_t *j = got ? json_loads(got, 0, NULL) : NULL;
        CHECK_MSG(json_is_object(j), "'%s' is not an object", got ? got : "(null)");
        json_decref(j);
        free(got);
    }
    CHECK(tc_json_close_partial("x", 1) == NULL);
}

/* ---- HARMONY (gpt-oss) ---- */

TEST(toolcall_harmony_reasoning_and_final) {
    parse_all(TC_HARMONY, "<|channel|>analysis<|message|>User greets. Reply “hi”.<|end|>"
                          "<|start|>assistant<|channel|>final<|message|>Hello! 👋\nHow can I help?<|return|>");
    CHECK_EQ_INT(R.rc, 0);
    CHECK_EQ_INT(R.n, 0);
    CHECK_STR(R.reasoning, "User greets. Reply “hi”.");
    CHECK_STR(R.content, "Hello! 👋\nHow can I help?");
    /* <|return|> is an end-of-generation token: usually not printed at all */
    parse_all(TC_HARMONY, "<|channel|>final<|message|>Only this");
    CHECK_STR(R.content, "Only this");
    CHECK_STR(R.reasoning, "");
}

TEST(toolcall_harmony_call) {
    /* the order the model writes (channel, then recipient, then <|constrain|>) */
    parse_all(TC_HARMONY, "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant"
                          "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
                          "{\"city\": \"Paris\", \"days\": [1, 2]}<|call|>");
    CHECK_EQ_INT(R.rc, 0);
    CHECK_EQ_INT(R.n, 1);
    expect_call(0, "get_weather", "{\"city\":\"Paris\",\"days\":[1,2]}");
    CHECK_STR(R.reasoning, "Need weather.");
    CHECK_STR(R.content, "");
    /* the order the template renders (recipient first), no analysis, <|call|> not printed */
    parse_all(TC_HARMONY, " to=functions.ls<|channel|>commentary json<|message|>{}");
    CHECK_EQ_INT(R.rc, 0);
    expect_call(0, "ls", "{}");
    /* a built-in tool keeps its whole recipient name */
    parse_all(TC_HARMONY, "<|channel|>analysis to=browser.search code<|message|>{\"query\": \"x\"}<|call|>");
    expect_call(0, "browser.search", "{\"query\":\"x\"}");
}

TEST(toolcall_harmony_preamble_and_two_calls) {
    /* a commentary message without a recipient is a preamble for the user */
    parse_all(TC_HARMONY, "<|channel|>commentary<|message|>Checking both.<|end|>"
                          "<|start|>assistant<|channel|>commentary to=functions.a <|constrain|>json<|message|>"
                          "{\"x\": 1}<|end|><|start|>assistant<|channel|>commentary to=functions.b json<|message|>"
                          "{\"y\": \"é\"}<|call|>");
    CHECK_EQ_INT(R.rc, 0);
    CHECK_EQ_INT(R.n, 2);
    CHECK_STR(R.content, "Checking both.");
    expect_call(0, "a", "{\"x\":1}");
    expect_call(1, "b", "{\"y\":\"é\"}");
}

TEST(toolcall_harmony_not_harmony_is_content) {
    /* a reply that does not open with a header is plain text, markers and all */
    static const char *texts[] = {"Hello <|channel|>x", "to be or not", "  plain",
                                  "<|channel|>analysis no message marker"};
    static const char *want[] = {"Hello <|channel|>x", "to be or not", "  plain", ""};
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        parse_all(TC_HARMONY, texts[i]);
        CHECK_EQ_INT(R.rc, 0);
        CHECK_MSG(!strcmp(R.content, want[i]), "\"%s\" became \"%s\"", texts[i], R.content);
    }
}

/* Markers are held while they may still be forming: a body's text never
 * leaks a piece of <|end|> into the reasoning, whatever the pieces. */
TEST(toolcall_harmony_partial_markers_held) {
    tc_parser *p = tc_new(TC_HARMONY);
    const tc_event *e;
    int n;
    strata_err err = {0};
    const char *a = "<|channel|>analysis<|message|>abc<|en";
    CHECK_EQ_INT(tc_feed(p, a, strlen(a), 0, &e, &n, &err), 0);
    CHECK_EQ_INT(n, 1);
    CHECK(e[0].kind == TC_EV_REASONING && !strcmp(e[0].text, "abc"));
    const char *b = "d|><|start|>assistant<|channel|>final<|message|>ok";
    CHECK_EQ_INT(tc_feed(p, b, strlen(b), 1, &e, &n, &err), 0);
    CHECK_EQ_INT(n, 1);
    CHECK(e[0].kind == TC_EV_TEXT && !strcmp(e[0].text, "ok"));
    tc_free(p);
}

/* JSON allows integers beyond 64 bits and unpaired surrogate escapes, and
 * the schema guard lets a sampled model write them; jansson refuses both.
 * The call still parses, its arguments kept as the model wrote them. */
TEST(toolcall_args_jansson_refuses_still_parse) {
    parse_all(TC_HERMES, "<tool_call>\n{\"name\": \"read\", \"arguments\": "
                         "{\"limit\": 123456789012345678901234, \"s\": \"\\ud83d x\"}}\n</tool_call>");
    CHECK_EQ_INT(R.rc, 0);
    CHECK_EQ_INT(R.n, 1);
    expect_call(0, "read", "{\"limit\":123456789012345678901234,\"s\":\"\\ud83d x\"}");
}

TEST(json_load_lenient_reads_the_nearest_way) {
    int n = -1;
    const char *ok = "{\"a\": [1, -9223372036854775808, \"12345678901234567890123\"]}";
    json_t *v = json_load_lenient(ok, strlen(ok), 0, NULL, &n);
    CHECK(v && n == 0); /* nothing to change: jansson reads it */
    json_decref(v);
    const char *big = "{\"a\": [123456789012345678901234, -9223372036854775809, 0.5e400000], \"b\": \"\\ud800\", "
                      "\"c\": \"\\udc00\\ud83d\\ude00\\\\ud800\"}";
    v = json_load_lenient(big, strlen(big), 0, NULL, &n);
    CHECK_MSG(!v, "an overflowing real stays refused"); /* 0.5e400000: no double holds it */
    const char *near = "{\"a\": [123456789012345678901234, -9223372036854775809], \"b\": \"\\ud800\", "
                       "\"c\": \"\\udc00\\ud83d\\ude00\\\\ud800\"}";
    v = json_load_lenient(near, strlen(near), 0, NULL, &n);
    CHECK(v != NULL);
    CHECK_EQ_INT(n, 4); /* two integers, two unpaired surrogates; the pair and the escaped backslash stay */
    json_t *a = json_object_get(v, "a");
    CHECK(json_is_real(json_array_get(a, 0)) && json_real_value(json_array_get(a, 0)) == 123456789012345678901234.0);
    CHECK(json_is_real(json_array_get(a, 1)));
    CHECK_STR(json_string_value(json_object_get(v, "b")), "\xEF\xBF\xBD");
    CHECK_STR(json_string_value(json_object_get(v, "c")), "\xEF\xBF\xBD\xF0\x9F\x98\x80\\ud800");
    json_decref(v);
    json_error_t je;
    CHECK(!json_load_lenient("{\"a\": }", 7, 0, &je, &n) && n == 0 && strlen(je.text) > 0);
}
