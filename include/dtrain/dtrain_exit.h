/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain process exit codes: one table shared by every dtrain program.
 *
 * Slurm sees these as the job or step exit status, so they are the contract
 * with slurm.conf: `RequeueExit=75` (etc/slurm/dtrain.conf, installed to
 * $(pkgdatadir)/slurm/dtrain.conf for the admin to copy) makes Slurm requeue a batch job that
 * ends with DTRAIN_EXIT_REQUEUE.
 * sysexits.h values are used where one fits, so that other tools read them
 * the same way. */
#ifndef DTRAIN_EXIT_H
#define DTRAIN_EXIT_H

enum dtrain_exit {
    DTRAIN_EXIT_OK = 0,        /* done: the work finished */
    DTRAIN_EXIT_FAILURE = 1,   /* internal error (a bug or an unexpected system error); do not retry */
    DTRAIN_EXIT_USAGE = 2,     /* bad input: option, config, data, checkpoint; do not retry */
    DTRAIN_EXIT_REFUSED = 3,   /* the job shape cannot be placed on these nodes; do not retry */
    DTRAIN_EXIT_REQUEUE = 75,  /* EX_TEMPFAIL: fault detected; requeue and resume */
};

#endif
