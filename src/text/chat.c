/* chat.c - ChatML and Llama 3 single-turn rendering (see chat.h). */
#include "text/chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"

static int template_mentions(const gguf_file *f, const char *needle) {
    gguf_str tpl;
    if (!gguf_find(f, "tokenizer.chat_template") ||
        gguf_get_str(f, "tokenizer.chat_template", &tpl, NULL))
        return 0;
    return memmem(tpl.ptr, (size_t)tpl.len, needle, strlen(needle)) != NULL;
}

chat_format chat_detect(const gguf_file *f, const tokenizer *t) {
    if (template_mentions(f, "<|start_header_id|>")) return CHAT_LLAMA3;
    if (template_mentions(f, "<|im_start|>")) return CHAT_CHATML;
    if (tok_find(t, "<|start_header_id|>") >= 0) return CHAT_LLAMA3;
    return CHAT_CHATML;
}

const char *chat_format_name(chat_format c) { return c == CHAT_LLAMA3 ? "llama3" : "chatml"; }

char *chat_render(chat_format c, const char *system, const char *user) {
    size_t n = strlen(user) + (system ? strlen(system) : 0) + 256;
    char *out = xmalloc(n);
    if (c == CHAT_LLAMA3) {
        int off = snprintf(out, n, "<|begin_of_text|>");
        if (system)
            off += snprintf(out + off, n - (size_t)off,
                            "<|start_header_id|>system<|end_header_id|>\n\n%s<|eot_id|>", system);
        snprintf(out + off, n - (size_t)off,
                 "<|start_header_id|>user<|end_header_id|>\n\n%s<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\n", user);
    } else {
        int off = 0;
        if (system) off = snprintf(out, n, "<|im_start|>system\n%s<|im_end|>\n", system);
        snprintf(out + off, n - (size_t)off, "<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n",
                 user);
    }
    return out;
}
