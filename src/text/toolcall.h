/* toolcall.h - separate tool calls from ordinary content in model output.
 *
 * The server streams generated text through a tc_parser. The parser knows
 * the tool-call syntax of one model family (tc_format) and turns the text
 * into events: content text, and for each call its name (as soon as it is
 * known), fragments of its arguments JSON, and its end. Text that could
 * still turn out to be the start of a tool-call marker is held back until
 * it is decided; text that is certainly content is released at once.
 *
 * Arguments are normalised to compact JSON: whitespace outside strings is
 * removed, raw control characters inside strings are escaped, every other
 * byte (escapes, number spelling, key order, Unicode) is kept as the model
 * wrote it. Arguments written as a JSON string holding an object are
 * decoded and normalised the same way; missing or null arguments are "{}".
 * The concatenated ARGS fragments of a call equal its final arguments.
 *
 * It does not render tools into the prompt (the chat template does that),
 * except for models without a native syntax: tc_generic_system_prompt.
 * It does not check calls against the request's tool list. */
#ifndef STRATA_TOOLCALL_H
#define STRATA_TOOLCALL_H

#include <jansson.h>
#include <stddef.h>

#include "base/err.h"

typedef enum {
    TC_NONE,    /* no tools in the request: all text is content */
    TC_HERMES,  /* Hermes, Qwen2.5, Qwen3: <tool_call>{json}</tool_call> */
    TC_LLAMA3,  /* Llama 3.x: a bare {"name", "parameters"} object */
    TC_MISTRAL, /* [TOOL_CALLS][{...}] or [TOOL_CALLS]name[ARGS]{...} */
    TC_GENERIC, /* {"tool_calls": [...]} or {"content": "..."} */
    TC_HARMONY, /* gpt-oss: <|channel|>analysis|commentary|final<|message|>..., calls
                   to=functions.NAME (<|constrain|>json) <|message|>{...}<|call|>;
                   parsed with or without tools (the channels are not content) */
} tc_format;

/* The tool-call format a chat template implies: "<|channel|>" -> HARMONY,
 * "<tool_call>" -> HERMES,
 * "[TOOL_CALLS]" -> MISTRAL, "<|python_tag|>" or "ipython" -> LLAMA3,
 * anything else (or NULL) -> GENERIC. The caller uses TC_NONE itself when
 * the request has no tools. */
tc_format tc_detect(const char *chat_template);

/* Short lowercase name ("hermes", ...), for logs and traces. */
const char *tc_format_name(tc_format f);

typedef enum {
    TC_EV_TEXT,       /* text: content */
    TC_EV_CALL_BEGIN, /* text: the function name */
    TC_EV_CALL_ARGS,  /* text: a fragment of the arguments JSON */
    TC_EV_CALL_END,   /* text: "" */
    TC_EV_REASONING,  /* text: reasoning (HARMONY's analysis channel), not content */
} tc_event_kind;

typedef struct tc_event {
    tc_event_kind kind;
    int index;   /* call number, from 0 in order of appearance; -1 for TEXT */
    char *text;  /* NUL-terminated; owned by the parser */
    size_t len;
} tc_event;

typedef struct tc_parser tc_parser;

tc_parser *tc_new(tc_format f);
void tc_free(tc_parser *p);

/* Feeds the next piece of generated text; final=1 on the last call (len
 * may be 0). *evs and *n receive the new events, owned by the parser and valid
 * until the next tc_feed or tc_free. Text and argument events never end
 * inside a UTF-8 character unless the input itself does at the end.
 * Returns 0, or STRATA_EFORMAT when the output is malformed (unterminated
 * call, invalid JSON, a call without a name, ...): err says why, the
 * events produced before the fault are still returned, and every later
 * feed fails the same way. */
int tc_feed(tc_parser *p, const char *text, size_t len, int final,
            const tc_event **evs, int *n, strata_err *err);

/* The calls completed so far (all of them after the final feed): names
 * and compact arguments JSON, arrays owned by the parser and valid until
 * the next tc_feed or tc_free. Returns the number of calls. */
int tc_calls(const tc_parser *p, const char ***names, const char ***arguments);

/* Instructions for a model without native tool syntax, to add to the
 * system message: the tools (OpenAI {"type":"function","function":{...}}
 * or bare {"name","description","parameters"|"input_schema"} entries) and
 * the exact JSON reply shapes that TC_GENERIC parses. tool_choice_name
 * forces that one tool; required forbids a direct answer. Returns a
 * malloc'd string (caller frees), or NULL when tools is not a non-empty
 * array. */
char *tc_generic_system_prompt(const json_t *tools, const char *tool_choice_name,
                               int required);

#endif
