/* server.c - start-up, routing, and the small endpoints (health, metrics,
 * props, tokenize, detokenize). The API dialects live in api_*.c. */
#include "server/server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <openssl/evp.h>

#include "base/clock.h"
#include "base/fs.h"
#include "base/log.h"
#include "base/mem.h"
#include "server/api_anthropic.h"
#include "server/api_openai.h"
#include "server/api_responses.h"
#include "server/api_params.h"
#include "cache/hash.h"
#include "server/ui.h"

/* MiB of the live pool beyond the slots: --cache-mem-mb, and on the CPU
 * --cache-ram-mb too (on the GPU that is the RAM tier's). */
static int server_pool_extra_mb(const server *s) {
    int gpu = s->o.device && strcmp(s->o.device, "cpu") != 0;
    return s->o.no_cache ? 0 : s->o.cache_mem_mb + (gpu ? 0 : s->o.cache_ram_mb);
}

/* Responses kept for previous_response_id: each entry holds its whole
 * conversation, so the byte bound is the one that matters for long agent
 * sessions (a Codex session's turns share most of their text). */
#define RESP_STORE_ENTRIES 1024
#define RESP_STORE_MB 256

/* ---- small endpoints ------------------------------------------------------- */

static void get_health(server *s, const http_req *req, http_reply *rep) {
    if (!atomic_load(&s->ready)) {
        reply_json(rep, 503, json_pack("{s:s}", "status", "loading"));
        return;
    }
    sched_stats st;
    sched_get_stats(s->sch, &st);
    reply_json(rep, 200, json_pack("{s:s,s:i,s:i,s:i}", "status", "ok", "slots", st.n_slots,
                                   "active", st.active, "queued", st.queued));
}

/* The shared tier's counters (redis_tier.h says what each counts). */
static int redis_metrics(server *s, const sched_stats *st, char *out, size_t cap) {
    redis_tier_stats r;
    redis_tier_get_stats(s->redis, &r);
    return snprintf(out, cap,
                    "# HELP strata_cache_redis_hit_tokens_total Prompt tokens loaded from the shared tier on Redis.\n"
                    "# TYPE strata_cache_redis_hit_tokens_total counter\nstrata_cache_redis_hit_tokens_total %ld\n"
                    "# TYPE strata_redis_hits_total counter\nstrata_redis_hits_total %ld\n"
                    "# TYPE strata_redis_misses_total counter\nstrata_redis_misses_total %ld\n"
                    "# TYPE strata_redis_errors_total counter\nstrata_redis_errors_total %ld\n"
                    "# TYPE strata_redis_dropped_writes_total counter\nstrata_redis_dropped_writes_total %ld\n"
                    "# TYPE strata_redis_rejected_total counter\nstrata_redis_rejected_total %ld\n"
                    "# TYPE strata_redis_writes_total counter\nstrata_redis_writes_total %ld\n"
                    "# TYPE strata_redis_write_skips_total counter\nstrata_redis_write_skips_total %ld\n"
                    "# TYPE strata_redis_expires_total counter\nstrata_redis_expires_total %ld\n"
                    "# TYPE strata_redis_tail_hits_total counter\nstrata_redis_tail_hits_total %ld\n"
                    "# TYPE strata_redis_queued_bytes gauge\nstrata_redis_queued_bytes %ld\n"
                    "# TYPE strata_redis_up gauge\nstrata_redis_up %d\n",
                    st->cache_redis_hit_tokens, r.hits, r.misses, r.errors, r.dropped_writes, r.rejected, r.writes,
                    r.write_skips, r.expires, r.tail_hits, r.queued_bytes, r.up);
}

