#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Slurm's topology/ring (new in Slurm 26.05) and its rings as multi-node
# NVLink domains (site keys nvlink_domain_gpus=16 nvlink_domain_source=ring),
# on a real local Slurm of 4 nodes x 4 GPUs (hgx-a100-4gpu.xml), WITHOUT
# NVML fabric data: the domain of a node is the ring Slurm names in
# SLURM_TOPOLOGY_ADDR ("RING:POSITION.NODE", pattern "ring:position.node",
# read in 26.05's topology_ring.c).
#  (every step runs with a fake IMEX channel device, lib.sh fake_imex_channels:
#  a T=8 step over nodes needs one)
#  - any Slurm: on a cluster without topology/ring, a step that needs a
#    domain (T=8 > 4 tasks per node) fails at task start with exit 3 and one
#    line per node saying the pattern is not topology/ring's;
#  - Slurm 26.05 (the forky pass), topology.conf RingName=r0
#    Nodes=node3,node4,node1,node2 (ring positions 0-3, not the names'
#    order):
#    every task sees SLURM_TOPOLOGY_ADDR=r0:POS.NODE, pattern
#    ring:position.node, at the position of its RingName line;
#    a ring job, T=8 on the 4 nodes: Slurm lays the tasks out along the ring
#    from its start (node3 node4 node1 node2), so rank 0 runs on node3, not
#    on the step's first node (node1, SLURM_NODEID 0): srun's dtrain.so
#    names it (DTRAIN_RANK0_NODE=node3, MASTER_ADDR's node) and the order
#    (DTRAIN_NODE_ORDER=topology); every task's DTRAIN_NVLINK_DOMAIN is
#    slurm-ring/r0; the PMI2 bootstrap (dtrain-launch compares the TP
#    members' rings) succeeds;
#    T=8 with --segment=1 (each node a segment of its own) is refused by
#    srun's dtrain.so: the job fits one ring, --segment is to be left out.
# On Slurm before 26.05 topology/ring does not exist: those points SKIP.
. "$abs_top_srcdir/tests/tap.sh"
. "$abs_srcdir/lib.sh"
need_plugin
launch=$abs_top_builddir/launcher/dtrain-launch
site="max_tp=4 nvlink_domain_gpus=16 nvlink_domain_source=ring"

new_cluster_dir ring
# T=8 spans nodes: the step needs an IMEX channel (a fake one, lib.sh)
fake_imex_channels "$LC_NEW/imex"
site="$site $IMEX_SITE"
start_plugin_cluster "$LC_NEW" --nodes 4 --topology-all "$fixtures/hgx-a100-4gpu.xml" --plugin-args "$site"
out=$D/client.out err=$D/client.err
slurm_version "$D"

# ---- no topology/ring: the domain cannot be known
run_client "$out" "$err" srun -N2 --ntasks-per-node=4 --dtrain-tp=8 true
check "no TopologyPlugin, nvlink_domain_source=ring, T=8: exit 3, one line per node saying the pattern is not topology/ring's (exit $RC)" \
  eval '[ "$RC" -eq 3 ] && [ "$(grep -c "^dtrain: node[1-4]: SLURM_TOPOLOGY_ADDR_PATTERN is .node., not Slurm.s topology/ring (.ring:position.node.)" "$err")" -eq 2 ]'
diag_file "$err"

if ! slurm_at_least 26 5; then
  why="Slurm $version has no topology/ring (new in 26.05): run in the forky pass (tests/compat/run-debian --suite forky)"
  for i in $(seq 6); do skip_test "$why"; done
  done_testing
fi

echo "RingName=r0 Nodes=node3,node4,node1,node2" >"$D/topology.conf"
echo "TopologyPlugin=topology/ring" >"$D/ring.conf"
start_plugin_cluster "$D" --nodes 4 --topology-all "$fixtures/hgx-a100-4gpu.xml" --plugin-args "$site" \
  --slurm-conf-extra "$D/ring.conf"

run_client "$out" "$err" srun -N4 --ntasks-per-node=1 sh -c 'echo $SLURMD_NODENAME $SLURM_TOPOLOGY_ADDR $SLURM_TOPOLOGY_ADDR_PATTERN'
sort "$out" >"$D/raw"
check "Slurm $version, topology/ring: every task has SLURM_TOPOLOGY_ADDR=r0:POSITION.NODE at its RingName position, _PATTERN=ring:position.node: $(tr '\n' ';' <"$D/raw")" \
  [ "$RC" -eq 0 -a "$(tr '\n' ';' <"$D/raw")" = "node1 r0:2.node1 ring:position.node;node2 r0:3.node2 ring:position.node;node3 r0:0.node3 ring:position.node;node4 r0:1.node4 ring:position.node;" ]

run_client "$out" "$err" srun -N4 --ntasks-per-node=4 --dtrain-tp=8 --dtrain-verbose sh "$show_task"
problems=$(awk 'BEGIN { split("node3 node4 node1 node2", ring, " ") }
    { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
      n++; r = v["rank"]
      if (v["node"] != ring[int(r / 4) + 1] || v["nvd"] != "slurm-ring/r0" || v["rank0"] != "node3" ||
          v["norder"] != "topology" || v["T"] != 8)
        { print "rank " r " on " v["node"] " nodeid " v["nodeid"] ": " v["nvd"] " rank0=" v["rank0"] " " v["norder"]; bad = 1 }
      if (r == 0 && v["nodeid"] == 0) { print "rank 0 on SLURM_NODEID 0"; bad = 1 } }
    END { if (n != 16) { print n " lines"; bad = 1 } exit bad }' "$out")
check "a ring job, T=8 on 4 nodes: ranks follow the ring (node3 node4 node1 node2), rank 0 on node3 (not SLURM_NODEID 0) and every task told so (DTRAIN_RANK0_NODE), DTRAIN_NVLINK_DOMAIN=slurm-ring/r0 (exit $RC)${problems:+: $problems}" \
  [ "$RC" -eq 0 -a -z "$problems" ]
diag_file "$err"
check "... srun's dtrain.so names the order: $(grep -m1 '^dtrain: node order' "$err")" \
  grep -q "^dtrain: node order: Slurm.s topology-ordered step layout .*: node3 node4 node1 node2 (rank 0 and MASTER_ADDR on node3)$" "$err"

run_client "$out" "$err" srun -N4 --ntasks-per-node=4 --mpi=pmi2 --dtrain-tp=8 -o "$D/launch.%t" "$launch" --print
cat "$D"/launch.[0-9]* >"$D/launch.out" 2>/dev/null
check "... and its PMI2 bootstrap, comparing the TP members' rings, succeeds (exit $RC)" \
  [ "$RC" -eq 0 -a "$(grep -c '^rank=.* placed_by=spank ' "$D/launch.out")" -eq 16 ]
[ "$RC" -eq 0 ] || diag_file "$err"

run_client "$out" "$err" srun -N4 --segment=1 --ntasks-per-node=4 --dtrain-tp=8 true
check "T=8 --segment=1 (a node per segment) is refused with exit 3 and one line: the job fits one ring (exit $RC): $(head -n 1 "$err")" \
  eval '[ "$RC" -eq 3 ] && one_dtrain_line "$err" && grep -q "Slurm ring .*segments of 1 node would split them: leave --segment out" "$err"'
done_testing
