/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain-topo: the placement planner (shape checks, ranks, coordinates;
 * plan_node.c picks the GPUs inside each node). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain_parse.h"
#include "dtrain_plan.h"
#include "plan_node.h"
#include "topo_model.h"

struct dtrain_plan {
    struct dtrain_shape shape; /* dp filled in */
    int world;
    int first_rank, ntasks; /* tasks[] holds ranks first_rank .. first_rank+ntasks-1 */
    struct dtrain_task_placement *tasks;
    char warning[512];
    int has_warning;
};

/* Nodes of one job usually share a model, and their TP-group slots relate
 * in a handful of patterns: the TP-group search runs once per model and the
 * slot assignment once per (model, pattern).  Beyond the cache sizes the
 * work is redone, never refused. */
#define PLAN_MODEL_CACHE 16
#define PLAN_LAYOUT_CACHE 64
struct plan_model_entry {
    const dtrain_topo *topo;
    struct plan_groups *groups;
    int crossed;
};
struct plan_layout_entry {
    const dtrain_topo *topo;
    unsigned char *rel;
    int *gpu_of_local;
    int crossed;
};
struct plan_cache {
    struct plan_model_entry models[PLAN_MODEL_CACHE];
    int nmodels;
    struct plan_layout_entry layouts[PLAN_LAYOUT_CACHE];
    int nlayouts;
};

