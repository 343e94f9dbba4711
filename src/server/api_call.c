/* api_call.c - the request lifecycle both APIs share (see api_call.h). */
#include "server/api_call.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/mem.h"

api_call *api_call_of(api_stream *st) { return (api_call *)((char *)st - offsetof(api_call, st)); }

const char *api_call_id(api_call *c, int index, const char *prefix) {
    if (index < 0 || index >= API_MAX_CALLS) {
        snprintf(c->overflow_id, sizeof c->overflow_id, "%soverflow", prefix);
        return c->overflow_id;
    }
    if (!c->call_ids[index][0]) make_id(c->call_ids[index], sizeof c->call_ids[index], prefix);
    return c->call_ids[index];
}

static double per_s(double n, double ms) { return ms > 0 ? n * 1000.0 / ms : 0; }

/* One line per request: what it asked, what the cache gave, what it cost. */
static void log_request(const api_call *c) {
    const gen *g = &c->g;
    const sched_status *st = &g->st;
    if (!g->req) {
        log_info("request %s %s status=%d", c->method, c->path, c->status);
        return;
    }
    int prefilled = st->n_prompt - st->n_cached;
    double prefill_ms = g->t_first ? g->t_first - g->t_start : 0;
    double end = g->t_done ? g->t_done : clock_ms(); /* a cancelled request stops at its cancel */
    double decode_ms = g->t_first ? end - g->t_first : 0;
    log_info("request %s %s status=%d prompt=%d cached=%d live=%d disk=%d prefilled=%d generated=%d "
             "prefill_tok_s=%.1f decode_tok_s=%.1f finish=%s%s%s%s",
             c->method, c->path, c->status, st->n_prompt, st->n_cached, st->n_cached - st->n_cached_disk,
             st->n_cached_disk, prefilled, g->n_tokens, per_s(prefilled, prefill_ms),
             per_s(g->n_tokens > 1 ? g->n_tokens - 1 : 0, decode_ms), gen_finish_word(g),
             c->ignored.n ? " ignored=\"" : "", ignored_text(&c->ignored), c->ignored.n ? "\"" : "");
}

static void call_free(api_call *c) {
    log_request(c);
    gen_end(&c->g);
    free(c->prefix);
    free(c->msg_ends);
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

int api_call_prompt(api_call *c, const json_t *messages, int32_t **ids, size_t *n, prompt_cache_info *ci, char *why,
                    size_t cap) {
    /* Replies are remembered per tenant and salt, like blocks: another
     * tenant cannot tell from its prompt's tokens what was generated here. */
    server_replay_ns(c->srv, c->gp.tenant, c->gp.cache_salt, &c->replay_ns);
    int rc = prompt_tokens(c->srv, &c->replay_ns, messages, &c->pt, ids, n, ci, why, cap);
    if (rc || !ci) return rc;
    replay_context_ns(&c->replay_ns, messages, json_array_size(messages), &c->gp.replay_ctx);
    c->gp.has_replay_ctx = 1;
    diag_observe(c->srv->diag, &c->replay_ns, *ids, (int)*n, &c->diag);
    free(c->msg_ends);
    c->msg_ends = xmalloc(((size_t)ci->n_msgs + 1) * sizeof(int));
    memcpy(c->msg_ends, ci->msg_ends ? ci->msg_ends : (int[]){-1}, ((size_t)(ci->msg_ends ? ci->n_msgs : 0) + 1) * sizeof(int));
    c->n_msgs = ci->msg_ends ? ci->n_msgs : 0;
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
    json_t *o = json_pack("{s:i,s:i,s:i,s:o}", "live_tokens", st->n_cached - st->n_cached_disk - st->n_cached_redis,
                          "disk_tokens", st->n_cached_disk, "redis_tokens", st->n_cached_redis, "prefix_end",
                          position_json(c, st->n_cached));
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
    c->gp.harmony = !c->raw_text && render_harmony(s->render);
    c->gp.ignored = c->ignored.n ? c->ignored.text : NULL;
    prompt_cache_apply(ci, &c->gp);
    int rc = gen_start(&c->g, s->sch, s->tok, *ids, (int)*n, &c->gp, err);
    return rc ? rc : api_admit(&c->g, req, s->o.queue_timeout, err);
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
    server_replay_ns(c->srv, c->gp.tenant, NULL, &c->replay_ns); /* salted once the body is read */
    int rc = c->d->build(c, &ids, &n, &ci, why, sizeof why) ? strata_errf(&err, STRATA_EINVAL, "%s", why)
                                                          : tool_schema(c, &err) ? err.code
                                                                                : start(c, req, &ids, &n, &ci, &err);
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
