/* sched.c - continuous batching over the engine (see sched.h): the
 * scheduler thread admits queued requests into slots, attaches their
 * cached prefixes (cache/store.h), and runs one forward pass per step.
 * The forward pass runs unlocked, on state only the scheduler thread
 * touches (sequences, samplers); the consumer side is sched_req.c. */
#include "server/sched.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/mem.h"
#include "cache/disk_tier.h"
#include "server/sched_int.h"

/* ---- slots --------------------------------------------------------------- */

static const char *finish_name(sched_finish f) {
    static const char *names[] = {"running", "stop", "length", "cancelled", "error"};
    return names[f];
}

/* What the cache decided for this request and what it cost: the facts
 * that close its record (recent.h), which is also its --trace line.
 * Tokens around the first miss show why a prefix stopped matching. */
static json_t *cache_facts(sched *s, const slot *sl) {
    const sched_req *r = sl->req;
    const store_seq *q = &sl->q;
    int B = s->e->kv.block_tokens, tail = r->n_cached - q->n_attached_blocks * B;
    if (tail < 0) tail = 0; /* a recurrent model resumed before the attached blocks' end */
    double now = clock_ms(), first = sl->t_first > 0 ? sl->t_first : now;
    json_t *o = json_pack("{s:f,s:i,s:{s:i,s:i,s:i},s:i,s:i,s:{s:i,s:i,s:i},s:f,s:f,s:f,s:f,s:f}", "ts", now / 1000.0,
                     "prompt_tokens", r->n_prompt, "cached_tokens", "live",
                     r->n_cached - r->n_cached_disk - r->n_cached_redis - r->n_cached_ram, "disk", r->n_cached_disk, "redis",
                     r->n_cached_redis, "prefilled_tokens", r->n_prompt - r->n_cached, "generated_tokens", r->n_out,
                     "blocks", "attached", q->n_attached_blocks, "tail_tokens", tail, "published",
                     q->n_blocks - q->n_attached_blocks, "load_ms", q->load_ms, "prefill_ms",
                     first - sl->t_admit - q->load_ms, "decode_ms", now - first, "queue_ms", sl->t_admit - r->t_submit,
                     "ttft_ms", sl->t_first > 0 ? sl->t_first - r->t_submit : 0.0);
    if (r->n_cached_ram > 0) /* a GPU's RAM tier */
        json_object_set_new(json_object_get(o, "cached_tokens"), "ram", json_integer(r->n_cached_ram));
    return o;
}

/* Recurrent models: where the request resumed, from which tier, where it
 * stored states. Sliding-window models: blocks whose sliding part a hit
 * read back, and tokens it was cut by. */
static void model_facts(sched *s, const slot *sl, json_t *o) {
    const store_seq *q = &sl->q;
    if (s->store && store_has_snapshots(s->store)) {
        json_t *at = json_array();
        for (int i = 0; i < q->n_snap_stored && i < STORE_SNAP_MAX; i++) json_array_append_new(at, json_integer(q->snap_stored_at[i]));
        const char *from = q->snap_restored <= 0 ? "none"
                           : q->snap_restored_tier < 0 ? "live" : s->store_tier_names[q->snap_restored_tier];
        json_object_set_new(o, "snapshot", json_pack("{s:i,s:s,s:o,s:i}", "restored", q->snap_restored, "from", from,
                                                     "stored", at, "stored_total", q->n_snap_stored));
    }
    if (s->e->kv.swa_layer)
        json_object_set_new(o, "window", json_pack("{s:i,s:i}", "reloaded_blocks", q->n_window_reloaded,
                                                   "cut_tokens", q->n_window_cut));
}

