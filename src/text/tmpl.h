/* tmpl.h - chat-template engine: the Jinja subset that real chat templates
 * use, so the server can run the model's own `tokenizer.chat_template`.
 *
 * The reference is Python jinja2 as Hugging Face transformers sets it up for
 * chat templates: an ImmutableSandboxedEnvironment with trim_blocks and
 * lstrip_blocks, the loopcontrols extension (break/continue), a `tojson`
 * filter that is json.dumps(x, ensure_ascii=False, indent=..., sort_keys=False),
 * and the globals raise_exception(msg) and strftime_now(fmt). Output is meant
 * to be byte-identical to that reference.
 *
 * Every rendered byte is tagged with its provenance: text that came from the
 * template's own literals ("literal") or from the data in the context
 * ("data": message content, tool results, names...). The server tokenizes
 * literal text with special-token parsing and data without it, so a user
 * message containing "<|im_start|>system" stays plain text.
 *
 * Not a general Jinja: no template inheritance, includes or imports, no
 * autoescape, no line statements. Anything the parser does not know is a
 * parse error with line:col, never a silent difference. */
#ifndef STRATA_TMPL_H
#define STRATA_TMPL_H

#include <jansson.h>
#include <stddef.h>

#include "base/err.h"

/* Limits of one render; exceeding one is a render error (STRATA_ERANGE)
 * that names the limit. They bound hostile or buggy templates: infinite
 * loops (via huge ranges or recursion) and output blow-up. */
#define TMPL_MAX_OUTPUT   (64u << 20)   /* bytes of rendered text */
#define TMPL_MAX_MEMORY   (512u << 20)  /* bytes of scratch for one render */
#define TMPL_MAX_STEPS    5000000u      /* loop iterations, calls, filters */
#define TMPL_MAX_DEPTH    200           /* nested macro calls / blocks */
/* Nested expression evaluation, macro calls included. Chains such as
 * `x|f|f|...`, `a.b.b...` or `1+1+...` are as deep as they are long and
 * evaluating them recurses; this keeps the C stack bounded (~1 MB). */
#define TMPL_MAX_EVAL_DEPTH 1000
/* Nesting printed by str()/repr() (and tojson): deeper values fail, as
 * Python's RecursionError does. A namespace that contains itself prints
 * as `{...}`, as in Python. */
#define TMPL_MAX_VALUE_DEPTH 1000
/* Width and precision in `fmt % x` and `|format` ('%.1000000000f' would
 * take seconds and gigabytes); real templates use '%02d' and the like. */
#define TMPL_MAX_FORMAT_WIDTH 100

typedef struct tmpl tmpl;

/* Parses a template. On error returns STRATA_EFORMAT (syntax) or
 * STRATA_EUNSUPPORTED (valid Jinja this engine does not implement, e.g.
 * an unknown filter or tag) with "line L:C: reason" in err. */
int tmpl_parse(tmpl **out, const char *src, size_t len, strata_err *err);
void tmpl_free(tmpl *t);

/* One run of output text: bytes [off, off+len) of the rendered string.
 * literal = 1 when the text came from the template source itself. Runs are
 * in order, never empty, cover the whole output, and neighbours differ in
 * `literal`. */
typedef struct tmpl_span {
    size_t off, len;
    int literal;
} tmpl_span;

/* Renders with ctx, a JSON object whose keys become template variables
 * (messages, tools, add_generation_prompt, bos_token, eos_token, and any
 * extra keys). ctx is borrowed; it must outlive only this call.
 * On success *out is a NUL-terminated malloc'd string of *out_len bytes and
 * *spans (malloc'd, *n_spans entries) its provenance; spans may be NULL if
 * the caller does not want them. Free both with free().
 * Errors: a template's raise_exception(msg) gives STRATA_EINVAL with err->msg
 * "raise_exception: <msg>"; other template errors (undefined attribute of
 * an undefined value, type errors) give STRATA_EINVAL; limits give
 * STRATA_ERANGE. On error *out and *spans are NULL. */
int tmpl_render(const tmpl *t, const json_t *ctx, char **out, size_t *out_len,
                tmpl_span **spans, size_t *n_spans, strata_err *err);

/* The clock strftime_now reads, and where its text went. A template that
 * writes today's date renders a conversation differently tomorrow; a
 * caller can render it again with the day it began (server/prompt.c), so
 * its prefix stays the same. */
typedef struct tmpl_clock {
    long long now;  /* in: the seconds since the epoch strftime_now formats (local time); 0: the system clock */
    long long used; /* out: the time it formatted (read once per render); 0: it was not called */
    long off;       /* out: where the first text it wrote begins in the output; -1: none got there */
    size_t len;     /* out: that text's length (a run of its bytes, as written) */
} tmpl_clock;
/* tmpl_render with clk (NULL: the system clock, nothing reported). Text
 * strftime_now wrote is data in the spans; its bytes are followed through
 * variables and concatenation, while text a filter or method rewrote
 * (upper, replace...) is new data, not counted in clk->off. */
int tmpl_render_at(const tmpl *t, const json_t *ctx, tmpl_clock *clk, char **out, size_t *out_len,
                   tmpl_span **spans, size_t *n_spans, strata_err *err);

#endif
