/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The CPU benchmarks' baseline: the best fp32 sgemm rate this CPU reaches
 * for large square matrices with any GEMM kernel at hand, measured in the
 * same run as what it is compared with.
 *
 * The candidates, each in a child process of its own (OpenBLAS chooses its
 * kernels when it loads): every OpenBLAS core this CPU can execute
 * (OPENBLAS_CORETYPE), and BLIS (libblis.so.4) and oneDNN (libdnnl.so.2)
 * when installed; each candidate's fastest call of every round.  The best
 * of them is the baseline, so a fallback kernel in the trainer
 * (dtrain_blas.h) shows as a low ratio instead of lowering the baseline
 * with it.  The linked kernels' own rate (the fastest call) is measured in
 * every round too, and replaces the best candidate's when it is faster
 * (noise).  A round: bench_sgemm_baseline_start (before the work),
 * bench_sgemm_baseline_again (between parts of it, as often as wanted),
 * bench_sgemm_baseline_finish (after).
 *
 * A program using it calls bench_sgemm_child() first thing in main: the
 * children are the program itself, run again with --gemm-rate. */
#ifndef DTRAIN_BENCH_SGEMM_H
#define DTRAIN_BENCH_SGEMM_H

#define BENCH_SGEMM_MAX_CANDIDATES 8
#define BENCH_SGEMM_MAX_ROUNDS 16

struct bench_gemm_candidate {
    char name[48];
    double gflops; /* the fastest call of all rounds; < 0: not measured (not here, or failed) */
};

struct bench_sgemm_baseline {
    int n, threads;        /* n x n x n sgemm on this many threads */
    struct bench_gemm_candidate cand[BENCH_SGEMM_MAX_CANDIDATES];
    int ncand, best;       /* best: index of the fastest candidate, -1 when none ran */
    double linked[BENCH_SGEMM_MAX_ROUNDS]; /* the linked kernels' fastest call in each round, GFLOP/s */
    int rounds;            /* rounds measured (later ones past the last slot are not kept) */
    double sgemm;          /* the linked kernels' best round */
    double gflops;         /* the baseline: the best of everything measured */
};

/* When argv is a child's (`PROG --gemm-rate LIB N THREADS`): measure,
 * print, set *rc to the exit code and return 1.  Else return 0. */
int bench_sgemm_child(int argc, char **argv, int *rc);

/* The first round, before the work; 0, or -1 (out of memory) with a line
 * on stderr prefixed prog. */
int bench_sgemm_baseline_start(struct bench_sgemm_baseline *b, const char *prog, int n, int threads);
/* One more round, between parts of the work; 0 or -1 as above. */
int bench_sgemm_baseline_again(struct bench_sgemm_baseline *b, const char *prog);
/* The last round, after the work, then the baseline (b->gflops). */
int bench_sgemm_baseline_finish(struct bench_sgemm_baseline *b, const char *prog);

/* The lines saying what the baseline is: the kernels in use, their rate,
 * every candidate's, the baseline. */
void bench_sgemm_baseline_print(const struct bench_sgemm_baseline *b);

#endif