static void record_request(sched *s, const slot *sl, sched_finish f) {
    const sched_req *r = sl->req;
    json_t *o = cache_facts(s, sl);
    double decode_ms = json_real_value(json_object_get(o, "decode_ms"));
    json_object_set_new(o, "decode_tok_s", json_real(r->n_out > 1 && decode_ms > 0 ? (r->n_out - 1) * 1000.0 / decode_ms : 0));
    json_object_set_new(o, "finish", json_string(finish_name(f)));
    json_t *retain = json_array();
    for (int i = 0; i < r->cache.n_marks; i++)
        json_array_append_new(retain, json_pack("{s:i,s:f}", "end", r->marks[i].end, "ttl_s", r->marks[i].ttl_s));
    json_object_set_new(o, "retain", retain);
    model_facts(s, sl, o);
    if (s->o.spec_draft > 0) { /* speculative decoding: tokens drafted and, of them, accepted */
        json_t *spec = json_pack("{s:I,s:I}", "drafted", (json_int_t)sl->n_drafted, "accepted", (json_int_t)sl->n_accepted);
        if (s->mtp) { /* of them, the MTP block's */
            json_object_set_new(spec, "mtp_drafted", json_integer(sl->n_mtp_drafted));
            json_object_set_new(spec, "mtp_accepted", json_integer(sl->n_mtp_accepted));
        }
        json_object_set_new(o, "spec", spec);
    }
    if (r->held_out) json_object_set_new(o, "held_out", json_string(r->held_out));
    if (r->ignored) json_object_set_new(o, "ignored", json_string(r->ignored)); /* request text: escaped as JSON */
    json_t *miss = json_array();
    for (int k = r->n_cached; k < r->n_prompt && k < r->n_cached + 8; k++) json_array_append_new(miss, json_integer(r->prompt[k]));
    json_object_set_new(o, "first_miss", json_pack("{s:i,s:o}", "pos", r->n_cached, "tokens", miss));
    recent_close(s->o.recent, r->recent_id, o, s->o.trace);
}

static void copy_cache_stats(sched *s);

static void slot_free(sched *s, slot *sl, sched_finish f, const char *why) {
    /* What the request leaves cached: its tail (unless its KV may be
     * incomplete), the recurrent state at its end (turn N+1 resumes
     * there), and retention marks; a read in flight is dropped. */
    if (s->store && sl->attached && f != FINISH_ERROR) store_snap_save(s->store, &sl->q, sl->toks, &sl->seq);
    if (s->store) store_finish(s->store, &sl->q, sl->toks, &sl->seq, f != FINISH_ERROR);
    if (s->store) copy_cache_stats(s); /* what the end stored counts at once */
    if (s->o.trace || s->o.recent) record_request(s, sl, f);
    kv_seq_release(&s->e->kv, &sl->seq); /* published blocks stay cached */
    free(sl->toks);
    sl->toks = NULL;
    json_guard_free(sl->guard);
    sl->guard = NULL;
    call_guard_free(sl->cguard);
    sl->cguard = NULL;
    sample_free(sl->smp);
    sl->smp = NULL;
    sched__spec_slot_free(sl);
    sched__mtp_cut(s, sl, 0);
    pthread_mutex_lock(&s->mu);
    sched__finish_locked(sl->req, f, why);
    sched__req_unref_locked(sl->req);
    sl->req = NULL; /* under the lock: sched_cancel_all reads it there, and the
                       request may be freed by its reader the moment we unlock */
    s->stats.active--;
    pthread_mutex_unlock(&s->mu);
    sl->starting = 0;
}

/* ---- the cached prefix ----------------------------------------------------- */

/* Recurrent models: the next prompt position after pos to keep the state
 * at, the policy's (store_snap_next); for a prompt later choices share
 * (sched_job.share_prompt) also its last position but one, where they
 * resume (the last token is computed by each). */
static int snap_next(sched *s, const slot *sl, int pos) {
    int n = sl->req->n_prompt, at = store_snap_next(s->store, &sl->q, pos, n);
    return sl->req->share_prompt && pos < n - 1 && at > n - 1 ? n - 1 : at;
}

