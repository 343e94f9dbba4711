/* prompt.c - glue from normalised conversations to a generation's prompt
 * (see prompt.h): text/render renders and tokenizes, server/replay puts
 * remembered replies back, cache/policy turns message bounds into marks. */
#include "server/prompt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "base/strbuf.h"
#include "cache/hash.h"

/* Part types that carry no text a text-only model can read: a short
 * placeholder stands in, so the model knows something was there, and the
 * request says it was left out. */
static const char *const MEDIA_PARTS[] = {"image", "image_url", "input_image", "input_audio", "audio", "file",
                                          "input_file", "document", "container_upload", NULL};

static int in_list(const char *const *list, const char *s) {
    for (int i = 0; s && list[i]; i++)
        if (!strcmp(list[i], s)) return 1;
    return 0;
}

/* Texts of a list of parts (a document's or search result's content). */
static void nested_texts(const json_t *parts, strbuf *out) {
    size_t i;
    const json_t *p;
    if (json_is_string(parts)) strbuf_puts(out, json_string_value(parts));
    json_array_foreach(parts, i, p) {
        if (i) strbuf_puts(out, "\n");
        strbuf_puts(out, json_string_value(json_object_get(p, "text")));
    }
}

/* A document's text: a plain-text or content source is read; a PDF,
 * base64 or URL source is not (no document parser here). */
static int document_text(const json_t *part, strbuf *out) {
    const json_t *src = json_object_get(part, "source");
    const char *kind = json_string_value(json_object_get(src, "type"));
    const char *title = json_string_value(json_object_get(part, "title"));
    if (kind && !strcmp(kind, "text") && json_is_string(json_object_get(src, "data"))) {
        if (title) strbuf_puts(out, title), strbuf_puts(out, "\n");
        strbuf_puts(out, json_string_value(json_object_get(src, "data")));
        return 1;
    }
    if (kind && !strcmp(kind, "content")) {
        if (title) strbuf_puts(out, title), strbuf_puts(out, "\n");
        nested_texts(json_object_get(src, "content"), out);
        return 1;
    }
    return 0;
}

int prompt_part_text(const json_t *part, const char *where, size_t i, req_ignored *ig, strbuf *out, char *why,
                     size_t cap) {
    const char *type = json_string_value(json_object_get(part, "type"));
    const json_t *text = json_object_get(part, "text");
    if (json_is_string(text)) { /* text, input_text, output_text, and any other part with text */
        strbuf_add(out, json_string_value(text), json_string_length(text));
        return 0;
    }
    if (type && !strcmp(type, "refusal") && json_is_string(json_object_get(part, "refusal"))) {
        strbuf_puts(out, json_string_value(json_object_get(part, "refusal")));
        return 0;
    }
    if (type && !strcmp(type, "tool_reference")) { /* Anthropic tool search (api_anthropic.c expands it in results) */
        strbuf_puts(out, "Tool available: ");
        strbuf_puts(out, json_string_value(json_object_get(part, "tool_name")) ?: "?");
        return 0;
    }
    if (type && !strcmp(type, "search_result")) {
        strbuf_puts(out, json_string_value(json_object_get(part, "title")));
        strbuf_puts(out, " (");
        strbuf_puts(out, json_string_value(json_object_get(part, "source")));
        strbuf_puts(out, ")\n");
        nested_texts(json_object_get(part, "content"), out);
        return 0;
    }
    if (type && !strcmp(type, "document") && document_text(part, out)) return 0;
    if (!json_is_object(part) || !type) {
        strata_fmt(why, cap, "%s[%zu]: a content part must be an object with a 'type'", where, i);
        return -1;
    }
    /* Media, and part types this server does not know yet: a placeholder. */
    if (ignored_note(ig, why, cap, "%s[%zu]: %s part (%s; a placeholder stands in)", where, i, type,
                     in_list(MEDIA_PARTS, type) ? "this model reads text only" : "not a type this server reads"))
        return -1;
    strbuf_puts(out, "[");
    strbuf_puts(out, type);
    strbuf_puts(out, "]");
    return 0;
}

char *prompt_content_text(const json_t *content, const char *where, req_ignored *ig, char *why, size_t cap) {
    if (!content || json_is_null(content)) return xstrdup("");
    if (json_is_string(content)) return xstrdup(json_string_value(content));
    if (json_is_object(content)) content = json_pack("[O]", content); /* one part alone */
    else if (json_is_array(content)) json_incref((json_t *)content);
    else {
        snprintf(why, cap, "%s must be a string or an array of content parts", where);
        return NULL;
    }
    strbuf out = {0};
    size_t i;
    const json_t *part;
    int rc = 0;
    json_array_foreach(content, i, part) {
        if ((rc = prompt_part_text(part, where, i, ig, &out, why, cap))) break;
    }
    json_decref((json_t *)content);
    if (rc) {
        strbuf_free(&out);
        return NULL;
    }
    return strbuf_take(&out);
}

/* The declared tool named name, or NULL. */
static const json_t *declared_tool(const json_t *tools, const char *name) {
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t)
        if (!strcmp(json_string_value(json_object_get(json_object_get(t, "function"), "name")) ?: "", name)) return t;
    return NULL;
}

int prompt_tool_known(const json_t *tools, const char *name) { return declared_tool(tools, name) != NULL; }

