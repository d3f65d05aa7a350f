/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The --dtrain-* options: table and strict parsing; see options.h. */
#include "options.h"

#include <string.h>

#include "dtrain_parse.h"
#include "dtrain_plan.h"

#define STR_(x) #x
#define STR(x) STR_(x)

const struct dtrain_option_info dtrain_option_table[] = {
    {DTRAIN_OPT_TP, "dtrain-tp", "N",
     "[dtrain] tensor-parallel size T (1.." STR(DTRAIN_PLAN_MAX_DIM) ", default 1): each group of T "
     "consecutive tasks gets NVLink-connected GPUs on one node"},
    {DTRAIN_OPT_PP, "dtrain-pp", "N",
     "[dtrain] pipeline-parallel size P (1.." STR(DTRAIN_PLAN_MAX_DIM) ", default 1)"},
    {DTRAIN_OPT_DP, "dtrain-dp", "N",
     "[dtrain] data-parallel size D (1.." STR(DTRAIN_PLAN_MAX_DIM) "); default ntasks/(T*P), "
     "when given T*P*D must equal ntasks"},
    {DTRAIN_OPT_CKPT_DIR, "dtrain-ckpt-dir", "PATH",
     "[dtrain] checkpoint folder, where a requeued job resumes from"},
    {DTRAIN_OPT_MAX_RESTARTS, "dtrain-max-restarts", "N",
     "[dtrain] restart the job at most N times after a fault, requeues and in-job restarts (--dtrain-spares) "
     "together (0.." STR(DTRAIN_OPT_MAX_RESTARTS_MAX) ")"},
    {DTRAIN_OPT_ALLOW_PCIE, "dtrain-allow-pcie", NULL,
     "[dtrain] let a tensor-parallel group span GPUs without NVLink between them (slower; prints a warning)"},
    {DTRAIN_OPT_VERBOSE, "dtrain-verbose", NULL,
     "[dtrain] print each task's placement, binding and links, each node's islands and TP groups, and (dtrain's "
     "trainer) each group's bytes and predicted time per step, to stderr"},
    {DTRAIN_OPT_GPU_VISIBILITY, "dtrain-gpu-visibility", "all|one",
     "[dtrain] GPUs each task sees: all (every GPU of the step on the node, device LOCAL_RANK = the task's "
     "placed GPU) or one (only its own); default: the site's, else all"},
    {DTRAIN_OPT_SPARES, "dtrain-spares", "N",
     "[dtrain] N more nodes (0.." STR(DTRAIN_OPT_SPARES_MAX) ") than -N asks for, holding no ranks: after a fault "
     "dtrain-launch --supervise restarts the step in the job on a spare instead of requeueing"},
    {DTRAIN_OPT_STRAGGLER, "dtrain-straggler", "report|drain",
     "[dtrain] find a rank whose compute time stays above the others' and report it (report) or also drain "
     "its node and requeue the job without it (drain; needs --dtrain-ckpt-dir)"},
    {DTRAIN_OPT_GPU_VENDOR, "dtrain-gpu-vendor", "nvidia|amd",
     "[dtrain] the GPUs the program drives (CUDA: nvidia, HIP/ROCm: amd) on nodes with GPUs of both vendors; "
     "only those are placed"},
    {DTRAIN_OPT_PP_IN_DOMAIN, "dtrain-pp-in-domain", NULL,
     "[dtrain] keep each pipeline group inside one multi-node NVLink domain (site setting nvlink_domain_gpus), "
     "so that PP sends never leave NVLink; refused when the groups cannot fit a domain"},
    {DTRAIN_OPT_CPU_BIND, "dtrain-cpu-bind", "cores|numa",
     "[dtrain] each task's CPUs: whole cores of its GPU's NUMA node, no core shared (cores) or that whole NUMA "
     "node, shared by its tasks (numa); default: the site's, else cores (bound when the site binds)"},
};
const size_t dtrain_option_count = sizeof dtrain_option_table / sizeof dtrain_option_table[0];

void dtrain_options_init(struct dtrain_options *opts)
{
    memset(opts, 0, sizeof *opts);
    opts->max_restarts = -1;
    opts->spares = -1;
}

/* A parallel size: digits only, 1..DTRAIN_PLAN_MAX_DIM. */
static int parse_dim(const char *name, const char *arg, int *out, char *err, size_t errlen)
{
    char what[64];
    long v;
    dtrain_snprintf(what, sizeof what, "--%s", name);
    if (dtrain_parse_int(arg, 1, DTRAIN_PLAN_MAX_DIM, what, &v, err, errlen) != 0)
        return -1;
    *out = (int)v;
    return 0;
}

