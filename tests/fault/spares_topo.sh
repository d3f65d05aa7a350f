#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Spares chosen by topology, under a real local Slurm (scripts/local-cluster)
# of 4 nodes with the dtrain plugin: TopologyPlugin=topology/tree with 2 leaf
# switches crossed with the node order (leaf1: node1, node4; leaf2: node2,
# node3), each node a 4-GPU HGX A100 board by its saved hwloc topology and
# the fake NVML (tests/health/fake_nvml.c), both hardware stand-ins, whose
# GPUs report a multi-node NVLink domain (site nvlink_domain_gpus=8):
# node1 and node2 in clique 1, node3 and node4 in clique 2.  Every job is
#     sbatch -N2 --ntasks-per-node=2 --dtrain-spares=2 ...
#     exec dtrain-launch --supervise -- srun --mpi=pmi2 --ntasks-per-node=2 dtrain-launch ...
# so node1 and node2 run the ranks and node3 and node4 are the spares, and
# trains the tiny model of spares.sh (24 steps, a checkpoint every 4) with
# rank 1 (node1) or rank 2 (node2) killed at step 10:
#  - the report step: every node says its topology address and clique;
#  - T=2 (TP groups inside a node; no domain needed): node1 fails, and
#    node4, under node1's leaf switch, takes its place, not node3, the first
#    spare in Slurm's order (the rule before); COMPLETED without a requeue,
#    bit for bit with a reference run;
#  - T=4 on 2 tasks per node (each TP group holds 2 nodes of one domain):
#    rank 0 says the TP groups stay in one domain; node1 fails and both
#    spares are in the other clique: the restart is refused on one line and
#    the job is requeued (the fallback), then COMPLETED after 1 requeue, bit
#    for bit;
#  - T=4 with node4 moved to clique 1: node2 fails; node4 (its domain, the
#    other leaf) is taken over node3 (its leaf switch, the other domain);
#    the restarted step's TP group node1+node4 passes the launcher's PMI2
#    domain check; COMPLETED without a requeue, bit for bit.
. "$abs_top_srcdir/tests/tap.sh"
. "$abs_top_srcdir/tests/slurm/lib.sh"
need_plugin
fake=${DTRAIN_FAKE_NVML:?}
[ -f "$fake" ] || skip_all "fake NVML not built ($fake)"
launch=$abs_top_builddir/launcher/dtrain-launch
tokenize=$abs_top_builddir/runtime/dtrain-tokenize
steps=24 every=4
cluster=6d1e4a7b-0c2f-4e0a-9b1d-3c5e7f9a1b2c

