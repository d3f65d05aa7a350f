/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The typed operations of the CPU backend (dtrain_kernels.h, "Types"):
 * matmul (the NF4 one too), attention, GELU, RoPE and SwiGLU on fp32 or bf16 operands.
 *
 * The arithmetic stays the fp32 kernels' (cpu_matmul.c, cpu_attention.c,
 * cpu_layers.c): a bf16 operand is widened into the instance's typed
 * scratch (exact), a bf16 result is computed there in fp32 and rounded
 * once into its tensor (nearest even, dtrain_bf16_from_f32).  So a bf16
 * result is bit for bit the fp32 result of the same inputs, rounded: the
 * reference the cuda backend's bf16 kernels are held to (within the order
 * of their sums).  All-fp32 calls go straight to the fp32 kernels. */
#include "cpu_backend.h"
#include "cpu_math.h"

#include <stdio.h>
#include <stdlib.h>

struct convert_args {
    float *f32;
    uint16_t *bf16;
    size_t n;
    int widen;
};

/* widen (bf16 -> f32) or narrow (f32 -> bf16, nearest even) items */
static void convert_items(void *p, long begin, long end, int tid)
{
    const struct convert_args *a = p;
    (void)tid;
    size_t i0 = (size_t)begin * CPU_ELEMS_PER_ITEM, i1 = (size_t)end * CPU_ELEMS_PER_ITEM;
    if (i1 > a->n)
        i1 = a->n;
    if (a->widen)
        cpu_bf16_widen_span(a->f32 + i0, a->bf16 + i0, i1 - i0);
    else
        cpu_bf16_narrow_span(a->bf16 + i0, a->f32 + i0, i1 - i0);
}

static void convert(struct dtrain_kernels *k, float *f32, uint16_t *bf16, size_t n, int widen)
{
    struct convert_args a = {.f32 = f32, .bf16 = bf16, .n = n, .widen = widen};
    cpu_parallel(k, (long)((n + CPU_ELEMS_PER_ITEM - 1) / CPU_ELEMS_PER_ITEM), CPU_ELEMS_PER_ITEM, convert_items, &a);
}

/* One call's fp32 views: up to four operands of n[i] elements; a bf16 one
 * gets a slot of the typed scratch. */
struct views {
    float *f32[4];
};

static size_t slot_floats(size_t n) { return (n + 15) & ~(size_t)15; }

/* Fill v for the operands t[0..count) (n[i] elements each; a NULL data
 * stays NULL); widen the inputs (in[i] != 0).  Returns 0, or -1 when the
 * scratch cannot grow: the error is recorded (dtrain_kernels_error) and
 * the call does nothing, as on the cuda backend. */
static int views_of(struct dtrain_kernels *k, struct views *v, const struct dtrain_tensor *t,
                    const size_t *n, const int *in, int count)
{
    struct cpu_kernels *ck = (struct cpu_kernels *)k;
    size_t need = 0;
    if (ck->failed)
        return -1;
    for (int i = 0; i < count; i++)
        if (t[i].data != NULL && t[i].dtype == DTRAIN_BF16)
            need += slot_floats(n[i]);
    if (need > ck->typed_cap) {
        float *p = aligned_alloc(64, need * sizeof(float));
        if (p == NULL) {
            cpu_kernels_fail(k, "out of memory for %zu bytes of bf16 operand scratch", need * sizeof(float));
            return -1;
        }
        free(ck->typed_scratch);
        ck->typed_scratch = p;
        ck->typed_cap = need;
    }
    size_t used = 0;
    for (int i = 0; i < count; i++) {
        v->f32[i] = t[i].data;
        if (t[i].data == NULL || t[i].dtype != DTRAIN_BF16)
            continue;
        v->f32[i] = ck->typed_scratch + used;
        used += slot_floats(n[i]);
        if (in[i])
            convert(k, v->f32[i], t[i].data, n[i], 1);
    }
    return 0;
}

/* Round the fp32 result of operand i into its bf16 tensor. */
static void store(struct dtrain_kernels *k, const struct views *v, const struct dtrain_tensor *t,
                  const size_t *n, int i)
{
    if (t[i].data != NULL && t[i].dtype == DTRAIN_BF16)
        convert(k, v->f32[i], t[i].data, n[i], 0);
}

void cpu_typed_matmul_forward(struct dtrain_kernels *k, struct dtrain_tensor out, struct dtrain_tensor inp,
                              const float *weight, const float *bias, int N, int IC, int OC)
{
    /* a bf16 input goes to oneDNN's bf16 matmul as it is, not widened; a
     * bf16 output is written by it, not rounded from an fp32 view (which
     * then gets no slot, nor a store) */
    const uint16_t *inp_bits = inp.dtype == DTRAIN_BF16 && cpu_matmul_takes_bits(k) ? inp.data : NULL;
    uint16_t *out_bits = out.dtype == DTRAIN_BF16 && cpu_matmul_writes_bits(k) ? out.data : NULL;
    const struct dtrain_tensor none = {0};
    const struct dtrain_tensor t[2] = {out_bits != NULL ? none : out, inp_bits != NULL ? none : inp};
    const size_t n[2] = {(size_t)N * OC, (size_t)N * IC};
    const int in[2] = {0, 1};
    struct views v;
    if (views_of(k, &v, t, n, in, 2) != 0)
        return;
    cpu_matmul_forward(k, v.f32[0], out_bits, v.f32[1], inp_bits, weight, bias, N, IC, OC,
                       inp.dtype == DTRAIN_BF16 ? CPU_MATMUL_INP_BF16 : 0u);
    store(k, &v, t, n, 0);
}

