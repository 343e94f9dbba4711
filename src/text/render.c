/* render.c - the chat renderer (render.h): picks the template or a
 * built-in format, probes what the template does, renders conversations
 * (with the generic tool format where the template has no tool syntax)
 * and finds where each message ends in the one rendering. */
#include "text/render.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/mem.h"
#include "base/strbuf.h"
#include "model/gguf.h"
#include "text/tmpl.h"
#include "text/jsonload.h"

enum { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT, ROLE_TOOL, N_ROLES };

/* Content no template changes and no conversation is likely to hold:
 * finding it in a probe render shows where a message's content sits. */
#define PROBE "StrataProbe7q"

struct renderer {
    const tokenizer *tok;
    chat_format fmt;  /* built-in format, used when tpl is NULL */
    struct tmpl *tpl; /* the chat template, or NULL */
    char *src;
    const char *source;
    int native_tools; /* the template renders tools itself */
    char bos[128], eos[128];
    /* Learned by probe renders: the text a message of each role ends with
     * (when it is the last one), and the text before a user message's
     * content after an earlier turn. NULL: unknown. */
    char *trailer[N_ROLES];
    char *user_header;
    /* Learned by probe renders too: the format refuses or drops a second
     * system message or one after a user turn, so every conversation's
     * system messages are folded (fold_system), the same way each time. */
    int fold_system;
};

/* ---- choosing the format ------------------------------------------------------ */

static int template_mentions(const gguf_file *f, const char *needle) {
    gguf_str tpl;
    if (!f || !gguf_find(f, "tokenizer.chat_template") || gguf_get_str(f, "tokenizer.chat_template", &tpl, NULL))
        return 0;
    return memmem(tpl.ptr, (size_t)tpl.len, needle, strlen(needle)) != NULL;
}

/* The built-in format closest to the model's own. */
static chat_format builtin_format(const gguf_file *f, const tokenizer *t) {
    if (template_mentions(f, "<|start_header_id|>")) return CHAT_LLAMA3;
    if (template_mentions(f, "<|im_start|>")) return CHAT_CHATML;
    if (template_mentions(f, "<start_of_turn>")) return CHAT_GEMMA;
    if (tok_find(t, "<|start_header_id|>") >= 0) return CHAT_LLAMA3;
    if (tok_find(t, "<start_of_turn>") >= 0) return CHAT_GEMMA;
    return CHAT_CHATML;
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *src = xmalloc((size_t)(n > 0 ? n : 0) + 1);
    size_t got = n > 0 ? fread(src, 1, (size_t)n, f) : 0;
    src[got] = 0;
    fclose(f);
    return src;
}

/* The template's text: given, from --chat-template-file, or the model's. */
static int load_source(renderer *r, const gguf_file *f, const render_opts *o, strata_err *err) {
    gguf_str t;
    if (o->template_src) {
        r->src = xstrdup(o->template_src), r->source = "file";
    } else if (o->template_file) {
        if (!(r->src = read_file(o->template_file)))
            return strata_errf(err, STRATA_EIO, "--chat-template-file %s: cannot open", o->template_file);
        r->source = "file";
    } else if (f && gguf_find(f, "tokenizer.chat_template") && !gguf_get_str(f, "tokenizer.chat_template", &t, NULL)) {
        r->src = gguf_str_dup(t), r->source = "model";
    }
    return 0;
}

/* A given template must parse (a clear start-up error otherwise); the
 * model's own falls back to the built-in format with a warning. */
static int parse_template(renderer *r, const render_opts *o, strata_err *err) {
    strata_err terr = {0};
    if (!r->src || !tmpl_parse(&r->tpl, r->src, strlen(r->src), &terr)) return 0;
    if (o->template_file || o->template_src)
        return strata_errf(err, STRATA_EUNSUPPORTED, "--chat-template-file %s: %s",
                           o->template_file ? o->template_file : "(text)", terr.msg);
    log_warn("chat template: cannot run the model's template (%s); using the built-in %s format", terr.msg,
             chat_format_name(r->fmt));
    free(r->src);
    r->src = NULL;
    r->tpl = NULL;
    return 0;
}

