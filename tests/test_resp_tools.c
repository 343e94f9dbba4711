/* test_resp_tools.c - Responses API tool kinds (server/resp_tools.h) and
 * their items in (server/resp_items.h): what the model is offered, what
 * a call comes back as, what is left out and named, and the 400s for
 * malformed tools. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "server/resp_items.h"
#include "server/resp_tools.h"
#include "test.h"

static int parse(resp_tools *rt, const char *tools_json, char *why) {
    json_t *tools = json_loads(tools_json, 0, NULL);
    int rc = resp_tools_parse(rt, tools, NULL, why, 512);
    json_decref(tools);
    return rc;
}

static const json_t *fn(const resp_tools *rt, size_t i) {
    return json_object_get(json_array_get(rt->tools, i), "function");
}

TEST(resp_tools_custom_and_shell_are_functions) {
    char why[512] = "";
    resp_tools rt;
    CHECK_EQ_INT(parse(&rt, "[{\"type\":\"custom\",\"name\":\"apply_patch\",\"description\":\"Patch.\","
                            "\"format\":{\"type\":\"grammar\",\"syntax\":\"lark\",\"definition\":\"start: X\"}},"
                            "{\"type\":\"local_shell\"},{\"type\":\"function\",\"name\":\"f\"}]", why), 0);
    CHECK_EQ_INT((int)json_array_size(rt.tools), 3);
    CHECK_STR(json_string_value(json_object_get(fn(&rt, 0), "name")), "apply_patch");
    const char *desc = json_string_value(json_object_get(fn(&rt, 0), "description"));
    CHECK(desc && strstr(desc, "Patch.") && strstr(desc, "lark grammar") && strstr(desc, "start: X"));
    json_t *input = json_loads("{\"type\":\"object\",\"properties\":{\"input\":{\"type\":\"string\"}},"
                               "\"required\":[\"input\"],\"additionalProperties\":false}", 0, NULL);
    CHECK(json_equal(json_object_get(fn(&rt, 0), "parameters"), input));
    json_decref(input);
    CHECK_STR(json_string_value(json_object_get(fn(&rt, 1), "name")), RESP_SHELL_NAME);
    CHECK_EQ_INT(resp_tools_kind(&rt, "apply_patch"), RESP_TOOL_CUSTOM);
    CHECK_EQ_INT(resp_tools_kind(&rt, RESP_SHELL_NAME), RESP_TOOL_SHELL);
    CHECK_EQ_INT(resp_tools_kind(&rt, "f"), RESP_TOOL_FUNCTION);
    CHECK_STR(resp_tools_item_prefix(&rt, "apply_patch"), "ctc_");
    resp_tools_free(&rt);
}

static int parse_noting(resp_tools *rt, const char *tools_json, req_ignored *ig, char *why) {
    json_t *tools = json_loads(tools_json, 0, NULL);
    int rc = resp_tools_parse(rt, tools, ig, why, 512);
    json_decref(tools);
    return rc;
}

/* Hosted tools (Codex always declares web_search) and types newer than
 * this server are not offered to the model and are named; a 400 only
 * under --strict-requests. */
TEST(resp_tools_hosted_and_unknown_are_left_out_and_named) {
    static const char *const HOSTED[] = {"web_search", "web_search_preview_2025_03_11", "file_search",
                                         "code_interpreter", "computer_use_preview", "image_generation", "mcp"};
    for (size_t i = 0; i < sizeof HOSTED / sizeof HOSTED[0]; i++) {
        char why[512] = "", tools[128];
        resp_tools rt;
        req_ignored ig = {0}, strict = {.strict = 1};
        snprintf(tools, sizeof tools, "[{\"type\":\"function\",\"name\":\"f\"},{\"type\":\"%s\"}]", HOSTED[i]);
        CHECK_EQ_INT(parse_noting(&rt, tools, &ig, why), 0);
        CHECK_EQ_INT((int)json_array_size(rt.tools), 1);
        CHECK_MSG(strstr(ignored_text(&ig), "tools[1]: hosted tool") && strstr(ignored_text(&ig), HOSTED[i]), "%s",
                  ignored_text(&ig));
        resp_tools_free(&rt);
        CHECK_EQ_INT(parse_noting(&rt, tools, &strict, why), -1);
        CHECK_MSG(strstr(why, "tools[1]") && strstr(why, HOSTED[i]) && strstr(why, "--strict-requests"), "%s", why);
        resp_tools_free(&rt);
    }
    char why[512] = "";
    resp_tools rt;
    req_ignored ig = {0};
    CHECK_EQ_INT(parse_noting(&rt, "[{\"type\":\"teleport\"}]", &ig, why), 0);
    CHECK(strstr(ignored_text(&ig), "tool type 'teleport'") != NULL);
    resp_tools_free(&rt);
}

/* Codex's namespace tools: the inner tools are offered by their names and
 * a call comes back with its namespace; a clashing name is left out. */
