/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The GPU stand-in's device side (device.cc, include/standin_device.h,
 * mma.h, cuda_bf16.h, cuda_fp16.h, the nvcc wrapper), compiled through the
 * stand-in's nvcc so that the launch rewrite is tested too: barriers and
 * their absence, shuffles, wmma, atomics, launch limits, a deadlock, the
 * arguments' copy at launch, conversions, and the real kernels/cuda
 * sources compiling with -Wall -Wextra -Werror.
 *
 * The runs that end in a sticky device fault (a deadlock, a misaligned
 * wmma pointer) or that must be repeated in a fresh process (determinism
 * for a seed) run in a child process: this program re-executed with a mode
 * argument. */
#include "tap.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <string>

namespace {

constexpr int N = 256;

/* ---------------------------------------------------------------- kernels */

/* tree reduction of N ints; SYNC_LOOP false drops the barrier of the loop */
template <bool SYNC_LOOP> __global__ void reduce_kernel(int *out, const int *in)
{
    __shared__ int s[N];
    int t = threadIdx.x;
    s[t] = in[blockIdx.x * N + t];
    __syncthreads();
    for (int stride = N / 2; stride > 0; stride >>= 1) {
        if (t < stride)
            s[t] += s[t + stride];
        if (SYNC_LOOP)
            __syncthreads();
    }
    if (t == 0)
        out[blockIdx.x] = s[0];
}

/* per warp: the butterfly sum of the lanes' values in every lane */
__global__ void warp_sum_kernel(float *out, const float *in)
{
    float v = in[threadIdx.x];
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    out[threadIdx.x] = v;
}

/* lane reads its neighbour's value through shared memory: needs __syncwarp */
template <bool SYNC> __global__ void neighbour_kernel(int *out)
{
    extern __shared__ int nb[];
    int lane = threadIdx.x % 32;
    nb[threadIdx.x] = (int)threadIdx.x * 3;
    if (SYNC)
        __syncwarp();
    out[threadIdx.x] = nb[threadIdx.x - lane + (lane + 1) % 32];
}

__global__ void shfl_variants_kernel(int *out)
{
    int lane = threadIdx.x % 32;
    out[4 * threadIdx.x + 0] = __shfl_sync(0xffffffffu, lane * 10, 5);
    out[4 * threadIdx.x + 1] = __shfl_down_sync(0xffffffffu, lane * 10, 3);
    out[4 * threadIdx.x + 2] = __shfl_up_sync(0xffffffffu, lane * 10, 2);
    out[4 * threadIdx.x + 3] = (int)__ballot_sync(0xffffffffu, lane % 3 == 0);
}

/* the two half-warps reduce separately, each with its own mask */
__global__ void half_warp_kernel(int *out)
{
    int lane = threadIdx.x % 32;
    unsigned mask = lane < 16 ? 0x0000ffffu : 0xffff0000u;
    int v = lane;
    for (int o = 8; o > 0; o >>= 1)
        v += __shfl_xor_sync(mask, v, o);
    __syncwarp(mask);
    out[threadIdx.x] = v;
}

using namespace nvcuda;

/* D = A B + C, A row-major 16x16, B row- or col-major, C and D in layout lc */
template <typename LB>
__global__ void wmma_kernel(float *d, const __nv_bfloat16 *a, const __nv_bfloat16 *b, const float *c, int col_c)
{
    __shared__ __align__(32) __nv_bfloat16 as[16 * 24], bs[16 * 24];
    __shared__ __align__(32) float cs[16 * 20];
    for (int i = threadIdx.x; i < 256; i += 32) {
        as[i / 16 * 24 + i % 16] = a[i];
        bs[i / 16 * 24 + i % 16] = b[i];
        cs[i / 16 * 20 + i % 16] = c[i];
    }
    __syncwarp();
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, LB> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(fa, as, 24);
    wmma::load_matrix_sync(fb, bs, 24);
    wmma::load_matrix_sync(acc, cs, 20, col_c ? wmma::mem_col_major : wmma::mem_row_major);
    wmma::mma_sync(acc, fa, fb, acc);
    wmma::store_matrix_sync(cs, acc, 20, col_c ? wmma::mem_col_major : wmma::mem_row_major);
    __syncwarp();
    for (int i = threadIdx.x; i < 256; i += 32)
        d[i] = cs[i / 16 * 20 + i % 16];
}

__global__ void wmma_misaligned_kernel(float *d)
{
    __shared__ __align__(32) float cs[16 * 20 + 8];
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 1.0f);
    wmma::store_matrix_sync(cs + 4, acc, 20, wmma::mem_row_major); /* 16 bytes off */
    __syncwarp();
    d[threadIdx.x] = cs[threadIdx.x];
}

