/* SPDX-License-Identifier: GPL-2.0-or-later */
/* NVML loaded at run time; see dtrain_nvml.h. */
#include "dtrain_nvml.h"

_Static_assert(sizeof(nvmlGpuFabricInfo_v2_t) == 0x24, "nvmlGpuFabricInfo_v2_t has nvml.h's layout (version 0x02000024)");

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain_parse.h"

const char *dtrain_nvml_library(const char *configured)
{
    const char *env = getenv("DTRAIN_NVML_LIBRARY");
    if (configured && configured[0])
        return configured;
    if (env && env[0])
        return env;
    return "libnvidia-ml.so.1";
}

int dtrain_nvml_open(struct dtrain_nvml *nvml, const char *library, char *err, size_t errlen)
{
    memset(nvml, 0, sizeof(*nvml));
    nvml->dl = dlopen(library, RTLD_NOW | RTLD_LOCAL);
    if (!nvml->dl) {
        const char *why = dlerror();
        dtrain_snprintf(err, errlen, "cannot load NVML: %s", why ? why : library);
        return DTRAIN_NVML_ABSENT;
    }
#define SYM(name) (*(void **)(&nvml->name) = dlsym(nvml->dl, #name))
    SYM(nvmlInit_v2);
    SYM(nvmlShutdown);
    SYM(nvmlDeviceGetCount_v2);
    SYM(nvmlDeviceGetHandleByIndex_v2);
    SYM(nvmlDeviceGetPciInfo_v3);
    SYM(nvmlErrorString);
    SYM(nvmlDeviceGetName);
    SYM(nvmlDeviceGetUUID);
    SYM(nvmlDeviceGetTotalEccErrors);
    SYM(nvmlDeviceGetRemappedRows);
    SYM(nvmlDeviceGetRetiredPages);
    SYM(nvmlDeviceGetRetiredPagesPendingStatus);
    SYM(nvmlDeviceGetMemoryInfo);
    SYM(nvmlDeviceGetComputeRunningProcesses_v3);
    SYM(nvmlDeviceGetNvLinkState);
    SYM(nvmlDeviceGetNvLinkVersion);
    SYM(nvmlDeviceGetNvLinkRemotePciInfo_v2);
    SYM(nvmlDeviceGetGpuFabricInfoV);
    SYM(nvmlDeviceGetMigMode);
    SYM(nvmlDeviceGetMaxMigDeviceCount);
    SYM(nvmlDeviceGetMigDeviceHandleByIndex);
    SYM(nvmlDeviceGetNvLinkErrorCounter);
    SYM(nvmlEventSetCreate);
    SYM(nvmlDeviceRegisterEvents);
    SYM(nvmlEventSetWait_v2);
    SYM(nvmlEventSetFree);
#undef SYM
    if (!nvml->nvmlInit_v2 || !nvml->nvmlShutdown || !nvml->nvmlDeviceGetCount_v2 ||
        !nvml->nvmlDeviceGetHandleByIndex_v2 || !nvml->nvmlDeviceGetPciInfo_v3) {
        dtrain_snprintf(err, errlen, "%s lacks nvmlInit_v2 or another basic NVML function (driver too old?)", library);
        dtrain_nvml_close(nvml);
        return DTRAIN_NVML_TOO_OLD;
    }
    return DTRAIN_NVML_OK;
}

void dtrain_nvml_close(struct dtrain_nvml *nvml)
{
    if (nvml->dl)
        dlclose(nvml->dl);
    memset(nvml, 0, sizeof(*nvml));
}

const char *dtrain_nvml_error_string(const struct dtrain_nvml *nvml, nvmlReturn_t rc)
{
    const char *s = nvml->nvmlErrorString ? nvml->nvmlErrorString(rc) : NULL;
    return s ? s : "NVML error";
}
