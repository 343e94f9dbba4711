/* prompt.h - from an API's messages to prompt tokens.
 *
 * Both APIs first normalise their messages into one shape, the one chat
 * templates expect (Hugging Face style):
 *   {"role": "system"|"user"|"assistant"|"tool", "content": "text",
 *    "tool_calls": [{"id", "type": "function",
 *                    "function": {"name", "arguments": {object}}}],
 *    "tool_call_id": "..."}
 * and tools as [{"type": "function", "function": {"name", "description",
 * "parameters"}}]. prompt_render then produces segments (template text vs
 * content) and prompt_tokens the token ids. */
#ifndef STRATA_PROMPT_H
#define STRATA_PROMPT_H

#include <jansson.h>

#include "server/gen.h"
#include "server/server.h"
#include "text/toolcall.h"

/* Tools offered to the model, and how it must use them. */
typedef struct prompt_tools {
    const json_t *tools; /* normalised; NULL or empty: none */
    const char *forced;  /* a tool the model must call, or NULL */
    int required;        /* it must call some tool */
} prompt_tools;

/* How the model's output will carry tool calls for this conversation. */
tc_format prompt_tool_format(const server *s, const prompt_tools *t);

/* For a required or forced call in the generic format, the start of the
 * reply the model is made to continue (its JSON up to the tool name or the
 * arguments), so the call happens even if the model would not choose it.
 * NULL when nothing is forced. Caller frees. */
char *prompt_tool_prefix(const server *s, const prompt_tools *t);

/* Applies prompt_tool_prefix: appends the forced start of the reply to the
 * prompt tokens and tells the generation about it (gp points into the
 * returned string, which the caller frees after the generation). NULL
 * when nothing is forced. */
char *prompt_force_tool(const server *s, const prompt_tools *t, gen_params *gp, int32_t **ids, size_t *n);

/* The text an assistant turn with these calls renders to in the generic
 * tool format (what exact replay keys tool-call turns by). Caller frees. */
char *prompt_generic_calls_text(const char *const *names, const char *const *args, int n);

/* What exact replay remembers a native-format tool-call turn by (its
 * content and its calls, as the client sends them back). Caller frees. */
char *prompt_native_turn_key(const char *content, const char *const *names, const char *const *args, int n);

/* Appends the tokens of plain text (no special tokens) to *ids. */
void prompt_append_text(const server *s, const char *text, int32_t **ids, size_t *n);

/* Renders the conversation (t may be NULL) with the open assistant turn.
 * Returns 0, or -1 with why set (a 400 for the client). */
int prompt_render(const server *s, const json_t *messages, const prompt_tools *t, chat_prompt *out,
                  char *why, size_t cap);
/* What the prefix cache should know of a prompt (cache/policy.h). In:
 * the client's breakpoints (Anthropic cache_control): keep the prefix
 * through the first n_messages normalised messages ttl_s after use. Out:
 * where messages start (the auto scope cuts there) and retention marks:
 * the anchor (leading system messages and tools) and the breakpoints. */
typedef struct prompt_cache_info {
    struct {
        size_t n_messages;
        double ttl_s;
    } breaks[POLICY_MAX_MARKS - 1];
    int n_breaks;
    int *bounds; /* malloc'd */
    int n_bounds;
    cache_mark marks[POLICY_MAX_MARKS];
    int n_marks;
} prompt_cache_info;
void prompt_cache_info_free(prompt_cache_info *ci);
/* Points the generation's cache fields at ci (which must outlive gen_start). */
void prompt_cache_apply(const prompt_cache_info *ci, gen_params *gp);

/* prompt_render + tokenization; fills ci (may be NULL). *ids is malloc'd. */
int prompt_tokens(const server *s, const json_t *messages, const prompt_tools *t, int32_t **ids,
                  size_t *n, prompt_cache_info *ci, char *why, size_t cap);

/* Text of message content: a string, or text parts/blocks joined (both
 * APIs use {"type": "text", "text": ...}; cache_control is ignored). NULL
 * and why set (naming `where`) for anything else. Returns a new string. */
char *prompt_content_text(const json_t *content, const char *where, char *why, size_t cap);

#endif
