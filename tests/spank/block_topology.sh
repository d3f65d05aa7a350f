#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Slurm's topology/block blocks as multi-node NVLink domains (site keys
# nvlink_domain_gpus=8 nvlink_domain_source=block), on a real local Slurm
# of 4 nodes x 4 GPUs (hgx-a100-4gpu.xml) WITHOUT NVML fabric data: the
# domain of a node is the block Slurm names in SLURM_TOPOLOGY_ADDR.
#  - any Slurm: on a cluster without topology/block (Slurm's default plugin
#    sets SLURM_TOPOLOGY_ADDR=NODE, _PATTERN=node), a step that needs a
#    domain (T=8 > 4 tasks per node) fails at task start with exit 3 and one
#    line per node saying the pattern is not topology/block's;
#  - Slurm 23.11+ (topology/block exists; Debian 13's 24.11 in the chroot
#    pass), topology.conf BlockName=b1 Nodes=node[1-2], b2 node[3-4],
#    BlockSizes=2,4:
#    every task sees SLURM_TOPOLOGY_ADDR=bK.nodeN, _PATTERN=block.node;
#    T=8 on 4 nodes: TP groups node1+node2 (b1) and node3+node4 (b2), every
#    task's DTRAIN_NVLINK_DOMAIN=slurm-block/bK, and the PMI2 bootstrap
#    (dtrain-launch, which compares the members' domains) succeeds;
#    T=4 P=2 --dtrain-pp-in-domain on 2 nodes: Slurm puts both in one block,
#    the PP groups are bootstrapped inside it;
#    a 2-node step asked on node2+node3 (two blocks) never runs across them:
#    Slurm refuses the allocation or dtrain-launch refuses the group;
#  - --segment (Slurm 24.05+): T=8 on 4 nodes without --segment is refused
#    by srun's dtrain.so (Slurm may split 4 nodes across blocks anywhere),
#    naming --segment=2; with --segment=2 it runs (the placement above);
#  - TopologyParam=BlockAsNodeRank (Slurm 25.11+; the forky pass), blocks
#    interleaved with the names (b1: node1, node3; b2: node2, node4):
#    SLURM_NODEID numbers the nodes by block, T=8 --segment=2 puts each TP
#    group in one block, srun names the order (DTRAIN_NODE_ORDER=block-rank)
#    and the PMI2 bootstrap succeeds.
# On Slurm 22.05 (Debian 12) topology/block does not exist: those points
# SKIP, saying so.
. "$abs_top_srcdir/tests/tap.sh"
. "$abs_srcdir/lib.sh"
need_plugin
launch=$abs_top_builddir/launcher/dtrain-launch
site="max_tp=4 nvlink_domain_gpus=8 nvlink_domain_source=block"

new_cluster_dir block
# T=8 spans nodes: the step needs an IMEX channel (a fake one, lib.sh)
fake_imex_channels "$LC_NEW/imex"
site="$site $IMEX_SITE"
start_plugin_cluster "$LC_NEW" --nodes 4 --topology-all "$fixtures/hgx-a100-4gpu.xml" --plugin-args "$site"
out=$D/client.out err=$D/client.err
slurm_version "$D"
# --segment=2 keeps each TP group of 2 nodes in one block (Slurm 24.05+;
# srun's dtrain.so refuses T=8 on 4 nodes without it there)
seg=(); ! slurm_at_least 24 5 || seg=(--segment=2)

# ---- no topology/block: the domain cannot be known
run_client "$out" "$err" srun -N4 "${seg[@]}" --ntasks-per-node=4 --dtrain-tp=8 true
# (Slurm's default topology plugin gives SLURM_TOPOLOGY_ADDR=NODE, _PATTERN=node)
check "no TopologyPlugin, nvlink_domain_source=block, T=8: exit 3, one line per node saying the pattern is not topology/block's (exit $RC)" \
  eval '[ "$RC" -eq 3 ] && [ "$(grep -c "^dtrain: node[1-4]: SLURM_TOPOLOGY_ADDR_PATTERN is .node., not Slurm.s topology/block (.block.node.)" "$err")" -eq 4 ]'
diag_file "$err"

if ! slurm_at_least 23 11; then
  why="Slurm $version has no topology/block (it came in 23.11); run in the chroot passes (tests/compat/run-debian --suite trixie|forky)"
  for i in $(seq 13); do skip_test "$why"; done
  done_testing
fi

cat >"$LC_NEW/topology.conf" <<'CONF'
BlockName=b1 Nodes=node[1-2]
BlockName=b2 Nodes=node[3-4]
BlockSizes=2,4
CONF
echo "TopologyPlugin=topology/block" >"$LC_NEW/block.conf"
start_plugin_cluster "$LC_NEW" --nodes 4 --topology-all "$fixtures/hgx-a100-4gpu.xml" --plugin-args "$site" \
  --slurm-conf-extra "$LC_NEW/block.conf"

