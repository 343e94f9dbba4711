/* server.h - the running server: engine, tokenizer, scheduler, HTTP, and
 * the shared helpers the API handlers use (JSON replies, errors, ids).
 * server.c routes requests; api_openai.c and api_anthropic.c speak the
 * two wire formats; gen.c pulls generated text from the scheduler. */
#ifndef STRATA_SERVER_H
#define STRATA_SERVER_H

#include <jansson.h>
#include <stdatomic.h>

#include "model/engine.h"
#include "cache/disk.h"
#include "cache/ram_tier.h"
#include "cache/redis_tier.h"
#include "server/http.h"
#include "server/dates.h"
#include "server/diag.h"
#include "server/recent.h"
#include "server/replay.h"
#include "server/resp_store.h"
#include "server/sched.h"
#include "text/render.h"
#include "server/sampling.h"
#include "text/tokenizer.h"

/* Tokens drafted per step by default (--spec-draft): a batch of 9 rows
 * costs about 2 decode steps of SmolLM2 or Gemma 3 on 2 CPU threads. */
#define SERVER_SPEC_DRAFT 8

typedef struct server_opts {
    const char *model_path, *host, *api_key, *alias, *template_file, *trace_path;
    const char *metrics_key; /* --metrics-key: the only key /metrics and /props answer (NULL: see server.c) */
    int port, parallel, ctx, threads, cors, queue_max;
    int queue_timeout; /* seconds a request may wait for a slot before 503 (0: no limit) */
    int idle_timeout;  /* seconds an idle connection stays open */
    int max_conns;     /* open connections at most (each holds a thread) */
    int max_output;    /* --max-output-tokens: a reply's tokens at most (0: up to the context) */
    int max_client_conns; /* of them from one client address (-1: 3/4 of max_conns; 0: no limit) */
    int header_timeout; /* seconds a new connection has to send its first request header */
    int strict_model;  /* --strict-model: refuse names other than the id and aliases */
    int strict_requests; /* --strict-requests: 400 for a part that cannot be honoured (server/ignored.h) */
    int no_cache;      /* --no-prefix-cache */
    int no_cache_disk; /* --no-cache-disk */
    int cache_disk_mb; /* disk tier budget */
    int block_tokens;  /* KV block size (--cache-block-tokens) */
    const char *kv_type; /* --kv-type: f16 (NULL) or q8_0 */
    const char *scope; /* --prefix-cache-scope */
    const char *cache_dir; /* NULL: under the user's cache directory */
    const char *cache_redis; /* --cache-redis URL of the shared tier, or NULL */
    int cache_redis_timeout_ms; /* longest wait on Redis for any one step */
    int cache_redis_ttl_s; /* expiry of an unmarked key after its last use (0: none) */
    int cache_redis_required; /* --cache-redis-required: no start without the shared tier */
    int cache_mem_mb;  /* KV memory kept for cached prefixes beyond the slots */
    int cache_ram_mb;  /* RAM tier: on the CPU backend, more of the same pool; on the GPU pinned host memory */
    const char *device; /* --device: "cpu" (NULL too) or "cuda" */
    int snap_blocks;   /* --cache-snapshot-blocks: recurrent state every N blocks (0: none) */
    int snap_mb;       /* --cache-snapshot-mb: memory for recurrent-state snapshots */
    int ui_records;    /* --ui-records: requests the /ui page and the trace keep in memory (0: none, no page) */
    int spec_draft;    /* --spec-draft: tokens drafted per step by prompt lookup (0 = --no-speculative) */
    int spec_drafter;  /* --spec-drafter: SPEC_DRAFTER_* (server/sched.h) */
    sampling_flags sampling; /* --temp, --top-k, ...: request defaults over the model file's (sampling.h) */
    long max_body;
} server_opts;

