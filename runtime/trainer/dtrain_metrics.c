/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Reporting: the wall clock of the metrics lines, the Prometheus textfile
 * (dtrain_metrics.h), and the parallel trainer's reports: the metrics
 * JSON lines, the progress lines, the per-rank lines and the straggler
 * verdict, the summary (dtrain_parallel.h). */
#include "dtrain_metrics.h"
#include "dtrain_file.h"
#include "dtrain_ptrainer.h"
#include "dtrain_io.h"
#include "dtrain_parse.h"
#include "dtrain_status.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PROM_SUFFIX ".prom"
#define PROM_MIN_INTERVAL_S 1.0

double dtrain_metrics_wall_clock(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return 0.0;
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

double dtrain_mfu(double *peak, int measured, double rate)
{
    if (!(*peak > 0.0) || !(rate >= 0.0))
        return 0.0;
    if (measured && rate > *peak)
        *peak = rate;
    return rate / *peak;
}

int dtrain_mfu_peak_warning(double mfu, int measured, double peak, long step, int *warned, char *buf,
                            size_t len)
{
    if (measured || *warned || !(mfu > 1.0))
        return 0;
    *warned = 1;
    snprintf(buf, len, "MFU %.1f%% at step %ld: the step ran at %.4g GFLOP/s per device, above the %.4g GFLOP/s "
             "given by --peak-flops, so that peak is too low for this device (give its real peak, or 0 to measure "
             "one); the MFU figures above 100%% that follow are not warned about again",
             100.0 * mfu, step, 1e-9 * mfu * peak, 1e-9 * peak);
    return 1;
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

/* ------------------------------------------------------------ the trainer's reports
 * (the metrics JSON lines, the progress lines, the per-rank lines and
 * stragglers, the summary; dtrain_parallel.h) */

static int open_rank_metrics(struct dtrain_ptrainer *t, char *err, size_t errlen)
{
    const struct dtrain_bootstrap *bs = &t->layout;
    t->strag.rank = -1;
    if (t->cfg.rank_metrics[0] != '\0') {
        snprintf(t->rank_path, sizeof t->rank_path, "%s/rank-%05d.jsonl", t->cfg.rank_metrics, bs->rank);
        if ((t->rank_file = fopen(t->rank_path, "a+")) == NULL) {
            snprintf(err, errlen, "cannot create per-rank metrics file %s: %s", t->rank_path, strerror(errno));
            return DTRAIN_ERR_INPUT;
        }
    }
    if (t->rank_file == NULL && t->cfg.straggler_steps <= 0)
        return DTRAIN_OK;
    t->gather = 1;
    size_t n = (size_t)RANK_FIELDS * bs->world_size;
    t->host_times = malloc(n * sizeof(float));
    t->compute_sum = calloc((size_t)bs->world_size, sizeof(double));
    t->slow_run = calloc((size_t)bs->world_size, sizeof(long));
    t->sorted = calloc((size_t)bs->world_size, sizeof(double));
    if (t->host_times == NULL || t->compute_sum == NULL || t->slow_run == NULL || t->sorted == NULL) {
        snprintf(err, errlen, "out of memory");
        return DTRAIN_ERR_SYSTEM;
    }
    return DTRAIN_OK;
}
/* A side channel (the metrics, per-rank or Prometheus file) that cannot be
 * written costs its lines, never the run: a full metrics disk must not
 * lose the steps since the last checkpoint.  The first failure of each
 * file is said once on stderr; later writes are still tried (the disk may
 * free up), their failures silent. */
static void side_failure(struct dtrain_ptrainer *t, unsigned which, const char *why)
{
    if (t->side_warned & which)
        return;
    t->side_warned |= which;
    fprintf(stderr, "%s: warning: rank %d: %s; training goes on without it (its further failures are not "
            "reported)\n", t->prog != NULL ? t->prog : "dtrain", t->layout.rank, why);
    fflush(stderr);
}

void dtrain_report_set_prog(struct dtrain_ptrainer *t, const char *prog)
{
    t->prog = prog;
}

/* Append one whole line to f with write() (after whatever stdio holds); a
 * short write is cut back off a regular file, so that no half line stays
 * for a reader of JSON lines.  0, or -1 with errno. */
static int append_line(FILE *f, const char *line, size_t n)
{
    int fd = fileno(f);
    if (fflush(f) != 0)
        return -1;
    struct stat st;
    off_t end = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? st.st_size : -1;
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(fd, line + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = w < 0 ? errno : ENOSPC;
            if (done > 0 && end >= 0 && ftruncate(fd, end) != 0) {
                /* the half line stays: the error said is the write's */
            }
            errno = e;
            return -1;
        }
        done += (size_t)w;
    }
    return 0;
}

/* Append to line[*used] (size bytes in all); a line cut short is never
 * written (*used past size marks it). */
static void put(char *line, size_t size, size_t *used, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void put(char *line, size_t size, size_t *used, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = *used < size ? vsnprintf(line + *used, size - *used, fmt, ap) : 0;
    va_end(ap);
    *used += n > 0 ? (size_t)n : 0;
}

static void write_metrics(struct dtrain_ptrainer *t, const struct dtrain_pstep_result *r, const char *ranks)
{
    char line[4096], val[64] = "", why[DTRAIN_PATH_MAX + 128]; /* a %.3f of a huge figure: 300 digits */
    size_t used = 0;
    if (r->base.has_val_loss)
        snprintf(val, sizeof val, "\"val_loss\": %.9g, ", r->base.val_loss);
    put(line, sizeof line, &used, "{\"step\": %ld, \"loss\": %.9g, %s\"lr\": %.9g, \"grad_norm\": %.9g, \"ms\": %.3f, "
        "\"tokens_per_s\": %.1f, \"gflops\": %.3f, \"mfu\": %.6f, \"pipe_wait_ms\": %.3f, \"dp_exposed_ms\": %.3f, ",
        r->base.step, (double)r->base.loss, val, r->base.lr, r->base.grad_norm, r->base.ms,
        r->base.tokens_per_s, r->base.gflops, r->base.mfu, r->pipe_wait_ms, r->dp_exposed_ms);
    if (t->scaler.on)
        put(line, sizeof line, &used, "\"loss_scale\": %.9g, \"overflow_steps\": %ld, ", r->loss_scale,
            r->overflow_steps);
    if (t->cfg.memory_report) { /* rank 0's memory (--memory-report) */
        struct dtrain_ptrainer_memory m;
        dtrain_ptrainer_memory(t, &m);
        put(line, sizeof line, &used, "\"model_state_bytes\": %zu, \"activations_bytes\": %zu, \"comm_bytes\": %zu, ",
            m.model_state, m.activations, m.comm);
    }
    put(line, sizeof line, &used, "%s\"time\": %.3f}\n", ranks, dtrain_metrics_wall_clock());
    if (used >= sizeof line) /* the fields are bounded: never */
        snprintf(why, sizeof why, "cannot write metrics file %s: the line is too long", t->cfg.metrics);
    else if (append_line(t->metrics, line, used) == 0)
        return;
    else
        snprintf(why, sizeof why, "cannot write metrics file %s: %s", t->cfg.metrics, strerror(errno));
    side_failure(t, SIDE_METRICS, why);
}

/* Keep the lines of steps before `step` (they start with {"step": N). */
static int cut_lines(FILE *f, long step, const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (f == NULL || fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode))
        return DTRAIN_OK; /* a pipe or terminal: nothing to cut */
    char line[1024];
    long keep = 0, n;
    rewind(f);
    while (fgets(line, sizeof line, f) != NULL && strchr(line, '\n') != NULL &&
           sscanf(line, "{\"step\": %ld,", &n) == 1 && n < step)
        keep = ftell(f);
    if (fflush(f) != 0 || ftruncate(fileno(f), keep) != 0 || fseek(f, 0, SEEK_END) != 0) {
        snprintf(err, errlen, "cannot rewrite metrics file %s: %s", path, strerror(errno));
        return DTRAIN_ERR_SYSTEM;
    }
    return DTRAIN_OK;
}

int dtrain_ptrainer_metrics_from(struct dtrain_ptrainer *t, long step, char *err, size_t errlen)
{
    int rc = cut_lines(t->metrics, step, t->cfg.metrics, err, errlen);
    if (rc == DTRAIN_OK)
        rc = cut_lines(t->rank_file, step, t->rank_path, err, errlen);
    return rc;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Stragglers from every rank's times of this step (the same on every
 * rank: they all hold the same gathered floats). */
static void find_straggler(struct dtrain_ptrainer *t)
{
    const struct dtrain_train_config *c = &t->cfg;
    int n = t->layout.world_size;
    struct dtrain_straggler *g = &t->strag;
    int was = g->rank;
    for (int q = 0; q < n; q++) {
        const float *x = t->host_times + (size_t)RANK_FIELDS * q;
        t->sorted[q] = (double)x[1] - (double)x[2]; /* own compute: TP communication is waiting */
    }
    qsort(t->sorted, (size_t)n, sizeof *t->sorted, by_value);
    double median = n % 2 ? t->sorted[n / 2] : 0.5 * (t->sorted[n / 2 - 1] + t->sorted[n / 2]);
    memset(g, 0, sizeof *g);
    g->rank = -1;
    for (int q = 0; q < n; q++) {
        const float *x = t->host_times + (size_t)RANK_FIELDS * q;
        double own = (double)x[1] - (double)x[2], excess = median > 0.0 ? own / median - 1.0 : 0.0;
        t->slow_run[q] = excess > c->straggler_margin ? t->slow_run[q] + 1 : 0;
        if (t->slow_run[q] >= c->straggler_steps && (g->rank < 0 || excess > g->excess))
            *g = (struct dtrain_straggler){q, 0, t->slow_run[q], own, median, excess};
    }
    g->is_new = g->rank >= 0 && g->rank != was;
}

/* --rank-metrics and straggler detection: every rank's times gathered,
 * the straggler verdict, this rank's line; rank 0 finds the slowest (most
 * compute) rank and the spread (a collective: every rank calls it for the
 * same steps). */
static int log_ranks(struct dtrain_ptrainer *t, const struct dtrain_pstep_result *r, char *summary, size_t slen,
                     char *err, size_t errlen)
{
    const struct dtrain_bootstrap *L = &t->layout;
    summary[0] = '\0';
    if (!t->gather)
        return DTRAIN_OK;
    float mine[RANK_FIELDS] = {(float)r->base.ms, (float)r->compute_ms, (float)r->tp_comm_ms, (float)r->pipe_wait_ms};
    dtrain_comm *world = t->comms->group[DTRAIN_GROUP_WORLD];
    int rc = dtrain_pcomm_status(world, dtrain_comm_all_gather_bytes(world, mine, t->host_times, sizeof mine),
                                 "per-rank metrics", err, errlen);
    if (rc != DTRAIN_OK)
        return rc;
    char strag[160] = "";
    if (t->cfg.straggler_steps > 0) {
        find_straggler(t);
        snprintf(strag, sizeof strag, "\"straggler_rank\": %d, ", t->strag.rank);
    }
    if (t->rank_file != NULL) {
        char slow[96] = "";
        if (t->cfg.straggler_steps > 0)
            snprintf(slow, sizeof slow, "\"slow_steps\": %ld, \"straggler\": %s, ", t->slow_run[L->rank],
                     t->strag.rank == L->rank ? "true" : "false");
        char line[4096], why[DTRAIN_PATH_MAX + 128];
        int n = snprintf(line, sizeof line, "{\"step\": %ld, \"rank\": %d, \"tp_rank\": %d, \"pp_rank\": %d, "
                "\"dp_rank\": %d, \"ms\": %.3f, \"compute_ms\": %.3f, \"tp_comm_ms\": %.3f, \"own_compute_ms\": %.3f, "
                "\"pipe_wait_ms\": %.3f, \"dp_exposed_ms\": %.3f, %s\"time\": %.3f}\n", r->base.step, L->rank,
                L->tp_rank, L->pp_rank, L->dp_rank, r->base.ms, r->compute_ms, r->tp_comm_ms,
                (double)mine[1] - (double)mine[2], r->pipe_wait_ms, r->dp_exposed_ms, slow,
                dtrain_metrics_wall_clock());
        if (n < 0 || (size_t)n >= sizeof line || append_line(t->rank_file, line, (size_t)n) != 0) {
            snprintf(why, sizeof why, "cannot write per-rank metrics file %s: %s", t->rank_path,
                     n < 0 || (size_t)n >= sizeof line ? "the line is too long" : strerror(errno));
            side_failure(t, SIDE_RANK, why);
        }
    }
    if (t->prom_on)
        dtrain_prom_set_straggler(&t->prom, t->cfg.straggler_steps > 0, t->strag.rank, t->strag.excess);
    if (L->rank != 0)
        return DTRAIN_OK;
    if (t->rank_file == NULL) {
        snprintf(summary, slen, "%s", strag);
        return DTRAIN_OK;
    }
    int slow = 0, fast = 0;
    for (int q = 0; q < L->world_size; q++) {
        const float *x = t->host_times + (size_t)RANK_FIELDS * q;
        t->compute_sum[q] += x[1];
        if (x[1] > t->host_times[(size_t)RANK_FIELDS * slow + 1])
            slow = q;
        if (x[1] < t->host_times[(size_t)RANK_FIELDS * fast + 1])
            fast = q;
    }
    t->logged++;
    const float *s = t->host_times + (size_t)RANK_FIELDS * slow, *f = t->host_times + (size_t)RANK_FIELDS * fast;
    snprintf(summary, slen, "\"slowest_rank\": %d, \"slowest_compute_ms\": %.3f, \"fastest_rank\": %d, "
             "\"fastest_compute_ms\": %.3f, \"compute_spread_ms\": %.3f, %s", slow, (double)s[1], fast, (double)f[1],
             (double)(s[1] - f[1]), strag);
    return DTRAIN_OK;
}

void dtrain_ptrainer_straggler(const struct dtrain_ptrainer *t, struct dtrain_straggler *s)
{
    *s = t->strag;
}

int dtrain_ptrainer_log_step(struct dtrain_ptrainer *t, FILE *progress, const struct dtrain_pstep_result *r,
                             char *err, size_t errlen)
{
    const struct dtrain_train_config *c = &t->cfg;
    int val = r->base.has_val_loss;
    long done = r->base.step + 1 - t->first_step; /* steps this process ran */
    t->smooth_loss = done <= 1 ? r->base.loss : SMOOTH_ALPHA * r->base.loss + (1.0 - SMOOTH_ALPHA) * t->smooth_loss;
    t->last_loss = r->base.loss;
    if (val) {
        t->last_val = r->base.val_loss;
        if (!(r->base.val_loss >= t->best_val)) {
            t->best_val = r->base.val_loss;
            t->best_val_step = r->base.step;
        }
    }
    if (t->layout.rank == 0 && progress != NULL && c->log_every > 0 &&
        (r->base.step % c->log_every == 0 || r->base.step + 1 == c->steps || val)) {
        char vl[64] = "", el[32], eta[32];
        double elapsed = dtrain_clock_s() - t->run_start;
        if (val)
            snprintf(vl, sizeof vl, " | val loss %.6f", r->base.val_loss);
        dtrain_format_duration(elapsed, el, sizeof el);
        dtrain_format_duration(done > 0 ? elapsed / (double)done * (double)(c->steps - r->base.step - 1) : 0.0, eta,
                               sizeof eta);
        char mfu[32] = "";
        if (t->peak_flops > 0.0)
            snprintf(mfu, sizeof mfu, " | MFU %.1f%%", 100.0 * r->base.mfu);
        fprintf(progress, "step %5ld/%ld | loss %.6f (smoothed %.4f)%s | lr %.3e | norm %.4f | %8.2f ms | "
                "%8.0f tok/s | %7.2f GFLOP/s%s | elapsed %s | ETA %s\n", r->base.step, c->steps,
                (double)r->base.loss, t->smooth_loss, vl, r->base.lr, r->base.grad_norm, r->base.ms,
                r->base.tokens_per_s, r->base.gflops, mfu, el, eta);
        fflush(progress);
    }
    char ranks[320];
    int rc = log_ranks(t, r, ranks, sizeof ranks, err, errlen);
    if (rc != DTRAIN_OK)
        return rc;
    if (t->metrics != NULL)
        write_metrics(t, r, ranks);
    char why[DTRAIN_PATH_MAX + 128];
    if (t->prom_on &&
        dtrain_prom_update(&t->prom, &r->base, c->steps, r->base.step + 1 == c->steps || val, why, sizeof why) !=
            DTRAIN_OK)
        side_failure(t, SIDE_PROM, why);
    return DTRAIN_OK;
}

void dtrain_format_duration(double s, char *out, size_t outlen)
{
    long n = s > 0.0 && s < 1e9 ? (long)(s + 0.5) : 0;
    if (n < 60)
        snprintf(out, outlen, "%lds", n);
    else if (n < 3600)
        snprintf(out, outlen, "%ldm%02lds", n / 60, n % 60);
    else
        snprintf(out, outlen, "%ldh%02ldm", n / 3600, n % 3600 / 60);
}

void dtrain_ptrainer_summary(const struct dtrain_ptrainer *t, FILE *progress, const char *prog, const char *ckpt_dir)
{
    const struct dtrain_train_config *c = &t->cfg;
    char el[32], val[160] = "", kept[DTRAIN_PATH_MAX * 2 + 64] = "", *k = kept;
    size_t left = sizeof kept;
    if (t->layout.rank != 0 || progress == NULL)
        return;
    if (t->run_start == 0.0) {
        fprintf(progress, "%s: nothing to do: the run is at step %ld of %ld already\n", prog, t->step, c->steps);
        fflush(progress);
        return;
    }
    dtrain_format_duration(dtrain_clock_s() - t->run_start, el, sizeof el);
    if (!isnan(t->last_val))
        snprintf(val, sizeof val, ", val loss %.6f (best %.6f after step %ld)", t->last_val, t->best_val,
                 t->best_val_step);
    if (ckpt_dir != NULL && ckpt_dir[0] != '\0') {
        int n = snprintf(k, left, "; checkpoints in %s", ckpt_dir);
        k += n > 0 && (size_t)n < left ? n : 0, left -= n > 0 && (size_t)n < left ? (size_t)n : 0;
    }
    if (c->save_llmc[0] != '\0') {
        int n = snprintf(k, left, "; model %s", c->save_llmc);
        k += n > 0 && (size_t)n < left ? n : 0, left -= n > 0 && (size_t)n < left ? (size_t)n : 0;
    }
    if (c->metrics[0] != '\0') {
        int n = snprintf(k, left, "; metrics %s", c->metrics);
        k += n > 0 && (size_t)n < left ? n : 0, left -= n > 0 && (size_t)n < left ? (size_t)n : 0;
    }
    if (t->compute_sum != NULL && t->logged > 0) {
        int slow = 0, fast = 0;
        for (int q = 1; q < t->layout.world_size; q++) {
            slow = t->compute_sum[q] > t->compute_sum[slow] ? q : slow;
            fast = t->compute_sum[q] < t->compute_sum[fast] ? q : fast;
        }
        snprintf(k, left, "; slowest rank %d (compute %.2f ms a step), fastest %d (%.2f ms), per-rank files in %s",
                 slow, t->compute_sum[slow] / (double)t->logged, fast, t->compute_sum[fast] / (double)t->logged,
                 c->rank_metrics);
    }
    fprintf(progress, "%s: done: steps %ld..%ld of %ld in %s, final loss %.6f (smoothed %.4f)%s%s\n", prog,
            t->first_step, t->step - 1, c->steps, el, (double)t->last_loss, t->smooth_loss, val, kept);
    fflush(progress);
}


int dtrain_report_open(struct dtrain_ptrainer *t, char *err, size_t errlen)
{
    const struct dtrain_train_config *c = &t->cfg;
    const struct dtrain_bootstrap *bs = &t->layout;
    int rc;
    /* here, so that a bad path is refused with every rank's agreement; not
     * truncated yet: a resumed run keeps the lines of the steps before it
     * (dtrain_ptrainer_metrics_from) */
    if (bs->rank == 0 && c->metrics[0] != '\0') {
        /* Never a blocking open, only a regular file (checked on the fd:
         * the path may have changed since the config's check). */
        int fd = dtrain_open_regular(c->metrics, O_RDWR | O_CREAT | O_APPEND, "metrics file", NULL, err, errlen);
        if (fd >= 0 && (t->metrics = fdopen(fd, "a+")) == NULL) {
            snprintf(err, errlen, "cannot open metrics file %s: %s", c->metrics, strerror(errno));
            close(fd);
        }
        if (t->metrics == NULL)
            return DTRAIN_ERR_INPUT;
    }
    if ((rc = open_rank_metrics(t, err, errlen)) != DTRAIN_OK)
        return rc;
    if (bs->rank == 0 && c->prom_textfile[0] != '\0') {
        if ((rc = dtrain_prom_init(&t->prom, c->prom_textfile, err, errlen)) != DTRAIN_OK)
            return rc;
        t->prom_on = 1;
    }
    return DTRAIN_OK;
}

int dtrain_report_close(struct dtrain_ptrainer *t, char *err, size_t errlen)
{
    (void)err, (void)errlen;
    if (t->metrics != NULL) {
        int bad = fclose(t->metrics) != 0;
        t->metrics = NULL;
        if (bad) {
            char why[DTRAIN_PATH_MAX + 128];
            snprintf(why, sizeof why, "cannot write metrics file %s: %s", t->cfg.metrics, strerror(errno));
            side_failure(t, SIDE_METRICS, why);
        }
    }
    return DTRAIN_OK;
}
