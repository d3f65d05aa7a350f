#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Faults under a real local Slurm (scripts/local-cluster: munged,
# slurmctld, 2 slurmd on loopback, each node a 4-GPU HGX A100 board by its
# saved hwloc topology, a hardware stand-in; the dtrain SPANK plugin;
# etc/slurm/dtrain.conf's RequeueExit=75; requeue delay 5 s, backfill every
# second, SlurmdTimeout 10 s so that a dead node is noticed quickly).
# Every job is the documented batch script:
#     srun --mpi=pmi2 --ntasks-per-node=2 dtrain-launch ... ; exec dtrain-launch --job-exit $?
# submitted with sbatch --dtrain-tp=2 --dtrain-ckpt-dir=DIR, training a
# tiny model (L=2 C=32 NH=4, T=16, batch 8, 24 steps, ZeRO-1, a checkpoint
# every 4 steps, communicator timeout 5 s) as T=2 x D=2 over 2 nodes.
#  - a malformed --inject spec: exit 2 from every rank;
#  - the reference: no fault;
#  - rank 1 killed (SIGKILL) at step 10;
#  - rank 3 (node2) hung at step 10 in its first forward: a peer's
#    heartbeat (--hang-detect, 1 s by default) names it, its node, GPU and
#    action; detected within the timeout + 10 s (the time is printed);
#  - rank 0 killed at step 10, then rank 1 corrupts the newest checkpoint
#    before the requeued run resumes: it falls back to the one before;
#  - SIGTERM to every task (scancel --signal=TERM, as preemption sends):
#    checkpoint, exit 75, requeue;
#  - node2's slurmd, slurmstepd and tasks killed (a node failure): Slurm
#    requeues the job (sbatch -N1-2 --exclusive), which runs again on node1
#    alone as T=2 x D=1 from the D=2 checkpoint;
#  - --dtrain-max-restarts=1 and a rank killed in every run: the job ends
#    FAILED with the reason;
#  - a batch script that asks slurmctld to requeue its job
#    (--job-exit --slurm-requeue, libslurm's slurm_requeue).
# Each job must end COMPLETED (but the last) after one requeue (the node
# failure: one or more), with every step's loss equal to the reference's
# bit for bit (the node failure: the steps before the resume bit for bit,
# the others within doc/parallel.md's 1e-5, D having changed).
. "$abs_top_srcdir/tests/tap.sh"
. "$abs_top_srcdir/tests/slurm/lib.sh"
need_plugin
launch=$abs_top_builddir/launcher/dtrain-launch
tokenize=$abs_top_builddir/runtime/dtrain-tokenize
steps=24 every=4 comm_timeout=5 rtol=1e-5

