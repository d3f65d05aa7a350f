/* SPDX-License-Identifier: GPL-2.0-or-later */
/* fake_nvml.so: a stand-in for libnvidia-ml.so.1 at the hardware boundary.
 *
 * TEST DOUBLE.  This machine (and CI) has no NVIDIA GPU, so the tests load
 * this library instead of NVML through DTRAIN_NVML_LIBRARY (dtrain-health's
 * "nvml_library" config key does the same).  It exports the NVML functions
 * that dtrain-health and libdtrain-topo call, with NVML's ABI (nvml.h, API
 * version 13: the same symbol names, argument types, struct layouts and
 * return codes), and answers from a text file named by FAKE_NVML_CONFIG,
 * read again at every nvmlInit_v2:
 *
 *   # comment
 *   init = 0                      NVML return code of nvmlInit_v2 (9: driver not loaded)
 *   hang = nvmlDeviceGetTotalEccErrors   this function never returns (tests the time bound)
 *   exit = nvmlInit_v2:0          this function ends the process with _exit(STATUS)
 *   fail = nvmlDeviceGetMemoryInfo:999   this per-GPU function answers that NVML return code
 *   count = 2                     number of GPUs
 *   all.KEY = VALUE               for every GPU (write these before gpuN lines)
 *   gpuN.KEY = VALUE              for GPU N (0-based)
 *
 * KEYs: busid ("0000:07:00.0"), name, uuid, device_id (PCI device id,
 * hex), lost (1: every call on it answers GPU_IS_LOST), ecc (0: not
 * supported), ecc_corrected, ecc_uncorrected (same for the volatile and
 * aggregate counters), remap (0: not supported, as before Ampere),
 * remap_corrected, remap_uncorrected, remap_pending, remap_failed, retired
 * (0: not supported), retired_sbe, retired_dbe, retired_pending,
 * memory_total, memory_used (bytes), processes ("PID:BYTES,PID:BYTES"),
 * xid ("79,48": XID events delivered once each after registration),
 * nvlinks (number of links), nvlink_down ("3,5": inactive links),
 * nvlink_version, nvlink_replay, nvlink_recovery, nvlink_crc (per link),
 * nvlinkK.remote (bus id at the other end of link K; a bus id that is
 * not one of the GPUs is taken for an NVSwitch port), nvlinkK.remote_vendor
 * (PCI vendor id at that end, hex, default 0x10de NVIDIA; 0x1014 is the
 * NVLink bridge of an IBM POWER CPU), fabric_state (nvmlGpuFabricState_t:
 * 0 not supported .. 3 completed; unset: nvmlDeviceGetGpuFabricInfoV
 * answers NOT_SUPPORTED, as before Hopper), fabric_cluster (the cluster
 * UUID, 32 hex digits, dashes allowed), fabric_clique (clique id),
 * fabric_status (NVML return code reported in the info), mig (MIG mode,
 * current = pending; unset: NOT_SUPPORTED, as before Ampere), mig_devices
 * (MIG instances in slots 0..K-1 of 7, UUID "MIG-0000000N-0000-5000-8000-
 * 00000000000K"; their handles answer nvmlDeviceGetUUID).
 *
 * Defaults: no GPU; each GPU "NVIDIA H100 80GB HBM3" at 0000:(0x10+N):00.0,
 * ECC and row remapping supported with zero counts, 80 GiB with 512 MiB
 * used, no processes, no NVLink, no XID.  Without FAKE_NVML_CONFIG,
 * nvmlInit_v2 answers "driver not loaded".  A malformed file makes
 * nvmlInit_v2 fail with NVML_ERROR_UNKNOWN after one line on stderr.
 *
 * NVML is a process-wide library, so this stand-in keeps process-wide
 * state too (one static struct), as the real one does. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FAKE_MAX_GPUS 64
#define FAKE_MAX_LINKS 36
#define FAKE_MAX_PROCS 64
#define FAKE_MAX_XIDS 16
#define FAKE_MIG_SLOTS 7 /* A100/H100: at most 7 GPU instances */

#include "dtrain_nvml.h"

/* One GPU: dtrain_nvml.h leaves the device handle's struct opaque; the fake
 * defines it. */
