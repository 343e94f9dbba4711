/* resp_tools.h - the Responses API's tool kinds, between the request and
 * the one tool-call machinery (text/toolcall.h, text/jsonschema.h).
 *
 * Every tool the server can serve becomes a function tool in the chat
 * shape templates take, so the model, the tool-call parser and the
 * schema constraint see one kind of tool:
 *   - function: as declared;
 *   - custom (free-form text input, e.g. Codex's apply_patch): a function
 *     taking {"input": <string>}; a call comes back as a custom_tool_call
 *     whose input is that string. A `format` grammar (lark, regex) is shown
 *     to the model in the description but not enforced: the input is free
 *     text, checked by the client that runs the tool;
 *   - local_shell: a function named "local_shell" taking {"action":
 *     {"type": "exec", "command": [..], ...}}, held to that shape; a call
 *     comes back as a local_shell_call item.
 *   - namespace (Codex's multi_agent_v1, MCP servers' tools): its inner
 *     function and custom tools, offered by their own names; a call comes
 *     back as a function_call with "namespace" beside the name.
 * Hosted tools (web_search, file_search, code_interpreter, computer use,
 * image_generation, mcp) run on OpenAI's servers, not here: they are not
 * offered to the model, and are named in the request's ignored list
 * (server/ignored.h), as is any type this server does not know (a 400
 * under --strict-requests). Does not: parse items
 * (resp_items.c) or stream events (api_responses.c). */
#ifndef STRATA_RESP_TOOLS_H
#define STRATA_RESP_TOOLS_H

#include <jansson.h>
#include <stddef.h>

#include "server/ignored.h"
#include "text/jsonscan.h"

#define RESP_SHELL_NAME "local_shell" /* the function the model calls for local_shell */

typedef enum { RESP_TOOL_FUNCTION, RESP_TOOL_CUSTOM, RESP_TOOL_SHELL } resp_tool_kind;

typedef struct resp_tools {
    json_t *tools; /* normalised function tools (owned); NULL: none */
    json_t *kinds; /* name -> "custom" | "local_shell"; function tools are absent (owned) */
    json_t *namespaces; /* name -> its namespace tool's name, for tools declared inside one (owned) */
} resp_tools;

/* Reads a request's "tools" (NULL or null: none). 0, or -1 with why
 * naming the tool (index and type) that cannot be served. */
int resp_tools_parse(resp_tools *rt, const json_t *tools, req_ignored *ig, char *why, size_t cap);
void resp_tools_free(resp_tools *rt);

/* tool_choice: none | auto | required | {"type": "function"|"custom",
 * "name"} | {"type": "local_shell"}. Sets *none for "none", *forced to
 * the forced tool's name (borrowed from rt) and *required. -1 with why. */
int resp_tools_choice(const resp_tools *rt, const json_t *tc, int *none, const char **forced, int *required,
                      char *why, size_t cap);

resp_tool_kind resp_tools_kind(const resp_tools *rt, const char *name);

/* A custom tool ({"name", "description", "format"}) as the function tool
 * the model is offered (taking {"input": <string>}), or NULL with why
 * (where: "tools[i]") when its format is not text or a grammar. Chat
 * Completions' custom tools use it too. */
json_t *resp_tools_custom_function(const json_t *t, const char *where, char *why, size_t cap);

/* A custom tool's input: the "input" string of its arguments, complete or
 * cut part way (streaming). malloc'd, or NULL while none is written yet. */
char *resp_tools_custom_input(const char *args, size_t len);

/* A custom call's input streamed: each call of resp_input_next appends
 * to out the input text that is new in args (all the arguments so far).
 * The arguments are followed byte by byte (text/jsonscan.h); ones of
 * another shape than {"input": "..."} are parsed whole each time, as
 * resp_tools_custom_input does. */
typedef struct resp_input_stream {
    tc_member_stream ms;
    size_t sent; /* input bytes appended so far */
    int whole;   /* 1: parse the whole arguments each time */
} resp_input_stream;

void resp_input_init(resp_input_stream *st);
void resp_input_free(resp_input_stream *st);
void resp_input_next(resp_input_stream *st, const char *args, size_t len, tc_buf *out);

/* The output item of call `name` with arguments args (complete):
 * function_call, custom_tool_call or local_shell_call. id and call_id are
 * the call's ids; status "completed" or "in_progress". */
json_t *resp_tools_call_item(const resp_tools *rt, const char *id, const char *call_id, const char *name,
                             const char *args, size_t len, const char *status);

/* The item id prefix of a call to `name` ("fc_", "ctc_", "lsh_"). */
const char *resp_tools_item_prefix(const resp_tools *rt, const char *name);

#endif
