# SPDX-License-Identifier: GPL-2.0-or-later
# What the real-Slurm scripts of tests/parallel share (sourced after
# tests/tap.sh and tests/slurm/lib.sh):
#   start_gpu_cluster NAME PLUGIN-ARGS  a fresh local cluster (its folder in
#       $d): 2 slurmd on loopback with 8 CPUs each, every node a saved 4-GPU
#       HGX A100 topology (a hardware stand-in), the dtrain plugin with
#       PLUGIN-ARGS; and $d/tokens.bin, byte-level tokens of the docs in the
#       tree.  Two test points; ends the script (done_testing) when the
#       cluster does not start.
start_gpu_cluster() {
  local name=$1 args=$2 out rc
  new_cluster_dir "$name"; d=$LC_NEW
  cat "$abs_top_srcdir"/doc/*.md >"$d/corpus.txt"
  check "dtrain-tokenize makes byte-level tokens of the docs" \
    "$abs_top_builddir/runtime/dtrain-tokenize" "$d/corpus.txt" "$d/tokens.bin"
  out=$(lc start --dir "$d" --nodes 2 --cpus-per-node 8 --topology-all "$fixtures/hgx-a100-4gpu.xml" \
    --plugin "$plugin" --plugin-args "$args" 2>&1)
  rc=$?
  check "a 2-node cluster of 4-GPU nodes with the dtrain plugin starts" [ "$rc" -eq 0 ]
  [ "$rc" -eq 0 ] || { printf '%s\n' "$out" | sed 's/^/# /'; done_testing; }
}
