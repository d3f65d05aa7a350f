#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-or-later
# dtrain-topo command line: tables, JSON, picture, refusals and exit codes.
. "${DTRAIN_TAP_SH:?run through make check}"
bin=${DTRAIN_TOPO_BIN:?}
fx=${DTRAIN_FIXTURES:?}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-topo-cli.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

run() { # run ARGS...: stdout in $tmp/out, stderr in $tmp/err, status in $rc
    "$bin" "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?
}

# GPU partitions and two vendors in one node: test_gpus.sh.
sed '51i\            <object type="OSDev" gp_index="9001" name="rsmi8" subtype="RSMI" osdev_type="1"/>\
            <object type="OSDev" gp_index="9002" name="rsmi9" subtype="RSMI" osdev_type="1"/>' \
  "$fx/amd-mi250x.xml" >"$tmp/partitions.xml"
run --xml "$tmp/partitions.xml" --tp 2
check "a GCD showing 3 partitions: each placed as a GPU (10 in all, exit $rc)" \
  sh -c "[ $rc -eq 0 ] && [ \$(grep -c '0000:c1:00.0' '$tmp/out') -ge 3 ]"
run --xml "$fx/amd-mi250x.xml" --tp 2
check "the unchanged MI250X still places (exit $rc)" test "$rc" -eq 0

# --explain: GPT-2 small (124.4 M parameters: 12*12*768^2 + 13*12*768 +
# 50257*768 + 1024*768 + 2*768), T=4 P=2 D=2 on 2 DGX H100, 8 micro-batches of
# 8 x 1024 tokens (X = 8192*768 values), bf16 activations; per member of the
# busiest stage's group (common/dtrain_step_bytes.h):
# TP, the last stage: 8 x (6 layers x 8*3X + the head's 2*3X) x 2 B + the loss
#   8 x (3*4*8192 + 2*3*2*8192) x 4 B, over 4 members = 3.776 GB at 450 GB/s = 8.392 ms;
# PP: 2*1*8 X x 2 B + the tied embedding's swap 2 x 12565*768 x 4 B, over 2
#   members = 0.139 GB over the network (stages on two nodes) = 5.571 ms;
# DP, stage 0: 2*1 x 21088896 local parameters x 4 B over 2 = 0.084 GB inside a node.
run --xml "$fx/dgx-h100.xml" --tp 4 --pp 2 --nodes 2 --tasks-per-node 8 --explain
check "explain: exit 0, 124.4 M parameters" sh -c "[ $rc -eq 0 ] && grep -q '124.4 M parameters' '$tmp/out'"
check "explain: TP 3.776 GB over NVLink 450 GB/s, 8.392 ms" grep -Eq '^TP +3\.776 GB +NVLink 450 GB/s +8\.392 ms' "$tmp/out"
check "explain: PP 0.139 GB over the network (25 GB/s), 5.571 ms" grep -Eq '^PP +0\.139 GB +network 25 GB/s +5\.571 ms' "$tmp/out"
check "explain: DP 0.084 GB inside a node, over NVLink" grep -Eq '^DP +0\.084 GB +NVLink 450 GB/s' "$tmp/out"
check "explain: WORLD (the loss and norm sums) crosses the network" grep -Eq '^WORLD +0\.000 GB +network 25 GB/s' "$tmp/out"
check "explain: the total is the sum (14.150 ms)" grep -q 'per step: 14.150 ms' "$tmp/out"
run --xml "$fx/hwloc1-x9drg-m2075.xml" --json
if command -v python3 >/dev/null 2>&1; then
    check "json of an hwloc 1.x export: links source is 'no link information'" python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["links"]["source"] == "no link information" and len(d["gpus"]) == 3, d["links"]["source"]
' "$tmp/out"
else
    skip_test "python3 not installed: JSON not parsed"
fi

# --pp-in-domain: the same job, its two nodes in one domain of 16 GPUs (a
# Slurm block, --node-domain): PP sends run at the NVLink rate, 0.139 GB at
# 450 GB/s = 0.309 ms instead of 5.571 ms over the network.
run --xml "$fx/dgx-h100.xml" --tp 4 --pp 2 --nodes 2 --tasks-per-node 8 --nvlink-domain-gpus 16 --pp-in-domain \
  --node-domain slurm-block/b1 --explain
