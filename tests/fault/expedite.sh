#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Slurm's expedited requeue (sbatch --requeue=expedite; Slurm 25.11 and
# later, here 26.05) and dtrain-launch --job-exit, under a real local Slurm
# (scripts/local-cluster, 3 nodes, the dtrain plugin, RequeueExit=75,
# SlurmctldParameters=enable_expedited_requeue, requeue delay 10 s, and a
# site Epilog that fails on a node the test marked broken: the stand-in for
# dtrain-health --epilog finding a broken GPU, tests/health/test_cluster.sh).
# Every job is the documented pattern, srun STEP; exec dtrain-launch
# --job-exit $?, with a step whose end is the fault (a task killed: 137):
#  - a node fault: the job's second node drained while the job runs (as a
#    health check drains it) and broken for its epilog, a task killed: the
#    fault line says "requeued, expedited", the job is requeued expedited
#    and starts again at once (no requeue delay) on the healthy nodes, ahead
#    of a pending job of higher priority that wants the same nodes;
#  - a task killed on healthy nodes: a plain requeue asked by dtrain (an
#    expedited one would be held, as a control job without dtrain shows:
#    REQUEUE_HOLD, priority 0): COMPLETED after one requeue, never held;
#  - bad input (exit 2), and the restart budget spent (exit 1): FAILED,
#    neither requeued nor held (the job's requeue turned off);
#  - the site's key off (DTRAIN_EXPEDITED_REQUEUE=0, the plugin's
#    expedited_requeue=no) with a drained node: a plain requeue.
# On a Slurm without the expedited requeue (22.05, 24.11): SKIP.
. "$abs_top_srcdir/tests/tap.sh"
. "$abs_top_srcdir/tests/slurm/lib.sh"
need_plugin
launch=$abs_top_builddir/launcher/dtrain-launch
# configure's test of slurm.h (EXPEDITED_REQUEUE): the Slurm this build and its clusters use
grep -q '^#define DTRAIN_SLURM_EXPEDITED_REQUEUE 1' "$abs_top_builddir/config.h" ||
  skip_all "$(slurmctld -V 2>/dev/null || echo "this build's Slurm") has no expedited requeue (sbatch --requeue=expedite: Slurm 25.11 and later)"

new_cluster_dir expedite; d=$LC_NEW
mkdir -p "$d/broken"
# the site's epilog: fails on a node marked broken (Slurm then drains it,
# "Epilog error", and an expedited job goes on at once)
cat >"$d/epilog" <<EOF
#!/bin/sh
[ ! -e $d/broken/\$SLURMD_NODENAME ] || { echo "\$SLURMD_NODENAME is broken" >&2; exit 1; }
exit 0
EOF
chmod 755 "$d/epilog"
cat >"$d/extra.conf" <<EOF
SlurmctldParameters=enable_expedited_requeue
SchedulerParameters=nohold_on_prolog_fail,bf_interval=1,sched_interval=2
Epilog=$d/epilog
EOF
check_cluster_start "a 3-node cluster with the dtrain plugin, RequeueExit=75, enable_expedited_requeue and a site epilog starts" \
  "$d" --nodes 3 --cpus-per-node 4 --topology-all "$fixtures/hgx-a100-4gpu.xml" --plugin "$plugin" \
  --plugin-args "max_tp=8" --requeue-delay 10 --slurm-conf-extra "$d/extra.conf"
idle="node1 idle node2 idle node3 idle "
wait_for 60 sinfo_is "$d" "%N %t" "$idle" || diag "the nodes are not all idle: $(in_cluster "$d" sinfo -h -N -o '%N %t')"

