# SPDX-License-Identifier: GPL-2.0-or-later
# The fault tests' jobs on a local cluster (cluster.sh, spares.sh,
# straggler.sh), sourced after tests/slurm/lib.sh.  The caller sets d (the
# cluster folder, where each job NAME has NAME.out, NAME.err, NAME.jsonl,
# NAME.events), launch (dtrain-launch), steps (of the reference run), the
# array trainer (the trainer's flags) and optionally the array trainer_more
# (flags of the next submit only); kill_node fails a node of $d's cluster.
trainer_more=()

# submit NAME INJECT SBATCH-ARGS...: write NAME.sbatch (the documented
# pattern) and submit it; prints the job id.  Output in NAME.out (appended
# over the restarts), metrics NAME.jsonl, checkpoints NAME.ckpt, fault
# timeline NAME.events.
submit() {
  local name=$1 inject=$2
  shift 2
  {
    echo '#!/bin/bash'
    echo 'export OPENBLAS_NUM_THREADS=1'
    printf 'export DTRAIN_FAULT_LOG=%q\n' "$d/$name.events"
    echo 'echo "job: start, restart ${SLURM_RESTART_COUNT:-0}, on $SLURM_JOB_NODELIST"'
    printf 'srun --mpi=pmi2 --ntasks-per-node=2 %q' "$launch"
    printf ' %q' "${trainer[@]}" "${trainer_more[@]}" --metrics "$d/$name.jsonl"
    [ -z "$inject" ] || printf ' --inject %q' "$inject"
    printf '\nexec %q --job-exit $?\n' "$launch"
  } >"$d/$name.sbatch"
  in_cluster "$d" sbatch --parsable --dtrain-tp=2 --dtrain-ckpt-dir="$d/$name.ckpt" --open-mode=append \
    -o "$d/$name.out" "$@" "$d/$name.sbatch" 2>"$d/$name.err"
}

# losses FILE: the "loss" of each metrics line, one a line.
losses() { sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$1"; }
# same_losses NAME: NAME's every step's loss is the reference's, as printed (%.9g: the float's bits).
same_losses() { [ "$(losses "$d/$1.jsonl" | wc -l)" -eq "$steps" ] && [ "$(losses "$d/$1.jsonl")" = "$(losses "$d/base.jsonl")" ]; }
# ended NAME ID STATE RESTARTS: the job ended in STATE after RESTARTS
# restarts ("1+": one or more).
ended() {
  local state restarts
  state=$(job_field "$d" "$2" JobState) restarts=$(job_field "$d" "$2" Restarts)
  if [ "$4" = 1+ ]; then
    [ "$state" = "$3" ] && [ "${restarts:-0}" -ge 1 ] 2>/dev/null && return 0
  else
    [ "$state" = "$3" ] && [ "$restarts" = "$4" ] && return 0
  fi
  diag "$1: job $2 is $state after $restarts restarts (want $3 after $4); its output:"
  sed 's/^/#   /' "$d/$1.out" "$d/$1.err" 2>/dev/null | tail -25
  return 1
}
has() { grep -q -e "$2" "$d/$1.out"; }
# event_time NAME EVENT: the wall clock of NAME's first EVENT in its timeline.
event_time() { sed -n "s/^{\"t\": \([0-9.]*\), \"event\": \"$2\".*/\1/p" "$d/$1.events" 2>/dev/null | head -n 1; }
# kill_node NODE: SIGKILL to the node's slurmd, to every slurmstepd with a
# socket in its spool folder, and to their descendants (only this cluster's).
kill_node() {
  local node=$1 spool pids
  spool=$(readlink -f "$d/run")/spool/$node/
  pids=$( { slurmd_pid "$d" "$node"; echo
    find /proc/[0-9]*/fd -maxdepth 1 -lname 'socket:*' -printf '%h %l\n' 2>/dev/null |
      awk -v spool="$spool" 'FILENAME == "/proc/net/unix" { if (index($8, spool) == 1) inode["socket:[" $7 "]"] = 1; next }
                             ($2 in inode) { split($1, f, "/"); print f[3] }' /proc/net/unix -; } | sort -u)
  pids=$(ps -e -o pid=,ppid= | awk -v roots="$pids" '
    BEGIN { n = split(roots, r, " "); for (i = 1; i <= n; i++) keep[r[i]] = 1 }
    { parent[$1] = $2; all[NR] = $1 }
    END { do { changed = 0; for (i in all) { p = all[i]; if (!(p in keep) && (parent[p] in keep)) { keep[p] = 1; changed = 1 } } } while (changed)
          for (p in keep) print p }')
  # shellcheck disable=SC2086
  [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
  diag "killed node $node: processes $(echo $pids)"
}

