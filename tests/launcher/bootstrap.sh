#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# dtrain-launch under a real local Slurm (scripts/local-cluster: munged,
# slurmctld, 2 slurmd on loopback): the PMI2 bootstrap of 16 tasks on 2 nodes
# with T=4 P=2 (D=2), without the SPANK plugin (the launcher plans) and with
# it; every member of each group holds the same id, groups differ, ranks and
# coordinates follow the rank order; a child PROGRAM sees the documented
# variables and its TP group connects through the inherited sockets; the
# failure paths (no PMI2, refused shape, fence timeout, a task failing alone).
. "$abs_top_srcdir/tests/tap.sh"
. "$abs_top_srcdir/tests/slurm/lib.sh"
need_cluster_tools
command -v python3 >/dev/null 2>&1 || skip_all "python3 not installed (apt-get install python3)"

launch=$abs_top_builddir/launcher/dtrain-launch
checker=$abs_srcdir/check_bootstrap.py
shape=(-N2 -n16 --ntasks-per-node=8 --mpi=pmi2)

# step DIR NAME SRUN-ARGS...: run srun on DIR's cluster, stdout in
# DIR/NAME.out, stderr in DIR/NAME.err; sets $rc.
step() {
  local d=$1 name=$2
  shift 2
  in_cluster "$d" timeout 120 srun "$@" >"$d/$name.out" 2>"$d/$name.err"
  rc=$?
}

# verified DESC CHECKER-ARGS...: one test point from check_bootstrap.py.
verified() {
  local desc=$1 out
  shift
  if out=$(python3 "$checker" "$@" 2>&1); then pass "$desc"; else fail "$desc"; printf '%s\n' "$out" | sed 's/^/# /'; fi
}

# show_err FILE...: after a failed step, its messages (not the JSON lines).
show_err() { [ "$rc" -eq 0 ] || cat "$@" 2>/dev/null | grep -v '^{' | sed 's/^/# /' | head -20; }

new_cluster_dir launcher; d=$LC_NEW
check_cluster_start "a 2-node cluster without the dtrain plugin starts" "$d"

# ---- the launcher plans: 16 tasks, T=4 P=2
# srun cuts output lines longer than 1 KiB: one output file per task.
step "$d" json "${shape[@]}" -o "$d/json.%t" "$launch" --json --tp 4 --pp 2
check "srun -N2 -n16 --mpi=pmi2 dtrain-launch --json --tp 4 --pp 2 exits 0" [ "$rc" -eq 0 ]
show_err "$d/json.err" "$d"/json.[0-9]*
verified "launcher's plan: ranks and coordinates right, one fence, every task holds WORLD's one id, each other group's leader its own" \
  report 4 2 2 8 launcher cpu "$d"/json.[0-9]*

step "$d" print "${shape[@]}" -o "$d/print.%t" "$launch" --print --tp 4 --pp 2
cat "$d"/print.[0-9]* >"$d/print.out"
lines=$(grep -c '^rank=.* placed_by=launcher backend=cpu fences=1 bootstrap_us=[0-9]* ' "$d/print.out")
check "--print: 16 key=value lines, one fence each" [ "$rc" -eq 0 -a "$lines" -eq 16 ]
w=$(grep -o ' world.key=dt.w .* world.id=[^ ]*' "$d/print.out" | sed 's/.* world.id=//' | sort -u)
tp0=$(grep ' tp.key=dt.tp.0 ' "$d/print.out" | grep -c ' tp.rank=[1-3] tp.id= ')
check "--print: the 16 tasks print one WORLD id (the only one through PMI2), the 3 members of dt.tp.0 none yet" \
  [ "$(printf '%s\n' "$w" | grep -c '^cpu:')" -eq 1 -a "$(printf '%s\n' "$w" | wc -l)" -eq 1 -a "$tp0" -eq 3 ]
secrets=$(cat "$d/print.out" "$d"/json.[0-9]* | grep -cE 'cpu:[0-9.]+:[0-9]+:[0-9a-f]{32}')
check "--print and --json show no group's secret (the job's output is often readable by others): ids read cpu:ADDR:PORT:<secret>" \
  eval '[ "$secrets" -eq 0 ] && grep -q " world.id=cpu:[0-9.]*:[0-9]*:<secret>" "$d/print.out"'

step "$d" nccl "${shape[@]}" -o "$d/nccl.%t" "$launch" --json --tp 4 --pp 2 --comm-backend nccl
if cat "$d/nccl.err" "$d"/nccl.[0-9]* | grep -q "built without CUDA/NCCL"; then
  skip_test "built without CUDA/NCCL: the nccl backend's ids are not exchanged"
