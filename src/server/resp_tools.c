/* resp_tools.c - Responses API tool kinds (see resp_tools.h). */
#include "server/resp_tools.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/mem.h"
#include "server/server.h"
#include "text/jsonscan.h"
#include "text/jsonload.h"

/* Tools only OpenAI's servers run (prefixes: dated variants follow). */
static const char *const HOSTED[] = {"web_search", "file_search", "code_interpreter", "computer_use",
                                     "computer", "image_generation", "mcp", NULL};

static int hosted(const char *type) {
    for (const char *const *h = HOSTED; *h; h++)
        if (!strncmp(type, *h, strlen(*h))) return 1;
    return 0;
}

/* What the model sees of local_shell: argv and the optional fields. */
static json_t *shell_parameters(void) {
    return json_pack("{s:s,s:{s:{s:s,s:{s:{s:s},s:{s:s,s:{s:s},s:i},s:{s:s,s:i},s:{s:s},s:{s:s,s:{s:s}},"
                     "s:{s:s}},s:[s,s],s:b}},s:[s],s:b}",
                     "type", "object", "properties", "action", "type", "object", "properties",
                     "type", "const", "exec",
                     "command", "type", "array", "items", "type", "string", "minItems", 1,
                     "timeout_ms", "type", "integer", "minimum", 1,
                     "working_directory", "type", "string",
                     "env", "type", "object", "additionalProperties", "type", "string",
                     "user", "type", "string",
                     "required", "type", "command", "additionalProperties", 0,
                     "required", "action", "additionalProperties", 0);
}

static json_t *function_tool(const json_t *name, const char *desc, json_t *params) {
    return json_pack("{s:s,s:{s:O,s:s?,s:o}}", "type", "function", "function", "name", name, "description", desc,
                     "parameters", params);
}

/* A custom tool: {"input": string}; a grammar is told, not enforced. */
static json_t *custom_tool(const json_t *t) {
    const char *desc = json_string_value(json_object_get(t, "description"));
    const json_t *fmt = json_object_get(t, "format");
    const char *syntax = json_string_value(json_object_get(fmt, "syntax"));
    const char *grammar = json_string_value(json_object_get(fmt, "definition"));
    char *told = NULL;
    if (grammar) {
        size_t n = (desc ? strlen(desc) : 0) + strlen(grammar) + 128;
        told = xmalloc(n);
        snprintf(told, n, "%s%sThe input is free text following this %s grammar:\n%s", desc ? desc : "",
                 desc ? "\n\n" : "", syntax ? syntax : "", grammar);
    }
    json_t *params = json_pack("{s:s,s:{s:{s:s}},s:[s],s:b}", "type", "object", "properties", "input", "type",
                               "string", "required", "input", "additionalProperties", 0);
    json_t *out = function_tool(json_object_get(t, "name"), told ? told : desc, params);
    free(told);
    return out;
}

/* A custom tool's format: absent, {"type": "text"} or a grammar. */
static int check_format(const json_t *t, const char *where, char *why, size_t cap) {
    const json_t *fmt = json_object_get(t, "format");
    if (!fmt || json_is_null(fmt)) return 0;
    const char *type = json_string_value(json_object_get(fmt, "type"));
    if (type && !strcmp(type, "text")) return 0;
    if (type && !strcmp(type, "grammar") && json_is_string(json_object_get(fmt, "definition"))) return 0;
    strata_fmt(why, cap, "%s ('%s'): 'format' must be {\"type\": \"text\"} or {\"type\": \"grammar\", "
               "\"syntax\", \"definition\"}", where, json_string_value(json_object_get(t, "name")));
    return -1;
}

json_t *resp_tools_custom_function(const json_t *t, const char *where, char *why, size_t cap) {
    return check_format(t, where, why, cap) ? NULL : custom_tool(t);
}