static void token_text(const tokenizer *t, int32_t id, char *out, size_t cap) {
    if (id >= 0) out[tok_piece(t, id, 1, out, cap - 1) & 127] = 0;
}

/* ---- rendering -------------------------------------------------------------------- */

/* An assistant turn as the generic tool format has the model write it:
 * {"tool_calls": [{"name", "arguments"}]} when it called tools, else its
 * text. */
static char *calls_json_text(json_t *list) {
    json_t *obj = json_pack("{s:o}", "tool_calls", list);
    char *js = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    return js ? js : xstrdup("");
}

/* Arguments with their object keys sorted (a new reference): a client
 * may send a call back with its keys reordered (the Agents SDK dumps a
 * local_shell action in its model's field order), and the same call must
 * render, and replay, the same. */
static json_t *sorted_args(const json_t *a) {
    if (!json_is_object(a)) return json_incref((json_t *)a);
    char *js = json_dumps(a, JSON_COMPACT | JSON_SORT_KEYS);
    json_t *out = js ? json_loads(js, 0, NULL) : NULL; /* objects keep insertion order */
    free(js);
    return out ? out : json_incref((json_t *)a);
}

static char *assistant_text(const json_t *m) {
    const char *content = json_string_value(json_object_get(m, "content"));
    const json_t *calls = json_object_get(m, "tool_calls"), *call;
    if (!json_array_size(calls)) return xstrdup(content ? content : "");
    json_t *list = json_array();
    size_t i;
    json_array_foreach(calls, i, call) {
        const json_t *fn = json_object_get(call, "function");
        json_array_append_new(list, json_pack("{s:O,s:o}", "name", json_object_get(fn, "name"), "arguments",
                                              sorted_args(json_object_get(fn, "arguments"))));
    }
    return calls_json_text(list);
}

char *render_generic_calls_text(const char *const *names, const char *const *args, int n) {
    json_t *list = json_array();
    for (int i = 0; i < n; i++) { /* arguments as the client will send them back: parsed, then dumped */
        json_t *a = json_load_lenient(args[i], strlen(args[i]), 0, NULL, NULL);
        json_t *sorted = a ? sorted_args(a) : json_string(args[i]);
        json_decref(a);
        json_array_append_new(list, json_pack("{s:s,s:o}", "name", names[i], "arguments", sorted));
    }
    return calls_json_text(list);
}

/* The model's own template: text from its literals may hold special
 * tokens, text from the conversation may not. */
static int render_template(const renderer *r, const json_t *messages, const json_t *extra, int add_gen,
                           render_out *out, char *why, size_t cap) {
    json_t *ctx = json_pack("{s:O,s:b,s:s,s:s}", "messages", messages, "add_generation_prompt", add_gen,
                            "bos_token", r->bos, "eos_token", r->eos);
    if (extra) json_object_update_missing(ctx, (json_t *)extra); /* never over the four above */
    char *text;
    size_t len, n_spans;
    tmpl_span *spans;
    strata_err err = {0};
    int rc = tmpl_render_at(r->tpl, ctx, &out->clock, &text, &len, &spans, &n_spans, &err);
    json_decref(ctx);
    if (rc) {
        strata_fmt(why, cap, "chat template: %s", err.msg);
        return -1;
    }
    for (size_t i = 0; i < n_spans; i++)
        chat_prompt_add(&out->p, text + spans[i].off, spans[i].len, spans[i].literal);
    free(text);
    free(spans);
    return 0;
}

static void render_builtin(const renderer *r, const json_t *messages, int add_gen, chat_prompt *out) {
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
    chat_render_builtin(r->fmt, cm, (int)n, add_gen, out);
    for (i = 0; i < n; i++) free(texts[i]);
    free(texts);
    free(cm);
}

