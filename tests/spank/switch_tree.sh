#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The switch tree and the node order of a step, on a real local Slurm of 4
# nodes (4-GPU boards, hgx-a100-4gpu.xml) with TopologyPlugin=topology/tree
# and a topology.conf of 2 leaf switches x 2 nodes, interleaved with the
# node names (leaf1: node1, node3; leaf2: node2, node4), so that the order
# by name alternates leaves:
#  - every task sees SLURM_TOPOLOGY_ADDR / SLURM_TOPOLOGY_ADDR_PATTERN;
#  - dtrain-topo --switch-addrs on the nodes in name order prints that order
#    and the chosen one with the DP ring edges and bytes crossing leaf
#    uplinks (T=2, K=2, D=4, 1 GB of gradients per DP member: 8 of 8 edges,
#    12 GB vs 4 of 8, 6 GB) and writes a SLURM_HOSTFILE;
#  - Slurm's own order of a plain step: by name on Slurm 22.05 and 24.11 (8
#    crossings), by leaf switch on 26.05, whose step layout follows the
#    topology (4); srun's dtrain.so names it (--dtrain-verbose,
#    DTRAIN_NODE_ORDER) and dtrain-launch --dtrain-verbose counts the
#    crossings in it and in dtrain's own order;
#  - the host file inside an allocation (salloc, then srun
#    --distribution=arbitrary), which every version runs: the plugin places
#    the reordered step and its DP rings cross leaf switches 4 times; a host
#    file that puts rank 0 on another node than the step's first runs too,
#    MASTER_ADDR being rank 0's node (DTRAIN_RANK0_NODE, from srun);
#  - TopologyParam=SwitchAsNodeRank (Slurm 23.02+; SKIP on 22.05): Slurm
#    numbers the nodes by leaf switch (SLURM_NODEID node1 node3 node2
#    node4), dtrain takes that order as it is (4 crossings, no host file:
#    dtrain-topo says so and writes none).
# (A standalone srun --distribution=arbitrary, which allocates as it runs,
# never starts under topology/tree on 24.11: its eval_nodes_tree ignores the
# arbitrary task counts, fixed in 26.05; doc/topology.md.)
. "$abs_top_srcdir/tests/tap.sh"
. "$abs_srcdir/lib.sh"
need_plugin
topo_bin=$abs_top_builddir/topo/dtrain-topo
launch=$abs_top_builddir/launcher/dtrain-launch

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
slurm_version "$D"
# Slurm 26.05 lays a plain step out by leaf switch (its topology-aware
# step layout); before, by SLURM_NODEID, the nodes by name
if slurm_at_least 26 5; then slurm_order="node1 node3 node2 node4" slurm_cross=4 slurm_kind=topology
else slurm_order="node1 node2 node3 node4" slurm_cross=8 slurm_kind=slurm; fi

# ---- the addresses, one task per node
run_client "$out" "$err" srun -N4 --ntasks-per-node=1 -l sh -c 'echo $SLURMD_NODENAME $SLURM_TOPOLOGY_ADDR $SLURM_TOPOLOGY_ADDR_PATTERN'
sort -n "$out" | sed 's/^[0-9]*: //' >"$D/raw"
check "Slurm $version: SLURM_TOPOLOGY_ADDR and _PATTERN in every task (topology/tree): $(tr '\n' ';' <"$D/raw")" \
  [ "$RC" -eq 0 -a "$(grep -c ' spine\.leaf[12]\.node[1-4] switch\.switch\.node$' "$D/raw")" -eq 4 ]
cut -d' ' -f1,2 "$D/raw" >"$D/addrs"       # Slurm's order (task order)
sort "$D/addrs" >"$D/addrs.byname"         # the nodes by name

# ---- the chosen order and its predicted traffic, from the order by name
"$topo_bin" --switch-addrs "$D/addrs.byname" --tp 2 --tasks-per-node 2 --grad-bytes 1e9 --hostfile "$D/hosts" \
  >"$D/order" 2>&1
rc=$?
sed 's/^/#   /' "$D/order"
check "dtrain-topo --switch-addrs: the order by name node1 node2 node3 node4 crosses leaf uplinks on 8 of 8 DP ring edges, 12 GB per step" \
  eval '[ "$rc" -eq 0 ] && grep -A1 "^Slurm.s order: *node1 node2 node3 node4$" "$D/order" | grep -q "8 of 8, 12.000 GB"'
