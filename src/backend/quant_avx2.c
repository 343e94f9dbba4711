/* quant_avx2.c - AVX2 + FMA (+F16C) gemm kernels.
 *
 * Same shape as quant_avx512.c: register tiles of R weight rows x T tokens
 * (AVX2 has 16 vector registers: legacy 1 x 4, K-quants 1 x 8 in prefill
 * and 4 x 1 in decode, floats 4 x 2). Batch invariance as there: every
 * (row, token) pair owns its accumulators and sees the same instructions
 * in every tile shape; row tails repeat the last row, token tails use
 * narrower tiles. In prefill (n_tok >= LG_PREP_MIN) the legacy formats
 * decode each weight row once per row chunk (tile_prep, quant_tile.h)
 * instead of once per tile; decode reads the GGUF rows directly.
 *
 * Legacy formats: one 32-element block per ymm; VPMADDUBSW (unsigned
 * weight x signed activation) then VPMADDWD into 8 int32 lanes. Q8_0 uses
 * the sign trick (|w| x sign(x, w)) because w + 128 would saturate the
 * int16 pair sums; Q4_0/Q5_0 fold their offset into a per-block minimum
 * (-8d, -16d) times the activation block sum, as Q4_1/Q5_1 do with m.
 * K-quants: scales applied in integers (VPMADDWD with the scale pattern),
 * then every level's float steps on the exact super-block sums (kq_sums):
 * the same bits as the scalar kernels. Does not: threads. */
#include <immintrin.h>

#include "backend/quant_tile.h"

#define R 4 /* weight rows per tile of the K-quant and float kernels */

AI float hsum8(__m256 a) { /* fixed order: halves, then pairs, then lanes */
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* n (< 8) floats from p, zero-filled to 8: the tail of a short group. */
AI __m256 load_part(const float *p, int n) {
    float buf[8] = {0};
    for (int i = 0; i < n; i++) buf[i] = p[i];
    return _mm256_loadu_ps(buf);
}

/* ---- legacy 32-element blocks ------------------------------------------- */

/* Half h of a 16-block activation group (quant_impl.h): lanes p = 8h + i,
 * i < 8, block qa8_lane(p). Nibble formats keep 4 packed vectors (dword c
 * of each block: low nibbles chunk c, high nibbles chunk c + 4); Q8_0 its
 * 8 chunks as signed bytes (the sign trick keeps VPMADDUBSW unsaturated). */
typedef struct {
    __m256i q[8], qh; /* qh: Q5_0/Q5_1 fifth bits, one dword per lane */
    __m256 d, m;      /* scale and minimum (Q4_0: -8d, Q5_0: -16d) */
} lg_half;

/* 4x4 dword transpose inside each 128-bit lane (see quant_avx512.c). */
AI void lg_transpose4(const __m256i *in, __m256i *out) {
    __m256i t0 = _mm256_unpacklo_epi32(in[0], in[1]), t1 = _mm256_unpackhi_epi32(in[0], in[1]);
    __m256i t2 = _mm256_unpacklo_epi32(in[2], in[3]), t3 = _mm256_unpackhi_epi32(in[2], in[3]);
    out[0] = _mm256_unpacklo_epi64(t0, t2);
    out[1] = _mm256_unpackhi_epi64(t0, t2);
    out[2] = _mm256_unpacklo_epi64(t1, t3);
    out[3] = _mm256_unpackhi_epi64(t1, t3);
}

/* Block of lane i of half h, and whether it is one of the n real ones. */
AI int lg_blk(int h, int i) { return qa8_lane(8 * h + i); }

/* 2^(e-128) of the E8M0 byte e in each dword (quant_e8m0_half). */
AI __m256 mx_e8m0(__m256i e) {
    __m256i big = _mm256_cmpgt_epi32(e, _mm256_set1_epi32(1));
    __m256i den = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    __m256i nrm = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(den, nrm, big));
}

