/* SPDX-License-Identifier: GPL-2.0-or-later */
/* bench_mpi: the baseline of bench/openmpi.sh, the same three collectives
 * as dtrain-bench-collectives, through MPI (Open MPI as Debian ships it,
 * its defaults), measured and printed the way that bench does:
 *
 *   mpirun -np N bench_mpi SIZE REPS ITERS
 *
 * SIZE bytes: the all-reduce buffer, all-gather's output and
 * reduce-scatter's input (count * N floats); each repetition times ITERS
 * calls after a barrier, the slowest rank's mean; the time printed is the
 * median of REPS repetitions.  algbw = SIZE / time; busbw = algbw * 2(N-1)/N
 * for all-reduce, algbw * (N-1)/N for the others.  One row per operation:
 *
 *   ranks op size count iters time_us algbw busbw
 *
 * Not built with the project: MPI is no dependency of dtrain (the script
 * builds it with mpicc in a temporary folder). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_REPS 32

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    long size = argc > 1 ? atol(argv[1]) : 64L << 20;
    int reps = argc > 2 ? atoi(argv[2]) : 5, iters = argc > 3 ? atoi(argv[3]) : 4;
    if (argc != 4 || size < 4L * n || reps < 1 || reps > MAX_REPS || iters < 1) {
        if (rank == 0)
            fprintf(stderr, "bench_mpi: usage: bench_mpi SIZE REPS(1..%d) ITERS\n", MAX_REPS);
        MPI_Finalize();
        return 2;
    }
    size_t total = (size_t)size / 4 / (size_t)n * (size_t)n; /* floats, a multiple of n */
    size_t per = total / (size_t)n;
    float *a = malloc(total * sizeof *a), *b = malloc(total * sizeof *b);
    if (a == NULL || b == NULL) {
        fprintf(stderr, "bench_mpi: out of memory for %zu floats\n", total);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (size_t i = 0; i < total; i++) {
        a[i] = (float)((i + (size_t)rank) % 97) * 0.25f;
        b[i] = 0.0f;
    }
    static const char *const names[3] = {"allreduce", "allgather", "reducescatter"};
    for (int op = 0; op < 3; op++) {
        double t[MAX_REPS];
        for (int r = -1; r < reps; r++) { /* r = -1: warm-up, not counted */
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            for (int i = 0; i < iters; i++) {
                if (op == 0)
                    MPI_Allreduce(a, b, (int)total, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
                else if (op == 1)
                    MPI_Allgather(a, (int)per, MPI_FLOAT, b, (int)per, MPI_FLOAT, MPI_COMM_WORLD);
                else
                    MPI_Reduce_scatter_block(a, b, (int)per, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            }
            double mine = (MPI_Wtime() - t0) / iters, slowest;
            MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            if (r >= 0)
                t[r] = slowest;
        }
        qsort(t, (size_t)reps, sizeof t[0], cmp_double);
        double med = reps % 2 ? t[reps / 2] : (t[reps / 2 - 1] + t[reps / 2]) / 2;
        double bytes = (double)total * 4, algbw = bytes / med / 1e9;
        double busbw = algbw * (op == 0 ? 2.0 * (n - 1) / n : (double)(n - 1) / n);
        if (rank == 0)
            printf("%6d  %-14s %12.0f %10zu %9d %12.1f %11.3f %11.3f\n", n, names[op], bytes,
                   op == 0 ? total : per, iters, med * 1e6, algbw, busbw);
    }
    free(a);
    free(b);
    MPI_Finalize();
    return 0;
}
