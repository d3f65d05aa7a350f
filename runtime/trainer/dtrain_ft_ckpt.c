/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The fault-tolerant loop's checkpoints: the config from the environment,
 * the node-local tier, writing (now or in the background), committing and
 * loading; see dtrain_ft.h. */
#include "dtrain_ft_internal.h"
#include "dtrain_env.h"
#include "dtrain_io.h"
#include "dtrain_parse.h"
#include "parallel/dtrain_pcomm.h"
#include "comm/bootstrap/bootstrap_id.h"
#include "ft/dtrain_watchdog.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int dtrain_ft_config_from_env(struct dtrain_train_config *c, char *err, size_t errlen)
{
    const char *dir = getenv(DTRAIN_ENV_CKPT_DIR), *inject = getenv(DTRAIN_INJECT_ENV);
    if (c->ckpt_dir[0] == '\0' && dir != NULL && dtrain_snprintf(c->ckpt_dir, sizeof c->ckpt_dir, "%s", dir) != 0) {
        snprintf(err, errlen, "%s is longer than %zu bytes", DTRAIN_ENV_CKPT_DIR, sizeof c->ckpt_dir - 1);
        return DTRAIN_ERR_INPUT;
    }
    const char *strag = getenv(DTRAIN_ENV_STRAGGLER);
    if (strag != NULL && strag[0] != '\0') {
        if (strcmp(strag, "report") != 0 && strcmp(strag, "drain") != 0) {
            snprintf(err, errlen, "%s='%.32s': use report or drain (sbatch --dtrain-straggler=report|drain)",
                     DTRAIN_ENV_STRAGGLER, strag);
            return DTRAIN_ERR_INPUT;
        }
        if (c->straggler_steps == 0)
            c->straggler_steps = DTRAIN_FT_STRAGGLER_STEPS;
        c->straggler_drain = c->straggler_drain || strcmp(strag, "drain") == 0;
    }
    if (c->straggler_drain && c->straggler_steps == 0)
        c->straggler_steps = DTRAIN_FT_STRAGGLER_STEPS;
    if (c->straggler_drain && c->ckpt_dir[0] == '\0' && getenv(DTRAIN_ENV_CKPT_DIR) == NULL) {
        snprintf(err, errlen, "straggler drain needs a checkpoint folder to restart from and to hand the drain request "
                 "to dtrain-launch --job-exit (--ckpt-dir or sbatch --dtrain-ckpt-dir)");
        return DTRAIN_ERR_INPUT;
    }
    if (c->inject[0] == '\0' && inject != NULL && dtrain_snprintf(c->inject, sizeof c->inject, "%s", inject) != 0) {
        snprintf(err, errlen, "%s is longer than %zu bytes", DTRAIN_INJECT_ENV, sizeof c->inject - 1);
        return DTRAIN_ERR_INPUT;
    }
    const char *local = getenv(DTRAIN_ENV_CKPT_LOCAL_DIR);
    if (c->ckpt_local_dir[0] == '\0' && local != NULL &&
        dtrain_snprintf(c->ckpt_local_dir, sizeof c->ckpt_local_dir, "%s", local) != 0) {
        snprintf(err, errlen, "%s is longer than %zu bytes", DTRAIN_ENV_CKPT_LOCAL_DIR, sizeof c->ckpt_local_dir - 1);
        return DTRAIN_ERR_INPUT;
    }
    if (c->ckpt_local_dir[0] != '\0' && c->ckpt_dir[0] == '\0') {
        snprintf(err, errlen, "--ckpt-local-dir (or %s) needs --ckpt-dir (or %s): the shared tier, written at the end "
                 "and when stopping", DTRAIN_ENV_CKPT_LOCAL_DIR, DTRAIN_ENV_CKPT_DIR);
        return DTRAIN_ERR_INPUT;
    }
    struct dtrain_inject in;
    return dtrain_inject_parse(c->inject, &in, err, errlen) == 0 ? DTRAIN_OK : DTRAIN_ERR_INPUT;
}

/* The node-local folder with "%n" replaced by this node's name
 * (SLURMD_NODENAME, else the host name) and "%%" by "%". */
