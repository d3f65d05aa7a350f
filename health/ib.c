/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-health: InfiniBand port facts from sysfs; see ib.h. */
#include "ib.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtrain_file.h"
#include "dtrain_parse.h"

struct ib_request {
    const char *root;
    const struct health_ib_port_spec *ports;
    int nports;
};

/* Read a small sysfs file into buf without the trailing newline.
 * Returns 0, or -1 when it cannot be read. */
static int read_small(const char *path, char *buf, size_t len)
{
    /* Never a blocking open: a FIFO or device here (a fake or damaged
     * tree) is skipped, not waited on until the probe's bound. */
    char why[128];
    int fd = dtrain_open_regular(path, O_RDONLY, "sysfs file", NULL, why, sizeof why);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, len - 1);
    close(fd);
    if (n < 0)
        return -1;
    buf[n] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
    dtrain_printable(buf); /* it reaches drain reasons: no raw bytes of a damaged or planted file */
    return 0;
}

/* "4: ACTIVE" -> "ACTIVE"; text without a number prefix is kept whole. */
static void state_name(const char *text, char *out, size_t outlen)
{
    const char *colon = strchr(text, ':');
    const char *name = colon ? colon + 1 : text;
    while (*name == ' ')
        name++;
    dtrain_snprintf(out, outlen, "%s", name);
}

static void read_port(const char *root, const char *device, unsigned port, struct health_ib_port_facts *out,
                      struct dtrain_stage *stage)
{
    char dir[HEALTH_PATH_LEN + 128], path[HEALTH_PATH_LEN + 160], text[128];
    dtrain_snprintf(out->device, sizeof(out->device), "%s", device);
    out->port = port;
    if (dtrain_snprintf(dir, sizeof(dir), "%s/class/infiniband/%s/ports/%u", root, device, port) != 0)
        return;
    dtrain_stage_set(stage, "reading %.140s", dir);
    if (access(dir, F_OK) != 0)
        return;
    out->present = 1;
    dtrain_snprintf(path, sizeof(path), "%s/state", dir);
    if (read_small(path, text, sizeof(text)) == 0)
        state_name(text, out->state, sizeof(out->state));
    dtrain_snprintf(path, sizeof(path), "%s/phys_state", dir);
    if (read_small(path, text, sizeof(text)) == 0)
        state_name(text, out->phys_state, sizeof(out->phys_state));
    dtrain_snprintf(path, sizeof(path), "%s/rate", dir);
    if (read_small(path, text, sizeof(text)) == 0) {
        char *end = NULL;
        double r = strtod(text, &end);
        out->rate_gbps = (end != text && r > 0 && r < 1e6) ? r : 0;
    }
}

static int by_device_port(const void *a, const void *b)
{
    const struct health_ib_port_facts *x = a, *y = b;
    int c = strcmp(x->device, y->device);
    return c ? c : (x->port > y->port) - (x->port < y->port);
}

/* Every port of every device under <root>/class/infiniband. */
static void read_all_ports(const char *root, struct health_ib_facts *out, struct dtrain_stage *stage)
{
    char path[HEALTH_PATH_LEN + 128];
    dtrain_snprintf(path, sizeof(path), "%s/class/infiniband", root);
    dtrain_stage_set(stage, "listing %.140s", path);
    DIR *devices = opendir(path);
    if (!devices) {
        if (errno == ENOENT) {
            out->ok = 1; /* no InfiniBand on this node */
            return;
        }
        dtrain_snprintf(out->error, sizeof(out->error), "%s: %s", path, strerror(errno));
        return;
    }
    struct dirent *d;
    while ((d = readdir(devices)) != NULL && out->nports < HEALTH_MAX_IB_PORTS) {
        char ports_path[HEALTH_PATH_LEN + 256];
        if (d->d_name[0] == '.' ||
            dtrain_snprintf(ports_path, sizeof(ports_path), "%s/%s/ports", path, d->d_name) != 0)
            continue;
        DIR *ports = opendir(ports_path);
        if (!ports)
            continue;
        struct dirent *p;
        while ((p = readdir(ports)) != NULL && out->nports < HEALTH_MAX_IB_PORTS) {
            long port;
            char err[64];
            if (dtrain_parse_int(p->d_name, 1, 255, "port", &port, err, sizeof(err)) != 0)
                continue;
            read_port(root, d->d_name, (unsigned)port, &out->ports[out->nports++], stage);
        }
        closedir(ports);
    }
    closedir(devices);
    qsort(out->ports, (size_t)out->nports, sizeof(out->ports[0]), by_device_port);
    out->ok = 1;
}

static void ib_child(const void *arg, void *out, struct dtrain_stage *stage)
{
    const struct ib_request *req = arg;
    struct health_ib_facts *facts = out;
    if (req->nports == 0) {
        read_all_ports(req->root, facts, stage);
        return;
    }
    for (int i = 0; i < req->nports && i < HEALTH_MAX_IB_PORTS; i++)
        read_port(req->root, req->ports[i].device, req->ports[i].port, &facts->ports[i], stage);
    facts->nports = req->nports;
    facts->ok = 1;
}

static void ib_failed(void *out, const void *ctx, const char *why)
{
    struct health_ib_facts *facts = out;
    (void)ctx;
    dtrain_snprintf(facts->error, sizeof(facts->error), "InfiniBand sysfs %s", why);
}

void health_ib_start(const char *sysfs_root, const struct health_ib_port_spec *ports, int nports,
                     int timeout_ms, struct health_ib_facts *out, struct dtrain_probe *probe)
{
    struct ib_request req = {.root = sysfs_root, .ports = ports, .nports = nports};
    dtrain_probe_start(probe, ib_child, &req, out, sizeof(*out), timeout_ms, ib_failed, NULL);
}

void health_ib_probe(const char *sysfs_root, const struct health_ib_port_spec *ports, int nports,
                     int timeout_ms, struct health_ib_facts *out)
{
    struct dtrain_probe probe;
    health_ib_start(sysfs_root, ports, nports, timeout_ms, out, &probe);
    dtrain_probe_wait(&probe);
}
