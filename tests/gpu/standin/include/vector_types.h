/* SPDX-License-Identifier: GPL-2.0-or-later */
/* GPU stand-in: the vector types of the real vector_types.h that dtrain
 * uses (dim3, uint3 and the 2/4-wide vectors with their real alignments).
 * The make_* helpers live in the device helper's headers, as in the real
 * vector_functions.h. */
#ifndef DTRAIN_STANDIN_VECTOR_TYPES_H
#define DTRAIN_STANDIN_VECTOR_TYPES_H

#define STANDIN_VEC_ALIGN(n) __attribute__((aligned(n)))

struct uint3 { unsigned int x, y, z; };
struct int3 { int x, y, z; };
struct float3 { float x, y, z; };
struct STANDIN_VEC_ALIGN(8) int2 { int x, y; };
struct STANDIN_VEC_ALIGN(8) uint2 { unsigned int x, y; };
struct STANDIN_VEC_ALIGN(8) float2 { float x, y; };
struct STANDIN_VEC_ALIGN(16) int4 { int x, y, z, w; };
struct STANDIN_VEC_ALIGN(16) uint4 { unsigned int x, y, z, w; };
struct STANDIN_VEC_ALIGN(16) float4 { float x, y, z, w; };
struct STANDIN_VEC_ALIGN(16) double2 { double x, y; };

struct dim3 {
    unsigned int x, y, z;
#ifdef __cplusplus
    /* As the real dim3: unspecified dimensions are 1; built from a uint3. */
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
#endif
};

#ifndef __cplusplus
typedef struct uint3 uint3;
typedef struct int3 int3;
typedef struct float3 float3;
typedef struct int2 int2;
typedef struct uint2 uint2;
typedef struct float2 float2;
typedef struct int4 int4;
typedef struct uint4 uint4;
typedef struct float4 float4;
typedef struct double2 double2;
typedef struct dim3 dim3;
#endif

#endif