static int parse_path(const char *arg, char *out, size_t outlen, char *err, size_t errlen)
{
    if (arg == NULL || *arg == '\0') {
        dtrain_snprintf(err, errlen, "--dtrain-ckpt-dir: a folder is required (--dtrain-ckpt-dir=PATH)");
        return -1;
    }
    size_t len = strnlen(arg, outlen);
    if (len >= outlen) {
        dtrain_snprintf(err, errlen, "--dtrain-ckpt-dir: the path is longer than %zu bytes", outlen - 1);
        return -1;
    }
    for (size_t i = 0; i < len; i++) {
        if ((unsigned char)arg[i] < 0x20 || arg[i] == 0x7f) {
            dtrain_snprintf(err, errlen, "--dtrain-ckpt-dir: the path contains a control character");
            return -1;
        }
    }
    memcpy(out, arg, len + 1);
    return 0;
}

static int set_one(struct dtrain_options *opts, enum dtrain_opt_id id, const char *arg, char *err, size_t errlen)
{
    long v;
    switch (id) {
    case DTRAIN_OPT_TP:
        return parse_dim("dtrain-tp", arg, &opts->tp, err, errlen);
    case DTRAIN_OPT_PP:
        return parse_dim("dtrain-pp", arg, &opts->pp, err, errlen);
    case DTRAIN_OPT_DP:
        return parse_dim("dtrain-dp", arg, &opts->dp, err, errlen);
    case DTRAIN_OPT_CKPT_DIR:
        return parse_path(arg, opts->ckpt_dir, sizeof opts->ckpt_dir, err, errlen);
    case DTRAIN_OPT_MAX_RESTARTS:
        if (dtrain_parse_int(arg, 0, DTRAIN_OPT_MAX_RESTARTS_MAX, "--dtrain-max-restarts", &v, err, errlen) != 0)
            return -1;
        opts->max_restarts = (int)v;
        return 0;
    case DTRAIN_OPT_SPARES:
        if (dtrain_parse_int(arg, 0, DTRAIN_OPT_SPARES_MAX, "--dtrain-spares", &v, err, errlen) != 0)
            return -1;
        opts->spares = (int)v;
        return 0;
    case DTRAIN_OPT_ALLOW_PCIE:
        opts->allow_pcie = 1;
        return 0;
    case DTRAIN_OPT_VERBOSE:
        opts->verbose = 1;
        return 0;
    case DTRAIN_OPT_PP_IN_DOMAIN:
        opts->pp_in_domain = 1;
        return 0;
    case DTRAIN_OPT_GPU_VISIBILITY:
        if (arg != NULL && strcmp(arg, "all") == 0)
            opts->gpu_visibility = 1;
        else if (arg != NULL && strcmp(arg, "one") == 0)
            opts->gpu_visibility = 2;
        else {
            dtrain_snprintf(err, errlen, "--dtrain-gpu-visibility '%.32s': use all or one", arg ? arg : "");
            return -1;
        }
        return 0;
    case DTRAIN_OPT_GPU_VENDOR:
        if (arg != NULL && strcmp(arg, "nvidia") == 0)
            opts->gpu_vendor = DTRAIN_VENDOR_NVIDIA;
        else if (arg != NULL && strcmp(arg, "amd") == 0)
            opts->gpu_vendor = DTRAIN_VENDOR_AMD;
        else {
            dtrain_snprintf(err, errlen, "--dtrain-gpu-vendor '%.32s': use nvidia or amd", arg ? arg : "");
            return -1;
        }
        return 0;
    case DTRAIN_OPT_CPU_BIND:
        if (arg != NULL && strcmp(arg, "cores") == 0)
            opts->cpu_bind = 1;
        else if (arg != NULL && strcmp(arg, "numa") == 0)
            opts->cpu_bind = 2;
        else {
            dtrain_snprintf(err, errlen, "--dtrain-cpu-bind '%.32s': use cores or numa", arg ? arg : "");
            return -1;
        }
        return 0;
    case DTRAIN_OPT_STRAGGLER:
        if (arg != NULL && strcmp(arg, "report") == 0)
            opts->straggler = 1;
        else if (arg != NULL && strcmp(arg, "drain") == 0)
            opts->straggler = 2;
        else {
            dtrain_snprintf(err, errlen, "--dtrain-straggler '%.32s': use report or drain", arg ? arg : "");
            return -1;
        }
        return 0;
    }
    dtrain_snprintf(err, errlen, "unknown option id %d (a bug in the plugin)", (int)id);
    return -1;
}

int dtrain_options_set(struct dtrain_options *opts, enum dtrain_opt_id id, const char *arg,
                       char *err, size_t errlen)
{
    if (set_one(opts, id, arg, err, errlen) != 0)
        return -1;
    opts->given |= 1u << id;
    return 0;
}

int dtrain_options_used(const struct dtrain_options *opts)
{
    return opts->given != 0;
}

int dtrain_options_tp(const struct dtrain_options *opts)
{
    return opts->tp > 0 ? opts->tp : 1;
}

int dtrain_options_pp(const struct dtrain_options *opts)
{
    return opts->pp > 0 ? opts->pp : 1;
}
