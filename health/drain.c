/* dtrain-health: drain through libslurm; see drain.h. */
#include "drain.h"

#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>
#include <string.h>
#include <unistd.h>

#include "bounded.h"
#include "dtrain_parse.h"
#include "facts.h"

struct drain_request {
    const char *node;
    const char *reason;
};

struct drain_answer {
    int ok;
    char error[HEALTH_ERROR_LEN];
};

static void drain_child(const void *arg, void *out, struct health_stage *stage)
{
    const struct drain_request *req = arg;
    struct drain_answer *answer = out;
    update_node_msg_t msg;

    health_stage_set(stage, "slurm_init");
    slurm_init(NULL);
    slurm_init_update_node_msg(&msg);
    /* libslurm takes char *, but does not write through these. */
    msg.node_names = (char *)req->node;
    msg.reason = (char *)req->reason;
    msg.node_state = NODE_STATE_DRAIN;
    msg.reason_uid = getuid();
    health_stage_set(stage, "slurm_update_node (is slurmctld up?)");
    if (slurm_update_node(&msg) == SLURM_SUCCESS)
        answer->ok = 1;
    else
        dtrain_snprintf(answer->error, sizeof(answer->error), "%s", slurm_strerror(slurm_get_errno()));
    slurm_fini();
}

int health_drain(const char *node, const char *reason, int timeout_ms, char *err, size_t errlen)
{
    struct drain_request req = {.node = node, .reason = reason};
    struct drain_answer answer;
    char why[HEALTH_ERROR_LEN];
    if (health_run_bounded(drain_child, &req, &answer, sizeof(answer), timeout_ms, why, sizeof(why)) !=
        HEALTH_BOUNDED_OK) {
        dtrain_snprintf(err, errlen, "cannot drain %s: libslurm %s", node, why);
        return -1;
    }
    if (!answer.ok) {
        dtrain_snprintf(err, errlen, "cannot drain %s: slurmctld answered: %s", node, answer.error);
        return -1;
    }
    return 0;
}
