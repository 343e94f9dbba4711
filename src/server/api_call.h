/* api_call.h - one API call's life, written once for both dialects.
 *
 * A dialect (api_openai.c, api_anthropic.c) parses its JSON into the
 * neutral parts (generation parameters, tools, the prompt's token ids via
 * api_call_prompt) and formats replies and stream events in its own
 * schema. Everything else happens here, in one order, with one cleanup:
 * the tenant and its exact-replay namespace, the forced tool prefix,
 * submission, admission (queue wait, a client that leaves, the queue
 * timeout), the later choices of a request with several (OpenAI n > 1),
 * the answer whole or streamed, and freeing the call on every path. */
#ifndef STRATA_API_CALL_H
#define STRATA_API_CALL_H

#include <jansson.h>

#include "server/api_stream.h"
#include "server/diag.h"
#include "server/gen.h"
#include "server/ignored.h"
#include "server/prompt.h"
#include "server/server.h"

#define API_MAX_CALLS 64 /* tool calls per reply */

typedef struct api_call api_call;

/* Tool call ids of one choice, made on first use, per call index. */
typedef struct api_ids {
    char call[API_MAX_CALLS][40];
    char overflow[40]; /* past API_MAX_CALLS */
} api_ids;

/* A choice after the first (OpenAI n > 1): its own generation, sampled
 * under its own seed (sample_choice_seed), and its own call ids. */
typedef struct api_choice {
    gen g;
    api_ids ids;
} api_choice;

typedef struct api_dialect {
    /* Reads c->req into c->gp, c->pt and c->stream and builds the prompt:
     * token ids (malloc'd) and cache info. 0, or -1 with why set. */
    int (*build)(api_call *c, int32_t **ids, size_t *n, prompt_cache_info *ci, char *why, size_t cap);
    /* An error reply in the dialect's schema for a STRATA_E* code
     * (STRATA_EINVAL: a bad request). */
    void (*fail)(http_reply *rep, int code, const char *msg);
    void (*produce)(api_stream *st);                                   /* the next stream events */
    void (*whole)(api_call *c, const http_req *req, http_reply *rep); /* the whole reply */
    void (*free)(api_call *c); /* the dialect's own parts; may be NULL */
} api_dialect;

/* The neutral part of a call; a dialect's call struct embeds it first. */
struct api_call {
    server *srv;
    const api_dialect *d;
    json_t *req;      /* the request body (owned) */
    gen g;
    gen_params gp;
    render_tools pt;
    json_t *template_vars; /* owned: pt.vars (params_template_vars), or NULL */
    int32_t *prediction;   /* owned: gp.prediction (OpenAI "prediction"), or NULL */
    char *prefix;     /* forced start of the reply (tool_choice) */
    cache_hash replay_ns; /* the tenant's exact-replay namespace */
    int stream, n_prompt;
    int raw_text;     /* the prompt is the client's own text (completions): no template, nor its harmony parse */
    int phase;        /* stream: 0 before the first events */
    char id[64];
    api_ids ids;                      /* the first choice's tool call ids */
    int n_choices;                    /* choices asked for (OpenAI n; 0 or 1: one) */
    api_choice *more;                 /* owned: choices 1..n_choices-1, once started, or NULL */
    char method[8], path[64];         /* for the request's log line */
    cache_diag diag;                  /* the prompt against recent ones (diag.h) */
    int *msg_ends, n_msgs;            /* owned: message ends in the prompt, for diagnostics */
    json_t *ui_prompt;                /* owned: the record's prompt facts for /ui (api_call_record), or NULL */
    char conv[128], conv_from[24];    /* the conversation the request belongs to, and how it was named */
    char template_date[DATES_TEXT_MAX + 1]; /* the earlier date the prompt was rendered with (prompt.h), or "" */
    int status;                       /* of the reply */
    req_ignored ignored;              /* what was left out of the request (x-strata-ignored) */
    api_stream st;    /* streamed replies */
};

/* Runs c (allocated by the dialect, c->srv, c->d and c->req set; owned
 * from here on): build, submit, admit, answer, free. */
void api_call_run(api_call *c, const http_req *req, http_reply *rep);
/* For a dialect's build: the conversation (normalised messages) rendered
 * and tokenized with the tenant's remembered replies (exact replay). */
int api_call_prompt(api_call *c, const json_t *messages, int32_t **ids, size_t *n, prompt_cache_info *ci, char *why,
                    size_t cap);
/* The strata_cache extension of a reply's usage: tokens per tier, where
 * the cached prefix ended, and (when the prompt left a recent one of the
 * same tenant) where the first difference lies and what it cost. */
json_t *api_call_cache_json(const api_call *c);
/* The reply must validate against schema (a JSON Schema; NULL: any
 * object): compiled into c->gp (JSON mode on). Keywords the engine does
 * not enforce are noted in c->ignored; -1 with why naming `field` for a
 * malformed schema (or, under --strict-requests, an unenforced keyword). */
int api_call_schema(api_call *c, const json_t *schema, const char *field, char *why, size_t cap);
/* The call whose stream st is. */
api_call *api_call_of(api_stream *st);
/* The id of tool call `index` ("call_..." / "toolu_..." by prefix). */
const char *api_call_id(api_call *c, int index, const char *prefix);
/* The same in choice k (0 .. n_choices-1). */
const char *api_call_choice_id(api_call *c, int k, int index, const char *prefix);
/* The generation of choice k: c->g for 0. */
gen *api_call_gen(api_call *c, int k);
/* Tokens generated over every choice (usage's completion_tokens). */
int api_call_tokens(const api_call *c);

#endif