static int local_dir_of(const char *spec, char *out, size_t len, char *err, size_t errlen)
{
    char host[256] = "";
    const char *n = getenv("SLURMD_NODENAME");
    if (n != NULL && n[0] != '\0')
        snprintf(host, sizeof host, "%s", n);
    else if (gethostname(host, sizeof host - 1) != 0 || host[0] == '\0')
        snprintf(host, sizeof host, "localhost");
    if (dtrain_expand_node(spec, host, out, len) != 0) {
        snprintf(err, errlen, "--ckpt-local-dir %.80s: longer than %zu bytes once %%n is replaced", spec, len - 1);
        return DTRAIN_ERR_INPUT;
    }
    return DTRAIN_OK;
}

static int bcast_id(dtrain_comm *world, char *id, size_t bytes, const char *what, char *err, size_t errlen)
{
    return dtrain_pcomm_status(world, dtrain_comm_broadcast(world, id, bytes, 0), what, err, errlen);
}

#define COPY_ID_BYTES 272 /* a cpu id and its NUL, padded: what rank 0 broadcasts */

/* The peer copies' own communicator (struct dtrain_sckpt_peers.copy_comm):
 * a cpu communicator over world's ranks, made collectively, rank 0
 * listening on world's address, so that the background writer sends and
 * receives the copies on its own thread while the main thread trains over
 * world (a communicator takes calls from one thread at a time).
 * timeout_ms and abort_flag as world's.  DTRAIN_OK and *out (NULL when it
 * could not be made on some rank: err then says why, for a warning; the
 * copies then go over world) or world's failure. */
static int copy_comm_make(dtrain_comm *world, const struct dtrain_bootstrap *bs, int timeout_ms,
                          const atomic_int *abort_flag, dtrain_comm **out, char *err, size_t errlen)
{
    int rank = dtrain_comm_rank(world), size = dtrain_comm_size(world), listen_fd = -1, rc;
    char id[COPY_ID_BYTES], why[384] = "", host[DTRAIN_COMM_HOST_ID_MAX];
    *out = NULL;
    memset(id, 0, sizeof id);
    if (rank == 0) {
        /* world's leader address: the interface the launcher chose (--comm-iface) */
        struct dtrain_cpu_id wid;
        char addr[INET_ADDRSTRLEN] = "";
        if (bs->backend == DTRAIN_COMM_CPU && dtrain_cpu_id_parse(bs->groups[DTRAIN_GROUP_WORLD].id, &wid) == 0)
            dtrain_snprintf(addr, sizeof addr, "%s", wid.addr);
        else if (dtrain_comm_addr_pick(NULL, addr, sizeof addr, why, sizeof why) != 0)
            addr[0] = '\0';
        if (addr[0] != '\0' && dtrain_bootstrap_id_make_cpu(addr, size - 1, id, sizeof id, &listen_fd, why, sizeof why) != 0)
            id[0] = '\0';
    }
    if ((rc = bcast_id(world, id, sizeof id, "checkpoint: the peer copies' communicator", err, errlen)) !=
        DTRAIN_OK) {
        if (listen_fd >= 0)
            close(listen_fd);
        return rc;
    }
    int64_t failed = 1;
    if (id[0] != '\0' && memchr(id, '\0', sizeof id) != NULL) {
        struct dtrain_comm_group g = {.present = 1, .size = size, .first = 0, .stride = 1, .my_rank = rank,
                                      .listen_fd = listen_fd};
        struct dtrain_comm_options o;
        dtrain_comm_options_defaults(&o);
        o.timeout_ms = timeout_ms;
        o.abort_flag = abort_flag;
        if (bs->node >= 0) { /* as dtrain_comm_init_all: the ranks of a node share memory */
            dtrain_snprintf(host, sizeof host, "node%d", bs->node);
            o.host_id = host;
        }
        dtrain_snprintf(g.key, sizeof g.key, "dt.ckpt");
        memcpy(g.id, id, sizeof id);
        failed = dtrain_comm_init(&g, DTRAIN_COMM_CPU, &o, out, NULL, why, sizeof why) != DTRAIN_OK;
        listen_fd = -1; /* taken over, also on failure */
    } else if (rank != 0) {
        dtrain_snprintf(why, sizeof why, "rank 0 could not make its id");
    }
    if (listen_fd >= 0)
        close(listen_fd);
    /* every rank has it, or none uses it */
    int64_t any = failed;
    if ((rc = dtrain_pcomm_status(world, dtrain_comm_sum_int64(world, &any, 1),
                                  "checkpoint: the peer copies' communicator", err, errlen)) != DTRAIN_OK ||
        any > 0) {
        dtrain_comm_destroy(*out);
        *out = NULL;
        if (rc == DTRAIN_OK)
            dtrain_snprintf(err, errlen, "the peer copies' communicator: %s", failed ? why : "another rank could "
                            "not join it");
    }
    return rc;
}

