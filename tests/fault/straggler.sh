#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Straggler detection under a real local Slurm (scripts/local-cluster, 2
# slurmd on loopback, each node a 4-GPU HGX A100 board by its saved hwloc
# topology, a hardware stand-in; the dtrain SPANK plugin; RequeueExit=75).
# The documented batch script, T=2 x D=2 over 2 nodes, a tiny model whose
# steps take milliseconds; rank 3 (node2) made slow with the delay
# injection: 1000 ms more in the first forward of each step from step 2,
# so that its compute time is far above the margin (--straggler-margin 20,
# 2000%: no machine load makes a healthy rank's compute 20 times the
# median 3 steps in a row).  No timing is asserted.
#  - sbatch --dtrain-straggler=report: the straggler says so on one line
#    with its rank, node, GPU and margin; its per-rank metrics mark it, the
#    other ranks' do not; rank 0's metrics and Prometheus file name it; the
#    job completes untouched;
#  - sbatch --dtrain-straggler=drain (-N1-2 --exclusive): every rank
#    checkpoints and exits 75, dtrain-launch --job-exit drains node2 with
#    the reason, the requeued job runs on node1 alone as T=2 x D=1 and
#    completes, its losses equal the reference's before the resume (bit for
#    bit) and within 1e-5 after (D changed);
#  - --dtrain-straggler=bogus is refused by sbatch.
. "$abs_top_srcdir/tests/tap.sh"
. "$abs_top_srcdir/tests/slurm/lib.sh"
need_plugin
launch=$abs_top_builddir/launcher/dtrain-launch
tokenize=$abs_top_builddir/runtime/dtrain-tokenize
steps=12 rtol=1e-5

