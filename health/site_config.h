/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-health: the site's expectations, read from a JSON file.
 *
 *   {
 *     "topology": "live",                 live hwloc (honours HWLOC_XMLFILE), or an
 *                                         XML path; "%n" is replaced by the node name
 *     "sysfs_root": "/sys",
 *     "nvml_library": "libnvidia-ml.so.1",  default: $DTRAIN_NVML_LIBRARY, then this
 *     "gpus": {"count": 8, "model": "H100"},
 *     "timeouts_ms": {"topology": 10000, "nvml": 15000, "filesystem": 5000,
 *                     "infiniband": 2000, "imex": 5000, "drain": 10000},
 *     "checks": {
 *       "gpu_count": {}, "gpu_model": {},
 *       "nvlink": {"min_bandwidth_gbps": 100, "reference_topology": "/etc/dtrain/h100.xml",
 *                  "tolerance_percent": 10, "min_largest_island": 8, "min_active_links": 18},
 *       "nvml": {},
 *       "ecc": {"counter": "volatile", "max_uncorrected": 0, "max_corrected": null},
 *       "retired_memory": {"max_retired_pages": 60, "max_uncorrected_remapped_rows": null},
 *       "xid": {"wait_ms": 0, "ignore": [13, 31, 43, 45]},
 *       "nvlink_errors": {"max_replay": null, "max_recovery": 0, "max_crc": null},
 *       "gpu_memory": {"max_used": "2GiB"},
 *       "gpu_processes": {"grace_ms": 2000},
 *       "checkpoint_fs": {"path": "/ckpt", "min_free": "100GiB"},
 *       "shm": {"path": "/dev/shm", "min_free": "1GiB"},
 *       "infiniband": {"ports": ["mlx5_0:1"], "min_rate_gbps": 200},
 *       "imex": {"always": false, "ctl": "/usr/bin/nvidia-imex-ctl"}
 *     }
 *   }
 *
 * Every key is optional; every check section also takes "enabled": false
 * to turn the check off.  Sizes are a whole number of bytes or a string with
 * a unit ("100GiB", "512MB").  Limits given as null mean "no limit".
 * Unknown keys, wrong types and out-of-range values are refused with one
 * line naming the key (doc/dtrain-health.8 lists every key). */
#ifndef DTRAIN_HEALTH_SITE_CONFIG_H
#define DTRAIN_HEALTH_SITE_CONFIG_H

#include <limits.h>
#include <stddef.h>

#include "facts.h"

#define HEALTH_NO_LIMIT (-1LL)   /* a max_* limit given as null */
#define HEALTH_DRAIN_TIMEOUT_MS 10000 /* default timeouts_ms.drain (also when the config is unusable) */
#define HEALTH_MAX_IGNORED_XIDS 64
#define HEALTH_PATH_LEN 1024
#define HEALTH_IMEX_CTL_DEFAULT "/usr/bin/nvidia-imex-ctl" /* NVIDIA's nvidia-imex package */

/* The checks, in the order they run and are reported. */
enum health_check_id {
    HEALTH_CHECK_GPU_COUNT,      /* topology (and NVML) GPU count = gpus.count */
    HEALTH_CHECK_GPU_MODEL,      /* every GPU's model contains gpus.model */
    HEALTH_CHECK_NVLINK,         /* link matrix against the expectations */
    HEALTH_CHECK_NVML,           /* NVML usable when GPUs are expected; no GPU lost */
    HEALTH_CHECK_ECC,            /* ECC error counts */
    HEALTH_CHECK_RETIRED_MEMORY, /* retired pages or remapped rows */
    HEALTH_CHECK_XID,            /* XID events */
    HEALTH_CHECK_NVLINK_ERRORS,  /* NVLink error counters */
    HEALTH_CHECK_GPU_MEMORY,     /* GPU memory in use */
    HEALTH_CHECK_GPU_PROCESSES,  /* processes left on the GPUs */
    HEALTH_CHECK_CHECKPOINT_FS,  /* free space for checkpoints */
    HEALTH_CHECK_SHM,            /* free space in /dev/shm */
    HEALTH_CHECK_INFINIBAND,     /* InfiniBand port state and rate */
    HEALTH_CHECK_IMEX,           /* the nvidia-imex daemon READY (multi-node NVLink nodes) */
    HEALTH_CHECK_COUNT
};

