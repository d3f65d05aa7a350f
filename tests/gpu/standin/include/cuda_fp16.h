/* SPDX-License-Identifier: GPL-2.0-or-later */
/* GPU stand-in: __half and __half2 as in the real cuda_fp16.h: 2-byte
 * storage, fp32 -> fp16 rounding to nearest even bit for bit as
 * cvt.rn.f16.f32 (subnormals kept, beyond the range to infinity, a NaN
 * becomes the canonical 0x7fff), widening exact.  Arithmetic in fp32,
 * rounded once (see cuda_bf16.h). */
#ifndef DTRAIN_STANDIN_CUDA_FP16_H
#define DTRAIN_STANDIN_CUDA_FP16_H

#include <standin_device.h>

struct __half_raw {
    unsigned short x;
};
struct __half2_raw {
    unsigned short x, y;
};

static inline unsigned short standin_f32_to_f16_rn(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t u = x & 0x7fffffffu, sign = (x >> 16) & 0x8000u, r, rem;
    if (u >= 0x7f800000u)
        return (unsigned short)(u == 0x7f800000u ? sign | 0x7c00u : 0x7fffu);
    if (u > 0x477fefffu) /* rounds to beyond the largest finite */
        return (unsigned short)(sign | 0x7c00u);
    if (u >= 0x38800000u) { /* normal */
        rem = u << 19;
        r = sign | ((u - 0x38000000u) >> 13);
    } else if (u < 0x33000001u) { /* to zero (at most half the smallest subnormal, a tie to even 0) */
        return (unsigned short)sign;
    } else { /* subnormal */
        uint32_t exponent = u >> 23, shift = 0x7eu - exponent, mantissa = (u & 0x7fffffu) | 0x800000u;
        rem = mantissa << (32u - shift);
        r = sign | (mantissa >> shift);
    }
    if (rem > 0x80000000u || (rem == 0x80000000u && (r & 1u)))
        r++;
    return (unsigned short)r;
}
static inline float standin_f16_to_f32(unsigned short h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
    if (e == 0x1fu)
        x = sign | 0x7f800000u | (m << 13);
    else if (e != 0)
        x = sign | ((e + 112u) << 23) | (m << 13);
    else if (m == 0)
        x = sign;
    else { /* subnormal: normalise */
        e = 113;
        while (!(m & 0x400u)) {
            m <<= 1;
            e--;
        }
        x = sign | (e << 23) | ((m & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &x, 4);
    return f;
}

struct __align__(2) __half {
    unsigned short __x;
    __half() = default;
    constexpr __half(const __half_raw &r) : __x(r.x) {}
    __half(float f) : __x(standin_f32_to_f16_rn(f)) {}
    __half(double f) : __x(standin_f32_to_f16_rn((float)f)) {}
    __half &operator=(const __half_raw &r) { __x = r.x; return *this; }
    operator __half_raw() const { return __half_raw{__x}; }
    operator float() const { return standin_f16_to_f32(__x); }
};
struct __align__(4) __half2 {
    __half x, y;
    __half2() = default;
    constexpr __half2(const __half &a, const __half &b) : x(a), y(b) {}
    __half2(const __half2_raw &r) { x.__x = r.x; y.__x = r.y; }
    operator __half2_raw() const { return __half2_raw{x.__x, y.__x}; }
};
static_assert(sizeof(__half) == 2 && sizeof(__half2) == 4, "gpu-standin: fp16 storage");
typedef __half half;
typedef __half2 half2;

static inline __half __ushort_as_half(unsigned short u) { return __half(__half_raw{u}); }
static inline unsigned short __half_as_ushort(__half h) { return h.__x; }
static inline __half __float2half_rn(float f) { return __ushort_as_half(standin_f32_to_f16_rn(f)); }
static inline __half __float2half(float f) { return __float2half_rn(f); }
static inline float __half2float(__half h) { return standin_f16_to_f32(h.__x); }
static inline __half2 __floats2half2_rn(float a, float b) { return __half2(__float2half_rn(a), __float2half_rn(b)); }
static inline __half2 __float22half2_rn(float2 f) { return __floats2half2_rn(f.x, f.y); }
static inline __half2 __float2half2_rn(float f) { return __floats2half2_rn(f, f); }
static inline float2 __half22float2(__half2 h) { return float2{__half2float(h.x), __half2float(h.y)}; }
static inline float __low2float(__half2 h) { return __half2float(h.x); }
static inline float __high2float(__half2 h) { return __half2float(h.y); }
static inline __half2 __halves2half2(__half a, __half b) { return __half2(a, b); }

#define STANDIN_F16_OP(OP, NAME)                                                                     \
    static inline __half NAME(__half a, __half b) { return __float2half_rn(__half2float(a) OP __half2float(b)); } \
    static inline __half operator OP(const __half &a, const __half &b) { return NAME(a, b); }      \
    static inline __half &operator OP##=(__half &a, const __half &b) { return a = NAME(a, b); }
STANDIN_F16_OP(+, __hadd)
STANDIN_F16_OP(-, __hsub)
STANDIN_F16_OP(*, __hmul)
STANDIN_F16_OP(/, __hdiv)
#undef STANDIN_F16_OP
static inline __half __hfma(__half a, __half b, __half c)
{
    return __float2half_rn(fmaf(__half2float(a), __half2float(b), __half2float(c)));
}
static inline __half __hneg(__half a) { return __ushort_as_half((unsigned short)(a.__x ^ 0x8000u)); }
static inline __half operator-(const __half &a) { return __hneg(a); }
static inline bool __hisnan(__half a) { return (a.__x & 0x7fffu) > 0x7c00u; }

#endif
