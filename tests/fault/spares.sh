#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# In-job restart on spare nodes under a real local Slurm (scripts/local-cluster:
# munged, slurmctld, 3 slurmd on loopback, each node a 4-GPU HGX A100 board
# by its saved hwloc topology, a hardware stand-in; the dtrain SPANK plugin;
# RequeueExit=75, requeue delay 5 s).  Every job is the documented batch
# script for spares:
#     sbatch -N K --ntasks-per-node=2 --dtrain-spares=N ...
#     exec dtrain-launch --supervise -- srun --mpi=pmi2 --ntasks-per-node=2 dtrain-launch ...
# training the tiny model of cluster.sh (L=2 C=32 NH=4, T=16, batch 8, 24
# steps, ZeRO-1, a checkpoint every 4 steps) as T=2 x D=2 on 2 nodes, or
# T=2 on 1 node.
#  - --dtrain-spares negative, huge, not a number, without a fixed -N:
#    refused by sbatch with one line, exit 2; -N2 --dtrain-spares=1 gets 3 nodes;
#  - the reference: no fault;
#  - 1 spare, rank 1 (node1) killed at step 10, --drain: the step restarts
#    in the job on node2 + node3 (node1 excluded and drained with the
#    reason), COMPLETED without a requeue (Restarts=0), every loss equal to
#    the reference's bit for bit;
#  - 1 spare, a second kill after the in-job restart: no spare is left, so
#    the job is requeued (the fallback); the requeued run restarts in the
#    job again on its own spare, COMPLETED after 1 requeue, bit for bit;
#  - --dtrain-max-restarts=1, 2 spares, a rank killed in every step: one
#    in-job restart, then the budget is spent: FAILED, exit 1, the reason;
#  - 1 spare, node2's slurmd, slurmstepd and tasks killed (a node failure;
#    SlurmdTimeout 20 s: with 10 s, in one CI run on Slurm 24.11, node1 was
#    reported failed with node2, its slurmd probably late to the controller's
#    pings on the loaded machine): srun reports the node failure, the step restarts
#    in the job on node1 + node3, COMPLETED with Restarts=0, bit for bit.
. "$abs_top_srcdir/tests/tap.sh"
. "$abs_top_srcdir/tests/slurm/lib.sh"
need_plugin
launch=$abs_top_builddir/launcher/dtrain-launch
tokenize=$abs_top_builddir/runtime/dtrain-tokenize
steps=24 every=4

