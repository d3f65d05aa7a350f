/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-bench-collectives: the cpu comm backend's all-reduce, all-gather
 * and reduce-scatter on n local processes, reported as nccl-tests does, next
 * to memcpy bandwidth measured in the same run (the ceiling).
 *
 *   dtrain-bench-collectives [--ranks 2,4,8] [--ops allreduce,allgather,reducescatter]
 *                            [--place out,in] [--min 1K] [--max 256M] [--iters N]
 *                            [--transport auto|ring|tcp]
 *
 * All-gather and reduce-scatter run out of place (the output apart from
 * the input) and in place (all-gather's input is this rank's block of the
 * output, reduce-scatter's output this rank's block of the input): a row
 * each, as nccl-tests' two column groups.  In place is how ZeRO-1 calls
 * both (the parameter all-gather, the gradient reduce-scatter); on shared
 * memory it moves fewer bytes (no copy of this rank's own block, no
 * separate output to read in before writing it).  All-reduce is in place
 * only (dtrain_comm_allreduce).
 *
 * Sizes go from --min to --max by factors of 4 (1K, 4K, ... 64M, 256M).
 * As in nccl-tests, "size" is the all-reduce buffer, all-gather's output
 * and reduce-scatter's input (count * ranks floats); time is the slowest
 * rank's mean over the timed iterations (median of 5 repetitions, so that a
 * neighbour's burst on a shared machine does not decide); algbw = size / time; busbw =
 * algbw * 2(n-1)/n for all-reduce and algbw * (n-1)/n for the others: the
 * bytes each rank's link carries per second, comparable across n.
 * The buffers are the kind the trainer hands the backend (dtrain_hugemem.h:
 * huge pages), the memcpy's too.
 * memcpy: one thread copying 64 MiB, the fastest of 9, each time with
 * glibc's memcpy and with streaming stores (copy_bytes_streamed, what the
 * backend's all-gather and reduce-scatter apart write with): glibc streams
 * a copy this large only past a threshold it derives from the cache size
 * CPUID reports, which a VM can misreport (a Zen 4 guest: 320 MiB for a 32
 * MiB L3, and memcpy at 13.3 GB/s against 19.8 streamed), and a ceiling
 * below what the machine copies would flatter every ratio.  Measured
 * before, between and after the runs of each rank count; the rows' last
 * column divides by the best so far, the summary lines by the best of all
 * (the ceiling: a busy neighbour only ever lowers a measurement).  For
 * reference the summary also gives what each of n processes gets when all
 * copy 64 MiB five times at once (with the faster copy of the first
 * measurement), the best of three measurements (the share of the machine's
 * CPUs and memory one rank can have: on 2 CPUs, 8 ranks get about a
 * quarter of a CPU each).  The share is a reference, not a limit, and
 * its ratio has no verdict: each process's copies touch 128 MiB, twice
 * what a member of a 64 MiB all-reduce touches, and where the cache holds
 * much of that a smaller working set copies faster, so the direct-read
 * all-reduce can pass the share (doc/comm.md).  Target: every op's busbw at
 * 64 MiB >= 50% of memcpy (one summary line each, and each place); over 100% the ceiling
 * was measured low and the verdict is INVALID (bench_verdict).
 *
 * The processes are forked here and bootstrapped from an id made with the
 * launcher's code (no Slurm), with one host id: shared memory between all
 * of them, unless --transport tcp; --transport ring keeps the all-gather
 * off the single-copy reads (runtime/comm/cpu/cma.h), for comparison. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "comm/bootstrap/bootstrap_id.h"
#include "comm/cpu/reduce.h"
#include "dtrain_comm.h"
#include "dtrain_exit.h"
#include "dtrain_parse.h"
#include "dtrain_clock.h"
#include "dtrain_hugemem.h"

#define PROG "dtrain-bench-collectives"
#define MAX_RANKS 16
#define TARGET_RATIO 0.50
#define TARGET_BYTES (64u << 20)
#define MEMCPY_BYTES ((size_t)64 << 20)

enum op { OP_ALLREDUCE, OP_ALLGATHER, OP_REDUCESCATTER, OPS };
static const char *const op_names[OPS] = {"allreduce", "allgather", "reducescatter"};
/* As nccl-tests: the output apart from the input, or the input inside the
 * output (all-gather: this rank's block of it; reduce-scatter: the output
 * is this rank's block of the input).  All-reduce is in place only. */
