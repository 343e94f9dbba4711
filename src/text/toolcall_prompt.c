/* toolcall_prompt.c - the system-prompt text that teaches a model without
 * native tool syntax to answer in the JSON shapes TC_GENERIC parses.
 *
 * The wording is plain and the reply shapes are shown literally, because
 * small models copy examples better than they follow descriptions. It does
 * not validate the tool schemas (the API layer does). */
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "text/toolcall.h"
#include "text/toolcall_int.h"

static void add(tc_buf *b, const char *s) { tc_buf_add(b, s, strlen(s)); }

/* One tool: OpenAI {"type":"function","function":{...}} or a bare entry;
 * the schema is "parameters" (OpenAI) or "input_schema" (Anthropic). */
static void describe_tool(tc_buf *b, const json_t *tool) {
    const json_t *fn = json_object_get(tool, "function");
    if (!json_is_object(fn)) fn = tool;
    const char *name = json_string_value(json_object_get(fn, "name"));
    if (!name) return;
    const char *desc = json_string_value(json_object_get(fn, "description"));
    const json_t *schema = json_object_get(fn, "parameters");
    if (!schema) schema = json_object_get(fn, "input_schema");
    add(b, "- ");
    add(b, name);
    if (desc && *desc) {
        add(b, ": ");
        add(b, desc);
    }
    char *js = schema ? json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    add(b, "\n  Arguments (JSON Schema): ");
    add(b, js ? js : "{\"type\":\"object\",\"properties\":{}}");
    add(b, "\n");
    free(js);
}

static void reply_shapes(tc_buf *b, const char *choice, int required) {
    add(b, "\n# How to reply\n\n"
           "Reply with exactly one JSON object and nothing else: no code fence, "
           "no text before or after it.\n\n");
    add(b, "To call tools, reply:\n"
           "{\"tool_calls\": [{\"name\": \"<tool name>\", \"arguments\": {<arguments>}}]}\n"
           "\"arguments\" is a JSON object that follows the tool's schema. Put several "
           "calls in the list to run them together. Each tool's result comes back in a "
           "later message; then reply again in this same JSON form.\n");
    if (choice) {
        add(b, "\nYou must call the tool \"");
        add(b, choice);
        add(b, "\" now; do not answer directly.\n");
        return;
    }
    if (required) {
        add(b, "\nYou must call at least one tool now; do not answer directly.\n");
        return;
    }
    add(b, "\nTo answer the user directly, without a tool, reply:\n"
           "{\"content\": \"<your answer>\"}\n");
}

char *tc_generic_system_prompt(const json_t *tools, const char *tool_choice_name, int required) {
    if (!json_is_array(tools) || json_array_size(tools) == 0) return NULL;
    tc_buf b = {0};
    add(&b, "# Tools\n\nYou can call these tools (functions):\n\n");
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) describe_tool(&b, t);
    reply_shapes(&b, tool_choice_name, required);
    return b.p;
}
