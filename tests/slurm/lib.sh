# SPDX-License-Identifier: GPL-2.0-or-later
# Shared helpers for the tests in tests/slurm/; source after tests/tap.sh.
#   lc ARGS...            run scripts/local-cluster
#   need_cluster_tools    skip_all unless root with the Slurm daemons installed
#   new_cluster_dir NAME  sets LC_NEW to a fresh folder under the build
#                         folder, stopped (and removed when all passed) at exit
#   check_cluster_start DESC DIR LC-START-ARGS...
#                         one test point: local-cluster start --dir DIR ARGS;
#                         when it fails, its output as comments and the test
#                         ends there (done_testing)
#   in_cluster DIR CMD... run a Slurm client command against DIR's cluster
#   dir_processes DIR     PIDs of processes that belong to DIR's cluster
#   wait_for S CMD...     run CMD once a second until it succeeds (status 0),
#                         S seconds at most (status 1)
#   wait_job DIR JOBID S  wait until the job is finished (S seconds at most)
#   job_field DIR JOBID F one field of `scontrol show job` (e.g. JobState)
#   plugin                the dtrain SPANK plugin of this build
#   plugin_unusable       prints why this build's plugin cannot be loaded by
#                         slurmstepd (not built, or an ASan build); nothing
#                         (status 1) when it can
#   need_plugin           skip_all unless need_cluster_tools holds and the
#                         plugin can be loaded
#   fake_imex_channels DIR   a stand-in for /dev/nvidia-caps-imex-channels
#                            (the hardware boundary): DIR with one character
#                            device, channel1 (major 240, a local/experimental
#                            number: the plugin only looks at the type and
#                            the name).  Sets IMEX_SITE to the plugstack
#                            words that point the plugin at it (the only way:
#                            a site key, never the job's environment), or to
#                            imex_check=no with IMEX_WHY when mknod is not
#                            allowed here (no root / CAP_MKNOD)
#   fabric_nvml_conf FILE CLUSTER CLIQUE
#                            a fake NVML's config (tests/topo's fake, the
#                            hardware boundary) for the 4 GPUs of
#                            hgx-a100-4gpu.xml, registered in the NVLink
#                            fabric CLUSTER (a UUID), clique CLIQUE
# DTRAIN_TEST_CLUSTERS=0 in the environment skips every test that starts a
# cluster (a package build, a machine where Slurm must not be started).
: "${abs_top_srcdir:?run through make check}" "${abs_builddir:?run through make check}"
# make distcheck's abs_top_srcdir has "..": local-cluster resolves the paths
# it is given, so resolve the tree once here for comparisons to hold.
abs_top_srcdir=$(cd "$abs_top_srcdir" && pwd -P) || exit 1
local_cluster=$abs_top_srcdir/scripts/local-cluster
fixtures=$abs_top_srcdir/tests/fixtures/topology
PATH=$PATH:/usr/sbin:/sbin

lc() { "$local_cluster" "$@"; }

need_cluster_tools() {
  [ "${DTRAIN_TEST_CLUSTERS:-1}" != 0 ] || skip_all "DTRAIN_TEST_CLUSTERS=0: no test cluster is started"
  [ "$(id -u)" -eq 0 ] || skip_all "needs root (slurmd launches jobs as root)"
  local b
  for b in munged slurmctld slurmd srun sbatch sinfo scontrol; do
    command -v "$b" >/dev/null 2>&1 || skip_all "$b not installed (apt-get install munge slurmctld slurmd slurm-client)"
  done
}

plugin=${abs_top_builddir:-}/spank_plugin/.libs/dtrain.so

plugin_unusable() {
  if [ ! -f "$plugin" ]; then
    echo "the dtrain plugin is not built ($plugin)"
  elif "$abs_top_builddir/config.status" --config | grep -q -- --enable-sanitizers; then
    echo "sanitizer build: slurmstepd cannot load a plugin built with ASan (run in the normal build)"
  else
    return 1
  fi
}

