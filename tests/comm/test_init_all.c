/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain_comm_init_all with only WORLD's id in the members' hands, as
 * dtrain-launch gives them (only WORLD's id goes through PMI2): the other
 * groups' ids go from their leaders to their members over WORLD.  T x P x D
 * ranks forked on this host (tests/parallel/local_boot: the launcher's
 * groups and cpu ids, members get WORLD's id only), cpu backend:
 *   - every communicator comes up and all-reduces the global ranks of its
 *     members right (each rank checks against the group's arithmetic);
 *   - the ids cost one message per member and group: WORLD's received
 *     bytes after init are exactly 272 per group the rank joins but does
 *     not lead (TP, PP, DP, its previous pipeline pair);
 *   - a leader whose id is malformed: its init and its member's fail with
 *     EINVAL naming the group and the id, the other ranks fail too (EPEER
 *     or a timeout), none hangs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_cause.h"
#include "dtrain_comm.h"
#include "parallel/local_boot.h"
#include "tap.h"

#define ID_WIRE_LEN 272 /* what comm_all.c sends per id */

struct ctx {
    int tcp;
    int bad_leader; /* 1: rank 0 breaks its TP id before init */
};

struct result {
    int init_rc;
    int empty_on_entry; /* groups other than WORLD whose id was empty on entry */
    int sums_ok;
    int kinds_checked;
    uint64_t world_received;
    uint64_t expected_received;
    char msg[240];
};

static int rank_fn(struct dtrain_bootstrap *bs, void *out, void *arg)
{
    const struct ctx *c = arg;
    struct result *res = out;
    struct dtrain_comms comms;
    for (int k = 1; k < DTRAIN_GROUP_KINDS; k++) {
        const struct dtrain_comm_group *g = &bs->groups[k];
        if (g->present && g->size > 1 && g->my_rank > 0) {
            res->empty_on_entry += g->id[0] == '\0';
            res->expected_received += ID_WIRE_LEN;
        }
    }
    /* init_all ends the sharing with a one-float all-reduce over WORLD (so
     * that nobody leaves WORLD before every id is shared): in the ring's
     * reduce phase every member but rank 1 receives the float, in its
     * gather phase every member but rank 0 (runtime/comm/cpu/ring.c). */
    if (bs->groups[DTRAIN_GROUP_WORLD].size > 1)
        res->expected_received += sizeof(float) * (uint64_t)((bs->rank != 1) + (bs->rank != 0));
    if (c->bad_leader && bs->rank == 0)
        snprintf(bs->groups[DTRAIN_GROUP_TP].id, sizeof bs->groups[DTRAIN_GROUP_TP].id, "cpu:not-an-id");
    enum dtrain_comm_cause cause;
    int status = local_boot_comms(bs, 5000, c->tcp, &comms, &cause, res->msg, sizeof res->msg);
    res->init_rc = comm_cause_checked(status, cause);
    if (res->init_rc != DTRAIN_COMM_OK)
        return 1;
    struct dtrain_comm_stats st;
    dtrain_comm_get_stats(comms.group[DTRAIN_GROUP_WORLD], &st);
    res->world_received = st.bytes_received;
    res->sums_ok = 1;
    for (int k = 0; k < DTRAIN_GROUP_KINDS; k++) {
        const struct dtrain_comm_group *g = &bs->groups[k];
        if (!g->present)
            continue;
        float x = (float)bs->rank, want = 0;
        for (int i = 0; i < g->size; i++)
            want += (float)dtrain_group_member(g, i);
        if (comms.group[k] == NULL || dtrain_comm_allreduce(comms.group[k], &x, 1, DTRAIN_REDUCE_SUM) != 0 ||
            x != want) {
            res->sums_ok = 0;
            snprintf(res->msg, sizeof res->msg, "%s: sum %g, want %g", dtrain_group_kind_name((enum dtrain_group_kind)k),
                     (double)x, (double)want);
        }
        res->kinds_checked++;
    }
    int bad = dtrain_comm_barrier(comms.group[DTRAIN_GROUP_WORLD]) != 0;
    dtrain_comm_destroy_all(&comms);
    return bad || !res->sums_ok;
}

static void run_good(int T, int P, int D, int tcp)
{
    struct ctx c = {tcp, 0};
    struct result res[LOCAL_BOOT_MAX_WORLD];
    int codes[LOCAL_BOOT_MAX_WORLD], n = T * P * D;
    char err[256] = "";
    memset(res, 0, sizeof res);
    int rc = local_boot_run(T, P, D, rank_fn, &c, sizeof res[0], res, codes, 60, err, sizeof err);
    int empty = 0, members = 0, bytes_ok = 1, kinds = 0;
    for (int r = 0; r < n; r++) {
        members += (int)(res[r].expected_received / ID_WIRE_LEN);
        empty += res[r].empty_on_entry;
        kinds += res[r].kinds_checked;
        if (res[r].world_received != res[r].expected_received) {
            bytes_ok = 0;
            diag("rank %d: WORLD received %llu bytes, expected %llu", r, (unsigned long long)res[r].world_received,
                 (unsigned long long)res[r].expected_received);
        }
        if (codes[r] != 0)
            diag("rank %d: exit %d: %s", r, codes[r], res[r].msg);
    }
    const char *how = tcp ? "tcp" : "shared memory";
    ok(rc == 0 && empty == members && members > 0,
       "T=%d P=%d D=%d %s: with only WORLD's id on entry (%d member ids empty), every rank builds every communicator "
       "(%d checked) and all-reduces right%s%s", T, P, D, how, empty, kinds, rc ? ": " : "", rc ? err : "");
    ok(rc == 0 && bytes_ok, "T=%d P=%d D=%d %s: WORLD carried exactly one %d-byte id per member and group "
       "(%d ids, %d bytes in all) and the one float of the all-reduce that ends the sharing", T, P, D, how, ID_WIRE_LEN, members, members * ID_WIRE_LEN);
}

static void run_bad_leader(void)
{
    struct ctx c = {0, 1};
    struct result res[LOCAL_BOOT_MAX_WORLD];
    int codes[LOCAL_BOOT_MAX_WORLD];
    char err[256] = "";
    memset(res, 0, sizeof res);
    local_boot_run(2, 2, 2, rank_fn, &c, sizeof res[0], res, codes, 60, err, sizeof err);
    int all_failed = 1, none_hung = 1;
    for (int r = 0; r < 8; r++) {
        all_failed &= codes[r] != 0 && res[r].init_rc != DTRAIN_COMM_OK;
        none_hung &= codes[r] != -1;
    }
    diag("rank 0: %s", res[0].msg);
    diag("rank 1: %s", res[1].msg);
    ok(res[0].init_rc == DTRAIN_COMM_EINVAL && strstr(res[0].msg, "tp communicator") != NULL &&
           strstr(res[0].msg, "'cpu:not-an-id' is not a cpu bootstrap id") != NULL &&
           res[1].init_rc == DTRAIN_COMM_EINVAL && strchr(res[1].msg, ')') != NULL &&
           strcmp(strchr(res[1].msg, ')'), strchr(res[0].msg, ')')) == 0,
       "a leader with a malformed TP id: its init and its member's (which got the id over WORLD) fail with EINVAL "
       "naming the group and the id");
    ok(all_failed && none_hung, "... and every other rank's init fails too, none hangs (exit codes %d %d %d %d %d %d %d %d)",
       codes[0], codes[1], codes[2], codes[3], codes[4], codes[5], codes[6], codes[7]);
}

int main(void)
{
    run_good(2, 2, 2, 0);
    run_good(1, 4, 2, 0);
    run_good(2, 2, 2, 1);
    run_good(4, 1, 3, 0);
    run_bad_leader();
    return tap_done();
}
