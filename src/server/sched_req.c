/* sched_req.c - the consumer side of the scheduler (see sched.h): HTTP
 * threads submit jobs into the bounded FIFO queue, wait for tokens,
 * cancel and release; a departed client's queued request leaves the
 * queue at once. */
#include "server/sched.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/mem.h"
#include "server/sched_int.h"

/* ---- requests ------------------------------------------------------------ */

void sched__req_unref_locked(sched_req *r) {
    if (--r->refs > 0) return;
    pthread_cond_destroy(&r->changed);
    json_schema_free(r->schema);
    json_schema_free(r->call_schema);
    free(r->json_prefix), free(r->ignored), free(r->bounds), free(r->prompt), free(r->prediction), free(r->out);
    free(r);
}

void sched__finish_locked(sched_req *r, sched_finish f, const char *why) {
    if (r->finish != FINISH_NONE) return;
    r->finish = f;
    if (why) snprintf(r->error, sizeof r->error, "%s", why);
    pthread_cond_broadcast(&r->changed);
}

void sched__push_token_locked(sched_req *r, const sched_token *t) {
    XGROW(r->out, r->cap_out, r->n_out + 1, 64);
    r->t_last_out = clock_ms();
    if (!r->n_out) r->t_first_out = r->t_last_out;
    r->out[r->n_out++] = *t;
    pthread_cond_broadcast(&r->changed);
}

/* What the request asks of the cache, copied: the store reads it until
 * the request ends. */
static void req_cache_setup(const sched *s, sched_req *r, const sched_job *job) {
    store_request *c = &r->cache;
    c->scope = job->scope;
    if (job->n_bounds > 0) {
        r->bounds = xmalloc((size_t)job->n_bounds * sizeof(int));
        memcpy(r->bounds, job->bounds, (size_t)job->n_bounds * sizeof(int));
        c->bounds = r->bounds;
        c->n_bounds = job->n_bounds;
    }
    c->n_marks = job->n_marks < POLICY_MAX_MARKS ? job->n_marks : POLICY_MAX_MARKS;
    memcpy(r->marks, job->marks, (size_t)c->n_marks * sizeof(cache_mark));
    c->marks = r->marks;
    cache_hash_root_for(&c->root, s->o.model_fp, job->tenant, job->cache_salt);
}

int sched_submit(sched *s, const sched_job *job, sched_req **out, strata_err *err) {
    *out = NULL;
    if (job->n_prompt <= 0) return strata_errf(err, STRATA_EINVAL, "the prompt is empty");
    if (job->n_prompt >= s->o.ctx_per_slot)
        return strata_errf(err, STRATA_ERANGE,
                           "the prompt is %d tokens; the context of a sequence is %d tokens",
                           job->n_prompt, s->o.ctx_per_slot);
    sched_req *r = xcalloc(1, sizeof *r);
    r->owner = s;
    r->prompt = xmalloc((size_t)job->n_prompt * sizeof(int32_t));
    memcpy(r->prompt, job->prompt, (size_t)job->n_prompt * sizeof(int32_t));
    r->n_prompt = job->n_prompt;
    if (job->n_prediction > 0) {
        r->prediction = xmalloc((size_t)job->n_prediction * sizeof(int32_t));
        memcpy(r->prediction, job->prediction, (size_t)job->n_prediction * sizeof(int32_t));
        r->n_prediction = job->n_prediction;
    }
    r->sampling = job->sampling;
    r->max_tokens = job->max_tokens;
    r->ignore_eos = job->ignore_eos;
    r->no_spec = job->no_speculative;
    r->share_prompt = job->share_prompt;
    r->later_choice = job->later_choice;
    r->n_logprobs = job->n_logprobs > 20 ? 20 : job->n_logprobs;
    r->json_mode = job->json_mode || job->schema;
    r->schema = json_schema_ref(job->schema);
    r->call_schema = json_schema_ref(job->call_schema);
    r->call_format = job->call_format;
    r->held_out = job->held_out;
    r->recent_id = job->recent_id;
    r->t_submit = clock_ms();
    r->json_prefix = job->json_prefix ? xstrdup(job->json_prefix) : NULL;
    r->ignored = job->ignored ? xstrdup(job->ignored) : NULL;
    req_cache_setup(s, r, job);
    pthread_cond_init(&r->changed, NULL);
    r->refs = 2; /* caller + scheduler */
    pthread_mutex_lock(&s->mu);
    /* Requests a free slot will take at the next step are not waiting:
     * only those beyond the free slots count against --queue (so that
     * --queue 0 means "no waiting", not "refuse everything"). */
    if (!job->later_choice && s->n_queued - (s->o.n_slots - s->stats.active) >= s->o.queue_max) {
        pthread_mutex_unlock(&s->mu);
        r->refs = 1;
        sched__req_unref_locked(r);
        return strata_errf(err, STRATA_EBUSY, "server busy: %d requests already waiting", s->o.queue_max);
    }
    if (s->q_tail) s->q_tail->next = r; /* FIFO: appended here, admitted from the head */
    else s->q_head = r;
    s->q_tail = r;
    r->queued = 1;
    s->n_queued++;
    s->stats.requests++;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
    *out = r;
    return 0;
}

