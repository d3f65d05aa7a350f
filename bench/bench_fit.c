/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-bench-fit: the largest Llama-shape model that trains in a memory
 * budget on the cpu backend, in four modes, each against mode 1 measured
 * in the same run:
 *   1 resident   fp32 AdamW, everything in RAM (16 bytes a parameter)
 *   2 nvme       --offload-optimizer nvme:DIR (the moments go to files)
 *   3 lora       --lora-rank 16 on q,k,v,o,gate,up,down, frozen fp32 base
 *   4 qlora      mode 3 with --base-dtype nf4 ("not built" when
 *                dtrain-train's --help does not offer the flag)
 * and the step-time overhead of mode 2 against mode 1 at mode 1's model.
 *
 *   dtrain-bench-fit [--mem-gib G] [--nvme DIR] [--steps N] [--threads N] [--train PATH]
 *
 * The family, one knob k: C = 128k, L = k, NH = 2k (head size 64),
 * KVH = k (GQA, 2 query heads a key/value head), F = 8C/3 rounded up to
 * 256 (Llama 2's rule), V = 4096, untied head (Llama 2 7B is k = 32).
 * Every run is dtrain-train on a config.json of that shape, B = 1, T = 64,
 * random tokens, as a child process.
 *
 * The search: a 1-step run at k = 1 gives the trainer's --memory-report
 * (model-state formula bytes, activations, offload staging) and the peak
 * RSS; the bytes a base parameter costs come from that report (so the
 * formula stays the trainer's: 16 resident, 8 with nvme offload, 4 for a
 * frozen fp32 base, NF4's), 12 bytes an adapter parameter (weights,
 * gradients, moments), activations grow as k^2 at fixed B, T (L = k
 * layers of width 128k), and the process's own bytes (libraries, BLAS
 * buffers) are k = 1's RSS less its report.  The largest k whose
 * estimate is under 92% of the budget trains --steps steps; while the
 * child's RSS (sampled every 20 ms) would pass the budget it is killed
 * and a smaller k is tried (an eighth smaller, at least 1; up to 12
 * sizes).  The figures are its peak RSS (wait4's ru_maxrss)
 * against the budget, the most RSS sampled once the steps run (the peak
 * can be the initialisation's), and the median tokens/s and step time of the steps
 * after the first (dtrain-train's --metrics).
 *
 * Defaults: the budget is MemAvailable, the nvme folder a temporary one,
 * 3 steps, 2 threads.  At --mem-gib 2 it takes a few minutes on 2 cores;
 * at a machine's whole 24 GiB the models would be ~1B (resident) to ~2B
 * (LoRA) parameters and a step take minutes (doc/runtime.md). */
#include "bench_util.h"
#include "dtrain_data.h"
#include "dtrain_model.h"
#include "dtrain_optim.h"
#include "dtrain_parse.h"
#include "dtrain_rng.h"
#include "parallel/dtrain_lora.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PROG "dtrain-bench-fit"
#define T 64
#define V 4096
#define LORA_RANK 16
#define LORA_TARGETS "q,k,v,o,gate,up,down"
#define MAX_K 512
#define MAX_STEPS 1000
#define FIT_SHARE 0.92 /* of the budget the estimate may use: allocator slack, page tables */
#define TRIES 12       /* sizes tried downwards from the estimate's (an eighth smaller each) */
#define CAL_SMALL 2    /* the sizes whose 1-step runs calibrate the estimate */
#define CAL_LARGE 4

#ifndef DTRAIN_TRAIN_BIN
#define DTRAIN_TRAIN_BIN "dtrain-train"
#endif

enum mode { RESIDENT, NVME, LORA, QLORA, MODES };
static const char *const mode_name[MODES] = {"resident", "nvme", "lora", "qlora-nf4"};

struct options {
    double budget; /* bytes */
    const char *nvme, *train;
    int steps, threads;
};

/* What one dtrain-train run gave. */
struct run {
    int ok, over; /* exited 0; killed at the budget */
    size_t params, report_ram, activations, model_state, nvme_bytes;
    double rss, steps_rss, tok_s, step_ms; /* steps_rss: the most sampled once steps are logged */
};

static char g_dir[4096]; /* the temporary folder: config, tokens, outputs */

static double mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    double kib = 0;
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "MemAvailable: %lf kB", &kib) == 1)
            break;
    if (f != NULL)
        fclose(f);
    return kib * 1024.0;
}

static void family(int k, struct dtrain_model_config *c)
{
    memset(c, 0, sizeof *c);
    c->family = DTRAIN_FAMILY_LLAMA;
    c->channels = 128 * k;
    c->num_layers = k;
    c->num_heads = 2 * k;
    c->num_kv_heads = k;
    c->intermediate_size = (8 * c->channels / 3 + 255) / 256 * 256;
    c->vocab_size = V;
    c->padded_vocab_size = dtrain_model_pad_vocab(V);
    c->max_seq_len = T;
    c->untied_head = 1;
    c->norm_eps = 1e-5f;
    c->rope_theta = 10000.0f;
}

static size_t adapter_count(const struct dtrain_model_config *c)
{
    struct dtrain_lora_spec spec;
    char err[256];
    if (dtrain_lora_spec_make(c, LORA_RANK, 2.0 * LORA_RANK, LORA_TARGETS, &spec, err, sizeof err) != 0)
        return 0;
    return dtrain_lora_whole_count(c, &spec);
}

static int write_config(const char *path, const struct dtrain_model_config *c)
{
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return -1;
    fprintf(f, "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": %d, "
            "\"intermediate_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": %d, "
            "\"num_key_value_heads\": %d, \"vocab_size\": %d, \"max_position_embeddings\": %d, "
            "\"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0, \"tie_word_embeddings\": false}\n",
            c->channels, c->intermediate_size, c->num_layers, c->num_heads, c->num_kv_heads, c->vocab_size,
            c->max_seq_len);
    return fclose(f);
}

static size_t json_size(const char *line, const char *key)
{
    const char *p = strstr(line, key);
    return p != NULL ? strtoull(p + strlen(key), NULL, 10) : 0;
}

static double json_real(const char *line, const char *key)
{
    const char *p = strstr(line, key);
    return p != NULL ? strtod(p + strlen(key), NULL) : 0.0;
}

/* The memory line of out and the median step of metrics after the first. */
static void parse_outputs(const char *out, const char *metrics, struct run *r)
{
    char line[8192];
    FILE *f = fopen(out, "r");
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (strncmp(line, "{\"memory\"", 9) == 0) {
            r->params = json_size(line, "\"local_params\": ");
            r->model_state = json_size(line, "\"model_state_formula_bytes\": ");
            r->activations = json_size(line, "\"activations_bytes\": ");
            r->nvme_bytes = json_size(line, "\"nvme_formula_bytes\": ");
            r->report_ram = r->model_state + r->activations + json_size(line, "\"pinned_host_formula_bytes\": ");
        }
    if (f != NULL)
        fclose(f);
    double ms[MAX_STEPS], tok[MAX_STEPS];
    int n = 0, seen = 0;
    if ((f = fopen(metrics, "r")) == NULL)
        return;
    while (fgets(line, sizeof line, f) != NULL && n < MAX_STEPS)
        if (strncmp(line, "{\"step\"", 7) == 0 && seen++ > 0) { /* the first step warms up */
            ms[n] = json_real(line, "\"ms\": ");
            tok[n++] = json_real(line, "\"tokens_per_s\": ");
        }
    fclose(f);
    if (n > 0) {
        r->step_ms = bench_median(ms, n);
        r->tok_s = bench_median(tok, n);
    }
}

static double rss_bytes(pid_t pid)
{
    char path[64];
    long pages = 0, size;
    snprintf(path, sizeof path, "/proc/%d/statm", (int)pid);
    FILE *f = fopen(path, "r");
    if (f != NULL) {
        if (fscanf(f, "%ld %ld", &size, &pages) != 2)
            pages = 0;
        fclose(f);
    }
    return (double)pages * (double)sysconf(_SC_PAGESIZE);
}

/* Train model k in mode m for steps steps in a child; kill it should its
 * RSS pass the budget. */
static void train(const struct options *o, enum mode m, int k, int steps, struct run *r)
{
    struct dtrain_model_config c;
    char cfg[4200], data[4200], out[4200], err[4200], metrics[4200], nv[4200], st[16], th[16];
    memset(r, 0, sizeof *r);
    family(k, &c);
    snprintf(cfg, sizeof cfg, "%s/config.json", g_dir);
    snprintf(data, sizeof data, "%s/tokens.bin", g_dir);
    snprintf(out, sizeof out, "%s/out.txt", g_dir);
    snprintf(err, sizeof err, "%s/err.txt", g_dir);
    snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", g_dir);
    snprintf(nv, sizeof nv, "nvme:%s", o->nvme);
    snprintf(st, sizeof st, "%d", steps);
    snprintf(th, sizeof th, "%d", o->threads);
    unlink(metrics);
    if (write_config(cfg, &c) != 0)
        return;
    const char *argv[40] = {o->train, "--model-config", cfg, "--data", data, "--batch", "1", "--seq", "64",
                            "--steps", st, "--threads", th, "--memory-report", "1", "--metrics", metrics,
                            "--log-every", "0", "--peak-flops", "1"};
    int a = 21;
    if (m == NVME) {
        argv[a++] = "--offload-optimizer";
        argv[a++] = nv;
    }
    if (m == LORA || m == QLORA) {
        argv[a++] = "--lora-rank";
        argv[a++] = "16";
        argv[a++] = "--lora-targets";
        argv[a++] = LORA_TARGETS;
    }
    if (m == QLORA) {
        argv[a++] = "--base-dtype";
        argv[a++] = "nf4";
    }
    argv[a] = NULL;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        int fo = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600), fe = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fo < 0 || fe < 0 || dup2(fo, 1) < 0 || dup2(fe, 2) < 0)
            _exit(127);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    if (pid < 0)
        return;
    int status = 0;
    struct rusage ru;
    struct timespec tick = {0, 20 * 1000 * 1000};
    for (;;) {
        pid_t w = wait4(pid, &status, WNOHANG, &ru);
        if (w == pid)
            break;
        if (w < 0 && errno != EINTR)
            return;
        double now = rss_bytes(pid);
        struct stat sb;
        if (now > r->steps_rss && stat(metrics, &sb) == 0 && sb.st_size > 0)
            r->steps_rss = now;
        if (!r->over && now > o->budget) {
            r->over = 1;
            kill(pid, SIGKILL);
        }
        nanosleep(&tick, NULL);
    }
    r->rss = (double)ru.ru_maxrss * 1024.0;
    r->over |= r->rss >= o->budget;
    r->ok = !r->over && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    parse_outputs(out, metrics, r);
}

