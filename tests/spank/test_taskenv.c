/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Unit tests of a task's environment (taskenv.c) computed from a real plan
 * of a saved DGX-1 topology (tests/fixtures/topology, a hardware stand-in),
 * and of the GPUs taken from Slurm's GRES (gres.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain_env.h"
#include "dtrain_plan.h"
#include "gres.h"
#include "taskenv.h"
#include "tap.h"

static const char *get(const struct dtrain_env_list *env, const char *name)
{
    const char *v = dtrain_task_env_get(env, name);
    return v ? v : "(unset)";
}

static int get_int(const struct dtrain_env_list *env, const char *name)
{
    const char *v = dtrain_task_env_get(env, name);
    return v ? atoi(v) : -1;
}

static void test_options_env(void)
{
    struct dtrain_options o;
    struct dtrain_env_list env;
    char err[256];

    dtrain_options_init(&o);
    dtrain_options_set(&o, DTRAIN_OPT_TP, "4", err, sizeof err);
    ok(dtrain_task_env_options(&env, &o, 0) == 0 && strcmp(get(&env, DTRAIN_ENV_TP), "4") == 0 &&
       strcmp(get(&env, DTRAIN_ENV_PP), "1") == 0 && dtrain_task_env_get(&env, DTRAIN_ENV_DP) == NULL &&
       dtrain_task_env_get(&env, DTRAIN_ENV_CKPT_DIR) == NULL &&
       dtrain_task_env_get(&env, DTRAIN_ENV_MAX_RESTARTS) == NULL && dtrain_task_env_get(&env, DTRAIN_ENV_SPARES) == NULL &&
       dtrain_task_env_get(&env, DTRAIN_ENV_STRAGGLER) == NULL &&
       strcmp(get(&env, DTRAIN_ENV_VERBOSE), "0") == 0 && strcmp(get(&env, DTRAIN_ENV_ALLOW_PCIE), "0") == 0 &&
       dtrain_task_env_get(&env, DTRAIN_ENV_RANK) == NULL,
       "batch step: T, P (default 1), flags as 0/1, no D, no ranks");
    dtrain_options_set(&o, DTRAIN_OPT_DP, "3", err, sizeof err);
    dtrain_options_set(&o, DTRAIN_OPT_CKPT_DIR, "/ck", err, sizeof err);
    dtrain_options_set(&o, DTRAIN_OPT_MAX_RESTARTS, "5", err, sizeof err);
    dtrain_options_set(&o, DTRAIN_OPT_VERBOSE, NULL, err, sizeof err);
    dtrain_options_set(&o, DTRAIN_OPT_SPARES, "2", err, sizeof err);
    dtrain_options_set(&o, DTRAIN_OPT_STRAGGLER, "drain", err, sizeof err);
    ok(dtrain_task_env_options(&env, &o, 1) == 0 && strcmp(get(&env, DTRAIN_ENV_DP), "3") == 0 &&
       strcmp(get(&env, DTRAIN_ENV_SPARES), "2") == 0 && strcmp(get(&env, DTRAIN_ENV_STRAGGLER), "drain") == 0 &&
       strcmp(get(&env, DTRAIN_ENV_CKPT_DIR), "/ck") == 0 && strcmp(get(&env, DTRAIN_ENV_MAX_RESTARTS), "5") == 0 &&
       strcmp(get(&env, DTRAIN_ENV_VERBOSE), "1") == 0 && strcmp(get(&env, DTRAIN_ENV_ALLOW_PCIE), "1") == 0,
       "given options are exported");

    memset(o.ckpt_dir, 'a', sizeof o.ckpt_dir - 1);
    o.ckpt_dir[sizeof o.ckpt_dir - 1] = '\0';
    ok(dtrain_task_env_options(&env, &o, 0) == 0 && strlen(get(&env, DTRAIN_ENV_CKPT_DIR)) == sizeof o.ckpt_dir - 1,
       "the longest checkpoint folder fits");
}

