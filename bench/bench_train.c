/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-bench-train: tokens/s and achieved FLOP/s of full GPT-2 training
 * steps (forward, backward, AdamW update) on the CPU kernels, against the
 * best sgemm rate this CPU reaches for large square matrices with any GEMM
 * kernel at hand, measured in the same run.
 *
 *   dtrain-bench-train [--threads N] [--steps N] [--warmup N] [--sgemm-n N]
 *
 * The candidates, each in a child process of its own (OpenBLAS chooses its
 * kernels when it loads): every OpenBLAS core this CPU can execute
 * (OPENBLAS_CORETYPE), and BLIS (libblis.so.4) and oneDNN (libdnnl.so.2)
 * when installed.  The best of them is the baseline, so a fallback kernel
 * in the trainer (dtrain_blas.h) shows as a low ratio instead of lowering
 * the baseline with it.
 *
 * Default shape (the runtime issue's benchmark): L=4, C=256, NH=4, V=4096,
 * T=128, B=8 on 2 threads.  The step's FLOPs are dtrain_model_flops_per_step()
 * (matmuls and attention, forward + backward = 3x forward).  The sgemm rate
 * is measured before and after the steps with OpenBLAS's own threads; the
 * ratio uses medians, so one noisy neighbour on a shared machine does not
 * decide the figure.  Target: the step at >= 60% of the sgemm rate.
 * "CPU busy" is the process's CPU time over threads x wall time per step:
 * on a quiet machine what is missing from 100% is the threads waiting
 * (fork-join, imbalance); on a loaded one also time not scheduled.
 *
 * Then the same steps in bf16, on what dtrain_cpu_bf16_describe() prints:
 * oneDNN's bf16 matmuls where the CPU has AMX-BF16 / AVX512-BF16 (target
 * there: >= 2.5x the fp32 tokens/s of the same run), else fp32 GEMMs on
 * operands rounded to bf16; DTRAIN_CPU_ONEDNN=off|force chooses. */
#include "bench_util.h"
#include "dtrain_blas.h"
#include "dtrain_gpt2.h"
#include "dtrain_kernels.h"
#include "dtrain_optim.h"
#include "dtrain_parse.h"
#include "dtrain_rng.h"
#include "dtrain_clock.h"

#include <cblas.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PROG "dtrain-bench-train"
#define TARGET_RATIO 0.60

void openblas_set_num_threads(int num_threads);

/* The sgemm of a library loaded at run time: CBLAS's (BLIS) or oneDNN's. */
typedef void (*cblas_sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *, int,
                               float, float *, int);
typedef int (*dnnl_sgemm_fn)(char, char, long, long, long, float, const float *, long, const float *, long,
                             float, float *, long);
struct gemm_lib {
    cblas_sgemm_fn cblas;
    dnnl_sgemm_fn dnnl;
};

