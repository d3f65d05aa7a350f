/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Ranks of a T x P x D job forked on one host; see local_boot.h. */
#include "local_boot.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm/bootstrap/bootstrap_id.h"
#include "exchange.h"
#include "groups.h"

/* Every rank's bootstrap: the groups, one id per group made by its leader. */
static int make_all(int tp, int pp, int dp, enum dtrain_comm_backend backend, struct dtrain_bootstrap *bs,
                    char *err, size_t errlen)
{
    const struct dtrain_grid grid = {.tp = tp, .pp = pp, .dp = dp};
    int world = tp * pp * dp;
    for (int r = 0; r < world; r++) {
        struct dtrain_bootstrap *b = &bs[r];
        memset(b, 0, sizeof *b);
        b->pos = dtrain_grid_pos_of(tp, pp, dp, r);
        b->node = -1; /* this machine's host id: shared memory between the ranks */
        b->local_rank = r;
        b->local_size = world;
        b->backend = backend;
        for (int k = 0; k < DTRAIN_GROUP_KINDS; k++) {
            struct dtrain_comm_group *g = &b->groups[k];
            g->listen_fd = -1;
            if (dtrain_group_of(&grid, r, (enum dtrain_group_kind)k, g) != 0) {
                snprintf(err, errlen, "rank %d is outside %d x %d x %d", r, tp, pp, dp);
                return -1;
            }
            char why[256];
            if (!g->present || g->my_rank != 0 || dtrain_group_split_off_world(backend, (enum dtrain_group_kind)k))
                continue;
            if (backend == DTRAIN_COMM_NCCL ? dtrain_bootstrap_id_make_nccl(g->id, sizeof g->id, why, sizeof why) != 0
                                            : dtrain_bootstrap_id_make_cpu("127.0.0.1", g->size - 1, g->id,
                                                                           sizeof g->id, &g->listen_fd, why,
                                                                           sizeof why) != 0) {
                snprintf(err, errlen, "group %s: %s", g->key, why);
                return -1;
            }
        }
    }
    /* members take the id their leader made (found by the group's key) where
     * dtrain-launch carries it through PMI2: WORLD's; the others come over
     * WORLD in dtrain_comm_init_all */
    for (int r = 0; r < world; r++) {
        for (int k = 0; k < DTRAIN_GROUP_KINDS; k++) {
            struct dtrain_comm_group *g = &bs[r].groups[k];
            if (!dtrain_group_in_kvs((enum dtrain_group_kind)k, g) || g->my_rank == 0 ||
                dtrain_group_split_off_world(backend, (enum dtrain_group_kind)k))
                continue;
            const struct dtrain_bootstrap *lead = &bs[g->first];
            for (int j = 0; j < DTRAIN_GROUP_KINDS; j++)
                if (lead->groups[j].present && lead->groups[j].my_rank == 0 &&
                    strcmp(lead->groups[j].key, g->key) == 0)
                    memcpy(g->id, lead->groups[j].id, sizeof g->id);
            if (g->id[0] == '\0') {
                snprintf(err, errlen, "rank %d: no leader id for group %s", r, g->key);
                return -1;
            }
        }
    }
    return 0;
}

static void close_all(struct dtrain_bootstrap *bs, int world, int except)
{
    for (int r = 0; r < world; r++)
        if (r != except)
            dtrain_bootstrap_close(&bs[r]);
}

int local_boot_run(int tp, int pp, int dp, local_boot_rank_fn fn, void *ctx, size_t result_bytes,
                   void *results, int *codes, int timeout_s, char *err, size_t errlen)
{
    return local_boot_run_backend(DTRAIN_COMM_CPU, tp, pp, dp, fn, ctx, result_bytes, results, codes, timeout_s,
                                  err, errlen);
}

int local_boot_run_backend(enum dtrain_comm_backend backend, int tp, int pp, int dp, local_boot_rank_fn fn,
                           void *ctx, size_t result_bytes, void *results, int *codes, int timeout_s, char *err,
                           size_t errlen)
{
    int world = tp * pp * dp, rc = -1;
    pid_t pid[LOCAL_BOOT_MAX_WORLD];
    if (world < 1 || world > LOCAL_BOOT_MAX_WORLD) {
        snprintf(err, errlen, "%d ranks: 1 to %d", world, LOCAL_BOOT_MAX_WORLD);
        return -1;
    }
    struct dtrain_bootstrap *bs = calloc((size_t)world, sizeof *bs);
    size_t shared_len = result_bytes * (size_t)world + 1;
    unsigned char *shared = mmap(NULL, shared_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (bs == NULL || shared == MAP_FAILED) {
        snprintf(err, errlen, "out of memory");
        free(bs);
        if (shared != MAP_FAILED)
            munmap(shared, shared_len);
        return -1;
    }
    for (int r = 0; r < world; r++)
        codes[r] = -1;
    if (make_all(tp, pp, dp, backend, bs, err, errlen) != 0) {
        close_all(bs, world, -1);
        goto out;
    }
    fflush(NULL);
    int started = 0;
    for (int r = 0; r < world; r++) {
        pid[r] = fork();
        if (pid[r] < 0) {
            snprintf(err, errlen, "fork: %s", strerror(errno));
            break;
        }
        if (pid[r] == 0) {
            close_all(bs, world, r);
            int code = fn(&bs[r], shared + (size_t)r * result_bytes, ctx);
            exit(code); /* exit, not _exit: LeakSanitizer checks the rank too */
        }
        started++;
    }
    close_all(bs, world, -1);
    /* wait, bounded; ranks still running at the bound are killed */
    int left = started;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (left > 0) {
        int status;
        pid_t done = waitpid(-1, &status, WNOHANG);
        if (done > 0) {
            for (int r = 0; r < started; r++)
                if (pid[r] == done)
                    codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            left--;
            continue;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - t0.tv_sec > timeout_s) {
            for (int r = 0; r < started; r++)
                if (codes[r] == -1)
                    kill(pid[r], SIGKILL);
            for (int r = 0; r < started; r++)
                if (codes[r] == -1)
                    waitpid(pid[r], NULL, 0);
            snprintf(err, errlen, "%d of %d ranks did not end within %d s", left, world, timeout_s);
            goto copy;
        }
        usleep(2000);
    }
    rc = started == world ? 0 : -1;
    for (int r = 0; r < world && rc == 0; r++) {
        if (codes[r] != 0) {
            snprintf(err, errlen, "rank %d exited with %d", r, codes[r]);
            rc = -1;
        }
    }
copy:
    if (results != NULL && result_bytes > 0)
        memcpy(results, shared, result_bytes * (size_t)world);
out:
    munmap(shared, shared_len);
    free(bs);
    return rc;
}

int local_boot_comms(struct dtrain_bootstrap *bs, int timeout_ms, int tcp, struct dtrain_comms *out,
                     enum dtrain_comm_cause *cause, char *err, size_t errlen)
{
    struct dtrain_comm_options o;
    dtrain_comm_options_defaults(&o);
    o.timeout_ms = timeout_ms;
    o.transport = tcp ? DTRAIN_COMM_TRANSPORT_TCP : DTRAIN_COMM_TRANSPORT_AUTO;
    return dtrain_comm_init_all(bs, &o, out, cause, err, errlen);
}