# submit NAME STEP-STATUS [SBATCH-ARGS...]: NAME.sbatch (with the line
# $script_env first, when set), whose first run
# waits for NAME.go (60 s at most), then runs a step that ends with
# STEP-STATUS on every node (137: a task killed) and exits as
# dtrain-launch --job-exit maps it; a later run waits for NAME.done, then
# exits 0.  Each run prints "run R on NODES at T" (T: the wall clock).
submit() {
  local name=$1 status=$2
  shift 2
  {
    echo '#!/bin/bash'
    [ -z "${script_env:-}" ] || echo "$script_env"
    echo 'echo "run ${SLURM_RESTART_COUNT:-0} on $SLURM_JOB_NODELIST at $(date +%s.%N)"'
    printf 'if [ "${SLURM_RESTART_COUNT:-0}" -ge 1 ]; then\n'
    printf '  for i in $(seq 120); do [ -e %q ] && exit 0; sleep 0.5; done; exit 0\nfi\n' "$d/$name.done"
    printf 'for i in $(seq 120); do [ -e %q ] && break; sleep 0.5; done\n' "$d/$name.go"
    if [ "$status" = 137 ]; then
      echo 'srun bash -c '\''kill -9 $$'\'
    else
      printf 'srun bash -c %q\n' "exit $status"
    fi
    echo 'rc=$?; echo "step ended $rc at $(date +%s.%N)"'
    printf 'exec %q --job-exit $rc\n' "$launch"
  } >"$d/$name.sbatch"
  in_cluster "$d" sbatch --parsable --open-mode=append -o "$d/$name.out" "$@" "$d/$name.sbatch" 2>"$d/$name.err"
}
has() { grep -q -e "$2" "$d/$1.out"; }
state_is() { [ "$(job_field "$d" "$1" JobState)" = "$2" ]; }
# run_started NAME R: NAME's run R has begun.
run_started() { has "$1" "^run $2 on "; }
# pending_s NAME: from the first run's step end to the second run's start, in seconds.
pending_s() {
  awk '/^step ended/ && !e { e = $NF } /^run 1 on/ && !s { s = $NF } END { if (e && s) printf "%.2f", s - e; else print "?" }' "$d/$1.out"
}
resume() { rm -f "$d/broken/$1"; in_cluster "$d" scontrol update nodename="$1" state=resume >/dev/null 2>&1; }

# ---- a node fault: expedited, ahead of a job of higher priority
node=$(submit node 137 -N2 --exclusive --requeue=expedite --dtrain-max-restarts=3)
check "node fault: a job submitted (-N2 --exclusive --requeue=expedite)" [ -n "$node" ]
wait_for 60 state_is "$node" RUNNING || diag "node: job $node is $(job_field "$d" "$node" JobState)"
check "node fault: scontrol shows ExpeditedRequeue=Yes" \
  eval 'in_cluster "$d" scontrol show job "$node" | grep -q "ExpeditedRequeue=Yes"'
# a job of higher priority that wants two whole nodes: only one is free
rival=$(in_cluster "$d" sbatch --parsable -N2 --exclusive -o /dev/null --wrap "sleep 1" 2>"$d/rival.err")
in_cluster "$d" scontrol update jobid="$rival" priority=1000000 >/dev/null 2>&1
wait_for 30 state_is "$rival" PENDING
nodes=$(in_cluster "$d" scontrol show hostnames "$(job_field "$d" "$node" NodeList)" | tr '\n' ' ')
second=$(echo "$nodes" | awk '{ print $2 }')
diag "node fault: job $node runs on $nodes; job $rival (priority $(job_field "$d" "$rival" Priority) against $(job_field "$d" "$node" Priority)) waits for 2 nodes"
# the health check's verdict on the second node, while the job runs
touch "$d/broken/$second"
in_cluster "$d" scontrol update nodename="$second" state=drain reason="dtrain: xid: GPU 0000:0b:00.0: XID 79 (test)"
touch "$d/node.go"
wait_for 60 run_started node 1 || diag "node: no second run within 60 s: $(tail -5 "$d/node.out")"
check "node fault: the fault line says requeued, expedited, naming the drained node" \
  has node "^dtrain-launch: the job step ended with exit 137 (a task was killed by signal 9 .*): exit 75 (requeue, restart 1 of at most 3); requeued, expedited: $second is out of service (drained: dtrain: xid:"
check "node fault: the job runs again (Restarts=1) on the two healthy nodes, without $second" \
  eval 'state_is "$node" RUNNING && [ "$(job_field "$d" "$node" Restarts)" = 1 ] &&
        ! in_cluster "$d" scontrol show hostnames "$(job_field "$d" "$node" NodeList)" | grep -qx "$second"'
check "node fault: ahead of the queue: the job of higher priority still waits" state_is "$rival" PENDING
diag "node fault: job $rival: $(job_field "$d" "$rival" JobState) ($(job_field "$d" "$rival" Reason)); $second: $(in_cluster "$d" sinfo -h -n "$second" -o '%t %E')"
check "node fault: $second's epilog failed: Slurm logged it and keeps the node drained" \
  eval 'grep -q "epilog error on $second" "$d"/log/slurmctld.log && in_cluster "$d" sinfo -h -n "$second" -o %t | grep -q "^dr"'
