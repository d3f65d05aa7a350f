/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The Prometheus textfile (dtrain_metrics.h): the node_exporter text
 * format with HELP and TYPE for every metric, the job label escaped, the
 * figures of the step given, a whole file renamed into place (no temporary
 * left), at most one rewrite a second but always the last step, clear
 * refusals; and end to end, dtrain-train --prom-textfile leaves the run's
 * last step in the file while the JSON metrics lines carry their time. */
#include "dtrain_data.h"
#include "trainer/dtrain_metrics.h"
#include "dtrain_train.h"
#include "tap.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[1024];

static void path_in(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/%s", dir, name);
}

/* The whole file into buf ("" when it cannot be read). */
static void slurp(const char *path, char *buf, size_t len)
{
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return;
    size_t n = fread(buf, 1, len - 1, f);
    buf[n] = '\0';
    fclose(f);
}

/* The value of the sample line starting with `prefix` ("name{...} "), or
 * -1e300 when there is none. */
static double sample(const char *text, const char *prefix)
{
    size_t plen = strlen(prefix);
    for (const char *line = text; line != NULL && *line != '\0';) {
        if (strncmp(line, prefix, plen) == 0)
            return strtod(line + plen, NULL);
        line = strchr(line, '\n');
        if (line != NULL)
            line++;
    }
    return -1e300;
}

/* Every metric is "# HELP name text", "# TYPE name gauge", then one sample
 * "name{job=...} value" or "name value"; nothing else in the file. */
static int well_formed(const char *text, int *metrics)
{
    char name[128] = "";
    int state = 0; /* 0 expect HELP, 1 expect TYPE, 2 expect the sample */
    *metrics = 0;
    for (const char *line = text; *line != '\0';) {
        const char *end = strchr(line, '\n');
        if (end == NULL)
            return 0; /* the last line ends in a newline too */
        char buf[512];
        size_t n = (size_t)(end - line);
        if (n >= sizeof buf)
            return 0;
        memcpy(buf, line, n);
        buf[n] = '\0';
        char type[32];
        if (state == 0 && sscanf(buf, "# HELP %127s", name) == 1 && strlen(buf) > 8 + strlen(name))
            state = 1;
        else if (state == 1 && sscanf(buf, "# TYPE %*s %31s", type) == 1 && strcmp(type, "gauge") == 0 &&
                 strncmp(buf + 7, name, strlen(name)) == 0)
            state = 2;
        else if (state == 2 && strncmp(buf, name, strlen(name)) == 0 &&
                 (buf[strlen(name)] == ' ' || buf[strlen(name)] == '{')) {
            const char *value = strrchr(buf, ' ');
            char *rest;
            strtod(value + 1, &rest);
            if (*rest != '\0')
                return 0;
            state = 0;
            (*metrics)++;
        } else {
            return 0;
        }
        line = end + 1;
    }
    return state == 0;
}

/* Files in dir other than the token file. */
static int files_in_dir(char *names, size_t len)
{
    int n = 0;
    names[0] = '\0';
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || strcmp(e->d_name, "data.bin") == 0)
            continue;
        n++;
        strncat(names, e->d_name, len - strlen(names) - 2);
        strcat(names, " ");
    }
    if (d != NULL)
        closedir(d);
    return n;
}

static void test_refusals(void)
{
    struct dtrain_prom p;
    char err[512] = "", path[DTRAIN_PATH_MAX];
    path_in(path, sizeof path, "dtrain.txt");
    ok(dtrain_prom_init(&p, path, err, sizeof err) == DTRAIN_ERR_INPUT && strstr(err, "must end in .prom"),
       "a name that does not end in .prom is refused (%s)", err);
    ok(dtrain_prom_init(&p, ".prom", err, sizeof err) == DTRAIN_ERR_INPUT, "'.prom' alone is refused");
    path_in(path, sizeof path, "no-such-folder/dtrain.prom");
    ok(dtrain_prom_init(&p, path, err, sizeof err) == DTRAIN_ERR_INPUT && strstr(err, "No such file"),
       "a folder that is not there is refused at the start (%s)", err);
    path_in(path, sizeof path, "dtrain.prom");
    setenv("SLURM_RESTART_COUNT", "two", 1);
    ok(dtrain_prom_init(&p, path, err, sizeof err) == DTRAIN_ERR_INPUT && strstr(err, "SLURM_RESTART_COUNT"),
       "a malformed SLURM_RESTART_COUNT is refused (%s)", err);
    unsetenv("SLURM_RESTART_COUNT");
}

