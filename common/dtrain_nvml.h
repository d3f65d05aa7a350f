/* SPDX-License-Identifier: GPL-2.0-or-later */
/* NVML loaded at run time: the subset of NVML's ABI that dtrain uses, and
 * one loader for libdtrain-topo (NVLink) and dtrain-health (GPU health).
 *
 * dtrain neither builds against the NVIDIA driver's nvml.h nor links
 * libnvidia-ml: dtrain_nvml_open() opens the library with dlopen() and finds
 * the functions with dlsym(), so a node without the driver runs dtrain too.
 * Names, argument types, struct layouts and return codes below are nvml.h's
 * (API version 13, CUDA 13); enums are passed as int, which is their size
 * there.  Handles are pointers to opaque structs, as in nvml.h (only the
 * tests' fake library, tests/health/fake_nvml.c, defines them).
 *
 * No global state: each caller owns its struct dtrain_nvml (the SPANK plugin
 * runs this code inside slurmstepd).  NVML itself is process-wide. */
#ifndef DTRAIN_NVML_H
#define DTRAIN_NVML_H

#include <stddef.h>

/* ------------------------------------------------------------ ABI (nvml.h) */
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
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_UNKNOWN = 999,
};

/* Links per GPU that NVML numbers (0..N-1): 36 in API 13 (18 in API 12
 * headers; Hopper and Blackwell boards use 18, NVML allows for more). */
#define NVML_NVLINK_MAX_LINKS 36

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

/* GPU fabric (multi-node NVLink: GB200 NVL36/NVL72 and later).  GPUs whose
 * fabric registration is complete and that share clusterUuid and cliqueId
 * are in one NVLink domain, across nodes. */
#define NVML_GPU_FABRIC_UUID_LEN 16
enum { NVML_GPU_FABRIC_STATE_NOT_SUPPORTED = 0, NVML_GPU_FABRIC_STATE_NOT_STARTED = 1,
       NVML_GPU_FABRIC_STATE_IN_PROGRESS = 2, NVML_GPU_FABRIC_STATE_COMPLETED = 3 };
typedef struct {                  /* nvmlGpuFabricInfo_v2_t (nvmlGpuFabricInfoV_t of API 12) */
    unsigned int version;         /* nvmlGpuFabricInfo_v2 below */
    unsigned char clusterUuid[NVML_GPU_FABRIC_UUID_LEN];
    nvmlReturn_t status;          /* meaningful only when state is COMPLETED */
    unsigned int cliqueId;
    unsigned char state;          /* nvmlGpuFabricState_t */
    unsigned int healthMask;
} nvmlGpuFabricInfo_v2_t;
/* NVML_STRUCT_VERSION(GpuFabricInfo, 2): sizeof | 2 << 24 */
#define nvmlGpuFabricInfo_v2 ((unsigned int)(sizeof(nvmlGpuFabricInfo_v2_t) | (2u << 24)))

/* ------------------------------------------------------------ the loader */
/* The functions, found with dlsym() under their NVML names.  The first five
 * are always there after a successful dtrain_nvml_open(); any other may be
 * NULL (an older driver), and callers decide whether they need it. */
