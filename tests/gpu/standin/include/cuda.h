/* SPDX-License-Identifier: GPL-2.0-or-later */
/* GPU stand-in: the few driver API entry points dtrain resolves from
 * libcuda.so.1 (cuInit, cuDeviceGetCount), implemented by runtime.cc on the
 * same devices as the runtime API (DTRAIN_STANDIN_GPUS, CUDA_VISIBLE_DEVICES). */
#ifndef DTRAIN_STANDIN_CUDA_H
#define DTRAIN_STANDIN_CUDA_H

#define CUDA_VERSION 12080

typedef enum cudaError_enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_DEINITIALIZED = 4,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_ILLEGAL_ADDRESS = 700,
    CUDA_ERROR_LAUNCH_FAILED = 719,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_UNKNOWN = 999
} CUresult;

typedef int CUdevice;

#ifdef __cplusplus
extern "C" {
#endif
CUresult cuInit(unsigned int flags);
CUresult cuDeviceGetCount(int *count);
CUresult cuDriverGetVersion(int *version);
#ifdef __cplusplus
}
#endif

#endif
