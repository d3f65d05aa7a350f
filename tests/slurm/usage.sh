#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# scripts/local-cluster's command line: bad input is refused with exit 2 and
# one line naming the problem, before anything is started (runs as any user,
# with or without Slurm installed).
. "$abs_top_srcdir/tests/tap.sh"
. "$abs_top_srcdir/tests/slurm/lib.sh"

d=$abs_builddir/cluster.usage.$$
LC_DIRS+=("$d")
topo=$fixtures/g4dnmetal.xml

# refused DESC PATTERN ARGS...: exit 2, one line on stderr matching PATTERN,
# nothing created in $d.
refused() {
  local desc=$1 pattern=$2 err rc
  shift 2
  err=$(lc "$@" 2>&1 >/dev/null)
  rc=$?
  if [ "$rc" -eq 2 ] && [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] &&
     printf '%s\n' "$err" | grep -q -- "^local-cluster: .*$pattern" && [ ! -e "$d/slurm.conf" ]; then
    pass "$desc"
  else
    fail "$desc"
    diag "exit $rc, stderr: $err"
  fi
}

refused "no command" "missing command"
refused "unknown command" "unknown command 'launch'" launch --dir "$d"
refused "start without --dir" "needs --dir" start
refused "unknown option" "unknown option '--node'" start --dir "$d" --node 2
refused "--nodes 0" "--nodes '0'" start --dir "$d" --nodes 0
refused "--nodes abc" "--nodes 'abc'" start --dir "$d" --nodes abc
refused "--nodes -1" "--nodes '-1'" start --dir "$d" --nodes -1
refused "--cpus-per-node 1e3" "--cpus-per-node '1e3'" start --dir "$d" --cpus-per-node 1e3
refused "--timeout 0" "--timeout '0'" start --dir "$d" --timeout 0
refused "--topology for a node that does not exist" "node1..node2 only" start --dir "$d" --topology "node3=$topo"
refused "--topology without nodeK=" "write nodeK=FILE.xml" start --dir "$d" --topology "$topo"
refused "--topology with a missing file" "no such readable file" start --dir "$d" --topology "node1=$d/none.xml"
refused "--topology given twice for one node" "node1 is given twice" start --dir "$d" --topology "node1=$topo,node1=$topo"
refused "--topology and --topology-all together" "not both" start --dir "$d" --topology "node1=$topo" --topology-all "$topo"
refused "--plugin that does not exist" "--plugin '.*': no such readable file" start --dir "$d" --plugin "$d/none.so"
refused "--plugin-args without --plugin" "needs --plugin" start --dir "$d" --plugin-args "a=b"
refused "--slurm-conf-extra that does not exist" "no such readable file" start --dir "$d" --slurm-conf-extra "$d/none.conf"
refused "a --dir with a space" "must not contain spaces" start --dir "$d/a b"
refused "stop with a start option" "takes only --dir" stop --dir "$d" --nodes 3
refused "status with a start option, even at its default value" "takes only --dir" status --dir "$d" --nodes 2
refused "--slurmd-env without NAME=" "write NAME=VALUE" start --dir "$d" --slurmd-env novalue
refused "--slurmd-env for a node that does not exist" "node1..node2 only" start --dir "$d" --slurmd-env node3:A=1
refused "--slurmd-env HWLOC_XMLFILE" "use --topology\|give topology files" start --dir "$d" --slurmd-env HWLOC_XMLFILE=x
refused "--slurmd-env SLURM_CONF" "sets SLURM_CONF itself" start --dir "$d" --slurmd-env SLURM_CONF=x
refused "--requeue-delay 1" "--requeue-delay '1'" start --dir "$d" --requeue-delay 1
refused "an option without its value" "needs a value" start --dir

check "stop of a folder that never had a cluster exits 0" lc stop --dir "$d"
lc status --dir "$d" >/dev/null 2>&1
check "status of a folder without a cluster exits 3" [ $? -eq 3 ]
lc env --dir "$d" >/dev/null 2>&1
check "env of a folder without a cluster exits 1" [ $? -eq 1 ]
check "--help prints the usage" eval "lc --help | grep -q 'local-cluster start --dir DIR'"
done_testing