static void test_file(void)
{
    struct dtrain_prom p;
    char err[512] = "", path[DTRAIN_PATH_MAX], text[8192], names[1024];
    int metrics = 0;
    path_in(path, sizeof path, "dtrain.prom");
    setenv("SLURM_JOB_ID", "1234", 1);
    setenv("SLURM_RESTART_COUNT", "2", 1);
    int rc = dtrain_prom_init(&p, path, err, sizeof err);
    ok(rc == DTRAIN_OK, "init with SLURM_JOB_ID=1234 SLURM_RESTART_COUNT=2 %s", err);
    struct dtrain_step_result r = {.step = 41, .loss = 2.5f, .lr = 3e-4, .grad_norm = 0.75, .ms = 250.0,
                                   .tokens_per_s = 16384.0, .gflops = 1.0, .mfu = 0.375};
    double before = dtrain_metrics_wall_clock();
    ok(rc == DTRAIN_OK && dtrain_prom_write(&p, &r, 600, err, sizeof err) == DTRAIN_OK, "write %s", err);
    slurp(path, text, sizeof text);
    int formed = well_formed(text, &metrics);
    ok(formed && metrics == 10,
       "node_exporter text format: HELP, TYPE gauge and one sample for each of %d metrics", metrics);
    ok(sample(text, "dtrain_step{job=\"1234\"} ") == 41 && sample(text, "dtrain_steps_target{job=\"1234\"} ") == 600,
       "dtrain_step 41 of dtrain_steps_target 600, labelled with the job");
    ok(sample(text, "dtrain_loss{job=\"1234\"} ") == 2.5 &&
       sample(text, "dtrain_tokens_per_second{job=\"1234\"} ") == 16384 &&
       sample(text, "dtrain_step_seconds{job=\"1234\"} ") == 0.25 &&
       sample(text, "dtrain_learning_rate{job=\"1234\"} ") == 3e-4 &&
       sample(text, "dtrain_grad_norm{job=\"1234\"} ") == 0.75 && sample(text, "dtrain_mfu{job=\"1234\"} ") == 0.375,
       "loss, tokens/s, step seconds (ms / 1000), learning rate, gradient norm, MFU as given");
    double stamp = sample(text, "dtrain_last_step_timestamp_seconds{job=\"1234\"} ");
    ok(sample(text, "dtrain_restarts{job=\"1234\"} ") == 2 && stamp >= before - 1 && stamp <= before + 3600,
       "dtrain_restarts from SLURM_RESTART_COUNT, a Unix timestamp of the write");
    ok(files_in_dir(names, sizeof names) == 1 && strcmp(names, "dtrain.prom ") == 0,
       "only dtrain.prom in the folder, no temporary left (%s)", names);

    /* within a second of the last write: kept; the last step: rewritten */
    r.step = 42;
    ok(dtrain_prom_update(&p, &r, 600, 0, err, sizeof err) == DTRAIN_OK, "update within a second");
    slurp(path, text, sizeof text);
    int kept = sample(text, "dtrain_step{job=\"1234\"} ") == 41;
    r.step = 599;
    ok(dtrain_prom_update(&p, &r, 600, 1, err, sizeof err) == DTRAIN_OK, "update of the last step");
    slurp(path, text, sizeof text);
    ok(kept && sample(text, "dtrain_step{job=\"1234\"} ") == 599,
       "at most one rewrite a second, but always the run's last step");
    p.last_write -= 2.0; /* as if two seconds had passed */
    r.step = 600;
    ok(dtrain_prom_update(&p, &r, 700, 0, err, sizeof err) == DTRAIN_OK &&
       (slurp(path, text, sizeof text), sample(text, "dtrain_step{job=\"1234\"} ")) == 600,
       "a second after the last write: rewritten");

    /* a job id the label must escape; no job: no label */
    setenv("SLURM_JOB_ID", "a\"b\\c", 1);
    ok(dtrain_prom_init(&p, path, err, sizeof err) == DTRAIN_OK && dtrain_prom_write(&p, &r, 700, err, sizeof err) == 0 &&
       (slurp(path, text, sizeof text), sample(text, "dtrain_step{job=\"a\\\"b\\\\c\"} ")) == 600,
       "quote and backslash in the job label are escaped");
    unsetenv("SLURM_JOB_ID");
    unsetenv("SLURM_RESTART_COUNT");
    ok(dtrain_prom_init(&p, path, err, sizeof err) == DTRAIN_OK && dtrain_prom_write(&p, &r, 700, err, sizeof err) == 0 &&
       (slurp(path, text, sizeof text), well_formed(text, &metrics)) && sample(text, "dtrain_step ") == 600 &&
       sample(text, "dtrain_restarts ") == 0,
       "outside Slurm: no label, 0 restarts");
    ok(strstr(text, "dtrain_val_loss") == NULL, "no dtrain_val_loss before a validation");
    r.has_val_loss = 1;
    r.val_loss = 3.25;
    ok(dtrain_prom_write(&p, &r, 700, err, sizeof err) == 0 &&
       (slurp(path, text, sizeof text), well_formed(text, &metrics)) && metrics == 11 &&
       sample(text, "dtrain_val_loss ") == 3.25, "a step with a validation loss adds dtrain_val_loss");
    r.has_val_loss = 0;
    ok(dtrain_prom_write(&p, &r, 700, err, sizeof err) == 0 &&
       (slurp(path, text, sizeof text), sample(text, "dtrain_val_loss ")) == 3.25,
       "later steps keep the newest validation loss");
    r.loss = 0.0f / 0.0f;
    ok(dtrain_prom_write(&p, &r, 700, err, sizeof err) == 0 &&
       (slurp(path, text, sizeof text), strstr(text, "\ndtrain_loss NaN\n") != NULL),
       "a NaN loss is written as NaN");
    unlink(path);

    /* the folder is gone between two writes: an error naming the file */
    char sub[DTRAIN_PATH_MAX], subfile[DTRAIN_PATH_MAX + 16];
    path_in(sub, sizeof sub, "sub");
    snprintf(subfile, sizeof subfile, "%s/x.prom", sub);
    rc = mkdir(sub, 0700) == 0 ? dtrain_prom_init(&p, subfile, err, sizeof err) : -99;
    rmdir(sub);
    ok(rc == DTRAIN_OK && dtrain_prom_write(&p, &r, 700, err, sizeof err) == DTRAIN_ERR_SYSTEM && strstr(err, "x.prom"),
       "a file that cannot be written any more is an error (%s)", err);
}

