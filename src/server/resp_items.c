/* resp_items.c - Responses API items to normalised messages (resp_items.h). */
#include "server/resp_items.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/mem.h"
#include "server/prompt.h"
#include "server/resp_tools.h"
#include "text/jsonload.h"

json_t *resp_items_of_input(const json_t *input, char *why, size_t cap) {
    if (json_is_string(input))
        return json_pack("[{s:s,s:s,s:O}]", "type", "message", "role", "user", "content", input);
    if (json_is_array(input)) return json_incref((json_t *)input);
    snprintf(why, cap, "'input' must be a string or an array of items");
    return NULL;
}

/* Text of a message's content or a call's output: a string, or text
 * parts joined; anything else (images, files) is an error naming it. */
static char *content_text(const json_t *content, size_t i, req_ignored *ig, char *why, size_t cap) {
    char where[48];
    snprintf(where, sizeof where, "input[%zu].content", i);
    if (!content || json_is_null(content)) {
        snprintf(why, cap, "%s must be a string or an array of content parts", where);
        return NULL;
    }
    return prompt_content_text(content, where, ig, why, cap);
}

static const char *normal_role(const char *role) {
    if (!role) return NULL;
    if (!strcmp(role, "developer")) return "system";
    if (!strcmp(role, "system") || !strcmp(role, "user") || !strcmp(role, "assistant")) return role;
    return NULL;
}

/* The assistant message a function_call or output_text belongs to: the
 * last message when it is the assistant's (one turn: text, then calls),
 * else a new empty one. */
static json_t *assistant_turn(json_t *out) {
    json_t *last = json_array_get(out, json_array_size(out) - 1);
    if (last && !strcmp(json_string_value(json_object_get(last, "role")), "assistant")) return last;
    json_t *m = json_pack("{s:s,s:s}", "role", "assistant", "content", "");
    json_array_append_new(out, m);
    return m;
}

/* msg[key] (a string, or absent: "") with text appended. */
static void append_to(json_t *msg, const char *key, const char *text) {
    const char *old = json_string_value(json_object_get(msg, key));
    size_t a = old ? strlen(old) : 0, b = strlen(text);
    char *joined = xmalloc(a + b + 1);
    memcpy(joined, old ? old : "", a);
    memcpy(joined + a, text, b + 1);
    json_object_set_new(msg, key, json_string(joined));
    free(joined);
}

/* A reasoning item opens the assistant turn it led to, as that turn's
 * "thinking" (which gpt-oss's template shows for a tool-call turn; other
 * templates ignore it): its reasoning_text content, else its summary.
 * An item with neither (encrypted only) adds nothing. */
static int add_reasoning(json_t *out, const json_t *item) {
    strbuf t = {0};
    const char *keys[] = {"content", "summary"};
    for (int k = 0; k < 2 && !t.s; k++) {
        size_t j;
        const json_t *part;
        json_array_foreach(json_object_get(item, keys[k]), j, part) {
            const char *s = json_string_value(json_object_get(part, "text"));
            if (s) strbuf_puts(&t, s);
        }
    }
    if (t.s) append_to(assistant_turn(out), "thinking", t.s);
    strbuf_free(&t);
    return 0;
}

/* The turn a reasoning item opened, still without text or calls. */
static int reasoning_only(const json_t *m) {
    return m && !strcmp(json_string_value(json_object_get(m, "role")), "assistant") &&
           json_object_get(m, "thinking") && !json_object_get(m, "tool_calls") &&
           !*json_string_value(json_object_get(m, "content"));
}

static int add_message(json_t *out, const json_t *item, size_t i, req_ignored *ig, char *why, size_t cap) {
    const char *role = normal_role(json_string_value(json_object_get(item, "role")));
    if (!role) {
        snprintf(why, cap, "input[%zu].role must be one of user, assistant, system, developer", i);
        return -1;
    }
    char *text = content_text(json_object_get(item, "content"), i, ig, why, cap);
    if (!text) return -1;
    const json_t *last = json_array_get(out, json_array_size(out) - 1);
    /* Text after a call in one output (native formats) joins that turn,
     * as the model's content did; a plain reply starts its own turn. */
    if (!strcmp(role, "assistant") && last &&
        ((json_object_get(last, "tool_calls") && !strcmp(json_string_value(json_object_get(last, "role")), "assistant")) ||
         reasoning_only(last)))
        append_to((json_t *)last, "content", text);
    else
        json_array_append_new(out, json_pack("{s:s,s:s}", "role", role, "content", text));
    free(text);
    return 0;
}

/* A call of the assistant's turn: arguments as an object, what chat
 * templates expect (as the Chat Completions dialect does); an unparsable
 * string stays a string. Takes args. */
static void add_tool_call(json_t *out, const json_t *call_id, const char *name, json_t *args) {
    json_t *parsed = json_load_lenient_string(args);
    if (parsed) json_decref(args), args = parsed;
    json_t *turn = assistant_turn(out), *calls = json_object_get(turn, "tool_calls");
    if (!calls) json_object_set_new(turn, "tool_calls", calls = json_array());
    json_array_append_new(calls, json_pack("{s:O,s:s,s:{s:s,s:o}}", "id", call_id, "type", "function", "function",
                                           "name", name, "arguments", args));
}