static void get_metrics(server *s, const http_req *req, http_reply *rep) {
    sched_stats st;
    sched_get_stats(s->sch, &st);
    char body[8192];
    int n = snprintf(body, sizeof body,
                     "# HELP strata_requests_total Generation requests accepted.\n"
                     "# TYPE strata_requests_total counter\nstrata_requests_total %ld\n"
                     "# HELP strata_prompt_tokens_total Prompt tokens prefilled.\n"
                     "# TYPE strata_prompt_tokens_total counter\nstrata_prompt_tokens_total %ld\n"
                     "# HELP strata_generated_tokens_total Tokens generated.\n"
                     "# TYPE strata_generated_tokens_total counter\nstrata_generated_tokens_total %ld\n"
                     "# HELP strata_batch_steps_total Forward passes run by the scheduler.\n"
                     "# TYPE strata_batch_steps_total counter\nstrata_batch_steps_total %ld\n"
                     "# HELP strata_requests_active Requests holding a slot.\n"
                     "# TYPE strata_requests_active gauge\nstrata_requests_active %d\n"
                     "# HELP strata_requests_queued Requests waiting for a slot.\n"
                     "# TYPE strata_requests_queued gauge\nstrata_requests_queued %d\n"
                     "# HELP strata_cache_lookups_total Prefix cache lookups (live tier).\n"
                     "# TYPE strata_cache_lookups_total counter\nstrata_cache_lookups_total %ld\n"
                     "# HELP strata_cache_hit_tokens_total Prompt tokens served from the live tier (memory); the lower tiers have their own counters.\n"
                     "# TYPE strata_cache_hit_tokens_total counter\nstrata_cache_hit_tokens_total %ld\n"
                     "# HELP strata_cache_published_blocks_total KV blocks added to the cache.\n"
                     "# TYPE strata_cache_published_blocks_total counter\nstrata_cache_published_blocks_total %ld\n"
                     "# HELP strata_cache_evicted_blocks_total Cached blocks dropped for space.\n"
                     "# TYPE strata_cache_evicted_blocks_total counter\nstrata_cache_evicted_blocks_total %ld\n"
                     "# HELP strata_cache_blocks Blocks in the cache (in use or idle).\n"
                     "# TYPE strata_cache_blocks gauge\nstrata_cache_blocks %d\n"
                     "# HELP strata_cache_disk_hit_tokens_total Prompt tokens loaded from the disk tier.\n"
                     "# TYPE strata_cache_disk_hit_tokens_total counter\nstrata_cache_disk_hit_tokens_total %ld\n"
                     "# HELP strata_cache_ram_hit_tokens_total Prompt tokens loaded from the RAM tier (under a GPU pool).\n"
                     "# TYPE strata_cache_ram_hit_tokens_total counter\nstrata_cache_ram_hit_tokens_total %ld\n"
                     "# HELP strata_cache_tail_hit_tokens_total Of the hits, tokens from partial last blocks (tails).\n"
                     "# TYPE strata_cache_tail_hit_tokens_total counter\nstrata_cache_tail_hit_tokens_total %ld\n"
                     "# HELP strata_cache_tails Partial last blocks kept for reuse.\n"
                     "# TYPE strata_cache_tails gauge\nstrata_cache_tails %d\n"
                     "# HELP strata_cache_evicted_retained_total Of the evictions, blocks still under a retention mark "
                     "(anchor, cache_control) taken because nothing else was left.\n"
                     "# TYPE strata_cache_evicted_retained_total counter\nstrata_cache_evicted_retained_total %ld\n",
                     st.requests, st.tokens_prompt, st.tokens_generated, st.steps, st.active, st.queued,
                     st.cache_lookups, st.cache_hit_tokens, st.cache_published_blocks, st.cache_evicted_blocks,
                     st.cache_blocks, st.cache_disk_hit_tokens, st.cache_ram_hit_tokens, st.cache_tail_hit_tokens,
                     st.cache_tails,
                     st.cache_evicted_retained);
    if (n < (int)sizeof body)
        n += snprintf(body + n, sizeof body - (size_t)n,
                      "# HELP strata_spec_drafted_tokens_total Tokens drafted for speculative decoding (prompt lookup, prediction, MTP).\n"
                      "# TYPE strata_spec_drafted_tokens_total counter\nstrata_spec_drafted_tokens_total %ld\n"
                      "# HELP strata_spec_accepted_tokens_total Of the drafted tokens, those the sampler chose (output).\n"
                      "# TYPE strata_spec_accepted_tokens_total counter\nstrata_spec_accepted_tokens_total %ld\n"
                      "# HELP strata_spec_steps_total Forward passes that verified a draft.\n"
                      "# TYPE strata_spec_steps_total counter\nstrata_spec_steps_total %ld\n",
                      st.spec_drafted, st.spec_accepted, st.spec_steps);
    if (s->e->m->has_mtp && n < (int)sizeof body) /* qwen35's MTP block (model/mtp.h) */
        n += snprintf(body + n, sizeof body - (size_t)n,
                      "# HELP strata_spec_mtp_drafted_tokens_total Of the drafted tokens, those the model's MTP block drafted.\n"
                      "# TYPE strata_spec_mtp_drafted_tokens_total counter\nstrata_spec_mtp_drafted_tokens_total %ld\n"
                      "# HELP strata_spec_mtp_accepted_tokens_total Of the MTP block's drafts, those the sampler chose.\n"
                      "# TYPE strata_spec_mtp_accepted_tokens_total counter\nstrata_spec_mtp_accepted_tokens_total %ld\n"
                      "# HELP strata_spec_mtp_seconds_total Time in the MTP block: its K/V kept up with every pass, and drafts.\n"
                      "# TYPE strata_spec_mtp_seconds_total counter\nstrata_spec_mtp_seconds_total %.3f\n",
                      st.spec_mtp_drafted, st.spec_mtp_accepted, st.spec_mtp_ms / 1000.0);
    if (s->e->m->hp.n_rec_layer > 0 && n < (int)sizeof body)
        n += snprintf(body + n, sizeof body - (size_t)n,
                      "# HELP strata_cache_snapshots Recurrent-state snapshots indexed (memory or disk).\n"
                      "# TYPE strata_cache_snapshots gauge\nstrata_cache_snapshots %ld\n"
                      "# HELP strata_cache_snapshot_bytes State bytes of the snapshots held in memory.\n"
                      "# TYPE strata_cache_snapshot_bytes gauge\nstrata_cache_snapshot_bytes %llu\n"
                      "# TYPE strata_cache_snapshots_stored_total counter\nstrata_cache_snapshots_stored_total %ld\n"
                      "# TYPE strata_cache_snapshots_restored_total counter\nstrata_cache_snapshots_restored_total %ld\n"
                      "# TYPE strata_cache_snapshots_evicted_total counter\nstrata_cache_snapshots_evicted_total %ld\n",
                      st.snap_entries, st.snap_bytes, st.snap_stored, st.snap_restored, st.snap_evicted);
    if (s->e->kv.swa_layer && n < (int)sizeof body)
        n += snprintf(body + n, sizeof body - (size_t)n,
                      "# HELP strata_window_reloaded_blocks_total Sliding-window parts read back from a lower tier "
                      "to make a hit's window whole.\n"
                      "# TYPE strata_window_reloaded_blocks_total counter\nstrata_window_reloaded_blocks_total %ld\n"
                      "# HELP strata_window_cut_tokens_total Hit tokens given up because no tier held their window.\n"
                      "# TYPE strata_window_cut_tokens_total counter\nstrata_window_cut_tokens_total %ld\n"
                      "# HELP strata_window_refilled_blocks_total Sliding-window parts given back to cached blocks "
                      "by recomputing them.\n"
                      "# TYPE strata_window_refilled_blocks_total counter\nstrata_window_refilled_blocks_total %ld\n",
                      st.window_reloaded_blocks, st.window_cut_tokens, st.window_refilled_blocks);
    if (s->e->kv.dev && n < (int)sizeof body) /* a pool in GPU memory: its copies down (cache/spill.h) */
        n += snprintf(body + n, sizeof body - (size_t)n,
                      "# HELP strata_pool_spilled_blocks_total Evicted blocks the GPU pool copied down to the first tier.\n"
                      "# TYPE strata_pool_spilled_blocks_total counter\nstrata_pool_spilled_blocks_total %ld\n"
                      "# HELP strata_pool_publish_queued_total Published blocks whose copy down was queued.\n"
                      "# TYPE strata_pool_publish_queued_total counter\nstrata_pool_publish_queued_total %ld\n"
                      "# HELP strata_pool_publish_written_total Published blocks written to the tiers once copied down.\n"
                      "# TYPE strata_pool_publish_written_total counter\nstrata_pool_publish_written_total %ld\n"
                      "# HELP strata_pool_copies_pending Copies down queued and not yet written to the tiers.\n"
                      "# TYPE strata_pool_copies_pending gauge\nstrata_pool_copies_pending %ld\n"
                      "# HELP strata_pool_copy_waits_total Times the host waited for a queued copy down.\n"
                      "# TYPE strata_pool_copy_waits_total counter\nstrata_pool_copy_waits_total %ld\n"
                      "# HELP strata_pool_copy_errors_total Copies down the device failed (those blocks are dropped).\n"
                      "# TYPE strata_pool_copy_errors_total counter\nstrata_pool_copy_errors_total %ld\n",
                      st.pool_spilled_blocks, st.pool_publish_queued, st.pool_publish_written, st.pool_spill_pending,
                      st.pool_spill_waits, st.pool_spill_errors);
    if (s->disk && n < (int)sizeof body) {
        disk_stats d;
        disk_get_stats(s->disk, &d);
        n += snprintf(body + n, sizeof body - (size_t)n,
                      "# TYPE strata_disk_blocks gauge\nstrata_disk_blocks %llu\n"
                      "# TYPE strata_disk_bytes gauge\nstrata_disk_bytes %llu\n"
                      "# TYPE strata_disk_written_bytes_total counter\nstrata_disk_written_bytes_total %llu\n"
                      "# TYPE strata_disk_read_bytes_total counter\nstrata_disk_read_bytes_total %llu\n"
                      "# TYPE strata_disk_evicted_total counter\nstrata_disk_evicted_total %llu\n"
                      "# TYPE strata_disk_quarantined_total counter\nstrata_disk_quarantined_total %llu\n"
                      "# TYPE strata_disk_write_errors_total counter\nstrata_disk_write_errors_total %llu\n",
                      (unsigned long long)d.files, (unsigned long long)d.bytes, (unsigned long long)d.write_bytes,
                      (unsigned long long)d.read_bytes, (unsigned long long)d.evicted,
                      (unsigned long long)d.quarantined, (unsigned long long)d.write_errors);
    }
    if (s->redis && n < (int)sizeof body) n += redis_metrics(s, &st, body + n, sizeof body - (size_t)n);
    if (n > (int)sizeof body - 1) n = (int)sizeof body - 1;
    http_reply_text(rep, 200, "text/plain; version=0.0.4", body, (size_t)n);
}

