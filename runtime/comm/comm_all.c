/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Every communicator of a task in one call; see dtrain_comm.h. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/bootstrap/bootstrap_id.h"
#include "comm/comm_backend.h"
#include "dtrain_comm.h"
#include "dtrain_parse.h"

/* Bytes of an id sent over WORLD: the longest id (nccl, 261 bytes) and its
 * NUL, padded; every member sends and expects exactly this many. */
#define ID_WIRE_LEN 272
_Static_assert(ID_WIRE_LEN <= DTRAIN_BOOTSTRAP_ID_MAX, "an id sent over WORLD fits a group's id");

/* The id a member received over WORLD: a terminated id of the backend. */
static int received_id_ok(const char *buf, enum dtrain_comm_backend backend)
{
    return memchr(buf, '\0', ID_WIRE_LEN) != NULL && dtrain_bootstrap_id_backend(buf) == (int)backend;
}

/* Group g's id, from its leader to every member over WORLD along a binary
 * tree of the group's ranks: member i receives it from member (i-1)/2 and
 * passes it on to members 2i+1 and 2i+2.  One message per member (O(n)
 * bytes over the job, nothing through PMI2), log2(size) hops.  Every
 * member of WORLD calls this for its group of the same kind, in the same
 * order of kinds: a member waits only for members of its own group closer
 * to the leader, which never wait for it. */
static int share_id(dtrain_comm *world, struct dtrain_comm_group *g, enum dtrain_comm_backend backend, char *err,
                    size_t errlen)
{
    char buf[ID_WIRE_LEN];
    if (!g->present || g->size < 2)
        return DTRAIN_COMM_OK;
    memset(buf, 0, sizeof buf);
    if (g->my_rank == 0) {
        if (dtrain_snprintf(buf, sizeof buf, "%s", g->id) != 0 || dtrain_bootstrap_id_backend(buf) != (int)backend) {
            char shown[DTRAIN_BOOTSTRAP_ID_MAX];
            dtrain_bootstrap_id_redact(g->id, shown, sizeof shown);
            dtrain_snprintf(err, errlen, "the leader's id '%.32s...' is not a %s id of at most %d bytes", shown,
                            dtrain_backend_name(backend), ID_WIRE_LEN - 1);
            return DTRAIN_COMM_EINVAL;
        }
    } else {
        int from = dtrain_group_member(g, (g->my_rank - 1) / 2);
        if (dtrain_comm_recv(world, buf, sizeof buf, from) != DTRAIN_OK) {
            dtrain_snprintf(err, errlen, "receiving the group's id from rank %d over WORLD: %s", from,
                            dtrain_comm_error_message(world));
            return dtrain_comm_cause(world);
        }
        if (!received_id_ok(buf, backend)) {
            dtrain_snprintf(err, errlen, "rank %d sent '%.16s...' over WORLD, not a %s id", from, buf,
                            dtrain_backend_name(backend));
            return DTRAIN_COMM_EINVAL;
        }
        memcpy(g->id, buf, sizeof buf);
    }
    for (int child = 2 * g->my_rank + 1; child <= 2 * g->my_rank + 2 && child < g->size; child++) {
        int to = dtrain_group_member(g, child);
        if (dtrain_comm_send(world, buf, sizeof buf, to) != DTRAIN_OK) {
            dtrain_snprintf(err, errlen, "passing the group's id to rank %d over WORLD: %s", to,
                            dtrain_comm_error_message(world));
            return dtrain_comm_cause(world);
        }
    }
    return DTRAIN_COMM_OK;
}

/* The pipeline pairs' ids: this task's PP_NEXT id (it leads that pair) to
 * the next stage while the PP_PREV id comes from the previous stage, in one
 * exchange (no stage waits for a stage that waits too). */