/* Plan 2 nodes x 8 tasks of a DGX-1 with T and P, check every task's env. */
static void test_plan_env(const char *fixtures, int T, int P)
{
    char path[1024], err[512], cuda[16];
    dtrain_topo *topo = NULL;
    dtrain_plan *plan = NULL;
    struct dtrain_options o;
    struct dtrain_env_list env;

    snprintf(path, sizeof path, "%s/dgx1-v100.xml", fixtures);
    if (dtrain_topo_load_xml(path, &topo, err, sizeof err) != DTRAIN_OK) {
        ok(0, "load %s: %s", path, err);
        return;
    }
    const dtrain_topo *nodes[2] = {topo, topo};
    struct dtrain_shape shape = {.tp = T, .pp = P, .dp = 0, .nnodes = 2, .tasks_per_node = 8};
    struct dtrain_policy policy = {0, 0, 0, 0, NULL, DTRAIN_CPU_BIND_CORES};
    if (dtrain_plan_place_tasks(&shape, nodes, &policy, &plan, err, sizeof err) != DTRAIN_OK) {
        ok(0, "plan T=%d P=%d: %s", T, P, err);
        dtrain_topo_free(topo);
        return;
    }
    dtrain_options_init(&o);
    int D = 16 / (T * P), good = 1, gpus_seen[2] = {0, 0};
    for (int r = 0; r < 16; r++) {
        const struct dtrain_task_placement *t = dtrain_plan_task(plan, r);
        snprintf(cuda, sizeof cuda, "%d", t->gpu);
        struct dtrain_task_where w = {.shape = dtrain_plan_shape(plan), .task = t, .local_world_size = 8,
                                      .cuda_visible = cuda, .cuda_device = 0, .gpu_visibility = "one"};
        if (dtrain_task_env_options(&env, &o, 0) != 0 || dtrain_task_env_placement(&env, &w) != 0) {
            good = 0;
            break;
        }
        int tp = get_int(&env, DTRAIN_ENV_TP_RANK), pp = get_int(&env, DTRAIN_ENV_PP_RANK),
            dp = get_int(&env, DTRAIN_ENV_DP_RANK), gpu = get_int(&env, DTRAIN_ENV_CUDA_VISIBLE);
        good &= get_int(&env, DTRAIN_ENV_RANK) == r && get_int(&env, DTRAIN_ENV_FW_RANK) == r &&
                tp + T * (dp + D * pp) == r && get_int(&env, DTRAIN_ENV_WORLD_SIZE) == 16 &&
                get_int(&env, DTRAIN_ENV_FW_WORLD_SIZE) == 16 && get_int(&env, DTRAIN_ENV_DP) == D &&
                get_int(&env, DTRAIN_ENV_LOCAL_RANK) == r % 8 && get_int(&env, DTRAIN_ENV_FW_LOCAL_RANK) == r % 8 &&
                get_int(&env, DTRAIN_ENV_FW_LOCAL_WORLD_SIZE) == 8 &&
                strcmp(get(&env, DTRAIN_ENV_GPU), dtrain_topo_gpu(topo, gpu)->busid) == 0 &&
                strcmp(get(&env, DTRAIN_ENV_CUDA_ORDER), "PCI_BUS_ID") == 0 &&
                strcmp(get(&env, DTRAIN_ENV_PLACED_BY), "spank") == 0 &&
                dtrain_task_env_get(&env, DTRAIN_ENV_CPUS) == NULL;
        if (gpu < 0 || gpu > 7 || (gpus_seen[r / 8] & (1 << gpu)))
            good = 0;
        else
            gpus_seen[r / 8] |= 1 << gpu;
    }
    ok(good && gpus_seen[0] == 0xff && gpus_seen[1] == 0xff,
       "DGX-1, T=%d P=%d: every task's RANK/coordinates/sizes agree, GPUs distinct per node", T, P);
    dtrain_plan_free(plan);
    dtrain_topo_free(topo);
}

/* --dtrain-gpu-visibility on the DGX-1 at T=2: the planner pairs GPUs that
 * are not consecutive, so LOCAL_RANK order and GPU index order differ;
 * device LOCAL_RANK of every task's list must be its planned GPU. */
