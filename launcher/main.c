/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-launch: bootstrap every communicator of a dtrain job in one PMI2
 * round, then run the trainer (dtrain-rank) or a PROGRAM with the result in
 * its environment.
 *
 *   srun --mpi=pmi2 dtrain-launch [options] [CONFIG.json [TRAINER FLAGS...]]
 *   srun --mpi=pmi2 dtrain-launch [options] -- PROGRAM ARGS...
 *
 * Order: options -> PMI2_Init -> placement (plugin's, checked; or planned
 * here) -> ids, puts, ONE fence, gets -> PMI2_Finalize -> hand-off: the
 * bootstrap in DTRAIN_COMM_* variables (handoff.h) for dtrain-rank, the
 * 3D-parallel trainer (rank_main.c, dtrain_parallel.h), or for PROGRAM.
 * This program links no runtime: --job-exit and --print load neither
 * OpenBLAS, CUDA nor NCCL (NCCL is loaded only to make an nccl id).
 * doc/dtrain-launch.1 is the manual, doc/bootstrap.md the key scheme. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap_id.h"
#include "dtrain_bootstrap.h"
#include "dtrain_env.h"
#include "dtrain_exit.h"
#include "dtrain_parse.h"
#include "dtrain_plan.h"
#include "exchange.h"
#include "dtrain_fault.h"
#include "handoff.h"
#include "job_exit.h"
#include "placement.h"
#include "pmi.h"
#include "rendezvous.h"
#include "supervise.h"
#include "spares.h"
#include "report.h"
#include "dtrain_clock.h"

#define PROG "dtrain-launch"
#define DEFAULT_TIMEOUT_S 300

enum output_mode { OUTPUT_NONE, OUTPUT_TEXT, OUTPUT_JSON };

struct options {
    struct dtrain_shape_request shape;
    int backend_given;
    enum dtrain_comm_backend backend;
    const char *iface;
    int timeout_s;
    enum output_mode output;
    char **program; /* argv after "--", NULL when none */
    long job_exit;  /* --job-exit STATUS, -1 when not given */
    int slurm_requeue; /* --slurm-requeue */
    int supervise;     /* --supervise (supervise.h) */
    int drain;         /* --drain, with --supervise */
    int node_report;   /* --node-report (supervise.h) */
    int done;          /* --help or --version answered: nothing else to do */
    int trainer_argc; /* the trainer's arguments: CONFIG.json and flags */
    char **trainer_argv;
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: srun --mpi=pmi2 " PROG " [options] [CONFIG.json] [TRAINER FLAGS...]\n"
            "       srun --mpi=pmi2 " PROG " [options] -- PROGRAM [ARGS...]\n"
            "Bootstraps every communicator of a dtrain job (world, TP, PP, DP, PP neighbours) in one\n"
            "PMI2 round, then runs the dtrain 3D-parallel trainer, or PROGRAM, with the ids in\n"
            "DTRAIN_COMM_* variables.  The trainer's arguments (those of dtrain-train, plus\n"
            "--micro-batches, --zero-stage, --bucket-mb, --dp-overlap) start at the first argument that is\n"
            "not an option below.\n"
            "  -t, --tp T            tensor-parallel size (default: DTRAIN_TP, else 1)\n"
            "  -p, --pp P            pipeline-parallel size (default: DTRAIN_PP, else 1)\n"
            "  -d, --dp D            data-parallel size (default: DTRAIN_DP, else tasks / (T*P))\n"
            "      --comm-backend B  communication backend, cpu or nccl (default: cpu for the trainer;\n"
            "                        nccl for a PROGRAM when built with CUDA and a GPU is visible)\n"
            "  -i, --comm-iface IF   network interface whose IPv4 address cpu-backend sockets use\n"
            "      --timeout S       give up when a PMI2 call takes more than S seconds (default %d; exit 75)\n"
            "      --print           print this task's placement, groups and ids as key=value\n"
            "      --json            the same as one JSON object\n"
            "      --job-exit STATUS in the batch script after the srun step (exec " PROG " --job-exit $?):\n"
            "                        exit 75 for a fault (75, a task killed by a signal) while restarts remain\n"
            "                        (SLURM_RESTART_COUNT < DTRAIN_MAX_RESTARTS), so that RequeueExit=75 requeues\n"
            "                        the job; 1 once they are spent; 0, 1, 2, 3 as they are\n"
            "      --slurm-requeue   with --job-exit or --supervise: also ask slurmctld to requeue the job (slurm_requeue)\n"
            "      --supervise       in the batch script (exec " PROG " --supervise -- srun ...): run the srun step on\n"
            "                        the nodes that are not spares (--dtrain-spares), and after a fault that srun\n"
            "                        blames on a node, start it again at once on the healthy nodes and a spare,\n"
            "                        within the restart budget; else exit as --job-exit would\n"
            "      --drain           with --supervise: also drain the failed node, with the reason (needs SlurmUser or root)\n"
            "      --node-report     print one line saying where this task's node is (its Slurm topology address\n"
            "                        and NVLink domain) and exit: --supervise's own step, one task per node\n"
            "  -h, --help            this text\n"
            "  -V, --version         the version\n"
            "With --print or --json and neither PROGRAM nor CONFIG, it stops after printing.\n"
            "Exit: 0 done, 1 internal error (or restarts spent), 2 bad input, 3 shape refused, 75 a fault: requeue.\n"
            "See dtrain-launch(1).\n",
            DEFAULT_TIMEOUT_S);
}

