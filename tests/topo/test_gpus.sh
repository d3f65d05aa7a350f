#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-or-later
# GPU partitions (AMD MI300 TPX/CPX), two vendors in one node, and the real
# DGX-2 export: what dtrain-topo loads from each fixture and places on it,
# checked against what that hardware is (tests/fixtures/topology/README.md).
. "${DTRAIN_TAP_SH:?run through make check}"
bin=${DTRAIN_TOPO_BIN:?}
fx=${DTRAIN_FIXTURES:?}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-topo-gpus.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

run() { # run ARGS...: stdout in $tmp/out, stderr in $tmp/err, status in $rc
    "$bin" "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?
}
if ! command -v python3 >/dev/null 2>&1; then
    skip_all "python3 not installed: dtrain-topo --json not parsed"
fi
# py 'EXPR over d (the JSON), g (its GPUs), t (its plan's tasks)': true/false
py() {
    python3 -c '
import json, sys
d = json.load(open(sys.argv[1])); g = d["gpus"]; t = (d.get("plan") or {}).get("tasks", [])
bw = d["links"]["bandwidth_gbps"]; kind = d["links"]["kind"]
sys.exit(0 if eval(sys.argv[2]) else 1)' "$tmp/out" "$1"
}

# MI300A in TPX mode (4 APUs x 3 partitions): 12 GPUs, 3 per PCI device,
# ROCr agent indices 0..11, partitions of one APU at the fastest link,
# APUs over XGMI as read (100 GB/s).
run --xml "$fx/amd-mi300a-tpx.xml" --tp 3 --json
check "MI300A TPX: placed (exit $rc)" test "$rc" -eq 0
check "MI300A TPX: 12 GPUs, 3 partitions on each of 4 PCI devices" \
  py 'len(g) == 12 and len({x["busid"] for x in g}) == 4 and all(x["partitions"] == 3 for x in g) and [x["partition"] for x in g] == [0, 1, 2] * 4'
check "MI300A TPX: each partition its own rsmiN, ROCr index = position" \
  py '[x["osdev"] for x in g] == ["rsmi%d" % i for i in range(12)] and [x["vendor_index"] for x in g] == list(range(12))'
check "MI300A TPX: partitions of one APU 1000 GB/s, across APUs 100 GB/s, all XGMI" \
  py 'bw[0][1] == 1000 and bw[1][2] == 1000 and bw[2][3] == 100 and bw[0][11] == 100 and kind[0][1] == "XGMI" and kind[0][3] == "XGMI"'
check "MI300A TPX: T=3, each TP group on the 3 partitions of one APU" \
  py 'all(len({x["gpu_busid"] for x in t if x["rank"] // 3 == k}) == 1 for k in range(4)) and len({x["gpu"] for x in t}) == 12'
run --xml "$fx/amd-mi300a-tpx.xml" --tp 6 --json
check "MI300A TPX: T=6 groups hold whole APUs (2 bus ids, 3 partitions each)" \
  py 'all(sorted(list(map(lambda b: sum(1 for x in t if x["rank"] // 6 == k and x["gpu_busid"] == b), {x["gpu_busid"] for x in t if x["rank"] // 6 == k}))) == [3, 3] for k in range(2))'

# MI300X in CPX mode (8 OAMs x 8 partitions = 64 GPUs, the most a node may
# hold): T=8 puts each TP group on one OAM.
run --xml "$fx/amd-mi300x-cpx.xml" --tp 8 --json
check "MI300X CPX: 64 GPUs placed (exit $rc)" sh -c "[ $rc -eq 0 ]"
check "MI300X CPX: T=8, every TP group on the 8 partitions of one OAM" \
  py 'len(g) == 64 and all(len({x["gpu_busid"] for x in t if x["rank"] // 8 == k}) == 1 for k in range(8))'

