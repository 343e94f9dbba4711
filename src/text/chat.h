/* chat.h - built-in chat prompt formats for `strata run --chat`.
 *
 * Picks ChatML (<|im_start|>role ... <|im_end|>) or the Llama 3 header
 * format from the model's template text or its special tokens, and
 * renders a single user turn with the assistant prompt opened. The full
 * Jinja template engine is the server's (it runs the model's own template).
 * Does not: tokenize (the caller encodes with parse_special). */
#ifndef STRATA_CHAT_H
#define STRATA_CHAT_H

#include "model/gguf.h"
#include "text/tokenizer.h"

typedef enum { CHAT_CHATML, CHAT_LLAMA3 } chat_format;

chat_format chat_detect(const gguf_file *f, const tokenizer *t);
const char *chat_format_name(chat_format c);
/* malloc'd prompt text: optional system message, user message, open turn. */
char *chat_render(chat_format c, const char *system, const char *user);

#endif