static int share_pair_ids(dtrain_comm *world, struct dtrain_bootstrap *bs, char *err, size_t errlen)
{
    const struct dtrain_comm_group *next = &bs->groups[DTRAIN_GROUP_PP_NEXT];
    struct dtrain_comm_group *prev = &bs->groups[DTRAIN_GROUP_PP_PREV];
    char out[ID_WIRE_LEN], in[ID_WIRE_LEN];
    int to = next->present ? dtrain_group_member(next, 1) : -1;
    int from = prev->present ? dtrain_group_member(prev, 0) : -1;
    memset(out, 0, sizeof out);
    memset(in, 0, sizeof in);
    if (to >= 0 && (dtrain_snprintf(out, sizeof out, "%s", next->id) != 0 ||
                    dtrain_bootstrap_id_backend(out) != (int)bs->backend)) {
        char shown[DTRAIN_BOOTSTRAP_ID_MAX];
        dtrain_bootstrap_id_redact(next->id, shown, sizeof shown);
        dtrain_snprintf(err, errlen, "pp_next: the leader's id '%.32s...' is not a %s id", shown,
                        dtrain_backend_name(bs->backend));
        return DTRAIN_COMM_EINVAL;
    }
    if (dtrain_comm_sendrecv(world, out, to >= 0 ? sizeof out : 0, to, in, from >= 0 ? sizeof in : 0, from) !=
        DTRAIN_OK) {
        dtrain_snprintf(err, errlen, "exchanging the pipeline pairs' ids over WORLD (to rank %d, from rank %d): %s",
                        to, from, dtrain_comm_error_message(world));
        return dtrain_comm_cause(world);
    }
    if (from >= 0) {
        if (!received_id_ok(in, bs->backend)) {
            dtrain_snprintf(err, errlen, "pp_prev: rank %d sent '%.16s...' over WORLD, not a %s id", from, in,
                            dtrain_backend_name(bs->backend));
            return DTRAIN_COMM_EINVAL;
        }
        memcpy(prev->id, in, sizeof in);
    }
    return DTRAIN_COMM_OK;
}

/* Every id of bs that is not WORLD's, from its leader over `world`. */
static int share_ids(dtrain_comm *world, struct dtrain_bootstrap *bs, char *err, size_t errlen)
{
    static const enum dtrain_group_kind kinds[] = {DTRAIN_GROUP_TP, DTRAIN_GROUP_PP, DTRAIN_GROUP_DP};
    char why[256];
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        if (dtrain_group_split_off_world(bs->backend, kinds[i]))
            continue;
        int rc = share_id(world, &bs->groups[kinds[i]], bs->backend, why, sizeof why);
        if (rc != DTRAIN_COMM_OK) {
            dtrain_snprintf(err, errlen, "%s communicator (rank %d of %d): %s", dtrain_group_kind_name(kinds[i]),
                            bs->groups[kinds[i]].my_rank, bs->groups[kinds[i]].size, why);
            return rc;
        }
    }
    return share_pair_ids(world, bs, err, errlen);
}

void dtrain_comm_destroy_all(struct dtrain_comms *comms)
{
    for (int k = 0; k < DTRAIN_GROUP_KINDS; k++) {
        dtrain_comm_destroy(comms->group[k]);
        comms->group[k] = NULL;
    }
}