/* "gpu_count", "ecc", ...: the name in the config, the output and reasons. */
const char *health_check_name(enum health_check_id id);

struct health_ib_port_spec {
    char device[64];
    unsigned port;
};

struct health_fs_spec {
    char path[HEALTH_PATH_LEN];   /* "" = not configured (the check is skipped) */
    long long min_free_bytes;
};

struct health_config {
    char file[HEALTH_PATH_LEN];          /* where it was read from, for messages */
    char topology[HEALTH_PATH_LEN];      /* "" = live; else an XML path (%n expanded) */
    char sysfs_root[HEALTH_PATH_LEN];    /* "/sys" */
    char nvml_library[HEALTH_PATH_LEN];  /* "" = $DTRAIN_NVML_LIBRARY or libnvidia-ml.so.1 */
    int gpu_count;                       /* -1 = not given */
    char gpu_model[128];                 /* "" = not given; matched as a case-insensitive substring */
    int enabled[HEALTH_CHECK_COUNT];

    struct {
        int topology, nvml, filesystem, infiniband, imex, drain;
    } timeout_ms;

    struct {
        double min_bandwidth_gbps;       /* every GPU pair at least this; 0 = not checked */
        char reference[HEALTH_PATH_LEN]; /* saved topology of a healthy node (%n expanded), or "" */
        double tolerance_percent;        /* how far below the reference a link may be */
        int min_largest_island;          /* 0 = not checked */
        int min_active_links;            /* per GPU, from NVML; 0 = not checked */
    } nvlink;

    struct {
        int aggregate;                   /* 0 volatile counters (since driver load), 1 lifetime */
        long long max_uncorrected, max_corrected;
    } ecc;

    struct {
        long long max_retired_pages, max_uncorrected_rows;
    } retired;

    struct {
        int wait_ms;                     /* how long to listen for XID events */
        int nignore;
        unsigned ignore[HEALTH_MAX_IGNORED_XIDS];
    } xid;

    struct {
        long long max_replay, max_recovery, max_crc;
    } nvlink_errors;

    long long gpu_memory_max_used;       /* bytes */
    int gpu_processes_grace_ms;          /* epilog: wait this long for leftovers to exit */

    struct health_fs_spec checkpoint_fs, shm;

    struct {
        int nports;                      /* 0: every port found must be ACTIVE */
        struct health_ib_port_spec ports[HEALTH_MAX_IB_PORTS];
        double min_rate_gbps;            /* 0 = not checked */
    } infiniband;

    struct {
        int always;                      /* 1: also where NVML reports no multi-node NVLink fabric */
        char ctl[HEALTH_PATH_LEN];       /* the nvidia-imex-ctl to run */
    } imex;
};

/* Fill cfg with the defaults (every check on, the limits documented above). */
void health_config_defaults(struct health_config *cfg);

/* Read the JSON file at path into cfg (defaults first, then the file),
 * expanding "%n" in paths to `node`.  Returns 0, or -1 with one line in err
 * naming the file and the key: "health.json: checks.ecc.max_uncorected:
 * unknown key (known: enabled, counter, max_uncorrected, max_corrected)". */
int health_config_load(const char *path, const char *node, struct health_config *cfg,
                       char *err, size_t errlen);

/* Parse a size: a whole number of bytes, or digits followed by one of
 * B, KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024).
 * Returns 0 and *out, or -1 with one line in err naming `what`. */
int health_parse_size(const char *text, const char *what, long long *out, char *err, size_t errlen);

#endif
