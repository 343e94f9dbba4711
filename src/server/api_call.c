/* api_call.c - the request lifecycle both APIs share (see api_call.h). */
#include "server/api_call.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/strbuf.h"
#include "server/api_params.h"

api_call *api_call_of(api_stream *st) { return (api_call *)((char *)st - offsetof(api_call, st)); }

gen *api_call_gen(api_call *c, int k) { return k > 0 ? &c->more[k - 1].g : &c->g; }

int api_call_tokens(const api_call *c) {
    int n = c->g.n_tokens;
    for (int k = 1; c->more && k < c->n_choices; k++) n += c->more[k - 1].g.n_tokens;
    return n;
}

const char *api_call_choice_id(api_call *c, int k, int index, const char *prefix) {
    api_ids *ids = k > 0 ? &c->more[k - 1].ids : &c->ids;
    if (index < 0 || index >= API_MAX_CALLS) {
        snprintf(ids->overflow, sizeof ids->overflow, "%soverflow", prefix);
        return ids->overflow;
    }
    if (!ids->call[index][0]) make_id(ids->call[index], sizeof ids->call[index], prefix);
    return ids->call[index];
}

const char *api_call_id(api_call *c, int index, const char *prefix) { return api_call_choice_id(c, 0, index, prefix); }

static double per_s(double n, double ms) { return ms > 0 ? n * 1000.0 / ms : 0; }

/* One line per request: what it asked, what the cache gave, what it cost. */
static void log_request(const api_call *c) {
    const gen *g = &c->g;
    const sched_status *st = &g->st;
    if (!g->req) {
        log_info("request %s %s status=%d", c->method, c->path, c->status);
        return;
    }
    /* computed as last seen: a request whose client left mid-prefill stops short of its prompt */
    int prefilled = st->n_prompt_done > st->n_cached ? st->n_prompt_done - st->n_cached : 0;
    const char *finish = g->done ? gen_finish_word(g) : "cancelled"; /* the client left before the end */
    /* The scheduler's times, not when this thread read the tokens: a
     * reader that took a whole reply at once would see no decode time. */
    double first = st->n_generated ? st->t_first_out : 0, end = st->t_last_out;
    double prefill_ms = first ? first - g->t_start : 0;
    for (int k = 1; c->more && k < c->n_choices; k++) /* the last choice to end */
        end = c->more[k - 1].g.st.t_last_out > end ? c->more[k - 1].g.st.t_last_out : end;
    double decode_ms = first ? end - first : 0;
    int n = api_call_tokens(c), n_choices = c->more ? c->n_choices : 1; /* every choice's tokens, decoded together */
    char choices[24] = "";
    if (n_choices > 1) snprintf(choices, sizeof choices, " choices=%d", n_choices);
    log_info("request %s %s status=%d prompt=%d cached=%d live=%d disk=%d prefilled=%d generated=%d "
             "prefill_tok_s=%.1f decode_tok_s=%.1f finish=%s%s%s%s%s",
             c->method, c->path, c->status, st->n_prompt, st->n_cached, st->n_cached - st->n_cached_disk,
             st->n_cached_disk, prefilled, n, per_s(prefilled, prefill_ms),
             per_s(n > n_choices ? n - n_choices : 0, decode_ms), finish, choices, c->ignored.n ? " ignored=\"" : "",
             ignored_text(&c->ignored), c->ignored.n ? "\"" : "");
}

static void call_free(api_call *c) {
    log_request(c);
    gen_end(&c->g);
    for (int k = 1; c->more && k < c->n_choices; k++) gen_end(&c->more[k - 1].g); /* each cancelled, if running */
    free(c->more);
    free(c->prefix);
    free(c->msg_ends);
    json_decref(c->ui_prompt);
    json_decref(c->template_vars);
    free(c->prediction);
    json_schema_free(c->gp.schema);
    json_schema_free(c->gp.call_schema);
    if (c->d->free) c->d->free(c);
    json_decref(c->req);
    sse_free(&c->st.out);
    free(c);
}