int dtrain_ft_local_tier(struct ft *f, char *err, size_t errlen)
{
    const struct dtrain_train_config *cfg = f->cfg;
    const struct dtrain_bootstrap *bs = f->bs;
    int rc;
    if (cfg->ckpt_local_dir[0] == '\0')
        return DTRAIN_OK;
    if (f->dir == NULL) {
        snprintf(err, errlen, "--ckpt-local-dir needs --ckpt-dir (the shared tier, written at the end and when "
                 "stopping)");
        return DTRAIN_ERR_INPUT;
    }
    if ((rc = local_dir_of(cfg->ckpt_local_dir, f->local_buf, sizeof f->local_buf, err, errlen)) != DTRAIN_OK)
        return rc;
    f->local = f->local_buf;
    /* every rank's node folder writable, or every rank stops now (exit 2), not at the first checkpoint */
    int bad = dtrain_out_check_dir(f->local, "node-local checkpoint folder (--ckpt-local-dir)", err, errlen) !=
              DTRAIN_OK;
    int64_t any = bad;
    if ((rc = dtrain_pcomm_status(f->world, dtrain_comm_sum_int64(f->world, &any, 1), "checking the node-local folders",
                                  err, errlen)) != DTRAIN_OK)
        return rc;
    if (any > 0) {
        if (!bad)
            snprintf(err, errlen, "%" PRId64 " rank%s cannot write its node-local checkpoint folder (--ckpt-local-dir "
                     "%s): see their lines", any, any > 1 ? "s" : "", cfg->ckpt_local_dir);
        return DTRAIN_ERR_INPUT;
    }
    /* collective: every rank has the same config */
    if ((rc = dtrain_sckpt_peers(f->world, bs->node, &f->peers, err, errlen)) != DTRAIN_OK)
        return rc;
    /* the copies travel on the background writer's thread, over their own communicator */
    char why[512];
    if (f->peers.peer >= 0 &&
        (rc = copy_comm_make(f->world, bs, cfg->comm_timeout * 1000, f->abort_flag, &f->peers.copy_comm, why,
                             sizeof why)) != DTRAIN_OK) {
        snprintf(err, errlen, "%s", why);
        return rc;
    }
    if (is_root(f) && f->peers.peer >= 0 && f->peers.copy_comm == NULL)
        fprintf(stderr, "%s: warning: --ckpt-local-dir: %s; the peer copies go over the world communicator at a step "
                "boundary\n", f->prog, why);
    if (is_root(f) && (f->peers.nodes < 2 || f->peers.same_node))
        fprintf(stderr, "%s: warning: --ckpt-local-dir: %s: a node's lost disk can lose a node-local checkpoint "
                "(the shared tier, --ckpt-dir, is the fallback)\n", f->prog, f->peers.nodes < 2 ?
                "every rank is on one node, so no shard has a copy on another node" :
                "the nodes hold uneven numbers of ranks, so some shards' copies are on their own node");
    return DTRAIN_OK;
}

/* ------------------------------------------------------------ checkpoints */

/* The checkpoint folder holds this step already (written, or resumed from). */
int dtrain_ft_saved_in_dir(const struct ft *f, long step)
{
    return f->last_ckpt == step && f->last_dir == f->dir;
}

/* ... or in the node-local tier. */
int dtrain_ft_saved_in_tiers(const struct ft *f, long step)
{
    return dtrain_ft_saved_in_dir(f, step) || (f->last_ckpt == step && f->local != NULL && f->last_dir == f->local);
}