else
  show_err "$d/nccl.err" "$d"/nccl.[0-9]*
  verified "--comm-backend nccl: ncclGetUniqueId ids, WORLD's in every task, the pairs' in their leaders, none for TP/PP/DP (split)" \
    report 4 2 2 8 launcher nccl "$d"/nccl.[0-9]*
fi

# ---- a child PROGRAM: documented variables, inherited listening sockets
step "$d" child "${shape[@]}" -o "$d/child.%t" "$launch" --tp 4 --pp 2 -- python3 "$checker" child
check "dtrain-launch -- PROGRAM exits 0" [ "$rc" -eq 0 ]
show_err "$d/child.err" "$d"/child.[0-9]*
verified "the child sees DTRAIN_COMM_* and the placement, no PMI_*, leaders' sockets listen, WORLD connects" \
  children "$d"/child.[0-9]* 4 2 2

# ---- the trainer (no PROGRAM: dtrain-rank): one task; 2 tasks at T=2 whose
# trainer executes itself again to switch GEMM kernels, the bootstrap kept;
# 16 tasks build their communicators and refuse a model that does not split
# (tests/parallel runs the layouts)
printf 'a tiny corpus for a tiny model. %.0s' $(seq 64) >"$d/corpus.txt"
"$abs_top_builddir/runtime/dtrain-tokenize" "$d/corpus.txt" "$d/tokens.bin" >/dev/null 2>&1
trainer=(--data "$d/tokens.bin" --layers 1 --channels 32 --heads 2 --batch 2 --seq 16 --steps 2 --log-every 1)
step "$d" trainer -N1 -n1 --mpi=pmi2 "$launch" "${trainer[@]}"
check "one task: dtrain-launch runs the trainer with its flags (2 steps)" \
  [ "$rc" -eq 0 -a "$(grep -c '^step  *[01]/2 | loss' "$d/trainer.out")" -eq 2 ]
show_err "$d/trainer.err"
# a core OpenBLAS does not pick by itself here, so that dtrain must switch:
# Sandybridge (any x86-64 CPU that runs the suite has AVX), or Prescott
# where OpenBLAS's own choice is Sandybridge (on a CPU OpenBLAS 0.3.21 does
# not know, its own choice is Prescott: "chosen by dtrain over OpenBLAS's
# Prescott" in the first run's line)
own=$(sed -n "s/^dtrain-launch: kernels cpu: .*, \([A-Za-z0-9]*\) kernels (chosen by OpenBLAS.*/\1/p; s/.*chosen by dtrain over OpenBLAS's \([A-Za-z0-9]*\).*/\1/p" "$d/trainer.out" | head -n 1)
core=Sandybridge; [ "$own" != Sandybridge ] || core=Prescott
step "$d" switched -N1 -n2 --mpi=pmi2 --export=ALL,DTRAIN_BLAS_CORE=$core "$launch" --tp 2 "${trainer[@]}"
switched() {
  [ "$rc" -eq 0 ] && [ "$(grep -c '^step  *[01]/2 | loss' "$d/switched.out")" -eq 2 ] &&
    grep -q "^dtrain-launch: kernels cpu: .*$core kernels (chosen by dtrain" "$d/switched.out"
}
check "2 tasks, T=2, DTRAIN_BLAS_CORE=$core (OpenBLAS's own: ${own:-not said}): the trainer switches kernels by executing again and trains" switched
show_err "$d/switched.err"
step "$d" trainer16 "${shape[@]}" "$launch" --tp 4 --pp 2 "${trainer[@]}"
check "16 tasks, T=4 for a model of 2 heads: exit 2, every task says T must divide the heads" \
  [ "$rc" -eq 2 -a "$(grep -c 'T=4 does not divide the 2 attention heads' "$d/trainer16.err")" -eq 16 ]

# ---- failures
step "$d" nopmi -N1 -n2 --mpi=none "$launch" --print
n=$(grep -c '^dtrain-launch: not started by srun --mpi=pmi2 (no PMI2 environment): run it as `srun --mpi=pmi2 dtrain-launch ...`$' "$d/nopmi.err")
check "under srun without --mpi=pmi2: exit 2 and how to launch, from each task" [ "$rc" -eq 2 -a "$n" -eq 2 ]

step "$d" uneven -N2 -n5 --mpi=pmi2 "$launch" --print
check "5 tasks on 2 nodes (uneven): exit 3 from every task, asks for --ntasks-per-node" \
  [ "$rc" -eq 3 -a "$(grep -c 'different task counts per node.*--ntasks-per-node' "$d/uneven.err")" -eq 5 ]