need_plugin() {
  need_cluster_tools
  local why
  if why=$(plugin_unusable); then skip_all "$why"; fi
}

LC_DIRS=()
cleanup_clusters() {
  local d
  for d in "${LC_DIRS[@]}"; do
    lc stop --dir "$d" >/dev/null 2>&1
    # Keep the logs of a failed test for reading; remove the rest.
    if [ "$TAP_FAILED" -eq 0 ]; then rm -rf -- "$d"; else diag "logs kept in $d/log"; fi
  done
}
trap cleanup_clusters EXIT

new_cluster_dir() {
  LC_NEW=$(mktemp -d "$abs_builddir/cluster.$1.XXXXXX") || { echo "cannot create a folder in $abs_builddir" >&2; exit 1; }
  LC_DIRS+=("$LC_NEW")
}

check_cluster_start() {
  local desc=$1 dir=$2 out rc
  shift 2
  out=$(lc start --dir "$dir" "$@" 2>&1)
  rc=$?
  check "$desc" [ "$rc" -eq 0 ]
  [ "$rc" -eq 0 ] || { printf '%s\n' "$out" | sed 's/^/# /'; done_testing; }
}

in_cluster() {
  local d=$1
  shift
  SLURM_CONF=$d/slurm.conf "$@"
}

# PIDs whose command line names a file of DIR, or whose environment carries
# local-cluster's marker for DIR.
dir_processes() {
  local d=$1 p
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    [ "$p" != $$ ] && [ "$p" != "$BASHPID" ] || continue
    if tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline" | grep -qF -- "$d/" ||
       tr '\0' '\n' 2>/dev/null <"/proc/$p/environ" | grep -qxF -- "DTRAIN_LOCAL_CLUSTER_DAEMON=$d"; then
      echo "$p"
    fi
  done
}

job_field() {
  in_cluster "$1" scontrol show job "$2" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$3=//p" | head -n 1
}

wait_for() {
  local bound=$1 i
  shift
  for ((i = 0; i < bound; i++)); do
    "$@" && return 0
    sleep 1
  done
  return 1
}

# job_finished DIR JOBID: the job is in a final state.
job_finished() {
  case $(job_field "$1" "$2" JobState) in
    COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE) return 0 ;;
  esac
  return 1
}

wait_job() { wait_for "$3" job_finished "$1" "$2"; }

# sinfo_is DIR FORMAT WANT: `sinfo -h -N -o FORMAT` of DIR, sorted, unique
# and on one line (each line followed by a space), is WANT.  Slurm state
# settles after the event that changed it (a node still COMPLETING right
# after a step, a node registering after a start): read it with
# `wait_for SECONDS sinfo_is ...`, never once.
sinfo_is() { [ "$(in_cluster "$1" sinfo -h -N -o "$2" 2>/dev/null | sort -u | tr '\n' ' ')" = "$3" ]; }

# slurmd_pid DIR NODE: the PID of DIR's slurmd for NODE.
slurmd_pid() { tr -dc '0-9' <"$1/pids/slurmd-$2.pid" 2>/dev/null; }

# environ_of PID: the process environment, one variable a line.
environ_of() { tr '\0' '\n' 2>/dev/null <"/proc/$1/environ"; }

fake_imex_channels() {
  mkdir -p "$1" && rm -f "$1/channel1"
  if IMEX_WHY=$(mknod -m 0666 "$1/channel1" c 240 1 2>&1); then
    IMEX_SITE="imex_channels=$1" IMEX_WHY=""
  else
    IMEX_SITE="imex_check=no" IMEX_WHY="cannot make a fake IMEX channel device (mknod: $IMEX_WHY)"
  fi
}

fabric_nvml_conf() {
  cat >"$1" <<CONF
count = 4
all.name = NVIDIA GB200
all.fabric_state = 3
all.fabric_cluster = $2
all.fabric_clique = $3
gpu0.busid = 0000:01:00.0
gpu1.busid = 0000:41:00.0
gpu2.busid = 0000:81:00.0
gpu3.busid = 0000:c1:00.0
CONF
}
