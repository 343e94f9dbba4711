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

/* An assistant turn as the generic tool format has the model write it:
 * {"tool_calls": [{"name", "arguments"}]} when it called tools, else its
 * text. */
static char *assistant_text(const json_t *m) {
    const char *content = json_string_value(json_object_get(m, "content"));
    const json_t *calls = json_object_get(m, "tool_calls"), *call;
    if (!json_array_size(calls)) return xstrdup(content ? content : "");
    json_t *list = json_array();
    size_t i;
    json_array_foreach(calls, i, call) {
        const json_t *fn = json_object_get(call, "function");
        json_array_append_new(list, json_pack("{s:O,s:O}", "name", json_object_get(fn, "name"), "arguments",
                                              json_object_get(fn, "arguments")));
    }
    json_t *obj = json_pack("{s:o}", "tool_calls", list);
    char *js = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    return js ? js : xstrdup("");
}

tc_format prompt_tool_format(const server *s, const prompt_tools *t) {
    if (!t || !t->tools || !json_array_size(t->tools)) return TC_NONE;
    return TC_GENERIC; /* the built-in formats have no tool syntax of their own */
}

char *prompt_tool_prefix(const server *s, const prompt_tools *t) {
    if (prompt_tool_format(s, t) != TC_GENERIC || !t->required) return NULL;
    if (!t->forced) return xstrdup("{\"tool_calls\": [{\"name\": \"");
    json_t *name = json_string(t->forced);
    char *quoted = json_dumps(name, JSON_ENCODE_ANY);
    json_decref(name);
    char *out = xmalloc(strlen(quoted) + 64);
    sprintf(out, "{\"tool_calls\": [{\"name\": %s, \"arguments\": {", quoted); /* an object, not any value */
    free(quoted);
    return out;
}

/* The generic tool instructions join the first system message (or become
 * one), so the model reads them before the conversation. */
static char *system_with_tools(const json_t *messages, const prompt_tools *t, int *merged) {
    char *tools = tc_generic_system_prompt(t->tools, t->forced, t->required);
    const json_t *first = json_array_get(messages, 0);
    const char *role = json_string_value(json_object_get(first, "role"));
    *merged = role && !strcmp(role, "system");
    if (!*merged) return tools;
    const char *sys = json_string_value(json_object_get(first, "content"));
    char *out = xmalloc(strlen(sys) + strlen(tools) + 3);
    sprintf(out, "%s\n\n%s", sys, tools);
    free(tools);
    return out;
}

int prompt_render(const server *s, const json_t *messages, const prompt_tools *t, chat_prompt *out,
                  char *why, size_t cap) {
    size_t n = json_array_size(messages), i;
    chat_msg *cm = xcalloc(n + 1, sizeof *cm);
    char **texts = xcalloc(n + 1, sizeof *texts);
    int k = 0, merged = 0;
    if (prompt_tool_format(s, t) == TC_GENERIC) {
        texts[k] = system_with_tools(messages, t, &merged);
        cm[k].role = "system";
        cm[k].content = texts[k];
        k++;
    }
    const json_t *m;
    json_array_foreach(messages, i, m) {
        if (i == 0 && merged) continue;
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

int prompt_tokens(const server *s, const json_t *messages, const prompt_tools *t, int32_t **ids,
                  size_t *n, char *why, size_t cap) {
    chat_prompt p = {0};
    int rc = prompt_render(s, messages, t, &p, why, cap);
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

void prompt_append_text(const server *s, const char *text, int32_t **ids, size_t *n) {
    int32_t *more;
    size_t k;
    if (tok_encode(s->tok, text, strlen(text), 0, &more, &k, NULL)) return;
    *ids = xrealloc(*ids, (*n + k) * sizeof(int32_t));
    memcpy(*ids + *n, more, k * sizeof(int32_t));
    *n += k;
    free(more);
}