run_client "$out" "$err" srun -N4 --ntasks-per-node=1 -l sh -c 'echo $SLURMD_NODENAME $SLURM_TOPOLOGY_ADDR $SLURM_TOPOLOGY_ADDR_PATTERN'
sort -n "$out" | sed 's/^[0-9]*: //' >"$D/raw"
check "Slurm $version, topology/block: every task has SLURM_TOPOLOGY_ADDR=BLOCK.NODE, _PATTERN=block.node: $(tr '\n' ';' <"$D/raw")" \
  [ "$RC" -eq 0 -a "$(grep -c -E '^node([12]) b1\.node\1 block\.node$|^node([34]) b2\.node\2 block\.node$' "$D/raw")" -eq 4 ]

run_client "$out" "$err" srun -N4 --ntasks-per-node=4 --dtrain-tp=8 true
check "T=8 on 4 nodes without --segment: srun refuses it with exit 3 and one line naming --segment=2 (exit $RC): $(head -n 1 "$err")" \
  eval '[ "$RC" -eq 3 ] && one_dtrain_line "$err" && grep -q "each must sit in one Slurm block .*: use --segment=2$" "$err"'
run_client "$out" "$err" sbatch -N4 --ntasks-per-node=4 --dtrain-tp=8 --wrap true
check "... so does sbatch (exit $RC)" eval '[ "$RC" -eq 3 ] && one_dtrain_line "$err" && grep -q ": use --segment=2$" "$err"'
run_client "$out" "$err" srun -N4 --segment=2 --ntasks-per-node=4 --dtrain-tp=8 sh "$show_task"
problems=$(awk '
    { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
      n++; r = v["rank"]; node = v["node"]
      want = (v["dp"] == 0) ? "node[12]" : "node[34]"
      if (v["T"] != 8 || node !~ ("^" want "$")) { print "rank " r " (TP group " v["dp"] ") on " node; bad = 1 }
      blk = (node == "node1" || node == "node2") ? "b1" : "b2"
      if (v["nvd"] != "slurm-block/" blk) { print "rank " r " on " node ": DTRAIN_NVLINK_DOMAIN=" v["nvd"]; bad = 1 } }
    END { if (n != 16) { print n " lines"; bad = 1 } exit bad }' "$out")
check "T=8 on 4 nodes with --segment=2 is accepted: TP group 0 on node1+node2 (block b1), 1 on node3+node4 (b2), DTRAIN_NVLINK_DOMAIN=slurm-block/bK (exit $RC)${problems:+: $problems}" \
  [ "$RC" -eq 0 -a -z "$problems" ]
diag_file "$err"
run_client "$out" "$err" srun -N4 --segment=2 --ntasks-per-node=4 --mpi=pmi2 --dtrain-tp=8 -o "$D/launch.%t" "$launch" --print
cat "$D"/launch.[0-9]* >"$D/launch.out" 2>/dev/null
check "... and the PMI2 bootstrap of the 16 tasks, comparing the TP members' blocks, succeeds (exit $RC)" \
  [ "$RC" -eq 0 -a "$(grep -c '^rank=.* placed_by=spank ' "$D/launch.out")" -eq 16 ]
[ "$RC" -eq 0 ] || diag_file "$err"

run_client "$out" "$err" srun -N2 --ntasks-per-node=4 --dtrain-tp=4 --dtrain-pp=2 --dtrain-pp-in-domain sh "$show_task"
blocks=$(awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } print v["nvd"] "," v["ppd"] }' "$out" | sort -u | tr '\n' ' ')
check "T=4 P=2 --dtrain-pp-in-domain on 2 nodes: Slurm puts both in one block, all 8 tasks say so ($blocks) (exit $RC)" \
  eval '[ "$RC" -eq 0 ] && [ "$(wc -l <"$out")" -eq 8 ] && echo "$blocks" | grep -q -E "^slurm-block/b[12],1 $"'
run_client "$out" "$err" srun -N2 --ntasks-per-node=4 --mpi=pmi2 --dtrain-tp=4 --dtrain-pp=2 --dtrain-pp-in-domain \
  -o "$D/pp.%t" "$launch" --print
cat "$D"/pp.[0-9]* >"$D/pp.out" 2>/dev/null
check "... its PMI2 bootstrap with the PP domain check succeeds (exit $RC)" \
  [ "$RC" -eq 0 -a "$(grep -c '^rank=.* placed_by=spank ' "$D/pp.out")" -eq 8 ]
[ "$RC" -eq 0 ] || diag_file "$err"