diag "node fault: the step's end -> the requeued run's start: $(pending_s node) s (requeue delay 10 s)"
touch "$d/node.done"
wait_job "$d" "$node" 60 || diag "node: job $node did not end"
check "node fault: COMPLETED after one requeue" eval 'state_is "$node" COMPLETED && [ "$(job_field "$d" "$node" Restarts)" = 1 ]'
wait_job "$d" "$rival" 60
resume "$second"
wait_for 30 sinfo_is "$d" "%N %t" "$idle" || diag "the nodes are not all idle: $(in_cluster "$d" sinfo -h -N -o '%N %t')"

# ---- Slurm alone: an expedited job that exits 75 on healthy nodes is held
hold=$(in_cluster "$d" sbatch --parsable -N1 --requeue=expedite -o /dev/null --wrap "exit 75" 2>"$d/hold.err")
wait_for 60 state_is "$hold" REQUEUE_HOLD
check "without dtrain: an expedited job that exits 75 on healthy nodes is held (REQUEUE_HOLD, priority 0)" \
  eval 'state_is "$hold" REQUEUE_HOLD && [ "$(job_field "$d" "$hold" Priority)" = 0 ]'
in_cluster "$d" scancel "$hold"

# ---- a task killed on healthy nodes, bad input, the budget spent, the site's key off
crash=$(submit crash 137 -N1 --requeue=expedite --dtrain-max-restarts=3)
bad=$(submit bad 2 -N1 --requeue=expedite --dtrain-max-restarts=3)
spent=$(submit spent 137 -N1 --requeue=expedite --dtrain-max-restarts=0)
check "crash, bad input, budget spent: three jobs submitted (--requeue=expedite)" [ -n "$crash" -a -n "$bad" -a -n "$spent" ]
touch "$d/crash.go" "$d/bad.go" "$d/spent.go" "$d/crash.done"
wait_job "$d" "$crash" 90 || diag "crash: job $crash is $(job_field "$d" "$crash" JobState) ($(job_field "$d" "$crash" Reason))"
wait_job "$d" "$bad" 60 || diag "bad: job $bad is $(job_field "$d" "$bad" JobState)"
wait_job "$d" "$spent" 60 || diag "spent: job $spent is $(job_field "$d" "$spent" JobState)"
check "crash: the fault line says a plain requeue was asked, not expedited" \
  has crash "exit 75 (requeue, restart 1 of at most 3); requeued, not expedited: no node of the job is out of service"
check "crash: COMPLETED after one requeue, never held" \
  eval 'state_is "$crash" COMPLETED && [ "$(job_field "$d" "$crash" Restarts)" = 1 ] && run_started crash 1'
diag "crash: the step's end -> the requeued run's start: $(pending_s crash) s (a plain requeue of a job with the flag: no requeue delay)"
check "bad input: FAILED with exit 2, not requeued, its requeue turned off (Requeue=0)" \
  eval 'state_is "$bad" FAILED && [ "$(job_field "$d" "$bad" ExitCode)" = 2:0 ] &&
        [ "$(job_field "$d" "$bad" Restarts)" = 0 ] && [ "$(job_field "$d" "$bad" Requeue)" = 0 ]'
check "bad input: the line says why" \
  has bad "exit 2 (bad input): not requeued (retrying cannot help); the job's requeue is turned off"
check "budget spent: FAILED with exit 1, not requeued nor held" \
  eval 'state_is "$spent" FAILED && [ "$(job_field "$d" "$spent" ExitCode)" = 1:0 ] &&
        [ "$(job_field "$d" "$spent" Restarts)" = 0 ] && has spent "not requeued: the job was already restarted 0 times"'

off=$(script_env="export DTRAIN_EXPEDITED_REQUEUE=0" submit off 137 -N1 --requeue=expedite --dtrain-max-restarts=3)
wait_for 60 state_is "$off" RUNNING
offnode=$(job_field "$d" "$off" NodeList)
touch "$d/broken/$offnode"
in_cluster "$d" scontrol update nodename="$offnode" state=drain reason="dtrain: xid: GPU 0000:0b:00.0: XID 79 (test)"
touch "$d/off.go" "$d/off.done"
wait_job "$d" "$off" 90 || diag "off: job $off is $(job_field "$d" "$off" JobState)"
check "site key off (DTRAIN_EXPEDITED_REQUEUE=0), a drained node: a plain requeue, COMPLETED after one" \
  eval 'has off "requeued, not expedited (the site turned dtrain.s use of it off: expedited_requeue=no)" &&
        state_is "$off" COMPLETED && [ "$(job_field "$d" "$off" Restarts)" = 1 ]'
resume "$offnode"
done_testing
