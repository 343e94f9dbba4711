/* attn.c - reference attention and level dispatch (see attn.h). */
#include "backend/attn.h"

#include <math.h>

#include "base/cpu.h"
#include "base/fp16.h"

void attn_head_scalar(const attn_args *a) {
    int B = a->block_tokens, d = a->head_dim;
    float mx = -INFINITY;
    for (int j = 0; j < a->n_kv; j++) {
        const uint16_t *k = a->k_blocks[j / B] + (size_t)(j % B) * a->stride;
        const float *kf = a->kf ? a->kf + (size_t)j * d : NULL;
        float s = 0;
        for (int i = 0; i < d; i++) s += a->q[i] * (kf ? kf[i] : fp16_to_f32(k[i]));
        s *= a->scale;
        a->scores[j] = s;
        if (s > mx) mx = s;
    }
    float sum = 0;
    for (int j = 0; j < a->n_kv; j++) {
        a->scores[j] = expf(a->scores[j] - mx);
        sum += a->scores[j];
    }
    float inv = 1.0f / sum;
    for (int i = 0; i < d; i++) a->out[i] = 0;
    for (int j = 0; j < a->n_kv; j++) {
        const uint16_t *v = a->v_blocks[j / B] + (size_t)(j % B) * a->stride;
        const float *vf = a->vf ? a->vf + (size_t)j * d : NULL;
        float p = a->scores[j] * inv;
        for (int i = 0; i < d; i++) a->out[i] += p * (vf ? vf[i] : fp16_to_f32(v[i]));
    }
}

void attn_head(const attn_args *a) {
    static void (*impl)(const attn_args *);
    if (!impl) impl = (cpu_get()->avx2 && cpu_get()->fma) ? attn_head_avx2 : attn_head_scalar;
    impl(a);
}

void attn_tile(const attn_args *a, int nq) {
    if (cpu_get()->avx2 && cpu_get()->fma) {
        attn_tile_avx2(a, nq);
        return;
    }
    for (int t = 0; t < nq; t++) attn_head_scalar(&a[t]);
}
