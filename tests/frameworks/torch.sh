#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# A real PyTorch from PyPI on dtrain's placement, on a real local Slurm with
# dtrain.so (2 nodes that look like 8-GPU DGX H100 servers through saved
# hwloc topologies; the ranks run on the CPU with gloo):
# doc/examples/torch_ddp.py does init_process_group("gloo", "env://"), a
# world all_reduce, TP/PP/DP groups from DTRAIN_*, DDP over the DP group,
# at 8 ranks on 2 nodes with --dtrain-tp=2 --dtrain-pp=2:
#  - plain srun (the plugin alone);
#  - srun --mpi=pmi2 dtrain-launch -- python ...: the same losses;
#  - the same without the plugin (dtrain-launch --tp 2 --pp 2 plans the step
#    and hands rank 0's held port through its PMI2 fence);
#  - a batch job whose rank 5 kills itself at step 4, requeued by
#    `dtrain-launch --job-exit $?` (exit 75, RequeueExit=75), resuming from
#    the script's own checkpoint: COMPLETED after 1 restart, the same losses
#    and final parameters as the run without a fault.
# torch comes from tests/frameworks/torch-venv (installed once into
# /var/cache/dtrain-ci/torch-venv); without network: SKIP, never PASS.
. "$abs_top_srcdir/tests/tap.sh"
. "$abs_top_srcdir/tests/slurm/lib.sh"
need_plugin
python=$("$abs_top_srcdir/tests/frameworks/torch-venv" 2>"$abs_builddir/torch-venv.log")
case $? in
  0) ;;
  77) skip_all "no PyTorch: $(tail -n 1 "$abs_builddir/torch-venv.log")" ;;
  *) fail "tests/frameworks/torch-venv installs a working PyTorch ($(tail -n 1 "$abs_builddir/torch-venv.log"))"; done_testing ;;
esac
script=$abs_top_srcdir/doc/examples/torch_ddp.py
launch=$abs_top_builddir/launcher/dtrain-launch
steps=8

new_cluster_dir torch; D=$LC_NEW
check_cluster_start "a 2-node cluster with dtrain.so, RequeueExit=75 and a 5 s requeue delay starts" "$D" \
  --nodes 2 --cpus-per-node 8 --topology-all "$fixtures/dgx-h100.xml" --plugin "$plugin" --plugin-args "max_tp=8" \
  --requeue-delay 5
export OMP_NUM_THREADS=1

# ok_lines FILE: the ranks that ended with ok=1.
ok_lines() { grep -c '^torch_ddp: rank=[0-7] ok=1 ' "$1"; }
# losses FILE: the step losses rank 0 printed, "step N loss L" a line.
losses() { sed -n 's/^torch_ddp: \(step [0-9]* loss [0-9.]*\)$/\1/p' "$1"; }
params() { sed -n 's/^torch_ddp: rank=\([0-7]\) .* params=\([^ ]*\) .*/\1 \2/p' "$1" | sort; }

in_cluster "$D" timeout 300 srun -N2 --ntasks-per-node=4 --dtrain-tp=2 --dtrain-pp=2 -K \
  "$python" "$script" --steps "$steps" >"$D/plain.out" 2>"$D/plain.err"
rc=$?
check "plain srun --dtrain-tp=2 --dtrain-pp=2, 8 ranks on 2 nodes: env:// + gloo, world all_reduce, TP/PP/DP groups, DDP: 8 ranks ok (exit $rc, $(ok_lines "$D/plain.out") ok)" \
  eval '[ "$rc" -eq 0 ] && [ "$(ok_lines "$D/plain.out")" -eq 8 ] && [ "$(losses "$D/plain.out" | wc -l)" -eq "$steps" ]'
[ "$rc" -eq 0 ] || tail -n 5 "$D/plain.err" | sed 's/^/#   /'
diag "$(grep -m1 '^torch_ddp: rank=0' "$D/plain.out")"

in_cluster "$D" timeout 300 srun --mpi=pmi2 -N2 --ntasks-per-node=4 --dtrain-tp=2 --dtrain-pp=2 -K \
  "$launch" -- "$python" "$script" --steps "$steps" >"$D/launch.out" 2>"$D/launch.err"