static enum dtrain_status parse_dim(const char *opt, const char *text, long max, int *out)
{
    char err[256];
    long v;
    if (dtrain_parse_int(text, 1, max, opt, &v, err, sizeof err) != 0) {
        fprintf(stderr, PROG ": %s\n", err);
        return DTRAIN_ERR_INPUT;
    }
    *out = (int)v;
    return DTRAIN_OK;
}

/* Returns DTRAIN_OK to go on (or, with o->done, to exit 0: --help,
 * --version), else DTRAIN_ERR_INPUT, said on stderr. */
static enum dtrain_status parse_options(int argc, char **argv, struct options *o)
{
    enum { OPT_TIMEOUT = 256, OPT_PRINT, OPT_JSON, OPT_COMM_BACKEND, OPT_JOB_EXIT, OPT_SLURM_REQUEUE, OPT_SUPERVISE,
           OPT_DRAIN, OPT_NODE_REPORT };
    static const struct option longopts[] = {
        {"tp", required_argument, NULL, 't'},
        {"pp", required_argument, NULL, 'p'},
        {"dp", required_argument, NULL, 'd'},
        {"comm-backend", required_argument, NULL, OPT_COMM_BACKEND},
        {"comm-iface", required_argument, NULL, 'i'},
        {"timeout", required_argument, NULL, OPT_TIMEOUT},
        {"print", no_argument, NULL, OPT_PRINT},
        {"json", no_argument, NULL, OPT_JSON},
        {"job-exit", required_argument, NULL, OPT_JOB_EXIT},
        {"slurm-requeue", no_argument, NULL, OPT_SLURM_REQUEUE},
        {"supervise", no_argument, NULL, OPT_SUPERVISE},
        {"drain", no_argument, NULL, OPT_DRAIN},
        {"node-report", no_argument, NULL, OPT_NODE_REPORT},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    memset(o, 0, sizeof *o);
    o->timeout_s = DEFAULT_TIMEOUT_S;
    o->job_exit = -1;
    opterr = 0;
    int c, trainer_from = -1;
    /* "+": stop at the first non-option, so PROGRAM's own options stay its own. */
    while ((c = getopt_long(argc, argv, "+:t:p:d:i:hV", longopts, NULL)) != -1) {
        switch (c) {
        case 't': if (parse_dim("--tp", optarg, DTRAIN_PLAN_MAX_DIM, &o->shape.tp) != 0) return DTRAIN_ERR_INPUT; break;
        case 'p': if (parse_dim("--pp", optarg, DTRAIN_PLAN_MAX_DIM, &o->shape.pp) != 0) return DTRAIN_ERR_INPUT; break;
        case 'd': if (parse_dim("--dp", optarg, DTRAIN_PLAN_MAX_DIM, &o->shape.dp) != 0) return DTRAIN_ERR_INPUT; break;
        case OPT_TIMEOUT:
            if (parse_dim("--timeout", optarg, 86400, &o->timeout_s) != 0)
                return DTRAIN_ERR_INPUT;
            break;
        case OPT_COMM_BACKEND:
            if (dtrain_backend_parse(optarg, &o->backend) != 0) {
                fprintf(stderr, PROG ": --comm-backend '%.64s': use cpu or nccl\n", optarg);
                return DTRAIN_ERR_INPUT;
            }
            o->backend_given = 1;
            break;
        case 'i': o->iface = optarg; break;
        case OPT_PRINT: o->output = OUTPUT_TEXT; break;
        case OPT_JSON: o->output = OUTPUT_JSON; break;
        case OPT_JOB_EXIT: {
            char err[256];
            if (dtrain_parse_int(optarg, 0, 255, "--job-exit", &o->job_exit, err, sizeof err) != 0) {
                fprintf(stderr, PROG ": %s (give the srun step's exit status: " PROG " --job-exit $?)\n", err);
                return DTRAIN_ERR_INPUT;
            }
            break;
        }
        case OPT_SLURM_REQUEUE: o->slurm_requeue = 1; break;
        case OPT_SUPERVISE: o->supervise = 1; break;
        case OPT_DRAIN: o->drain = 1; break;
        case OPT_NODE_REPORT: o->node_report = 1; break;
        case 'h': usage(stdout); o->done = 1; return DTRAIN_OK;
        case 'V': printf(PROG " " PACKAGE_VERSION "\n"); o->done = 1; return DTRAIN_OK;
        case ':':
            fprintf(stderr, PROG ": option %s needs a value (see " PROG " --help)\n", argv[optind - 1]);
            return DTRAIN_ERR_INPUT;
        default:
            if (strncmp(argv[optind - 1], "--nproc-per-node", 16) == 0 ||
                strncmp(argv[optind - 1], "--nproc_per_node", 16) == 0) {
                /* torchrun style: a per-node agent spawning workers (doc/frameworks.md) */
                fprintf(stderr, PROG ": %s: dtrain-launch runs as one task per GPU, not as a per-node agent: "
                                "srun --mpi=pmi2 --ntasks-per-node=GPUS_PER_NODE " PROG " -- python train.py\n",
                        argv[optind - 1]);
                return DTRAIN_ERR_INPUT;
            }
            /* A long option of ours it is not: the trainer's flags start here
             * (the trainer refuses what it does not know either). */
            if (strncmp(argv[optind - 1], "--", 2) == 0 && argv[optind - 1][2] != '\0') {
                trainer_from = optind - 1;
                goto parsed;
            }
            fprintf(stderr, PROG ": unknown option '%s' (see " PROG " --help)\n", argv[optind - 1]);
            return DTRAIN_ERR_INPUT;
        }
    }
    if (optind < argc && strcmp(argv[optind - 1], "--") == 0)
        o->program = &argv[optind];
    else if (optind < argc)
        trainer_from = optind;
parsed:
    if (trainer_from >= 0) {
        o->trainer_argc = argc - trainer_from;
        o->trainer_argv = &argv[trainer_from];
    }
    if (o->slurm_requeue && o->job_exit < 0 && !o->supervise) {
        fprintf(stderr, PROG ": --slurm-requeue goes with --job-exit STATUS (in the batch script, after srun) or --supervise\n");
        return DTRAIN_ERR_INPUT;
    }
    if (o->drain && !o->supervise) {
        fprintf(stderr, PROG ": --drain goes with --supervise (" PROG " --supervise --drain -- srun ...)\n");
        return DTRAIN_ERR_INPUT;
    }
    if (o->supervise && (o->program == NULL || o->job_exit >= 0 || o->trainer_argc > 0 || o->output != OUTPUT_NONE)) {
        fprintf(stderr, PROG ": --supervise takes the srun step after \"--\" and nothing else: " PROG
                " --supervise -- srun --mpi=pmi2 ... " PROG " ...\n");
        return DTRAIN_ERR_INPUT;
    }
    if (o->node_report && (argc != 2 || optind != 2)) {
        fprintf(stderr, PROG ": --node-report takes nothing else (" PROG " --supervise runs it, one task per node)\n");
        return DTRAIN_ERR_INPUT;
    }
    if (o->job_exit >= 0 && (o->program != NULL || o->trainer_argc > 0 || o->output != OUTPUT_NONE)) {
        fprintf(stderr, PROG ": --job-exit takes no trainer, PROGRAM or --print/--json: it only maps an exit status\n");
        return DTRAIN_ERR_INPUT;
    }
    if (o->backend_given && !dtrain_backend_built(o->backend)) {
        fprintf(stderr, PROG ": --comm-backend %s: this dtrain-launch was built without CUDA/NCCL: use --comm-backend cpu, "
                        "or rebuild with --with-cuda\n", dtrain_backend_name(o->backend));
        return DTRAIN_ERR_INPUT;
    }
    return DTRAIN_OK;
}

/* 1 when the trainer runs (no PROGRAM, not only printing). */
static int runs_trainer(const struct options *o)
{
    return o->program == NULL && (o->output == OUTPUT_NONE || o->trainer_argc > 0);
}

/* Where dtrain-rank is: beside this executable when it is there (a build
 * folder), else where `make install` put it. */
static void rank_program(char *path, size_t len)
{
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = '\0';
        char *slash = strrchr(self, '/');
        if (slash != NULL) {
            *slash = '\0';
            if (dtrain_snprintf(path, len, "%s/dtrain-rank", self) == 0 && access(path, X_OK) == 0)
                return;
        }
    }
    dtrain_snprintf(path, len, "%s", DTRAIN_RANK_PROGRAM);
}

