/* SPDX-License-Identifier: GPL-2.0-or-later */
/* GPU stand-in: the device side of CUDA C++ for the host compiler.  The
 * stand-in's nvcc (tests/gpu/standin/nvcc) compiles a .cu file with g++,
 * this header included first (through cuda_runtime.h); device.cc runs a
 * kernel's threads as fibers, one block at a time on the stream's thread.
 *
 * What the execution model means for kernels:
 *  - A block's threads run one at a time, each until it reaches a barrier
 *    (__syncthreads, __syncwarp, a shuffle, a wmma *_sync) or returns, in
 *    a seeded random order that changes at every step: a missing barrier
 *    lets a thread read what another has not written yet.
 *  - __shared__ is `static thread_local`: per stream thread, which runs
 *    one block at a time, so per block.  The nvcc wrapper follows each such
 *    declaration inside a function (in the .cu file and in the headers it
 *    includes from its own directory) with standin_shared_fresh, which
 *    fills it with garbage once per block; one at namespace scope, or in a
 *    header from elsewhere, keeps the previous block's values instead.
 *    Dynamic shared memory (extern __shared__) is a fresh buffer per block,
 *    filled with the same garbage pattern.
 *  - Warp-level operations are warp barriers over the lanes of their mask
 *    (lanes that exited count as arrived); a shuffle reading a lane that
 *    did not take part returns garbage, as it is undefined in CUDA.
 * Comments say why; see device.cc for the executor. */
#ifndef DTRAIN_STANDIN_DEVICE_H
#define DTRAIN_STANDIN_DEVICE_H

#include <cuda_runtime_api.h>

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <functional>
#include <type_traits>
#include <utility>

#define DTRAIN_GPU_STANDIN 1

/* ---------------------------------------------------------------- qualifiers
 * Kernels and device functions are ordinary host functions.  They are
 * marked unused so that a kernel in an anonymous namespace that is only
 * launched through a template does not trip -Wunused-function, which nvcc
 * would not report either. */
#define __global__ __attribute__((unused))
#define __device__ __attribute__((unused))
#define __host__
#define __constant__
#define __managed__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __grid_constant__
/* Per OS thread = per block (one block at a time per stream thread). */
#define __shared__ static thread_local

/* ---------------------------------------------------------------- the thread */

/* What a fiber sees as its CUDA built-ins; device.cc points standin_cur at
 * the running fiber's copy before switching to it. */
struct standin_thread_ctx {
    uint3 thread_idx;
    uint3 block_idx;
    dim3 block_dim;
    dim3 grid_dim;
    unsigned linear; /* x + y*bx + z*bx*by: warps are made of consecutive ones */
    unsigned lane;   /* linear % 32 */
};
/* initial-exec: the stand-in library is loaded with the program (it is
 * the CUDA runtime), so a read is one load, not a __tls_get_addr call */
#define STANDIN_TLS_IE __attribute__((tls_model("initial-exec")))
extern __thread standin_thread_ctx *standin_cur STANDIN_TLS_IE;

#define threadIdx (::standin_cur->thread_idx)
#define blockIdx (::standin_cur->block_idx)
#define blockDim (::standin_cur->block_dim)
#define gridDim (::standin_cur->grid_dim)
constexpr int warpSize = 32;

/* device.cc: the barriers.  A collective is a warp barrier that, once every
 * lane of the mask has arrived (or exited), calls fn once with the args of
 * the lanes that arrived with that fn (NULL for the others), before any lane
 * resumes; fn returns NULL, or what is wrong (the block then faults). */
typedef const char *(*standin_collective_fn)(void *const lanes[32]);
void standin_syncthreads(void);
void standin_warp_collective(unsigned mask, standin_collective_fn fn, void *arg);
unsigned standin_active_mask(void);
void *standin_dynamic_shared(void);
/* The nvcc wrapper calls this after each static __shared__ declaration in
 * a function: the first thread of a block to pass it fills the variable
 * with the launch's garbage pattern, as a new block's shared memory holds
 * garbage, not the previous block's values. */
