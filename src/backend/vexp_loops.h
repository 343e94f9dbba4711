/* vexp_loops.h - the loops of vexp.h over whole vectors, written once
 * over a level's vector type. Each level file (vexp_avx2.c, vexp_avx512.c)
 * includes it once, at its end, after defining VX_LEVEL (its suffix), the
 * float vector type `vx` of VX_W lanes, vx_load / vx_store (unaligned),
 * vx_add / vx_mul / vx_div (one IEEE operation per lane, never
 * contracted: -std=c11), vx_min(a, b) / vx_max(a, b) (MINPS / MAXPS:
 * a < b ? a : b and a > b ? a : b, b when either is NaN), vx_neg (the
 * sign flipped), vx_set1, and
 * vx_exp(&tab, x) (libm's expf per lane) with the table of 2^(i/32) as
 * the level holds it: vx_tab, made by vx_tab_make once per loop (so it
 * stays in registers). No include guard: one inclusion per level file. */
#include "backend/vexp_impl.h"

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
    const vx one = vx_set1(1.0f);
    size_t i = 0;
    for (; i + VX_W <= n; i += VX_W) {
        vx gi = vx_load(g + i), s = vx_div(gi, vx_add(one, vx_exp(&tab, vx_neg(gi))));
        vx_store(out + i, u ? vx_mul(s, vx_load(u + i)) : s);
    }
    vexp__silu_mul_scalar(out + i, g + i, u ? u + i : NULL, n - i);
}

void VX_FN(vexp_sigmoid_mul)(float *o, const float *g, size_t n) {
    const vx_tab tab = vx_tab_make();
    const vx one = vx_set1(1.0f);
    size_t i = 0;
    for (; i + VX_W <= n; i += VX_W) {
        vx s = vx_div(one, vx_add(one, vx_exp(&tab, vx_neg(vx_load(g + i)))));
        vx_store(o + i, vx_mul(vx_load(o + i), s));
    }
    vexp__sigmoid_mul_scalar(o + i, g + i, n - i);
}

/* x = g < limit ? g : limit is MINPS(g, limit); t = u > limit ? limit : u
 * is MINPS(limit, u), and u < -limit ? -limit : t is MAXPS(-limit, t)
 * (t is u wherever u < -limit; a NaN u stays NaN through both). */
void VX_FN(vexp_swiglu_oai)(float *out, const float *g, const float *u, size_t n, float alpha, float limit) {
    const vx_tab tab = vx_tab_make();
    const vx one = vx_set1(1.0f), a = vx_set1(alpha), hi = vx_set1(limit), lo = vx_set1(-limit);
    size_t i = 0;
    for (; i + VX_W <= n; i += VX_W) {
        vx x = vx_min(vx_load(g + i), hi), y = vx_max(lo, vx_min(hi, vx_load(u + i)));
        vx s = vx_div(x, vx_add(one, vx_exp(&tab, vx_mul(a, vx_neg(x)))));
        vx_store(out + i, vx_mul(s, vx_add(y, one)));
    }
    vexp__swiglu_oai_scalar(out + i, g + i, u + i, n - i, alpha, limit);
}
