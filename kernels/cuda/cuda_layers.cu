/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Embedding, layer norm, RMS norm, GELU, RoPE, SwiGLU and residual on the
 * GPU; see dtrain_kernels.h.
 *
 * fp32 in and out, fp32 arithmetic; GELU's, RoPE's and SwiGLU's typed
 * operands are fp32 or
 * bf16 (templated on the element type, cuda_elem.cuh), its arithmetic
 * fp32.  Reductions have a fixed shape (a warp's butterfly, row chunks
 * summed in order), so the results are the same bits run after run.  The embedding gradient
 * sorts the positions by token (CUB's stable radix sort) so that each wte
 * row is summed by one thread in position order instead of with atomics. */
#include <climits>
#include "cuda_backend.h"
#include "cuda_elem.cuh"
#include "cuda_reduce.cuh"

#include <cub/device/device_radix_sort.cuh>

namespace {

constexpr float LAYERNORM_EPS = 1e-5f;
constexpr float GELU_SCALE = 0.7978845608028654f; /* sqrt(2/pi) */
constexpr float GELU_CUBE = 0.044715f;

/* ------------------------------------------------------------- encoder */

__global__ void encoder_forward_kernel(float *out, const int32_t *tokens, const float *wte,
                                       const float *wpe, int T, int C, size_t total)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        size_t bt = i / (size_t)C, c = i % (size_t)C, t = bt % (size_t)T;
        float w = wte[(size_t)tokens[bt] * C + c];
        out[i] = wpe != nullptr ? w + wpe[t * C + c] : w; /* no wpe: rotary models */
    }
}

__global__ void iota_kernel(int32_t *v, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        v[i] = i;
}

__global__ void encoder_backward_wpe_kernel(float *dwpe, const float *dout, int B, int T, int C)
{
    size_t total = (size_t)T * C, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        float s = 0.0f;
        for (int b = 0; b < B; b++)
            s += dout[(size_t)b * total + i];
        dwpe[i] += s;
    }
}

/* The vocabulary-parallel embedding (dtrain_kernels.h): a token outside
 * [v0, v0 + Vl) gives 0, wpe only where add_wpe; w + p in that order, as
 * on the CPU. */
__global__ void embedding_vp_forward_kernel(float *out, const int32_t *tokens, const float *wte, const float *wpe,
                                            int T, int C, int v0, int Vl, int add_wpe, size_t total)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        size_t bt = i / (size_t)C, c = i % (size_t)C, t = bt % (size_t)T;
        long row = (long)tokens[bt] - v0;
        int held = row >= 0 && row < Vl;
        float w = held ? wte[(size_t)row * C + c] : 0.0f;
        out[i] = add_wpe ? (held ? w + wpe[t * C + c] : wpe[t * C + c]) : w;
    }
}

/* One block per sorted position i; the first position of each token's run
 * sums the run's rows of dout (positions ascending) into that wte row, for
 * the rows held here ([v0, v0 + Vl); the whole table: 0, INT_MAX). */
__global__ void embedding_backward_wte_kernel(float *dwte, const float *dout, const int32_t *sorted_tokens,
                                                 const int32_t *sorted_pos, int N, int C, int v0, int Vl)
{
    int i = blockIdx.x;
    int tok = sorted_tokens[i];
    if ((i > 0 && sorted_tokens[i - 1] == tok) || tok < v0 || tok >= v0 + Vl)
        return;
    int end = i + 1;
    while (end < N && sorted_tokens[end] == tok)
        end++;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float s = 0.0f;
        for (int j = i; j < end; j++)
            s += dout[(size_t)sorted_pos[j] * C + c];
        dwte[(size_t)(tok - v0) * C + c] += s;
    }
}

/* ------------------------------------------------------------- layer norm */

/* one warp per row */
__global__ void layernorm_forward_kernel(float *out, float *mean, float *rstd, const float *inp,
                                         const float *weight, const float *bias, int N, int C)
{
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N)
        return;
    const float *x = inp + (size_t)row * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32)
        s += x[c];
    float m = warp_sum(s) / (float)C;
    float v = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float d = x[c] - m;
        v += d * d;
    }
    float r = 1.0f / sqrtf(warp_sum(v) / (float)C + LAYERNORM_EPS);
    float *o = out + (size_t)row * C;
    for (int c = lane; c < C; c += 32)
        o[c] = (x[c] - m) * r * weight[c] + bias[c];
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = r;
    }
}