enum place { PLACE_OUT, PLACE_IN, PLACES };
static const char *const place_names[PLACES] = {"out-of-place", "in-place"};

struct options {
    int ranks[MAX_RANKS];
    int nranks;
    int ops[OPS];
    int places[PLACES];
    size_t min_bytes, max_bytes;
    int iters; /* 0: by size */
    enum dtrain_comm_transport transport;
};

/* The two ways to copy the ceiling is measured with */
enum copy_kind { COPY_LIBC, COPY_STREAMED, COPY_KINDS };
static const char *const copy_names[COPY_KINDS] = {"glibc's memcpy", "streaming stores"};

static void copy_with(enum copy_kind kind, char *dst, const char *src, size_t bytes)
{
    if (kind == COPY_STREAMED)
        copy_bytes_streamed(dst, src, bytes);
    else
        memcpy(dst, src, bytes);
}

/* GB/s of one thread copying MEMCPY_BYTES with each kind, the fastest of 9
 * copies each (alternated), into rate[]; returns the faster: the limit. */
static double memcpy_rate(double rate[COPY_KINDS])
{
    char *src = dtrain_hugemem_alloc(MEMCPY_BYTES), *dst = dtrain_hugemem_alloc(MEMCPY_BYTES);
    double r[COPY_KINDS][9];
    rate[COPY_LIBC] = rate[COPY_STREAMED] = 0;
    if (src == NULL || dst == NULL) {
        dtrain_hugemem_free(src);
        dtrain_hugemem_free(dst);
        return 0;
    }
    memset(src, 1, MEMCPY_BYTES);
    memset(dst, 2, MEMCPY_BYTES);
    for (int i = 0; i < 9; i++)
        for (int k = 0; k < COPY_KINDS; k++) {
            double t0 = dtrain_clock_s();
            copy_with((enum copy_kind)k, dst, src, MEMCPY_BYTES);
            r[k][i] = (double)MEMCPY_BYTES / (dtrain_clock_s() - t0) / 1e9;
            src[i] = dst[MEMCPY_BYTES - 1 - (size_t)i]; /* keep the copy observable */
        }
    dtrain_hugemem_free(src);
    dtrain_hugemem_free(dst);
    for (int k = 0; k < COPY_KINDS; k++)
        rate[k] = bench_best(r[k], 9);
    return rate[COPY_LIBC] > rate[COPY_STREAMED] ? rate[COPY_LIBC] : rate[COPY_STREAMED];
}

/* GB/s each of n processes gets when all copy MEMCPY_BYTES 5 times at
 * once: 5 * 64 MiB over the time until the last one is done (a share of
 * the machine, not one copy's speed); 0 when it could not be measured. */
static double concurrent_memcpy_rate(int n, enum copy_kind kind)
{
    enum { COPIES = 5 };
    int start[2], done[2];
    pid_t pids[MAX_RANKS];
    int started = 0, finished = 0;
    if (pipe(start) != 0)
        return 0;
    if (pipe(done) != 0) {
        close(start[0]);
        close(start[1]);
        return 0;
    }
    fflush(NULL);
    for (; started < n; started++) {
        pids[started] = fork();
        if (pids[started] < 0)
            break;
        if (pids[started] == 0) {
            char go;
            close(start[1]);
            char *src = dtrain_hugemem_alloc(MEMCPY_BYTES), *dst = dtrain_hugemem_alloc(MEMCPY_BYTES);
            int ok = src != NULL && dst != NULL;
            if (ok) { /* touch the pages before the clock starts */
                memset(src, 1, MEMCPY_BYTES);
                memset(dst, 2, MEMCPY_BYTES);
            }
            ok = ok && read(start[0], &go, 1) == 1;
            for (int i = 0; ok && i < COPIES; i++) {
                copy_with(kind, dst, src, MEMCPY_BYTES);
                src[i] = dst[MEMCPY_BYTES - 1 - (size_t)i];
            }
            _exit(ok && write(done[1], "d", 1) == 1 ? 0 : 1);
        }
    }
    close(start[0]);
    close(done[1]);
    sleep(1); /* let every child fill its buffers */
    double t0 = dtrain_clock_s();
    for (int i = 0; i < started; i++)
        if (write(start[1], "g", 1) != 1)
            break;
    close(start[1]);
    char byte;
    while (finished < started && read(done[0], &byte, 1) == 1)
        finished++;
    double wall = dtrain_clock_s() - t0;
    close(done[0]);
    for (int i = 0; i < started; i++)
        waitpid(pids[i], NULL, 0);
    return finished == n ? (double)COPIES * (double)MEMCPY_BYTES / wall / 1e9 : 0;
}