void cpu_typed_matmul_backward(struct dtrain_kernels *k, struct dtrain_tensor dinp, float *dweight, float *dbias,
                               struct dtrain_tensor dout, struct dtrain_tensor inp, const float *weight,
                               int N, int IC, int OC)
{
    /* bf16 operands go to oneDNN's bf16 matmuls as they are (dbias sums
     * dout's bits), without fp32 views; a bf16 dinp is written by oneDNN */
    int bits = cpu_matmul_takes_bits(k);
    uint16_t *dinp_bits = dinp.dtype == DTRAIN_BF16 && cpu_matmul_writes_bits(k) ? dinp.data : NULL;
    const uint16_t *dout_bits = bits && dout.dtype == DTRAIN_BF16 ? dout.data : NULL;
    const uint16_t *inp_bits = bits && inp.dtype == DTRAIN_BF16 ? inp.data : NULL;
    const struct dtrain_tensor none = {0};
    const struct dtrain_tensor t[3] = {dinp_bits != NULL ? none : dinp, dout_bits != NULL ? none : dout,
                                       inp_bits != NULL ? none : inp};
    const size_t n[3] = {(size_t)N * IC, (size_t)N * OC, (size_t)N * IC};
    const int in[3] = {0, 1, 1};
    struct views v;
    if (views_of(k, &v, t, n, in, 3) != 0)
        return;
    cpu_matmul_backward(k, v.f32[0], dinp_bits, dweight, dbias, v.f32[1], dout_bits, v.f32[2], inp_bits, weight, N,
                        IC, OC,
                        (inp.dtype == DTRAIN_BF16 ? CPU_MATMUL_INP_BF16 : 0u) |
                            (dout.dtype == DTRAIN_BF16 ? CPU_MATMUL_DOUT_BF16 : 0u));
    store(k, &v, t, n, 0);
}

void cpu_typed_nf4_matmul_forward(struct dtrain_kernels *k, struct dtrain_tensor out, struct dtrain_tensor inp,
                                  struct dtrain_nf4 w, const float *bias, int N)
{
    const struct dtrain_tensor t[2] = {out, inp};
    const size_t n[2] = {(size_t)N * w.rows, (size_t)N * w.cols};
    const int in[2] = {0, 1};
    struct views v;
    if (views_of(k, &v, t, n, in, 2) != 0)
        return;
    cpu_nf4_matmul_forward(k, v.f32[0], v.f32[1], w, bias, N);
    store(k, &v, t, n, 0);
}

void cpu_typed_nf4_matmul_backward(struct dtrain_kernels *k, struct dtrain_tensor dinp, struct dtrain_tensor dout,
                                   struct dtrain_nf4 w, int N)
{
    const struct dtrain_tensor t[2] = {dinp, dout};
    const size_t n[2] = {(size_t)N * w.cols, (size_t)N * w.rows};
    const int in[2] = {0, 1};
    struct views v;
    if (views_of(k, &v, t, n, in, 2) != 0)
        return;
    cpu_nf4_matmul_backward(k, v.f32[0], v.f32[1], w, N);
    store(k, &v, t, n, 0);
}

void cpu_typed_attention_forward(struct dtrain_kernels *k, struct dtrain_tensor out, float *att,
                                 struct dtrain_tensor qkv, int B, int T, int NH, int KVH, int HS)
{
    size_t rows = (size_t)B * T * NH * HS;
    const struct dtrain_tensor t[2] = {out, qkv};
    const size_t n[2] = {rows, (size_t)B * T * (NH + 2 * KVH) * HS};
    const int in[2] = {0, 1};
    struct views v;
    if (views_of(k, &v, t, n, in, 2) != 0)
        return;
    cpu_attention_forward(k, v.f32[0], att, v.f32[1], B, T, NH, KVH, HS);
    store(k, &v, t, n, 0);
}

/* The probabilities (B,NH,T,T): backward needs no more (out unused). */
size_t cpu_attention_saved(struct dtrain_kernels *k, int B, int T, int NH, int KVH, int HS)
{
    (void)k;
    (void)KVH;
    (void)HS;
    return (size_t)B * NH * T * T;
}

