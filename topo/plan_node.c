/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain-topo: GPUs for the local tasks of one node.
 *
 * Two stages, both deterministic:
 *
 * 1. TP groups (plan_node_groups).  An exact branch-and-bound search over partitions of the
 *    node's GPUs into K/T groups of T GPUs (GPUs left over are unused),
 *    every group inside one island.  Pair closeness c(a,b) is the NVLink/
 *    XGMI bandwidth in MB/s, or 1..3 for PCIe (same switch 3, same NUMA 2,
 *    across sockets 1).  A partition scores, compared in this order:
 *      - the smallest group-minimum pair closeness (the slowest TP group
 *        paces a synchronous step),
 *      - the sum of group minima,
 *      - the sum of all pair closeness inside groups.
 *    The search always starts a group with the lowest undecided GPU, tries
 *    partners by falling closeness, and prunes branches that can no longer
 *    beat the best minimum or fill the remaining groups inside islands.
 *    Because feasibility is checked at every step, the first complete
 *    partition is valid and is found without backtracking; the budget
 *    (PLAN_SEARCH_BUDGET steps: partitions and partners tried) then only
 *    bounds the improvement.  Up to
 *    PLAN_MAX_CANDIDATES partitions with the best score are kept.
 *
 * 2. Slots (plan_node_assign).  For each kept partition, greedily: slot 0 gets the group with
 *    the lowest GPU, in GPU order; each next slot takes the group, and the
 *    order of its GPUs over tp ranks, with the largest closeness between
 *    equal tp ranks of this slot and the slots already placed that are its
 *    PP neighbours or DP peers (ties: lowest GPU).  The partition whose
 *    slots score highest wins (ties: the first). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain_parse.h"
#include "plan_node.h"
#include "topo_model.h"

#define PLAN_MAX_CANDIDATES 8
#define MAXG DTRAIN_TOPO_MAX_GPUS

struct part_score {
    long long min_of_min;
    long long sum_of_min;
    long long sum_all;
};

/* The search state; once the search is done, the kept partitions. */
struct plan_groups {
    int n, T, ngroups;
    long long c[MAXG][MAXG];
    int island[MAXG];
    int state[MAXG];      /* -2 undecided, -1 unused, else group id */
    int group[MAXG][MAXG];   /* group[g][0..T-1]: GPUs of group g */
    long long gmin[MAXG], gsum[MAXG];
    int ngrouped;      /* complete groups so far */
    int undecided_in[MAXG]; /* per island */
    long steps;
    int nbest;
    struct part_score best_score;
    int best[PLAN_MAX_CANDIDATES][MAXG]; /* state[] of each kept partition */
};

static long long closeness(const struct dtrain_topo *topo, int a, int b)
{
    if (topo->bw_mbps[a][b] > 0)
        return topo->bw_mbps[a][b];
    return 3 - (long long)topo->pcie[a][b];
}

static int score_cmp(const struct part_score *a, const struct part_score *b)
{
    if (a->min_of_min != b->min_of_min)
        return a->min_of_min < b->min_of_min ? -1 : 1;
    if (a->sum_of_min != b->sum_of_min)
        return a->sum_of_min < b->sum_of_min ? -1 : 1;
    if (a->sum_all != b->sum_all)
        return a->sum_all < b->sum_all ? -1 : 1;
    return 0;
}

static int capacity_ok(const struct plan_groups *s)
{
    int cap = 0;
    for (int i = 0; i < s->n; i++)
        cap += s->undecided_in[i] / s->T;
    return cap >= s->ngroups - s->ngrouped;
}

static void record_leaf(struct plan_groups *s)
{
    struct part_score sc = {-1, 0, 0};
    for (int g = 0; g < s->ngroups; g++) {
        if (sc.min_of_min < 0 || s->gmin[g] < sc.min_of_min)
            sc.min_of_min = s->gmin[g];
        sc.sum_of_min += s->gmin[g];
        sc.sum_all += s->gsum[g];
    }
    int cmp = s->nbest ? score_cmp(&sc, &s->best_score) : 1;
    if (cmp < 0)
        return;
    if (cmp > 0) {
        s->nbest = 0;
        s->best_score = sc;
    }
    if (s->nbest < PLAN_MAX_CANDIDATES)
        memcpy(s->best[s->nbest++], s->state, sizeof(s->state));
}

