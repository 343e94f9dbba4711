/* fp16.h - IEEE half and bfloat16 conversions (scalar, exact).
 * Bit-exact with numpy (tests/test_quant.c checks every half and many
 * floats): round to nearest even; NaN payloads are kept, not quieted
 * (half -> float shifts the payload up; float -> half keeps its top ten
 * bits, forcing a nonzero payload). F16C instructions agree on every
 * non-NaN value but quiet signalling NaNs. */
#ifndef STRATA_FP16_H
#define STRATA_FP16_H

#include <stdint.h>
#include <string.h>

static inline float fp16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            exp = 127 - 15 + 1;
            while (!(mant & 0x400)) { mant <<= 1; exp--; }
            bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000 | (mant << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t f32_to_fp16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t absx = x & 0x7fffffff;
    if (absx > 0x7f800000) { /* NaN: keep the payload's top bits, as numpy */
        uint32_t m = (absx & 0x7fffff) >> 13;
        return (uint16_t)(sign | 0x7c00 | (m ? m : 1));
    }
    if (absx >= 0x477ff000) return (uint16_t)(sign | 0x7c00); /* overflow -> inf */
    if (absx < 0x38800000) { /* subnormal or zero in half */
        if (absx < 0x33000000) return (uint16_t)sign;
        uint32_t e = absx >> 23, m = (absx & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e; /* 14 + (113 - e) - 1 */
        uint32_t half = m >> (shift);
        uint32_t rem = m & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t r = absx + 0xfff + ((absx >> 13) & 1); /* round to nearest even */
    return (uint16_t)(sign | ((r - 0x38000000) >> 13));
}

static inline float bf16_to_f32(uint16_t b) {
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 64); /* quiet NaN */
    return (uint16_t)((x + (0x7fff + ((x >> 16) & 1))) >> 16);
}

#endif