/* dinp (+=), one warp per row */
__global__ void layernorm_backward_dinp_kernel(float *dinp, const float *dout, const float *inp,
                                               const float *weight, const float *mean, const float *rstd,
                                               int N, int C)
{
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N)
        return;
    const float *x = inp + (size_t)row * C, *dy = dout + (size_t)row * C;
    float *dx = dinp + (size_t)row * C;
    float m = mean[row], r = rstd[row];
    float a = 0.0f, b = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float dnorm = weight[c] * dy[c];
        a += dnorm;
        b += dnorm * (x[c] - m) * r;
    }
    float dnorm_mean = warp_sum(a) / (float)C, dnorm_norm_mean = warp_sum(b) / (float)C;
    for (int c = lane; c < C; c += 32) {
        float norm = (x[c] - m) * r;
        float dnorm = weight[c] * dy[c];
        dx[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * r;
    }
}

/* partials[chunk][c] of dweight (first chunks*C floats) and dbias (next) */
__global__ void layernorm_backward_partials_kernel(float *partials, const float *dout, const float *inp,
                                                   const float *mean, const float *rstd, int N, int C,
                                                   int rows, int chunks)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x, chunk = blockIdx.y;
    if (c >= C)
        return;
    int n0 = chunk * rows, n1 = min(N, n0 + rows);
    float w = 0.0f, b = 0.0f;
    for (int n = n0; n < n1; n++) {
        float dy = dout[(size_t)n * C + c];
        w += (inp[(size_t)n * C + c] - mean[n]) * rstd[n] * dy;
        b += dy;
    }
    partials[(size_t)chunk * C + c] = w;
    partials[(size_t)(chunks + chunk) * C + c] = b;
}

__global__ void layernorm_backward_sum_kernel(float *dweight, float *dbias, const float *partials, int C,
                                              int chunks)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    float w = 0.0f, b = 0.0f;
    for (int k = 0; k < chunks; k++) {
        w += partials[(size_t)k * C + c];
        b += partials[(size_t)(chunks + k) * C + c];
    }
    dweight[c] += w;
    dbias[c] += b;
}

inline int chunk_rows(int N)
{
    int rows = 64;
    while ((N + rows - 1) / rows > 65535)
        rows *= 2;
    return rows;
}

/* ------------------------------------------------------------- RMS norm */

/* one warp per row */
__global__ void rmsnorm_forward_kernel(float *out, float *rstd, const float *inp, const float *weight, float eps,
                                       int N, int C)
{
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N)
        return;
    const float *x = inp + (size_t)row * C;
    float ss = 0.0f;
    for (int c = lane; c < C; c += 32)
        ss += x[c] * x[c];
    float r = 1.0f / sqrtf(warp_sum(ss) / (float)C + eps);
    float *o = out + (size_t)row * C;
    for (int c = lane; c < C; c += 32)
        o[c] = x[c] * r * weight[c];
    if (lane == 0)
        rstd[row] = r;
}

/* dinp (+=) = (dnorm - norm * mean(dnorm * norm)) * rstd, norm = x * rstd,
 * dnorm = weight * dout; one warp per row */
__global__ void rmsnorm_backward_dinp_kernel(float *dinp, const float *dout, const float *inp, const float *weight,
                                             const float *rstd, int N, int C)
{
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N)
        return;
    const float *x = inp + (size_t)row * C, *dy = dout + (size_t)row * C;
    float *dx = dinp + (size_t)row * C;
    float r = rstd[row], b = 0.0f;
    for (int c = lane; c < C; c += 32)
        b += weight[c] * dy[c] * (x[c] * r);
    float m = warp_sum(b) / (float)C;
    for (int c = lane; c < C; c += 32)
        dx[c] += (weight[c] * dy[c] - x[c] * r * m) * r;
}

