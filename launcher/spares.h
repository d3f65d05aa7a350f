/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-launch --supervise: which nodes of the job hold ranks, which are
 * spares and which failed, and which node an ended srun step blames.
 *
 * Pure code (no Slurm calls, no processes), so tests/launcher links it as
 * is; supervise.c runs the steps.
 *
 * Roles.  The job's nodes in Slurm's order (SLURM_JOB_NODELIST expanded):
 * the first count - spares run the step, the last `spares` wait
 * (sbatch --dtrain-spares=N appends N nodes to the -N K the user asked
 * for).  A node that failed is never used again in this run of the job;
 * each one is replaced by a spare, so the step keeps its node count and
 * hence its layout (T x P x D), and the checkpoint resumes bit for bit.
 *
 * Which spare.  Each node reports where it is once (dtrain-launch
 * --node-report, one task per node, run by the supervisor before the
 * first step): its SLURM_TOPOLOGY_ADDR and _PATTERN and the multi-node
 * NVLink domain the plugin gives it (DTRAIN_NVLINK_DOMAIN).  The spare
 * nearest the failed node takes its place: in its NVLink domain, else in
 * its Slurm block (topology/block), else under its leaf switch
 * (topology/tree), else any; ties go to the first in Slurm's order.  When
 * the step keeps groups inside one NVLink domain (rank 0's layout line:
 * TP groups of several nodes, or --dtrain-pp-in-domain), a spare is taken
 * only if the step it makes still does: Slurm orders the step's nodes, so
 * the spare does not take the failed node's position, and every such
 * group of the new step is checked (the check the launcher's PMI2 round
 * makes, done before the step starts).  No such spare: the restart is
 * refused and the job takes the requeue path.
 *
 * Blame.  srun reports every task that did not exit 0 on one line
 * (Slurm 22.05 and 24.11):
 *   srun: error: node2: task 1: Killed
 *   srun: error: node1: tasks 0,2: Exited with exit code 75
 *   srun: error: Node failure on node2
 *   srun: error: Task launch for StepId=12.0 failed on node node2: ...
 * A node is to blame when a task of it was ended by a signal (a crash,
 * SIGKILL, the OOM killer: "Exited with exit code" not said) or exited
 * with a status above 128 (a shell reporting a signal), when the node
 * failed, or when the launch on it failed.  Tasks that exited 75 detected
 * a peer's fault: their node is healthy.  A hang ends every task with 75,
 * so srun blames nobody; the ranks' heartbeat (dtrain_heartbeat.h) names
 * the hung or silent rank's node in the fault line its neighbours print,
 * which srun passes through:
 *   dtrain-launch: ... heartbeat: rank 3 (node node2, GPU ...) hangs in ...
 *   dtrain-launch: ... heartbeat: rank 3 (node node2, GPU ...) sent no heartbeat ...
 * A line is a candidate only: dtrain_blame_confirmed checks it against
 * what Slurm recorded. */
#ifndef DTRAIN_LAUNCH_SPARES_H
#define DTRAIN_LAUNCH_SPARES_H

#include <stddef.h>

#include "dtrain_tree.h"

#define DTRAIN_NODE_NAME_MAX 64

enum dtrain_node_role { DTRAIN_NODE_ACTIVE, DTRAIN_NODE_SPARE, DTRAIN_NODE_FAILED };

/* Where a node is (see "Which spare" above); "" when not reported. */
#define DTRAIN_WHERE_PATTERN_MAX 64
#define DTRAIN_WHERE_DOMAIN_MAX 128 /* the launcher's PMI2 value of a domain (exchange.c) */
struct dtrain_node_where {
    int known;                              /* the node's report came */
    char addr[DTRAIN_TREE_ADDR_MAX];        /* SLURM_TOPOLOGY_ADDR */
    char pattern[DTRAIN_WHERE_PATTERN_MAX]; /* SLURM_TOPOLOGY_ADDR_PATTERN */
    char domain[DTRAIN_WHERE_DOMAIN_MAX];   /* DTRAIN_NVLINK_DOMAIN */
};

struct dtrain_node_roles {
    int count;
    char (*name)[DTRAIN_NODE_NAME_MAX];
    enum dtrain_node_role *role;
    struct dtrain_node_where *where;
    unsigned char *fresh; /* failed since the last dtrain_roles_replace */
    int failed_now;       /* how many are fresh */
};

/* The roles of `count` nodes named names[0..count-1], the last `spares`
 * of them spares.  Returns 0, or -1 with one line in err (no node left
 * for the ranks, a name too long, no memory). */
int dtrain_roles_init(struct dtrain_node_roles *r, const char *const *names, int count, int spares,
                      char *err, size_t errlen);
void dtrain_roles_free(struct dtrain_node_roles *r);

/* Nodes of a role. */
int dtrain_roles_count(const struct dtrain_node_roles *r, enum dtrain_node_role role);

/* Mark an active node failed.  Returns 1 when it was active (now failed),
 * 0 when it is not a node of the step (a spare, already failed, unknown). */