AI void lg_load_head(int ty, const uint8_t *g, int h, int n, lg_half *o) {
    const int by = lg_bytes(ty);
    /* Built in registers: 2-byte stores then a 16-byte load would stall on
     * store forwarding. */
    __m128i dh = _mm_setzero_si128(), mh = _mm_setzero_si128(), qh = _mm_setzero_si128();
    __m128i qh2 = _mm_setzero_si128();
#define LANE(i)                                                               \
    if (lg_blk(h, i) < n) {                                                   \
        const uint8_t *b = g + lg_blk(h, i) * by;                             \
        dh = _mm_insert_epi16(dh, quant_rd16(b), i);                          \
        mh = _mm_insert_epi16(mh, quant_rd16(b + 2), i);                      \
        if (ty == L50 || ty == L51) {                                         \
            if ((i) < 4) qh = _mm_insert_epi32(qh, (int)quant_rd32(b + lg_qh_off(ty)), (i) & 3); \
            else qh2 = _mm_insert_epi32(qh2, (int)quant_rd32(b + lg_qh_off(ty)), (i) & 3); \
        }                                                                     \
    }
    LANE(0) LANE(1) LANE(2) LANE(3) LANE(4) LANE(5) LANE(6) LANE(7)
#undef LANE
    o->qh = _mm256_set_m128i(qh2, qh);
    if (ty == LMX) { /* dh holds each block's E8M0 byte (and qs[0] above it) */
        o->d = mx_e8m0(_mm256_and_si256(_mm256_cvtepu16_epi32(dh), _mm256_set1_epi32(0xff)));
        o->m = _mm256_setzero_ps();
        return;
    }
    o->d = _mm256_cvtph_ps(dh);
    if (ty == L41 || ty == L51)
        o->m = _mm256_cvtph_ps(mh);
    else
        o->m = _mm256_mul_ps(o->d, _mm256_set1_ps(ty == L40 ? -8.0f : ty == L50 ? -16.0f : 0.0f));
}

AI void lg_load(int ty, const uint8_t *g, int h, int n, lg_half *o) {
    const int by = lg_bytes(ty), qo = lg_qs_off(ty);
    if (ty == L80) { /* 8x8 dword transpose of one block per ymm */
        __m256i y[8], u[4], u2[4];
        UNROLL
        for (int i = 0; i < 8; i++)
            y[i] = lg_blk(h, i) < n ? _mm256_loadu_si256((const void *)(g + lg_blk(h, i) * by + qo))
                                    : _mm256_setzero_si256();
        lg_transpose4(y, u);
        lg_transpose4(y + 4, u2);
        /* Two loops, so the permute's selector is a literal at every
         * optimisation level (unrolling alone makes it one only at -O2). */
        UNROLL
        for (int v = 0; v < 4; v++) o->q[v] = _mm256_permute2x128_si256(u[v], u2[v], 0x20);
        UNROLL
        for (int v = 4; v < 8; v++) o->q[v] = _mm256_permute2x128_si256(u[v - 4], u2[v - 4], 0x31);
    } else { /* lanes 4L + i of block 4i + 2h + L: two 16-byte loads each */
        __m256i z[4];
        UNROLL
        for (int i = 0; i < 4; i++) {
            int j = 4 * i + 2 * h;
            __m128i a = j < n ? _mm_loadu_si128((const void *)(g + j * by + qo)) : _mm_setzero_si128();
            __m128i b = j + 1 < n ? _mm_loadu_si128((const void *)(g + (j + 1) * by + qo)) : _mm_setzero_si128();
            z[i] = _mm256_set_m128i(b, a);
        }
        lg_transpose4(z, o->q);
    }
    lg_load_head(ty, g, h, n, o);
}

/* Chunk v (elements 4v..4v+3 of each lane's block). */
AI __m256i lg_chunk(int ty, const lg_half *g, int v) {
    if (ty == L80) return g->q[v];
    const __m256i m4 = _mm256_set1_epi8(15);
    __m256i c = v < 4 ? _mm256_and_si256(g->q[v], m4)
                      : _mm256_and_si256(_mm256_srli_epi16(g->q[v - 4], 4), m4);
    if (ty == L50 || ty == L51) { /* bit 4v + i of qh -> 16 in byte i */
        const __m256i base = _mm256_setr_epi32(0, 0x04040404, 0x08080808, 0x0c0c0c0c,
                                               0, 0x04040404, 0x08080808, 0x0c0c0c0c);
        __m256i b = _mm256_shuffle_epi8(g->qh, _mm256_add_epi8(base, _mm256_set1_epi8((char)(v / 2))));
        __m256i bit = _mm256_set1_epi32(v & 1 ? (int)0x80402010 : 0x08040201);
        b = _mm256_cmpeq_epi8(_mm256_and_si256(b, bit), bit);
        c = _mm256_or_si256(c, _mm256_and_si256(b, _mm256_set1_epi8(16)));
    }
    return c;
}

/* Exact integer block sums of one half against token row x. Nibble
 * products sum 4 at a time in int16 (4 * 2 * 31 * 127 < 2^15). */
AI __m256i lg_dot(int ty, const lg_half *g, const int8_t *xq) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i sum = _mm256_setzero_si256();
    if (ty == L80) {
        UNROLL
        for (int v = 0; v < 8; v++) {
            __m256i w = g->q[v], x = _mm256_loadu_si256((const void *)(xq + 64 * v));
            __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
            sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p, ones));
        }
        return sum;
    }
    UNROLL
    for (int v0 = 0; v0 < 8; v0 += 4) {
        __m256i p = _mm256_setzero_si256();
        UNROLL
        for (int v = v0; v < v0 + 4; v++)
            p = _mm256_add_epi16(p, _mm256_maddubs_epi16(lg_chunk(ty, g, v),
                                                         _mm256_loadu_si256((const void *)(xq + 64 * v))));
        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p, ones));
    }
    return sum;
}

