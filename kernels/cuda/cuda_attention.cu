/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Causal multi-head attention on the GPU; see dtrain_kernels.h.
 *
 * Two implementations, chosen by (precision, shape) alone, so that forward
 * and backward always agree on which one ran:
 *
 *  flash (bf16 precision, head size 16/32/64/128, any T): flash-attention
 *    style on the tensor cores (WMMA, bf16 operands, fp32 accumulation).
 *    A block of 4 warps takes 64 queries of one (batch row, head) and walks
 *    the key tiles up to the diagonal, keeping the running row maximum and
 *    sum (online softmax), so the T x T matrix never reaches memory.  att
 *    keeps only each row's log-sum-exp (B*NH*T floats): backward gets the
 *    forward's output from the caller.  Backward recomputes the
 *    probabilities tile by tile, in two kernels so that no gradient is
 *    summed with atomics (deterministic): one per key tile for dK and dV
 *    (walking the query tiles from the diagonal down), one per query tile
 *    for dQ.  D = rowsum(dout * out) comes first.  The typed operands (qkv,
 *    out, dout, dqkv: one type) are read as they are, fp32 or bf16 (the
 *    tiles are bf16 in shared memory either way), and written in their
 *    type from fp32.
 *
 *  exact (fp32 precision, or head sizes the flash kernels do not take):
 *    the interface's contract to the letter, fp32 throughout: att holds
 *    the probabilities, backward's scratch holds dS (B*NH*T*T floats).  One
 *    block per row of scores; meant for correctness, not speed.  bf16
 *    operands are widened into fp32 scratch first and bf16 results rounded
 *    from fp32 scratch after (cuda_scratch).
 *
 * Layout (the interface's): qkv (B, T, NH+2*KVH, HS): NH query heads,
 * KVH key heads, KVH value heads; query head h reads kv head h / (NH/KVH)
 * (grouped-query attention).  out (B, T, NH, HS).  The kernels that write
 * a kv head's gradient (one block per key row or key tile and kv head)
 * walk its query heads in order and keep summing in the same registers,
 * so with KVH == NH every operation is the multi-head one, bit for bit. */
#include "cuda_backend.h"
#include "cuda_elem.cuh"
#include "cuda_reduce.cuh"

#include <cuda_bf16.h>
#include <math.h>
#include <mma.h>

namespace {

using namespace nvcuda;

/* ===================================================================== exact */

constexpr int EXACT_THREADS = 128;

/* Block (t, b*NH + h): row t of att and of out.  Dynamic shared: HS floats. */
__global__ void exact_forward_kernel(float *out, float *att, const float *qkv, int T, int NH, int KVH, int HS,
                                     float scale)
{
    extern __shared__ float q[];
    int t = blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * HS;
    size_t C3 = (size_t)(NH + 2 * KVH) * HS;
    const float *base = qkv + (size_t)b * T * C3 + (size_t)h * HS;
    const float *kbase = qkv + (size_t)b * T * C3 + C + (size_t)(h / (NH / KVH)) * HS;
    for (int d = threadIdx.x; d < HS; d += blockDim.x)
        q[d] = base[(size_t)t * C3 + d];
    __syncthreads();
    float *row = att + ((size_t)bh * T + t) * T;
    float m = -INFINITY;
    for (int u = threadIdx.x; u <= t; u += blockDim.x) {
        const float *k = kbase + (size_t)u * C3;
        float s = 0.0f;
        for (int d = 0; d < HS; d++)
            s += q[d] * k[d];
        s *= scale;
        row[u] = s;
        m = fmaxf(m, s);
    }
    m = block_reduce(m, true);
    float sum = 0.0f;
    for (int u = threadIdx.x; u <= t; u += blockDim.x) {
        float e = expf(row[u] - m);
        row[u] = e;
        sum += e;
    }
    float inv = 1.0f / block_reduce(sum, false);
    for (int u = threadIdx.x; u < T; u += blockDim.x)
        row[u] = u <= t ? row[u] * inv : 0.0f;
    __syncthreads(); /* the row is complete before any thread reads it whole */
    for (int d = threadIdx.x; d < HS; d += blockDim.x) {
        const float *v = kbase + (size_t)KVH * HS + d;
        float o = 0.0f;
        for (int u = 0; u <= t; u++)
            o += row[u] * v[(size_t)u * C3];
        out[((size_t)b * T + t) * C + (size_t)h * HS + d] = o;
    }
}

/* Block (t, bh): dS row t into scratch, then dQ row t. */
__global__ void exact_backward_q_kernel(float *dqkv, float *ds, const float *dout, const float *qkv,
                                        const float *att, int T, int NH, int KVH, int HS, float scale)
{
    extern __shared__ float dy[];
    int t = blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * HS;
    size_t C3 = (size_t)(NH + 2 * KVH) * HS;
    const float *kbase = qkv + (size_t)b * T * C3 + C + (size_t)(h / (NH / KVH)) * HS;
    for (int d = threadIdx.x; d < HS; d += blockDim.x)
        dy[d] = dout[((size_t)b * T + t) * C + (size_t)h * HS + d];
    __syncthreads();
    const float *p = att + ((size_t)bh * T + t) * T;
    float *row = ds + ((size_t)bh * T + t) * T;
    float pd = 0.0f;
    for (int u = threadIdx.x; u <= t; u += blockDim.x) {
        const float *v = kbase + (size_t)u * C3 + (size_t)KVH * HS;
        float dp = 0.0f;
        for (int d = 0; d < HS; d++)
            dp += dy[d] * v[d];
        row[u] = dp;
        pd += p[u] * dp;
    }
    pd = block_reduce(pd, false);
    for (int u = threadIdx.x; u < T; u += blockDim.x)
        row[u] = u <= t ? p[u] * (row[u] - pd) * scale : 0.0f;
    __syncthreads();
    float *dq = dqkv + ((size_t)b * T + t) * C3 + (size_t)h * HS;
    for (int d = threadIdx.x; d < HS; d += blockDim.x) {
        const float *k = kbase + d;
        float s = 0.0f;
        for (int u = 0; u <= t; u++)
            s += row[u] * k[(size_t)u * C3];
        dq[d] = s;
    }
}

/* Block (u, b*KVH + kv head): dK and dV of key row u, from the columns u
 * of dS and P of the kv head's query heads, in order. */
__global__ void exact_backward_kv_kernel(float *dqkv, const float *ds, const float *dout, const float *qkv,
                                         const float *att, int T, int NH, int KVH, int HS)
{
    int u = blockIdx.x, bkv = blockIdx.y, b = bkv / KVH, kvh = bkv % KVH, C = NH * HS, group = NH / KVH;
    size_t C3 = (size_t)(NH + 2 * KVH) * HS;
    float *dk = dqkv + ((size_t)b * T + u) * C3 + C + (size_t)kvh * HS;
    for (int d = threadIdx.x; d < HS; d += blockDim.x) {
        float sk = 0.0f, sv = 0.0f;
        for (int g = 0; g < group; g++) {
            int h = kvh * group + g;
            size_t bh = (size_t)b * NH + h;
            const float *q = qkv + (size_t)b * T * C3 + (size_t)h * HS;
            const float *dy = dout + (size_t)b * T * C + (size_t)h * HS;
            const float *dsc = ds + bh * T * T + u, *pc = att + bh * T * T + u;
            for (int t = u; t < T; t++) {
                sk += dsc[(size_t)t * T] * q[(size_t)t * C3 + d];
                sv += pc[(size_t)t * T] * dy[(size_t)t * C + d];
            }
        }
        dk[d] = sk;
        dk[(size_t)KVH * HS + d] = sv;
    }
}

/* ===================================================================== flash */

constexpr int TILE = 64;   /* queries and keys per tile */
constexpr int WARPS = 4;   /* 16 rows each */
constexpr int FLASH_THREADS = WARPS * 32;

typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> frag_a;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> frag_b_row;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> frag_b_col;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_acc;

constexpr size_t round128(size_t b) { return (b + 127) & ~(size_t)127; }

/* Shared-memory shapes.  Leading dimensions are padded (against bank
 * conflicts) and stay multiples of 8 bf16 / 4 floats as WMMA requires;
 * every buffer starts 128-byte aligned. */
template <int HS> struct dims {
    static constexpr int LDK = HS + 8;        /* bf16 tile of 64 x HS */
    static constexpr int LDS = TILE + 4;      /* fp32 16 x 64 per warp */
    static constexpr int LDP = TILE + 8;      /* bf16 16 x 64 per warp */
    static constexpr int LDO = HS + 4;        /* fp32 16 x HS per warp */
    static constexpr size_t tile = round128((size_t)TILE * LDK * 2);
    static constexpr size_t warp_f32 = round128((size_t)16 * LDS * 4);
    static constexpr size_t warp_bf16 = round128((size_t)16 * LDP * 2);
    static constexpr size_t warp_o = round128((size_t)16 * LDO * 4);
    static constexpr size_t stats = round128((size_t)TILE * 4);
    /* forward: Q K V, S, P, O per warp */
    static constexpr size_t fwd = 3 * tile + WARPS * (warp_f32 + warp_bf16 + warp_o);
    /* backward: four tiles, two fp32 (reused for the output) and two bf16
     * 16 x 64 buffers per warp, lse and D */
    static constexpr size_t bwd = 4 * tile + WARPS * (2 * warp_f32 + 2 * warp_bf16) + 2 * stats;
    static_assert(2 * warp_f32 >= warp_o, "the output staging must fit the score buffers");
};

/* 64 rows (row0.., masked at T to zeros) of HS floats, row r at
 * base + r * stride, into a bf16 tile (rounded to nearest even). */
template <int HS>
__device__ void load_tile(__nv_bfloat16 *dst, const float *base, size_t stride, int row0, int T)
{
    constexpr int V4 = HS / 4, LDK = dims<HS>::LDK;
    for (int e = threadIdx.x; e < TILE * V4; e += blockDim.x) {
        int r = e / V4, c4 = e % V4, t = row0 + r;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (t < T)
            v = *reinterpret_cast<const float4 *>(base + (size_t)t * stride + 4 * c4);
        __nv_bfloat162 *d = reinterpret_cast<__nv_bfloat162 *>(dst + r * LDK + 4 * c4);
        d[0] = __floats2bfloat162_rn(v.x, v.y);
        d[1] = __floats2bfloat162_rn(v.z, v.w);
    }
}

/* The same from bf16 rows: copied as they are, 16 bytes at a time (a row
 * of the tile starts 16-byte aligned: LDK is a multiple of 8). */
template <int HS>
__device__ void load_tile(__nv_bfloat16 *dst, const __nv_bfloat16 *base, size_t stride, int row0, int T)
{
    constexpr int V8 = HS / 8, LDK = dims<HS>::LDK;
    for (int e = threadIdx.x; e < TILE * V8; e += blockDim.x) {
        int r = e / V8, c8 = e % V8, t = row0 + r;
        uint4 v = make_uint4(0u, 0u, 0u, 0u); /* bf16 zeros */
        if (t < T)
            v = *reinterpret_cast<const uint4 *>(base + (size_t)t * stride + 8 * c8);
        *reinterpret_cast<uint4 *>(dst + r * LDK + 8 * c8) = v;
    }
}

/* out (16 x 64 fp32, ld LDS) = A rows (16 x HS, of a tile) times B^T, B
 * being 64 rows of HS of another tile. */
template <int HS>
__device__ void mma_abt(float *out, const __nv_bfloat16 *a, const __nv_bfloat16 *b)
{
    constexpr int LDK = dims<HS>::LDK, LDS = dims<HS>::LDS;
    for (int nt = 0; nt < TILE / 16; nt++) {
        frag_acc acc;
        wmma::fill_fragment(acc, 0.0f);
        for (int kk = 0; kk < HS / 16; kk++) {
            frag_a fa;
            frag_b_col fb;
            wmma::load_matrix_sync(fa, a + kk * 16, LDK);
            wmma::load_matrix_sync(fb, b + nt * 16 * LDK + kk * 16, LDK);
            wmma::mma_sync(acc, fa, fb, acc);
        }
        wmma::store_matrix_sync(out + nt * 16, acc, LDS, wmma::mem_row_major);
    }
}

/* acc[dt] += P (16 x 64 bf16, ld LDP) times tile rows (64 x HS). */
template <int HS>
__device__ void mma_pv(frag_acc *acc, const __nv_bfloat16 *p, const __nv_bfloat16 *v)
{
    constexpr int LDK = dims<HS>::LDK, LDP = dims<HS>::LDP;
    for (int kk = 0; kk < TILE / 16; kk++) {
        frag_a fa;
        wmma::load_matrix_sync(fa, p + kk * 16, LDP);
        for (int dt = 0; dt < HS / 16; dt++) {
            frag_b_row fb;
            wmma::load_matrix_sync(fb, v + kk * 16 * LDK + dt * 16, LDK);
            wmma::mma_sync(acc[dt], fa, fb, acc[dt]);
        }
    }
}

/* Grid (query tiles, B*NH), the last (longest) tiles first.  E: the
 * element type of qkv and out. */
template <int HS, typename E>
__global__ void __launch_bounds__(FLASH_THREADS)
flash_forward_kernel(E *out, float *lse, const E *qkv, int T, int NH, int KVH, float scale)
{
    typedef dims<HS> D;
    extern __shared__ __align__(128) unsigned char smem[];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int qt = gridDim.x - 1 - blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * HS;
    size_t C3 = (size_t)(NH + 2 * KVH) * HS;
    const E *base = qkv + (size_t)b * T * C3 + (size_t)h * HS;
    const E *kbase = qkv + (size_t)b * T * C3 + C + (size_t)(h / (NH / KVH)) * HS;
    const E *vbase = kbase + (size_t)KVH * HS;
    __nv_bfloat16 *qs = reinterpret_cast<__nv_bfloat16 *>(smem);
    __nv_bfloat16 *ks = reinterpret_cast<__nv_bfloat16 *>(smem + D::tile);
    __nv_bfloat16 *vs = reinterpret_cast<__nv_bfloat16 *>(smem + 2 * D::tile);
    unsigned char *w = smem + 3 * D::tile + (size_t)warp * (D::warp_f32 + D::warp_bf16 + D::warp_o);
    float *s = reinterpret_cast<float *>(w);
    __nv_bfloat16 *p = reinterpret_cast<__nv_bfloat16 *>(w + D::warp_f32);
    float *o = reinterpret_cast<float *>(w + D::warp_f32 + D::warp_bf16);

    int q0 = qt * TILE;
    load_tile<HS>(qs, base, C3, q0, T);
    for (int i = lane; i < 16 * D::LDO; i += 32)
        o[i] = 0.0f;
    /* lane: row r of the warp's 16, columns half*32 .. half*32+31 */
    int r = lane / 2, half = lane % 2, q = q0 + warp * 16 + r;
    float m_run = -INFINITY, l_run = 0.0f;

    for (int kt = 0; kt <= qt; kt++) {
        int k0 = kt * TILE;
        __syncthreads(); /* the previous K, V are no longer read */
        load_tile<HS>(ks, kbase, C3, k0, T);
        load_tile<HS>(vs, vbase, C3, k0, T);
        __syncthreads();
        mma_abt<HS>(s, qs + warp * 16 * D::LDK, ks);
        __syncwarp();
        float tile_max = -INFINITY;
        for (int c = half * 32; c < half * 32 + 32; c++) {
            int u = k0 + c;
            float v = (u <= q && u < T) ? s[r * D::LDS + c] * scale : -INFINITY;
            s[r * D::LDS + c] = v;
            tile_max = fmaxf(tile_max, v);
        }
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
        float m_new = fmaxf(m_run, tile_max);
        float alpha = m_new == -INFINITY ? 1.0f : expf(m_run - m_new);
        float sum = 0.0f;
        for (int c = half * 32; c < half * 32 + 32; c++) {
            float v = s[r * D::LDS + c];
            float e = v == -INFINITY ? 0.0f : expf(v - m_new);
            p[r * D::LDP + c] = __float2bfloat16_rn(e);
            sum += e;
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        l_run = l_run * alpha + sum;
        m_run = m_new;
        for (int d = half * (HS / 2); d < (half + 1) * (HS / 2); d++)
            o[r * D::LDO + d] *= alpha;
        __syncwarp();
        frag_acc acc[HS / 16];
        for (int dt = 0; dt < HS / 16; dt++)
            wmma::load_matrix_sync(acc[dt], o + dt * 16, D::LDO, wmma::mem_row_major);
        mma_pv<HS>(acc, p, vs);
        for (int dt = 0; dt < HS / 16; dt++)
            wmma::store_matrix_sync(o + dt * 16, acc[dt], D::LDO, wmma::mem_row_major);
        __syncwarp();
    }
    float inv = l_run > 0.0f ? 1.0f / l_run : 0.0f;
    for (int d = half * (HS / 2); d < (half + 1) * (HS / 2); d++)
        o[r * D::LDO + d] *= inv;
    if (half == 0 && q < T)
        lse[(size_t)bh * T + q] = m_run + logf(l_run);
    __syncwarp();
    /* the warp writes its 16 rows, lanes along the head */
    for (int rr = 0; rr < 16; rr++) {
        int t = q0 + warp * 16 + rr;
        if (t >= T)
            break;
        for (int d = lane; d < HS; d += 32)
            out[((size_t)b * T + t) * C + (size_t)h * HS + d] = elem_from_f32<E>(o[rr * D::LDO + d]);
    }
}

/* D[bh][t] = sum over d of dout * out (both (B, T, NH, HS)): one warp per
 * (bh, t) */
template <typename E>
__global__ void flash_rowdot_kernel(float *dsum, const E *dout, const E *out, int BH, int T, int NH, int HS)
{
    size_t row = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= (size_t)BH * T)
        return;
    size_t bh = row / T, t = row % T, b = bh / NH, h = bh % NH, at = (b * T + t) * (size_t)NH * HS + h * HS;
    const E *dy = dout + at, *o = out + at;
    float s = 0.0f;
    for (int d = lane; d < HS; d += 32)
        s += elem_to_f32(dy[d]) * elem_to_f32(o[d]);
    s = warp_sum(s);
    if (lane == 0)
        dsum[row] = s;
}

/* Writes a warp's 16 rows (row0.., < T) of a 16 x HS fp32 staging buffer to
 * dst + row * stride, in dst's type. */
template <int HS, typename E>
__device__ void store_rows(E *dst, size_t stride, const float *stage, int row0, int T)
{
    int lane = threadIdx.x % 32;
    for (int rr = 0; rr < 16; rr++) {
        int t = row0 + rr;
        if (t >= T)
            break;
        for (int d = lane; d < HS; d += 32)
            dst[(size_t)t * stride + d] = elem_from_f32<E>(stage[rr * dims<HS>::LDO + d]);
    }
}

/* Grid (key tiles, B*KVH): dK and dV of 64 keys of one kv head, each warp
 * 16 of them, over its query heads in order and for each over the query
 * tiles from the diagonal to the end. */
template <int HS, typename E>
__global__ void __launch_bounds__(FLASH_THREADS)
flash_backward_kv_kernel(E *dqkv, const E *dout, const E *qkv, const float *lse, const float *dsum, int T, int NH,
                         int KVH, float scale)
{
    typedef dims<HS> D;
    extern __shared__ __align__(128) unsigned char smem[];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int kt = blockIdx.x, bkv = blockIdx.y, b = bkv / KVH, kvh = bkv % KVH, C = NH * HS, group = NH / KVH;
    int tiles = gridDim.x;
    size_t C3 = (size_t)(NH + 2 * KVH) * HS;
    const E *kbase = qkv + (size_t)b * T * C3 + C + (size_t)kvh * HS;
    const E *vbase = kbase + (size_t)KVH * HS;
    __nv_bfloat16 *ks = reinterpret_cast<__nv_bfloat16 *>(smem);
    __nv_bfloat16 *vs = reinterpret_cast<__nv_bfloat16 *>(smem + D::tile);
    __nv_bfloat16 *qs = reinterpret_cast<__nv_bfloat16 *>(smem + 2 * D::tile);
    __nv_bfloat16 *dos = reinterpret_cast<__nv_bfloat16 *>(smem + 3 * D::tile);
    unsigned char *w = smem + 4 * D::tile + (size_t)warp * (2 * D::warp_f32 + 2 * D::warp_bf16);
    float *st = reinterpret_cast<float *>(w);                      /* S^T: 16 keys x 64 queries */
    float *dpt = reinterpret_cast<float *>(w + D::warp_f32);       /* dP^T */
    __nv_bfloat16 *pt = reinterpret_cast<__nv_bfloat16 *>(w + 2 * D::warp_f32);
    __nv_bfloat16 *dst_ = reinterpret_cast<__nv_bfloat16 *>(w + 2 * D::warp_f32 + D::warp_bf16);
    float *lse_s = reinterpret_cast<float *>(smem + 4 * D::tile + WARPS * (2 * D::warp_f32 + 2 * D::warp_bf16));
    float *dsum_s = lse_s + D::stats / 4;

    int k0 = kt * TILE;
    load_tile<HS>(ks, kbase, C3, k0, T);
    load_tile<HS>(vs, vbase, C3, k0, T);
    frag_acc dk[HS / 16], dv[HS / 16];
    for (int dt = 0; dt < HS / 16; dt++) {
        wmma::fill_fragment(dk[dt], 0.0f);
        wmma::fill_fragment(dv[dt], 0.0f);
    }
    int r = lane / 2, half = lane % 2, u = k0 + warp * 16 + r;

    for (int qi = 0; qi < group * (tiles - kt); qi++) {
        int h = kvh * group + qi / (tiles - kt), qt = kt + qi % (tiles - kt), q0 = qt * TILE;
        size_t bh = (size_t)b * NH + h;
        const E *base = qkv + (size_t)b * T * C3 + (size_t)h * HS;
        const E *dbase = dout + (size_t)b * T * C + (size_t)h * HS;
        __syncthreads();
        load_tile<HS>(qs, base, C3, q0, T);
        load_tile<HS>(dos, dbase, C, q0, T);
        for (int i = threadIdx.x; i < TILE; i += blockDim.x) {
            int t = q0 + i;
            lse_s[i] = t < T ? lse[(size_t)bh * T + t] : INFINITY;
            dsum_s[i] = t < T ? dsum[(size_t)bh * T + t] : 0.0f;
        }
        __syncthreads();
        mma_abt<HS>(st, ks + warp * 16 * D::LDK, qs);
        mma_abt<HS>(dpt, vs + warp * 16 * D::LDK, dos);
        __syncwarp();
        for (int c = half * 32; c < half * 32 + 32; c++) {
            int t = q0 + c;
            bool valid = t >= u && t < T && u < T;
            float pv = valid ? expf(st[r * D::LDS + c] * scale - lse_s[c]) : 0.0f;
            float ds = pv * (dpt[r * D::LDS + c] - dsum_s[c]) * scale;
            pt[r * D::LDP + c] = __float2bfloat16_rn(pv);
            dst_[r * D::LDP + c] = __float2bfloat16_rn(ds);
        }
        __syncwarp();
        mma_pv<HS>(dv, pt, dos);
        mma_pv<HS>(dk, dst_, qs);
    }
    float *stage = st; /* S^T and dP^T are free now */
    for (int dt = 0; dt < HS / 16; dt++)
        wmma::store_matrix_sync(stage + dt * 16, dk[dt], D::LDO, wmma::mem_row_major);
    __syncwarp();
    store_rows<HS>(dqkv + (size_t)b * T * C3 + C + (size_t)kvh * HS, C3, stage, k0 + warp * 16, T);
    __syncwarp();
    for (int dt = 0; dt < HS / 16; dt++)
        wmma::store_matrix_sync(stage + dt * 16, dv[dt], D::LDO, wmma::mem_row_major);
    __syncwarp();
    store_rows<HS>(dqkv + (size_t)b * T * C3 + C + (size_t)(KVH + kvh) * HS, C3, stage, k0 + warp * 16, T);
}

/* Grid (query tiles, B*NH), longest first: dQ of 64 queries over the key
 * tiles up to the diagonal. */
template <int HS, typename E>
__global__ void __launch_bounds__(FLASH_THREADS)
flash_backward_q_kernel(E *dqkv, const E *dout, const E *qkv, const float *lse, const float *dsum, int T, int NH,
                        int KVH, float scale)
{
    typedef dims<HS> D;
    extern __shared__ __align__(128) unsigned char smem[];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int qt = gridDim.x - 1 - blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * HS;
    size_t C3 = (size_t)(NH + 2 * KVH) * HS;
    const E *base = qkv + (size_t)b * T * C3 + (size_t)h * HS;
    const E *kbase = qkv + (size_t)b * T * C3 + C + (size_t)(h / (NH / KVH)) * HS;
    const E *vbase = kbase + (size_t)KVH * HS;
    const E *dbase = dout + (size_t)b * T * C + (size_t)h * HS;
    __nv_bfloat16 *qs = reinterpret_cast<__nv_bfloat16 *>(smem);
    __nv_bfloat16 *dos = reinterpret_cast<__nv_bfloat16 *>(smem + D::tile);
    __nv_bfloat16 *ks = reinterpret_cast<__nv_bfloat16 *>(smem + 2 * D::tile);
    __nv_bfloat16 *vs = reinterpret_cast<__nv_bfloat16 *>(smem + 3 * D::tile);
    unsigned char *w = smem + 4 * D::tile + (size_t)warp * (2 * D::warp_f32 + 2 * D::warp_bf16);
    float *s = reinterpret_cast<float *>(w);
    float *dp = reinterpret_cast<float *>(w + D::warp_f32);
    __nv_bfloat16 *ds16 = reinterpret_cast<__nv_bfloat16 *>(w + 2 * D::warp_f32);
    float *lse_s = reinterpret_cast<float *>(smem + 4 * D::tile + WARPS * (2 * D::warp_f32 + 2 * D::warp_bf16));
    float *dsum_s = lse_s + D::stats / 4;

    int q0 = qt * TILE;
    load_tile<HS>(qs, base, C3, q0, T);
    load_tile<HS>(dos, dbase, C, q0, T);
    for (int i = threadIdx.x; i < TILE; i += blockDim.x) {
        int t = q0 + i;
        lse_s[i] = t < T ? lse[(size_t)bh * T + t] : INFINITY;
        dsum_s[i] = t < T ? dsum[(size_t)bh * T + t] : 0.0f;
    }
    frag_acc dq[HS / 16];
    for (int dt = 0; dt < HS / 16; dt++)
        wmma::fill_fragment(dq[dt], 0.0f);
    int r = lane / 2, half = lane % 2, rw = warp * 16 + r, t = q0 + rw;

    for (int kt = 0; kt <= qt; kt++) {
        int k0 = kt * TILE;
        __syncthreads();
        load_tile<HS>(ks, kbase, C3, k0, T);
        load_tile<HS>(vs, vbase, C3, k0, T);
        __syncthreads();
        mma_abt<HS>(s, qs + warp * 16 * D::LDK, ks);
        mma_abt<HS>(dp, dos + warp * 16 * D::LDK, vs);
        __syncwarp();
        for (int c = half * 32; c < half * 32 + 32; c++) {
            int u = k0 + c;
            bool valid = u <= t && u < T && t < T;
            float pv = valid ? expf(s[r * D::LDS + c] * scale - lse_s[rw]) : 0.0f;
            ds16[r * D::LDP + c] = __float2bfloat16_rn(pv * (dp[r * D::LDS + c] - dsum_s[rw]) * scale);
        }
        __syncwarp();
        mma_pv<HS>(dq, ds16, ks);
    }
    float *stage = s;
    __syncwarp();
    for (int dt = 0; dt < HS / 16; dt++)
        wmma::store_matrix_sync(stage + dt * 16, dq[dt], D::LDO, wmma::mem_row_major);
    __syncwarp();
    store_rows<HS>(dqkv + (size_t)b * T * C3 + (size_t)h * HS, C3, stage, q0 + warp * 16, T);
}

/* ===================================================================== choice */

template <int HS> size_t flash_smem_fwd() { return dims<HS>::fwd; }
template <int HS> size_t flash_smem_bwd() { return dims<HS>::bwd; }

size_t flash_smem(int HS, bool backward)
{
    switch (HS) {
    case 16: return backward ? flash_smem_bwd<16>() : flash_smem_fwd<16>();
    case 32: return backward ? flash_smem_bwd<32>() : flash_smem_fwd<32>();
    case 64: return backward ? flash_smem_bwd<64>() : flash_smem_fwd<64>();
    case 128: return backward ? flash_smem_bwd<128>() : flash_smem_fwd<128>();
    default: return 0;
    }
}

/* Whether (precision, shape) takes the flash kernels; a function of the
 * head size and the device, never of the data nor of T, so both passes
 * agree, and a smaller batch than att was sized for takes the same path
 * (cuda_attention_saved). */
bool use_flash(const struct cuda_kernels *ck, int HS)
{
    if (!ck->bf16 || flash_smem(HS, false) == 0)
        return false;
    return flash_smem(HS, true) <= ck->smem_optin && flash_smem(HS, false) <= ck->smem_optin;
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

template <int HS, typename E>
int flash_forward(struct cuda_kernels *ck, E *out, float *lse, const E *qkv, int B, int T, int NH, int KVH)
{
    size_t smem = dims<HS>::fwd;
    if (cuda_check(ck, cudaFuncSetAttribute(flash_forward_kernel<HS, E>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
                   "attention forward (shared memory)") != 0)
        return -1;
    dim3 grid((unsigned)((T + TILE - 1) / TILE), (unsigned)(B * NH));
    flash_forward_kernel<HS, E><<<grid, FLASH_THREADS, smem, ck->stream>>>(out, lse, qkv, T, NH, KVH,
                                                                           1.0f / sqrtf((float)HS));
    return cuda_check_launch(ck, "attention forward");
}

template <int HS, typename E>
int flash_backward(struct cuda_kernels *ck, E *dqkv, float *dsum, const E *dout, const E *qkv, const E *out,
                   const float *lse, int B, int T, int NH, int KVH)
{
    size_t smem = dims<HS>::bwd;
    size_t rows = (size_t)B * NH * T;
    flash_rowdot_kernel<E><<<(unsigned)((rows + 7) / 8), 256, 0, ck->stream>>>(dsum, dout, out, B * NH, T, NH, HS);
    if (cuda_check_launch(ck, "attention backward (row dots)") != 0 ||
        cuda_check(ck, cudaFuncSetAttribute(flash_backward_kv_kernel<HS, E>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
                   "attention backward (shared memory)") != 0 ||
        cuda_check(ck, cudaFuncSetAttribute(flash_backward_q_kernel<HS, E>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
                   "attention backward (shared memory)") != 0)
        return -1;
    dim3 grid((unsigned)((T + TILE - 1) / TILE), (unsigned)(B * NH));
    dim3 grid_kv((unsigned)((T + TILE - 1) / TILE), (unsigned)(B * KVH));
    float scale = 1.0f / sqrtf((float)HS);
    flash_backward_kv_kernel<HS, E><<<grid_kv, FLASH_THREADS, smem, ck->stream>>>(dqkv, dout, qkv, lse, dsum, T,
                                                                                   NH, KVH, scale);
    if (cuda_check_launch(ck, "attention backward (dK, dV)") != 0)
        return -1;
    flash_backward_q_kernel<HS, E><<<grid, FLASH_THREADS, smem, ck->stream>>>(dqkv, dout, qkv, lse, dsum, T, NH,
                                                                               KVH, scale);
    return cuda_check_launch(ck, "attention backward (dQ)");
}

/* The flash kernels for the head size (use_flash took it), of element E. */
template <typename E>
void flash_forward_hs(struct cuda_kernels *ck, E *out, float *lse, const E *qkv, int B, int T, int NH, int KVH,
                      int HS)
{
    switch (HS) {
    case 16: (void)flash_forward<16, E>(ck, out, lse, qkv, B, T, NH, KVH); break;
    case 32: (void)flash_forward<32, E>(ck, out, lse, qkv, B, T, NH, KVH); break;
    case 64: (void)flash_forward<64, E>(ck, out, lse, qkv, B, T, NH, KVH); break;
    case 128: (void)flash_forward<128, E>(ck, out, lse, qkv, B, T, NH, KVH); break;
    default: cuda_fail(ck, "attention forward: no flash kernels for head size %d", HS); break;
    }
}

template <typename E>
void flash_backward_hs(struct cuda_kernels *ck, E *dqkv, float *dsum, const E *dout, const E *qkv, const E *out,
                       const float *lse, int B, int T, int NH, int KVH, int HS)
{
    switch (HS) {
    case 16: (void)flash_backward<16, E>(ck, dqkv, dsum, dout, qkv, out, lse, B, T, NH, KVH); break;
    case 32: (void)flash_backward<32, E>(ck, dqkv, dsum, dout, qkv, out, lse, B, T, NH, KVH); break;
    case 64: (void)flash_backward<64, E>(ck, dqkv, dsum, dout, qkv, out, lse, B, T, NH, KVH); break;
    case 128: (void)flash_backward<128, E>(ck, dqkv, dsum, dout, qkv, out, lse, B, T, NH, KVH); break;
    default: cuda_fail(ck, "attention backward: no flash kernels for head size %d", HS); break;
    }
}

/* Both paths put (batch row, head) in the grid's y dimension and rows or
 * tiles of T in x. */
bool grid_fits(struct cuda_kernels *ck, int B, int T, int NH, const char *what)
{
    if ((long)B * NH <= 65535 && T <= 65535 * TILE)
        return true;
    cuda_fail(ck, "%s: B*NH = %ld is over 65535 or T = %d too long for one launch", what, (long)B * NH, T);
    return false;
}

/* The exact path's fp32 views of typed operands: t itself when fp32, else
 * a piece of scratch (n floats), widened from t when `in`. */
struct f32_views {
    float *f[3];
};

int exact_views(struct cuda_kernels *ck, struct f32_views *v, const struct dtrain_tensor *t, const size_t *n,
                const int *in, int count)
{
    size_t used = 0;
    for (int i = 0; i < count; i++)
        if (t[i].dtype != DTRAIN_F32)
            cuda_carve(NULL, &used, n[i] * sizeof(float));
    void *base = used > 0 ? cuda_scratch(ck, used) : NULL;
    if (used > 0 && base == NULL)
        return -1;
    used = 0;
    for (int i = 0; i < count; i++) {
        v->f[i] = (float *)t[i].data;
        if (t[i].dtype == DTRAIN_F32)
            continue;
        v->f[i] = (float *)cuda_carve(base, &used, n[i] * sizeof(float));
        if (in[i] && cuda_widen_bf16(ck, v->f[i], t[i].data, n[i]) != 0)
            return -1;
    }
    return 0;
}

/* Rounds an exact result back into its bf16 tensor. */
void exact_store(struct cuda_kernels *ck, const struct f32_views *v, struct dtrain_tensor t, int i, size_t n)
{
    if (t.dtype != DTRAIN_F32)
        (void)cuda_to_bf16(ck, t.data, v->f[i], n);
}

} // namespace

extern "C" void cuda_attention_forward(struct dtrain_kernels *k, struct dtrain_tensor out, float *att,
                                       struct dtrain_tensor qkv, int B, int T, int NH, int KVH, int HS)
{
    struct cuda_kernels *ck = cuda_of(k);
    const struct dtrain_tensor t[] = {out, qkv};
    if (ck->failed || B <= 0 || T <= 0 || NH <= 0 || KVH <= 0 || NH % KVH != 0 || HS <= 0 ||
        !grid_fits(ck, B, T, NH, "attention forward") ||
        !cuda_one_dtype(ck, t, 2, "attention forward"))
        return;
    if (use_flash(ck, HS)) {
        if (!aligned16(qkv.data)) {
            cuda_fail(ck, "attention forward: qkv is not 16-byte aligned");
            return;
        }
        if (qkv.dtype == DTRAIN_BF16)
            flash_forward_hs(ck, (__nv_bfloat16 *)out.data, att, (const __nv_bfloat16 *)qkv.data, B, T, NH, KVH,
                             HS);
        else
            flash_forward_hs(ck, (float *)out.data, att, (const float *)qkv.data, B, T, NH, KVH, HS);
        return;
    }
    size_t rows = (size_t)B * T * NH * HS, qkv_n = (size_t)B * T * (NH + 2 * KVH) * HS;
    const size_t n[] = {rows, qkv_n};
    const int in[] = {0, 1};
    struct f32_views v;
    if (exact_views(ck, &v, t, n, in, 2) != 0)
        return;
    dim3 grid((unsigned)T, (unsigned)(B * NH));
    exact_forward_kernel<<<grid, EXACT_THREADS, (size_t)HS * sizeof(float), ck->stream>>>(
        v.f[0], att, v.f[1], T, NH, KVH, HS, 1.0f / sqrtf((float)HS));
    if (cuda_check_launch(ck, "attention forward") == 0)
        exact_store(ck, &v, out, 0, rows);
}

extern "C" size_t cuda_attention_saved(struct dtrain_kernels *k, int B, int T, int NH, int KVH, int HS)
{
    (void)KVH; /* per query head either way */
    /* flash: the row log-sum-exps; exact: the probabilities */
    return (size_t)B * NH * T * (use_flash(cuda_of(k), HS) ? 1 : (size_t)T);
}

extern "C" size_t cuda_attention_scratch(struct dtrain_kernels *k, int B, int T, int NH, int KVH, int HS)
{
    (void)KVH;
    /* flash: D; exact: dS */
    return (size_t)B * NH * T * (use_flash(cuda_of(k), HS) ? 1 : (size_t)T);
}

extern "C" void cuda_attention_backward(struct dtrain_kernels *k, struct dtrain_tensor dqkv, float *scratch,
                                        struct dtrain_tensor dout, struct dtrain_tensor qkv, struct dtrain_tensor out,
                                        const float *att, int B, int T, int NH, int KVH, int HS)
{
    struct cuda_kernels *ck = cuda_of(k);
    const struct dtrain_tensor t[] = {dqkv, dout, qkv, out};
    if (ck->failed || B <= 0 || T <= 0 || NH <= 0 || KVH <= 0 || NH % KVH != 0 || HS <= 0 ||
        !grid_fits(ck, B, T, NH, "attention backward") ||
        !cuda_one_dtype(ck, t, 4, "attention backward"))
        return;
    if (use_flash(ck, HS)) {
        if (!aligned16(qkv.data) || !aligned16(dout.data)) {
            cuda_fail(ck, "attention backward: qkv or dout is not 16-byte aligned");
            return;
        }
        if (qkv.dtype == DTRAIN_BF16)
            flash_backward_hs(ck, (__nv_bfloat16 *)dqkv.data, scratch, (const __nv_bfloat16 *)dout.data,
                              (const __nv_bfloat16 *)qkv.data, (const __nv_bfloat16 *)out.data, att, B, T, NH, KVH, HS);
        else
            flash_backward_hs(ck, (float *)dqkv.data, scratch, (const float *)dout.data, (const float *)qkv.data,
                              (const float *)out.data, att, B, T, NH, KVH, HS);
        return;
    }
    /* the exact path reads att (the probabilities), not out */
    size_t rows = (size_t)B * T * NH * HS, qkv_n = (size_t)B * T * (NH + 2 * KVH) * HS;
    const struct dtrain_tensor te[] = {dqkv, dout, qkv};
    const size_t n[] = {qkv_n, rows, qkv_n};
    const int in[] = {0, 1, 1};
    struct f32_views v;
    if (exact_views(ck, &v, te, n, in, 3) != 0)
        return;
    dim3 grid((unsigned)T, (unsigned)(B * NH));
    float scale = 1.0f / sqrtf((float)HS);
    exact_backward_q_kernel<<<grid, EXACT_THREADS, (size_t)HS * sizeof(float), ck->stream>>>(
        v.f[0], scratch, v.f[1], v.f[2], att, T, NH, KVH, HS, scale);
    if (cuda_check_launch(ck, "attention backward") != 0)
        return;
    dim3 grid_kv((unsigned)T, (unsigned)(B * KVH));
    exact_backward_kv_kernel<<<grid_kv, EXACT_THREADS, 0, ck->stream>>>(v.f[0], scratch, v.f[1], v.f[2], att, T, NH,
                                                                         KVH, HS);
    if (cuda_check_launch(ck, "attention backward") == 0)
        exact_store(ck, &v, dqkv, 0, qkv_n);
}