/* A checkpoint of dir's outcome, committed (rc) after write_s seconds of
 * writing (in the background: async) and st's of the commit: counted and
 * said. */
static void checkpoint_done(struct ft *f, const char *dir, long step, int rc, int async, double write_s,
                            const struct dtrain_sckpt_stats *st, const char *err)
{
    const char *tier = dir == f->local ? "node-local" : "";
    if (rc == DTRAIN_OK) {
        f->last_ckpt = step;
        f->last_dir = dir;
        f->sum->checkpoints++;
        f->sum->ckpt_write_s = write_s + st->seconds;
        f->sum->ckpt_bytes = st->total_bytes;
        if (is_root(f)) {
            char when[160] = "";
            snprintf(when, sizeof when, "%s%s", dir == f->local ? (f->peers.peer >= 0 ? ", node-local, each shard "
                     "also on a peer's node" : ", node-local, no copy on another node") : "",
                     async ? ", written in the background" : "");
            if (async)
                snprintf(when + strlen(when), sizeof when - strlen(when), ", committed after step %ld",
                         dtrain_ptrainer_steps_done(f->t));
            fprintf(f->progress, "%s: checkpoint of step %ld written to %s/step-%08ld (%.2f MB, %.3f s%s)\n", f->prog,
                    step, dir, step, 1e-6 * (double)st->total_bytes, write_s + st->seconds, when);
            fflush(f->progress);
            char what[64];
            snprintf(what, sizeof what, "%llu bytes in %.6f s", (unsigned long long)st->total_bytes,
                     write_s + st->seconds);
            dtrain_fault_event(f->fault, "ckpt_write", step, what);
        }
    } else if (rc == DTRAIN_ERR_SYSTEM) {
        f->sum->checkpoint_failures++;
        char kept[64] = "there is no checkpoint yet";
        if (f->last_ckpt >= 0)
            snprintf(kept, sizeof kept, "the newest checkpoint stays step %ld", f->last_ckpt);
        if (is_root(f) || st->failed_here) /* the summary, or what failed here */
            fprintf(stderr, "%s: warning: %s%s%s; %s\n", f->prog, err, async ? " (background write)" : "",
                    tier[0] ? " (node-local tier)" : "", kept);
    }
}

/* Every rank's writer through its stage, waited for in rounds: each rank
 * waits for its own writer a little, then one small all-reduce counts the
 * writers still at work, until none is.  Waiting in the commit's
 * collectives instead, the ranks whose writes were done would time out
 * (--comm-timeout) behind one whose write takes longer, and the job would
 * be requeued for a slow disk.  A rank whose writer is done tells its
 * watchdog it waits for the others; one whose writer is still at work
 * does not, so the watchdog's limit (--watchdog) bounds a write that
 * never ends, and its peers' rounds then fail as the rank leaves.  A
 * collective: every rank calls it with the same stage pending. */
struct writers_wait {
    struct ft *f;
    long at;
};

static int writer_busy(void *p)
{
    return dtrain_ckpt_async_writing(&((struct writers_wait *)p)->f->async);
}

static void writer_idle(void *p)
{
    const struct writers_wait *w = p;
    dtrain_watchdog_beat(w->f->wd, "waiting for the other ranks' checkpoint writes", w->at);
}

static int wait_for_writers(struct ft *f, long at, char *err, size_t errlen)
{
    struct writers_wait w = {f, at};
    return dtrain_ckpt_wait_rounds(f->world, writer_busy, writer_idle, &w, "waiting for the ranks' checkpoint writes",
                                   err, errlen);
}

/* The write in flight, if any, one stage on: waited for, then its copy
 * sent to the peer (node-local) or committed.  A collective: every rank
 * calls it at the same step boundary.  drain: every stage, to the commit.
 * background: the write was started in the background (its line says so). */
