/* test_normalize.c - client text held out of the prompt, one test per
 * rule (server/normalize.h). */
#include <jansson.h>
#include <string.h>

#include "server/normalize.h"
#include "test.h"

#define BILLING "x-anthropic-billing-header: cc_version=2.1.37.abc; cc_entrypoint=cli; cch=3f9a1;"

TEST(normalize_claude_code_billing_block_is_held_out) {
    json_t *sys = json_pack("[{s:s,s:s},{s:s,s:s,s:{s:s}}]", "type", "text", "text", BILLING, "type", "text", "text",
                            "You are Claude Code.", "cache_control", "type", "ephemeral");
    const char *fired;
    json_t *out = normalize_system(sys, &fired);
    CHECK(fired && !strcmp(fired, "claude-code-billing-header"));
    CHECK_EQ_INT(json_array_size(out), 1);
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(out, 0), "text")), "You are Claude Code."));
    CHECK(json_object_get(json_array_get(out, 0), "cache_control") != NULL); /* the rest is kept as it was */
    json_decref(out);
    json_decref(sys);
}

TEST(normalize_claude_code_billing_line_of_a_system_string) {
    json_t *sys = json_string(BILLING "\nYou are Claude Code.");
    const char *fired;
    json_t *out = normalize_system(sys, &fired);
    CHECK(fired != NULL);
    CHECK(!strcmp(json_string_value(out), "You are Claude Code."));
    json_decref(out);
    json_decref(sys);
}

TEST(normalize_leaves_ordinary_system_text_alone) {
    json_t *sys = json_string("Mention x-anthropic-billing-header: here, mid-text.");
    const char *fired;
    json_t *out = normalize_system(sys, &fired);
    CHECK(fired == NULL);
    CHECK(json_equal(out, sys));
    json_decref(out);
    json_decref(sys);
    json_t *none = normalize_system(NULL, &fired);
    CHECK(none == NULL && fired == NULL);
}
