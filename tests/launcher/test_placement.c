/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Unit tests of launcher/placement.c: the checks of the plugin's placement
 * against PMI2 and Slurm, and the launcher's own planning, driven through
 * the environment as srun and the SPANK plugin would set it.  The planning
 * reads this machine's real topology with hwloc (without its PCI devices). */
#include <stdlib.h>
#include <string.h>

#include "dtrain_exit.h"
#include "placement.h"
#include "tap.h"

static void set_env(const char *const *pairs)
{
    for (; pairs[0] != NULL; pairs += 2)
        setenv(pairs[0], pairs[1], 1);
}

static void clear_env(void)
{
    static const char *const names[] = {
        "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_TASKS_PER_NODE", "SLURM_NODEID", "SLURM_LOCALID",
        "SLURM_STEP_NUM_NODES", "DTRAIN_PLACED_BY", "DTRAIN_TP", "DTRAIN_PP", "DTRAIN_DP", "DTRAIN_RANK",
        "DTRAIN_WORLD_SIZE", "DTRAIN_TP_RANK", "DTRAIN_PP_RANK", "DTRAIN_DP_RANK", "DTRAIN_LOCAL_RANK",
        "DTRAIN_CPUS", "LOCAL_WORLD_SIZE",
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        unsetenv(names[i]);
}

/* Slurm's view of rank 13 of `srun -N2 -n16 --ntasks-per-node=8`. */
static void slurm_rank13(void)
{
    static const char *const env[] = {
        "SLURM_PROCID", "13", "SLURM_STEP_NUM_TASKS", "16", "SLURM_STEP_TASKS_PER_NODE", "8(x2)",
        "SLURM_NODEID", "1", "SLURM_LOCALID", "5", "SLURM_STEP_NUM_NODES", "2", NULL,
    };
    clear_env();
    set_env(env);
}

/* What the plugin exports for rank 13 of T=4 P=2 D=2 (tp 1, dp 1, pp 1). */
static void plugin_rank13(void)
{
    static const char *const env[] = {
        "DTRAIN_PLACED_BY", "spank", "DTRAIN_TP", "4", "DTRAIN_PP", "2", "DTRAIN_DP", "2", "DTRAIN_RANK", "13",
        "DTRAIN_WORLD_SIZE", "16", "DTRAIN_TP_RANK", "1", "DTRAIN_PP_RANK", "1", "DTRAIN_DP_RANK", "1",
        "DTRAIN_LOCAL_RANK", "5", "DTRAIN_CPUS", "5", "LOCAL_WORLD_SIZE", "8", NULL,
    };
    slurm_rank13();
    set_env(env);
}

/* The exit code dtrain-launch gives for the placement's status. */
static int resolve(int tp, int pp, int dp, int rank, int size, struct dtrain_placement *p, char *err, size_t errlen)
{
    struct dtrain_shape_request req = {.tp = tp, .pp = pp, .dp = dp};
    err[0] = '\0';
    return dtrain_status_exit(dtrain_placement_resolve(&req, rank, size, p, err, errlen));
}

int main(void)
{
    struct dtrain_placement p;
    char err[512];
    int rc;

    /* The launcher's plan is CPU-only, so PCI discovery adds nothing here;
     * libpciaccess, under hwloc's pci plugin, also leaks a few bytes per
     * load, which would fail this test under LeakSanitizer. */
    setenv("HWLOC_COMPONENTS", "-pci", 1);

    /* ---- with the plugin */
    plugin_rank13();
    rc = resolve(0, 0, 0, 13, 16, &p, err, sizeof err);
    ok(rc == DTRAIN_EXIT_OK && p.placed_by_plugin && p.tp == 4 && p.pp == 2 && p.dp == 2 && p.tp_rank == 1 &&
       p.dp_rank == 1 && p.pp_rank == 1 && p.local_rank == 5 && p.local_size == 8 && p.node == 1 &&
       strcmp(p.cpus, "5") == 0, "the plugin's placement of rank 13 is taken %s", err);
    ok(resolve(4, 2, 2, 13, 16, &p, err, sizeof err) == DTRAIN_EXIT_OK, "options equal to the plugin's are fine");
    rc = resolve(2, 0, 0, 13, 16, &p, err, sizeof err);
    ok(rc == DTRAIN_EXIT_USAGE && strstr(err, "--tp 2 disagrees with DTRAIN_TP=4"), "--tp 2 against the plugin's "
       "T=4: exit 2 (%s)", err);
    rc = resolve(0, 0, 0, 12, 16, &p, err, sizeof err);
    ok(rc == DTRAIN_EXIT_USAGE && strstr(err, "SLURM_PROCID=13 but PMI2 says rank 12"),
       "PMI2 rank 12 against SLURM_PROCID 13: exit 2 (%s)", err);
    setenv("SLURM_PROCID", "12", 1);
    rc = resolve(0, 0, 0, 12, 16, &p, err, sizeof err);
    ok(rc == DTRAIN_EXIT_USAGE && strstr(err, "placed rank 13 of 16 but PMI2 says rank 12"),
       "DTRAIN_RANK 13 against PMI2 rank 12: exit 2 (%s)", err);
    plugin_rank13();
    rc = resolve(0, 0, 0, 13, 32, &p, err, sizeof err);
    ok(rc == DTRAIN_EXIT_USAGE, "PMI2 size 32 against 16 tasks: exit 2 (%s)", err);
    plugin_rank13();
    setenv("DTRAIN_WORLD_SIZE", "32", 1);
    rc = resolve(0, 0, 0, 13, 16, &p, err, sizeof err);
    ok(rc == DTRAIN_EXIT_USAGE && strstr(err, "T*P*D"), "DTRAIN_WORLD_SIZE unlike T*P*D: exit 2 (%s)", err);
    plugin_rank13();
    setenv("DTRAIN_DP_RANK", "0", 1);
    rc = resolve(0, 0, 0, 13, 16, &p, err, sizeof err);
    ok(rc == DTRAIN_EXIT_USAGE && strstr(err, "rank order"), "coordinates off the rank order: exit 2 (%s)", err);
    plugin_rank13();
    setenv("DTRAIN_TP", "four", 1);
    rc = resolve(0, 0, 0, 13, 16, &p, err, sizeof err);
    ok(rc == DTRAIN_EXIT_USAGE && strstr(err, "DTRAIN_TP"), "a malformed DTRAIN_TP: exit 2 (%s)", err);
    plugin_rank13();
    unsetenv("DTRAIN_PP_RANK");
    rc = resolve(0, 0, 0, 13, 16, &p, err, sizeof err);
    ok(rc == DTRAIN_EXIT_USAGE && strstr(err, "DTRAIN_PP_RANK is not set"), "a missing plugin variable: exit 2 (%s)",
       err);

    /* ---- without the plugin: planned here, from the options */
    slurm_rank13();
    rc = resolve(4, 2, 0, 13, 16, &p, err, sizeof err);
    ok(rc == DTRAIN_EXIT_OK && !p.placed_by_plugin && p.tp == 4 && p.pp == 2 && p.dp == 2 && p.tp_rank == 1 &&
       p.dp_rank == 1 && p.pp_rank == 1 && p.node == 1 && p.local_rank == 5 && p.local_size == 8 && p.nnodes == 2,
       "--tp 4 --pp 2: rank 13 planned as (tp 1, dp 1, pp 1), node 1, local 5 %s", err);
    ok(rc == DTRAIN_EXIT_OK && p.cpus[0] != '\0', "the planner gave rank 13 CPUs: %s", p.cpus);
    setenv("DTRAIN_TP", "2", 1);
    rc = resolve(0, 0, 0, 13, 16, &p, err, sizeof err);
    ok(rc == DTRAIN_EXIT_OK && p.tp == 2 && p.pp == 1 && p.dp == 8, "no options: T from DTRAIN_TP=2, P=1, D=8 %s", err);
    unsetenv("DTRAIN_TP");
    rc = resolve(0, 0, 0, 13, 16, &p, err, sizeof err);
    ok(rc == DTRAIN_EXIT_OK && p.tp == 1 && p.pp == 1 && p.dp == 16, "nothing given: 1 x 1 x 16 %s", err);
    rc = resolve(3, 0, 0, 13, 16, &p, err, sizeof err);
    ok(rc == DTRAIN_EXIT_REFUSED, "T=3 does not divide 16 tasks: exit 3 (%s)", err);
    rc = resolve(4, 2, 4, 13, 16, &p, err, sizeof err);
    ok(rc == DTRAIN_EXIT_REFUSED, "4 x 2 x 4 is not 16 tasks: exit 3 (%s)", err);
    setenv("SLURM_STEP_TASKS_PER_NODE", "15,1", 1);
    rc = resolve(4, 2, 0, 13, 16, &p, err, sizeof err);
    ok(rc == DTRAIN_EXIT_REFUSED && strstr(err, "--ntasks-per-node"), "15,1 tasks per node: exit 3 with advice (%s)",
       err);
    setenv("SLURM_STEP_TASKS_PER_NODE", "8(x", 1);
    rc = resolve(4, 2, 0, 13, 16, &p, err, sizeof err);
    ok(rc == DTRAIN_EXIT_USAGE, "a malformed SLURM_STEP_TASKS_PER_NODE: exit 2 (%s)", err);
    setenv("SLURM_STEP_TASKS_PER_NODE", "8,8", 1);
    rc = resolve(4, 2, 0, 13, 16, &p, err, sizeof err);
    ok(rc == DTRAIN_EXIT_OK, "8,8 is read as 8 per node %s", err);
    setenv("SLURM_LOCALID", "6", 1);
    rc = resolve(4, 2, 0, 13, 16, &p, err, sizeof err);
    ok(rc == DTRAIN_EXIT_REFUSED && strstr(err, "block"), "a task out of block order: exit 3 (%s)", err);
    slurm_rank13();
    unsetenv("SLURM_STEP_TASKS_PER_NODE");
    rc = resolve(4, 2, 0, 13, 16, &p, err, sizeof err);
    ok(rc == DTRAIN_EXIT_USAGE && strstr(err, "srun"), "outside a Slurm step: exit 2 (%s)", err);

    /* ---- apply: the launcher's placement reaches the environment */
    slurm_rank13();
    rc = resolve(4, 2, 0, 13, 16, &p, err, sizeof err);
    int applied = rc == DTRAIN_EXIT_OK && dtrain_placement_apply(&p, err, sizeof err) == 0;
    const char *by = getenv("DTRAIN_PLACED_BY"), *r = getenv("RANK"), *lr = getenv("LOCAL_RANK"),
               *lws = getenv("LOCAL_WORLD_SIZE"), *dp = getenv("DTRAIN_DP_RANK"), *cpus = getenv("DTRAIN_CPUS");
    ok(applied && by && strcmp(by, "launcher") == 0 && r && strcmp(r, "13") == 0 && lr && strcmp(lr, "5") == 0 &&
       lws && strcmp(lws, "8") == 0 && dp && strcmp(dp, "1") == 0,
       "apply exports DTRAIN_PLACED_BY=launcher, RANK=13, LOCAL_RANK=5, LOCAL_WORLD_SIZE=8, DTRAIN_DP_RANK=1");
    ok(applied && cpus != NULL && (strcmp(cpus, p.cpus) == 0), "apply binds and exports DTRAIN_CPUS=%s%s%s",
       cpus ? cpus : "(unset)", p.warning[0] ? " warning: " : "", p.warning);
    clear_env();
    return tap_done();
}
