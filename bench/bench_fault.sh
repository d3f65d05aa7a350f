#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# bench/bench_fault.sh: the time from a fault to the first resumed training
# step, phase by phase, on a real local Slurm (scripts/local-cluster: 3
# slurmd on loopback, the dtrain plugin, RequeueExit=75).  A batch job of
# 4 ranks (T=2 x D=2 over 2 nodes; L=4 C=256 NH=4, T=64, batch 8, ZeRO-1, a
# checkpoint every 10 steps, communicator timeout 5 s) gets one fault at
# step 25, is requeued and resumes from step 20; or, for `spare`, the same
# job with --dtrain-spares=1 under dtrain-launch --supervise restarts its
# step in the job on the third node.  Every process appends its events to
# a timeline (DTRAIN_FAULT_LOG, wall clock); the phases:
#   detection     the fault -> the first rank that reports it
#   teardown      -> the srun step has ended (dtrain-launch --job-exit runs)
#   requeue       -> the requeued batch script starts (RequeueExit, the
#                    requeue delay = cred_expire, the scheduler's next pass);
#                    for spare: -> the supervisor starts the next srun step
#   restart       -> the resume begins (srun, PMI2 bootstrap, communicators,
#                    the trainer built); split as srun + launch and the rest
#   load          -> the checkpoint is verified and loaded
#   first step    -> the first resumed step is done
# Faults: kill (rank 1 SIGKILLs itself), hang (rank 3 stops in its first
# forward: a neighbour's heartbeat sees it, --hang-detect 1 s),
# hang-timeout (the same hang with heartbeats off, --hang-detect 0: the
# communicator timeout is the detection, the path before heartbeats),
# spare (rank 1 SIGKILLs itself, in-job restart on the spare) and
# hang-spare (the hang, the heartbeat naming the node, in-job restart).
# Slurm's expedited requeue (sbatch --requeue=expedite; Slurm 25.11 and
# later, SlurmctldParameters=enable_expedited_requeue; doc/fault-tolerance.md):
# node (rank 1 SIGKILLs itself and its node is broken: the batch script,
# standing in for a health check, drains it before dtrain-launch --job-exit
# runs, and the site Epilog fails there, as dtrain-health --epilog does on
# a broken GPU; a job without the flag: RequeueExit=75, the requeue delay),
# node-expedite (the same, the job submitted with --requeue=expedite:
# --job-exit keeps the expedite) and kill-expedite (kill with
# --requeue=expedite: no node is out of service, so --job-exit asks for a
# plain requeue).  Medians of --runs runs, in one run of the script so that
# the paths are compared on the same machine state.
#
#   bench/bench_fault.sh [--build DIR] [--runs N] [--requeue-delay S]
#                        [--faults kill,hang,hang-timeout,spare,hang-spare,node,node-expedite,kill-expedite]
#
# DIR is a configured and built tree (default: $DTRAIN_BUILD, else build/
# in the source tree).  Needs root, the Slurm daemons and python3; the
# *-expedite faults need a build against Slurm 25.11 or later: on this
# project's development machine (Slurm 22.05), run them in the Debian
# forky chroot (Slurm 26.05):
#   tests/compat/run-debian --suite forky --no-packages \
#     --exec 'bench/bench_fault.sh --build build --faults kill,kill-expedite,node,node-expedite'
# The cluster lives in a fresh folder under DIR and is stopped on exit.
set -uo pipefail
prog=bench_fault.sh
top=$(cd "$(dirname "$0")/.." && pwd)
build=${DTRAIN_BUILD:-$top/build} runs=3 delay=5 faults=kill,hang,hang-timeout,spare,hang-spare
die() { echo "$prog: $1" >&2; exit "${2:-1}"; }
while [ $# -gt 0 ]; do
  case $1 in
    --build) [ $# -ge 2 ] || die "--build needs a folder" 2; build=$2; shift 2 ;;
    --runs) [ $# -ge 2 ] && [[ $2 =~ ^[1-9][0-9]?$ ]] || die "--runs needs a count from 1 to 99" 2; runs=$2; shift 2 ;;
    --requeue-delay) [ $# -ge 2 ] && [[ $2 =~ ^[0-9]{1,4}$ ]] && [ "$2" -ge 5 ] || die "--requeue-delay needs seconds, at least 5" 2
      delay=$2; shift 2 ;;
    --faults) kinds_re='(kill|hang|hang-timeout|spare|hang-spare|node|node-expedite|kill-expedite)'
      [ $# -ge 2 ] && [[ $2 =~ ^$kinds_re(,$kinds_re)*$ ]] ||
      die "--faults takes a comma-separated list of kill, hang, hang-timeout, spare, hang-spare, node, node-expedite, kill-expedite" 2
      faults=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/{/^set -uo/d;/^# SPDX-License-Identifier:/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) die "unknown option '$1' (see $0 --help)" 2 ;;
  esac
done
build=$(cd "$build" 2>/dev/null && pwd) || die "no build folder $build: configure and make first (or give --build DIR)" 2
launch=$build/launcher/dtrain-launch plugin=$build/spank_plugin/.libs/dtrain.so
[ -x "$launch" ] && [ -f "$plugin" ] || die "$launch or $plugin is not built: configure and make in $build first (or give --build DIR)" 2
[ "$(id -u)" -eq 0 ] || die "needs root (slurmd launches the tasks as root)" 2
command -v python3 >/dev/null 2>&1 || die "needs python3 (apt-get install python3)" 2

expedite=0
[[ ,$faults, != *-expedite,* ]] || expedite=1
[ "$expedite" = 0 ] || grep -q '^#define DTRAIN_SLURM_EXPEDITED_REQUEUE 1' "$build/config.h" ||
  die "the *-expedite faults need Slurm's expedited requeue (Slurm 25.11 and later); $build was configured against $(slurmctld -V 2>/dev/null || echo 'an older Slurm'): run them in the forky chroot (see $0 --help)" 2

dir=$(mktemp -d "$build/bench-fault.XXXXXX") || die "cannot make a folder in $build"
stop() { "$top/scripts/local-cluster" stop --dir "$dir" >/dev/null 2>&1; rm -rf -- "$dir"; }
trap stop EXIT
printf 'SchedulerParameters=nohold_on_prolog_fail,bf_interval=1,sched_interval=2\n' >"$dir/extra.conf"
# the site's epilog: fails on a node marked broken (the node faults), as
# dtrain-health --epilog does on a broken GPU
mkdir -p "$dir/broken"
printf '#!/bin/sh\n[ ! -e %s/broken/"$SLURMD_NODENAME" ] || exit 1\nexit 0\n' "$dir" >"$dir/epilog"
chmod 755 "$dir/epilog"
printf 'Epilog=%s\n' "$dir/epilog" >>"$dir/extra.conf"
[ "$expedite" = 0 ] || printf 'SlurmctldParameters=enable_expedited_requeue\n' >>"$dir/extra.conf"
"$top/scripts/local-cluster" start --dir "$dir" --nodes 3 --cpus-per-node 4 \
  --topology-all "$top/tests/fixtures/topology/hgx-a100-4gpu.xml" --plugin "$plugin" --plugin-args "max_tp=8" \
  --requeue-delay "$delay" --slurm-conf-extra "$dir/extra.conf" >"$dir/start.log" 2>&1 ||
  { cat "$dir/start.log" >&2; die "the local cluster did not start"; }
export SLURM_CONF=$dir/slurm.conf
cat "$top"/doc/*.md >"$dir/corpus.txt"
"$build/runtime/dtrain-tokenize" "$dir/corpus.txt" "$dir/tokens.bin" >/dev/null || die "dtrain-tokenize failed"

# run NAME INJECT SPARES [TRAINER-FLAGS [HOW]]: one job, waited for; its
# timeline in NAME.events.  With SPARES > 0, sbatch --dtrain-spares=SPARES
# and dtrain-launch --supervise.  HOW: words of "expedite" (sbatch
# --requeue=expedite) and "node" (the first run's first node, rank 1's, is
# drained by the batch script after the step, as a health check would, and
# its epilog fails; resumed after the job).
run() {
  local name=$1 inject=$2 spares=${3:-0} more=${4:-} how=${5:-} id state i extra=()
  [ "$spares" = 0 ] || extra=(--dtrain-spares="$spares")
  [[ $how != *expedite* ]] || extra+=(--requeue=expedite)
  {
    echo '#!/bin/bash'
    echo 'export OPENBLAS_NUM_THREADS=1'
    printf 'export DTRAIN_FAULT_LOG=%q\n' "$dir/$name.events"
    # the batch script's own event: when Slurm started it
    echo 'printf "{\"t\": %s, \"event\": \"job_start\", \"rank\": -1, \"node\": \"%s\", \"step\": -1, \"restart\": %s, \"what\": \"\"}\n" "$(date +%s.%N)" "$SLURMD_NODENAME" "${SLURM_RESTART_COUNT:-0}" >>"$DTRAIN_FAULT_LOG"'
    [ "$spares" = 0 ] || printf 'exec %q --supervise -- ' "$launch"
    printf 'srun --mpi=pmi2 --ntasks-per-node=2 %q --data %q' "$launch" "$dir/tokens.bin"
    printf ' --layers 4 --channels 256 --heads 4 --vocab-size 256 --max-seq-len 64 --seq 64 --batch 8 --steps 40'
    printf ' --lr 1e-3 --threads 1 --log-every 0 --checkpoint-every 10 --comm-timeout 5 --zero1 1 --inject %q %s\n' "$inject" "$more"
    if [[ $how == *node* ]]; then
      echo 'rc=$?'
      echo 'if [ -z "${SLURM_RESTART_COUNT:-}" ]; then'
      echo '  broken=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)'
      printf '  touch %q/"$broken"\n' "$dir/broken"
      echo '  scontrol update nodename="$broken" state=drain reason="dtrain: xid: GPU 0000:0b:00.0: XID 79 (bench)"'
      echo 'fi'
      printf 'exec %q --job-exit $rc\n' "$launch"
    else
      [ "$spares" != 0 ] || printf 'exec %q --job-exit $?\n' "$launch"
    fi
  } >"$dir/$name.sbatch"
  id=$(sbatch --parsable -N2 --ntasks-per-node=2 "${extra[@]}" --dtrain-tp=2 --dtrain-ckpt-dir="$dir/$name.ckpt" \
    --open-mode=append -o "$dir/$name.out" "$dir/$name.sbatch") || die "sbatch failed"
  for ((i = 0; i < 300; i++)); do
    state=$(scontrol show job "$id" 2>/dev/null | tr ' ' '\n' | sed -n 's/^JobState=//p')
    case $state in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL) break ;; esac
    sleep 1
  done
  [ "$state" = COMPLETED ] || { tail -20 "$dir/$name.out" >&2; die "job $name ended $state"; }
  [ "$spares" = 0 ] || scontrol show job "$id" | grep -q "Restarts=0" || die "job $name was requeued: the in-job restart did not happen"
  if [[ $how == *expedite* ]]; then # dtrain-launch --job-exit decided as doc/fault-tolerance.md says
    want="requeued, not expedited: no node of the job is out of service"
    [[ $how != *node* ]] || want="requeued, expedited: [^ ]* is out of service"
    grep -q "$want" "$dir/$name.out" || { tail -5 "$dir/$name.out" >&2; die "job $name: no line '$want'"; }
  fi
  if [[ $how == *node* ]]; then # the broken node back in service for the next job
    for b in "$dir"/broken/*; do
      [ -e "$b" ] || continue
      rm -f "$b"
      scontrol update nodename="${b##*/}" state=resume >/dev/null 2>&1
    done
    for ((i = 0; i < 60; i++)); do
      [ -z "$(sinfo -h -N -t drain,draining,drained -o %N)" ] && break
      sleep 1
    done
  fi
}