TEST(resp_tools_namespace_tools_are_offered_inside_out) {
    char why[512] = "";
    resp_tools rt;
    req_ignored ig = {0};
    CHECK_EQ_INT(parse_noting(&rt, "[{\"type\":\"function\",\"name\":\"wait\"},{\"type\":\"namespace\","
                                   "\"name\":\"multi_agent_v1\",\"tools\":[{\"type\":\"function\",\"name\":\"spawn_agent\","
                                   "\"parameters\":{\"type\":\"object\"}},{\"type\":\"function\",\"name\":\"wait\"}]}]",
                            &ig, why), 0);
    CHECK_EQ_INT((int)json_array_size(rt.tools), 2);
    CHECK_STR(json_string_value(json_object_get(fn(&rt, 1), "name")), "spawn_agent");
    CHECK(strstr(ignored_text(&ig), "tools[1].tools[1]: 'wait' of namespace 'multi_agent_v1'") != NULL);
    json_t *item = resp_tools_call_item(&rt, "fc_1", "call_1", "spawn_agent", "{}", 2, "completed");
    CHECK_STR(json_string_value(json_object_get(item, "type")), "function_call");
    CHECK_STR(json_string_value(json_object_get(item, "name")), "spawn_agent");
    CHECK_STR(json_string_value(json_object_get(item, "namespace")), "multi_agent_v1");
    json_decref(item);
    item = resp_tools_call_item(&rt, "fc_2", "call_2", "wait", "{}", 2, "completed");
    CHECK(json_object_get(item, "namespace") == NULL);
    json_decref(item);
    resp_tools_free(&rt);
}

TEST(resp_tools_malformed_tools_are_refused) {
    static const char *const BAD[][2] = {
        {"[{\"name\":\"f\"}]", "needs a 'type'"},
        {"[{\"type\":\"namespace\",\"name\":\"n\"}]", "namespace tool needs"},
        {"[{\"type\":\"custom\"}]", "needs a non-empty string 'name'"},
        {"[{\"type\":\"custom\",\"name\":\"p\",\"format\":{\"type\":\"grammar\"}}]", "'format'"},
        {"[{\"type\":\"local_shell\"},{\"type\":\"local_shell\"}]", "a second tool named 'local_shell'"},
        {"[7]", "tools[0] must be an object"},
        {"{}", "'tools' must be an array"},
    };
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        char why[512] = "";
        resp_tools rt;
        CHECK_EQ_INT(parse(&rt, BAD[i][0], why), -1);
        CHECK_MSG(strstr(why, BAD[i][1]), "%s: %s", BAD[i][0], why);
        resp_tools_free(&rt);
    }
}

TEST(resp_tools_choice_by_kind) {
    char why[512] = "";
    resp_tools rt;
    CHECK_EQ_INT(parse(&rt, "[{\"type\":\"custom\",\"name\":\"p\"},{\"type\":\"local_shell\"},"
                            "{\"type\":\"function\",\"name\":\"f\"}]", why), 0);
    static const struct { const char *choice; int rc; const char *forced; } CASES[] = {
        {"{\"type\":\"custom\",\"name\":\"p\"}", 0, "p"}, {"{\"type\":\"local_shell\"}", 0, RESP_SHELL_NAME},
        {"{\"type\":\"function\",\"name\":\"f\"}", 0, "f"}, {"{\"type\":\"function\",\"name\":\"p\"}", -1, NULL},
        {"{\"type\":\"custom\",\"name\":\"f\"}", -1, NULL}, {"{\"type\":\"web_search_preview\"}", -1, NULL},
        {"\"required\"", 0, NULL}, {"\"auto\"", 0, NULL},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        json_t *tc = json_loads(CASES[i].choice, JSON_DECODE_ANY, NULL);
        int none, required;
        const char *forced;
        CHECK_EQ_INT(resp_tools_choice(&rt, tc, &none, &forced, &required, why, sizeof why), CASES[i].rc);
        if (!CASES[i].rc && CASES[i].forced) CHECK_STR(forced, CASES[i].forced);
        if (!CASES[i].rc && !CASES[i].forced) CHECK(forced == NULL);
        json_decref(tc);
    }
    resp_tools_free(&rt);
}

TEST(resp_tools_call_items) {
    char why[512] = "";
    resp_tools rt;
    CHECK_EQ_INT(parse(&rt, "[{\"type\":\"custom\",\"name\":\"p\"},{\"type\":\"local_shell\"}]", why), 0);
    const char *args = "{\"input\":\"*** Begin Patch\\n+\\u00e9\\\"\\n\"}";
    json_t *item = resp_tools_call_item(&rt, "ctc_1", "call_1", "p", args, strlen(args), "completed");
    CHECK_STR(json_string_value(json_object_get(item, "type")), "custom_tool_call");
    CHECK_STR(json_string_value(json_object_get(item, "input")), "*** Begin Patch\n+\xc3\xa9\"\n");
    json_decref(item);
    /* streaming: the input of arguments cut part way */
    char *part = resp_tools_custom_input(args, 23);
    CHECK_STR(part, "*** Begin Pat");
    free(part);
    CHECK(resp_tools_custom_input("{\"inp", 5) == NULL);
    const char *sh = "{\"action\":{\"type\":\"exec\",\"command\":[\"ls\",\"-l\"],\"timeout_ms\":5}}";
    item = resp_tools_call_item(&rt, "lsh_1", "call_1", RESP_SHELL_NAME, sh, strlen(sh), "completed");
    CHECK_STR(json_string_value(json_object_get(item, "type")), "local_shell_call");
    json_t *want = json_loads("{\"type\":\"exec\",\"command\":[\"ls\",\"-l\"],\"timeout_ms\":5}", 0, NULL);
    CHECK(json_equal(json_object_get(item, "action"), want));
    json_decref(want), json_decref(item);
    resp_tools_free(&rt);
}

