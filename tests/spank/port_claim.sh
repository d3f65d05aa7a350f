#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The first node's MASTER_PORT claim cannot be held by a stranger (issue 32,
# defect 5), on a real local Slurm with dtrain.so, the stranger an
# unprivileged user (setpriv to nobody):
#  - a stranger holding flock on an old, readable lock file, or listening on
#    the step's port: a framework step gets the range's next port;
#  - /run/dtrain and its lock files are root's and closed to others, and a
#    step's lock file is gone once the step has ended;
#  - dtrain's own trainer (dtrain-launch without "-- PROGRAM") claims no
#    port: a range that strangers fill does not refuse it;
#  - a full range refuses with one line naming the range and master_ports;
#    a step of several nodes cannot move (the nodes compute the port alone).
. "$abs_top_srcdir/tests/tap.sh"
. "$abs_srcdir/lib.sh"
need_plugin
command -v setpriv >/dev/null 2>&1 || skip_all "setpriv (util-linux) is not installed: no unprivileged stranger"
command -v python3 >/dev/null 2>&1 || skip_all "python3 is not installed: no stranger listening on a port"
id nobody >/dev/null 2>&1 && getent group nogroup >/dev/null 2>&1 || skip_all "no user nobody / group nogroup"

# the stranger runs from the system's PATH (the test's may hold folders of root's)
as_stranger=(setpriv --reuid=nobody --regid=nogroup --clear-groups env PATH=/usr/sbin:/usr/bin:/sbin:/bin)
stranger() { "${as_stranger[@]}" "$@"; }
launch=$abs_top_builddir/launcher/dtrain-launch

new_cluster_dir port_claim
start_plugin_cluster "$LC_NEW" --nodes 2 --topology-all "$fixtures/dgx-h100.xml" --plugin-args "max_tp=8"
out=$D/client.out err=$D/client.err
# Two ports of the cluster's own block: job J step 0 maps to the first
# (LO + J*8 mod 2 = LO), so the step's port and the next one are known.
lo=$(sed -n 's/.* master_ports=\([0-9]*\)-.*/\1/p' "$D/plugstack.conf" | head -n 1)
p0=$lo p1=$((lo + 1))
set_plugin_args "$D" "max_tp=8 master_ports=$p0-$p1"
lock0=/run/dtrain/master-port-$p0.lock lock1=/run/dtrain/master-port-$p1.lock
master_port() { sed -n 's/.* master=[^ ]*:\([0-9-]*\) .*/\1/p' "$1" | sort -u; }
# listen_as_stranger PORT: a stranger listens on PORT (on every address); sets LISTENER
listen_as_stranger() {
  in_background_stranger python3 -c 'import socket,sys,time
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(1); time.sleep(600)' "$1"
  LISTENER=$BG
  local hex
  hex=$(printf %04X "$1")
  wait_for 10 eval 'grep -q ":$hex .* 0A " /proc/net/tcp'
}
# in_background_stranger CMD...: CMD as the stranger, in its own process
# group (so that stop ends flock's child too) and off the test's output
# (a survivor would hold the driver's pipe open until it ends); sets BG
in_background_stranger() { setsid "${as_stranger[@]}" "$@" </dev/null >>"$D/stranger.err" 2>&1 & BG=$!; }
stop() { kill -- -"$1" 2>/dev/null; wait "$1" 2>/dev/null; }

# ---- a stranger holds flock on the step's lock file (as today's 0644 files
# in a 0755 folder allowed: the state an older dtrain left on the node)
mkdir -p /run/dtrain && chmod 0755 /run/dtrain
rm -f "$lock0" "$lock1" && touch "$lock0" && chmod 0644 "$lock0"
# (blocking: the probe below takes the lock for an instant, and a stranger's
# -n that met it would give up at once)
in_background_stranger flock "$lock0" sleep 600
holder=$BG
check "the stranger holds a lock on $lock0" wait_for 10 eval '! flock -n "$lock0" true'
diag_file "$D/stranger.err"
run_client "$out" "$err" srun -w node1 -N1 -n2 --dtrain-tp=2 sh "$show_task"
check "a stranger's lock on the step's port: the step runs on the next port, $p1 (exit $RC, port $(master_port "$out"))" \
  eval '[ "$RC" -eq 0 ] && [ "$(master_port "$out")" = "$p1" ]'
grep '^dtrain' "$err" | diag_file /dev/stdin
stop "$holder"
rm -f "$lock0" # the test's own file
check "the folder is made root's and 0700 again ($(stat -c '%u %a' /run/dtrain))" \
  eval '[ "$(stat -c "%u %a" /run/dtrain)" = "0 700" ]'