/* One GGUF weight row x T tokens (decode: the row is read once, so
 * preparing it would only add stores). Per (row, token) pair and half
 * group, whatever T: acc = fma(cvt(sum), d*dx, acc), then acc = fma(m, s,
 * acc); short groups in two passes of 2 used lanes each. */
AI void lg_raw_tile(int ty, const uint8_t *const *w, const uint8_t *const *x,
                int64_t k, float *out, const int T) {
    const int64_t nb = k / QK;
    const int by = lg_bytes(ty);
    __m256 acc[4];
    UNROLL
    for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t b0 = 0; b0 < nb; b0 += QA8_GROUP) {
        int n = nb - b0 < QA8_GROUP ? (int)(nb - b0) : QA8_GROUP;
        for (int h = 0; h < 2; h++) {
            lg_half g;
            lg_load(ty, w[0] + b0 * by, h, n, &g);
            UNROLL
            for (int t = 0; t < T; t++) {
                __m256i sum = lg_dot(ty, &g, qa8_qs(x[t], nb) + b0 * QK + 32 * h);
                __m256 dx = _mm256_loadu_ps(qa8_d(x[t]) + b0 + 8 * h);
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(g.d, dx), acc[t]);
                if (ty != L80)
                    acc[t] = _mm256_fmadd_ps(g.m, _mm256_loadu_ps(qa8_s(x[t], nb) + b0 + 8 * h), acc[t]);
            }
        }
    }
    UNROLL
    for (int t = 0; t < T; t++) out[t] = hsum8(acc[t]);
}


/* ---- prepared legacy rows ---------------------------------------------
 * tile_drive_prep (quant_tile.h) decodes each weight row once per row
 * chunk into the layout below, so the tiles do no unpacking per token:
 *   a group with n > 4 blocks (LG_FULL bytes): for h = 0, 1: the 8 chunk
 *     vectors of half h as lg_chunk gives them (Q8_0: the signed bytes),
 *     then d, then m (8 floats each);
 *   the last, short group, n <= 4 (LG_SHORT bytes): 4 vectors Wj holding
 *     chunks 2j and 2j + 1 of the blocks 0-3, dwords (per 128-bit half L)
 *     [blk L ch 2j, blk 2+L ch 2j, blk L ch 2j+1, blk 2+L ch 2j+1], then
 *     d and m of half 0, d and m of half 1.
 * Blocks 0-3 sit in lanes 0, 4, 8, 12 of a group (qa8_lane), so a short
 * group used 2 of 8 lanes per half; packed, its integer sums take one
 * pass of 4 vectors instead of 16, against activations packed the same
 * way per token (lg_prep_x). The sums are exact integers and the float
 * steps per half are unchanged, so the bits are those of the unpacked
 * layout. */

/* Pack dword 0 of each 128-bit half of a, b, c, d into one vector. */
AI __m256i lg_pack4(__m256i a, __m256i b, __m256i c, __m256i d) {
    return _mm256_unpacklo_epi64(_mm256_unpacklo_epi32(a, b), _mm256_unpacklo_epi32(c, d));
}

AI void lg_prep_w(int ty, const uint8_t *w, int64_t k, uint8_t *dst) {
    const int64_t nb = k / QK;
    const int by = lg_bytes(ty);
    for (int64_t b0 = 0; b0 < nb; b0 += QA8_GROUP) {
        int n = nb - b0 < QA8_GROUP ? (int)(nb - b0) : QA8_GROUP;
        lg_half g[2];
        __m256i c[2][8];
        for (int h = 0; h < 2; h++) {
            lg_load(ty, w + b0 * by, h, n, &g[h]);
            for (int v = 0; v < 8; v++) c[h][v] = lg_chunk(ty, &g[h], v);
        }
        __m256i *q = (__m256i *)(void *)dst;
        if (n <= 4) {
            for (int j = 0; j < 4; j++)
                _mm256_store_si256(q + j, lg_pack4(c[0][2 * j], c[1][2 * j], c[0][2 * j + 1], c[1][2 * j + 1]));
            float *f = (float *)(void *)(dst + 128);
            for (int h = 0; h < 2; h++) {
                _mm256_store_ps(f + 16 * h, g[h].d);
                _mm256_store_ps(f + 16 * h + 8, g[h].m);
            }
            dst += LG_SHORT;
            continue;
        }
        for (int h = 0; h < 2; h++) {
            for (int v = 0; v < 8; v++) _mm256_store_si256(q + 10 * h + v, c[h][v]);
            _mm256_store_ps((float *)(void *)(q + 10 * h + 8), g[h].d);
            _mm256_store_ps((float *)(void *)(q + 10 * h + 9), g[h].m);
        }
        dst += LG_FULL;
    }
}