run_client "$out" "$err" srun -w node2,node3 -N2 --ntasks-per-node=4 --mpi=pmi2 --dtrain-tp=8 -o "$D/cross.%t" "$launch" --print
cat "$err" "$D"/cross.[0-9]* >"$D/cross.out" 2>/dev/null
if grep -q "spans NVLink domains" "$D/cross.out"; then by="dtrain-launch: $(grep -m1 'spans NVLink' "$D/cross.out")"
else by="Slurm: $(head -n 1 "$err")"; fi
check "T=8 asked on node2+node3 (blocks b1 and b2): never runs across them (exit $RC; refused by $by)" \
  eval '[ "$RC" -ne 0 ] && { grep -q "Requested node configuration is not available" "$err" ||
    grep -q "TP group dt.tp.0 (ranks 0-7) spans NVLink domains: rank [4-7] is in slurm-block/b2, its leader rank 0 in slurm-block/b1" "$D/cross.out"; }'
run_client "$out" "$err" srun -w node2,node3 -N2 --ntasks-per-node=1 true
echo "#   (for the record: a plain 2-node step without dtrain on node2+node3: exit $RC $(head -n 1 "$err"))"

# ---- TopologyParam=BlockAsNodeRank: Slurm's node ranks by base block
if ! slurm_at_least 25 11; then
  why="Slurm $version has no TopologyParam=BlockAsNodeRank (it came in 25.11): run in the forky pass (tests/compat/run-debian --suite forky)"
  for i in 1 2 3 4; do skip_test "$why"; done
  done_testing
fi
cat >"$D/topology.conf" <<'CONF'
BlockName=b1 Nodes=node1,node3
BlockName=b2 Nodes=node2,node4
BlockSizes=2,4
CONF
printf 'TopologyPlugin=topology/block\nTopologyParam=BlockAsNodeRank\n' >"$D/block.conf"
start_plugin_cluster "$D" --nodes 4 --topology-all "$fixtures/hgx-a100-4gpu.xml" --plugin-args "$site" \
  --slurm-conf-extra "$D/block.conf"
run_client "$out" "$err" srun -N4 --ntasks-per-node=1 -l sh -c 'echo $SLURMD_NODENAME $SLURM_NODEID $SLURM_TOPOLOGY_ADDR'
ids=$(sort -k3 -n "$out" | awk '{ printf "%s%s", (NR > 1 ? " " : ""), $2 }')
check "Slurm $version, blocks b1 = node1+node3, b2 = node2+node4, TopologyParam=BlockAsNodeRank: SLURM_NODEID numbers the nodes by block: $ids (exit $RC)" \
  [ "$RC" -eq 0 -a "$ids" = "node1 node3 node2 node4" ]
run_client "$out" "$err" srun -N4 --segment=2 --ntasks-per-node=4 --dtrain-tp=8 --dtrain-verbose sh "$show_task"
problems=$(awk '
    { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
      n++; r = v["rank"]; node = v["node"]
      want = (v["dp"] == 0) ? "node[13]" : "node[24]"; blk = (v["dp"] == 0) ? "b1" : "b2"
      if (node !~ ("^" want "$") || v["nvd"] != "slurm-block/" blk || v["norder"] != "block-rank" ||
          v["nodeid"] != int(r / 4))
        { print "rank " r " (TP group " v["dp"] ") on " node " nodeid " v["nodeid"] " " v["nvd"] " " v["norder"]; bad = 1 } }
    END { if (n != 16) { print n " lines"; bad = 1 } exit bad }' "$out")
check "... T=8 --segment=2: Slurm's ranks used as they are, TP group 0 on node1+node3 (b1), 1 on node2+node4 (b2), rank / K = SLURM_NODEID, DTRAIN_NODE_ORDER=block-rank (exit $RC)${problems:+: $problems}" \
  eval '[ "$RC" -eq 0 ] && [ -z "$problems" ] &&
    grep -q "^dtrain: node order: Slurm.s node ranks by base block (TopologyParam=BlockAsNodeRank): node1 node3 node2 node4 " "$err"'
diag_file "$err"
run_client "$out" "$err" srun -N4 --segment=2 --ntasks-per-node=4 --mpi=pmi2 --dtrain-tp=8 -o "$D/rank.%t" "$launch" --print
cat "$D"/rank.[0-9]* >"$D/rank.out" 2>/dev/null
check "... and its PMI2 bootstrap, comparing the TP members' blocks, succeeds (exit $RC)" \
  [ "$RC" -eq 0 -a "$(grep -c '^rank=.* placed_by=spank ' "$D/rank.out")" -eq 16 ]
[ "$RC" -eq 0 ] || diag_file "$err"
done_testing