check "explain --pp-in-domain: PP 0.139 GB over the NVLink domain at 450 GB/s, 0.309 ms (exit $rc)" \
  grep -Eq '^PP +0\.139 GB +NVLink domain 450 GB/s +0\.309 ms' "$tmp/out"
run --xml "$fx/dgx-h100.xml" --tp 4 --pp 2 --nodes 2 --tasks-per-node 8 --nvlink-domain-gpus 16 --pp-in-domain
check "--pp-in-domain on nodes without a domain (a saved file has no NVML fabric): exit 3, one line" \
  sh -c "[ $rc -eq 3 ] && grep -q 'report no multi-node NVLink domain' '$tmp/err' && [ \$(wc -l <'$tmp/err') -eq 1 ]"
run --xml "$fx/dgx-h100.xml" --tp 4 --pp 4 --nodes 4 --tasks-per-node 8 --nvlink-domain-gpus 16 --pp-in-domain \
  --node-domain slurm-block/b1
check "--pp-in-domain T=4 P=4 on 4 nodes of 8: the PP groups join 32 GPUs, a domain has 16: exit 3, P=2 named" \
  sh -c "[ $rc -eq 3 ] && grep -q 'join 4 nodes (32 GPUs).*--dtrain-pp=2 or less' '$tmp/err'"

# the trainer's options: sequence parallelism (6 collectives of X/T rows a
# layer backward instead of 2 all-reduces of X: more TP bytes), ZeRO-3 (every
# unit gathered twice and reduce-scattered per micro-batch: more DP bytes),
# two chunks a stage (3 chunk boundaries instead of 1, SP's X/T rows: fewer
# PP bytes); the model is checked to the byte against the trainer's counted
# bytes in tests/parallel/test_explain.c
run --xml "$fx/dgx-h100.xml" --tp 4 --pp 2 --nodes 2 --tasks-per-node 8 --explain --sequence-parallel --zero-stage 3 \
  --virtual-stages 2
check "explain SP, ZeRO-3, V=2: TP 4.759 GB, PP 0.114 GB, DP 0.877 GB (exit $rc)" sh -c "[ $rc -eq 0 ] &&
  grep -Eq '^TP +4\.759 GB' '$tmp/out' && grep -Eq '^PP +0\.114 GB' '$tmp/out' && grep -Eq '^DP +0\.877 GB' '$tmp/out' &&
  grep -q 'ZeRO-3, sequence parallel, interleaved' '$tmp/out'"
run --xml "$fx/dgx-h100.xml" --tp 4 --pp 2 --nodes 2 --tasks-per-node 8 --explain --zero-stage 4
check "explain --zero-stage 4: exit 2, one line" sh -c "[ $rc -eq 2 ] && grep -q 'zero-stage: 4 is out of range' '$tmp/err' && [ \$(wc -l <'$tmp/err') -eq 1 ]"
run --xml "$fx/dgx-h100.xml" --tp 4 --pp 4 --nodes 4 --tasks-per-node 8 --explain --virtual-stages 2
check "explain: 12 layers, P=4 with 2 chunks: exit 2, the chunks named" \
  sh -c "[ $rc -eq 2 ] && grep -q 'P=4 pipeline stages of 2 chunks (--virtual-stages)' '$tmp/err'"
run --xml "$fx/g4dnmetal.xml" --tp 2 --allow-pcie --explain --pcie-gbps 12
check "explain on PCIe-only T4s: TP's slowest link is PCIe at the given 12 GB/s" grep -Eq '^TP .* PCIe 12 GB/s' "$tmp/out"
run --xml "$fx/dgx-h100.xml" --tp 8 --pp 3 --nodes 3 --explain
check "explain: 12 layers split into P=3 stages (exit $rc)" test "$rc" -eq 0
run --xml "$fx/dgx-h100.xml" --tp 8 --pp 5 --nodes 5 --explain
check "explain: layers that do not split into P stages: exit 2 and one line" \
  sh -c "[ $rc -eq 2 ] && grep -q 'do not split into P=5' '$tmp/err'"

run --xml "$fx/dgx1-v100.xml"
check "table: exit 0" test "$rc" -eq 0
check "table: summary line" grep -q '^Node: 8x Tesla V100-SXM2-32GB, NVLink' "$tmp/out"
check "table: GPU rows with bus ids" grep -q '^7 *0000:8a:00.0' "$tmp/out"
check "table: link matrix row 0 shows NV2 = 50 GB/s to GPU 3" sh -c "grep -E '^ +0 +X +25 +25 +50 +50 +PCIe' '$tmp/out' >/dev/null"
check "table: one island of 8" grep -q 'island 0: 8 GPUs: 0 1 2 3 4 5 6 7' "$tmp/out"
check "table: nothing on stderr" test ! -s "$tmp/err"

