#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# bench/bootstrap.sh: what dtrain-launch's PMI2 bootstrap costs, on a real
# local Slurm (scripts/local-cluster: 2 slurmd on loopback), 16 tasks on
# 2 nodes.  Prints, for the 3D shape T=4 P=2 D=2 and for the baseline
# T=1 P=1 D=16 measured in the same run: keys put through the KVS (1 for
# both now: only WORLD's id goes through PMI2), fences, and the bootstrap time
# (PMI2_Init until every id is in hand) of the slowest task, median of the
# runs, with its breakdown; then the ratio 3D / baseline.
#
#   bench/bootstrap.sh [--build DIR] [--runs N] [--comm-backend cpu|nccl]
#
# DIR is a configured and built tree (default: $DTRAIN_BUILD, else build/ in
# the source tree).  Needs root, the Slurm daemons and python3.  The cluster
# lives in a fresh folder under DIR and is stopped on exit.
set -uo pipefail
prog=bootstrap.sh
top=$(cd "$(dirname "$0")/.." && pwd)
build=${DTRAIN_BUILD:-$top/build} runs=5 backend=cpu
die() { echo "$prog: $1" >&2; exit "${2:-1}"; }
while [ $# -gt 0 ]; do
  case $1 in
    --build) [ $# -ge 2 ] || die "--build needs a folder" 2; build=$2; shift 2 ;;
    --runs) [ $# -ge 2 ] && [[ $2 =~ ^[1-9][0-9]{0,2}$ ]] || die "--runs needs a count from 1 to 999" 2; runs=$2; shift 2 ;;
    --comm-backend) [ $# -ge 2 ] && [[ $2 =~ ^(cpu|nccl)$ ]] || die "--comm-backend needs cpu or nccl" 2; backend=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/{/^set -uo/d;/^# SPDX-License-Identifier:/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) die "unknown option '$1' (see $0 --help)" 2 ;;
  esac
done
launch=$build/launcher/dtrain-launch
[ -x "$launch" ] || die "$launch is not built: configure and make in $build first (or give --build DIR)" 2
[ "$(id -u)" -eq 0 ] || die "needs root (slurmd launches the tasks as root)" 2
command -v python3 >/dev/null 2>&1 || die "needs python3 (apt-get install python3)" 2

dir=$(mktemp -d "$build/bench-bootstrap.XXXXXX") || die "cannot make a folder in $build"
stop() { "$top/scripts/local-cluster" stop --dir "$dir" >/dev/null 2>&1; rm -rf -- "$dir"; }
trap stop EXIT
"$top/scripts/local-cluster" start --dir "$dir" >"$dir/start.log" 2>&1 || { cat "$dir/start.log" >&2; die "the local cluster did not start"; }
export SLURM_CONF=$dir/slurm.conf

# run NAME TP PP: one step of 16 tasks, one JSON file per task in DIR/NAME
# (srun cuts lines longer than 1 KiB, so no shared stdout).
run() {
  local name=$1 tp=$2 pp=$3
  mkdir -p "$dir/$name"
  timeout 120 srun -Q -N2 -n16 --ntasks-per-node=8 --mpi=pmi2 -o "$dir/$name/%t" \
    "$launch" --json --comm-backend "$backend" --tp "$tp" --pp "$pp" ||
    die "srun dtrain-launch --tp $tp --pp $pp failed: $(cat "$dir/$name"/* | grep -v '^{' | head -3)"
}
# Alternate the shapes so that a machine growing busier affects both alike.
for ((r = 0; r < runs; r++)); do
  run "3d.$r" 4 2
  run "base.$r" 1 1
done

python3 - "$dir" "$runs" "$backend" <<'PY'
import glob, json, statistics, sys
d, runs, backend = sys.argv[1], int(sys.argv[2]), sys.argv[3]
PHASES = ["init", "place", "ids", "put", "fence", "get"]

def step(path):
    tasks = [json.loads(l) for f in glob.glob(path + "/*") for l in open(f) if l.startswith("{")]
    if len(tasks) != 16:
        sys.exit("bootstrap.sh: %s: %d task reports, expected 16" % (path, len(tasks)))
    slowest = max(tasks, key=lambda t: t["timing_us"]["bootstrap"])
    # the keys that went through the KVS: those whose id a member (not the
    # leader) holds after the fence (the other ids come over WORLD later)
    keys = {g["key"] for t in tasks for g in t["groups"].values() if g["rank"] > 0 and g["id"]}
    return slowest, len(keys), max(t["fences"] for t in tasks)

def shape(prefix):
    steps = [step("%s/%s.%d" % (d, prefix, r)) for r in range(runs)]
    med = lambda xs: statistics.median(xs) / 1000.0
    row = {"keys": steps[0][1], "fences": max(s[2] for s in steps),
           "bootstrap": med([s[0]["timing_us"]["bootstrap"] for s in steps])}
    for p in PHASES:
        row[p] = med([s[0]["timing_us"][p] for s in steps])
    t = steps[0][0]
    row["name"] = "T=%d P=%d D=%d" % (t["T"], t["P"], t["D"])
    return row

a, b = shape("3d"), shape("base")
print("dtrain-launch bootstrap: 16 tasks on 2 nodes (local Slurm on loopback), %s backend; ms, each "
      "figure the median over %d runs of the slowest task's value" % (backend, runs))
print("  %-14s %5s %7s %10s %s" % ("shape", "keys", "fences", "bootstrap", "  ".join("%6s" % p for p in PHASES)))
for r in (a, b):
    print("  %-14s %5d %7d %10.1f %s" % (r["name"], r["keys"], r["fences"], r["bootstrap"],
                                          "  ".join("%6.1f" % r[p] for p in PHASES)))
print("  ratio %s / %s (baseline): bootstrap %.2fx, keys %.1fx, fences %d vs %d"
      % (a["name"], b["name"], a["bootstrap"] / b["bootstrap"], a["keys"] / b["keys"], a["fences"], b["fences"]))
PY
