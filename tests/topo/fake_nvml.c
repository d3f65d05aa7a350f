/* A fake NVML library for the topo tests: a hardware-boundary stand-in for
 * libnvidia-ml.so.1 on machines without NVIDIA GPUs.  libdtrain-topo opens
 * it through DTRAIN_NVML_LIBRARY (or an explicit path) exactly as it opens
 * the real one, and calls only the functions defined here.
 *
 * The fake machine is described by environment variables:
 *   FAKE_NVML_GPUS     space-separated PCI bus ids, "0000:18:00.0 ..."
 *   FAKE_NVML_LINKS    GPU pairs and link counts, "0-1:2 2-3:2"
 *   FAKE_NVML_SWITCH   links from GPUs to NVSwitch ports, "0:18 1:18"
 *   FAKE_NVML_CPU      GPUs with one NVLink to the CPU (POWER), "0 1"
 *   FAKE_NVML_VERSION  NVLink version reported for every link (default 2)
 *   FAKE_NVML_INIT     "fail" makes nvmlInit_v2 fail (driver not loaded)
 * Links are numbered per GPU in the order the variables list them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXG 64
#define MAXL 18

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

enum { REMOTE_NONE, REMOTE_GPU, REMOTE_SWITCH, REMOTE_CPU };
struct fake_link { int kind; int peer; };
struct fake_gpu { unsigned domain, bus, dev; struct fake_link links[MAXL]; int nlinks; };
struct fake_machine { int ngpus; struct fake_gpu gpus[MAXG]; unsigned version; int loaded; };

/* One machine per process, read at nvmlInit_v2: a test stand-in, not dtrain code. */
static struct fake_machine fake;

static void add_link(int g, int kind, int peer)
{
    if (g < 0 || g >= fake.ngpus || fake.gpus[g].nlinks >= MAXL)
        return;
    fake.gpus[g].links[fake.gpus[g].nlinks].kind = kind;
    fake.gpus[g].links[fake.gpus[g].nlinks].peer = peer;
    fake.gpus[g].nlinks++;
}

static void load_machine(void)
{
    memset(&fake, 0, sizeof(fake));
    const char *s = getenv("FAKE_NVML_GPUS");
    char buf[4096];
    snprintf(buf, sizeof(buf), "%s", s ? s : "");
    for (char *save = NULL, *tok = strtok_r(buf, " ", &save); tok && fake.ngpus < MAXG; tok = strtok_r(NULL, " ", &save)) {
        struct fake_gpu *g = &fake.gpus[fake.ngpus];
        unsigned fn;
        if (sscanf(tok, "%x:%x:%x.%x", &g->domain, &g->bus, &g->dev, &fn) == 4)
            fake.ngpus++;
    }
    s = getenv("FAKE_NVML_LINKS");
    snprintf(buf, sizeof(buf), "%s", s ? s : "");
    for (char *save = NULL, *tok = strtok_r(buf, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        int a, b, n;
        if (sscanf(tok, "%d-%d:%d", &a, &b, &n) == 3 && a >= 0 && b >= 0 && a < fake.ngpus && b < fake.ngpus)
            for (int i = 0; i < n; i++) {
                add_link(a, REMOTE_GPU, b);
                add_link(b, REMOTE_GPU, a);
            }
    }
    s = getenv("FAKE_NVML_SWITCH");
    snprintf(buf, sizeof(buf), "%s", s ? s : "");
    for (char *save = NULL, *tok = strtok_r(buf, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        int a, n;
        if (sscanf(tok, "%d:%d", &a, &n) == 2)
            for (int i = 0; i < n; i++)
                add_link(a, REMOTE_SWITCH, i % 4);
    }
    s = getenv("FAKE_NVML_CPU");
    snprintf(buf, sizeof(buf), "%s", s ? s : "");
    for (char *save = NULL, *tok = strtok_r(buf, " ", &save); tok; tok = strtok_r(NULL, " ", &save))
        add_link(atoi(tok), REMOTE_CPU, 0);
    s = getenv("FAKE_NVML_VERSION");
    fake.version = s ? (unsigned)atoi(s) : 2;
    fake.loaded = 1;
}

typedef struct fake_gpu *nvmlDevice_t;

int nvmlInit_v2(void)
{
    const char *init = getenv("FAKE_NVML_INIT");
    if (init && strcmp(init, "fail") == 0)
        return 9; /* NVML_ERROR_DRIVER_NOT_LOADED */
    load_machine();
    return 0;
}

int nvmlShutdown(void)
{
    fake.loaded = 0;
    return 0;
}

int nvmlDeviceGetCount_v2(unsigned int *count)
{
    *count = (unsigned)fake.ngpus;
    return 0;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *dev)
{
    if (i >= (unsigned)fake.ngpus)
        return 2; /* NVML_ERROR_INVALID_ARGUMENT */
    *dev = &fake.gpus[i];
    return 0;
}

static void fill_pci(nvmlPciInfo_t *pci, unsigned domain, unsigned bus, unsigned dev, unsigned id)
{
    memset(pci, 0, sizeof(*pci));
    pci->domain = domain;
    pci->bus = bus;
    pci->device = dev;
    pci->pciDeviceId = id;
    snprintf(pci->busId, sizeof(pci->busId), "%08x:%02x:%02x.0", domain, bus, dev);
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04x:%02x:%02x.0", domain & 0xffffu, bus & 0xffu, dev & 0x1fu);
}

int nvmlDeviceGetPciInfo_v3(nvmlDevice_t dev, nvmlPciInfo_t *pci)
{
    fill_pci(pci, dev->domain, dev->bus, dev->dev, 0x1db510de);
    return 0;
}

int nvmlDeviceGetNvLinkState(nvmlDevice_t dev, unsigned int link, int *active)
{
    if (link >= MAXL)
        return 2;
    *active = link < (unsigned)dev->nlinks; /* NVML_FEATURE_ENABLED = 1 */
    return 0;
}

int nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t dev, unsigned int link, nvmlPciInfo_t *pci)
{
    if (link >= (unsigned)dev->nlinks)
        return 3; /* NVML_ERROR_NOT_SUPPORTED */
    const struct fake_link *l = &dev->links[link];
    const struct fake_gpu *p;
    switch (l->kind) {
    case REMOTE_GPU:
        p = &fake.gpus[l->peer];
        fill_pci(pci, p->domain, p->bus, p->dev, 0x1db510de);
        break;
    case REMOTE_SWITCH:
        fill_pci(pci, 0, 0xe0 + (unsigned)l->peer, 0, 0x22a310de); /* NVSwitch */
        break;
    default:
        fill_pci(pci, 7, 0, 1, 0x04ea1014); /* IBM NPU bridge */
        break;
    }
    return 0;
}

int nvmlDeviceGetNvLinkVersion(nvmlDevice_t dev, unsigned int link, unsigned int *version)
{
    if (link >= (unsigned)dev->nlinks)
        return 3;
    *version = fake.version;
    return 0;
}

int nvmlDeviceGetName(nvmlDevice_t dev, char *name, unsigned int len)
{
    (void)dev;
    snprintf(name, len, "Fake NVML GPU");
    return 0;
}

int nvmlDeviceGetUUID(nvmlDevice_t dev, char *uuid, unsigned int len)
{
    snprintf(uuid, len, "GPU-fake-%04x-%02x", dev->domain, dev->bus);
    return 0;
}