static void stream_release(api_stream *st) { call_free(api_call_of(st)); }

static void answer_whole(api_stream *st, const http_req *req, http_reply *rep) {
    api_call *c = api_call_of(st);
    c->d->whole(c, req, rep);
    c->status = rep->status;
}

/* ---- the request's record for /ui (server/recent.h) ---- */

#define UI_MAX_MESSAGES 512 /* messages listed in a record: an agent's long history keeps its first ones */

/* n tokens as text, specials included (the rendered prompt), valid UTF-8. */
static json_t *tokens_text(const tokenizer *tok, const int32_t *ids, int n) {
    strbuf b = {0};
    for (int i = 0; i < n; i++) {
        char piece[256];
        int len = tok_piece(tok, ids[i], 1, piece, sizeof piece);
        if (len > 0) strbuf_add(&b, piece, len < (int)sizeof piece ? (size_t)len : sizeof piece);
    }
    json_t *j = json_text(b.s ? b.s : "", b.len);
    strbuf_free(&b);
    return j;
}

static const char *role_of(const json_t *messages, int k) {
    const char *r = k >= 0 ? json_string_value(json_object_get(json_array_get(messages, (size_t)k), "role")) : NULL;
    return r ? r : "?";
}

/* A conversation no client named is named by its first user message's
 * tokens (the anchor: it stays when the system prompt is edited). */
static void anchor_name(api_call *c, const json_t *messages, const int32_t *ids, int n) {
    for (int k = 0; k < c->n_msgs; k++) {
        int from = c->msg_ends[k], to = c->msg_ends[k + 1];
        if (strcmp(role_of(messages, k), "user") || from < 0 || to < from || to > n) continue;
        cache_hash h;
        char hex[65];
        cache_hash_block(&h, &c->replay_ns, ids + from, to - from);
        cache_hash_hex(&h, hex);
        snprintf(c->conv, sizeof c->conv, "anchor:%.12s", hex);
        snprintf(c->conv_from, sizeof c->conv_from, "anchor");
        return;
    }
}

/* What the page shows of the prompt: its messages (where each ends, its
 * role) and, when it left a recent prompt, where and the text there:
 * before the difference, what the earlier prompt had, what this one has. */
static void note_prompt(api_call *c, const json_t *messages, const int32_t *ids, int n) {
    json_t *msgs = json_array(), *o = json_object();
    for (int k = 0; k < c->n_msgs && k < UI_MAX_MESSAGES; k++)
        json_array_append_new(msgs, json_pack("{s:i,s:s}", "end", c->msg_ends[k + 1], "role", role_of(messages, k)));
    json_object_set_new(o, "messages", msgs);
    if (c->diag.diverged) {
        int fd = c->diag.first_diff, from = fd > DIAG_EXCERPT ? fd - DIAG_EXCERPT : 0;
        int k = diag_message_at(c->msg_ends, c->n_msgs, fd);
        json_object_set_new(o, "first_difference", json_pack("{s:i,s:i,s:s,s:i}", "token", fd, "message", k, "role",
                                                              role_of(messages, k), "tokens_lost", c->diag.lost));
        json_object_set_new(o, "excerpt", json_pack("{s:o,s:o,s:o}", "before", tokens_text(c->srv->tok, ids + from, fd - from),
                                                    "was", tokens_text(c->srv->tok, c->diag.was, c->diag.n_was), "now",
                                                    tokens_text(c->srv->tok, ids + fd, n - fd < DIAG_EXCERPT ? n - fd : DIAG_EXCERPT)));
    }
    json_decref(c->ui_prompt);
    c->ui_prompt = o;
    if (!c->conv[0]) anchor_name(c, messages, ids, n);
}

/* The conversation a client names: OpenAI's prompt_cache_key, a session
 * header (Codex sends session_id, Claude Code X-Claude-Code-Session-Id),
 * or Anthropic's metadata.user_id (Claude Code puts its session there). */