# 8 tasks on the 64 partitions (T=8, one group; as the fuzz harness plans
# it): the group on one OAM.  Before the planner counted the partners it
# tried against its budget this search ran for minutes (a fuzz timeout).
run --xml "$fx/amd-mi300x-cpx.xml" --tp 8 --tasks-per-node 8 --allow-pcie --json
check "MI300X CPX: 8 tasks at T=8 placed on the 8 partitions of one OAM (exit $rc)" \
  py 'len(t) == 8 and len({x["gpu_busid"] for x in t}) == 1 and len({x["gpu"] for x in t}) == 8'

# Two vendors in one node (amd-mi250x.xml with its first GCD made an A100):
# refused without a vendor; with one, only its GPUs, numbered in its space.
sed 's/pci_busid="0000:c1:00.0" pci_type="0380 \[1002:740c\]/pci_busid="0000:c1:00.0" pci_type="0302 [10de:20b0]/' \
  "$fx/amd-mi250x.xml" >"$tmp/mixed.xml"
run --xml "$tmp/mixed.xml" --tp 1
check "two vendors: refused with exit 3, naming --dtrain-gpu-vendor" \
  sh -c "[ $rc -eq 3 ] && grep -q 'two vendors (1 NVIDIA, 7 AMD)' '$tmp/err' && grep -q 'dtrain-gpu-vendor' '$tmp/err'"
run --xml "$tmp/mixed.xml" --tp 1 --gpu-vendor amd --json
check "two vendors, --gpu-vendor amd: the 7 AMD GPUs, ROCr indices 0..6" \
  py 'len(g) == 7 and all(x["vendor_id"] == "0x1002" for x in g) and [x["vendor_index"] for x in g] == list(range(7)) and len(t) == 7'
run --xml "$tmp/mixed.xml" --tp 1 --gpu-vendor nvidia --json
check "two vendors, --gpu-vendor nvidia: the one NVIDIA GPU, CUDA index 0" \
  py 'len(g) == 1 and g[0]["vendor_id"] == "0x10de" and g[0]["busid"] == "0000:c1:00.0" and g[0]["vendor_index"] == 0'
run --xml "$tmp/mixed.xml" --tp 2 --gpu-vendor nvidia
check "two vendors, --gpu-vendor nvidia --tp 2: exit 3, 'this node has 1 GPU' and what to do, not the torchrun refusal" \
  sh -c "[ $rc -eq 3 ] && [ \$(wc -l <'$tmp/err') -eq 1 ] && grep -q 'this node has 1 GPU, fewer than T=2: use --tp 1' '$tmp/err' &&
         ! grep -q torchrun '$tmp/err'"
run --xml "$fx/amd-mi250x.xml" --gpu-vendor nvidia
check "--gpu-vendor nvidia on an all-AMD node: exit 3, one line" \
  sh -c "[ $rc -eq 3 ] && [ \$(wc -l <'$tmp/err') -eq 1 ] && grep -q 'no NVIDIA GPU' '$tmp/err'"
run --xml "$fx/amd-mi250x.xml" --gpu-vendor intel
check "--gpu-vendor intel: usage error (exit 2)" sh -c "[ $rc -eq 2 ] && grep -q 'use nvidia or amd' '$tmp/err'"

# Real export: NVIDIA DGX-2 (hwloc's test set): 16 V100-SXM3 behind 12
# NVSwitches, 6 NVLink 2.0 links per GPU = 150 GB/s per direction to any
# other GPU; one island, so T=16 fits on the node.
run --xml "$fx/nvidia-dgx2.xml" --tp 16 --json
check "DGX-2: 16 V100 in one NVLink island, every pair 150 GB/s" \
  py 'len(g) == 16 and d["largest_island"] == 16 and all(bw[a][b] == 150 for a in range(16) for b in range(16) if a != b)'
check "DGX-2: T=16 placed on the node, no warning" py 'd["plan"]["warning"] is None and len(t) == 16'
done_testing
