/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Bootstrap ids for the cpu and nccl backends; see bootstrap_id.h. */
#include "bootstrap_id.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#ifdef DTRAIN_HAVE_CUDA
#include <cuda.h>
#include <dlfcn.h>
#include <nccl.h>
#endif

#include "dtrain_parse.h"

#define CPU_PREFIX "cpu:"
#define NCCL_PREFIX "nccl:"

const char *dtrain_backend_name(enum dtrain_comm_backend backend)
{
    return backend == DTRAIN_COMM_NCCL ? "nccl" : "cpu";
}

int dtrain_backend_parse(const char *text, enum dtrain_comm_backend *out)
{
    if (text != NULL && strcmp(text, "cpu") == 0) {
        *out = DTRAIN_COMM_CPU;
        return 0;
    }
    if (text != NULL && strcmp(text, "nccl") == 0) {
        *out = DTRAIN_COMM_NCCL;
        return 0;
    }
    return -1;
}

int dtrain_backend_built(enum dtrain_comm_backend backend)
{
#ifdef DTRAIN_HAVE_CUDA
    (void)backend;
    return 1;
#else
    return backend == DTRAIN_COMM_CPU;
#endif
}

#ifdef DTRAIN_HAVE_CUDA
/* The CUDA driver and NCCL are loaded when an id or a GPU count is asked
 * for, not linked: dtrain-launch links this file, and its other uses
 * (--job-exit in a batch script, --print, a cpu job) must not load them.
 * The handles are never closed: ncclGetUniqueId leaves NCCL's bootstrap
 * root thread running in the library, and the driver stays initialised. */
static void *cuda_symbol(const char *library, const char *name, char *why, size_t whylen)
{
    void *dl = dlopen(library, RTLD_NOW | RTLD_LOCAL);
    if (dl == NULL) {
        const char *e = dlerror();
        dtrain_snprintf(why, whylen, "cannot load %s: %s", library, e ? e : "dlopen failed");
        return NULL;
    }
    void *sym = dlsym(dl, name);
    if (sym == NULL)
        dtrain_snprintf(why, whylen, "%s has no %s", library, name);
    return sym;
}

/* GPUs this process may use (CUDA_VISIBLE_DEVICES counts), 0 without a driver. */
static int cuda_device_count(void)
{
    char why[256];
    CUresult (*init)(unsigned int) = NULL;
    CUresult (*count_of)(int *) = NULL;
    *(void **)&init = cuda_symbol(DTRAIN_CUDA_DRIVER_LIBRARY, "cuInit", why, sizeof why);
    *(void **)&count_of = cuda_symbol(DTRAIN_CUDA_DRIVER_LIBRARY, "cuDeviceGetCount", why, sizeof why);
    int count = 0;
    if (init == NULL || count_of == NULL || init(0) != CUDA_SUCCESS || count_of(&count) != CUDA_SUCCESS)
        return 0;
    return count;
}
#endif

enum dtrain_comm_backend dtrain_backend_default(void)
{
#ifdef DTRAIN_HAVE_CUDA
    if (cuda_device_count() > 0)
        return DTRAIN_COMM_NCCL;
#endif
    return DTRAIN_COMM_CPU;
}

int dtrain_comm_addr_pick(const char *iface, char *addr, size_t addrlen, char *err, size_t errlen)
{
    struct ifaddrs *list = NULL;
    int rc = -1;
    if (getifaddrs(&list) != 0) {
        dtrain_snprintf(err, errlen, "getifaddrs: %s", strerror(errno));
        return -1;
    }
    for (struct ifaddrs *ifa = list; ifa != NULL; ifa = ifa->ifa_next) {
        if (ifa->ifa_addr == NULL || ifa->ifa_addr->sa_family != AF_INET || !(ifa->ifa_flags & IFF_UP))
            continue;
        if (iface != NULL ? strcmp(ifa->ifa_name, iface) != 0 : (ifa->ifa_flags & IFF_LOOPBACK) != 0)
            continue;
        const struct sockaddr_in *sin = (const struct sockaddr_in *)(const void *)ifa->ifa_addr;
        if (inet_ntop(AF_INET, &sin->sin_addr, addr, (socklen_t)addrlen) == NULL) {
            dtrain_snprintf(err, errlen, "inet_ntop: %s", strerror(errno));
            goto out;
        }
        rc = 0;
        goto out;
    }
    if (iface != NULL) {
        dtrain_snprintf(err, errlen, "interface '%.32s' has no IPv4 address or is down (see `ip -4 addr`)", iface);
        goto out;
    }
    /* A machine without a network (or the local test cluster): loopback. */
    rc = dtrain_snprintf(addr, addrlen, "127.0.0.1");
    if (rc != 0)
        dtrain_snprintf(err, errlen, "address buffer too small");
out:
    freeifaddrs(list);
    return rc;
}

