/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The CPU benchmarks' baseline: the best fp32 sgemm rate this CPU reaches
 * for large square matrices with any GEMM kernel at hand, measured in the
 * same run as what it is compared with.
 *
 * The candidates, each in a child process of its own (OpenBLAS chooses its
 * kernels when it loads): every OpenBLAS core this CPU can execute
 * (OPENBLAS_CORETYPE), and BLIS (libblis.so.4) and oneDNN (libdnnl.so.2)
 * when installed; each candidate's fastest call of two rounds (other work
 * on the machine only slows a call down).  The best of them is the
 * baseline, so a fallback kernel in the trainer (dtrain_blas.h) shows as a
 * low ratio instead of lowering the baseline with it.  The linked kernels'
 * own rate (median) is measured before and after the work compared, and
 * replaces the best candidate's when it is faster (noise).
 *
 * A program using it calls bench_sgemm_child() first thing in main: the
 * children are the program itself, run again with --gemm-rate. */
#ifndef DTRAIN_BENCH_SGEMM_H
#define DTRAIN_BENCH_SGEMM_H

#define BENCH_SGEMM_MAX_CANDIDATES 8

struct bench_gemm_candidate {
    char name[48];
    double gflops; /* < 0: not measured (not here, or failed) */
};

struct bench_sgemm_baseline {
    int n, threads;        /* n x n x n sgemm on this many threads */
    struct bench_gemm_candidate cand[BENCH_SGEMM_MAX_CANDIDATES];
    int ncand, best;       /* best: index of the fastest candidate, -1 when none ran */
    double before, after;  /* the linked kernels' median rate, GFLOP/s */
    double sgemm;          /* their mean */
    double gflops;         /* the baseline */
};

/* When argv is a child's (`PROG --gemm-rate LIB N THREADS`): measure,
 * print, set *rc to the exit code and return 1.  Else return 0. */
int bench_sgemm_child(int argc, char **argv, int *rc);

/* The candidates and the linked kernels' rate before the work; 0, or -1
 * (out of memory) with a line on stderr prefixed prog. */
int bench_sgemm_baseline_start(struct bench_sgemm_baseline *b, const char *prog, int n, int threads);
/* The linked kernels' rate after the work, then the baseline (b->gflops). */
int bench_sgemm_baseline_finish(struct bench_sgemm_baseline *b, const char *prog);

/* The lines saying what the baseline is: the kernels in use, their rate,
 * every candidate's, the baseline. */
void bench_sgemm_baseline_print(const struct bench_sgemm_baseline *b);

#endif