static int render_plain(const renderer *r, const json_t *msgs, const json_t *extra, int add_gen, render_out *out,
                        char *why, size_t cap) {
    if (!r->tpl) {
        render_builtin(r, msgs, add_gen, &out->p);
        return 0;
    }
    return render_template(r, msgs, extra, add_gen, out, why, cap);
}

/* ---- finding message ends ------------------------------------------------------- */

static int role_index(const char *role) {
    static const char *const NAMES[N_ROLES] = {"system", "user", "assistant", "tool"};
    for (int i = 0; role && i < N_ROLES; i++)
        if (!strcmp(role, NAMES[i])) return i;
    return -1;
}

/* A segment of conversation text that is exactly the content (or the
 * content trimmed, as some templates print it), at or after *seg (*off
 * is that segment's text offset). On success both point past it and
 * *start is where it began; else they are left alone. */
static int find_content(const chat_prompt *p, int *seg, long *off, const char *content, long *start) {
    size_t len = strlen(content), lead = strspn(content, " \t\r\n"), tlen = len - lead;
    while (tlen > 0 && strchr(" \t\r\n", content[lead + tlen - 1])) tlen--;
    long o = *off;
    for (int i = *seg; i < p->n && tlen > 0; o += (long)p->segs[i].len, i++) {
        const chat_seg *g = &p->segs[i];
        if (g->special) continue;
        int whole = g->len == len && !memcmp(g->text, content, len);
        if (!whole && !(g->len == tlen && !memcmp(g->text, content + lead, tlen))) continue;
        *start = o, *seg = i + 1, *off = o + (long)g->len;
        return 0;
    }
    return -1;
}

static long common_prefix(const char *a, const char *b) {
    long n = 0;
    while (a[n] && a[n] == b[n]) n++;
    return n;
}

/* Where a message whose content ends at `end` ends: after its role's
 * trailer, the first one before the next message's content at `limit`
 * (a template may print more after the content, e.g. the tools after a
 * system prompt); else as much of the trailer as follows the content
 * (what rendering only the messages so far would share with this). */
static long message_end(const char *trailer, const char *text, long end, long limit) {
    size_t tl = strlen(trailer);
    const char *hit = tl ? memmem(text + end, (size_t)(limit - end), trailer, tl) : NULL;
    return hit ? (long)(hit - text) + (long)tl : end + common_prefix(trailer, text + end);
}

/* Where the first k messages end, k = 0..n: after each message's content
 * and its role's trailer (message_end). The start (k = 0) is found from
 * the user header, when known. */
static long *message_ends(const renderer *r, const chat_prompt *p, const char *text, size_t len, const json_t *msgs) {
    size_t n = json_array_size(msgs), hl = r->user_header ? strlen(r->user_header) : 0;
    long *ends = xmalloc((n + 1) * sizeof(long)), *starts = xmalloc((n + 1) * sizeof(long)), off = 0;
    int *roles = xmalloc((n + 1) * sizeof(int)), seg = 0;
    for (size_t i = 0; i <= n; i++) ends[i] = starts[i] = -1;
    for (size_t i = 0; i < n; i++) { /* contents first: each bounds the search for the one before */
        const json_t *m = json_array_get(msgs, i);
        const char *content = json_string_value(json_object_get(m, "content"));
        roles[i] = role_index(json_string_value(json_object_get(m, "role")));
        if (content && roles[i] >= 0 && !find_content(p, &seg, &off, content, &starts[i])) ends[i + 1] = off;
    }
    for (size_t i = 0; i < n; i++) {
        long limit = (long)len;
        for (size_t j = i + 1; j < n && limit == (long)len; j++)
            if (starts[j] >= 0) limit = starts[j];
        if (ends[i + 1] >= 0 && r->trailer[roles[i]]) ends[i + 1] = message_end(r->trailer[roles[i]], text, ends[i + 1], limit);
        else ends[i + 1] = -1;
    }
    if (n && roles[0] == ROLE_USER && hl && starts[0] >= (long)hl && !memcmp(text + starts[0] - hl, r->user_header, hl))
        ends[0] = starts[0] - (long)hl;
    free(starts), free(roles);
    return ends;
}