/* "1K", "64M", "4096": bytes; 0 when malformed. */
static size_t parse_size(const char *text)
{
    char digits[32], err[128];
    size_t len = strlen(text), shift = 0;
    long v;
    if (len == 0 || len >= sizeof digits)
        return 0;
    memcpy(digits, text, len + 1);
    switch (digits[len - 1]) {
    case 'K': shift = 10; break;
    case 'M': shift = 20; break;
    case 'G': shift = 30; break;
    default: break;
    }
    if (shift != 0)
        digits[len - 1] = '\0';
    if (dtrain_parse_int(digits, 1, 1L << 20, "size", &v, err, sizeof err) != 0)
        return 0;
    return (size_t)v << shift;
}

static void usage(FILE *out)
{
    fprintf(out, "usage: " PROG " [--ranks 2,4,8] [--ops allreduce,allgather,reducescatter] [--place out,in]\n"
                 "       [--min 1K] [--max 256M] [--iters N] [--transport auto|ring|tcp]\n"
                 "Collectives of the cpu comm backend on local processes against memcpy bandwidth.\n");
}

static int parse_args(int argc, char **argv, struct options *o)
{
    char err[256];
    memset(o, 0, sizeof *o);
    o->ranks[0] = 2, o->ranks[1] = 4, o->ranks[2] = 8, o->nranks = 3;
    for (int k = 0; k < OPS; k++)
        o->ops[k] = 1;
    for (int p = 0; p < PLACES; p++)
        o->places[p] = 1;
    o->min_bytes = 1u << 10;
    o->max_bytes = 256u << 20;
    o->transport = DTRAIN_COMM_TRANSPORT_AUTO;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            exit(DTRAIN_EXIT_OK);
        }
        if (v == NULL) {
            fprintf(stderr, PROG ": %s needs a value (see --help)\n", a);
            return -1;
        }
        i++;
        if (strcmp(a, "--ranks") == 0) {
            char list[256];
            if (dtrain_snprintf(list, sizeof list, "%s", v) != 0)
                goto bad;
            o->nranks = 0;
            for (char *save = NULL, *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                long n;
                if (o->nranks == MAX_RANKS || dtrain_parse_int(t, 1, MAX_RANKS, "--ranks", &n, err, sizeof err) != 0)
                    goto bad;
                o->ranks[o->nranks++] = (int)n;
            }
        } else if (strcmp(a, "--ops") == 0) {
            char list[256];
            if (dtrain_snprintf(list, sizeof list, "%s", v) != 0)
                goto bad;
            memset(o->ops, 0, sizeof o->ops);
            for (char *save = NULL, *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                int k = 0;
                while (k < OPS && strcmp(t, op_names[k]) != 0)
                    k++;
                if (k == OPS)
                    goto bad;
                o->ops[k] = 1;
            }
        } else if (strcmp(a, "--place") == 0) {
            char list[64];
            if (dtrain_snprintf(list, sizeof list, "%s", v) != 0)
                goto bad;
            memset(o->places, 0, sizeof o->places);
            for (char *save = NULL, *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                if (strcmp(t, "out") == 0)
                    o->places[PLACE_OUT] = 1;
                else if (strcmp(t, "in") == 0)
                    o->places[PLACE_IN] = 1;
                else
                    goto bad;
            }
        } else if (strcmp(a, "--min") == 0 || strcmp(a, "--max") == 0) {
            size_t bytes = parse_size(v);
            if (bytes == 0 || bytes > ((size_t)1 << 30))
                goto bad;
            *(a[3] == 'i' ? &o->min_bytes : &o->max_bytes) = bytes;
        } else if (strcmp(a, "--iters") == 0) {
            long n;
            if (dtrain_parse_int(v, 1, 100000, "--iters", &n, err, sizeof err) != 0)
                goto bad;
            o->iters = (int)n;
        } else if (strcmp(a, "--transport") == 0) {
            if (strcmp(v, "auto") == 0)
                o->transport = DTRAIN_COMM_TRANSPORT_AUTO;
            else if (strcmp(v, "tcp") == 0)
                o->transport = DTRAIN_COMM_TRANSPORT_TCP;
            else if (strcmp(v, "ring") == 0)
                o->transport = DTRAIN_COMM_TRANSPORT_RING;
            else
                goto bad;
        } else {
            fprintf(stderr, PROG ": unknown option '%s' (see --help)\n", a);
            return -1;
        }
        continue;
    bad:
        fprintf(stderr, PROG ": %s '%.64s' is not valid (see --help)\n", a, v);
        return -1;
    }
    if (o->min_bytes > o->max_bytes) {
        fprintf(stderr, PROG ": --min is larger than --max\n");
        return -1;
    }
    return 0;
}

