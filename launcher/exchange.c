/* SPDX-License-Identifier: GPL-2.0-or-later */
/* One PMI2 round for all communicator ids; see exchange.h. */
#include "exchange.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap_id.h"
#include "dtrain_env.h"
#include "dtrain_parse.h"
#include "groups.h"
#include "dtrain_clock.h"

/* The leader's id for group g (made here, not yet published). */
static int make_id(struct dtrain_comm_group *g, enum dtrain_comm_backend backend, const char *addr,
                   char *err, size_t errlen)
{
    char why[256];
    int rc = backend == DTRAIN_COMM_NCCL
                 ? dtrain_bootstrap_id_make_nccl(g->id, sizeof g->id, why, sizeof why)
                 : dtrain_bootstrap_id_make_cpu(addr, g->size - 1, g->id, sizeof g->id, &g->listen_fd, why,
                                                sizeof why);
    if (rc != 0)
        dtrain_snprintf(err, errlen, "making the %s id of group %s: %s", dtrain_backend_name(backend), g->key, why);
    return rc;
}

#define NVD_VALUE_MAX 128 /* "<cluster uuid>/<clique id>" is 48 bytes at most */

/* The PMI2 key of the NVLink domain of group g, put by its leader
 * ("dt.tp.3" -> "dt.tp.3.nvd"). */
static int domain_key(const struct dtrain_comm_group *g, char *key, size_t len)
{
    return dtrain_snprintf(key, len, "%s.nvd", g->key);
}

/* Whether this task's group of kind k must stay inside one NVLink domain:
 * a TP group holding several nodes (T > tasks per node: the plugin set
 * DTRAIN_NVLINK_DOMAIN for it), a PP group with --dtrain-pp-in-domain
 * (DTRAIN_PP_IN_DOMAIN=1).  Never without a domain (no plugin). */
static int domain_checked(const struct dtrain_bootstrap *bs, enum dtrain_group_kind k, const char *domain)
{
    const struct dtrain_comm_group *g = &bs->groups[k];
    if (!domain[0] || !g->present || g->size < 2)
        return 0;
    if (k == DTRAIN_GROUP_TP)
        return bs->tp > bs->local_size;
    if (k == DTRAIN_GROUP_PP) {
        const char *pp = getenv(DTRAIN_ENV_PP_IN_DOMAIN);
        return pp && strcmp(pp, "1") == 0;
    }
    return 0;
}

int dtrain_exchange_domain_kept(const struct dtrain_bootstrap *bs, enum dtrain_group_kind k)
{
    const char *domain = getenv(DTRAIN_ENV_NVLINK_DOMAIN);
    return domain_checked(bs, k, domain ? domain : "");
}

/* A group that must stay inside one NVLink domain (domain_checked): the
 * plugin saw only its own node, so every member compares the leader's
 * domain (DTRAIN_NVLINK_DOMAIN, put in the same round) with its own. */
static enum dtrain_status check_domain(dtrain_pmi *pmi, const struct dtrain_bootstrap *bs, enum dtrain_group_kind k,
                                       const char *domain, char *err, size_t errlen)
{
    const struct dtrain_comm_group *g = &bs->groups[k];
    char key[DTRAIN_BOOTSTRAP_KEY_MAX + 8], leader[NVD_VALUE_MAX];
    if (!domain_checked(bs, k, domain) || g->my_rank == 0)
        return DTRAIN_OK;
    if (domain_key(g, key, sizeof key) != 0) {
        dtrain_snprintf(err, errlen, "group %s: its key is too long", g->key);
        return DTRAIN_ERR_SYSTEM;
    }
    enum dtrain_status rc = dtrain_pmi_get(pmi, g->first, key, leader, sizeof leader, err, errlen);
    if (rc != DTRAIN_OK)
        return rc;
    if (strcmp(leader, domain) != 0) {
        dtrain_snprintf(err, errlen,
                        "%s group %s (ranks %d-%d) spans NVLink domains: rank %d is in %s, its leader rank %d in "
                        "%s; run on nodes of one domain (Slurm topology/block, --segment) or %s",
                        k == DTRAIN_GROUP_TP ? "TP" : "PP", g->key, g->first, g->first + (g->size - 1) * g->stride,
                        bs->rank, domain, g->first, leader,
                        k == DTRAIN_GROUP_TP ? "use a TP size of at most the tasks per node"
                                             : "leave --dtrain-pp-in-domain out");
        return DTRAIN_ERR_REFUSED;
    }
    return DTRAIN_OK;
}

