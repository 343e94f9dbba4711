/* prompt.c - rendering normalised conversations (see prompt.h).
 *
 * Uses the built-in chat format of the model (ChatML or Llama 3). Tool
 * calls in history are written as the JSON the model would have produced,
 * and tool results as "tool" turns, so a conversation with tools still
 * renders when the model's own template is not available. */
#include "server/prompt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"

char *prompt_content_text(const json_t *content, char *why, size_t cap) {
    if (!content || json_is_null(content)) return xstrdup("");
    if (json_is_string(content)) return xstrdup(json_string_value(content));
    if (!json_is_array(content)) {
        snprintf(why, cap, "message content must be a string or an array of content parts");
        return NULL;
    }
    size_t len = 0, i;
    char *out = xstrdup("");
    const json_t *part;
    json_array_foreach(content, i, part) {
        const char *type = json_string_value(json_object_get(part, "type"));
        const char *text = json_string_value(json_object_get(part, "text"));
        if (!type || strcmp(type, "text") != 0 || !text) {
            snprintf(why, cap, "content part %zu: only text parts are supported", i);
            free(out);
            return NULL;
        }
        size_t n = strlen(text);
        out = xrealloc(out, len + n + 1);
        memcpy(out + len, text, n + 1);
        len += n;
    }
    return out;
}

/* Assistant content followed by its tool calls as JSON lines. */
static char *assistant_text(const json_t *m) {
    const char *content = json_string_value(json_object_get(m, "content"));
    char *out = xstrdup(content ? content : "");
    const json_t *calls = json_object_get(m, "tool_calls"), *call;
    size_t i;
    json_array_foreach(calls, i, call) {
        const json_t *fn = json_object_get(call, "function");
        json_t *obj = json_pack("{s:O,s:O}", "name", json_object_get(fn, "name"), "arguments",
                                json_object_get(fn, "arguments"));
        char *js = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
        json_decref(obj);
        if (!js) continue;
        size_t len = strlen(out);
        out = xrealloc(out, len + strlen(js) + 2);
        sprintf(out + len, "%s%s", len ? "\n" : "", js);
        free(js);
    }
    return out;
}

/* Tools listed in the system turn, for the built-in formats. */
static char *tools_text(const json_t *tools) {
    char *js = json_dumps(tools, JSON_COMPACT);
    const char *head = "You can call these tools. To call one, answer only with JSON "
                       "{\"name\": <tool name>, \"arguments\": <object>}.\nTools: ";
    char *out = xmalloc(strlen(head) + strlen(js) + 1);
    sprintf(out, "%s%s", head, js);
    free(js);
    return out;
}

int prompt_render(const server *s, const json_t *messages, const json_t *tools, chat_prompt *out,
                  char *why, size_t cap) {
    size_t n = json_array_size(messages), i;
    int has_tools = tools && json_array_size(tools) > 0;
    chat_msg *cm = xcalloc(n + 1, sizeof *cm);
    char **texts = xcalloc(n + 1, sizeof *texts);
    int k = 0;
    if (has_tools) {
        texts[k] = tools_text(tools);
        cm[k].role = "system";
        cm[k].content = texts[k];
        k++;
    }
    const json_t *m;
    json_array_foreach(messages, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        texts[k] = strcmp(role, "assistant") == 0 ? assistant_text(m)
                   : xstrdup(json_string_value(json_object_get(m, "content")) ?: "");
        cm[k].role = role;
        cm[k].content = texts[k];
        k++;
    }
    chat_render_builtin(s->fmt, cm, k, 1, out);
    for (i = 0; i < (size_t)k; i++) free(texts[i]);
    free(texts);
    free(cm);
    (void)why, (void)cap;
    return 0;
}

int prompt_tokens(const server *s, const json_t *messages, const json_t *tools, int32_t **ids,
                  size_t *n, char *why, size_t cap) {
    chat_prompt p = {0};
    int rc = prompt_render(s, messages, tools, &p, why, cap);
    if (!rc) {
        strata_err err = {0};
        if (chat_tokenize(s->tok, &p, tok_add_bos(s->tok), ids, n, &err)) {
            snprintf(why, cap, "%s", err.msg);
            rc = -1;
        }
    }
    chat_prompt_free(&p);
    return rc;
}