run --xml "$fx/dgx1-v100.xml" --tp 4 --picture
check "plan table: exit 0" test "$rc" -eq 0
check "plan table: shape line" grep -q '^Plan: T=4 P=1 D=2, 1 node x 8 tasks, world size 8' "$tmp/out"
check "plan table: rank 5 on GPU 5 (second quad)" sh -c "grep -E '^5 +0 +5 +1 +1 +0 +5 +0000:86:00.0' '$tmp/out' >/dev/null"
check "picture: island box with TP groups" grep -q '\[GPU4 g1\]' "$tmp/out"

run --xml "$fx/dgx-h100.xml" --tp 4 --pp 2 --nodes 2 --tasks-per-node 8 --json
check "json: exit 0" test "$rc" -eq 0
if command -v python3 >/dev/null 2>&1; then
    check "json: parses, 8 GPUs, 16 tasks, links 450 GB/s" python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["version"] == 1 and len(d["gpus"]) == 8, d.keys()
assert d["links"]["bandwidth_gbps"][0][1] == 450 and d["links"]["kind"][0][0] == "self"
assert d["islands"][0]["gpus"] == list(range(8)) and d["largest_island"] == 8
p = d["plan"]
assert p["world_size"] == 16 and p["dp"] == 2 and len(p["tasks"]) == 16 and p["warning"] is None
t = p["tasks"][9]
assert (t["node"], t["local_rank"], t["tp_rank"], t["dp_rank"], t["pp_rank"]) == (1, 1, 1, 0, 1)
assert t["gpu_busid"] == d["gpus"][t["gpu"]]["busid"]
' "$tmp/out"
else
    skip_test "python3 not installed: JSON not parsed"
fi

run --xml "$fx/g4dnmetal.xml" --json
if command -v python3 >/dev/null 2>&1; then
    check "json without a shape: plan is null, PCIe links" python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["plan"] is None and d["links"]["source"] == "PCIe only" and d["links"]["kind"][0][1] == "PCIe"
assert d["gpus"][0]["numa_node"] == 0 and d["gpus"][0]["cpulist"] == "0-23,48-71"
g = d["gpus"][0]
assert d["nvlink_domain"] is None and g["partitions"] == 1 and g["mig"] is False
assert g["fabric_state"] == 0 and g["fabric_cluster"] == "" and g["fabric_clique"] is None
' "$tmp/out"
else
    skip_test "python3 not installed: JSON not parsed"
fi

run --xml "$fx/g4dnmetal.xml" --tp 2
check "refused shape: exit 3" test "$rc" -eq 3
check "refused shape: one line starting dtrain-topo:" sh -c "test \$(wc -l <'$tmp/err') -eq 1 && grep -q '^dtrain-topo: T=2 needs' '$tmp/err'"
check "refused shape: nothing on stdout" test ! -s "$tmp/out"

run --xml "$fx/g4dnmetal.xml" --tp 2 --allow-pcie
check "allow-pcie: exit 0 with a warning in the table" sh -c "test $rc -eq 0 && grep -q '^warning: TP groups of 2 GPUs' '$tmp/out'"

run --xml "$fx/power8gpudistances.xml" --tp 4
check "T larger than the largest island: exit 3" sh -c "test $rc -eq 3 && grep -q 'largest NVLink island (2 GPUs)' '$tmp/err'"

run --xml "$fx/dgx1-v100.xml" --tp 3
check "T not dividing tasks per node: exit 3" sh -c "test $rc -eq 3 && grep -q '^dtrain-topo: T=3 does not divide' '$tmp/err'"

# --cpu-bind numa: rank 0 gets NUMA node 0 (0-7,16-23), as this check has read since before whole cores.
run --xml "$fx/dgx1-v100.xml" --tp 2 --cpu-only --tasks-per-node 4 --cpu-bind numa
check "cpu-only: exit 0, no GPU column values" sh -c "test $rc -eq 0 && grep -E '^0 +0 +0 +0 +0 +0 +- +- +0-7' '$tmp/out' >/dev/null"