/* The trainer (dtrain-rank, dtrain_parallel.h) on this task's bootstrap,
 * with dtrain-train's arguments, started as a PROGRAM is: this process
 * becomes it (cpu), or waits for it while NCCL's bootstrap roots live here
 * (nccl).  Returns DTRAIN_OK with its exit code in *exit_code, or
 * DTRAIN_ERR_SYSTEM with err when it cannot start (even when dtrain-rank
 * is missing: it is part of the installation). */
static enum dtrain_status run_trainer(const struct options *o, struct dtrain_bootstrap *bs, int *exit_code,
                                      char *err, size_t errlen)
{
    char path[4200];
    rank_program(path, sizeof path);
    char **argv = calloc((size_t)o->trainer_argc + 2, sizeof *argv);
    if (argv == NULL) {
        dtrain_snprintf(err, errlen, "out of memory");
        return DTRAIN_ERR_SYSTEM;
    }
    argv[0] = path;
    for (int i = 0; i < o->trainer_argc; i++)
        argv[i + 1] = o->trainer_argv[i];
    enum dtrain_status rc = dtrain_handoff_export(bs, err, errlen);
    if (rc == DTRAIN_OK && dtrain_handoff_run(argv, bs->backend == DTRAIN_COMM_NCCL, exit_code, err, errlen) != DTRAIN_OK)
        rc = DTRAIN_ERR_SYSTEM;
    free(argv);
    return rc;
}

