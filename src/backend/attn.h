/* attn.h - causal attention over paged F16 or Q8_0 keys/values, flash
 * style.
 *
 * One call computes a set of queries that read the same key/value head of
 * one sequence: the query heads of a GQA group, for one token (decode) or
 * a block of tokens (prefill). Keys and values of positions [0, n_pos)
 * live in blocks of block_tokens rows; k_blocks[i] / v_blocks[i] point at
 * this KV head's row for position i * block_tokens, and rows are `stride`
 * halves apart, stored as kv->type (backend/kvq.h: a Q8_0 tile widens to
 * the same floats at every level, so only the steps below differ).
 *
 * The key axis is cut into tiles of ATTN_KV_TILE positions at fixed
 * absolute places (tile i holds positions [64 i, 64 i + 64)). Tiles are
 * visited in order; each is widened to float once per call (keys
 * transposed) and then read by every query of the call while it is in
 * cache. Each query keeps a running max, sum and weighted-value
 * accumulator (online softmax: one pass, no score buffer of the depth's
 * size). What a query computes on a tile depends only on the query, the
 * tile's rows and the query's key range [first, end) - never on the other
 * queries of the call, how many there are, or the thread: a row gets the
 * same bits in prefill (any chunking, any query block) and in decode
 * (batch invariance, DESIGN.md).
 *
 * Segments: the key axis is also cut into segments of ATTN_SEG positions
 * at fixed absolute places (segment s holds [ATTN_SEG s, ATTN_SEG s +
 * ATTN_SEG)). A query keeps one online-softmax state per segment, started
 * afresh at the segment's first tile, and the segment states are folded
 * in segment order (attn_fold). A caller may compute the segments of one
 * query in separate calls, on separate threads (attn_run_seg), and fold
 * them itself: the bits are attn_run's. A query whose keys lie in one
 * segment (contexts up to ATTN_SEG) has a single state: folding it is the
 * plain normalisation.
 *
 * Levels (scalar, avx2, avx512, amx) give different bits from one
 * another; a process uses one level for its whole life (attn_level below).
 * The amx level (Intel AMX-BF16 tiles) multiplies bf16 heads and tails of
 * every operand, near float32 (attn_amx_avx512.c); since its bits change
 * the K/V of later layers, its blocks are filed under their own numerics
 * id (attn_numerics). Where the CPU has AVX-512 VNNI, q8_0 keys are
 * scored in int8 against the query quantized per 32 dims (attn_qk_int8,
 * attn_avx512.c): another numerics id again. */
#ifndef STRATA_ATTN_H
#define STRATA_ATTN_H

#include <stddef.h>
#include <stdint.h>

#include "backend/kvq.h"

#define ATTN_KV_TILE 64
#define ATTN_SEG 2048 /* keys per segment: a multiple of ATTN_KV_TILE */

/* One KV head of one sequence. */
typedef struct attn_kv {
    const uint16_t *const *k_blocks;
    const uint16_t *const *v_blocks;
    int block_tokens, stride, head_dim; /* stride: halves from one row to the next */
    kvq_type type;                      /* how rows are stored (zero: f16) */
} attn_kv;

/* One query row: head_dim floats, attending to key positions [first, end)
 * (end = its own position + 1; first > 0 on a sliding window). */
typedef struct attn_query {
    const float *q;
    float *out; /* head_dim floats */
    int first, end;
    const float *sink; /* gpt-oss: the head's learned sink logit, a softmax term with no value; NULL: none */
} attn_query;

/* Floats of scratch attn_run needs for nq queries of head_dim (64-byte
 * aligned buffer). */
size_t attn_ws_floats(int head_dim, int nq);

/* Computes every qs[i].out. ws: attn_ws_floats(kv->head_dim, nq) floats. */
void attn_run(const attn_kv *kv, const attn_query *qs, int nq, float scale, float *ws);

/* Floats of one query's segment state: acc[head_dim], max, sum. */
static inline size_t attn_state_floats(int head_dim) {
    return (size_t)head_dim + 2;
}