/* partials[chunk][c] of dweight */
__global__ void rmsnorm_backward_partials_kernel(float *partials, const float *dout, const float *inp,
                                                 const float *rstd, int N, int C, int rows)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x, chunk = blockIdx.y;
    if (c >= C)
        return;
    int n0 = chunk * rows, n1 = min(N, n0 + rows);
    float w = 0.0f;
    for (int n = n0; n < n1; n++)
        w += inp[(size_t)n * C + c] * rstd[n] * dout[(size_t)n * C + c];
    partials[(size_t)chunk * C + c] = w;
}

__global__ void rmsnorm_backward_sum_kernel(float *dweight, const float *partials, int C, int chunks)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    float w = 0.0f;
    for (int k = 0; k < chunks; k++)
        w += partials[(size_t)k * C + c];
    dweight[c] += w;
}

/* ------------------------------------------------------------- RoPE, SwiGLU */

/* One thread per (row, rotated head, pair i): the NH query heads and KVH
 * key heads are the first NH+KVH heads of a row of `row` elements. */
template <typename T>
__global__ void rope_kernel(T *qkv, const float *inv_freq, int Tlen, int heads, int HS, size_t row, float sign,
                            size_t total)
{
    int half = HS / 2;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
        size_t i = e % (size_t)half, hn = e / (size_t)half, h = hn % (size_t)heads, n = hn / (size_t)heads;
        float a = (float)(n % (size_t)Tlen) * inv_freq[i];
        float c = cosf(a), s = sign * sinf(a);
        T *x = qkv + n * row + h * (size_t)HS + i;
        float x1 = elem_to_f32(x[0]), x2 = elem_to_f32(x[half]);
        x[0] = elem_from_f32<T>(x1 * c - x2 * s);
        x[half] = elem_from_f32<T>(x2 * c + x1 * s);
    }
}

template <typename T> __global__ void swiglu_forward_kernel(T *out, const T *inp, int F, size_t total)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
        size_t n = e / (size_t)F, i = e % (size_t)F;
        float g = elem_to_f32(inp[n * 2 * F + i]), u = elem_to_f32(inp[n * 2 * F + F + i]);
        out[e] = elem_from_f32<T>(g / (1.0f + expf(-g)) * u);
    }
}

/* sg = sigmoid(g): dup = dout g sg, dgate = dout up sg (1 + g (1 - sg)) */
template <typename T> __global__ void swiglu_backward_kernel(T *dinp, const T *inp, const T *dout, int F, size_t total)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
        size_t n = e / (size_t)F, i = e % (size_t)F;
        float g = elem_to_f32(inp[n * 2 * F + i]), u = elem_to_f32(inp[n * 2 * F + F + i]);
        float dy = elem_to_f32(dout[e]), sg = 1.0f / (1.0f + expf(-g));
        dinp[n * 2 * F + F + i] = elem_from_f32<T>(dy * g * sg);
        dinp[n * 2 * F + i] = elem_from_f32<T>(dy * u * sg * (1.0f + g * (1.0f - sg)));
    }
}

/* ------------------------------------------------------------- GELU, residual */

/* tanh as the CPU kernel computes it, 1 - 2 / (exp(2u) + 1) */
__device__ inline float gelu_tanh(float x)
{
    float u = GELU_SCALE * (x + GELU_CUBE * x * x * x);
    return 1.0f - 2.0f / (expf(2.0f * u) + 1.0f);
}

/* out may alias inp (no __restrict__): each element is read, then written */
template <typename T> __global__ void gelu_forward_kernel(T *out, const T *inp, size_t n)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float x = elem_to_f32(inp[i]);
        out[i] = elem_from_f32<T>(0.5f * x * (1.0f + gelu_tanh(x)));
    }
}

/* dinp may alias dout */
template <typename T> __global__ void gelu_backward_kernel(T *dinp, const T *inp, const T *dout, size_t n)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float x = elem_to_f32(inp[i]), th = gelu_tanh(x);
        float local = 0.5f * (1.0f + th) +
                      0.5f * x * (1.0f - th * th) * GELU_SCALE * (1.0f + 3.0f * GELU_CUBE * x * x);
        dinp[i] = elem_from_f32<T>(local * elem_to_f32(dout[i]));
    }
}