/* Once the prefix is attached: a recurrent model resumes at the longest
 * part of it with a state snapshot (store_snap_restore); then what came
 * from the cache. */
static void prefix_attached(sched *s, slot *sl, int n_attached) {
    sched_req *r = sl->req;
    int fresh = 0, fresh_1h = 0;
    sl->snap_at = -1;
    if (s->store && store_has_snapshots(s->store)) {
        n_attached = store_snap_restore(s->store, &sl->q, sl->toks, &sl->seq);
        sl->snap_at = snap_next(s, sl, n_attached);
    }
    if (s->store) store_will_publish(s->store, &sl->q, r->n_prompt, n_attached, &fresh, &fresh_1h);
    sl->n_fed = n_attached;
    sl->attached = 1;
    pthread_mutex_lock(&s->mu);
    r->n_cached = r->n_prompt_done = n_attached;
    r->n_cached_disk = s->tier_disk >= 0 ? sl->q.n_cached_tier[s->tier_disk] : 0;
    r->n_cached_redis = s->tier_redis >= 0 ? sl->q.n_cached_tier[s->tier_redis] : 0;
    r->n_cached_ram = s->tier_ram >= 0 ? sl->q.n_cached_tier[s->tier_ram] : 0;
    r->n_cache_new = fresh, r->n_cache_new_1h = fresh_1h;
    r->attached = 1;
    pthread_cond_broadcast(&r->changed);
    pthread_mutex_unlock(&s->mu);
}

/* Attaches the longest cached prefix of the prompt (the last prompt token
 * is always computed: its logits start the generation). A part that must
 * come from a lower tier is read in the background while the other slots
 * compute; the slot joins the batches once it is in. */
static void attach_begin(sched *s, slot *sl) {
    const sched_req *r = sl->req;
    if (!s->store) {
        prefix_attached(s, sl, 0);
        return;
    }
    int n = store_attach_begin(s->store, &sl->q, sl->toks, r->n_prompt, r->n_prompt - 1, &sl->seq);
    if (!store_loading(&sl->q)) prefix_attached(s, sl, n);
}

/* Takes in finished background loads; with wait, the first one even if
 * it is still reading (nothing else can run). */
static void attach_end(sched *s, int wait) {
    for (int i = 0; i < s->o.n_slots; i++) {
        slot *sl = &s->slots[i];
        if (!sl->req || sl->attached || (!wait && !store_load_ready(&sl->q))) continue;
        prefix_attached(s, sl, store_attach_end(s->store, &sl->q, sl->toks, sl->req->n_prompt, sl->req->n_prompt - 1, &sl->seq));
        if (wait) return;
    }
}

/* Whether some slot can join the next batch (not waiting for its load). */
static int any_runnable(const sched *s) {
    for (int i = 0; i < s->o.n_slots; i++)
        if (s->slots[i].req && s->slots[i].attached) return 1;
    return 0;
}

static void push_slot_token(slot *sl, int32_t t) {
    XGROW(sl->toks, sl->cap_toks, sl->n_toks + 1, 64);
    sl->toks[sl->n_toks++] = t;
}

/* Moves queued requests into free slots; called with mu held. They are
 * set up by start_admitted, outside the lock. */
static void admit_locked(sched *s) {
    for (int i = 0; i < s->o.n_slots && s->q_head; i++) {
        slot *sl = &s->slots[i];
        if (sl->req) continue;
        sched_req *r = s->q_head;
        s->q_head = r->next;
        if (!s->q_head) s->q_tail = NULL;
        s->n_queued--;
        r->queued = 0;
        pthread_cond_broadcast(&r->changed); /* sched_wait_admitted */
        sl->req = r;
        sl->starting = 1;
        sl->attached = 0;
        kv_seq_init(&sl->seq);
        if (s->store) store_seq_init(s->store, &sl->q, &r->cache);
        else memset(&sl->q, 0, sizeof sl->q);
        sl->t_admit = clock_ms();
        s->stats.active++;
    }
}