static void conversation_name(api_call *c, const http_req *req) {
    static const char *const headers[] = {"x-session-id", "session_id", "x-claude-code-session-id"};
    const char *key = json_string_value(json_object_get(c->req, "prompt_cache_key")), *from = "prompt_cache_key";
    for (size_t i = 0; !key && i < sizeof headers / sizeof headers[0]; i++) {
        key = http_header(req, headers[i]);
        from = "header";
    }
    if (!key) {
        key = json_string_value(json_object_get(json_object_get(c->req, "metadata"), "user_id"));
        from = "metadata";
    }
    if (!key || !key[0]) return;
    snprintf(c->conv, sizeof c->conv, "%s", key);
    snprintf(c->conv_from, sizeof c->conv_from, "%s", from);
}

/* Opens the record of the request's choice k in the server's ring (the
 * scheduler closes it; each choice has one, "choice": k when there are
 * several): who, which conversation, the prompt's facts. Its id, or 0. */
static long record_open(api_call *c, int k) {
    server *s = c->srv;
    char tenant[16] = "";
    if (!s->recent) return 0;
    if (c->gp.tenant) server_tenant_id(s, c->gp.tenant, tenant, sizeof tenant);
    json_t *rec = json_pack("{s:f,s:I,s:s,s:i,s:s,s:i}", "time", clock_wall_s(), "boot", (json_int_t)s->boot_id,
                            "api", c->path, "prompt_tokens", c->n_prompt, "finish", "running", "stream", c->stream);
    if (c->conv[0]) /* the client's bytes, cut to fit: made valid UTF-8 */
        json_object_set_new(rec, "conversation",
                            json_pack("{s:o,s:s}", "key", json_text(c->conv, strlen(c->conv)), "from", c->conv_from));
    if (c->ui_prompt) json_object_update(rec, c->ui_prompt);
    if (c->n_choices > 1) json_object_set_new(rec, "choice", json_integer(k));
    if (c->template_date[0]) json_object_set_new(rec, "template_date", json_string(c->template_date));
    return recent_open(s->recent, tenant[0] ? tenant : NULL, rec);
}

/* A record of a choice that never ran: the scheduler closes no record for it. */
static void record_refused(api_call *c, long id, const strata_err *err) {
    recent_close(c->srv->recent, id, json_pack("{s:s,s:s}", "finish", "refused", "error", err->msg), NULL);
}

int api_call_prompt(api_call *c, const json_t *messages, int32_t **ids, size_t *n, prompt_cache_info *ci, char *why,
                    size_t cap) {
    /* Replies are remembered per tenant and salt, like blocks: another
     * tenant cannot tell from its prompt's tokens what was generated here. */
    server_replay_ns(c->srv, c->gp.tenant, c->gp.cache_salt, &c->replay_ns);
    int rc = prompt_tokens(c->srv, &c->replay_ns, messages, &c->pt, ids, n, ci, why, cap);
    if (rc || !ci) return rc;
    snprintf(c->template_date, sizeof c->template_date, "%s", ci->template_date);
    replay_context_ns(&c->replay_ns, messages, json_array_size(messages), &c->gp.replay_ctx);
    c->gp.has_replay_ctx = 1;
    diag_observe(c->srv->diag, &c->replay_ns, *ids, (int)*n, &c->diag);
    free(c->msg_ends);
    c->msg_ends = xmalloc(((size_t)ci->n_msgs + 1) * sizeof(int));
    memcpy(c->msg_ends, ci->msg_ends ? ci->msg_ends : (int[]){-1}, ((size_t)(ci->msg_ends ? ci->n_msgs : 0) + 1) * sizeof(int));
    c->n_msgs = ci->msg_ends ? ci->n_msgs : 0;
    if (c->srv->recent) note_prompt(c, messages, *ids, (int)*n);
    return 0;
}

/* Keywords the guard treats as annotations (text/jsonschema.h): the reply
 * is held to the rest, and the request says so (or, strict, is refused). */
