#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# dtrain-launch --job-exit STATUS: the batch script's exit code after its
# srun step, for every kind of status and restart budget, and its refusals;
# the refusals of --supervise (its runs are in spares.sh, under Slurm);
# dtrain-launch --node-report's line and refusals.
# No Slurm needed (the restart variables are set by hand).
. "$abs_top_srcdir/tests/tap.sh"
launch=$abs_top_builddir/launcher/dtrain-launch
[ -x "$launch" ] || skip_all "dtrain-launch is not built"
unset SLURM_RESTART_COUNT DTRAIN_MAX_RESTARTS DTRAIN_FAULT_LOG SLURM_JOB_ID SLURM_JOB_NODELIST DTRAIN_SPARES DTRAIN_INJOB_RESTARTS
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-test-cli.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

# job_exit WANT-CODE LINE-PATTERN ARGS...: run with the environment given
# before it (env NAME=VALUE ...), check its code and its stderr.
job_exit() {
  local want=$1 pattern=$2 rc
  shift 2
  "$@" 2>"$tmp/err"
  rc=$?
  [ "$rc" -eq "$want" ] || { diag "exit $rc, want $want: $(cat "$tmp/err")"; return 1; }
  if [ -z "$pattern" ]; then [ ! -s "$tmp/err" ]; else grep -q -e "$pattern" "$tmp/err"; fi ||
    { diag "stderr: $(cat "$tmp/err")"; return 1; }
}

check "status 0: exit 0, nothing said" job_exit 0 "" "$launch" --job-exit 0
check "status 1: exit 1, not requeued" job_exit 1 "exit 1 (an internal error): not requeued" "$launch" --job-exit 1
check "status 2: exit 2, not requeued" job_exit 2 "exit 2 (bad input): not requeued" "$launch" --job-exit 2
check "status 3: exit 3, not requeued" job_exit 3 "exit 3 (a refused job shape): not requeued" "$launch" --job-exit 3
check "status 75 on the first run: exit 75 (requeue, restart 1)" \
  job_exit 75 "exit 75 (a task detected a fault): exit 75 (requeue, restart 1)" "$launch" --job-exit 75
check "status 137 (a task killed): exit 75" \
  job_exit 75 "exit 137 (a task was killed by signal 9 (Killed)): exit 75" "$launch" --job-exit 137
check "status 143 after 2 of at most 3 restarts: exit 75 (restart 3 of at most 3)" \
  job_exit 75 "exit 75 (requeue, restart 3 of at most 3)" env SLURM_RESTART_COUNT=2 DTRAIN_MAX_RESTARTS=3 \
  "$launch" --job-exit 143
check "status 75 after 3 of at most 3 restarts: exit 1, the budget is spent" \
  job_exit 1 "exit 1 (not requeued: the job was already restarted 3 times (--dtrain-max-restarts=3))" \
  env SLURM_RESTART_COUNT=3 DTRAIN_MAX_RESTARTS=3 "$launch" --job-exit 75
check "a malformed DTRAIN_MAX_RESTARTS: exit 2" \
  job_exit 2 "DTRAIN_MAX_RESTARTS (--dtrain-max-restarts): 'many' is not a whole number" \
  env DTRAIN_MAX_RESTARTS=many "$launch" --job-exit 75
check "--job-exit 256: exit 2" job_exit 2 "^dtrain-launch: --job-exit: 256 is out of range" "$launch" --job-exit 256
check "--job-exit with trainer flags: exit 2" job_exit 2 "--job-exit takes no trainer" "$launch" --job-exit 0 --steps 3
check "--slurm-requeue alone: exit 2" job_exit 2 "--slurm-requeue goes with --job-exit" "$launch" --slurm-requeue
check "--slurm-requeue outside a job: says it cannot, still exits 75 for RequeueExit" \
  job_exit 75 "cannot ask Slurm to requeue: SLURM_JOB_ID is not set" "$launch" --job-exit 75 --slurm-requeue
check "the step_end event goes to DTRAIN_FAULT_LOG" \
  eval 'DTRAIN_FAULT_LOG="$tmp/events" "$launch" --job-exit 75 2>/dev/null; grep -q "\"event\": \"step_end\", \"rank\": -1.*\"what\": \"exit 75\"" "$tmp/events"'
# The libraries the dynamic loader initialises in a run (LD_DEBUG=libs).
loaded() {
  LD_DEBUG=libs "$@" 2>&1 >/dev/null | sed -n 's/.*calling init: //p'
}
# heavy_libs FILE: the runtime's libraries among those loaded, one per line
heavy_libs() { grep -E '/lib(dtrain|openblas|blas|blis|cblas|cudart|cublas|cublasLt|cuda|nccl)[.-]' "$1"; }
loaded "$launch" --job-exit 75 >"$tmp/libs"
check "--job-exit loads no runtime: neither libdtrain, a BLAS, CUDA nor NCCL ($(wc -l <"$tmp/libs") libraries)" \
  eval '[ -s "$tmp/libs" ] && ! heavy_libs "$tmp/libs"' || diag "loaded: $(tr '\n' ' ' <"$tmp/libs")"
