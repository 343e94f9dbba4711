/* prompt.h - from an API's messages to a generation's prompt tokens.
 *
 * Both APIs first normalise their messages into the shape text/render.h
 * describes. prompt_tokens then renders them (server/replay.c: with the
 * model's exact tokens for replies it remembers), tokenizes once, and
 * asks cache/policy.c for the retention marks from the message bounds.
 * Does not: render (text/render.c) or keep replies (server/replay.c). */
#ifndef STRATA_PROMPT_H
#define STRATA_PROMPT_H

#include <jansson.h>

#include "base/strbuf.h"
#include "server/gen.h"
#include "server/ignored.h"
#include "server/server.h"
#include "text/render.h"

/* Applies render_tool_prefix: appends the forced start of the reply to the
 * prompt tokens and tells the generation about it (gp points into the
 * returned string, which the caller frees after the generation). NULL
 * when nothing is forced. */
char *prompt_force_tool(const server *s, const render_tools *t, gen_params *gp, int32_t **ids, size_t *n);

/* Appends the tokens of plain text (no special tokens) to *ids. */
void prompt_append_text(const server *s, const char *text, int32_t **ids, size_t *n);

/* Renders the conversation (t may be NULL) with the open assistant turn,
 * as the template says (no exact replay: what /apply-template shows).
 * Returns 0, or -1 with why set (a 400 for the client). */
int prompt_render(const server *s, const json_t *messages, const render_tools *t, render_out *out, char *why,
                  size_t cap);
/* What the prefix cache should know of a prompt (cache/policy.h). In:
 * the client's breakpoints (Anthropic cache_control): keep the prefix
 * through the first n_messages normalised messages ttl_s after use. Out:
 * where messages start (the auto scope cuts there) and retention marks:
 * the anchor (leading system messages and tools) and the breakpoints. */
typedef struct prompt_cache_info {
    policy_break breaks[POLICY_MAX_MARKS - 1];
    int n_breaks;
    int *bounds; /* malloc'd */
    int n_bounds;
    cache_mark marks[POLICY_MAX_MARKS];
    int n_marks;
    const char *held_out; /* the normalize.h rule that held client text out, or NULL */
    int *msg_ends;        /* malloc'd: where the first k messages end, k = 0..n_msgs (-1 unknown) */
    int n_msgs;
    /* The date the template wrote when it is not today's: the conversation
     * was rendered with the day it began (prompt_tokens); "" else. */
    char template_date[DATES_TEXT_MAX + 1];
} prompt_cache_info;
void prompt_cache_info_free(prompt_cache_info *ci);
/* Points the generation's cache fields at ci (which must outlive gen_start). */
void prompt_cache_apply(const prompt_cache_info *ci, gen_params *gp);

/* The prompt tokens, with exact replay (replay_render), tokenized once;
 * fills ci (may be NULL): bounds and marks come from that one
 * tokenization. *ids is malloc'd. A template that writes today's date
 * (strftime_now) keeps a conversation's first date: when the cache holds
 * less of the prompt than through the date, it is rendered again with
 * each date written lately (server/dates.h) and the rendering cached
 * furthest past its date wins (ci->template_date). */
int prompt_tokens(const server *s, const cache_hash *replay_ns, const json_t *messages, const render_tools *t, int32_t **ids,
                  size_t *n, prompt_cache_info *ci, char *why, size_t cap);

/* Text of message content, in any of the three APIs: a string, or its
 * parts joined (one part object alone is taken too). A part with a
 * string "text" is that text (text, input_text, output_text, ...;
 * cache_control ignored); a refusal its refusal; a tool_reference (the
 * Anthropic tool search) "Tool available: NAME"; a search_result its
 * title, source and texts; a text document its title and text. Anything
 * else (images, audio, files, PDF documents, types this server does not
 * know) becomes "[TYPE]" and is noted in ig (server/ignored.h). Returns
 * a new string, or NULL with why set (naming `where`) for a malformed
 * part or, under --strict-requests, for a placeholder. */
char *prompt_content_text(const json_t *content, const char *where, req_ignored *ig, char *why, size_t cap);
/* One part (where[i]) the same way, appended to out: 0, or -1 with why set. */
int prompt_part_text(const json_t *part, const char *where, size_t i, req_ignored *ig, strbuf *out, char *why,
                     size_t cap);

/* Whether normalised tools (function shape) declare a function name. */
int prompt_tool_known(const json_t *tools, const char *name);
/* tool_choice allowed_tools ({"mode": "auto"|"required", "tools": [{"type":
 * "function", "function": {"name"}} or {"type": "function", "name"}]}: the
 * Chat Completions and Responses spellings): *allowed gets the declared
 * tools it names (a new array, NULL when none), *required the mode. The
 * caller keeps every tool listed in the prompt (so the prefix is the same
 * whatever is allowed) and lets the model call only *allowed. -1 with why
 * set when the object is malformed or names an undeclared tool. */
int prompt_allowed_tools(const json_t *tools, const json_t *at, json_t **allowed, int *required, char *why,
                         size_t cap);

#endif