char *render_out_text(const render_out *o, size_t *len) {
    size_t n = 0;
    for (int i = 0; i < o->p.n; i++) n += o->p.segs[i].len;
    char *text = xmalloc(n + 1);
    n = 0;
    for (int i = 0; i < o->p.n; i++) {
        memcpy(text + n, o->p.segs[i].text, o->p.segs[i].len);
        n += o->p.segs[i].len;
    }
    text[n] = 0;
    if (len) *len = n;
    return text;
}

char *render_out_span(const render_out *o, size_t off, size_t len) {
    char *out = xmalloc(len + 1);
    size_t at = 0, got = 0;
    for (int i = 0; i < o->p.n && got < len; i++) {
        const chat_seg *s = &o->p.segs[i];
        if (off + got < at + s->len) { /* the next byte wanted is in this segment */
            size_t from = off + got - at, k = s->len - from < len - got ? s->len - from : len - got;
            memcpy(out + got, s->text + from, k);
            got += k;
        }
        at += s->len;
    }
    out[got] = 0;
    return out;
}

/* ---- probes ----------------------------------------------------------------------------- */

/* Renders a probe conversation (JSON text) without the open turn; its
 * text and the probe content's end offset, or NULL. */
static char *probe_render(const renderer *r, const char *conv, long *probe_start, long *probe_end) {
    json_t *msgs = json_loads(conv, 0, NULL);
    render_out o = {0};
    char why[256], *text = NULL;
    int seg = 0;
    long off = 0;
    if (msgs && !render_plain(r, msgs, NULL, 0, &o, why, sizeof why) &&
        !find_content(&o.p, &seg, &off, PROBE, probe_start)) {
        text = render_out_text(&o, NULL);
        *probe_end = off;
    }
    chat_prompt_free(&o.p);
    json_decref(msgs);
    return text;
}

static char *probe_trailer(const renderer *r, const char *conv) {
    long start, end;
    char *text = probe_render(r, conv, &start, &end), *out = text ? xstrdup(text + end) : NULL;
    free(text);
    return out;
}

/* What a user turn after an assistant turn starts with, up to its content. */
static char *probe_user_header(const renderer *r) {
    long start, end;
    const char *asst = r->trailer[ROLE_ASSISTANT];
    char *text = probe_render(r, "[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":\"Hello\"},"
                                 "{\"role\":\"user\",\"content\":\"" PROBE "\"}]", &start, &end);
    char *hello = text ? strstr(text, "Hello") : NULL, *out = NULL;
    if (hello && asst && !strncmp(hello + 5, asst, strlen(asst)) && hello + 5 + strlen(asst) <= text + start) {
        const char *from = hello + 5 + strlen(asst);
        out = xmalloc((size_t)(text + start - from) + 1);
        memcpy(out, from, (size_t)(text + start - from));
        out[text + start - from] = 0;
    }
    free(text);
    return out;
}

static void probe_message_ends(renderer *r) {
    r->trailer[ROLE_SYSTEM] = probe_trailer(r, "[{\"role\":\"system\",\"content\":\"" PROBE "\"}]");
    r->trailer[ROLE_USER] = probe_trailer(r, "[{\"role\":\"user\",\"content\":\"" PROBE "\"}]");
    r->trailer[ROLE_ASSISTANT] = probe_trailer(
        r, "[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":\"" PROBE "\"}]");
    r->trailer[ROLE_TOOL] = probe_trailer(
        r, "[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":"
           "\"call_0\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":{}}}]},"
           "{\"role\":\"tool\",\"tool_call_id\":\"call_0\",\"content\":\"" PROBE "\"}]");
    r->user_header = probe_user_header(r);
}

/* The template renders tools itself when a probe tool's name shows up in
 * its output (a template may mention tools without rendering them). */
