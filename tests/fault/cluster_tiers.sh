#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The two checkpoint tiers under a real local Slurm (scripts/local-cluster:
# 2 slurmd on loopback, the dtrain plugin, RequeueExit=75, requeue delay
# 5 s).  Every job is the documented batch script with a node-local folder
#     srun --mpi=pmi2 --ntasks-per-node=2 dtrain-launch ... --ckpt-local-dir DIR/local/%n --ckpt-shared-every 8
# (%n: the node's name, so node1's and node2's "local disks" are two
# folders of this machine, the stand-in for two disks), sbatch
# --dtrain-tp=2 --dtrain-ckpt-dir (the shared tier): T=2 x D=2 over 2
# nodes (ranks 0-1 on node1, 2-3 on node2), the tiny model of cluster.sh,
# 24 steps, a checkpoint every 4 (node-local at 4, 12, 20; shared at 8,
# 16 and the end), rank 1 killed at step 15.  In the requeued run, before
# srun, the batch script
#  - lost: wipes node2's local folder: the run resumes from step 12 of
#    the node-local tier (node1's shards and its copies of node2's), and
#    node2's folder is put back;
#  - damaged: damages rank 0's shard of step 12 on node1: its copy on node2
#    serves, node1's folder is kept as step-00000012.damaged;
#  - both: damages that shard and its copy: the shared tier's step 8;
#  - async: nothing (--ckpt-async 1: written in the background): the newest
#    committed checkpoint.
# Each job ends COMPLETED after one requeue with every step's loss equal to
# the reference's (no fault, no local tier) bit for bit.
. "$abs_top_srcdir/tests/tap.sh"
. "$abs_top_srcdir/tests/slurm/lib.sh"
need_plugin
launch=$abs_top_builddir/launcher/dtrain-launch
tokenize=$abs_top_builddir/runtime/dtrain-tokenize
steps=24