struct nvmlDevice_st {
    char busid[32], name[96], uuid[80];
    unsigned domain, bus, device, device_id;
    int lost;
    int ecc;
    unsigned long long ecc_corrected, ecc_uncorrected;
    int remap;
    unsigned remap_corrected, remap_uncorrected, remap_pending, remap_failed;
    int retired;
    unsigned retired_sbe, retired_dbe, retired_pending;
    unsigned long long memory_total, memory_used;
    int nprocs;
    struct { unsigned pid; unsigned long long used; } procs[FAKE_MAX_PROCS];
    int nxids, xid_next;
    unsigned long long xids[FAKE_MAX_XIDS];
    int nlinks;
    unsigned char link_down[FAKE_MAX_LINKS];
    unsigned link_version;
    unsigned long long link_replay, link_recovery, link_crc;
    char link_remote[FAKE_MAX_LINKS][32];
    unsigned link_remote_vendor[FAKE_MAX_LINKS]; /* 0: NVIDIA */
    int fabric_state; /* -1: the call answers NOT_SUPPORTED */
    unsigned char fabric_cluster[NVML_GPU_FABRIC_UUID_LEN];
    unsigned fabric_clique;
    int fabric_status;
    int mig; /* -1: nvmlDeviceGetMigMode answers NOT_SUPPORTED */
    int mig_devices;
};

struct nvmlEventSet_st {
    unsigned char registered[FAKE_MAX_GPUS];
};

static struct {
    int initialised;
    char hang[96];
    char exit_fn[96];   /* function that calls _exit(exit_status) */
    int exit_status;
    char fail[96];      /* function that answers fail_rc */
    nvmlReturn_t fail_rc;
    int count;
    struct nvmlDevice_st gpus[FAKE_MAX_GPUS];
    int nmigs;
    struct nvmlDevice_st migs[FAKE_MAX_GPUS]; /* MIG instance handles */
} fake;

/* ------------------------------------------------------------ the file */
static int parse_busid(const char *text, struct nvmlDevice_st *g)
{
    unsigned d, b, dev, fn;
    if (sscanf(text, "%x:%x:%x.%x", &d, &b, &dev, &fn) != 4)
        return -1;
    g->domain = d;
    g->bus = b;
    g->device = dev;
    snprintf(g->busid, sizeof(g->busid), "%08X:%02X:%02X.0", d, b, dev);
    return 0;
}

static void gpu_defaults(struct nvmlDevice_st *g, int i)
{
    memset(g, 0, sizeof(*g));
    char busid[32];
    snprintf(busid, sizeof(busid), "0000:%02x:00.0", 0x10 + i);
    parse_busid(busid, g);
    snprintf(g->name, sizeof(g->name), "NVIDIA H100 80GB HBM3");
    snprintf(g->uuid, sizeof(g->uuid), "GPU-00000000-0000-0000-0000-%012d", i);
    g->device_id = 0x2330;
    g->ecc = 1;
    g->remap = 1;
    g->retired = 1;
    g->memory_total = 80ULL << 30;
    g->memory_used = 512ULL << 20;
    g->link_version = 4;
    g->fabric_state = -1;
    g->mig = -1;
}

/* A UUID as 32 hex digits (dashes skipped) into 16 bytes. */
static int parse_uuid(const char *text, unsigned char *out)
{
    int n = 0;
    for (const char *p = text; *p; p++) {
        if (*p == '-')
            continue;
        unsigned v;
        char digit[2] = {*p, 0};
        if (n >= 2 * NVML_GPU_FABRIC_UUID_LEN || sscanf(digit, "%1x", &v) != 1)
            return -1;
        out[n / 2] = (unsigned char)(n % 2 ? (out[n / 2] | v) : v << 4);
        n++;
    }
    return n == 2 * NVML_GPU_FABRIC_UUID_LEN ? 0 : -1;
}

static int parse_ull(const char *text, unsigned long long *out)
{
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 0);
    if (errno || end == text || *end)
        return -1;
    *out = v;
    return 0;
}

static int parse_uint(const char *text, unsigned *out)
{
    unsigned long long v;
    if (parse_ull(text, &v) != 0 || v > 0xffffffffULL)
        return -1;
    *out = (unsigned)v;
    return 0;
}

static int parse_int(const char *text, int *out)
{
    unsigned v;
    if (parse_uint(text, &v) != 0 || v > 0x7fffffff)
        return -1;
    *out = (int)v;
    return 0;
}