typedef struct server {
    server_opts o;
    sample_params sampling; /* what a request gets for the sampling fields it leaves out */
    engine *e;
    tokenizer *tok;
    sched *sch;
    http_server *http;
    diag_store *diag;     /* recent prompts, for cache diagnostics */
    date_list *dates;     /* dates the chat template wrote lately (prompt.c keeps a conversation's), or NULL */
    recent_ring *recent;  /* records of the last --ui-records requests (the /ui page), or NULL */
    renderer *render;     /* the chat template or built-in format */
    char model_id[128];   /* reported to clients: the first alias, else the file name */
    char **aliases;       /* every --alias name (model_id among them) */
    int n_aliases;
    atomic_int ready;
    FILE *trace;
    replay_store *replay; /* exact tokens of recent replies */
    resp_store *responses; /* Responses API: recent responses by id */
    char **keys;          /* --api-key, comma-separated: each key is a tenant */
    int n_keys;
    disk_store *disk;     /* KV disk tier, or NULL (memory only) */
    redis_tier *redis;    /* KV tier shared by replicas, or NULL */
    ram_tier *ram;        /* KV tier in pinned host memory under a GPU pool, or NULL */
    char cache_dir[1024];
    uint8_t model_fp[32];
    long started_at;
    long long boot_id;    /* wall-clock ms at start: names this run in request records (/ui marks restarts) */
} server;

int server_start(server **out, const server_opts *o, strata_err *err);
void server_stop(server *s); /* NULL is fine */

/* The API key the request authenticated with (its tenant: requests of
 * different keys never share cached blocks), or NULL without keys. */
const char *server_tenant(const server *s, const http_req *req);
/* Whether the request holds the operator's credentials (those of /metrics:
 * --metrics-key, or the one tenant there is). */
int server_is_operator(const server *s, const http_req *req);
/* A tenant's name in records and on the /ui page: hex of a hash of its
 * key (never the key itself). */
void server_tenant_id(const server *s, const char *tenant, char *out, size_t cap);
/* The exact-replay namespace of a tenant (NULL: none) and cache salt (NULL:
 * none): like the block hashes' root, so tenants share nothing. */
void server_replay_ns(const server *s, const char *tenant, const char *salt, cache_hash *ns);
/* Whether a request naming this model is served: any name (one model is
 * served: clients send their own defaults, e.g. gpt-4o), unless
 * --strict-model, then only the id and the aliases. NULL or "" always. */
int server_knows_model(const server *s, const char *name);

/* ---- helpers for API handlers (server_util.c) ---- */

/* Replies with the JSON value (takes ownership of it). */
void reply_json(http_reply *rep, int status, json_t *body);
/* OpenAI-style error: {"error":{"message","type","code","param"}}. Error
 * messages may quote client bytes (a URL, an id), or be cut inside a
 * character: invalid UTF-8 in them becomes U+FFFD, in both error shapes. */
void reply_openai_error(http_reply *rep, int status, const char *type, const char *code,
                        const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* Anthropic-style error: {"type":"error","error":{"type","message"}}. */
void reply_anthropic_error(http_reply *rep, int status, const char *type, const char *msg);
/* A request body's JSON (NULL and je set if it is not JSON). U+0000 in a
 * string is taken, and read as U+FFFD: request text travels as C strings
 * (prompt.c, the dialects), which would cut it at a NUL. */
json_t *json_load_request(const char *body, size_t len, json_error_t *je);
/* Parses the body as a JSON object, or replies 400 and returns NULL. */
json_t *parse_body_openai(const http_req *req, http_reply *rep);
/* "prefix-" + 32 hex chars from the system's random source (128 bits). */
void make_id(char *out, size_t cap, const char *prefix);
/* n bytes with each invalid UTF-8 sequence and each NUL replaced by
 * U+FFFD: the text a client sees of model output. malloc'd, NUL-terminated. */
char *utf8_sanitize(const char *s, size_t n, size_t *out_len);
/* A JSON string of n bytes of model output; invalid UTF-8 becomes U+FFFD. */
json_t *json_text(const char *s, size_t n);
/* Status code and OpenAI error type for a STRATA_E* from submitting work. */
int status_for(int code, const char **type);

#endif