__global__ void axpby_strided_kernel(float *out, int ldo, const float *in, int ldi, float alpha, float beta,
                                     int N, int n)
{
    size_t total = (size_t)N * n, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        size_t r = i / (size_t)n, j = i % (size_t)n;
        float *o = out + r * (size_t)ldo + j;
        float x = alpha * in[r * (size_t)ldi + j];
        *o = beta == 0.0f ? x : beta * *o + x;
    }
}

__global__ void residual_kernel(float *out, const float *a, const float *b, size_t n)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        out[i] = a[i] + b[i];
}

} // namespace

extern "C" void cuda_encoder_forward(struct dtrain_kernels *k, float *out, const int32_t *tokens,
                                     const float *wte, const float *wpe, int B, int T, int C)
{
    struct cuda_kernels *ck = cuda_of(k);
    size_t total = (size_t)B * T * C;
    if (ck->failed || total == 0)
        return;
    encoder_forward_kernel<<<cuda_blocks(total, 256), 256, 0, ck->stream>>>(out, tokens, wte, wpe, T, C, total);
    (void)cuda_check_launch(ck, "encoder forward");
}

/* The N positions sorted by token (CUB radix sort, stable: positions
 * ascending within a token), in the instance's scratch; 0, or -1 with the
 * failure recorded on ck. */
static int sort_positions(struct cuda_kernels *ck, const int32_t *tokens, int N, const char *what,
                          int32_t **sorted_tokens, int32_t **sorted_pos)
{
    size_t temp_bytes = 0, used = 0;
    if (cuda_check(ck, cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, (const int32_t *)nullptr,
                                                       (int32_t *)nullptr, (const int32_t *)nullptr,
                                                       (int32_t *)nullptr, N, 0, 32, ck->stream),
                   what) != 0)
        return -1;
    for (int i = 0; i < 3; i++)
        cuda_carve(nullptr, &used, (size_t)N * sizeof(int32_t));
    cuda_carve(nullptr, &used, temp_bytes);
    void *base = cuda_scratch(ck, used);
    if (base == nullptr)
        return -1;
    used = 0;
    int32_t *pos = (int32_t *)cuda_carve(base, &used, (size_t)N * sizeof(int32_t));
    *sorted_tokens = (int32_t *)cuda_carve(base, &used, (size_t)N * sizeof(int32_t));
    *sorted_pos = (int32_t *)cuda_carve(base, &used, (size_t)N * sizeof(int32_t));
    void *temp = cuda_carve(base, &used, temp_bytes);
    iota_kernel<<<cuda_blocks((size_t)N, 256), 256, 0, ck->stream>>>(pos, N);
    if (cuda_check_launch(ck, what) != 0)
        return -1;
    return cuda_check(ck, cub::DeviceRadixSort::SortPairs(temp, temp_bytes, tokens, *sorted_tokens, pos,
                                                          *sorted_pos, N, 0, 32, ck->stream),
                      what);
}

extern "C" void cuda_encoder_backward(struct dtrain_kernels *k, float *dwte, float *dwpe, const float *dout,
                                      const int32_t *tokens, int B, int T, int C)
{
    struct cuda_kernels *ck = cuda_of(k);
    int N = B * T;
    int32_t *sorted_tokens, *sorted_pos;
    if (ck->failed || N <= 0 || C <= 0 ||
        sort_positions(ck, tokens, N, "embedding gradient (sort)", &sorted_tokens, &sorted_pos) != 0)
        return;
    embedding_backward_wte_kernel<<<(unsigned)N, 256, 0, ck->stream>>>(dwte, dout, sorted_tokens, sorted_pos, N, C,
                                                                       0, INT_MAX);
    if (cuda_check_launch(ck, "embedding gradient") != 0 || dwpe == nullptr)
        return;
    encoder_backward_wpe_kernel<<<cuda_blocks((size_t)T * C, 256), 256, 0, ck->stream>>>(dwpe, dout, B, T, C);
    (void)cuda_check_launch(ck, "position embedding gradient");
}

