/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The wall clock of the metrics lines and the Prometheus textfile; see
 * dtrain_metrics.h. */
#include "dtrain_metrics.h"
#include "dtrain_io.h"
#include "dtrain_parse.h"
#include "dtrain_status.h"

#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define PROM_SUFFIX ".prom"
#define PROM_MIN_INTERVAL_S 1.0

double dtrain_metrics_wall_clock(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return 0.0;
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int dtrain_prom_init(struct dtrain_prom *p, const char *path, char *err, size_t errlen)
{
    memset(p, 0, sizeof *p);
    p->val_loss = NAN;
    size_t len = strlen(path), slen = sizeof PROM_SUFFIX - 1;
    if (len <= slen || strcmp(path + len - slen, PROM_SUFFIX) != 0) {
        snprintf(err, errlen, "prom_textfile '%.200s': the name must end in " PROM_SUFFIX
                 " (node_exporter's textfile collector reads only those)", path);
        return DTRAIN_ERR_INPUT;
    }
    if (dtrain_snprintf(p->path, sizeof p->path, "%s", path) != 0) {
        snprintf(err, errlen, "prom_textfile: the path is too long (%zu bytes)", len);
        return DTRAIN_ERR_INPUT;
    }
    /* The common mistake, a folder that is not there, fails at the start
     * rather than after the first step. */
    char dir[DTRAIN_PATH_MAX];
    struct stat st;
    memcpy(dir, p->path, sizeof dir);
    const char *folder = dirname(dir);
    int found = stat(folder, &st) == 0;
    if (!found || !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "prom_textfile '%.200s': folder %.200s: %s", path, folder,
                 found ? "not a folder" : strerror(errno));
        return DTRAIN_ERR_INPUT;
    }
    /* A label value: escape what the text format needs escaped, and cut
     * (never overflow) an id that is absurdly long. */
    const char *job = getenv("SLURM_JOB_ID");
    for (size_t i = 0, o = 0; job != NULL && job[i] != '\0' && o + 3 < sizeof p->job; i++) {
        char ch = job[i];
        if (ch == '\\' || ch == '"' || ch == '\n') {
            p->job[o++] = '\\';
            ch = ch == '\n' ? 'n' : ch;
        }
        p->job[o++] = ch;
    }
    const char *count = getenv("SLURM_RESTART_COUNT");
    if (count != NULL && count[0] != '\0') {
        char why[256];
        if (dtrain_parse_int(count, 0, 1000000000L, "SLURM_RESTART_COUNT", &p->restarts, why, sizeof why) != 0) {
            snprintf(err, errlen, "%s", why);
            return DTRAIN_ERR_INPUT;
        }
    }
    return DTRAIN_OK;
}

/* One metric: HELP and TYPE lines, then its sample. */
static void put_metric(struct dtrain_out_file *o, const struct dtrain_prom *p, const char *name,
                       const char *help, double value)
{
    char line[512], num[64];
    if (isnan(value))
        snprintf(num, sizeof num, "NaN");
    else if (isinf(value))
        snprintf(num, sizeof num, "%s", value > 0 ? "+Inf" : "-Inf");
    else
        snprintf(num, sizeof num, "%.15g", value);
    int n = snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s gauge\n%s%s%s%s %s\n", name, help, name, name,
                     p->job[0] != '\0' ? "{job=\"" : "", p->job, p->job[0] != '\0' ? "\"}" : "", num);
    /* names and help are this file's constants, the job id is bounded: it fits */
    if (n > 0 && (size_t)n < sizeof line)
        dtrain_out_write(o, line, (size_t)n);
}

int dtrain_prom_write(struct dtrain_prom *p, const struct dtrain_step_result *r, long steps,
                      char *err, size_t errlen)
{
    struct dtrain_out_file o;
    int rc = dtrain_out_open(&o, p->path, err, errlen);
    if (rc != DTRAIN_OK)
        return DTRAIN_ERR_SYSTEM;
    double now = dtrain_metrics_wall_clock();
    put_metric(&o, p, "dtrain_step", "Index of the last finished training step, from 0.", (double)r->step);
    put_metric(&o, p, "dtrain_steps_target", "Steps the run trains until.", (double)steps);
    put_metric(&o, p, "dtrain_loss", "Mean loss of the last step's batch, before the update.", (double)r->loss);
    if (r->has_val_loss)
        p->val_loss = r->val_loss;
    if (!isnan(p->val_loss))
        put_metric(&o, p, "dtrain_val_loss", "Validation loss, the newest computed (run.val_every).", p->val_loss);
    put_metric(&o, p, "dtrain_tokens_per_second", "Tokens per second of the last step.", r->tokens_per_s);
    put_metric(&o, p, "dtrain_mfu", "Model FLOPs utilisation of the last step, 0..1 (0: no peak known).", r->mfu);
    put_metric(&o, p, "dtrain_step_seconds", "Wall time of the last step in seconds.", r->ms / 1000.0);
    put_metric(&o, p, "dtrain_learning_rate", "Learning rate of the last step.", r->lr);
    put_metric(&o, p, "dtrain_grad_norm", "Global gradient norm of the last step, before clipping.", r->grad_norm);
    put_metric(&o, p, "dtrain_restarts", "Times Slurm restarted the job (SLURM_RESTART_COUNT).", (double)p->restarts);
    if (p->straggler_on) {
        put_metric(&o, p, "dtrain_straggler_rank", "Rank whose compute time stays above the median by the margin "
                   "(--straggler-steps in a row), -1: none.", (double)p->straggler_rank);
        put_metric(&o, p, "dtrain_straggler_excess_ratio", "The straggler's compute time over the median, minus 1 "
                   "(0: none).", p->straggler_rank >= 0 ? p->straggler_excess : 0.0);
    }
    put_metric(&o, p, "dtrain_last_step_timestamp_seconds", "Unix time when the last step finished.", now);
    if ((rc = dtrain_out_commit(&o, err, errlen)) != DTRAIN_OK)
        return rc;
    p->last_write = now;
    return DTRAIN_OK;
}

void dtrain_prom_set_straggler(struct dtrain_prom *p, int on, int rank, double excess)
{
    p->straggler_on = on;
    p->straggler_rank = rank;
    p->straggler_excess = excess;
}

int dtrain_prom_update(struct dtrain_prom *p, const struct dtrain_step_result *r, long steps, int last,
                       char *err, size_t errlen)
{
    if (!last && p->last_write > 0 && dtrain_metrics_wall_clock() - p->last_write < PROM_MIN_INTERVAL_S)
        return DTRAIN_OK;
    return dtrain_prom_write(p, r, steps, err, errlen);
}