new_cluster_dir strag; d=$LC_NEW
cat "$abs_top_srcdir"/doc/*.md >"$d/corpus.txt"
"$tokenize" "$d/corpus.txt" "$d/tokens.bin" >/dev/null || { fail "dtrain-tokenize the docs"; done_testing; }
cat >"$d/extra.conf" <<EOF
SchedulerParameters=nohold_on_prolog_fail,bf_interval=1,sched_interval=2
EOF
check_cluster_start "a 2-node cluster with the dtrain plugin and RequeueExit=75 starts" "$d" \
  --nodes 2 --cpus-per-node 4 --topology-all "$fixtures/hgx-a100-4gpu.xml" --plugin "$plugin" --plugin-args "max_tp=8" \
  --requeue-delay 5 --slurm-conf-extra "$d/extra.conf"

trainer=(--data "$d/tokens.bin" --layers 2 --channels 32 --heads 4 --vocab-size 256 --padded-vocab-size 256
  --max-seq-len 16 --seq 16 --batch 8 --steps "$steps" --lr 3e-3 --grad-clip 1 --seed 7 --threads 1
  --log-every 0 --checkpoint-every 4 --comm-timeout 10 --zero1 1 --straggler-steps 3 --straggler-margin 20)
slow="delay:rank=3:step=2:ms=1000:count=$steps"
. "$abs_top_srcdir/tests/fault/lib.sh"

check "sbatch refuses --dtrain-straggler=bogus, saying what to use" \
  eval 'printf "#!/bin/bash\ntrue\n" >"$d/bogus.sbatch"; ! in_cluster "$d" sbatch --dtrain-straggler=bogus "$d/bogus.sbatch" \
    >"$d/bogus.err" 2>&1 && grep -q "dtrain-straggler .bogus.: use report or drain" "$d/bogus.err"'

base=$(submit base "" -N2 --ntasks-per-node=2)
mkdir -p "$d/report.ranks"
trainer_more=(--rank-metrics "$d/report.ranks" --prom-textfile "$d/report.prom")
report=$(submit report "$slow" -N2 --ntasks-per-node=2 --dtrain-straggler=report)
trainer_more=()
check "the reference and the report job submitted" [ -n "$base" -a -n "$report" ]
wait_job "$d" "$base" 240 || diag "base: job $base did not end within 240 s"
wait_job "$d" "$report" 240 || diag "report: job $report did not end within 240 s"
check "reference: COMPLETED without a restart" ended base "$base" COMPLETED 0

check "report: COMPLETED without a restart" ended report "$report" COMPLETED 0
check "report: one line names the straggler, its node, GPU and the margin" \
  has report "straggler: rank 3 (node node2, GPU [0-9a-f:.]*): compute [0-9.]* ms a step, [0-9]*% above the median [0-9.]* ms of the 4 ranks for 3 steps in a row (margin 2000%): reported"
check "report: no other rank is named" eval '! grep -q "straggler: rank [0-2] " "$d/report.out"'
check "report: rank 3's per-rank metrics mark it a straggler, the other ranks' never" \
  eval 'grep -q "\"straggler\": true" "$d/report.ranks/rank-00003.jsonl" &&
        ! grep -q "\"straggler\": true" "$d/report.ranks/rank-0000[0-2].jsonl"'
check "report: rank 0's metrics name rank 3 from the third slow step on" \
  eval 'grep "\"step\": 11," "$d/report.jsonl" | grep -q "\"straggler_rank\": 3," &&
        grep "\"step\": 1," "$d/report.jsonl" | grep -q "\"straggler_rank\": -1,"'
check "report: the Prometheus file has dtrain_straggler_rank 3 and its excess ratio" \
  eval 'grep -q "^dtrain_straggler_rank{job=\"$report\"} 3\$" "$d/report.prom" &&
        grep -q "^dtrain_straggler_excess_ratio{job=\"$report\"} [0-9]" "$d/report.prom"'
check "report: every step's loss equals the reference's, bit for bit (a slow rank changes no result)" same_losses report

drain=$(submit drain "$slow" -N1-2 --exclusive --dtrain-straggler=drain --dtrain-max-restarts=3)
wait_job "$d" "$drain" 240 || diag "drain: job $drain did not end within 240 s"
check "drain: COMPLETED after 1 restart" ended drain "$drain" COMPLETED 1
check "drain: the straggler names itself (rank 3, node2, GPU, margin) and its node is to be drained" \
  has drain "straggler: rank 3 (node node2, GPU [0-9a-f:.]*): .* (margin 2000%): draining its node and restarting without it"
check "drain: the ranks checkpoint and stop with the requeue code, the fault line giving the reason" \
  has drain "fault: rank [0-3] on node[12] (.*straggler: rank 3 (node node2, .*its node is to be drained .*: exit 75 (requeue"
check "drain: dtrain-launch --job-exit drains node2 with the reason" \
  eval 'has drain "straggler drain: node node2 drained (dtrain: straggler: rank 3" &&
        in_cluster "$d" sinfo -h -n node2 -o "%t %E" | grep -q "^drain.* dtrain: straggler: rank 3"'
check "drain: the requeued run has node1 alone and trains as T=2 x D=1 from the D=2 checkpoint" \
  eval '[ "$(job_field "$d" "$drain" NodeList)" = node1 ] && has drain "job: start, restart 1, on node1\$" &&
        has drain "layout T=2 P=1 D=1 (2 ranks)" && has drain "resumed from $d/drain.ckpt/step-[0-9]* (written by T=2 P=1 D=2"'
check "drain: the drain request is gone once handled" [ ! -e "$d/drain.ckpt/drain-request" ]
resumed=$(sed -n 's/.*resumed from .*step-0*\([0-9][0-9]*\) (written by.*/\1/p' "$d/drain.out" | tail -n 1)
dev=$(paste <(losses "$d/base.jsonl") <(losses "$d/drain.jsonl") | awk -v n="$steps" -v r="${resumed:-0}" '
  NF == 2 { k++; if (k <= r && $1 != $2) exact = "no"; d = ($2 - $1) / $1; if (d < 0) d = -d; if (d > m) m = d }
  END { if (k != n || exact == "no") print "mismatch"; else printf "%.2e\n", m }')
check "drain: steps before ${resumed:-?} bit for bit, every step within $rtol of the reference (max $dev)" \
  awk -v x="$dev" -v t="$rtol" 'BEGIN { exit !(x != "mismatch" && x + 0 <= t + 0) }'
done_testing
