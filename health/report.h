/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-health: telling what was found, as text lines or one JSON object.
 *
 * Text: one line per failed check on stderr, "dtrain-health: FAIL ecc:
 * GPU 0000:07:00.0: 2 uncorrected ECC errors ...", and one summary line on
 * stdout; with verbose, every check's line on stdout.
 * JSON (--json): one object on stdout per run:
 *   {"program": "dtrain-health", "version": "0.1.0", "mode": "prolog",
 *    "node": "node1", "config": "/etc/dtrain/health.json", "healthy": false,
 *    "drained": true, "reason": "dtrain: xid: GPU 0000:07:00.0: XID 79",
 *    "drain_error": null,
 *    "elapsed_ms": {"total": 14.2, "topology": 6.1, "nvml": 5.3, ...},
 *    "checks": [{"name": "gpu_count", "result": "pass", "detail": "8 GPUs as expected"}, ...]}
 * A run that could not start (bad config) prints {"program": ..., "mode": ...,
 * "error": "..."}. */
#ifndef DTRAIN_HEALTH_REPORT_H
#define DTRAIN_HEALTH_REPORT_H

#include <stddef.h>
#include <stdio.h>

#include "run.h"

/* What happened around the checks. */
struct health_verdict {
    const char *node;
    const char *config;
    int drained;              /* slurmctld accepted the drain */
    const char *reason;       /* the drain reason ("dtrain: ..."), or NULL when healthy */
    const char *drain_error;  /* why draining failed, or NULL */
};

/* The drain reason for a report with failures: "dtrain: CHECK: DETAIL",
 * plus "(+N more)" when several checks failed; at most len-1 bytes. */
void health_reason(const struct health_report *rep, char *out, size_t len);

void health_print_text(const struct health_report *rep, const struct health_verdict *v, int verbose,
                       FILE *out, FILE *errs);

/* Returns 0, or -1 when the JSON could not be built or written. */
int health_print_json(const struct health_report *rep, const struct health_verdict *v, FILE *out);

/* The JSON object of a run that could not start. */
int health_print_json_error(const char *mode, const char *node, const char *error, FILE *out);

#endif
