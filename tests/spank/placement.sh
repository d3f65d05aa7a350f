#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# dtrain.so places every task, on a real local Slurm of 4 nodes that look
# like GPU servers through saved hwloc topologies (hardware stand-ins):
#   node1, node2  8x H100 with NVSwitch (dgx-h100.xml)
#   node3         DGX-1 V100, hybrid cube-mesh NVLink (dgx1-v100.xml)
#   node4         a broken topology file (a truncated copy)
# Each task prints what the plugin gave it (show-task.sh); the checks read
# those lines.  Site config: bind=yes (the saved topologies claim 32+ CPUs,
# this machine has fewer: tasks bind to the CPUs that exist).
. "$abs_top_srcdir/tests/tap.sh"
. "$abs_srcdir/lib.sh"
need_plugin

new_cluster_dir placement
head -c 4000 "$fixtures/dgx1-v100.xml" >"$LC_NEW/broken.xml"
start_plugin_cluster "$LC_NEW" --nodes 4 --plugin-args "bind=yes max_tp=8" \
  --topology "node1=$fixtures/dgx-h100.xml,node2=$fixtures/dgx-h100.xml,node3=$fixtures/dgx1-v100.xml,node4=$LC_NEW/broken.xml"
out=$D/client.out err=$D/client.err

# field FILE NAME: NAME's value on each line of FILE.
field() { sed -n "s/.* $2=\([^ ]*\).*/\1/p; s/^$2=\([^ ]*\).*/\1/p" "$1"; }

# check_ranks FILE T P NNODES K: the lines of FILE are a whole T x P x D job
# on NNODES nodes of K tasks: ranks, sizes, coordinates, TP groups on one
# node, distinct GPUs per node in PCI order.  Prints what is wrong.
check_ranks() {
  awk -v T="$2" -v P="$3" -v N="$4" -v K="$5" '
    { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
      n++; r = v["rank"]
      if (r in seen) { print "rank " r " twice"; bad = 1 } seen[r] = 1
      D = N * K / (T * P)
      if (v["procid"] != r || v["dtrain_rank"] != r) { print "rank " r ": RANK/DTRAIN_RANK/SLURM_PROCID differ"; bad = 1 }
      if (v["world"] != N * K || v["dtrain_world"] != N * K || v["local_world"] != K) { print "rank " r ": sizes"; bad = 1 }
      if (v["local_rank"] != r % K || v["dtrain_local_rank"] != r % K) { print "rank " r ": local rank"; bad = 1 }
      if (v["node"] != "node" (int(r / K) + first)) { print "rank " r " on " v["node"]; bad = 1 }
      if (v["T"] != T || v["P"] != P || v["D"] != D) { print "rank " r ": T/P/D " v["T"] "/" v["P"] "/" v["D"]; bad = 1 }
      if (v["tp"] + T * (v["dp"] + D * v["pp"]) != r) { print "rank " r ": coordinates " v["tp"] "," v["dp"] "," v["pp"]; bad = 1 }
      if (v["by"] != "spank" || v["order"] != "PCI_BUS_ID") { print "rank " r ": DTRAIN_PLACED_BY/CUDA_DEVICE_ORDER"; bad = 1 }
      g = v["pp"] "," v["dp"]
      if ((g in gnode) && gnode[g] != v["node"]) { print "TP group " g " spans " gnode[g] " and " v["node"]; bad = 1 }
      gnode[g] = v["node"]
      c = v["node"] ":" v["cuda"]; b = v["node"] ":" v["gpu"]
      if ((c in cuda) || (b in bus)) { print v["node"] ": GPU " v["cuda"] " given twice"; bad = 1 }
      cuda[c] = 1; bus[b] = 1; busof[c] = v["gpu"]
    }
    END {
      if (n != N * K) { print n " lines for " N * K " tasks"; bad = 1 }
      for (c in busof) { split(c, p, ":"); nxt = p[1] ":" (p[2] + 1)
        if ((nxt in busof) && busof[nxt] <= busof[c]) { print c ": CUDA order is not PCI bus order"; bad = 1 } }
      exit bad }' first="${6:-1}" "$1"
}

