#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Two local clusters started at the same time in two folders: each gets its
# own ports, ClusterName and munged, both run jobs, and stopping one leaves
# the other running.
. "$abs_top_srcdir/tests/tap.sh"
. "$abs_top_srcdir/tests/slurm/lib.sh"
need_cluster_tools

new_cluster_dir twoA; a=$LC_NEW
new_cluster_dir twoB; b=$LC_NEW
lc start --dir "$a" >"$a.start.out" 2>&1 &
pid_a=$!
lc start --dir "$b" --nodes 3 --cpus-per-node 32 >"$b.start.out" 2>&1 &
pid_b=$!
wait $pid_a; rc_a=$?
wait $pid_b; rc_b=$?
check "cluster A (2 nodes) starts while B starts" [ "$rc_a" -eq 0 ]
check "cluster B (3 nodes, 32 CPUs each) starts while A starts" [ "$rc_b" -eq 0 ]
for f in "$a.start.out" "$b.start.out"; do
  [ "$rc_a" -eq 0 ] && [ "$rc_b" -eq 0 ] || sed 's/^/# /' "$f"
  rm -f "$f"
done

conf_value() { sed -n "s/^$2=//p" "$1/slurm.conf" | head -n 1; }
ports() { { conf_value "$1" SlurmctldPort; sed -n 's/.* Port=\([0-9]*\).*/\1/p' "$1/slurm.conf"; } | sort; }
check "different ClusterName" [ "$(conf_value "$a" ClusterName)" != "$(conf_value "$b" ClusterName)" ]
check "no TCP port shared between the two" [ -z "$(comm -12 <(ports "$a") <(ports "$b"))" ]
check "different munge sockets" [ "$(conf_value "$a" AuthInfo)" != "$(conf_value "$b" AuthInfo)" ]

check "A: sinfo shows node1-2 idle" wait_for 60 sinfo_is "$a" "%N %t %c" "node1 idle 16 node2 idle 16 "
check "B: sinfo shows node1-3 idle with 32 CPUs" wait_for 60 sinfo_is "$b" "%N %t %c" "node1 idle 32 node2 idle 32 node3 idle 32 "
check "A runs a 2-node step" [ "$(in_cluster "$a" timeout 60 srun -N2 -n2 printenv SLURMD_NODENAME 2>/dev/null | sort | tr '\n' ' ')" = "node1 node2 " ]
check "B runs a 3-node step" [ "$(in_cluster "$b" timeout 60 srun -N3 -n3 printenv SLURMD_NODENAME 2>/dev/null | sort | tr '\n' ' ')" = "node1 node2 node3 " ]

check "stop A exits 0" lc stop --dir "$a"
left=$(dir_processes "$a" | tr '\n' ' ')
check "no process of A is left${left:+ (left: $left)}" [ -z "$left" ]
check "B still runs after A stopped" lc status --dir "$b"
check "B still runs a 3-node step" [ "$(in_cluster "$b" timeout 60 srun -N3 -n3 printenv SLURMD_NODENAME 2>/dev/null | sort | tr '\n' ' ')" = "node1 node2 node3 " ]
rm -rf -- "$b"
check "stop B exits 0 after its folder was removed under it" lc stop --dir "$b"
left=$(dir_processes "$b" | tr '\n' ' ')
check "no process of B is left${left:+ (left: $left)}" [ -z "$left" ]
done_testing
