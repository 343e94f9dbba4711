/* sched_mtp.c - the scheduler's side of the MTP drafter (model/mtp.h;
 * see sched_int.h for the calls).
 *
 * Each slot has a sequence of the block (slot.mtp) beside its trunk
 * sequence. After every forward pass the block takes the pass's tokens
 * with the trunk's hidden states (prefill chunks, decode tokens and the
 * drafts being verified), before verification cuts anything, since a
 * recurrent model's recomputation of the verified tokens overwrites the
 * hidden states (with the same bits). Verification then cuts the block's
 * sequence with the trunk's (sched_spec.c). A slot resuming from the
 * prefix cache starts its block sequence at the first position it
 * computes (mtp.h says why). Drafting itself runs when the step's batch
 * is built: the block on the slot's last token and the hidden state
 * before it, chained for k tokens.
 * Does not: choose between drafters or verify (sched_spec.c). */
#include <stdlib.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/mem.h"
#include "server/sched_int.h"

void sched__mtp_setup(sched *s) {
    const engine *e = s->e;
    if (!e->m->has_mtp && s->o.spec_drafter == SPEC_DRAFTER_MTP && s->o.spec_draft > 0)
        log_warn("mtp: --spec-drafter mtp, but the model has no MTP block; prompt lookup drafts");
    if (!e->m->has_mtp || s->o.spec_draft <= 0 || s->o.spec_drafter == SPEC_DRAFTER_LOOKUP) return;
    if (e->gpu || !e->fwd) {
        log_info("mtp: drafting with the MTP block runs on the CPU pass only; prompt lookup drafts");
        return;
    }
    strata_err err = {0};
    if (mtp_new(&s->mtp, e->m, e->threads, s->o.n_slots, s->o.ctx_per_slot, s->o.spec_draft, e->max_batch,
                e->kv.block_tokens, e->kv.type, &err)) {
        log_warn("mtp: no MTP drafter: %s; prompt lookup drafts", err.msg);
        return;
    }
    fwd_keep_hidden(e->fwd, 1);
    s->b_mtp = xmalloc((size_t)e->max_batch * sizeof(*s->b_mtp));
    for (int i = 0; i < s->o.n_slots; i++) mtp_seq_init(s->mtp, &s->slots[i].mtp);
    log_info("mtp: drafting from the model's MTP block (%s); its K/V %.1f MiB",
             s->o.spec_drafter == SPEC_DRAFTER_MTP ? "only" : "where prompt lookup finds nothing",
             mtp_kv_bytes(s->mtp) / 1048576.0);
}

void sched__mtp_free(sched *s) {
    if (!s->mtp) return;
    for (int i = 0; i < s->o.n_slots; i++) mtp_seq_release(s->mtp, &s->slots[i].mtp);
    mtp_free(s->mtp);
    s->mtp = NULL;
    fwd_keep_hidden(s->e->fwd, 0);
    free(s->b_mtp);
}

static void add_ms(sched *s, double ms) {
    pthread_mutex_lock(&s->mu);
    s->stats.spec_mtp_ms += ms;
    pthread_mutex_unlock(&s->mu);
}

void sched__mtp_feed(sched *s, int n) {
    if (!s->mtp || n == 0) return;
    double t0 = clock_ms();
    for (int k = 0; k < n; k++) s->b_mtp[k] = &s->slots[s->b_slot[k]].mtp;
    fwd_batch b = {.n = n, .tokens = s->b_tok, .seqs = s->b_seq, .pos = s->b_pos, .want = s->b_want};
    strata_err err = {0};
    if (mtp_feed(s->mtp, &b, s->b_mtp, fwd_hidden(s->e->fwd), &err)) /* its sequences start again */
        log_warn("mtp: keeping the block's K/V failed: %s; drafts resume later", err.msg);
    add_ms(s, clock_ms() - t0);
}

int sched__mtp_draft(sched *s, slot *sl, int k) {
    if (!s->mtp) return 0;
    double t0 = clock_ms();
    strata_err err = {0};
    int got = mtp_draft(s->mtp, &sl->mtp, sl->last, sl->seq.n_pos, k, sl->draft, NULL, &err);
    if (got < k && err.code) log_warn("mtp: drafting failed: %s", err.msg);
    add_ms(s, clock_ms() - t0);
    return got;
}

void sched__mtp_cut(sched *s, slot *sl, int n) {
    if (!s->mtp) return;
    if (n == 0) mtp_seq_reset(s->mtp, &sl->mtp);
    else mtp_seq_cut(s->mtp, &sl->mtp, n);
}