new_cluster_dir spares; d=$LC_NEW
cat "$abs_top_srcdir"/doc/*.md >"$d/corpus.txt"
"$tokenize" "$d/corpus.txt" "$d/tokens.bin" >/dev/null || { fail "dtrain-tokenize the docs"; done_testing; }
printf 'SchedulerParameters=nohold_on_prolog_fail,bf_interval=1,sched_interval=2\nSlurmdTimeout=20\n' >"$d/extra.conf"
check_cluster_start "a 3-node cluster with the dtrain plugin and RequeueExit=75 starts" "$d" \
  --nodes 3 --cpus-per-node 4 --topology-all "$fixtures/hgx-a100-4gpu.xml" --plugin "$plugin" --plugin-args "max_tp=8" \
  --requeue-delay 5 --slurm-conf-extra "$d/extra.conf"

# ---- bad input: refused by sbatch before anything is queued, one line, exit 2
printf '#!/bin/bash\ntrue\n' >"$d/true.sbatch"
for bad in "-N2 --dtrain-spares=-1:--dtrain-spares: '-1' is not a whole number (use an integer from 0 to 64)" \
           "-N2 --dtrain-spares=100000:--dtrain-spares: 100000 is out of range (use an integer from 0 to 64)" \
           "-N2 --dtrain-spares=two:--dtrain-spares: 'two' is not a whole number (use an integer from 0 to 64)" \
           "-N1-2 --dtrain-spares=1:--dtrain-spares=1 needs a fixed node count for the ranks: give -N K"; do
  args=${bad%%:*} says=${bad#*:}
  # shellcheck disable=SC2086
  in_cluster "$d" sbatch $args "$d/true.sbatch" >"$d/bad.out" 2>"$d/bad.err"
  rc=$?
  check "sbatch $args: exit 2 and one line ($(head -c 120 "$d/bad.err"))" \
    eval '[ "$rc" -eq 2 ] && [ "$(wc -l <"$d/bad.err")" -eq 1 ] && grep -qF -- "dtrain: $says" "$d/bad.err" && [ ! -s "$d/bad.out" ]'
done
check "nothing was queued by the refused submissions" eval '[ -z "$(in_cluster "$d" squeue -h -o %i)" ]'

trainer=(--data "$d/tokens.bin" --layers 2 --channels 32 --heads 4 --vocab-size 256 --padded-vocab-size 256
  --max-seq-len 16 --seq 16 --batch 8 --steps "$steps" --lr 3e-3 --grad-clip 1 --seed 7 --threads 1
  --log-every 0 --checkpoint-every "$every" --comm-timeout 5 --zero1 1)

# losses, same_losses, ended, has, event_time, kill_node: tests/fault/lib.sh
. "$abs_top_srcdir/tests/fault/lib.sh"
# submit NAME INJECT SUPERVISE-ARGS SBATCH-ARGS...: lib.sh's submit for a
# job under dtrain-launch --supervise: write NAME.sbatch and submit it;
# prints the job id.  Output NAME.out, metrics NAME.jsonl,
# checkpoints NAME.ckpt, timeline NAME.events.
submit() {
  local name=$1 inject=$2 sup=$3
  shift 3
  {
    echo '#!/bin/bash'
    echo 'export OPENBLAS_NUM_THREADS=1'
    printf 'export DTRAIN_FAULT_LOG=%q\n' "$d/$name.events"
    echo 'echo "job: start, restart ${SLURM_RESTART_COUNT:-0}, on $SLURM_JOB_NODELIST, spares ${DTRAIN_SPARES:-none}"'
    printf 'exec %q --supervise %s -- srun --mpi=pmi2 --ntasks-per-node=2 %q' "$launch" "$sup" "$launch"
    printf ' %q' "${trainer[@]}" "${trainer_more[@]}" --metrics "$d/$name.jsonl"
    [ -z "$inject" ] || printf ' --inject %q' "$inject"
    echo
  } >"$d/$name.sbatch"
  in_cluster "$d" sbatch --parsable --dtrain-tp=2 --dtrain-ckpt-dir="$d/$name.ckpt" --open-mode=append \
    -o "$d/$name.out" "$@" "$d/$name.sbatch" 2>"$d/$name.err"
}
# nodes_of NAME RESTART: the nodes of the ranks' events in run RESTART of NAME's timeline.
nodes_of() {
  sed -n "s/.*\"rank\": [0-9][0-9]*, \"node\": \"\([^\"]*\)\", \"step\": [-0-9]*, \"restart\": $2,.*/\1/p" \
    "$d/$1.events" 2>/dev/null | sort -u | tr '\n' ' '
}

base=$(submit base "" "" -N2 --ntasks-per-node=2)
spare=$(submit spare "kill:rank=1:step=10" --drain -N2 --ntasks-per-node=2 --dtrain-spares=1 --dtrain-max-restarts=3)
check "two jobs submitted (-N2 --dtrain-spares=1 --dtrain-max-restarts=3)" [ -n "$base" -a -n "$spare" ]
wait_job "$d" "$base" 240 || diag "base: job $base did not end within 240 s"
wait_job "$d" "$spare" 240 || diag "spare: job $spare did not end within 240 s"
check "reference: COMPLETED, $steps steps of metrics" \
  eval 'ended base "$base" COMPLETED 0 && [ "$(losses "$d/base.jsonl" | wc -l)" -eq "$steps" ]'

check "1 spare: sbatch -N2 --dtrain-spares=1 got 3 nodes, DTRAIN_SPARES=1 in the batch script" \
  eval '[ "$(job_field "$d" "$spare" NumNodes)" = 3 ] && has spare "job: start, restart 0, on node\[1-3\], spares 1"'