/* The largest k whose estimate fits the budget, from two small runs
 * (k = CAL_SMALL and CAL_LARGE; lg == NULL when the larger did not train). */
static int estimate_k(enum mode m, const struct run *sm, const struct run *lg, double budget)
{
    struct dtrain_model_config c;
    int lora = m == LORA || m == QLORA, k_ref = lg != NULL ? CAL_LARGE : CAL_SMALL;
    const struct run *ref = lg != NULL ? lg : sm;
    family(k_ref, &c);
    double a_ref = lora ? (double)adapter_count(&c) : 0.0, n_ref = (double)dtrain_model_param_count(&c);
    double per_param = ((double)ref->model_state - 12.0 * a_ref) / n_ref;
    double staging = (double)(ref->report_ram - ref->model_state - ref->activations);
    /* what the report leaves out (the process, transient copies of the model), linear in n */
    double out_ref = ref->rss - (double)ref->report_ram, slope = 0.0;
    if (lg != NULL) {
        family(CAL_SMALL, &c);
        double n_sm = (double)dtrain_model_param_count(&c), out_sm = sm->rss - (double)sm->report_ram;
        slope = out_ref > out_sm ? (out_ref - out_sm) / (n_ref - n_sm) : 0.0;
    }
    int best = 1;
    for (int k = 2; k <= MAX_K; k++) {
        family(k, &c);
        double n = (double)dtrain_model_param_count(&c), a = lora ? (double)adapter_count(&c) : 0.0;
        double est = per_param * n + 12.0 * a + (double)ref->activations * k * k / (k_ref * k_ref) + out_ref +
                     slope * (n - n_ref) + (m == NVME ? 2.0 * sizeof(float) * (double)DTRAIN_OFFLOAD_CHUNK : staging);
        if (est > FIT_SHARE * budget)
            break;
        best = k;
    }
    return best;
}