# ---- NVSwitch nodes: a batch job with an srun that inherits the options
cat >"$D/job.sbatch" <<JOB
#!/bin/bash
sh "$show_task" >"$D/batch.txt"
srun sh "$show_task" >"$D/inherit.txt"
srun --dtrain-tp=2 sh "$show_task" >"$D/override.txt"
JOB
run_client "$out" "$err" sbatch --parsable --wait --dtrain-tp=4 --dtrain-pp=2 --dtrain-ckpt-dir="$D/ckpt" \
  --dtrain-max-restarts=3 -w 'node[1-2]' -N2 --ntasks-per-node=8 -o "$D/job.out" "$D/job.sbatch"
check "sbatch --dtrain-tp=4 --dtrain-pp=2 -N2 --ntasks-per-node=8 runs to the end (exit $RC)" [ "$RC" -eq 0 ]
diag_file "$D/job.out"

check "the batch step gets the option values (T=4 P=2, checkpoint folder, max restarts)" \
  grep -q " T=4 P=2 D=- .*ckpt=$D/ckpt restarts=3 verbose=0 pcie=0" "$D/batch.txt"
check "... but no placement (no RANK, no DTRAIN_RANK, no CUDA_VISIBLE_DEVICES, no DTRAIN_PLACED_BY)" \
  grep -q "rank=- .*dtrain_rank=- .*cuda=- .*by=-" "$D/batch.txt"

problems=$(check_ranks "$D/inherit.txt" 4 2 2 8)
check "srun in the batch script inherits the options: 16 ranks with right coordinates, TP groups on one node, distinct GPUs per node in PCI order${problems:+: $problems}" \
  [ -z "$problems" ]
check "... and the option values (checkpoint folder, max restarts) in every task" \
  [ "$(grep -c "ckpt=$D/ckpt restarts=3 " "$D/inherit.txt")" -eq 16 ]
cpus_ok=$(awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
                 if (v["cpus"] != "-") { bound++; if (v["cpus"] != v["allowed"]) bad++ } }
               END { print (bound > 0 && !bad) ? "yes" : "no (" bound + 0 " bound, " bad + 0 " differ)" }' "$D/inherit.txt")
check "bind=yes: bound tasks run on exactly DTRAIN_CPUS, the CPUs of their GPU that exist here ($cpus_ok)" \
  [ "$cpus_ok" = yes ]
# Issue #32: whole cores, none in two tasks.  The planner's lists for this
# shape (dtrain-topo on the same saved topology: whole cores of each GPU's
# NUMA node, checked against hwloc's cores in tests/topo/test_cpus.c), cut to
# the CPUs the batch step (unbound) may use, are what each task is bound to, and no CPU is
# bound to two tasks of a node (with the GPU's whole NUMA node, the 4 tasks of
# NUMA node 0 all ran on its CPUs).
"$abs_top_builddir/topo/dtrain-topo" --xml "$fixtures/dgx-h100.xml" --tp 4 --pp 2 --nodes 2 --tasks-per-node 8 \
  >"$D/plan.txt" 2>&1