static void test_visible_all(const char *fixtures)
{
    char path[1024], err[512], list[256], one[16];
    dtrain_topo *topo = NULL;
    dtrain_plan *plan = NULL;
    snprintf(path, sizeof path, "%s/dgx1-v100.xml", fixtures);
    if (dtrain_topo_load_xml(path, &topo, err, sizeof err) != DTRAIN_OK) {
        ok(0, "load %s: %s", path, err);
        return;
    }
    const dtrain_topo *nodes[1] = {topo};
    struct dtrain_shape shape = {.tp = 2, .pp = 1, .dp = 0, .nnodes = 1, .tasks_per_node = 8};
    struct dtrain_policy policy = {0, 0, 0, 0, NULL, DTRAIN_CPU_BIND_CORES};
    if (dtrain_plan_place_tasks(&shape, nodes, &policy, &plan, err, sizeof err) != DTRAIN_OK) {
        ok(0, "plan: %s", err);
        dtrain_topo_free(topo);
        return;
    }
    int gpu[8], differs = 0, good = 1, device = -1;
    for (int i = 0; i < 8; i++) {
        gpu[i] = dtrain_plan_task(plan, i)->gpu;
        differs |= gpu[i] != i;
    }
    char first[256] = "";
    for (int i = 0; i < 8; i++) {
        good &= dtrain_visible_devices(gpu, 8, 8, NULL, 1, i, list, sizeof list, &device) == 0 && device == i;
        if (i == 0)
            snprintf(first, sizeof first, "%s", list);
        good &= strcmp(first, list) == 0; /* every task of the node sees the same list */
        /* entry i of the list is the planned GPU */
        char copy[256], *save = NULL, *tok = NULL;
        snprintf(copy, sizeof copy, "%s", list);
        tok = strtok_r(copy, ",", &save);
        for (int k = 0; k < i && tok; k++)
            tok = strtok_r(NULL, ",", &save);
        good &= tok != NULL && atoi(tok) == gpu[i];
        good &= dtrain_visible_devices(gpu, 8, 8, NULL, 0, i, one, sizeof one, &device) == 0 && device == 0 &&
                atoi(one) == gpu[i];
    }
    ok(differs && good, "DGX-1 T=2: all = '%s' (device LOCAL_RANK is the planned GPU), one = the planned GPU alone",
       first);

    /* 2 tasks on 4 GRES GPUs known by UUID: the tasks' GPUs first, then the rest */
    const char tokens[4][DTRAIN_GPU_TOKEN_MAX] = {"GPU-a", "GPU-b", "GPU-c", "GPU-d"};
    int two[2] = {2, 0};
    ok(dtrain_visible_devices(two, 2, 4, tokens, 1, 1, list, sizeof list, &device) == 0 &&
       strcmp(list, "GPU-c,GPU-a,GPU-b,GPU-d") == 0 && device == 1,
       "GRES tokens: the tasks' GPUs first, the step's other GPUs after (%s), device 1 for local 1", list);
    ok(dtrain_visible_devices(two, 2, 4, tokens, 1, 0, list, 10, &device) == -2, "a list too long is refused");
    int none[1] = {-1};
    ok(dtrain_visible_devices(none, 1, 4, tokens, 1, 0, list, sizeof list, &device) == -1, "a task without a GPU");
    dtrain_plan_free(plan);
    dtrain_topo_free(topo);
}

static void test_cpus_and_no_gpu(void)
{
    struct dtrain_options o;
    struct dtrain_env_list env;
    struct dtrain_shape shape = {.tp = 1, .pp = 1, .dp = 2, .nnodes = 1, .tasks_per_node = 2};
    struct dtrain_task_placement t = {.rank = 1, .node = 0, .local_rank = 1, .dp_rank = 1, .gpu = -1};
    struct dtrain_task_where w = {.shape = &shape, .task = &t, .local_world_size = 2, .cpus = "4-7"};
    dtrain_options_init(&o);
    dtrain_task_env_options(&env, &o, 0);
    ok(dtrain_task_env_placement(&env, &w) == 0 && strcmp(get(&env, DTRAIN_ENV_CPUS), "4-7") == 0 &&
       strcmp(get(&env, DTRAIN_ENV_GPU), "") == 0 && dtrain_task_env_get(&env, DTRAIN_ENV_CUDA_VISIBLE) == NULL &&
       dtrain_task_env_get(&env, DTRAIN_ENV_CUDA_ORDER) == NULL,
       "a CPU rank: DTRAIN_CPUS set, DTRAIN_GPU empty, CUDA_VISIBLE_DEVICES left alone");
    int unique = 1;
    for (int i = 0; i < env.count; i++)
        for (int j = i + 1; j < env.count; j++)
            unique &= strcmp(env.var[i].name, env.var[j].name) != 0;
    ok(unique, "each variable appears once after the placement replaced the option values");
}

/* An AMD task: ROCR_VISIBLE_DEVICES the agent indices, HIP's 0..n-1 in
 * HIP_VISIBLE_DEVICES and CUDA_VISIBLE_DEVICES alike. */