# ---- a stranger listens on the step's port
listen_as_stranger "$p0"
listener0=$LISTENER
run_client "$out" "$err" srun -w node1 -N1 -n2 --dtrain-tp=2 sh "$show_task"
check "a stranger listening on the step's port: the step runs on the next port, $p1 (exit $RC, port $(master_port "$out"))" \
  eval '[ "$RC" -eq 0 ] && [ "$(master_port "$out")" = "$p1" ]'
grep '^dtrain' "$err" | diag_file /dev/stdin

# ---- while a step holds its port: the lock file is closed to strangers
in_cluster "$D" timeout 120 srun -J hold -w node1 -N1 -n1 --dtrain-tp=1 sleep 100 >"$D/hold.out" 2>&1 &
hold=$!
# the lock is taken in slurmstepd before the task runs: wait for the step
wait_for 30 eval 'in_cluster "$D" squeue -h -t R -s -n hold | grep -q "\.0 "'
check "a step holds $lock1: root's, mode 0600 ($(stat -c '%u %a' "$lock1" 2>&1))" \
  eval '[ "$(stat -c "%u %a" "$lock1")" = "0 600" ]'
check "... the stranger can open neither the folder nor the lock file" \
  eval '! stranger ls /run/dtrain >/dev/null 2>&1 && ! stranger flock -n "$lock1" true 2>/dev/null'
# both ports busy (the stranger's listener, the holding step): a full range
run_client "$out" "$err" srun -w node1 -N1 -n1 --dtrain-tp=1 true
check "every port of the range busy: refused with exit 1 and one line naming master_ports=$p0-$p1 (exit $RC)" \
  eval '[ "$RC" -eq 1 ] && [ "$(grep -c "^dtrain: " "$err")" -eq 1 ] &&
        grep -q "^dtrain: node1: MASTER_PORT $p0 (site range master_ports=$p0-$p1, .*no port of master_ports=$p0-$p1 is free on this node" "$err"'
grep '^dtrain' "$err" | diag_file /dev/stdin
hold_job=$(in_cluster "$D" squeue -h -n hold -o %i | head -n 1)
[ -n "$hold_job" ] && in_cluster "$D" scancel "$hold_job"
wait "$hold" 2>/dev/null
check "the holding step ends and its lock file is gone" \
  wait_for 30 eval '[ -z "$(in_cluster "$D" squeue -h -s -n hold)" ] && [ ! -e "$lock1" ]'
check "no lock file is left of the steps that ended ($(ls /run/dtrain 2>&1 | grep -c "master-port-\($p0\|$p1\)\.lock"))" \
  eval '[ ! -e "$lock0" ] && [ ! -e "$lock1" ]'

# ---- dtrain's own trainer claims nothing: with both ports taken by
# strangers, dtrain-launch without "-- PROGRAM" runs (--print stops after
# printing the placement), and a framework step is refused.
listen_as_stranger "$p1"
listener1=$LISTENER
run_client "$out" "$err" srun --mpi=pmi2 -w node1 -N1 -n2 --dtrain-tp=2 "$launch" --print
check "dtrain-launch --print (no framework) with every port of the range taken: runs, claims nothing (exit $RC)" \
  eval '[ "$RC" -eq 0 ] && ! grep -q "MASTER_PORT" "$err" && [ ! -e "$lock0" ] && [ ! -e "$lock1" ]'
grep '^dtrain' "$err" | diag_file /dev/stdin
run_client "$out" "$err" srun --mpi=pmi2 -w node1 -N1 -n2 --dtrain-tp=2 "$launch" -- sh "$show_task"
check "... while dtrain-launch -- PROGRAM (a framework) is refused, the range being full (exit $RC)" \
  eval '[ "$RC" -ne 0 ] && grep -q "^dtrain: node1: MASTER_PORT $p0 .*no port of master_ports=$p0-$p1 is free" "$err"'
# A step of several nodes keeps the port every node computes alone: its
# busy port refuses it with one line that says so (doc/frameworks.md).
run_client "$out" "$err" srun -N2 -n2 --dtrain-tp=1 sh "$show_task"
check "a step of 2 nodes whose port a stranger listens on: refused with one line, it cannot move (exit $RC)" \
  eval '[ "$RC" -ne 0 ] && grep -q "^dtrain: node1: MASTER_PORT $p0 .*port $p0 is taken on this node .*a step of 2 nodes cannot move to another port" "$err"'
stop "$listener1"
stop "$listener0"

done_testing
