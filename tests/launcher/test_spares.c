/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Unit tests of launcher/spares.c: the job's nodes by role (ranks, spares,
 * failed) through failures and replacements, and which node each of srun's
 * report lines blames (the lines as Slurm 22.05 prints them). */
#include <string.h>

#include "spares.h"
#include "tap.h"

static void test_roles(void)
{
    static const char *const names[] = {"node1", "node2", "node3", "node4"};
    struct dtrain_node_roles r;
    char err[256], list[256];

    ok(dtrain_roles_init(&r, names, 2, 2, err, sizeof err) == -1 && strstr(err, "no node is left for the ranks"),
       "2 nodes, 2 spares: refused (%s)", err);
    ok(dtrain_roles_init(&r, names, 4, -1, err, sizeof err) == -1, "negative spares: refused");
    ok(dtrain_roles_init(&r, names, 4, 0, err, sizeof err) == 0 && dtrain_roles_count(&r, DTRAIN_NODE_ACTIVE) == 4 &&
       dtrain_roles_count(&r, DTRAIN_NODE_SPARE) == 0, "no spares: every node runs ranks");
    ok(dtrain_roles_fail(&r, "node3") == 1 && dtrain_roles_replace(&r) == -1 &&
       dtrain_roles_count(&r, DTRAIN_NODE_FAILED) == 1, "no spares: a failed node cannot be replaced");
    dtrain_roles_free(&r);

    ok(dtrain_roles_init(&r, names, 4, 2, err, sizeof err) == 0 &&
       dtrain_roles_list(&r, DTRAIN_NODE_ACTIVE, list, sizeof list) == 0 && strcmp(list, "node1,node2") == 0,
       "4 nodes, 2 spares: the first 2 run ranks (%s)", list);
    ok(dtrain_roles_list(&r, DTRAIN_NODE_SPARE, list, sizeof list) == 0 && strcmp(list, "node3,node4") == 0,
       "the last 2 are spares (%s)", list);
    ok(dtrain_roles_fail(&r, "node3") == 0 && dtrain_roles_fail(&r, "node9") == 0 && r.failed_now == 0,
       "a spare or an unknown node is not marked failed");
    ok(dtrain_roles_fail(&r, "node1") == 1 && dtrain_roles_fail(&r, "node1") == 0 && dtrain_roles_replace(&r) == 1,
       "node1 fails (once) and is replaced");
    ok(dtrain_roles_list(&r, DTRAIN_NODE_ACTIVE, list, sizeof list) == 0 && strcmp(list, "node2,node3") == 0 &&
       dtrain_roles_list(&r, DTRAIN_NODE_FAILED, list, sizeof list) == 0 && strcmp(list, "node1") == 0,
       "the step now runs on node2,node3; node1 is excluded");
    ok(dtrain_roles_fail(&r, "node2") == 1 && dtrain_roles_fail(&r, "node3") == 1 && dtrain_roles_replace(&r) == -1 &&
       dtrain_roles_count(&r, DTRAIN_NODE_SPARE) == 1, "two nodes fail with one spare left: no replacement, spare kept");
    ok(dtrain_roles_list(&r, DTRAIN_NODE_FAILED, list, 8) == -1, "a list that does not fit is refused");
    dtrain_roles_free(&r);

    char longname[DTRAIN_NODE_NAME_MAX + 4];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    const char *const bad[] = {"node1", longname};
    ok(dtrain_roles_init(&r, bad, 2, 0, err, sizeof err) == -1 && strstr(err, "longer than") != NULL,
       "a node name too long is refused");
}

