#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# --dtrain-verbose reaches the trainer: under a real local Slurm
# (scripts/local-cluster: 2 slurmd on loopback, each node a saved 4-GPU HGX
# A100 topology, a hardware stand-in; the dtrain SPANK plugin), one job
# `sbatch --dtrain-tp=2 --dtrain-pp=2 --dtrain-verbose -N2 --ntasks-per-node=4`
# runs `srun --mpi=pmi2 dtrain-launch` (T=2 P=2 D=2, cpu backend) for 2
# steps.  The plugin exports DTRAIN_VERBOSE=1; rank 0 prints the explain of
# its groups (the model of common/dtrain_step_bytes.h for the run's real
# config: bytes per group, in all and per member, and the link each of its
# groups runs over as its communicators see it: TP and DP inside node 0 over
# shared memory, the pipeline's two stages on two nodes over TCP), and every
# rank a line of the bytes it sent per group in each step.  The sum over the
# 8 ranks of each group kind's measured bytes equals the sum of the model's
# group averages (each rank's group total / its size; ZeRO off: exact, to the
# rounding of the printed averages, under a byte a rank).
# The plugin also passes each task the slowest link of each of its groups
# (DTRAIN_GROUP_LINKS, from the node's topology and the site key net_gbps,
# here 50): every node's first task draws its node's islands and TP groups,
# rank 0 adds each group's predicted time (its bytes over that link) and
# their sum, and the links are those dtrain-topo --explain gives for the
# same shape on the same topology (the plugin plans only its node's share).
. "$abs_top_srcdir/tests/tap.sh"
. "$abs_top_srcdir/tests/slurm/lib.sh"
. "$abs_srcdir/lib.sh"
need_plugin
launch=$abs_top_builddir/launcher/dtrain-launch

start_gpu_cluster explain "max_tp=8 net_gbps=50"

{
  echo '#!/bin/bash'
  echo 'export OPENBLAS_NUM_THREADS=1'
  printf 'srun --mpi=pmi2 %q' "$launch"
  printf ' %q' --data "$d/tokens.bin" --layers 4 --channels 64 --heads 4 --vocab-size 256 --padded-vocab-size 256 \
    --max-seq-len 32 --seq 32 --batch 8 --steps 2 --lr 3e-3 --seed 11 --threads 1 --log-every 1 --backend cpu \
    --micro-batches 2
  echo
} >"$d/job.sbatch"
in_cluster "$d" timeout 150 sbatch --parsable --wait --dtrain-tp=2 --dtrain-pp=2 --dtrain-verbose -N 2 \
  --ntasks-per-node=4 -o "$d/job.out" "$d/job.sbatch" >/dev/null 2>"$d/job.err"
rc=$?
check "sbatch --dtrain-tp=2 --dtrain-pp=2 --dtrain-verbose -N2 --ntasks-per-node=4: srun --mpi=pmi2 dtrain-launch exits 0 (exit $rc)" \
  [ "$rc" -eq 0 ]
[ "$rc" -eq 0 ] || sed 's/^/# /' "$d/job.out" "$d/job.err" | head -20
grep 'explain:' "$d/job.out" | sed 's/^/# /'
check "rank 0 explains its groups: T=2 P=2 D=2, ZeRO-0" grep -q 'explain: T=2 P=2 D=2, 4 layers, C=64.*ZeRO-0' "$d/job.out"
check "rank 0's TP group of 2 runs over shared memory (both on node 0)" \
  grep -Eq 'explain: TP +group of 2: [0-9]+ bytes in all, [0-9]+ per member, over shared memory;' "$d/job.out"
check "rank 0's DP group of 2 runs over shared memory" \
  grep -Eq 'explain: DP +group of 2: [0-9]+ bytes in all, [0-9]+ per member, over shared memory;' "$d/job.out"
check "rank 0's pipeline (stage 1 on the other node) runs over TCP" \
  grep -Eq 'explain: PP +group of 2: [0-9]+ bytes in all, [0-9]+ per member, over TCP;' "$d/job.out"
check "WORLD (8 ranks on 2 nodes) runs over shared memory + TCP" \
  grep -Eq 'explain: WORLD group of 8: [0-9]+ bytes in all, [0-9]+ per member, over shared memory \+ TCP;' "$d/job.out"

# The plan picture: each node's first task draws its node.
grep -E '^dtrain: [^ ]+: +(Islands|\+|\|)' "$d/job.out" | sed 's/^/# /'
for n in 0 1; do
  check "node $n's first task draws its islands and TP groups (ranks $((4 * n)).., GPUs 0-1 g0, 2-3 g1)" \
    sh -c "grep -q 'Islands and the TP groups of node $n (g<k>: its TP group k of T=2, ranks $((4 * n))+k\*T' '$d/job.out' &&
           grep -Eq '^dtrain: [^ ]+: +\| \[GPU0 g0\] \[GPU1 g0\] \[GPU2 g1\] \[GPU3 g1\] \|$' '$d/job.out'"