static int has_tool(const resp_tools *rt, const char *name) {
    size_t i;
    const json_t *t;
    json_array_foreach(rt->tools, i, t)
        if (!strcmp(json_string_value(json_object_get(json_object_get(t, "function"), "name")), name)) return 1;
    return 0;
}

static int add_tool(resp_tools *rt, const json_t *t, const char *where, req_ignored *ig, char *why, size_t cap);

/* A namespace (Codex's multi_agent_v1, MCP servers): its function and
 * custom tools are offered by their own names; a call comes back with
 * the namespace beside the name, as the API returns it. A name another
 * tool already has is left out (noted), not an error. */
static int add_namespace(resp_tools *rt, const json_t *t, const char *where, req_ignored *ig, char *why, size_t cap) {
    const char *ns = json_string_value(json_object_get(t, "name"));
    const json_t *inner = json_object_get(t, "tools"), *it;
    if (!ns || !*ns || !json_is_array(inner)) {
        strata_fmt(why, cap, "%s: a namespace tool needs a string 'name' and a 'tools' array", where);
        return -1;
    }
    size_t j;
    json_array_foreach(inner, j, it) {
        char sub[96];
        snprintf(sub, sizeof sub, "%s.tools[%zu]", where, j);
        const char *name = json_string_value(json_object_get(it, "name"));
        if (name && has_tool(rt, name)) {
            if (ignored_note(ig, why, cap, "%s: '%s' of namespace '%s' (another tool has that name)", sub, name, ns))
                return -1;
            continue;
        }
        size_t before = json_array_size(rt->tools);
        if (add_tool(rt, it, sub, ig, why, cap)) return -1;
        if (json_array_size(rt->tools) > before) json_object_set_new(rt->namespaces, name, json_string(ns));
    }
    return 0;
}

/* One declared tool (where: "tools[i]"), normalised into rt; -1 with
 * why. Hosted tools and types this server does not know are left out
 * and noted in ig (server/ignored.h). */
static int add_tool(resp_tools *rt, const json_t *t, const char *where, req_ignored *ig, char *why, size_t cap) {
    const char *type = json_string_value(json_object_get(t, "type"));
    const json_t *name = json_object_get(t, "name");
    if (!json_is_object(t)) {
        snprintf(why, cap, "%s must be an object", where);
        return -1;
    }
    if (type && !strcmp(type, "local_shell")) {
        json_t *n = json_string(RESP_SHELL_NAME);
        json_array_append_new(rt->tools, function_tool(n, "Runs a command on the user's machine and returns its "
                                                          "output. action.command is the argv list.",
                                                       shell_parameters()));
        json_decref(n);
        json_object_set_new(rt->kinds, RESP_SHELL_NAME, json_string("local_shell"));
        return 0;
    }
    if (type && !strcmp(type, "namespace")) return add_namespace(rt, t, where, ig, why, cap);
    if (type && (!strcmp(type, "function") || !strcmp(type, "custom")) && json_is_string(name) &&
        json_string_length(name)) {
        if (!strcmp(type, "custom")) {
            json_t *fn = resp_tools_custom_function(t, where, why, cap);
            if (!fn) return -1;
            json_array_append_new(rt->tools, fn);
            json_object_set_new(rt->kinds, json_string_value(name), json_string("custom"));
            return 0;
        }
        json_array_append_new(rt->tools, json_pack("{s:s,s:{s:O,s:O*,s:O*}}", "type", "function", "function", "name",
                                                   name, "description", json_object_get(t, "description"),
                                                   "parameters", json_object_get(t, "parameters")));
        return 0;
    }
    if (type && (!strcmp(type, "function") || !strcmp(type, "custom"))) {
        strata_fmt(why, cap, "%s: a %s tool needs a non-empty string 'name'", where, type);
        return -1;
    }
    if (!type) {
        strata_fmt(why, cap, "%s: a tool needs a 'type'", where);
        return -1;
    }
    if (hosted(type))
        return ignored_note(ig, why, cap, "%s: hosted tool '%s' (runs on OpenAI's servers; not offered to the model)",
                            where, type);
    return ignored_note(ig, why, cap, "%s: tool type '%s' (not one this server knows; not offered to the model)",
                        where, type);
}