static int add_call(json_t *out, const json_t *item, size_t i, char *why, size_t cap) {
    const char *name = json_string_value(json_object_get(item, "name"));
    const json_t *args = json_object_get(item, "arguments"), *call_id = json_object_get(item, "call_id");
    if (!name || !json_is_string(call_id) || !(json_is_string(args) || json_is_object(args))) {
        snprintf(why, cap, "input[%zu]: a function_call needs string 'name', 'call_id' and 'arguments'", i);
        return -1;
    }
    add_tool_call(out, call_id, name, json_incref((json_t *)args));
    return 0;
}

/* A custom tool's call: the function the model saw takes {"input"}. */
static int add_custom_call(json_t *out, const json_t *item, size_t i, char *why, size_t cap) {
    const char *name = json_string_value(json_object_get(item, "name"));
    const json_t *input = json_object_get(item, "input"), *call_id = json_object_get(item, "call_id");
    if (!name || !json_is_string(call_id) || !json_is_string(input)) {
        snprintf(why, cap, "input[%zu]: a custom_tool_call needs string 'name', 'call_id' and 'input'", i);
        return -1;
    }
    add_tool_call(out, call_id, name, json_pack("{s:O}", "input", input));
    return 0;
}

/* local_shell's call: the function the model saw takes {"action"}. */
static int add_shell_call(json_t *out, const json_t *item, size_t i, char *why, size_t cap) {
    const json_t *action = json_object_get(item, "action"), *call_id = json_object_get(item, "call_id");
    if (!json_is_string(call_id)) call_id = json_object_get(item, "id");
    if (!json_is_string(call_id) || !json_is_object(action)) {
        snprintf(why, cap, "input[%zu]: a local_shell_call needs a string 'call_id' and an object 'action'", i);
        return -1;
    }
    add_tool_call(out, call_id, RESP_SHELL_NAME, json_pack("{s:O}", "action", action));
    return 0;
}

static int add_call_output(json_t *out, const json_t *item, size_t i, req_ignored *ig, char *why, size_t cap) {
    const json_t *call_id = json_object_get(item, "call_id"), *output = json_object_get(item, "output");
    const char *type = json_string_value(json_object_get(item, "type"));
    if (!json_is_string(call_id) && !strcmp(type, "local_shell_call_output"))
        call_id = json_object_get(item, "id"); /* the API names the call by its id there */
    if (!json_is_string(call_id) || !output) {
        snprintf(why, cap, "input[%zu]: a %s needs a string 'call_id' and an 'output'", i, type);
        return -1;
    }
    char *text = content_text(output, i, ig, why, cap);
    if (!text) return -1;
    json_array_append_new(out, json_pack("{s:s,s:s,s:O}", "role", "tool", "content", text, "tool_call_id", call_id));
    free(text);
    return 0;
}

static int add_item(json_t *out, const json_t *item, size_t i, req_ignored *ig, char *why, size_t cap) {
    if (!json_is_object(item)) {
        snprintf(why, cap, "input[%zu] must be an object", i);
        return -1;
    }
    const char *type = json_string_value(json_object_get(item, "type"));
    if (!type && json_object_get(item, "role")) type = "message"; /* the easy form: {role, content} */
    if (type && !strcmp(type, "message")) return add_message(out, item, i, ig, why, cap);
    if (type && !strcmp(type, "function_call")) return add_call(out, item, i, why, cap);
    if (type && !strcmp(type, "custom_tool_call")) return add_custom_call(out, item, i, why, cap);
    if (type && !strcmp(type, "local_shell_call")) return add_shell_call(out, item, i, why, cap);
    if (type && (!strcmp(type, "function_call_output") || !strcmp(type, "custom_tool_call_output") ||
                 !strcmp(type, "local_shell_call_output")))
        return add_call_output(out, item, i, ig, why, cap);
    if (type && !strcmp(type, "reasoning")) return add_reasoning(out, item);
    if (!type) {
        snprintf(why, cap, "input[%zu]: an item needs a 'type' (or a 'role', for a message)", i);
        return -1;
    }
    /* Hosted tools' calls (web_search_call, file_search_call, ...), item
     * references and types newer than this server: not rendered, named. */
    return ignored_note(ig, why, cap, "input[%zu]: item type '%s' (not rendered)", i, type);
}

json_t *resp_items_messages(const char *instructions, const json_t *items, req_ignored *ig, char *why, size_t cap) {
    json_t *out = json_array();
    if (instructions && *instructions)
        json_array_append_new(out, json_pack("{s:s,s:s}", "role", "system", "content", instructions));
    size_t i;
    const json_t *item;
    json_array_foreach(items, i, item) {
        if (add_item(out, item, i, ig, why, cap)) {
            json_decref(out);
            return NULL;
        }
    }
    if (json_array_size(out) == 0) {
        snprintf(why, cap, "'input' must hold at least one item");
        json_decref(out);
        return NULL;
    }
    return out;
}
