/* render.h - one chat renderer per model: from a conversation to prompt
 * tokens, the same way for `strata serve` and `strata run --chat`.
 *
 * A renderer is made once from the model's GGUF metadata and tokenizer.
 * It runs the model's own chat template (or --chat-template-file) through
 * text/tmpl, or, when there is none Strata can run, a built-in format
 * (ChatML or Llama 3, text/chat.h). It knows whether the template renders
 * tools itself, found by rendering with and without a probe tool; if not,
 * requests with tools get the generic tool format (instructions in the
 * system message, calls written as JSON, text/toolcall.h).
 *
 * Conversations are normalised JSON (Hugging Face style):
 *   [{"role": "system"|"user"|"assistant"|"tool", "content": "text",
 *     "tool_calls": [{"id", "type": "function",
 *                     "function": {"name", "arguments": {object}}}],
 *     "tool_call_id": "..."}]
 * and tools [{"type": "function", "function": {"name", "description",
 * "parameters"}}].
 *
 * Rendering also reports message bounds: for each k, the prompt position
 * where the first k messages end (message k starts there), found in the
 * one rendering and tokenization of the prompt, so a cache policy can cut
 * a prompt at a message without rendering its prefix again.
 * Does not: remember replies (server/replay.c splices their exact tokens
 * into a render_out), decide what the cache keeps (cache/policy.c), or
 * parse requests. A renderer is read-only after render_new: share it. */
#ifndef STRATA_RENDER_H
#define STRATA_RENDER_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "text/chat.h"
#include "text/tmpl.h"
#include "text/tokenizer.h"
#include "text/toolcall.h"

typedef struct gguf_file gguf_file;
typedef struct renderer renderer;

typedef struct render_opts {
    const char *template_file; /* --chat-template-file: must parse, else an error */
    const char *template_src;  /* a template as text instead of the model's (tests) */
} render_opts;

/* Tools offered to the model, and how it must use them. */
typedef struct render_tools {
    const json_t *tools; /* normalised; NULL or empty: none */
    /* The ones listed in the prompt; NULL: all of tools. Anthropic's
     * deferred tools (defer_loading) are callable but not listed: a tool
     * search brings their definitions in where it answers, so the listed
     * prefix does not change when one is loaded. */
    const json_t *shown;
    const char *forced;  /* a tool the model must call, or NULL */
    int required;        /* it must call some tool */
    /* Template variables the request sets besides messages and tools
     * (reasoning_effort, enable_thinking, chat_template_kwargs' keys): an
     * object, or NULL. They never replace messages, tools,
     * add_generation_prompt, bos_token or eos_token. */
    const json_t *vars;
    /* The time strftime_now formats (seconds since the epoch); 0: now.
     * server/prompt.c renders a conversation with the day it began. */
    long long now;
} render_tools;

/* f may be NULL when o->template_src is given. The model's own template
 * falls back to the built-in format with a warning when it cannot be
 * parsed. tok is borrowed and must outlive the renderer. */
int render_new(renderer **out, const gguf_file *f, const tokenizer *tok, const render_opts *o, strata_err *err);
void render_free(renderer *r); /* NULL is fine */

/* The template's source, or NULL when the built-in format is used. */
const char *render_template_src(const renderer *r);
/* Where the format comes from: "file", "model" or "built-in". */
const char *render_source_name(const renderer *r);
/* "model's own", "--chat-template-file" or the built-in format's name,
 * for logs. */
const char *render_format_name(const renderer *r);
/* The template renders tools itself (decided by a probe render). */
int render_native_tools(const renderer *r);

/* How the model's output will carry tool calls (TC_NONE without tools). */
tc_format render_tool_format(const renderer *r, const render_tools *t);
/* The model's own template writes harmony (gpt-oss: channels): its
 * replies go through the harmony parser with or without tools, since the
 * analysis channel is reasoning, not content (text/toolcall.h). */
int render_harmony(const renderer *r);
/* For a required or forced call, the start of the reply the model is made
 * to continue, so the call happens even if the model would not choose it:
 * the generic format's JSON up to the tool name or into the arguments
 * object; a native format's call marker ("<tool_call>\n", "[TOOL_CALLS][",
 * none for Llama 3) and its object up to the name or the arguments key
 * (the call guard, text/callguard.h, holds the rest to the tools);
 * harmony's commentary header to functions.NAME (into the arguments when
 * named; not held by the call guard yet). Any marker comes before the
 * first '{'. NULL when nothing is forced. Caller frees. */
char *render_tool_prefix(const renderer *r, const render_tools *t);
/* The text an assistant turn with these calls renders to in the generic
 * tool format (what exact replay keys such turns by), the arguments'
 * object keys sorted so that a call sent back reordered matches. Caller
 * frees. */
char *render_generic_calls_text(const char *const *names, const char *const *args, int n);

/* A rendered conversation: its segments, and for k = 0..n_msgs the text
 * offset (bytes into the concatenated segments) where the first k
 * messages end, -1 where it could not be found; the template's clock
 * (text/tmpl.h: the time strftime_now formatted, 0 when the template did
 * not call it, and where its text went, -1 when nowhere). */
typedef struct render_out {
    chat_prompt p;
    long *msg_ends;
    size_t n_msgs;
    tmpl_clock clock;
} render_out;
void render_out_free(render_out *o);
/* The concatenated text of o's segments (what /apply-template shows).
 * malloc'd, NUL-terminated. */
char *render_out_text(const render_out *o, size_t *len);
/* Bytes [off, off + len) of that text (fewer past its end), malloc'd and
 * NUL-terminated, without building the rest. */
char *render_out_span(const render_out *o, size_t off, size_t len);

/* Renders messages (and t's tools, t may be NULL), with the open
 * assistant turn if add_gen. Returns 0, or -1 with why set (a 400 for a
 * client: the template refused the conversation). */
int render_messages(const renderer *r, const json_t *messages, const render_tools *t, int add_gen,
                    render_out *out, char *why, size_t cap);

/* Prompt tokens of a rendered conversation (BOS first if the vocabulary
 * asks for it), where template text resumes after conversation text
 * (bounds, as chat_tokenize_bounds) and, for k = 0..n_msgs, the position
 * where the first k messages end (msg_bounds; -1 unknown). */
typedef struct render_tokens {
    int32_t *ids;
    size_t n;
    int *bounds;
    int n_bounds;
    int *msg_bounds; /* n_msgs + 1 entries */
    size_t n_msgs;
    int date_end;    /* the position where the text strftime_now wrote ends (-1: none written) */
} render_tokens;
int render_tokenize(const renderer *r, const render_out *o, render_tokens *out, strata_err *err);
void render_tokens_free(render_tokens *t);

#endif
