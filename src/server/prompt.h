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

#include "server/server.h"

/* Renders the conversation (messages, tools may be NULL) with the open
 * assistant turn. Returns 0, or -1 with why set (a 400 for the client). */
int prompt_render(const server *s, const json_t *messages, const json_t *tools, chat_prompt *out,
                  char *why, size_t cap);
/* prompt_render + tokenization. *ids is malloc'd. */
int prompt_tokens(const server *s, const json_t *messages, const json_t *tools, int32_t **ids,
                  size_t *n, char *why, size_t cap);

/* Text of OpenAI-style content: a string, or text parts joined. NULL and
 * why set for other part types. Returns a new string. */
char *prompt_content_text(const json_t *content, char *why, size_t cap);

#endif
