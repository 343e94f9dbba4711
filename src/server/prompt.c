/* prompt.c - rendering normalised conversations (see prompt.h).
 *
 * Runs the model's own chat template (text/tmpl) when it has one Strata
 * can run, else the built-in format (ChatML or Llama 3). Models whose
 * template has no tool syntax get the generic tool format: instructions
 * in the system message, calls written as JSON. */
#include "server/prompt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "text/tmpl.h"

char *prompt_content_text(const json_t *content, const char *where, char *why, size_t cap) {
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
        if (!type || strcmp(type, "text") != 0 || !text) {
            snprintf(why, cap, "%s[%zu]: only {\"type\": \"text\", \"text\": ...} parts are supported", where, i);
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
static char *calls_json_text(json_t *list) {
    json_t *obj = json_pack("{s:o}", "tool_calls", list);
    char *js = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    return js ? js : xstrdup("");
}

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
    return calls_json_text(list);
}

char *prompt_generic_calls_text(const char *const *names, const char *const *args, int n) {
    json_t *list = json_array();
    for (int i = 0; i < n; i++) { /* arguments as the client will send them back: parsed, then dumped */
        json_t *a = json_loads(args[i], 0, NULL);
        json_array_append_new(list, json_pack("{s:s,s:o}", "name", names[i], "arguments", a ? a : json_string(args[i])));
    }
    return calls_json_text(list);
}

tc_format prompt_tool_format(const server *s, const prompt_tools *t) {
    if (!t || !t->tools || !json_array_size(t->tools)) return TC_NONE;
    if (s->tpl && s->tpl_tools) return tc_detect(s->tpl_src); /* the template renders tools itself */
    return TC_GENERIC;
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

/* For the generic tool format: the instructions join the first system
 * message (or become one), and assistant tool calls become the JSON the
 * model wrote, since the chat format has no syntax for them. */
static json_t *generic_messages(const json_t *messages, const prompt_tools *t) {
    json_t *out = json_array();
    char *tools = tc_generic_system_prompt(t->tools, t->forced, t->required);
    const json_t *m;
    size_t i;
    int merged = 0;
    json_array_foreach(messages, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        json_t *copy = json_deep_copy(m);
        if (i == 0 && !strcmp(role, "system")) {
            const char *sys = json_string_value(json_object_get(m, "content"));
            char *joined = xmalloc(strlen(sys) + strlen(tools) + 3);
            sprintf(joined, "%s\n\n%s", sys, tools);
            json_object_set_new(copy, "content", json_string(joined));
            free(joined);
            merged = 1;
        } else if (!strcmp(role, "assistant") && json_array_size(json_object_get(m, "tool_calls"))) {
            char *text = assistant_text(m);
            json_object_set_new(copy, "content", json_string(text));
            json_object_del(copy, "tool_calls");
            free(text);
        }
        json_array_append_new(out, copy);
    }
    if (!merged) json_array_insert_new(out, 0, json_pack("{s:s,s:s}", "role", "system", "content", tools));
    free(tools);
    return out;
}

/* The model's own template: text from its literals may hold special
 * tokens, text from the conversation may not. */
static int render_template(const server *s, const json_t *messages, const json_t *tools, int add_gen,
                           chat_prompt *out, char *why, size_t cap) {
    char bos[128] = "", eos[128] = "";
    int32_t b = tok_bos(s->tok), e = tok_eos(s->tok);
    if (b >= 0) bos[tok_piece(s->tok, b, 1, bos, sizeof bos - 1) & 127] = 0;
    if (e >= 0) eos[tok_piece(s->tok, e, 1, eos, sizeof eos - 1) & 127] = 0;
    json_t *ctx = json_pack("{s:O,s:b,s:s,s:s}", "messages", messages, "add_generation_prompt", add_gen,
                            "bos_token", bos, "eos_token", eos);
    if (tools) json_object_set(ctx, "tools", (json_t *)tools);
    char *text;
    size_t len, n_spans;
    tmpl_span *spans;
    strata_err err = {0};
    int rc = tmpl_render(s->tpl, ctx, &text, &len, &spans, &n_spans, &err);
    json_decref(ctx);
    if (rc) {
        strata_fmt(why, cap, "chat template: %s", err.msg);
        return -1;
    }
    for (size_t i = 0; i < n_spans; i++)
        chat_prompt_add(out, text + spans[i].off, spans[i].len, spans[i].literal);
    free(text);
    free(spans);
    return 0;
}

static void render_builtin(const server *s, const json_t *messages, int add_gen, chat_prompt *out) {
    size_t n = json_array_size(messages), i;
    chat_msg *cm = xcalloc(n + 1, sizeof *cm);
    char **texts = xcalloc(n + 1, sizeof *texts);
    const json_t *m;
    json_array_foreach(messages, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        texts[i] = !strcmp(role, "assistant") ? assistant_text(m)
                   : xstrdup(json_string_value(json_object_get(m, "content")) ?: "");
        cm[i].role = role;
        cm[i].content = texts[i];
    }
    chat_render_builtin(s->fmt, cm, (int)n, add_gen, out);
    for (i = 0; i < n; i++) free(texts[i]);
    free(texts);
    free(cm);
}

/* ---- exact replay of native tool-call turns ------------------------------------ */

char *prompt_native_turn_key(const char *content, const char *const *names, const char *const *args, int n) {
    char *calls = prompt_generic_calls_text(names, args, n);
    size_t a = strlen(content), b = strlen(calls);
    char *key = xmalloc(a + b + 10);
    memcpy(key, "native\x01", 7);
    memcpy(key + 7, content, a);
    key[7 + a] = '\x01';
    memcpy(key + 8 + a, calls, b + 1);
    free(calls);
    return key;
}

/* The key of a normalised assistant message with tool calls, or NULL. */
static char *message_turn_key(const json_t *m) {
    const json_t *calls = json_object_get(m, "tool_calls"), *call;
    size_t n = json_array_size(calls), i;
    if (!n) return NULL;
    const char **names = xcalloc(n, sizeof *names);
    char **args = xcalloc(n, sizeof *args);
    json_array_foreach(calls, i, call) {
        const json_t *fn = json_object_get(call, "function");
        names[i] = json_string_value(json_object_get(fn, "name")) ?: "";
        args[i] = json_dumps(json_object_get(fn, "arguments"), JSON_COMPACT | JSON_ENCODE_ANY) ?: xstrdup("{}");
    }
    const char *content = json_string_value(json_object_get(m, "content"));
    char *key = prompt_native_turn_key(content ? content : "", names, (const char *const *)args, (int)n);
    for (i = 0; i < n; i++) free(args[i]);
    free(args);
    free(names);
    return key;
}

/* Assistant turns taken out of the conversation for their exact tokens:
 * each is rendered as plain content "\x01<tag><k>\x01" (a sentinel no
 * client can guess: the tag carries 128 random bits per request), whose
 * segment is then replaced by the tokens the model generated, markup and
 * all, which is what it saw when it wrote them. */
#define MAX_SUBS 256
typedef struct turn_subs {
    char tag[64];
    int n;
    int32_t *ids[MAX_SUBS];
    size_t n_ids[MAX_SUBS];
} turn_subs;

static void subs_free(turn_subs *ts) {
    for (int i = 0; i < ts->n; i++) free(ts->ids[i]);
    ts->n = 0;
}

static json_t *replace_replayed_turns(const server *s, const json_t *messages, turn_subs *ts) {
    make_id(ts->tag, sizeof ts->tag - 1, "strata-replay-");
    strcat(ts->tag, "-");
    json_t *out = json_array();
    size_t i;
    const json_t *m;
    json_array_foreach(messages, i, m) {
        char *key = ts->n < MAX_SUBS ? message_turn_key(m) : NULL;
        int32_t *ids = key ? replay_get(s->replay, key, strlen(key), &ts->n_ids[ts->n]) : NULL;
        free(key);
        if (!ids) {
            json_array_append(out, (json_t *)m);
            continue;
        }
        char sentinel[96];
        snprintf(sentinel, sizeof sentinel, "\x01%s%d\x01", ts->tag, ts->n);
        ts->ids[ts->n++] = ids;
        json_array_append_new(out, json_pack("{s:s,s:s}", "role", "assistant", "content", sentinel));
    }
    return out;
}

/* Replaces each sentinel in p's content by its turn's tokens. -1 when a
 * sentinel is missing or sits anywhere but in content (the template did
 * something with the content we cannot undo): render plainly then. */
static int splice_replayed(chat_prompt *p, const turn_subs *ts) {
    chat_prompt q = {0};
    int found = 0;
    size_t tl = strlen(ts->tag);
    for (int i = 0; i < p->n; i++) {
        const chat_seg *g = &p->segs[i];
        const char *at = g->text, *end = g->text + g->len, *hit;
        while ((hit = memmem(at, (size_t)(end - at), ts->tag, tl))) {
            char *stop;
            long k = strtol(hit + tl, &stop, 10);
            if (g->special || g->ids || hit == g->text || hit[-1] != '\x01' || stop >= end || *stop != '\x01' ||
                k < 0 || k >= ts->n) {
                chat_prompt_free(&q);
                return -1;
            }
            if (hit - 1 > at) chat_prompt_add(&q, at, (size_t)(hit - 1 - at), 0);
            int32_t *ids = xmalloc((ts->n_ids[k] ? ts->n_ids[k] : 1) * sizeof(int32_t));
            memcpy(ids, ts->ids[k], ts->n_ids[k] * sizeof(int32_t));
            chat_prompt_add_tokens(&q, hit - 1, (size_t)(stop + 1 - (hit - 1)), ids, ts->n_ids[k]);
            found++;
            at = stop + 1;
        }
        if (at == g->text) { /* fresh from the template: no segment has ids yet */
            chat_prompt_add(&q, g->text, g->len, g->special);
        } else if (at < end) {
            chat_prompt_add(&q, at, (size_t)(end - at), 0);
        }
    }
    if (found != ts->n) {
        chat_prompt_free(&q);
        return -1;
    }
    chat_prompt_free(p);
    *p = q;
    return 0;
}

/* Content the model generated earlier gets its exact tokens back. */
static void apply_replay(const server *s, chat_prompt *p) {
    for (int i = 0; i < p->n; i++) {
        chat_seg *g = &p->segs[i];
        if (g->special || g->ids) continue;
        g->ids = replay_get(s->replay, g->text, g->len, &g->n_ids);
    }
}

static int render_plain(const server *s, const json_t *msgs, tc_format f, const prompt_tools *t, int add_gen,
                        chat_prompt *out, char *why, size_t cap) {
    if (!s->tpl) {
        render_builtin(s, msgs, add_gen, out);
        return 0;
    }
    return render_template(s, msgs, f != TC_NONE && f != TC_GENERIC ? t->tools : NULL, add_gen, out, why, cap);
}

/* Renders the conversation; with exact, earlier replies get the tokens the
 * model generated (their text alone still renders as the template says,
 * for /apply-template). */
static int render_messages(const server *s, const json_t *messages, const prompt_tools *t, int add_gen, int exact,
                           chat_prompt *out, char *why, size_t cap) {
    tc_format f = prompt_tool_format(s, t);
    turn_subs ts = {0};
    json_t *msgs = f == TC_GENERIC                       ? generic_messages(messages, t)
                   : exact && s->replay && s->tpl_tools ? replace_replayed_turns(s, messages, &ts)
                                                         : json_incref((json_t *)messages);
    int rc = render_plain(s, msgs, f, t, add_gen, out, why, cap);
    json_decref(msgs);
    if (!rc && ts.n && splice_replayed(out, &ts)) { /* the template did not keep the turn whole */
        chat_prompt_free(out);
        rc = render_plain(s, messages, f, t, add_gen, out, why, cap);
    }
    subs_free(&ts);
    if (!rc && exact) apply_replay(s, out);
    return rc;
}

int prompt_render(const server *s, const json_t *messages, const prompt_tools *t, chat_prompt *out,
                  char *why, size_t cap) {
    return render_messages(s, messages, t, 1, 0, out, why, cap);
}

/* How many of the prompt's tokens the first k messages alone render to
 * (no open assistant turn): where a prefix of whole messages ends. The
 * common prefix, not the length, in case a template renders a message
 * differently when it is last; 0 when the part cannot be rendered. */
static int message_prefix_tokens(const server *s, const json_t *messages, size_t k, const prompt_tools *t,
                                 const int32_t *ids, size_t n) {
    json_t *part = json_array();
    for (size_t i = 0; i < k && i < json_array_size(messages); i++)
        json_array_append(part, json_array_get(messages, i));
    chat_prompt p = {0};
    char why[256];
    int32_t *pids = NULL;
    size_t pn = 0, len = 0;
    strata_err err = {0};
    if (!render_messages(s, part, t, 0, 1, &p, why, sizeof why) && !chat_tokenize(s->tok, &p, tok_add_bos(s->tok), &pids, &pn, &err))
        while (len < pn && len < n && pids[len] == ids[len]) len++;
    free(pids);
    chat_prompt_free(&p);
    json_decref(part);
    return (int)len;
}

static void add_mark(prompt_cache_info *ci, int end, double ttl_s) {
    if (end > 0 && ci->n_marks < POLICY_MAX_MARKS) ci->marks[ci->n_marks++] = (cache_mark){end, ttl_s};
}

/* The anchor (leading system messages, with the tools) and the client's
 * breakpoints, as prompt positions. */
static void find_marks(const server *s, const json_t *messages, const prompt_tools *t, const int32_t *ids, size_t n,
                       prompt_cache_info *ci) {
    size_t k = 0;
    while (k < json_array_size(messages)) {
        const char *role = json_string_value(json_object_get(json_array_get(messages, k), "role"));
        if (!role || strcmp(role, "system")) break;
        k++;
    }
    if (k > 0 || (t && json_array_size(t->tools)))
        add_mark(ci, message_prefix_tokens(s, messages, k, t, ids, n), POLICY_ANCHOR_TTL_S);
    for (int i = 0; i < ci->n_breaks; i++)
        add_mark(ci, message_prefix_tokens(s, messages, ci->breaks[i].n_messages, t, ids, n), ci->breaks[i].ttl_s);
}

int prompt_tokens(const server *s, const json_t *messages, const prompt_tools *t, int32_t **ids,
                  size_t *n, prompt_cache_info *ci, char *why, size_t cap) {
    chat_prompt p = {0};
    int rc = render_messages(s, messages, t, 1, 1, &p, why, cap);
    if (!rc) {
        strata_err err = {0};
        if (chat_tokenize_bounds(s->tok, &p, tok_add_bos(s->tok), ids, n, ci ? &ci->bounds : NULL,
                                 ci ? &ci->n_bounds : NULL, &err)) {
            strata_fmt(why, cap, "%s", err.msg);
            rc = -1;
        }
    }
    chat_prompt_free(&p);
    if (!rc && ci) find_marks(s, messages, t, *ids, *n, ci);
    return rc;
}

void prompt_cache_apply(const prompt_cache_info *ci, gen_params *gp) {
    gp->bounds = ci->bounds;
    gp->n_bounds = ci->n_bounds;
    gp->marks = ci->marks;
    gp->n_marks = ci->n_marks;
}

void prompt_cache_info_free(prompt_cache_info *ci) {
    free(ci->bounds);
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

char *prompt_force_tool(const server *s, const prompt_tools *t, gen_params *gp, int32_t **ids, size_t *n) {
    char *prefix = prompt_tool_prefix(s, t);
    if (!prefix) return NULL;
    prompt_append_text(s, prefix, ids, n);
    gp->prefix = prefix;
    gp->one_call = 1;
    gp->args_open = t->forced != NULL;
    return prefix;
}
