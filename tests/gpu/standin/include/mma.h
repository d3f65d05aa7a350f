/* SPDX-License-Identifier: GPL-2.0-or-later */
/* GPU stand-in: nvcuda::wmma for 16x16x16 tiles (bf16 or fp16 operands,
 * fp32 or fp16 accumulator), as dtrain's flash-attention kernels use it.
 *
 * The model is the hardware's: each lane holds 8 elements of a fragment
 * (num_elements = 8, as the real bf16 m16n16k16 fragments), laid out as
 * the mma.sync m16n8k16 register layout (lane = 4*g + t: rows g, g+8,
 * columns 2t, 2t+1, +8).  That layout is unspecified by CUDA: code that
 * reads x[] assuming one gets what the hardware gives, not a full tile.
 * load/store/mma are warp collectives: every lane of the warp must arrive
 * (else the block faults); a load or store happens after all lanes have
 * arrived; the pointer and ldm must be the same in every lane, the
 * pointer 256-bit aligned and ldm a multiple of 16 bytes (the API's
 * rules; a violation is a device fault, cudaErrorMisalignedAddress).
 * mma_sync multiplies in fp32 (bf16 and fp16 products are exact in fp32)
 * and accumulates over k in order 0..15, one rounding per add; the tensor
 * cores' internal accumulation order is unspecified, so results can differ
 * from a real GPU in the last bits where sums round. */
#ifndef DTRAIN_STANDIN_MMA_H
#define DTRAIN_STANDIN_MMA_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <standin_device.h>

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void> class fragment {
    static_assert(M == 16 && N == 16 && K == 16, "gpu-standin: only 16x16x16 wmma fragments");

public:
    enum { num_elements = 8, num_storage_elements = 8 };
    typedef T element_type;
    typedef T storage_element_type;
    T x[8];
};

namespace standin {

static inline float to_f32(float v) { return v; }
static inline float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
static inline float to_f32(__half v) { return __half2float(v); }
template <typename T> static inline T from_f32(float v);
template <> inline float from_f32<float>(float v) { return v; }
template <> inline __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> inline __half from_f32<__half>(float v) { return __float2half_rn(v); }

/* Element i of lane l: (row, column) of the use's logical tile (A: m x k,
 * B: k x n, accumulator: m x n). */
static inline void a_pos(unsigned lane, int i, int *r, int *c)
{
    *r = (int)(lane >> 2) + 8 * ((i >> 1) & 1);
    *c = 2 * (int)(lane & 3) + (i & 1) + 8 * (i >> 2);
}
static inline void b_pos(unsigned lane, int i, int *r, int *c)
{
    *r = 2 * (int)(lane & 3) + (i & 1) + 8 * ((i >> 1) & 1);
    *c = (int)(lane >> 2) + 8 * (i >> 2);
}
template <typename Use> static inline void pos(unsigned lane, int i, int *r, int *c);
template <> inline void pos<matrix_a>(unsigned lane, int i, int *r, int *c) { a_pos(lane, i, r, c); }
template <> inline void pos<matrix_b>(unsigned lane, int i, int *r, int *c) { b_pos(lane, i, r, c); }
template <> inline void pos<accumulator>(unsigned lane, int i, int *r, int *c) { a_pos(lane, i, r, c); }

/* The memory access of one lane, checked in the collective. */
struct mem_arg {
    const void *ptr;
    unsigned ldm;
};
const char *mem_collect(void *const lanes[32]);

static inline void mem_sync(const char *what, const void *ptr, unsigned ldm, size_t elem)
{
    if (((uintptr_t)ptr & 31u) != 0)
        standin_thread_fault(cudaErrorMisalignedAddress, "wmma::%s: pointer %p is not 256-bit aligned", what, ptr);
    if ((ldm * elem) % 16u != 0 || ldm == 0)
        standin_thread_fault(cudaErrorMisalignedAddress, "wmma::%s: ldm %u is not a multiple of 16 bytes", what,
                             ldm);
    mem_arg a = {ptr, ldm};
    standin_warp_collective(0xffffffffu, mem_collect, &a);
}

template <typename TA, typename TB, typename TC, typename TD> struct mma_arg {
    TD *d;
    const TA *a;
    const TB *b;
    const TC *c;
};

/* D = A B + C over the warp's 32 lanes: gathered, multiplied, scattered. */
template <typename TA, typename TB, typename TC, typename TD> const char *mma_collect(void *const lanes[32])
{
    float A[16][16], B[16][16], C[16][16];
    for (unsigned l = 0; l < 32; l++) {
        if (lanes[l] == nullptr)
            return "wmma::mma_sync: not every lane of the warp took part";
        const mma_arg<TA, TB, TC, TD> *m = static_cast<const mma_arg<TA, TB, TC, TD> *>(lanes[l]);
        for (int i = 0; i < 8; i++) {
            int r, c;
            a_pos(l, i, &r, &c);
            A[r][c] = to_f32(m->a[i]);
            C[r][c] = to_f32(m->c[i]);
            b_pos(l, i, &r, &c);
            B[r][c] = to_f32(m->b[i]);
        }
    }
    float D[16][16];
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) {
            float s = C[r][c];
            for (int k = 0; k < 16; k++)
                s += A[r][k] * B[k][c];
            D[r][c] = s;
        }
    for (unsigned l = 0; l < 32; l++) {
        const mma_arg<TA, TB, TC, TD> *m = static_cast<const mma_arg<TA, TB, TC, TD> *>(lanes[l]);
        for (int i = 0; i < 8; i++) {
            int r, c;
            a_pos(l, i, &r, &c);
            m->d[i] = from_f32<TD>(D[r][c]);
        }
    }
    return nullptr;
}

} // namespace standin

