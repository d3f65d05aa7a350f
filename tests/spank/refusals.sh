#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# dtrain.so refuses what cannot run, on a real local Slurm whose two nodes
# look like 8-GPU NVSwitch servers (saved hwloc topology dgx-h100.xml):
#  - sbatch with each bad value, or a shape that cannot be placed: exit
#    non-zero, one line starting "dtrain:", nothing queued;
#  - srun, before launching and (for what only the node knows) in slurmstepd;
#  - the site configuration on the plugstack line: unknown key, allow_pcie=no,
#    a site JSON file, topology_xml with %n.
. "$abs_top_srcdir/tests/tap.sh"
. "$abs_srcdir/lib.sh"
need_plugin

new_cluster_dir refusals
start_plugin_cluster "$LC_NEW" --topology-all "$fixtures/dgx-h100.xml" --plugin-args "max_tp=8"
out=$D/client.out err=$D/client.err

# ---- the options are in every client's --help
for client in sbatch salloc srun; do
  help=$(in_cluster "$D" "$client" --help 2>&1)
  names=$(printf '%s\n' "$help" | grep -oE -- '--dtrain-[a-z-]+' | sort -u | tr '\n' ' ')
  check "$client --help lists the 13 --dtrain-* options ($names)" \
    [ "$names" = "--dtrain-allow-pcie --dtrain-ckpt-dir --dtrain-cpu-bind --dtrain-dp --dtrain-gpu-vendor --dtrain-gpu-visibility --dtrain-max-restarts --dtrain-pp --dtrain-pp-in-domain --dtrain-spares --dtrain-straggler --dtrain-tp --dtrain-verbose " ]
  check "$client --help marks them [dtrain]" [ "$(printf '%s\n' "$help" | grep -c '\[dtrain\]')" -eq 13 ]
done