/* Sets up newly admitted slots: sampler, the cached prefix (which may read
 * the disk tier, so the lock is not held: only this thread touches slots),
 * JSON guard. */
static void start_admitted(sched *s) {
    for (int i = 0; i < s->o.n_slots; i++) {
        slot *sl = &s->slots[i];
        if (!sl->req || !sl->starting) continue;
        sched_req *r = sl->req;
        sl->starting = 0;
        sl->smp = sample_new(&r->sampling);
        for (int k = 0; k < r->n_prompt; k++) sample_accept(sl->smp, r->prompt[k]);
        sl->cap_toks = r->n_prompt + 64;
        sl->toks = xmalloc((size_t)sl->cap_toks * sizeof(int32_t));
        memcpy(sl->toks, r->prompt, (size_t)r->n_prompt * sizeof(int32_t));
        sl->n_toks = r->n_prompt;
        sl->t_first = 0;
        if (r->json_mode) {
            if (!s->jvocab) s->jvocab = json_vocab_new(s->tok);
            sl->guard = json_guard_new_schema(s->jvocab, r->schema);
            if (r->json_prefix) json_guard_feed(sl->guard, r->json_prefix, strlen(r->json_prefix));
        } else if (r->call_schema) {
            if (!s->jvocab) s->jvocab = json_vocab_new(s->tok);
            sl->cguard = call_guard_new(s->jvocab, r->call_format, r->call_schema);
            if (sl->cguard && r->json_prefix) call_guard_feed(sl->cguard, r->json_prefix, strlen(r->json_prefix));
        }
        attach_begin(s, sl);
    }
}

static int any_active(const sched *s) {
    for (int i = 0; i < s->o.n_slots; i++)
        if (s->slots[i].req) return 1;
    return 0;
}

/* ---- one step ------------------------------------------------------------ */

void sched__batch_add(sched *s, int *n, int si, int32_t tok, int pos, int want) {
    s->b_tok[*n] = tok;
    s->b_pos[*n] = pos;
    s->b_seq[*n] = &s->slots[si].seq;
    s->b_want[*n] = (int8_t)want;
    s->b_slot[*n] = si;
    (*n)++;
}

/* Decode tokens first (cheap, latency-bound), each with its drafts,
 * then prompt chunks. */
static int build_batch(sched *s) {
    int n = 0, max = s->e->max_batch;
    s->draft_rows = s->logit_rows - s->o.n_slots;
    for (int i = 0; i < s->o.n_slots; i++) {
        slot *sl = &s->slots[i];
        sl->n_draft = 0;
        if (!sl->req) continue;
        if (atomic_load(&sl->req->cancel)) {
            slot_free(s, sl, FINISH_CANCELLED, "cancelled");
            continue;
        }
        if (sl->attached && sl->n_fed == sl->req->n_prompt) {
            sched__batch_add(s, &n, i, sl->last, sl->seq.n_pos, 1);
            sched__spec_add(s, i, &n, max - n - (s->o.n_slots - 1 - i)); /* room for the later slots' tokens */
        }
    }
    for (int i = 0; i < s->o.n_slots && n < max; i++) {
        slot *sl = &s->slots[i];
        if (!sl->req || !sl->attached || sl->n_fed == sl->req->n_prompt) continue;
        int take = sl->req->n_prompt - sl->n_fed;
        if (take > s->o.chunk) take = s->o.chunk;
        if (take > max - n) take = max - n;
        if (sl->snap_at > sl->n_fed && take > sl->snap_at - sl->n_fed) take = sl->snap_at - sl->n_fed; /* ends there */
        for (int k = 0; k < take; k++) {
            int idx = sl->n_fed + k;
            sched__batch_add(s, &n, i, sl->req->prompt[idx], idx, idx == sl->req->n_prompt - 1);
        }
        sl->n_fed += take;
    }
    return n;
}

