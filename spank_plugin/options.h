/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The --dtrain-* options of the SPANK plugin: their table and strict parsing.
 *
 * Pure code (no Slurm calls), so the unit tests link it as is.  The plugin
 * registers every row of dtrain_option_table with spank_option_register()
 * in every context and calls dtrain_options_set() from its one option
 * callback.  Setting an option twice keeps the last value (Slurm may call
 * the callback once from the environment and once from the command line). */
#ifndef DTRAIN_SPANK_OPTIONS_H
#define DTRAIN_SPANK_OPTIONS_H

#include <stddef.h>

#define DTRAIN_OPT_PATH_MAX 1024        /* --dtrain-ckpt-dir is at most 1023 bytes */
#define DTRAIN_OPT_MAX_RESTARTS_MAX 10000 /* --dtrain-max-restarts at most this */
#define DTRAIN_OPT_SPARES_MAX 64          /* --dtrain-spares at most this */

/* Option identifiers; also the `val` Slurm hands back to the callback. */
enum dtrain_opt_id {
    DTRAIN_OPT_TP = 1,
    DTRAIN_OPT_PP,
    DTRAIN_OPT_DP,
    DTRAIN_OPT_CKPT_DIR,
    DTRAIN_OPT_MAX_RESTARTS,
    DTRAIN_OPT_ALLOW_PCIE,
    DTRAIN_OPT_VERBOSE,
    DTRAIN_OPT_GPU_VISIBILITY,
    DTRAIN_OPT_SPARES,
    DTRAIN_OPT_STRAGGLER,
    DTRAIN_OPT_GPU_VENDOR,
    DTRAIN_OPT_PP_IN_DOMAIN,
    DTRAIN_OPT_CPU_BIND,
};

struct dtrain_option_info {
    enum dtrain_opt_id id;
    const char *name;    /* without the leading "--" */
    const char *arginfo; /* NULL for a flag */
    const char *usage;   /* starts with "[dtrain]" so --help shows whose it is */
};

extern const struct dtrain_option_info dtrain_option_table[];
extern const size_t dtrain_option_count;

/* The values the user gave; 0 / "" / -1 mean "not given". */
struct dtrain_options {
    int tp;                             /* T, 0 = not given (then 1) */
    int pp;                             /* P, 0 = not given (then 1) */
    int dp;                             /* D, 0 = not given (world / (T*P)) */
    char ckpt_dir[DTRAIN_OPT_PATH_MAX]; /* "" = not given */
    int max_restarts;                   /* -1 = not given */
    int allow_pcie;                     /* 1 with --dtrain-allow-pcie */
    int verbose;                        /* 1 with --dtrain-verbose */
    int gpu_visibility;                 /* 0 not given (the site's default), 1 all, 2 one */
    int spares;                         /* --dtrain-spares N, -1 = not given */
    int straggler;                      /* 0 not given (no detection), 1 report, 2 drain */
    unsigned gpu_vendor;                /* 0 not given, DTRAIN_VENDOR_NVIDIA or DTRAIN_VENDOR_AMD */
    int pp_in_domain;                   /* 1 with --dtrain-pp-in-domain */
    int cpu_bind;                       /* 0 not given (the site's default), 1 cores, 2 numa */
    unsigned given;                     /* bit (1 << id) for each option given */
};

void dtrain_options_init(struct dtrain_options *opts);

/* Parse one option's text (NULL or ignored for flags).  Returns 0, or -1 with
 * one line in err (no "dtrain:" prefix) naming the option, the bad text and
 * what is accepted; opts is unchanged then. */
int dtrain_options_set(struct dtrain_options *opts, enum dtrain_opt_id id, const char *arg,
                       char *err, size_t errlen);

/* 1 when the job uses dtrain: any --dtrain-* option was given.  Its steps
 * are then placed, with T and P defaulting to 1. */
int dtrain_options_used(const struct dtrain_options *opts);

/* T and P with the defaults applied. */
int dtrain_options_tp(const struct dtrain_options *opts);
int dtrain_options_pp(const struct dtrain_options *opts);

#endif
