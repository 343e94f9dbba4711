/* attn_exp_all.c - attn_exp512 (p 2^n by VSCALEFPS) against p times the
 * float with exponent n + 127 (its form before, and attn_avx2.c's
 * exp256's) for every float x <= 0 (all 2^31 patterns with the sign bit,
 * -0 and -inf and the negative NaNs among them) and every positive NaN:
 * the inputs attention gives it (a score minus the running max; +inf
 * would be inf - inf, a NaN, so it is left out: it differs, as every
 * x >= 88.4 does, where the old form's exponent overflows). Where
 * the CPU has AVX-512 (`make check-attn-exp`); prints the mismatches
 * (the first few shown); exits 1 if any differ. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "backend/attn_simd.h"
#include "base/cpu.h"

/* Patterns [first, first + count) (a multiple of 16); returns mismatches. */
static uint64_t check(uint64_t first, uint64_t count) {
    uint64_t bad = 0;
    for (uint64_t b = first; b < first + count; b += 16) {
        uint32_t w[16];
        for (int i = 0; i < 16; i++) w[i] = (uint32_t)(b + (uint64_t)i);
        __m512 x, n;
        __mmask16 under;
        memcpy(&x, w, sizeof x);
        __m512 p = attn_exp512_parts(x, &n, &under);
        __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
        __m512 want = _mm512_maskz_mul_ps((__mmask16)~under, p, _mm512_castsi512_ps(e)), got = attn_exp512(x);
        __mmask16 ne = _mm512_cmpneq_epi32_mask(_mm512_castps_si512(want), _mm512_castps_si512(got)) &
                       ~_mm512_cmpeq_epi32_mask(_mm512_castps_si512(x), _mm512_set1_epi32(0x7f800000));
        for (int i = 0; i < 16; i++)
            if (ne >> i & 1 && bad++ < 5) {
                float xf, wf, gf;
                memcpy(&xf, &w[i], 4), memcpy(&wf, (float *)&want + i, 4), memcpy(&gf, (float *)&got + i, 4);
                printf("x = %08x (%g): %g, want %g\n", w[i], xf, gf, wf);
            }
    }
    return bad;
}

int main(void) {
    if (!cpu_get()->avx512f) {
        printf("no AVX-512 on this CPU: nothing to check\n");
        return 0;
    }
    uint64_t bad = check(0x7f800000u, 0x80800000u); /* +inf, the positive NaNs, then every x <= 0 */
    printf("attn_exp512, x <= 0 and NaN: %llu of %llu differ\n", (unsigned long long)bad,
           (unsigned long long)0x80800000u - 1);
    return bad != 0;
}