static void fill_logprobs(const sched_req *r, const float *logits, int n_vocab, sched_token *t) {
    t->logprob = sample_logprob(logits, n_vocab, t->id);
    t->n_top = r->n_logprobs > 0 ? sample_top_logprobs(logits, n_vocab, r->n_logprobs, t->top_ids, t->top_logprobs) : 0;
}

/* ignore_eos (llama-server's field): end-of-generation tokens get logit -inf,
 * so a fixed-length benchmark runs every reply to max_tokens. */
static void mask_eog(const tokenizer *tok, float *logits, int n_vocab) {
    for (int id = 0; id < n_vocab; id++)
        if (tok_is_eog(tok, id)) logits[id] = -INFINITY;
}

int sched__choose(sched *s, slot *sl, float *logits, int pos, sched_token *t) {
    sched_req *r = sl->req;
    int n_vocab = s->e->m->hp.n_vocab;
    if (sl->guard && json_guard_mask(sl->guard, logits) == 0) {
        sl->fail = r->schema ? "no token continues the JSON output under the schema" : "no token continues the JSON output";
        return -1;
    }
    if (sl->cguard && call_guard_mask(sl->cguard, logits) == 0) {
        sl->fail = "no token continues the tool call under the declared tools";
        return -1;
    }
    if (sl->t_first == 0) sl->t_first = clock_ms();
    if (r->ignore_eos) mask_eog(s->tok, logits, n_vocab);
    *t = (sched_token){.id = sample_next(sl->smp, logits, n_vocab, pos)};
    if (sl->guard) json_guard_accept(sl->guard, t->id);
    if (sl->cguard) call_guard_accept(sl->cguard, t->id);
    fill_logprobs(r, logits, n_vocab, t);
    sample_accept(sl->smp, t->id);
    sl->last = t->id;
    push_slot_token(sl, t->id);
    return 0;
}

/* Hands slot si's chosen tokens of this step to its request, in order,
 * and finishes it where one-at-a-time decoding would have: at an
 * end-of-generation token, at max_tokens or the context, or with the
 * error of a row no token could continue (verification stops choosing at
 * each of these, so only the last chosen token can end it). */
static void emit(sched *s, slot *sl) {
    sched_req *r = sl->req;
    for (int j = 0; j < sl->n_chosen; j++) {
        const sched_token *t = &sl->chosen[j];
        int eog = tok_is_eog(s->tok, t->id);
        pthread_mutex_lock(&s->mu);
        r->n_prompt_done = r->n_prompt;
        if (!eog) sched__push_token_locked(r, t);
        s->stats.tokens_generated += !eog;
        int n_out = r->n_out;
        pthread_mutex_unlock(&s->mu);
        /* the position after this token's: what n_pos is once it is fed */
        int n_pos = sl->pos0 + 1 + j;
        if (eog) {
            slot_free(s, sl, FINISH_STOP, NULL);
            return;
        }
        if (n_out >= r->max_tokens || n_pos + 1 >= s->o.ctx_per_slot) {
            slot_free(s, sl, FINISH_LENGTH, NULL);
            return;
        }
    }
    if (sl->fail) slot_free(s, sl, FINISH_ERROR, sl->fail);
}

static void note_progress(sched *s, int n) {
    pthread_mutex_lock(&s->mu);
    s->stats.steps++;
    for (int k = 0; k < n; k++) {
        slot *sl = &s->slots[s->b_slot[k]];
        if (!sl->req) continue;
        if (s->b_pos[k] < sl->req->n_prompt) {
            s->stats.tokens_prompt++;
            if (s->b_pos[k] + 1 > sl->req->n_prompt_done) sl->req->n_prompt_done = s->b_pos[k] + 1;
            pthread_cond_broadcast(&sl->req->changed);
        }
    }
    pthread_mutex_unlock(&s->mu);
}