static void test_amd(void)
{
    struct dtrain_options o;
    struct dtrain_env_list env;
    char hip[64];
    struct dtrain_shape shape = {.tp = 3, .pp = 1, .dp = 1, .nnodes = 1, .tasks_per_node = 3};
    struct dtrain_task_placement t = {.rank = 1, .node = 0, .local_rank = 1, .tp_rank = 1, .gpu = 4};
    ok(dtrain_hip_indices("4,3,5", hip, sizeof hip) == 0 && strcmp(hip, "0,1,2") == 0 &&
           dtrain_hip_indices("7", hip, sizeof hip) == 0 && strcmp(hip, "0") == 0 &&
           dtrain_hip_indices("0,1,2,3", hip, 4) == -2,
       "HIP's indices after ROCr's filter: 0..n-1 for n entries, -2 when they do not fit");
    dtrain_hip_indices("4,3,5", hip, sizeof hip);
    struct dtrain_task_where w = {.shape = &shape, .task = &t, .local_world_size = 3, .cuda_visible = hip,
                                  .rocr_visible = "4,3,5", .cuda_device = 0, .gpu_visibility = "all"};
    dtrain_options_init(&o);
    dtrain_task_env_options(&env, &o, 0);
    ok(dtrain_task_env_placement(&env, &w) == 0 && strcmp(get(&env, DTRAIN_ENV_ROCR_VISIBLE), "4,3,5") == 0 &&
           strcmp(get(&env, DTRAIN_ENV_HIP_VISIBLE), "0,1,2") == 0 &&
           strcmp(get(&env, DTRAIN_ENV_CUDA_VISIBLE), "0,1,2") == 0,
       "an AMD task: ROCR_VISIBLE_DEVICES=4,3,5, HIP_VISIBLE_DEVICES=CUDA_VISIBLE_DEVICES=0,1,2");
    w.rocr_visible = NULL;
    w.cuda_visible = "4";
    dtrain_task_env_options(&env, &o, 0);
    ok(dtrain_task_env_placement(&env, &w) == 0 && strcmp(get(&env, DTRAIN_ENV_CUDA_VISIBLE), "4") == 0 &&
           dtrain_task_env_get(&env, DTRAIN_ENV_ROCR_VISIBLE) == NULL &&
           dtrain_task_env_get(&env, DTRAIN_ENV_HIP_VISIBLE) == NULL,
       "an NVIDIA task: CUDA_VISIBLE_DEVICES only, no ROCR/HIP variables");
}