/* Two tools by one name would make a call ambiguous. */
static int check_unique(const resp_tools *rt, char *why, size_t cap) {
    size_t i, j;
    const json_t *a, *b;
    json_array_foreach(rt->tools, i, a) {
        const char *na = json_string_value(json_object_get(json_object_get(a, "function"), "name"));
        for (j = i + 1; j < json_array_size(rt->tools); j++) {
            b = json_array_get(rt->tools, j);
            if (!strcmp(na, json_string_value(json_object_get(json_object_get(b, "function"), "name")))) {
                strata_fmt(why, cap, "tools[%zu]: a second tool named '%s' (local_shell's name is '%s')", j, na,
                           RESP_SHELL_NAME);
                return -1;
            }
        }
    }
    return 0;
}

int resp_tools_parse(resp_tools *rt, const json_t *tools, req_ignored *ig, char *why, size_t cap) {
    memset(rt, 0, sizeof *rt);
    if (!tools || json_is_null(tools)) return 0;
    if (!json_is_array(tools)) {
        snprintf(why, cap, "'tools' must be an array");
        return -1;
    }
    rt->tools = json_array();
    rt->kinds = json_object();
    rt->namespaces = json_object();
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        char where[32];
        snprintf(where, sizeof where, "tools[%zu]", i);
        if (add_tool(rt, t, where, ig, why, cap)) return -1;
    }
    return check_unique(rt, why, cap);
}

void resp_tools_free(resp_tools *rt) {
    json_decref(rt->tools);
    json_decref(rt->kinds);
    json_decref(rt->namespaces);
    memset(rt, 0, sizeof *rt);
}

static int declared(const resp_tools *rt, const char *name, resp_tool_kind kind) {
    size_t i;
    const json_t *t;
    json_array_foreach(rt->tools, i, t)
        if (!strcmp(json_string_value(json_object_get(json_object_get(t, "function"), "name")), name))
            return resp_tools_kind(rt, name) == kind;
    return 0;
}

int resp_tools_choice(const resp_tools *rt, const json_t *tc, int *none, const char **forced, int *required,
                      char *why, size_t cap) {
    const char *word = json_string_value(tc);
    *none = 0, *forced = NULL, *required = 0;
    if (!tc || json_is_null(tc) || (word && !strcmp(word, "auto"))) return 0;
    if (word && !strcmp(word, "none")) return *none = 1, 0;
    if (word && !strcmp(word, "required")) {
        *required = 1;
        /* One tool: "required" means that one, and forcing it keeps the
         * generic format from writing a name that was never declared. */
        if (json_array_size(rt->tools) == 1)
            *forced = json_string_value(json_object_get(json_object_get(json_array_get(rt->tools, 0), "function"),
                                                        "name"));
        return 0;
    }
    const char *type = json_string_value(json_object_get(tc, "type"));
    const char *name = json_string_value(json_object_get(tc, "name"));
    resp_tool_kind kind = !type ? RESP_TOOL_FUNCTION : !strcmp(type, "custom") ? RESP_TOOL_CUSTOM
                        : !strcmp(type, "local_shell") ? RESP_TOOL_SHELL : RESP_TOOL_FUNCTION;
    if (kind == RESP_TOOL_SHELL) name = RESP_SHELL_NAME;
    int typed = type && (!strcmp(type, "function") || kind != RESP_TOOL_FUNCTION);
    if (!typed || !name || !rt->tools || !declared(rt, name, kind)) {
        strata_fmt(why, cap, "'tool_choice' must be none, auto, required, {\"type\": \"function\" or \"custom\", "
                   "\"name\": ...} naming such a tool in 'tools', or {\"type\": \"local_shell\"} with that tool "
                   "declared%s%s%s", type ? " (got type '" : "", type ? type : "", type ? "')" : "");
        return -1;
    }
    *forced = name;
    *required = 1;
    return 0;
}

