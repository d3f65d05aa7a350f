#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The switch tree and the node order of a step, on a real local Slurm of 4
# nodes (4-GPU boards, hgx-a100-4gpu.xml) with TopologyPlugin=topology/tree
# and a topology.conf of 2 leaf switches x 2 nodes, interleaved with the
# node names (leaf1: node1, node3; leaf2: node2, node4), so that Slurm's
# block order alternates leaves:
#  - every task sees SLURM_TOPOLOGY_ADDR / SLURM_TOPOLOGY_ADDR_PATTERN
#    (Slurm 22.05 sets them with topology/tree);
#  - dtrain-topo --switch-addrs prints Slurm's order and the chosen order
#    with the DP ring edges and bytes crossing leaf uplinks (T=2, K=2, D=4,
#    1 GB of gradients per DP member: 8 of 8 edges, 12 GB vs 4 of 8, 6 GB)
#    and writes a SLURM_HOSTFILE;
#  - srun --distribution=arbitrary with that host file: the plugin places
#    the reordered step (rank = task id, node position = task id / K), and
#    the DP rings of the placement actually made cross leaf switches 4
#    times instead of 8 (counted from the tasks' own lines);
#  - a host file that moves rank 0 off the step's first node is refused.
. "$abs_top_srcdir/tests/tap.sh"
. "$abs_srcdir/lib.sh"
need_plugin
topo_bin=$abs_top_builddir/topo/dtrain-topo

new_cluster_dir tree
cat >"$LC_NEW/topology.conf" <<'CONF'
SwitchName=leaf1 Nodes=node1,node3
SwitchName=leaf2 Nodes=node2,node4
SwitchName=spine Switches=leaf1,leaf2
CONF
echo "TopologyPlugin=topology/tree" >"$LC_NEW/tree.conf"
start_plugin_cluster "$LC_NEW" --nodes 4 --topology-all "$fixtures/hgx-a100-4gpu.xml" \
  --slurm-conf-extra "$LC_NEW/tree.conf"
out=$D/client.out err=$D/client.err

# ---- the addresses, one task per node, in Slurm's node order
run_client "$out" "$err" srun -N4 --ntasks-per-node=1 -l sh -c 'echo $SLURMD_NODENAME $SLURM_TOPOLOGY_ADDR $SLURM_TOPOLOGY_ADDR_PATTERN'
sort -n "$out" | sed 's/^[0-9]*: //' >"$D/raw"
cut -d' ' -f1,2 "$D/raw" >"$D/addrs"
check "SLURM_TOPOLOGY_ADDR and _PATTERN in every task (topology/tree, Slurm 22.05): $(tr '\n' ';' <"$D/raw")" \
  [ "$RC" -eq 0 -a "$(grep -c ' spine\.leaf[12]\.node[1-4] switch\.switch\.node$' "$D/raw")" -eq 4 ]

# ---- the chosen order and its predicted traffic
"$topo_bin" --switch-addrs "$D/addrs" --tp 2 --tasks-per-node 2 --grad-bytes 1e9 --hostfile "$D/hosts" >"$D/order" 2>&1
rc=$?
sed 's/^/#   /' "$D/order"
check "dtrain-topo --switch-addrs: Slurm's order node1 node2 node3 node4 crosses leaf uplinks on 8 of 8 DP ring edges, 12 GB per step" \
  eval '[ "$rc" -eq 0 ] && grep -A1 "^Slurm.s order: *node1 node2 node3 node4$" "$D/order" | grep -q "8 of 8, 12.000 GB"'
check "... the chosen order node1 node3 node2 node4 on 4 of 8, 6 GB per step" \
  eval 'grep -A1 "^chosen order: *node1 node3 node2 node4$" "$D/order" | grep -q "4 of 8, 6.000 GB"'
check "... and the host file lists the chosen order, each node twice" \
  [ "$(tr '\n' ' ' <"$D/hosts")" = "node1 node1 node3 node3 node2 node2 node4 node4 " ]

# dp_crossings FILE: DP ring edges (tp fixed, dp -> dp+1 mod D) whose tasks
# run under different leaf switches, counted from show-task.sh lines.
dp_crossings() {
  awk 'BEGIN { leaf["node1"] = leaf["node3"] = 1; leaf["node2"] = leaf["node4"] = 2 }
    { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
      at[v["tp"] "," v["dp"]] = v["node"]; T = v["T"]; D = v["D"] }
    END { for (t = 0; t < T; t++) for (d = 0; d < D; d++)
            if (leaf[at[t "," d]] != leaf[at[t "," (d + 1) % D]]) n++
          print n + 0 }' "$1"
}

run_client "$out" "$err" srun -N4 --ntasks-per-node=2 --dtrain-tp=2 sh "$show_task"
check "Slurm's block order placed (exit $RC): its DP rings cross leaf switches $(dp_crossings "$out") times" \
  [ "$RC" -eq 0 -a "$(dp_crossings "$out")" -eq 8 ]

# 60 s, not run_client's 120: Slurm 22.05 starts this step at once (seconds
# even on a loaded machine); 24.11 never does (below), and the suite should
# not wait two minutes to see it.
SLURM_HOSTFILE=$D/hosts in_cluster "$D" timeout 60 srun -n8 --distribution=arbitrary --dtrain-tp=2 sh "$show_task" \
  >"$out" 2>"$err"
RC=$?
if [ "$RC" -eq 124 ] && grep -q "queued and waiting for resources" "$err"; then
  # Slurm 24.11 with topology/tree never starts an srun --distribution=arbitrary
  # (even with Slurm's own node order, even inside one leaf switch): the
  # allocation stays pending.  A limit of that Slurm, said in doc/topology.md.
  why="this Slurm never schedules srun --distribution=arbitrary under topology/tree (the allocation stays pending)"
  diag_file "$err"
  skip_test "$why"; skip_test "$why"; skip_test "$why"
  done_testing
fi
problems=$(awk 'BEGIN { split("node1 node3 node2 node4", want, " ") }
    { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
      r = v["rank"]; n++
      if (v["procid"] != r || v["node"] != want[int(r / 2) + 1] || v["node_rank"] != int(r / 2) ||
          v["tp"] != r % 2 || v["dp"] != int(r / 2) || v["by"] != "spank")
        { print "rank " r " on " v["node"] " node_rank " v["node_rank"]; bad = 1 } }
    END { if (n != 8) { print n " lines"; bad = 1 } exit bad }' "$out")
check "SLURM_HOSTFILE + --distribution=arbitrary: the plugin places the reordered step, rank = task id, NODE_RANK = rank / K (exit $RC)${problems:+: $problems}" \
  [ "$RC" -eq 0 -a -z "$problems" ]
diag_file "$err"
check "... and its DP rings cross leaf switches $(dp_crossings "$out") times (4 predicted)" \
  [ "$(dp_crossings "$out")" -eq 4 ]

printf 'node2\nnode2\nnode1\nnode1\nnode3\nnode3\nnode4\nnode4\n' >"$D/bad-hosts"
SLURM_HOSTFILE=$D/bad-hosts run_client "$out" "$err" srun -n8 --distribution=arbitrary --dtrain-tp=2 true
check "a host file that puts rank 0 off the step's first node is refused with exit 3, saying so (exit $RC)" \
  eval '[ "$RC" -eq 3 ] && grep -q "rank 0 must run on the step.s first node" "$err"'
diag_file "$err"
done_testing