here=$(sed -n 's/.* allowed=\([^ ]*\).*/\1/p' "$D/batch.txt" | head -n 1) # the step's CPUs, unbound
cores_ok=$(awk -v here="$here" '
  function expand(list, out,   n, i, r, a) { delete out; n = split(list, r, ",")
    for (i = 1; i <= n; i++) { if (split(r[i], a, "-") == 2) { for (c = a[1]; c <= a[2]; c++) out[c] = 1 } else if (r[i] != "-" && r[i] != "") out[r[i]] = 1 } }
  function cut(list,   s, c, out2) { expand(list, tmp); s = ""
    for (c = 0; c < 8192; c++) if ((c in tmp) && (c in have)) s = s (s == "" ? "" : ",") c
    return s == "" ? "-" : s }
  BEGIN { expand(here, have) }
  FNR == NR { if ($1 == "RANK") plan = 1; else if (plan && $1 ~ /^[0-9]+$/) want[$1] = cut($NF); next }
  { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
    expand(v["cpus"], mine); got = ""
    for (c = 0; c < 8192; c++) if (c in mine) { got = got (got == "" ? "" : ",") c
      if ((v["node"] ":" c) in owner) { print "CPU " c " of " v["node"] " bound to ranks " owner[v["node"] ":" c] " and " v["rank"]; bad = 1 }
      owner[v["node"] ":" c] = v["rank"] }
    if (got == "") got = "-"
    if (got != want[v["rank"]]) { print "rank " v["rank"] " bound to " got ", the plan'"'"'s cores here are " want[v["rank"]]; bad = 1 } }
  END { if (!bad) print "yes" }' "$D/plan.txt" "$D/inherit.txt" | head -n 3 | tr '\n' ' ')
check "bind=yes, default cpu_bind=cores: each task bound to its planned whole cores (those that exist here), no CPU in two tasks of a node (${cores_ok% })" \
  [ "$cores_ok" = "yes " ]
run_client "$D/numa.txt" "$err" srun -w node1 -N1 --ntasks-per-node=8 --dtrain-cpu-bind=numa sh "$show_task"
numa=$(awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
              if (v["local_rank"] < 4) c[v["cpus"]]++ }
            END { for (k in c) printf "%s:%d ", k, c[k] }' "$D/numa.txt")
check "srun --dtrain-cpu-bind=numa: the 4 tasks of NUMA node 0 share its CPUs, as before issue #32 (exit $RC; $numa)" \
  eval '[ "$RC" -eq 0 ] && case "$numa" in "-:"*) false ;; *":4 ") [ "$(echo $numa | wc -w)" -eq 1 ] ;; *) false ;; esac'
problems=$(check_ranks "$D/override.txt" 2 2 2 8)
check "srun --dtrain-tp=2 in the same script overrides T${problems:+: $problems}" [ -z "$problems" ]

# ---- a plain srun with the options
run_client "$out" "$err" srun -w 'node[1-2]' -N2 --ntasks-per-node=8 --dtrain-tp=4 --dtrain-pp=2 --dtrain-verbose \
  sh "$show_task"
problems=$(check_ranks "$out" 4 2 2 8)
check "plain srun --dtrain-tp=4 --dtrain-pp=2 -N2 --ntasks-per-node=8: right placement (exit $RC)${problems:+: $problems}" \
  eval '[ "$RC" -eq 0 ] && [ -z "$problems" ]'
check "--dtrain-verbose: each of the 16 tasks says where it runs on stderr" \
  [ "$(grep -c '^dtrain: rank [0-9]* on node[12]: tp ' "$err")" -eq 16 ]
check "--dtrain-verbose: each node says once that its topology lists CPUs this machine lacks" \
  [ "$(grep -c '^dtrain: warning: node[12]: the topology lists CPUs this machine lacks' "$err")" -eq 2 ]

# ---- DGX-1 V100 (node3): which GPUs form a TP group
# groups FILE: each TP group's GPU indices, sorted, one group a line.
groups() {
  awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
         g[v["pp"] "," v["dp"]] = g[v["pp"] "," v["dp"]] " " v["cuda"] }
       END { for (k in g) print g[k] }' "$1" |
    while read -r line; do echo "$line" | tr ' ' '\n' | sort -n | tr '\n' ' ' | sed 's/ $//'; echo; done | sort
}
run_client "$out" "$err" srun -w node3 -N1 -n8 --dtrain-tp=4 sh "$show_task"
got=$(groups "$out" | tr '\n' '|')
check "DGX-1, T=4: the TP groups are GPUs {0,1,2,3} and {4,5,6,7} (got $got)" [ "$got" = "0 1 2 3|4 5 6 7|" ]
problems=$(check_ranks "$out" 4 1 1 8 3)
check "... with right ranks and coordinates${problems:+: $problems}" [ -z "$problems" ]

run_client "$out" "$err" srun -w node3 -N1 -n8 --dtrain-tp=2 sh "$show_task"
got=$(groups "$out" | tr '\n' '|')
double_links="0 3|0 4|1 2|1 5|2 3|4 7|5 6|6 7"
pairs_ok=yes
while read -r pair; do
  case "|$double_links|" in *"|$pair|"*) ;; *) pairs_ok=no ;; esac
