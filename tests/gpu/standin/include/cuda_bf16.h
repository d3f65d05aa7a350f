/* SPDX-License-Identifier: GPL-2.0-or-later */
/* GPU stand-in: __nv_bfloat16 and __nv_bfloat162 as in the real
 * cuda_bf16.h: 2-byte storage, conversions from fp32 rounding to nearest
 * even bit for bit as cvt.rn.bf16.f32 (a NaN becomes the canonical 0x7fff),
 * widening exact.  Arithmetic is done in fp32 and rounded once to bf16;
 * the real sm_80+ instructions round the exact result, which only differs
 * where the fp32 result was already inexact (double rounding). */
#ifndef DTRAIN_STANDIN_CUDA_BF16_H
#define DTRAIN_STANDIN_CUDA_BF16_H

#include <standin_device.h>

struct __nv_bfloat16_raw {
    unsigned short x;
};
struct __nv_bfloat162_raw {
    unsigned short x, y;
};

static inline unsigned short standin_f32_to_bf16_rn(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return 0x7fffu;
    uint32_t r = x >> 16, rem = x << 16;
    if (rem > 0x80000000u || (rem == 0x80000000u && (r & 1u)))
        r++;
    return (unsigned short)r;
}
static inline float standin_bf16_to_f32(unsigned short h)
{
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

struct __align__(2) __nv_bfloat16 {
    unsigned short __x;
    __nv_bfloat16() = default;
    constexpr __nv_bfloat16(const __nv_bfloat16_raw &r) : __x(r.x) {}
    __nv_bfloat16(float f) : __x(standin_f32_to_bf16_rn(f)) {}
    __nv_bfloat16(double f) : __x(standin_f32_to_bf16_rn((float)f)) {}
    __nv_bfloat16 &operator=(const __nv_bfloat16_raw &r) { __x = r.x; return *this; }
    operator __nv_bfloat16_raw() const { return __nv_bfloat16_raw{__x}; }
    operator float() const { return standin_bf16_to_f32(__x); }
};
struct __align__(4) __nv_bfloat162 {
    __nv_bfloat16 x, y;
    __nv_bfloat162() = default;
    constexpr __nv_bfloat162(const __nv_bfloat16 &a, const __nv_bfloat16 &b) : x(a), y(b) {}
    __nv_bfloat162(const __nv_bfloat162_raw &r) { x.__x = r.x; y.__x = r.y; }
    operator __nv_bfloat162_raw() const { return __nv_bfloat162_raw{x.__x, y.__x}; }
};
static_assert(sizeof(__nv_bfloat16) == 2 && sizeof(__nv_bfloat162) == 4, "gpu-standin: bf16 storage");

static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { return __nv_bfloat16(__nv_bfloat16_raw{u}); }
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __ushort_as_bfloat16(standin_f32_to_bf16_rn(f)); }
static inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
static inline __nv_bfloat16 __float2bfloat16_rz(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    return __ushort_as_bfloat16((x & 0x7fffffffu) > 0x7f800000u ? 0x7fffu : (unsigned short)(x >> 16));
}
static inline float __bfloat162float(__nv_bfloat16 h) { return standin_bf16_to_f32(h.__x); }
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b)
{
    return __nv_bfloat162(__float2bfloat16_rn(a), __float2bfloat16_rn(b));
}
static inline __nv_bfloat162 __float22bfloat162_rn(float2 f) { return __floats2bfloat162_rn(f.x, f.y); }
static inline __nv_bfloat162 __float2bfloat162_rn(float f) { return __floats2bfloat162_rn(f, f); }
static inline float2 __bfloat1622float2(__nv_bfloat162 h)
{
    return float2{__bfloat162float(h.x), __bfloat162float(h.y)};
}
static inline float __low2float(__nv_bfloat162 h) { return __bfloat162float(h.x); }
static inline float __high2float(__nv_bfloat162 h) { return __bfloat162float(h.y); }
static inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat162(a, b); }
static inline __nv_bfloat16 __low2bfloat16(__nv_bfloat162 h) { return h.x; }
static inline __nv_bfloat16 __high2bfloat16(__nv_bfloat162 h) { return h.y; }

/* arithmetic: fp32, rounded once */
#define STANDIN_BF16_OP(OP, NAME)                                                                          \
    static inline __nv_bfloat16 NAME(__nv_bfloat16 a, __nv_bfloat16 b)                                     \
    {                                                                                                      \
        return __float2bfloat16_rn(__bfloat162float(a) OP __bfloat162float(b));                           \
    }                                                                                                      \
    static inline __nv_bfloat16 operator OP(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return NAME(a, b); } \
    static inline __nv_bfloat16 &operator OP##=(__nv_bfloat16 &a, const __nv_bfloat16 &b) { return a = NAME(a, b); }
STANDIN_BF16_OP(+, __hadd)
STANDIN_BF16_OP(-, __hsub)
STANDIN_BF16_OP(*, __hmul)
STANDIN_BF16_OP(/, __hdiv)
#undef STANDIN_BF16_OP
static inline __nv_bfloat16 __hfma(__nv_bfloat16 a, __nv_bfloat16 b, __nv_bfloat16 c)
{
    return __float2bfloat16_rn(fmaf(__bfloat162float(a), __bfloat162float(b), __bfloat162float(c)));
}
static inline __nv_bfloat16 __hneg(__nv_bfloat16 a) { return __ushort_as_bfloat16((unsigned short)(a.__x ^ 0x8000u)); }
static inline __nv_bfloat16 operator-(const __nv_bfloat16 &a) { return __hneg(a); }
static inline bool operator==(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return __bfloat162float(a) == __bfloat162float(b); }
static inline bool operator!=(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return __bfloat162float(a) != __bfloat162float(b); }
static inline bool operator<(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return __bfloat162float(a) < __bfloat162float(b); }
static inline bool operator>(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return __bfloat162float(a) > __bfloat162float(b); }
static inline bool operator<=(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return __bfloat162float(a) <= __bfloat162float(b); }
static inline bool operator>=(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return __bfloat162float(a) >= __bfloat162float(b); }
static inline bool __hisnan(__nv_bfloat16 a) { return (a.__x & 0x7fffu) > 0x7f80u; }

#endif