/* The cache counters, copied for readers under the lock. */
static void copy_cache_stats(sched *s) {
    store_stats st;
    store_get_stats(s->store, &st);
    pthread_mutex_lock(&s->mu);
    s->stats.cache_lookups = st.lookups;
    s->stats.cache_hit_tokens = st.hit_tokens;
    s->stats.cache_disk_hit_tokens = s->tier_disk >= 0 ? st.tier_hit_tokens[s->tier_disk] : 0;
    s->stats.cache_ram_hit_tokens = s->tier_ram >= 0 ? st.tier_hit_tokens[s->tier_ram] : 0;
    s->stats.cache_redis_hit_tokens = s->tier_redis >= 0 ? st.tier_hit_tokens[s->tier_redis] : 0;
    s->stats.cache_published_blocks = st.published_blocks;
    s->stats.cache_evicted_blocks = st.live.evicted_blocks;
    s->stats.cache_blocks = st.live.cached_blocks;
    s->stats.cache_idle_blocks = st.live.idle_blocks;
    s->stats.cache_tail_hit_tokens = st.tail_hit_tokens;
    s->stats.cache_evicted_retained = st.live.evicted_retained;
    s->stats.cache_tails = st.live.tails;
    s->stats.snap_stored = st.snap.stored, s->stats.snap_restored = st.snap.restored;
    s->stats.snap_evicted = st.snap.evicted, s->stats.snap_entries = st.snap.entries;
    s->stats.snap_bytes = st.snap.bytes;
    s->stats.window_reloaded_blocks = st.window_reloaded_blocks;
    s->stats.window_cut_tokens = st.window_cut_tokens;
    s->stats.window_refilled_blocks = st.window_refilled_blocks;
    s->stats.pool_spilled_blocks = st.spilled_blocks;
    s->stats.pool_publish_queued = st.publish_queued, s->stats.pool_publish_written = st.publish_written;
    s->stats.pool_spill_pending = st.spill_pending, s->stats.pool_spill_waits = st.spill_waits;
    s->stats.pool_spill_errors = st.spill_errors;
    pthread_mutex_unlock(&s->mu);
}

/* Full blocks of every sequence become findable by later prompts. */
static void publish_blocks(sched *s) {
    if (!s->store) return;
    for (int i = 0; i < s->o.n_slots; i++)
        if (s->slots[i].req && s->slots[i].attached)
            store_publish(s->store, &s->slots[i].q, s->slots[i].toks, &s->slots[i].seq);
    copy_cache_stats(s);
}

/* A request whose prompt is shared by later choices (sched_job.
 * share_prompt) keeps the prompt's partial last block cached in the step
 * that completes the prompt (its sequence then ends exactly there), so
 * they attach all of it but the last token. Its own next write into
 * that block copies it (a published block is frozen). */
static void share_prompt_tails(sched *s) {
    if (!s->store) return;
    for (int i = 0; i < s->o.n_slots; i++) {
        slot *sl = &s->slots[i];
        if (sl->req && sl->attached && sl->req->share_prompt && sl->seq.n_pos == sl->req->n_prompt)
            store_keep_tail(s->store, &sl->q, sl->toks, &sl->seq);
    }
}

/* Recurrent models: a sequence whose prefill just reached a position the
 * policy chose keeps its state there (the chunk was cut to end exactly
 * at it, so a position at the very end of the prompt fires too). */
static void snapshot_states(sched *s) {
    if (!s->store || !store_has_snapshots(s->store)) return;
    for (int i = 0; i < s->o.n_slots; i++) {
        slot *sl = &s->slots[i];
        if (!sl->req || !sl->attached || sl->snap_at < 0 || sl->seq.rs_pos != sl->snap_at) continue;
        store_snap_save(s->store, &sl->q, sl->toks, &sl->seq);
        sl->snap_at = snap_next(s, sl, sl->snap_at);
    }
}

/* Each slot's first logits row of the batch, and the position of its
 * first token (a slot's wanted rows are consecutive: its decode token
 * and drafts, or its prompt's last token). */