new_cluster_dir spares_topo; d=$LC_NEW
cat "$abs_top_srcdir"/doc/*.md >"$d/corpus.txt"
"$tokenize" "$d/corpus.txt" "$d/tokens.bin" >/dev/null || { fail "dtrain-tokenize the docs"; done_testing; }
# nvml_conf NODE CLIQUE: NODE's fake NVML (read at each step)
nvml_conf() { fabric_nvml_conf "$d/nvml-$1.conf" "$cluster" "$2"; }
nvml_conf node1 1; nvml_conf node2 1; nvml_conf node3 2; nvml_conf node4 2
env_args=(--slurmd-env "DTRAIN_NVML_LIBRARY=$fake")
for k in 1 2 3 4; do env_args+=(--slurmd-env "node$k:FAKE_NVML_CONFIG=$d/nvml-node$k.conf"); done
cat >"$d/topology.conf" <<'CONF'
SwitchName=leaf1 Nodes=node1,node4
SwitchName=leaf2 Nodes=node2,node3
SwitchName=spine Switches=leaf1,leaf2
CONF
printf 'TopologyPlugin=topology/tree\nSchedulerParameters=nohold_on_prolog_fail,bf_interval=1,sched_interval=2\nSlurmdTimeout=20\n' \
  >"$d/extra.conf"
# TP groups over 2 nodes of a domain need an IMEX channel (the plugin checks
# at task start): a fake one at the hardware boundary, as in nvlink_domain.sh
fake_imex_channels "$d/imex"
[ -z "$IMEX_WHY" ] || diag "$IMEX_WHY: the plugin's IMEX check is off"
check_cluster_start "a 4-node cluster, 2 leaf switches, 2 NVLink cliques, the plugin, RequeueExit=75 starts" "$d" \
  --nodes 4 --cpus-per-node 4 --topology-all "$fixtures/hgx-a100-4gpu.xml" --plugin "$plugin" \
  --plugin-args "max_tp=8 nvlink_domain_gpus=8 $IMEX_SITE" "${env_args[@]}" --requeue-delay 5 --slurm-conf-extra "$d/extra.conf"

trainer=(--data "$d/tokens.bin" --layers 2 --channels 32 --heads 4 --vocab-size 256 --padded-vocab-size 256
  --max-seq-len 16 --seq 16 --batch 8 --steps "$steps" --lr 3e-3 --grad-clip 1 --seed 7 --threads 1
  --log-every 0 --checkpoint-every "$every" --comm-timeout 5 --zero1 1)
. "$abs_top_srcdir/tests/fault/lib.sh"
# submit NAME T INJECT SUPERVISE SBATCH-ARGS...: a job of T=T under dtrain-launch
# --supervise (SUPERVISE 1) or the plain srun step (0); prints its id.
submit() {
  local name=$1 tp=$2 inject=$3 sup=$4
  shift 4
  {
    echo '#!/bin/bash'
    echo 'export OPENBLAS_NUM_THREADS=1'
    printf 'export DTRAIN_FAULT_LOG=%q\n' "$d/$name.events"
    echo 'echo "job: start, restart ${SLURM_RESTART_COUNT:-0}, on $SLURM_JOB_NODELIST"'
    if [ "$sup" = 1 ]; then printf 'exec %q --supervise -- ' "$launch"; fi
    printf 'srun --mpi=pmi2 --ntasks-per-node=2 %q' "$launch"
    printf ' %q' "${trainer[@]}" --metrics "$d/$name.jsonl"
    [ -z "$inject" ] || printf ' --inject %q' "$inject"
    echo
  } >"$d/$name.sbatch"
  in_cluster "$d" sbatch --parsable --dtrain-tp="$tp" --dtrain-ckpt-dir="$d/$name.ckpt" --open-mode=append \
    -o "$d/$name.out" "$@" "$d/$name.sbatch" 2>"$d/$name.err"
}
# same_as NAME REF: every step's loss of NAME is REF's, bit for bit (%.9g).
same_as() { [ "$(losses "$d/$1.jsonl" | wc -l)" -eq "$steps" ] && [ "$(losses "$d/$1.jsonl")" = "$(losses "$d/$2.jsonl")" ]; }
# nodes_of NAME RESTART: the nodes of the ranks' events in run RESTART of NAME's timeline.
nodes_of() {
  sed -n "s/.*\"rank\": [0-9][0-9]*, \"node\": \"\([^\"]*\)\", \"step\": [-0-9]*, \"restart\": $2,.*/\1/p" \
    "$d/$1.events" 2>/dev/null | sort -u | tr '\n' ' '
}
spares=(--dtrain-spares=2 --dtrain-max-restarts=3)

# ---- the report step alone: one task per node, whatever the job's shape
# (T=3 on 4 tasks: refused by srun unless DTRAIN_NODE_REPORT=1 asks for the report)
t0=$(date +%s.%N)
DTRAIN_NODE_REPORT=1 in_cluster "$d" srun -N4 -n4 --ntasks-per-node=1 --mpi=none --dtrain-tp=3 "$launch" --node-report \
  >"$d/report.out" 2>"$d/report.err"
rc=$? t1=$(date +%s.%N)
sort "$d/report.out" | sed 's/^/#   /'
want=$(printf 'dtrain-node-report node%s spine.leaf%s.node%s switch.switch.node %s/%s\n' \
  1 1 1 "$cluster" 1  2 2 2 "$cluster" 1  3 2 3 "$cluster" 2  4 1 4 "$cluster" 2)
check "report step: each node says its leaf switch and its clique (exit $rc, $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }') s with the allocation)" \
  eval '[ "$rc" -eq 0 ] && [ "$(sort "$d/report.out")" = "$want" ]'
[ "$rc" -eq 0 ] || sed "s/^/#   /" "$d/report.err"
in_cluster "$d" srun -N4 -n4 --ntasks-per-node=1 --mpi=none --dtrain-tp=3 "$launch" --node-report >"$d/report.out" 2>"$d/report.err"
rc=$?
check "... the same step without DTRAIN_NODE_REPORT=1 is refused by srun ($(head -c 100 "$d/report.err"), exit $rc)" \
  eval '[ "$rc" -ne 0 ] && grep -q "^dtrain: T=3" "$d/report.err" && [ ! -s "$d/report.out" ]'

# ---- the references: T=2 and T=4, no fault, no supervisor
base2=$(submit base2 2 "" 0 -N2 --ntasks-per-node=2 -w node1,node2)
base4=$(submit base4 4 "" 0 -N2 --ntasks-per-node=2 -w node3,node4)
check "two reference jobs submitted (T=2, T=4)" [ -n "$base2" -a -n "$base4" ]
wait_job "$d" "$base2" 240 || diag "base2: job $base2 did not end within 240 s"
wait_job "$d" "$base4" 240 || diag "base4: job $base4 did not end within 240 s"
check "references: COMPLETED, $steps steps of metrics each" \
  eval 'ended base2 "$base2" COMPLETED 0 && ended base4 "$base4" COMPLETED 0 &&
        [ "$(losses "$d/base2.jsonl" | wc -l)" -eq "$steps" ] && [ "$(losses "$d/base4.jsonl" | wc -l)" -eq "$steps" ]'