static int probe_native_tools(const renderer *r) {
    json_t *msgs = json_loads("[{\"role\":\"user\",\"content\":\"Hi\"}]", 0, NULL);
    json_t *tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"" PROBE "_tool\",\"description\":"
                               "\"d\",\"parameters\":{\"type\":\"object\",\"properties\":{}}}}]", 0, NULL);
    render_out o = {0};
    char why[256];
    int yes = 0;
    json_t *extra = json_pack("{s:O}", "tools", tools);
    if (!render_template(r, msgs, extra, 1, &o, why, sizeof why)) {
        char *text = render_out_text(&o, NULL);
        yes = strstr(text, PROBE "_tool") != NULL;
        free(text);
    }
    chat_prompt_free(&o.p);
    json_decref(msgs), json_decref(tools), json_decref(extra);
    return yes;
}

static int system_text_kept(const render_out *o, const json_t *msgs);

/* Whether the format loses (refuses, or drops the text of) a second
 * system message or one after a user turn. */
static int probe_fold_system(const renderer *r) {
    static const char *const CONVS[] = {
        "[{\"role\":\"system\",\"content\":\"" PROBE "A\"},{\"role\":\"system\",\"content\":\"" PROBE "B\"},"
        "{\"role\":\"user\",\"content\":\"u\"}]",
        "[{\"role\":\"system\",\"content\":\"" PROBE "A\"},{\"role\":\"user\",\"content\":\"u\"},"
        "{\"role\":\"system\",\"content\":\"" PROBE "B\"},{\"role\":\"assistant\",\"content\":\"a\"},"
        "{\"role\":\"user\",\"content\":\"v\"}]"};
    int lost = 0;
    for (size_t i = 0; i < sizeof CONVS / sizeof CONVS[0] && !lost; i++) {
        json_t *msgs = json_loads(CONVS[i], 0, NULL);
        render_out o = {0};
        char why[256];
        lost = render_plain(r, msgs, NULL, 1, &o, why, sizeof why) || !system_text_kept(&o, msgs);
        chat_prompt_free(&o.p);
        json_decref(msgs);
    }
    return lost;
}

int render_new(renderer **out, const gguf_file *f, const tokenizer *tok, const render_opts *o, strata_err *err) {
    static const render_opts none = {0};
    renderer *r = xcalloc(1, sizeof *r);
    r->tok = tok;
    r->fmt = builtin_format(f, tok);
    r->source = "built-in";
    token_text(tok, tok_bos(tok), r->bos, sizeof r->bos);
    token_text(tok, tok_eos(tok), r->eos, sizeof r->eos);
    int rc = load_source(r, f, o ? o : &none, err);
    if (!rc) rc = parse_template(r, o ? o : &none, err);
    if (rc) {
        render_free(r);
        *out = NULL;
        return rc;
    }
    if (!r->tpl) r->source = "built-in";
    r->native_tools = r->tpl && probe_native_tools(r);
    probe_message_ends(r);
    r->fold_system = probe_fold_system(r);
    *out = r;
    return 0;
}

void render_free(renderer *r) {
    if (!r) return;
    tmpl_free(r->tpl);
    free(r->src);
    for (int i = 0; i < N_ROLES; i++) free(r->trailer[i]);
    free(r->user_header);
    free(r);
}

const char *render_template_src(const renderer *r) { return r->tpl ? r->src : NULL; }
const char *render_source_name(const renderer *r) { return r->source; }
const char *render_format_name(const renderer *r) {
    if (!r->tpl) return chat_format_name(r->fmt);
    return strcmp(r->source, "file") ? "model's own" : "--chat-template-file";
}
int render_native_tools(const renderer *r) { return r->native_tools; }
int render_harmony(const renderer *r) { return r->tpl && tc_detect(r->src) == TC_HARMONY; }

/* ---- tools -------------------------------------------------------------------------- */

tc_format render_tool_format(const renderer *r, const render_tools *t) {
    if (!t || !t->tools || !json_array_size(t->tools)) return TC_NONE;
    if (r->tpl && r->native_tools) return tc_detect(r->src); /* the template renders tools itself */
    return TC_GENERIC;
}

