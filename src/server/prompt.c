/* prompt.c - glue from normalised conversations to a generation's prompt
 * (see prompt.h): text/render renders and tokenizes, server/replay puts
 * remembered replies back, cache/policy turns message bounds into marks. */
#include "server/prompt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"

char *prompt_parts_text(const json_t *content, const char *const *types, const char *where, char *why,
                        size_t cap) {
    if (!content || json_is_null(content)) return xstrdup("");
    if (json_is_string(content)) return xstrdup(json_string_value(content));
    if (!json_is_array(content)) {
        snprintf(why, cap, "%s must be a string or an array of text parts", where);
        return NULL;
    }
    size_t len = 0, i;
    char *out = xstrdup("");
    const json_t *part;
    json_array_foreach(content, i, part) {
        const char *type = json_string_value(json_object_get(part, "type"));
        const char *text = json_string_value(json_object_get(part, "text"));
        int known = 0;
        for (const char *const *t = types; type && *t && !known; t++) known = !strcmp(type, *t);
        if (!known || !text) {
            strata_fmt(why, cap, "%s[%zu]: unsupported part type '%s' (this server takes text parts only: %s%s%s)",
                       where, i, type ? type : "?", types[0], types[1] ? ", " : "", types[1] ? types[1] : "");
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

char *prompt_content_text(const json_t *content, const char *where, char *why, size_t cap) {
    static const char *const text[] = {"text", NULL};
    return prompt_parts_text(content, text, where, why, cap);
}

int prompt_tool_known(const json_t *tools, const char *name) {
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t)
        if (!strcmp(json_string_value(json_object_get(json_object_get(t, "function"), "name")) ?: "", name)) return 1;
    return 0;
}

int prompt_render(const server *s, const json_t *messages, const render_tools *t, render_out *out, char *why,
                  size_t cap) {
    return render_messages(s->render, messages, t, 1, out, why, cap);
}

/* The anchor and the client's breakpoints, from the message bounds. */
static void find_marks(const json_t *messages, const render_tools *t, const render_tokens *rt, prompt_cache_info *ci) {
    size_t n = json_array_size(messages);
    unsigned char *system = xcalloc(n + 1, 1);
    for (size_t i = 0; i < n; i++) {
        const char *role = json_string_value(json_object_get(json_array_get(messages, i), "role"));
        system[i] = role && !strcmp(role, "system");
    }
    if (rt->n_msgs == n)
        ci->n_marks = policy_prompt_marks(rt->msg_bounds, n, system, t && json_array_size(t->tools), ci->breaks,
                                          ci->n_breaks, ci->marks);
    free(system);
}

int prompt_tokens(const server *s, const cache_hash *replay_ns, const json_t *messages, const render_tools *t,
                  int32_t **ids, size_t *n, prompt_cache_info *ci, char *why, size_t cap) {
    render_out out;
    render_tokens rt;
    strata_err err = {0};
    if (replay_render(s->replay, replay_ns, s->render, messages, t, 1, &out, why, cap)) return -1;
    int rc = render_tokenize(s->render, &out, &rt, &err);
    render_out_free(&out);
    if (rc) {
        strata_fmt(why, cap, "%s", err.msg);
        return -1;
    }
    if (ci) find_marks(messages, t, &rt, ci);
    if (ci) ci->bounds = rt.bounds, ci->n_bounds = rt.n_bounds, rt.bounds = NULL;
    if (ci) ci->msg_ends = rt.msg_bounds, ci->n_msgs = (int)rt.n_msgs, rt.msg_bounds = NULL;
    *ids = rt.ids, *n = rt.n, rt.ids = NULL;
    render_tokens_free(&rt);
    return 0;
}

void prompt_cache_apply(const prompt_cache_info *ci, gen_params *gp) {
    gp->bounds = ci->bounds;
    gp->n_bounds = ci->n_bounds;
    gp->marks = ci->marks;
    gp->n_marks = ci->n_marks;
    gp->held_out = ci->held_out;
}

void prompt_cache_info_free(prompt_cache_info *ci) {
    free(ci->bounds);
    free(ci->msg_ends);
    ci->bounds = NULL;
    ci->n_bounds = 0;
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

/* The marker before the first '{' is the template's (special tokens
 * allowed, as the template's own text); the JSON is text. */
char *prompt_force_tool(const server *s, const render_tools *t, gen_params *gp, int32_t **ids, size_t *n) {
    char *prefix = render_tool_prefix(s->render, t);
    if (!prefix) return NULL;
    size_t before = *n, k = strcspn(prefix, "{");
    int32_t *more;
    size_t m;
    if (k && !tok_encode(s->tok, prefix, k, 1, &more, &m, NULL)) {
        *ids = xrealloc(*ids, (*n + m) * sizeof(int32_t));
        memcpy(*ids + *n, more, m * sizeof(int32_t));
        *n += m;
        free(more);
    }
    prompt_append_text(s, prefix + k, ids, n);
    gp->prefix = prefix;
    gp->prefix_ids = (int)(*n - before);
    gp->one_call = 1;
    gp->args_open = t->forced != NULL && gp->tools == TC_GENERIC; /* gen.c closes the generic JSON itself */
    return prefix;
}
