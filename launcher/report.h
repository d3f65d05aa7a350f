/* SPDX-License-Identifier: GPL-2.0-or-later */
/* --print and --json: one line per task with its placement, its groups and
 * ids, and what the bootstrap cost (used by the tests and the benchmark).
 *
 * --print (text, key=value tokens, no spaces inside values):
 *   rank=3 size=16 T=4 P=2 D=2 tp_rank=3 pp_rank=0 dp_rank=0 node=0
 *   local_rank=3 local_size=8 placed_by=launcher backend=cpu fences=1
 *   bootstrap_us=... init_us=... place_us=... ids_us=... put_us=...
 *   fence_us=... get_us=... then for each group the task has:
 *   <kind>.key=dt.tp.0 <kind>.first=0 <kind>.stride=1 <kind>.size=4
 *   <kind>.rank=3 <kind>.id=cpu:...   (kind: world tp pp dp pp_next pp_prev)
 *   (ids with their secret shown as "<secret>": dtrain_bootstrap_id_redact)
 * --json: the same as one JSON object per line:
 *   {"rank":3, ..., "timing_us":{"bootstrap":..,...}, "groups":{"tp":{"key":..,...}}} */
#ifndef DTRAIN_LAUNCH_REPORT_H
#define DTRAIN_LAUNCH_REPORT_H

#include <stdio.h>

#include "dtrain_bootstrap.h"
#include "exchange.h"

struct dtrain_report {
    const struct dtrain_bootstrap *bs;
    const char *placed_by;   /* "spank" or "launcher" */
    int fences;
    long init_us;            /* PMI2_Init */
    long place_us;           /* placement: checks, or planning */
    struct dtrain_exchange_times exchange;
    long bootstrap_us;       /* PMI2_Init to every id in hand */
};

/* Write the line; returns 0, or -1 when writing failed. */
int dtrain_report_text(FILE *out, const struct dtrain_report *r);
int dtrain_report_json(FILE *out, const struct dtrain_report *r);

#endif
