#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The 3D-parallel trainer under a real local Slurm (scripts/local-cluster:
# munged, slurmctld, 2 slurmd on loopback, each node looking like a 4-GPU
# HGX A100 board through a saved hwloc topology, a hardware stand-in; the
# dtrain SPANK plugin in plugstack.conf).  For (T,P,D) in (1,1,1), (2,1,1),
# (1,2,1), (1,1,2), (2,2,1), (2,2,2), (2,1,4), (1,2,4), a batch job submitted
# with `sbatch --dtrain-tp=T --dtrain-pp=P` runs `srun --mpi=pmi2
# dtrain-launch` three times, ZeRO stage 0, 1 (by its alias --zero1 1) and
# 2, on a tiny model (L=4 C=64 NH=4 V=256, T=32,
# global batch 8, 10 steps, byte-level tokens of the docs in the tree); the
# largest job is 8 ranks over 2 nodes.  Every run's per-step loss must match
# the (1,1,1) run's within the relative tolerance of doc/parallel.md.  Then
# (2,2,2) ZeRO-2 with --recompute selective and full gives the losses of the
# run without recomputation bit for bit.  Interleaved 1F1B (--virtual-stages
# 2): (2,2,2) ZeRO-1 m=2 gives the V=1 run's losses bit for bit, and on an
# 8-layer model (1,4,1) m=4 with V=2 and V=1 the same losses, within the
# tolerance of one process (dtrain-train).  Two shapes that do not split,
# ZeRO-3 (--zero-stage 3) at (2,1,4) and (1,2,4) matches (1,1,1) within the
# tolerance.  Two shapes that do not split, ZeRO-3 over more DP ranks than
# a unit's parameters and two virtual-stage shapes (P*V not dividing the
# layers, m not a multiple of P) are refused by every rank with exit 2.
# Sequence parallelism at (2,1,1) (--sequence-parallel 1 and 0 in one job)
# matches (1,1,1) within the tolerance with fewer activation bytes in rank
# 0's --memory-report line; with T=1, or T=2 not dividing --seq, refused
# with exit 2.
# dtrain-train (one process) must give the (1,1,1) run's losses bit for bit.
. "$abs_top_srcdir/tests/tap.sh"
. "$abs_top_srcdir/tests/slurm/lib.sh"
. "$abs_srcdir/lib.sh"
need_plugin
launch=$abs_top_builddir/launcher/dtrain-launch
train=$abs_top_builddir/runtime/dtrain-train
rtol=1e-5 # doc/parallel.md
steps=10

start_gpu_cluster parallel "max_tp=8"

trainer=(--data "$d/tokens.bin" --layers 4 --channels 64 --heads 4 --vocab-size 256 --padded-vocab-size 256
  --max-seq-len 32 --seq 32 --batch 8 --steps "$steps" --lr 3e-3 --weight-decay 0.01 --grad-clip 1
  --seed 11 --threads 1 --log-every 5)

# layout NAME T P NODES TASKS-PER-NODE MICRO-BATCHES: one batch job, three
# sruns (ZeRO stage 0, 1, 2), metrics in $d/NAME.zero{0,1,2}.jsonl; sets $rc.
layout() {
  local name=$1 t=$2 p=$3 nodes=$4 per=$5 micro=$6 z
  {
    echo '#!/bin/bash'
    echo 'export OPENBLAS_NUM_THREADS=1'
    for z in 0 1 2; do
      # no --comm-backend: cpu is the in-process trainer's default; --backend
      # cpu is the trainer's (kernels), passed through by dtrain-launch
      printf 'srun --mpi=pmi2 %q' "$launch"
      printf ' %q' "${trainer[@]}" --backend cpu --micro-batches "$micro" \
        $([ "$z" = 1 ] && echo --zero1 1 || echo --zero-stage "$z") --metrics "$d/$name.zero$z.jsonl"
      printf ' || exit $?\n'
    done
  } >"$d/$name.sbatch"
  in_cluster "$d" timeout 150 sbatch --parsable --wait --dtrain-tp="$t" --dtrain-pp="$p" -N "$nodes" \
    --ntasks-per-node="$per" -o "$d/$name.out" "$d/$name.sbatch" >/dev/null 2>"$d/$name.err"
  rc=$?
}