/* A token row's short group packed like the weights' (4 vectors). */
static size_t lg_prep_x_bytes(int64_t k) { return lg_short(k / QK) ? 128 : 0; }
static void lg_prep_x(const uint8_t *x, int64_t k, uint8_t *dst) {
    const int64_t nb = k / QK;
    const int8_t *qs = qa8_qs(x, nb) + (nb / QA8_GROUP) * QA8_GROUP * QK;
    for (int j = 0; j < 4; j++) {
        const int8_t *e = qs + 128 * j, *o = e + 64;
        _mm256_store_si256((__m256i *)(void *)dst + j,
                           lg_pack4(_mm256_loadu_si256((const void *)e), _mm256_loadu_si256((const void *)(e + 32)),
                                    _mm256_loadu_si256((const void *)o), _mm256_loadu_si256((const void *)(o + 32))));
    }
}

/* acc = fma(cvt(sum), d*dx, acc), then acc = fma(m, s, acc) (not Q8_0):
 * the float step of one half group, the same in every path. */
AI __m256 lg_fstep(int ty, __m256i sum, const float *dm, const uint8_t *x, int64_t nb,
                   int64_t lane0, __m256 acc) {
    __m256 dx = _mm256_loadu_ps(qa8_d(x) + lane0);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(_mm256_load_ps(dm), dx), acc);
    if (ty != L80) acc = _mm256_fmadd_ps(_mm256_load_ps(dm + 8), _mm256_loadu_ps(qa8_s(x, nb) + lane0), acc);
    return acc;
}

/* One prepared half group (8 chunk vectors at q) x T tokens. Nibble
 * products sum 4 chunks at a time in int16 (4 * 2 * 31 * 127 < 2^15);
 * Q8_0 uses the sign trick (|w| x sign(x, w)), one chunk at a time. */
AI void lg_half_tile(int ty, const __m256i *q, const uint8_t *const *x, int64_t nb,
                     int64_t b0, int h, __m256 *acc, const int T) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i sum[4], p[4];
    UNROLL
    for (int t = 0; t < T; t++) sum[t] = _mm256_setzero_si256();
    UNROLL
    for (int v0 = 0; v0 < 8; v0 += 4) {
        UNROLL
        for (int t = 0; t < T; t++) p[t] = _mm256_setzero_si256();
        UNROLL
        for (int v = v0; v < v0 + 4; v++) {
            __m256i wv = _mm256_load_si256(q + v), aw = _mm256_sign_epi8(wv, wv);
            UNROLL
            for (int t = 0; t < T; t++) {
                __m256i xv = _mm256_loadu_si256((const void *)(qa8_qs(x[t], nb) + b0 * QK + 32 * h + 64 * v));
                if (ty == L80)
                    sum[t] = _mm256_add_epi32(sum[t], _mm256_madd_epi16(
                        _mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv, wv)), ones));
                else
                    p[t] = _mm256_add_epi16(p[t], _mm256_maddubs_epi16(wv, xv));
            }
        }
        if (ty != L80)
            UNROLL
            for (int t = 0; t < T; t++) sum[t] = _mm256_add_epi32(sum[t], _mm256_madd_epi16(p[t], ones));
    }
    UNROLL
    for (int t = 0; t < T; t++)
        acc[t] = lg_fstep(ty, sum[t], (const float *)(const void *)(q + 8), x[t], nb, b0 + 8 * h, acc[t]);
}

/* The prepared short group x T tokens (xs[t]: token t's packed group).
 * After one pass, dword 0 (1) of each 128-bit half holds block L's
 * (2 + L's) sums over the even chunks, dword 2 (3) over the odd ones. */
