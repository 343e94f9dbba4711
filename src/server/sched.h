/* sched.h - the scheduler: one thread that owns the engine and runs every
 * admitted request's sequence in shared batches.
 *
 * Each step batches one decode token of every generating sequence with
 * prompt chunks of sequences still prefilling (continuous batching), so a
 * long prefill never stalls other streams for more than a chunk. Requests
 * wait in a bounded FIFO queue for a free slot (--parallel). Consumers (HTTP
 * threads) read generated tokens as they come, and may cancel; a cancelled
 * request leaves the batch at the next step and frees its slot.
 * Does not: tokenize, render, or format replies (server/api_*.c). */
#ifndef STRATA_SCHED_H
#define STRATA_SCHED_H

#include <stdint.h>
#include <stdio.h>

#include "base/err.h"
#include "cache/disk.h"
#include "cache/ram_tier.h"
#include "cache/redis_tier.h"
#include "cache/policy.h"
#include "model/engine.h"
#include "model/sample.h"
#include "server/recent.h"
#include "text/jsonschema.h"
#include "text/tokenizer.h"
#include "text/toolcall.h"

typedef enum {
    FINISH_NONE = 0, /* still running */
    FINISH_STOP,     /* end-of-generation token */
    FINISH_LENGTH,   /* max_tokens or the context reached */
    FINISH_CANCELLED,
    FINISH_ERROR,
} sched_finish;

typedef struct sched sched;
typedef struct sched_req sched_req;

typedef struct sched_opts {
    int n_slots;     /* sequences generating at once */
    int ctx_per_slot;/* most tokens (prompt + generated) per sequence */
    int queue_max;   /* requests waiting for a slot before 503 */
    int chunk;       /* most prompt tokens per sequence per step */
    int prefix_cache;      /* reuse KV blocks of earlier prompts (live tier) */
    uint8_t model_fp[32];  /* model fingerprint, in every block hash */
    FILE *trace;           /* one JSONL line per finished request, or NULL */
    recent_ring *recent;   /* records of recent requests (the trace line's source), or NULL */
    disk_store *disk;      /* disk tier below the live one, or NULL */
    redis_tier *redis;     /* shared tier below the disk one, or NULL */
    ram_tier *ram;         /* a GPU pool's RAM tier, first below the live one, or NULL */
    cache_scope default_scope; /* for jobs whose scope is SCOPE_DEFAULT */
    int snap_every_blocks;     /* recurrent models: a state snapshot every N blocks (0: none) */
    size_t snap_budget_bytes;  /* recurrent models: memory for snapshots */
    /* Speculative decoding: most tokens drafted per step and sequence by
     * prompt lookup (model/draft.h) and verified in the same forward
     * pass; the output is the same bytes either way. 0: off. */
    int spec_draft;
    /* Where drafts come from: NULL is prompt lookup (draft_lookup, with
     * draft_ctx unused); tests plug in drafters that are right or wrong
     * where they choose. Returns how many of max_draft it wrote. */
    int (*draft)(void *draft_ctx, const int32_t *toks, int n, int max_draft, int32_t *out);
    void *draft_ctx;
    /* Which drafter a request without a prediction gets (--spec-drafter):
     * AUTO, prompt lookup and, on a model with an MTP block (qwen35), the
     * block where lookup finds nothing; LOOKUP only; MTP only (the block,
     * where the model has one). */
    int spec_drafter;
} sched_opts;

enum { SPEC_DRAFTER_AUTO = 0, SPEC_DRAFTER_LOOKUP, SPEC_DRAFTER_MTP };

typedef struct sched_job {
    const int32_t *prompt;
    int n_prompt;
    sample_params sampling;
    int max_tokens;
    int n_logprobs; /* > 0: keep that many top logprobs per generated token */
    int ignore_eos; /* end-of-generation tokens are never sampled: the reply runs to max_tokens */
    int no_speculative; /* no speculative decoding for this request ("speculative": false) */
    const int32_t *prediction; /* the predicted output's tokens (OpenAI "prediction"; copied), drafted from first */
    int n_prediction;
    const char *cache_salt; /* tenant isolation: different salts share no block */
    const char *tenant;     /* the API key's tenant, salted in as well (NULL: none) */
    int json_mode;          /* constrain sampling to one valid JSON object */
    const char *json_prefix;/* JSON already written (in the prompt) before generation */
    json_schema *schema;    /* json_mode: the output also validates against it (referenced), or NULL */
    json_schema *call_schema; /* native tool format: each call validates (referenced; text/callguard.h), or NULL */
    tc_format call_format;    /* ...in this format */
    cache_scope scope;      /* what of the prompt is published for reuse (policy.h) */
    const int *bounds;      /* ascending positions where messages start (auto scope cuts there); may be NULL */
    int n_bounds;
    cache_mark marks[POLICY_MAX_MARKS]; /* retention: anchor, cache_control breakpoints */
    int n_marks;
    const char *held_out;   /* a static rule name for the trace (server/normalize.h), or NULL */
    const char *ignored;    /* for the trace: what the request asked for and did not get (copied), or NULL */
    long recent_id;         /* its record in sched_opts.recent, closed when it ends (0: none) */
    /* Several choices of one request (OpenAI n > 1): the first keeps its
     * prompt's partial last block cached as soon as the prompt is in
     * (store_keep_tail), so the later ones, submitted after that, attach
     * the whole prompt; a later choice belongs to a request already
     * admitted, so it is queued even beyond queue_max (never EBUSY). */
    int share_prompt;
    int later_choice;
} sched_job;