/* args fed in pieces of `step` bytes: the streamed input, joined. */
static char *streamed(const char *args, size_t step, int *whole) {
    resp_input_stream st;
    resp_input_init(&st);
    tc_buf out = {0};
    size_t n = strlen(args);
    for (size_t len = 0; len < n;) {
        len = len + step < n ? len + step : n;
        resp_input_next(&st, args, len, &out);
    }
    *whole = st.whole;
    resp_input_free(&st);
    char *r = xstrdup(out.p ? out.p : "");
    tc_buf_free(&out);
    return r;
}

/* The input streamed piece by piece (escapes and surrogate pairs cut
 * anywhere) joins to what the whole arguments parse to; arguments of
 * another shape take the whole parse and still join to it. */
TEST(resp_tools_input_streams_as_it_parses) {
    const struct {
        const char *args, *want; /* want NULL: as the whole arguments parse */
        int whole;
    } cases[] = {
        {"{\"input\":\"*** Begin Patch\\n+\\u00e9\\\"\\\\ \\uD83D\\uDE00 \\/\\t\\n*** End Patch\"}", NULL, 0},
        {"{ \"input\" : \"lone \\ud800 and \\udc00 halves\" }", NULL, 0},
        {"{\"path\":\"a\\\"b\",\"input\":\"after \\\"another\\\" key\",\"n\":[1,{\"input\":\"x\"}]}", NULL, 0},
        {"{\"input\":5,\"x\":\"y\"}", NULL, 1},
        {"{\"input\":\"cut in an escape \\u00", "cut in an escape ", 0}, /* the rest waits */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *parsed = resp_tools_custom_input(cases[i].args, strlen(cases[i].args));
        const char *want = cases[i].want ? cases[i].want : parsed ? parsed : "";
        for (size_t step = 1; step <= 7; step++) {
            int whole;
            char *got = streamed(cases[i].args, step, &whole);
            CHECK_STR(got, want);
            CHECK_EQ_INT(whole, cases[i].whole);
            free(got);
        }
        free(parsed);
    }
}

/* Sent back, the calls are the functions the model called: the same
 * arguments, so the same render and replay key. */
TEST(resp_tools_items_back_in_are_calls) {
    char why[512] = "";
    json_t *items = json_loads(
        "[{\"role\":\"user\",\"content\":\"go\"},"
        "{\"type\":\"custom_tool_call\",\"call_id\":\"c1\",\"name\":\"p\",\"input\":\"diff\"},"
        "{\"type\":\"custom_tool_call_output\",\"call_id\":\"c1\",\"output\":\"ok\"},"
        "{\"type\":\"local_shell_call\",\"id\":\"lsh_2\",\"call_id\":\"c2\",\"status\":\"completed\","
        "\"action\":{\"type\":\"exec\",\"command\":[\"ls\"]}},"
        "{\"type\":\"local_shell_call_output\",\"id\":\"c2\",\"output\":\"a.txt\"}]", 0, NULL);
    json_t *msgs = resp_items_messages(NULL, items, NULL, why, sizeof why);
    json_t *want = json_loads(
        "[{\"role\":\"user\",\"content\":\"go\"},"
        "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\","
        "\"function\":{\"name\":\"p\",\"arguments\":{\"input\":\"diff\"}}}]},"
        "{\"role\":\"tool\",\"content\":\"ok\",\"tool_call_id\":\"c1\"},"
        "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"c2\",\"type\":\"function\","
        "\"function\":{\"name\":\"local_shell\",\"arguments\":{\"action\":{\"type\":\"exec\",\"command\":[\"ls\"]}}}}]},"
        "{\"role\":\"tool\",\"content\":\"a.txt\",\"tool_call_id\":\"c2\"}]", 0, NULL);
    CHECK_MSG(msgs && json_equal(msgs, want), "%s", why);
    json_decref(want), json_decref(msgs), json_decref(items);
    items = json_loads("[{\"type\":\"custom_tool_call\",\"call_id\":\"c1\",\"name\":\"p\"}]", 0, NULL);
    CHECK(resp_items_messages(NULL, items, NULL, why, sizeof why) == NULL);
    CHECK(strstr(why, "input[0]") && strstr(why, "'input'"));
    json_decref(items);
}
