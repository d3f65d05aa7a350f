/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-launch --supervise: run the srun step, restart it in the job on a
 * spare after a fault; see supervise.h. */
#include "supervise.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <slurm/slurm.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dtrain_clock.h"
#include "dtrain_drain.h"
#include "job_exit.h"
#include "dtrain_env.h"
#include "dtrain_exit.h"
#include "dtrain_fault.h"
#include "dtrain_parse.h"
#include "spares.h"

#define PROG "dtrain-launch"
#define DRAIN_TIMEOUT_MS 10000
#define REPORT_TIMEOUT_MS 60000 /* the nodes' report step (learn_where) */
#define REASON_MAX 256

/* A line of srun's stderr that blames a node, not yet borne out. */
struct blame_seen {
    long seq;                /* its place among the blaming lines (0: none seen) */
    char line[REASON_MAX];
};

/* What one run of the step left behind. */
struct step_result {
    long status;               /* srun's exit status, 128 + n for a signal */
    char reason[REASON_MAX];   /* the last line that blamed a node, borne out */
    long seq;                  /* blaming lines seen */
    struct blame_seen (*seen)[DTRAIN_BLAME_HEARTBEAT + 1]; /* by the roles' node index, by dtrain_blame */
    struct dtrain_spare_layout layout; /* rank 0's layout line, the last seen in any step */
};

/* The job's nodes, SLURM_JOB_NODELIST expanded in Slurm's order. */
static int job_nodes(struct dtrain_node_roles *roles, int spares, char *err, size_t errlen)
{
    const char *list = getenv("SLURM_JOB_NODELIST");
    if (list == NULL || list[0] == '\0') {
        dtrain_snprintf(err, errlen, "--supervise runs in a batch job (SLURM_JOB_NODELIST is not set): put "
                        "`exec " PROG " --supervise -- srun ...` in the sbatch script");
        return -1;
    }
    DTRAIN_SLURM_HOSTLIST hl = slurm_hostlist_create(list); /* hostlist_t, or its struct on Slurm >= 23.02 (configure) */
    if (hl == NULL) {
        dtrain_snprintf(err, errlen, "SLURM_JOB_NODELIST '%.128s' is not a node list", list);
        return -1;
    }
    int n = slurm_hostlist_count(hl), rc = -1, got = 0;
    char **names = calloc((size_t)(n > 0 ? n : 1), sizeof *names);
    if (names == NULL) {
        dtrain_snprintf(err, errlen, "out of memory");
        goto done;
    }
    for (char *h; got < n && (h = slurm_hostlist_shift(hl)) != NULL;)
        names[got++] = h;
    rc = dtrain_roles_init(roles, (const char *const *)names, got, spares, err, errlen);
done:
    for (int i = 0; i < got; i++)
        free(names[i]);
    free(names);
    slurm_hostlist_destroy(hl);
    return rc;
}

/* Run argv (argv[0] looked up in PATH) with its stdout into a pipe;
 * returns the child's pid and the pipe's read end in *fd, or -1 with err.
 * env_name=env_value is set in the child first (NULL: none). */