static int draw_secret(unsigned char *secret, size_t len, char *err, size_t errlen)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = getrandom(secret + got, len - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            dtrain_snprintf(err, errlen, "getrandom: %s", n < 0 ? strerror(errno) : "no bytes");
            return -1;
        }
        got += (size_t)n;
    }
    return 0;
}

int dtrain_bootstrap_id_make_cpu(const char *addr, int peers, char *id, size_t idlen,
                                 int *listen_fd, char *err, size_t errlen)
{
    struct sockaddr_in sin;
    socklen_t sinlen = sizeof sin;
    unsigned char secret[DTRAIN_BOOTSTRAP_SECRET_LEN];
    char secret_hex[2 * DTRAIN_BOOTSTRAP_SECRET_LEN + 1];
    int fd = -1;

    memset(&sin, 0, sizeof sin);
    sin.sin_family = AF_INET;
    if (inet_pton(AF_INET, addr, &sin.sin_addr) != 1) {
        dtrain_snprintf(err, errlen, "'%.64s' is not an IPv4 address", addr);
        goto fail;
    }
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        dtrain_snprintf(err, errlen, "socket: %s", strerror(errno));
        goto fail;
    }
    if (bind(fd, (struct sockaddr *)&sin, sizeof sin) != 0) {
        dtrain_snprintf(err, errlen, "bind %s: %s", addr, strerror(errno));
        goto fail;
    }
    /* The kernel's largest queue, not one slot per peer: strangers that
     * connect first must not fill it and make members' connects wait for
     * SYN retries (the leader tells them apart once accepted). */
    (void)peers;
    if (listen(fd, SOMAXCONN) != 0) {
        dtrain_snprintf(err, errlen, "listen on %s: %s", addr, strerror(errno));
        goto fail;
    }
    if (getsockname(fd, (struct sockaddr *)&sin, &sinlen) != 0) {
        dtrain_snprintf(err, errlen, "getsockname: %s", strerror(errno));
        goto fail;
    }
    if (draw_secret(secret, sizeof secret, err, errlen) != 0)
        goto fail;
    if (dtrain_hex_encode(secret, sizeof secret, secret_hex, sizeof secret_hex) != 0 ||
        dtrain_snprintf(id, idlen, CPU_PREFIX "%s:%u:%s", addr, (unsigned)ntohs(sin.sin_port), secret_hex) != 0) {
        dtrain_snprintf(err, errlen, "id buffer too small");
        goto fail;
    }
    *listen_fd = fd;
    return 0;
fail:
    if (fd >= 0)
        close(fd);
    return -1;
}

int dtrain_bootstrap_id_make_nccl(char *id, size_t idlen, char *err, size_t errlen)
{
#ifdef DTRAIN_HAVE_CUDA
    ncclResult_t (*get_id)(ncclUniqueId *) = NULL;
    const char *(*error_string)(ncclResult_t) = NULL;
    char why[512];
    *(void **)&get_id = cuda_symbol(DTRAIN_NCCL_LIBRARY, "ncclGetUniqueId", why, sizeof why);
    if (get_id == NULL) {
        dtrain_snprintf(err, errlen, "%s (install NCCL, or use --comm-backend cpu)", why);
        return -1;
    }
    *(void **)&error_string = cuda_symbol(DTRAIN_NCCL_LIBRARY, "ncclGetErrorString", why, sizeof why);
    ncclUniqueId uid;
    ncclResult_t nrc = get_id(&uid);
    if (nrc != ncclSuccess) {
        dtrain_snprintf(err, errlen, "ncclGetUniqueId: %s (NCCL_DEBUG=INFO tells more)",
                        error_string ? error_string(nrc) : "failed");
        return -1;
    }
    _Static_assert(sizeof uid.internal == DTRAIN_NCCL_ID_LEN, "ncclUniqueId is 128 bytes");
    if (idlen < sizeof NCCL_PREFIX - 1 ||
        dtrain_snprintf(id, idlen, NCCL_PREFIX) != 0 ||
        dtrain_hex_encode(uid.internal, sizeof uid.internal, id + sizeof NCCL_PREFIX - 1,
                          idlen - (sizeof NCCL_PREFIX - 1)) != 0) {
        dtrain_snprintf(err, errlen, "id buffer too small");
        return -1;
    }
    return 0;
#else
    (void)id;
    (void)idlen;
    dtrain_snprintf(err, errlen, "this dtrain-launch was built without CUDA/NCCL: use --comm-backend cpu, or rebuild with --with-cuda");
    return -1;
#endif
}

