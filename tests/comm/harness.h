/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Running one test as n local processes that form communicators, without
 * Slurm: the parent makes each group's bootstrap id with the launcher's own
 * code (dtrain_bootstrap_id_make_cpu: a listening socket on 127.0.0.1 and a
 * secret), forks n children, and gives child i the groups as
 * dtrain-launch would (rank i, listen_fd for the leader).  Each child runs
 * the test function and exits 0 when it passed.  The parent kills the
 * children that are still running after a bound, so a test that hangs
 * fails instead of hanging the suite.
 *
 * Children print their diagnostics as TAP comments ("# rank 2: ..."). */
#ifndef DTRAIN_TEST_COMM_HARNESS_H
#define DTRAIN_TEST_COMM_HARNESS_H

#include <stddef.h>
#include <sys/types.h>

#include "dtrain_comm.h"

#define HARNESS_MAX_RANKS 16
#define HARNESS_MAX_GROUPS 4

/* Child i's test: groups[0..ngroups) are its memberships (all of ranks
 * 0..n-1).  Return 0 when everything held, else 1..127: the child's exit code. */
typedef int (*harness_fn)(int rank, int n, struct dtrain_comm_group *groups, int ngroups, void *arg);

struct harness_result {
    int exit_code[HARNESS_MAX_RANKS]; /* per child: its exit code, 128+signal, or -1 when killed at the bound */
    int failed;                       /* children that did not exit 0 */
    int hung;                         /* children killed at the bound */
};

/* What the parent knows once the children run. */
struct harness_started {
    int n;
    pid_t pids[HARNESS_MAX_RANKS];
    char ids[HARNESS_MAX_GROUPS][DTRAIN_BOOTSTRAP_ID_MAX]; /* each group's bootstrap id */
};

/* Fork n children running fn; wait at most bound_s seconds (then SIGKILL).
 * after_start (may be NULL) runs in the parent once all children run, e.g.
 * to kill one of them or to knock at the leader's door.  Returns 0, or -1
 * when the harness itself failed (message on stdout as a TAP comment). */
int harness_run(int n, int ngroups, harness_fn fn, void *arg, int bound_s,
                void (*after_start)(const struct harness_started *s, void *arg), struct harness_result *res);

/* Children report failed parts of a test as bits of their exit code
 * (bit p: part p).  1 when some child failed part p, crashed, hung or
 * did not start; 0 when part p held everywhere. */
int harness_part_failed(const struct harness_result *res, int n, int part);

/* Options for a child's communicator: timeout, transport, and a host id
 * from `hosts` fake hosts (rank i on host i * hosts / n), so that TCP
 * between "hosts" is exercised on one machine. */
void harness_options(struct dtrain_comm_options *o, int rank, int n, int hosts, enum dtrain_comm_transport t,
                     int timeout_ms, char host_buf[DTRAIN_COMM_HOST_ID_MAX]);

/* Init one communicator in a child; prints a diagnostic on failure. */
int harness_init(struct dtrain_comm_group *g, const struct dtrain_comm_options *o, dtrain_comm **out);

/* The payload bytes c counted since *before against sent and received
 * (a diagnostic naming `what` when they differ); *before becomes now.
 * 0 when they match, else 1. */
int harness_check_bytes(int rank, struct dtrain_comm_stats *before, dtrain_comm *c, uint64_t sent,
                        uint64_t received, const char *what);

/* Printing from a child: "# rank R: ..." (one line, flushed). */
void harness_diag(int rank, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
