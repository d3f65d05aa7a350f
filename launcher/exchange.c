/* SPDX-License-Identifier: GPL-2.0-or-later */
/* One PMI2 round for all communicator ids; see exchange.h. */
#include "exchange.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap_id.h"
#include "dtrain_env.h"
#include "dtrain_parse.h"
#include "groups.h"
#include "dtrain_clock.h"
#include "dtrain_step_bytes.h"
#include "dtrain_tree.h"

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

/* --dtrain-verbose (DTRAIN_VERBOSE=1) on a cluster whose tasks have a
 * SLURM_TOPOLOGY_ADDR of switches (topology/tree, block, ring): each
 * node's first task puts "NODE ADDR" under "dt.addr.<node>", rank 0 reads them all
 * after the fence and says which node order is in force (DTRAIN_NODE_ORDER,
 * from srun's dtrain.so) and how many DP ring edges cross leaf switches in
 * it and in dtrain's own order (dtrain-topo --switch-addrs); its trainer
 * gets the counts in DTRAIN_LEAF_EDGES for the bytes (explain).  Only with
 * --dtrain-verbose: one key per node, read by rank 0 alone. */
#define ADDR_KEY "dt.addr"
#define ORDER_LINE_NODES 32

static int leaf_report_wanted(void)
{
    const char *v = getenv(DTRAIN_ENV_VERBOSE), *a = getenv("SLURM_TOPOLOGY_ADDR");
    return v && strcmp(v, "1") == 0 && a && strchr(a, '.') != NULL;
}

static enum dtrain_status leaf_put(dtrain_pmi *pmi, const struct dtrain_bootstrap *bs, char *err, size_t errlen)
{
    char value[DTRAIN_TREE_NAME_MAX + DTRAIN_TREE_ADDR_MAX + 2];
    const char *node = getenv("SLURMD_NODENAME"), *addr = getenv("SLURM_TOPOLOGY_ADDR");
    if (bs->local_rank != 0 || !node || !*node || strchr(node, ' ') || strchr(addr, ' ') ||
        dtrain_snprintf(value, sizeof value, "%s %s", node, addr) != 0)
        return DTRAIN_OK; /* no report rather than a failed step */
    char key[32]; /* Slurm's KVS is one namespace: a key per node */
    snprintf(key, sizeof key, ADDR_KEY ".%d", bs->rank / bs->local_size);
    return dtrain_pmi_put(pmi, key, value, err, errlen);
}

/* Rank 0, after the fence: the report (stderr) and DTRAIN_LEAF_EDGES. */
static void leaf_report(dtrain_pmi *pmi, const struct dtrain_bootstrap *bs)
{
    int K = bs->local_size, n = K > 0 ? bs->world_size / K : 0;
    char *text = NULL, err[256];
    size_t len = 0, cap = 0;
    struct dtrain_tree_node *nodes = NULL;
    int count = 0, *order = NULL, *own = NULL;
    if (n < 2 || (long)n * K != bs->world_size)
        return;
    for (int i = 0; i < n; i++) {
        char value[DTRAIN_TREE_NAME_MAX + DTRAIN_TREE_ADDR_MAX + 2], key[32];
        snprintf(key, sizeof key, ADDR_KEY ".%d", i);
        if (dtrain_pmi_get(pmi, i * K, key, value, sizeof value, err, sizeof err) != DTRAIN_OK)
            goto out; /* a node without an address: no report */
        size_t l = strlen(value);
        if (len + l + 2 > cap) {
            size_t ncap = (cap ? cap * 2 : 4096) + l + 2;
            char *grown = realloc(text, ncap);
            if (!grown)
                goto out;
            text = grown;
            cap = ncap;
        }
        memcpy(text + len, value, l);
        len += l;
        text[len++] = '\n';
    }
    order = malloc(sizeof *order * (size_t)n);
    own = malloc(sizeof *own * (size_t)n);
    if (!order || !own || dtrain_tree_parse(text, len, &nodes, &count, err, sizeof err) != DTRAIN_OK || count != n ||
        dtrain_tree_order(nodes, n, own) != DTRAIN_OK)
        goto out;
    for (int i = 0; i < n; i++)
        order[i] = i;
    struct dtrain_tree_cost now, mine;
    if (dtrain_tree_cost(nodes, order, n, bs->tp, bs->pp, K, 0, &now, err, sizeof err) != DTRAIN_OK ||
        dtrain_tree_cost(nodes, own, n, bs->tp, bs->pp, K, 0, &mine, err, sizeof err) != DTRAIN_OK)
        goto out;
    char line[1024 + 64 * ORDER_LINE_NODES];
    int at = snprintf(line, sizeof line, "dtrain-launch: node order: %s:",
                      dtrain_node_order_describe(dtrain_node_order_parse(getenv(DTRAIN_ENV_NODE_ORDER))));
    for (int p = 0; p < n && p < ORDER_LINE_NODES && at > 0 && (size_t)at < sizeof line; p++)
        at += snprintf(line + at, sizeof line - (size_t)at, " %s", nodes[p].name);
    if (n > ORDER_LINE_NODES && at > 0 && (size_t)at < sizeof line)
        at += snprintf(line + at, sizeof line - (size_t)at, " ... (%d more)", n - ORDER_LINE_NODES);
    if (at > 0 && (size_t)at < sizeof line)
        snprintf(line + at, sizeof line - (size_t)at,
                 " under %d leaf switches; DP ring edges across leaf switches: %ld of %ld; in dtrain's own order "
                 "(dtrain-topo --switch-addrs): %ld of %ld", now.leaves, now.cross_edges, now.ring_edges,
                 mine.cross_edges, mine.ring_edges);
    fprintf(stderr, "%s\n", line);
    fflush(stderr);
    char edges[DTRAIN_LEAF_EDGES_MAX];
    snprintf(edges, sizeof edges, "%ld %ld %ld", now.cross_edges, now.ring_edges, mine.cross_edges);
    setenv(DTRAIN_ENV_LEAF_EDGES, edges, 1);
out:
    free(text);
    free(nodes);
    free(order);
    free(own);
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
    const int leaves = leaf_report_wanted();
    if (leaves)
        DTRAIN_CHECK_GOTO(leaf_put(pmi, bs, err, errlen), rc, fail);
    long t2 = dtrain_clock_us();
    DTRAIN_CHECK_GOTO(dtrain_pmi_fence(pmi, err, errlen), rc, fail);
    long t3 = dtrain_clock_us();
    if (leaves && bs->rank == 0)
        leaf_report(pmi, bs);
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