# ---- sbatch refusals: "EXPECTED-EXIT|ARGS"
refused=(
  "2|--dtrain-tp=0"
  "2|--dtrain-tp=-1"
  "2|--dtrain-tp=abc"
  "2|--dtrain-tp=3.5"
  "2|--dtrain-tp=1e9"
  "2|--dtrain-tp=99999999999999999999"
  "2|--dtrain-tp=65537"
  "2|--dtrain-pp=0"
  "2|--dtrain-pp=2.0"
  "2|--dtrain-dp=abc"
  "2|--dtrain-dp=-4"
  "2|--dtrain-max-restarts=-1"
  "2|--dtrain-max-restarts=10001"
  "2|--dtrain-ckpt-dir="
  "3|--dtrain-tp=16 -N1 --ntasks-per-node=16"
  "3|--dtrain-tp=3 -N2 --ntasks-per-node=8"
  "3|--dtrain-tp=4 --dtrain-pp=2 --dtrain-dp=3 -N2 --ntasks-per-node=8"
  "3|--dtrain-tp=4 --dtrain-pp=3 -n16"
  "3|--dtrain-tp=2 -N2 -n7"
  "3|--dtrain-tp=8 -N2 --ntasks-per-node=4"
)
i=0
for item in "${refused[@]}"; do
  want=${item%%|*} args=${item#*|} i=$((i + 1))
  # shellcheck disable=SC2086 # ARGS are several options
  run_client "$out" "$err" sbatch -J "refused$i" -o /dev/null $args --wrap true
  queued=$(in_cluster "$D" squeue -h -t all -n "refused$i" 2>/dev/null | wc -l)
  check "sbatch $args: exit $want, one line 'dtrain: ...', nothing queued (exit $RC, $queued queued)" \
    eval '[ "$RC" -eq "$want" ] && one_dtrain_line "$err" && [ ! -s "$out" ] && [ "$queued" -eq 0 ]'
  diag_file "$err"
done

# The same from #SBATCH lines of the script.
printf '#!/bin/sh\n#SBATCH --dtrain-tp=abc\ntrue\n' >"$D/bad.sbatch"
run_client "$out" "$err" sbatch -J refused-script -o /dev/null "$D/bad.sbatch"
check "#SBATCH --dtrain-tp=abc: exit 2, one dtrain line, nothing queued" \
  eval '[ "$RC" -eq 2 ] && one_dtrain_line "$err" && [ -z "$(in_cluster "$D" squeue -h -t all -n refused-script)" ]'

# What is accepted is queued (the refusals are not blanket).
run_client "$out" "$err" sbatch --parsable -J accepted --dtrain-tp=8 --dtrain-pp=2 -N2 --ntasks-per-node=8 \
  -o /dev/null --wrap true
check "sbatch --dtrain-tp=8 --dtrain-pp=2 -N2 --ntasks-per-node=8 is queued (exit $RC)" \
  eval '[ "$RC" -eq 0 ] && [ ! -s "$err" ] && grep -qE "^[0-9]+$" "$out"'
wait_job "$D" "$(cat "$out")" 60

# ---- srun: refused before launch
run_client "$out" "$err" srun --dtrain-tp=abc -n2 true
check "srun --dtrain-tp=abc: exit 2, one dtrain line (exit $RC)" eval '[ "$RC" -eq 2 ] && one_dtrain_line "$err"'
diag_file "$err"
run_client "$out" "$err" srun --dtrain-tp=4 -N2 -n6 true
check "srun --dtrain-tp=4 -N2 -n6: exit 3, one dtrain line (exit $RC)" eval '[ "$RC" -eq 3 ] && one_dtrain_line "$err"'
diag_file "$err"
# -N2 without -n: srun learns the task count (2) only once the step exists.
run_client "$out" "$err" srun -J late --dtrain-tp=2 -N2 true
check "srun --dtrain-tp=2 -N2 (1 task per node, torchrun style): refused before any task starts, showing the supported command (exit $RC)" \
  eval '[ "$RC" -ne 0 ] && head -n 1 "$err" | grep -q "^dtrain: T=2 with 1 task per node: .*srun --ntasks-per-node=GPUS_PER_NODE python train.py" && [ ! -s "$out" ]'
diag_file "$err"
# squeue may still list it as COMPLETING for a moment after srun returned.
job_gone() { [ -z "$(in_cluster "$D" squeue -h -n late)" ]; }
check "... and its job is gone (within 30 s)" wait_for 30 job_gone

# ---- refused in slurmstepd: what only the node knows
run_client "$out" "$err" srun -N1 -n16 --dtrain-tp=2 true
check "16 tasks on an 8-GPU node: the step fails with exit 3 (exit $RC)" [ "$RC" -eq 3 ]
check "... and the user reads why: 'dtrain: node1: ... 8 GPUs for 16 tasks ...'" \
  eval 'grep -q "^dtrain: node1: .*8 GPUs for 16 tasks" "$err"'
grep '^dtrain' "$err" | diag_file /dev/stdin
# Slurm lays -N2 -n6 out as 5+1 tasks: a TP group of 3 would span the nodes.
run_client "$out" "$err" srun -N2 -n6 --dtrain-tp=3 true
check "a step with different task counts per node fails with exit 3 (exit $RC)" [ "$RC" -eq 3 ]
check "... saying so on each node: 'dtrain: nodeN: ... same number of tasks on every node ...'" \
  eval '[ "$(grep -c "^dtrain: node[12]: .*same number of tasks on every node" "$err")" -eq 2 ]'
grep '^dtrain' "$err" | diag_file /dev/stdin

run_client "$out" "$err" srun -N2 --ntasks-per-node=2 --distribution=cyclic --dtrain-tp=2 true
check "cyclic task distribution fails with exit 3 (exit $RC)" [ "$RC" -eq 3 ]
check "... saying 'use --distribution=block'" grep -q "^dtrain: node[12]: .*use --distribution=block" "$err"
grep '^dtrain' "$err" | diag_file /dev/stdin

# ---- site configuration (plugstack.conf is read again by every client and step)
set_plugin_args "$D" "max_tp=8 colour=blue"
run_client "$out" "$err" sbatch -J badconf --dtrain-tp=2 -o /dev/null --wrap true
check "an unknown key on the plugstack line: sbatch fails naming it (exit $RC)" \
  eval '[ "$RC" -ne 0 ] && grep -q "dtrain: plugstack.conf: unknown key .colour." "$err" && [ -z "$(in_cluster "$D" squeue -h -t all -n badconf)" ]'
grep 'dtrain' "$err" | diag_file /dev/stdin

set_plugin_args "$D" "allow_pcie=no"
run_client "$out" "$err" sbatch -J nopcie --dtrain-tp=2 --dtrain-allow-pcie -o /dev/null --wrap true
check "allow_pcie=no: sbatch --dtrain-allow-pcie exits 2 with one dtrain line naming the setting (exit $RC)" \
  eval '[ "$RC" -eq 2 ] && one_dtrain_line "$err" && grep -q "allow_pcie=no" "$err"'

printf '{"spank": {"max_tp": 4}}\n' >"$D/site.json"
set_plugin_args "$D" "config=$D/site.json"
run_client "$out" "$err" sbatch -J sitefile --dtrain-tp=8 -N1 --ntasks-per-node=8 -o /dev/null --wrap true
check "config= site file with max_tp=4: sbatch --dtrain-tp=8 is refused (exit $RC)" \
  eval '[ "$RC" -eq 3 ] && one_dtrain_line "$err" && grep -q "(4 GPUs)" "$err"'

# topology_xml with %n: node1 reads a DGX-1 V100 file (its HWLOC_XMLFILE says
# DGX H100), node2's file is missing.
mkdir -p "$D/topo" && cp "$fixtures/dgx1-v100.xml" "$D/topo/node1.xml"
set_plugin_args "$D" "topology_xml=$D/topo/%n.xml"
run_client "$out" "$err" srun -w node1 -N1 -n8 --dtrain-tp=8 sh "$show_task"
check "topology_xml=.../%n.xml: node1 is placed on the DGX-1 of node1.xml (exit $RC)" \
  eval '[ "$RC" -eq 0 ] && grep -q "cuda=0 .*gpu=0000:06:00.0" "$out"'
run_client "$out" "$err" srun -w node2 -N1 -n2 --dtrain-tp=2 true
check "... node2 has no node2.xml: its step fails naming the file (exit $RC)" \
  eval '[ "$RC" -ne 0 ] && grep -q "^dtrain: node2: cannot read this node.s GPU topology: .*$D/topo/node2.xml" "$err"'
grep '^dtrain' "$err" | diag_file /dev/stdin

# Hostile topology files inside slurmstepd (issue 16): legal XML that
# crashes hwloc 2.9 unless refused (cpuset without complete_cpuset, hidden
# by spaces around '='), a FIFO, a link.  Each fails the step with one
# line naming the file; slurmd keeps running and the node takes the next job.
sed '0,/ complete_cpuset="[^"]*"/s///; 0,/ cpuset=/s// cpuset = /' "$fixtures/dgx1-v100.xml" >"$D/topo/node1.xml"
run_client "$out" "$err" srun -w node1 -N1 -n2 --dtrain-tp=2 true
check "a topology file that crashes hwloc: the step fails with one line (exit $RC)" \
  eval '[ "$RC" -ne 0 ] && grep -q "^dtrain: node1: cannot read this node.s GPU topology: .*node1.xml line [0-9]*: an <object> has a cpuset" "$err"'
grep '^dtrain' "$err" | diag_file /dev/stdin
rm -f "$D/topo/node1.xml" && mkfifo "$D/topo/node1.xml"
run_client "$out" "$err" srun -w node1 -N1 -n2 --dtrain-tp=2 true
check "a FIFO as topology file: the step fails at once with one line (exit $RC)" \
  eval '[ "$RC" -ne 0 ] && grep -q "^dtrain: node1: cannot read this node.s GPU topology: .*node1.xml is not a regular file (a FIFO)" "$err"'
rm -f "$D/topo/node1.xml" && ln -s "$fixtures/dgx1-v100.xml" "$D/topo/node1.xml"
run_client "$out" "$err" srun -w node1 -N1 -n2 --dtrain-tp=2 true
check "a link as topology file: refused, slurmstepd reads it as root (exit $RC)" \
  eval '[ "$RC" -ne 0 ] && grep -q "^dtrain: node1: cannot read this node.s GPU topology: .*node1.xml is a symbolic link" "$err"'
pid=$(slurmd_pid "$D" node1)
check "node1's slurmd is still running" eval '[ -n "$pid" ] && kill -0 "$pid"'
rm -f "$D/topo/node1.xml" && cp "$fixtures/dgx1-v100.xml" "$D/topo/node1.xml"
run_client "$out" "$err" srun -w node1 -N1 -n8 --dtrain-tp=8 sh "$show_task"
check "... and the next dtrain step on node1 runs (exit $RC)" \
  eval '[ "$RC" -eq 0 ] && grep -q "cuda=0 .*gpu=0000:06:00.0" "$out"'

# A node whose NVLink islands are pairs (4 PCIe A100s with bridges): T=4 is
# refused on the node, and runs across PCIe with --dtrain-allow-pcie.
cp "$fixtures/pcie-a100-bridged-pairs.xml" "$D/topo/node1.xml"
run_client "$out" "$err" srun -w node1 -N1 -n4 --dtrain-tp=4 true
check "T=4 on a node whose largest NVLink island is 2 GPUs: the step fails with exit 3 (exit $RC)" [ "$RC" -eq 3 ]
check "... saying so: 'dtrain: node1: T=4 is larger than the largest NVLink island (2 GPUs) ...'" \
  grep -q "^dtrain: node1: T=4 is larger than the largest NVLink island (2 GPUs)" "$err"
grep '^dtrain' "$err" | diag_file /dev/stdin
run_client "$out" "$err" srun -w node1 -N1 -n4 --dtrain-tp=4 --dtrain-allow-pcie sh "$show_task"
check "... with --dtrain-allow-pcie it runs, DTRAIN_ALLOW_PCIE=1 in every task (exit $RC)" \
  eval '[ "$RC" -eq 0 ] && [ "$(grep -cE " pcie=1( |$)" "$out")" -eq 4 ]'
check "... and the node warns once that TP traffic crosses PCIe" \
  eval '[ "$(grep -c "^dtrain: warning: node1: .*crosses PCIe" "$err")" -eq 1 ]'
grep '^dtrain' "$err" | diag_file /dev/stdin

# The first node's MASTER_PORT lock file (/run/dtrain/master-port-P.lock,
# issue 16): slurmstepd opens it as root, so a FIFO, a link or another
# user's file there is refused with one line (not locked, not hung on),
# and the step after its removal runs.  One port (the first of this
# cluster's own block, a block of ports_per_step=1), so that the lock file
# is known.
port=$(sed -n 's/.* master_ports=\([0-9]*\)-.*/\1/p' "$D/plugstack.conf" | head -n 1)
set_plugin_args "$D" "topology_xml=$D/topo/%n.xml master_ports=$port-$port ports_per_step=1"
lock=/run/dtrain/master-port-$port.lock
mkdir -p /run/dtrain
rm -f "$lock" && mkfifo "$lock"
run_client "$out" "$err" srun -w node1 -N1 -n2 --dtrain-tp=2 true
check "a FIFO as the MASTER_PORT lock file: the step fails with one line (exit $RC)" \
  eval '[ "$RC" -ne 0 ] && grep -q "^dtrain: node1: MASTER_PORT $port .*$lock is not a regular file: remove it" "$err"'
grep '^dtrain' "$err" | diag_file /dev/stdin
rm -f "$lock" && ln -s /etc/hostname "$lock"
run_client "$out" "$err" srun -w node1 -N1 -n2 --dtrain-tp=2 true
check "a link as the lock file: refused, not followed (exit $RC)" \
  eval '[ "$RC" -ne 0 ] && grep -q "^dtrain: node1: MASTER_PORT $port .*$lock is a symbolic link" "$err"'
rm -f "$lock" && touch "$lock" && chown nobody "$lock"
run_client "$out" "$err" srun -w node1 -N1 -n2 --dtrain-tp=2 true
check "another user's lock file: refused (exit $RC)" \
  eval '[ "$RC" -ne 0 ] && grep -q "^dtrain: node1: MASTER_PORT $port .*$lock belongs to uid [0-9]* with mode" "$err"'
rm -f "$lock"
run_client "$out" "$err" srun -w node1 -N1 -n2 --dtrain-tp=2 true
# (issue 32: a lock file is removed when its step ends, so none is left)
check "... once removed, the next step runs and leaves no lock file behind (exit $RC)" \
  eval '[ "$RC" -eq 0 ] && wait_for 30 eval "[ ! -e $lock ] && [ ! -L $lock ]"'

done_testing
