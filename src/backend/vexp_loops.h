/* vexp_loops.h - the loops of vexp.h over whole vectors, written once
 * over a level's vector type. Each level file (vexp_avx2.c, vexp_avx512.c)
 * includes it once, at its end, after defining VX_LEVEL (its suffix), the
 * float vector type `vx` of VX_W lanes (__m256, __m512: GNU C vectors, so
 * + - * / are one IEEE operation per lane, never contracted: -std=c11),
 * vx_min(a, b) / vx_max(a, b) (MINPS / MAXPS: a < b ? a : b and
 * a > b ? a : b, b when either is NaN), vx_exp_main(&tab, x) (glibc's
 * main path per lane) with the table of 2^(i/32) as the level holds it
 * (vx_tab, made by vx_tab_make once per loop, so it stays in registers),
 * and vx_special(x) (the bit mask of lanes with |x| >= 88 or NaN). No
 * include guard: one inclusion per level file. */
#include "backend/vexp_impl.h"

#include <string.h>

static inline vx vx_load(const float *p) {
    vx v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void vx_store(float *p, vx v) { memcpy(p, &v, sizeof v); }

/* libm's expf per lane: the main path, and libm itself on the special
 * lanes (rare in activations). */
static inline vx vx_exp(const vx_tab *T, vx x) {
    vx e = vx_exp_main(T, x);
    unsigned special = vx_special(x);
    if (__builtin_expect(special != 0, 0)) {
        float eb[VX_W], xb[VX_W];
        vx_store(eb, e);
        vx_store(xb, x);
        vexp__fix(eb, xb, special);
        e = vx_load(eb);
    }
    return e;
}

#define VX_CAT2(a, b) a##_##b
#define VX_CAT(a, b) VX_CAT2(a, b)
#define VX_FN(name) VX_CAT(name, VX_LEVEL)

void VX_FN(vexp_expf)(float *y, const float *x, size_t n);
void VX_FN(vexp_silu_mul)(float *out, const float *g, const float *u, size_t n);
void VX_FN(vexp_sigmoid_mul)(float *o, const float *g, size_t n);
void VX_FN(vexp_swiglu_oai)(float *out, const float *g, const float *u, size_t n, float alpha, float limit);

/* Whole vectors here, the rest one by one with libm's expf: the same
 * bits, so an element's result does not depend on where its row ends. */
void VX_FN(vexp_expf)(float *y, const float *x, size_t n) {
    const vx_tab tab = vx_tab_make();
    size_t i = 0;
    for (; i + VX_W <= n; i += VX_W) vx_store(y + i, vx_exp(&tab, vx_load(x + i)));
    vexp__expf_scalar(y + i, x + i, n - i);
}

/* g / (1 + e^-g) * u, the operations of the scalar loop in its order. */
void VX_FN(vexp_silu_mul)(float *out, const float *g, const float *u, size_t n) {
    const vx_tab tab = vx_tab_make();
    size_t i = 0;
    for (; i + VX_W <= n; i += VX_W) {
        vx gi = vx_load(g + i), s = gi / (1.0f + vx_exp(&tab, -gi));
        if (u) s = s * vx_load(u + i);
        vx_store(out + i, s);
    }
    vexp__silu_mul_scalar(out + i, g + i, u ? u + i : NULL, n - i);
}

void VX_FN(vexp_sigmoid_mul)(float *o, const float *g, size_t n) {
    const vx_tab tab = vx_tab_make();
    size_t i = 0;
    for (; i + VX_W <= n; i += VX_W) {
        vx s = 1.0f / (1.0f + vx_exp(&tab, -vx_load(g + i)));
        vx_store(o + i, vx_load(o + i) * s);
    }
    vexp__sigmoid_mul_scalar(o + i, g + i, n - i);
}

/* x = g < limit ? g : limit is MINPS(g, limit); t = u > limit ? limit : u
 * is MINPS(limit, u), and u < -limit ? -limit : t is MAXPS(-limit, t)
 * (t is u wherever u < -limit; a NaN u stays NaN through both). */
void VX_FN(vexp_swiglu_oai)(float *out, const float *g, const float *u, size_t n, float alpha, float limit) {
    const vx_tab tab = vx_tab_make();
    const vx zero = {0}, hi = zero + limit, lo = zero - limit;
    size_t i = 0;
    for (; i + VX_W <= n; i += VX_W) {
        vx x = vx_min(vx_load(g + i), hi), y = vx_max(lo, vx_min(hi, vx_load(u + i)));
        vx s = x / (1.0f + vx_exp(&tab, alpha * -x));
        vx_store(out + i, s * (y + 1.0f));
    }
    vexp__swiglu_oai_scalar(out + i, g + i, u + i, n - i, alpha, limit);
}
