/* engine.c - creating and tearing down an engine (see engine.h). */
#include "model/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/attn.h"
#include "backend/delta.h"
#include "backend/quant.h"
#include "backend/cuda/cuda.h"
#include "base/cpu.h"
#include "base/mem.h"
#include "model/forward_cuda.h"

/* The training context, or less (whole blocks) so n_seq sequences of KV
 * (bytes_per_token each token: the trunk's, the MTP drafter's) plus what
 * each costs whatever its length (fixed_bytes: its sliding window, its
 * recurrent state, the drafter's fixed part) stay within budget_mb. */
static int ctx_within_budget(int train, int n_seq, size_t bytes_per_token, size_t fixed_bytes, int budget_mb, int B) {
    size_t budget = (size_t)(budget_mb > 0 ? budget_mb : 4096) << 20, fixed = fixed_bytes * (size_t)n_seq;
    size_t fit = budget > fixed ? (budget - fixed) / (bytes_per_token * (size_t)n_seq) : 0;
    size_t ctx = (size_t)(train > 0 ? train : 4096);
    if (ctx > fit) ctx = fit / (size_t)B * (size_t)B;
    return ctx < (size_t)B ? B : (int)ctx;
}

/* The pool's layers (per KV layer: sliding or not) and its slots for
 * sliding parts: the window and a chunk for each of n_seq sequences, and
 * one sequence's worth more, so the ends of recent requests stay warm
 * for a hit. */
static void pool_shape(const model *m, int B, kvq_type type, int n_seq, int max_batch, kv_pool_opts *o,
                       uint8_t *swa) {
    const model_hparams *hp = &m->hp;
    memset(swa, 0, (size_t)hp->n_kv_layer);
    int any = 0;
    for (int il = 0; il < hp->n_layer; il++)
        if (m->layers[il].kv_layer >= 0 && m->layers[il].swa && hp->n_swa > 0) swa[m->layers[il].kv_layer] = 1, any = 1;
    *o = (kv_pool_opts){.n_layer = hp->n_kv_layer, .kv_dim = hp->n_head_kv * hp->head_dim, .block_tokens = B,
                        .type = type, .head_dim = hp->head_dim};
    if (!any) return;
    o->swa_layer = swa;
    o->n_swa = hp->n_swa;
    o->n_slots = (n_seq + 1) * kv_swa_slots_per_seq(B, hp->n_swa, max_batch);
}

size_t engine_seq_state_bytes(const model *m) { return fwd_state_floats(m) * sizeof(float); }

