/* engine.c - creating and tearing down an engine (see engine.h). */
#include "model/engine.h"

#include <stdlib.h>

#include "base/mem.h"

/* The training context, or less (whole blocks) so n_seq sequences of KV
 * (bytes_per_token each token) plus their fixed state (state_bytes each,
 * engine_seq_state_bytes) stay within budget_mb. */
static int ctx_within_budget(int train, int n_seq, size_t bytes_per_token, size_t state_bytes, int budget_mb, int B) {
    size_t budget = (size_t)(budget_mb > 0 ? budget_mb : 4096) << 20, states = state_bytes * (size_t)n_seq;
    size_t fit = budget > states ? (budget - states) / (bytes_per_token * (size_t)n_seq) : 0;
    size_t ctx = (size_t)(train > 0 ? train : 4096);
    if (ctx > fit) ctx = fit / (size_t)B * (size_t)B;
    return ctx < (size_t)B ? B : (int)ctx;
}

size_t engine_seq_state_bytes(const model *m) { return fwd_state_floats(m) * sizeof(float); }

int engine_open(engine **out, const engine_params *p, strata_err *err) {
    *out = NULL;
    engine *e = xcalloc(1, sizeof *e);
    int rc = model_load(&e->m, p->model_path, err);
    if (rc) {
        free(e);
        return rc;
    }
    const model_hparams *hp = &e->m->hp;
    int B = p->block_tokens > 0 ? p->block_tokens : 64;
    size_t block_bytes = (size_t)hp->n_kv_layer * 2 * B * hp->n_head_kv * hp->head_dim * 2;
    e->n_ctx = p->n_ctx > 0 ? p->n_ctx : (hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
    if (p->n_ctx <= 0 && p->n_seq > 0) {
        e->ctx_per_seq = ctx_within_budget(hp->n_ctx_train, p->n_seq, block_bytes / B, engine_seq_state_bytes(e->m),
                                           p->kv_budget_mb, B);
        e->n_ctx = e->ctx_per_seq * p->n_seq;
    }
    e->max_batch = p->max_batch > 0 ? p->max_batch : 512;
    int n_blocks = (e->n_ctx + B - 1) / B + 1; /* +1: copy-on-write headroom */
    n_blocks += (int)(((size_t)(p->extra_kv_mb > 0 ? p->extra_kv_mb : 0) << 20) / block_bytes);
    rc = kv_pool_init(&e->kv, hp->n_kv_layer, hp->n_head_kv * hp->head_dim, B, n_blocks, err);
    if (rc) {
        engine_close(e);
        return rc;
    }
    e->threads = pool_new(p->n_threads);
    e->fwd = fwd_new(e->m, &e->kv, e->threads, e->max_batch);
    *out = e;
    return 0;
}

void engine_close(engine *e) {
    if (!e) return;
    fwd_free(e->fwd);
    pool_free(e->threads);
    if (e->kv.mem) kv_pool_destroy(&e->kv);
    model_free(e->m);
    free(e);
}