#define REPS 5

/* Iterations of one repetition: about 256 MiB moved, 1 to 100. */
static int iters_for(const struct options *o, size_t bytes)
{
    if (o->iters > 0)
        return o->iters;
    size_t n = ((size_t)256 << 20) / bytes;
    return n < 1 ? 1 : n > 100 ? 100 : (int)n;
}

/* Whether op runs in place: all-reduce only in place, the others both. */
static int op_has_place(enum op op, enum place place)
{
    return op != OP_ALLREDUCE || place == PLACE_IN;
}

static int run_op(dtrain_comm *c, enum op op, enum place place, float *a, float *b, size_t count)
{
    const size_t mine = (size_t)dtrain_comm_rank(c) * count;
    switch (op) {
    case OP_ALLREDUCE: return dtrain_comm_allreduce(c, a, count, DTRAIN_REDUCE_SUM);
    case OP_ALLGATHER: return dtrain_comm_all_gather(c, place == PLACE_IN ? b + mine : a, b, count);
    default: return dtrain_comm_reduce_scatter(c, a, place == PLACE_IN ? a + mine : b, count, DTRAIN_REDUCE_SUM);
    }
}

/* The slowest rank's time of one call of op (median of REPS repetitions
 * of iters calls, after one untimed) into *t; 0 or the comm's error. */
static int time_op(dtrain_comm *c, enum op op, enum place place, float *a, float *b, size_t count, int iters,
                   double *t)
{
    const int n = dtrain_comm_size(c);
    double rep_time[REPS], times[MAX_RANKS];
    int rc;
    if ((rc = run_op(c, op, place, a, b, count)) != 0)
        return rc;
    for (int rep = 0; rep < REPS; rep++) {
        if ((rc = dtrain_comm_barrier(c)) != 0)
            return rc;
        double t0 = dtrain_clock_s();
        for (int it = 0; it < iters; it++)
            if ((rc = run_op(c, op, place, a, b, count)) != 0)
                return rc;
        double mine = (dtrain_clock_s() - t0) / iters;
        if ((rc = dtrain_comm_all_gather_bytes(c, &mine, times, sizeof mine)) != 0)
            return rc;
        rep_time[rep] = 0;
        for (int i = 0; i < n; i++) /* the slowest rank's */
            rep_time[rep] = times[i] > rep_time[rep] ? times[i] : rep_time[rep];
    }
    *t = bench_median(rep_time, REPS);
    return 0;
}

/* One rank: every op, place and size; rank 0 prints the rows and writes
 * the busbw of each at 64 MiB to report as "n op place busbw". */