static void map_rows(sched *s, int n) {
    for (int i = 0; i < s->o.n_slots; i++) s->slots[i].row0 = -1;
    for (int k = 0, row = 0; k < n; k++) {
        slot *sl = &s->slots[s->b_slot[k]];
        if (!s->b_want[k]) continue;
        if (sl->row0 < 0) sl->row0 = row, sl->pos0 = s->b_pos[k];
        row++;
    }
}

/* One forward pass, then: every slot's tokens chosen from its rows
 * (drafts verified, sequences cut back to what was verified), snapshots
 * and blocks published, and the tokens handed out (which may end
 * requests: after publishing, so their last blocks are cached). */
static void step(sched *s) {
    int n = build_batch(s);
    if (n == 0) return;
    fwd_batch b = {.n = n, .tokens = s->b_tok, .seqs = s->b_seq, .pos = s->b_pos, .want = s->b_want};
    strata_err err = {0};
    if (engine_run(s->e, &b, s->logits, &err)) {
        log_error("scheduler: forward pass failed: %s", err.msg);
        for (int k = 0; k < n; k++)
            if (s->slots[s->b_slot[k]].req) slot_free(s, &s->slots[s->b_slot[k]], FINISH_ERROR, err.msg);
        return;
    }
    note_progress(s, n);
    sched__mtp_feed(s, n); /* before verification cuts and recomputation overwrites the hidden states */
    map_rows(s, n);
    for (int i = 0; i < s->o.n_slots; i++)
        if (s->slots[i].req && s->slots[i].row0 >= 0) sched__spec_verify(s, &s->slots[i]);
    sched__spec_rerun(s);
    snapshot_states(s);
    publish_blocks(s);
    share_prompt_tails(s);
    for (int i = 0; i < s->o.n_slots; i++)
        if (s->slots[i].req && s->slots[i].row0 >= 0) emit(s, &s->slots[i]);
}

static void *sched_main(void *arg) {
    sched *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        admit_locked(s);
        while (s->running && !any_active(s) && !s->q_head) pthread_cond_wait(&s->wake, &s->mu);
        admit_locked(s);
        int running = s->running;
        pthread_mutex_unlock(&s->mu);
        if (!running) break;
        start_admitted(s);
        attach_end(s, !any_runnable(s));
        step(s);
    }
    for (int i = 0; i < s->o.n_slots; i++)
        if (s->slots[i].req) slot_free(s, &s->slots[i], FINISH_CANCELLED, "server shutting down");
    return NULL;
}

/* ---- life cycle ------------------------------------------------------------ */

/* The block store over the engine's KV pool, with the disk tier below
 * and the shared tier on Redis below that (the slowest last). */
static void store_setup(sched *s, const sched_opts *o) {
    const model_hparams *hp = &s->e->m->hp;
    store_opts so = {.default_scope = o->default_scope,
                     .attn_per_pos = policy_attn_cost_per_pos(hp->n_layer, hp->n_embd, hp->n_head, hp->n_head_kv,
                                                              hp->head_dim, hp->n_ff)};
    memcpy(so.model_fp, o->model_fp, sizeof so.model_fp);
    so.snap_floats = fwd_state_floats(s->e->m); /* 0 unless recurrent layers: no snapshots */
    so.snap_budget_bytes = o->snap_budget_bytes;
    so.snap_every_blocks = o->snap_every_blocks;
    if (so.snap_floats)
        log_info("recurrent-state snapshots: model=%s state_mib=%.2f every_blocks=%d budget_mib=%zu", hp->arch_name,
                 so.snap_floats * 4.0 / (1 << 20), so.snap_every_blocks, so.snap_budget_bytes >> 20);
    s->store = store_new(&s->e->kv, &so);
    int n = 0;
    s->tier_disk = s->tier_redis = s->tier_ram = -1;
    if (o->disk) s->disk = disk_tier(o->disk);
    if (o->ram) { /* first below the GPU pool; what it evicts goes to the disk */
        s->ram = ram_tier_iface(o->ram);
        ram_tier_set_below(o->ram, o->disk ? &s->disk : NULL);
        store_add_tier(s->store, &s->ram);
        s->store_tier_names[n] = "ram";
        s->tier_ram = n++;
    }
    if (o->disk) {
        store_add_tier(s->store, &s->disk);
        s->store_tier_names[n] = "disk";
        s->tier_disk = n++;
    }
    if (o->redis) {
        s->redis = redis_tier_iface(o->redis);
        store_add_tier(s->store, &s->redis);
        s->store_tier_names[n] = "redis";
        s->tier_redis = n++;
    }
}

