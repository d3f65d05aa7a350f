/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain, internal: what the trainers report per step besides the
 * progress line and the JSON-lines file: the wall clock those lines carry,
 * and the Prometheus file.
 *
 * Prometheus.  With run.prom_textfile / --prom-textfile PATH, the process
 * that writes the metrics (rank 0) keeps PATH up to date in the text
 * format that node_exporter's textfile collector reads
 * (--collector.textfile.directory; PATH must end in .prom and sit in that
 * folder):
 *
 *   # HELP dtrain_step Index of the last finished training step, from 0.
 *   # TYPE dtrain_step gauge
 *   dtrain_step{job="1234"} 41
 *   ... the same for dtrain_steps_target, dtrain_loss, dtrain_val_loss
 *   (the newest validation loss, once there is one),
 *   dtrain_tokens_per_second, dtrain_mfu, dtrain_step_seconds, dtrain_learning_rate,
 *   dtrain_grad_norm, dtrain_restarts, dtrain_last_step_timestamp_seconds,
 *   and with straggler detection dtrain_straggler_rank (-1: none) and
 *   dtrain_straggler_excess_ratio (its compute time over the median, - 1)
 *
 * job is SLURM_JOB_ID (no label outside Slurm); dtrain_restarts is
 * SLURM_RESTART_COUNT (0 when unset).  The file is written whole under a
 * temporary name (PATH.tmp.PID, which the collector ignores) and renamed
 * over PATH (dtrain_io.h), so a scrape never sees half a file.  It is
 * rewritten at most once a second, and always after a run's last step, so
 * that a fast loop does not become a stream of fsyncs.  The file stays
 * after the job; dtrain_last_step_timestamp_seconds tells a stale one. */
#ifndef DTRAIN_METRICS_H
#define DTRAIN_METRICS_H

#include <stddef.h>

#include "dtrain_train.h"

/* Seconds since the Unix epoch (the "time" of each JSON metrics line). */
double dtrain_metrics_wall_clock(void);

/* MFU of a step that ran at `rate` model FLOP/s per device, against
 * *peak FLOP/s per device (0: none known, MFU 0).  A measured peak
 * (measured 1: the start-up GEMM, timed once, maybe on a noisy machine)
 * is the best rate seen so far: it rises to `rate` when the step beat it,
 * so MFU never exceeds 1.  A declared peak (--peak-flops) stays as given. */
double dtrain_mfu(double *peak, int measured, double rate);

/* A declared peak (measured 0) under a step's MFU of `mfu` > 1 is wrong
 * (nothing runs faster than its peak): the first time, sets *warned and
 * writes into buf the line that says so (the step and the figures), and
 * returns 1; else 0 (a measured peak never gives MFU > 1: dtrain_mfu). */
int dtrain_mfu_peak_warning(double mfu, int measured, double peak, long step, int *warned, char *buf,
                            size_t len);

struct dtrain_prom {
    char path[DTRAIN_PATH_MAX];
    char job[64];       /* SLURM_JOB_ID, "" outside Slurm */
    long restarts;      /* SLURM_RESTART_COUNT, 0 when unset */
    double last_write;  /* wall clock of the last write, 0: never */
    double val_loss;    /* the newest validation loss, NaN: none yet */
    int straggler_on;   /* straggler detection: dtrain_straggler_rank, dtrain_straggler_excess_ratio */
    int straggler_rank; /* -1: none */
    double straggler_excess;
};

/* The newest straggler verdict (dtrain_parallel.h), for the next write. */
void dtrain_prom_set_straggler(struct dtrain_prom *p, int on, int rank, double excess);

/* Set p up for path, reading SLURM_JOB_ID and SLURM_RESTART_COUNT.
 * DTRAIN_ERR_INPUT with one line in err for a path that does not end in
 * .prom or is too long, or a malformed variable. */
int dtrain_prom_init(struct dtrain_prom *p, const char *path, char *err, size_t errlen);

/* Rewrite the file now with step r of a run of `steps` steps.
 * DTRAIN_ERR_SYSTEM with one line in err when it cannot be written. */
int dtrain_prom_write(struct dtrain_prom *p, const struct dtrain_step_result *r, long steps,
                      char *err, size_t errlen);

/* dtrain_prom_write when a second has passed since the last write, or
 * when `last` (the run's last step); else nothing. */
int dtrain_prom_update(struct dtrain_prom *p, const struct dtrain_step_result *r, long steps, int last,
                       char *err, size_t errlen);

#endif
