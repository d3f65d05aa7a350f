#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# AMD GPU partitions and two-vendor nodes, placed by dtrain.so on a real
# local Slurm whose nodes look like these servers through saved hwloc
# topologies (hardware stand-ins):
#   node1  4x MI300A in TPX mode: 12 GPUs, 3 per APU (amd-mi300a-tpx.xml)
#   node2  amd-mi250x.xml with its first GCD made an NVIDIA A100: 1 NVIDIA
#          and 7 AMD GPUs
#   node3  HGX A100 4-GPU (hgx-a100-4gpu.xml) whose NVML (the fake one,
#          tests/health/fake_nvml.c) has GPU 1 in MIG mode with 2 instances
# AMD tasks get ROCR_VISIBLE_DEVICES (ROCr agent indices) and HIP's indices
# after that filter in HIP_VISIBLE_DEVICES and CUDA_VISIBLE_DEVICES.
. "$abs_top_srcdir/tests/tap.sh"
. "$abs_srcdir/lib.sh"
need_plugin
fake=${DTRAIN_FAKE_NVML:?}
[ -f "$fake" ] || skip_all "fake NVML not built ($fake)"

new_cluster_dir gpu_vendors
sed 's/pci_busid="0000:c1:00.0" pci_type="0380 \[1002:740c\]/pci_busid="0000:c1:00.0" pci_type="0302 [10de:20b0]/' \
  "$fixtures/amd-mi250x.xml" >"$LC_NEW/mixed.xml"
cat >"$LC_NEW/nvml-node3.conf" <<CONF
count = 4
all.name = NVIDIA A100-SXM4-40GB
all.mig = 0
gpu0.busid = 0000:01:00.0
gpu1.busid = 0000:41:00.0
gpu1.mig = 1
gpu1.mig_devices = 2
gpu2.busid = 0000:81:00.0
gpu3.busid = 0000:c1:00.0
CONF
start_plugin_cluster "$LC_NEW" --nodes 3 --plugin-args "bind=no" \
  --topology "node1=$fixtures/amd-mi300a-tpx.xml,node2=$LC_NEW/mixed.xml,node3=$fixtures/hgx-a100-4gpu.xml" \
  --slurmd-env "DTRAIN_NVML_LIBRARY=$fake" --slurmd-env "node3:FAKE_NVML_CONFIG=$LC_NEW/nvml-node3.conf"
out=$D/client.out err=$D/client.err
field() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" "$1"; }

# ---- MI300A TPX, one GPU visible per task: 12 ranks on 12 partitions
run_client "$out" "$err" srun -w node1 -N1 -n12 --dtrain-tp=3 --dtrain-gpu-visibility=one sh "$show_task"
check "TPX: 12 tasks with T=3 run (rc $RC)" test "$RC" -eq 0
sort -t= -k3 -n "$out" >"$D/tpx.txt"
check "TPX: each task its own ROCr agent (ROCR_VISIBLE_DEVICES 0..11, one each)" \
  test "$(field "$D/tpx.txt" rocr | sort -n | tr '\n' ' ')" = "0 1 2 3 4 5 6 7 8 9 10 11 "
check "TPX: HIP_VISIBLE_DEVICES=CUDA_VISIBLE_DEVICES=0, DTRAIN_CUDA_DEVICE=0 (HIP counts after ROCr)" \
  sh -c "[ \$(grep -c ' visible=0 device=0 ' '$D/tpx.txt') -eq 12 ] && [ \$(grep -c ' hip=0\$' '$D/tpx.txt') -eq 12 ]"
check "TPX: every TP group of 3 on the partitions of one APU (one DTRAIN_GPU bus id)" \
  awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
         g = int(v["rank"] / 3); if ((g in bus) && bus[g] != v["gpu"]) bad = 1; bus[g] = v["gpu"] }
       END { exit bad }' "$D/tpx.txt"
diag_file "$D/tpx.txt"

# ---- all visible: ROCr sees every partition, the task's own first
run_client "$out" "$err" srun -w node1 -N1 -n12 --dtrain-tp=3 sh "$show_task"
check "TPX, all visible: rank 4 sees 12 agents, its own at HIP index 4" \
  sh -c "grep ' rank=4 ' '$out' | grep -q ' rocr=0,1,2,3,4,5,6,7,8,9,10,11 hip=0,1,2,3,4,5,6,7,8,9,10,11\$' &&
         grep ' rank=4 ' '$out' | grep -q ' device=4 '"