void standin_shared_fresh(void *p, size_t bytes);
/* A device fault in the running thread: sticky error, the launch ends. */
[[noreturn]] void standin_thread_fault(cudaError_t e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static inline void __syncthreads(void) { standin_syncthreads(); }
static inline void __syncwarp(unsigned mask = 0xffffffffu) { standin_warp_collective(mask, nullptr, nullptr); }
static inline unsigned __activemask(void) { return standin_active_mask(); }

/* ---------------------------------------------------------------- shuffles */

struct standin_shfl_arg {
    uint64_t value;
    int src;         /* lane read */
    uint64_t result;
};
const char *standin_shfl_collect(void *const lanes[32]);

template <typename T> static inline T standin_shfl(unsigned mask, T v, int src)
{
    static_assert(std::is_trivially_copyable<T>::value && sizeof(T) <= 8, "gpu-standin: shuffle of a type over 8 bytes");
    standin_shfl_arg a;
    a.value = 0;
    memcpy(&a.value, &v, sizeof v);
    a.src = src;
    a.result = 0;
    standin_warp_collective(mask, standin_shfl_collect, &a);
    T r;
    memcpy(&r, &a.result, sizeof r);
    return r;
}

template <typename T> static inline T __shfl_sync(unsigned mask, T v, int src_lane, int width = warpSize)
{
    int lane = (int)standin_cur->lane;
    return standin_shfl(mask, v, (lane & ~(width - 1)) + (src_lane & (width - 1)));
}
template <typename T> static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = warpSize)
{
    int lane = (int)standin_cur->lane, src = lane ^ lane_mask;
    return standin_shfl(mask, v, src / width == lane / width ? src : lane);
}
template <typename T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = warpSize)
{
    int lane = (int)standin_cur->lane;
    return standin_shfl(mask, v, (lane % width) + (int)delta < width ? lane + (int)delta : lane);
}
template <typename T> static inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = warpSize)
{
    int lane = (int)standin_cur->lane;
    return standin_shfl(mask, v, (lane % width) >= (int)delta ? lane - (int)delta : lane);
}

struct standin_vote_arg {
    int pred;
    unsigned result; /* the ballot of the lanes taking part */
};
const char *standin_vote_collect(void *const lanes[32]);
static inline unsigned __ballot_sync(unsigned mask, int pred)
{
    standin_vote_arg a = {pred != 0, 0u};
    standin_warp_collective(mask, standin_vote_collect, &a);
    return a.result & mask;
}
static inline int __all_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) == (mask & __activemask()); }
static inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0u; }

/* ---------------------------------------------------------------- atomics
 * Global memory is shared with other streams' threads (other devices'
 * kernels run concurrently): real atomic read-modify-writes, relaxed as
 * CUDA's are. */
#define STANDIN_ATOMIC_INT(T)                                                                         \
    static inline T atomicAdd(T *p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }       \
    static inline T atomicSub(T *p, T v) { return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED); }       \
    static inline T atomicAnd(T *p, T v) { return __atomic_fetch_and(p, v, __ATOMIC_RELAXED); }       \
    static inline T atomicOr(T *p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_RELAXED); }         \
    static inline T atomicXor(T *p, T v) { return __atomic_fetch_xor(p, v, __ATOMIC_RELAXED); }       \
    static inline T atomicExch(T *p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_RELAXED); }     \
    static inline T atomicCAS(T *p, T expect, T v)                                                    \
    {                                                                                                 \
        __atomic_compare_exchange_n(p, &expect, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);        \
        return expect;                                                                                \
    }                                                                                                 \
    static inline T atomicMax(T *p, T v)                                                              \
    {                                                                                                 \
        T old = __atomic_load_n(p, __ATOMIC_RELAXED);                                                 \
        while (old < v && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) \
            ;                                                                                         \
        return old;                                                                                   \
    }                                                                                                 \
    static inline T atomicMin(T *p, T v)                                                              \
    {                                                                                                 \
        T old = __atomic_load_n(p, __ATOMIC_RELAXED);                                                 \
        while (old > v && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) \
            ;                                                                                         \
        return old;                                                                                   \
    }
STANDIN_ATOMIC_INT(int)
STANDIN_ATOMIC_INT(unsigned int)
STANDIN_ATOMIC_INT(unsigned long long)
STANDIN_ATOMIC_INT(long long)
#undef STANDIN_ATOMIC_INT

