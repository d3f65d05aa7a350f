#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# dtrain-launch outside `srun --mpi=pmi2`, and its command line: each bad
# input gives exit 2 and one line saying what to do.  Needs no Slurm.
. "$abs_top_srcdir/tests/tap.sh"
launch=$abs_top_builddir/launcher/dtrain-launch

# Whatever runs the tests (a Slurm job, a PMI2 launcher) must not leak in.
for v in $(env | sed -n 's/^\(PMI_[A-Z_]*\|SLURM_[A-Z_]*\|DTRAIN_[A-Z_]*\)=.*/\1/p'); do unset "$v"; done

# refused DESC CODE PATTERN ARGS...: exit CODE, one stderr line matching PATTERN.
refused() {
  local desc=$1 code=$2 pattern=$3 err rc
  shift 3
  err=$("$@" 2>&1 >/dev/null)
  rc=$?
  if [ "$rc" -eq "$code" ] && [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] &&
     printf '%s\n' "$err" | grep -q -- "^dtrain-launch: .*$pattern"; then
    pass "$desc"
  else
    fail "$desc"
    diag "exit $rc, stderr: $err"
  fi
}

msg='not started by srun --mpi=pmi2 (no PMI2 environment): run it as `srun --mpi=pmi2 dtrain-launch ...`'
refused "no PMI2 environment: exit 2 and how to launch" 2 "$msg" "$launch" --print
refused "no PMI2 environment, with a PROGRAM: the same" 2 "not started by srun --mpi=pmi2" "$launch" -- true
refused "torchrun style --nproc-per-node: exit 2, showing the supported command" 2 \
  "--nproc-per-node: dtrain-launch runs as one task per GPU, not as a per-node agent: srun --mpi=pmi2 --ntasks-per-node=GPUS_PER_NODE dtrain-launch -- python train.py" \
  "$launch" --nproc-per-node 8 -- python train.py
refused "PMI_FD without PMI_RANK/PMI_SIZE is not a PMI2 environment" 2 "not started by srun --mpi=pmi2" \
  env PMI_FD=0 "$launch" --print
refused "a PMI_FD that is no PMI2 connection: exit 1, says so" 1 "PMI2_Init failed" \
  env PMI_FD=9 PMI_RANK=0 PMI_SIZE=1 "$launch" --print
refused "an unknown short option" 2 "unknown option '-x'" "$launch" -x --print
refused "--tp 0" 2 "--tp: 0 is out of range" "$launch" --tp 0 --print
refused "--pp abc" 2 "--pp: 'abc' is not a whole number" "$launch" --pp abc --print
refused "--dp without a value" 2 "option --dp needs a value" "$launch" --dp
refused "--comm-backend gloo" 2 "--comm-backend 'gloo': use cpu or nccl" "$launch" --comm-backend gloo --print
refused "--timeout 0" 2 "--timeout" "$launch" --timeout 0 --print
refused "--comm-backend without a value" 2 "option --comm-backend needs a value" "$launch" --comm-backend
refused "the trainer's arguments, no PMI2 environment: how to launch" 2 "not started by srun --mpi=pmi2" \
  "$launch" --tp 2 --data tokens.bin --steps 10
refused "--backend cuda is the trainer's kernel choice, not the launcher's comm backend" 2 \
  "not started by srun --mpi=pmi2" "$launch" --tp 2 --backend cuda --data tokens.bin

out=$("$launch" --help 2>&1)
rc=$?
usage_line=$(printf '%s\n' "$out" | grep -c -- '^usage: srun --mpi=pmi2 dtrain-launch')
check "--help exits 0 and shows how to launch" [ "$rc" -eq 0 -a "$usage_line" -eq 1 ]
version=$(sed -n 's/^#define PACKAGE_VERSION "\(.*\)"$/\1/p' "$abs_top_builddir/config.h")
check "--version prints dtrain-launch $version" [ "$("$launch" --version)" = "dtrain-launch $version" ]
done_testing
