#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Multi-node NVLink domains on a real local Slurm of 4 nodes x 4 GPUs
# (HGX A100 4-GPU boards, hgx-a100-4gpu.xml, standing in for GB200 trays)
# whose NVML is the fake one (tests/health/fake_nvml.c, a hardware-boundary
# stand-in): every GPU reports its fabric registered, node1+node2 in clique 1
# and node3+node4 in clique 2 of one cluster (two NVLink domains of 8 GPUs).
# Site: max_tp=4 nvlink_domain_gpus=8.
#  - T=8 on 4 nodes x 4 tasks: each TP group holds the 2 nodes of one
#    clique, DTRAIN_NVLINK_DOMAIN names it, the PMI2 bootstrap (dtrain-launch)
#    succeeds;
#  - T=16 is refused by sbatch and srun, naming the domain size (8 GPUs);
#  - node2 moved to clique 2: the plugin (which sees only its own node)
#    places the step, and the launcher's PMI2 round refuses the TP group that
#    spans cliques 1 and 2, naming both, and ends the step (PMI2 abort:
#    the other members would wait for it in communicator set-up);
#  - --dtrain-pp-in-domain (node2 back in clique 1): T=4 P=2 on node1+node2
#    (one clique) is placed and bootstrapped, every task told the domain and
#    DTRAIN_PP_IN_DOMAIN=1; on node2+node3 the launcher refuses the PP group
#    naming both cliques; T=4 P=4 on 4 nodes is refused by sbatch (the PP
#    groups join 16 GPUs, a domain has 8); T=4 P=2 D=2 on 4 nodes passes
#    sbatch (PP groups join nodes 1+3 and 2+4 of Slurm's order) but
#    crosses cliques in Slurm's order (refused by the launcher), and runs
#    with a SLURM_HOSTFILE in the order node1 node3 node2 node4, which puts
#    each PP group on the 2 nodes of one clique.
#  - IMEX channels (issue 31): every step above runs with a fake channel
#    device (lib.sh fake_imex_channels); without one a T=8 step over 4
#    nodes fails at task start with exit 3 and one line per node naming
#    SwitchType=switch/nvidia_imex, a regular file named channel0 is no
#    channel, the same step with the fake channel runs, a step whose TP
#    groups stay inside nodes needs none, and imex_check=no turns the check
#    off.  /dev/nvidia-caps-imex-channels is at the hardware boundary: the
#    plugin reads a fake folder only because its root-owned plugstack line
#    says imex_channels=..., never from the job's environment.
# Slurm's topology/block (23.11+) is not testable here: Debian 12 has 22.05.
. "$abs_top_srcdir/tests/tap.sh"
. "$abs_srcdir/lib.sh"
need_plugin
fake=${DTRAIN_FAKE_NVML:?}
[ -f "$fake" ] || skip_all "fake NVML not built ($fake)"
launch=$abs_top_builddir/launcher/dtrain-launch
cluster=6d1e4a7b-0c2f-4e0a-9b1d-3c5e7f9a1b2c

new_cluster_dir nvlink
# nvml_conf NODE CLIQUE: NODE's fake NVML (read at each step)
nvml_conf() { fabric_nvml_conf "$LC_NEW/nvml-$1.conf" "$cluster" "$2"; }
nvml_conf node1 1; nvml_conf node2 1; nvml_conf node3 2; nvml_conf node4 2
fake_imex_channels "$LC_NEW/imex"
env_args=(--slurmd-env "DTRAIN_NVML_LIBRARY=$fake")
for k in 1 2 3 4; do env_args+=(--slurmd-env "node$k:FAKE_NVML_CONFIG=$LC_NEW/nvml-node$k.conf"); done
start_plugin_cluster "$LC_NEW" --nodes 4 --topology-all "$fixtures/hgx-a100-4gpu.xml" \
  --plugin-args "max_tp=4 nvlink_domain_gpus=8 $IMEX_SITE" "${env_args[@]}"
out=$D/client.out err=$D/client.err

