#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# GPU visibility and the rendezvous, on a real local Slurm with dtrain.so,
# one node a DGX-1 V100 (tests/fixtures/topology/dgx1-v100.xml, hybrid
# cube-mesh: at T=2 dtrain pairs GPUs 0+3, 1+2, 4+7, 5+6, so LOCAL_RANK
# order and GPU index order differ).  Each task prints what it got
# (tests/spank/show-task.sh), checked against `dtrain-topo --json`:
#  - --dtrain-gpu-visibility=all (the default): every task sees every GPU,
#    device LOCAL_RANK of CUDA_VISIBLE_DEVICES is its planned GPU;
#  - =one: only its planned GPU; the site default gpu_visibility=one;
#  - MASTER_ADDR (node1's NodeAddr) and MASTER_PORT (site range) in every task;
#    a port held by another step or program is refused on one line.
. "$abs_top_srcdir/tests/tap.sh"
. "$abs_top_srcdir/tests/spank/lib.sh"    # tests/slurm/lib.sh and set_plugin_args
need_plugin
show_task=$abs_top_srcdir/tests/spank/show-task.sh
topo=$abs_top_builddir/topo/dtrain-topo

new_cluster_dir gpuorder; D=$LC_NEW
check_cluster_start "a 2-node DGX-1 cluster with dtrain.so is up" "$D" --nodes 2 --cpus-per-node 16 \
  --topology-all "$fixtures/dgx1-v100.xml" --plugin "$plugin" --plugin-args "max_tp=8"