static int lowest_undecided(const struct plan_groups *s)
{
    for (int i = 0; i < s->n; i++)
        if (s->state[i] == -2)
            return i;
    return -1;
}

static void search_from(struct plan_groups *s);

/* Choose the remaining T-fill members of the group being built from
 * cand[from..ncand-1]. */
static void choose_partners(struct plan_groups *s, const int *cand, int ncand, int from, int fill)
{
    int g = s->ngrouped;
    if (fill == s->T) {
        long long mn = -1, sum = 0;
        for (int i = 0; i < s->T; i++)
            for (int j = i + 1; j < s->T; j++) {
                long long v = s->c[s->group[g][i]][s->group[g][j]];
                sum += v;
                if (mn < 0 || v < mn)
                    mn = v;
            }
        if (mn < 0)
            mn = 0; /* T == 1 */
        /* Bound: the partition's minimum can only fall from here. */
        if (s->nbest && mn < s->best_score.min_of_min)
            return;
        for (int g2 = 0; g2 < g; g2++)
            if (s->nbest && s->gmin[g2] < s->best_score.min_of_min)
                return;
        s->gmin[g] = mn;
        s->gsum[g] = sum;
        s->ngrouped++;
        if (capacity_ok(s))
            search_from(s);
        s->ngrouped--;
        return;
    }
    for (int k = from; k <= ncand - (s->T - fill); k++) {
        /* each partner tried counts: a branch whose groups fail the
         * capacity check reaches no search_from, and on a node of many
         * equally close GPUs (64 MI300X CPX partitions) those branches
         * alone took minutes */
        s->steps++;
        if (s->steps >= PLAN_SEARCH_BUDGET && s->nbest)
            return;
        int x = cand[k];
        s->group[g][fill] = x;
        s->state[x] = g;
        s->undecided_in[s->island[x]]--;
        choose_partners(s, cand, ncand, k + 1, fill + 1);
        s->undecided_in[s->island[x]]++;
        s->state[x] = -2;
    }
}

static void search_from(struct plan_groups *s)
{
    s->steps++;
    if (s->ngrouped == s->ngroups) {
        record_leaf(s);
        return;
    }
    if (s->steps >= PLAN_SEARCH_BUDGET && s->nbest)
        return;
    int first = lowest_undecided(s);
    if (first < 0)
        return;
    int isl = s->island[first];

    /* Option 1: a new group led by `first`, partners from its island, the
     * closest first. */
    int cand[MAXG], ncand = 0;
    for (int x = first + 1; x < s->n; x++)
        if (s->state[x] == -2 && s->island[x] == isl)
            cand[ncand++] = x;
    for (int i = 1; i < ncand; i++) { /* stable insertion sort, closeness descending */
        int x = cand[i], j = i;
        while (j > 0 && s->c[first][cand[j - 1]] < s->c[first][x]) {
            cand[j] = cand[j - 1];
            j--;
        }
        cand[j] = x;
    }
    if (ncand >= s->T - 1) {
        s->group[s->ngrouped][0] = first;
        s->state[first] = s->ngrouped;
        s->undecided_in[isl]--;
        choose_partners(s, cand, ncand, 0, 1);
        s->undecided_in[isl]++;
        s->state[first] = -2;
    }

    /* Option 2: leave `first` unused. */
    if (s->steps >= PLAN_SEARCH_BUDGET && s->nbest)
        return;
    int undecided = 0;
    for (int i = 0; i < s->n; i++)
        undecided += s->undecided_in[i];
    if (undecided - 1 >= (s->ngroups - s->ngrouped) * s->T) {
        s->state[first] = -1;
        s->undecided_in[isl]--;
        if (capacity_ok(s))
            search_from(s);
        s->undecided_in[isl]++;
        s->state[first] = -2;
    }
}

