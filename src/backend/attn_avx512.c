/* attn_avx512.c - attention tile kernels with AVX-512 (see attn.h).
 * Not written yet: the avx2 kernels serve this level (attn.c falls back). */
#include "backend/attn.h"

const attn_ops *attn_ops_avx512(int head_dim) {
    (void)head_dim;
    return NULL;
}