/* The segment states of every query over the keys of segment seg only
 * (the part of [first, end) in it): qs[i]'s state to states[i]
 * (attn_state_floats each; empty, sum 0, when it sees none of them).
 * qs[i].out is not touched. ws: attn_ws_floats(kv->head_dim, nq). */
void attn_run_seg(const attn_kv *kv, const attn_query *qs, int nq, float scale, int seg, float *const *states,
                  float *ws);
/* out = the n segment states of one query (contiguous, segment order)
 * folded, its sink (or NULL) added, and normalised: attn_run's result
 * for it. */
void attn_fold(int head_dim, const float *states, int n, const float *sink, float *out);

/* Attention levels. */
enum { ATTN_LEVEL_SCALAR, ATTN_LEVEL_AVX2, ATTN_LEVEL_AVX512, ATTN_LEVEL_AMX };

/* The same at a given level (tests compare levels and paths); a level the
 * CPU or the build lacks, or a head_dim it has no kernel for, falls back
 * to the next lower one. */
void attn_run_level(int level, const attn_kv *kv, const attn_query *qs, int nq, float scale, float *ws);
/* The level attn_run uses in this process. */
int attn_level(void);
/* The numerics id of this process's attention for heads of head_dim
 * stored as t, the engine's id (cache_numerics_fingerprint): "cpu" where
 * the AVX-512 float32 kernels run (the id caches were written under
 * before), "cpu+attn-amx" where the AMX ones do, "cpu+attn-avx2" and
 * "cpu+attn-scalar" where those levels' kernels do (their bits differ:
 * a replica of another CPU level sharing a tier must not be served
 * them), each with the KV type (kvq_numerics: "cpu+kv-q8_0"), and
 * "+qk-i8" after it where q8_0 keys are scored in int8 (attn_qk_int8).
 * Written to buf (cap >= 64). */
const char *attn_numerics(int head_dim, kvq_type t, char *buf, size_t cap);
/* The same for a level (tests compare the levels' ids and bits). */
const char *attn_numerics_level(int level, int head_dim, kvq_type t, char *buf, size_t cap);
/* Whether level scores keys stored as t in int8 for heads of head_dim:
 * q8_0 keys of heads up to ATTN_QK_INT8_MAX_DIM where the CPU has AVX-512
 * VNNI (attn_avx512.c). The query is then quantized per 32 dims
 * (kvq_quant_q8, from the scaled query alone: batch invariance holds) and
 * a score is sum over blocks of (int8 dot) x (key scale x query scale):
 * the query's rounding (about 1/254 of a block's largest value) joins the
 * keys', as in llama.cpp's CPU flash attention, which quantizes Q to
 * q8_0 for q8_0 K (ggml-cpu/ops.cpp, q_to_vec_dot). Other bits than the
 * float32 scoring: their own numerics id. */
int attn_qk_int8(int level, int head_dim, kvq_type t);
/* Int8 scoring serves heads up to this size (SmolLM2's, gpt-oss's 64),
 * where it is checked against llama.cpp's q8_0 K/V rows. Gemma 3's 256-dim
 * heads failed there: its 1435-token prompt's last row went 1.85 rms from
 * llama.cpp (float32 scoring of the same q8_0 keys: 0.34; the float32
 * kernels with the query merely rounded as int8 do: 1.35), so the query's
 * rounding, not the kernel, is what its q-normed heads do not bear. */
#define ATTN_QK_INT8_MAX_DIM 64

/* The AMX kernels serve heads from this size: below it, decode (2-3
 * queries per KV head, SmolLM2's 64-dim heads) pays more for the tile
 * fill than the tile products save (attn_amx_avx512.c; backend/README). */
#define ATTN_AMX_MIN_DIM 128
void attn_run_seg_level(int level, const attn_kv *kv, const attn_query *qs, int nq, float scale, int seg,
                        float *const *states, float *ws);

