/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The best sgemm rate of this CPU, measured in children; see bench_sgemm.h. */
#include "bench_sgemm.h"
#include "bench_util.h"
#include "dtrain_blas.h"
#include "dtrain_clock.h"
#include "dtrain_rng.h"

#include <cblas.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

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

/* The fastest of `reps` n x n x n sgemm calls on `threads` threads of the
 * linked OpenBLAS (lib NULL) or of lib, in GFLOP/s: the limit. */
static int sgemm_rate_of(const struct gemm_lib *lib, int n, int threads, int reps, double *gflops)
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
    *gflops = bench_best(rate, reps);
    free(a); free(b); free(c); free(rate);
    return 0;
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
        /* oneDNN 3 (Debian 13 and later) or 2 (Debian 12): dnnl_sgemm is in both */
        if ((h = dlopen("libdnnl.so.3", RTLD_NOW | RTLD_LOCAL)) != NULL ||
            (h = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL)) != NULL)
            g.dnnl = (dnnl_sgemm_fn)(uintptr_t)dlsym(h, "dnnl_sgemm");
        if (g.dnnl == NULL) {
            printf("-\n");
            return 0;
        }
    }
    double r;
    if (n < 64 || threads < 1 || sgemm_rate_of(h != NULL ? &g : NULL, n, threads, 5, &r) != 0)
        return 1;
    printf("%.3f\n", r);
    return 0;
}

int bench_sgemm_child(int argc, char **argv, int *rc)
{
    if (argc != 5 || strcmp(argv[1], "--gemm-rate") != 0)
        return 0;
    *rc = gemm_rate_child(argv[2], argv[3], argv[4]);
    return 1;
}

/* Run this program as a child measuring one candidate; "OPENBLAS_CORETYPE"
 * chooses OpenBLAS's kernels, NULL keeps what it chooses itself. */
static double measure_in_child(const char *prog, const char *lib, const char *core, int n, int threads)
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
        char *args[] = {(char *)prog, (char *)"--gemm-rate", (char *)lib, n_s, threads_s, NULL};
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

/* One round of every candidate, each kept at its fastest call of all
 * rounds so far (first: the first round, whose rates fill the slots); the
 * environment is put back.  Returns the number of candidates. */
static int measure_candidates(const char *prog, int n, int threads, struct bench_gemm_candidate *c, int max,
                              int first)
{
    static const char *const openblas_cores[] = {"Prescott", "Sandybridge", "Haswell", "Zen", "SkylakeX",
                                                 "Cooperlake"};
    struct dtrain_cpu_features f;
    dtrain_cpu_features_read(&f);
    char *saved_core = getenv("OPENBLAS_CORETYPE") ? strdup(getenv("OPENBLAS_CORETYPE")) : NULL;
    char *saved_want = getenv("DTRAIN_BLAS_CORE") ? strdup(getenv("DTRAIN_BLAS_CORE")) : NULL;
    char *saved_mark = getenv("DTRAIN_BLAS_SWITCHED") ? strdup(getenv("DTRAIN_BLAS_SWITCHED")) : NULL;
    unsetenv("DTRAIN_BLAS_SWITCHED");
    int count = 0;
    for (size_t i = 0; i < sizeof openblas_cores / sizeof openblas_cores[0] && count < max; i++) {
        if (dtrain_blas_core_level(openblas_cores[i]) > dtrain_cpu_level(&f))
            continue; /* would die of SIGILL */
        snprintf(c[count].name, sizeof c[count].name, "OpenBLAS %s", openblas_cores[i]);
        double r = measure_in_child(prog, "openblas", openblas_cores[i], n, threads);
        c[count].gflops = first || r > c[count].gflops ? r : c[count].gflops;
        count++;
    }
    static const char *const libs[][2] = {{"blis", "BLIS (libblis.so.4)"}, {"dnnl", "oneDNN (libdnnl.so.3 or .2)"}};
    for (int l = 0; l < 2 && count < max; l++, count++) {
        snprintf(c[count].name, sizeof c[count].name, "%s", libs[l][1]);
        double r = measure_in_child(prog, libs[l][0], NULL, n, threads);
        c[count].gflops = first || r > c[count].gflops ? r : c[count].gflops;
    }
    if (saved_core) setenv("OPENBLAS_CORETYPE", saved_core, 1); else unsetenv("OPENBLAS_CORETYPE");
    if (saved_want) setenv("DTRAIN_BLAS_CORE", saved_want, 1); else unsetenv("DTRAIN_BLAS_CORE");
    if (saved_mark) setenv("DTRAIN_BLAS_SWITCHED", saved_mark, 1);
    unsetenv("BLIS_NUM_THREADS");
    unsetenv("OMP_NUM_THREADS");
    free(saved_core); free(saved_want); free(saved_mark);
    return count;
}