int dtrain_roles_fail(struct dtrain_node_roles *r, const char *node);

/* The report of one node, one line (no newline):
 *   dtrain-node-report NODE ADDR PATTERN DOMAIN
 * each "-" when empty.  Returns 0, or -1 when a value is empty (NODE),
 * longer than its field or holds a space or a control character. */
#define DTRAIN_WHERE_PREFIX "dtrain-node-report "
int dtrain_where_format(const char *node, const char *addr, const char *pattern, const char *domain, char *out,
                        size_t len);

/* Note a report line for the node it names.  Returns 1 when it named a
 * node of the job (its where replaced), 0 for another line, a malformed
 * report or a node not of the job. */
int dtrain_roles_note_where(struct dtrain_node_roles *r, const char *line);

/* The step's layout as rank 0's launcher says it under --supervise, one
 * line on stderr (no newline):
 *   dtrain-launch: layout T=4 P=1 D=2, 2 tasks per node; kept in one NVLink domain: TP groups
 * the last part "TP groups", "PP groups", "TP and PP groups" or "none". */
struct dtrain_spare_layout {
    int known; /* a layout line came */
    int tp, pp, dp, per_node;
    int tp_domain, pp_domain; /* groups of the kind must stay in one NVLink domain */
};
int dtrain_layout_format(const struct dtrain_spare_layout *l, char *out, size_t len);
/* 1 with *l filled (known) for such a line, else 0 and *l untouched. */
int dtrain_layout_parse(const char *line, struct dtrain_spare_layout *l);

/* How near node b is to node a, nearest first; `shared` gets what they
 * share (the domain, the block's name, the leaf switch's name). */
enum dtrain_spare_near { DTRAIN_NEAR_DOMAIN, DTRAIN_NEAR_BLOCK, DTRAIN_NEAR_LEAF, DTRAIN_NEAR_ANY };
enum dtrain_spare_near dtrain_spare_near(const struct dtrain_node_where *a, const struct dtrain_node_where *b,
                                         char *shared, size_t len);

/* One replacement: spare `spare` takes failed node `failed`'s place. */
struct dtrain_spare_pick {
    int failed, spare; /* node indexes */
    enum dtrain_spare_near near;
    char shared[DTRAIN_WHERE_DOMAIN_MAX];
};

/* "spare node4 for node1 (same leaf switch leaf1)": the pick and why. */
int dtrain_spare_pick_text(const struct dtrain_node_roles *r, const struct dtrain_spare_pick *p, char *out,
                           size_t len);

/* Replace every node failed since the last call by a spare ("Which spare"
 * above; layout NULL or not known: no group constraint).  picks (NULL, or
 * room for r->count) gets each replacement in the failed nodes' order.
 * Returns the number replaced; -1 when fewer spares are left than nodes
 * failed; -2 with one line in err when no spare left keeps the layout's
 * groups in one NVLink domain.  Nothing changes on -1 and -2. */
int dtrain_roles_replace_near(struct dtrain_node_roles *r, const struct dtrain_spare_layout *layout,
                              struct dtrain_spare_pick *picks, char *err, size_t errlen);

/* dtrain_roles_replace_near without layout or picks. */
int dtrain_roles_replace(struct dtrain_node_roles *r);

/* The nodes of a role joined with commas ("" when none).  Returns 0, or -1
 * when out is too small. */
int dtrain_roles_list(const struct dtrain_node_roles *r, enum dtrain_node_role role, char *out, size_t outlen);

/* What a line of srun's stderr blames a node for (see above). */
enum dtrain_blame {
    DTRAIN_BLAME_NONE,
    DTRAIN_BLAME_TASK,      /* srun: a task of NODE killed by a signal or exited above 128 */
    DTRAIN_BLAME_NODE,      /* srun: NODE failed, or the launch on it */
    DTRAIN_BLAME_HEARTBEAT, /* a rank's heartbeat verdict on a hung or silent rank of NODE */
};

/* The node a line of srun's stderr blames (see above), in node, and for
 * what; DTRAIN_BLAME_NONE for any other line.  srun's lines count only
 * when they begin with "srun: error: ". */
enum dtrain_blame dtrain_srun_blame(const char *line, char *node, size_t nodelen);

/* dtrain_srun_blame(...) != DTRAIN_BLAME_NONE. */
int dtrain_srun_blames(const char *line, char *node, size_t nodelen);

/* Whether Slurm's facts bear a blame out.  srun's stderr also carries every
 * task's stderr, so a task can print any of the lines above; a line is
 * believed only when what Slurm recorded agrees: a task blame when srun's
 * exit status (the highest of the tasks' exit records) says a task died of
 * a signal or exited above 128; a node blame when slurmctld holds the node
 * failed (node_failed: dtrain_node_failed's answer); a heartbeat verdict
 * when every task ended with 75 (srun exited 75: no task crashed).  Only
 * srun's blames, so borne out, drain a node (--drain): a heartbeat verdict
 * is the ranks' word and only moves the step off the node. */
int dtrain_blame_confirmed(enum dtrain_blame blame, long srun_status, int node_failed);

#endif
