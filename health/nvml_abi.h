/* The subset of NVML's ABI that dtrain-health uses (nvml.h, API version 13).
 *
 * dtrain does not build against the NVIDIA driver's header: the loader
 * (nvml.c) declares these and finds the functions with dlsym(), and the
 * tests' fake library (tests/health/fake_nvml.c) defines functions of the
 * same names and types.  Names, argument types, struct layouts and return
 * codes are nvml.h's; enums are passed as int, which is their size there.
 * Handles are pointers to opaque structs, as in nvml.h (only the fake
 * defines them). */
#ifndef DTRAIN_HEALTH_NVML_ABI_H
#define DTRAIN_HEALTH_NVML_ABI_H

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct nvmlEventSet_st *nvmlEventSet_t;

/* Return codes (nvmlReturn_enum). */
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_UNKNOWN = 999,
};

/* nvmlMemoryErrorType_t, nvmlEccCounterType_t */
enum { NVML_MEMORY_ERROR_TYPE_CORRECTED = 0, NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1 };
enum { NVML_VOLATILE_ECC = 0, NVML_AGGREGATE_ECC = 1 };
/* nvmlPageRetirementCause_t */
enum { NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0, NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1 };
/* nvmlNvLinkErrorCounter_t */
enum { NVML_NVLINK_ERROR_DL_REPLAY = 0, NVML_NVLINK_ERROR_DL_RECOVERY = 1,
       NVML_NVLINK_ERROR_DL_CRC_FLIT = 2, NVML_NVLINK_ERROR_DL_CRC_DATA = 3 };
/* nvmlEnableState_t */
enum { NVML_FEATURE_DISABLED = 0, NVML_FEATURE_ENABLED = 1 };
#define nvmlEventTypeXidCriticalError 0x0000000000000008ULL

typedef struct {                  /* nvmlPciInfo_t, as filled by nvmlDeviceGetPciInfo_v3 */
    char busIdLegacy[16];
    unsigned int domain, bus, device;
    unsigned int pciDeviceId;     /* device id << 16 | vendor id */
    unsigned int pciSubSystemId;
    char busId[32];               /* "00000000:07:00.0" */
} nvmlPciInfo_t;

typedef struct {                  /* nvmlMemory_t (v1) */
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {                  /* nvmlProcessInfo_t (v2 layout, filled by the _v3 calls) */
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

typedef struct {                  /* nvmlEventData_t */
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData; /* the XID for nvmlEventTypeXidCriticalError */
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;

#endif