/* Harmony's forced opening: a commentary message to the functions
 * namespace, through the tool's name and into the arguments when named. */
static char *harmony_prefix(const char *forced) {
    static const char head[] = "<|channel|>commentary to=functions.";
    if (!forced) return xstrdup(head);
    char *out = xmalloc(sizeof head + strlen(forced) + 64);
    sprintf(out, "%s%s <|constrain|>json<|message|>", head, forced);
    return out;
}

/* A native format's forced opening: marker, then the call object. */
static char *native_prefix(tc_format f, const char *forced) {
    if (f == TC_HARMONY) return harmony_prefix(forced);
    const char *open = f == TC_HERMES ? "<tool_call>\n" : f == TC_MISTRAL ? "[TOOL_CALLS][" : "";
    if (!forced) {
        char *out = xmalloc(strlen(open) + 16);
        sprintf(out, "%s{\"name\": \"", open);
        return out;
    }
    json_t *name = json_string(forced);
    char *quoted = json_dumps(name, JSON_ENCODE_ANY);
    json_decref(name);
    char *out = xmalloc(strlen(open) + strlen(quoted) + 64);
    sprintf(out, "%s{\"name\": %s, \"%s\": ", open, quoted, f == TC_LLAMA3 ? "parameters" : "arguments");
    free(quoted);
    return out;
}