static void sgemm_nn(const struct gemm_lib *lib, int n, const float *a, const float *b, float *c)
{
    if (lib != NULL && lib->dnnl != NULL)
        lib->dnnl('N', 'N', n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    else if (lib != NULL && lib->cblas != NULL)
        lib->cblas(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
}

/* Median (or, with fastest, the highest) GFLOP/s of `reps` n x n x n sgemm
 * calls on `threads` threads of the linked OpenBLAS (lib NULL) or of lib. */
static int sgemm_rate_of(const struct gemm_lib *lib, int n, int threads, int reps, double *gflops, int fastest)
{
    size_t nn = (size_t)n * n;
    float *a = malloc(nn * sizeof(float)), *b = malloc(nn * sizeof(float));
    float *c = malloc(nn * sizeof(float));
    double *rate = malloc((size_t)reps * sizeof(double));
    if (a == NULL || b == NULL || c == NULL || rate == NULL) {
        free(a); free(b); free(c); free(rate);
        return -1;
    }
    for (size_t i = 0; i < nn; i++) {
        a[i] = (float)(dtrain_rng_uniform(1, 1, i) - 0.5);
        b[i] = (float)(dtrain_rng_uniform(1, 2, i) - 0.5);
    }
    openblas_set_num_threads(threads);
    sgemm_nn(lib, n, a, b, c);
    for (int r = 0; r < reps; r++) {
        double t0 = dtrain_clock_s();
        sgemm_nn(lib, n, a, b, c);
        rate[r] = 2.0 * n * (double)n * n / (dtrain_clock_s() - t0) * 1e-9;
    }
    /* the CPU kernels run OpenBLAS on one thread and split matmuls themselves */
    openblas_set_num_threads(1);
    *gflops = bench_median(rate, reps);
    for (int r = 0; fastest && r < reps; r++)
        if (rate[r] > *gflops)
            *gflops = rate[r];
    free(a); free(b); free(c); free(rate);
    return 0;
}

static int sgemm_rate(int n, int threads, int reps, double *gflops)
{
    return sgemm_rate_of(NULL, n, threads, reps, gflops, 0);
}

/* The child's side: `--gemm-rate LIB N THREADS` prints the rate of LIB
 * ("openblas" as loaded, "blis", "dnnl") or "-" when LIB is not here. */
static int gemm_rate_child(const char *lib, const char *n_arg, const char *threads_arg)
{
    int n = atoi(n_arg), threads = atoi(threads_arg);
    struct gemm_lib g = {0};
    void *h = NULL;
    if (strcmp(lib, "blis") == 0) {
        if ((h = dlopen("libblis.so.4", RTLD_NOW | RTLD_LOCAL)) != NULL)
            g.cblas = (cblas_sgemm_fn)(uintptr_t)dlsym(h, "cblas_sgemm");
        if (g.cblas == NULL) {
            printf("-\n");
            return 0;
        }
    } else if (strcmp(lib, "dnnl") == 0) {
        if ((h = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL)) != NULL)
            g.dnnl = (dnnl_sgemm_fn)(uintptr_t)dlsym(h, "dnnl_sgemm");
        if (g.dnnl == NULL) {
            printf("-\n");
            return 0;
        }
    }
    double r;
    if (n < 64 || threads < 1 || sgemm_rate_of(h != NULL ? &g : NULL, n, threads, 5, &r, 1) != 0)
        return 1;
    printf("%.3f\n", r);
    return 0;
}

struct gemm_candidate {
    char name[48];
    double gflops; /* < 0: not measured (not here, or failed) */
};

/* Run this program as a child measuring one candidate; "OPENBLAS_CORETYPE"
 * chooses OpenBLAS's kernels, NULL keeps what it chooses itself. */
static double measure_in_child(const char *lib, const char *core, int n, int threads)
{
    char n_s[16], threads_s[16];
    snprintf(n_s, sizeof n_s, "%d", n);
    snprintf(threads_s, sizeof threads_s, "%d", threads);
    /* the child must not switch kernels itself, and a library's own threads follow the count */
    if (core != NULL)
        setenv("OPENBLAS_CORETYPE", core, 1);
    else
        unsetenv("OPENBLAS_CORETYPE");
    setenv("DTRAIN_BLAS_CORE", "keep", 1);
    setenv("BLIS_NUM_THREADS", threads_s, 1);
    setenv("OMP_NUM_THREADS", threads_s, 1);
    int fds[2];
    if (pipe(fds) != 0)
        return -1.0;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        char *args[] = {(char *)PROG, (char *)"--gemm-rate", (char *)lib, n_s, threads_s, NULL};
        execv("/proc/self/exe", args);
        _exit(127);
    }
    close(fds[1]);
    double r = -1.0;
    char line[64] = "";
    ssize_t got = pid > 0 ? read(fds[0], line, sizeof line - 1) : -1;
    close(fds[0]);
    int status = 0;
    if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
        got > 0 && line[0] != '-')
        r = atof(line);
    return r;
}