/* "a,b,c" of numbers into out[], at most max. */
static int parse_list(const char *text, unsigned long long *out, int max, int *n)
{
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", text);
    *n = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (*n >= max || parse_ull(tok, &out[*n]) != 0)
            return -1;
        (*n)++;
    }
    return 0;
}

static int set_gpu_key(struct nvmlDevice_st *g, const char *key, const char *value)
{
    unsigned long long list[FAKE_MAX_LINKS];
    int n, link;
    char rest[64];
    if (!strcmp(key, "busid")) return parse_busid(value, g);
    if (!strcmp(key, "name")) { snprintf(g->name, sizeof(g->name), "%s", value); return 0; }
    if (!strcmp(key, "uuid")) { snprintf(g->uuid, sizeof(g->uuid), "%s", value); return 0; }
    if (!strcmp(key, "device_id")) return parse_uint(value, &g->device_id);
    if (!strcmp(key, "lost")) return parse_int(value, &g->lost);
    if (!strcmp(key, "ecc")) return parse_int(value, &g->ecc);
    if (!strcmp(key, "ecc_corrected")) return parse_ull(value, &g->ecc_corrected);
    if (!strcmp(key, "ecc_uncorrected")) return parse_ull(value, &g->ecc_uncorrected);
    if (!strcmp(key, "remap")) return parse_int(value, &g->remap);
    if (!strcmp(key, "remap_corrected")) return parse_uint(value, &g->remap_corrected);
    if (!strcmp(key, "remap_uncorrected")) return parse_uint(value, &g->remap_uncorrected);
    if (!strcmp(key, "remap_pending")) return parse_uint(value, &g->remap_pending);
    if (!strcmp(key, "remap_failed")) return parse_uint(value, &g->remap_failed);
    if (!strcmp(key, "retired")) return parse_int(value, &g->retired);
    if (!strcmp(key, "retired_sbe")) return parse_uint(value, &g->retired_sbe);
    if (!strcmp(key, "retired_dbe")) return parse_uint(value, &g->retired_dbe);
    if (!strcmp(key, "retired_pending")) return parse_uint(value, &g->retired_pending);
    if (!strcmp(key, "memory_total")) return parse_ull(value, &g->memory_total);
    if (!strcmp(key, "memory_used")) return parse_ull(value, &g->memory_used);
    if (!strcmp(key, "nvlinks")) return parse_int(value, &g->nlinks) || g->nlinks > FAKE_MAX_LINKS ? -1 : 0;
    if (!strcmp(key, "nvlink_version")) return parse_uint(value, &g->link_version);
    if (!strcmp(key, "nvlink_replay")) return parse_ull(value, &g->link_replay);
    if (!strcmp(key, "nvlink_recovery")) return parse_ull(value, &g->link_recovery);
    if (!strcmp(key, "nvlink_crc")) return parse_ull(value, &g->link_crc);
    if (!strcmp(key, "fabric_state")) return parse_int(value, &g->fabric_state) || g->fabric_state > 255 ? -1 : 0;
    if (!strcmp(key, "fabric_cluster")) return parse_uuid(value, g->fabric_cluster);
    if (!strcmp(key, "fabric_clique")) return parse_uint(value, &g->fabric_clique);
    if (!strcmp(key, "fabric_status")) return parse_int(value, &g->fabric_status);
    if (!strcmp(key, "mig")) return parse_int(value, &g->mig);
    if (!strcmp(key, "mig_devices"))
        return parse_int(value, &g->mig_devices) || g->mig_devices < 0 || g->mig_devices > FAKE_MIG_SLOTS ? -1 : 0;
    if (!strcmp(key, "xid")) {
        if (parse_list(value, g->xids, FAKE_MAX_XIDS, &g->nxids) != 0)
            return -1;
        return 0;
    }
    if (!strcmp(key, "nvlink_down")) {
        if (parse_list(value, list, FAKE_MAX_LINKS, &n) != 0)
            return -1;
        memset(g->link_down, 0, sizeof(g->link_down));
        for (int i = 0; i < n; i++) {
            if (list[i] >= FAKE_MAX_LINKS)
                return -1;
            g->link_down[list[i]] = 1;
        }
        return 0;
    }
    if (!strcmp(key, "processes")) {
        char buf[1024];
        snprintf(buf, sizeof(buf), "%s", value);
        g->nprocs = 0;
        for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            char *colon = strchr(tok, ':');
            if (!colon || g->nprocs >= FAKE_MAX_PROCS)
                return -1;
            *colon = '\0';
            if (parse_uint(tok, &g->procs[g->nprocs].pid) != 0 || parse_ull(colon + 1, &g->procs[g->nprocs].used) != 0)
                return -1;
            g->nprocs++;
        }
        return 0;
    }
    if (sscanf(key, "nvlink%d.%63s", &link, rest) == 2 && link >= 0 && link < FAKE_MAX_LINKS) {
        if (!strcmp(rest, "remote")) {
            snprintf(g->link_remote[link], sizeof(g->link_remote[link]), "%s", value);
            return 0;
        }
        if (!strcmp(rest, "remote_vendor"))
            return parse_uint(value, &g->link_remote_vendor[link]) || g->link_remote_vendor[link] > 0xffff ? -1 : 0;
    }
    return -1;
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r'))
        s[--n] = '\0';
    return s;
}