/* Stage 2 for one partition (state[] gives each GPU's group): place groups
 * on slots.  Returns the score and fills gpu_of_local. */
static long long assign_slots(const struct plan_groups *s, const int *state, const unsigned char *rel,
                              int *gpu_of_local)
{
    int T = s->T, m = s->ngroups;
    int members[MAXG][MAXG], nmem[MAXG] = {0};
    int placed[MAXG] = {0};
    long long total = 0;

    for (int x = 0; x < s->n; x++)
        if (state[x] >= 0)
            members[state[x]][nmem[state[x]]++] = x; /* ascending GPU order */
    /* Groups were numbered in order of their lowest GPU: group 0 holds the
     * lowest one. */
    for (int j = 0; j < T; j++)
        gpu_of_local[j] = members[0][j];
    placed[0] = 1;
    for (int slot = 1; slot < m; slot++) {
        long long best_gain = -1;
        int best_group = -1, best_order[MAXG];
        for (int g = 0; g < m; g++) {
            if (placed[g])
                continue;
            int used[MAXG] = {0}, order[MAXG];
            long long gain = 0;
            for (int j = 0; j < T; j++) {
                long long bj = -1;
                int bx = -1;
                for (int k = 0; k < T; k++) {
                    if (used[k])
                        continue;
                    long long v = 0;
                    for (int t = 0; t < slot; t++)
                        if (rel[slot * m + t] != PLAN_REL_NONE)
                            v += s->c[members[g][k]][gpu_of_local[t * T + j]];
                    if (v > bj) {
                        bj = v;
                        bx = k;
                    }
                }
                used[bx] = 1;
                order[j] = members[g][bx];
                gain += bj;
            }
            if (gain > best_gain) {
                best_gain = gain;
                best_group = g;
                memcpy(best_order, order, sizeof(int) * (size_t)T);
            }
        }
        placed[best_group] = 1;
        memcpy(&gpu_of_local[slot * T], best_order, sizeof(int) * (size_t)T);
        total += best_gain;
    }
    return total;
}

int plan_island_capacity(const dtrain_topo *topo, int T)
{
    int cap = 0;
    for (int i = 0; i < topo->nislands; i++)
        cap += topo->island_size[i] / T;
    return cap;
}

/* The largest t dividing K whose groups fit inside the islands. */
static int best_fitting_tp(const dtrain_topo *topo, int K)
{
    for (int t = K; t > 1; t--)
        if (K % t == 0 && plan_island_capacity(topo, t) >= K / t)
            return t;
    return 1;
}

static const char *island_word(const dtrain_topo *topo)
{
    return topo->source == DTRAIN_LINKS_HWLOC_XGMI ? "XGMI" : "NVLink";
}

static enum dtrain_status refuse_islands(const dtrain_topo *topo, int node_index, int T, int K, char *err,
                                         size_t errlen)
{
    int largest = dtrain_topo_largest_island(topo);
    int fit = best_fitting_tp(topo, K);
    if (topo->source == DTRAIN_LINKS_NONE) {
        dtrain_snprintf(err, errlen,
                        "T=%d needs NVLink/XGMI-connected GPUs, but node %d's topology has no link information "
                        "(an hwloc 1.x export, or hwloc without its NVML/RSMI plugin): save it again with hwloc "
                        ">= 2.5 and NVML/RSMI (lstopo --of xml), or use --dtrain-allow-pcie",
                        T, node_index);
    } else if (topo->source == DTRAIN_LINKS_PCIE_ONLY) {
        dtrain_snprintf(err, errlen,
                        "T=%d needs %s-connected GPUs but node %d has none (PCIe only): "
                        "use --dtrain-tp=1, or --dtrain-allow-pcie",
                        T, "NVLink/XGMI", node_index);
    } else if (T > largest) {
        dtrain_snprintf(err, errlen,
                        "T=%d is larger than the largest %s island (%d GPUs) on node %d: "
                        "use --dtrain-tp=%d or less, or --dtrain-allow-pcie",
                        T, island_word(topo), largest, node_index, fit);
    } else {
        char sizes[128] = "";
        size_t used = 0;
        for (int i = 0; i < topo->nislands && used + 8 < sizeof(sizes); i++)
            used += (size_t)snprintf(sizes + used, sizeof(sizes) - used, "%s%d", i ? "," : "",
                                     topo->island_size[i]);
        dtrain_snprintf(err, errlen,
                        "the %s islands of node %d (sizes %s) hold only %d TP groups of %d GPUs, "
                        "%d tasks per node need %d: use --dtrain-tp=%d, %d tasks per node, or --dtrain-allow-pcie",
                        island_word(topo), node_index, sizes, plan_island_capacity(topo, T), T, K, K / T,
                        fit, plan_island_capacity(topo, T) * T);
    }
    return DTRAIN_ERR_REFUSED;
}