/* A float32 setting as the decimal it was written as (0.1, not 0.10000000149). */
static double shortest(float f) {
    char b[32];
    snprintf(b, sizeof b, "%g", f);
    return strtod(b, NULL);
}

static void get_props(server *s, const http_req *req, http_reply *rep) {
    const model_hparams *hp = &s->e->m->hp;
    json_t *cache = json_pack("{s:b,s:i,s:i,s:i,s:s?,s:i,s:s,s:I}", "prefix_cache", !s->o.no_cache, "block_tokens",
                              s->e->kv.block_tokens, "kv_blocks", s->e->kv.n_blocks, "cache_mem_mb",
                              server_pool_extra_mb(s), "cache_dir", s->disk ? s->cache_dir : NULL,
                              "cache_disk_mb", s->disk ? s->o.cache_disk_mb : 0, "kv_type", kvq_name(s->e->kv.type),
                              "kv_bytes_per_token", (json_int_t)(s->e->kv.block_bytes / s->e->kv.block_tokens));
    const sample_params *sp = &s->sampling;
    json_t *sampling = json_pack("{s:f,s:i,s:f,s:f,s:f}", "temperature", shortest(sp->temperature), "top_k", sp->top_k,
                                 "top_p", shortest(sp->top_p), "min_p", shortest(sp->min_p), "repetition_penalty",
                                 shortest(sp->repeat_penalty));
    reply_json(rep, 200,
               json_pack("{s:s,s:s,s:s,s:i,s:i,s:i,s:s,s:s?,s:o,s:o}", "model", s->model_id, "model_path",
                         s->o.model_path, "architecture", hp->arch_name, "n_ctx", s->o.ctx,
                         "parallel", s->o.parallel, "n_vocab", hp->n_vocab, "chat_template_source",
                         render_source_name(s->render), "chat_template", render_template_src(s->render), "cache",
                         cache, "default_sampling", sampling));
}

