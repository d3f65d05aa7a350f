#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# dtrain-health as the Prolog and Epilog of a real local Slurm (munged,
# slurmctld, seven slurmd started by scripts/local-cluster), one fault per
# node and seven exclusive jobs at once: a node whose fake NVML reports an
# XID, whose topology lacks a GPU, whose NVML hangs, whose config has an
# unknown key, or which is in a multi-node NVLink domain with its IMEX
# daemon down is drained by the prolog with a reason starting "dtrain:" and
# its job is requeued and runs on the healthy node; an ECC fault raised
# during a job drains its node from the epilog; the healthy node (in a
# multi-node NVLink domain, its IMEX daemon READY) passes every prolog and
# epilog and is not drained.
#
# Stand-ins at the hardware boundary only: each node's GPUs are a saved
# hwloc topology (tests/fixtures/topology) and the fake NVML library
# (fake_nvml.c) answering from a per-node file; NVIDIA's nvidia-imex-ctl is
# fake-nvidia-imex-ctl, one copy per node answering from its own file.
# Slurm, the hooks and dtrain-health are the real ones.
. "${DTRAIN_TAP_SH:?run through make check}"
. "${abs_top_srcdir:?run through make check}/tests/slurm/lib.sh"
need_cluster_tools
build=${DTRAIN_HEALTH_BUILD:?}
fake=${FAKE_NVML_LIB:?}
fake_imex_ctl=${FAKE_IMEX_CTL:?}
[ -x "$build/dtrain-health" ] && [ -x "$build/dtrain-prolog" ] || skip_all "dtrain-health not built in $build"
[ -r "$fake" ] || skip_all "fake NVML library $fake not built"

new_cluster_dir health; d=$LC_NEW
mkdir -p "$d/etc/health.d" "$d/ckpt"

# ---------------------------------------------------------------- the nodes
# node_nvml NODE [LINE...]: the node's fake NVML answers: a healthy DGX-1
# (8x V100, the bus ids of the fixture), plus the given lines.
node_nvml() {
    local node=$1
    shift
    {
        echo "count = 8"
        echo "all.name = Tesla V100-SXM2-32GB"
        local i=0 b
        for b in 06 07 0a 0b 85 86 89 8a; do echo "gpu$i.busid = 0000:$b:00.0"; i=$((i + 1)); done
        printf '%s\n' "$@"
    } >"$d/nvml-$node.conf"
}

# node_config NODE TOPOLOGY-FIXTURE [EXTRA-JSON-MEMBER]: the node's config,
# picked by dtrain-prolog from CONFDIR/health.d/NODE.json; its imex check
# runs the node's own copy of the fake control program (node_imex).
node_config() {
    cat >"$d/etc/health.d/$1.json" <<EOF
{
  "topology": "$fixtures/$2",
  "nvml_library": "$fake",
  "gpus": {"count": 8, "model": "V100"},
  "timeouts_ms": {"nvml": 2000},
  "checks": {
    "nvlink": {"reference_topology": "$fixtures/dgx1-v100.xml"},
    "checkpoint_fs": {"path": "$d/ckpt", "min_free": "1MiB"},
    "imex": {"ctl": "$d/imex-$1/nvidia-imex-ctl"}
  }${3:+,
  $3}
}
EOF
}

healthy() { node_nvml "$1"; node_config "$1" dgx1-v100.xml; }

# node_imex NODE STATE: NODE is in a multi-node NVLink domain (its fake
# NVML reports every GPU on a fabric) and its IMEX daemon answers STATE
# (fake-nvidia-imex-ctl: READY, or DOWN for no answer).
node_imex() {
    mkdir -p "$d/imex-$1" && cp "$fake_imex_ctl" "$d/imex-$1/nvidia-imex-ctl" && echo "$2" >"$d/imex-$1/state"
    printf '%s\n' "all.fabric_state = 3" "all.fabric_cluster = 6d1e4a7b-0c2f-4e0a-9b1d-3c5e7f9a1b2c" \
        "all.fabric_clique = 1" >>"$d/nvml-$1.conf"
}

# The hooks Slurm runs.  Test scaffolding, not a stand-in: Slurm gives the
# prolog and epilog an environment of its own making (SLURMD_NODENAME,
# SLURM_CONF, SLURM_JOB_*; nothing of slurmd's), so this names the fake
# NVML's answers file for the node, then runs the hook as installed.
for hook in prolog epilog; do
    cat >"$d/$hook" <<EOF
#!/bin/sh
FAKE_NVML_CONFIG=$d/nvml-\$SLURMD_NODENAME.conf
DTRAIN_HEALTH=$build/dtrain-health
DTRAIN_HEALTH_CONFDIR=$d/etc
export FAKE_NVML_CONFIG DTRAIN_HEALTH DTRAIN_HEALTH_CONFDIR
exec $build/dtrain-$hook
EOF
    chmod +x "$d/$hook"
done
# bf_interval=1: a requeued job becomes eligible after the requeue delay,
# and the backfill pass that starts it runs every 30 s by default.
printf 'Prolog=%s\nEpilog=%s\nSchedulerParameters=nohold_on_prolog_fail,bf_interval=1\n' \
    "$d/prolog" "$d/epilog" >"$d/hooks.conf"

# ---------------------------------------------------------------- helpers
matches() { [[ $1 =~ $2 ]]; }     # matches TEXT REGEX (check needs a command)
node_state() { in_cluster "$d" sinfo -h -N -n "$1" -o %t 2>/dev/null | head -n 1; }
node_reason() { in_cluster "$d" scontrol show node "$1" 2>/dev/null | sed -n 's/^ *Reason=//p'; }

