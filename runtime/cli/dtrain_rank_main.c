/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-rank: one rank of `srun --mpi=pmi2 dtrain-launch [CONFIG.json]
 * [TRAINER FLAGS...]`, the 3D-parallel trainer (dtrain_parallel.h).
 *
 * dtrain-launch bootstraps every communicator through PMI2 and then starts
 * this program with them in the DTRAIN_COMM_* environment, as it starts any
 * PROGRAM (bootstrap_env.h): so dtrain-launch itself links no runtime and
 * its other uses (--job-exit in a batch script, --print) load neither
 * OpenBLAS nor CUDA nor NCCL.  Messages keep dtrain-launch's name: that is
 * the program the user ran.  Not meant to be run by hand. */
#include <stdio.h>
#include <stdlib.h>

#include "dtrain_blas.h"
#include "dtrain_comm.h"
#include "dtrain_exit.h"
#include "dtrain_parallel.h"

#define PROG "dtrain-launch"

int main(int argc, char **argv)
{
    if (getenv("DTRAIN_COMM_BACKEND") == NULL) {
        fprintf(stderr, "dtrain-rank: started by dtrain-launch only: run `srun --mpi=pmi2 dtrain-launch "
                        "[CONFIG.json] [FLAGS]`\n");
        return DTRAIN_EXIT_USAGE;
    }
    /* the GEMM kernels (dtrain_blas.h): may execute this program again, the bootstrap still in its environment */
    if (dtrain_blas_select(PROG, argv) != 0)
        return DTRAIN_EXIT_USAGE;
    struct dtrain_bootstrap *bs = calloc(1, sizeof *bs);
    if (bs == NULL) {
        fprintf(stderr, PROG ": out of memory\n");
        return DTRAIN_EXIT_FAILURE;
    }
    char err[1024];
    if (dtrain_comm_bootstrap_from_env(bs, err, sizeof err) != DTRAIN_OK) {
        fprintf(stderr, PROG ": %s\n", err);
        free(bs);
        return DTRAIN_EXIT_USAGE;
    }
    argv[0] = PROG;
    int rc = dtrain_parallel_main(argc, argv, bs); /* takes over the listening sockets */
    free(bs);
    return rc;
}