check "1 spare, rank 1 killed: COMPLETED without a requeue (Restarts=0)" ended spare "$spare" COMPLETED 0
check "1 spare: the first step ran on node1 and node2, not on the spare" eval '[ "$(nodes_of spare 0)" = "node1 node2 " ]'
check "1 spare: srun's line blames node1; the step restarts in the job on node2 and the spare node3" \
  has spare "^dtrain-launch: node1 failed (srun: error: node1: task 1: Killed): step restarted in the job on node2,node3 with spare node3 for node1 (the first left: [^)]*), restart 1 of at most 3 (0 spares left)"
check "1 spare: the restarted step's ranks ran on node2 and node3 only (node1 excluded)" \
  eval '[ "$(nodes_of spare 1)" = "node2 node3 " ]'
check "1 spare: node1 was drained with the reason" \
  eval 'in_cluster "$d" sinfo -h -n node1 -o "%t %E" | grep -q "^dr[a-z]* dtrain: job $spare: srun: error: node1: task 1: Killed"'
check "1 spare: the restarted step resumed from the checkpoint of step 8 (bootstrapped again through PMI2)" \
  has spare "resumed from $d/spare.ckpt/step-00000008 (written by T=2 P=1 D=2, ZeRO-1 on)"
check "1 spare: every step's loss equals the reference's, bit for bit" same_losses spare
t0=$(event_time spare inject)
t1=$(sed -n 's/^{"t": \([0-9.]*\), "event": "first_step".*"restart": 1,.*/\1/p' "$d/spare.events" | sort -n | head -n 1)
diag "1 spare: killed rank -> first resumed step $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }') s"
in_cluster "$d" scontrol update nodename=node1 state=resume >/dev/null 2>&1
wait_for 30 eval '! in_cluster "$d" sinfo -h -n node1 -o %t | grep -q drain' || diag "node1 is still drained"

# ---- the spare used up by a first fault: the second one requeues the job
# (kill at step 14 fires in every run whose restart count is 1: the second
# step of the first run, then the first step of the requeued one)
nospare=$(submit nospare "kill:rank=1:step=10,kill:rank=2:step=14:restart=1" "" -N2 --ntasks-per-node=2 \
  --dtrain-spares=1 --dtrain-max-restarts=3)
budget=$(submit budget "kill:rank=1:step=3:restart=any" "" -N1 --ntasks-per-node=2 --dtrain-spares=2 \
  --dtrain-max-restarts=1)
check "two more jobs submitted" [ -n "$nospare" -a -n "$budget" ]
wait_job "$d" "$nospare" 240 || diag "nospare: job $nospare did not end within 240 s"
wait_job "$d" "$budget" 240 || diag "budget: job $budget did not end within 240 s"
check "no spare left: COMPLETED after 1 requeue" ended nospare "$nospare" COMPLETED 1
check "no spare left: the second fault finds no spare and the job is requeued (exit 75)" \
  eval 'has nospare "^dtrain-launch: node3 failed (srun: error: node3: task 2: Killed) and no spare node is left (--dtrain-spares=1): not restarted in the job" &&
        has nospare "the job step ended with exit 137 (a task was killed by signal 9 .*): exit 75 (requeue, restart 2 of at most 3)"'
check "no spare left: the requeued run restarts in the job on its own spare" \
  eval '[ "$(grep -c "step restarted in the job on" "$d/nospare.out")" -eq 2 ] && has nospare "job: start, restart 1, on node\[1-3\]"'
check "no spare left: every step's loss equals the reference's, bit for bit" same_losses nospare

check "budget spent: FAILED without a requeue (--dtrain-max-restarts=1, 1 in-job restart)" ended budget "$budget" FAILED 0
check "budget spent: one in-job restart, then one line says why, and the job's exit code is 1" \
  eval '[ "$(grep -c "step restarted in the job on" "$d/budget.out")" -eq 1 ] &&
        has budget "exit 1 (not requeued: the job was already restarted 1 time (--dtrain-max-restarts=1))" &&
        [ "$(job_field "$d" "$budget" ExitCode)" = "1:0" ]'

