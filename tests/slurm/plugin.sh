#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# `start --plugin PATH --plugin-args ARGS --topology-all FILE` in a folder
# whose path is too long for Unix sockets: the SPANK plugin line reaches
# every task's slurmstepd with its arguments, the sockets move to a short
# folder that stop removes, and stop kills a job step that is still running.
. "$abs_top_srcdir/tests/tap.sh"
. "$abs_top_srcdir/tests/slurm/lib.sh"
need_cluster_tools

probe=$abs_builddir/.libs/spank_probe.so
[ -f "$probe" ] || skip_all "spank_probe.so was not built (make check builds it)"
topo=$fixtures/power8gpudistances.xml
new_cluster_dir plugin-with-a-folder-name-long-enough-to-move-the-sockets; d=$LC_NEW
check_cluster_start "start with --plugin exits 0" "$d" --plugin "$probe" --plugin-args "alpha=1 beta=two" \
  --topology-all "$topo"

check "plugstack.conf has the line 'required PATH ARGS'" grep -qxF "required $probe alpha=1 beta=two" "$d/plugstack.conf"
socket=$(sed -n 's/^AuthInfo=socket=\([^,]*\).*/\1/p' "$d/slurm.conf")
check "the munge socket path fits a Unix socket (${#socket} bytes < 100)" [ "${#socket}" -lt 100 ]
check "the munge socket is in a short folder outside DIR" [ "${socket#/tmp/dtrain-lc-}" != "$socket" ]

out=$(in_cluster "$d" timeout 60 srun -N2 -n2 sh -c 'echo "$SLURMD_NODENAME|$LC_PROBE_ARGS|$LC_PROBE_HWLOC"' 2>&1 | sort)
check "every task got the plugin's arguments and node's HWLOC_XMLFILE" [ "$out" = "node1|alpha=1 beta=two|$topo
node2|alpha=1 beta=two|$topo" ]
[ "$out" = "node1|alpha=1 beta=two|$topo
node2|alpha=1 beta=two|$topo" ] || printf '%s\n' "$out" | sed 's/^/# /'

# A job step still running when stop comes: its slurmstepd and tasks go too.
# The tasks carry "$d/step" in their command line so the check can find them.
id=$(in_cluster "$d" sbatch --parsable -N2 -o /dev/null --wrap "srun sh -c 'sleep 300; :' $d/step" 2>/dev/null)
running() { [ "$(job_field "$d" "$id" JobState)" = RUNNING ] && pgrep -f "$d/step" >/dev/null; }
wait_for 60 running
check "a 2-node job step runs" running
check "stop exits 0 with the step running" lc stop --dir "$d"
left=$(dir_processes "$d" | tr '\n' ' ')
check "no process of the cluster or its job is left${left:+ (left: $left)}" [ -z "$left" ]
check "the short socket folder is removed" [ ! -e "${socket%/munge/munge.socket}" ]
done_testing
