/* SPDX-License-Identifier: GPL-2.0-or-later */
/* comm_probe: a child PROGRAM of dtrain-launch (tests/comm/slurm_comm.sh).
 *
 *   srun --mpi=pmi2 dtrain-launch --tp T --pp P -- comm_probe
 *
 * Reads the bootstrap dtrain-launch left in DTRAIN_COMM_* (and SLURM_NODEID
 * as the host: tasks of different Slurm nodes talk TCP even on one
 * machine), builds every communicator with dtrain_comm_init_all, and checks
 * on each: an all-reduce of 100003 floats against the sum over the group's
 * members computed from (first, stride); on WORLD also a broadcast from the
 * last rank; on the pipeline pairs a sendrecv (activations forward,
 * gradients back).  Prints one line:
 *   comm_probe rank=R node=N world=ok tp=ok pp=ok dp=ok pairs=ok world_shm=S world_tcp=T
 * and exits 0 when everything held, 1 otherwise (with a line on stderr). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain_comm.h"

#define PROG "comm_probe"
#define COUNT 100003

static float value(int global_rank, size_t i)
{
    return (float)(global_rank * 3 + (int)(i % 7));
}

static int check_allreduce(dtrain_comm *c, const struct dtrain_comm_group *g, int rank, const char *name)
{
    float *buf = malloc(COUNT * sizeof *buf);
    if (buf == NULL)
        return 1;
    for (size_t i = 0; i < COUNT; i++)
        buf[i] = value(rank, i);
    int rc = dtrain_comm_allreduce(c, buf, COUNT, DTRAIN_REDUCE_SUM), bad = rc != 0;
    for (size_t i = 0; i < COUNT && !bad; i++) {
        float want = 0;
        for (int m = 0; m < g->size; m++)
            want += value(dtrain_group_member(g, m), i);
        bad = buf[i] != want;
    }
    if (bad)
        fprintf(stderr, PROG ": rank %d: %s all-reduce: %s %s\n", rank, name,
                dtrain_comm_cause_name(dtrain_comm_cause(c)),
                rc ? dtrain_comm_error_message(c) : "wrong values");
    free(buf);
    return bad;
}

int main(void)
{
    static const char *const names[DTRAIN_GROUP_KINDS] = {"world", "tp", "pp", "dp", "pp_next", "pp_prev"};
    struct dtrain_bootstrap bs;
    struct dtrain_comms comms;
    struct dtrain_comm_options opts;
    char err[512];
    int bad[DTRAIN_GROUP_KINDS] = {0};

    if (dtrain_comm_bootstrap_from_env(&bs, err, sizeof err) != 0) {
        fprintf(stderr, PROG ": %s\n", err);
        return 2;
    }
    dtrain_comm_options_defaults(&opts);
    opts.timeout_ms = 30000;
    if (dtrain_comm_init_all(&bs, &opts, &comms, NULL, err, sizeof err) != 0) {
        fprintf(stderr, PROG ": rank %d: %s\n", bs.rank, err);
        return 1;
    }
    for (int k = DTRAIN_GROUP_WORLD; k <= DTRAIN_GROUP_DP; k++)
        if (comms.group[k] != NULL)
            bad[k] = check_allreduce(comms.group[k], &bs.groups[k], bs.rank, names[k]);
    /* WORLD: a broadcast from the last rank. */
    dtrain_comm *world = comms.group[DTRAIN_GROUP_WORLD];
    int token = bs.rank == bs.world_size - 1 ? 4242 : -1;
    if (dtrain_comm_broadcast(world, &token, sizeof token, bs.world_size - 1) != 0 || token != 4242) {
        fprintf(stderr, PROG ": rank %d: world broadcast: %s\n", bs.rank, dtrain_comm_error_message(world));
        bad[DTRAIN_GROUP_WORLD] = 1;
    }
    /* Pipeline pairs: even stages talk to their next first, odd to their
     * previous, as a 1F1B schedule's neighbours would. */
    int pairs_bad = 0;
    for (int pass = 0; pass < 2; pass++) {
        int k = (bs.pp_rank + pass) % 2 == 0 ? DTRAIN_GROUP_PP_NEXT : DTRAIN_GROUP_PP_PREV;
        dtrain_comm *c = comms.group[k];
        if (c == NULL)
            continue;
        int other = 1 - dtrain_comm_rank(c), out = bs.rank, in = -1;
        int peer_global = dtrain_group_member(&bs.groups[k], other);
        if (dtrain_comm_sendrecv(c, &out, sizeof out, other, &in, sizeof in, other) != 0 || in != peer_global) {
            fprintf(stderr, PROG ": rank %d: %s sendrecv: got %d, want %d: %s\n", bs.rank, names[k], in,
                    peer_global, dtrain_comm_error_message(c));
            pairs_bad = 1;
        }
    }
    struct dtrain_comm_stats st;
    dtrain_comm_get_stats(world, &st);
    int any = pairs_bad;
    for (int k = 0; k < DTRAIN_GROUP_KINDS; k++)
        any |= bad[k];
    printf(PROG " rank=%d node=%d world=%s tp=%s pp=%s dp=%s pairs=%s world_shm=%d world_tcp=%d\n", bs.rank, bs.node,
           bad[0] ? "bad" : "ok", bad[1] ? "bad" : "ok", bad[2] ? "bad" : "ok", bad[3] ? "bad" : "ok",
           pairs_bad ? "bad" : "ok", st.shm_links, st.tcp_links);
    /* Nobody leaves while a peer may still read from it. */
    if (dtrain_comm_barrier(world) != 0)
        any = 1;
    dtrain_comm_destroy_all(&comms);
    return any;
}
