/* quant_amx.h - what the AMX matmul files share: quant_amx_avx512.c (the
 * legacy formats) and quant_amx_kq_avx512.c (the K-quants): the AMX
 * level-kernel wrapper. The per-thread work buffer, quant_work, is in
 * quant_impl.h (quant_work.c). Does not: tile configuration (amx_cfg.h),
 * the register transposes (simd_tr.h). */
#ifndef STRATA_QUANT_AMX_H
#define STRATA_QUANT_AMX_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/quant_impl.h"

#define QUANT_AMX_INL \
    static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vl,avx512dq,amx-tile,amx-int8")))

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
