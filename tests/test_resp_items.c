/* test_resp_items.c - Responses API items to normalised messages
 * (server/resp_items.h): the shapes exact replay keys on, and errors that
 * name the item. */
#include <jansson.h>
#include <string.h>

#include "server/resp_items.h"
#include "test.h"

static json_t *messages_noting(const char *items_json, const char *instructions, req_ignored *ig, char *why) {
    json_t *items = json_loads(items_json, 0, NULL);
    json_t *out = resp_items_messages(instructions, items, ig, why, 512);
    json_decref(items);
    return out;
}

static json_t *messages_of(const char *items_json, const char *instructions, char *why) {
    json_t *items = json_loads(items_json, 0, NULL);
    json_t *out = resp_items_messages(instructions, items, NULL, why, 512);
    json_decref(items);
    return out;
}

TEST(resp_items_string_input_is_one_user_message) {
    char why[512] = "";
    json_t *in = json_string("hi"), *items = resp_items_of_input(in, why, sizeof why);
    json_t *msgs = resp_items_messages("be brief", items, NULL, why, sizeof why);
    json_t *want = json_loads("[{\"role\":\"system\",\"content\":\"be brief\"},{\"role\":\"user\",\"content\":\"hi\"}]",
                              0, NULL);
    CHECK(json_equal(msgs, want));
    json_decref(want), json_decref(msgs), json_decref(items), json_decref(in);
}

/* A reply of text and calls sent back as items is one assistant turn with
 * content and tool_calls (arguments parsed), as Chat Completions builds it:
 * the shape exact replay keys on. */
TEST(resp_items_text_and_calls_are_one_assistant_turn) {
    char why[512] = "";
    json_t *msgs = messages_of(
        "[{\"role\":\"user\",\"content\":\"go\"},"
        "{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"On it.\"}]},"
        "{\"type\":\"function_call\",\"call_id\":\"call_1\",\"name\":\"f\",\"arguments\":\"{\\\"x\\\":1}\"},"
        "{\"type\":\"function_call\",\"call_id\":\"call_2\",\"name\":\"g\",\"arguments\":\"{}\"},"
        "{\"type\":\"reasoning\",\"summary\":[]},"
        "{\"type\":\"function_call_output\",\"call_id\":\"call_1\",\"output\":\"ok\"}]", NULL, why);
    json_t *want = json_loads(
        "[{\"role\":\"user\",\"content\":\"go\"},"
        "{\"role\":\"assistant\",\"content\":\"On it.\",\"tool_calls\":["
        "{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":{\"x\":1}}},"
        "{\"id\":\"call_2\",\"type\":\"function\",\"function\":{\"name\":\"g\",\"arguments\":{}}}]},"
        "{\"role\":\"tool\",\"content\":\"ok\",\"tool_call_id\":\"call_1\"}]", 0, NULL);
    CHECK_MSG(msgs && json_equal(msgs, want), "%s", why);
    json_decref(want), json_decref(msgs);
}

TEST(resp_items_two_plain_replies_stay_two_turns) {
    char why[512] = "";
    json_t *msgs = messages_of("[{\"role\":\"assistant\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":\"b\"}]",
                               NULL, why);
    CHECK_EQ_INT(json_array_size(msgs), 2);
    json_decref(msgs);
}

/* Items and parts a text-only server cannot use are served around and
 * named (server/ignored.h); under --strict-requests they are refused. */
TEST(resp_items_unusable_items_and_parts_are_named) {
    char why[512] = "";
    req_ignored ig = {0};
    json_t *msgs = messages_noting("[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"look\"},"
                                   "{\"type\":\"input_image\",\"image_url\":\"data:\"}]},{\"type\":\"web_search_call\"}]",
                                   NULL, &ig, why);
    CHECK_EQ_INT(json_array_size(msgs), 1);
    CHECK_STR(json_string_value(json_object_get(json_array_get(msgs, 0), "content")), "look[input_image]");
    CHECK_EQ_INT(ig.n, 2);
    CHECK_MSG(strstr(ignored_text(&ig), "input[0].content[1]: input_image part") &&
              strstr(ignored_text(&ig), "input[1]: item type 'web_search_call'"), "%s", ignored_text(&ig));
    json_decref(msgs);
    req_ignored strict = {.strict = 1};
    CHECK(messages_noting("[{\"type\":\"web_search_call\"}]", NULL, &strict, why) == NULL);
    CHECK_MSG(strstr(why, "input[0]: item type 'web_search_call'") && strstr(why, "--strict-requests"), "%s", why);
}

TEST(resp_items_errors_name_the_item) {
    char why[512] = "";
    CHECK(messages_of("[{\"role\":\"user\",\"content\":\"x\"},{\"status\":\"done\"}]", NULL, why) == NULL);
    CHECK(strstr(why, "input[1]: an item needs a 'type'") != NULL);
    CHECK(messages_of("[{\"role\":\"user\",\"content\":[7]}]", NULL, why) == NULL);
    CHECK(strstr(why, "input[0].content[0]") && strstr(why, "must be an object"));
    CHECK(messages_of("[{\"type\":\"function_call\",\"name\":\"f\"}]", NULL, why) == NULL);
    CHECK(strstr(why, "call_id") != NULL);
    CHECK(messages_of("[{\"role\":\"tool\",\"content\":\"x\"}]", NULL, why) == NULL);
    json_t *bad = json_integer(3);
    CHECK(resp_items_of_input(bad, why, sizeof why) == NULL);
    json_decref(bad);
}
