/* serve.c - `strata serve`: the HTTP server until SIGINT/SIGTERM. */
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "base/stop.h"
#include "cache/policy.h"
#include "cli/args.h"
#include "cli/cli.h"
#include "server/server.h"

static int parse_drafter(const char *v, int *out) {
    static const char *names[] = {"auto", "lookup", "mtp"}; /* SPEC_DRAFTER_* order */
    for (int i = 0; i < 3; i++)
        if (!strcmp(v, names[i])) return *out = i, 0;
    return -1;
}

int cli_serve(int argc, char **argv) {
    server_opts o = {.host = "127.0.0.1", .port = 8080, .parallel = 4, .ctx = 0,
                     .queue_max = 64, .queue_timeout = 60, .idle_timeout = 60, .max_conns = 256,
                     .max_client_conns = -1, .header_timeout = 10,
                     .max_body = 8 << 20, .cache_mem_mb = 1024, .cache_disk_mb = 8192,
                     .cache_redis_timeout_ms = 100, .cache_redis_ttl_s = (int)POLICY_SHARED_TTL_S,
                     .snap_blocks = POLICY_SNAP_EVERY_BLOCKS, .snap_mb = POLICY_SNAP_MB, .ui_records = 256,
                     .spec_draft = SERVER_SPEC_DRAFT, .sampling = SAMPLING_FLAGS_UNSET};
    int help = 0, verbose = 0, max_body_mb = 8, no_spec = 0;
    const char *log_file = NULL, *drafter = "auto";
    const arg_spec specs[] = {
        ARG_SPEC_MODEL(&o.model_path),
        {"--host", NULL, ARG_STR, &o.host, 0, -1, "address to listen on (127.0.0.1)"},
        {"--port", NULL, ARG_INT, &o.port, 0, 65535, "port (8080; 0 = any free port)"},
        {"--parallel", "-np", ARG_INT, &o.parallel, 1, 256, "sequences generated at once (4)"},
        {"--ctx", "-c", ARG_INT, &o.ctx, 64, 1 << 22,
         "context tokens per sequence (the model's training context, capped so the slots' KV fits 4 GiB)"},
        ARG_SPEC_THREADS(&o.threads),
        {"--queue", NULL, ARG_INT, &o.queue_max, 0, 1 << 20, "requests waiting for a slot before 503 (64)"},
        {"--queue-timeout", NULL, ARG_INT, &o.queue_timeout, 0, 86400,
         "seconds a request may wait in the queue before 503 (60; 0 = no limit)"},
        {"--max-connections", NULL, ARG_INT, &o.max_conns, 1, 65536, "open connections at most, each a thread (256)"},
        {"--max-client-connections", NULL, ARG_INT, &o.max_client_conns, 0, 65536,
         "open connections from one client address at most (3/4 of --max-connections; 0 = no limit)"},
        {"--header-timeout", NULL, ARG_INT, &o.header_timeout, 1, 3600,
         "seconds a new connection has to send its request header before it is closed (10)"},
        {"--idle-timeout", NULL, ARG_INT, &o.idle_timeout, 1, 86400, "seconds before an idle connection is closed (60)"},
        {"--max-body-mb", NULL, ARG_INT, &max_body_mb, 1, 4096, "request body limit in MiB (8)"},
        {"--max-output-tokens", NULL, ARG_INT, &o.max_output, 0, 1 << 30,
         "tokens a reply may have at most, whatever the request asks (0 = the context's end)"},
        {"--api-key", NULL, ARG_STR, &o.api_key, 0, -1, "require one of these comma-separated keys (each a cache tenant)"},
        {"--metrics-key", NULL, ARG_STR, &o.metrics_key, 0, -1,
         "the key /metrics and /props need; tenants' keys get 403 (with 2+ --api-key keys they are closed without it)"},
        {"--alias", NULL, ARG_STR, &o.alias, 0, -1,
         "comma-separated names of the model; the first is the id reported (file name)"},
        {"--strict-model", NULL, ARG_FLAG, &o.strict_model, 0, -1,
         "refuse requests naming another model (any name is served by default)"},
        {"--strict-requests", NULL, ARG_FLAG, &o.strict_requests, 0, -1,
         "refuse (400) a request with a part the server cannot honour, instead of serving the rest and naming it "
         "in the x-strata-ignored header"},
        {"--cors", NULL, ARG_FLAG, &o.cors, 0, -1, "allow cross-origin requests"},
        {"--chat-template-file", NULL, ARG_STR, &o.template_file, 0, -1, "Jinja chat template overriding the model's"},
        {"--cache-mem-mb", NULL, ARG_INT, &o.cache_mem_mb, 0, 1 << 20, "KV memory kept for cached prefixes (1024)"},
        {"--cache-ram-mb", NULL, ARG_INT, &o.cache_ram_mb, 0, 1 << 20,
         "RAM tier; on the CPU backend it is the same pool, added to --cache-mem-mb; with --device cuda "
         "pinned host memory below the GPU's pool (0)"},
        {"--device", NULL, ARG_STR, &o.device, 0, -1,
         "cpu, or cuda: sequences and the live KV pool on the GPU (llama, qwen2, qwen3; not yet run on a GPU) (cpu)"},
        {"--no-prefix-cache", NULL, ARG_FLAG, &o.no_cache, 0, -1, "recompute every prompt from scratch"},
        {"--cache-dir", NULL, ARG_STR, &o.cache_dir, 0, -1, "disk tier folder (~/.cache/strata/kv)"},
        {"--kv-type", NULL, ARG_STR, &o.kv_type, 0, -1, KVQ_HELP},
        {"--cache-block-tokens", NULL, ARG_INT, &o.block_tokens, 4, 4096, "tokens per KV block (64)"},
        {"--prefix-cache-scope", NULL, ARG_STR, &o.scope, 0, -1, "off|full|auto|auto:N|TOKENS (full)"},
        {"--cache-disk-mb", NULL, ARG_INT, &o.cache_disk_mb, 1, 1 << 30, "disk tier budget in MiB (8192)"},
        {"--no-cache-disk", NULL, ARG_FLAG, &o.no_cache_disk, 0, -1, "keep the cache in memory only"},
        {"--cache-redis", NULL, ARG_STR, &o.cache_redis, 0, -1,
         "shared tier for replicas: redis://[:password@]host[:port][/db] (off)"},
        {"--cache-redis-timeout-ms", NULL, ARG_INT, &o.cache_redis_timeout_ms, 1, 60000,
         "longest wait on Redis per connect, probe or stalled read/write (100)"},
        {"--cache-redis-required", NULL, ARG_FLAG, &o.cache_redis_required, 0, -1,
         "refuse to start when --cache-redis is unusable (bad URL, down, wrong password); else serve without it"},
        {"--cache-redis-ttl", NULL, ARG_INT, &o.cache_redis_ttl_s, 0, 30 * 86400,
         "seconds a shared-tier key lives after its last use; retention marks lengthen it (3600; 0 = no expiry)"},
        {"--cache-snapshot-blocks", NULL, ARG_INT, &o.snap_blocks, 0, 1 << 20,
         "recurrent models: a state snapshot every N blocks of a prompt, besides message boundaries and ends (32; 0 = none)"},
        {"--cache-snapshot-mb", NULL, ARG_INT, &o.snap_mb, 1, 1 << 20,
         "recurrent models: memory for state snapshots in MiB (512)"},
        {"--ui-records", NULL, ARG_INT, &o.ui_records, 0, 16384,
         "requests the /ui page shows, kept in memory and beside the disk tier (256; 0 = none, no page)"},
        {"--spec-draft", NULL, ARG_INT, &o.spec_draft, 0, 64,
         "speculative decoding: tokens drafted per step from the sequence's own context, verified in the same "
         "forward pass; the output is the same bytes (8; 0 = off)"},
        {"--no-speculative", NULL, ARG_FLAG, &no_spec, 0, -1, "no speculative decoding (--spec-draft 0)"},
        {"--spec-drafter", NULL, ARG_STR, &drafter, 0, -1,
         "auto: prompt lookup, and on a model with an MTP block (qwen35) the block where lookup finds nothing; "
         "lookup; mtp: the block alone (auto)"},
        {"--temp", NULL, ARG_FLOAT, &o.sampling.temp, 0, 2,
         "temperature for requests that set none (the model file's general.sampling.temp, else 1; 0 = greedy)"},
        {"--top-k", NULL, ARG_INT, &o.sampling.top_k, 0, 1 << 30,
         "top-k for requests that set none (the model file's, else 0 = off)"},
        {"--top-p", NULL, ARG_FLOAT, &o.sampling.top_p, 0, 1, "top-p for requests that set none (the model file's, else 1 = off)"},
        {"--min-p", NULL, ARG_FLOAT, &o.sampling.min_p, 0, 1, "min-p for requests that set none (the model file's, else 0 = off)"},
        {"--repeat-penalty", NULL, ARG_FLOAT, &o.sampling.repeat_penalty, 0.01, 10,
         "repetition penalty for requests that set none (the model file's, else 1 = off)"},
        {"--trace", NULL, ARG_STR, &o.trace_path, 0, -1, "append one JSONL line per request to FILE"},
        {"--log-file", NULL, ARG_STR, &log_file, 0, -1, "append log lines to FILE instead of stderr"},
        {"--verbose", "-v", ARG_FLAG, &verbose, 0, -1, "debug log lines too"},
        ARG_SPEC_HELP(&help),
    };
    int n_specs = (int)(sizeof specs / sizeof specs[0]);
    int rc_args = args_cli("serve", "-m MODEL [options]", specs, n_specs, argc, argv, &help);
    if (rc_args >= 0) return rc_args;
    strata_err err = {0};
    if (!o.model_path) {
        fprintf(stderr, "strata serve: -m MODEL is required\n");
        return 2;
    }
    o.max_body = (long)max_body_mb << 20;
    if (no_spec) o.spec_draft = 0;
    if (parse_drafter(drafter, &o.spec_drafter)) {
        fprintf(stderr, "strata serve: --spec-drafter %s: expected auto, lookup or mtp\n", drafter);
        return 2;
    }
    if (verbose) g_log_level = LOG_DEBUG;
    if (log_file && log_to_file(log_file)) {
        fprintf(stderr, "strata serve: --log-file %s: cannot open for appending\n", log_file);
        return 2;
    }
    stop_on_signals();
    server *s;
    if (server_start(&s, &o, &err)) {
        fprintf(stderr, "strata serve: %s\n", err.msg);
        return 1;
    }
    int sig = stop_wait();
    log_info("signal %d: shutting down (cancelling running requests; a second signal exits at once)", sig);
    server_stop(s);
    log_info("stopped");
    return 0;
}