int sched_new(sched **out, engine *e, const tokenizer *tok, const sched_opts *o, strata_err *err) {
    *out = NULL;
    if (o->n_slots <= 0 || o->ctx_per_slot <= 1 || o->chunk <= 0)
        return strata_errf(err, STRATA_EINVAL, "scheduler: %d slots of %d tokens", o->n_slots, o->ctx_per_slot);
    sched *s = xcalloc(1, sizeof *s);
    s->e = e;
    s->tok = tok;
    s->o = *o;
    s->tier_disk = s->tier_redis = s->tier_ram = -1;
    s->slots = xcalloc((size_t)o->n_slots, sizeof(slot));
    int mb = e->max_batch;
    s->b_tok = xmalloc((size_t)mb * sizeof(int32_t));
    s->b_pos = xmalloc((size_t)mb * sizeof(int32_t));
    s->b_seq = xmalloc((size_t)mb * sizeof(kv_seq *));
    s->b_want = xmalloc((size_t)mb);
    s->b_slot = xmalloc((size_t)mb * sizeof(int));
    /* One wanted row per slot per step, and the drafts' rows. */
    s->logit_rows = sched__spec_logit_rows(o);
    s->logits = xmalloc((size_t)s->logit_rows * e->m->hp.n_vocab * sizeof(float));
    for (int i = 0; i < o->n_slots; i++) {
        s->slots[i].draft = xmalloc((size_t)(o->spec_draft + 1) * sizeof(int32_t));
        s->slots[i].chosen = xmalloc((size_t)(o->spec_draft + 1) * sizeof(sched_token));
    }
    s->stats.n_slots = o->n_slots;
    /* Recurrent layers (qwen35) keep a running state that cannot be cut
     * back to a cached prefix's end: the store keeps state snapshots
     * beside the blocks, and a request resumes only where both exist
     * (prefix_attached). A K/V prefix without its state would be wrong;
     * the forward pass refuses it (forward.c, check_recurrent). */
    if (o->prefix_cache) store_setup(s, o);
    sched__mtp_setup(s);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->wake, NULL);
    s->running = 1;
    pthread_create(&s->thread, NULL, sched_main, s);
    *out = s;
    return 0;
}

void sched_free(sched *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->running = 0;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    pthread_mutex_lock(&s->mu);
    while (s->q_head) {
        sched_req *r = s->q_head;
        s->q_head = r->next;
        r->queued = 0;
        sched__finish_locked(r, FINISH_CANCELLED, "server shutting down");
        sched__req_unref_locked(r);
    }
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->wake);
    sched__mtp_free(s);
    for (int i = 0; i < s->o.n_slots; i++) {
        free(s->slots[i].draft), free(s->slots[i].chosen);
        kv_state_free(&s->e->kv, s->slots[i].rs_save);
    }
    free(s->slots), free(s->b_tok), free(s->b_pos), free(s->b_seq), free(s->b_want), free(s->b_slot);
    free(s->logits);
    store_free(s->store);
    json_vocab_free(s->jvocab);
    free(s);
}

void sched_get_stats(sched *s, sched_stats *out) {
    pthread_mutex_lock(&s->mu);
    *out = s->stats;
    out->queued = s->n_queued;
    pthread_mutex_unlock(&s->mu);
}