/* Every candidate's rate, best first in *best; the environment is put back. */
static int measure_candidates(int n, int threads, struct gemm_candidate *c, int max, int *best)
{
    static const char *const openblas_cores[] = {"Prescott", "Sandybridge", "Haswell", "Zen", "SkylakeX",
                                                 "Cooperlake"};
    struct dtrain_cpu_features f;
    dtrain_cpu_features_read(&f);
    char *saved_core = getenv("OPENBLAS_CORETYPE") ? strdup(getenv("OPENBLAS_CORETYPE")) : NULL;
    char *saved_want = getenv("DTRAIN_BLAS_CORE") ? strdup(getenv("DTRAIN_BLAS_CORE")) : NULL;
    char *saved_mark = getenv("DTRAIN_BLAS_SWITCHED") ? strdup(getenv("DTRAIN_BLAS_SWITCHED")) : NULL;
    unsetenv("DTRAIN_BLAS_SWITCHED");
    /* two rounds, each candidate's fastest call: other work on the machine only slows a call down */
    int count = 0;
    for (int round = 0; round < 2; round++) {
        count = 0;
        for (size_t i = 0; i < sizeof openblas_cores / sizeof openblas_cores[0] && count < max; i++) {
            if (dtrain_blas_core_level(openblas_cores[i]) > dtrain_cpu_level(&f))
                continue; /* would die of SIGILL */
            snprintf(c[count].name, sizeof c[count].name, "OpenBLAS %s", openblas_cores[i]);
            double r = measure_in_child("openblas", openblas_cores[i], n, threads);
            c[count].gflops = round == 0 || r > c[count].gflops ? r : c[count].gflops;
            count++;
        }
        static const char *const libs[][2] = {{"blis", "BLIS (libblis.so.4)"}, {"dnnl", "oneDNN (libdnnl.so.2)"}};
        for (int l = 0; l < 2 && count < max; l++, count++) {
            snprintf(c[count].name, sizeof c[count].name, "%s", libs[l][1]);
            double r = measure_in_child(libs[l][0], NULL, n, threads);
            c[count].gflops = round == 0 || r > c[count].gflops ? r : c[count].gflops;
        }
    }
    if (saved_core) setenv("OPENBLAS_CORETYPE", saved_core, 1); else unsetenv("OPENBLAS_CORETYPE");
    if (saved_want) setenv("DTRAIN_BLAS_CORE", saved_want, 1); else unsetenv("DTRAIN_BLAS_CORE");
    if (saved_mark) setenv("DTRAIN_BLAS_SWITCHED", saved_mark, 1);
    unsetenv("BLIS_NUM_THREADS");
    unsetenv("OMP_NUM_THREADS");
    free(saved_core); free(saved_want); free(saved_mark);
    *best = -1;
    for (int i = 0; i < count; i++)
        if (c[i].gflops > 0 && (*best < 0 || c[i].gflops > c[*best].gflops))
            *best = i;
    return count;
}

struct options {
    int threads, steps, warmup, sgemm_n;
};

static int parse_options(int argc, char **argv, struct options *o)
{
    char err[256];
    for (int i = 1; i < argc; i++) {
        long v;
        int *dst = NULL;
        long max = 100000;
        if (strcmp(argv[i], "--threads") == 0) { dst = &o->threads; max = 1024; }
        else if (strcmp(argv[i], "--steps") == 0) dst = &o->steps;
        else if (strcmp(argv[i], "--warmup") == 0) dst = &o->warmup;
        else if (strcmp(argv[i], "--sgemm-n") == 0) { dst = &o->sgemm_n; max = 16384; }
        if (dst == NULL || i + 1 >= argc) {
            fprintf(stderr, PROG ": usage: " PROG " [--threads N] [--steps N] [--warmup N] "
                    "[--sgemm-n N]\n");
            return -1;
        }
        const char *flag = argv[i++];
        if (dtrain_parse_int(argv[i], dst == &o->warmup ? 0 : 1, max, flag, &v,
                             err, sizeof err) != 0) {
            fprintf(stderr, PROG ": %s\n", err);
            return -1;
        }
        *dst = (int)v;
    }
    return 0;
}

/* Median times of the training steps in one precision. */
struct step_times {
    double step_ms, best_ms, fwd_ms, bwd_ms, upd_ms;
    double busy; /* the process's CPU time over threads x wall time of a step (median) */
};