struct dtrain_nvml {
    void *dl;
    nvmlReturn_t (*nvmlInit_v2)(void);
    nvmlReturn_t (*nvmlShutdown)(void);
    nvmlReturn_t (*nvmlDeviceGetCount_v2)(unsigned int *);
    nvmlReturn_t (*nvmlDeviceGetHandleByIndex_v2)(unsigned int, nvmlDevice_t *);
    nvmlReturn_t (*nvmlDeviceGetPciInfo_v3)(nvmlDevice_t, nvmlPciInfo_t *);
    /* optional */
    const char *(*nvmlErrorString)(nvmlReturn_t);
    nvmlReturn_t (*nvmlDeviceGetName)(nvmlDevice_t, char *, unsigned int);
    nvmlReturn_t (*nvmlDeviceGetUUID)(nvmlDevice_t, char *, unsigned int);
    nvmlReturn_t (*nvmlDeviceGetTotalEccErrors)(nvmlDevice_t, int, int, unsigned long long *);
    nvmlReturn_t (*nvmlDeviceGetRemappedRows)(nvmlDevice_t, unsigned int *, unsigned int *,
                                              unsigned int *, unsigned int *);
    nvmlReturn_t (*nvmlDeviceGetRetiredPages)(nvmlDevice_t, int, unsigned int *, unsigned long long *);
    nvmlReturn_t (*nvmlDeviceGetRetiredPagesPendingStatus)(nvmlDevice_t, int *);
    nvmlReturn_t (*nvmlDeviceGetMemoryInfo)(nvmlDevice_t, nvmlMemory_t *);
    nvmlReturn_t (*nvmlDeviceGetComputeRunningProcesses_v3)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *);
    nvmlReturn_t (*nvmlDeviceGetNvLinkState)(nvmlDevice_t, unsigned int, int *);
    nvmlReturn_t (*nvmlDeviceGetNvLinkVersion)(nvmlDevice_t, unsigned int, unsigned int *);
    nvmlReturn_t (*nvmlDeviceGetNvLinkRemotePciInfo_v2)(nvmlDevice_t, unsigned int, nvmlPciInfo_t *);
    nvmlReturn_t (*nvmlDeviceGetGpuFabricInfoV)(nvmlDevice_t, nvmlGpuFabricInfo_v2_t *);
    nvmlReturn_t (*nvmlDeviceGetMigMode)(nvmlDevice_t, unsigned int *, unsigned int *); /* current, pending */
    /* MIG instances of a GPU in MIG mode (Ampere on): slots 0..max-1, an
     * empty slot answers NVML_ERROR_NOT_FOUND; nvmlDeviceGetUUID on the
     * instance's handle gives its "MIG-<uuid>" (what CUDA_VISIBLE_DEVICES
     * takes). */
    nvmlReturn_t (*nvmlDeviceGetMaxMigDeviceCount)(nvmlDevice_t, unsigned int *);
    nvmlReturn_t (*nvmlDeviceGetMigDeviceHandleByIndex)(nvmlDevice_t, unsigned int, nvmlDevice_t *);
    nvmlReturn_t (*nvmlDeviceGetNvLinkErrorCounter)(nvmlDevice_t, unsigned int, int, unsigned long long *);
    nvmlReturn_t (*nvmlEventSetCreate)(nvmlEventSet_t *);
    nvmlReturn_t (*nvmlDeviceRegisterEvents)(nvmlDevice_t, unsigned long long, nvmlEventSet_t);
    nvmlReturn_t (*nvmlEventSetWait_v2)(nvmlEventSet_t, nvmlEventData_t *, unsigned int);
    nvmlReturn_t (*nvmlEventSetFree)(nvmlEventSet_t);
};

enum dtrain_nvml_status {
    DTRAIN_NVML_OK = 0,
    DTRAIN_NVML_ABSENT = -1,  /* dlopen() failed: no driver on this node (or a wrong path) */
    DTRAIN_NVML_TOO_OLD = -2, /* the library lacks nvmlInit_v2 or another of the first five */
};

/* The library to open: `configured` when neither NULL nor "", else
 * $DTRAIN_NVML_LIBRARY from the process environment (slurmd's for the
 * plugin, never the job's; the tests name a fake NVML with it) when set and
 * not "", else "libnvidia-ml.so.1".  Returns one of those strings. */
const char *dtrain_nvml_library(const char *configured);

/* dlopen() `library` and find the functions.  Returns DTRAIN_NVML_OK, or a
 * negative enum dtrain_nvml_status with one line in err (nvml is then
 * closed).  Does not call nvmlInit_v2. */
int dtrain_nvml_open(struct dtrain_nvml *nvml, const char *library, char *err, size_t errlen);

/* dlclose(); safe on a closed or failed-to-open struct. */
void dtrain_nvml_close(struct dtrain_nvml *nvml);

/* NVML's text for a return code (nvmlErrorString), or "NVML error". */
const char *dtrain_nvml_error_string(const struct dtrain_nvml *nvml, nvmlReturn_t rc);

#endif
