# SPDX-License-Identifier: GPL-2.0-or-later
# Helpers for the plugin's integration tests; source after tests/tap.sh.
# Builds on tests/slurm/lib.sh (lc, new_cluster_dir, check_cluster_start,
# in_cluster, job_field, wait_job, slurmd_pid: clusters are stopped at exit).
#   (need_plugin and plugin come from tests/slurm/lib.sh)
#   start_plugin_cluster DIR LC-START-ARGS...
#                            start a cluster in DIR (from new_cluster_dir) whose
#                            plugstack.conf loads dtrain.so; sets D=DIR
#   set_plugin_args D ARGS   rewrite D's plugstack line (sbatch, srun and every
#                            new slurmstepd read it again; no restart needed)
#   run_client OUT ERR CMD...  run a Slurm client, stdout/stderr to files; sets RC
#   one_dtrain_line ERR      ERR holds exactly one line, starting "dtrain: "
#   diag_file FILE           its first lines as TAP comments
#   slurm_version D          sets version (e.g. 24.11.5) from D's sinfo
#   slurm_at_least M N       the version is M.N or later
#   (fake_imex_channels is in tests/slurm/lib.sh)
: "${abs_srcdir:?run through make check}" "${abs_top_builddir:?run through make check}"
. "$abs_top_srcdir/tests/slurm/lib.sh"

show_task=$abs_srcdir/show-task.sh

start_plugin_cluster() {
  D=$1
  shift
  check_cluster_start "a local cluster with dtrain.so in its plugstack.conf is up ($*)" "$D" --plugin "$plugin" "$@"
}

set_plugin_args() {
  # keep the cluster's own master_ports= block (scripts/local-cluster) unless ARGS give one
  local mp
  mp=$(grep -o ' master_ports=[0-9-]*' "$1/plugstack.conf" 2>/dev/null | head -n 1)
  case " $2" in *" master_ports="*) mp="" ;; esac
  printf 'required %s %s%s\n' "$plugin" "$2" "$mp" >"$1/plugstack.conf"
}

run_client() {
  local out=$1 err=$2
  shift 2
  in_cluster "$D" timeout 120 "$@" >"$out" 2>"$err"
  RC=$?
}

one_dtrain_line() {
  [ "$(wc -l <"$1")" -eq 1 ] && grep -q '^dtrain: ' "$1"
}

diag_file() { head -n 3 "$1" | sed 's/^/#   /'; }

slurm_version() { version=$(in_cluster "$1" sinfo --version 2>/dev/null | awk '{ print $2 }'); }

slurm_at_least() {
  local major=${version%%.*} minor=${version#*.}
  minor=${minor%%.*}
  [ "${major:-0}" -gt "$1" ] 2>/dev/null || { [ "${major:-0}" -eq "$1" ] && [ "${minor:-0}" -ge "$2" ]; } 2>/dev/null
}