static int has_flag(const char *train, const char *flag)
{
    char cmd[4600], line[1024];
    int found = 0;
    snprintf(cmd, sizeof cmd, "'%s' --help 2>&1", train);
    FILE *p = popen(cmd, "r");
    while (p != NULL && fgets(line, sizeof line, p) != NULL)
        found |= strstr(line, flag) != NULL;
    if (p != NULL)
        pclose(p);
    return found;
}

static int write_tokens(void)
{
    char path[4200], err[256];
    snprintf(path, sizeof path, "%s/tokens.bin", g_dir);
    size_t n = 4 * (size_t)T + 1;
    uint16_t tok[4 * T + 1];
    for (size_t i = 0; i < n; i++)
        tok[i] = (uint16_t)(dtrain_rng_bits(7, 0, i) % (uint64_t)V);
    if (dtrain_tokens_write(path, tok, n, err, sizeof err) != DTRAIN_OK) {
        fprintf(stderr, PROG ": %s\n", err);
        return -1;
    }
    return 0;
}

static int parse_options(int argc, char **argv, struct options *o)
{
    char err[256];
    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i];
        long v;
        if (i + 1 >= argc)
            goto usage;
        const char *val = argv[++i];
        if (strcmp(flag, "--mem-gib") == 0) {
            char *end;
            double g = strtod(val, &end);
            if (*end != '\0' || !(g > 0.0 && g < 1e6)) {
                fprintf(stderr, PROG ": --mem-gib %s: give a positive number of GiB, e.g. 2\n", val);
                return -1;
            }
            o->budget = g * 1024.0 * 1024.0 * 1024.0;
        } else if (strcmp(flag, "--nvme") == 0)
            o->nvme = val;
        else if (strcmp(flag, "--train") == 0)
            o->train = val;
        else if (strcmp(flag, "--steps") == 0 || strcmp(flag, "--threads") == 0) {
            int steps = strcmp(flag, "--steps") == 0;
            if (dtrain_parse_int(val, steps ? 2 : 1, steps ? MAX_STEPS : 1024, flag, &v, err, sizeof err) != 0) {
                fprintf(stderr, PROG ": %s\n", err);
                return -1;
            }
            *(steps ? &o->steps : &o->threads) = (int)v;
        } else
            goto usage;
    }
    return 0;