__global__ void atomic_kernel(int *count, float *fsum, double *dsum, unsigned long long *usum)
{
    atomicAdd(count, 1);
    atomicAdd(fsum, 1.0f);
    atomicAdd(dsum, 0.5);
    atomicAdd(usum, 3ull);
}

__global__ void fill_kernel(unsigned char *out, size_t n)
{
    extern __shared__ __align__(16) unsigned char big[];
    for (size_t i = threadIdx.x; i < n; i += blockDim.x)
        big[i] = (unsigned char)i;
    __syncthreads();
    for (size_t i = threadIdx.x; i < n; i += blockDim.x)
        out[i] = big[n - 1 - i];
}

__global__ void empty_kernel() {}

/* lanes 0-15 at __syncthreads, 16-31 at __syncwarp: no barrier can open */
__global__ void deadlock_kernel(int *out)
{
    if (threadIdx.x < 16)
        __syncthreads();
    else
        __syncwarp();
    out[threadIdx.x] = 1;
}

/* threads 64.. return before the barrier: they count as arrived (Volta+) */
__global__ void early_exit_kernel(int *out)
{
    __shared__ int s[64];
    if (threadIdx.x >= 64)
        return;
    s[threadIdx.x] = (int)threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = s[63 - threadIdx.x];
}

/* only block 0 writes s: the others read garbage, not block 0's values */
__global__ void stale_kernel(int *out)
{
    __shared__ int s[32];
    if (blockIdx.x == 0)
        s[threadIdx.x] = 7;
    __syncthreads();
    out[blockIdx.x * 32 + threadIdx.x] = s[threadIdx.x];
}

struct params {
    int a, b;
};

__global__ void capture_kernel(int *out, params p, int v)
{
    if (threadIdx.x == 0)
        out[0] = p.a + p.b + v;
}

/* spins a while so that the host changes its variables before the next
 * kernel on the stream runs */
__global__ void slow_kernel(int *sink)
{
    unsigned s = 0;
    for (unsigned i = 0; i < 200000; i++)
        s += i ^ threadIdx.x;
    sink[threadIdx.x] = (int)s;
}

__global__ void index_kernel(int *out)
{
    int b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    out[b * blockDim.x * blockDim.y * blockDim.z + t] =
        (int)(threadIdx.x | threadIdx.y << 4 | threadIdx.z << 8 | blockIdx.x << 12 | blockIdx.y << 16 | blockIdx.z << 20);
}

int g_evaluations;
int next_value() { return ++g_evaluations; }

/* ---------------------------------------------------------------- helpers */

template <typename T> T *dev(size_t n)
{
    void *p = nullptr;
    if (cudaMalloc(&p, n * sizeof(T)) != cudaSuccess)
        abort();
    return (T *)p;
}
template <typename T> void up(T *d, const T *h, size_t n) { cudaMemcpy(d, h, n * sizeof(T), cudaMemcpyHostToDevice); }
template <typename T> void down(T *h, const T *d, size_t n) { cudaMemcpy(h, d, n * sizeof(T), cudaMemcpyDeviceToHost); }

