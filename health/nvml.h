/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-health: the GPUs as NVML reports them.
 *
 * NVML is opened with dlopen() through common/dtrain_nvml.h, so
 * dtrain-health neither links against nor needs the NVIDIA driver.  The
 * library is the config's "nvml_library", else $DTRAIN_NVML_LIBRARY (the
 * variable libdtrain-topo honours too, so one fake library stands in for
 * both in tests), else libnvidia-ml.so.1.
 *
 * Every query runs in a bounded child (bounded.h): a hung NVML call cannot
 * hang the prolog; the answer then says which call on which GPU hung. */
#ifndef DTRAIN_HEALTH_NVML_H
#define DTRAIN_HEALTH_NVML_H

#include <stddef.h>

#include "dtrain_bounded.h"
#include "site_config.h"
#include "facts.h"

/* What to read besides each GPU's bus id and name. */
enum health_nvml_query {
    HEALTH_NVML_ECC = 1 << 0,        /* ECC error counts */
    HEALTH_NVML_RETIRED = 1 << 1,    /* remapped rows, else retired pages */
    HEALTH_NVML_XID = 1 << 2,        /* XID events (listen xid_wait_ms) */
    HEALTH_NVML_NVLINK = 1 << 3,     /* link states and error counters */
    HEALTH_NVML_MEMORY = 1 << 4,     /* memory in use */
    HEALTH_NVML_PROCESSES = 1 << 5,  /* compute processes */
    HEALTH_NVML_FABRIC = 1 << 6,     /* multi-node NVLink fabric membership (the imex check) */
};

struct health_nvml_request {
    char library[HEALTH_PATH_LEN];   /* path or soname given to dlopen */
    unsigned what;                   /* enum health_nvml_query bits */
    int ecc_aggregate;               /* lifetime counters instead of volatile */
    int xid_wait_ms;                 /* how long to listen for XID events */
};

/* The library to open: configured (may be ""), else $DTRAIN_NVML_LIBRARY,
 * else "libnvidia-ml.so.1". */
void health_nvml_library(const char *configured, char *out, size_t outlen);

/* Read NVML in this process.  Never fails as a call: out->ok and the
 * per-GPU fields say what was learnt.  May block if NVML blocks; use
 * health_nvml_probe() unless already inside a bounded child. */
void health_nvml_gather(const struct health_nvml_request *req, struct health_nvml_facts *out,
                        struct dtrain_stage *stage);

/* Start health_nvml_gather() in a bounded child (req must stay valid until
 * the wait); dtrain_probe_wait_all() completes it.  After timeout_ms the
 * child is killed: out->ok = 0, out->probe_failed = 1 and out->error
 * "NVML did not finish within ... (stuck in <call> on GPU <n>)". */
void health_nvml_start(const struct health_nvml_request *req, int timeout_ms, struct health_nvml_facts *out,
                       struct dtrain_probe *probe);

/* Start and wait. */
void health_nvml_probe(const struct health_nvml_request *req, int timeout_ms,
                       struct health_nvml_facts *out);

#endif