# ---- a hung rank: every task exits 75, srun blames nobody; the neighbours'
# heartbeat names the hung rank's node, and the step restarts in the job
hang=$(submit hang "hang:rank=1:step=10" "" -N2 --ntasks-per-node=2 --dtrain-spares=1 --dtrain-max-restarts=3)
check "hung rank: a job submitted" [ -n "$hang" ]
wait_job "$d" "$hang" 240 || diag "hang: job $hang did not end within 240 s"
check "hung rank: COMPLETED without a requeue (Restarts=0)" ended hang "$hang" COMPLETED 0
check "hung rank: the heartbeat names rank 1's node1; the step restarts in the job on node2 and the spare node3" \
  has hang "^dtrain-launch: node1 failed (dtrain-launch: .*heartbeat: rank 1 (node node1, .*): step restarted in the job on node2,node3"
check "hung rank: every step's loss equals the reference's, bit for bit" same_losses hang
t0=$(event_time hang inject)
t1=$(sed -n 's/^{"t": \([0-9.]*\), "event": "first_step".*"restart": 1,.*/\1/p' "$d/hang.events" | sort -n | head -n 1)
diag "hung rank: hang -> first resumed step $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }') s"

# ---- a straggler with --dtrain-straggler=drain: its drain request names
# its node, which --supervise replaces by the spare (no requeue)
trainer_more=(--straggler-steps 3 --straggler-margin 20)
strag=$(submit strag "delay:rank=3:step=2:ms=1000:count=$steps" "" -N2 --ntasks-per-node=2 --dtrain-spares=1 \
  --dtrain-straggler=drain --dtrain-max-restarts=3)
trainer_more=()
check "straggler: a job submitted" [ -n "$strag" ]
wait_job "$d" "$strag" 240 || diag "strag: job $strag did not end within 240 s"
check "straggler: COMPLETED without a requeue (Restarts=0)" ended strag "$strag" COMPLETED 0
check "straggler: its drain request names node2; the step restarts in the job on node1 and the spare node3" \
  has strag "^dtrain-launch: node2 failed (straggler: rank 3 (node node2, .*): step restarted in the job on node1,node3"
check "straggler: the request is gone once handled" [ ! -e "$d/strag.ckpt/drain-request" ]
check "straggler: every step's loss equals the reference's, bit for bit" same_losses strag

# ---- a node failure with a spare (node2: not the batch script's node1)
node=$(submit node "delay:rank=0:step=0:ms=200:count=$steps" "" -N2 --ntasks-per-node=2 --dtrain-spares=1 \
  --dtrain-max-restarts=3)
for ((i = 0; i < 600; i++)); do
  [ -f "$d/node.ckpt/step-00000004/manifest.json" ] && break
  sleep 0.1
done
check "node failure: the job runs on node1 and node2 and has written the checkpoint of step 4" \
  eval '[ -f "$d/node.ckpt/step-00000004/manifest.json" ] && [ "$(nodes_of node 0)" = "node1 node2 " ]'
kill_node node2
wait_job "$d" "$node" 180 || diag "node: job $node did not end within 180 s"
check "node failure: COMPLETED without a requeue (Restarts=0: the job was not ended, sbatch got --no-kill)" \
  ended node "$node" COMPLETED 0
check "node failure: srun reports it, the step restarts in the job on node1 and the spare node3" \
  eval 'has node "^srun: error: Node failure on node2" &&
        has node "^dtrain-launch: node2 failed (srun: error: Node failure on node2): step restarted in the job on node1,node3"'
check "node failure: the restarted step's ranks ran on node1 and node3 only" eval '[ "$(nodes_of node 1)" = "node1 node3 " ]'
check "node failure: every step's loss equals the reference's, bit for bit" same_losses node
done_testing
