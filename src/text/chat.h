/* chat.h - chat prompts as segments, and the built-in chat formats.
 *
 * A prompt is a list of segments: template text (special tokens in it are
 * recognised) and content (user, tool or assistant text: never parsed for
 * special tokens). Segments are tokenized one by one, so the tokens of a
 * message never depend on what follows it.
 * The built-in formats (ChatML, Llama 3) serve models whose own template
 * cannot be used; text/render.h picks between them and the template.
 * Does not: parse requests or run Jinja. */
#ifndef STRATA_CHAT_H
#define STRATA_CHAT_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "text/tokenizer.h"

/* Built-in formats, for models without a usable template of their own.
 * CHAT_GEMMA: Gemma's turns (assistant = "model", a system message folded
 * into the first user turn, as Gemma 3's template does). */
typedef enum { CHAT_CHATML, CHAT_LLAMA3, CHAT_GEMMA } chat_format;

typedef struct chat_msg {
    const char *role, *content;
} chat_msg;

typedef struct chat_seg {
    char *text;
    size_t len;
    int special;  /* 1: template text, special tokens recognised */
    int32_t *ids; /* when set: the exact tokens of text (replayed output) */
    size_t n_ids;
} chat_seg;

typedef struct chat_prompt {
    chat_seg *segs;
    int n, cap;
} chat_prompt;

void chat_prompt_add(chat_prompt *p, const char *text, size_t len, int special);
/* Content whose exact tokens are known (takes ownership of ids). */
void chat_prompt_add_tokens(chat_prompt *p, const char *text, size_t len, int32_t *ids, size_t n);
void chat_prompt_free(chat_prompt *p);
/* Tokens of every segment in order, BOS first if add_bos (and the prompt
 * does not already start with it). *ids is malloc'd. */
int chat_tokenize(const tokenizer *t, const chat_prompt *p, int add_bos, int32_t **ids,
                  size_t *n, strata_err *err);

/* chat_tokenize, and where template text resumes after conversation
 * text (ascending token positions, malloc'd; NULL when none): the ends of
 * messages and role names, where a cache may cut a prompt. */
int chat_tokenize_bounds(const tokenizer *t, const chat_prompt *p, int add_bos, int32_t **ids, size_t *n,
                         int **bounds, int *n_bounds, strata_err *err);

/* chat_tokenize_bounds, and the token positions of n_offs text offsets
 * (bytes into the concatenated segments; -1: none): where the prompt's
 * tokens for its text up to there end (pos[i], -1 when not found). So a
 * cut at a message end costs a few tokens' work, not a second prompt. */
int chat_tokenize_at(const tokenizer *t, const chat_prompt *p, int add_bos, int32_t **ids, size_t *n,
                     int **bounds, int *n_bounds, const long *offs, int *pos, size_t n_offs, strata_err *err);

const char *chat_format_name(chat_format c);
/* Appends the messages in format c, then the open assistant turn if asked. */
void chat_render_builtin(chat_format c, const chat_msg *msgs, int n, int add_generation,
                         chat_prompt *out);

#endif