# losses FILE: the "loss" of each metrics line, one a line.
losses() { sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$1"; }

# deviation BASE FILE: the largest relative loss deviation over the steps,
# or "missing" when FILE does not have every step.
deviation() {
  paste <(losses "$1") <(losses "$2") | awk -v n="$steps" '
    NF == 2 { k++; d = ($2 - $1) / $1; if (d < 0) d = -d; if (d > m) m = d }
    END { if (k != n) print "missing"; else printf "%.2e\n", m }'
}

start=$(date +%s)
layout base 1 1 1 1 1
check "(1,1,1): sbatch --dtrain-tp=1 --dtrain-pp=1 -N1 -n1, two sruns of dtrain-launch exit 0 (exit $rc)" [ "$rc" -eq 0 ]
[ "$rc" -eq 0 ] || sed 's/^/# /' "$d/base.out" "$d/base.err" | head -20
check "(1,1,1): $steps steps of metrics, ZeRO stage 0, 1 and 2" \
  [ "$(losses "$d/base.zero0.jsonl" | wc -l)" -eq "$steps" -a "$(losses "$d/base.zero1.jsonl" | wc -l)" -eq "$steps" \
    -a "$(losses "$d/base.zero2.jsonl" | wc -l)" -eq "$steps" ]
for z in 1 2; do
  dev=$(deviation "$d/base.zero0.jsonl" "$d/base.zero$z.jsonl")
  check "(1,1,1) ZeRO stage $z against 0: max relative loss deviation $dev <= $rtol" \
    awk -v x="$dev" -v t="$rtol" 'BEGIN { exit !(x != "missing" && x + 0 <= t + 0) }'
done
# dtrain-train is the same trainer on a bootstrap of its own: the same bits
OPENBLAS_NUM_THREADS=1 "$train" "${trainer[@]}" --backend cpu --metrics "$d/train.jsonl" >"$d/train.out" 2>&1
rc=$?
check "(1,1,1): dtrain-train (one process, no Slurm) gives bit-identical losses to dtrain-launch under srun (exit $rc)" \
  [ "$rc" -eq 0 -a "$(losses "$d/train.jsonl" | wc -l)" -eq "$steps" -a "$(losses "$d/train.jsonl")" = "$(losses "$d/base.zero0.jsonl")" ]

worst=0
#      name  T P nodes per-node m
for spec in "tp2 2 1 1 2 1" "pp2 1 2 2 1 2" "dp2 1 1 2 1 1" "tp2pp2 2 2 1 4 2" "tp2pp2dp2 2 2 2 4 2" \
  "tp2dp4 2 1 2 4 1" "pp2dp4 1 2 2 4 2"; do
  set -- $spec
  name=$1 t=$2 p=$3 nodes=$4 per=$5 micro=$6
  world=$((nodes * per)) dp=$((nodes * per / (t * p)))
  layout "$name" "$t" "$p" "$nodes" "$per" "$micro"
  check "($t,$p,$dp): sbatch --dtrain-tp=$t --dtrain-pp=$p -N$nodes --ntasks-per-node=$per, srun --mpi=pmi2 dtrain-launch --micro-batches $micro, ZeRO stage 0, 1, 2, exit 0 (exit $rc)" \
    [ "$rc" -eq 0 ]
  [ "$rc" -eq 0 ] || sed 's/^/# /' "$d/$name.out" "$d/$name.err" | head -20
  check "($t,$p,$dp): rank 0 reports the plugin's layout, T=$t P=$p D=$dp ($world ranks), three times" \
    [ "$(grep -c "layout T=$t P=$p D=$dp ($world ranks)" "$d/$name.out")" -eq 3 ]
  for z in 0 1 2; do
    dev=$(deviation "$d/base.zero0.jsonl" "$d/$name.zero$z.jsonl")
    check "($t,$p,$dp) ZeRO stage $z: every step's loss matches (1,1,1): max relative deviation $dev <= $rtol" \
      awk -v x="$dev" -v t="$rtol" 'BEGIN { exit !(x != "missing" && x + 0 <= t + 0) }'
    worst=$(awk -v a="$worst" -v b="$dev" 'BEGIN { print (b != "missing" && b + 0 > a + 0) ? b : a }')
  done
done
diag "largest relative loss deviation from (1,1,1) over all layouts: $worst; all jobs took $(($(date +%s) - start)) s"

# ---- ZeRO-3 (sharded parameters) at (2,1,4) and (1,2,4): the losses of
# (1,1,1) within the tolerance, every rank's memory line says stage 3
for spec in "tp2dp4 2 1 1" "pp2dp4 1 2 2"; do
  set -- $spec
  name=z3$1 t=$2 p=$3 micro=$4
  printf '#!/bin/bash\nexport OPENBLAS_NUM_THREADS=1\nsrun --mpi=pmi2 %q' "$launch" >"$d/$name.sbatch"
  printf ' %q' "${trainer[@]}" --backend cpu --micro-batches "$micro" --zero-stage 3 --memory-report 1 \
    --metrics "$d/$name.jsonl" >>"$d/$name.sbatch"
  echo >>"$d/$name.sbatch"
  in_cluster "$d" timeout 150 sbatch --parsable --wait --dtrain-tp="$t" --dtrain-pp="$p" -N 2 --ntasks-per-node=4 \
    -o "$d/$name.out" "$d/$name.sbatch" >/dev/null 2>"$d/$name.err"
  rc=$?
  check "($t,$p,4) --zero-stage 3 m=$micro: sbatch --dtrain-tp=$t --dtrain-pp=$p, srun --mpi=pmi2 exits 0, each of the 8 ranks prints a memory line of stage 3 (exit $rc)" \
    [ "$rc" -eq 0 -a "$(grep -c '"zero_stage": 3' "$d/$name.out")" -eq 8 ]
  [ "$rc" -eq 0 ] || sed 's/^/# /' "$d/$name.out" "$d/$name.err" | head -20
  dev=$(deviation "$d/base.zero0.jsonl" "$d/$name.jsonl")
  check "($t,$p,4) ZeRO stage 3: every step's loss matches (1,1,1): max relative deviation $dev <= $rtol" \
    awk -v x="$dev" -v t="$rtol" 'BEGIN { exit !(x != "missing" && x + 0 <= t + 0) }'
done

# ---- activation recomputation at (2,2,2) ZeRO-2: the same losses bit for bit
{
  echo '#!/bin/bash'
  echo 'export OPENBLAS_NUM_THREADS=1'
  for r in selective full; do
    printf 'srun --mpi=pmi2 %q' "$launch"
    printf ' %q' "${trainer[@]}" --backend cpu --micro-batches 2 --zero-stage 2 --recompute "$r" --memory-report 1 \
      --metrics "$d/recompute.$r.jsonl"
    printf ' || exit $?\n'
  done
} >"$d/recompute.sbatch"
in_cluster "$d" timeout 150 sbatch --parsable --wait --dtrain-tp=2 --dtrain-pp=2 -N 2 --ntasks-per-node=4 \
  -o "$d/recompute.out" "$d/recompute.sbatch" >/dev/null 2>"$d/recompute.err"
rc=$?
check "(2,2,2) ZeRO-2, --recompute selective and full: two sruns exit 0, each rank prints its memory line (exit $rc)" \
  [ "$rc" -eq 0 -a "$(grep -c '^{"memory": {"rank": ' "$d/recompute.out")" -eq 16 ]
[ "$rc" -eq 0 ] || sed 's/^/# /' "$d/recompute.out" "$d/recompute.err" | head -20
for r in selective full; do
  check "(2,2,2) ZeRO-2 --recompute $r: every step's loss is the run's without recomputation, bit for bit" \
    [ "$(losses "$d/recompute.$r.jsonl" | wc -l)" -eq "$steps" -a \
      "$(losses "$d/recompute.$r.jsonl")" = "$(losses "$d/tp2pp2dp2.zero2.jsonl")" ]
done
act() { sed -n 's/^{"memory": {"rank": 0,.*"recompute": "'"$1"'".*"activations_bytes": \([0-9]*\),.*/\1/p' "$d/recompute.out"; }
check "rank 0 reports fewer activation bytes with full recomputation ($(act full)) than selective ($(act selective))" \
  awk -v a="$(act full)" -v b="$(act selective)" 'BEGIN { exit !(a != "" && b != "" && a + 0 < b + 0) }'

# ---- sequence parallelism at (2,1,1): --sequence-parallel 0 and 1 in one job
{
  echo '#!/bin/bash'
  echo 'export OPENBLAS_NUM_THREADS=1'
  for s in 0 1; do
    printf 'srun --mpi=pmi2 %q' "$launch"
    printf ' %q' "${trainer[@]}" --backend cpu --sequence-parallel "$s" --memory-report 1 --metrics "$d/sp.$s.jsonl"
    printf ' || exit $?\n'
  done
} >"$d/sp.sbatch"
in_cluster "$d" timeout 150 sbatch --parsable --wait --dtrain-tp=2 -N 1 --ntasks-per-node=2 \
  -o "$d/sp.out" "$d/sp.sbatch" >/dev/null 2>"$d/sp.err"
rc=$?
check "(2,1,1) --sequence-parallel 0 and 1: two sruns exit 0, each rank prints its memory line (exit $rc)" \
  [ "$rc" -eq 0 -a "$(grep -c '^{"memory": {"rank": .*"sequence_parallel": 1,' "$d/sp.out")" -eq 2 -a \
    "$(grep -c '^{"memory": {"rank": .*"sequence_parallel": 0,' "$d/sp.out")" -eq 2 ]
[ "$rc" -eq 0 ] || sed 's/^/# /' "$d/sp.out" "$d/sp.err" | head -20
dev=$(deviation "$d/base.zero0.jsonl" "$d/sp.1.jsonl")
check "(2,1,1) sequence-parallel: every step's loss matches (1,1,1): max relative deviation $dev <= $rtol" \
  awk -v x="$dev" -v t="$rtol" 'BEGIN { exit !(x != "missing" && x + 0 <= t + 0) }'
dev0=$(deviation "$d/sp.0.jsonl" "$d/sp.1.jsonl")
check "(2,1,1) sequence-parallel against the same layout without it: max relative deviation $dev0 <= $rtol" \
  awk -v x="$dev0" -v t="$rtol" 'BEGIN { exit !(x != "missing" && x + 0 <= t + 0) }'
spact() { sed -n 's/^{"memory": {"rank": 0,.*"sequence_parallel": '"$1"',.*"activations_bytes": \([0-9]*\),.*/\1/p' "$d/sp.out"; }
check "rank 0 reports fewer activation bytes with sequence parallelism ($(spact 1)) than without ($(spact 0))" \
  awk -v a="$(spact 1)" -v b="$(spact 0)" 'BEGIN { exit !(a != "" && b != "" && a + 0 < b + 0) }'
in_cluster "$d" timeout 60 srun -N1 -n1 --mpi=pmi2 "$launch" --comm-backend cpu "${trainer[@]}" \
  --sequence-parallel 1 >"$d/sp1.out" 2>"$d/sp1.err"
rc=$?
check "--sequence-parallel 1 with T=1: exit 2, the rank names the options (exit $rc)" \
  [ "$rc" -eq 2 -a "$(grep -c 'sequence-parallel needs a tensor-parallel size T > 1 dividing --seq (here T=1, --seq 32)' "$d/sp1.err")" -eq 1 ]
in_cluster "$d" timeout 60 srun -N1 -n2 --dtrain-tp=2 --mpi=pmi2 "$launch" --comm-backend cpu "${trainer[@]}" \
  --seq 31 --sequence-parallel 1 >"$d/sp31.out" 2>"$d/sp31.err"
rc=$?
check "--sequence-parallel 1 with T=2 and --seq 31: exit 2, both ranks refuse (exit $rc)" \
  [ "$rc" -eq 2 -a "$(grep -c 'sequence-parallel needs .* (here T=2, --seq 31)' "$d/sp31.err")" -eq 2 ]

# ---- interleaved 1F1B (--virtual-stages 2)
printf '#!/bin/bash\nexport OPENBLAS_NUM_THREADS=1\nsrun --mpi=pmi2 %q' "$launch" >"$d/vs222.sbatch"
printf ' %q' "${trainer[@]}" --backend cpu --micro-batches 2 --zero1 1 --virtual-stages 2 --memory-report 1 \
  --metrics "$d/vs222.jsonl" >>"$d/vs222.sbatch"
echo >>"$d/vs222.sbatch"
in_cluster "$d" timeout 150 sbatch --parsable --wait --dtrain-tp=2 --dtrain-pp=2 -N 2 --ntasks-per-node=4 \
  -o "$d/vs222.out" "$d/vs222.sbatch" >/dev/null 2>"$d/vs222.err"
rc=$?
check "(2,2,2) ZeRO-1 m=2 --virtual-stages 2: srun exits 0, every rank's memory line says 2 virtual stages (exit $rc)" \
  [ "$rc" -eq 0 -a "$(grep -c '^{"memory": {"rank": .*"virtual_stages": 2,' "$d/vs222.out")" -eq 8 ]
[ "$rc" -eq 0 ] || sed 's/^/# /' "$d/vs222.out" "$d/vs222.err" | head -20
check "(2,2,2) ZeRO-1 V=2: every step's loss is V=1's, bit for bit" \
  [ "$(losses "$d/vs222.jsonl" | wc -l)" -eq "$steps" -a "$(losses "$d/vs222.jsonl")" = "$(losses "$d/tp2pp2dp2.zero1.jsonl")" ]
dev=$(deviation "$d/base.zero0.jsonl" "$d/vs222.jsonl")
check "(2,2,2) ZeRO-1 V=2: max relative loss deviation from (1,1,1) $dev <= $rtol" \
  awk -v x="$dev" -v t="$rtol" 'BEGIN { exit !(x != "missing" && x + 0 <= t + 0) }'
# P=4 with V=2 needs 8 layers (one a chunk): one process as the base
trainer8=("${trainer[@]}" --layers 8)
OPENBLAS_NUM_THREADS=1 "$train" "${trainer8[@]}" --backend cpu --metrics "$d/train8.jsonl" >"$d/train8.out" 2>&1
check "8 layers: dtrain-train runs $steps steps (exit $?)" [ "$(losses "$d/train8.jsonl" | wc -l)" -eq "$steps" ]
{
  echo '#!/bin/bash'
  echo 'export OPENBLAS_NUM_THREADS=1'
  for v in 1 2; do
    printf 'srun --mpi=pmi2 %q' "$launch"
    printf ' %q' "${trainer8[@]}" --backend cpu --micro-batches 4 --virtual-stages "$v" --metrics "$d/vs141.v$v.jsonl"
    printf ' || exit $?\n'
  done
} >"$d/vs141.sbatch"
in_cluster "$d" timeout 150 sbatch --parsable --wait --dtrain-pp=4 -N 2 --ntasks-per-node=2 \
  -o "$d/vs141.out" "$d/vs141.sbatch" >/dev/null 2>"$d/vs141.err"
rc=$?
check "(1,4,1) m=4, 8 layers, --virtual-stages 1 and 2 over 2 nodes: both sruns exit 0 (exit $rc)" [ "$rc" -eq 0 ]
[ "$rc" -eq 0 ] || sed 's/^/# /' "$d/vs141.out" "$d/vs141.err" | head -20
for v in 1 2; do
  dev=$(deviation "$d/train8.jsonl" "$d/vs141.v$v.jsonl")
  check "(1,4,1) V=$v, 8 layers: max relative loss deviation from one process $dev <= $rtol" \
    awk -v x="$dev" -v t="$rtol" 'BEGIN { exit !(x != "missing" && x + 0 <= t + 0) }'
done
check "(1,4,1) 8 layers: V=2's losses are V=1's, bit for bit" \
  [ "$(losses "$d/vs141.v2.jsonl" | wc -l)" -eq "$steps" -a "$(losses "$d/vs141.v2.jsonl")" = "$(losses "$d/vs141.v1.jsonl")" ]
in_cluster "$d" timeout 60 srun -N2 --ntasks-per-node=1 --dtrain-pp=2 --mpi=pmi2 "$launch" --comm-backend cpu \
  "${trainer[@]}" --micro-batches 2 --virtual-stages 3 >"$d/vs3.out" 2>"$d/vs3.err"
rc=$?
check "P=2 --virtual-stages 3 on 4 layers: exit 2, both ranks name the options (exit $rc)" \
  [ "$rc" -eq 2 -a "$(grep -c 'virtual-stages 3 needs P >= 2 (here 2), P\*V dividing the 4 layers and --micro-batches a multiple of P' "$d/vs3.err")" -eq 2 ]
in_cluster "$d" timeout 60 srun -N2 --ntasks-per-node=1 --dtrain-pp=2 --mpi=pmi2 "$launch" --comm-backend cpu \
  "${trainer[@]}" --micro-batches 1 --virtual-stages 2 >"$d/vsm.out" 2>"$d/vsm.err"
rc=$?
check "P=2 --virtual-stages 2 --micro-batches 1: exit 2, both ranks refuse (exit $rc)" \
  [ "$rc" -eq 2 -a "$(grep -c 'virtual-stages 2 needs .* --micro-batches a multiple of P (here 1)' "$d/vsm.err")" -eq 2 ]

# ---- shapes that do not split: one line from every rank, exit 2, no training
in_cluster "$d" timeout 60 srun -N1 -n2 --dtrain-tp=2 --mpi=pmi2 "$launch" --comm-backend cpu "${trainer[@]}" \
  --heads 1 >"$d/heads.out" 2>"$d/heads.err"
rc=$?
check "T=2 for a model of one head: exit 2, both ranks say T must divide the heads (exit $rc)" \
  [ "$rc" -eq 2 -a "$(grep -c 'T=2 does not divide the 1 attention heads' "$d/heads.err")" -eq 2 ]
in_cluster "$d" timeout 60 srun -N2 --ntasks-per-node=1 --mpi=pmi2 "$launch" --comm-backend cpu "${trainer[@]}" \
  --batch 6 --micro-batches 2 >"$d/batch.out" 2>"$d/batch.err"
rc=$?
check "D=2 with --batch 6 --micro-batches 2: exit 2, both ranks ask for a batch that is a multiple of 4 (exit $rc)" \
  [ "$rc" -eq 2 -a "$(grep -c 'batch 6 does not split into D=2 .* multiple of 4' "$d/batch.err")" -eq 2 ]
# ZeRO-3 shards each layer, wte, wpe and the final LayerNorm (2C = 4
# parameters at C = 2) over D: D=8 is more ranks than that unit holds
in_cluster "$d" timeout 60 srun -N2 --ntasks-per-node=4 --mpi=pmi2 "$launch" --comm-backend cpu "${trainer[@]}" \
  --channels 2 --heads 1 --zero-stage 3 >"$d/zero3.out" 2>"$d/zero3.err"
rc=$?
check "--zero-stage 3 at D=8 with C=2: exit 2, every rank says the final LayerNorm's 4 parameters do not split over 8 and names --zero-stage 2 (exit $rc)" \
  [ "$rc" -eq 2 -a "$(grep -c 'zero-stage 3 shards each layer .* over the D=8 data-parallel ranks, but stage 0 has one of 4 parameters .* --zero-stage 2' "$d/zero3.err")" -eq 8 ]
done_testing