IFS=, read -r -a kinds <<<"$faults"
for ((r = 0; r < runs; r++)); do
  for k in "${kinds[@]}"; do
    case $k in
      kill) run "kill.$r" "kill:rank=1:step=25" ;;
      hang) run "hang.$r" "hang:rank=3:step=25" 0 "--hang-detect 1" ;;
      hang-timeout) run "hang-timeout.$r" "hang:rank=3:step=25" 0 "--hang-detect 0" ;;
      spare) run "spare.$r" "kill:rank=1:step=25" 1 ;;
      hang-spare) run "hang-spare.$r" "hang:rank=3:step=25" 1 "--hang-detect 1" ;;
      node) run "node.$r" "kill:rank=1:step=25" 0 "" node ;;
      node-expedite) run "node-expedite.$r" "kill:rank=1:step=25" 0 "" "node expedite" ;;
      kill-expedite) run "kill-expedite.$r" "kill:rank=1:step=25" 0 "" expedite ;;
    esac
  done
done

python3 - "$dir" "$runs" "$faults" "$delay" "$(slurmctld -V 2>/dev/null)" <<'PY'
import json, statistics, sys
d, runs, faults, delay, slurm = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(","), sys.argv[4], sys.argv[5]
PHASES = [("detection", "inject", "detect"), ("teardown", "detect", "step_end"),
          ("requeue + scheduling", "step_end", "job_start"), ("restart: srun + launch", "job_start", "launch"),
          ("restart: bootstrap, comms, build", "launch", "load_begin"), ("checkpoint load", "load_begin", "load_end"),
          ("first step", "load_end", "first_step")]