static int finish_write(struct ft *f, int drain, int background, char *err, size_t errlen)
{
    int rc = DTRAIN_OK, committed = 0;
    while (f->async.pending && !committed) {
        long step = (long)f->async.step, at = dtrain_ptrainer_steps_done(f->t);
        const char *dir = f->async.dir;
        struct dtrain_sckpt_stats st;
        double write_s;
        dtrain_watchdog_beat(f->wd, "finishing a checkpoint", at);
        if ((rc = wait_for_writers(f, at, err, errlen)) != DTRAIN_OK)
            break;
        rc = dtrain_ckpt_async_finish(&f->async, f->world, f->cfg->ckpt_keep, &committed, &st, &write_s, err,
                                      errlen);
        dtrain_watchdog_beat(f->wd, "training", at);
        if (committed || rc != DTRAIN_OK) {
            checkpoint_done(f, dir, step, rc, background, write_s, &st, err);
            break;
        }
        if (!drain)
            break;
    }
    if (drain && !f->async.pending)
        dtrain_ckpt_async_wait(&f->async); /* its removal of older checkpoints, before anyone lists the folder */
    return rc;
}

int dtrain_ft_finish_async(struct ft *f, int drain, char *err, size_t errlen)
{
    return finish_write(f, drain, f->cfg->ckpt_async, err, errlen);
}

/* Write the checkpoint of the present step into the node-local tier
 * (local) or the shared folder.  async: start it in the background (after
 * finishing the one in flight), else write and commit it now.  Both go
 * through the writer thread (dtrain_ckpt_async.h): synchronous, the main
 * thread waits for every rank's write in rounds (wait_for_writers), so a
 * write slower than --comm-timeout is waited for, not taken for a hang. */
int dtrain_ft_save_checkpoint(struct ft *f, int async, int local, char *err, size_t errlen)
{
    long step = dtrain_ptrainer_steps_done(f->t);
    int rc, nospace = dtrain_inject_due(&f->inject.spec, DTRAIN_INJECT_NOSPACE, f->bs->rank, step, f->restart);
    if ((rc = dtrain_ft_finish_async(f, 1, err, errlen)) == DTRAIN_ERR_FAULT)
        return rc;
    nospace = nospace && dtrain_inject_ckpt_nospace(&f->inject, step); /* says so */
    dtrain_watchdog_beat(f->wd, "writing a checkpoint", step);
    if ((rc = dtrain_ft_pieces_download(&f->pieces, err, errlen)) != DTRAIN_OK)
        return rc;
    struct dtrain_sckpt_scaler scaler;
    dtrain_ptrainer_scaler(f->t, &scaler);
    local = local && f->local != NULL;
    long slow = dtrain_inject_ckpt_slow_ms(&f->inject, step);
    if (dtrain_ckpt_async_start(&f->async, local ? f->local : f->dir, local, &f->peers, f->cfg, &f->layout,
                                (uint64_t)step, dtrain_ptrainer_data_batches(f->t), &scaler, f->pieces.save,
                                f->pieces.nsave, nospace, slow, err, errlen) != 0)
        fprintf(stderr, "%s: warning: rank %d: %s\n", f->prog, f->bs->rank, err);
    if (async) {
        dtrain_watchdog_beat(f->wd, "training", step);
        return DTRAIN_OK;
    }
    rc = finish_write(f, 1, 0, err, errlen); /* every stage, waited for now */
    dtrain_watchdog_beat(f->wd, "training", step);
    return rc;
}

/* Load the newest good checkpoint of dir (at start, or to roll back).
 * required: finding none there is an error (--resume DIR). */