/* What a consumer sees of its request. */
typedef struct sched_status {
    int n_prompt, n_prompt_done;
    int n_cached;      /* prompt tokens whose KV came from the cache */
    int n_cached_disk; /* of which loaded from the disk tier */
    int n_cached_redis;/* of which loaded from the shared tier on Redis */
    int n_cached_ram;  /* of which loaded from the RAM tier under a GPU pool */
    int attached;      /* the cached prefix is known (n_cached and the next two are final) */
    int n_cache_new;   /* prompt tokens this request newly writes into the cache */
    int n_cache_new_1h;/* of which under a mark kept an hour or more */
    int n_generated;
    double t_first_out, t_last_out; /* ms (clock_ms): when the first and the latest token were produced
                                     * (a reader may take several at once: its own clock says when it read) */
    int pred_drafted, pred_accepted; /* tokens drafted from the request's prediction; of them accepted */
    sched_finish finish;
    char error[256];
} sched_status;

/* A generated token and, if asked, its logprob and the top alternatives. */
typedef struct sched_token {
    int32_t id;
    float logprob;
    int n_top;
    int32_t top_ids[20];
    float top_logprobs[20];
} sched_token;

int sched_new(sched **out, engine *e, const tokenizer *tok, const sched_opts *o, strata_err *err);
/* Stops the thread; running requests finish as cancelled. NULL is fine. */
void sched_free(sched *s);

/* Queues a job. STRATA_ERANGE: prompt too long for a slot's context;
 * STRATA_EBUSY: the queue is full (never for a later_choice). The caller
 * owns one reference. */
int sched_submit(sched *s, const sched_job *job, sched_req **out, strata_err *err);

/* Waits up to timeout_ms for tokens past index `from` (or the end), copies
 * at most cap of them to out and returns how many; fills st. */
int sched_wait(sched_req *r, int from, sched_token *out, int cap, int timeout_ms, sched_status *st);
/* Waits up to timeout_ms for the request to leave the queue: 0 once it
 * holds a slot or has finished, STRATA_EBUSY while it still waits. */
int sched_wait_admitted(sched_req *r, int timeout_ms);
/* Waits up to timeout_ms until the request's cached prefix is known (or
 * it finished), filling st; 1 when known. */
int sched_wait_attached(sched_req *r, int timeout_ms, sched_status *st);
/* Takes the request out of the queue if it is still there (it finishes as
 * cancelled) and returns 1; 0 if it was admitted or had finished. */
int sched_dequeue(sched_req *r);
/* Asks the scheduler to stop the request soon (within one step); a
 * request still queued leaves the queue at once, freeing its place. */
void sched_cancel(sched_req *r);
/* Cancels every running and queued request (shutdown). */
void sched_cancel_all(sched *s);
/* Drops the caller's reference (cancelling it if still running). */
void sched_release(sched_req *r);

/* Counters for /metrics and /health. */
typedef struct sched_stats {
    long requests, tokens_prompt, tokens_generated, steps;
    long cache_ram_hit_tokens; /* from the RAM tier under a GPU pool */
    long cache_lookups, cache_hit_tokens, cache_disk_hit_tokens, cache_published_blocks, cache_evicted_blocks;
    long cache_redis_hit_tokens;
    long cache_tail_hit_tokens, cache_evicted_retained;
    int cache_blocks, cache_idle_blocks, cache_tails;
    long snap_stored, snap_restored, snap_evicted, snap_entries; /* recurrent-state snapshots */
    unsigned long long snap_bytes;                               /* their state bytes in memory */
    long window_reloaded_blocks, window_cut_tokens, window_refilled_blocks; /* sliding-window models */
    long pool_spilled_blocks, pool_publish_queued, pool_publish_written; /* a device pool's copies down */
    long pool_spill_pending, pool_spill_waits, pool_spill_errors;      /* their queue (cache/spill.h) */
    long spec_drafted, spec_accepted, spec_steps; /* speculative decoding: tokens drafted, of them
                                                     accepted; steps that verified a draft */
    long spec_mtp_drafted, spec_mtp_accepted;     /* of them, the MTP block's (model/mtp.h) */
    double spec_mtp_ms;                           /* time in the block: its K/V kept up, drafts */
    int active, queued, n_slots;
} sched_stats;
void sched_get_stats(sched *s, sched_stats *out);

#endif