range=$(grep -o 'master_ports=[0-9]*-[0-9]*' "$D/plugstack.conf")
lo=${range#master_ports=}; lo=${lo%-*}

# planned LOCAL: dtrain-topo's GPU index for local rank LOCAL at T=2, 8 tasks.
"$topo" --xml "$fixtures/dgx1-v100.xml" --tp 2 --tasks-per-node 8 --json >"$D/plan.json"
planned=$(python3 -c 'import json,sys; print(",".join(str(t["gpu"]) for t in json.load(open(sys.argv[1]))["plan"]["tasks"]))' "$D/plan.json")
check "dtrain-topo --json: at T=2 the DGX-1's planned GPUs by local rank are not 0..7 ($planned)" \
  [ -n "$planned" -a "$planned" != "0,1,2,3,4,5,6,7" ]

# field FILE NAME RANK: NAME's value on RANK's line.
field() { awk -v r="$3" -v k="$2" '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = substr($i, length(kv[1]) + 2) }
  if (v["rank"] == r) print v[k] }' "$1"; }

in_cluster "$D" timeout 60 srun -w node1 -N1 -n8 --dtrain-tp=2 sh "$show_task" >"$D/all.txt" 2>"$D/all.err"
check "srun -n8 --dtrain-tp=2 on the DGX-1 runs (exit $?)" [ "$(wc -l <"$D/all.txt")" -eq 8 ]
bad=""
for r in 0 1 2 3 4 5 6 7; do
  want=$(echo "$planned" | cut -d, -f$((r + 1)))
  vis=$(field "$D/all.txt" visible $r) dev=$(field "$D/all.txt" device $r)
  got=$(echo "$vis" | cut -d, -f$((r + 1)))
  [ "$dev" = "$r" ] && [ "$got" = "$want" ] && [ "$(field "$D/all.txt" vis $r)" = all ] || bad="$bad rank $r: $vis device $dev;"
done
check "all (default): CUDA_VISIBLE_DEVICES lists every GPU and entry LOCAL_RANK is dtrain-topo's GPU for that rank ($(field "$D/all.txt" visible 0))${bad:+:$bad}" \
  [ -z "$bad" ]
check "all: every task of the node sees the same list, each GPU once" \
  eval '[ "$(sed -n "s/.* visible=\([^ ]*\) .*/\1/p" "$D/all.txt" | sort -u | wc -l)" -eq 1 ] &&
        [ "$(field "$D/all.txt" visible 0 | tr , "\n" | sort -u | wc -l)" -eq 8 ]'

in_cluster "$D" timeout 60 srun -w node1 -N1 -n8 --dtrain-tp=2 --dtrain-gpu-visibility=one sh "$show_task" \
  >"$D/one.txt" 2>"$D/one.err"
bad=""
for r in 0 1 2 3 4 5 6 7; do
  want=$(echo "$planned" | cut -d, -f$((r + 1)))
  [ "$(field "$D/one.txt" visible $r)" = "$want" ] && [ "$(field "$D/one.txt" device $r)" = 0 ] || bad="$bad $r"
done
check "--dtrain-gpu-visibility=one: each task sees only its planned GPU, as device 0${bad:+ (wrong: ranks$bad)}" [ -z "$bad" ]

set_plugin_args "$D" "max_tp=8 gpu_visibility=one"
in_cluster "$D" timeout 60 srun -w node1 -N1 -n2 --dtrain-tp=2 sh "$show_task" >"$D/site.txt" 2>&1
in_cluster "$D" timeout 60 srun -w node1 -N1 -n2 --dtrain-tp=2 --dtrain-gpu-visibility=all sh "$show_task" >"$D/site2.txt" 2>&1
check "site gpu_visibility=one is the default, --dtrain-gpu-visibility=all overrides it" \
  eval '[ "$(field "$D/site.txt" vis 1)" = one ] && [ "$(field "$D/site2.txt" vis 1)" = all ] &&
        [ "$(field "$D/site2.txt" visible 1 | tr , "\n" | wc -l)" -eq 8 ]'
set_plugin_args "$D" "max_tp=8"

# ---- the rendezvous
in_cluster "$D" timeout 60 srun -N2 --ntasks-per-node=2 --dtrain-tp=2 sh "$show_task" >"$D/two.txt" 2>&1
masters=$(sed -n 's/.* master=\([^ ]*\) .*/\1/p' "$D/two.txt" | sort -u)
check "MASTER_ADDR:MASTER_PORT is the same in every task of both nodes: node1's NodeAddr and a port of the range ($masters, $range)" \
  eval '[ "$(echo "$masters" | wc -l)" -eq 1 ] && [ "${masters%:*}" = 127.0.0.1 ] &&
        [ "${masters#*:}" -ge "$lo" ] && [ "${masters#*:}" -le "$((lo + 63))" ]'
check "NODE_RANK/GROUP_RANK are the node's index, TORCHELASTIC_RESTART_COUNT 0" \
  eval '[ "$(field "$D/two.txt" node_rank 3)" = 1 ] && [ "$(field "$D/two.txt" group_rank 3)" = 1 ] &&
        [ "$(field "$D/two.txt" node_rank 0)" = 0 ] && [ "$(field "$D/two.txt" restart_count 0)" = 0 ]'

# A one-port range (one block of ports_per_step=1): a step that holds it
# makes the next one wait its turn (refused).
port=$((lo + 10))
set_plugin_args "$D" "max_tp=8 master_ports=$port-$port ports_per_step=1"
in_cluster "$D" timeout 120 srun -J hold -w node1 -N1 -n1 --dtrain-tp=1 \
  sh -c 'echo task-started; exec sleep 100' >"$D/hold.out" 2>&1 &
holder=$!
# the lock is taken in slurmstepd before the task runs: wait for the task's
# own line (squeue lists the step as running before slurmstepd claims it)
wait_for 30 grep -q '^task-started' "$D/hold.out"
# refused_step DESC PATTERN: a step on node1 fails with exit 1 and a line matching PATTERN.
refused_step() {
  in_cluster "$D" timeout 60 srun -w node1 -N1 -n1 --dtrain-tp=1 true >"$D/busy.out" 2>"$D/busy.err"
  local rc=$? want=$2
  check "$1: refused with exit 1 and one line (exit $rc)" eval '[ "$rc" -eq 1 ] && grep -q "^dtrain: node1: $want" "$D/busy.err"'
  grep '^dtrain' "$D/busy.err" | sed 's/^/#   /'
}
refused_step "a second step on the port another dtrain step holds" \
  "MASTER_PORT $port (block $port-$port of master_ports=$port-$port, ports_per_step=1, job [0-9]* step 0): port $port is held by another dtrain job step on this node"
hold_job=$(in_cluster "$D" squeue -h -n hold -o %i | head -n 1)
[ -n "$hold_job" ] && in_cluster "$D" scancel "$hold_job"
wait "$holder" 2>/dev/null
check "the holding step ends (scancel) and releases the port" \
  wait_for 30 eval '[ -z "$(in_cluster "$D" squeue -h -s -n hold)" ] && flock -n "/run/dtrain/master-port-$port.lock" true'
python3 -c 'import socket,sys,time; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(1); time.sleep(300)' "$port" &
listener=$!
wait_for 10 eval 'grep -q ":$(printf %04X "$port") .* 0A " /proc/net/tcp'
refused_step "a port another program listens on" \
  "MASTER_PORT $port .*port $port is taken on this node (Address already in use): another program uses it"
kill "$listener" 2>/dev/null; wait "$listener" 2>/dev/null
done_testing