/* CPU time of the whole process (every thread), seconds */
static double process_cpu_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int run_steps(const struct options *o, const struct dtrain_model_config *cfg, int B, int T,
                     enum dtrain_kernels_precision precision, struct step_times *st, size_t *nparams,
                     char *bf16_line, size_t bf16_len)
{
    struct dtrain_kernels *k = NULL;
    struct dtrain_gpt2 *model = NULL;
    struct dtrain_adamw *opt = NULL;
    float *host = NULL;
    int32_t *inputs = NULL, *targets = NULL;
    double *step_ms = NULL, *fwd_ms = NULL, *bwd_ms = NULL, *upd_ms = NULL, *busy = NULL;
    char err[512];
    int rc = 1;
    struct dtrain_kernels_options kopt = {.threads = o->threads, .precision = precision};
    if (dtrain_kernels_create("cpu", &kopt, &k, err, sizeof err) != 0 ||
        dtrain_gpt2_create(k, cfg, B, T, &model, err, sizeof err) != DTRAIN_OK ||
        dtrain_adamw_create(k, dtrain_gpt2_num_params(model), &opt, err, sizeof err) != DTRAIN_OK) {
        fprintf(stderr, PROG ": %s\n", err);
        goto out;
    }
    size_t n = dtrain_gpt2_num_params(model);
    *nparams = n;
    dtrain_cpu_bf16_describe(k, bf16_line, bf16_len);
    host = malloc(n * sizeof(float));
    inputs = malloc((size_t)B * T * sizeof(int32_t));
    targets = malloc((size_t)B * T * sizeof(int32_t));
    step_ms = calloc((size_t)o->steps, sizeof(double));
    fwd_ms = calloc((size_t)o->steps, sizeof(double));
    bwd_ms = calloc((size_t)o->steps, sizeof(double));
    upd_ms = calloc((size_t)o->steps, sizeof(double));
    busy = calloc((size_t)o->steps, sizeof(double));
    if (!host || !inputs || !targets || !step_ms || !fwd_ms || !bwd_ms || !upd_ms || !busy) {
        fprintf(stderr, PROG ": out of memory\n");
        goto out;
    }
    dtrain_model_init_params(cfg, 1337, host);
    dtrain_gpt2_set_params(model, host);
    struct dtrain_optim_config oc = {.lr = 3e-4, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                                     .schedule = DTRAIN_LR_CONSTANT, .total_steps = o->steps};
    for (int s = -o->warmup; s < o->steps; s++) {
        /* random tokens: the speed does not depend on them */
        for (int i = 0; i < B * T; i++) {
            uint64_t step = (uint64_t)(s + o->warmup);
            inputs[i] = (int32_t)(dtrain_rng_bits(7, step, (uint64_t)i) % (uint64_t)cfg->vocab_size);
            targets[i] = (int32_t)(dtrain_rng_bits(8, step, (uint64_t)i) % (uint64_t)cfg->vocab_size);
        }
        float loss;
        double c0 = process_cpu_seconds();
        double t0 = dtrain_clock_s();
        if (dtrain_gpt2_forward(model, inputs, targets, B, T, &loss, err, sizeof err) != DTRAIN_OK)
            goto fail;
        double t1 = dtrain_clock_s();
        dtrain_gpt2_zero_grad(model);
        if (dtrain_gpt2_backward(model, err, sizeof err) != DTRAIN_OK)
            goto fail;
        double t2 = dtrain_clock_s();
        double norm2 = dtrain_k_sumsq(k, dtrain_gpt2_grads(model), n);
        dtrain_adamw_update(opt, dtrain_gpt2_params(model), dtrain_gpt2_grads(model), &oc,
                            s + o->warmup, oc.lr, dtrain_clip_scale(&oc, norm2));
        dtrain_k_sync(k);
        double t3 = dtrain_clock_s();
        if (s >= 0) {
            fwd_ms[s] = 1e3 * (t1 - t0);
            bwd_ms[s] = 1e3 * (t2 - t1);
            upd_ms[s] = 1e3 * (t3 - t2);
            step_ms[s] = 1e3 * (t3 - t0);
            busy[s] = (process_cpu_seconds() - c0) / ((t3 - t0) * o->threads);
        }
    }
    st->best_ms = step_ms[0];
    for (int s = 1; s < o->steps; s++)
        if (step_ms[s] < st->best_ms)
            st->best_ms = step_ms[s];
    st->step_ms = bench_median(step_ms, o->steps);
    st->fwd_ms = bench_median(fwd_ms, o->steps);
    st->bwd_ms = bench_median(bwd_ms, o->steps);
    st->upd_ms = bench_median(upd_ms, o->steps);
    st->busy = bench_median(busy, o->steps);
    rc = 0;
    goto out;
fail:
    fprintf(stderr, PROG ": %s\n", err);
out:
    free(host); free(inputs); free(targets);
    free(step_ms); free(fwd_ms); free(bwd_ms); free(upd_ms); free(busy);
    dtrain_adamw_destroy(opt);
    dtrain_gpt2_destroy(model);
    dtrain_kernels_destroy(k);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "--gemm-rate") == 0)
        return gemm_rate_child(argv[2], argv[3], argv[4]);
    if (dtrain_blas_select(PROG, argv) != 0) /* the kernels the trainer would run */
        return 2;
    struct options o = {.threads = 2, .steps = 20, .warmup = 3, .sgemm_n = 2048};
    struct dtrain_model_config cfg = {.max_seq_len = 128, .vocab_size = 4096,
                                     .padded_vocab_size = 4096, .num_layers = 4,
                                     .num_heads = 4, .channels = 256};
    const int B = 8, T = 128;
    if (parse_options(argc, argv, &o) != 0)
        return 2;
    struct gemm_candidate cand[8];
    int best = -1, ncand = measure_candidates(o.sgemm_n, o.threads, cand, 8, &best);
    double sgemm_before, sgemm_after;
    struct step_times fp32, bf16;
    size_t n = 0;
    if (sgemm_rate(o.sgemm_n, o.threads, 7, &sgemm_before) != 0) {
        fprintf(stderr, PROG ": out of memory for the sgemm baseline\n");
        return 1;
    }
    char bf16_line[320] = "", none[8];
    if (run_steps(&o, &cfg, B, T, DTRAIN_PRECISION_FP32, &fp32, &n, none, sizeof none) != 0 ||
        run_steps(&o, &cfg, B, T, DTRAIN_PRECISION_BF16, &bf16, &n, bf16_line, sizeof bf16_line) != 0)
        return 1;
    if (sgemm_rate(o.sgemm_n, o.threads, 7, &sgemm_after) != 0) {
        fprintf(stderr, PROG ": out of memory for the sgemm baseline\n");
        return 1;
    }
    double flops = dtrain_model_flops_per_step(&cfg, B, T);
    double ms = fp32.step_ms;
    double sgemm = 0.5 * (sgemm_before + sgemm_after);
    /* the baseline: the best kernel at hand, or this run's own when it is faster (noise) */
    double baseline = best >= 0 && cand[best].gflops > sgemm ? cand[best].gflops : sgemm;
    double gflops = flops / (ms * 1e-3) * 1e-9;
    double ratio = gflops / baseline;
    char blas[256];
    dtrain_blas_describe(blas, sizeof blas);
    struct dtrain_cpu_features f;
    dtrain_cpu_features_read(&f);
    printf(PROG ": GPT-2 L=%d C=%d NH=%d V=%d T=%d B=%d, %zu parameters, %d threads, "
           "%d steps after %d warm-up\n", cfg.num_layers, cfg.channels, cfg.num_heads,
           cfg.vocab_size, T, B, n, o.threads, o.steps, o.warmup);
    printf("step fp32 (median)   %9.2f ms  (best %.2f ms; forward %.2f, backward %.2f, "
           "update %.2f)\n", ms, fp32.best_ms, fp32.fwd_ms, fp32.bwd_ms, fp32.upd_ms);
    printf("tokens/s fp32        %9.0f\n", B * T / (ms * 1e-3));
    /* below 100%: threads waiting (fork-join, imbalance) or, on a loaded machine, not scheduled */
    printf("CPU busy fp32        %9.1f %%  (the process's CPU time over %d threads x the step's wall time, "
           "median)\n", 100.0 * fp32.busy, o.threads);
    printf("model FLOP per step  %9.3f GFLOP\n", flops * 1e-9);
    printf("achieved fp32        %9.2f GFLOP/s\n", gflops);
    printf("GEMM kernels         %s\n", blas);
    printf("sgemm %dx%d          %9.2f GFLOP/s  (these kernels; before %.2f, after %.2f; %d threads)\n",
           o.sgemm_n, o.sgemm_n, sgemm, sgemm_before, sgemm_after, o.threads);
    for (int i = 0; i < ncand; i++) {
        if (cand[i].gflops > 0)
            printf("  candidate %-24s %9.2f GFLOP/s%s\n", cand[i].name, cand[i].gflops, i == best ? "  (best)" : "");
        else
            printf("  candidate %-24s       n/a  (not installed, or it failed)\n", cand[i].name);
    }
    printf("baseline             %9.2f GFLOP/s  (the best fp32 sgemm of this run: each candidate's fastest "
           "call of two rounds)\n", baseline);
    printf("ratio                %9.1f %%  (target >= %.0f %% of the best sgemm: %s)\n", 100.0 * ratio,
           100.0 * TARGET_RATIO, ratio >= TARGET_RATIO ? "met" : "NOT met");
    /* bf16: oneDNN's bf16 matmuls on CPUs with AMX-BF16 / AVX512-BF16, else fp32 GEMMs on
     * rounded operands (kernels/cpu/cpu_onednn.c; DTRAIN_CPU_ONEDNN chooses) */
    double speedup = fp32.step_ms / bf16.step_ms;
    printf("step bf16 (median)   %9.2f ms  (best %.2f ms; forward %.2f, backward %.2f, update %.2f)\n",
           bf16.step_ms, bf16.best_ms, bf16.fwd_ms, bf16.bwd_ms, bf16.upd_ms);
    printf("tokens/s bf16        %9.0f  (%.2fx fp32 of this run; target >= 2.5x on a CPU with AMX-BF16%s)\n",
           B * T / (bf16.step_ms * 1e-3), speedup,
           f.amx_bf16 ? (speedup >= 2.5 ? ": met" : ": NOT met") : ": this CPU has none, not measurable here");
    printf("bf16 matmuls         %s\n", bf16_line);
    return 0;
}
