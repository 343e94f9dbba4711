/* moe.h - the mixture-of-experts feed-forward's pure parts: an expert's
 * matrix as a view into the mapped stack, and one token's routing.
 *
 * The feed-forward itself (router matmul, experts, shared expert) runs
 * inside the forward pass: moe_ffn in forward_int.h, moe.c.
 * Does not: allocate, thread or read GGUF metadata (model_moe.c). */
#ifndef STRATA_MOE_H
#define STRATA_MOE_H

#include "model/model.h"

/* Expert e's matrix of the stack x: a view of its slice of the map. */
model_tensor moe_expert(const model_experts *x, int e);

/* One token's routing from its n_expert router logits (bias already
 * added): the hp->n_expert_used chosen experts, best first (ties: the
 * lower id), in ids, and their weights in w, by hp->expert_gating,
 * expert_norm and expert_scale (model.h). scratch: n_expert floats. */
void moe_route(const model_hparams *hp, const float *logits, float *scratch, int *ids, float *w);

/* n tokens' k chosen experts each (ids: [n][k]) as slots grouped by
 * expert, tokens in batch order within one (the CPU's and the GPU's
 * grouping): expert e's slots are [first[e], first[e + 1]) (first:
 * n_expert + 1 ints), slot_of[t k + j] is token t's j-th expert's slot,
 * slot_tok[s] and slot_exp[s] (NULL: not wanted) slot s's token and
 * expert. fill: n_expert ints of scratch. */
void moe_group(const int *ids, int n, int k, int n_expert, int *first, int *fill, int *slot_of, int *slot_tok,
               int *slot_exp);

#endif