static int init_all(struct dtrain_bootstrap *bs, const struct dtrain_comm_options *opts, struct dtrain_comms *out,
                    char *err, size_t errlen)
{
    struct dtrain_comm_options o;
    char host[DTRAIN_COMM_HOST_ID_MAX], why[256];
    enum dtrain_comm_cause rc = DTRAIN_COMM_OK;

    memset(out, 0, sizeof *out);
    if (opts != NULL)
        o = *opts;
    else
        dtrain_comm_options_defaults(&o);
    if (o.host_id == NULL && bs->node >= 0) {
        dtrain_snprintf(host, sizeof host, "node%d", bs->node);
        o.host_id = host;
    }
    /* Whole groups in one order everywhere; the neighbour pairs of a
     * pipeline alternate (even stages their next pair first, odd stages
     * their previous one) so that all pairs come up at once instead of one
     * after the other from the last stage back. */
    const struct dtrain_comm_group *pp = &bs->groups[DTRAIN_GROUP_PP];
    int odd_stage = pp->present && pp->my_rank % 2 == 1;
    const enum dtrain_group_kind order[DTRAIN_GROUP_KINDS] = {
        DTRAIN_GROUP_WORLD, DTRAIN_GROUP_TP, DTRAIN_GROUP_PP, DTRAIN_GROUP_DP,
        odd_stage ? DTRAIN_GROUP_PP_PREV : DTRAIN_GROUP_PP_NEXT,
        odd_stage ? DTRAIN_GROUP_PP_NEXT : DTRAIN_GROUP_PP_PREV,
    };
    int i;
    for (i = 0; i < DTRAIN_GROUP_KINDS; i++) {
        struct dtrain_comm_group *g = &bs->groups[order[i]];
        if (!g->present)
            continue;
        /* nccl: the groups that cover WORLD split off it (one bootstrap
         * instead of one per group); the pipeline pairs use their ids */
        int split = out->group[DTRAIN_GROUP_WORLD] != NULL && dtrain_group_split_off_world(bs->backend, order[i]);
        if (split)
            dtrain_comm_split(out->group[DTRAIN_GROUP_WORLD], g, &o, &out->group[order[i]], &rc, why, sizeof why);
        else
            dtrain_comm_init(g, bs->backend, &o, &out->group[order[i]], &rc, why, sizeof why);
        g->listen_fd = -1; /* taken over, also on failure */
        if (rc != DTRAIN_COMM_OK) {
            dtrain_snprintf(err, errlen, "%s communicator (rank %d of %d): %s", dtrain_group_kind_name(order[i]), g->my_rank,
                            g->size, why);
            break;
        }
        /* WORLD is up: the other groups' ids come over it, not through PMI2 */
        if (order[i] == DTRAIN_GROUP_WORLD &&
            (rc = (enum dtrain_comm_cause)share_ids(out->group[DTRAIN_GROUP_WORLD], bs, err, errlen)) != 0)
            break;
        /* ... and nobody leaves WORLD (a failed init destroys it) before
         * everyone has shared them: the cpu backend's WORLD leader answers
         * the address lookups of those sends (doc/comm.md).  One float, not
         * dtrain_comm_barrier's n. */
        if (order[i] == DTRAIN_GROUP_WORLD && bs->backend == DTRAIN_COMM_CPU) {
            float token = 0;
            if (dtrain_comm_allreduce(out->group[DTRAIN_GROUP_WORLD], &token, 1, DTRAIN_REDUCE_SUM) != DTRAIN_OK) {
                rc = dtrain_comm_cause(out->group[DTRAIN_GROUP_WORLD]);
                dtrain_snprintf(err, errlen, "world communicator: waiting until every id is shared: %s",
                                dtrain_comm_error_message(out->group[DTRAIN_GROUP_WORLD]));
                break;
            }
        }
    }
    if (rc == DTRAIN_COMM_OK)
        return rc;
    for (i++; i < DTRAIN_GROUP_KINDS; i++) { /* groups not reached: their sockets */
        struct dtrain_comm_group *g = &bs->groups[order[i]];
        if (g->present && g->listen_fd >= 0)
            close(g->listen_fd);
        g->listen_fd = -1;
    }
    dtrain_comm_destroy_all(out);
    return rc;
}

enum dtrain_status dtrain_comm_init_all(struct dtrain_bootstrap *bs, const struct dtrain_comm_options *opts,
                                        struct dtrain_comms *out, enum dtrain_comm_cause *cause, char *err,
                                        size_t errlen)
{
    return comm_answer_cause(cause, init_all(bs, opts, out, err, errlen));
}
