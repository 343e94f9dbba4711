/* sched_int.h - what the scheduler's two files share (see sched.h): a
 * request (its job, its output for the consumer), a slot, the scheduler.
 * sched_req.c is the consumer side (submit, wait, cancel, release: HTTP
 * threads), sched.c the scheduler thread (admission, batches, steps).
 * One mutex (sched.mu) guards the queue, the slots' request pointers and
 * every request's output. Not for use outside src/server/sched*.c. */
#ifndef STRATA_SCHED_INT_H
#define STRATA_SCHED_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "cache/store.h"
#include "model/mtp.h"
#include "server/sched.h"
#include "text/callguard.h"
#include "text/jsonguard.h"

struct sched_req {
    sched *owner;
    int32_t *prompt;
    int n_prompt;
    int32_t *prediction; /* owned copy of sched_job's, or NULL */
    int n_prediction;
    int pred_drafted, pred_accepted; /* tokens drafted from it, and of them accepted (sched_status) */
    sample_params sampling;
    int max_tokens, n_logprobs;
    int ignore_eos;
    int json_mode;
    int no_spec;   /* the request opted out of speculative decoding */
    int share_prompt; /* sched_job's: keep the prompt's tail cached once it is in */
    int later_choice; /* sched_job's: its record is closed here if it leaves the queue unrun */
    char *json_prefix;
    char *ignored; /* the trace's "ignored" (server/ignored.h), or NULL */
    json_schema *schema; /* a reference, or NULL */
    json_schema *call_schema; /* a reference, or NULL (text/callguard.h) */
    tc_format call_format;
    store_request cache; /* root, scope, message starts, retention marks */
    int *bounds;         /* owned: cache.bounds */
    cache_mark marks[POLICY_MAX_MARKS];
    const char *held_out; /* static: the rule that held client text out, or NULL */
    long recent_id;       /* its record (recent.h), or 0 */
    double t_submit;      /* ms (clock_ms): queued */
    /* output, guarded by owner->mu */
    sched_token *out;
    int n_out, cap_out;
    double t_first_out, t_last_out; /* ms (clock_ms): the first and the latest token produced */
    int n_prompt_done, n_cached, n_cached_disk, n_cached_redis, n_cached_ram;
    int attached, n_cache_new, n_cache_new_1h; /* see sched_status */
    sched_finish finish;
    char error[256];
    pthread_cond_t changed;
    int refs;
    atomic_int cancel;
    int queued;      /* still waiting in the queue (guarded by owner->mu) */
    sched_req *next; /* queue link */
};

typedef struct slot {
    sched_req *req; /* NULL: free */
    kv_seq seq;
    sampler *smp;
    int n_fed;      /* prompt tokens already in the batch */
    int32_t last;   /* last sampled token, fed at the next step */
    int32_t *toks;  /* prompt then generated tokens: what the blocks hold */
    int n_toks, cap_toks;
    store_seq q;       /* the walk over the block store: cursor, hashes, load */
    json_guard *guard; /* json_mode: only tokens that keep the output valid JSON */
    call_guard *cguard; /* native tool calls: only calls of declared tools */
    double t_admit, t_first; /* ms: admitted, first token sampled */
    int starting;            /* admitted, not set up yet (start_admitted) */
    int attached;            /* the cached prefix is in (not still being read) */
    int snap_at;             /* recurrent models: next prompt position to snapshot (-1: none) */
    /* Speculative decoding (sched_spec.c): this step's drafted tokens,
     * fed after `last` and verified by the sampler. */
    int32_t *draft;
    int n_draft;
    int draft_predicted;      /* this step's draft came from the request's prediction */
    int draft_mtp;            /* ... from the model's MTP block */
    mtp_seq mtp;              /* the MTP block's side of the sequence (sched_mtp.c) */
    long n_mtp_drafted, n_mtp_accepted;
    float *rs_save;           /* recurrent models: the state before a drafted step */
    int spec_skip, spec_miss; /* back-off: steps left without drafts; drafts rejected whole in a row */
    int spec_len;             /* most tokens to draft next (grows while drafts are accepted whole) */
    long n_drafted, n_accepted; /* this request's, for the trace */
    /* This step's chosen tokens (one per verified row), handed to the
     * request after the step's blocks are published (sched.c, emit). */
    sched_token *chosen;
    int n_chosen, row0;       /* row0: the slot's first logits row this step (-1: none) */
    int pos0;                 /* position of the slot's first token in the step */
    const char *fail;         /* no token could continue: the error to finish with */
} slot;

