/* SPDX-License-Identifier: GPL-2.0-or-later */
/* GPU stand-in: the real cuda_runtime.h is the runtime API plus, for CUDA
 * C++, the device-side language; so is this one.  The stand-in's nvcc
 * includes it first in every .cu file, as nvcc does. */
#ifndef DTRAIN_STANDIN_CUDA_RUNTIME_H
#define DTRAIN_STANDIN_CUDA_RUNTIME_H

#include <cuda_runtime_api.h>

#ifdef __cplusplus
#include <standin_device.h>
#endif

#endif