node_state_is() { [[ $(node_state "$1") =~ $2 ]]; }   # node_state_is NODE REGEX
# wait_node_state NODE REGEX SECONDS
wait_node_state() { wait_for "$3" node_state_is "$1" "$2"; }

# start_cluster NODES: a fresh cluster with the hooks.
start_cluster() {
    check_cluster_start "a $1-node cluster with dtrain-prolog and dtrain-epilog starts" "$d" \
        --nodes "$1" --slurm-conf-extra "$d/hooks.conf" --requeue-delay 5
}

# submit NAME [SBATCH-OPTION...]: an exclusive 1-node batch job that says
# where it ran (and, on node6, raises an ECC fault in its node's fake NVML
# while it runs).
submit() {
    local id name=$1
    shift
    id=$(in_cluster "$d" sbatch --parsable -N1 --exclusive -J "$name" -o "$d/$name.out" "$@" \
        --wrap "[ \"\$SLURMD_NODENAME\" != node6 ] || echo 'gpu2.ecc_uncorrected = 4' >>$d/nvml-node6.conf
                echo \"ran on \$SLURMD_NODENAME\"" 2>"$d/$name.sbatch.err")
    [ -n "$id" ] || diag "sbatch: $(cat "$d/$name.sbatch.err")" >&2
    echo "$id"
}

# ---------------------------------------------------------------- one fault per node
healthy node1
node_nvml node1 "gpu3.xid = 79"
node_config node2 dgx1-v100-gpu5-missing.xml
node_nvml node2 "count = 7" "gpu5.busid = 0000:89:00.0" "gpu6.busid = 0000:8a:00.0"
node_config node3 dgx1-v100.xml
node_nvml node3 "hang = nvmlDeviceGetTotalEccErrors"
node_config node4 dgx1-v100.xml '"checks_typo": {}'
node_nvml node4
healthy node5
node_imex node5 READY
healthy node6
healthy node7
node_imex node7 DOWN
start_cluster 7
jobs_start=$SECONDS
# Submitted held and released together, the seven jobs are placed in one
# scheduling pass: one per node.
ids=()
for ((k = 1; k <= 7; k++)); do ids+=("$(submit "job$k" --hold)"); done
in_cluster "$d" scontrol release "$(IFS=,; echo "${ids[*]}")" >/dev/null 2>&1
finished=1
for id in "${ids[@]}"; do wait_job "$d" "$id" 180 || finished=0; done
diag "the seven jobs ended $((SECONDS - jobs_start)) s after submission"
check "seven jobs on seven nodes, one fault each: all end" [ "$finished" = 1 ]

completed=0 restarts=0 on_bad=0 first_try_on_node5=0
for ((k = 1; k <= 7; k++)); do
    id=${ids[$((k - 1))]}
    [ "$(job_field "$d" "$id" JobState)" = COMPLETED ] && completed=$((completed + 1))
    restarts=$((restarts + $(job_field "$d" "$id" Restarts)))
    matches "$(cat "$d/job$k.out" 2>/dev/null)" '^ran on node[12347]$' && on_bad=$((on_bad + 1))
    [ "$(job_field "$d" "$id" Restarts) $(cat "$d/job$k.out" 2>/dev/null)" = "0 ran on node5" ] &&
        first_try_on_node5=$((first_try_on_node5 + 1))
    diag "job$k: $(job_field "$d" "$id" JobState), restarts $(job_field "$d" "$id" Restarts), $(cat "$d/job$k.out" 2>/dev/null)"
done
check "every job completes" [ "$completed" -eq 7 ]
check "none of them ran on a faulty node" [ "$on_bad" -eq 0 ]
check "the five jobs whose prolog failed were requeued once each and ran elsewhere" [ "$restarts" -eq 5 ]
check "the job placed on the healthy node5 passed its prolog: no requeue" [ "$first_try_on_node5" -eq 1 ]

# drained NODE WHAT REASON-REGEX
drained() {
    local reason
    check "$2: $1 is drained" wait_node_state "$1" '^drain' 30
    reason=$(node_reason "$1")
    check "$2: $1's reason starts with dtrain: and says why" matches "$reason" "^$3"
    diag "$2: $1 Reason=$reason"
}
drained node1 xid 'dtrain: xid: GPU 0000:0b:00\.0: XID 79'
drained node2 "a GPU missing" 'dtrain: gpu_count: 7 GPUs in the topology, 8 expected \(missing 0000:86:00\.0\)'
drained node3 "NVML hangs" 'dtrain: nvml: NVML did not finish within 2000 ms \(stuck in nvmlDeviceGetTotalEccErrors on GPU 0'
drained node4 "bad config" "dtrain: health config: $d/etc/health\.d/node4\.json: checks_typo: unknown key"
drained node6 "ECC during a job (epilog)" 'dtrain: ecc: GPU 0000:0a:00\.0: 4 uncorrected ECC errors'
drained node7 "IMEX daemon down in a multi-node NVLink domain" \
    'dtrain: imex: IMEX daemon not answering \(nvidia-imex-ctl -q exit 1: '
check "the healthy node5 (IMEX READY) passed six epilogs: idle, not drained" wait_node_state node5 '^idle$' 30
check "... its prolog asked its IMEX daemon (fake nvidia-imex-ctl -q called)" grep -q -- '^-q$' "$d/imex-node5/calls"
check "node5 has no reason" [ -z "$(node_reason node5)" ]

done_testing