new_cluster_dir fault; d=$LC_NEW
cat "$abs_top_srcdir"/doc/*.md >"$d/corpus.txt"
"$tokenize" "$d/corpus.txt" "$d/tokens.bin" >/dev/null || { fail "dtrain-tokenize the docs"; done_testing; }
cat >"$d/extra.conf" <<EOF
SchedulerParameters=nohold_on_prolog_fail,bf_interval=1,sched_interval=2
SlurmdTimeout=10
EOF
check_cluster_start "a 2-node cluster with the dtrain plugin, RequeueExit=75 and a 5 s requeue delay starts" "$d" \
  --nodes 2 --cpus-per-node 4 --topology-all "$fixtures/hgx-a100-4gpu.xml" --plugin "$plugin" --plugin-args "max_tp=8" \
  --requeue-delay 5 --slurm-conf-extra "$d/extra.conf"

trainer=(--data "$d/tokens.bin" --layers 2 --channels 32 --heads 4 --vocab-size 256 --padded-vocab-size 256
  --max-seq-len 16 --seq 16 --batch 8 --steps "$steps" --lr 3e-3 --grad-clip 1 --seed 7 --threads 1
  --log-every 0 --checkpoint-every "$every" --comm-timeout "$comm_timeout" --zero1 1)

# submit, losses, same_losses, ended, has, event_time, kill_node: tests/fault/lib.sh
. "$abs_top_srcdir/tests/fault/lib.sh"

# ---- a malformed injection spec: refused by every rank before training, exit 2
in_cluster "$d" timeout 60 srun -N1 -n2 --mpi=pmi2 "$launch" "${trainer[@]}" --inject "kill:rank=1" \
  >"$d/spec.out" 2>"$d/spec.err"
rc=$?
check "a malformed --inject: exit 2, both ranks say what is wrong (exit $rc)" \
  [ "$rc" -eq 2 -a "$(grep -c "fault injection 'kill:rank=1': kill needs step=S" "$d/spec.err")" -eq 2 ]

# ---- a checkpoint folder no rank can write (issue 16; /proc/1 refuses new
# files even to root): refused by every rank at start, exit 2 (not a
# requeue, and not found only at the first checkpoint)
in_cluster "$d" timeout 60 srun -N1 -n2 --mpi=pmi2 "$launch" "${trainer[@]}" --ckpt-dir /proc/1 \
  >"$d/ckro.out" 2>"$d/ckro.err"
rc=$?
check "an unwritable --ckpt-dir: exit 2 before step 0, every rank says so (exit $rc)" \
  [ "$rc" -eq 2 -a "$(grep -c "checkpoint folder (--ckpt-dir) /proc/1: cannot create files in /proc/1" "$d/ckro.err")" -eq 2 ]
sed 's/^/#   /' "$d/ckro.err" | head -n 4

# ---- a metrics file on a full disk (a tmpfs of 64 KiB, filled; issue 32):
# rank 0 warns once with the cause and both ranks train to the end (before,
# rank 0 exited 1 and its peer 75)
full=$d/full
mkdir -p "$full"
if [ "$(id -u)" -eq 0 ] && mount -t tmpfs -o size=64k dtrain-full "$full" 2>/dev/null; then
  dd if=/dev/zero of="$full/filler" bs=4k >/dev/null 2>&1
  in_cluster "$d" timeout 120 srun -N1 -n2 --mpi=pmi2 "$launch" "${trainer[@]}" --steps 4 --checkpoint-every 0 \
    --metrics "$full/m.jsonl" >"$d/full.out" 2>"$d/full.err"
  rc=$?
  umount "$full"
  check "metrics on a full disk under srun: exit 0, one warning with the cause, nothing else (exit $rc)" \
    [ "$rc" -eq 0 -a "$(grep -c "warning: rank 0: cannot write metrics file $full/m.jsonl: No space left on device" "$d/full.err")" -eq 1 \
      -a "$(grep -vc "^dtrain-.*: warning: rank 0: cannot write metrics file" "$d/full.err")" -eq 0 ]
  sed 's/^/#   /' "$d/full.err" | head -n 4
else
  skip_test "cannot mount a tmpfs here (needs root): no full-disk run under srun"
fi

start=$(date +%s)
# ---- the reference and four faults, submitted together (Slurm runs what fits)
base=$(submit base "" -N2 --ntasks-per-node=2 --dtrain-max-restarts=3)
kill=$(submit kill "kill:rank=1:step=10" -N2 --ntasks-per-node=2 --dtrain-max-restarts=3)
hang=$(submit hang "hang:rank=3:step=10" -N2 --ntasks-per-node=2 --dtrain-max-restarts=3)
corrupt=$(submit corrupt "kill:rank=0:step=10,corrupt:rank=1:restart=1" -N2 --ntasks-per-node=2 --dtrain-max-restarts=3)
budget=$(submit budget "kill:rank=1:step=3:restart=any" -N1 --ntasks-per-node=2 --dtrain-max-restarts=1)
# the API path: the batch script asks slurmctld to requeue (no training: a step that "lost" a task), then
# waits to be ended by that requeue: were it to exit 75 at once, RequeueExit could requeue it a second
# time, and whether "DUE TO JOB REQUEUE" is printed would be a race (seen on Slurm 24.11)
printf '#!/bin/bash\n[ "${SLURM_RESTART_COUNT:-0}" -ge 1 ] && exit 0\n%q --job-exit 137 --slurm-requeue\nrc=$?\nsleep 60\nexit $rc\n' \
  "$launch" >"$d/api.sbatch"
api=$(in_cluster "$d" sbatch --parsable --open-mode=append -o "$d/api.out" "$d/api.sbatch" 2>"$d/api.err")
check "six jobs submitted (sbatch --dtrain-tp=2 --dtrain-ckpt-dir=... --dtrain-max-restarts=...)" \
  [ -n "$base" -a -n "$kill" -a -n "$hang" -a -n "$corrupt" -a -n "$budget" -a -n "$api" ]
for j in base:$base kill:$kill hang:$hang corrupt:$corrupt budget:$budget api:$api; do
  wait_job "$d" "${j#*:}" 240 || diag "${j%%:*}: job ${j#*:} did not end within 240 s"
done

check "reference: COMPLETED without a restart, $steps steps of metrics" \
  eval 'ended base "$base" COMPLETED 0 && [ "$(losses "$d/base.jsonl" | wc -l)" -eq "$steps" ]'

check "killed rank: COMPLETED after 1 restart" ended kill "$kill" COMPLETED 1
check "killed rank: its peers report the dead peer on one line each (EPEER, rank, node, exit 75)" \
  eval 'has kill "fault: rank 0 on node1 (.*EPEER.*exit 75 (requeue, restart 1 of at most 3)"'
check "killed rank: the batch script maps srun's 137 to 75 (dtrain-launch --job-exit)" \
  has kill "the job step ended with exit 137 (a task was killed by signal 9 .*): exit 75"
check "killed rank: the requeued run resumes from the checkpoint of step 8" \
  has kill "resumed from $d/kill.ckpt/step-00000008 (written by T=2 P=1 D=2, ZeRO-1 on)"
check "killed rank: every step's loss equals the reference's, bit for bit" same_losses kill

check "hung rank: COMPLETED after 1 restart" ended hang "$hang" COMPLETED 1
check "hung rank: a peer's heartbeat names it, its node, its GPU and the action it is stuck in (exit 75)" \
  has hang "fault: rank [0-2] on node[12] (.*heartbeat: rank 3 (node node2, GPU [0-9a-f:.]*) hangs in forward of micro-batch 0 at step 10: .*exit 75"
check "hung rank: its own watchdog ends it with 75" \
  has hang "fault: rank 3 on node2 (.*watchdog: .*exit 75"
t_hang=$(event_time hang inject) t_seen=$(event_time hang detect)
dt=$(awk -v a="$t_hang" -v b="$t_seen" 'BEGIN { if (a == "" || b == "") print "none"; else printf "%.1f", b - a }')
check "hung rank: detected $dt s after it hung (communicator timeout $comm_timeout s; at most 10 s more allowed)" \
  awk -v x="$dt" -v t="$comm_timeout" 'BEGIN { exit !(x != "none" && x + 0 <= t + 10) }'
check "hung rank: every step's loss equals the reference's, bit for bit" same_losses hang

check "corrupted checkpoint: COMPLETED after 1 restart" ended corrupt "$corrupt" COMPLETED 1
check "corrupted checkpoint: the newest (step 8) is found damaged and the resume falls back to step 4, saying so" \
  eval 'has corrupt "checkpoint $d/corrupt.ckpt/step-00000008 is damaged: a shard file.s checksum does not match the manifest (shard-00001.bin); falling back to step 4" &&
        has corrupt "resumed from $d/corrupt.ckpt/step-00000004" && [ -d "$d/corrupt.ckpt/step-00000008.damaged" ]'
check "corrupted checkpoint: every step's loss equals the reference's, bit for bit" same_losses corrupt

check "restart budget spent: FAILED after 1 restart (--dtrain-max-restarts=1)" ended budget "$budget" FAILED 1
check "restart budget spent: one line says why, and the job's exit code is 1" \
  eval 'has budget "not requeued: the job was already restarted 1 time (--dtrain-max-restarts=1)" &&
        [ "$(job_field "$d" "$budget" ExitCode)" = "1:0" ]'

check "slurm_requeue: dtrain-launch --job-exit --slurm-requeue has the job requeued by slurmctld, which then completes" \
  eval 'ended api "$api" COMPLETED 1 && has api "asked Slurm to requeue job $api" && has api "DUE TO JOB REQUEUE"'

# ---- preemption: SIGTERM to every task of the running job
term=$(submit term "delay:rank=0:step=0:ms=200:count=$steps" -N2 --ntasks-per-node=2 --dtrain-max-restarts=3)
wait_for 60 eval '[ "$(losses "$d/term.jsonl" 2>/dev/null | wc -l)" -ge 3 ]'
in_cluster "$d" scancel --signal=TERM "$term"
wait_job "$d" "$term" 120 || diag "term: job $term did not end within 120 s"
check "SIGTERM: COMPLETED after 1 restart" ended term "$term" COMPLETED 1
check "SIGTERM: the ranks stop together after writing a checkpoint, and exit 75" \
  has term "stopping on SIGTERM (received by [0-9]* ranks\{0,1\}): checkpoint of step [0-9]* written: exit 75"
check "SIGTERM: every step's loss equals the reference's, bit for bit" same_losses term

# ---- a node fails: node2's slurmd, its slurmstepd and tasks killed
# kill_node NODE: tests/fault/lib.sh
node=$(submit node "delay:rank=0:step=0:ms=200:count=$steps" -N1-2 --exclusive --dtrain-max-restarts=3)
for ((i = 0; i < 600; i++)); do
  [ -f "$d/node.ckpt/step-00000004/manifest.json" ] && break
  sleep 0.1
done
check "node failure: the job runs on both nodes and has written the checkpoint of step 4" \
  eval '[ -f "$d/node.ckpt/step-00000004/manifest.json" ] && has node "job: start, restart 0, on node\[1-2\]"'
kill_node node2
wait_job "$d" "$node" 180 || diag "node: job $node did not end within 180 s"
# Slurm requeues it once it has set node2 DOWN (SlurmdTimeout); were the
# batch script's own exit 75 first, a second requeue could follow a start
# on the dead node: one restart or more, ending on node1.
check "node failure: COMPLETED after a restart (Slurm requeued it: the node failed)" ended node "$node" COMPLETED 1+
check "node failure: the requeued run has node1 alone, node2 is down and not used" \
  eval '[ "$(job_field "$d" "$node" NodeList)" = node1 ] && has node "job: start, restart [1-9][0-9]*, on node1\$" &&
        in_cluster "$d" sinfo -h -n node2 -o %t | grep -q "^down"'
check "node failure: it trains as T=2 P=1 D=1 from the D=2 checkpoint (ZeRO-1 state resharded)" \
  eval 'has node "layout T=2 P=1 D=1 (2 ranks)" && has node "resumed from $d/node.ckpt/step-[0-9]* (written by T=2 P=1 D=2, ZeRO-1 on)"'
resumed=$(sed -n 's/.*resumed from .*step-0*\([0-9][0-9]*\) (written by.*/\1/p' "$d/node.out" | tail -n 1)
dev=$(paste <(losses "$d/base.jsonl") <(losses "$d/node.jsonl") | awk -v n="$steps" -v r="${resumed:-0}" '
  NF == 2 { k++; if (k <= r && $1 != $2) exact = "no"; d = ($2 - $1) / $1; if (d < 0) d = -d; if (d > m) m = d }
  END { if (k != n || exact == "no") print "mismatch"; else printf "%.2e\n", m }')
check "node failure: steps before $resumed bit for bit, every step within $rtol of the reference (max $dev)" \
  awk -v x="$dev" -v t="$rtol" 'BEGIN { exit !(x != "mismatch" && x + 0 <= t + 0) }'
diag "all jobs took $(($(date +%s) - start)) s"
done_testing