# ---- T=8: TP groups of 2 whole nodes, inside one clique
run_client "$out" "$err" srun -N4 --ntasks-per-node=4 --dtrain-tp=8 sh "$show_task"
check "srun -N4 --ntasks-per-node=4 --dtrain-tp=8 is placed (exit $RC)" [ "$RC" -eq 0 ]
diag_file "$err"
problems=$(awk -v c="$cluster" '
    { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
      n++; r = v["rank"]; node = v["node"]
      if (v["T"] != 8 || v["D"] != 2 || v["tp"] != r % 8 || v["dp"] != int(r / 8)) { print "rank " r ": coordinates"; bad = 1 }
      want = (v["dp"] == 0) ? "node[12]" : "node[34]"
      if (node !~ ("^" want "$")) { print "rank " r " (TP group " v["dp"] ") on " node; bad = 1 }
      clique = (node == "node1" || node == "node2") ? 1 : 2
      if (v["nvd"] != c "/" clique) { print "rank " r " on " node ": DTRAIN_NVLINK_DOMAIN=" v["nvd"]; bad = 1 }
      g = node ":" v["gpu"]; if (g in seen) { print node ": GPU " v["gpu"] " twice"; bad = 1 } seen[g] = 1
    }
    END { if (n != 16) { print n " lines"; bad = 1 } exit bad }' "$out")
check "T=8: TP group 0 holds node1+node2 (clique 1), group 1 node3+node4 (clique 2), each task its own GPU, DTRAIN_NVLINK_DOMAIN names the clique${problems:+: $problems}" \
  [ -z "$problems" ]
grep -m2 'rank=[07] ' "$out" | sed 's/^/#   /'

run_client "$out" "$err" srun -N4 --ntasks-per-node=4 --mpi=pmi2 --dtrain-tp=8 -o "$D/launch.%t" "$launch" --print
cat "$D"/launch.[0-9]* >"$D/launch.out" 2>/dev/null
ok_lines=$(grep -c '^rank=.* placed_by=spank ' "$D/launch.out")
tp0=$(grep -o ' world.key=dt.w .* world.id=[^ ]*' "$D/launch.out" | sed 's/.* world.id=//' | sort -u | wc -l)
check "T=8 across nodes: the PMI2 bootstrap of 16 tasks succeeds, dt.tp.0 has 8 members, all 16 share WORLD's one id (exit $RC, $ok_lines lines)" \
  [ "$RC" -eq 0 -a "$ok_lines" -eq 16 -a "$(grep -c ' tp.key=dt.tp.0 ' "$D/launch.out")" -eq 8 -a "$tp0" -eq 1 ]
[ "$RC" -eq 0 ] || diag_file "$err"

# ---- T=16 does not fit a domain of 8
run_client "$out" "$err" sbatch -o /dev/null --dtrain-tp=16 -N4 --ntasks-per-node=4 --wrap true
check "sbatch --dtrain-tp=16 -N4 --ntasks-per-node=4: exit 3, one line naming the domain size (exit $RC)" \
  eval '[ "$RC" -eq 3 ] && one_dtrain_line "$err" && grep -q "T=16 is larger than .*NVLink domain (8 GPUs" "$err"'
diag_file "$err"
run_client "$out" "$err" srun -N4 --ntasks-per-node=4 --dtrain-tp=16 true
check "srun --dtrain-tp=16: refused before launching, naming the domain size (exit $RC)" \
  eval '[ "$RC" -eq 3 ] && grep -q "(8 GPUs" "$err" && [ ! -s "$out" ]'
diag_file "$err"

# ---- a TP group across two cliques: found in the launcher's PMI2 round
nvml_conf node2 2
run_client "$out" "$err" srun -N4 --ntasks-per-node=4 --mpi=pmi2 --dtrain-tp=8 -o "$D/cross.%t" "$launch" --print
cat "$err" "$D"/cross.[0-9]* >"$D/cross.out" 2>/dev/null
check "node2 in clique 2: the step fails, a member of TP group dt.tp.0 says it spans NVLink domains $cluster/2 and $cluster/1 (exit $RC)" \
  eval '[ "$RC" -ne 0 ] && grep -q "TP group dt.tp.0 (ranks 0-7) spans NVLink domains: rank [4-7] is in $cluster/2, its leader rank 0 in $cluster/1" "$D/cross.out"'
grep -m1 'spans NVLink' "$D/cross.out" | sed 's/^/#   /'

# ---- --dtrain-pp-in-domain: pipeline groups inside one clique
nvml_conf node2 1
run_client "$out" "$err" srun -w node1,node2 -N2 --ntasks-per-node=4 --dtrain-tp=4 --dtrain-pp=2 --dtrain-pp-in-domain sh "$show_task"
problems=$(awk -v c="$cluster" '
    { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
      n++; r = v["rank"]
      if (v["P"] != 2 || v["pp"] != int(r / 4) || v["node"] != "node" (int(r / 4) + 1)) { print "rank " r " on " v["node"]; bad = 1 }
      if (v["nvd"] != c "/1" || v["ppd"] != 1) { print "rank " r ": nvd=" v["nvd"] " ppd=" v["ppd"]; bad = 1 } }
    END { if (n != 8) { print n " lines"; bad = 1 } exit bad }' "$out")
check "pp-in-domain, T=4 P=2 on node1+node2 (clique 1): placed, stage 1 on node2, every task has DTRAIN_NVLINK_DOMAIN=.../1 and DTRAIN_PP_IN_DOMAIN=1 (exit $RC)${problems:+: $problems}" \
  [ "$RC" -eq 0 -a -z "$problems" ]
diag_file "$err"
run_client "$out" "$err" srun -w node1,node2 -N2 --ntasks-per-node=4 --mpi=pmi2 --dtrain-tp=4 --dtrain-pp=2 --dtrain-pp-in-domain \
  -o "$D/pp.%t" "$launch" --print
cat "$D"/pp.[0-9]* >"$D/pp.out" 2>/dev/null
check "... and its PMI2 bootstrap with the PP domain check succeeds (exit $RC, $(grep -c '^rank=.* placed_by=spank ' "$D/pp.out") of 8 lines)" \
  [ "$RC" -eq 0 -a "$(grep -c '^rank=.* placed_by=spank ' "$D/pp.out")" -eq 8 ]
[ "$RC" -eq 0 ] || diag_file "$err"

run_client "$out" "$err" srun -w node2,node3 -N2 --ntasks-per-node=4 --mpi=pmi2 --dtrain-tp=4 --dtrain-pp=2 --dtrain-pp-in-domain \
  -o "$D/ppx.%t" "$launch" --print
cat "$err" "$D"/ppx.[0-9]* >"$D/ppx.out" 2>/dev/null
check "pp-in-domain on node2+node3 (cliques 1 and 2): the launcher refuses a PP group naming both domains (exit $RC)" \
  eval '[ "$RC" -ne 0 ] && grep -q "PP group dt.pp.[0-3] (ranks [0-3]-[4-7]) spans NVLink domains: rank [4-7] is in $cluster/2, its leader rank [0-3] in $cluster/1" "$D/ppx.out"'
grep -m1 'spans NVLink' "$D/ppx.out" | sed 's/^/#   /'

run_client "$out" "$err" sbatch -o /dev/null -N4 --ntasks-per-node=4 --dtrain-tp=4 --dtrain-pp=4 --dtrain-pp-in-domain --wrap true
check "sbatch -N4 --ntasks-per-node=4 T=4 P=4 --dtrain-pp-in-domain: exit 3, one line: the PP groups join 16 GPUs, a domain has 8, P=2 fits (exit $RC)" \
  eval '[ "$RC" -eq 3 ] && one_dtrain_line "$err" && grep -q "join 4 nodes (16 GPUs), more than .*NVLink domain of 8 GPUs.*--dtrain-pp=2 or less" "$err"'
diag_file "$err"

# T=4 P=2 D=2: PP groups are ranks r and r+8, i.e. node positions 0+2 and 1+3
run_client "$out" "$err" srun -N4 --ntasks-per-node=4 --mpi=pmi2 --dtrain-tp=4 --dtrain-pp=2 --dtrain-pp-in-domain \
  -o "$D/ppo.%t" "$launch" --print
cat "$err" "$D"/ppo.[0-9]* >"$D/ppo.out" 2>/dev/null
check "pp-in-domain T=4 P=2 D=2 in Slurm's order (PP groups on node1+node3, node2+node4): refused by the launcher (exit $RC)" \
  eval '[ "$RC" -ne 0 ] && grep -q "PP group dt.pp.* spans NVLink domains" "$D/ppo.out"'
printf 'node1\nnode1\nnode1\nnode1\nnode3\nnode3\nnode3\nnode3\nnode2\nnode2\nnode2\nnode2\nnode4\nnode4\nnode4\nnode4\n' >"$D/pp-hosts"
SLURM_HOSTFILE=$D/pp-hosts run_client "$out" "$err" srun -n16 --distribution=arbitrary --mpi=pmi2 --dtrain-tp=4 --dtrain-pp=2 \
  --dtrain-pp-in-domain -o "$D/pph.%t" "$launch" --print
cat "$D"/pph.[0-9]* >"$D/pph.out" 2>/dev/null
if [ "$RC" -ne 0 ] && grep -q "Requested node configuration is not available\|queued and waiting" "$err"; then
  skip_test "this Slurm does not run srun --distribution=arbitrary here: $(head -n 1 "$err")"
else
  check "... with SLURM_HOSTFILE node1 node3 node2 node4 each PP group sits on the 2 nodes of one clique: bootstrapped (exit $RC, $(grep -c '^rank=.* placed_by=spank ' "$D/pph.out") of 16 lines)" \
    [ "$RC" -eq 0 -a "$(grep -c '^rank=.* placed_by=spank ' "$D/pph.out")" -eq 16 ]
  [ "$RC" -eq 0 ] || diag_file "$err"
fi

# ---- IMEX channels: TP groups across nodes need one (spank_plugin/imex.h)
site="max_tp=4 nvlink_domain_gpus=8"
imex_line="use NVLink between the nodes of domain $cluster/[12], which needs an IMEX channel, and the step has none"
fix="ask the admin for SwitchType=switch/nvidia_imex in slurm.conf (a channel per job) and the nvidia-imex daemon on the domain's nodes"
set_plugin_args "$D" "$site imex_channels=$D/imex-none"
run_client "$out" "$err" srun -N4 --ntasks-per-node=4 --dtrain-tp=8 sh "$show_task"
check "no IMEX channel: T=8 over 4 nodes fails at task start, exit 3, one line per node naming switch/nvidia_imex (exit $RC, $(grep -c '^dtrain: ' "$err") lines)" \
  eval '[ "$RC" -eq 3 ] && [ ! -s "$out" ] && [ "$(grep -c "^dtrain: " "$err")" -eq 4 ] &&
        [ "$(grep -c "^dtrain: node[1-4]: the step.s TP groups (T=8 over 4 tasks per node) $imex_line ($D/imex-none does not exist): $fix\$" "$err")" -eq 4 ]'
diag_file "$err"
mkdir -p "$D/imex-file" && : >"$D/imex-file/channel0"
set_plugin_args "$D" "$site imex_channels=$D/imex-file"
run_client "$out" "$err" srun -w node1,node2 -N2 --ntasks-per-node=4 --dtrain-tp=8 sh "$show_task"
check "a regular file named channel0 is no channel: refused the same way, saying so (exit $RC)" \
  eval '[ "$RC" -eq 3 ] && [ "$(grep -c "^dtrain: node[12]: .*$imex_line ($D/imex-file holds no channel device (channel0 is a regular file, not a character device)): ask the admin for SwitchType=switch/nvidia_imex" "$err")" -eq 2 ]'
diag_file "$err"
if [ -n "$IMEX_WHY" ]; then
  skip_test "$IMEX_WHY"
else
  set_plugin_args "$D" "$site $IMEX_SITE"
  run_client "$out" "$err" srun -w node1,node2 -N2 --ntasks-per-node=4 --dtrain-tp=8 --dtrain-verbose sh "$show_task"
  check "the same step with a (fake) channel device runs: 8 tasks placed, --dtrain-verbose names the channel on each node (exit $RC)" \
    eval '[ "$RC" -eq 0 ] && [ "$(grep -c " T=8 " "$out")" -eq 8 ] &&
          [ "$(grep -c "^dtrain: node[12]: IMEX channel $LC_NEW/imex/channel1\$" "$err")" -eq 2 ]'
  [ "$RC" -eq 0 ] || diag_file "$err"
fi
set_plugin_args "$D" "$site imex_channels=$D/imex-none"
run_client "$out" "$err" srun -N2 --ntasks-per-node=4 --dtrain-tp=4 sh "$show_task"
check "TP groups inside nodes (T=4, 2 nodes) need no channel: runs without one (exit $RC)" \
  eval '[ "$RC" -eq 0 ] && [ "$(grep -c " T=4 " "$out")" -eq 8 ] && ! grep -q IMEX "$err"'
set_plugin_args "$D" "$site imex_check=no imex_channels=$D/imex-none"
run_client "$out" "$err" srun -w node1,node2 -N2 --ntasks-per-node=4 --dtrain-tp=8 sh "$show_task"
check "imex_check=no: the site turns the check off, the T=8 step runs without a channel (exit $RC)" \
  eval '[ "$RC" -eq 0 ] && [ "$(grep -c " T=8 " "$out")" -eq 8 ]'
done_testing
