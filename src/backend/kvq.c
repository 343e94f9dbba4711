/* kvq.c - KV element formats: names, checks, writing and reading rows
 * (see kvq.h). */
#include "backend/kvq.h"

#include <immintrin.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/cpu.h"

const char *kvq_name(kvq_type t) {
    return t == KVQ_Q8_0 ? "q8_0" : t == KVQ_Q4_0 ? "q4_0" : "f16";
}

int kvq_parse(const char *s, kvq_type *t, strata_err *err) {
    if (!s || strcmp(s, "f16") == 0) *t = KVQ_F16;
    else if (strcmp(s, "q8_0") == 0) *t = KVQ_Q8_0;
    else if (strcmp(s, "q4_0") == 0) *t = KVQ_Q4_0;
    else return strata_errf(err, STRATA_EINVAL, "--kv-type %s: unknown (f16, q8_0 or q4_0)", s);
    return 0;
}

int kvq_check(kvq_type t, int head_dim, strata_err *err) {
    if (t != KVQ_F16 && (head_dim <= 0 || head_dim % KVQ_BLOCK != 0))
        return strata_errf(err, STRATA_EINVAL,
                           "--kv-type %s: the model's head size %d is not a multiple of %d (%s stores blocks "
                           "of %d values per head); use --kv-type f16",
                           kvq_name(t), head_dim, KVQ_BLOCK, kvq_name(t), KVQ_BLOCK);
    return 0;
}

const char *kvq_numerics(kvq_type t, const char *base, char *buf, size_t cap) {
    if (t == KVQ_F16) return base;
    snprintf(buf, cap, "%s+kv-%s", base ? base : "cpu", kvq_name(t));
    return buf;
}

/* 32 values as ggml quantizes them to q8_0 (d = amax / 127, q = round(x
 * / d), from the float scale); returns d. */
static float q8_0_quant(const float *x, int8_t *q) {
    float amax = 0;
    for (int i = 0; i < KVQ_Q8_0_BLOCK; i++) amax = fmaxf(amax, fabsf(x[i]));
    float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int i = 0; i < KVQ_Q8_0_BLOCK; i++) q[i] = (int8_t)roundf(x[i] * id);
    return d;
}

/* One q8_0 block: the scale stored as a half. */
static void q8_0_block(const float *x, uint16_t *dst) {
    int8_t q[KVQ_Q8_0_BLOCK];
    dst[0] = f32_to_fp16(q8_0_quant(x, q));
    memcpy(dst + 1, q, sizeof q);
}

void kvq_quant_q8(const float *x, int n, int8_t *q, float *d) {
    for (int b = 0; b < n / KVQ_Q8_0_BLOCK; b++)
        d[b] = q8_0_quant(x + (size_t)b * KVQ_Q8_0_BLOCK, q + (size_t)b * KVQ_Q8_0_BLOCK);
}

/* One q4_0 block as ggml quantizes it: d = (the value of largest
 * magnitude, its sign kept) / -8, nibble = min(15, trunc(x / d + 8.5)). */
static void q4_0_block(const float *x, uint16_t *dst) {
    float amax = 0, max = 0;
    for (int i = 0; i < KVQ_BLOCK; i++)
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]), max = x[i];
    float d = max / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    uint8_t q[KVQ_BLOCK / 2];
    for (int j = 0; j < KVQ_BLOCK / 2; j++) {
        int lo = (int)(x[j] * id + 8.5f), hi = (int)(x[j + 16] * id + 8.5f);
        q[j] = (uint8_t)((lo < 15 ? lo : 15) | (hi < 15 ? hi : 15) << 4);
    }
    dst[0] = f32_to_fp16(d);
    memcpy(dst + 1, q, sizeof q);
}

/* An f16 row by F16C, 8 values an instruction: f32_to_fp16's bits for
 * every value but signalling NaNs (F16C quiets them), so 8 values with a
 * NaN among them take f32_to_fp16 (base/fp16.h); the scalar loop was ~2%
 * of SmolLM2's prefill. */
__attribute__((target("avx,f16c"))) static void f16_row_f16c(const float *x, uint16_t *dst, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))) {
            for (int j = i; j < i + 8; j++) dst[j] = f32_to_fp16(x[j]);
            continue;
        }
        _mm_storeu_si128((__m128i *)(void *)(dst + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    }
    for (; i < n; i++) dst[i] = f32_to_fp16(x[i]);
}

void kvq_write_row(kvq_type t, const float *x, uint16_t *dst, int n) {
    if (t == KVQ_Q4_0) {
        for (int b = 0; b < n / KVQ_BLOCK; b++)
            q4_0_block(x + (size_t)b * KVQ_BLOCK, dst + (size_t)b * KVQ_Q4_0_BLOCK_HALVES);
        return;
    }
    if (t == KVQ_Q8_0) {
        for (int b = 0; b < n / KVQ_Q8_0_BLOCK; b++)
            q8_0_block(x + (size_t)b * KVQ_Q8_0_BLOCK, dst + (size_t)b * KVQ_Q8_0_BLOCK_HALVES);
        return;
    }
    if (cpu_get()->f16c) f16_row_f16c(x, dst, n);
    else for (int i = 0; i < n; i++) dst[i] = f32_to_fp16(x[i]);
}

void kvq_read_row(kvq_type t, const uint16_t *src, float *x, int n) {
    for (int i = 0; i < n; i++) x[i] = kvq_at(t, src, i);
}