static void deadline_after(struct timespec *ts, int ms) {
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

/* st from r; the caller holds the lock. */
static void status_locked(const sched_req *r, sched_status *st) {
    st->n_prompt = r->n_prompt;
    st->n_prompt_done = r->n_prompt_done;
    st->n_cached = r->n_cached;
    st->n_cached_disk = r->n_cached_disk;
    st->n_cached_redis = r->n_cached_redis;
    st->n_cached_ram = r->n_cached_ram;
    st->attached = r->attached;
    st->n_cache_new = r->n_cache_new;
    st->n_cache_new_1h = r->n_cache_new_1h;
    st->n_generated = r->n_out;
    st->t_first_out = r->t_first_out;
    st->t_last_out = r->t_last_out;
    st->pred_drafted = r->pred_drafted;
    st->pred_accepted = r->pred_accepted;
    snprintf(st->error, sizeof st->error, "%s", r->error);
}

int sched_wait(sched_req *r, int from, sched_token *out, int cap, int timeout_ms, sched_status *st) {
    sched *s = r->owner;
    struct timespec dl;
    deadline_after(&dl, timeout_ms);
    pthread_mutex_lock(&s->mu);
    while (r->n_out <= from && r->finish == FINISH_NONE)
        if (pthread_cond_timedwait(&r->changed, &s->mu, &dl) == ETIMEDOUT) break;
    int n = r->n_out - from;
    if (n < 0) n = 0;
    if (n > cap) n = cap;
    if (n > 0) memcpy(out, r->out + from, (size_t)n * sizeof(sched_token)); /* r->out is NULL before the first token */
    status_locked(r, st);
    /* The finish shows only once every token has been handed out. */
    st->finish = from + n >= r->n_out ? r->finish : FINISH_NONE;
    pthread_mutex_unlock(&s->mu);
    return n;
}

int sched_wait_attached(sched_req *r, int timeout_ms, sched_status *st) {
    sched *s = r->owner;
    struct timespec dl;
    deadline_after(&dl, timeout_ms);
    pthread_mutex_lock(&s->mu);
    while (!r->attached && r->finish == FINISH_NONE)
        if (pthread_cond_timedwait(&r->changed, &s->mu, &dl) == ETIMEDOUT) break;
    status_locked(r, st);
    st->finish = FINISH_NONE; /* tokens are sched_wait's to hand out */
    int known = r->attached;
    pthread_mutex_unlock(&s->mu);
    return known;
}

/* Takes r out of the queue, if it is still there, and finishes it as
 * cancelled: a request nobody waits for must not hold a queue place until
 * a slot would have admitted it. Returns 1 if it was queued. */
static int unqueue_locked(sched *s, sched_req *r) {
    if (!r->queued) return 0;
    sched_req **link = &s->q_head, *prev = NULL;
    while (*link != r) {
        prev = *link;
        link = &(*link)->next;
    }
    *link = r->next;
    if (s->q_tail == r) s->q_tail = prev;
    r->next = NULL;
    r->queued = 0;
    s->n_queued--;
    sched__finish_locked(r, FINISH_CANCELLED, "cancelled while queued");
    /* A request's own record is closed by its HTTP thread when it never
     * ran (api_admit); a later choice has no such wait, so it is closed here. */
    if (r->later_choice)
        recent_close(s->o.recent, r->recent_id,
                     json_pack("{s:s,s:s}", "finish", "refused", "error", "cancelled while queued"), NULL);
    sched__req_unref_locked(r); /* the scheduler's reference */
    return 1;
}

int sched_wait_admitted(sched_req *r, int timeout_ms) {
    sched *s = r->owner;
    struct timespec dl;
    deadline_after(&dl, timeout_ms);
    pthread_mutex_lock(&s->mu);
    while (r->queued)
        if (pthread_cond_timedwait(&r->changed, &s->mu, &dl) == ETIMEDOUT) break;
    int queued = r->queued;
    pthread_mutex_unlock(&s->mu);
    return queued ? STRATA_EBUSY : 0;
}

int sched_dequeue(sched_req *r) {
    sched *s = r->owner;
    pthread_mutex_lock(&s->mu);
    int was = unqueue_locked(s, r);
    pthread_mutex_unlock(&s->mu);
    return was;
}

void sched_cancel(sched_req *r) {
    atomic_store(&r->cancel, 1); /* a running request leaves at the next step */
    sched_dequeue(r);
}

void sched_cancel_all(sched *s) {
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->o.n_slots; i++)
        if (s->slots[i].req) atomic_store(&s->slots[i].req->cancel, 1);
    while (s->q_head) unqueue_locked(s, s->q_head); /* their readers see the end now */
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
}

void sched_release(sched_req *r) {
    if (!r) return;
    sched *s = r->owner;
    atomic_store(&r->cancel, 1);
    pthread_mutex_lock(&s->mu);
    unqueue_locked(s, r);
    sched__req_unref_locked(r);
    pthread_mutex_unlock(&s->mu);
}