# ---- two vendors: refused without --dtrain-gpu-vendor, one line
run_client "$out" "$err" srun -w node2 -N1 -n1 sh "$show_task"
check "two vendors, plain srun without dtrain options: not placed, runs (rc $RC)" test "$RC" -eq 0
run_client "$out" "$err" srun -w node2 -N1 -n1 --dtrain-tp=1 sh "$show_task"
check "two vendors, no vendor named: refused (rc $RC != 0), one line naming --dtrain-gpu-vendor" \
  sh -c "[ $RC -ne 0 ] && grep -q 'two vendors (1 NVIDIA, 7 AMD).*--dtrain-gpu-vendor' '$err' && [ ! -s '$out' ]"
diag_file "$err"
run_client "$out" "$err" srun -w node2 -N1 -n7 --dtrain-gpu-vendor=amd --dtrain-gpu-visibility=one sh "$show_task"
check "--dtrain-gpu-vendor=amd: 7 tasks on the 7 AMD GPUs, ROCr indices 0..6 (rc $RC)" \
  sh -c "[ $RC -eq 0 ] && [ \"\$(sed -n 's/.* rocr=\([^ ]*\).*/\1/p' '$out' | sort -n | tr '\n' ' ')\" = '0 1 2 3 4 5 6 ' ] &&
         ! grep -q 'gpu=0000:c1:00.0' '$out'"
run_client "$out" "$err" srun -w node2 -N1 -n1 --dtrain-gpu-vendor=nvidia sh "$show_task"
check "--dtrain-gpu-vendor=nvidia: the A100 at CUDA index 0, no ROCR/HIP variables (rc $RC)" \
  sh -c "[ $RC -eq 0 ] && grep -q ' visible=0 .* gpu=0000:c1:00.0 ' '$out' && grep -q ' rocr=- hip=-\$' '$out'"
diag_file "$out"
run_client "$out" "$err" srun -w node1 -N1 -n1 --dtrain-gpu-vendor=nvidia sh "$show_task"
check "--dtrain-gpu-vendor=nvidia on the all-AMD node: refused with one line (rc $RC)" \
  sh -c "[ $RC -ne 0 ] && grep -q 'dtrain-gpu-vendor=nvidia, but none of the step' '$err'"
run_client "$out" "$err" srun -w node1 -N1 -n1 --dtrain-gpu-vendor=intel sh "$show_task"
check "--dtrain-gpu-vendor=intel: refused by srun with one line (rc $RC)" \
  sh -c "[ $RC -ne 0 ] && grep -q 'use nvidia or amd' '$err'"

# ---- MIG: GPU 1's 2 instances are 2 GPUs, each task on one, by UUID
run_client "$out" "$err" srun -w node3 -N1 -n5 --dtrain-tp=1 sh "$show_task"
check "MIG: 5 tasks on 3 whole A100s and 2 MIG instances (rc $RC)" test "$RC" -eq 0
check "MIG: the instances' tasks get CUDA_VISIBLE_DEVICES=MIG-<uuid>, the whole GPUs GPU-<uuid> (the saved topology's), one GPU each" \
  sh -c "[ \"\$(sed -n 's/.* visible=\([^ ]*\).*/\1/p' '$out' | sort | tr '\n' ' ')\" = 'GPU-a100-0000-4000-8000-0000dead0000 GPU-a102-0000-4000-8000-0000dead0002 GPU-a103-0000-4000-8000-0000dead0003 MIG-00000001-0000-5000-8000-000000000000 MIG-00000001-0000-5000-8000-000000000001 ' ] &&
         [ \$(grep -c ' vis=one ' '$out') -eq 5 ] && [ \$(grep -c ' gpu=0000:41:00.0 ' '$out') -eq 2 ]"
diag_file "$out"
run_client "$out" "$err" srun -w node3 -N1 -n4 --dtrain-tp=2 sh "$show_task"
check "MIG: T=2 with a MIG instance in a TP group (no NVLink) refused without --dtrain-allow-pcie (rc $RC)" \
  sh -c "[ $RC -ne 0 ] && grep -q 'dtrain-allow-pcie' '$err' && [ ! -s '$out' ]"
diag_file "$err"
done_testing