new_cluster_dir tiers; d=$LC_NEW
cat "$abs_top_srcdir"/doc/*.md >"$d/corpus.txt"
"$tokenize" "$d/corpus.txt" "$d/tokens.bin" >/dev/null || { fail "dtrain-tokenize the docs"; done_testing; }
printf 'SchedulerParameters=nohold_on_prolog_fail,bf_interval=1,sched_interval=2\n' >"$d/extra.conf"
check_cluster_start "a 2-node cluster with the dtrain plugin, RequeueExit=75 and a 5 s requeue delay starts" "$d" \
  --nodes 2 --cpus-per-node 4 --topology-all "$fixtures/hgx-a100-4gpu.xml" --plugin "$plugin" --plugin-args "max_tp=8" \
  --requeue-delay 5 --slurm-conf-extra "$d/extra.conf"

trainer=(--data "$d/tokens.bin" --layers 2 --channels 32 --heads 4 --vocab-size 256 --padded-vocab-size 256
  --max-seq-len 16 --seq 16 --batch 8 --steps "$steps" --lr 3e-3 --grad-clip 1 --seed 7 --threads 1
  --log-every 0 --checkpoint-every 4 --comm-timeout 5 --zero1 1)

# flip FILE: one byte of FILE's payload changed (in the batch script).
flip='flip() { local b; b=$(od -An -tu1 -j 300 -N1 "$1"); printf "\\$(printf %o $(( (b + 1) % 256 )))" | dd of="$1" bs=1 seek=300 conv=notrunc 2>/dev/null; }'

# submit NAME INJECT BEFORE-RESUME [TRAINER-ARGS...]: NAME.sbatch runs
# BEFORE-RESUME (shell) at restart 1 before srun.
submit() {
  local name=$1 inject=$2 before=$3
  shift 3
  {
    echo '#!/bin/bash'
    echo 'export OPENBLAS_NUM_THREADS=1'
    echo "$flip"
    printf 'local=%q\n' "$d/$name.local"
    printf 'if [ "${SLURM_RESTART_COUNT:-0}" -ge 1 ]; then %s; fi\n' "${before:-:}"
    printf 'srun --mpi=pmi2 --ntasks-per-node=2 %q' "$launch"
    printf ' %q' "${trainer[@]}" --metrics "$d/$name.jsonl" "$@"
    [ -z "$inject" ] || printf ' --inject %q' "$inject"
    printf '\nexec %q --job-exit $?\n' "$launch"
  } >"$d/$name.sbatch"
  in_cluster "$d" sbatch --parsable -N2 --ntasks-per-node=2 --dtrain-tp=2 --dtrain-ckpt-dir="$d/$name.ckpt" \
    --dtrain-max-restarts=3 --open-mode=append -o "$d/$name.out" "$d/$name.sbatch" 2>"$d/$name.err"
}
losses() { sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$1"; }
same_losses() { [ "$(losses "$d/$1.jsonl" | wc -l)" -eq "$steps" ] && [ "$(losses "$d/$1.jsonl")" = "$(losses "$d/base.jsonl")" ]; }
ended() {
  local state restarts
  state=$(job_field "$d" "$2" JobState) restarts=$(job_field "$d" "$2" Restarts)
  [ "$state" = "$3" ] && [ "$restarts" = "$4" ] && return 0
  diag "$1: job $2 is $state after $restarts restarts (want $3 after $4); its output:"
  sed 's/^/#   /' "$d/$1.out" "$d/$1.err" 2>/dev/null | tail -25
  return 1
}
has() { grep -q -e "$2" "$d/$1.out"; }

tiers=(--ckpt-local-dir "$d/NAME.local/%n" --ckpt-shared-every 8)
args() { local a=("${tiers[@]}"); a[1]=${a[1]/NAME/$1}; shift; printf '%s\n' "${a[@]}" "$@"; }
mapfile -t a_lost < <(args lost)
mapfile -t a_damaged < <(args damaged)
mapfile -t a_both < <(args both)
mapfile -t a_async < <(args async --ckpt-async 1)
kill15="kill:rank=1:step=15"
base=$(submit base "" "")
lost=$(submit lost "$kill15" 'rm -rf "$local/node2"' "${a_lost[@]}")
damaged=$(submit damaged "$kill15" 'flip "$local/node1/step-00000012/shard-00000.bin"' "${a_damaged[@]}")
both=$(submit both "$kill15" 'flip "$local/node1/step-00000012/shard-00000.bin"; flip "$local/node2/step-00000012/shard-00000.bin"' "${a_both[@]}")
async=$(submit async "$kill15" "" "${a_async[@]}")
check "five jobs submitted (sbatch --dtrain-tp=2 --dtrain-ckpt-dir=..., --ckpt-local-dir DIR/%n)" \
  [ -n "$base" -a -n "$lost" -a -n "$damaged" -a -n "$both" -a -n "$async" ]
for j in base:$base lost:$lost damaged:$damaged both:$both async:$async; do
  wait_job "$d" "${j#*:}" 300 || diag "${j%%:*}: job ${j#*:} did not end within 300 s"
done

check "reference: COMPLETED without a restart, $steps steps of metrics" \
  eval 'ended base "$base" COMPLETED 0 && [ "$(losses "$d/base.jsonl" | wc -l)" -eq "$steps" ]'

check "lost local disk: COMPLETED after 1 restart" ended lost "$lost" COMPLETED 1
check "lost local disk: the checkpoints of steps 4 and 12 were node-local with copies on the peer's node" \
  has lost "checkpoint of step 12 written to $d/lost.local/node1/step-00000012 (.*node-local, each shard also on a peer's node"
check "lost local disk: node2's folder wiped, the run resumes from step 12 of the node-local tier, saying so on one line" \
  has lost "resumed from $d/lost.local/node1/step-00000012 (written by T=2 P=1 D=2, ZeRO-1 on): step 12, .*(node-local tier)"
check "lost local disk: node2's folder is put back from the copies" \
  eval '[ -f "$d/lost.local/node2/step-00000012/shard-00002.bin" ] && [ -f "$d/lost.local/node2/step-00000012/manifest.json" ]'
check "lost local disk: every step's loss equals the reference's, bit for bit" same_losses lost

check "damaged local shard: COMPLETED after 1 restart" ended damaged "$damaged" COMPLETED 1
check "damaged local shard: found damaged, its copy on node2 serves: resumed from step 12 of the node-local tier" \
  eval 'has damaged "rank 0: node-local checkpoint $d/damaged.local/node1/step-00000012 is damaged: .*shard-00000.bin: checksum" &&
        has damaged "resumed from $d/damaged.local/node1/step-00000012 .*(node-local tier)" &&
        [ -d "$d/damaged.local/node1/step-00000012.damaged" ]'
check "damaged local shard: every step's loss equals the reference's, bit for bit" same_losses damaged

check "shard and copy damaged: COMPLETED after 1 restart" ended both "$both" COMPLETED 1
check "shard and copy damaged: the node-local step 12 is incomplete, the shared tier's step 8 is taken, saying so" \
  eval 'has both "node-local checkpoint of step 12 is incomplete: shard-00000.bin has no good copy on any node; falling back to step 8 (shared)" &&
        has both "resumed from $d/both.ckpt/step-00000008 .*(shared tier)"'
check "shard and copy damaged: every step's loss equals the reference's, bit for bit" same_losses both

check "in the background (--ckpt-async 1): COMPLETED after 1 restart" ended async "$async" COMPLETED 1
resumed=$(sed -n 's/.*resumed from .*step-0*\([0-9][0-9]*\) (written by.*/\1/p' "$d/async.out" | tail -n 1)
check "in the background: the newest committed checkpoint is taken (step ${resumed:-none}, 8 or 12), every loss bit for bit" \
  eval '[ "$resumed" = 12 -o "$resumed" = 8 ] && has async "written in the background, committed after step" && same_losses async'
done_testing
