/* gen.h - one generation as an API handler sees it: submit tokens, then
 * pull events until finished: content text (stop strings applied, UTF-8
 * whole), reasoning (harmony models) and, when the request has tools,
 * tool calls parsed out of the output (name first, then argument
 * fragments). Shared by the OpenAI and
 * Anthropic handlers, streamed or not. */
#ifndef STRATA_GEN_H
#define STRATA_GEN_H

#include "server/replay.h"
#include "server/sched.h"
#include "server/textout.h"
#include "text/tokenizer.h"
#include "text/jsonscan.h"
#include "text/toolcall.h"

typedef struct gen_params {
    sample_params sampling;
    int max_tokens;
    int n_logprobs;
    const char *stops[TEXTOUT_MAX_STOPS];
    int n_stops;
    int ignore_eos; /* never sample an end-of-generation token (fixed-length benchmarks) */
    int no_speculative; /* "speculative": false: decode one token per step (the output is the same) */
    const int32_t *prediction; /* OpenAI "prediction" as tokens (owned by the call), or NULL */
    int n_prediction;
    const char *cache_salt;
    const char *tenant; /* the request's API key, or NULL */
    cache_scope scope; /* what the cache keeps of the prompt (policy.h); SCOPE_DEFAULT: the server's */
    tc_format tools; /* TC_NONE: no tool parsing */
    int harmony;     /* the template writes harmony: replies are parsed (TC_HARMONY) even without tools */
    int json_mode;   /* constrained to one JSON object */
    json_schema *schema; /* ...that validates against this schema, or NULL (owned by the call) */
    json_schema *call_schema; /* native tool format (tools): one call's schema, or NULL (owned by the call) */
    int prefix_ids;     /* tokens of prefix at the end of the prompt */
    const char *prefix; /* reply text already in the prompt (forced tool call) */
    int one_call;       /* end the generation when the first tool call is complete */
    int args_open;      /* prefix ends inside the call's arguments object: close
                           the call as soon as that object closes */
    replay_store *replay; /* remembers the reply's exact tokens, or NULL */
    cache_hash replay_ns; /* in the request's tenant's namespace (server_replay_ns) */
    cache_hash replay_ctx; /* ...narrowed to the conversation it answers (replay_context_ns) */
    int has_replay_ctx;
    const json_t *tool_defs; /* the request's normalised tools (replay keys), or NULL; borrowed: outlives the gen */
    const int *bounds;    /* message starts in the prompt (sched_job) */
    int n_bounds;
    const cache_mark *marks; /* retention marks (sched_job) */
    int n_marks;
    const char *held_out;    /* client text held out of the prompt (sched_job) */
    const char *ignored;     /* what the request asked for and did not get (sched_job) */
    long recent_id;          /* its record in the server's recent ring (sched_job) */
    int share_prompt, later_choice; /* choices of one request, n > 1 (sched_job) */
} gen_params;

typedef struct gen {
    sched_req *req;
    const tokenizer *tok;
    textout text;
    tc_parser *tc;
    int n_seen;            /* tokens pulled from the scheduler */
    sched_status st;
    int done;              /* finished and every event handed out */
    int stopped_by_string; /* a stop string ended it (we cancelled the rest) */
    int n_calls;           /* tool calls begun */
    int n_calls_done;      /* tool calls complete */
    int tool_error;        /* the output was not a well-formed tool call */
    int one_call;
    int args_watch;        /* args_open: the arguments object is still open */
    tc_jscan args;         /* ...followed by the JSON scanner (its root) */
    size_t prefix_len;
    int32_t *prefix_tok;   /* the prefix's tokens (end of the prompt), for native replay */
    int n_prefix_tok;
    size_t close_at;       /* args_open: offset in text.buf just past the arguments, or 0 */
    tc_format tools;
    replay_store *replay;
    cache_hash replay_ns;
    cache_hash replay_ctx;
    int has_replay_ctx;
    const json_t *tool_defs; /* borrowed from gen_params */
    char error[512];
    char *content;         /* the reply's text outside calls (replay key: native calls, generic text) */
    size_t content_len;
    char *reasoning;       /* the reply's reasoning (harmony's analysis channel), or NULL */
    size_t reasoning_len;
    int harmony;
    sched_token *tokens;   /* every generated token (for logprobs and replay) */
    int n_tokens, cap_tokens;
    tc_event one;          /* the single event when there is no parser */
    char *open_name;       /* the call begun and not ended (a reply cut by the limit returns it) */
    char *open_args;       /* its argument fragments so far */
    size_t open_args_len;
    double t_start;        /* ms (clock_ms): submitted (the tokens' times: st.t_first_out, t_last_out) */
} gen;

int gen_start(gen *g, sched *s, const tokenizer *tok, const int32_t *ids, int n,
              const gen_params *p, strata_err *err);
/* Waits up to timeout_ms; sets *evs to the new events (valid until the
 * next call) and returns how many. */
int gen_pull(gen *g, int timeout_ms, const tc_event **evs);
/* The tool call cut by the token limit: its name and arguments so far
 * (not valid JSON), or 0 when none is open. */
int gen_open_call(const gen *g, const char **name, const char **args);
/* OpenAI words: "stop", "length", "tool_calls", "tool_call_error". */
const char *gen_finish_word(const gen *g);
/* Waits up to timeout_ms until the cached prefix is known (g->st.attached:
 * the cache counts in g->st are final). */
void gen_wait_attached(gen *g, int timeout_ms);
/* Waits up to timeout_ms until the prompt is in (the first token came, or
 * the generation ended); 1 when it is. Tokens stay for gen_pull. */
int gen_wait_prefilled(gen *g, int timeout_ms);
void gen_cancel(gen *g);
void gen_end(gen *g);

#endif