int dtrain_ft_load_checkpoint(struct ft *f, const char *dir, int rollback, int required, char *err, size_t errlen)
{
    struct dtrain_sckpt_resumed res;
    struct dtrain_sckpt_stats st;
    long at = dtrain_ptrainer_steps_done(f->t);
    dtrain_watchdog_beat(f->wd, "loading a checkpoint", at);
    dtrain_fault_event(f->fault, "load_begin", at, rollback ? "rollback" : "resume");
    /* the run's own folders: either tier, the newest complete checkpoint */
    int tiers = f->local != NULL && (dir == f->dir || dir == f->local);
    if (tiers)
        dir = f->dir;
    struct dtrain_sckpt_group group = dtrain_ft_pieces_group(&f->pieces);
    group.read_delay_ms = dtrain_inject_load_slow_ms(&f->inject, at);
    int rc = tiers ? dtrain_sckpt_resume_tiers(f->dir, f->local, &f->peers, f->cfg, f->world, &group, f->pieces.load,
                                               f->pieces.nload, stderr, f->prog, &res, &st, err, errlen)
                   : dtrain_sckpt_resume_group(dir, f->cfg, f->world, &group, f->pieces.load, f->pieces.nload, stderr,
                                               f->prog, &res, &st, err, errlen);
    if (rc != DTRAIN_OK)
        return rc;
    if (!res.found && (rollback || res.loaded_partly)) {
        snprintf(err, errlen, "%s: no good checkpoint in %s%s", rollback ? "cannot roll back" : "cannot resume",
                 dir, res.loaded_partly ? " (a damaged one was read in part: the model is not usable)" : "");
        return DTRAIN_ERR_SYSTEM;
    }
    if (!res.found && res.damaged > 0) {
        /* storage that damages every checkpoint would make every requeue start over */
        /* the folder that held them: the shared one, the node-local ones (as
         * given, and this node's) or both */
        char local[2 * DTRAIN_PATH_MAX + 64] = "", where[3 * DTRAIN_PATH_MAX + 80];
        if (res.damaged_local > 0)
            snprintf(local, sizeof local, "the node-local folders %s (this node's: %s)", f->cfg->ckpt_local_dir,
                     f->local);
        if (res.damaged_local == 0)
            snprintf(where, sizeof where, "%s", dir);
        else if (res.damaged_local == res.damaged)
            snprintf(where, sizeof where, "%s", local);
        else
            snprintf(where, sizeof where, "%s and %s", dir, local);
        const char *flag = res.damaged_local == res.damaged ? "--ckpt-local-dir" : "--ckpt-dir";
        snprintf(err, errlen, "every checkpoint in %s is damaged (kept as step-N.damaged): not starting over from "
                 "step 0; move the folder away (or give another %s) to train from the beginning", where, flag);
        return DTRAIN_ERR_INPUT;
    }
    if (!res.found && required) {
        snprintf(err, errlen, "--resume %s: no checkpoint there (a folder of step-N checkpoints, as --checkpoint "
                 "writes)", dir);
        return DTRAIN_ERR_INPUT;
    }
    if (res.found) {
        if ((rc = dtrain_ft_pieces_upload(&f->pieces, err, errlen)) != DTRAIN_OK)
            return rc;
        f->last_dir = tiers && strcmp(res.tier, "node-local") == 0 ? f->local : dir;
        dtrain_ptrainer_set_position(f->t, (long)res.step, res.data_batches);
        dtrain_ptrainer_set_scaler(f->t, &res.scaler);
        f->last_ckpt = (long)res.step;
        f->sum->load_s = st.seconds;
        f->sum->load_bytes = st.bytes;
        f->sum->load_received = st.received;
        if (!rollback)
            f->sum->resumed_step = (long)res.step;
        char what[96];
        snprintf(what, sizeof what, "%llu bytes in %.6f s", (unsigned long long)st.bytes, st.seconds);
        dtrain_fault_event(f->fault, "load_end", (long)res.step, what);
        if (is_root(f)) {
            const struct dtrain_sckpt_layout *w = &res.writer;
            char vs[48] = "";
            if (w->virtual_stages > 1)
                snprintf(vs, sizeof vs, ", %d virtual stages", w->virtual_stages);
            fprintf(f->progress, "%s: %s %s (written by T=%d P=%d D=%d, ZeRO-1 %s%s): step %" PRIu64 ", data batch %"
                    PRIu64 "; rank 0 read %.2f MB in %.3f s%s%s%s\n", f->prog, rollback ? "rolled back to" : "resumed from",
                    res.path, w->tp, w->pp, w->dp, w->zero1 ? "on" : "off", vs, res.step, res.data_batches,
                    1e-6 * (double)st.bytes, st.seconds, tiers ? " (" : "", tiers ? res.tier : "", tiers ? " tier)" : "");
            fflush(f->progress);
        }
    } else if (is_root(f)) {
        fprintf(f->progress, "%s: no checkpoint in %s%s%s yet: starting from step 0\n", f->prog, dir,
                tiers ? " or " : "", tiers ? f->local : "");
        fflush(f->progress);
    }
    return dtrain_ptrainer_metrics_from(f->t, dtrain_ptrainer_steps_done(f->t), err, errlen);
}