template <typename Use, int M, int N, int K, typename T, typename L, typename V>
static inline void fill_fragment(fragment<Use, M, N, K, T, L> &f, const V &v)
{
    for (int i = 0; i < 8; i++)
        f.x[i] = standin::from_f32<T>(standin::to_f32(v)); /* int and double convert to float first */
}

/* A or B, the layout in the fragment's type */
template <typename Use, typename T, typename L>
static inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, L> &f, const T *p, unsigned ldm)
{
    static_assert(std::is_same<L, row_major>::value || std::is_same<L, col_major>::value,
                  "gpu-standin: a matrix_a/matrix_b fragment has a layout");
    standin::mem_sync("load_matrix_sync", p, ldm, sizeof(T));
    unsigned lane = standin_cur->lane;
    for (int i = 0; i < 8; i++) {
        int r, c;
        standin::pos<Use>(lane, i, &r, &c);
        f.x[i] = std::is_same<L, row_major>::value ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
    }
}

/* the accumulator, the layout given */
template <typename T>
static inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, T> &f, const T *p, unsigned ldm, layout_t layout)
{
    standin::mem_sync("load_matrix_sync", p, ldm, sizeof(T));
    unsigned lane = standin_cur->lane;
    for (int i = 0; i < 8; i++) {
        int r, c;
        standin::a_pos(lane, i, &r, &c);
        f.x[i] = layout == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
    }
}

template <typename T>
static inline void store_matrix_sync(T *p, const fragment<accumulator, 16, 16, 16, T> &f, unsigned ldm, layout_t layout)
{
    standin::mem_sync("store_matrix_sync", p, ldm, sizeof(T));
    unsigned lane = standin_cur->lane;
    for (int i = 0; i < 8; i++) {
        int r, c;
        standin::a_pos(lane, i, &r, &c);
        (layout == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r]) = f.x[i];
    }
}

template <typename TA, typename LA, typename TB, typename LB, typename TC, typename TD>
static inline void mma_sync(fragment<accumulator, 16, 16, 16, TD> &d, const fragment<matrix_a, 16, 16, 16, TA, LA> &a,
                            const fragment<matrix_b, 16, 16, 16, TB, LB> &b,
                            const fragment<accumulator, 16, 16, 16, TC> &c)
{
    standin::mma_arg<TA, TB, TC, TD> m = {d.x, a.x, b.x, c.x};
    standin_warp_collective(0xffffffffu, standin::mma_collect<TA, TB, TC, TD>, &m);
}

} // namespace wmma
} // namespace nvcuda

#endif