int dtrain_bootstrap_id_backend(const char *id)
{
    if (strncmp(id, CPU_PREFIX, sizeof CPU_PREFIX - 1) == 0)
        return DTRAIN_COMM_CPU;
    if (strncmp(id, NCCL_PREFIX, sizeof NCCL_PREFIX - 1) == 0)
        return DTRAIN_COMM_NCCL;
    return -1;
}

int dtrain_cpu_id_parse(const char *id, struct dtrain_cpu_id *out)
{
    char text[DTRAIN_BOOTSTRAP_ID_MAX];
    struct in_addr in;
    long port;
    char ignored[128];

    if (strncmp(id, CPU_PREFIX, sizeof CPU_PREFIX - 1) != 0 ||
        dtrain_snprintf(text, sizeof text, "%s", id + sizeof CPU_PREFIX - 1) != 0)
        return -1;
    /* "<addr>:<port>:<secret>": split at the two colons (IPv4 has none). */
    char *port_text = strchr(text, ':');
    if (port_text == NULL)
        return -1;
    *port_text++ = '\0';
    char *secret_text = strchr(port_text, ':');
    if (secret_text == NULL)
        return -1;
    *secret_text++ = '\0';
    if (inet_pton(AF_INET, text, &in) != 1 ||
        dtrain_snprintf(out->addr, sizeof out->addr, "%s", text) != 0 ||
        dtrain_parse_int(port_text, 1, 65535, "port", &port, ignored, sizeof ignored) != 0 ||
        dtrain_hex_decode(secret_text, out->secret, sizeof out->secret) != 0)
        return -1;
    out->port = (unsigned)port;
    return 0;
}

int dtrain_nccl_id_parse(const char *id, unsigned char out[DTRAIN_NCCL_ID_LEN])
{
    if (strncmp(id, NCCL_PREFIX, sizeof NCCL_PREFIX - 1) != 0)
        return -1;
    return dtrain_hex_decode(id + sizeof NCCL_PREFIX - 1, out, DTRAIN_NCCL_ID_LEN);
}

#define NCCL_MAGIC_HEX 16 /* ncclBootstrapHandle: uint64_t magic (random), then the root's socket address */

void dtrain_bootstrap_id_redact(const char *id, char *out, size_t outlen)
{
    struct dtrain_cpu_id cpu;
    unsigned char nccl[DTRAIN_NCCL_ID_LEN];
    if (id[0] == '\0' || strcmp(id, "local") == 0)
        (void)dtrain_snprintf(out, outlen, "%s", id);
    else if (dtrain_cpu_id_parse(id, &cpu) == 0)
        (void)dtrain_snprintf(out, outlen, CPU_PREFIX "%s:%u:" DTRAIN_ID_SECRET_SHOWN, cpu.addr, cpu.port);
    else if (dtrain_nccl_id_parse(id, nccl) == 0)
        (void)dtrain_snprintf(out, outlen, NCCL_PREFIX DTRAIN_ID_SECRET_SHOWN "%s",
                              id + sizeof NCCL_PREFIX - 1 + NCCL_MAGIC_HEX);
    else
        (void)dtrain_snprintf(out, outlen, DTRAIN_ID_SECRET_SHOWN);
    memset(&cpu, 0, sizeof cpu);
}