usage:
    fprintf(stderr, PROG ": usage: " PROG " [--mem-gib G] [--nvme DIR] [--steps N] [--threads N] [--train PATH]\n");
    return -1;
}

static void remove_outputs(void)
{
    static const char *const names[] = {"config.json", "tokens.bin", "out.txt", "err.txt", "metrics.jsonl"};
    char path[4200];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", g_dir, names[i]);
        unlink(path);
    }
}

int main(int argc, char **argv)
{
    struct options o = {mem_available(), NULL, DTRAIN_TRAIN_BIN, 3, 2};
    if (parse_options(argc, argv, &o) != 0)
        return 2;
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir - 64, "%s/dtrain-bench-fit.XXXXXX", tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
    if (mkdtemp(g_dir) == NULL) {
        perror(PROG ": mkdtemp");
        return 1;
    }
    if (o.nvme == NULL)
        o.nvme = g_dir; /* the trainer makes its own folder inside and removes it */
    int rc = write_tokens() == 0 ? 0 : 1, nf4 = has_flag(o.train, "--base-dtype");
    struct run best[MODES], nvme_at_resident;
    int best_k[MODES] = {0};
    printf(PROG ": budget %.2f GiB, Llama family C=128k L=k NH=2k KVH=k F=8C/3 (to 256) V=%d untied, "
           "B=1 T=%d, %d steps, %d threads, cpu backend fp32\n",
           o.budget / (1 << 30), V, T, o.steps, o.threads);
    for (int m = 0; m < MODES && rc == 0; m++) {
        memset(&best[m], 0, sizeof best[m]);
        if (m == QLORA && !nf4)
            continue;
        struct run sm, lg;
        train(&o, (enum mode)m, CAL_SMALL, 1, &sm);
        if (!sm.ok) {
            printf("%-10s k=%d does not train%s (see dtrain-train's error in a rerun)\n", mode_name[m], CAL_SMALL,
                   sm.over ? ": over the budget" : "");
            continue;
        }
        train(&o, (enum mode)m, CAL_LARGE, 1, &lg);
        int k = estimate_k((enum mode)m, &sm, lg.ok ? &lg : NULL, o.budget);
        for (int t = 0; t < TRIES && k >= 1; t++, k -= k > 8 ? k / 8 : 1) {
            fprintf(stderr, PROG ": %s: k=%d\n", mode_name[m], k);
            train(&o, (enum mode)m, k, o.steps, &best[m]);
            if (best[m].ok) {
                best_k[m] = k;
                break;
            }
        }
    }
    if (best_k[RESIDENT] > 0)
        train(&o, NVME, best_k[RESIDENT], o.steps, &nvme_at_resident);

    printf("%-10s %4s %6s %14s %14s %14s %10s %8s %10s %10s %9s %9s\n", "mode", "k", "C", "params", "report RAM B",
           "report NVMe B", "peak RSS", "budget", "steps RSS", "tokens/s", "params x", "tok/s x");
    for (int m = 0; m < MODES; m++) {
        const struct run *r = &best[m], *base = &best[RESIDENT];
        if (m == QLORA && !nf4) {
            printf("%-10s not built (dtrain-train has no --base-dtype)\n", mode_name[m]);
            continue;
        }
        if (best_k[m] == 0) {
            printf("%-10s no size trains in the budget\n", mode_name[m]);
            continue;
        }
        char px[32] = "-", tx[32] = "-";
        if (best_k[RESIDENT] > 0) {
            snprintf(px, sizeof px, "%.2f", (double)r->params / (double)base->params);
            snprintf(tx, sizeof tx, "%.3f", r->tok_s / base->tok_s);
        }
        printf("%-10s %4d %6d %14zu %14zu %14zu %7.0f MiB %6.1f %% %6.0f MiB %10.1f %9s %9s\n", mode_name[m],
               best_k[m], 128 * best_k[m], r->params, r->report_ram, r->nvme_bytes, r->rss / (1 << 20),
               100.0 * r->rss / o.budget, r->steps_rss / (1 << 20), r->tok_s, px, tx);
    }
    if (best_k[RESIDENT] > 0 && nvme_at_resident.ok)
        printf("nvme offload at the resident model (k=%d): median step %.1f ms vs %.1f ms resident: %.3f x\n",
               best_k[RESIDENT], nvme_at_resident.step_ms, best[RESIDENT].step_ms,
               nvme_at_resident.step_ms / best[RESIDENT].step_ms);
    remove_outputs();
    if (rmdir(g_dir) != 0)
        fprintf(stderr, PROG ": cannot remove %s: %s\n", g_dir, strerror(errno));
    return rc;
}