AI void lg_short_tile(int ty, const __m256i *q, const uint8_t *const *x,
                      const uint8_t *const *xs, int64_t nb, int64_t b0, __m256 *acc, const int T) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i s[4];
    UNROLL
    for (int t = 0; t < T; t++) s[t] = _mm256_setzero_si256();
    UNROLL
    for (int j = 0; j < 4; j++) {
        __m256i wv = _mm256_load_si256(q + j), aw = _mm256_sign_epi8(wv, wv);
        UNROLL
        for (int t = 0; t < T; t++) {
            __m256i xv = _mm256_load_si256((const __m256i *)(const void *)xs[t] + j);
            if (ty == L80)
                s[t] = _mm256_add_epi32(s[t], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv, wv)), ones));
            else
                s[t] = _mm256_add_epi16(s[t], _mm256_maddubs_epi16(wv, xv));
        }
    }
    const float *f = (const float *)(const void *)(q + 4);
    UNROLL
    for (int t = 0; t < T; t++) {
        __m256i u = ty == L80 ? s[t] : _mm256_madd_epi16(s[t], ones);
        u = _mm256_add_epi32(u, _mm256_shuffle_epi32(u, _MM_SHUFFLE(1, 0, 3, 2)));
        /* u: blocks L (half 0's lane 4L) and 2 + L (half 1's) in dwords 0, 1 */
        acc[t] = lg_fstep(ty, u, f, x[t], nb, b0, acc[t]);
        acc[t] = lg_fstep(ty, _mm256_shuffle_epi32(u, _MM_SHUFFLE(2, 3, 0, 1)), f + 16, x[t], nb, b0 + 8, acc[t]);
    }
}

/* One prepared weight row x T tokens (x[T + t]: token t's packed short
 * group). Lanes of the sums that hold no block meet d = 0, so they add
 * exact zeros. */
AI void lg_tile(int ty, const uint8_t *const *w, const uint8_t *const *x,
                int64_t k, float *out, const int T) {
    const int64_t nb = k / QK;
    const __m256i *q = (const __m256i *)(const void *)w[0];
    __m256 acc[4];
    UNROLL
    for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t b0 = 0; b0 < nb; b0 += QA8_GROUP) {
        if (nb - b0 <= 4) {
            lg_short_tile(ty, q, x, x + T, nb, b0, acc, T);
            break;
        }
        lg_half_tile(ty, q, x, nb, b0, 0, acc, T);
        lg_half_tile(ty, q + 10, x, nb, b0, 1, acc, T);
        q += 20;
    }
    UNROLL
    for (int t = 0; t < T; t++) out[t] = hsum8(acc[t]);
}

/* Tile sets: 1 row x {4, 2, 1} tokens, on GGUF rows below LG_PREP_MIN
 * tokens, else on prepared rows. */