extern "C" void cuda_embedding_vp_forward(struct dtrain_kernels *k, float *out, const int32_t *tokens,
                                          const float *wte_local, const float *wpe, int B, int T, int C, int v0,
                                          int Vl, int add_wpe)
{
    struct cuda_kernels *ck = cuda_of(k);
    size_t total = (size_t)B * T * C;
    if (ck->failed || total == 0)
        return;
    embedding_vp_forward_kernel<<<cuda_blocks(total, 256), 256, 0, ck->stream>>>(out, tokens, wte_local, wpe, T, C,
                                                                                 v0, Vl, add_wpe && wpe != nullptr,
                                                                                 total);
    (void)cuda_check_launch(ck, "vocabulary-parallel embedding");
}

extern "C" void cuda_embedding_vp_backward(struct dtrain_kernels *k, float *dwte_local, float *dwpe,
                                           const float *dout, const int32_t *tokens, int B, int T, int C, int v0,
                                           int Vl)
{
    struct cuda_kernels *ck = cuda_of(k);
    int N = B * T;
    int32_t *sorted_tokens, *sorted_pos;
    if (ck->failed || N <= 0 || C <= 0 ||
        sort_positions(ck, tokens, N, "vocabulary-parallel embedding gradient (sort)", &sorted_tokens,
                       &sorted_pos) != 0)
        return;
    embedding_backward_wte_kernel<<<(unsigned)N, 256, 0, ck->stream>>>(dwte_local, dout, sorted_tokens,
                                                                          sorted_pos, N, C, v0, Vl);
    if (cuda_check_launch(ck, "vocabulary-parallel embedding gradient") != 0 || dwpe == nullptr)
        return;
    encoder_backward_wpe_kernel<<<cuda_blocks((size_t)T * C, 256), 256, 0, ck->stream>>>(dwpe, dout, B, T, C);
    (void)cuda_check_launch(ck, "position embedding gradient");
}

extern "C" void cuda_layernorm_forward(struct dtrain_kernels *k, float *out, float *mean, float *rstd,
                                       const float *inp, const float *weight, const float *bias, int N, int C)
{
    struct cuda_kernels *ck = cuda_of(k);
    if (ck->failed || N <= 0 || C <= 0)
        return;
    layernorm_forward_kernel<<<(unsigned)((N + 7) / 8), 256, 0, ck->stream>>>(out, mean, rstd, inp, weight,
                                                                                bias, N, C);
    (void)cuda_check_launch(ck, "layernorm forward");
}

extern "C" void cuda_layernorm_backward(struct dtrain_kernels *k, float *dinp, float *dweight, float *dbias,
                                        const float *dout, const float *inp, const float *weight,
                                        const float *mean, const float *rstd, int N, int C)
{
    struct cuda_kernels *ck = cuda_of(k);
    if (ck->failed || N <= 0 || C <= 0)
        return;
    int rows = chunk_rows(N), chunks = (N + rows - 1) / rows;
    float *partials = (float *)cuda_scratch(ck, 2 * (size_t)chunks * C * sizeof(float));
    if (partials == nullptr)
        return;
    layernorm_backward_dinp_kernel<<<(unsigned)((N + 7) / 8), 256, 0, ck->stream>>>(dinp, dout, inp, weight,
                                                                                      mean, rstd, N, C);
    if (cuda_check_launch(ck, "layernorm backward") != 0)
        return;
    dim3 grid((unsigned)((C + 255) / 256), (unsigned)chunks);
    layernorm_backward_partials_kernel<<<grid, 256, 0, ck->stream>>>(partials, dout, inp, mean, rstd, N, C,
                                                                     rows, chunks);
    if (cuda_check_launch(ck, "layernorm backward") != 0)
        return;
    layernorm_backward_sum_kernel<<<(unsigned)((C + 255) / 256), 256, 0, ck->stream>>>(dweight, dbias, partials,
                                                                                       C, chunks);
    (void)cuda_check_launch(ck, "layernorm backward");
}