# Issue #32: whole cores per rank (siblings are N apart on these machines), never one core in two ranks.
run --xml "$fx/g4dnmetal.xml" --cpu-only --tasks-per-node 4
check "cpu-only on g4dn.metal (siblings 48 apart): 4 ranks of 12 whole cores, two per socket" \
  sh -c "test $rc -eq 0 && grep -qE '^0 .* 0-11,48-59\$' '$tmp/out' && grep -qE '^1 .* 12-23,60-71\$' '$tmp/out' &&
         grep -qE '^2 .* 24-35,72-83\$' '$tmp/out' && grep -qE '^3 .* 36-47,84-95\$' '$tmp/out'"
run --xml "$fx/dgx-h100.xml" --tp 1 --json
check "GPU ranks: whole cores of their GPU's NUMA node, 4 GPUs on 8 cores: 2 cores each" \
  sh -c "test $rc -eq 0 && grep -q '\"cpulist\": \"0-1,16-17\"' '$tmp/out' && grep -q '\"cpulist\": \"14-15,30-31\"' '$tmp/out'"
run --xml "$fx/dgx-h100.xml" --cpu-bind all
check "--cpu-bind all: exit 2, naming the values" sh -c "test $rc -eq 2 && grep -q 'use cores or numa' '$tmp/err'"

# A node without GPUs: the refusal names --cpu-only, not "--ntasks-per-node=0 or less" (issue #32).
if command -v lstopo-no-graphics >/dev/null 2>&1 &&
   lstopo-no-graphics --input "$fx/dgx1-v100.xml" --no-io --of xml "$tmp/nogpu.xml" 2>/dev/null; then
  run --xml "$tmp/nogpu.xml" --tasks-per-node 2
  check "no GPUs, 2 tasks per node: exit 3, one line naming --cpu-only" \
    sh -c "test $rc -eq 3 && test \$(wc -l <'$tmp/err') -eq 1 && grep -q 'has no GPUs.*--cpu-only' '$tmp/err' &&
           ! grep -q 'ntasks-per-node=0' '$tmp/err'"
else
  skip_test "lstopo-no-graphics (hwloc-tools) is not installed: no GPU-less topology to try"
fi

run --xml "$fx/dgx1-v100.xml" --tp 0
check "bad number: exit 2, one line" sh -c "test $rc -eq 2 && test \$(wc -l <'$tmp/err') -eq 1 && grep -q '^dtrain-topo: ' '$tmp/err'"
run --xml "$fx/dgx1-v100.xml" --tp abc
check "non-numeric value: exit 2" sh -c "test $rc -eq 2 && grep -q '^dtrain-topo: ' '$tmp/err'"
run --bogus
check "unknown option: exit 2" sh -c "test $rc -eq 2 && grep -q '^dtrain-topo: unknown option --bogus' '$tmp/err'"
run --xml
check "option without value: exit 2" sh -c "test $rc -eq 2 && grep -q '^dtrain-topo: ' '$tmp/err'"
run --xml "$fx/dgx1-v100.xml" extra
check "stray argument: exit 2" sh -c "test $rc -eq 2 && grep -q \"^dtrain-topo: unexpected argument 'extra'\" '$tmp/err'"
run --xml "$tmp/nonexistent.xml"
check "unreadable topology: exit 2, one line" sh -c "test $rc -eq 2 && test \$(wc -l <'$tmp/err') -eq 1 && grep -q '^dtrain-topo: cannot open' '$tmp/err'"
head -c 3000 "$fx/dgx1-v100.xml" >"$tmp/trunc.xml"
run --xml "$tmp/trunc.xml"
check "truncated topology: exit 2, one line" sh -c "test $rc -eq 2 && test \$(wc -l <'$tmp/err') -eq 1 && grep -q 'not a valid hwloc XML' '$tmp/err'"
run --help
check "--help: exit 0, usage on stdout" sh -c "test $rc -eq 0 && grep -q '^usage: dtrain-topo' '$tmp/out'"

# Live: with HWLOC_XMLFILE the tool sees the saved machine.
HWLOC_XMLFILE="$fx/hgx-a100-4gpu.xml" "$bin" >"$tmp/out" 2>"$tmp/err"; rc=$?
check "live with HWLOC_XMLFILE: sees the HGX board" sh -c "test $rc -eq 0 && grep -q '^Node: 4x NVIDIA A100-SXM4-40GB' '$tmp/out'"

done_testing