done
check "only the nodes' first tasks draw (2 pictures for 8 tasks)" \
  [ "$(grep -c 'Islands and the TP groups of node' "$d/job.out")" -eq 2 ]

# The links: the plugin's (every rank's verbose line) and dtrain-topo's for the same shape.
topo_out=$("$abs_top_builddir/topo/dtrain-topo" --xml "$fixtures/hgx-a100-4gpu.xml" --tp 2 --pp 2 --nodes 2 \
  --tasks-per-node 4 --explain --net-gbps 50 --layers 4 --hidden 64 --seq 32 --vocab 256 --micro-batch 2 \
  --micro-batches 2 --act-bytes 4)
want=$(printf '%s\n' "$topo_out" | awk '$1 ~ /^(TP|PP|DP|WORLD)$/ && $3 == "GB" {
  for (i = 4; i <= NF && $i != "GB/s"; i++) ; kind = $4; for (k = 5; k < i - 1; k++) kind = kind " " $k
  printf "%s%s=%s:%s", n++ ? "," : "", $1, $(i - 1), kind }')
printf '# dtrain-topo --explain: %s\n' "$want"
check "dtrain-topo gives TP and DP NVLink 100 GB/s, PP and WORLD the site's network 50 GB/s" \
  [ "$want" = "TP=100:NVLink,PP=50:network,DP=100:NVLink,WORLD=50:network" ]
check "the plugin passes each of the 8 ranks those links (its node's share alone gives the whole plan's answer)" \
  [ "$(grep -c "slowest links $want\$" "$d/job.out")" -eq 8 ]
for g in TP PP DP WORLD; do
  line=$(grep -E "explain: $g +group of" "$d/job.out")
  check "rank 0's $g line: the slowest link and a predicted time = bytes per member / GB/s (to the printed 0.001 ms)" \
    awk -v l="$line" 'BEGIN {
      if (!match(l, /[0-9]+ per member/)) exit 1; per = substr(l, RSTART, RLENGTH) + 0
      if (!match(l, /slowest link [A-Za-z ]+ [0-9.]+ GB\/s: predicted [0-9.]+ ms$/)) exit 1
      t = substr(l, RSTART, RLENGTH); n = split(t, w, " ")
      gbps = w[n - 4] + 0; ms = w[n - 1] + 0
      d = ms - per / (gbps * 1e6); if (d < 0) d = -d; exit !(gbps > 0 && d <= 0.0006) }'
done
check "rank 0's total: the predicted communication per step is the sum of the four (to 0.002 ms)" \
  awk '/explain: (TP|PP|DP|WORLD) +group of/ { sub(/ ms$/, ""); s += $NF }
       /explain: predicted communication per step:/ { for (i = 1; i <= NF; i++) if ($i == "step:") t = $(i + 1); seen = 1 }
       END { d = s - t; if (d < 0) d = -d; exit !(seen && d <= 0.002) }' "$d/job.out"
grep ': rank [0-9]* step ' "$d/job.out" | sed 's/^/# /'
for s in 0 1; do
  check "step $s: each of the 8 ranks reports the bytes it sent per group" \
    [ "$(grep -Ec ": rank [0-7] step $s: sent TP " "$d/job.out")" -eq 8 ]
  check "step $s: each of the 8 ranks' lines ends with the predicted time of each of its groups" \
    [ "$(grep -Ec ": rank [0-7] step $s: sent TP .*; predicted TP [0-9.]+ ms, PP [0-9.]+ ms, DP [0-9.]+ ms, WORLD [0-9.]+ ms$" "$d/job.out")" -eq 8 ]
  for g in TP PP DP WORLD; do
    sums=$(grep -E ": rank [0-7] step $s: sent " "$d/job.out" |
      sed -n "s/.* $g \([0-9]*\) (group average \([0-9]*\)).*/\1 \2/p" |
      awk '{ m += $1; p += $2; n++ } END { printf "%d %d %d", n, m, p }')
    set -- $sums
    check "step $s, $g: the 8 ranks sent $2 bytes, the model's group averages add up to $3 (within a byte a rank)" \
      awk -v n="$1" -v m="$2" -v p="$3" 'BEGIN { d = m - p; if (d < 0) d = -d; exit !(n == 8 && m > 0 && d <= n) }'
  done
done
done_testing