resp_tool_kind resp_tools_kind(const resp_tools *rt, const char *name) {
    const char *k = json_string_value(json_object_get(rt->kinds, name));
    if (!k) return RESP_TOOL_FUNCTION;
    return !strcmp(k, "custom") ? RESP_TOOL_CUSTOM : RESP_TOOL_SHELL;
}

const char *resp_tools_item_prefix(const resp_tools *rt, const char *name) {
    switch (resp_tools_kind(rt, name)) {
    case RESP_TOOL_CUSTOM: return "ctc_";
    case RESP_TOOL_SHELL: return "lsh_";
    default: return "fc_";
    }
}

char *resp_tools_custom_input(const char *args, size_t len) {
    json_t *a = json_load_lenient(args, len, 0, NULL, NULL);
    if (!a) { /* cut part way: complete what is there */
        char *closed = tc_json_close_partial(args, len);
        a = closed ? json_load_lenient(closed, strlen(closed), 0, NULL, NULL) : NULL;
        free(closed);
    }
    const char *in = json_string_value(json_object_get(a, "input"));
    char *out = in ? xstrdup(in) : NULL;
    json_decref(a);
    return out;
}

void resp_input_init(resp_input_stream *st) {
    tc_member_stream_init(&st->ms, "input");
    st->sent = 0;
    st->whole = 0;
}

void resp_input_free(resp_input_stream *st) { tc_member_stream_free(&st->ms); }

void resp_input_next(resp_input_stream *st, const char *args, size_t len, tc_buf *out) {
    size_t had = out->len;
    if (!st->whole && tc_member_stream_next(&st->ms, args, len, out) == 0) {
        st->sent += out->len - had;
        return;
    }
    st->whole = 1;
    char *in = resp_tools_custom_input(args, len);
    size_t n = in ? strlen(in) : 0;
    if (n > st->sent) {
        tc_buf_add(out, in + st->sent, n - st->sent);
        st->sent = n;
    }
    free(in);
}

/* local_shell's action as the model wrote it (held to the shape by the
 * schema), so that the item sent back renders the same arguments. */
static json_t *shell_action(const char *args, size_t len) {
    json_t *a = json_load_lenient(args, len, 0, NULL, NULL), *act = json_object_get(a, "action");
    json_t *out = json_is_object(act) ? json_incref(act) : json_pack("{s:s,s:[]}", "type", "exec", "command");
    json_decref(a);
    return out;
}

json_t *resp_tools_call_item(const resp_tools *rt, const char *id, const char *call_id, const char *name,
                             const char *args, size_t len, const char *status) {
    switch (resp_tools_kind(rt, name)) {
    case RESP_TOOL_CUSTOM: {
        char *in = resp_tools_custom_input(args, len);
        json_t *item = json_pack("{s:s,s:s,s:s,s:s,s:s,s:s}", "id", id, "type", "custom_tool_call", "status", status,
                                 "call_id", call_id, "name", name, "input", in ? in : "");
        free(in);
        return item;
    }
    case RESP_TOOL_SHELL:
        return json_pack("{s:s,s:s,s:s,s:s,s:o}", "id", id, "type", "local_shell_call", "status", status, "call_id",
                         call_id, "action", shell_action(args, len));
    default: {
        json_t *item = json_pack("{s:s,s:s,s:s,s:s,s:s,s:o}", "id", id, "type", "function_call", "status", status,
                                 "call_id", call_id, "name", name, "arguments", json_text(args, len));
        const json_t *ns = json_object_get(rt->namespaces, name);
        if (ns) json_object_set(item, "namespace", (json_t *)ns);
        return item;
    }
    }
}
