/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-health: what the probes found on the node, as plain data.
 *
 * Probes (topology.c, nvml.c, fs.c, ib.c) fill these in a bounded child
 * (bounded.h), so they hold no pointers: the child writes them into memory
 * shared with the parent.  checks.c judges them against the site config
 * without touching the machine, which is what makes the checks testable.
 *
 * Every facts struct starts with `ok` and `error`: ok == 0 means the probe
 * could not look (library missing, timeout, unreadable file) and error says
 * why in one line. */
#ifndef DTRAIN_HEALTH_FACTS_H
#define DTRAIN_HEALTH_FACTS_H

#include "dtrain_nvml.h"

#define HEALTH_MAX_GPUS 64       /* = DTRAIN_TOPO_MAX_GPUS */
#define HEALTH_MAX_NVLINKS NVML_NVLINK_MAX_LINKS /* 36 in nvml.h (API 13) */
#define HEALTH_MAX_PROCS 32      /* processes remembered per GPU (the count is exact) */
#define HEALTH_MAX_XIDS 16       /* XID events remembered per GPU */
#define HEALTH_MAX_IB_PORTS 64
#define HEALTH_ERROR_LEN 256
#define HEALTH_BUSID_LEN 32      /* "0000:07:00.0" */

/* ------------------------------------------------------------ topology */
struct health_topo_gpu {
    char busid[HEALTH_BUSID_LEN]; /* normalised: "0000:07:00.0", lower case */
    char model[128];              /* "" when the topology does not say */
    unsigned vendor_id;           /* 0x10de NVIDIA, 0x1002 AMD */
};

struct health_topo_model {
    int ok;
    char error[HEALTH_ERROR_LEN];
    char source[256];             /* "live" or the XML path */
    char summary[256];            /* dtrain_topo_summary() */
    int ngpus;
    struct health_topo_gpu gpus[HEALTH_MAX_GPUS];
    float bandwidth_gbps[HEALTH_MAX_GPUS][HEALTH_MAX_GPUS]; /* NVLink/XGMI; 0 = PCIe only */
    int largest_island;
};

/* The node as it is, and (when the config names one) as it should be. */
struct health_topo_facts {
    struct health_topo_model node;
    int have_reference;
    struct health_topo_model reference;
};

/* ------------------------------------------------------------ NVML */
struct health_gpu_process {
    unsigned pid;
    unsigned long long used_bytes;
    char name[32];                /* /proc/PID/comm, or "" */
};

struct health_nvml_gpu {
    char busid[HEALTH_BUSID_LEN]; /* normalised like the topology's */
    char name[96];
    int lost;                     /* some call answered NVML_ERROR_GPU_IS_LOST */
    char error[HEALTH_ERROR_LEN]; /* first unexpected NVML error on this GPU, or "" */

    int ecc_known;                /* 0: ECC off or not supported */
    unsigned long long ecc_corrected, ecc_uncorrected;

    int remap_known;              /* row remapping (Ampere and later) */
    unsigned remap_corrected, remap_uncorrected, remap_pending, remap_failed;
    int retired_known;            /* page retirement (before Ampere) */
    unsigned retired_sbe, retired_dbe;
    int retired_pending;

    int memory_known;
    unsigned long long memory_total, memory_used;

    int procs_known;
    unsigned nprocs;              /* exact count; the first HEALTH_MAX_PROCS are listed */
    struct health_gpu_process procs[HEALTH_MAX_PROCS];

    int nlinks;                   /* links whose state NVML reported */
    unsigned char link_active[HEALTH_MAX_NVLINKS];
    int link_errors_known;
    unsigned long long link_replay[HEALTH_MAX_NVLINKS];
    unsigned long long link_recovery[HEALTH_MAX_NVLINKS];
    unsigned long long link_crc[HEALTH_MAX_NVLINKS]; /* flit + data CRC */

    int fabric;                   /* NVML reports a multi-node NVLink fabric for this GPU
                                   * (nvmlDeviceGetGpuFabricInfoV: a state other than NOT_SUPPORTED) */

    int xid_known;                /* registered for XID events */
    unsigned nxids;               /* exact count; the first HEALTH_MAX_XIDS are listed */
    unsigned long long xids[HEALTH_MAX_XIDS];
};

struct health_nvml_facts {
    int ok;                       /* NVML loaded and initialised */
    int probe_failed;             /* the probe hung or crashed (never a normal answer) */
    char error[HEALTH_ERROR_LEN];
    char library[256];            /* the library opened (or tried) */
    int ngpus;
    struct health_nvml_gpu gpus[HEALTH_MAX_GPUS];
};

/* ------------------------------------------------------------ filesystems */
struct health_fs_facts {
    int ok;
    char error[HEALTH_ERROR_LEN]; /* "/ckpt: No such file or directory" */
    unsigned long long free_bytes;  /* available to unprivileged users (f_bavail) */
    unsigned long long total_bytes;
};

/* ------------------------------------------------------------ InfiniBand */
struct health_ib_port_facts {
    char device[64];              /* "mlx5_0" */
    unsigned port;                /* 1.. */
    int present;                  /* the port's sysfs folder exists */
    char state[32];               /* "ACTIVE", "DOWN", "INIT", ... from ports/N/state */
    char phys_state[32];          /* "LinkUp", "Polling", ... from ports/N/phys_state */
    double rate_gbps;             /* from ports/N/rate, 0 unknown */
};

struct health_ib_facts {
    int ok;
    char error[HEALTH_ERROR_LEN];
    int nports;
    struct health_ib_port_facts ports[HEALTH_MAX_IB_PORTS];
};

/* ------------------------------------------------------------ IMEX */
/* The nvidia-imex daemon's state as `nvidia-imex-ctl -q` gives it (imex.h). */
struct health_imex_facts {
    int ok;                       /* the control program ran: exit_status and output say what it said */
    char error[HEALTH_ERROR_LEN]; /* else why it could not run (missing, untrusted, timeout) */
    char ctl[256];                /* the program run */
    int exit_status;              /* its exit code; 128+N when killed by signal N */
    char output[160];             /* its first line (stdout, else stderr), printable ASCII */
};

#endif