check "... the chosen order node1 node3 node2 node4 on 4 of 8, 6 GB per step, run inside an allocation" \
  eval 'grep -A1 "^chosen order: *node1 node3 node2 node4$" "$D/order" | grep -q "4 of 8, 6.000 GB" &&
    grep -q "inside an allocation" "$D/order"'
check "... and the host file lists the chosen order, each node twice" \
  [ "$(tr '\n' ' ' <"$D/hosts" 2>/dev/null)" = "node1 node1 node3 node3 node2 node2 node4 node4 " ]

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
# node_order FILE: the nodes by rank, from show-task.sh lines
node_order() { awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } print v["rank"], v["node"] }' "$1" |
  sort -n | awk '{ if ($2 != last) printf "%s%s", n++ ? " " : "", $2; last = $2 } END { print "" }'; }

# ---- Slurm's own order
run_client "$out" "$err" srun -N4 --ntasks-per-node=2 --dtrain-tp=2 --dtrain-verbose sh "$show_task"
check "Slurm $version's order of a plain step is $slurm_order (exit $RC; ranks on $(node_order "$out")): its DP rings cross leaf switches $(dp_crossings "$out") times ($slurm_cross expected)" \
  eval '[ "$RC" -eq 0 ] && [ "$(node_order "$out")" = "$slurm_order" ] && [ "$(dp_crossings "$out")" -eq "$slurm_cross" ]'
check "... srun's dtrain.so says which order is in force (DTRAIN_NODE_ORDER=$slurm_kind in every task, and --dtrain-verbose): $(grep -m1 '^dtrain: node order' "$err")" \
  eval '[ "$(grep -c " norder=$slurm_kind " "$out")" -eq 8 ] &&
    grep -q "^dtrain: node order: .*: $slurm_order (rank 0 and MASTER_ADDR on node1)$" "$err"'
run_client "$out" "$err" srun -N4 --ntasks-per-node=2 --mpi=pmi2 --dtrain-tp=2 --dtrain-verbose -o "$D/launch.%t" \
  "$launch" --print
line=$(grep -h '^dtrain-launch: node order' "$err" "$D"/launch.[0-9]* 2>/dev/null | head -n 1)
check "dtrain-launch --dtrain-verbose (rank 0): the order in force and the DP ring edges across leaf switches in it and in dtrain's own order (exit $RC): $line" \
  eval '[ "$RC" -eq 0 ] && echo "$line" | grep -q ": $slurm_order under 2 leaf switches; DP ring edges across leaf switches: $slurm_cross of 8; in dtrain.s own order (dtrain-topo --switch-addrs): 4 of 8$"'