static pid_t spawn_reading(char **argv, int out_fd, int *fd, const char *env_name, const char *env_value, char *err,
                           size_t errlen)
{
    int pipefd[2];
    if (pipe(pipefd) != 0) {
        dtrain_snprintf(err, errlen, "pipe: %s", strerror(errno));
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        dtrain_snprintf(err, errlen, "fork: %s", strerror(errno));
        close(pipefd[0]);
        close(pipefd[1]);
        return -1;
    }
    if (pid == 0) {
        dup2(pipefd[1], out_fd);
        close(pipefd[0]);
        close(pipefd[1]);
        if (env_name != NULL)
            setenv(env_name, env_value, 1);
        execvp(argv[0], argv);
        fprintf(stderr, PROG ": --supervise: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(pipefd[1]);
    *fd = pipefd[0];
    return pid;
}

/* End a report step that overran: SIGTERM (srun ends its tasks and the
 * step), SIGKILL 5 s later; reaped. */
static void end_child(pid_t pid)
{
    int status;
    kill(pid, SIGTERM);
    for (int i = 0; i < 50; i++) {
        if (waitpid(pid, &status, WNOHANG) == pid)
            return;
        usleep(100000);
    }
    kill(pid, SIGKILL);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
}

/* Each whole line of buf[0..have) to fn, without its newline; the
 * unfinished rest moves to the front of buf (size > have).  Returns its
 * length. */
static size_t each_line(char *buf, size_t have, void (*fn)(char *line, void *arg), void *arg)
{
    char *start = buf, *nl;
    buf[have] = '\0';
    while ((nl = strchr(start, '\n')) != NULL) {
        *nl = '\0';
        fn(start, arg);
        start = nl + 1;
    }
    size_t rest = strlen(start);
    memmove(buf, start, rest + 1);
    return rest;
}

/* one line of the report step's stdout */
static void note_where(char *line, void *roles)
{
    dtrain_roles_note_where(roles, line);
}

/* Where the job's nodes are (spares.h, "Which spare"): a step of one task
 * on every node of the job, `dtrain-launch --node-report` (this program),
 * with DTRAIN_NODE_REPORT=1, which the plugin takes for such a step (it
 * gives the task its node's NVLink domain and plans nothing).  Each line
 * of its stdout that reports a node of the job is noted; at most
 * REPORT_TIMEOUT_MS.  Nodes that did not report are said on one line, and
 * count as anywhere (a spare that must share a domain is then refused). */
static void learn_where(const char *srun, struct dtrain_node_roles *roles)
{
    char self[4096], count[32], tasks[32], err[256], buf[4096], *list = NULL;
    size_t listlen = (size_t)roles->count * DTRAIN_NODE_NAME_MAX + 16, have = 0;
    ssize_t got = readlink("/proc/self/exe", self, sizeof self - 1);
    int fd = -1, status = 0;
    long started = (long)dtrain_clock_ms();
    list = malloc(listlen);
    if (got <= 0 || list == NULL) {
        fprintf(stderr, PROG ": warning: --supervise: %s: spares are taken in Slurm's order\n",
                list == NULL ? "out of memory" : "cannot find this program (/proc/self/exe)");
        free(list);
        return;
    }
    self[got] = '\0';
    memcpy(list, "--nodelist=", 12);
    for (int i = 0, o = 11; i < roles->count; i++) /* each name is shorter than DTRAIN_NODE_NAME_MAX */
        o += snprintf(list + o, listlen - (size_t)o, "%s%s", i ? "," : "", roles->name[i]);
    dtrain_snprintf(count, sizeof count, "--nodes=%d", roles->count);
    dtrain_snprintf(tasks, sizeof tasks, "--ntasks=%d", roles->count);
    char *argv[] = {(char *)srun, count, tasks, "--ntasks-per-node=1", list, "--distribution=block", "--mpi=none",
                    self, "--node-report", NULL};
    pid_t pid = spawn_reading(argv, STDOUT_FILENO, &fd, "DTRAIN_NODE_REPORT", "1", err, sizeof err);
    if (pid < 0) {
        fprintf(stderr, PROG ": warning: --supervise: the nodes' report step: %s: spares are taken in Slurm's order\n",
                err);
        free(list);
        return;
    }
    int timed_out = 0;
    for (;;) {
        long left = REPORT_TIMEOUT_MS - ((long)dtrain_clock_ms() - started);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left <= 0) {
            timed_out = 1;
            break;
        }
        int pr = poll(&p, 1, (int)left);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            continue; /* a timeout: `left` says so next */
        ssize_t n = read(fd, buf + have, sizeof buf - 1 - have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        have = each_line(buf, have + (size_t)n, note_where, roles);
        if (have == sizeof buf - 1)
            have = 0; /* a line longer than any report: dropped */
    }
    close(fd);
    if (timed_out)
        end_child(pid);
    else
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
    int known = 0;
    for (int i = 0; i < roles->count; i++)
        known += roles->where[i].known;
    if (known < roles->count) {
        char missing[512] = "", how[64];
        if (timed_out)
            dtrain_snprintf(how, sizeof how, "did not end within %d s", REPORT_TIMEOUT_MS / 1000);
        else if (WIFEXITED(status))
            dtrain_snprintf(how, sizeof how, "exited %d", WEXITSTATUS(status));
        else
            dtrain_snprintf(how, sizeof how, "was killed by signal %d", WTERMSIG(status));
        for (int i = 0, m = 0; i < roles->count; i++) {
            size_t l = strlen(missing);
            if (!roles->where[i].known && m++ < 8)
                dtrain_snprintf(missing + l, sizeof missing - l, "%s%s", l ? "," : "", roles->name[i]);
        }
        fprintf(stderr, PROG ": warning: --supervise: %d of %d nodes did not say where they are (%s%s; the report "
                "step %s): a spare is taken for a failed node without knowing its topology, and refused where the "
                "step keeps groups in one NVLink domain\n", roles->count - known, roles->count, missing,
                roles->count - known > 8 ? ",..." : "", how);
    }
    free(list);
}

/* Note a line that blames a node of the job (the last of each kind per
 * node), or rank 0's layout line. */
static void note_blame(const struct dtrain_node_roles *roles, struct step_result *res, const char *line)
{
    char node[DTRAIN_NODE_NAME_MAX];
    if (dtrain_layout_parse(line, &res->layout))
        return;
    enum dtrain_blame blame = dtrain_srun_blame(line, node, sizeof node);
    if (blame == DTRAIN_BLAME_NONE)
        return;
    for (int i = 0; i < roles->count; i++) {
        if (strcmp(roles->name[i], node) == 0) {
            res->seen[i][blame].seq = ++res->seq;
            dtrain_snprintf(res->seen[i][blame].line, sizeof res->seen[i][blame].line, "%s", line);
            return;
        }
    }
}

struct blame_ctx {
    const struct dtrain_node_roles *roles;
    struct step_result *res;
};

/* one line of srun's stderr: noted when it blames a node, and passed on */
static void pass_line(char *line, void *arg)
{
    struct blame_ctx *ctx = arg;
    note_blame(ctx->roles, ctx->res, line);
    fprintf(stderr, "%s\n", line);
}

/* Pass the child's stderr through line by line, noting the lines that blame a node. */
static void pass_stderr(int fd, const struct dtrain_node_roles *roles, struct step_result *res)
{
    char buf[4096];
    size_t have = 0;
    for (;;) {
        ssize_t n = read(fd, buf + have, sizeof buf - 1 - have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        struct blame_ctx ctx = {roles, res};
        have = each_line(buf, have + (size_t)n, pass_line, &ctx);
        if (have == sizeof buf - 1) { /* a line longer than the buffer: let it through unread */
            fputs(buf, stderr);
            have = 0;
        }
        fflush(stderr);
    }
    if (have > 0) {
        buf[have] = '\0';
        fputs(buf, stderr);
        fflush(stderr);
    }
}

/* Run srun with --nodes/--nodelist/--exclude put in after its name, and
 * --overlap once a node failed: the step that ran on a node that died stays
 * in slurmctld's books, holding its CPUs on the healthy nodes, until the
 * node answers again (seen on Slurm 22.05 with --no-kill: the next step
 * waits for "Requested nodes are busy" for ever); its tasks have all ended
 * when srun returns, so sharing those CPUs is sharing nothing. */
static int run_step(char **program, struct dtrain_node_roles *roles, struct step_result *res, char *err,
                    size_t errlen)
{
    size_t argc = 0;
    while (program[argc] != NULL)
        argc++;
    char nodes[32], overlap[] = "--overlap", *active = NULL, *failed = NULL, **argv = calloc(argc + 5, sizeof *argv);
    size_t listlen = (size_t)roles->count * DTRAIN_NODE_NAME_MAX + 32;
    int rc = -1, pipefd[2] = {-1, -1};
    active = malloc(listlen);
    failed = malloc(listlen);
    res->status = 0;
    res->reason[0] = '\0';
    res->seq = 0;
    memset(res->seen, 0, (size_t)roles->count * sizeof *res->seen);
    if (argv == NULL || active == NULL || failed == NULL) {
        dtrain_snprintf(err, errlen, "out of memory");
        goto done;
    }
    memcpy(active, "--nodelist=", 12);
    memcpy(failed, "--exclude=", 11);
    dtrain_roles_list(roles, DTRAIN_NODE_ACTIVE, active + 11, listlen - 11);
    dtrain_roles_list(roles, DTRAIN_NODE_FAILED, failed + 10, listlen - 10);
    dtrain_snprintf(nodes, sizeof nodes, "--nodes=%d", dtrain_roles_count(roles, DTRAIN_NODE_ACTIVE));
    size_t a = 0;
    argv[a++] = program[0];
    argv[a++] = nodes;
    argv[a++] = active;
    if (failed[10] != '\0') {
        argv[a++] = failed;
        argv[a++] = overlap;
    }
    for (size_t i = 1; i < argc; i++)
        argv[a++] = program[i];
    if (pipe(pipefd) != 0) {
        dtrain_snprintf(err, errlen, "pipe: %s", strerror(errno));
        goto done;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        dtrain_snprintf(err, errlen, "fork: %s", strerror(errno));
        goto done;
    }
    if (pid == 0) {
        dup2(pipefd[1], STDERR_FILENO);
        close(pipefd[0]);
        close(pipefd[1]);
        execvp(argv[0], argv);
        fprintf(stderr, PROG ": --supervise: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(pipefd[1]);
    pipefd[1] = -1;
    pass_stderr(pipefd[0], roles, res);
    int status;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            dtrain_snprintf(err, errlen, "waitpid: %s", strerror(errno));
            goto done;
        }
    }
    res->status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    rc = 0;
done:
    if (pipefd[0] >= 0)
        close(pipefd[0]);
    if (pipefd[1] >= 0)
        close(pipefd[1]);
    free(argv);
    free(active);
    free(failed);
    return rc;
}

/* Fail the nodes the step's lines blame where Slurm's facts bear the line
 * out (dtrain_blame_confirmed); a line they do not is said and let be.
 * drainable[i] is set for a node srun blamed (not the ranks' word). */
static void blame_nodes(struct dtrain_node_roles *roles, struct step_result *res, int *drainable)
{
    long last = 0;
    for (int i = 0; i < roles->count; i++) {
        int node_failed = -1;
        for (int b = DTRAIN_BLAME_TASK; b <= DTRAIN_BLAME_HEARTBEAT; b++) {
            const struct blame_seen *seen = &res->seen[i][b];
            if (seen->seq == 0 || roles->role[i] != DTRAIN_NODE_ACTIVE)
                continue;
            if (b == DTRAIN_BLAME_NODE && node_failed < 0) {
                char err[512];
                node_failed = dtrain_node_failed(roles->name[i], DRAIN_TIMEOUT_MS, err, sizeof err);
                if (node_failed < 0)
                    fprintf(stderr, PROG ": warning: %s\n", err);
            }
            if (!dtrain_blame_confirmed((enum dtrain_blame)b, res->status, node_failed)) {
                fprintf(stderr, PROG ": %s is not blamed: Slurm's records do not bear out the line \"%s\" (%s)\n",
                        roles->name[i], seen->line,
                        b == DTRAIN_BLAME_NODE ? "slurmctld does not hold the node failed"
                                               : "no task of the step was killed");
                continue;
            }
            dtrain_roles_fail(roles, roles->name[i]); /* once: it is no longer active */
            drainable[i] |= b != DTRAIN_BLAME_HEARTBEAT;
            if (seen->seq > last) {
                last = seen->seq;
                dtrain_snprintf(res->reason, sizeof res->reason, "%s", seen->line);
            }
        }
    }
}

/* Drain the nodes that failed in this step and that Slurm blamed or a
 * straggler's request named (--drain), each with the reason. */
static void drain_failed(const struct dtrain_node_roles *roles, const int *was_failed, const int *drainable,
                         const char *reason)
{
    char why[REASON_MAX + 64], err[256];
    const char *job = getenv("SLURM_JOB_ID");
    dtrain_snprintf(why, sizeof why, DTRAIN_DRAIN_JOB_REASON "%s: %s", job ? job : "?", reason);
    for (int i = 0; i < roles->count; i++) {
        if (roles->role[i] != DTRAIN_NODE_FAILED || was_failed[i] || !drainable[i])
            continue;
        if (dtrain_drain_node(roles->name[i], why, DRAIN_TIMEOUT_MS, err, sizeof err) == 0)
            fprintf(stderr, PROG ": drained %s (%s)\n", roles->name[i], why);
        else
            fprintf(stderr, PROG ": warning: could not drain %s: %s\n", roles->name[i], err);
    }
}

int dtrain_supervise(char **program, int drain, long *step_status)
{
    char err[512], why[256], text[64];
    struct dtrain_node_roles roles = {0};
    struct dtrain_restarts budget;
    struct dtrain_fault f;
    struct step_result res = {0};
    long spares = 0;
    int rc = DTRAIN_EXIT_USAGE, *was_failed = NULL, *drainable = NULL;
    struct dtrain_spare_pick *picks = NULL;
    const char *base = strrchr(program[0], '/'), *sp = getenv(DTRAIN_ENV_SPARES);

    *step_status = 0;
    if (strcmp(base ? base + 1 : program[0], "srun") != 0) {
        fprintf(stderr, PROG ": --supervise runs an srun step, not '%.64s': " PROG " --supervise -- srun "
                "--mpi=pmi2 ... " PROG " ...\n", program[0]);
        return DTRAIN_EXIT_USAGE;
    }
    if (sp != NULL && sp[0] != '\0' &&
        dtrain_parse_int(sp, 0, 1000000, DTRAIN_ENV_SPARES " (--dtrain-spares)", &spares, err, sizeof err) != 0) {
        fprintf(stderr, PROG ": %s\n", err);
        return DTRAIN_EXIT_USAGE;
    }
    if (dtrain_restarts_read(&budget, err, sizeof err) != 0 || job_nodes(&roles, (int)spares, err, sizeof err) != 0) {
        fprintf(stderr, PROG ": %s\n", err);
        return DTRAIN_EXIT_USAGE;
    }
    was_failed = calloc((size_t)roles.count, sizeof *was_failed);
    drainable = calloc((size_t)roles.count, sizeof *drainable);
    res.seen = calloc((size_t)roles.count, sizeof *res.seen);
    picks = calloc((size_t)roles.count, sizeof *picks);
    int no_memory = was_failed == NULL || drainable == NULL || res.seen == NULL || picks == NULL;
    if (no_memory || dtrain_signals_install(err, sizeof err) != 0) {
        fprintf(stderr, PROG ": %s\n", no_memory ? "out of memory" : err);
        rc = DTRAIN_EXIT_FAILURE;
        goto done;
    }
    if (spares > 0) /* where the nodes are, for the choice of a spare */
        learn_where(program[0], &roles);
    for (long in_job = budget.in_job;; in_job++) {
        dtrain_snprintf(text, sizeof text, "%ld", in_job);
        setenv(DTRAIN_ENV_INJOB_RESTARTS, text, 1); /* for the step's tasks and dtrain_restarts_read here */
        if (dtrain_fault_init(&f, PROG, -1, err, sizeof err) != 0) {
            fprintf(stderr, PROG ": %s\n", err);
            goto done;
        }
        dtrain_fault_event(&f, "step_start", -1, NULL);
        for (int i = 0; i < roles.count; i++) {
            was_failed[i] = roles.role[i] == DTRAIN_NODE_FAILED;
            drainable[i] = 0;
        }
        if (run_step(program, &roles, &res, err, sizeof err) != 0) {
            fprintf(stderr, PROG ": --supervise: %s\n", err);
            rc = DTRAIN_EXIT_FAILURE;
            goto done;
        }
        *step_status = res.status;
        blame_nodes(&roles, &res, drainable);
        rc = -1;
        /* the step's own verdict (done, bad input...): --job-exit passes it on; but a step srun
         * blames a node for is a fault whatever its status (Slurm 24.11's srun exits 1 after
         * "Node failure on NODE", 22.05's with the tasks' 75) */
        if (res.status == DTRAIN_EXIT_OK ||
            (roles.failed_now == 0 && (res.status == DTRAIN_EXIT_FAILURE || res.status == DTRAIN_EXIT_USAGE ||
                                       res.status == DTRAIN_EXIT_REFUSED)))
            goto done;
        if (roles.failed_now > 0 && res.status < 128 && res.status != DTRAIN_EXIT_REQUEUE)
            *step_status = DTRAIN_EXIT_REQUEUE; /* a node failed: if not restarted here, a fault to requeue */
        int sig = dtrain_signals_pending();
        if (sig != 0) {
            fprintf(stderr, PROG ": the job got %s: the step is not restarted in the job\n", dtrain_signals_name(sig));
            goto done;
        }
        if (roles.failed_now == 0) {
            /* a straggler's drain (--dtrain-straggler=drain): its node is the failed one */
            char node[DTRAIN_NODE_NAME_MAX], reason[512], line[768];
            int got = dtrain_job_take_drain_request(node, sizeof node, reason, sizeof reason, line, sizeof line);
            if (got < 0)
                fprintf(stderr, PROG ": %s\n", line);
            for (int i = 0; got > 0 && i < roles.count; i++) {
                if (strcmp(roles.name[i], node) == 0 && dtrain_roles_fail(&roles, node)) {
                    drainable[i] = 1; /* the job asked for it: --dtrain-straggler=drain */
                    dtrain_snprintf(res.reason, sizeof res.reason, "%s", reason);
                }
            }
        }
        if (roles.failed_now == 0) {
            fprintf(stderr, PROG ": the step ended with exit %ld and srun named no failed node (no task was killed): "
                    "not restarted in the job\n", res.status);
            goto done;
        }
        if (dtrain_restarts_exit(&f.restarts, why, sizeof why) != DTRAIN_EXIT_REQUEUE)
            goto done; /* --job-exit says "not requeued: ... restarted N times" */
        char failed[256] = "";
        for (int i = 0; i < roles.count; i++) {
            size_t o = strlen(failed);
            if (roles.role[i] == DTRAIN_NODE_FAILED && !was_failed[i])
                dtrain_snprintf(failed + o, sizeof failed - o, "%s%s", o ? "," : "", roles.name[i]);
        }
        char refused[768], chosen[768] = "";
        int made = dtrain_roles_replace_near(&roles, &res.layout, picks, refused, sizeof refused);
        if (made == -1) {
            fprintf(stderr, PROG ": %s failed (%s) and no spare node is left (--dtrain-spares=%ld): not restarted "
                    "in the job\n", failed, res.reason, spares);
            goto done;
        }
        if (made < 0) { /* a spare there is, but it would take a group out of its NVLink domain */
            fprintf(stderr, PROG ": %s failed (%s) and %s: not restarted in the job\n", failed, res.reason, refused);
            goto done;
        }
        for (int i = 0; i < made; i++) {
            size_t o = strlen(chosen);
            if (o + 3 >= sizeof chosen ||
                dtrain_spare_pick_text(&roles, &picks[i], chosen + o + (o ? 2 : 0), sizeof chosen - o - 2) != 0)
                break;
            if (o)
                memcpy(chosen + o, ", ", 2);
        }
        if (drain) /* only once a spare took the node's place */
            drain_failed(&roles, was_failed, drainable, res.reason);
        char active[1024];
        if (dtrain_roles_list(&roles, DTRAIN_NODE_ACTIVE, active, sizeof active) != 0)
            dtrain_snprintf(active, sizeof active, "%d nodes", dtrain_roles_count(&roles, DTRAIN_NODE_ACTIVE));
        dtrain_fault_event(&f, "step_end", -1, res.reason);
        fprintf(stderr, PROG ": %s failed (%s): step restarted in the job on %s with %s, %s (%d spare%s left)\n",
                failed, res.reason, active, chosen, why, dtrain_roles_count(&roles, DTRAIN_NODE_SPARE),
                dtrain_roles_count(&roles, DTRAIN_NODE_SPARE) == 1 ? "" : "s");
        fflush(stderr);
    }
done:
    dtrain_signals_restore();
    free(was_failed);
    free(drainable);
    free(res.seen);
    free(picks);
    dtrain_roles_free(&roles);
    return rc;
}
