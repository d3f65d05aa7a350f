#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# bench/openmpi.sh: the cpu comm backend's collectives against Open MPI's on
# the same machine, in one run: all-reduce, all-gather and reduce-scatter
# of 64 MiB (nccl-tests' sizes: the all-reduce buffer, all-gather's output,
# reduce-scatter's input) on 2 and 4 local processes.
#
#   bench/openmpi.sh [--build DIR] [--ranks 2,4] [--size 64M] [--runs N]
#
# dtrain: DIR/bench/dtrain-bench-collectives (shared memory between the
# processes, as the launcher sets it up on one node).  Open MPI: bench_mpi.c
# of this folder built with mpicc in a temporary folder and run with mpirun
# (--oversubscribe where the ranks outnumber the CPUs), Open MPI's defaults
# otherwise: what a user of the Debian package gets (its shared-memory
# transport's single-copy mechanism is printed).  Both time each call the
# same way (the slowest rank's mean over 4 calls, the median of 5
# repetitions); runs alternate (dtrain, Open MPI, dtrain, ...) and each
# side's best run counts.  busbw as nccl-tests: algbw * 2(n-1)/n for
# all-reduce, algbw * (n-1)/n for the others.  Target: dtrain's busbw >= 3x
# Open MPI's for each operation and rank count.
#
# Without mpicc and mpirun (Debian: openmpi-bin libopenmpi-dev) the script
# says so and exits 0, nothing measured: MPI is no dependency of dtrain.
set -uo pipefail
prog=openmpi.sh
top=$(cd "$(dirname "$0")/.." && pwd)
build=${DTRAIN_BUILD:-$top/build} ranks=2,4 size=64M runs=3 TARGET=3
die() { echo "$prog: $1" >&2; exit "${2:-1}"; }
while [ $# -gt 0 ]; do
  case $1 in
    --build) [ $# -ge 2 ] || die "--build needs a folder" 2; build=$2; shift 2 ;;
    --ranks) [ $# -ge 2 ] && [[ $2 =~ ^[2-8](,[2-8])*$ ]] || die "--ranks needs counts from 2 to 8, e.g. 2,4" 2
      ranks=$2; shift 2 ;;
    --size) [ $# -ge 2 ] && [[ $2 =~ ^[1-9][0-9]*[KM]$ ]] || die "--size needs a size such as 64M or 256K" 2
      size=$2; shift 2 ;;
    --runs) [ $# -ge 2 ] && [[ $2 =~ ^[1-9][0-9]?$ ]] || die "--runs needs a count from 1 to 99" 2; runs=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/{/^set -uo/d;/^# SPDX-License-Identifier:/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) die "unknown option '$1' (see $0 --help)" 2 ;;
  esac
done
if ! command -v mpicc >/dev/null 2>&1 || ! command -v mpirun >/dev/null 2>&1; then
  echo "$prog: not measured: Open MPI is needed (apt-get install openmpi-bin libopenmpi-dev)"
  exit 0
fi
bench=$build/bench/dtrain-bench-collectives
[ -x "$bench" ] || die "$bench is not built: configure and make in $build first (or give --build DIR)" 2
case $size in *K) bytes=$((${size%K} << 10)) ;; *M) bytes=$((${size%M} << 20)) ;; esac

dir=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-openmpi.XXXXXX") || die "cannot make a temporary folder"
trap 'rm -rf -- "$dir"' EXIT
mpicc -O2 -Wall -o "$dir/bench_mpi" "$top/bench/bench_mpi.c" 2>"$dir/cc.log" ||
  die "building bench_mpi.c with mpicc failed: $(head -3 "$dir/cc.log")"

# mpirun as root needs Open MPI's two consents (this machine's tests run as root)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cpus=$(nproc)
copy=$(ompi_info --parsable --param btl vader --level 9 2>/dev/null |
  sed -n 's/^mca:btl:vader:param:btl_vader_single_copy_mechanism:value:\(.*\)$/\1/p' | head -1)
echo "$prog: $size, ranks $ranks, best of $runs alternating runs; $(mpirun --version 2>/dev/null | head -1)" \
  "(shared-memory single copy: ${copy:-unknown}); $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $cpus CPUs," \
  "load $(cut -d' ' -f1-3 /proc/loadavg)"

# "N op busbw" lines of a run of either side.  bench_mpi's rows read:
# ranks op size count iters time algbw busbw; dtrain's have the place
# after the op.  Open MPI's calls are all out of place: dtrain's all-gather
# and reduce-scatter rows out of place are compared with them, and its
# all-reduce (in place, its only form) with MPI_Allreduce apart.
rows() { awk '$1 ~ /^[0-9]+$/ && NF >= 8 {print $1, $2, $8}'; }
run_dtrain() {
  "$bench" --ranks "$1" --min "$size" --max "$size" >"$dir/dtrain.log" 2>&1 ||
    die "dtrain-bench-collectives failed: $(tail -2 "$dir/dtrain.log")"
  awk '$1 ~ /^[0-9]+$/ && NF >= 9 && ($3 == "out-of-place" || $2 == "allreduce") {print $1, $2, $9}' "$dir/dtrain.log"
}
run_mpi() {
  local over=()
  [ "$1" -gt "$cpus" ] && over=(--oversubscribe)
  mpirun "${over[@]}" -np "$1" "$dir/bench_mpi" "$bytes" 5 4 >"$dir/mpi.log" 2>&1 ||
    die "mpirun -np $1 bench_mpi failed: $(grep -v '^ *$' "$dir/mpi.log" | tail -2)"
  rows <"$dir/mpi.log"
}
: >"$dir/all"
for ((r = 0; r < runs; r++)); do
  for n in ${ranks//,/ }; do
    run_dtrain "$n" | sed 's/^/dtrain /' >>"$dir/all" || exit 1
    run_mpi "$n" | sed 's/^/mpi /' >>"$dir/all" || exit 1
  done
  echo "  run $((r + 1)) done"
done
# the best busbw of each side, op and rank count, and the ratio
awk -v t=$TARGET '
  { k = $2 " " $3; if (!(k in seen)) { seen[k] = 1; order[++n] = k }
    if ($4 > best[$1, k]) best[$1, k] = $4 }
  END {
    printf "%6s  %-14s %14s %14s %8s\n", "ranks", "op", "dtrain GB/s", "Open MPI GB/s", "ratio"
    for (i = 1; i <= n; i++) {
      k = order[i]; d = best["dtrain", k]; m = best["mpi", k]; split(k, f, " ")
      r = m > 0 ? d / m : 0
      printf "%6s  %-14s %14.3f %14.3f %7.2fx (target >= %gx: %s)\n", f[1], f[2], d, m, r, t, (r >= t ? "met" : "NOT met")
    }
  }' "$dir/all"