void cpu_typed_attention_backward(struct dtrain_kernels *k, struct dtrain_tensor dqkv, float *scratch,
                                  struct dtrain_tensor dout, struct dtrain_tensor qkv, struct dtrain_tensor out,
                                  const float *att, int B, int T, int NH, int KVH, int HS)
{
    size_t rows = (size_t)B * T * NH * HS, qkv_n = (size_t)B * T * (NH + 2 * KVH) * HS;
    const struct dtrain_tensor t[3] = {dqkv, dout, qkv};
    const size_t n[3] = {qkv_n, rows, qkv_n};
    const int in[3] = {0, 1, 1};
    struct views v;
    (void)out;
    if (views_of(k, &v, t, n, in, 3) != 0)
        return;
    cpu_attention_backward(k, v.f32[0], scratch, v.f32[1], v.f32[2], att, B, T, NH, KVH, HS);
    store(k, &v, t, n, 0);
}

void cpu_typed_gelu_forward(struct dtrain_kernels *k, struct dtrain_tensor out, struct dtrain_tensor inp, size_t n1)
{
    if (out.dtype == DTRAIN_BF16 && inp.dtype == DTRAIN_BF16) { /* no fp32 views: converted in cache */
        if (!((struct cpu_kernels *)k)->failed)
            cpu_gelu_forward_bf16(k, out.data, inp.data, n1);
        return;
    }
    const struct dtrain_tensor t[2] = {out, inp};
    const size_t n[2] = {n1, n1};
    const int in[2] = {0, 1};
    struct views v;
    if (views_of(k, &v, t, n, in, 2) != 0)
        return;
    cpu_gelu_forward(k, v.f32[0], v.f32[1], n1);
    store(k, &v, t, n, 0);
}

void cpu_typed_gelu_backward(struct dtrain_kernels *k, struct dtrain_tensor dinp, struct dtrain_tensor inp,
                             struct dtrain_tensor dout, size_t n1)
{
    if (dinp.dtype == DTRAIN_BF16 && inp.dtype == DTRAIN_BF16 && dout.dtype == DTRAIN_BF16) {
        if (!((struct cpu_kernels *)k)->failed)
            cpu_gelu_backward_bf16(k, dinp.data, inp.data, dout.data, n1);
        return;
    }
    const struct dtrain_tensor t[3] = {dinp, inp, dout};
    const size_t n[3] = {n1, n1, n1};
    const int in[3] = {0, 1, 1};
    struct views v;
    if (views_of(k, &v, t, n, in, 3) != 0)
        return;
    cpu_gelu_backward(k, v.f32[0], v.f32[1], v.f32[2], n1);
    store(k, &v, t, n, 0);
}

/* RoPE in place: a bf16 qkv is widened whole, rotated and rounded back
 * (the values' round trip is exact). */
static void typed_rope(struct dtrain_kernels *k, struct dtrain_tensor qkv, const float *inv_freq,
                       int B, int T, int NH, int KVH, int HS, int sign)
{
    const struct dtrain_tensor t[1] = {qkv};
    const size_t n[1] = {(size_t)B * T * (NH + 2 * KVH) * HS};
    const int in[1] = {1};
    struct views v;
    if (views_of(k, &v, t, n, in, 1) != 0)
        return;
    cpu_rope(k, v.f32[0], inv_freq, B, T, NH, KVH, HS, sign);
    store(k, &v, t, n, 0);
}

void cpu_typed_rope_forward(struct dtrain_kernels *k, struct dtrain_tensor qkv, const float *inv_freq,
                            int B, int T, int NH, int KVH, int HS)
{
    typed_rope(k, qkv, inv_freq, B, T, NH, KVH, HS, 1);
}

void cpu_typed_rope_backward(struct dtrain_kernels *k, struct dtrain_tensor dqkv, const float *inv_freq,
                             int B, int T, int NH, int KVH, int HS)
{
    typed_rope(k, dqkv, inv_freq, B, T, NH, KVH, HS, -1);
}

void cpu_typed_swiglu_forward(struct dtrain_kernels *k, struct dtrain_tensor out, struct dtrain_tensor inp,
                              int N, int F)
{
    const struct dtrain_tensor t[2] = {out, inp};
    const size_t n[2] = {(size_t)N * F, (size_t)N * 2 * F};
    const int in[2] = {0, 1};
    struct views v;
    if (views_of(k, &v, t, n, in, 2) != 0)
        return;
    cpu_swiglu_forward(k, v.f32[0], v.f32[1], N, F);
    store(k, &v, t, n, 0);
}

void cpu_typed_swiglu_backward(struct dtrain_kernels *k, struct dtrain_tensor dinp, struct dtrain_tensor inp,
                               struct dtrain_tensor dout, int N, int F)
{
    const struct dtrain_tensor t[3] = {dinp, inp, dout};
    const size_t n[3] = {(size_t)N * 2 * F, (size_t)N * 2 * F, (size_t)N * F};
    const int in[3] = {0, 1, 1};
    struct views v;
    if (views_of(k, &v, t, n, in, 3) != 0)
        return;
    cpu_swiglu_backward(k, v.f32[0], v.f32[1], v.f32[2], N, F);
    store(k, &v, t, n, 0);
}