/* Read the file; returns the nvmlInit_v2 answer. */
static nvmlReturn_t load_config(void)
{
    const char *path = getenv("FAKE_NVML_CONFIG");
    char line[1024];
    int lineno = 0;
    nvmlReturn_t init_rc = NVML_SUCCESS;

    memset(&fake, 0, sizeof(fake));
    for (int i = 0; i < FAKE_MAX_GPUS; i++)
        gpu_defaults(&fake.gpus[i], i);
    if (!path || !path[0])
        return NVML_ERROR_DRIVER_NOT_LOADED;
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "fake_nvml: cannot read FAKE_NVML_CONFIG %s: %s\n", path, strerror(errno));
        return NVML_ERROR_UNKNOWN;
    }
    while (fgets(line, sizeof(line), f)) {
        lineno++;
        char *s = trim(line);
        if (!*s || *s == '#')
            continue;
        char *eq = strchr(s, '=');
        int bad = !eq;
        if (eq) {
            *eq = '\0';
            char *key = trim(s), *value = trim(eq + 1);
            int idx;
            char sub[64];
            if (!strcmp(key, "init"))
                bad = parse_int(value, &init_rc);
            else if (!strcmp(key, "exit")) {
                char *colon = strrchr(value, ':');
                bad = !colon || parse_int(colon + 1, &fake.exit_status) != 0;
                if (!bad)
                    snprintf(fake.exit_fn, sizeof(fake.exit_fn), "%.*s", (int)(colon - value), value);
            } else if (!strcmp(key, "hang"))
                snprintf(fake.hang, sizeof(fake.hang), "%s", value);
            else if (!strcmp(key, "fail")) {
                char *colon = strrchr(value, ':');
                bad = !colon || parse_int(colon + 1, &fake.fail_rc) != 0;
                if (!bad)
                    snprintf(fake.fail, sizeof(fake.fail), "%.*s", (int)(colon - value), value);
            }
            else if (!strcmp(key, "count"))
                bad = parse_int(value, &fake.count) || fake.count > FAKE_MAX_GPUS;
            else if (!strncmp(key, "all.", 4)) {
                for (int i = 0; i < FAKE_MAX_GPUS && !bad; i++)
                    bad = set_gpu_key(&fake.gpus[i], key + 4, value) != 0;
            } else if (sscanf(key, "gpu%d.%63s", &idx, sub) == 2 && idx >= 0 && idx < FAKE_MAX_GPUS)
                bad = set_gpu_key(&fake.gpus[idx], sub, value) != 0;
            else
                bad = 1;
        }
        if (bad) {
            fprintf(stderr, "fake_nvml: %s:%d: cannot use '%s'\n", path, lineno, s);
            fclose(f);
            return NVML_ERROR_UNKNOWN;
        }
    }
    fclose(f);
    return init_rc;
}

/* ------------------------------------------------------------ helpers */
static void maybe_hang(const char *fn)
{
    if (fake.exit_fn[0] && strcmp(fake.exit_fn, fn) == 0)
        _exit(fake.exit_status);
    if (fake.hang[0] && strcmp(fake.hang, fn) == 0)
        for (;;)
            pause();
}

/* Common entry of per-device calls: hang, initialised, valid, not lost,
 * not told to fail. */