struct sched {
    engine *e;
    const tokenizer *tok;
    sched_opts o;
    slot *slots;
    sched_req *q_head, *q_tail;
    int n_queued;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    pthread_t thread;
    int running;
    cache_store *store; /* NULL when the prefix cache is off */
    cache_tier disk;    /* the disk tier's interface, when there is one */
    cache_tier redis;   /* the shared tier's, when there is one */
    cache_tier ram;     /* a GPU pool's RAM tier's, when there is one */
    int tier_disk, tier_redis, tier_ram; /* their places in the store's walk (-1: none) */
    const char *store_tier_names[STORE_MAX_TIERS]; /* for the trace */
    json_vocab *jvocab; /* built on first JSON-mode request */
    sched_stats stats;
    /* batch scratch, scheduler thread only */
    int32_t *b_tok, *b_pos;
    kv_seq **b_seq;
    int8_t *b_want;
    int *b_slot;
    float *logits;
    int logit_rows;     /* rows of logits: one per slot plus the drafts' */
    int draft_rows;     /* rows the drafts of the step being built may still take */
    mtp *mtp;           /* the MTP drafter, on models with the block (NULL: none) */
    mtp_seq **b_mtp;    /* per batch token: its slot's mtp_seq */
};

/* ---- calls between the two files (the caller holds s->mu) ---- */

void sched__req_unref_locked(sched_req *r);
void sched__finish_locked(sched_req *r, sched_finish f, const char *why);
void sched__push_token_locked(sched_req *r, const sched_token *t);

/* Token tok of slot si at position pos appended to the batch at *n (want:
 * its logits are wanted). */
void sched__batch_add(sched *s, int *n, int si, int32_t tok, int pos, int want);

/* ---- speculative decoding (sched_spec.c; scheduler thread) ---- */

/* Rows of logits the scheduler keeps: one per slot and the drafts'. */
int sched__spec_logit_rows(const sched_opts *o);
/* Drafts for decoding slot si (its `last` just added to the batch at
 * *n) appended to the batch, at most room of them; returns how many. */
int sched__spec_add(sched *s, int si, int *n, int room);
/* Slot sl's tokens of this step from its rows (sl->row0 on; row j is
 * the logits after the token at sl->pos0 + j): sampled one by one while
 * each equals the draft there, so exactly the tokens one-at-a-time
 * decoding would give. The sequence is then cut back to the verified
 * tokens; recurrent slots to recompute are marked (sched__spec_rerun). */
void sched__spec_verify(sched *s, slot *sl);
/* Recurrent models: slots whose drafts were cut get their state from
 * before the step back and recompute the verified tokens, all in one
 * forward pass. Slots it fails for finish with an error. */
void sched__spec_rerun(sched *s);
void sched__spec_slot_free(slot *sl);

/* ---- the MTP drafter (sched_mtp.c; scheduler thread) ---- */

/* The drafter, when the model has an MTP block, speculation is on and
 * the drafter choice allows it; a failure leaves prompt lookup alone. */
void sched__mtp_setup(sched *s);
void sched__mtp_free(sched *s);
/* After the step's forward pass over the n batch tokens: the block's
 * K/V of every sequence in it kept up with the trunk. */
void sched__mtp_feed(sched *s, int n);
/* Up to k drafts for slot sl from the block into sl->draft; how many. */
int sched__mtp_draft(sched *s, slot *sl, int k);
/* Slot sl's sequence was cut to n positions (or ended: n = 0). */
void sched__mtp_cut(sched *s, slot *sl, int n);

/* One row's token for slot sl, to sit at position pos: the guards mask
 * the logits, the sampler draws, and the guards, the penalty window and
 * sl->toks take it (sched.c). 0, or -1 with sl->fail set. */
int sched__choose(sched *s, slot *sl, float *logits, int pos, sched_token *t);

#endif