# The same probe sees the runtime where it is loaded: dtrain-train links it.
loaded "$abs_top_builddir/runtime/dtrain-train" --version >"$tmp/libs-train"
check "the probe sees libdtrain and the BLAS loaded by dtrain-train --version" \
  eval 'heavy_libs "$tmp/libs-train" | grep -q libdtrain && heavy_libs "$tmp/libs-train" | grep -qE "blas"'
check "after 1 in-job restart (DTRAIN_INJOB_RESTARTS=1) and 1 requeue of at most 3: exit 75 (requeue, restart 3 of at most 3)" \
  job_exit 75 "exit 75 (requeue, restart 3 of at most 3)" \
  env SLURM_RESTART_COUNT=1 DTRAIN_INJOB_RESTARTS=1 DTRAIN_MAX_RESTARTS=3 "$launch" --job-exit 137
check "--supervise without a step: exit 2" job_exit 2 "^dtrain-launch: --supervise takes the srun step after" "$launch" --supervise
check "--supervise with trainer flags: exit 2" job_exit 2 "--supervise takes the srun step" "$launch" --supervise --steps 3
check "--supervise of something else than srun: exit 2" \
  job_exit 2 "^dtrain-launch: --supervise runs an srun step, not 'bash'" "$launch" --supervise -- bash -c true
check "--drain without --supervise: exit 2" job_exit 2 "^dtrain-launch: --drain goes with --supervise" "$launch" --drain
check "--supervise outside a batch job: exit 2, one line" \
  job_exit 2 "^dtrain-launch: --supervise runs in a batch job (SLURM_JOB_NODELIST is not set)" "$launch" --supervise -- srun true
check "--supervise with as many spares as nodes: exit 2" \
  job_exit 2 "the job has 2 nodes and 2 of them are spares (--dtrain-spares): no node is left for the ranks" \
  env SLURM_JOB_NODELIST='node[1-2]' DTRAIN_SPARES=2 "$launch" --supervise -- srun true
check "--supervise with a malformed DTRAIN_SPARES: exit 2" \
  job_exit 2 "DTRAIN_SPARES (--dtrain-spares): 'x' is not a whole number" \
  env SLURM_JOB_NODELIST='node[1-2]' DTRAIN_SPARES=x "$launch" --supervise -- srun true
# --node-report: the report step's task (its runs are in spares_topo.sh, under Slurm)
check "--node-report with more arguments: exit 2, one line" \
  job_exit 2 "^dtrain-launch: --node-report takes nothing else" "$launch" --node-report --print
check "--node-report outside a step: exit 2, one line" \
  job_exit 2 "^dtrain-launch: --node-report runs as a task of a Slurm step (SLURMD_NODENAME is not set)" \
  env -u SLURMD_NODENAME "$launch" --node-report
out=$(env SLURMD_NODENAME=node7 SLURM_TOPOLOGY_ADDR=spine.leaf2.node7 SLURM_TOPOLOGY_ADDR_PATTERN=switch.switch.node \
  DTRAIN_NVLINK_DOMAIN=c/2 "$launch" --node-report 2>"$tmp/err")
check "--node-report: one line with the node's address, pattern and domain ($out)" \
  [ "$out" = "dtrain-node-report node7 spine.leaf2.node7 switch.switch.node c/2" -a ! -s "$tmp/err" ]
out=$(env -u SLURM_TOPOLOGY_ADDR -u SLURM_TOPOLOGY_ADDR_PATTERN -u DTRAIN_NVLINK_DOMAIN SLURMD_NODENAME=node7 \
  "$launch" --node-report 2>"$tmp/err")
check "--node-report without topology or domain: '-' for each ($out)" \
  [ "$out" = "dtrain-node-report node7 - - -" -a ! -s "$tmp/err" ]
out=$(env SLURMD_NODENAME=node7 SLURM_TOPOLOGY_ADDR='a b' "$launch" --node-report 2>"$tmp/err")
check "--node-report with an address holding a space: the node without it, and one warning line ($out)" \
  eval '[ "$out" = "dtrain-node-report node7 - - -" ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] &&
        grep -q "^dtrain-launch: warning: --node-report: node7: SLURM_TOPOLOGY_ADDR .a b." "$tmp/err"'
train=$abs_top_builddir/runtime/dtrain-train
printf 'hello world\n' >"$tmp/t.txt"
"$abs_top_builddir/runtime/dtrain-tokenize" "$tmp/t.txt" "$tmp/t.bin" >/dev/null 2>&1
check "dtrain-train refuses --ckpt-dir (sharded checkpoints are dtrain-launch's): exit 2" \
  job_exit 2 "fault.ckpt_dir is for the parallel trainer" "$train" --data "$tmp/t.bin" --ckpt-dir "$tmp/ck"
check "dtrain-train refuses --inject: exit 2" \
  job_exit 2 "fault.inject is for the parallel trainer" "$train" --data "$tmp/t.bin" --inject kill:rank=0:step=1
check "dtrain-train refuses --ckpt-local-dir: exit 2" \
  job_exit 2 "fault.ckpt_local_dir is for the parallel trainer" "$train" --data "$tmp/t.bin" --ckpt-local-dir "$tmp/local"
done_testing
