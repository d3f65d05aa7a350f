/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Client-side checks (sbatch, salloc, srun); see submit.h. */
#include "submit.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain_exit.h"
#include "dtrain_parse.h"
#include "dtrain_plan.h"

/* A count text: "8" -> 8; anything else -> 0 (unknown). */
static long count_of(const char *text)
{
    long v;
    char ignored[128];
    if (text == NULL || dtrain_parse_int(text, 1, DTRAIN_PLAN_MAX_WORLD, "count", &v, ignored, sizeof ignored) != 0)
        return 0;
    return v;
}

/* A node count "2", or a range "2-2" whose ends agree; else 0 (unknown). */
static long nodes_of(const char *text)
{
    char lo[32];
    const char *dash;
    if (text == NULL)
        return 0;
    dash = strchr(text, '-');
    if (dash == NULL)
        return count_of(text);
    if ((size_t)(dash - text) >= sizeof lo)
        return 0;
    memcpy(lo, text, (size_t)(dash - text));
    lo[dash - text] = '\0';
    long a = count_of(lo), b = count_of(dash + 1);
    return a > 0 && a == b ? a : 0;
}

void dtrain_job_size_derive(const char *ntasks, const char *nodes, const char *ntasks_per_node,
                            struct dtrain_job_size *out)
{
    memset(out, 0, sizeof *out);
    out->ntasks = count_of(ntasks);
    out->nnodes = nodes_of(nodes);
    out->tasks_per_node = count_of(ntasks_per_node);
    if (out->ntasks == 0 && out->nnodes > 0 && out->tasks_per_node > 0)
        out->ntasks = out->nnodes * out->tasks_per_node;
    if (out->tasks_per_node == 0 && out->ntasks > 0 && out->nnodes > 0) {
        if (out->ntasks % out->nnodes == 0)
            out->tasks_per_node = out->ntasks / out->nnodes;
        else
            out->uneven = 1;
    }
}

/* libslurm's cli_filter interface, looked up at run time (see submit.h). */
typedef bool (*option_isset_f)(void *opt, const char *name);
typedef char *(*option_get_f)(void *opt, const char *name);
typedef void (*xfree_ptr_f)(void *ptr);
typedef int (*option_set_f)(void *opt, const char *name, const char *value, bool early);

struct client_opts {
    void *opt;
    option_isset_f isset;
    option_get_f get;
    xfree_ptr_f xfree_ptr;
};

/* The option's text when the user set it (caller frees with xfree_ptr), else NULL. */
static char *client_option(const struct client_opts *c, const char *name)
{
    if (!c->isset(c->opt, name))
        return NULL;
    return c->get(c->opt, name);
}

void dtrain_job_size_from_client(struct dtrain_job_size *out, int allocates)
{
    struct client_opts c;
    char *ntasks = NULL, *nodes = NULL, *per_node = NULL, *segment = NULL;

    memset(out, 0, sizeof *out);
    c.opt = dlsym(RTLD_DEFAULT, "opt");
    c.isset = (option_isset_f)dlsym(RTLD_DEFAULT, "slurm_option_isset");
    c.get = (option_get_f)dlsym(RTLD_DEFAULT, "slurm_option_get");
    c.xfree_ptr = (xfree_ptr_f)dlsym(RTLD_DEFAULT, "slurm_xfree_ptr");
    /* Without a way to free what slurm_option_get returns, do not call it. */
    if (c.opt == NULL || c.isset == NULL || c.get == NULL || c.xfree_ptr == NULL)
        return;
    ntasks = client_option(&c, "ntasks");
    nodes = client_option(&c, "nodes");
    per_node = client_option(&c, "ntasks-per-node");
    dtrain_job_size_derive(ntasks, nodes, per_node, out);
#ifdef HAVE_JOB_DESC_MSG_T_SEGMENT_SIZE
    if (allocates) {
        segment = client_option(&c, "segment");
        out->segment_known = 1;
        out->segment = count_of(segment);
    }
#else
    (void)allocates;
#endif
    if (segment)
        c.xfree_ptr(segment);
    if (ntasks)
        c.xfree_ptr(ntasks);
    if (nodes)
        c.xfree_ptr(nodes);
    if (per_node)
        c.xfree_ptr(per_node);
}