static void test_gres(void)
{
    struct dtrain_gres_gpus g;
    char err[256];

    ok(dtrain_gres_parse(NULL, "0,1", 8, &g, err, sizeof err) == 0 && g.count == 0,
       "no SLURM_STEP_GPUS: not restricted (the user's CUDA_VISIBLE_DEVICES is ignored)");
    ok(dtrain_gres_parse("", NULL, 8, &g, err, sizeof err) == 0 && g.count == 0, "empty SLURM_STEP_GPUS: not restricted");
    ok(dtrain_gres_parse("4,5,6,7", "4,5,6,7", 8, &g, err, sizeof err) == 0 && g.count == 4 && g.index[0] == 4 &&
       g.index[3] == 7 && strcmp(g.visible[0], "4") == 0 && strcmp(g.visible[3], "7") == 0,
       "GRES GPUs 4-7 without cgroup remapping");
    ok(dtrain_gres_parse("6,4", "0,1", 8, &g, err, sizeof err) == 0 && g.count == 2 && g.index[0] == 4 &&
       g.index[1] == 6 && strcmp(g.visible[0], "1") == 0 && strcmp(g.visible[1], "0") == 0,
       "cgroup-remapped indices stay paired with their GPU when sorted");
    ok(dtrain_gres_parse("2,3", NULL, 8, &g, err, sizeof err) == 0 && strcmp(g.visible[1], "3") == 0,
       "no CUDA_VISIBLE_DEVICES: the indices themselves");
    ok(dtrain_gres_parse("2,3", "GPU-aaaa,GPU-bbbb", 8, &g, err, sizeof err) == 0 &&
       strcmp(g.visible[0], "GPU-aaaa") == 0, "UUIDs are passed through");
    ok(dtrain_gres_parse("2,3", "0", 8, &g, err, sizeof err) == 0 && strcmp(g.visible[0], "2") == 0,
       "a CUDA_VISIBLE_DEVICES of another length is not paired");
    const char *bad[] = {"8", "1,1", "a", "1,,2", "-1", "0,1,2,3,4,5,6,7,8"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ok(dtrain_gres_parse(bad[i], NULL, 8, &g, err, sizeof err) == -1 && err[0] != '\0',
           "SLURM_STEP_GPUS=%s is refused (%s)", bad[i], err);
}

static void test_spawners(void)
{
    char *torchrun[] = {"/usr/bin/torchrun", "--nproc-per-node=8", "train.py"};
    char *module[] = {"python3", "-m", "torch.distributed.run", "train.py"};
    char *launch[] = {"dtrain-launch", "--timeout", "60", "--", "/venv/bin/torchrun", "train.py"};
    char *ds[] = {"deepspeed", "train.py"};
    char *plain[] = {"python3", "train.py", "--launcher", "torchrun"};
    char *plain_launch[] = {"/usr/bin/dtrain-launch", "--", "python", "-m", "mypkg.train"};
    char *trainer[] = {"dtrain-launch", "--data", "x.bin"};
    ok(dtrain_argv_spawns_workers(3, torchrun) && dtrain_argv_spawns_workers(4, module) &&
       dtrain_argv_spawns_workers(6, launch) && dtrain_argv_spawns_workers(2, ds),
       "torchrun, python -m torch.distributed.run, dtrain-launch -- torchrun, deepspeed: per-node launchers");
    ok(!dtrain_argv_spawns_workers(4, plain) && !dtrain_argv_spawns_workers(5, plain_launch) &&
       !dtrain_argv_spawns_workers(3, trainer) && !dtrain_argv_spawns_workers(0, NULL),
       "python train.py (whatever its arguments), dtrain-launch -- python -m pkg, the trainer: not");
}

/* dtrain's own trainer, which claims no MASTER_PORT (issue 32). */
static void test_own_trainer(void)
{
    char *trainer[] = {"/usr/bin/dtrain-launch", "--data", "x.bin"};
    char *print[] = {"dtrain-launch", "--print"};
    char *train[] = {"dtrain-train", "--steps", "2"};
    char *program[] = {"dtrain-launch", "--tp", "2", "--", "python", "train.py"};
    char *python[] = {"python", "train.py"};
    char *wrapped[] = {"sh", "run.sh", "dtrain-launch"};
    ok(dtrain_argv_runs_own_trainer(3, trainer) && dtrain_argv_runs_own_trainer(2, print) &&
       dtrain_argv_runs_own_trainer(3, train),
       "dtrain-launch CONFIG, dtrain-launch --print, dtrain-train: dtrain's own trainer");
    ok(!dtrain_argv_runs_own_trainer(6, program) && !dtrain_argv_runs_own_trainer(2, python) &&
       !dtrain_argv_runs_own_trainer(3, wrapped) && !dtrain_argv_runs_own_trainer(0, NULL),
       "dtrain-launch -- PROGRAM, python train.py, a script, no argv: may be a framework");
}

/* dtrain-launch --supervise's report step (one task per node, nothing placed). */
static void test_node_report(void)
{
    char *report[] = {"/opt/dtrain/bin/dtrain-launch", "--node-report"};
    char *more[] = {"dtrain-launch", "--node-report", "x"};
    char *other[] = {"dtrain-launch", "--print"};
    char *sh[] = {"sh", "--node-report"};
    ok(dtrain_argv_node_report(2, report), "dtrain-launch --node-report is the report step");
    ok(!dtrain_argv_node_report(3, more) && !dtrain_argv_node_report(2, other) && !dtrain_argv_node_report(2, sh) &&
       !dtrain_argv_node_report(0, NULL), "with more arguments, another option or another program: not");
    unsetenv("DTRAIN_NODE_REPORT");
    int none = dtrain_env_node_report();
    setenv("DTRAIN_NODE_REPORT", "yes", 1);
    int yes = dtrain_env_node_report();
    setenv("DTRAIN_NODE_REPORT", "1", 1);
    int one = dtrain_env_node_report();
    unsetenv("DTRAIN_NODE_REPORT");
    ok(!none && !yes && one, "DTRAIN_NODE_REPORT=1 (only \"1\") asks srun for it");
}

int main(void)
{
    test_spawners();
    test_own_trainer();
    test_node_report();
    const char *fixtures = getenv("DTRAIN_FIXTURES");
    test_options_env();
    if (fixtures) {
        test_plan_env(fixtures, 4, 2);
        test_plan_env(fixtures, 2, 1);
        test_plan_env(fixtures, 8, 2);
        test_visible_all(fixtures);
    } else {
        for (int i = 0; i < 7; i++)
            skip("DTRAIN_FIXTURES not set (run through make check)");
    }
    test_cpus_and_no_gpu();
    test_amd();
    test_gres();
    return tap_done();
}