done < <(groups "$out")
check "DGX-1, T=2: every TP pair is joined by two NVLinks (got $got)" \
  eval '[ "$pairs_ok" = yes ] && [ "$(groups "$out" | wc -l)" -eq 4 ]'

# GPUs from Slurm's GRES: slurmstepd puts the step's GPU indices in
# SLURM_STEP_GPUS and what CUDA must use in CUDA_VISIBLE_DEVICES (0..n-1 when
# cgroups hide the other devices).  This cluster has no GPU GRES, so the job
# environment carries the same two variables as Slurm would set them.
run_client "$out" "$err" env SLURM_STEP_GPUS=4,5,6,7 CUDA_VISIBLE_DEVICES=0,1,2,3 \
  srun -w node3 -N1 -n4 --dtrain-tp=4 sh "$show_task"
got=$(field "$out" gpu | sort | tr '\n' ' ')
check "GRES GPUs 4-7 of the DGX-1: the 4 tasks get exactly those (got $got)" \
  [ "$got" = "0000:85:00.0 0000:86:00.0 0000:89:00.0 0000:8a:00.0 " ]
pairs=$(sed -n 's/.* cuda=\([^ ]*\) .* gpu=\([^ ]*\) .*/\1 \2/p' "$out" | sort | tr '\n' ' ')
check "... each with Slurm's own CUDA_VISIBLE_DEVICES value for it, in PCI order (got $pairs)" \
  [ "$pairs" = "0 0000:85:00.0 1 0000:86:00.0 2 0000:89:00.0 3 0000:8a:00.0 " ]
run_client "$out" "$err" env SLURM_STEP_GPUS=4,5 CUDA_VISIBLE_DEVICES=0,1 srun -w node3 -N1 -n4 --dtrain-tp=2 true
check "4 tasks on the 2 GPUs GRES gave the step: refused with exit 3 (exit $RC)" \
  eval '[ "$RC" -eq 3 ] && grep -q "^dtrain: node3: .*2 GPUs for 4 tasks" "$err"'
grep '^dtrain' "$err" | diag_file /dev/stdin

# ---- node4's topology file is broken
run_client "$out" "$err" srun -w node4 -N1 -n2 --dtrain-tp=2 true
check "a node with a broken topology file: the step fails (exit $RC)" [ "$RC" -ne 0 ]
check "... with a clear message: 'dtrain: node4: cannot read this node's GPU topology: ...'" \
  grep -q "^dtrain: node4: cannot read this node's GPU topology: .*broken.xml" "$err"
grep '^dtrain' "$err" | diag_file /dev/stdin
pid=$(slurmd_pid "$D" node4)
check "node4's slurmd is still running" eval '[ -n "$pid" ] && kill -0 "$pid"'
# Right after the step node4 may still be completing: wait (bounded) for idle;
# down or drained would never become idle.
node4_idle() { [ "$(in_cluster "$D" sinfo -h -n node4 -o %t 2>/dev/null)" = idle ]; }
check "node4 is idle again (not down or drained)" wait_for 60 node4_idle
run_client "$out" "$err" srun -w node4 -N1 -n1 echo next
check "the next job on node4 (without dtrain options) runs (exit $RC)" eval '[ "$RC" -eq 0 ] && [ "$(cat "$out")" = next ]'
run_client "$out" "$err" srun -w node3 -N1 -n8 --dtrain-tp=8 sh "$show_task"
problems=$(check_ranks "$out" 8 1 1 8 3)
check "the next dtrain job (T=8 on node3) runs (exit $RC)${problems:+: $problems}" \
  eval '[ "$RC" -eq 0 ] && [ -z "$problems" ]'

done_testing
