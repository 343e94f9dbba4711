/* cuda_fp16.h (host emulation, tools/cuda_emu): half floats as the
 * compiler's _Float16 (IEEE binary16, conversions round to nearest even,
 * as __float2half_rn). */
#pragma once
#include "cuda_runtime.h"

typedef _Float16 __half;
struct __half2 {
    __half x, y;
};
static inline __half __float2half_rn(float f) { return (__half)f; }
static inline float __half2float(__half h) { return (float)h; }
static inline __half __ushort_as_half(unsigned short u) { __half h; memcpy(&h, &u, 2); return h; }
static inline unsigned short __half_as_ushort(__half h) { unsigned short u; memcpy(&u, &h, 2); return u; }
static inline float __low2float(__half2 h) { return (float)h.x; }
static inline float __high2float(__half2 h) { return (float)h.y; }
static inline float2 __half22float2(__half2 h) { return float2{(float)h.x, (float)h.y}; }
static inline __half2 __floats2half2_rn(float a, float b) { return __half2{(__half)a, (__half)b}; }
