/* SPDX-License-Identifier: GPL-2.0-or-later */
/* What sbatch, salloc and srun can check before anything is queued or
 * launched: the options against the site policy and the job's size.
 *
 * The size comes from the client's own option table: sbatch, salloc and
 * srun export their parsed options as the symbol `opt`, and libslurm
 * exports slurm_option_isset()/slurm_option_get() (the interface cli_filter
 * plugins use), so -n, -N and --ntasks-per-node are read exactly as Slurm
 * understood them, from the command line, #SBATCH lines or the environment.
 * When those symbols are missing the size is unknown and only the checks
 * that do not need it run. */
#ifndef DTRAIN_SPANK_SUBMIT_H
#define DTRAIN_SPANK_SUBMIT_H

#include <stddef.h>

#include "site_config.h"
#include "options.h"

/* The job's size as far as the client knows it; 0 = unknown. */
struct dtrain_job_size {
    long ntasks;
    long nnodes;
    long tasks_per_node;
    int uneven; /* ntasks do not spread evenly over a fixed node count */
    /* The client allocates the job (sbatch, salloc, srun outside a job) on a
     * Slurm with --segment (24.11+): the site's blocks or rings
     * (nvlink_domain_source=block|ring) are then checked against it. */
    int segment_known;
    long segment; /* --segment=N as the client read it; 0: none */
};

/* Derive the size from option texts, each NULL when the user did not set it:
 * ntasks "8", nodes "2" or "2-4" (a range leaves the node count unknown),
 * ntasks_per_node "4".  Unparsable texts count as unknown. */
void dtrain_job_size_derive(const char *ntasks, const char *nodes, const char *ntasks_per_node,
                            struct dtrain_job_size *out);

/* Read the calling client's option table (see above); allocates: the
 * client makes the job's allocation (sbatch, salloc, srun outside a job),
 * so that its --segment is the job's. */
void dtrain_job_size_from_client(struct dtrain_job_size *out, int allocates);

/* Check the options against the site configuration and the size.  Returns 0,
 * or DTRAIN_EXIT_USAGE / DTRAIN_EXIT_REFUSED with one line in err (no
 * "dtrain:" prefix) saying what is wrong and what would work. */
int dtrain_submit_check(const struct dtrain_options *opts, const struct dtrain_site_config *cfg,
                        const struct dtrain_job_size *size, char *err, size_t errlen);

/* --dtrain-spares=N at submission (sbatch, salloc): the node count the job
 * asks Slurm for, the user's fixed -N K plus N, in *nodes.  Returns 0
 * (nothing to do when N is 0 or not given: *nodes = 0), or
 * DTRAIN_EXIT_USAGE with one line in err when the node count is not a fixed
 * -N K (a range or none: which nodes are spares would be Slurm's guess). */
int dtrain_submit_spares(const struct dtrain_options *opts, const struct dtrain_job_size *size, long *nodes,
                         char *err, size_t errlen);

/* Set the calling client's node count (-N) to `nodes` through libslurm's
 * slurm_option_set on its option table (see above), before the job is
 * built from it.  Returns 0, or -1 with one line in err. */
int dtrain_client_set_nodes(long nodes, char *err, size_t errlen);

/* Print "dtrain: msg" on stderr and end the client (sbatch, salloc, srun)
 * with `code`.  Returning an error to Slurm instead would add Slurm's own
 * lines ("Invalid --dtrain-tp argument", "Plugin stack post-option
 * processing failed") under ours; the user should see one line.  Only for
 * client processes, never inside slurmstepd. */
void dtrain_client_refuse(int code, const char *msg) __attribute__((noreturn));

/* Run dtrain_submit_check() on the size the client knows and refuse on
 * failure.  Returns 0 when the job may go on. */
int dtrain_client_check(const struct dtrain_options *opts, const struct dtrain_site_config *cfg,
                        const struct dtrain_job_size *size);

#endif