/* Floating-point add: a compare-and-swap loop on the bits, as sm_60 and
 * later do it in one instruction. */
template <typename F, typename U> static inline F standin_atomic_fadd(F *p, F v)
{
    static_assert(sizeof(F) == sizeof(U), "bits");
    U *u = reinterpret_cast<U *>(p);
    U old = __atomic_load_n(u, __ATOMIC_RELAXED), nu;
    F f;
    do {
        memcpy(&f, &old, sizeof f);
        F s = f + v;
        memcpy(&nu, &s, sizeof nu);
    } while (!__atomic_compare_exchange_n(u, &old, nu, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    memcpy(&f, &old, sizeof f);
    return f;
}
static inline float atomicAdd(float *p, float v) { return standin_atomic_fadd<float, uint32_t>(p, v); }
static inline double atomicAdd(double *p, double v) { return standin_atomic_fadd<double, uint64_t>(p, v); }
static inline float atomicExch(float *p, float v)
{
    uint32_t n, o;
    memcpy(&n, &v, 4);
    o = __atomic_exchange_n(reinterpret_cast<uint32_t *>(p), n, __ATOMIC_RELAXED);
    float r;
    memcpy(&r, &o, 4);
    return r;
}
static inline unsigned atomicInc(unsigned *p, unsigned limit)
{
    unsigned old = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(p, &old, old >= limit ? 0u : old + 1u, true, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED))
        ;
    return old;
}
static inline void __threadfence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_block(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_system(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

/* ---------------------------------------------------------------- math */

/* glibc declares its own __expf & co. (with _GNU_SOURCE): CUDA's names are
 * macros for the stand-in's, which use the accurate functions (CUDA's fast
 * intrinsics are less accurate; tests compare with tolerance). */
static inline float standin_expf(float x) { return expf(x); }
static inline float standin_exp10f(float x) { return powf(10.0f, x); }
static inline float standin_logf(float x) { return logf(x); }
static inline float standin_log2f(float x) { return log2f(x); }
static inline float standin_log10f(float x) { return log10f(x); }
static inline float standin_sinf(float x) { return sinf(x); }
static inline float standin_cosf(float x) { return cosf(x); }
static inline float standin_tanf(float x) { return tanf(x); }
static inline float standin_powf(float x, float y) { return powf(x, y); }
#define __expf standin_expf
#define __exp10f standin_exp10f
#define __logf standin_logf
#define __log2f standin_log2f
#define __log10f standin_log10f
#define __sinf standin_sinf
#define __cosf standin_cosf
#define __tanf standin_tanf
#define __powf standin_powf
static inline float __fdividef(float x, float y) { return x / y; }
static inline float __frcp_rn(float x) { return 1.0f / x; }
static inline float __fsqrt_rn(float x) { return sqrtf(x); }
static inline float __fadd_rn(float x, float y) { return x + y; }
static inline float __fmul_rn(float x, float y) { return x * y; }
static inline float __fmaf_rn(float x, float y, float z) { return fmaf(x, y, z); }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float __saturatef(float x) { return x != x ? 0.0f : x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
static inline float __int_as_float(int x) { float f; memcpy(&f, &x, 4); return f; }
static inline int __float_as_int(float x) { int i; memcpy(&i, &x, 4); return i; }
static inline float __uint_as_float(unsigned x) { float f; memcpy(&f, &x, 4); return f; }
static inline unsigned __float_as_uint(float x) { unsigned i; memcpy(&i, &x, 4); return i; }
static inline double __longlong_as_double(long long x) { double d; memcpy(&d, &x, 8); return d; }
static inline long long __double_as_longlong(double x) { long long i; memcpy(&i, &x, 8); return i; }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
static inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
static inline unsigned __brev(unsigned x)
{
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
    return __builtin_bswap32(x);
}
template <typename T> static inline T __ldg(const T *p) { return *p; }
template <typename T> static inline T __ldcg(const T *p) { return *p; }
template <typename T> static inline T __ldcs(const T *p) { return *p; }
template <typename T> static inline T __ldlu(const T *p) { return *p; }
template <typename T> static inline void __stcg(T *p, T v) { *p = v; }
template <typename T> static inline void __stcs(T *p, T v) { *p = v; }
template <typename T> static inline void __stwt(T *p, T v) { *p = v; }
[[noreturn]] static inline void __trap(void) { standin_thread_fault(cudaErrorLaunchFailure, "__trap() called"); }
#if defined(__x86_64__)
static inline long long clock64(void) { return (long long)__builtin_ia32_rdtsc(); }
#else
static inline long long clock64(void) { return (long long)__builtin_readcyclecounter(); }
#endif
static inline void __nanosleep(unsigned) {}

/* CUDA's min and max overloads (math_functions.hpp), the mixed signed and
 * unsigned ones converting to the unsigned type as there. */
#define STANDIN_MINMAX(R, A, B)                                                  \
    static inline R min(A a, B b) { return (R)a < (R)b ? (R)a : (R)b; }          \
    static inline R max(A a, B b) { return (R)a > (R)b ? (R)a : (R)b; }
STANDIN_MINMAX(int, int, int)
STANDIN_MINMAX(unsigned int, unsigned int, unsigned int)
STANDIN_MINMAX(unsigned int, int, unsigned int)
STANDIN_MINMAX(unsigned int, unsigned int, int)
STANDIN_MINMAX(long, long, long)
STANDIN_MINMAX(unsigned long, unsigned long, unsigned long)
STANDIN_MINMAX(unsigned long, long, unsigned long)
STANDIN_MINMAX(unsigned long, unsigned long, long)
STANDIN_MINMAX(long long, long long, long long)
STANDIN_MINMAX(unsigned long long, unsigned long long, unsigned long long)
STANDIN_MINMAX(unsigned long long, long long, unsigned long long)
STANDIN_MINMAX(unsigned long long, unsigned long long, long long)
#undef STANDIN_MINMAX
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }
static inline double min(double a, double b) { return fmin(a, b); }
static inline double max(double a, double b) { return fmax(a, b); }
static inline double min(float a, double b) { return fmin(a, b); }
static inline double max(float a, double b) { return fmax(a, b); }
static inline double min(double a, float b) { return fmin(a, b); }
static inline double max(double a, float b) { return fmax(a, b); }

/* ---------------------------------------------------------------- vector_functions.h */

static inline int2 make_int2(int x, int y) { return int2{x, y}; }
static inline uint2 make_uint2(unsigned x, unsigned y) { return uint2{x, y}; }
static inline float2 make_float2(float x, float y) { return float2{x, y}; }
static inline uint3 make_uint3(unsigned x, unsigned y, unsigned z) { return uint3{x, y, z}; }
static inline int3 make_int3(int x, int y, int z) { return int3{x, y, z}; }
static inline float3 make_float3(float x, float y, float z) { return float3{x, y, z}; }
static inline int4 make_int4(int x, int y, int z, int w) { return int4{x, y, z, w}; }
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
static inline double2 make_double2(double x, double y) { return double2{x, y}; }

/* ---------------------------------------------------------------- launches
 * What the stand-in's nvcc makes of `K<<<grid, block, shared, stream>>>(args)`:
 *   ::standin_launch_kernel(KEY, grid, block, shared, stream,
 *                           [&](auto... a) { return [=]() { K(a...); }; }, args)
 * The arguments are evaluated and copied here, at the launch, as CUDA copies
 * a kernel's parameters; each thread of the kernel later calls K with the
 * copies (converted to the parameter types, as the launch would).  KEY
 * identifies the kernel for cudaFuncSetAttribute (NULL for a template the
 * launch deduces: the nvcc wrapper cannot name its instance). */
void standin_launch(const void *func, dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                    std::function<void()> body);

template <typename F> static inline const void *standin_func_key(F *f) { return reinterpret_cast<const void *>(f); }

template <typename G, typename... A>
static inline void standin_launch_kernel(const void *func, dim3 grid, dim3 block, size_t shared_bytes,
                                         cudaStream_t stream, G bind, A &&...args)
{
    standin_launch(func, grid, block, shared_bytes, stream,
                   std::function<void()>(bind(typename std::decay<A>::type(std::forward<A>(args))...)));
}

#endif
