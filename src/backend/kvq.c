/* kvq.c - KV element formats: names, checks, writing and reading rows
 * (see kvq.h). */
#include "backend/kvq.h"

#include <math.h>
#include <stdio.h>
#include <string.h>


const char *kvq_name(kvq_type t) {
    return t == KVQ_Q8_0 ? "q8_0" : "f16";
}

int kvq_parse(const char *s, kvq_type *t, strata_err *err) {
    if (!s || strcmp(s, "f16") == 0) *t = KVQ_F16;
    else if (s && strcmp(s, "q8_0") == 0) *t = KVQ_Q8_0;
    else return strata_errf(err, STRATA_EINVAL, "--kv-type %s: unknown (f16 or q8_0)", s);
    return 0;
}

int kvq_check(kvq_type t, int head_dim, strata_err *err) {
    if (t == KVQ_Q8_0 && (head_dim <= 0 || head_dim % KVQ_Q8_0_BLOCK != 0))
        return strata_errf(err, STRATA_EINVAL,
                           "--kv-type q8_0: the model's head size %d is not a multiple of %d (q8_0 stores blocks "
                           "of %d values per head); use --kv-type f16",
                           head_dim, KVQ_Q8_0_BLOCK, KVQ_Q8_0_BLOCK);
    return 0;
}

const char *kvq_numerics(kvq_type t, const char *base, char *buf, size_t cap) {
    if (t == KVQ_F16) return base;
    snprintf(buf, cap, "%s+kv-%s", base ? base : "cpu", kvq_name(t));
    return buf;
}

/* One q8_0 block as ggml quantizes it (d = amax / 127, q = round(x / d)):
 * the scale stored as a half, the quants from the float scale. */
static void q8_0_block(const float *x, uint16_t *dst) {
    float amax = 0;
    for (int i = 0; i < KVQ_Q8_0_BLOCK; i++) amax = fmaxf(amax, fabsf(x[i]));
    float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    int8_t q[KVQ_Q8_0_BLOCK];
    for (int i = 0; i < KVQ_Q8_0_BLOCK; i++) q[i] = (int8_t)roundf(x[i] * id);
    dst[0] = f32_to_fp16(d);
    memcpy(dst + 1, q, sizeof q);
}

void kvq_write_row(kvq_type t, const float *x, uint16_t *dst, int n) {
    if (t == KVQ_Q8_0) {
        for (int b = 0; b < n / KVQ_Q8_0_BLOCK; b++)
            q8_0_block(x + (size_t)b * KVQ_Q8_0_BLOCK, dst + (size_t)b * KVQ_Q8_0_BLOCK_HALVES);
        return;
    }
    for (int i = 0; i < n; i++) dst[i] = f32_to_fp16(x[i]);
}

void kvq_read_row(kvq_type t, const uint16_t *src, float *x, int n) {
    for (int i = 0; i < n; i++) x[i] = kvq_at(t, src, i);
}