/* One round: every candidate in a child, then the linked kernels here. */
static int measure_round(struct bench_sgemm_baseline *b, const char *prog)
{
    b->ncand = measure_candidates(prog, b->n, b->threads, b->cand, BENCH_SGEMM_MAX_CANDIDATES, b->rounds == 0);
    double r;
    if (sgemm_rate_of(NULL, b->n, b->threads, 7, &r) != 0) {
        fprintf(stderr, "%s: out of memory for the sgemm baseline\n", prog);
        return -1;
    }
    if (b->rounds < BENCH_SGEMM_MAX_ROUNDS)
        b->linked[b->rounds] = r;
    if (b->rounds == 0 || r > b->sgemm)
        b->sgemm = r;
    b->rounds++;
    return 0;
}

int bench_sgemm_baseline_start(struct bench_sgemm_baseline *b, const char *prog, int n, int threads)
{
    memset(b, 0, sizeof *b);
    b->n = n;
    b->threads = threads;
    return measure_round(b, prog);
}

int bench_sgemm_baseline_again(struct bench_sgemm_baseline *b, const char *prog)
{
    return measure_round(b, prog);
}

int bench_sgemm_baseline_finish(struct bench_sgemm_baseline *b, const char *prog)
{
    if (measure_round(b, prog) != 0)
        return -1;
    b->best = -1;
    for (int i = 0; i < b->ncand; i++)
        if (b->cand[i].gflops > 0 && (b->best < 0 || b->cand[i].gflops > b->cand[b->best].gflops))
            b->best = i;
    /* the baseline: the best kernel at hand, or this run's own when it is faster (noise) */
    b->gflops = b->best >= 0 && b->cand[b->best].gflops > b->sgemm ? b->cand[b->best].gflops : b->sgemm;
    return 0;
}

void bench_sgemm_baseline_print(const struct bench_sgemm_baseline *b)
{
    char blas[256], rounds[160] = "";
    dtrain_blas_describe(blas, sizeof blas);
    size_t used = 0;
    int kept = b->rounds < BENCH_SGEMM_MAX_ROUNDS ? b->rounds : BENCH_SGEMM_MAX_ROUNDS;
    for (int i = 0; i < kept && used < sizeof rounds; i++)
        used += (size_t)snprintf(rounds + used, sizeof rounds - used, "%s%.2f", i ? " " : "", b->linked[i]);
    printf("GEMM kernels         %s\n", blas);
    printf("sgemm %dx%d          %9.2f GFLOP/s  (these kernels, the best round; rounds before, between and after "
           "the work: %s; %d threads)\n", b->n, b->n, b->sgemm, rounds, b->threads);
    for (int i = 0; i < b->ncand; i++) {
        if (b->cand[i].gflops > 0)
            printf("  candidate %-24s %9.2f GFLOP/s%s\n", b->cand[i].name, b->cand[i].gflops,
                   i == b->best ? "  (best)" : "");
        else
            printf("  candidate %-24s       n/a  (not installed, or it failed)\n", b->cand[i].name);
    }
    printf("baseline             %9.2f GFLOP/s  (the best fp32 sgemm of this run: each candidate's fastest "
           "call of %d rounds, before, between and after the work)\n", b->gflops, b->rounds);
}
