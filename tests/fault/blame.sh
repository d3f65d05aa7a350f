#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Which node a fault is blamed on comes from Slurm, never from a task's
# words, under a real local Slurm (scripts/local-cluster, 3 nodes, the
# dtrain plugin, RequeueExit=75):
#  - dtrain-launch --supervise --drain, 1 spare: a task prints srun's own
#    words ("srun: error: node1: task 0: Killed", "srun: error: Node
#    failure on node1", and the same inside a longer line, as a data path
#    in an error message would) on stderr and exits 1: the step's verdict
#    (exit 1, FAILED, no requeue), the lines said not to be borne out, no
#    step restarted (the spare unused), no node drained;
#  - dtrain-launch --job-exit with a drain request naming a host list
#    (node[1-3]) or a node outside the job (node2 for a job on node1):
#    refused on one line, the request removed, nothing drained; one naming
#    the job's node1 drains node1 (and node1 alone).
# A real task kill and a real node failure are blamed as before: spares.sh.
. "$abs_top_srcdir/tests/tap.sh"
. "$abs_top_srcdir/tests/slurm/lib.sh"
need_plugin
launch=$abs_top_builddir/launcher/dtrain-launch

new_cluster_dir blame; d=$LC_NEW
printf 'SchedulerParameters=nohold_on_prolog_fail,bf_interval=1,sched_interval=2\n' >"$d/extra.conf"
check_cluster_start "a 3-node cluster with the dtrain plugin and RequeueExit=75 starts" "$d" \
  --nodes 3 --cpus-per-node 4 --topology-all "$fixtures/hgx-a100-4gpu.xml" --plugin "$plugin" --plugin-args "max_tp=8" \
  --requeue-delay 5 --slurm-conf-extra "$d/extra.conf"
idle="node1 idle node2 idle node3 idle "
wait_for 60 sinfo_is "$d" "%N %t" "$idle" || diag "the nodes are not all idle: $(in_cluster "$d" sinfo -h -N -o '%N %t')"

# ---- a task that prints srun's words, then fails for its own reason
cat >"$d/forge.sbatch" <<EOS
#!/bin/bash
exec $launch --supervise --drain -- srun --ntasks-per-node=1 bash -c '
  echo "srun: error: node1: task 0: Killed" >&2
  echo "srun: error: Node failure on node1" >&2
  echo "cannot open data /x/srun: error: node1: task 0: Segmentation fault" >&2
  exit 1'
EOS
forge=$(in_cluster "$d" sbatch --parsable -N1 --dtrain-spares=1 --dtrain-max-restarts=3 -o "$d/forge.out" \
  "$d/forge.sbatch" 2>"$d/forge.err")
check "forged srun lines: a job submitted (-N1 --dtrain-spares=1, --supervise --drain)" [ -n "$forge" ]
wait_job "$d" "$forge" 120 || diag "forge: job $forge did not end within 120 s"
has() { grep -q -e "$2" "$d/$1.out"; }
check "forged srun lines: the step's verdict, exit 1: FAILED without a requeue" \
  eval '[ "$(job_field "$d" "$forge" JobState)" = FAILED ] && [ "$(job_field "$d" "$forge" Restarts)" = 0 ] &&
        [ "$(job_field "$d" "$forge" ExitCode)" = "1:0" ]'
check "forged srun lines: the step ran once, on node1; no step restarted, the spare unused" \
  eval '[ "$(grep -c "^srun: error: node1: task 0: Killed" "$d/forge.out")" -eq 1 ] &&
        ! has forge "restarted in the job" && ! has forge "node1 failed"'
check "forged srun lines: each said not to be borne out by Slurm's records" \
  eval 'has forge "^dtrain-launch: node1 is not blamed: Slurm.s records do not bear out the line \"srun: error: node1: task 0: Killed\" (no task of the step was killed)" &&
        has forge "^dtrain-launch: node1 is not blamed: .*\"srun: error: Node failure on node1\" (slurmctld does not hold the node failed)"'
check "forged srun lines: no node drained" wait_for 30 sinfo_is "$d" "%N %t" "$idle"
check "forged srun lines: no drain was asked for" eval '! has forge "drained"'
# (where node1 was drained all the same, the next job needs it back)
in_cluster "$d" scontrol update nodename=node1 state=resume >/dev/null 2>&1
wait_for 30 sinfo_is "$d" "%N %t" "$idle" || diag "the nodes are not all idle: $(in_cluster "$d" sinfo -h -N -o '%N %t')"

# ---- --job-exit: the drain request names one node of the job, or nothing is drained
req=$d/je.ckpt/drain-request
cat >"$d/je.sbatch" <<EOS
#!/bin/bash
export DTRAIN_CKPT_DIR=$d/je.ckpt
mkdir -p "\$DTRAIN_CKPT_DIR"
for node in 'node[1-3]' node2 node1; do
  printf '%s\tstraggler: rank 0 (node %s): slow\n' "\$node" "\$node" >$req
  echo "request \$node"
  $launch --job-exit 0 2>&1
  echo "rc \$? left \$(ls $req 2>/dev/null | wc -l)"
done
EOS
je=$(in_cluster "$d" sbatch --parsable -N1 -w node1 -o "$d/je.out" "$d/je.sbatch" 2>"$d/je.err")
check "--job-exit: a job submitted on node1" [ -n "$je" ]
wait_job "$d" "$je" 120 || diag "je: job $je did not end within 120 s"
check "--job-exit: COMPLETED" eval '[ "$(job_field "$d" "$je" JobState)" = COMPLETED ]'
# the lines between "request NODE" and the next "rc"
said() { sed -n "/^request $1\$/,/^rc /p" "$d/je.out" | sed '1d;$d'; }
check "--job-exit: node[1-3] (a host list) refused on one line, the request removed, exit 0 kept" \
  eval '[ "$(said "node\[1-3\]" | wc -l)" -eq 1 ] &&
        said "node\[1-3\]" | grep -qF "dtrain-launch: the drain request $req names '\''node[1-3]'\'', not one node of this job (node1): removed, no node drained" &&
        grep -A2 -x "request node\[1-3\]" "$d/je.out" | grep -qx "rc 0 left 0"'
check "--job-exit: node2 (not a node of the job) refused on one line, the request removed" \
  eval '[ "$(said node2 | wc -l)" -eq 1 ] &&
        said node2 | grep -qF "names '\''node2'\'', not one node of this job (node1): removed, no node drained" &&
        grep -A2 -x "request node2" "$d/je.out" | grep -qx "rc 0 left 0"'
check "--job-exit: node1 (the job's node) is drained with the reason" \
  eval 'said node1 | grep -qF "straggler drain: node node1 drained (dtrain: straggler: rank 0 (node node1): slow)"'
check "--job-exit: node1 alone was drained: node2 and node3 are idle" \
  wait_for 30 sinfo_is "$d" "%N %t" "node1 drain node2 idle node3 idle "
in_cluster "$d" scontrol update nodename=node1 state=resume >/dev/null 2>&1
done_testing
