/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain, private to trainer/: the fault-tolerant loop's state, shared
 * by the loop (dtrain_loop.c) and its checkpoints (dtrain_ft_ckpt.c). */
#ifndef DTRAIN_FT_INTERNAL_H
#define DTRAIN_FT_INTERNAL_H

#include "ckpt/dtrain_ckpt_async.h"
#include "dtrain_ft.h"
#include "ft/dtrain_inject.h"
#include "dtrain_traffic.h"

struct ft {
    struct dtrain_ptrainer *t;
    const struct dtrain_train_config *cfg;
    const struct dtrain_bootstrap *bs;
    dtrain_comm *world;
    const atomic_int *abort_flag;    /* the process's, for the peer copies' communicator too */
    struct dtrain_fault *fault;
    struct dtrain_watchdog *wd;
    struct dtrain_inject_run inject; /* fault injection (its hooks are the step's) */
    const char *prog;
    FILE *progress;
    const char *dir;                 /* checkpoint folder, NULL: none */
    const char *local;               /* the node-local tier's folder (--ckpt-local-dir), NULL: none */
    char local_buf[DTRAIN_PATH_MAX];
    struct dtrain_sckpt_peers peers; /* who keeps a copy of whose node-local shard */
    const char *resume;              /* resume from here (--resume), NULL: from dir */
    const char *last_dir;            /* the folder of last_ckpt */
    struct dtrain_sckpt_layout layout;
    struct dtrain_ft_pieces pieces;
    long restart;
    long last_ckpt;                  /* step of the newest checkpoint written or loaded, -1 */
    struct dtrain_ckpt_async async;  /* the checkpoint being written in the background (--ckpt-async) */
    struct dtrain_ft_summary *sum;
    const struct dtrain_comms *comms;
    int traffic;                     /* DTRAIN_VERBOSE=1: the bytes per group and step (dtrain_traffic.h) */
    long traffic_first;              /* the first step this process runs */
    struct dtrain_group_links links; /* the plugin's DTRAIN_GROUP_LINKS, for predicted times */
    int have_links;
};

static inline int is_root(const struct ft *f) { return f->bs->rank == 0; }

/* dtrain_ft_ckpt.c.  The node-local tier (--ckpt-local-dir): its folder on
 * this node, checked on every rank, and the peers that keep copies. */
int dtrain_ft_local_tier(struct ft *f, char *err, size_t errlen);
/* The checkpoint folder holds this step already (written, or resumed
 * from); ... or the node-local tier does. */
int dtrain_ft_saved_in_dir(const struct ft *f, long step);
int dtrain_ft_saved_in_tiers(const struct ft *f, long step);
/* The write in flight, if any, one stage on (drain: to the commit; a
 * collective at a step boundary). */
int dtrain_ft_finish_async(struct ft *f, int drain, char *err, size_t errlen);
/* The checkpoint of the present step: node-local tier (local) or shared,
 * in the background (async) or now. */
int dtrain_ft_save_checkpoint(struct ft *f, int async, int local, char *err, size_t errlen);
/* The newest good checkpoint of dir (at start, or to roll back). */
int dtrain_ft_load_checkpoint(struct ft *f, const char *dir, int rollback, int required, char *err, size_t errlen);

#endif