/* --device cuda: the model's weights and one sequence's K/V go to the GPU. */
static int open_gpu(engine *e, const engine_params *p, strata_err *err) {
    const model_hparams *hp = &e->m->hp;
    e->max_batch = p->max_batch > 0 ? p->max_batch : 512;
    e->n_ctx = p->n_ctx > 0 ? p->n_ctx : (hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
    e->threads = pool_new(1);
    return fwdc_new(&e->gpu, e->m, e->n_ctx, e->max_batch, err);
}

/* The server on the GPU (--device cuda with sequences): the KV pool in
 * GPU memory, the paged pass over it. */
static int open_gpu_pool(engine *e, kv_pool_opts *po, strata_err *err) {
    int rc = fwdc_check_model(e->m, err);
    if (rc || (rc = cuda_open(err))) return rc;
    po->dev = cuda_devmem();
    if (!po->dev) return strata_errf(err, STRATA_EUNSUPPORTED, "cuda: no copy stream for the KV pool");
    if ((rc = kv_pool_init_opts(&e->kv, po, err))) return rc;
    e->threads = pool_new(1);
    return fwdc_new_paged(&e->gpu, e->m, &e->kv, e->ctx_per_seq > 0 ? e->ctx_per_seq : e->n_ctx, e->max_batch, err);
}

int engine_open(engine **out, const engine_params *p, strata_err *err) {
    *out = NULL;
    int gpu = p->device && strcmp(p->device, "cpu") != 0;
    int paged = gpu && p->n_seq > 0; /* the server: many sequences, the cache's blocks */
    if (gpu && strcmp(p->device, "cuda") != 0)
        return strata_errf(err, STRATA_EINVAL, "--device %s: unknown (cpu or cuda)", p->device);
    engine *e = xcalloc(1, sizeof *e);
    int rc = model_load(&e->m, p->model_path, err);
    if (!rc) rc = kvq_check(p->kv_type, e->m->hp.head_dim, err);
    if (!rc && gpu && p->kv_type != KVQ_F16)
        rc = strata_errf(err, STRATA_EUNSUPPORTED, "--kv-type %s: the CUDA pass stores K/V as f16 only; use --kv-type f16",
                         kvq_name(p->kv_type));
    if (!rc && gpu && !paged) rc = open_gpu(e, p, err);
    if (rc || (gpu && !paged)) {
        if (rc) engine_close(e);
        else *out = e;
        return rc;
    }
    const model_hparams *hp = &e->m->hp;
    int B = p->block_tokens > 0 ? p->block_tokens : 64;
    e->max_batch = p->max_batch > 0 ? p->max_batch : 512;
    kv_pool_opts po;
    uint8_t *swa = xmalloc((size_t)hp->n_kv_layer + 1);
    pool_shape(e->m, B, p->kv_type, p->n_seq > 0 ? p->n_seq : 1, e->max_batch, &po, swa);
    /* What the context costs per token: the global layers' K/V, and each
     * sequence's sliding window (the slots) once. */
    size_t layer_bytes = kv_layer_block_bytes(p->kv_type, po.kv_dim, B), n_swa_layer = 0;
    for (int l = 0; po.swa_layer && l < po.n_layer; l++) n_swa_layer += swa[l];
    size_t glob_block = (po.n_layer - n_swa_layer) * layer_bytes, slot_bytes = n_swa_layer * layer_bytes;
    e->n_ctx = p->n_ctx > 0 ? p->n_ctx : (hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
    if (p->n_ctx <= 0 && p->n_seq > 0) {
        if (p->mtp_draft > 0 && e->m->has_mtp && !gpu) e->mtp_counted = mtp_seq_cost(e->m, p->mtp_draft, B, p->kv_type);
        size_t per_seq = slot_bytes * (size_t)po.n_slots / (size_t)(p->n_seq + 1) + engine_seq_state_bytes(e->m) +
                         e->mtp_counted.seq_bytes;
        int want = hp->n_ctx_train > p->min_ctx ? hp->n_ctx_train : p->min_ctx;
        e->ctx_per_seq = ctx_within_budget(want, p->n_seq, glob_block / B + e->mtp_counted.token_bytes, per_seq,
                                           p->kv_budget_mb, B);
        e->n_ctx = e->ctx_per_seq * p->n_seq;
    }
    po.n_blocks = (e->n_ctx + B - 1) / B + 1; /* +1: copy-on-write headroom */
    /* Memory kept for cached prefixes: their global parts (a cached
     * block's sliding part is kept only while slots are spare). */
    po.n_blocks += (int)(((size_t)(p->extra_kv_mb > 0 ? p->extra_kv_mb : 0) << 20) / (glob_block ? glob_block : layer_bytes));
    rc = paged ? open_gpu_pool(e, &po, err) : kv_pool_init_opts(&e->kv, &po, err);
    free(swa);
    if (rc) {
        engine_close(e);
        return rc;
    }
    if (paged) {
        *out = e;
        return 0;
    }
    attn_numerics(e->m->hp.head_dim, p->kv_type, e->numerics, sizeof e->numerics);
    if (model_has_kquant(e->m)) /* their matmuls' bits changed: older blocks are never served */
        strncat(e->numerics, "+kq-int", sizeof e->numerics - strlen(e->numerics) - 1);
    if (model_has_legacy(e->m)) /* one float chain per pair since 2026-11-27: older blocks are never served */
        strncat(e->numerics, "+lg-chain", sizeof e->numerics - strlen(e->numerics) - 1);
    /* the CPU level's own bits (avx512 and amx add nothing) */
    strncat(e->numerics, quant_numerics(), sizeof e->numerics - strlen(e->numerics) - 1);
    if (e->m->hp.ssm_d_state > 0)
        strncat(e->numerics, delta_numerics(e->m->hp.ssm_d_state), sizeof e->numerics - strlen(e->numerics) - 1);
    e->threads = pool_new(p->n_threads);
    e->fwd = fwd_new(e->m, &e->kv, e->threads, e->max_batch);
    *out = e;
    return 0;
}

int engine_run(engine *e, const fwd_batch *b, float *logits, strata_err *err) {
    return e->gpu ? fwdc_run_batch(e->gpu, b, logits, err) : fwd_run(e->fwd, b, logits, err);
}

int engine_eval(engine *e, kv_seq *s, const int32_t *tokens, int n, float *logits, strata_err *err) {
    if (!e->gpu) return fwd_prefill(e->fwd, s, tokens, n, logits, err);
    if (e->kv.mem) return strata_errf(err, STRATA_EINVAL, "the server's GPU engine runs batches (engine_run)");
    for (int done = 0; done < n;) {
        int chunk = n - done < e->max_batch ? n - done : e->max_batch;
        int rc = fwdc_run(e->gpu, tokens + done, chunk, s->n_pos, 0, done + chunk == n ? logits : NULL, err);
        if (rc) return rc;
        s->n_pos += chunk;
        done += chunk;
    }
    return 0;
}

void engine_seq_cut(engine *e, kv_seq *s, int n) {
    if (e->kv.mem) kv_seq_truncate(&e->kv, s, n); /* the CPU's pool, or the GPU's paged one */
    else if (n < s->n_pos) s->n_pos = n;
}

void engine_seq_release(engine *e, kv_seq *s) {
    if (e->kv.mem) kv_seq_release(&e->kv, s);
    else s->n_pos = 0;
}

const char *engine_numerics(const engine *e) {
    return e->gpu ? CUDA_NUMERICS : e->numerics;
}

const char *engine_device(const engine *e) {
    static _Thread_local char buf[320];
    if (e->gpu) snprintf(buf, sizeof buf, "cuda (%s)", cuda_device_name());
    else snprintf(buf, sizeof buf, "cpu (%s)", cpu_level_name());
    return buf;
}

void engine_close(engine *e) {
    if (!e) return;
    fwdc_free(e->gpu);
    fwd_free(e->fwd);
    pool_free(e->threads);
    if (e->kv.mem) kv_pool_destroy(&e->kv);
    model_free(e->m);
    free(e);
}