/* the buggy reduction over 8 launches: "S0 S1 ..." */
std::string buggy_series()
{
    const int blocks = 4;
    int h[blocks * N], *in = dev<int>(blocks * N), *out = dev<int>(blocks);
    for (int i = 0; i < blocks * N; i++)
        h[i] = i % 97 + 1;
    up(in, h, blocks * N);
    std::string s;
    for (int rep = 0; rep < 8; rep++) {
        int r[blocks];
        reduce_kernel<false><<<blocks, N>>>(out, in);
        down(r, out, blocks);
        for (int b = 0; b < blocks; b++)
            s += std::to_string(r[b]) + " ";
    }
    return s;
}

/* runs this program in a mode; its stdout and exit status */
int child(const char *mode, std::string *output)
{
    std::string cmd = "/proc/" + std::to_string(getpid()) + "/exe " + mode;
    FILE *f = popen(cmd.c_str(), "r");
    if (f == nullptr)
        return -1;
    char buf[4096];
    size_t n;
    output->clear();
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        output->append(buf, n);
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

int mode_main(const char *mode)
{
    alarm(60); /* a hang is a failure, not a stuck test */
    if (strcmp(mode, "--buggy-series") == 0) {
        printf("%s\n", buggy_series().c_str());
        return 0;
    }
    if (strcmp(mode, "--deadlock") == 0) {
        int *out = dev<int>(32);
        deadlock_kernel<<<1, 32>>>(out);
        cudaError_t e = cudaDeviceSynchronize();
        printf("%d\n", (int)e);
        return e == cudaErrorIllegalInstruction ? 0 : 1;
    }
    if (strcmp(mode, "--misaligned") == 0) {
        float *out = dev<float>(32);
        wmma_misaligned_kernel<<<1, 32>>>(out);
        cudaError_t e = cudaDeviceSynchronize();
        printf("%d\n", (int)e);
        return e == cudaErrorMisalignedAddress ? 0 : 1;
    }
    return 2;
}

uint16_t bf16_bits(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }
uint16_t f16_bits(float f) { return __half_as_ushort(__float2half_rn(f)); }
float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

} // namespace