static int unenforced(api_call *c, const json_schema *s, const char *field, char *why, size_t cap) {
    const char *u = json_schema_unenforced(s);
    return u ? ignored_note(&c->ignored, why, cap, "%s: JSON Schema %s (not enforced)", field, u) : 0;
}

int api_call_schema(api_call *c, const json_t *schema, const char *field, char *why, size_t cap) {
    json_t *any = schema ? NULL : json_pack("{s:s}", "type", "object");
    char reason[400];
    c->gp.schema = json_schema_compile(schema ? schema : any, reason, sizeof reason);
    json_decref(any);
    if (!c->gp.schema) {
        snprintf(why, cap, "'%s': %s", field, reason);
        return -1;
    }
    c->gp.json_mode = 1;
    return unenforced(c, c->gp.schema, field, why, cap);
}

/* {"token": pos, "message": k} (message -1: not known). */
static json_t *position_json(const api_call *c, int pos) {
    return json_pack("{s:i,s:i}", "token", pos, "message", diag_message_at(c->msg_ends, c->n_msgs, pos));
}

json_t *api_call_cache_json(const api_call *c) {
    const sched_status *st = &c->g.st;
    json_t *o = json_pack("{s:i,s:i,s:i,s:o}", "live_tokens",
                          st->n_cached - st->n_cached_disk - st->n_cached_redis - st->n_cached_ram, "disk_tokens",
                          st->n_cached_disk, "redis_tokens", st->n_cached_redis, "prefix_end",
                          position_json(c, st->n_cached));
    if (c->more) { /* n > 1: each choice's prompt tokens from the cache (the later ones reuse the first's prompt) */
        json_t *per = json_array();
        for (int k = 0; k < c->n_choices; k++)
            json_array_append_new(per, json_integer(k ? c->more[k - 1].g.st.n_cached : st->n_cached));
        json_object_set_new(o, "choice_cached_tokens", per);
    }
    if (st->n_cached_ram > 0) json_object_set_new(o, "ram_tokens", json_integer(st->n_cached_ram)); /* a GPU's RAM tier */
    if (c->template_date[0]) /* the conversation kept the date it began with */
        json_object_set_new(o, "template_date", json_string(c->template_date));
    if (c->diag.diverged) {
        json_t *fd = position_json(c, c->diag.first_diff);
        json_object_set_new(fd, "tokens_lost", json_integer(c->diag.lost));
        json_object_set_new(o, "first_difference", fd);
    }
    return o;
}

/* Every API defines a tool's input as a JSON object (Anthropic's
 * input_schema, OpenAI's parameters: "type": "object"); a schema of another
 * type no call could meet, so it is the client's error (400) before
 * anything is generated, in every dialect alike. No schema, or one without
 * "type", takes any object. */
static int tool_inputs_are_objects(const json_t *tools, strata_err *err) {
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        const json_t *fn = json_object_get(t, "function"), *p = json_object_get(fn, "parameters");
        const json_t *type = json_object_get(p, "type");
        const char *tname = json_string_value(type);
        if (!p || json_is_null(p) || (json_is_object(p) && (!type || (tname && !strcmp(tname, "object")))))
            continue;
        const char *name = json_string_value(json_object_get(fn, "name"));
        return strata_errf(err, STRATA_EINVAL, "tools: the input schema of tool '%s' must be %s of type \"object\" "
                           "(a call's input is a JSON object)%s%s%s", name ? name : "?",
                           json_is_object(p) ? "a schema" : "a JSON object, a schema", tname ? ", not \"" : "",
                           tname ? tname : "", tname ? "\"" : "");
    }
    return 0;
}

/* The generic tool format's reply is one JSON object: held to the tools'
 * schemas (declared names, arguments that validate), under every
 * tool_choice. In a native format each call the model opens is held to
 * one call of a declared tool (text/callguard.h). A malformed tool schema
 * is the client's error (400); keywords the guard does not enforce are
 * named (x-strata-ignored), the rest still holds. */
