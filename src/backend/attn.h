/* attn.h - causal attention of one query head over paged F16 keys/values.
 *
 * Keys and values of positions [0, n_kv) live in blocks of block_tokens
 * rows; k_blocks[i] / v_blocks[i] point at this head's first row in block
 * i, rows are `stride` halves apart. The result depends only on q and the
 * stored rows, never on the batch: positions are visited in order and
 * every reduction has a fixed order (batch invariance, DESIGN.md). */
#ifndef STRATA_ATTN_H
#define STRATA_ATTN_H

#include <stdint.h>

typedef struct attn_args {
    const float *q;
    const uint16_t *const *k_blocks;
    const uint16_t *const *v_blocks;
    int block_tokens, stride, head_dim, n_kv;
    /* Optional: the same rows already widened to float, contiguous
     * (row j at kf + j * head_dim). Widening F16 is exact, so both sources
     * give bit-identical results; prefill uses these to convert each row
     * once instead of once per query. */
    const float *kf, *vf;
    float scale;
    float *scores; /* scratch, n_kv floats */
    float *out;    /* head_dim floats */
} attn_args;

void attn_head(const attn_args *a);

/* Up to ATTN_TILE queries of one head over one sequence (each a[t] as for
 * attn_head, with kf/vf set): results bit-identical to attn_head on each,
 * computed with one pass over the keys for the whole tile. */
#define ATTN_TILE 8
void attn_tile(const attn_args *a, int nq);

/* Per-level implementations (attn.c dispatches). */
void attn_head_scalar(const attn_args *a);
void attn_head_avx2(const attn_args *a);
void attn_tile_avx2(const attn_args *a, int nq);

#endif