static void test_blame(void)
{
    static const struct { const char *line, *node; } lines[] = {
        {"srun: error: node2: task 1: Killed", "node2"},
        {"srun: error: node1: tasks 0,2: Segmentation fault (core dumped)", "node1"},
        {"srun: error: gpu-a17: tasks 4-7: Aborted", "gpu-a17"},
        {"srun: error: node3: task 5: Exited with exit code 137", "node3"},
        {"srun: error: Node failure on node2", "node2"},
        {"srun: error: Task launch for StepId=12.0 failed on node node4: Communication connection failure", "node4"},
        {"srun: error: node1: task 0: Exited with exit code 75", NULL},
        {"srun: error: node1: tasks 0-3: Exited with exit code 1", NULL},
        {"srun: Force Terminated StepId=3.0", NULL},
        {"dtrain-launch: fault: rank 0 on node1 (vm): tensor-parallel all-reduce: EPEER: ...", NULL},
        {"srun: error: Unable to create step for job 2: More processors requested than permitted", NULL},
        /* a neighbour's heartbeat verdict names the hung or silent rank's node */
        {"dtrain-launch: fault: rank 2 on node2 (vm): heartbeat: rank 3 (node node2, GPU 0000:41:00.0) hangs in "
         "forward of micro-batch 0 at step 10: alive but no progress for 1.0 s outside any communicator call, "
         "while rank 2 waits on it in a TP call: exit 75", "node2"},
        {"dtrain-launch: fault: rank 0 on node1 (vm): heartbeat: rank 1 (node gpu-b3, GPU -) sent no heartbeat for "
         "2.1 s (last seen in backward at step 4): it is stopped or its node unreachable; rank 0 waits in a DP call",
         "gpu-b3"},
        {"dtrain-launch: fault: rank 0 on n1 (vm): heartbeat: rank 1 (node -, GPU -) hangs in forward", NULL},
        {"echo heartbeat: rank 1 (node node9, GPU -) hangs in forward", NULL},
        {"dtrain-launch: heartbeat: rank 1 (node node9, GPU -) is fine", NULL},
        {"", NULL},
    };
    for (size_t k = 0; k < sizeof lines / sizeof lines[0]; k++) {
        char node[DTRAIN_NODE_NAME_MAX] = "";
        int got = dtrain_srun_blames(lines[k].line, node, sizeof node);
        ok(lines[k].node ? got == 1 && strcmp(node, lines[k].node) == 0 : got == 0, "'%s': %s", lines[k].line,
           got ? node : "no node blamed");
    }
}

/* What a line blames a node for, and when Slurm's facts bear it out. */
static void test_blame_confirmed(void)
{
    char node[DTRAIN_NODE_NAME_MAX];
    ok(dtrain_srun_blame("srun: error: node2: task 1: Killed", node, sizeof node) == DTRAIN_BLAME_TASK &&
       dtrain_srun_blame("srun: error: Node failure on node2", node, sizeof node) == DTRAIN_BLAME_NODE &&
       dtrain_srun_blame("srun: error: Task launch for StepId=1.0 failed on node node2: x", node, sizeof node) ==
           DTRAIN_BLAME_NODE, "a task blame and a node blame");
    ok(dtrain_srun_blame("cannot open data /x/srun: error: node1: task 0: Killed", node, sizeof node) ==
           DTRAIN_BLAME_NONE &&
       dtrain_srun_blame(" srun: error: Node failure on node1", node, sizeof node) == DTRAIN_BLAME_NONE,
       "srun's words inside a longer line are not srun's");
    ok(dtrain_blame_confirmed(DTRAIN_BLAME_TASK, 137, -1) && dtrain_blame_confirmed(DTRAIN_BLAME_TASK, 129, -1) &&
       !dtrain_blame_confirmed(DTRAIN_BLAME_TASK, 75, -1) && !dtrain_blame_confirmed(DTRAIN_BLAME_TASK, 1, -1) &&
       !dtrain_blame_confirmed(DTRAIN_BLAME_TASK, 128, -1),
       "a task blame holds only when srun's status says a task died of a signal");
    ok(dtrain_blame_confirmed(DTRAIN_BLAME_NODE, 1, 1) && !dtrain_blame_confirmed(DTRAIN_BLAME_NODE, 137, 0) &&
       !dtrain_blame_confirmed(DTRAIN_BLAME_NODE, 75, -1), "a node blame holds only when slurmctld holds it failed");
    ok(dtrain_blame_confirmed(DTRAIN_BLAME_HEARTBEAT, 75, -1) && !dtrain_blame_confirmed(DTRAIN_BLAME_HEARTBEAT, 1, -1) &&
       !dtrain_blame_confirmed(DTRAIN_BLAME_HEARTBEAT, 137, -1) && !dtrain_blame_confirmed(DTRAIN_BLAME_NONE, 137, 1),
       "a heartbeat verdict holds only when every task exited 75");
}

int main(void)
{
    test_roles();
    test_blame();
    test_blame_confirmed();
    return tap_done();
}