static void fill_from_placement(struct dtrain_bootstrap *bs, const struct dtrain_placement *p)
{
    bs->pos = p->pos;
    bs->node = p->node;
    bs->local_rank = p->local_rank;
    bs->local_size = p->local_size;
}

/* --job-exit: the batch script's exit code (job_exit.h), said on one line. */
static int job_exit(const struct options *o)
{
    char line[512], err[256];
    struct dtrain_fault f;
    int code = dtrain_job_exit_code(o->job_exit, line, sizeof line);
    if (line[0] != '\0')
        fprintf(stderr, PROG ": %s\n", line);
    if (dtrain_fault_init(&f, PROG, -1, err, sizeof err) == 0) {
        snprintf(err, sizeof err, "exit %ld", o->job_exit);
        dtrain_fault_event(&f, "step_end", -1, err);
    }
    if (dtrain_job_drain_request(line, sizeof line))
        fprintf(stderr, PROG ": %s\n", line); /* before the requeue, so that it avoids the node */
    if (code == DTRAIN_EXIT_REQUEUE && o->slurm_requeue) {
        if (dtrain_job_requeue(err, sizeof err) != 0)
            fprintf(stderr, PROG ": %s (RequeueExit=75 in slurm.conf still requeues the job)\n", err);
        else
            fprintf(stderr, PROG ": asked Slurm to requeue job %s\n", getenv("SLURM_JOB_ID"));
    }
    return code;
}

/* --node-report: where this task's node is, one line on stdout
 * (spares.h): Slurm's topology address and the NVLink domain the plugin
 * gave the step (supervise.c's report step). */