enum dtrain_status dtrain_exchange_ids(dtrain_pmi *pmi, struct dtrain_bootstrap *bs, const char *addr,
                                       struct dtrain_exchange_times *times, char *err, size_t errlen)
{
    const struct dtrain_grid grid = {.tp = bs->tp, .pp = bs->pp, .dp = bs->dp};
    enum dtrain_status rc;
    long t0 = dtrain_clock_us();

    memset(times, 0, sizeof *times);
    for (int k = 0; k < DTRAIN_GROUP_KINDS; k++)
        bs->groups[k].listen_fd = -1;
    for (int k = 0; k < DTRAIN_GROUP_KINDS; k++) {
        struct dtrain_comm_group *g = &bs->groups[k];
        if (dtrain_group_of(&grid, bs->rank, (enum dtrain_group_kind)k, g) != 0) {
            dtrain_snprintf(err, errlen, "rank %d is outside the %d x %d x %d grid", bs->rank, grid.tp, grid.pp,
                            grid.dp);
            rc = DTRAIN_ERR_SYSTEM;
            goto fail;
        }
        if (g->present && g->my_rank == 0 && !dtrain_group_split_off_world(bs->backend, (enum dtrain_group_kind)k) &&
            make_id(g, bs->backend, addr, err, errlen) != 0) {
            rc = DTRAIN_ERR_SYSTEM;
            goto fail;
        }
    }
    long t1 = dtrain_clock_us();
    const char *domain = getenv(DTRAIN_ENV_NVLINK_DOMAIN);
    if (!domain)
        domain = "";
    for (int k = DTRAIN_GROUP_TP; k <= DTRAIN_GROUP_PP; k++) {
        const struct dtrain_comm_group *g = &bs->groups[k];
        char key[DTRAIN_BOOTSTRAP_KEY_MAX + 8];
        if (!domain_checked(bs, (enum dtrain_group_kind)k, domain) || g->my_rank != 0)
            continue;
        if (domain_key(g, key, sizeof key) != 0 || strlen(domain) >= NVD_VALUE_MAX) {
            dtrain_snprintf(err, errlen, "group %s: its key or %s='%.64s' is too long", g->key,
                            DTRAIN_ENV_NVLINK_DOMAIN, domain);
            rc = DTRAIN_ERR_INPUT;
            goto fail;
        }
        DTRAIN_CHECK_GOTO(dtrain_pmi_put(pmi, key, domain, err, errlen), rc, fail);
    }
    for (int k = 0; k < DTRAIN_GROUP_KINDS; k++) {
        const struct dtrain_comm_group *g = &bs->groups[k];
        if (!dtrain_group_in_kvs((enum dtrain_group_kind)k, g) || g->my_rank != 0)
            continue;
        DTRAIN_CHECK_GOTO(dtrain_pmi_put(pmi, g->key, g->id, err, errlen), rc, fail);
    }
    long t2 = dtrain_clock_us();
    DTRAIN_CHECK_GOTO(dtrain_pmi_fence(pmi, err, errlen), rc, fail);
    long t3 = dtrain_clock_us();
    for (int k = 0; k < DTRAIN_GROUP_KINDS; k++) {
        struct dtrain_comm_group *g = &bs->groups[k];
        if (!dtrain_group_in_kvs((enum dtrain_group_kind)k, g) || g->my_rank == 0)
            continue;
        DTRAIN_CHECK_GOTO(dtrain_pmi_get(pmi, g->first, g->key, g->id, sizeof g->id, err, errlen), rc, fail);
        if (dtrain_bootstrap_id_backend(g->id) != (int)bs->backend) {
            dtrain_snprintf(err, errlen, "group %s: its leader, rank %d, published a non-%s id ('%.16s...'): "
                                         "give every task the same --comm-backend",
                            g->key, g->first, dtrain_backend_name(bs->backend), g->id);
            rc = DTRAIN_ERR_INPUT;
            goto fail;
        }
    }
    for (int k = DTRAIN_GROUP_TP; k <= DTRAIN_GROUP_PP; k++)
        DTRAIN_CHECK_GOTO(check_domain(pmi, bs, (enum dtrain_group_kind)k, domain, err, errlen), rc, fail);
    long t4 = dtrain_clock_us();
    times->ids_us = t1 - t0;
    times->put_us = t2 - t1;
    times->fence_us = t3 - t2;
    times->get_us = t4 - t3;
    return DTRAIN_OK;
fail:
    dtrain_bootstrap_close(bs);
    return rc;
}

void dtrain_bootstrap_close(struct dtrain_bootstrap *bs)
{
    for (int k = 0; k < DTRAIN_GROUP_KINDS; k++) {
        if (bs->groups[k].listen_fd >= 0)
            close(bs->groups[k].listen_fd);
        bs->groups[k].listen_fd = -1;
    }
}
