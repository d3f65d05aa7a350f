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

/* The leaf switch of a node of Slurm's topology/tree: its address without
 * the last component ("spine.leaf1.node1" -> "spine.leaf1"; two nodes are
 * under one leaf switch when these are equal), when the pattern is the
 * tree's ("switch.switch.node": it ends in "switch.node").  Returns 1 with
 * the switch path in out, 0 when the address is not a tree's (no address,
 * topology/block, a path that does not fit: then out is ""). */
int dtrain_tree_leaf(const char *addr, const char *pattern, char *out, size_t len);

/* Slurm's topology/block (23.11+; checked on 24.11.5) gives every task
 * SLURM_TOPOLOGY_ADDR "BLOCK.NODE" with SLURM_TOPOLOGY_ADDR_PATTERN
 * "block.node"; topology/ring (26.05) "RING:POSITION.NODE" with
 * "ring:position.node" (read in Slurm 26.05's topology_ring.c).  The domain
 * of a node whose site declares its blocks, or rings, NVLink domains
 * (nvlink_domain_source=block|ring) is "slurm-block/BLOCK" or
 * "slurm-ring/RING", into out.  Returns DTRAIN_OK, or DTRAIN_ERR_INPUT with
 * one line in err: no address (no such TopologyPlugin), a pattern without
 * "block" (or "ring:position"), an address that does not match its pattern,
 * or one too long. */
#define DTRAIN_TREE_BLOCK_PREFIX "slurm-block/"
#define DTRAIN_TREE_RING_PREFIX "slurm-ring/"
enum dtrain_tree_unit {
    DTRAIN_TREE_UNIT_BLOCK = 1, /* topology/block's base block */
    DTRAIN_TREE_UNIT_RING = 2,  /* topology/ring's ring */
};
enum dtrain_status dtrain_tree_unit_domain(enum dtrain_tree_unit unit, const char *addr, const char *pattern,
                                           char *out, size_t len, char *err, size_t errlen);
/* = dtrain_tree_unit_domain(DTRAIN_TREE_UNIT_BLOCK, ...) */
enum dtrain_status dtrain_tree_block_domain(const char *addr, const char *pattern, char *out, size_t len, char *err,
                                            size_t errlen);
/* A ring address "RING:POSITION.NODE" (pattern "ring:position.node"): the
 * ring's name into name and the node's position in it (0 = the first node
 * of its RingName line) into *pos.  DTRAIN_OK, or DTRAIN_ERR_INPUT with one
 * line in err. */
enum dtrain_status dtrain_tree_ring_position(const char *addr, const char *pattern, char *name, size_t len,
                                             int *pos, char *err, size_t errlen);

/* The node order of a step, as the SPANK plugin finds it in srun (the
 * step's layout and Slurm's configuration) and hands it to the tasks in
 * DTRAIN_NODE_ORDER; dtrain-launch --dtrain-verbose names it.
 *   SLURM       task ids in SLURM_NODEID order, the nodes by name (no
 *               topology ranking): dtrain-topo --switch-addrs may do better
 *   SWITCH_RANK TopologyParam=SwitchAsNodeRank (topology/tree, 24.11+):
 *               slurmctld numbers the nodes by leaf switch
 *   BLOCK_RANK  TopologyParam=BlockAsNodeRank (topology/block, 26.05)
 *   TOPOLOGY    Slurm 26.05's topology-aware step layout: task ids follow
 *               the leaf switches, blocks or ring positions (not
 *               SLURM_NODEID) unless SelectTypeParameters=CR_NO_DIST_TOPO_BLOCK
 *   HOSTFILE    SLURM_HOSTFILE with --distribution=arbitrary (dtrain's own
 *               order, from dtrain-topo --switch-addrs --hostfile) */
enum dtrain_node_order {
    DTRAIN_NODE_ORDER_UNKNOWN = 0,
    DTRAIN_NODE_ORDER_SLURM,
    DTRAIN_NODE_ORDER_SWITCH_RANK,
    DTRAIN_NODE_ORDER_BLOCK_RANK,
    DTRAIN_NODE_ORDER_TOPOLOGY,
    DTRAIN_NODE_ORDER_HOSTFILE,
};
/* The value of DTRAIN_NODE_ORDER ("slurm", "switch-rank", "block-rank",
 * "topology", "hostfile"), and back (UNKNOWN for anything else). */
const char *dtrain_node_order_name(enum dtrain_node_order order);
enum dtrain_node_order dtrain_node_order_parse(const char *name);
/* One phrase saying where the order comes from, for messages. */
const char *dtrain_node_order_describe(enum dtrain_node_order order);
/* Which order Slurm's configuration gives a step: its TopologyPlugin and
 * TopologyParam (NULL: unset), whether the step asked for
 * --distribution=arbitrary, whether this Slurm lays steps out by topology
 * (26.05+) and SelectTypeParameters turns that off (CR_NO_DIST_TOPO_BLOCK). */
enum dtrain_node_order dtrain_node_order_of(const char *topology_plugin, const char *topology_param, int arbitrary,
                                            int topo_layout, int no_dist_topo);

#ifdef __cplusplus
}
#endif
#endif