static int tool_schema(api_call *c, strata_err *err) {
    if (c->pt.tools && tool_inputs_are_objects(c->pt.tools, err)) return err->code;
    if (c->gp.tools == TC_NONE || c->gp.schema) return 0;
    char why[512];
    json_schema **s = c->gp.tools != TC_GENERIC ? &c->gp.call_schema : &c->gp.schema;
    if (c->gp.tools != TC_GENERIC) /* native: each call, once opened (text/callguard.h) */
        *s = json_schema_tool_call(c->pt.tools, c->pt.forced, c->gp.tools == TC_LLAMA3 ? "parameters" : "arguments",
                                   why, sizeof why);
    else
        *s = json_schema_tools(c->pt.tools, c->pt.forced, c->pt.required, why, sizeof why);
    if (!*s) return strata_errf(err, STRATA_EINVAL, "tools: %s", why);
    return unenforced(c, *s, "tools", why, sizeof why) ? strata_errf(err, STRATA_EINVAL, "%s", why) : 0;
}

#define PREFILL_POLL_MS 200 /* how often a request waiting for its first choice's prompt checks for its client */

/* n > 1: the choices after the first are submitted once the first has
 * its prompt in and cached whole (its partial last block too:
 * sched_job.share_prompt), so each attaches all of the prompt but its
 * last token instead of prefilling it again (the prompt is prefilled
 * once; usage counts it once). They belong to an admitted request, so
 * they queue even beyond --queue (sched_job.later_choice), and run as
 * slots free: one after another when --parallel is smaller than n.
 * Choice k samples under sample_choice_seed(seed, k): choice 0 is the
 * n = 1 reply, and the same request gives the same choices. */
static int start_more(api_call *c, const http_req *req, const int32_t *ids, int n, strata_err *err) {
    while (!gen_wait_prefilled(&c->g, PREFILL_POLL_MS))
        if (http_client_gone(req)) return strata_errf(err, STRATA_EIO, "the client went away");
    c->more = xcalloc((size_t)c->n_choices - 1, sizeof *c->more);
    for (int k = 1; k < c->n_choices; k++) {
        gen_params p = c->gp;
        p.sampling.seed = sample_choice_seed(c->gp.sampling.seed, k);
        p.share_prompt = 0;
        p.later_choice = 1;
        p.recent_id = record_open(c, k);
        int rc = gen_start(&c->more[k - 1].g, c->srv->sch, c->srv->tok, ids, n, &p, err);
        if (rc) {
            record_refused(c, p.recent_id, err);
            return rc;
        }
    }
    return 0;
}

/* Submits the prompt and waits for a slot: 0, or a STRATA_E* in err. */
static int start(api_call *c, const http_req *req, int32_t **ids, size_t *n, const prompt_cache_info *ci,
                 strata_err *err) {
    server *s = c->srv;
    c->prefix = prompt_force_tool(s, &c->pt, &c->gp, ids, n);
    c->n_prompt = (int)*n;
    /* The operator's bound wins over the request's: agent CLIs ask for far
     * more (Claude Code 128000) or for nothing (Codex), which a small model
     * writing noise runs to the end of the context. */
    if (s->o.max_output > 0 && (c->gp.max_tokens <= 0 || c->gp.max_tokens > s->o.max_output))
        c->gp.max_tokens = s->o.max_output;
    c->gp.replay = s->replay;
    c->gp.replay_ns = c->replay_ns;
    c->gp.tool_defs = c->pt.tools;
    c->gp.harmony = !c->raw_text && render_harmony(s->render);
    c->gp.ignored = c->ignored.n ? c->ignored.text : NULL;
    prompt_cache_apply(ci, &c->gp);
    c->gp.recent_id = record_open(c, 0);
    c->gp.share_prompt = c->n_choices > 1;
    int rc = gen_start(&c->g, s->sch, s->tok, *ids, (int)*n, &c->gp, err);
    if (!rc) rc = api_admit(&c->g, req, s->o.queue_timeout, err);
    if (rc) record_refused(c, c->gp.recent_id, err);
    return rc || c->n_choices <= 1 ? rc : start_more(c, req, *ids, (int)*n, err);
}

