/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain-topo: topology discovery in a forked child with a time bound.
 *
 * hwloc given a hostile XML file may crash, and NVML or sysfs on a sick
 * node may hang; inside slurmstepd either would take the step (or the
 * daemon) with it.  So the whole load (open, pre-check, hwloc, NVML) runs
 * in a child through common/dtrain_bounded, and the finished model comes
 * back through its shared memory: the model is plain data, apart from its
 * PU lists, which travel inline. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtrain_bounded.h"
#include "dtrain_file.h"
#include "dtrain_parse.h"
#include "topo_model.h"

/* More PUs than this in one node is refused (the largest machines have a
 * few thousand). */
#define TOPO_BOUNDED_MAX_PUS 16384

struct bounded_arg {
    const char *xml; /* NULL: live */
    int trusted;
    int this_node;
    int load_flags; /* DTRAIN_TOPO_LOAD_CPUS_ONLY or 0, for topo_hwloc_load */
};

struct bounded_answer {
    enum dtrain_status rc;
    char err[1024];
    struct dtrain_topo model; /* pus == NULL here */
    int npus;
    int pus[TOPO_BOUNDED_MAX_PUS], pu_core[TOPO_BOUNDED_MAX_PUS], pu_numa[TOPO_BOUNDED_MAX_PUS];
};

static void load_in_child(const void *argp, void *outp, struct dtrain_stage *stage)
{
    const struct bounded_arg *arg = argp;
    struct bounded_answer *a = outp;
    dtrain_topo *t = NULL;
    char *buf = NULL;
    size_t len = 0;

    if (arg->xml == NULL) {
        /* hwloc opens every plugin it has at its first topology (OpenCL,
         * GL with X11, PCI: a few ms a process, 16 tasks on a node); a
         * CPU-only load needs none, and this child's environment is its
         * own. */
        if (arg->load_flags & DTRAIN_TOPO_LOAD_CPUS_ONLY)
            setenv("HWLOC_PLUGINS_BLACKLIST", "hwloc_gl,hwloc_opencl,hwloc_pci,hwloc_cuda,hwloc_nvml,hwloc_rsmi,"
                                              "hwloc_levelzero", 0);
        dtrain_stage_set(stage, arg->load_flags ? "discovering this machine's CPUs (hwloc)"
                                                : "discovering this machine (hwloc, NVML)");
        a->rc = topo_hwloc_load(NULL, 0, NULL, arg->load_flags, &t, a->err, sizeof a->err);
    } else {
        dtrain_stage_set(stage, "reading %.120s", arg->xml);
        int fd = arg->trusted ? dtrain_open_trusted(arg->xml, "topology file", TOPO_XML_MAX_BYTES, a->err,
                                                    sizeof a->err)
                              : dtrain_open_regular(arg->xml, O_RDONLY, "topology file", NULL, a->err,
                                                    sizeof a->err);
        a->rc = DTRAIN_ERR_INPUT;
        if (fd < 0)
            return;
        int r = dtrain_read_fd(fd, arg->xml, "topology file", TOPO_XML_MAX_BYTES, &buf, &len, a->err,
                               sizeof a->err);
        close(fd);
        if (r != 0)
            return;
        dtrain_stage_set(stage, "loading %.120s with hwloc", arg->xml);
        a->rc = topo_hwloc_load(buf, len, arg->xml, arg->load_flags, &t, a->err, sizeof a->err);
        free(buf);
    }
    if (a->rc != DTRAIN_OK)
        return;
    if (arg->xml != NULL && arg->this_node && t->ngpus > 0) {
        /* A saved file standing for this node has no fabric membership
         * (hwloc never records it): NVML's, for the GPUs it also sees. */
        dtrain_stage_set(stage, "reading the NVLink fabric from NVML");
        if (topo_nvml_apply_fabric(t, NULL, a->err, sizeof a->err) < 0) {
            a->rc = DTRAIN_ERR_SYSTEM;
            dtrain_topo_free(t);
            return;
        }
        topo_model_finish(t);
    }
    if (t->npus > TOPO_BOUNDED_MAX_PUS) {
        dtrain_snprintf(a->err, sizeof a->err, "the node has %d CPUs, more than dtrain handles (%d)", t->npus,
                        TOPO_BOUNDED_MAX_PUS);
        a->rc = DTRAIN_ERR_INPUT;
    } else {
        a->model = *t;
        a->model.pus = a->model.pu_core = a->model.pu_numa = NULL;
        a->npus = t->npus;
        if (t->npus > 0) {
            memcpy(a->pus, t->pus, sizeof(int) * (size_t)t->npus);
            memcpy(a->pu_core, t->pu_core, sizeof(int) * (size_t)t->npus);
            memcpy(a->pu_numa, t->pu_numa, sizeof(int) * (size_t)t->npus);
        }
    }
    dtrain_topo_free(t);
}

enum dtrain_status dtrain_topo_load_bounded(const char *xml, int flags, int timeout_ms, dtrain_topo **out, char *err,
                                            size_t errlen)
{
    struct bounded_arg arg = {.xml = xml, .trusted = (flags & DTRAIN_TOPO_LOAD_TRUSTED) != 0,
                              .this_node = (flags & DTRAIN_TOPO_LOAD_THIS_NODE) != 0,
                              .load_flags = flags & DTRAIN_TOPO_LOAD_CPUS_ONLY};
    char why[DTRAIN_WHY_LEN];
    *out = NULL;
    struct bounded_answer *a = malloc(sizeof *a);
    if (a == NULL) {
        dtrain_snprintf(err, errlen, "out of memory");
        return DTRAIN_ERR_SYSTEM;
    }
    enum dtrain_bounded_status st = dtrain_run_bounded(load_in_child, &arg, a, sizeof *a, timeout_ms, why,
                                                       sizeof why);
    enum dtrain_status rc = DTRAIN_ERR_SYSTEM;
    if (st != DTRAIN_BOUNDED_OK) {
        dtrain_snprintf(err, errlen, "topology discovery %s", why);
        goto done;
    }
    if (a->rc != DTRAIN_OK) {
        a->err[sizeof a->err - 1] = '\0';
        dtrain_snprintf(err, errlen, "%s", a->err);
        rc = a->rc;
        goto done;
    }
    struct dtrain_topo *t = topo_model_new();
    if (t == NULL) {
        dtrain_snprintf(err, errlen, "out of memory");
        goto done;
    }
    *t = a->model;
    t->pus = t->pu_core = t->pu_numa = NULL;
    t->npus = 0;
    if (a->npus > 0 && a->npus <= TOPO_BOUNDED_MAX_PUS) {
        if (topo_model_alloc_pus(t, a->npus) != 0) {
            dtrain_topo_free(t);
            dtrain_snprintf(err, errlen, "out of memory");
            goto done;
        }
        memcpy(t->pus, a->pus, sizeof(int) * (size_t)a->npus);
        memcpy(t->pu_core, a->pu_core, sizeof(int) * (size_t)a->npus);
        memcpy(t->pu_numa, a->pu_numa, sizeof(int) * (size_t)a->npus);
    }
    *out = t;
    rc = DTRAIN_OK;
done:
    free(a);
    return rc;
}