enum dtrain_status plan_refuse_gpu_count(const dtrain_topo *topo, int node_index, int T, int K, char *err,
                                         size_t errlen)
{
    if (topo->ngpus == 0)
        dtrain_snprintf(err, errlen,
                        "node %d has no GPUs for %d tasks per node: place CPU ranks with --cpu-only (dtrain-topo; "
                        "the plugin and dtrain-launch do so by themselves on nodes without GPUs)",
                        node_index, K);
    else if (T > topo->ngpus)
        dtrain_snprintf(err, errlen,
                        "node %d has %d GPU%s for %d tasks per node, fewer than a TP group of T=%d: use "
                        "--dtrain-tp=%d or less with --ntasks-per-node=%d, or nodes with %d GPUs",
                        node_index, topo->ngpus, topo->ngpus == 1 ? "" : "s", K, T, topo->ngpus, topo->ngpus, T);
    else
        dtrain_snprintf(err, errlen, "node %d has %d GPUs for %d tasks per node: use --ntasks-per-node=%d or less",
                        node_index, topo->ngpus, K, topo->ngpus);
    return DTRAIN_ERR_REFUSED;
}

enum dtrain_status plan_node_groups(const dtrain_topo *topo, int node_index, int T, int ngroups, int allow_pcie,
                                    struct plan_groups **out, int *crossed, char *err, size_t errlen)
{
    int K = T * ngroups;
    *out = NULL;
    *crossed = 0;
    if (topo->ngpus < K)
        return plan_refuse_gpu_count(topo, node_index, T, K, err, errlen);
    if (plan_island_capacity(topo, T) < ngroups) {
        if (!allow_pcie)
            return refuse_islands(topo, node_index, T, K, err, errlen);
        *crossed = 1;
    }

    struct plan_groups *s = calloc(1, sizeof(*s));
    if (!s) {
        dtrain_snprintf(err, errlen, "out of memory");
        return DTRAIN_ERR_SYSTEM;
    }
    s->n = topo->ngpus;
    s->T = T;
    s->ngroups = ngroups;
    for (int a = 0; a < s->n; a++) {
        s->state[a] = -2;
        /* Spanning islands is allowed: then the whole node is one island. */
        s->island[a] = *crossed ? 0 : topo->island_of[a];
        s->undecided_in[s->island[a]]++;
        for (int b = 0; b < s->n; b++)
            s->c[a][b] = a == b ? 0 : closeness(topo, a, b);
    }
    search_from(s);
    if (s->nbest == 0) {
        /* Cannot happen: capacity was checked above. */
        dtrain_snprintf(err, errlen, "internal error: no placement found on node %d", node_index);
        free(s);
        return DTRAIN_ERR_SYSTEM;
    }
    *out = s;
    return DTRAIN_OK;
}

void plan_groups_free(struct plan_groups *groups)
{
    free(groups);
}

void plan_node_assign(const struct plan_groups *s, const unsigned char *rel, int *gpu_of_local)
{
    long long best = -1;
    int tmp[MAXG];
    for (int k = 0; k < s->nbest; k++) {
        long long v = assign_slots(s, s->best[k], rel, tmp);
        if (v > best) {
            best = v;
            memcpy(gpu_of_local, tmp, sizeof(int) * (size_t)(s->T * s->ngroups));
        }
    }
}