/* dtrain-train --prom-textfile: the file holds the last step of the run. */
static void test_trainer(void)
{
    char err[256] = "", data[DTRAIN_PATH_MAX], prom[DTRAIN_PATH_MAX], metrics[DTRAIN_PATH_MAX], text[8192];
    uint16_t tok[2048];
    for (size_t i = 0; i < sizeof tok / sizeof tok[0]; i++)
        tok[i] = (uint16_t)("dtrain metrics for prometheus; "[i % 31]);
    path_in(data, sizeof data, "data.bin");
    path_in(prom, sizeof prom, "train.prom");
    path_in(metrics, sizeof metrics, "m.jsonl");
    if (!ok(dtrain_tokens_write(data, tok, sizeof tok / sizeof tok[0], err, sizeof err) == DTRAIN_OK,
            "a token file %s", err))
        return;
    char *argv[] = {"dtrain-train", "--data", data, "--layers", "1", "--channels", "16", "--heads", "2",
                    "--max-seq-len", "16", "--seq", "16", "--batch", "2", "--steps", "3", "--threads", "1",
                    "--log-every", "0", "--metrics", metrics, "--prom-textfile", prom, NULL};
    double before = dtrain_metrics_wall_clock();
    /* in this process: dtrain's switch of OpenBLAS's kernels would execute
     * this test program again (on a CPU OpenBLAS does not know) */
    setenv("DTRAIN_BLAS_CORE", "keep", 1);
    int rc = dtrain_train_main((int)(sizeof argv / sizeof argv[0]) - 1, argv);
    slurp(prom, text, sizeof text);
    ok(rc == 0 && sample(text, "dtrain_step ") == 2 && sample(text, "dtrain_steps_target ") == 3,
       "dtrain-train --prom-textfile: exit %d, the file shows the last step (2) of 3", rc);
    slurp(metrics, text, sizeof text);
    const char *t = strstr(text, "\"time\": ");
    double when = t != NULL ? strtod(t + 8, NULL) : 0;
    ok(when >= before - 1 && when <= before + 3600, "the JSON metrics lines carry the Unix time they were written");
    char *bad[] = {"dtrain-train", "--data", data, "--prom-textfile", metrics, NULL};
    ok(dtrain_train_main(5, bad) == 2, "--prom-textfile with a name that is not .prom: exit 2 before training");
    unlink(prom);
    unlink(metrics);
    unlink(data);
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/dtrain-test-prom-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!ok(mkdtemp(dir) != NULL, "a temporary folder"))
        return tap_done();
    unsetenv("SLURM_JOB_ID");
    unsetenv("SLURM_RESTART_COUNT");
    test_refusals();
    test_file();
    test_trainer();
    rmdir(dir);
    return tap_done();
}