# ---- the host file, inside an allocation
salloc_step() { # HOSTFILE: srun --distribution=arbitrary in an allocation of the 4 nodes
  in_cluster "$D" timeout 120 salloc -N4 --ntasks-per-node=2 sh -c \
    "SLURM_HOSTFILE=$1 srun -n8 --distribution=arbitrary --dtrain-tp=2 --dtrain-verbose sh $show_task" >"$out" 2>"$err"
  RC=$?
}
salloc_step "$D/hosts"
problems=$(awk 'BEGIN { split("node1 node3 node2 node4", want, " ") }
    { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
      r = v["rank"]; n++
      if (v["procid"] != r || v["node"] != want[int(r / 2) + 1] || v["node_rank"] != int(r / 2) ||
          v["tp"] != r % 2 || v["dp"] != int(r / 2) || v["by"] != "spank" || v["norder"] != "hostfile")
        { print "rank " r " on " v["node"] " node_rank " v["node_rank"] " norder " v["norder"]; bad = 1 } }
    END { if (n != 8) { print n " lines"; bad = 1 } exit bad }' "$out")
check "Slurm $version: SLURM_HOSTFILE + --distribution=arbitrary inside salloc: the plugin places the reordered step, rank = task id, NODE_RANK = rank / K (exit $RC)${problems:+: $problems}" \
  [ "$RC" -eq 0 -a -z "$problems" ]
diag_file "$err"
check "... its DP rings cross leaf switches $(dp_crossings "$out") times (4 predicted), and srun says the order is the host file's" \
  eval '[ "$(dp_crossings "$out")" -eq 4 ] && grep -q "^dtrain: node order: dtrain.s own order (SLURM_HOSTFILE with --distribution=arbitrary): node1 node3 node2 node4 " "$err"'

printf 'node2\nnode2\nnode1\nnode1\nnode3\nnode3\nnode4\nnode4\n' >"$D/rank0-hosts"
salloc_step "$D/rank0-hosts"
problems=$(awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
      n++; if (v["rank0"] != "node2") { print "rank " v["rank"] " on " v["node"] ": DTRAIN_RANK0_NODE=" v["rank0"]; bad = 1 }
      if (v["rank"] == 0 && (v["node"] != "node2" || v["nodeid"] == 0)) { print "rank 0 on " v["node"] " nodeid " v["nodeid"]; bad = 1 } }
    END { if (n != 8) { print n " lines"; bad = 1 } exit bad }' "$out")
check "a host file that puts rank 0 on node2, not the step's first node: it runs, every task has rank 0's node (DTRAIN_RANK0_NODE=node2, MASTER_ADDR's) (exit $RC)${problems:+: $problems}" \
  [ "$RC" -eq 0 -a -z "$problems" ]
diag_file "$err"

# ---- TopologyParam=SwitchAsNodeRank: Slurm's node ranks by leaf switch
if ! slurm_at_least 23 2; then
  why="Slurm $version has no TopologyParam=SwitchAsNodeRank (it came in 23.02): run in the chroot passes (tests/compat/run-debian --suite trixie|forky)"
  for i in 1 2 3; do skip_test "$why"; done
  done_testing
fi
printf 'TopologyPlugin=topology/tree\nTopologyParam=SwitchAsNodeRank\n' >"$D/tree.conf"
start_plugin_cluster "$D" --nodes 4 --topology-all "$fixtures/hgx-a100-4gpu.xml" --slurm-conf-extra "$D/tree.conf"
run_client "$out" "$err" srun -N4 --ntasks-per-node=1 -l sh -c 'echo $SLURMD_NODENAME $SLURM_NODEID $SLURM_TOPOLOGY_ADDR'
ids=$(sort -k3 -n "$out" | awk '{ printf "%s%s", (NR > 1 ? " " : ""), $2 }')
check "Slurm $version, TopologyParam=SwitchAsNodeRank: SLURM_NODEID numbers the nodes by leaf switch: $ids (exit $RC)" \
  [ "$RC" -eq 0 -a "$ids" = "node1 node3 node2 node4" ]
sort -n "$out" | awk '{ print $2, $4 }' >"$D/addrs.rank"
run_client "$out" "$err" srun -N4 --ntasks-per-node=2 --dtrain-tp=2 --dtrain-verbose sh "$show_task"
check "... a dtrain step takes Slurm's ranks as they are (ranks on $(node_order "$out"), DP rings crossing leaf switches $(dp_crossings "$out") times, DTRAIN_NODE_ORDER=switch-rank): $(grep -m1 '^dtrain: node order' "$err")" \
  eval '[ "$RC" -eq 0 ] && [ "$(node_order "$out")" = "node1 node3 node2 node4" ] && [ "$(dp_crossings "$out")" -eq 4 ] &&
    [ "$(grep -c " norder=switch-rank " "$out")" -eq 8 ] &&
    grep -q "^dtrain: node order: Slurm.s node ranks by leaf switch (TopologyParam=SwitchAsNodeRank): node1 node3 node2 node4 " "$err"'
rm -f "$D/hosts.rank"
DTRAIN_NODE_ORDER=switch-rank "$topo_bin" --switch-addrs "$D/addrs.rank" --tp 2 --tasks-per-node 2 --grad-bytes 1e9 \
  --hostfile "$D/hosts.rank" >"$D/order" 2>&1
rc=$?
sed 's/^/#   /' "$D/order"
check "... and dtrain-topo --switch-addrs on that order says so: no host file (none written) (exit $rc)" \
  eval '[ "$rc" -eq 0 ] && grep -q "^Order in force: Slurm.s node ranks by leaf switch" "$D/order" &&
    grep -q "no host file (none written)" "$D/order" && [ ! -e "$D/hosts.rank" ]'
done_testing
