// SPDX-License-Identifier: GPL-2.0-or-later
/* GPU stand-in: cub::DeviceRadixSort::SortPairs (the overload dtrain uses),
 * on the CPU.  The first call (d_temp_storage null) sizes the temporary
 * storage; the second queues on the stream a stable sort by the key bits
 * [begin_bit, end_bit), keys ordered as CUB orders them (signed integers
 * and floats by value, through CUB's bit twiddling).  Every operand must be
 * device memory: anything else is an illegal address, as on a GPU. */
#ifndef DTRAIN_STANDIN_CUB_DEVICE_RADIX_SORT_CUH
#define DTRAIN_STANDIN_CUB_DEVICE_RADIX_SORT_CUH

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <type_traits>
#include <vector>

/* From the stand-in's runtime (tests/gpu/standin/standin.h). */
cudaError_t standin_enqueue(cudaStream_t s, std::function<void()> work);
void standin_device_fault(cudaError_t e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
cudaError_t standin_set_last_error(cudaError_t e);
int standin_is_device(const void *p, size_t bytes);

namespace cub {

namespace standin_detail {

/* The key's bits as CUB sorts them: the sign bit of signed integers
 * flipped; floats flipped entirely when negative, else their sign bit. */
template <class K> uint64_t twiddle(K key)
{
    static_assert(sizeof(K) <= 8, "gpu-standin: keys of at most 64 bits");
    uint64_t u = 0;
    memcpy(&u, &key, sizeof(K));
    const uint64_t sign = 1ull << (sizeof(K) * 8 - 1);
    if (std::is_floating_point<K>::value)
        u = (u & sign) ? ~u : (u | sign);
    else if (std::is_signed<K>::value)
        u ^= sign;
    if (sizeof(K) < 8)
        u &= (1ull << (sizeof(K) * 8)) - 1;
    return u;
}

} // namespace standin_detail

struct DeviceRadixSort {
    template <class K, class V, class NumItemsT>
    static cudaError_t SortPairs(void *d_temp_storage, size_t &temp_storage_bytes, const K *d_keys_in, K *d_keys_out,
                                 const V *d_values_in, V *d_values_out, NumItemsT num_items, int begin_bit = 0,
                                 int end_bit = sizeof(K) * 8, cudaStream_t stream = 0)
    {
        size_t n = num_items > 0 ? (size_t)num_items : 0;
        /* CUB's double buffers, roughly: a size that makes a caller's
         * scratch accounting matter */
        size_t need = 256 + n * (sizeof(K) + sizeof(V));
        if (d_temp_storage == nullptr) {
            temp_storage_bytes = need;
            return cudaSuccess;
        }
        if (temp_storage_bytes < need || begin_bit < 0 || end_bit > (int)(sizeof(K) * 8) || begin_bit > end_bit)
            return standin_set_last_error(cudaErrorInvalidValue);
        if (n == 0)
            return cudaSuccess;
        return standin_enqueue(stream, [=] {
            const void *ptrs[5] = {d_temp_storage, d_keys_in, d_keys_out, d_values_in, d_values_out};
            size_t bytes[5] = {need, n * sizeof(K), n * sizeof(K), n * sizeof(V), n * sizeof(V)};
            static const char *const names[5] = {"temp storage", "keys in", "keys out", "values in", "values out"};
            for (int i = 0; i < 5; i++) {
                if (!standin_is_device(ptrs[i], bytes[i])) {
                    standin_device_fault(cudaErrorIllegalAddress, "cub::DeviceRadixSort::SortPairs: %s (%p) is not %zu bytes of device memory",
                                         names[i], ptrs[i], bytes[i]);
                    return;
                }
            }
            int bits = end_bit - begin_bit;
            uint64_t mask = bits >= 64 ? ~0ull : ((1ull << bits) - 1);
            std::vector<uint64_t> radix(n);
            for (size_t i = 0; i < n; i++)
                radix[i] = (standin_detail::twiddle<K>(d_keys_in[i]) >> begin_bit) & mask;
            std::vector<size_t> order(n);
            std::iota(order.begin(), order.end(), (size_t)0);
            std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return radix[a] < radix[b]; });
            /* through copies: the inputs may alias nothing, but be safe */
            std::vector<K> keys(n);
            std::vector<V> vals(n);
            for (size_t i = 0; i < n; i++) {
                keys[i] = d_keys_in[order[i]];
                vals[i] = d_values_in[order[i]];
            }
            std::copy(keys.begin(), keys.end(), d_keys_out);
            std::copy(vals.begin(), vals.end(), d_values_out);
            /* CUB leaves its temporary storage clobbered */
            memset(d_temp_storage, 0xa5, need);
        });
    }
};

} // namespace cub

#endif