static nvmlReturn_t device_call(const char *fn, nvmlDevice_t dev)
{
    maybe_hang(fn);
    if (!fake.initialised)
        return NVML_ERROR_UNINITIALIZED;
    if (!dev || ((dev < fake.gpus || dev >= fake.gpus + fake.count) && (dev < fake.migs || dev >= fake.migs + fake.nmigs)))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (dev->lost)
        return NVML_ERROR_GPU_IS_LOST;
    return fake.fail[0] && strcmp(fake.fail, fn) == 0 ? fake.fail_rc : NVML_SUCCESS;
}

static void fill_pci(const struct nvmlDevice_st *g, unsigned vendor_id, nvmlPciInfo_t *pci)
{
    memset(pci, 0, sizeof(*pci));
    pci->domain = g->domain;
    pci->bus = g->bus;
    pci->device = g->device;
    pci->pciDeviceId = (g->device_id << 16) | vendor_id;
    snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.0", g->domain, g->bus, g->device);
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.0", g->domain & 0xffff, g->bus, g->device);
}

/* ------------------------------------------------------------ NVML API */
nvmlReturn_t nvmlInit_v2(void)
{
    nvmlReturn_t rc = load_config();
    maybe_hang("nvmlInit_v2");
    fake.initialised = rc == NVML_SUCCESS;
    return rc;
}

nvmlReturn_t nvmlShutdown(void)
{
    maybe_hang("nvmlShutdown");
    if (!fake.initialised)
        return NVML_ERROR_UNINITIALIZED;
    fake.initialised = 0;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t rc)
{
    switch (rc) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
    maybe_hang("nvmlDeviceGetCount_v2");
    if (!fake.initialised)
        return NVML_ERROR_UNINITIALIZED;
    *count = (unsigned int)fake.count;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *dev)
{
    maybe_hang("nvmlDeviceGetHandleByIndex_v2");
    if (!fake.initialised)
        return NVML_ERROR_UNINITIALIZED;
    if (index >= (unsigned int)fake.count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *dev = &fake.gpus[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t dev, nvmlPciInfo_t *pci)
{
    nvmlReturn_t rc = device_call("nvmlDeviceGetPciInfo_v3", dev);
    if (rc == NVML_SUCCESS)
        fill_pci(dev, 0x10de, pci);
    return rc;
}

/* Copy a device's text answer the way NVML does: refused when it does not fit. */
static nvmlReturn_t copy_text(const char *text, char *out, unsigned int length)
{
    if (strlen(text) >= length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    snprintf(out, length, "%s", text);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t dev, char *name, unsigned int length)
{
    nvmlReturn_t rc = device_call("nvmlDeviceGetName", dev);
    return rc == NVML_SUCCESS ? copy_text(dev->name, name, length) : rc;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t dev, char *uuid, unsigned int length)
{
    nvmlReturn_t rc = device_call("nvmlDeviceGetUUID", dev);
    return rc == NVML_SUCCESS ? copy_text(dev->uuid, uuid, length) : rc;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t dev, int error_type, int counter_type,
                                         unsigned long long *count)
{
    nvmlReturn_t rc = device_call("nvmlDeviceGetTotalEccErrors", dev);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!dev->ecc)
        return NVML_ERROR_NOT_SUPPORTED;
    if ((error_type != NVML_MEMORY_ERROR_TYPE_CORRECTED && error_type != NVML_MEMORY_ERROR_TYPE_UNCORRECTED) ||
        (counter_type != NVML_VOLATILE_ECC && counter_type != NVML_AGGREGATE_ECC) || !count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = error_type == NVML_MEMORY_ERROR_TYPE_UNCORRECTED ? dev->ecc_uncorrected : dev->ecc_corrected;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t dev, unsigned int *corr, unsigned int *unc,
                                       unsigned int *pending, unsigned int *failed)
{
    nvmlReturn_t rc = device_call("nvmlDeviceGetRemappedRows", dev);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!dev->remap)
        return NVML_ERROR_NOT_SUPPORTED;
    *corr = dev->remap_corrected;
    *unc = dev->remap_uncorrected;
    *pending = dev->remap_pending;
    *failed = dev->remap_failed;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t dev, int cause, unsigned int *count,
                                       unsigned long long *addresses)
{
    nvmlReturn_t rc = device_call("nvmlDeviceGetRetiredPages", dev);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!dev->retired)
        return NVML_ERROR_NOT_SUPPORTED;
    if ((cause != NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS &&
         cause != NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR) || !count || (*count && !addresses))
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int have = cause == NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR ? dev->retired_dbe : dev->retired_sbe;
    unsigned int room = *count;
    *count = have;
    if (room < have)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    for (unsigned int i = 0; i < have; i++)
        addresses[i] = 0x1000ULL * (i + 1);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t dev, int *pending)
{
    nvmlReturn_t rc = device_call("nvmlDeviceGetRetiredPagesPendingStatus", dev);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!dev->retired)
        return NVML_ERROR_NOT_SUPPORTED;
    *pending = dev->retired_pending ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *mem)
{
    nvmlReturn_t rc = device_call("nvmlDeviceGetMemoryInfo", dev);
    if (rc != NVML_SUCCESS)
        return rc;
    mem->total = dev->memory_total;
    mem->used = dev->memory_used;
    mem->free = dev->memory_total > dev->memory_used ? dev->memory_total - dev->memory_used : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t dev, unsigned int *count,
                                                     nvmlProcessInfo_t *infos)
{
    nvmlReturn_t rc = device_call("nvmlDeviceGetComputeRunningProcesses_v3", dev);
    if (rc != NVML_SUCCESS)
        return rc;
    unsigned int room = *count;
    *count = (unsigned int)dev->nprocs;
    if (room < (unsigned int)dev->nprocs)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    for (int i = 0; i < dev->nprocs; i++) {
        infos[i].pid = dev->procs[i].pid;
        infos[i].usedGpuMemory = dev->procs[i].used;
        infos[i].gpuInstanceId = 0xFFFFFFFFu;
        infos[i].computeInstanceId = 0xFFFFFFFFu;
    }
    return NVML_SUCCESS;
}