int prompt_allowed_tools(const json_t *tools, const json_t *at, json_t **allowed, int *required, char *why,
                         size_t cap) {
    const char *mode = json_string_value(json_object_get(at, "mode"));
    const json_t *list = json_object_get(at, "tools"), *t;
    *allowed = NULL;
    if (!mode || (strcmp(mode, "auto") && strcmp(mode, "required")) || !json_is_array(list)) {
        snprintf(why, cap, "'tool_choice' allowed_tools must have mode auto or required and a 'tools' array");
        return -1;
    }
    json_t *out = json_array();
    size_t i;
    json_array_foreach(list, i, t) {
        const char *name = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
        const json_t *d = declared_tool(tools, name ? name : json_string_value(json_object_get(t, "name")) ?: "");
        if (!d) {
            snprintf(why, cap, "'tool_choice' allowed_tools.tools[%zu] must name a function in 'tools'", i);
            json_decref(out);
            return -1;
        }
        json_array_append(out, (json_t *)d);
    }
    if (json_array_size(out)) *allowed = out;
    else json_decref(out);
    *required = !strcmp(mode, "required") && *allowed;
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

/* One rendering (exact replay: replay_render) and tokenization of the
 * conversation, strftime_now formatting now (0: the clock). */
static int render_at(const server *s, const cache_hash *ns, const json_t *messages, const render_tools *t,
                     long long now, render_out *out, render_tokens *rt, char *why, size_t cap) {
    render_tools at = t ? *t : (render_tools){0};
    strata_err err = {0};
    at.now = now;
    if (replay_render(s->replay, ns, s->render, messages, &at, 1, out, why, cap)) return -1;
    if (render_tokenize(s->render, out, rt, &err)) {
        render_out_free(out);
        strata_fmt(why, cap, "%s", err.msg);
        return -1;
    }
    return 0;
}

/* How much of ids the cache holds, as far as a request thread can tell
 * without the scheduler: the prefix shared with a recent prompt of the
 * namespace (diag.c; memory), or the disk tier's run of whole blocks
 * (after a restart too); once past `enough` the disk is not asked
 * further (every request of a conversation asks whether it is cached
 * through its date: a few blocks, not its whole prompt). It only picks a
 * rendering; the scheduler's lookup decides what is reused. */
static int cached_prefix(const server *s, const cache_hash *ns, const int32_t *ids, int n, int enough) {
    int best = diag_shared(s->diag, ns, ids, n), B = s->e->kv.block_tokens, k = 0;
    cache_hash h = *ns, next;
    for (; s->disk && best < enough && k * B < enough && (k + 1) * B <= n; k++, h = next) {
        cache_hash_block(&next, &h, ids + k * B, B);
        if (!disk_has(s->disk, &next)) break;
    }
    return k * B > best ? k * B : best;
}

/* The text strftime_now wrote into a rendering (len bytes), malloc'd. */
static char *date_text(const render_out *o, size_t *len) {
    char *text = render_out_span(o, (size_t)o->clock.off, o->clock.len);
    *len = strlen(text);
    return text;
}

/* The index of the first assistant message; -1 when there is none. */
static int first_reply(const json_t *messages) {
    size_t i;
    const json_t *m;
    json_array_foreach(messages, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        if (role && !strcmp(role, "assistant")) return (int)i;
    }
    return -1;
}

/* Whether rendering r, of which got tokens are cached, is the one this
 * conversation's earlier turn was served from: cached past its date and
 * through the messages before the first reply (that turn's prompt). Not
 * merely the template's own text after the date, which every
 * conversation of that day shares: a new conversation gets today's date. */
static int served_before(const render_tokens *r, int got, int reply) {
    return r->date_end >= 0 && got >= r->date_end && (size_t)reply <= r->n_msgs && r->msg_bounds[reply] > 0 &&
           got >= r->msg_bounds[reply];
}

/* A template that writes today's date renders a conversation begun on
 * another day differently from there on. Today's date is remembered;
 * when a conversation with a reply in it is cached less than through
 * today's date, the remembered dates are tried, and a rendering its
 * earlier turn was served from (served_before) and cached further than
 * today's replaces *rt (its date in ci->template_date): the conversation
 * keeps the date it began with. */
static void keep_date(const server *s, const cache_hash *ns, const json_t *messages, const render_tools *t,
                      const render_out *out, render_tokens *rt, prompt_cache_info *ci) {
    if (!s->dates || !out->clock.used || rt->date_end < 0) return;
    size_t len;
    char *today = date_text(out, &len);
    dates_note(s->dates, out->clock.used, today, len);
    int reply = first_reply(messages), best = reply > 0 ? cached_prefix(s, ns, rt->ids, (int)rt->n, rt->date_end) : 0;
    long long times[DATES_KEEP];
    int n = reply > 0 && best < rt->date_end ? dates_others(s->dates, today, len, times, DATES_KEEP) : 0;
    free(today);
    for (int i = 0; i < n; i++) {
        render_out o;
        render_tokens r;
        char why[256];
        if (render_at(s, ns, messages, t, times[i], &o, &r, why, sizeof why)) continue;
        int got = cached_prefix(s, ns, r.ids, (int)r.n, (int)r.n);
        if (got > best && served_before(&r, got, reply)) {
            best = got;
            render_tokens_free(rt);
            *rt = r;
            char *d = date_text(&o, &len);
            if (ci) snprintf(ci->template_date, sizeof ci->template_date, "%s", d);
            free(d);
        } else {
            render_tokens_free(&r);
        }
        render_out_free(&o);
    }
}

int prompt_tokens(const server *s, const cache_hash *replay_ns, const json_t *messages, const render_tools *t,
                  int32_t **ids, size_t *n, prompt_cache_info *ci, char *why, size_t cap) {
    render_out out;
    render_tokens rt;
    if (render_at(s, replay_ns, messages, t, 0, &out, &rt, why, cap)) return -1;
    if (ci) ci->template_date[0] = 0;
    keep_date(s, replay_ns, messages, t, &out, &rt, ci);
    render_out_free(&out);
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