/* ---- per-level kernels (attn.c drives them) ------------------------------
 * kt: a tile's keys transposed, [head_dim][ATTN_KV_TILE] floats;
 * vt: its values, [ATTN_KV_TILE][head_dim] floats.
 * tile_fill: rows of positions t0 .. t0 + 63, each clamped to last (the
 *   last readable position), widened into kt and vt.
 * tile_step: one query (q already multiplied by the scale) over keys
 *   [lo, hi) of the tile (0 <= lo < hi <= 64); st = {acc[head_dim], max,
 *   sum}; p: 64 floats of scratch.
 * tile_step2 (NULL where absent): tile_step for two queries with the same
 *   [lo, hi), bit for bit, sharing the tile's loads; p: 128 floats.
 * tile_stepn (NULL where absent): tile_step for n = 3 .. stepn_max
 *   queries (4 where stepn_max is 0; at most ATTN_STEPN_MAX) with the
 *   same [lo, hi), bit for bit; p: 64 n floats.
 * prep_q (NULL where absent): the scaled query (head_dim floats) to the
 *   kernel's format, in place, once per call (the amx level; the int8
 *   scoring of q8_0 keys, whose tile_fill also writes its own key layout
 *   over kt);
 * Kernels with their own formats (the amx level) set instead:
 * tile_group: tile_step for the n queries that see the tile, each with
 *   its own [lo, hi), each query's instructions the same whatever n and
 *   company (the kernel groups them as it likes); tile_fill then writes
 *   the kernel's layouts over kt and vt (and may use as much again after
 *   vt as a stage); p is then the kernel's scratch (attn.c). The call's
 *   queries lie qstride floats apart. */
#define ATTN_STEPN_MAX 8 /* the most queries a tile_stepn takes */

typedef struct attn_gq {
    const float *q; /* as prep_q left it */
    float *st;      /* acc[head_dim], max, sum */
    int lo, hi;
    int idx; /* the query's index in the call: q is the first one's q + idx * qstride floats */
} attn_gq;

typedef struct attn_ops {
    void (*tile_fill)(const attn_kv *kv, int t0, int last, float *kt, float *vt);
    void (*tile_step)(int d, const float *q, const float *kt, const float *vt, int lo, int hi, float *st,
                      float *p);
    void (*tile_step2)(int d, const float *q0, const float *q1, const float *kt, const float *vt, int lo, int hi,
                       float *st0, float *st1, float *p);
    void (*prep_q)(int d, float *q);
    void (*tile_group)(int d, int n, const attn_gq *qs, int qstride, const float *kt, const float *vt, float *p);
    void (*group_begin)(float *p); /* before a call's first tile_group (with tile_group) */
    void (*group_end)(float *p);   /* after its last */
    void (*tile_stepn)(int d, int n, const float *const q[ATTN_STEPN_MAX], const float *kt, const float *vt, int lo,
                       int hi, float *const st[ATTN_STEPN_MAX], float *p);
    int stepn_max; /* the most queries tile_stepn takes: 4 where 0 */
} attn_ops;

extern const attn_ops attn_ops_scalar;
/* NULL where head_dim has no kernel at that level (or it was not built). */
const attn_ops *attn_ops_avx2(int head_dim);
const attn_ops *attn_ops_avx512(int head_dim);
const attn_ops *attn_ops_amx(int head_dim);
/* q8_0 keys scored in int8 (VPDPBUSD), values as the avx512 level; heads
 * of up to ATTN_QK_INT8_MAX_DIM. */
const attn_ops *attn_ops_vnni_q8(int head_dim);
/* attn_run with the given kernels (a benchmark or test comparing kernels
 * of one level; the CPU must have their instructions). */
void attn_run_ops(const attn_ops *ops, const attn_kv *kv, const attn_query *qs, int nq, float scale, float *ws);
/* The avx2 tile fill (data movement only; the avx512 level shares it). */
void attn_fill_avx2(const attn_kv *kv, int t0, int last, float *kt, float *vt);

#endif