int main(int argc, char **argv)
{
    if (argc > 1)
        return mode_main(argv[1]);

    /* block reduction: right with its barriers, wrong without the loop's */
    {
        const int blocks = 4;
        int h[blocks * N], *in = dev<int>(blocks * N), *out = dev<int>(blocks), r[blocks];
        long want[blocks] = {0};
        for (int i = 0; i < blocks * N; i++) {
            h[i] = i % 97 + 1;
            want[i / N] += h[i];
        }
        up(in, h, blocks * N);
        reduce_kernel<true><<<blocks, N>>>(out, in);
        ok(cudaGetLastError() == cudaSuccess, "reduction launched");
        down(r, out, blocks);
        int right = 1;
        for (int b = 0; b < blocks; b++)
            right &= r[b] == want[b];
        ok(right, "block reduction with every __syncthreads: %d %d %d %d", r[0], r[1], r[2], r[3]);
        std::string s = buggy_series(), s1, s2;
        int wrong = 0;
        const char *p = s.c_str();
        for (int i = 0; i < 32; i++) {
            char *end;
            long v = strtol(p, &end, 10);
            wrong += v != want[i % blocks];
            p = end;
        }
        ok(wrong > 0, "without the loop's __syncthreads %d of 32 block sums are wrong", wrong);
        ok(child("--buggy-series", &s1) == 0 && child("--buggy-series", &s2) == 0 && s1 == s2 && !s1.empty(),
           "the wrong results are the same in two runs with one seed");
        setenv("DTRAIN_STANDIN_SEED", "12345", 1);
        ok(child("--buggy-series", &s2) == 0 && s1 != s2, "and differ with another seed");
        unsetenv("DTRAIN_STANDIN_SEED");
    }

    /* warp shuffles */
    {
        float h[64], *in = dev<float>(64), *out = dev<float>(64), r[64];
        for (int i = 0; i < 64; i++)
            h[i] = (float)(i * i % 13);
        up(in, h, 64);
        warp_sum_kernel<<<1, 64>>>(out, in);
        down(r, out, 64);
        float w0 = 0, w1 = 0;
        for (int i = 0; i < 32; i++) {
            w0 += h[i];
            w1 += h[32 + i];
        }
        int right = 1;
        for (int i = 0; i < 64; i++)
            right &= r[i] == (i < 32 ? w0 : w1);
        ok(right, "warp butterfly sum in every lane (%g, %g)", (double)w0, (double)w1);

        int *io = dev<int>(64), ir[64];
        int bad_sync = 0, bad_nosync = 0;
        for (int rep = 0; rep < 4; rep++) {
            neighbour_kernel<true><<<1, 64, 64 * sizeof(int)>>>(io);
            down(ir, io, 64);
            for (int i = 0; i < 64; i++)
                bad_sync += ir[i] != (i - i % 32 + (i % 32 + 1) % 32) * 3;
            neighbour_kernel<false><<<1, 64, 64 * sizeof(int)>>>(io);
            down(ir, io, 64);
            for (int i = 0; i < 64; i++)
                bad_nosync += ir[i] != (i - i % 32 + (i % 32 + 1) % 32) * 3;
        }
        ok(bad_sync == 0, "lanes read their neighbours' shared values after __syncwarp");
        ok(bad_nosync > 0, "without __syncwarp %d of 256 reads see garbage", bad_nosync);

        int *vo = dev<int>(4 * 32), vr[4 * 32];
        shfl_variants_kernel<<<1, 32>>>(vo);
        down(vr, vo, 4 * 32);
        int good = 1;
        unsigned ballot = 0;
        for (int l = 0; l < 32; l += 3)
            ballot |= 1u << l;
        for (int l = 0; l < 32; l++) {
            good &= vr[4 * l] == 50;
            good &= vr[4 * l + 1] == (l + 3 < 32 ? l + 3 : l) * 10;
            good &= vr[4 * l + 2] == (l >= 2 ? l - 2 : l) * 10;
            good &= (unsigned)vr[4 * l + 3] == ballot;
        }
        ok(good, "__shfl_sync, __shfl_down_sync, __shfl_up_sync, __ballot_sync");
        half_warp_kernel<<<1, 32>>>(vo);
        down(vr, vo, 32);
        good = 1;
        for (int l = 0; l < 32; l++)
            good &= vr[l] == (l < 16 ? 120 : 376);
        ok(good, "half-warp shuffles and __syncwarp with partial masks");
    }

    /* wmma: exact against a naive product (small multiples of 1/4: every
     * sum is exact, whatever the order) */
    {
        __nv_bfloat16 ha[256], hb[256];
        float hc[256], want_row[256], want_col[256], r[256];
        srand(7);
        for (int i = 0; i < 256; i++) {
            ha[i] = __float2bfloat16_rn((float)(rand() % 17 - 8) / 4.0f);
            hb[i] = __float2bfloat16_rn((float)(rand() % 17 - 8) / 4.0f);
            hc[i] = (float)(rand() % 9 - 4);
        }
        for (int m = 0; m < 16; m++)
            for (int n = 0; n < 16; n++) {
                float sr = hc[m * 16 + n], sc = hc[n * 16 + m];
                for (int k = 0; k < 16; k++) {
                    float a = __bfloat162float(ha[m * 16 + k]);
                    sr += a * __bfloat162float(hb[k * 16 + n]);
                    sc += a * __bfloat162float(hb[n * 16 + k]);
                }
                want_row[m * 16 + n] = sr; /* B row-major, C row-major */
                want_col[n * 16 + m] = sc; /* B col-major, C and D col-major */
            }
        __nv_bfloat16 *a = dev<__nv_bfloat16>(256), *b = dev<__nv_bfloat16>(256);
        float *c = dev<float>(256), *d = dev<float>(256);
        up(a, ha, 256);
        up(b, hb, 256);
        up(c, hc, 256);
        wmma_kernel<wmma::row_major><<<1, 32>>>(d, a, b, c, 0);
        down(r, d, 256);
        ok(memcmp(r, want_row, sizeof r) == 0, "wmma 16x16x16 bf16, B row-major: exact");
        wmma_kernel<wmma::col_major><<<1, 32>>>(d, a, b, c, 1);
        down(r, d, 256);
        ok(memcmp(r, want_col, sizeof r) == 0, "wmma with B col-major, C and D column-major: exact");
        std::string o;
        ok(child("--misaligned", &o) == 0,
           "a wmma store 16 bytes off 256-bit alignment is a device fault (cudaErrorMisalignedAddress)");
    }

    /* atomics from many blocks on two streams at once */
    {
        int *count = dev<int>(1);
        float *fsum = dev<float>(1);
        double *dsum = dev<double>(1);
        unsigned long long *usum = dev<unsigned long long>(1);
        cudaMemset(count, 0, sizeof(int));
        cudaMemset(fsum, 0, sizeof(float));
        cudaMemset(dsum, 0, sizeof(double));
        cudaMemset(usum, 0, sizeof(unsigned long long));
        cudaDeviceSynchronize();
        cudaStream_t s1, s2;
        cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking);
        cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
        atomic_kernel<<<200, 128, 0, s1>>>(count, fsum, dsum, usum);
        atomic_kernel<<<200, 128, 0, s2>>>(count, fsum, dsum, usum);
        cudaDeviceSynchronize();
        int hc;
        float hf;
        double hd;
        unsigned long long hu;
        down(&hc, count, 1);
        down(&hf, fsum, 1);
        down(&hd, dsum, 1);
        down(&hu, usum, 1);
        ok(hc == 51200 && hf == 51200.0f && hd == 25600.0 && hu == 153600ull,
           "atomicAdd int/float/double/u64 from 400 blocks on two streams: %d %g %g %llu", hc, (double)hf, hd, hu);
        cudaStreamDestroy(s1);
        cudaStreamDestroy(s2);
    }

    /* launch limits */
    {
        (void)cudaGetLastError();
        empty_kernel<<<1, 1025>>>();
        ok(cudaGetLastError() == cudaErrorInvalidConfiguration, "1025 threads: invalid configuration");
        ok(cudaGetLastError() == cudaSuccess, "the launch error is not sticky");
        empty_kernel<<<dim3(1, 65536), 32>>>();
        ok(cudaGetLastError() == cudaErrorInvalidConfiguration, "grid.y 65536: invalid configuration");
        empty_kernel<<<1, dim3(1, 1, 65)>>>();
        ok(cudaGetLastError() == cudaErrorInvalidConfiguration, "block.z 65: invalid configuration");
        empty_kernel<<<0, 32>>>();
        ok(cudaGetLastError() == cudaErrorInvalidConfiguration, "an empty grid: invalid configuration");
        const size_t big = 64 * 1024;
        unsigned char *out = dev<unsigned char>(big);
        fill_kernel<<<2, 256, big>>>(out, big);
        ok(cudaGetLastError() == cudaErrorInvalidValue, "64 KiB of dynamic shared memory without the opt-in: refused");
        ok(cudaFuncSetAttribute(fill_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)big) == cudaSuccess,
           "opt-in to 64 KiB");
        fill_kernel<<<2, 256, big>>>(out, big);
        ok(cudaGetLastError() == cudaSuccess, "64 KiB accepted after the opt-in");
        static unsigned char h[64 * 1024];
        down(h, out, big);
        int right = 1;
        for (size_t i = 0; i < big; i++)
            right &= h[i] == (unsigned char)(big - 1 - i);
        ok(right, "all 64 KiB of it usable");
        fill_kernel<<<1, 256, 228 * 1024>>>(out, big);
        ok(cudaGetLastError() == cudaErrorInvalidValue, "228 KiB: over the opt-in limit");
    }

    /* the arguments are evaluated once and copied at the launch */
    {
        int *out = dev<int>(1), *sink = dev<int>(256), r = 0;
        cudaStream_t s;
        cudaStreamCreate(&s);
        params p = {1, 10};
        int v = 100;
        g_evaluations = 0;
        slow_kernel<<<1, 256, 0, s>>>(sink);
        capture_kernel<<<1, 64, 0, s>>>(out, p, v + next_value());
        p.a = 1000;
        v = 5000;
        ok(g_evaluations == 1, "the arguments were evaluated at the launch, once");
        cudaStreamSynchronize(s);
        down(&r, out, 1);
        ok(r == 112, "the kernel saw the arguments' values at the launch: %d", r);
        ok(g_evaluations == 1, "and not again per thread");
        cudaStreamDestroy(s);
    }

    /* 3D indices */
    {
        dim3 grid(3, 2, 2), block(4, 2, 3);
        int total = 12 * 24, *out = dev<int>(total), h[12 * 24];
        index_kernel<<<grid, block>>>(out);
        down(h, out, total);
        int right = 1;
        for (int b = 0; b < 12; b++)
            for (int t = 0; t < 24; t++) {
                int bx = b % 3, by = b / 3 % 2, bz = b / 6, tx = t % 4, ty = t / 4 % 2, tz = t / 8;
                right &= h[b * 24 + t] == (tx | ty << 4 | tz << 8 | bx << 12 | by << 16 | bz << 20);
            }
        ok(right, "threadIdx, blockIdx, blockDim, gridDim in three dimensions");
    }

    /* conversions, bit for bit as the real intrinsics */
    {
        ok(bf16_bits(1.0f) == 0x3f80 && bf16_bits(from_bits(0x3f808000u)) == 0x3f80 &&
               bf16_bits(from_bits(0x3f818000u)) == 0x3f82 && bf16_bits(from_bits(0x3f808001u)) == 0x3f81,
           "bf16: round to nearest, ties to even");
        ok(bf16_bits(NAN) == 0x7fff && bf16_bits(-INFINITY) == 0xff80 && bf16_bits(-0.0f) == 0x8000 &&
               bf16_bits(from_bits(0x7f7fffffu)) == 0x7f80 && bf16_bits(from_bits(0x00018000u)) == 0x0002,
           "bf16: NaN canonical, infinities, -0, overflow to inf, subnormals");
        ok(__bfloat162float(__ushort_as_bfloat16(0x4049)) == from_bits(0x40490000u), "bf16 widening is exact");
        ok(f16_bits(65504.0f) == 0x7bff && f16_bits(65520.0f) == 0x7c00 && f16_bits(65519.0f) == 0x7bff &&
               f16_bits(from_bits(0x33800000u)) == 0x0001 && f16_bits(from_bits(0x33000000u)) == 0x0000 &&
               f16_bits(from_bits(0x33c00000u)) == 0x0002 && f16_bits(NAN) == 0x7fff && f16_bits(-2.0f) == 0xc000,
           "fp16: rounding, overflow, subnormals, NaN");
        ok(__half2float(__ushort_as_half(0x0001)) == from_bits(0x33800000u) &&
               __half2float(__ushort_as_half(0x7bff)) == 65504.0f && __half2float(__ushort_as_half(0x3555)) ==
               from_bits(0x3eaaa000u),
           "fp16 widening is exact");
    }

    /* exited threads count as arrived at __syncthreads */
    {
        int *out = dev<int>(64), h[64];
        early_exit_kernel<<<3, 128>>>(out);
        ok(cudaDeviceSynchronize() == cudaSuccess, "__syncthreads after some threads returned: no deadlock");
        down(h, out, 64);
        int right = 1;
        for (int i = 0; i < 64; i++)
            right &= h[i] == 63 - i;
        ok(right, "and the barrier held for the others");
    }

    /* static shared memory holds garbage in a new block */
    {
        int *out = dev<int>(8 * 32), h[8 * 32];
        stale_kernel<<<8, 32>>>(out);
        down(h, out, 8 * 32);
        int b0 = 1, stale = 0;
        for (int i = 0; i < 8 * 32; i++) {
            if (i < 32)
                b0 &= h[i] == 7;
            else
                stale += h[i] == 7;
        }
        ok(b0 && stale == 0, "static __shared__ is garbage in each new block (%d stale reads)", stale);
    }

    /* a deadlock is an error, not a hang */
    {
        std::string o;
        ok(child("--deadlock", &o) == 0, "a barrier deadlock is a device fault (cudaErrorIllegalInstruction)");
    }

    /* the real kernels compile through the stand-in's nvcc with the build's flags */
    {
        const char *top = getenv("DTRAIN_STANDIN_TOP_SRCDIR");
#ifdef STANDIN_TOP_SRCDIR
        if (top == nullptr)
            top = STANDIN_TOP_SRCDIR;
#endif
        if (top == nullptr) {
            skip("DTRAIN_STANDIN_TOP_SRCDIR unset: the kernels/cuda compile check");
        } else {
            char dir[] = "/tmp/gpu-standin-test-XXXXXX";
            if (mkdtemp(dir) == nullptr) {
                ok(0, "temporary directory");
                return tap_done();
            }
            std::string d = dir, t = top;
            FILE *cfg = fopen((d + "/config.h").c_str(), "w");
            fprintf(cfg, "#define DTRAIN_HAVE_CUDA 1\n");
            fclose(cfg);
            const char *files[] = {"convert", "layers", "attention", "loss", "adamw"};
            for (const char *f : files) {
                std::string cmd = t + "/tests/gpu/standin/nvcc -std=c++17 -O3 -gencode arch=compute_80,code=sm_80 "
                                  "-gencode arch=compute_90,code=compute_90 -Werror all-warnings "
                                  "-Xcompiler -fPIC,-Wall,-Wextra,-Werror -D_GNU_SOURCE -include " + d +
                                  "/config.h -I" + t + "/include/dtrain -I" + t + "/kernels -I" + t + "/kernels/cuda -I" + t +
                                  "/common -c -o " +
                                  d + "/" + f + ".o " + t + "/kernels/cuda/cuda_" + f + ".cu 2>&1";
                std::string o;
                FILE *pf = popen(cmd.c_str(), "r");
                char buf[4096];
                size_t n;
                while (pf != nullptr && (n = fread(buf, 1, sizeof buf, pf)) > 0)
                    o.append(buf, n);
                int st = pf != nullptr ? pclose(pf) : -1;
                ok(st == 0 && o.empty(), "kernels/cuda/cuda_%s.cu compiles cleanly (-Wall -Wextra -Werror)%s%s", f,
                   o.empty() ? "" : ":\n", o.c_str());
                unlink((d + "/" + f + ".o").c_str());
            }
            /* errors name the .cu file's own lines */
            FILE *bad = fopen((d + "/bad.cu").c_str(), "w");
            fprintf(bad, "__global__ void k(int *p, int v) { p[0] = v; }\n"
                         "void f(int *p)\n{\n    k<<<1,\n        32>>>(p,\n          1);\n"
                         "    undeclared_name = 1;\n}\n");
            fclose(bad);
            std::string cmd = t + "/tests/gpu/standin/nvcc -c -o " + d + "/bad.o " + d + "/bad.cu 2>&1", o;
            FILE *pf = popen(cmd.c_str(), "r");
            char buf[4096];
            size_t n;
            while (pf != nullptr && (n = fread(buf, 1, sizeof buf, pf)) > 0)
                o.append(buf, n);
            if (pf != nullptr)
                pclose(pf);
            ok(o.find("bad.cu:7:") != std::string::npos, "a compile error is reported at its .cu line (7)");
            unlink((d + "/bad.cu").c_str());
            unlink((d + "/config.h").c_str());
            rmdir(dir);
        }
    }
    return tap_done();
}