INJOB = [("detection", "inject", "detect"), ("teardown", "detect", "step_end"),
         ("supervisor: next step", "step_end", "job_start"), ("restart: srun + launch", "job_start", "launch"),
         ("restart: bootstrap, comms, build", "launch", "load_begin"), ("checkpoint load", "load_begin", "load_end"),
         ("first step", "load_end", "first_step")]

def times(path, injob):
    ev = [json.loads(l) for l in open(path)]
    def first(name, restart, rank=None):
        t = [e["t"] for e in ev if e["event"] == name and e["restart"] == restart and (rank is None or e["rank"] == rank)]
        if not t:
            raise SystemExit(f"{path}: no {name} event in run {restart}")
        return min(t)
    # in the job: the supervisor's step_start of restart 1 plays the requeued script's job_start
    return {"inject": first("inject", 0), "detect": first("detect", 0), "step_end": first("step_end", 0),
            "job_start": first("step_start" if injob else "job_start", 1), "launch": first("launch", 1),
            "load_begin": first("load_begin", 1, 0),
            "load_end": first("load_end", 1, 0), "first_step": first("first_step", 1, 0)}

print(f"fault to the first resumed step: 4 ranks (T=2 x D=2, 2 nodes), L=4 C=256, requeue delay {delay} s, {slurm}; "
      f"median of {runs} runs (min..max), seconds")