# ---- T=2: the spare under the failed node's leaf switch
leaf=$(submit leaf 2 "kill:rank=1:step=10" 1 -N2 --ntasks-per-node=2 "${spares[@]}")
check "leaf: a job submitted (-N2 --dtrain-spares=2, T=2)" [ -n "$leaf" ]
wait_job "$d" "$leaf" 240 || diag "leaf: job $leaf did not end within 240 s"
check "leaf: COMPLETED without a requeue (Restarts=0)" ended leaf "$leaf" COMPLETED 0
check "leaf: rank 0 says the layout, no group kept in a domain" \
  has leaf "^dtrain-launch: layout T=2 P=1 D=2, 2 tasks per node; kept in one NVLink domain: none$"
check "leaf: the first step ran on node1 and node2" eval '[ "$(nodes_of leaf 0)" = "node1 node2 " ]'
check "leaf: node1 fails; node4, under its leaf switch leaf1, takes its place (not node3, the first spare)" \
  has leaf "^dtrain-launch: node1 failed (srun: error: node1: task 1: Killed): step restarted in the job on node2,node4 with spare node4 for node1 (same leaf switch leaf1), restart 1 of at most 3 (1 spare left)$"
check "leaf: the restarted step's ranks ran on node2 and node4" eval '[ "$(nodes_of leaf 1)" = "node2 node4 " ]'
check "leaf: every step's loss equals the reference's, bit for bit" same_as leaf base2
check "leaf: no node failed to say where it is" eval '! has leaf "did not say where they are"'

# ---- T=4 over 2 nodes: the domain is required, both spares are outside it
refuse=$(submit refuse 4 "kill:rank=1:step=10" 1 -N2 --ntasks-per-node=2 "${spares[@]}")
check "refuse: a job submitted (T=4 on 2 tasks per node: TP groups of 2 nodes)" [ -n "$refuse" ]
wait_job "$d" "$refuse" 300 || diag "refuse: job $refuse did not end within 300 s"
check "refuse: rank 0 says the TP groups stay in one NVLink domain" \
  has refuse "^dtrain-launch: layout T=4 P=1 D=1, 2 tasks per node; kept in one NVLink domain: TP groups$"
check "refuse: node1 fails, both spares are in the other clique: refused on one line, naming the domains" \
  has refuse "^dtrain-launch: node1 failed (srun: error: node1: task 1: Killed) and no spare left keeps the step's TP groups in one NVLink domain (node1 is in $cluster/1; with spare node4 (NVLink domain $cluster/2): the TP group of ranks 0-3 would hold node2 (NVLink domain $cluster/1) and node4 (NVLink domain $cluster/2)): not restarted in the job$"
check "refuse: the job takes the requeue path (exit 75) and is COMPLETED after 1 requeue" \
  eval 'has refuse "exit 75 (requeue, restart 1 of at most 3)" && ended refuse "$refuse" COMPLETED 1 &&
        ! has refuse "step restarted in the job"'
check "refuse: no rank ever ran on a spare" \
  eval '[ "$(nodes_of refuse 0)" = "node1 node2 " ] && [ "$(nodes_of refuse 1)" = "node1 node2 " ]'
check "refuse: every step's loss equals the reference's, bit for bit" same_as refuse base4

# ---- T=4, node4 moved into clique 1: the spare in the domain, over the one under the leaf switch
nvml_conf node4 1
dom=$(submit dom 4 "kill:rank=2:step=10" 1 -N2 --ntasks-per-node=2 "${spares[@]}")
check "domain: a job submitted (T=4, node4 now in clique 1)" [ -n "$dom" ]
wait_job "$d" "$dom" 240 || diag "domain: job $dom did not end within 240 s"
check "domain: COMPLETED without a requeue (Restarts=0)" ended dom "$dom" COMPLETED 0
check "domain: node2 fails; node4 (its NVLink domain) takes its place, not node3 (its leaf switch leaf2)" \
  has dom "^dtrain-launch: node2 failed (srun: error: node2: task [23]: Killed): step restarted in the job on node1,node4 with spare node4 for node2 (same NVLink domain $cluster/1), restart 1 of at most 3 (1 spare left)$"
check "domain: the restarted step's TP group holds node1 and node4 (the launcher's PMI2 domain check passed)" \
  eval '[ "$(nodes_of dom 1)" = "node1 node4 " ] && ! has dom "spans NVLink domains"'
check "domain: every step's loss equals the reference's, bit for bit" same_as dom base4
t0=$(event_time dom inject)
t1=$(sed -n 's/^{"t": \([0-9.]*\), "event": "first_step".*"restart": 1,.*/\1/p' "$d/dom.events" | sort -n | head -n 1)
diag "domain: killed rank -> first resumed step $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }') s"
done_testing