static nvmlReturn_t link_call(const char *fn, nvmlDevice_t dev, unsigned int link)
{
    nvmlReturn_t rc = device_call(fn, dev);
    if (rc != NVML_SUCCESS)
        return rc;
    return link < (unsigned int)dev->nlinks ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t dev, unsigned int link, int *active)
{
    nvmlReturn_t rc = link_call("nvmlDeviceGetNvLinkState", dev, link);
    if (rc == NVML_SUCCESS)
        *active = dev->link_down[link] ? NVML_FEATURE_DISABLED : NVML_FEATURE_ENABLED;
    return rc;
}

nvmlReturn_t nvmlDeviceGetNvLinkVersion(nvmlDevice_t dev, unsigned int link, unsigned int *version)
{
    nvmlReturn_t rc = link_call("nvmlDeviceGetNvLinkVersion", dev, link);
    if (rc == NVML_SUCCESS)
        *version = dev->link_version;
    return rc;
}

nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t dev, unsigned int link, int counter,
                                             unsigned long long *value)
{
    nvmlReturn_t rc = link_call("nvmlDeviceGetNvLinkErrorCounter", dev, link);
    if (rc != NVML_SUCCESS)
        return rc;
    switch (counter) {
    case NVML_NVLINK_ERROR_DL_REPLAY: *value = dev->link_replay; return NVML_SUCCESS;
    case NVML_NVLINK_ERROR_DL_RECOVERY: *value = dev->link_recovery; return NVML_SUCCESS;
    case NVML_NVLINK_ERROR_DL_CRC_FLIT: *value = dev->link_crc; return NVML_SUCCESS; /* all CRC errors here */
    case NVML_NVLINK_ERROR_DL_CRC_DATA: *value = 0; return NVML_SUCCESS;
    case 4: *value = 0; return NVML_SUCCESS; /* NVML_NVLINK_ERROR_DL_ECC_DATA */
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t dev, unsigned int link, nvmlPciInfo_t *pci)
{
    nvmlReturn_t rc = link_call("nvmlDeviceGetNvLinkRemotePciInfo_v2", dev, link);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!dev->link_remote[link][0])
        return NVML_ERROR_NOT_SUPPORTED;
    struct nvmlDevice_st remote;
    memset(&remote, 0, sizeof(remote));
    if (parse_busid(dev->link_remote[link], &remote) != 0)
        return NVML_ERROR_UNKNOWN;
    remote.device_id = 0x22a3; /* NVSwitch, unless it is one of the GPUs */
    for (int i = 0; i < fake.count; i++)
        if (!strcmp(fake.gpus[i].busid, remote.busid))
            remote.device_id = fake.gpus[i].device_id;
    fill_pci(&remote, dev->link_remote_vendor[link] ? dev->link_remote_vendor[link] : 0x10de, pci);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t dev, nvmlGpuFabricInfo_v2_t *info)
{
    nvmlReturn_t rc = device_call("nvmlDeviceGetGpuFabricInfoV", dev);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!info)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (info->version != nvmlGpuFabricInfo_v2)
        return 25; /* NVML_ERROR_ARGUMENT_VERSION_MISMATCH */
    if (dev->fabric_state < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    memcpy(info->clusterUuid, dev->fabric_cluster, sizeof(info->clusterUuid));
    info->status = dev->fabric_status;
    info->cliqueId = dev->fabric_clique;
    info->state = (unsigned char)dev->fabric_state;
    info->healthMask = 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t dev, unsigned int *current, unsigned int *pending)
{
    nvmlReturn_t rc = device_call("nvmlDeviceGetMigMode", dev);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!current || !pending)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (dev->mig < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *current = *pending = (unsigned int)dev->mig;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t dev, unsigned int *count)
{
    nvmlReturn_t rc = device_call("nvmlDeviceGetMaxMigDeviceCount", dev);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (dev->mig < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *count = FAKE_MIG_SLOTS;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t dev, unsigned int index, nvmlDevice_t *mig)
{
    nvmlReturn_t rc = device_call("nvmlDeviceGetMigDeviceHandleByIndex", dev);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!mig || index >= FAKE_MIG_SLOTS || dev < fake.gpus || dev >= fake.gpus + fake.count)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (dev->mig != 1 || (int)index >= dev->mig_devices)
        return NVML_ERROR_NOT_FOUND;
    /* One handle per instance, made on first use, kept for the process. */
    int gpu = (int)(dev - fake.gpus);
    for (int i = 0; i < fake.nmigs; i++)
        if (fake.migs[i].device == (unsigned)gpu && fake.migs[i].bus == index) {
            *mig = &fake.migs[i];
            return NVML_SUCCESS;
        }
    if (fake.nmigs == FAKE_MAX_GPUS)
        return NVML_ERROR_UNKNOWN;
    struct nvmlDevice_st *m = &fake.migs[fake.nmigs++];
    memset(m, 0, sizeof(*m));
    m->device = (unsigned)gpu; /* the parent and slot, for the lookup above */
    m->bus = index;
    m->mig = -1;
    m->fabric_state = -1;
    snprintf(m->name, sizeof(m->name), "%.80s MIG", dev->name);
    snprintf(m->uuid, sizeof(m->uuid), "MIG-%08d-0000-5000-8000-%012u", gpu, index);
    *mig = m;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    maybe_hang("nvmlEventSetCreate");
    if (!fake.initialised)
        return NVML_ERROR_UNINITIALIZED;
    *set = calloc(1, sizeof(**set));
    return *set ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t dev, unsigned long long types, nvmlEventSet_t set)
{
    nvmlReturn_t rc = device_call("nvmlDeviceRegisterEvents", dev);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!set)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (types & nvmlEventTypeXidCriticalError) /* nvmlEventTypeXidCriticalError */
        set->registered[dev - fake.gpus] = 1;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    maybe_hang("nvmlEventSetWait_v2");
    if (!fake.initialised)
        return NVML_ERROR_UNINITIALIZED;
    if (!set || !data)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < fake.count; i++) {
        struct nvmlDevice_st *g = &fake.gpus[i];
        if (set->registered[i] && g->xid_next < g->nxids) {
            memset(data, 0, sizeof(*data));
            data->device = g;
            data->eventType = nvmlEventTypeXidCriticalError;
            data->eventData = g->xids[g->xid_next++];
            data->gpuInstanceId = data->computeInstanceId = 0xFFFFFFFFu;
            return NVML_SUCCESS;
        }
    }
    /* Nothing pending: wait as NVML does, then say so. */
    struct timespec ts = {.tv_sec = timeoutms / 1000, .tv_nsec = (long)(timeoutms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
    return NVML_ERROR_TIMEOUT;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    maybe_hang("nvmlEventSetFree");
    free(set);
    return NVML_SUCCESS;
}