static enum dtrain_status refuse(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static enum dtrain_status refuse(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (err && errlen) {
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return DTRAIN_ERR_REFUSED;
}

/* Largest divisor of k that is at most t (>= 1). */
static long divisor_at_most(long k, long t)
{
    for (long d = t < k ? t : k; d > 1; d--)
        if (k % d == 0)
            return d;
    return 1;
}

enum dtrain_status dtrain_plan_check_shape(int tp, int pp, int dp, long ntasks, long tasks_per_node, int domain_gpus,
                                           char *err, size_t errlen)
{
    if (tp < 1 || tp > DTRAIN_PLAN_MAX_DIM)
        return refuse(err, errlen, "T=%d is out of range: use --dtrain-tp between 1 and %d", tp, DTRAIN_PLAN_MAX_DIM);
    if (pp < 1 || pp > DTRAIN_PLAN_MAX_DIM)
        return refuse(err, errlen, "P=%d is out of range: use --dtrain-pp between 1 and %d", pp, DTRAIN_PLAN_MAX_DIM);
    if (dp < 0 || dp > DTRAIN_PLAN_MAX_DIM)
        return refuse(err, errlen, "D=%d is out of range: use --dtrain-dp between 1 and %d, or leave it out",
                      dp, DTRAIN_PLAN_MAX_DIM);
    if (ntasks < 0 || ntasks > DTRAIN_PLAN_MAX_WORLD)
        return refuse(err, errlen, "%ld tasks is out of range: dtrain places 1 to %d tasks", ntasks,
                      DTRAIN_PLAN_MAX_WORLD);
    if (tasks_per_node < 0 || tasks_per_node > DTRAIN_PLAN_MAX_WORLD)
        return refuse(err, errlen, "%ld tasks per node is out of range: use 1 to %d", tasks_per_node,
                      DTRAIN_PLAN_MAX_WORLD);
    long tpp = (long)tp * pp;
    if (tpp > DTRAIN_PLAN_MAX_WORLD)
        return refuse(err, errlen, "T*P = %ld is larger than %d tasks: use smaller --dtrain-tp/--dtrain-pp",
                      tpp, DTRAIN_PLAN_MAX_WORLD);
    if (dp > 0 && tpp * dp > DTRAIN_PLAN_MAX_WORLD)
        return refuse(err, errlen, "T*P*D = %ld is larger than %d tasks: use smaller --dtrain-tp/pp/dp",
                      tpp * dp, DTRAIN_PLAN_MAX_WORLD);
    if (domain_gpus > 0 && tp > domain_gpus && (tasks_per_node <= 0 || tp > tasks_per_node))
        return refuse(err, errlen,
                      "T=%d is larger than this cluster's multi-node NVLink domain (%d GPUs, site setting "
                      "nvlink_domain_gpus): a TP group must stay inside one domain; use --dtrain-tp=%ld or less",
                      tp, domain_gpus, divisor_at_most(domain_gpus, tp));
    if (domain_gpus > 0 && tasks_per_node > 0 && tp > tasks_per_node) {
        /* A TP group of whole nodes, inside one domain. */
        if (tp % tasks_per_node != 0)
            return refuse(err, errlen,
                          "T=%d is not a multiple of the %ld tasks per node, so a TP group would hold part of "
                          "a node: use --dtrain-tp=%ld or a multiple of %ld up to %d",
                          tp, tasks_per_node, divisor_at_most(tasks_per_node, tp), tasks_per_node, domain_gpus);
        if (domain_gpus % tp != 0)
            return refuse(err, errlen,
                          "T=%d does not divide this cluster's NVLink domain of %d GPUs, so TP groups would "
                          "straddle domains: use --dtrain-tp=%ld",
                          tp, domain_gpus, divisor_at_most(domain_gpus, tp));
    } else if (tasks_per_node > 0) {
        if (tp > tasks_per_node && tasks_per_node == 1)
            return refuse(err, errlen,
                          "T=%d with 1 task per node: dtrain places one task per GPU, not a per-node "
                          "launcher (torchrun) that starts its own workers; run the workers as the "
                          "step's tasks: srun --ntasks-per-node=GPUS_PER_NODE python train.py "
                          "(RANK, LOCAL_RANK, MASTER_ADDR... are set as torchrun sets them; doc/frameworks.md)",
                          tp);
        if (tp > tasks_per_node)
            return refuse(err, errlen,
                          "T=%d is larger than the %ld tasks per node: a TP group must stay on one node; "
                          "use --dtrain-tp=%ld or less, or more tasks per node",
                          tp, tasks_per_node, divisor_at_most(tasks_per_node, tp));
        if (tasks_per_node % tp != 0)
            return refuse(err, errlen,
                          "T=%d does not divide the %ld tasks per node, so a TP group would span nodes: "
                          "use --dtrain-tp=%ld, or --ntasks-per-node a multiple of %d",
                          tp, tasks_per_node, divisor_at_most(tasks_per_node, tp), tp);
    }
    if (ntasks > 0) {
        if (ntasks % tpp != 0)
            return refuse(err, errlen,
                          "T*P = %d*%d = %ld does not divide the %ld tasks: use a task count that is a "
                          "multiple of %ld",
                          tp, pp, tpp, ntasks, tpp);
        if (dp > 0 && tpp * dp != ntasks)
            return refuse(err, errlen,
                          "T*P*D = %d*%d*%d = %ld but the job has %ld tasks: use --dtrain-dp=%ld, "
                          "leave --dtrain-dp out, or run %ld tasks",
                          tp, pp, dp, tpp * dp, ntasks, ntasks / tpp, tpp * dp);
    }
    return DTRAIN_OK;
}

/* How TP-group slots of node `node` talk: DP peers share a pipeline stage,
 * PP neighbours share a DP index and sit on adjacent stages. */
static void slot_relations(int node, int ngroups, int D, unsigned char *rel)
{
    for (int a = 0; a < ngroups; a++) {
        long ga = (long)node * ngroups + a;
        long dpa = ga % D, ppa = ga / D;
        for (int b = 0; b < ngroups; b++) {
            long gb = (long)node * ngroups + b;
            long dpb = gb % D, ppb = gb / D;
            unsigned char r = PLAN_REL_NONE;
            if (a != b && ppa == ppb)
                r = PLAN_REL_DP;
            else if (a != b && dpa == dpb && (ppa - ppb == 1 || ppb - ppa == 1))
                r = PLAN_REL_PP;
            rel[a * ngroups + b] = r;
        }
    }
}

/* GPUs dtrain cannot place on: partitions, MIG, two vendors in a node. */
static enum dtrain_status check_whole_gpus(const dtrain_topo *topo, int node, char *err, size_t errlen)
{
    int nvidia = 0, amd = 0;
    for (int i = 0; i < topo->ngpus; i++) {
        const struct dtrain_gpu_info *g = &topo->gpus[i];
        /* AMD partitions (TPX/CPX) and NVML's MIG instances are GPUs of
         * their own in the model; a GPU in MIG mode that NVML lists no
         * instance of has nothing to run on. */
        if (g->mig && strncmp(g->uuid, "MIG-", 4) != 0)
            return refuse(err, errlen,
                          "node %d: GPU %s has MIG mode on but NVML lists no MIG instance of it: create them "
                          "(nvidia-smi mig -cgi PROFILES -C) or turn MIG off (nvidia-smi -mig 0)",
                          node, g->busid);
        nvidia += g->vendor_id == DTRAIN_VENDOR_NVIDIA;
        amd += g->vendor_id == DTRAIN_VENDOR_AMD;
    }
    if (nvidia && amd)
        return refuse(err, errlen,
                      "node %d has GPUs of two vendors (%d NVIDIA, %d AMD): dtrain never hands a CUDA task an AMD GPU "
                      "or the reverse; say which the program uses (--dtrain-gpu-vendor=nvidia|amd) or ask Slurm for "
                      "one vendor's GPUs (--gres=gpu:TYPE:N)",
                      node, nvidia, amd);
    return DTRAIN_OK;
}

/* Node `node`'s NVLink domain into key: the policy's (Slurm's block) or
 * NVML's.  1: has one, 0: none, -1: unreadable (why in why). */
static int node_domain(const struct dtrain_policy *policy, const dtrain_topo *topo, char *key, size_t len,
                       char *why, size_t whylen)
{
    if (policy->node_domain)
        return dtrain_snprintf(key, len, "%s", policy->node_domain) == 0 ? 1 : -1;
    return dtrain_topo_nvlink_domain(topo, key, len, why, whylen);
}

/* Node `node` must be in an NVLink domain (`what` says why it needs one),
 * the same as node `other`'s (`group` names their group).  Only the models
 * given are compared: the plugin knows its own node only (and passes it
 * for every node), so the launcher compares the nodes' domains again
 * across the step (DTRAIN_NVLINK_DOMAIN, launcher/exchange.c). */
static enum dtrain_status check_domain(const dtrain_topo *const *nodes, const struct dtrain_policy *policy, int node,
                                       int other, const char *what, const char *group, const char *hint, char *err,
                                       size_t errlen)
{
    char key[DTRAIN_TOPO_DOMAIN_LEN], other_key[DTRAIN_TOPO_DOMAIN_LEN], why[512];
    int rc = node_domain(policy, nodes[node], key, sizeof key, why, sizeof why);
    if (rc < 0)
        return refuse(err, errlen, "node %d: %s", node, why);
    if (rc == 0)
        return refuse(err, errlen, "%s, and node %d's GPUs report no multi-node NVLink domain (NVML GPU fabric): %s",
                      what, node, hint);
    if (other != node && nodes[other] != nodes[node] &&
        node_domain(policy, nodes[other], other_key, sizeof other_key, why, sizeof why) == 1 &&
        strcmp(other_key, key) != 0)
        return refuse(err, errlen,
                      "the %s of nodes %d and %d would span NVLink domains %s (node %d) and %s (node %d): run on "
                      "nodes of one domain (Slurm topology/block, --segment) or %s",
                      group, other < node ? other : node, other < node ? node : other, other_key, other, key, node,
                      hint);
    return DTRAIN_OK;
}

/* Node `node` of a TP group of `span` whole nodes: its GPUs in one NVLink
 * domain, the same as the group's first node's. */
static enum dtrain_status check_tp_domain(const dtrain_topo *const *nodes, const struct dtrain_policy *policy, int node,
                                          int span, int T, int K, char *err, size_t errlen)
{
    char what[128], hint[64];
    dtrain_snprintf(what, sizeof what, "T=%d is larger than the %d tasks per node", T, K);
    dtrain_snprintf(hint, sizeof hint, "use --dtrain-tp=%d or less", K);
    return check_domain(nodes, policy, node, node - node % span, what, "TP group", hint, err, errlen);
}

/* --dtrain-pp-in-domain: the nodes of the PP groups of node `node`'s ranks
 * in node `node`'s domain. */
static enum dtrain_status check_pp_domain(const dtrain_topo *const *nodes, const struct dtrain_policy *policy, int node,
                                          int T, int D, int P, int K, char *err, size_t errlen)
{
    static const char hint[] = "leave --dtrain-pp-in-domain out";
    enum dtrain_status rc = check_domain(nodes, policy, node, node,
                                         "--dtrain-pp-in-domain keeps each pipeline group in one domain", "PP group",
                                         hint, err, errlen);
    for (int i = 0; i < K && rc == DTRAIN_OK; i++) {
        long rank = (long)node * K + i, stage0 = rank % ((long)T * D);
        for (int q = 0; q < P && rc == DTRAIN_OK; q++) {
            int other = (int)((stage0 + (long)T * D * q) / K);
            if (nodes[other] != nodes[node]) /* the same model: the same domain */
                rc = check_domain(nodes, policy, node, other, "", "PP group", hint, err, errlen);
        }
    }
    return rc;
}

/* Union-find root of node n (path halving). */
static int uf_root(int *parent, int n)
{
    while (parent[n] != n)
        n = parent[n] = parent[parent[n]];
    return n;
}

/* The sets of node positions that must share a domain: nodes joined by a
 * TP group of several nodes and, with with_pp, by pipeline groups (groups
 * sharing a node join), K tasks per node; parent[n] = the set's root of
 * node n, a new array (free()), NULL when out of memory. */
static int *domain_sets(int T, int P, int with_pp, long ntasks, long K)
{
    long nnodes = ntasks / K, D = ntasks / ((long)T * P);
    int *parent = malloc(sizeof(int) * (size_t)nnodes);
    if (!parent)
        return NULL;
    for (long n = 0; n < nnodes; n++)
        parent[n] = (int)n;
    for (long r = 0; r < ntasks; r++) { /* a TP group of several nodes joins them too */
        int a = uf_root(parent, (int)(r / K)), b = uf_root(parent, (int)((r - r % T) / K));
        if (a != b)
            parent[a] = b;
    }
    for (long r = 0; with_pp && r < (long)T * D; r++)
        for (int q = 1; q < P; q++) {
            int a = uf_root(parent, (int)(r / K)), b = uf_root(parent, (int)((r + (long)T * D * q) / K));
            if (a != b)
                parent[a] = b;
        }
    for (long n = 0; n < nnodes; n++)
        parent[n] = uf_root(parent, (int)n);
    return parent;
}

/* The most nodes that the PP and TP groups of the T x P x (ntasks/(T*P))
 * grid join into one set, K tasks per node; -1: no memory. */
static long pp_domain_nodes(int T, int P, long ntasks, long K)
{
    long nnodes = ntasks / K, most = 0;
    int *parent = domain_sets(T, P, 1, ntasks, K), *count = calloc((size_t)nnodes, sizeof(int));
    if (!parent || !count) {
        free(parent);
        free(count);
        return -1;
    }
    for (long n = 0; n < nnodes; n++) {
        int c = ++count[parent[n]];
        if (c > most)
            most = c;
    }
    free(parent);
    free(count);
    return most;
}

enum dtrain_status dtrain_plan_check_pp_domain(int tp, int pp, long ntasks, long tasks_per_node, int domain_gpus,
                                               char *err, size_t errlen)
{
    if (domain_gpus <= 0)
        return refuse(err, errlen,
                      "--dtrain-pp-in-domain: this cluster declares no multi-node NVLink domain (site setting "
                      "nvlink_domain_gpus): leave the option out");
    if (ntasks <= 0 || tasks_per_node <= 0 || tp < 1 || pp < 1 || ntasks % tasks_per_node != 0 ||
        ntasks % ((long)tp * pp) != 0)
        return DTRAIN_OK; /* unknown, or refused by dtrain_plan_check_shape */
    long fit = domain_gpus / tasks_per_node, joined = pp_domain_nodes(tp, pp, ntasks, tasks_per_node);
    if (joined < 0)
        return refuse(err, errlen, "out of memory");
    if (joined <= fit)
        return DTRAIN_OK;
    int best = 0, tries = 0;
    /* at most 64 candidates: each costs O(ntasks) */
    for (int q = pp - 1; q >= 2 && !best && tries < 64; q--)
        if (ntasks % ((long)tp * q) == 0) {
            tries++;
            long j = pp_domain_nodes(tp, q, ntasks, tasks_per_node);
            if (j >= 0 && j <= fit)
                best = q;
        }
    char hint[96];
    if (best)
        dtrain_snprintf(hint, sizeof hint, "use --dtrain-pp=%d or less, ", best);
    else
        hint[0] = '\0';
    return refuse(err, errlen,
                  "--dtrain-pp-in-domain: the pipeline groups of T=%d P=%d on %ld tasks (%ld per node) join %ld "
                  "nodes (%ld GPUs), more than this cluster's NVLink domain of %d GPUs (site setting "
                  "nvlink_domain_gpus): %sfewer tasks, or leave --dtrain-pp-in-domain out",
                  tp, pp, ntasks, tasks_per_node, joined, joined * tasks_per_node, domain_gpus, hint);
}

/* Whether segments of S nodes keep every set of node positions (roots in
 * parent, first/last position of each root in lo/hi) inside one aligned
 * window [kS, (k+1)S). */
static int segment_holds(const int *lo, const int *hi, const int *parent, long nnodes, long S)
{
    for (long n = 0; n < nnodes; n++) {
        int r = parent[n];
        if (r == (int)n && lo[r] / S != hi[r] / S)
            return 0;
    }
    return 1;
}

enum dtrain_status dtrain_plan_check_segment(int tp, int pp, int pp_in_domain, long ntasks, long tasks_per_node,
                                             int domain_gpus, long segment, const char *unit, char *err,
                                             size_t errlen)
{
    if (domain_gpus <= 0 || ntasks <= 0 || tasks_per_node <= 0 || tp < 1 || pp < 1 ||
        ntasks % tasks_per_node != 0 || ntasks % ((long)tp * pp) != 0 || (tp <= tasks_per_node && !pp_in_domain))
        return DTRAIN_OK; /* nothing spans nodes, or unknown, or refused by the other checks */
    long N = ntasks / tasks_per_node, B = domain_gpus / tasks_per_node, most = 0;
    if (B < 1)
        return DTRAIN_OK;
    int *parent = domain_sets(tp, pp, pp_in_domain, ntasks, tasks_per_node);
    int *lo = malloc(sizeof(int) * (size_t)N), *hi = malloc(sizeof(int) * (size_t)N);
    int *count = calloc((size_t)N, sizeof(int));
    enum dtrain_status rc = DTRAIN_OK;
    if (!parent || !lo || !hi || !count) {
        rc = refuse(err, errlen, "out of memory");
        goto out;
    }
    for (long n = N - 1; n >= 0; n--)
        lo[parent[n]] = (int)n;
    for (long n = 0; n < N; n++) {
        hi[parent[n]] = (int)n;
        if (++count[parent[n]] > most)
            most = count[parent[n]];
    }
    if (most <= 1 || most > B)
        goto out; /* no set of several nodes, or one no domain holds (refused by the shape checks) */
    long S = segment > N ? 0 : segment; /* Slurm ignores a segment larger than the job */
    if (S == 0 && N <= B)
        goto out; /* Slurm puts a job no larger than a base block (a ring) inside one */
    /* topology/block packs segments into base blocks: the smallest one
     * leaves Slurm the most freedom; topology/ring gives each segment a ring
     * of its own: the largest one needs the fewest rings */
    const int ring = strcmp(unit, "ring") == 0;
    long best = 0;
    for (long c = 1; c <= B && c <= N && (!best || ring); c++)
        if (N % c == 0 && segment_holds(lo, hi, parent, N, c))
            best = c;
    if (S > 0 && N % S == 0 && S <= B && segment_holds(lo, hi, parent, N, S))
        goto out;
    char what[160], why[160], hint[160];
    if (tp > tasks_per_node && !pp_in_domain)
        dtrain_snprintf(what, sizeof what, "the TP groups of T=%d hold %ld nodes each", tp, tp / tasks_per_node);
    else
        dtrain_snprintf(what, sizeof what, "the %s groups of T=%d P=%d (--dtrain-pp-in-domain) join up to %ld nodes",
                        tp > tasks_per_node ? "TP and pipeline" : "pipeline", tp, pp, most);
    if (S == 0)
        dtrain_snprintf(why, sizeof why, "Slurm may split the job's %ld nodes across %ss anywhere without --segment",
                        N, unit);
    else if (N % S != 0)
        dtrain_snprintf(why, sizeof why, "--segment=%ld does not divide the job's %ld nodes", S, N);
    else if (S > B)
        dtrain_snprintf(why, sizeof why, "--segment=%ld is larger than a %s (%ld nodes), so a segment may span two",
                        S, unit, B);
    else
        dtrain_snprintf(why, sizeof why, "segments of %ld node%s would split them", S, S == 1 ? "" : "s");
    if (N <= B)
        dtrain_snprintf(hint, sizeof hint, "leave --segment out (Slurm puts a job of %ld nodes in one %s)", N, unit);
    else if (best)
        dtrain_snprintf(hint, sizeof hint, "use --segment=%ld", best);
    else
        dtrain_snprintf(hint, sizeof hint, "no --segment of at most %ld nodes dividing %ld holds them (their nodes lie "
                        "apart in the rank order): use fewer pipeline stages, or leave --dtrain-pp-in-domain out",
                        B, N);
    rc = refuse(err, errlen,
                "%s on %ld nodes of %ld tasks, and each must sit in one Slurm %s (nvlink_domain_source=%s: %ld "
                "nodes, %d GPUs a %s), but %s: %s",
                what, N, tasks_per_node, unit, unit, B, domain_gpus, unit, why, hint);
out:
    free(parent);
    free(lo);
    free(hi);
    free(count);
    return rc;
}

static void cache_free(struct plan_cache *cache)
{
    for (int i = 0; i < cache->nmodels; i++)
        plan_groups_free(cache->models[i].groups);
    for (int i = 0; i < cache->nlayouts; i++) {
        free(cache->layouts[i].rel);
        free(cache->layouts[i].gpu_of_local);
    }
    free(cache);
}

/* The GPU of each local task of `node` (whose slots relate as `rel`), into
 * gpus[0..K-1]; *crossed set when TP groups had to span islands. */
static enum dtrain_status node_layout(struct plan_cache *cache, const dtrain_topo *topo, int node, int T, int ngroups,
                                      const unsigned char *rel, int allow_pcie, int *gpus, int *crossed, char *err,
                                      size_t errlen)
{
    size_t relsize = (size_t)ngroups * (size_t)ngroups, K = (size_t)T * (size_t)ngroups;
    struct plan_model_entry *model = NULL;
    struct plan_groups *fresh = NULL;
    enum dtrain_status rc;

    for (int i = 0; i < cache->nlayouts; i++)
        if (cache->layouts[i].topo == topo && memcmp(cache->layouts[i].rel, rel, relsize) == 0) {
            memcpy(gpus, cache->layouts[i].gpu_of_local, sizeof(int) * K);
            *crossed = cache->layouts[i].crossed;
            return DTRAIN_OK;
        }
    for (int i = 0; i < cache->nmodels && !model; i++)
        if (cache->models[i].topo == topo)
            model = &cache->models[i];
    if (model) {
        *crossed = model->crossed;
        plan_node_assign(model->groups, rel, gpus);
    } else {
        rc = plan_node_groups(topo, node, T, ngroups, allow_pcie, &fresh, crossed, err, errlen);
        if (rc != DTRAIN_OK)
            return rc;
        plan_node_assign(fresh, rel, gpus);
        if (cache->nmodels < PLAN_MODEL_CACHE) {
            model = &cache->models[cache->nmodels++];
            model->topo = topo;
            model->groups = fresh;
            model->crossed = *crossed;
        } else {
            plan_groups_free(fresh);
        }
    }
    if (cache->nlayouts < PLAN_LAYOUT_CACHE) {
        struct plan_layout_entry *e = &cache->layouts[cache->nlayouts];
        e->rel = malloc(relsize);
        e->gpu_of_local = malloc(sizeof(int) * K);
        if (!e->rel || !e->gpu_of_local) {
            free(e->rel);
            free(e->gpu_of_local);
            dtrain_snprintf(err, errlen, "out of memory");
            return DTRAIN_ERR_SYSTEM;
        }
        e->topo = topo;
        e->crossed = *crossed;
        memcpy(e->rel, rel, relsize);
        memcpy(e->gpu_of_local, gpus, sizeof(int) * K);
        cache->nlayouts++;
    }
    return DTRAIN_OK;
}

/* Plan nodes first_node .. last_node (-1: through the last node). */
static enum dtrain_status place(const struct dtrain_shape *shape, const dtrain_topo *const *nodes,
                                const struct dtrain_policy *policy, int first_node, int last_node, dtrain_plan **out,
                                char *err, size_t errlen)
{
    static const struct dtrain_policy no_policy = {0, 0, 0, 0, NULL, DTRAIN_CPU_BIND_CORES};
    struct plan_cache *cache = NULL;
    unsigned char *rel = NULL;
    int *gpus = NULL;
    dtrain_plan *plan = NULL;
    enum dtrain_status rc;

    if (!shape || !out) {
        dtrain_snprintf(err, errlen, "no job shape or no place for the plan");
        return DTRAIN_ERR_INPUT;
    }
    *out = NULL;
    if (!policy)
        policy = &no_policy;
    if (shape->nnodes < 1 || shape->nnodes > DTRAIN_PLAN_MAX_WORLD)
        return refuse(err, errlen, "%d nodes is out of range: use 1 to %d", shape->nnodes, DTRAIN_PLAN_MAX_WORLD);
    if (shape->tasks_per_node < 1 || shape->tasks_per_node > DTRAIN_PLAN_MAX_WORLD)
        return refuse(err, errlen, "%d tasks per node is out of range: use 1 to %d", shape->tasks_per_node,
                      DTRAIN_PLAN_MAX_WORLD);
    long world = (long)shape->nnodes * shape->tasks_per_node;
    if (world > DTRAIN_PLAN_MAX_WORLD)
        return refuse(err, errlen, "%d nodes x %d tasks = %ld tasks is more than %d", shape->nnodes,
                      shape->tasks_per_node, world, DTRAIN_PLAN_MAX_WORLD);
    rc = dtrain_plan_check_shape(shape->tp, shape->pp, shape->dp, world, shape->tasks_per_node,
                                 policy->nvlink_domain_gpus, err, errlen);
    if (rc == DTRAIN_OK && policy->pp_in_domain)
        rc = dtrain_plan_check_pp_domain(shape->tp, shape->pp, world, shape->tasks_per_node,
                                         policy->nvlink_domain_gpus, err, errlen);
    if (rc == DTRAIN_OK && policy->pp_in_domain && policy->cpu_only && !policy->node_domain)
        rc = refuse(err, errlen, "--dtrain-pp-in-domain: these nodes have no GPUs, so no NVLink domain to keep the "
                                 "pipeline groups in: leave the option out");
    if (rc != DTRAIN_OK)
        return rc;
    if (!policy->cpu_only && !nodes) {
        dtrain_snprintf(err, errlen, "no node topology given for a GPU placement");
        return DTRAIN_ERR_INPUT;
    }

    int T = shape->tp, K = shape->tasks_per_node;
    int D = (int)(world / ((long)T * shape->pp));
    /* A TP group larger than a node (check_shape allowed it inside a
     * multi-node NVLink domain) holds `span` whole nodes; each node's tasks
     * are then one slot of K GPUs, all of one TP group. */
    int span = T > K ? T / K : 1;
    int slotT = T > K ? K : T, ngroups = K / slotT;
    plan = calloc(1, sizeof(*plan));
    if (!plan)
        goto oom;
    if (!policy->cpu_only && K <= DTRAIN_TOPO_MAX_GPUS) {
        /* Only GPU placements look at slots; K is small then. */
        cache = calloc(1, sizeof(*cache));
        rel = malloc((size_t)ngroups * (size_t)ngroups);
        gpus = malloc(sizeof(int) * (size_t)K);
        if (!cache || !rel || !gpus)
            goto oom;
    }
    if (last_node < 0 || last_node >= shape->nnodes)
        last_node = shape->nnodes - 1;
    if (first_node < 0 || first_node > last_node) {
        dtrain_snprintf(err, errlen, "node %d is not in the job's %d nodes", first_node, shape->nnodes);
        rc = DTRAIN_ERR_INPUT;
        goto fail;
    }
    plan->first_rank = first_node * K;
    plan->ntasks = (last_node - first_node + 1) * K;
    plan->tasks = calloc((size_t)plan->ntasks, sizeof(*plan->tasks));
    if (!plan->tasks)
        goto oom;
    plan->shape = *shape;
    plan->shape.dp = D;
    plan->world = (int)world;

    for (int node = first_node; node <= last_node; node++) {
        const dtrain_topo *topo = nodes ? nodes[node] : NULL;
        const int *layout = NULL;
        if (!policy->cpu_only) {
            if (!topo) {
                dtrain_snprintf(err, errlen, "no topology for node %d", node);
                rc = DTRAIN_ERR_INPUT;
                goto fail;
            }
            if (K > DTRAIN_TOPO_MAX_GPUS || topo->ngpus < K) {
                rc = plan_refuse_gpu_count(topo, node, slotT, K, err, errlen);
                goto fail;
            }
            DTRAIN_CHECK_GOTO(check_whole_gpus(topo, node, err, errlen), rc, fail);
            if (span > 1)
                DTRAIN_CHECK_GOTO(check_tp_domain(nodes, policy, node, span, T, K, err, errlen), rc, fail);
            if (policy->pp_in_domain)
                DTRAIN_CHECK_GOTO(check_pp_domain(nodes, policy, node, T, D, shape->pp, K, err, errlen), rc, fail);
            if (span > 1)
                memset(rel, PLAN_REL_NONE, (size_t)ngroups * (size_t)ngroups);
            else
                slot_relations(node, ngroups, D, rel);
            int crossed = 0;
            DTRAIN_CHECK_GOTO(node_layout(cache, topo, node, slotT, ngroups, rel, policy->allow_pcie, gpus, &crossed,
                                          err, errlen), rc, fail);
            if (crossed && !plan->has_warning) {
                plan->has_warning = 1;
                if (topo->source == DTRAIN_LINKS_NONE)
                    dtrain_snprintf(plan->warning, sizeof(plan->warning),
                                    "node %d's topology has no link information: TP groups of %d GPUs are placed "
                                    "by PCI locality only and may cross PCIe (--dtrain-allow-pcie)",
                                    node, slotT);
                else
                    dtrain_snprintf(plan->warning, sizeof(plan->warning),
                                    "TP groups of %d GPUs do not fit in the NVLink islands of node %d "
                                    "(largest %d GPUs): their traffic crosses PCIe (--dtrain-allow-pcie)",
                                    slotT, node, dtrain_topo_largest_island(topo));
            }
            layout = gpus;
        }
        for (int i = 0; i < K; i++) {
            int rank = node * K + i;
            struct dtrain_task_placement *t = &plan->tasks[rank - plan->first_rank];
            t->pos = dtrain_grid_pos_of(T, shape->pp, D, rank);
            t->node = node;
            t->local_rank = i;
            if (layout) {
                const struct dtrain_gpu_info *g = &topo->gpus[layout[i]];
                t->gpu = layout[i];
                memcpy(t->gpu_busid, g->busid, sizeof(t->gpu_busid));
            } else {
                t->gpu = -1;
                t->gpu_busid[0] = '\0';
            }
        }
        if (plan_node_cpus(topo, K, layout, policy->cpu_bind, &plan->tasks[node * K - plan->first_rank]) != 0)
            goto oom;
    }
    if (cache)
        cache_free(cache);
    free(rel);
    free(gpus);
    *out = plan;
    return DTRAIN_OK;
oom:
    dtrain_snprintf(err, errlen, "out of memory");
    rc = DTRAIN_ERR_SYSTEM;
fail:
    if (cache)
        cache_free(cache);
    free(rel);
    free(gpus);
    dtrain_plan_free(plan);
    return rc;
}

enum dtrain_status dtrain_plan_place_tasks(const struct dtrain_shape *shape, const dtrain_topo *const *nodes,
                                           const struct dtrain_policy *policy, dtrain_plan **out, char *err,
                                           size_t errlen)
{
    return place(shape, nodes, policy, 0, -1, out, err, errlen);
}

enum dtrain_status dtrain_plan_place_node(const struct dtrain_shape *shape, const dtrain_topo *const *nodes,
                                          const struct dtrain_policy *policy, int node, dtrain_plan **out, char *err,
                                          size_t errlen)
{
    if (shape && (node < 0 || node >= shape->nnodes)) {
        if (out)
            *out = NULL;
        dtrain_snprintf(err, errlen, "node %d is not in the job's %d nodes", node, shape->nnodes);
        return DTRAIN_ERR_INPUT;
    }
    return place(shape, nodes, policy, node, node, out, err, errlen);
}

void dtrain_plan_free(dtrain_plan *plan)
{
    if (!plan)
        return;
    free(plan->tasks);
    free(plan);
}

const struct dtrain_shape *dtrain_plan_shape(const dtrain_plan *plan)
{
    return plan ? &plan->shape : NULL;
}

int dtrain_plan_world_size(const dtrain_plan *plan)
{
    return plan ? plan->world : 0;
}

const struct dtrain_task_placement *dtrain_plan_task(const dtrain_plan *plan, int rank)
{
    if (!plan || rank < plan->first_rank || rank >= plan->first_rank + plan->ntasks)
        return NULL;
    return &plan->tasks[rank - plan->first_rank];
}

const char *dtrain_plan_warning(const dtrain_plan *plan)
{
    return plan && plan->has_warning ? plan->warning : NULL;
}
