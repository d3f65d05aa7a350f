/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The cpu leader's descriptors (issue 19): it keeps one connection per
 * member (for the address lookups), more than a default soft
 * RLIMIT_NOFILE of 1024 at thousands of members.  Here 16 members and a
 * leader whose limit is lowered to 12 in its own process (the real
 * bootstrap, nothing stood in):
 *
 * - soft and hard limit 12: the leader's init fails at once with ESYS in
 *   one line naming the limit and `ulimit -n`; every member's init ends
 *   too (its own timeout, 3 s), none hangs (the harness's bound);
 * - soft limit 12, hard limit as it was: the leader raises its soft limit
 *   to the hard one, the group comes up and all-reduces right. */
#include <string.h>
#include <sys/resource.h>

#include "comm_cause.h"
#include "dtrain_comm.h"
#include "harness.h"
#include "tap.h"

#define N 16
#define LOWERED 12 /* below the group's size */

struct case_ {
    int lower_hard; /* 1: the hard limit too, so it cannot be raised */
};

static int fd_child(int rank, int n, struct dtrain_comm_group *groups, int ngroups, void *arg)
{
    (void)ngroups;
    const struct case_ *k = arg;
    struct rlimit rl;
    if (rank == 0) {
        if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
            return 10;
        rl.rlim_cur = LOWERED;
        if (k->lower_hard)
            rl.rlim_max = LOWERED;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            return 11;
    }
    struct dtrain_comm_options o;
    char host[DTRAIN_COMM_HOST_ID_MAX], err[512];
    harness_options(&o, rank, n, 1, DTRAIN_COMM_TRANSPORT_DEFAULT, k->lower_hard ? 3000 : 20000, host);
    dtrain_comm *c = NULL;
    enum dtrain_comm_cause cause;
    int status = dtrain_comm_init(&groups[0], DTRAIN_COMM_CPU, &o, &c, &cause, err, sizeof err);
    int rc = comm_cause_checked(status, cause);
    groups[0].listen_fd = -1; /* taken over */
    if (k->lower_hard) {
        if (rank == 0)
            harness_diag(rank, "%s: %s", dtrain_comm_cause_name(rc), err);
        dtrain_comm_destroy(c);
        if (rc == DTRAIN_COMM_OK)
            return 1;
        if (rank == 0 && (rc != DTRAIN_COMM_ESYS || strstr(err, "ulimit -n") == NULL || strchr(err, '\n') != NULL))
            return 2;
        return 0;
    }
    if (rc != DTRAIN_COMM_OK) {
        harness_diag(rank, "init failed: %s: %s", dtrain_comm_cause_name(rc), err);
        return 1;
    }
    float x = (float)rank;
    int failed = 0;
    if (dtrain_comm_allreduce(c, &x, 1, DTRAIN_REDUCE_SUM) != DTRAIN_OK || x != (float)(n * (n - 1) / 2))
        failed |= 1;
    if (rank == 0 && (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur <= LOWERED)) {
        harness_diag(rank, "the soft limit is still %llu", (unsigned long long)rl.rlim_cur);
        failed |= 2;
    }
    dtrain_comm_destroy(c);
    return failed;
}

int main(void)
{
    struct harness_result res;
    struct case_ hard = {.lower_hard = 1}, soft = {.lower_hard = 0};
    int rc = harness_run(N, 1, fd_child, &hard, 60, NULL, &res);
    ok(rc == 0 && res.hung == 0 && res.exit_code[0] == 0,
       "a leader that may open %d descriptors (hard limit) for %d members: init fails at once with ESYS in one line "
       "naming `ulimit -n`", LOWERED, N);
    ok(rc == 0 && res.hung == 0 && res.failed == 0, "... and every member's init ends with an error, none hangs");
    rc = harness_run(N, 1, fd_child, &soft, 60, NULL, &res);
    ok(rc == 0 && res.failed == 0,
       "a leader whose soft limit is %d (hard limit higher) for %d members: raises it, the group comes up and "
       "all-reduces right", LOWERED, N);
    return tap_done();
}