/* Top-level fields served without (DESIGN.md, principle 7): noted, and the
 * rest of the request served. */
static const struct {
    const char *field, *why;
} UNSERVED[] = {
    {"web_search_options", "web search runs on OpenAI's servers"},
    {"audio", "replies are text only"},
    {"mcp_servers", "MCP servers are called from Anthropic's servers; their tools are not offered to the model"},
    {"container", "code execution containers run on Anthropic's servers"},
    {"conversation", "conversations are stored on OpenAI's servers; the request's own input is served"},
};

static int note_unserved(api_call *c, char *why, size_t cap) {
    for (size_t i = 0; i < sizeof UNSERVED / sizeof *UNSERVED; i++) {
        const json_t *v = json_object_get(c->req, UNSERVED[i].field);
        if (v && !json_is_null(v) && ignored_note(&c->ignored, why, cap, "%s (%s)", UNSERVED[i].field, UNSERVED[i].why))
            return -1;
    }
    const json_t *bg = json_object_get(c->req, "background");
    if (json_is_true(bg) && ignored_note(&c->ignored, why, cap, "background (answered in the foreground)")) return -1;
    return 0;
}

/* chat_template_kwargs' keys (params_template_vars, read before the
 * prompt is built), each noted when the prompt never used it: the
 * client's own text (completions), the built-in format, or a chat
 * template that never reads it. The APIs' own reasoning settings are not
 * noted: agent clients send them on every request, and a model whose
 * template has no reasoning setting has no reasoning to set. */
static int note_template_kwargs(api_call *c, char *why, size_t cap) {
    const json_t *kw = json_object_get(c->req, "chat_template_kwargs");
    const char *src = c->raw_text ? NULL : render_template_src(c->srv->render), *key;
    json_t *v;
    json_object_foreach((json_t *)kw, key, v) {
        if ((!src || !strstr(src, key)) &&
            ignored_note(&c->ignored, why, cap, "chat_template_kwargs.%s (this model's chat template does not read it)",
                         key))
            return -1;
    }
    return 0;
}

void api_call_run(api_call *c, const http_req *req, http_reply *rep) {
    char why[512] = "";
    int32_t *ids = NULL;
    size_t n = 0;
    prompt_cache_info ci = {0};
    strata_err err = {0};
    snprintf(c->method, sizeof c->method, "%s", req->method);
    snprintf(c->path, sizeof c->path, "%s", req->path);
    c->gp.tenant = server_tenant(c->srv, req);
    c->ignored.strict = c->srv->o.strict_requests;
    conversation_name(c, req);
    server_replay_ns(c->srv, c->gp.tenant, NULL, &c->replay_ns); /* salted once the body is read */
    int bad = note_unserved(c, why, sizeof why) || params_template_vars(c->req, &c->template_vars, why, sizeof why);
    c->pt.vars = c->template_vars;
    bad = bad || c->d->build(c, &ids, &n, &ci, why, sizeof why) || note_template_kwargs(c, why, sizeof why);
    int rc = bad ? strata_errf(&err, STRATA_EINVAL, "%s", why)
                 : tool_schema(c, &err) ? err.code : start(c, req, &ids, &n, &ci, &err);
    prompt_cache_info_free(&ci);
    free(ids);
    if (rc) {
        c->d->fail(rep, rc, err.msg);
        c->status = rep->status;
        call_free(c);
        return;
    }
    c->status = 200;
    c->st = (api_stream){.g = &c->g, .produce = c->d->produce, .release = stream_release};
    char *ignored = ignored_header_value(&c->ignored); /* c may be gone after api_answer */
    api_answer(&c->st, c->stream, req, rep, answer_whole);
    rep->extra_name = ignored ? "x-strata-ignored" : NULL;
    rep->extra_value = ignored;
}
