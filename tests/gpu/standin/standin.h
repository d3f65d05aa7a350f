/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The GPU stand-in's internal interface: what its parts (runtime.cc: devices,
 * memory, streams, events; device.cc: the SIMT executor; cublaslt.cc;
 * nccl.cc) call in one another.  Not included by dtrain's own sources: they
 * see only the public headers in include/ (cuda_runtime_api.h, cublasLt.h,
 * nccl.h, ...), which mirror the subset of the real ones dtrain uses.
 *
 * The stand-in is a CPU implementation of the CUDA runtime, cuBLASLt, CUB
 * and NCCL at the hardware boundary (doc/gpu.md, "The GPU stand-in"), so
 * that the kernels/cuda .cu files and runtime/comm/nccl/nccl_backend.c run in CI.
 * It is faithful where defects hide: work on a stream runs on that stream's
 * own thread after the call returns; kernels run their threads as fibers in
 * a seeded random order between barriers; NCCL calls on a non-blocking
 * communicator return ncclInProgress (seeded) and reach the stream only
 * once ncclCommGetAsyncError says ncclSuccess.
 *
 * Environment (all optional):
 *   DTRAIN_STANDIN_GPUS=N    devices on this "node" (default 8), before
 *                            CUDA_VISIBLE_DEVICES selects among them
 *   DTRAIN_STANDIN_SEED=S    the seed of every random choice (default 1)
 *   DTRAIN_STANDIN_VERBOSE=1 one line on stderr per fault found */
#ifndef DTRAIN_STANDIN_H
#define DTRAIN_STANDIN_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
#include <functional>

/* ---------------------------------------------------------------- streams
 * (runtime.cc) */

/* Queue work on stream s (0: the legacy default stream of the current
 * device, with its implicit synchronisation against blocking streams).
 * The work runs later, on the stream's own thread, after everything queued
 * on s before it and after the events s was made to wait for.  Returns
 * cudaSuccess, or cudaErrorInvalidResourceHandle for a destroyed stream. */
cudaError_t standin_enqueue(cudaStream_t s, std::function<void()> work);

/* From inside queued work: the work failed on the "device" (a kernel's
 * out-of-bounds access, a barrier deadlock, a trap).  The error becomes
 * sticky, as a real device fault is: every later runtime call of this
 * process returns it, and cudaGetLastError/cudaPeekAtLastError report it.
 * One line on stderr says what happened (prefixed "gpu-standin: "). */
void standin_device_fault(cudaError_t e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* From the host side of an API call: a launch or argument error that is
 * not sticky (cudaGetLastError returns it once, then cudaSuccess).  Returns e. */
cudaError_t standin_set_last_error(cudaError_t e);

/* The calling host thread's current device (cudaSetDevice), as an index
 * into this process's visible devices, and its physical id (its index
 * among DTRAIN_STANDIN_GPUS after CUDA_VISIBLE_DEVICES), which NCCL uses to
 * refuse two ranks of one communicator on one device. */
int standin_current_device(void);
int standin_physical_device(int device);

/* Device memory: 1 when [p, p + bytes) lies inside one live cudaMalloc
 * allocation (or cudaMallocAsync), 0 otherwise. */
int standin_is_device(const void *p, size_t bytes);
/* 1 when p lies inside memory from cudaMallocHost/cudaHostAlloc. */
int standin_is_pinned(const void *p);

/* The dynamic shared memory a launch of func may ask for: 48 KiB, or what
 * cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize)
 * set (at most the 227 KiB opt-in limit of an H100, less the static
 * shared memory, which the stand-in does not know). */
size_t standin_func_max_dynamic_shared(const void *func);

/* The seed of the random choices (DTRAIN_STANDIN_SEED, default 1). */
uint64_t standin_seed(void);
/* The next number of a splitmix64 sequence started at *state. */
static inline uint64_t standin_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* ---------------------------------------------------------------- kernels
 * (device.cc) */

/* Launch a kernel: checks the configuration as the real runtime does
 * (block size, grid dims, dynamic shared memory against the function's
 * cudaFuncAttributeMaxDynamicSharedMemorySize), sets the last error and
 * returns without queueing when it is refused; otherwise queues on stream
 * the execution of every block (in a seeded random order) with its threads
 * as fibers running body. */
void standin_launch(const void *func, dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                    std::function<void()> body);
#endif /* __cplusplus */

#endif
