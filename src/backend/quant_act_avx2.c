/* quant_act_avx2.c - activation rows to Q8_0 / Q8_1 / Q8_K built for
 * AVX2 (8 lanes): quant_act_impl.h's code, the same bytes as the base
 * build. */
#include "backend/quant_act_impl.h"

void quant_act_row_avx2(qtype act, const float *x, void *dst, int64_t n);

void quant_act_row_avx2(qtype act, const float *x, void *dst, int64_t n) { quant__act_row(act, x, dst, n); }
