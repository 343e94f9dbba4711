/* sched_spec.c - exact speculative decoding in the scheduler (see
 * sched_int.h for the calls).
 *
 * A decoding slot's step feeds its last token and, when the sequence's
 * last tokens occurred earlier in its own context, up to --spec-draft
 * tokens that followed them there (prompt lookup, model/draft.h), at the
 * next positions, all in the step's one forward pass. Kernels are batch
 * invariant (DESIGN.md, principle 2), so the row of a drafted token is
 * bit for bit the row one-at-a-time decoding computes once that token is
 * fed. The sampler then picks row after row, from position to position
 * (its randomness is a function of the seed and the position alone,
 * model/sample.h), and moves on only while its pick equals the draft:
 * every chosen token is the one plain decoding chooses, greedy or
 * seeded, with the JSON and tool-call guards masking each row as they
 * would (a draft the guard refuses can never be the pick, so it ends the
 * draft; the JSON guard also cuts a draft before feeding it, by trying
 * its bytes). Each step yields one token more than drafts accepted.
 *
 * What the refused drafts computed is undone: the sequence is cut back
 * to the verified tokens (their K/V past it is simply overwritten
 * later; a sliding-window sequence holds the window of its first token
 * of the step, which covers every later query). Recurrent layers
 * (qwen35) fold every fed token into their state, which cannot be cut:
 * the state is copied before a drafted step and, when drafts were
 * refused, put back and the verified tokens computed again (the same
 * bits: prefill in any chunking equals decode). That costs a second
 * forward pass on a partial acceptance, which a run of refusals backs off
 * from like any other model.
 * Drafts come from the request's prediction, else from the sequence
 * itself (draft_own): prompt lookup, and on a model with an MTP block
 * (qwen35) the block where lookup finds nothing (sched_mtp.c).
 * Does not: compute drafts (model/draft.c, model/mtp.c) or sample (sched.c). */
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/mem.h"
#include "model/draft.h"
#include "server/sched_int.h"

/* Slots whose drafts take logits rows at once (the rest decode plainly
 * that step): Gemma 3's rows are 1 MiB each. */
#define SPEC_MAX_SLOTS 8
/* Steps without drafts after drafts were rejected whole: 1, 2, 4, ...
 * up to this, so text that does not repeat its context costs little. */
#define SPEC_MAX_SKIP 16
/* Tokens a draft may grow by after one accepted whole. */
#define SPEC_GROW 2
/* Most tokens the MTP block drafts a step: each is one pass of the block
 * and the output head, 28% of a decode step on the 0.8B shape (strata
 * bench-mtp, bench/README.md), and a single head's guesses chained on its
 * own state lose accuracy fast; the second still pays at the acceptance
 * such heads reach, a third hardly. */
#define SPEC_MTP_MAX 2

int sched__spec_logit_rows(const sched_opts *o) {
    int with = o->n_slots < SPEC_MAX_SLOTS ? o->n_slots : SPEC_MAX_SLOTS;
    return o->n_slots + (o->spec_draft > 0 ? o->spec_draft * with : 0);
}

/* The most tokens worth drafting for slot sl: as many as it may still
 * emit after this step's first (max_tokens, its context), the rows left,
 * the batch room. */
static int draft_limit(const sched *s, const slot *sl, int room) {
    const sched_req *r = sl->req;
    int k = sl->spec_len > 0 && sl->spec_len < s->o.spec_draft ? sl->spec_len : s->o.spec_draft, p = sl->seq.n_pos;
    int left = r->max_tokens - r->n_out - 1, ctx = s->o.ctx_per_slot - p - 2;
    if (left < k) k = left;
    if (ctx < k) k = ctx;
    if (s->draft_rows < k) k = s->draft_rows;
    if (room < k) k = room;
    return k;
}

/* Cuts the draft where it cannot be the output: an end-of-generation
 * token where one is never sampled or a guard decides, and, under the
 * JSON guard, the first token whose bytes would break the JSON. */
