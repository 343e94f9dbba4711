/* resp_items.h - OpenAI Responses API items to normalised messages.
 *
 * A Responses conversation is a list of items: messages (input_text /
 * output_text parts), function_call and function_call_output. This turns
 * them into the normalised shape of server/prompt.h, the same shape the
 * Chat Completions dialect builds, so exact replay (server/replay.c)
 * finds a reply however the client sends it back: an assistant message
 * with the output_text the server returned keys by its text, and a turn
 * of output_text followed by function_call items becomes one assistant
 * message with content and tool_calls (arguments parsed to an object),
 * keyed like a Chat Completions tool-call turn. custom_tool_call and
 * local_shell_call items are calls of the functions the model saw for
 * them (resp_tools.h: arguments {"input": ..} and {"action": ..}), and
 * their *_output items tool results, so they render (and replay) as the
 * model's own calls did. Reasoning items are
 * accepted and not rendered (the server never makes them; clients may
 * carry another model's). Any other item type (a hosted tool's call, an
 * item_reference, a type newer than this server) is not rendered and is
 * noted in ig (server/ignored.h); an item without a type or role is an
 * error.
 * Does not: fetch earlier turns (api_responses.c, resp_store.c). */
#ifndef STRATA_RESP_ITEMS_H
#define STRATA_RESP_ITEMS_H

#include <jansson.h>
#include <stddef.h>

#include "server/ignored.h"

/* "input" as a list of items: a string is one user message item; an
 * array is taken as is (checked by resp_items_messages). A new reference,
 * or NULL with why set. */
json_t *resp_items_of_input(const json_t *input, char *why, size_t cap);

/* The normalised messages of instructions (a system message first, when
 * not NULL) and items. A new array, or NULL with why set, naming the
 * offending item as input[i]. */
json_t *resp_items_messages(const char *instructions, const json_t *items, req_ignored *ig, char *why, size_t cap);

#endif