static int node_report(void)
{
    const char *node = getenv("SLURMD_NODENAME"), *addr = getenv("SLURM_TOPOLOGY_ADDR"),
               *pattern = getenv("SLURM_TOPOLOGY_ADDR_PATTERN"), *domain = getenv(DTRAIN_ENV_NVLINK_DOMAIN);
    char line[512];
    if (node == NULL || node[0] == '\0') {
        fprintf(stderr, PROG ": --node-report runs as a task of a Slurm step (SLURMD_NODENAME is not set)\n");
        return DTRAIN_EXIT_USAGE;
    }
    if (dtrain_where_format(node, addr, pattern, domain, line, sizeof line) != 0) {
        fprintf(stderr, PROG ": warning: --node-report: %s: SLURM_TOPOLOGY_ADDR '%.64s', its pattern '%.64s' or "
                "%s '%.64s' is too long or holds a space: reported without them\n", node, addr ? addr : "",
                pattern ? pattern : "", DTRAIN_ENV_NVLINK_DOMAIN, domain ? domain : "");
        if (dtrain_where_format(node, NULL, NULL, NULL, line, sizeof line) != 0) {
            fprintf(stderr, PROG ": --node-report: the node name '%.64s' is too long or holds a space\n", node);
            return DTRAIN_EXIT_FAILURE;
        }
    }
    printf("%s\n", line);
    return fflush(stdout) == 0 ? DTRAIN_EXIT_OK : DTRAIN_EXIT_FAILURE;
}

/* Under --supervise (DTRAIN_INJOB_RESTARTS set), rank 0 says the step's
 * layout on one line, for the choice of a spare (spares.h). */
static void say_layout(const struct dtrain_bootstrap *bs)
{
    char line[256];
    if (bs->rank != 0 || getenv(DTRAIN_ENV_INJOB_RESTARTS) == NULL)
        return;
    struct dtrain_spare_layout l = {
        .known = 1, .tp = bs->tp, .pp = bs->pp, .dp = bs->dp, .per_node = bs->local_size,
        .tp_domain = dtrain_exchange_domain_kept(bs, DTRAIN_GROUP_TP),
        .pp_domain = dtrain_exchange_domain_kept(bs, DTRAIN_GROUP_PP),
    };
    if (dtrain_layout_format(&l, line, sizeof line) == 0) {
        fprintf(stderr, "%s\n", line);
        fflush(stderr);
    }
}