#define LG_PREP_MIN 8
#define LG_KERNEL(name, ty)                                                   \
    static size_t name##_wb(int64_t k) { return lg_prep_bytes(k); }           \
    static void name##_wp(const uint8_t *w, int64_t k, uint8_t *d) { lg_prep_w(ty, w, k, d); } \
    TILE_WRAP(name, lg_tile, ty)                                              \
    TILE_T(name, 1) TILE_T(name, 2) TILE_T(name, 4)                           \
    static const tile_prep name##_prep = {                                    \
        LG_PREP_MIN, {{1, 4, name##_4}, {1, 2, name##_2}, {1, 1, name##_1}},  \
        name##_wb, name##_wp, lg_prep_x_bytes, lg_prep_x};                    \
    TILE_WRAP(name##_raw, lg_raw_tile, ty)                                    \
    TILE_T(name##_raw, 1) TILE_T(name##_raw, 2) TILE_T(name##_raw, 4)         \
    static const tile_set name##_set = {                                      \
        .s = {{1, 4, name##_raw_4}, {1, 2, name##_raw_2}, {1, 1, name##_raw_1}}, \
        .prep = &name##_prep};
LG_KERNEL(lg_q4_0, L40)
LG_KERNEL(lg_q4_1, L41)
LG_KERNEL(lg_q5_0, L50)
LG_KERNEL(lg_q5_1, L51)
LG_KERNEL(lg_q8_0, L80)

/* ---- MXFP4 (Q8_0 activations) -------------------------------------------
 * Half groups load as the legacy ones (LMX: nibbles as Q4_0, d from the
 * E8M0 byte); a byte shuffle turns nibbles into kv values and the sign
 * trick (|w| x sign(x, w)) feeds VPMADDUBSW: 8 chunks sum in int16
 * (8 * 2 * 12 * 127 < 2^15), exactly. Float steps and the final sum are
 * the scalar kernel's (acc + cvt(isum) * (dw * dx), no FMA, per lane;
 * hsum8 of the two halves' sum is quant_mx_hsum16's tree), so every level
 * gives the same bits. Tiles: 1 row x {4, 2, 1} tokens on GGUF rows. */
AI void mx_tile(const uint8_t *const *w, const uint8_t *const *x, int64_t k, float *out, const int T) {
    const int64_t nb = k / QK;
    const __m256i tab = _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12,
                                         0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[2][4];
    UNROLL
    for (int t = 0; t < T; t++) acc[0][t] = acc[1][t] = _mm256_setzero_ps();
    for (int64_t b0 = 0; b0 < nb; b0 += QA8_GROUP) {
        int n = nb - b0 < QA8_GROUP ? (int)(nb - b0) : QA8_GROUP;
        for (int h = 0; h < 2; h++) {
            lg_half g;
            lg_load(LMX, w[0] + b0 * QB_MXFP4, h, n, &g);
            __m256i p[4];
            UNROLL
            for (int t = 0; t < T; t++) p[t] = _mm256_setzero_si256();
            UNROLL
            for (int v = 0; v < 8; v++) {
                __m256i wv = _mm256_shuffle_epi8(tab, lg_chunk(LMX, &g, v)), aw = _mm256_sign_epi8(wv, wv);
                UNROLL
                for (int t = 0; t < T; t++) {
                    __m256i xv = _mm256_loadu_si256((const void *)(qa8_qs(x[t], nb) + b0 * QK + 32 * h + 64 * v));
                    p[t] = _mm256_add_epi16(p[t], _mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv, wv)));
                }
            }
            UNROLL
            for (int t = 0; t < T; t++) {
                __m256 dd = _mm256_mul_ps(g.d, _mm256_loadu_ps(qa8_d(x[t]) + b0 + 8 * h));
                __m256 isum = _mm256_cvtepi32_ps(_mm256_madd_epi16(p[t], ones));
                acc[h][t] = _mm256_add_ps(acc[h][t], _mm256_mul_ps(isum, dd));
            }
        }
    }
    UNROLL
    for (int t = 0; t < T; t++) out[t] = hsum8(_mm256_add_ps(acc[0][t], acc[1][t]));
}

TILE_T(mx_tile, 1) TILE_T(mx_tile, 2) TILE_T(mx_tile, 4)
static const tile_set mx_mxfp4_set = {.s = {{1, 4, mx_tile_4}, {1, 2, mx_tile_2}, {1, 1, mx_tile_1}}};

/* ---- K-quants (Q8_K activations) --------------------------------------- */

/* int16 scales of the 8 sub-blocks (Q4_K/Q5_K, then the 8 mins) or of the
 * 16 groups (Q6_K), as stored per super-block. */
AI __m256i kq_scales(int ty, const uint8_t *blk) {
    if (ty == K6) return _mm256_cvtepi8_epi16(_mm_loadu_si128((const void *)(blk + 192)));
    const uint8_t *s = blk + 4;
    uint32_t a = quant_rd32(s), b = quant_rd32(s + 4), c = quant_rd32(s + 8);
    uint64_t sc = (a & 0x3f3f3f3fu) |
                  (uint64_t)((c & 0x0f0f0f0fu) | ((a >> 2) & 0x30303030u)) << 32;
    uint64_t mn = (b & 0x3f3f3f3fu) |
                  (uint64_t)(((c >> 4) & 0x0f0f0f0fu) | ((b >> 2) & 0x30303030u)) << 32;
    return _mm256_cvtepu8_epi16(_mm_set_epi64x((long long)mn, (long long)sc));
}

/* 32 unsigned quants of chunk c (elements 32c..32c+31). */
AI __m256i kq_decode(int ty, const uint8_t *blk, int c) {
    const __m256i m4 = _mm256_set1_epi8(15);
    if (ty == K6) {
        int h = c / 4, s = (c / 2) & 1;
        __m256i ql = _mm256_loadu_si256((const void *)(blk + 64 * h + 32 * (c & 1)));
        __m256i lo = _mm256_and_si256(s ? _mm256_srli_epi16(ql, 4) : ql, m4);
        __m256i qh = _mm256_loadu_si256((const void *)(blk + 128 + 32 * h));
        int sh = 2 * (c % 4); /* bits sh, sh+1 -> bits 4, 5 */
        __m256i hi = sh <= 4 ? _mm256_slli_epi16(qh, 4 - sh) : _mm256_srli_epi16(qh, sh - 4);
        return _mm256_or_si256(lo, _mm256_and_si256(hi, _mm256_set1_epi8(0x30)));
    }
    const uint8_t *qs = blk + (ty == K5 ? 48 : 16) + 32 * (c / 2);
    __m256i q = _mm256_loadu_si256((const void *)qs);
    __m256i z = _mm256_and_si256((c & 1) ? _mm256_srli_epi16(q, 4) : q, m4);
    if (ty == K5) {
        __m256i bit = _mm256_set1_epi8((char)(1 << c));
        __m256i qh = _mm256_loadu_si256((const void *)(blk + 16));
        __m256i on = _mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit);
        z = _mm256_or_si256(z, _mm256_and_si256(on, _mm256_set1_epi8(16)));
    }
    return z;
}

/* int16 scale for each of the 16 VPMADDUBSW lanes of chunk c. */
AI __m256i kq_pattern(int ty, __m256i sc, int c) {
    __m128i s = _mm256_castsi256_si128(sc); /* lanes 0..7 */
    if (ty == K6) { /* groups 2c (elements 0-15) and 2c + 1 (16-31) */
        __m128i src = c < 4 ? s : _mm256_extracti128_si256(sc, 1);
        int i = (2 * c) & 7;
        return _mm256_set_m128i(
            _mm_shuffle_epi8(src, _mm_set1_epi16((short)(0x0100 + 0x0202 * (i + 1)))),
            _mm_shuffle_epi8(src, _mm_set1_epi16((short)(0x0100 + 0x0202 * i))));
    }
    __m128i lo = _mm_shuffle_epi8(s, _mm_set1_epi16((short)(0x0100 + 0x0202 * c)));
    return _mm256_set_m128i(lo, lo);
}

/* The K-quants' float steps are every level's (quant_avx512.c, "the
 * K-quants' level-independent float steps"): per pair and super-block
 * the exact integers isum and im, summed from their 8 partial lanes by
 * one transposed tree for all the tile's n pairs (kq_sums, n = 4 or 8:
 * lane i is pair i = r * T + t), then acc + (float)isum * (d_w * d_x),
 * product and sum rounded apart, the same for accm with dmin, and
 * out = acc - accm. */
AI __m256i kq_sums(const __m256i *v, const int n) {
    __m256i s[4], u[2];
    UNROLL
    for (int i = 0; i < n / 2; i++) /* 128-bit half h: pair 2i + h's 4 partial sums */
        s[i] = _mm256_add_epi32(_mm256_permute2x128_si256(v[2 * i], v[2 * i + 1], 0x20),
                                _mm256_permute2x128_si256(v[2 * i], v[2 * i + 1], 0x31));
    UNROLL
    for (int i = 0; i < n / 4; i++) u[i] = _mm256_hadd_epi32(s[2 * i], s[2 * i + 1]);
    __m256i z = _mm256_hadd_epi32(u[0], n == 8 ? u[1] : u[0]); /* dword 4h + j: pair 2j + h */
    return _mm256_permutevar8x32_epi32(z, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

AI __m256 kq_fstep(__m256 acc, __m256i isum, __m256 dw, __m256 dx) {
    return _mm256_add_ps(acc, _mm256_mul_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, dx)));
}

/* Lane i = r * T + t of a tile's pairs: v[r] (per_row) or v[t]. */
AI __m256 kq_per_pair(const float *v, int per_row, const int RR, const int T) {
#define KQ_J(i) ((i) < RR * T ? v[per_row ? (i) / T : (i) % T] : 0.0f)
    return _mm256_setr_ps(KQ_J(0), KQ_J(1), KQ_J(2), KQ_J(3), KQ_J(4), KQ_J(5), KQ_J(6), KQ_J(7));
#undef KQ_J
}

AI void kq_tile(int ty, const uint8_t *const *w, const uint8_t *const *x,
                int64_t k, float *out, const int RR, const int T) {
    const int64_t nb = k / QK_K, n = RR * T;
    const int by = ty == K4 ? QB_Q4_K : ty == K5 ? QB_Q5_K : QB_Q6_K;
    __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i sc[4], ia[8], im[8];
        float dw[4], dm[4], dx[8];
        UNROLL
        for (int r = 0; r < RR; r++) {
            sc[r] = kq_scales(ty, w[r] + b * by);
            dw[r] = _cvtsh_ss(quant_rd16(w[r] + b * by + (ty == K6 ? 208 : 0)));
            dm[r] = ty == K6 ? 0.0f : _cvtsh_ss(quant_rd16(w[r] + b * by + 2));
        }
        UNROLL
        for (int t = 0; t < T; t++) {
            __m256i bs = _mm256_loadu_si256((const void *)(qak_bsums(x[t], nb) + 16 * b));
            dx[t] = qak_d(x[t])[b];
            UNROLL
            for (int r = 0; r < RR; r++) {
                if (ty == K6) { /* the -32 offset: sum_g -32 sc_g bsum_g */
                    ia[r * T + t] = _mm256_madd_epi16(bs, _mm256_mullo_epi16(sc[r], _mm256_set1_epi16(-32)));
                } else { /* mins: sum_g m[g/2] bsum_g */
                    __m128i mn = _mm256_extracti128_si256(sc[r], 1);
                    __m256i mp = _mm256_set_m128i(_mm_unpackhi_epi16(mn, mn), _mm_unpacklo_epi16(mn, mn));
                    im[r * T + t] = _mm256_madd_epi16(bs, mp);
                    ia[r * T + t] = _mm256_setzero_si256();
                }
            }
        }
        for (int c = 0; c < 8; c++) {
            __m256i wv[4], sp[4];
            UNROLL
            for (int r = 0; r < RR; r++) {
                wv[r] = kq_decode(ty, w[r] + b * by, c);
                sp[r] = kq_pattern(ty, sc[r], c);
            }
            UNROLL
            for (int t = 0; t < T; t++) {
                __m256i xv = _mm256_loadu_si256((const void *)(qak_qs(x[t], nb) + b * QK_K + 32 * c));
                UNROLL
                for (int r = 0; r < RR; r++)
                    ia[r * T + t] = _mm256_add_epi32(ia[r * T + t], _mm256_madd_epi16(_mm256_maddubs_epi16(wv[r], xv), sp[r]));
            }
        }
        __m256 dxv = kq_per_pair(dx, 0, RR, T);
        acc = kq_fstep(acc, kq_sums(ia, n), kq_per_pair(dw, 1, RR, T), dxv);
        if (ty != K6) accm = kq_fstep(accm, kq_sums(im, n), kq_per_pair(dm, 1, RR, T), dxv);
    }
    float o[8];
    _mm256_storeu_ps(o, ty == K6 ? acc : _mm256_sub_ps(acc, accm));
    for (int i = 0; i < n; i++) out[i] = o[i];
}

/* Tiles: prefill takes 1 row x 8 tokens (the decode of a super-block is
 * then shared by 8 tokens; more rows would spill the integer sums), token
 * tails 1 x 4 and 2 x 2, decode 4 rows x 1 token (one activation load for
 * 4 rows). Any shape gives a pair the same operations. */
#define KQ_KERNEL(name, ty)                                                   \
    TILE_T2(name, ty, 1, 8) TILE_T2(name, ty, 1, 4) TILE_T2(name, ty, 2, 2)   \
    TILE_T2(name, ty, 4, 1)                                                   \
    static const tile_set name##_set = {                                      \
        .s = {{1, 8, name##_1x8}, {1, 4, name##_1x4}, {2, 2, name##_2x2}, {4, 1, name##_4x1}}};
#define TILE_T2(name, ty, RR, T)                                              \
    static void name##_##RR##x##T(const uint8_t *const *w, const uint8_t *const *x, \
                                  int64_t k, float *o) { kq_tile(ty, w, x, k, o, RR, T); }
KQ_KERNEL(kq_q4_k, K4)
KQ_KERNEL(kq_q5_k, K5)
KQ_KERNEL(kq_q6_k, K6)

/* ---- float formats (F32 activations) ----------------------------------- */

/* 8 weights from element i; n < 8 valid ones are zero-filled. */
AI __m256 fl_load(int ty, const uint8_t *row, int64_t i, int n) {
    if (ty == FF32) {
        const float *p = (const float *)(const void *)row + i;
        return n == 8 ? _mm256_loadu_ps(p) : load_part(p, n);
    }
    uint16_t buf[8] = {0};
    const uint16_t *p = (const uint16_t *)(const void *)(row + 2 * i);
    __m128i h;
    if (n == 8) {
        h = _mm_loadu_si128((const void *)p);
    } else {
        for (int j = 0; j < n; j++) buf[j] = p[j];
        h = _mm_loadu_si128((const void *)buf);
    }
    if (ty == FF16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

AI void fl_tile(int ty, const uint8_t *const *w, const uint8_t *const *x,
                int64_t k, float *out, const int T) {
    __m256 acc[R][2];
    UNROLL
    for (int r = 0; r < R; r++)
        UNROLL
        for (int t = 0; t < T; t++) acc[r][t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < k; i += 8) {
        int n = k - i < 8 ? (int)(k - i) : 8;
        __m256 wv[R];
        UNROLL
        for (int r = 0; r < R; r++) wv[r] = fl_load(ty, w[r], i, n);
        UNROLL
        for (int t = 0; t < T; t++) {
            __m256 xv = fl_load(FF32, x[t], i, n);
            UNROLL
            for (int r = 0; r < R; r++) acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]);
        }
    }
    UNROLL
    for (int r = 0; r < R; r++)
        UNROLL
        for (int t = 0; t < T; t++) out[r * T + t] = hsum8(acc[r][t]);
}

TILE_WRAP(fl_f32, fl_tile, FF32)
TILE_WRAP(fl_f16, fl_tile, FF16)
TILE_WRAP(fl_bf16, fl_tile, FBF16)
TILESET_21(fl_f32, R)
TILESET_21(fl_f16, R)
TILESET_21(fl_bf16, R)

/* ---- dispatch ------------------------------------------------------------ */

TILE_GEMMS_LEGACY
TILE_KERNELS(quant_avx2_kernel)