extern "C" void cuda_gelu_forward(struct dtrain_kernels *k, struct dtrain_tensor out, struct dtrain_tensor inp,
                                  size_t n)
{
    struct cuda_kernels *ck = cuda_of(k);
    const struct dtrain_tensor t[] = {out, inp};
    if (ck->failed || n == 0 || !cuda_one_dtype(ck, t, 2, "gelu forward"))
        return;
    if (out.dtype == DTRAIN_BF16)
        gelu_forward_kernel<<<cuda_blocks(n, 256), 256, 0, ck->stream>>>(
            (__nv_bfloat16 *)out.data, (const __nv_bfloat16 *)inp.data, n);
    else
        gelu_forward_kernel<<<cuda_blocks(n, 256), 256, 0, ck->stream>>>((float *)out.data,
                                                                          (const float *)inp.data, n);
    (void)cuda_check_launch(ck, "gelu forward");
}

extern "C" void cuda_gelu_backward(struct dtrain_kernels *k, struct dtrain_tensor dinp, struct dtrain_tensor inp,
                                   struct dtrain_tensor dout, size_t n)
{
    struct cuda_kernels *ck = cuda_of(k);
    const struct dtrain_tensor t[] = {dinp, inp, dout};
    if (ck->failed || n == 0 || !cuda_one_dtype(ck, t, 3, "gelu backward"))
        return;
    if (dinp.dtype == DTRAIN_BF16)
        gelu_backward_kernel<<<cuda_blocks(n, 256), 256, 0, ck->stream>>>(
            (__nv_bfloat16 *)dinp.data, (const __nv_bfloat16 *)inp.data, (const __nv_bfloat16 *)dout.data, n);
    else
        gelu_backward_kernel<<<cuda_blocks(n, 256), 256, 0, ck->stream>>>(
            (float *)dinp.data, (const float *)inp.data, (const float *)dout.data, n);
    (void)cuda_check_launch(ck, "gelu backward");
}

extern "C" void cuda_axpby_strided(struct dtrain_kernels *k, float *out, int ldo, const float *in, int ldi,
                                   float alpha, float beta, int N, int n)
{
    struct cuda_kernels *ck = cuda_of(k);
    if (ck->failed || N <= 0 || n <= 0)
        return;
    size_t total = (size_t)N * n;
    axpby_strided_kernel<<<cuda_blocks(total, 256), 256, 0, ck->stream>>>(out, ldo, in, ldi, alpha, beta, N, n);
    (void)cuda_check_launch(ck, "axpby strided");
}

extern "C" void cuda_residual_forward(struct dtrain_kernels *k, float *out, const float *a, const float *b,
                                      size_t n)
{
    struct cuda_kernels *ck = cuda_of(k);
    if (ck->failed || n == 0)
        return;
    residual_kernel<<<cuda_blocks(n, 256), 256, 0, ck->stream>>>(out, a, b, n);
    (void)cuda_check_launch(ck, "residual");
}

extern "C" void cuda_rmsnorm_forward(struct dtrain_kernels *k, float *out, float *rstd, const float *inp,
                                     const float *weight, float eps, int N, int C)
{
    struct cuda_kernels *ck = cuda_of(k);
    if (ck->failed || N <= 0 || C <= 0)
        return;
    rmsnorm_forward_kernel<<<(unsigned)((N + 7) / 8), 256, 0, ck->stream>>>(out, rstd, inp, weight, eps, N, C);
    (void)cuda_check_launch(ck, "rmsnorm forward");
}

extern "C" void cuda_rmsnorm_backward(struct dtrain_kernels *k, float *dinp, float *dweight, const float *dout,
                                      const float *inp, const float *weight, const float *rstd, int N, int C)
{
    struct cuda_kernels *ck = cuda_of(k);
    if (ck->failed || N <= 0 || C <= 0)
        return;
    int rows = chunk_rows(N), chunks = (N + rows - 1) / rows;
    float *partials = (float *)cuda_scratch(ck, (size_t)chunks * C * sizeof(float));
    if (partials == nullptr)
        return;
    rmsnorm_backward_dinp_kernel<<<(unsigned)((N + 7) / 8), 256, 0, ck->stream>>>(dinp, dout, inp, weight, rstd,
                                                                                    N, C);
    if (cuda_check_launch(ck, "rmsnorm backward") != 0)
        return;
    dim3 grid((unsigned)((C + 255) / 256), (unsigned)chunks);
    rmsnorm_backward_partials_kernel<<<grid, 256, 0, ck->stream>>>(partials, dout, inp, rstd, N, C, rows);
    if (cuda_check_launch(ck, "rmsnorm backward") != 0)
        return;
    rmsnorm_backward_sum_kernel<<<(unsigned)((C + 255) / 256), 256, 0, ck->stream>>>(dweight, partials, C, chunks);
    (void)cuda_check_launch(ck, "rmsnorm backward");
}