static int trim_draft(const sched *s, const slot *sl, int k) {
    char buf[1024];
    size_t len = 0;
    for (int j = 0; j < k; j++) {
        int32_t t = sl->draft[j];
        if (tok_is_eog(s->tok, t) && (sl->req->ignore_eos || sl->guard || sl->cguard)) return j;
        if (!sl->guard) continue;
        int n = tok_piece(s->tok, t, 0, buf + len, sizeof buf - len);
        if (n < 0 || (size_t)n > sizeof buf - len - 1) return j;
        if (!json_guard_try(sl->guard, buf, len + (size_t)n)) return j;
        len += (size_t)n;
    }
    return k;
}

/* Recurrent models: the state before the step, kept in case drafts are
 * refused. */
static int save_state(sched *s, slot *sl) {
    if (!sl->seq.rs) return 0;
    strata_err err = {0};
    if (!sl->rs_save && !(sl->rs_save = kv_state_alloc(&s->e->kv, sl->seq.rs_floats, &err))) return -1;
    return kv_state_copy(&s->e->kv, sl->rs_save, sl->seq.rs, sl->seq.rs_floats, &err);
}

/* A draft from the sequence itself: prompt lookup, and the MTP block
 * where the model has one and lookup found nothing (or alone, with
 * --spec-drafter mtp). Lookup first: where its suffix occurred before,
 * the text is copying, and a copy is right for many tokens in a row. */
static int draft_own(sched *s, slot *sl, int k) {
    int got = s->mtp && s->o.spec_drafter == SPEC_DRAFTER_MTP ? 0 : draft_lookup(sl->toks, sl->n_toks, k, sl->draft);
    if (got > 0 || !s->mtp) return got;
    got = sched__mtp_draft(s, sl, k < SPEC_MTP_MAX ? k : SPEC_MTP_MAX);
    sl->draft_mtp = got > 0;
    return got;
}

int sched__spec_add(sched *s, int si, int *n, int room) {
    slot *sl = &s->slots[si];
    sl->n_draft = 0;
    if (s->o.spec_draft <= 0 || sl->req->no_spec) return 0;
    if (sl->spec_skip > 0) {
        sl->spec_skip--;
        return 0;
    }
    int k = draft_limit(s, sl, room);
    if (k <= 0) return 0;
    const sched_req *r = sl->req;
    int got = r->n_prediction > 0 ? draft_predicted(r->prediction, r->n_prediction, sl->toks + r->n_prompt,
                                                    sl->n_toks - r->n_prompt, k, sl->draft)
                                  : 0;
    sl->draft_predicted = got > 0;
    sl->draft_mtp = 0;
    k = got ? got : s->o.draft ? s->o.draft(s->o.draft_ctx, sl->toks, sl->n_toks, k, sl->draft) : draft_own(s, sl, k);
    k = trim_draft(s, sl, k);
    if (k <= 0) return 0;
    if (sl->seq.rs && sl->seq.rs_pos != sl->seq.n_pos) return 0; /* not where a state can be kept */
    if (save_state(s, sl)) return 0;                               /* no memory to keep it: no drafts */
    for (int j = 0; j < k; j++) sched__batch_add(s, n, si, sl->draft[j], sl->seq.n_pos + 1 + j, 1);
    sl->n_draft = k;
    s->draft_rows -= k;
    return k;
}

/* The draft length, the back-off and the counters after slot sl's
 * drafts: accepted of them were the output. A draft accepted whole lets
 * the next be longer; one cut short makes the next as long as what was
 * accepted and one more (the rows past a miss cost compute for nothing,
 * and misses come in runs: where the output departs from its source). */
static void count(sched *s, slot *sl, int accepted) {
    if (sl->n_draft == 0) return;
    sl->spec_len = accepted == sl->n_draft ? sl->n_draft + SPEC_GROW : accepted + 1;
    if (accepted > 0) sl->spec_miss = 0;
    else sl->spec_skip = 1 << (sl->spec_miss < 4 ? sl->spec_miss++ : 4);
    if (sl->spec_skip > SPEC_MAX_SKIP) sl->spec_skip = SPEC_MAX_SKIP;
    sl->n_drafted += sl->n_draft;
    sl->n_accepted += accepted;
    pthread_mutex_lock(&s->mu);
    if (sl->draft_predicted) {
        sl->req->pred_drafted += sl->n_draft;
        sl->req->pred_accepted += accepted;
    }
    s->stats.spec_drafted += sl->n_draft;
    s->stats.spec_accepted += accepted;
    if (sl->draft_mtp) {
        sl->n_mtp_drafted += sl->n_draft;
        sl->n_mtp_accepted += accepted;
        s->stats.spec_mtp_drafted += sl->n_draft;
        s->stats.spec_mtp_accepted += accepted;
    }
    s->stats.spec_steps++;
    pthread_mutex_unlock(&s->mu);
}

