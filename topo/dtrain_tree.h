/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libdtrain-topo, part 3: the switch tree between nodes (Slurm's
 * topology/tree) and the node order of a step.
 *
 * Slurm gives every task SLURM_TOPOLOGY_ADDR, its node's place in the
 * switch tree ("spine.leaf1.node1", pattern "switch.switch.node"; checked on
 * Slurm 22.05).  Gathered from one task per node, in Slurm's node order,
 * these addresses are the input here.
 *
 * What dtrain may reorder is the NODE ORDER of the step, never the rank
 * formula: rank = tp + T*(dp + D*pp) = Slurm task id, and node position p
 * holds ranks p*K .. p*K+K-1.  Slurm numbers task ids along SLURM_HOSTFILE
 * with --distribution=arbitrary, so a host file in the chosen order moves
 * whole nodes, and with them which DP ring edges and PP sends cross
 * leaf-switch uplinks.
 *
 * dtrain_tree_order() groups the nodes under their switches, level by
 * level, each group placed where its first node stands in Slurm's order
 * (so Slurm's first node stays first: rank 0 and MASTER_ADDR stay there).
 * With nodes of one leaf contiguous, a DP ring crosses a leaf uplink only
 * where it passes from one leaf's block to the next.  Pure functions, no
 * global state. */
#ifndef DTRAIN_TREE_H
#define DTRAIN_TREE_H

#include <stddef.h>

#include "dtrain_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DTRAIN_TREE_NAME_MAX 64
#define DTRAIN_TREE_ADDR_MAX 256
#define DTRAIN_TREE_MAX_NODES 65536

struct dtrain_tree_node {
    char name[DTRAIN_TREE_NAME_MAX]; /* Slurm node name */
    char addr[DTRAIN_TREE_ADDR_MAX]; /* SLURM_TOPOLOGY_ADDR, e.g. "spine.leaf1.node1" */
};

/* Parse "NAME ADDR" lines (blank lines and "#" comments skipped), in Slurm's
 * node order, into a new array (*nodes, free()).  Returns DTRAIN_OK, or
 * DTRAIN_ERR_INPUT with one line in err (a malformed line, a name given
 * twice, too many nodes). */
enum dtrain_status dtrain_tree_parse(const char *text, size_t len, struct dtrain_tree_node **nodes, int *n, char *err,
                                     size_t errlen);

/* The chosen order: order[p] = index (into nodes) of the node at position p.
 * Returns DTRAIN_OK, or DTRAIN_ERR_SYSTEM when out of memory. */
enum dtrain_status dtrain_tree_order(const struct dtrain_tree_node *nodes, int n, int *order);

/* Traffic across leaf switches for one step with the nodes in `order`. */
struct dtrain_tree_cost {
    int leaves;           /* distinct leaf switches */
    long ring_edges;      /* DP ring edges (directed, one per member and ring), all rings */
    long cross_edges;     /* of them, between nodes under different leaf switches */
    double cross_bytes;   /* bytes those edges carry per step: 2(D-1)/D * grad_bytes each (ring all-reduce) */
    long pp_pairs;        /* PP neighbour pairs (stage s, s+1) */
    long pp_cross;        /* of them, under different leaf switches */
};

/* For a job of T x P x D on n nodes of K tasks (n*K = T*P*D, K % T == 0 or
 * T % K == 0) whose DP members each all-reduce grad_bytes per step.
 * Returns DTRAIN_OK, or DTRAIN_ERR_INPUT with one line in err when the
 * shape does not fit. */
enum dtrain_status dtrain_tree_cost(const struct dtrain_tree_node *nodes, const int *order, int n, int T, int P, int K,
                                    double grad_bytes, struct dtrain_tree_cost *out, char *err, size_t errlen);

/* Slurm's topology/block (23.11+; checked on 24.11.5) gives every task
 * SLURM_TOPOLOGY_ADDR "BLOCK.NODE" with SLURM_TOPOLOGY_ADDR_PATTERN
 * "block.node".  The domain of a node whose site declares its blocks NVLink
 * domains (nvlink_domain_source=block) is "slurm-block/BLOCK", into out.
 * Returns DTRAIN_OK, or DTRAIN_ERR_INPUT with one line in err: no address
 * (no topology/block), a pattern without "block" (topology/tree), an
 * address that does not match its pattern, or one too long. */
/* The leaf switch of a node of Slurm's topology/tree: its address without
 * the last component ("spine.leaf1.node1" -> "spine.leaf1"; two nodes are
 * under one leaf switch when these are equal), when the pattern is the
 * tree's ("switch.switch.node": it ends in "switch.node").  Returns 1 with
 * the switch path in out, 0 when the address is not a tree's (no address,
 * topology/block, a path that does not fit: then out is ""). */
int dtrain_tree_leaf(const char *addr, const char *pattern, char *out, size_t len);

#define DTRAIN_TREE_BLOCK_PREFIX "slurm-block/"
enum dtrain_status dtrain_tree_block_domain(const char *addr, const char *pattern, char *out, size_t len, char *err,
                                            size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