static void rope(struct dtrain_kernels *k, struct dtrain_tensor qkv, const float *inv_freq, int B, int T, int NH,
                 int KVH, int HS, float sign, const char *what)
{
    struct cuda_kernels *ck = cuda_of(k);
    size_t total = (size_t)B * T * (NH + KVH) * (HS / 2), row = (size_t)(NH + 2 * KVH) * HS;
    if (ck->failed || total == 0)
        return;
    if (qkv.dtype == DTRAIN_BF16)
        rope_kernel<<<cuda_blocks(total, 256), 256, 0, ck->stream>>>((__nv_bfloat16 *)qkv.data, inv_freq, T,
                                                                     NH + KVH, HS, row, sign, total);
    else
        rope_kernel<<<cuda_blocks(total, 256), 256, 0, ck->stream>>>((float *)qkv.data, inv_freq, T, NH + KVH, HS,
                                                                     row, sign, total);
    (void)cuda_check_launch(ck, what);
}

extern "C" void cuda_rope_forward(struct dtrain_kernels *k, struct dtrain_tensor qkv, const float *inv_freq, int B,
                                  int T, int NH, int KVH, int HS)
{
    rope(k, qkv, inv_freq, B, T, NH, KVH, HS, 1.0f, "rope forward");
}

extern "C" void cuda_rope_backward(struct dtrain_kernels *k, struct dtrain_tensor dqkv, const float *inv_freq,
                                   int B, int T, int NH, int KVH, int HS)
{
    rope(k, dqkv, inv_freq, B, T, NH, KVH, HS, -1.0f, "rope backward");
}

extern "C" void cuda_swiglu_forward(struct dtrain_kernels *k, struct dtrain_tensor out, struct dtrain_tensor inp,
                                    int N, int F)
{
    struct cuda_kernels *ck = cuda_of(k);
    const struct dtrain_tensor t[] = {out, inp};
    size_t total = (size_t)N * F;
    if (ck->failed || N <= 0 || F <= 0 || !cuda_one_dtype(ck, t, 2, "swiglu forward"))
        return;
    if (out.dtype == DTRAIN_BF16)
        swiglu_forward_kernel<<<cuda_blocks(total, 256), 256, 0, ck->stream>>>(
            (__nv_bfloat16 *)out.data, (const __nv_bfloat16 *)inp.data, F, total);
    else
        swiglu_forward_kernel<<<cuda_blocks(total, 256), 256, 0, ck->stream>>>((float *)out.data,
                                                                                (const float *)inp.data, F, total);
    (void)cuda_check_launch(ck, "swiglu forward");
}

extern "C" void cuda_swiglu_backward(struct dtrain_kernels *k, struct dtrain_tensor dinp, struct dtrain_tensor inp,
                                     struct dtrain_tensor dout, int N, int F)
{
    struct cuda_kernels *ck = cuda_of(k);
    const struct dtrain_tensor t[] = {dinp, inp, dout};
    size_t total = (size_t)N * F;
    if (ck->failed || N <= 0 || F <= 0 || !cuda_one_dtype(ck, t, 3, "swiglu backward"))
        return;
    if (dinp.dtype == DTRAIN_BF16)
        swiglu_backward_kernel<<<cuda_blocks(total, 256), 256, 0, ck->stream>>>(
            (__nv_bfloat16 *)dinp.data, (const __nv_bfloat16 *)inp.data, (const __nv_bfloat16 *)dout.data, F,
            total);
    else
        swiglu_backward_kernel<<<cuda_blocks(total, 256), 256, 0, ck->stream>>>(
            (float *)dinp.data, (const float *)inp.data, (const float *)dout.data, F, total);
    (void)cuda_check_launch(ck, "swiglu backward");
}