int dtrain_submit_check(const struct dtrain_options *opts, const struct dtrain_site_config *cfg,
                        const struct dtrain_job_size *size, char *err, size_t errlen)
{
    int T = dtrain_options_tp(opts), P = dtrain_options_pp(opts);
    int pcie = dtrain_config_pcie_allowed(cfg, opts->allow_pcie);

    if (pcie < 0) {
        dtrain_snprintf(err, errlen, "--dtrain-allow-pcie is turned off on this cluster (site setting "
                        "allow_pcie=no): leave it out");
        return DTRAIN_EXIT_USAGE;
    }
    if (!dtrain_options_used(opts))
        return 0;
    /* Past the largest island of a node, a multi-node NVLink domain may
     * still hold the group: dtrain_plan_check_shape judges it then. */
    if (cfg->max_tp > 0 && T > cfg->max_tp && !pcie && cfg->nvlink_domain_gpus <= 0) {
        if (cfg->allow_pcie == DTRAIN_PCIE_NEVER)
            dtrain_snprintf(err, errlen, "--dtrain-tp=%d is larger than the largest NVLink island on this "
                            "cluster's nodes (%d GPUs): use --dtrain-tp=%d or less", T, cfg->max_tp, cfg->max_tp);
        else
            dtrain_snprintf(err, errlen, "--dtrain-tp=%d is larger than the largest NVLink island on this "
                            "cluster's nodes (%d GPUs): use --dtrain-tp=%d or less, or --dtrain-allow-pcie",
                            T, cfg->max_tp, cfg->max_tp);
        return DTRAIN_EXIT_REFUSED;
    }
    if (size->uneven) {
        dtrain_snprintf(err, errlen, "%ld tasks do not spread evenly over %ld nodes, so nodes would hold "
                        "different task counts: use --ntasks-per-node", size->ntasks, size->nnodes);
        return DTRAIN_EXIT_REFUSED;
    }
    if (dtrain_plan_check_shape(T, P, opts->dp, size->ntasks, size->tasks_per_node, cfg->nvlink_domain_gpus, err,
                                errlen) != DTRAIN_OK)
        return DTRAIN_EXIT_REFUSED;
    if (opts->pp_in_domain && dtrain_plan_check_pp_domain(T, P, size->ntasks, size->tasks_per_node,
                                                          cfg->nvlink_domain_gpus, err, errlen) != DTRAIN_OK)
        return DTRAIN_EXIT_REFUSED;
    /* Slurm's blocks or rings are the domains: each segment of the job sits
     * in one, so --segment decides whether the groups stay inside one. */
    if (size->segment_known && cfg->nvlink_domain_source != DTRAIN_DOMAIN_NVML &&
        dtrain_plan_check_segment(T, P, opts->pp_in_domain, size->ntasks, size->tasks_per_node,
                                  cfg->nvlink_domain_gpus, size->segment,
                                  cfg->nvlink_domain_source == DTRAIN_DOMAIN_RING ? "ring" : "block", err,
                                  errlen) != DTRAIN_OK)
        return DTRAIN_EXIT_REFUSED;
    return 0;
}

int dtrain_submit_spares(const struct dtrain_options *opts, const struct dtrain_job_size *size, long *nodes,
                         char *err, size_t errlen)
{
    *nodes = 0;
    if (opts->spares <= 0)
        return 0;
    if (size->nnodes <= 0) {
        dtrain_snprintf(err, errlen, "--dtrain-spares=%d needs a fixed node count for the ranks: give -N K "
                        "(the job then gets K + %d nodes, the last %d of them spares)", opts->spares, opts->spares,
                        opts->spares);
        return DTRAIN_EXIT_USAGE;
    }
    *nodes = size->nnodes + opts->spares;
    return 0;
}

int dtrain_client_set_nodes(long nodes, char *err, size_t errlen)
{
    void *opt = dlsym(RTLD_DEFAULT, "opt");
    option_set_f set = (option_set_f)dlsym(RTLD_DEFAULT, "slurm_option_set");
    char text[32];
    if (opt == NULL || set == NULL) {
        dtrain_snprintf(err, errlen, "--dtrain-spares: this Slurm client has no option table to add the spare "
                        "nodes to (libslurm's slurm_option_set): ask for them with -N and leave --dtrain-spares out");
        return -1;
    }
    dtrain_snprintf(text, sizeof text, "%ld", nodes);
    if (set(opt, "nodes", text, false) != 0) {
        dtrain_snprintf(err, errlen, "--dtrain-spares: Slurm refused the node count %ld (-N %s)", nodes, text);
        return -1;
    }
    /* --no-kill: a failed node must not end the job, whose steps go on
     * without it (dtrain-launch --supervise) */
    if (set(opt, "no-kill", "set", false) != 0) {
        dtrain_snprintf(err, errlen, "--dtrain-spares: Slurm refused --no-kill");
        return -1;
    }
    return 0;
}

void dtrain_client_refuse(int code, const char *msg)
{
    fprintf(stderr, "dtrain: %s\n", msg);
    fflush(stderr);
    exit(code);
}

int dtrain_client_check(const struct dtrain_options *opts, const struct dtrain_site_config *cfg,
                        const struct dtrain_job_size *size)
{
    char err[512];
    int code = dtrain_submit_check(opts, cfg, size, err, sizeof err);
    if (code != 0)
        dtrain_client_refuse(code, err);
    return 0;
}