char *render_tool_prefix(const renderer *r, const render_tools *t) {
    tc_format f = render_tool_format(r, t);
    if (f == TC_NONE || !t->required) return NULL;
    if (f != TC_GENERIC) return native_prefix(f, t->forced);
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
static json_t *generic_messages(const json_t *messages, const render_tools *t) {
    json_t *out = json_array();
    char *tools = tc_generic_system_prompt(t->shown ? t->shown : t->tools, t->forced, t->required);
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

/* ---- system messages the template cannot place ---------------------------------------- */

static int is_role(const json_t *m, const char *role) {
    const char *r = json_string_value(json_object_get(m, "role"));
    return r && !strcmp(r, role);
}

static int has_system(const json_t *msgs) {
    size_t i;
    const json_t *m;
    json_array_foreach(msgs, i, m)
        if (is_role(m, "system")) return 1;
    return 0;
}

/* Every system message's text is in the rendered prompt. */
static int system_text_kept(const render_out *o, const json_t *msgs) {
    size_t len, i;
    char *text = render_out_text(o, &len);
    const json_t *m;
    int kept = 1;
    json_array_foreach(msgs, i, m) {
        const char *c = json_string_value(json_object_get(m, "content"));
        if (!is_role(m, "system") || !c) continue;
        size_t lead = strspn(c, " \t\r\n"), n = strlen(c + lead);
        while (n && strchr(" \t\r\n", c[lead + n - 1])) n--;
        if (n && !memmem(text, len, c + lead, n)) kept = 0;
    }
    free(text);
    return kept;
}

static void join_content(json_t *m, const char *before, const char *after) {
    size_t n = strlen(before) + strlen(after) + 3;
    char *joined = xmalloc(n);
    snprintf(joined, n, "%s\n\n%s", before, after);
    json_object_set_new(m, "content", json_string(joined));
    free(joined);
}

static const char *content_of(const json_t *m) { return json_string_value(json_object_get(m, "content")) ?: ""; }

static int next_is_user(const json_t *msgs, size_t i) { /* the first message after i that is not a system one */
    while (++i < json_array_size(msgs))
        if (!is_role(json_array_get(msgs, i), "system")) return is_role(json_array_get(msgs, i), "user");
    return 0;
}

/* The conversation with every system message folded into a turn the
 * template takes: the leading ones joined into one (a user turn if no
 * user turn follows them); a later one appended to the user turn just
 * before it, else put before the next user turn if only system messages
 * stand between, else a user turn of its own. `all`: the leading ones
 * fold like later ones (for a template that prints the system prompt
 * only in some turns, as Mistral's does in the last user turn). Folding
 * looks only at a message's neighbours, so a conversation that grows at
 * its end keeps its folded prefix (the cache keeps hitting). owner[i]:
 * the folded message that holds message i. */
static json_t *fold_system(const json_t *msgs, int all, int *owner) {
    json_t *out = json_array();
    size_t i, run = 0;
    while (!all && run < json_array_size(msgs) && is_role(json_array_get(msgs, run), "system")) run++;
    const json_t *m;
    strbuf pending = {0}; /* system text waiting for the next user turn */
    json_array_foreach(msgs, i, m) {
        json_t *last = json_array_size(out) ? json_array_get(out, json_array_size(out) - 1) : NULL;
        int sys = is_role(m, "system");
        if (sys && i < run && last) { /* the leading run */
            join_content(last, content_of(last), content_of(m));
        } else if (sys && i >= run && last && is_role(last, "user") && !pending.s) {
            join_content(last, content_of(last), content_of(m));
        } else if (sys && i >= run && next_is_user(msgs, i)) {
            if (pending.s) strbuf_puts(&pending, "\n\n");
            strbuf_puts(&pending, content_of(m));
            owner[i] = (int)json_array_size(out); /* the next user turn */
            continue;
        } else {
            json_t *copy = json_deep_copy(m);
            if (sys && (i >= run || !next_is_user(msgs, i))) json_object_set_new(copy, "role", json_string("user"));
            if (pending.s) join_content(copy, pending.s, content_of(copy));
            strbuf_free(&pending);
            json_array_append_new(out, copy);
        }
        owner[i] = (int)json_array_size(out) - 1;
    }
    strbuf_free(&pending);
    return out;
}

/* ---- the public render ---------------------------------------------------------------- */

/* Message ends of what was rendered (msgs), as ends of the caller's n_in
 * messages: the generic format may have put a system message first
 * (shift 1), whose end is then where the caller's conversation starts;
 * with folding (owner, else NULL), a message ends where the folded
 * message holding it ends if it is the last one there, else it has no
 * end of its own (-1). */
static void set_message_ends(const renderer *r, render_out *out, const json_t *rendered, const int *owner,
                             size_t n_msgs, size_t n_in) {
    size_t shift = n_msgs - n_in;
    size_t len;
    char *text = render_out_text(out, &len);
    long *all = message_ends(r, &out->p, text, len, rendered);
    out->n_msgs = n_in;
    out->msg_ends = xmalloc((n_in + 1) * sizeof(long));
    for (size_t k = 0; k <= n_in; k++) {
        size_t i = k + shift; /* ends of the first i messages of msgs */
        if (!owner || i == 0) out->msg_ends[k] = all[owner && i == 0 ? 0 : i];
        else out->msg_ends[k] = i < n_msgs && owner[i] == owner[i - 1] ? -1 : all[owner[i - 1] + 1];
    }
    free(all);
    free(text);
}

static int render_folded(const renderer *r, const json_t *msgs, int all, const json_t *extra, int add_gen,
                         render_out *out, size_t n_in, char *why, size_t cap) {
    size_t n = json_array_size(msgs);
    int *owner = xmalloc((n + 1) * sizeof(int));
    json_t *folded = fold_system(msgs, all, owner);
    int rc = render_plain(r, folded, extra, add_gen, out, why, cap);
    if (!rc) set_message_ends(r, out, folded, owner, n, n_in);
    json_decref(folded);
    free(owner);
    return rc;
}

/* Renders msgs with system messages folded (fold_system) where the
 * format needs it (r->fold_system, decided once by probes, so a growing
 * conversation folds the same way every turn), else as they are; if a
 * system message's text is still missing (a template that prints the
 * system prompt only in some turns), all of them folded. */
static int render_placed(const renderer *r, const json_t *msgs, const json_t *extra, int add_gen, render_out *out,
                         size_t n_in, char *why, size_t cap) {
    int fold = has_system(msgs), rc;
    if (fold && r->fold_system) rc = render_folded(r, msgs, 0, extra, add_gen, out, n_in, why, cap);
    else if (!(rc = render_plain(r, msgs, extra, add_gen, out, why, cap)))
        set_message_ends(r, out, msgs, NULL, json_array_size(msgs), n_in);
    if (fold && !rc && !system_text_kept(out, msgs)) {
        long long now = out->clock.now;
        render_out_free(out);
        out->clock.now = now;
        rc = render_folded(r, msgs, 1, extra, add_gen, out, n_in, why, cap);
    }
    return rc;
}

/* The gpt-oss template writes "// " + description for every tool, which
 * fails on a tool without one (the APIs make it optional): those get "". */
static json_t *described_tools(const json_t *tools) {
    json_t *out = json_deep_copy(tools), *t;
    size_t i;
    json_array_foreach(out, i, t) {
        json_t *fn = json_object_get(t, "function");
        if (json_is_object(fn) && !json_is_string(json_object_get(fn, "description")))
            json_object_set_new(fn, "description", json_string(""));
    }
    return out;
}

int render_messages(const renderer *r, const json_t *messages, const render_tools *t, int add_gen,
                    render_out *out, char *why, size_t cap) {
    tc_format f = render_tool_format(r, t);
    json_t *msgs = f == TC_GENERIC ? generic_messages(messages, t) : json_incref((json_t *)messages);
    const json_t *tools = f != TC_NONE && f != TC_GENERIC ? (t->shown ? t->shown : t->tools) : NULL;
    /* What the template sees besides the conversation: the tools (gpt-oss's
     * template needs every one described) and the request's variables. */
    json_t *extra = json_object();
    if (tools) json_object_set_new(extra, "tools", f == TC_HARMONY ? described_tools(tools) : json_incref((json_t *)tools));
    if (t && t->vars) json_object_update_missing(extra, (json_t *)t->vars);
    if (!tools) json_object_del(extra, "tools"); /* only the request's own tools, rendered its way */
    memset(out, 0, sizeof *out);
    out->clock.now = t ? t->now : 0;
    int rc = render_placed(r, msgs, extra, add_gen, out, json_array_size(messages), why, cap);
    json_decref(extra);
    json_decref(msgs);
    return rc;
}

void render_out_free(render_out *o) {
    chat_prompt_free(&o->p);
    free(o->msg_ends);
    memset(o, 0, sizeof *o);
}

/* The positions of the message ends and of the date's end, from one
 * tokenization: the text offsets of both go to chat_tokenize_at at once. */
int render_tokenize(const renderer *r, const render_out *o, render_tokens *out, strata_err *err) {
    memset(out, 0, sizeof *out);
    out->n_msgs = o->msg_ends ? o->n_msgs : 0;
    size_t n_offs = out->n_msgs + 2;
    long *offs = xmalloc(n_offs * sizeof(long));
    int *pos = xmalloc(n_offs * sizeof(int));
    for (size_t k = 0; k <= out->n_msgs; k++) offs[k] = o->msg_ends ? o->msg_ends[k] : -1;
    offs[n_offs - 1] = o->clock.used && o->clock.off >= 0 ? o->clock.off + (long)o->clock.len : -1;
    int rc = chat_tokenize_at(r->tok, &o->p, tok_add_bos(r->tok), &out->ids, &out->n, &out->bounds, &out->n_bounds,
                              offs, pos, n_offs, err);
    out->msg_bounds = xmalloc((out->n_msgs + 1) * sizeof(int));
    memcpy(out->msg_bounds, pos, (out->n_msgs + 1) * sizeof(int));
    out->date_end = rc ? -1 : pos[n_offs - 1];
    free(offs), free(pos);
    if (rc) render_tokens_free(out);
    return rc;
}

void render_tokens_free(render_tokens *t) {
    free(t->ids), free(t->bounds), free(t->msg_bounds);
    memset(t, 0, sizeof *t);
}