rc=$?
check "srun --mpi=pmi2 dtrain-launch -- python torch_ddp.py: 8 ranks ok (exit $rc)" \
  eval '[ "$rc" -eq 0 ] && [ "$(ok_lines "$D/launch.out")" -eq 8 ]'
[ "$rc" -eq 0 ] || tail -n 5 "$D/launch.err" | sed 's/^/#   /'
check "... with the same losses and parameters as plain srun" \
  eval '[ "$(losses "$D/launch.out")" = "$(losses "$D/plain.out")" ] && [ "$(params "$D/launch.out")" = "$(params "$D/plain.out")" ]'

# ---- without the plugin: dtrain-launch plans the step and makes the rendezvous
new_cluster_dir torch-noplugin; N=$LC_NEW
check_cluster_start "a 2-node cluster without the plugin starts" "$N" --nodes 2 --cpus-per-node 8
in_cluster "$N" timeout 300 srun --mpi=pmi2 -N2 --ntasks-per-node=4 -K \
  "$launch" --tp 2 --pp 2 -- "$python" "$script" --steps "$steps" >"$D/noplugin.out" 2>"$D/noplugin.err"
rc=$?
check "no plugin: dtrain-launch --tp 2 --pp 2 -- python: rank 0's held port through the PMI2 fence, 8 ranks ok, the same losses (exit $rc)" \
  eval '[ "$rc" -eq 0 ] && [ "$(ok_lines "$D/noplugin.out")" -eq 8 ] && [ "$(losses "$D/noplugin.out")" = "$(losses "$D/plain.out")" ]'
[ "$rc" -eq 0 ] || tail -n 5 "$D/noplugin.err" | sed 's/^/#   /'
lc stop --dir "$N" >/dev/null 2>&1

# ---- a killed rank: requeue and resume from the script's own checkpoint
cat >"$D/job.sbatch" <<JOB
#!/bin/bash
export OMP_NUM_THREADS=1
echo "job: run \${SLURM_RESTART_COUNT:-0}"
srun --mpi=pmi2 -K "$launch" -- "$python" "$script" --steps $steps --ckpt "\$DTRAIN_CKPT_DIR" --kill-rank 5 --kill-step 4
exec "$launch" --job-exit \$?
JOB
job=$(in_cluster "$D" sbatch --parsable -N2 --ntasks-per-node=4 --dtrain-tp=2 --dtrain-pp=2 \
  --dtrain-ckpt-dir="$D/ckpt" --dtrain-max-restarts=2 --open-mode=append -o "$D/job.out" "$D/job.sbatch" 2>"$D/job.err")
check "sbatch the documented script (srun ... dtrain-launch -- python; exec dtrain-launch --job-exit \$?)" [ -n "$job" ]
wait_job "$D" "$job" 400 || diag "job $job did not end within 400 s"
state=$(job_field "$D" "$job" JobState) restarts=$(job_field "$D" "$job" Restarts)
check "rank 5 killed at step 4: the job is requeued once and COMPLETED ($state, Restarts=$restarts)" \
  [ "$state" = COMPLETED -a "$restarts" = 1 ]
[ "$state" = COMPLETED ] || tail -n 20 "$D/job.out" | sed 's/^/#   /'
check "... the batch script maps the killed step (137, or 143 once srun -K ended the others) to 75 (dtrain-launch --job-exit)" \
  grep -q "dtrain-launch: the job step ended with exit 1[34][37] (a task was killed by signal .*): exit 75 (requeue, restart 1 of at most 2)" "$D/job.out"
check "... the requeued run (TORCHELASTIC_RESTART_COUNT=1) resumes from the script's own checkpoint" \
  grep -q "^torch_ddp: run 1: resumed from $D/ckpt/step-[0-3]$" "$D/job.out"
after=$(sed -n '/^job: run 1/,$p' "$D/job.out")
check "... and ends with the losses and parameters of the run without a fault (8 ranks ok)" \
  eval '[ "$(printf "%s\n" "$after" | grep -c "^torch_ddp: rank=[0-7] ok=1 ")" -eq 8 ] &&
        [ "$(params <(printf "%s\n" "$after"))" = "$(params "$D/plain.out")" ] &&
        [ "$(losses "$D/job.out" | sort -u -k2n)" = "$(losses "$D/plain.out" | sort -u -k2n)" ]'
done_testing