int main(int argc, char **argv)
{
    struct options opt;
    enum dtrain_status rc = parse_options(argc, argv, &opt);
    if (rc != DTRAIN_OK || opt.done)
        return dtrain_status_exit(rc);
    if (opt.supervise) {
        int code = dtrain_supervise(opt.program, opt.drain, &opt.job_exit);
        return code >= 0 ? code : job_exit(&opt); /* not restarted in the job: as --job-exit maps it */
    }
    if (opt.job_exit >= 0)
        return job_exit(&opt);
    if (opt.node_report)
        return node_report();
    const char *procid = getenv("SLURM_PROCID");
    if (procid != NULL && strcmp(procid, "0") == 0) { /* the fault timeline (DTRAIN_FAULT_LOG), once per step */
        struct dtrain_fault f;
        char why[256];
        if (dtrain_fault_init(&f, PROG, 0, why, sizeof why) == 0)
            dtrain_fault_event(&f, "launch", -1, NULL);
    }

    char err[1024];
    struct dtrain_placement place;
    struct dtrain_bootstrap *bs = NULL;
    struct dtrain_report report = {.placed_by = "launcher"};
    char addr[INET_ADDRSTRLEN] = "";
    dtrain_pmi *pmi = NULL;
    struct dtrain_launch_rdv rdv = {.fd = -1};
    int code; /* the exit code: the trainer's or PROGRAM's, or rc's */

    long t0 = dtrain_clock_us();
    rc = dtrain_pmi_init(opt.timeout_s, &pmi, err, sizeof err);
    if (rc != DTRAIN_OK) {
        fprintf(stderr, PROG ": %s\n", err);
        return dtrain_status_exit(rc);
    }
    const int rank = dtrain_pmi_rank(pmi);
    long t1 = dtrain_clock_us();

    /* Placement errors are the same on every task (same options, same
     * environment): each task exits with the documented code. */
    DTRAIN_CHECK_GOTO(dtrain_placement_resolve(&opt.shape, rank, dtrain_pmi_size(pmi), &place, err, sizeof err), rc,
                      fail);
    rc = DTRAIN_ERR_SYSTEM;
    bs = calloc(1, sizeof *bs);
    if (bs == NULL) {
        dtrain_snprintf(err, sizeof err, "out of memory");
        goto fail_alone;
    }
    fill_from_placement(bs, &place);
    /* The trainer's default is the cpu backend (--comm-backend nccl for
     * GPUs); a PROGRAM gets nccl when it can use a GPU. */
    bs->backend = opt.backend_given ? opt.backend
                : runs_trainer(&opt) ? DTRAIN_COMM_CPU : dtrain_backend_default();
    if (bs->backend == DTRAIN_COMM_CPU) {
        char why[256];
        if (dtrain_comm_addr_pick(opt.iface, addr, sizeof addr, why, sizeof why) != 0) {
            dtrain_snprintf(err, sizeof err, "--comm-iface: %s", why);
            goto fail_alone;
        }
    }
    long t2 = dtrain_clock_us();

    /* A PROGRAM on a step the plugin did not place gets its env:// rendezvous
     * from rank 0 through the same fence (rendezvous.h). */
    const int own_rdv = opt.program != NULL && !place.placed_by_plugin;
    if (own_rdv)
        DTRAIN_CHECK_GOTO(dtrain_launch_rdv_put(pmi, rank, opt.iface, &rdv, err, sizeof err), rc, fail_alone);
    rc = dtrain_exchange_ids(pmi, bs, addr, &report.exchange, err, sizeof err);
    if (rc == DTRAIN_ERR_FAULT)
        goto fail; /* the fence failed for every task */
    if (rc != DTRAIN_OK)
        goto fail_alone;
    if (own_rdv) {
        DTRAIN_CHECK_GOTO(dtrain_launch_rdv_get(pmi, rank, &rdv, err, sizeof err), rc, fail);
        dtrain_snprintf(place.coords.master_addr, sizeof place.coords.master_addr, "%s", rdv.addr);
        place.coords.master_port = rdv.port;
    }
    long t3 = dtrain_clock_us();
    say_layout(bs);
    report.bs = bs;
    report.placed_by = place.placed_by_plugin ? "spank" : "launcher";
    report.fences = dtrain_pmi_fences(pmi);
    report.init_us = t1 - t0;
    report.place_us = t2 - t1;
    report.bootstrap_us = t3 - t0;
    dtrain_pmi_finalize(pmi);
    pmi = NULL;

    DTRAIN_CHECK_GOTO(dtrain_placement_apply(&place, err, sizeof err), rc, fail);
    if (place.warning[0] != '\0' && place.local_rank == 0)
        fprintf(stderr, PROG ": warning: rank %d: %s\n", rank, place.warning);
    if (opt.output != OUTPUT_NONE) {
        int wrc = opt.output == OUTPUT_JSON ? dtrain_report_json(stdout, &report) : dtrain_report_text(stdout, &report);
        if (wrc != 0) {
            dtrain_snprintf(err, sizeof err, "writing the report to stdout failed");
            rc = DTRAIN_ERR_SYSTEM;
            goto fail;
        }
    }
    code = DTRAIN_EXIT_OK; /* --print / --json only */
    if (opt.program == NULL && runs_trainer(&opt)) {
        /* the trainer's own exit code; it printed its messages */
        DTRAIN_CHECK_GOTO(run_trainer(&opt, bs, &code, err, sizeof err), rc, fail);
    } else if (opt.program != NULL) {
        DTRAIN_CHECK_GOTO(dtrain_handoff_export(bs, err, sizeof err), rc, fail);
        /* the child's own exit code */
        DTRAIN_CHECK_GOTO(dtrain_handoff_run(opt.program, bs->backend == DTRAIN_COMM_NCCL, &code, err, sizeof err),
                          rc, fail);
    }
    dtrain_bootstrap_close(bs);
    free(bs);
    return code;
fail_alone:
    /* Only this task failed: end the step now rather than leave the others
     * waiting in the fence until their timeout (and a requeue). */
    fprintf(stderr, PROG ": rank %d: %s\n", rank, err);
    dtrain_pmi_abort(pmi, err);
fail:
    code = dtrain_status_exit(rc);
    if (rc == DTRAIN_ERR_FAULT) { /* the restart budget decides */
        struct dtrain_restarts budget;
        char why[256];
        if (dtrain_restarts_read(&budget, why, sizeof why) == 0) {
            code = dtrain_restarts_exit(&budget, why, sizeof why);
            fprintf(stderr, PROG ": rank %d: %s: exit %d (%s)\n", rank, err, code, why);
        } else {
            fprintf(stderr, PROG ": rank %d: %s; %s\n", rank, err, why);
        }
    } else {
        fprintf(stderr, PROG ": rank %d: %s\n", rank, err);
    }
    dtrain_pmi_finalize(pmi);
    if (bs != NULL)
        dtrain_bootstrap_close(bs);
    free(bs);
    return code;
}