static int rank_main(const struct options *o, struct dtrain_comm_group *g, double memcpy_gbs, FILE *report)
{
    struct dtrain_comm_options copts;
    char err[256];
    dtrain_comm *c = NULL;
    const int n = g->size, rank = g->my_rank;
    float *a = NULL, *b = NULL;
    int rc = 1;

    dtrain_comm_options_defaults(&copts);
    copts.timeout_ms = 120000;
    copts.transport = o->transport;
    copts.host_id = "bench-host";
    if (dtrain_comm_init(g, DTRAIN_COMM_CPU, &copts, &c, NULL, err, sizeof err) != 0) {
        fprintf(stderr, PROG ": rank %d: %s\n", rank, err);
        return 1;
    }
    /* the memory the trainer hands the backend (the cpu kernels' tensors,
     * dtrain_k_alloc: huge pages from 2 MiB on), as the memcpy ceiling's */
    a = dtrain_hugemem_alloc(o->max_bytes);
    b = dtrain_hugemem_alloc(o->max_bytes);
    if (a == NULL || b == NULL) {
        fprintf(stderr, PROG ": rank %d: out of memory for 2 x %zu bytes\n", rank, o->max_bytes);
        goto out;
    }
    /* Real pages with data in both (not zeros: untouched pages of a fresh
     * mapping all map the one zero page, and reading those costs no memory
     * traffic: an all-gather measured first read its input from that page) */
    for (size_t i = 0; i < o->max_bytes / sizeof(float); i++)
        a[i] = b[i] = 1.0f + (float)(i & 1023) * (1.0f / 1024);
    for (int k = 0; k < OPS; k++) {
        for (int p = 0; p < PLACES; p++) {
            if (!o->ops[k] || !o->places[p] || !op_has_place((enum op)k, (enum place)p))
                continue;
            for (size_t bytes = o->min_bytes; bytes <= o->max_bytes; bytes *= 4) {
                /* count: per rank for all-gather (input) and reduce-scatter (output) */
                size_t count = bytes / sizeof(float) / (k == OP_ALLREDUCE ? 1 : (size_t)n);
                int iters = iters_for(o, bytes);
                double t;
                if (count == 0)
                    continue;
                if ((rc = time_op(c, (enum op)k, (enum place)p, a, b, count, iters, &t)) != 0)
                    goto failed;
                if (rank == 0) {
                    double size = (double)(count * sizeof(float) * (k == OP_ALLREDUCE ? 1 : (size_t)n));
                    double algbw = size / t / 1e9;
                    double busbw = algbw * (k == OP_ALLREDUCE ? 2.0 : 1.0) * (n - 1) / n;
                    printf("%6d  %-14s %-12s %10.0f %10zu %6d %12.1f %11.3f %11.3f %8.0f%%\n", n, op_names[k],
                           place_names[p], size, count, iters, t * 1e6, algbw, busbw,
                           100.0 * busbw / memcpy_gbs);
                    fflush(stdout);
                    if (bytes == TARGET_BYTES)
                        fprintf(report, "%d %d %d %f\n", n, k, p, busbw);
                }
            }
        }
    }
    rc = 0;
    goto out;
failed:
    fprintf(stderr, PROG ": rank %d: %s: %s\n", rank, dtrain_comm_cause_name(dtrain_comm_cause(c)),
            dtrain_comm_error_message(c));
out:
    dtrain_hugemem_free(a);
    dtrain_hugemem_free(b);
    dtrain_comm_destroy(c);
    return rc != 0;
}

