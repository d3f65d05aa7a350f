#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The comm layer under a real local Slurm (scripts/local-cluster: 2 slurmd
# on loopback): srun -N2 -n8 --mpi=pmi2 dtrain-launch --tp 2 --pp 2 --
# comm_probe.  dtrain-launch bootstraps WORLD's id in one PMI2 round and hands
# the groups to comm_probe, which builds every communicator
# (dtrain_comm_init_all: WORLD, then the other ids come over it)
# and all-reduces on WORLD, TP, PP and DP, broadcasts on WORLD and exchanges
# on the pipeline pairs.  Both "nodes" are this machine, but the host id is
# the Slurm node index, so the WORLD ring crosses between them over TCP
# (ranks 3->4 and 7->0) and stays in shared memory inside each; then again
# with DTRAIN_COMM_TRANSPORT=tcp (TCP everywhere).
. "$abs_top_srcdir/tests/tap.sh"
. "$abs_top_srcdir/tests/slurm/lib.sh"
need_cluster_tools

launch=$abs_top_builddir/launcher/dtrain-launch
probe=$abs_builddir/comm_probe
[ -x "$probe" ] || skip_all "comm_probe is not built (make check builds it)"

new_cluster_dir comm; d=$LC_NEW
check_cluster_start "a 2-node local cluster starts" "$d"

# run NAME ENV...: the probe on 8 tasks, 4 per node; output in $d/NAME.*
run() {
  local name=$1
  shift
  in_cluster "$d" env "$@" timeout 120 srun -N2 -n8 --ntasks-per-node=4 --mpi=pmi2 -o "$d/$name.%t" \
    "$launch" --tp 2 --pp 2 --timeout 60 -- "$probe" 2>"$d/$name.err"
  rc=$?
  cat "$d/$name".[0-9]* >"$d/$name.out" 2>/dev/null
  [ "$rc" -eq 0 ] || { cat "$d/$name.err" "$d/$name.out" | sed 's/^/# /' | head -20; }
}
# sum FIELD FILE: the sum of FIELD=N over the probe's lines
sum() { grep -o " $1=[0-9]*" "$2" | cut -d= -f2 | awk '{s += $1} END {print s + 0}'; }
lines() { grep -c "^comm_probe rank=.* world=ok tp=ok pp=ok dp=ok pairs=ok " "$1"; }

run auto DTRAIN_COMM_TRANSPORT=auto
check "srun -N2 -n8 dtrain-launch --tp 2 --pp 2 -- comm_probe exits 0" [ "$rc" -eq 0 ]
check "all 8 tasks: all-reduce right on WORLD, TP, PP, DP; broadcast on WORLD; sendrecv on the pipeline pairs" \
  [ "$(lines "$d/auto.out")" -eq 8 ]
check "tasks 0-3 report node 0 and tasks 4-7 node 1" \
  [ "$(grep -cE 'rank=[0-3] node=0 |rank=[4-7] node=1 ' "$d/auto.out")" -eq 8 ]
shm=$(sum world_shm "$d/auto.out"); tcp=$(sum world_tcp "$d/auto.out")
# the PP and DP groups' ids came over WORLD from their leaders (0->4 1->5
# 2->6 3->7, 0->2 1->3 4->6 5->7; the TP ones and the pipeline pairs' went
# over the ring or the same links): 8 point-to-point links, 16 TCP ends
check "the WORLD ring: TCP between the nodes (4 link ends), shared memory inside them (12), plus the 16 TCP ends of the 8 links the PP and DP ids came over: got $tcp and $shm" \
  [ "$tcp" -eq 20 -a "$shm" -eq 12 ]

run tcp DTRAIN_COMM_TRANSPORT=tcp
check "with DTRAIN_COMM_TRANSPORT=tcp: exits 0, all 8 tasks right" [ "$rc" -eq 0 -a "$(lines "$d/tcp.out")" -eq 8 ]
check "with DTRAIN_COMM_TRANSPORT=tcp: the WORLD ring is all TCP (16 link ends, plus the ids' 16)" \
  [ "$(sum world_tcp "$d/tcp.out")" -eq 32 -a "$(sum world_shm "$d/tcp.out")" -eq 0 ]

in_cluster "$d" timeout 60 srun -N1 -n1 "$probe" >"$d/bare.out" 2>"$d/bare.err"
rc=$?
check "comm_probe outside dtrain-launch: exit 2 saying how to run it" \
  [ "$rc" -eq 2 -a "$(grep -c 'dtrain-launch' "$d/bare.err")" -eq 1 ]

lc stop --dir "$d" >/dev/null 2>&1
done_testing