step "$d" shape "${shape[@]}" "$launch" --print --tp 4 --pp 2 --dp 4
check "T*P*D unlike the task count: exit 3 from every task" [ "$rc" -eq 3 -a "$(grep -c 'T\*P\*D' "$d/shape.err")" -eq 16 ]

step "$d" timeout -N2 -n2 --mpi=pmi2 bash -c \
  'if [ "$SLURM_PROCID" = 1 ]; then exit 0; fi; exec "$0" --timeout 2 --print' "$launch"
check "a task that never reaches the fence: the others exit 75 (requeue) after --timeout, saying why" \
  [ "$rc" -eq 75 -a "$(grep -c 'PMI2_KVS_Fence did not return within 2 s' "$d/timeout.err")" -eq 1 ]

step "$d" alone -N2 -n4 --ntasks-per-node=2 --mpi=pmi2 bash -c \
  'if [ "$SLURM_PROCID" = 1 ]; then set -- --comm-iface no-such-if0; fi; exec "$0" --timeout 100 --print "$@"' "$launch"
check "a task failing alone (no interface) says why and ends the step, not a fence timeout or a requeue" \
  [ "$rc" -ne 0 -a "$rc" -ne 75 -a "$(grep -c "rank 1: --comm-iface: interface 'no-such-if0'" "$d/alone.err")" -ge 1 \
    -a "$(grep -c 'did not return within' "$d/alone.err")" -eq 0 ]

# The launcher's CPU-only plan reads this node's CPUs (without I/O devices
# or NVML), honouring HWLOC_XMLFILE as hwloc does: a file that is not there
# fails every task saying so (tests/topo checks the CPUs such a load gives).
step "$d" badxml "${shape[@]}" --export=ALL,HWLOC_XMLFILE="$d/no-such-topology.xml" "$launch" --print --tp 4 --pp 2
check "the launcher's plan reads this node's topology: HWLOC_XMLFILE naming no file is exit 1 from every task, saying so" \
  [ "$rc" -eq 1 -a "$(grep -c "reading this node's topology: .*no-such-topology.xml" "$d/badxml.err")" -eq 16 ]
show_err "$d/badxml.err"

lc stop --dir "$d" >/dev/null 2>&1

# ---- with the dtrain SPANK plugin: its placement, checked by the launcher
if why=$(plugin_unusable); then
  for i in 1 2 3 4 5; do skip_test "$why"; done
else
  new_cluster_dir plugin; dp=$LC_NEW
  out=$(lc start --dir "$dp" --plugin "$plugin" 2>&1)
  rc=$?
  if [ "$rc" -ne 0 ]; then
    fail "a cluster with the dtrain plugin starts"
    printf '%s\n' "$out" | sed 's/^/# /'
  else
    step "$dp" json "${shape[@]}" --dtrain-tp=4 --dtrain-pp=2 -o "$dp/json.%t" "$launch" --json
    check "with the plugin: srun --dtrain-tp=4 --dtrain-pp=2 dtrain-launch --json exits 0" [ "$rc" -eq 0 ]
    show_err "$dp/json.err" "$dp"/json.[0-9]*
    verified "with the plugin: its placement is used (placed_by=spank), each group's members hold the same id" \
      report 4 2 2 8 spank cpu "$dp"/json.[0-9]*
    step "$dp" mismatch "${shape[@]}" --dtrain-tp=4 --dtrain-pp=2 "$launch" --print --tp 2
    check "with the plugin: --tp 2 against --dtrain-tp=4 is exit 2 saying so" \
      [ "$rc" -eq 2 -a "$(grep -c -- '--tp 2 disagrees with DTRAIN_TP=4' "$dp/mismatch.err")" -eq 16 ]
    # The plugin placed: the launcher loads no topology at all (the same
    # missing HWLOC_XMLFILE that fails the launcher's own plan above).
    step "$dp" noload "${shape[@]}" --dtrain-tp=4 --dtrain-pp=2 --export=ALL,HWLOC_XMLFILE="$dp/no-such-topology.xml" \
      -o "$dp/noload.%t" "$launch" --json
    check "with the plugin: the launcher loads no topology (HWLOC_XMLFILE naming no file in the task: exit 0)" [ "$rc" -eq 0 ]
    show_err "$dp/noload.err" "$dp"/noload.[0-9]*
    verified "with the plugin and no topology for the launcher: the plugin's placement (placed_by=spank)" \
      report 4 2 2 8 spank cpu "$dp"/noload.[0-9]*
  fi
fi
done_testing
