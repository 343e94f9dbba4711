/* callguard.h - native tool-call formats held to the declared tools.
 *
 * A model whose chat template has its own tool-call syntax writes free
 * text and, when it calls a tool, opens a call with its marker. The call
 * guard follows the output byte by byte: outside calls nothing is
 * masked; once a call opens, the JSON guard (jsonguard.h) holds the
 * call object to json_schema_tool_call (a declared name, arguments that
 * validate); after the object only the format's continuation may follow.
 *
 *   TC_HERMES   "<tool_call>" opens; the object; then "</tool_call>" (or
 *               the end of the reply).
 *   TC_LLAMA3   a reply whose first non-space byte is '{', or
 *               "<|python_tag|>", opens; after the object, ";" and another
 *               call, or the end.
 *   TC_MISTRAL  "[TOOL_CALLS]" then "[" opens; after each object "," and
 *               another, or "]". "[TOOL_CALLS]name[ARGS]{..}" (no "[")
 *               is not constrained.
 *   TC_HARMONY  "to=functions." in a message header (the reply's first,
 *               or one after <|start|>) opens; the name is held to the
 *               declared ones (ended by a space or '<'), the header's
 *               rest is free up to <|message|> (forced after 64 bytes),
 *               the arguments object to the tool's schema (the JSON guard
 *               sees the one-call object the others write), then only
 *               whitespace and <|call|> (an end of generation) or <|end|>.
 *
 * In Hermes and Mistral output, markers inside <think>..</think> are
 * reasoning, not calls (as the parser has it).
 * A token that opens a call and goes on into it is allowed only when
 * its bytes past the marker keep the call valid. Narrowings: a Llama 3
 * reply that starts with '{' is a call; no token carries both the end of
 * the object and what follows it (but whitespace).
 * Does not: parse calls (toolcall.h does) or sample. */
#ifndef STRATA_CALLGUARD_H
#define STRATA_CALLGUARD_H

#include <stddef.h>
#include <stdint.h>

#include "text/jsonguard.h"
#include "text/toolcall.h"

typedef struct call_guard call_guard;

/* v is borrowed (outlives the guard); call is one call's schema (the
 * guard takes a reference). NULL for a format with no native calls. */
call_guard *call_guard_new(const json_vocab *v, tc_format f, json_schema *call);
void call_guard_free(call_guard *g); /* NULL is fine */

/* Text already written before generation (a forced call's opening in the
 * prompt). -1 when it breaks the format (the state is then undefined). */
int call_guard_feed(call_guard *g, const char *text, size_t n);

/* As json_guard_mask: refused tokens to -INFINITY; how many stay (0:
 * stuck). Outside calls, in free text, most steps mask nothing. */
int call_guard_mask(call_guard *g, float *logits);
/* Advances by the chosen token; -1 if it was not allowed. */
int call_guard_accept(call_guard *g, int32_t token);

/* Inside a call's object (for tests). */
int call_guard_in_call(const call_guard *g);

#endif