NOTES = {"node": "(rank 1 killed, its node drained and its epilog failing; a plain requeue: RequeueExit=75)",
         "node-expedite": "(the same, --requeue=expedite: Slurm's expedited requeue)",
         "kill-expedite": "(rank 1 killed, healthy nodes, --requeue=expedite: dtrain's plain requeue)"}
totals = {}
for f in faults:
    injob = f in ("spare", "hang-spare")
    rows = [times(f"{d}/{f}.{r}.events", injob) for r in range(runs)]
    note = "(in-job restart on a spare: --dtrain-spares=1, dtrain-launch --supervise)" if injob else NOTES.get(f, "")
    print(f"  {f}:" + ("  " + note if note else ""))
    for name, a, b in (INJOB if injob else PHASES) + [("total", "inject", "first_step")]:
        v = [t[b] - t[a] for t in rows]
        print(f"    {name:34s} {statistics.median(v):7.2f}   ({min(v):.2f}..{max(v):.2f})")
    totals[f] = statistics.median([t["first_step"] - t["inject"] for t in rows])
if "hang" in totals and "hang-spare" in totals:
    print(f"  ratio hang-spare / hang (in-job restart against requeue, same hang): {totals['hang-spare'] / totals['hang']:.3f}")
if "kill" in totals and "spare" in totals:
    print(f"  ratio spare / kill (in-job restart against requeue, same fault): {totals['spare'] / totals['kill']:.3f}")
if "node" in totals and "node-expedite" in totals:
    print(f"  ratio node-expedite / node (expedited requeue against a plain one, same node fault): "
          f"{totals['node-expedite'] / totals['node']:.3f}")
if "kill" in totals and "kill-expedite" in totals:
    print(f"  ratio kill-expedite / kill (a job with the flag, dtrain's plain requeue, against none): "
          f"{totals['kill-expedite'] / totals['kill']:.3f}")
PY