void sched__spec_verify(sched *s, slot *sl) {
    sched_req *r = sl->req;
    int V = s->e->m->hp.n_vocab, d = sl->n_draft, n_out = r->n_out, accepted = 0;
    sl->n_chosen = 0;
    sl->fail = NULL;
    for (int j = 0; j <= d; j++) {
        sched_token *t = &sl->chosen[sl->n_chosen];
        if (sched__choose(s, sl, s->logits + (size_t)(sl->row0 + j) * V, sl->pos0 + 1 + j, t)) break;
        sl->n_chosen++;
        /* where plain decoding would end the request: no row after it counts */
        if (tok_is_eog(s->tok, t->id) || ++n_out >= r->max_tokens || sl->pos0 + j + 2 >= s->o.ctx_per_slot) break;
        if (j == d || t->id != sl->draft[j]) break;
        accepted++;
    }
    count(s, sl, accepted);
    /* K/V is good through the last verified token: the chosen ones but the last */
    int keep = sl->pos0 + (sl->n_chosen > 0 ? sl->n_chosen : 1);
    sched__mtp_cut(s, sl, keep);
    if (keep >= sl->seq.n_pos) return;
    /* A recurrent state went through every draft: rs_pos is left past
     * n_pos, which marks it for sched__spec_rerun. */
    kv_seq_truncate(&s->e->kv, &sl->seq, keep);
}

/* Slot sl's recurrent state back to before the step, its K/V cut there,
 * and the verified tokens of the step (the one fed and the drafts that
 * were chosen) queued at *n for recomputation. */
static void queue_rerun(sched *s, int si, int *n) {
    slot *sl = &s->slots[si];
    int p = sl->pos0, end = sl->seq.n_pos;
    strata_err err = {0}; /* a copy queued on the device it was saved on: it fails with that device */
    if (kv_state_copy(&s->e->kv, sl->seq.rs, sl->rs_save, sl->seq.rs_floats, &err))
        log_error("scheduler: restoring a recurrent state failed: %s", err.msg);
    sl->seq.rs_pos = p;
    kv_seq_truncate(&s->e->kv, &sl->seq, p);
    for (int pos = p; pos < end; pos++) sched__batch_add(s, n, si, sl->toks[pos], pos, 0);
}

void sched__spec_rerun(sched *s) {
    int n = 0;
    for (int i = 0; i < s->o.n_slots; i++) {
        slot *sl = &s->slots[i];
        if (sl->req && sl->n_draft > 0 && sl->seq.rs && !sl->fail && sl->seq.rs_pos > sl->seq.n_pos)
            queue_rerun(s, i, &n);
    }
    if (n == 0) return;
    fwd_batch b = {.n = n, .tokens = s->b_tok, .seqs = s->b_seq, .pos = s->b_pos, .want = s->b_want};
    strata_err err = {0};
    if (engine_run(s->e, &b, NULL, &err) == 0) return; /* the engine's device: a GPU engine has no fwd */
    log_error("scheduler: recomputing verified tokens failed: %s", err.msg);
    for (int k = 0; k < n; k++) { /* emit finishes them, keeping nothing of the step */
        slot *sl = &s->slots[s->b_slot[k]];
        sl->n_chosen = 0;
        sl->fail = "recomputing the verified tokens of a speculative step failed";
    }
}

void sched__spec_slot_free(slot *sl) {
    sl->n_draft = sl->n_chosen = 0;
    sl->spec_skip = sl->spec_miss = sl->spec_len = 0;
    sl->n_drafted = sl->n_accepted = 0;
    sl->n_mtp_drafted = sl->n_mtp_accepted = 0;
    sl->draft_mtp = 0;
    sl->fail = NULL;
}