static void post_tokenize(server *s, const http_req *req, http_reply *rep) {
    json_t *body = parse_body_openai(req, rep);
    if (!body) return;
    const char *text = json_string_value(json_object_get(body, "content"));
    if (!text) {
        json_decref(body);
        reply_openai_error(rep, 400, "invalid_request_error", NULL, "'content' must be a string");
        return;
    }
    int special = json_is_true(json_object_get(body, "parse_special"));
    int32_t *ids;
    size_t n;
    strata_err err = {0};
    if (tok_encode(s->tok, text, strlen(text), special, &ids, &n, &err)) {
        json_decref(body);
        reply_openai_error(rep, 400, "invalid_request_error", NULL, "%s", err.msg);
        return;
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(arr, json_integer(ids[i]));
    free(ids);
    json_decref(body);
    reply_json(rep, 200, json_pack("{s:o}", "tokens", arr));
}

static void post_detokenize(server *s, const http_req *req, http_reply *rep) {
    json_t *body = parse_body_openai(req, rep);
    if (!body) return;
    const json_t *toks = json_object_get(body, "tokens");
    if (!json_is_array(toks)) {
        json_decref(body);
        reply_openai_error(rep, 400, "invalid_request_error", NULL, "'tokens' must be an array of token ids");
        return;
    }
    size_t len = 0, i;
    char *out = xstrdup("");
    const json_t *t;
    json_array_foreach(toks, i, t) {
        char piece[256];
        int n = json_is_integer(t) ? tok_piece(s->tok, (int32_t)json_integer_value(t), 1, piece, sizeof piece) : -1;
        if (n < 0) {
            free(out);
            json_decref(body);
            reply_openai_error(rep, 400, "invalid_request_error", NULL, "tokens[%zu] is not a token id", i);
            return;
        }
        if (n > (int)sizeof piece) n = (int)sizeof piece;
        out = xrealloc(out, len + (size_t)n + 1);
        memcpy(out + len, piece, (size_t)n);
        len += (size_t)n;
    }
    json_decref(body);
    reply_json(rep, 200, json_pack("{s:o}", "content", json_text(out, len)));
    free(out);
}

/* ---- routing ------------------------------------------------------------------- */

typedef void (*route_fn)(server *s, const http_req *req, http_reply *rep);

typedef struct route {
    const char *method, *path; /* a path ending in '/' matches every path under it */
    route_fn fn;
    int needs_model; /* answers 503 until the model is loaded */
} route;

static const route ROUTES[] = {
    {"GET", "/health", get_health, 0},
    {"GET", "/metrics", get_metrics, 1},
    {"GET", "/props", get_props, 1},
    {"GET", "/v1/models", api_openai_models, 1},
    {"GET", "/v1/models/", api_openai_model, 1}, /* /v1/models/{id}: the path is a prefix */
    {"POST", "/v1/chat/completions", api_openai_chat, 1},
    {"POST", "/v1/completions", api_openai_completions, 1},
    {"POST", "/v1/responses", api_responses_create, 1},
    {"GET", "/v1/responses/", api_responses_item, 1}, /* /v1/responses/{id}[/input_items] */
    {"DELETE", "/v1/responses/", api_responses_item, 1},
    {"POST", "/v1/messages", api_anthropic_messages, 1},
    {"POST", "/v1/messages/count_tokens", api_anthropic_count_tokens, 1},
    {"POST", "/tokenize", post_tokenize, 1},
    {"POST", "/detokenize", post_detokenize, 1},
    {"POST", "/apply-template", api_openai_apply_template, 1},
    {"GET", "/ui", ui_get, 0}, /* the page, and under /ui/ its assets and state (server/ui.c) */
    {"GET", "/ui/", ui_get, 0},
};

/* The password of "Authorization: Basic base64(user:password)", into buf:
 * what a browser sends for /ui once its user typed the key (any user
 * name). NULL when it is not that. */
static const char *basic_password(const char *auth, char *buf, size_t cap) {
    size_t n = strlen(auth + 6);
    if (strncmp(auth, "Basic ", 6) || n == 0 || n % 4 || n / 4 * 3 >= cap) return NULL;
    int len = EVP_DecodeBlock((unsigned char *)buf, (const unsigned char *)auth + 6, (int)n);
    if (len < 0) return NULL;
    len -= (auth[6 + n - 1] == '=') + (auth[6 + n - 2] == '='); /* padding decodes as zero bytes */
    buf[len] = 0;
    char *colon = memchr(buf, ':', (size_t)len);
    return colon && strlen(buf) == (size_t)len ? colon + 1 : NULL;
}

/* The key a request gives: "Authorization: Bearer K", "x-api-key: K", or
 * Basic credentials whose password is K (buf holds it then). */
static const char *given_key(const http_req *req, char *buf, size_t cap) {
    const char *auth = http_header(req, "Authorization"), *xkey = http_header(req, "x-api-key");
    if (auth && !strncmp(auth, "Bearer ", 7)) return auth + 7;
    const char *basic = auth ? basic_password(auth, buf, cap) : NULL;
    return basic ? basic : xkey;
}

const char *server_tenant(const server *s, const http_req *req) {
    char buf[512];
    const char *given = given_key(req, buf, sizeof buf);
    for (int i = 0; given && i < s->n_keys; i++)
        if (!strcmp(given, s->keys[i])) return s->keys[i];
    return NULL;
}

void server_replay_ns(const server *s, const char *tenant, const char *salt, cache_hash *ns) {
    cache_hash_root_for(ns, s->model_fp, tenant, salt);
}

void server_tenant_id(const server *s, const char *tenant, char *out, size_t cap) {
    cache_hash h;
    char hex[65];
    server_replay_ns(s, tenant, NULL, &h); /* keyed by the model too: nothing to look the key up by */
    cache_hash_hex(&h, hex);
    snprintf(out, cap, "%.12s", hex);
}

static int authorized(const server *s, const http_req *req) {
    return s->n_keys == 0 || server_tenant(s, req) != NULL;
}

/* --api-key given but naming no key (an unset shell variable expands to
 * "" or ",") must not start a server with authentication silently off. */
static int parse_keys(server *s, strata_err *err) {
    if (!s->o.api_key) return 0;
    char *list = xstrdup(s->o.api_key), *save = NULL;
    for (char *k = strtok_r(list, ",", &save); k; k = strtok_r(NULL, ",", &save)) {
        s->keys = xrealloc(s->keys, (size_t)(s->n_keys + 1) * sizeof(char *));
        s->keys[s->n_keys++] = xstrdup(k);
    }
    free(list);
    if (s->n_keys == 0)
        return strata_errf(err, STRATA_EINVAL, "--api-key '%s' names no key; refusing to start without "
                           "authentication (leave --api-key out to serve without keys)", s->o.api_key);
    return 0;
}

/* --metrics-key must name a key, and not a tenant's (a tenant holding it
 * would read every tenant's counters). */
static int check_metrics_key(const server *s, strata_err *err) {
    const char *k = s->o.metrics_key;
    if (k && !k[0])
        return strata_errf(err, STRATA_EINVAL, "--metrics-key is empty; refusing to start with /metrics open");
    for (int i = 0; k && i < s->n_keys; i++)
        if (!strcmp(k, s->keys[i]))
            return strata_errf(err, STRATA_EINVAL, "--metrics-key is also an --api-key (a tenant's key); use "
                               "a key of its own");
    return 0;
}

/* Route-level errors in the schema of the API the path belongs to. */
static void route_error(const http_req *req, http_reply *rep, int status, const char *oai_type,
                        const char *ant_type, const char *msg) {
    if (strncmp(req->path, "/v1/messages", 12) == 0)
        reply_anthropic_error(rep, status, ant_type, msg);
    else
        reply_openai_error(rep, status, oai_type, NULL, "%s", msg);
}

/* /metrics and /props describe the whole server: every tenant's request,
 * token and cache counters, the model path, the cache folder. They are
 * the operator's: with --metrics-key only that key reads them; without
 * it, the one tenant there is (no key or a single --api-key) does, and
 * with two or more tenant keys nobody does. A tenant's key gets 403. */
static int admin_allowed(const server *s, const http_req *req) {
    char buf[512];
    const char *given = given_key(req, buf, sizeof buf);
    if (s->o.metrics_key) return given && !strcmp(given, s->o.metrics_key);
    return s->n_keys <= 1 && authorized(s, req);
}

int server_is_operator(const server *s, const http_req *req) { return admin_allowed(s, req); }

/* The HTTP gate, on the headers before the body is read: with keys set,
 * every path but /health (load balancers probe it without a key) needs
 * one, known endpoint or not; /metrics and /props need the operator's;
 * /ui takes either (a tenant sees its own requests, the operator all).
 * A browser asked for /ui without a key is asked for one (Basic: the key
 * as the password). */
static int gate(void *app, const http_req *req, http_reply *rep) {
    const server *s = app;
    int admin = !strcmp(req->path, "/metrics") || !strcmp(req->path, "/props");
    int ui = !strcmp(req->path, "/ui") || !strncmp(req->path, "/ui/", 4);
    if (strcmp(req->path, "/health") == 0 || (admin ? admin_allowed(s, req) : authorized(s, req)) ||
        (ui && admin_allowed(s, req)))
        return 0;
    if (ui) {
        route_error(req, rep, 401, "authentication_error", "authentication_error", "missing or invalid API key");
        rep->extra_name = "WWW-Authenticate";
        rep->extra_value = xstrdup("Basic realm=\"Strata: any user name, the API key as password\", charset=\"UTF-8\"");
        return 1;
    }
    if (admin && server_tenant(s, req))
        route_error(req, rep, 403, "permission_error", "permission_error",
                    s->o.metrics_key ? "this endpoint reports every tenant's counters: it needs the --metrics-key"
                                     : "this endpoint reports every tenant's counters: with several API keys it "
                                       "is served only under --metrics-key");
    else
        route_error(req, rep, 401, "authentication_error", "authentication_error", "missing or invalid API key");
    return 1;
}

static void handle(void *app, const http_req *req, http_reply *rep) {
    server *s = app;
    int path_known = 0;
    for (size_t i = 0; i < sizeof ROUTES / sizeof ROUTES[0]; i++) {
        const route *r = &ROUTES[i];
        size_t len = strlen(r->path);
        if (r->path[len - 1] == '/' ? strncmp(req->path, r->path, len) != 0 || !req->path[len]
                                    : strcmp(req->path, r->path) != 0)
            continue;
        path_known = 1;
        if (strcmp(req->method, r->method) != 0) continue;
        if (r->needs_model && !atomic_load(&s->ready)) {
            route_error(req, rep, 503, "server_busy", "overloaded_error", "the model is still loading");
            rep->retry_after = 2;
            return;
        }
        r->fn(s, req, rep);
        return;
    }
    char msg[256];
    strata_fmt(msg, sizeof msg, path_known ? "method %s not allowed on %s" : "no endpoint %s %s", req->method,
             req->path);
    route_error(req, rep, path_known ? 405 : 404, "invalid_request_error",
                path_known ? "invalid_request_error" : "not_found_error", msg);
}

/* ---- start and stop ---------------------------------------------------------------- */

/* Places one client address may hold: by default 3/4 of them, so that
 * one address (idle or trickling connections) never holds every place. */
static int client_conns(const server_opts *o) {
    if (o->max_client_conns >= 0) return o->max_client_conns;
    int n = o->max_conns * 3 / 4;
    return n > 0 ? n : 1;
}

/* The reported id: the first --alias, else the file name without .gguf;
 * every alias is a name the server answers to. */
static void set_model_id(server *s) {
    char *list = s->o.alias ? xstrdup(s->o.alias) : NULL, *save = NULL;
    for (char *a = list ? strtok_r(list, ",", &save) : NULL; a; a = strtok_r(NULL, ",", &save)) {
        s->aliases = xrealloc(s->aliases, (size_t)(s->n_aliases + 1) * sizeof(char *));
        s->aliases[s->n_aliases++] = xstrdup(a);
    }
    free(list);
    if (s->n_aliases) {
        snprintf(s->model_id, sizeof s->model_id, "%s", s->aliases[0]);
        return;
    }
    const char *base = strrchr(s->o.model_path, '/');
    snprintf(s->model_id, sizeof s->model_id, "%s", base ? base + 1 : s->o.model_path);
    char *dot = strstr(s->model_id, ".gguf");
    if (dot) *dot = 0;
}

int server_knows_model(const server *s, const char *name) {
    if (!name || !*name || !s->o.strict_model || !strcmp(name, s->model_id)) return 1;
    for (int i = 0; i < s->n_aliases; i++)
        if (!strcmp(name, s->aliases[i])) return 1;
    return 0;
}

/* The disk tier under --cache-dir (default $XDG_CACHE_HOME/strata/kv or
 * ~/.cache/strata/kv). Any failure leaves the server memory-only, with a
 * warning: a cache is never a reason not to serve. */
/* The disk tier's folder: --cache-dir, else under the user's cache
 * directory; -1 when there is none. */
static int cache_dir_path(const server *s, char *out, size_t cap) {
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (s->o.cache_dir) snprintf(out, cap, "%s", s->o.cache_dir);
    else if (xdg && *xdg) snprintf(out, cap, "%s/strata/kv", xdg);
    else if (home && *home) snprintf(out, cap, "%s/.cache/strata/kv", home);
    else return -1;
    return 0;
}

/* The exact-replay map and the Responses store live beside the blocks,
 * one file each per model (kind: "replay", "responses"). */
static void state_path(const server *s, const char *kind, char *out, size_t cap) {
    char hex[65];
    cache_hash h;
    memcpy(h.b, s->model_fp, 32);
    cache_hash_hex(&h, hex);
    snprintf(out, cap, "%s/%s-%.16s.bin", s->cache_dir, kind, hex);
}

static void open_disk(server *s, const uint8_t fp[32]) {
    char path[1200];
    memcpy(s->model_fp, fp, 32);
    if (s->o.no_cache || s->o.no_cache_disk) return;
    if (cache_dir_path(s, s->cache_dir, sizeof s->cache_dir)) return;
    disk_opts d = {.dir = s->cache_dir, .budget_bytes = (uint64_t)s->o.cache_disk_mb << 20,
                   .block_tokens = (uint32_t)s->e->kv.block_tokens, .block_bytes = s->e->kv.block_bytes,
                   .kv_dtype = disk_kv_dtype(s->e->kv.type)};
    memcpy(d.model_fp, fp, 32);
    strata_err err = {0};
    if (disk_open(&s->disk, &d, &err)) {
        log_warn("cache: disk tier off, serving from memory only: %s", err.msg);
        s->disk = NULL;
        return;
    }
    state_path(s, "replay", path, sizeof path);
    if (replay_load(s->replay, path, fp) == 0) log_info("cache: exact-replay map loaded from %s", path);
    state_path(s, "responses", path, sizeof path);
    if (resp_store_load(s->responses, path, fp) == 0)
        log_info("responses: %zu stored responses loaded from %s", resp_store_count(s->responses), path);
    state_path(s, "dates", path, sizeof path); /* saved at each change (dates.c) */
    s->dates = dates_new(path);
    state_path(s, "recent", path, sizeof path);
    int bad = 0;
    if (s->recent && recent_load(s->recent, path, fp, &bad) == 0)
        log_info("ui: request records loaded from %s%s", path, bad ? " (some lines skipped: not records)" : "");
    disk_stats st;
    disk_get_stats(s->disk, &st);
    log_info("cache: disk tier %s: %llu blocks (%.1f MiB) of this model, budget %d MiB, %llu quarantined",
             s->cache_dir, (unsigned long long)st.files, st.bytes / 1048576.0, s->o.cache_disk_mb,
             (unsigned long long)st.quarantined);
    if (st.other_kv_type)
        log_warn("cache: disk tier %s: %llu block files hold KV type %s, not this server's %s (--kv-type): skipped, "
                 "never served (a server started with --kv-type %s uses them)",
                 s->cache_dir, (unsigned long long)st.other_kv_type, disk_kv_dtype_name(st.other_kv_dtype),
                 kvq_name(s->e->kv.type), disk_kv_dtype_name(st.other_kv_dtype));
}

/* The RAM tier under a GPU pool (--cache-ram-mb, pinned host memory):
 * its memory is refused or too small for a block: the server does not
 * start (the flag asked for it). */
static int open_ram(server *s, strata_err *err) {
    if (s->o.no_cache || !s->e->kv.dev || s->o.cache_ram_mb <= 0) return 0;
    ram_tier_opts ro = {.budget_bytes = (size_t)s->o.cache_ram_mb << 20, .block_bytes = s->e->kv.block_bytes,
                        .block_tokens = s->e->kv.block_tokens, .dev = s->e->kv.dev};
    const model_hparams *hp = &s->e->m->hp;
    ro.attn_per_pos = policy_attn_cost_per_pos(hp->n_layer, hp->n_embd, hp->n_head, hp->n_head_kv, hp->head_dim, hp->n_ff);
    int rc = ram_tier_open(&s->ram, &ro, err);
    if (rc) return rc;
    ram_tier_stats st;
    ram_tier_get_stats(s->ram, &st);
    log_info("cache: RAM tier %d MiB of pinned host memory: %d blocks, below the GPU pool of %d blocks",
             s->o.cache_ram_mb, st.slots, s->e->kv.n_blocks);
    return 0;
}

/* The shared tier (--cache-redis). A URL that does not parse, or a Redis
 * that cannot be reached or refuses the password at start, stops the start
 * only under --cache-redis-required; otherwise the server says why and
 * serves from memory and disk (a bad URL: without the tier; Redis down:
 * the tier keeps reconnecting in the background). */
static int open_redis(server *s, const uint8_t fp[32], strata_err *err) {
    if (s->o.no_cache || !s->o.cache_redis) return 0;
    redis_tier_opts ro = {.url = s->o.cache_redis, .timeout_ms = s->o.cache_redis_timeout_ms,
                          .ttl_s = s->o.cache_redis_ttl_s,
                          .block_tokens = (uint32_t)s->e->kv.block_tokens, .block_bytes = s->e->kv.block_bytes,
                          .kv_dtype = disk_kv_dtype(s->e->kv.type)};
    memcpy(ro.model_fp, fp, 32);
    strata_err why = {0};
    int rc = redis_tier_open(&s->redis, &ro, &why);
    if (rc) {
        if (s->o.cache_redis_required) return strata_errf(err, rc, "%s (--cache-redis-required)", why.msg);
        log_warn("%s; serving without the shared tier (memory and disk only)", why.msg);
        return 0;
    }
    redis_tier_stats st;
    redis_tier_get_stats(s->redis, &st);
    if (!st.up && s->o.cache_redis_required) {
        redis_tier_close(s->redis);
        s->redis = NULL;
        return strata_errf(err, STRATA_EIO, "redis cache: not usable at start, see the warning above "
                           "(--cache-redis-required)");
    }
    return 0;
}

/* KV memory the slots may take when --ctx is left to the model (its
 * training context, at least SERVER_MIN_CTX): agents need long contexts
 * (Claude Code's first prompt is ~13k tokens), memory is the limit. */
#define SERVER_KV_BUDGET_MB 4096
#define SERVER_KV_BUDGET_TEXT "4 GiB"
#define SERVER_MIN_CTX 32768

static int load_model(server *s, strata_err *err) {
    uint8_t fp[32];
    char memo_dir[1100] = "";
    if (!s->o.no_cache && !s->o.no_cache_disk && cache_dir_path(s, memo_dir, sizeof memo_dir) == 0)
        fs_mkdir_p(memo_dir); /* a failure is the disk tier's to report */
    int rc = cache_model_fingerprint(s->o.model_path, memo_dir[0] ? memo_dir : NULL, fp, err);
    if (rc) return rc;
    engine_params ep = {.model_path = s->o.model_path, .n_threads = s->o.threads, .max_batch = 512,
                        .device = s->o.device,
                        .block_tokens = s->o.block_tokens,
                        .n_ctx = s->o.ctx * s->o.parallel, /* --ctx 0: the training context */
                        .n_seq = s->o.parallel, .kv_budget_mb = SERVER_KV_BUDGET_MB, .min_ctx = SERVER_MIN_CTX,
                        .extra_kv_mb = server_pool_extra_mb(s),
                        /* the scheduler's MTP drafter, if the model has the block (sched__mtp_setup) */
                        .mtp_draft = s->o.spec_drafter == SPEC_DRAFTER_LOOKUP ? 0 : s->o.spec_draft};
    rc = kvq_parse(s->o.kv_type, &ep.kv_type, err);
    if (!rc) rc = engine_open(&s->e, &ep, err);
    if (!rc) rc = tok_load(&s->tok, s->e->m->gguf, err);
    if (rc) return rc;
    /* Blocks are the backend's own: the same file on another backend is
     * another model to every tier ("cpu" leaves fp as it was). */
    cache_numerics_fingerprint(fp, engine_numerics(s->e), fp);
    if (s->o.ctx <= 0) {
        s->o.ctx = s->e->ctx_per_seq;
        size_t state = engine_seq_state_bytes(s->e->m);
        const mtp_cost *mc = &s->e->mtp_counted;
        char rs[96] = "", ms[128] = "";
        if (state) snprintf(rs, sizeof rs, "; recurrent state %.1f MiB per sequence, counted in the budget", state / 1048576.0);
        if (mc->token_bytes)
            snprintf(ms, sizeof ms,
                     "; the MTP drafter's K/V %.1f KiB a token plus %.1f MiB per sequence, counted in the budget",
                     mc->token_bytes / 1024.0, mc->seq_bytes / 1048576.0);
        int train = s->e->m->hp.n_ctx_train;
        log_info("context: %d tokens per sequence (the model's training context is %d%s; --ctx to change)%s%s",
                 s->o.ctx, train,
                 s->o.ctx < train || s->o.ctx < SERVER_MIN_CTX ? ", capped so the slots' KV fits " SERVER_KV_BUDGET_TEXT
                 : s->o.ctx > train ? "; agent prompts need more: past it the model extrapolates and may do worse"
                                    : "", rs, ms);
    }
    char how[512];
    s->sampling = sampling_defaults(s->e->m->gguf, &s->o.sampling, how, sizeof how);
    log_info("sampling defaults (for the fields requests leave out): %s", how);
    render_opts ro = {.template_file = s->o.template_file};
    if ((rc = render_new(&s->render, s->e->m->gguf, s->tok, &ro, err))) return rc;
    if (s->o.trace_path && !(s->trace = fopen(s->o.trace_path, "a")))
        return strata_errf(err, STRATA_EIO, "--trace %s: cannot open for appending", s->o.trace_path);
    open_disk(s, fp);
    if (!s->dates && !s->o.no_cache) s->dates = dates_new(NULL);
    if ((rc = open_redis(s, fp, err)) || (rc = open_ram(s, err))) return rc;
    sched_opts so = {.n_slots = s->o.parallel, .ctx_per_slot = s->o.ctx, .queue_max = s->o.queue_max,
                     .chunk = 256, .prefix_cache = !s->o.no_cache, .trace = s->trace, .recent = s->recent,
                     .disk = s->disk, .ram = s->ram,
                     .redis = s->redis, .snap_every_blocks = s->o.snap_blocks,
                     .snap_budget_bytes = (size_t)s->o.snap_mb << 20, .spec_draft = s->o.spec_draft, .spec_drafter = s->o.spec_drafter,
                     .default_scope = {SCOPE_FULL, 0}};
    if (s->o.scope && policy_scope_parse(s->o.scope, &so.default_scope))
        return strata_errf(err, STRATA_EINVAL, "--prefix-cache-scope %s: must be off, full, auto, auto:N (1-16) or a token count",
                           s->o.scope);
    memcpy(so.model_fp, fp, sizeof fp);
    log_info("prefix cache: %s; KV pool %d blocks of %d tokens, K/V as %s (%.1f KiB a token; %d MiB beyond the "
             "slots for cached prefixes)",
             s->o.no_cache ? "off" : "live tier", s->e->kv.n_blocks, s->e->kv.block_tokens, kvq_name(s->e->kv.type),
             (double)s->e->kv.block_bytes / s->e->kv.block_tokens / 1024.0,
             server_pool_extra_mb(s));
    if (s->e->kv.dev)
        log_info("device: %s; the live KV pool in its memory (%.1f MiB), not yet verified on a GPU",
                 engine_device(s->e), (double)s->e->kv.glob_bytes * s->e->kv.n_blocks / 1048576.0);
    else /* replicas share disk and Redis blocks only under the same numerics */
        log_info("device: %s; numerics id \"%s\"", engine_device(s->e), engine_numerics(s->e));
    if (s->e->kv.swa_layer)
        log_info("sliding window: %d positions; its layers' K/V in %d slots of one block (%.1f MiB), the other "
                 "layers' in every block (%.1f KiB a token)", s->e->kv.n_swa, s->e->kv.n_slots,
                 (double)s->e->kv.swa_bytes * s->e->kv.n_slots / 1048576.0,
                 (double)s->e->kv.glob_bytes / s->e->kv.block_tokens / 1024.0);
    return sched_new(&s->sch, s->e, s->tok, &so, err);
}

int server_start(server **out, const server_opts *o, strata_err *err) {
    *out = NULL;
    server *s = xcalloc(1, sizeof *s);
    s->o = *o;
    s->started_at = (long)time(NULL);
    s->boot_id = (long long)(clock_wall_s() * 1000);
    s->replay = replay_new(4096);
    s->diag = diag_new();
    s->recent = recent_new(o->ui_records);
    s->responses = resp_store_new(RESP_STORE_ENTRIES, (size_t)RESP_STORE_MB << 20);
    set_model_id(s);
    http_opts ho = {.host = o->host, .port = o->port, .max_body = (size_t)o->max_body,
                    .timeout_s = o->idle_timeout, .header_timeout_s = o->header_timeout,
                    .max_conns = o->max_conns, .max_client_conns = client_conns(o), .cors = o->cors, .gate = gate};
    int rc = parse_keys(s, err);
    if (!rc) rc = check_metrics_key(s, err);
    if (!rc) rc = http_start(&s->http, &ho, handle, s, err); /* /health answers 503 while loading */
    if (!rc) {
        log_info("listening on http://%s:%d, loading %s", o->host, http_port(s->http), o->model_path);
        rc = load_model(s, err);
    }
    if (rc) {
        server_stop(s);
        return rc;
    }
    atomic_store(&s->ready, 1);
    log_info("ready: model=%s arch=%s ctx=%d parallel=%d chat_template=%s", s->model_id,
             s->e->m->hp.arch_name, s->o.ctx, o->parallel, render_format_name(s->render));
    *out = s;
    return 0;
}

/* A shutdown step that took more than a second is named in the log, so a
 * slow stop shows where its time went. Returns the time now. */
static double stop_step_done(const char *step, double t0) {
    double t = clock_ms();
    if (t - t0 > 1000) log_warn("shutdown: %s took %.1f s", step, (t - t0) / 1000);
    return t;
}

void server_stop(server *s) {
    if (!s) return;
    atomic_store(&s->ready, 0);
    double t = clock_ms();
    http_quiesce(s->http);     /* no new connections */
    if (s->sch) sched_cancel_all(s->sch); /* running requests end as cancelled */
    t = stop_step_done("cancelling requests", t);
    http_stop(s->http);        /* waits for connection threads, which see the ends */
    t = stop_step_done("closing connections", t);
    sched_free(s->sch);
    t = stop_step_done("stopping the scheduler", t);
    if (s->disk) { /* the replay map must match the blocks it points into */
        char path[1200];
        state_path(s, "replay", path, sizeof path);
        if (replay_save(s->replay, path, s->model_fp)) log_warn("cache: could not save %s", path);
        state_path(s, "responses", path, sizeof path);
        if (resp_store_save(s->responses, path, s->model_fp)) log_warn("responses: could not save %s", path);
        state_path(s, "recent", path, sizeof path); /* the page shows the requests before a restart */
        if (recent_save(s->recent, path, s->model_fp)) log_warn("ui: could not save %s", path);
    }
    t = stop_step_done("saving the replay map, responses and recent requests", t);
    disk_close(s->disk);       /* drains queued block writes */
    t = stop_step_done("draining disk writes", t);
    redis_tier_close(s->redis); /* sends what is queued, for 2 s at most */
    stop_step_done("sending to Redis", t);
    ram_tier_close(s->ram);     /* after the scheduler: its store wrote here */
    if (s->trace) fclose(s->trace);
    replay_free(s->replay);
    diag_free(s->diag);
    dates_free(s->dates);
    recent_free(s->recent);
    resp_store_free(s->responses);
    for (int i = 0; i < s->n_keys; i++) free(s->keys[i]);
    free(s->keys);
    for (int i = 0; i < s->n_aliases; i++) free(s->aliases[i]);
    free(s->aliases);
    render_free(s->render);
    tok_free(s->tok);
    engine_close(s->e);
    free(s);
}