/* Fork n ranks, wait for all; 0 when all succeeded. */
static int run_ranks(const struct options *o, int n, double memcpy_gbs, FILE *report)
{
    char id[DTRAIN_BOOTSTRAP_ID_MAX], err[256];
    pid_t pids[MAX_RANKS];
    int fd, failed = 0;

    if (dtrain_bootstrap_id_make_cpu("127.0.0.1", n, id, sizeof id, &fd, err, sizeof err) != 0) {
        fprintf(stderr, PROG ": %s\n", err);
        return -1;
    }
    fflush(NULL);
    for (int i = 0; i < n; i++) {
        pids[i] = fork();
        if (pids[i] < 0) {
            fprintf(stderr, PROG ": fork: %s\n", strerror(errno));
            for (int j = 0; j < i; j++)
                kill(pids[j], SIGKILL);
            n = i;
            failed = 1;
            break;
        }
        if (pids[i] == 0) {
            struct dtrain_comm_group g = {.present = 1, .size = n, .first = 0, .stride = 1, .my_rank = i,
                                          .listen_fd = i == 0 ? fd : -1};
            dtrain_snprintf(g.key, sizeof g.key, "bench");
            dtrain_snprintf(g.id, sizeof g.id, "%s", id);
            if (i != 0)
                close(fd);
            int rc = rank_main(o, &g, memcpy_gbs, report);
            fflush(NULL);
            _exit(rc);
        }
    }
    close(fd);
    for (int i = 0; i < n; i++) {
        int status;
        if (waitpid(pids[i], &status, 0) != pids[i] || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
            failed = 1;
    }
    return failed ? -1 : 0;
}

int main(int argc, char **argv)
{
    struct options o;
    double target[MAX_RANKS + 1][OPS][PLACES] = {{{0}}};
    if (parse_args(argc, argv, &o) != 0)
        return DTRAIN_EXIT_USAGE;
    FILE *report = tmpfile(); /* rank 0 of each run writes "n op busbw" lines here */
    if (report == NULL) {
        fprintf(stderr, PROG ": tmpfile: %s\n", strerror(errno));
        return DTRAIN_EXIT_FAILURE;
    }
    double kinds[COPY_KINDS], before = memcpy_rate(kinds), ceiling = before, share_best[MAX_RANKS + 1] = {0};
    const enum copy_kind faster = kinds[COPY_STREAMED] > kinds[COPY_LIBC] ? COPY_STREAMED : COPY_LIBC;
    for (int i = 0; i < o.nranks; i++)
        share_best[o.ranks[i]] = concurrent_memcpy_rate(o.ranks[i], faster);
    printf("# " PROG ": cpu comm backend, %s, %ld CPUs online\n",
           o.transport == DTRAIN_COMM_TRANSPORT_TCP    ? "TCP (loopback)"
           : o.transport == DTRAIN_COMM_TRANSPORT_RING ? "shared-memory rings only"
                                                       : "shared memory, collectives read directly",
           sysconf(_SC_NPROCESSORS_ONLN));
    printf("# memcpy, one thread, 64 MiB: %.2f GB/s with %s, %.2f with %s: the ceiling is the faster\n",
           kinds[COPY_LIBC], copy_names[COPY_LIBC], kinds[COPY_STREAMED], copy_names[COPY_STREAMED]);
    printf("# %5s  %-14s %-12s %10s %10s %6s %12s %11s %11s %9s\n", "ranks", "op", "place", "size(B)", "count", "iters/rep",
           "time(us)", "algbw(GB/s)", "busbw(GB/s)", "/memcpy");
    int failed = 0;
    for (int i = 0; i < o.nranks; i++) {
        if (i > 0) { /* the limit again between the runs: the best so far divides the rows */
            double again = memcpy_rate(kinds);
            ceiling = again > ceiling ? again : ceiling;
        }
        if (run_ranks(&o, o.ranks[i], ceiling, report) != 0) {
            fprintf(stderr, PROG ": the run with %d ranks failed\n", o.ranks[i]);
            failed = 1;
        }
        double share = concurrent_memcpy_rate(o.ranks[i], faster); /* the share's limit too: best of 3 */
        share_best[o.ranks[i]] = share > share_best[o.ranks[i]] ? share : share_best[o.ranks[i]];
    }
    double after = memcpy_rate(kinds);
    ceiling = after > ceiling ? after : ceiling;
    printf("# memcpy again: %.2f GB/s; ceiling used below: %.2f GB/s (the best of %d measurements)\n", after,
           ceiling, o.nranks + 1);
    rewind(report);
    int n, k, p;
    double busbw;
    while (fscanf(report, "%d %d %d %lf", &n, &k, &p, &busbw) == 4)
        if (n >= 1 && n <= MAX_RANKS && k >= 0 && k < OPS && p >= 0 && p < PLACES)
            target[n][k][p] = busbw;
    fclose(report);
    for (int i = 0; i < o.nranks; i++) {
        n = o.ranks[i];
        double share = 0;
        for (k = 0; k < OPS; k++)
            for (p = 0; p < PLACES; p++) {
                if (target[n][k][p] <= 0)
                    continue;
                if (share <= 0) { /* the third measurement of the share, once per rank count */
                    share = concurrent_memcpy_rate(n, faster);
                    share = share_best[n] > share ? share_best[n] : share;
                }
                const double b = target[n][k][p];
                printf("# %s %s 64 MiB, %d ranks: busbw %.2f GB/s = %.0f%% of memcpy (target >= %.0f%%): %s; "
                       "%d copiers at once (%s) get %.2f GB/s each (the best of 3, a reference): busbw = %.0f%% of "
                       "that\n",
                       op_names[k], place_names[p], n, b, 100.0 * b / ceiling, 100.0 * TARGET_RATIO,
                       bench_verdict(b / ceiling, TARGET_RATIO), n, copy_names[faster], share,
                       share > 0 ? 100.0 * b / share : 0.0);
            }
    }
    return failed ? DTRAIN_EXIT_FAILURE : DTRAIN_EXIT_OK;
}
