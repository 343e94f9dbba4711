/* quant_amx.h - what the AMX matmul files share: quant_amx_avx512.c (the
 * legacy formats) and quant_amx_kq_avx512.c (the K-quants): the 16 x 16
 * dword transpose (quant_avx512.c's legacy kernels use it too) and the
 * AMX level-kernel wrapper. The per-thread work buffer, quant_work, is in
 * quant_impl.h (quant_work.c). Does not: tile configuration (amx_cfg.h). */
#ifndef STRATA_QUANT_AMX_H
#define STRATA_QUANT_AMX_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/quant_impl.h"

#define QUANT_AMX_INL \
    static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vl,avx512dq,amx-tile,amx-int8")))

/* In place: out[c] dword r = in[r] dword c. Plain AVX-512 (no AMX), so
 * quant_avx512.c uses it too. */
static inline __attribute__((always_inline, target("avx512f"))) void quant_tr16(__m512i *r) {
    __m512i a[16], b[16];
    _Pragma("GCC unroll 16")
    for (int i = 0; i < 8; i++) {
        a[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    /* b[4i + j], 128-bit lane L: rows 4i..4i+3 at column 4L + j */
    _Pragma("GCC unroll 16")
    for (int i = 0; i < 4; i++) {
        b[4 * i] = _mm512_unpacklo_epi64(a[4 * i], a[4 * i + 2]);
        b[4 * i + 1] = _mm512_unpackhi_epi64(a[4 * i], a[4 * i + 2]);
        b[4 * i + 2] = _mm512_unpacklo_epi64(a[4 * i + 1], a[4 * i + 3]);
        b[4 * i + 3] = _mm512_unpackhi_epi64(a[4 * i + 1], a[4 * i + 3]);
    }
    _Pragma("GCC unroll 16")
    for (int j = 0; j < 4; j++) {
        __m512i c0 = _mm512_shuffle_i32x4(b[j], b[4 + j], 0x44), c1 = _mm512_shuffle_i32x4(b[8 + j], b[12 + j], 0x44);
        __m512i c2 = _mm512_shuffle_i32x4(b[j], b[4 + j], 0xee), c3 = _mm512_shuffle_i32x4(b[8 + j], b[12 + j], 0xee);
        r[j] = _mm512_shuffle_i32x4(c0, c1, 0x88);
        r[4 + j] = _mm512_shuffle_i32x4(c0, c1, 0xdd);
        r[8 + j] = _mm512_shuffle_i32x4(c2, c3, 0x88);
        r[12 + j] = _mm512_shuffle_i32x4(c2, c3, 0xdd);
    }
}

/* A level kernel `name` for weight type ty: `gemm` (the AMX path) from
 * min_tok tokens on and up to max_k inputs, else the avx512 kernel. */
#define QUANT_AMX_KERNEL(name, ty, gemm, min_tok, max_k)                                                           \
    static void name(const void *w, size_t wrb, int64_t k, const void *xq, size_t xrb, int n_tok, float *y,       \
                     int64_t ldy, int r0, int r1) {                                                                \
        if (n_tok < (min_tok) || k > (max_k))                                                                      \
            quant_avx512_kernel(ty)(w, wrb, k, xq, xrb, n_tok, y, ldy, r0, r1);                                   \
        else                                                                                                       \
            gemm(ty, w, wrb, k, xq, xrb, n_tok, y, ldy, r0, r1);                                                   \
    }

#endif
