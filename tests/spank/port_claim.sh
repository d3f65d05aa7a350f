#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The first node's claim of the step's block of ports (MASTER_PORT and the
# ports_per_step-1 after it: Megatron-LM's in-process restart opens
# TCPStores on MASTER_PORT+1 and +2) cannot be held by a stranger (issue 32,
# defect 5; blocks: issue 31), on a real local Slurm with dtrain.so, the
# stranger an unprivileged user (setpriv to nobody):
#  - a range smaller than one block is refused when the plugin loads, with
#    one line naming master_ports and ports_per_step;
#  - a stranger holding flock on an old, readable lock file, or listening on
#    the step's MASTER_PORT, MASTER_PORT+1 or MASTER_PORT+2: a framework
#    step gets the range's next block, and DTRAIN_PORTS says which;
#  - /run/dtrain and its lock files (one per port of the block) are root's
#    and closed to others, and a step's lock files are gone once the step
#    has ended;
#  - dtrain's own trainer (dtrain-launch without "-- PROGRAM") claims no
#    port: a range that strangers fill does not refuse it;
#  - a full range refuses with one line naming the range and master_ports;
#    a step of several nodes cannot move (the nodes compute the block
#    alone), and its nodes all give the same block.
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
# Two blocks of ports_per_step=3 (the default) from the cluster's own ports:
# job J step 0 maps to the first (J*8 mod 2 = 0), so the step's block and
# the next one are known.
lo=$(sed -n 's/.* master_ports=\([0-9]*\)-.*/\1/p' "$D/plugstack.conf" | head -n 1)
a0=$lo a1=$((lo + 1)) a2=$((lo + 2)) b0=$((lo + 3)) b1=$((lo + 4)) b2=$((lo + 5))
hi=$b2
lock() { echo "/run/dtrain/master-port-$1.lock"; }
lock0=$(lock "$a0")
master_port() { sed -n 's/.* master=[^ ]*:\([0-9-]*\) .*/\1/p' "$1" | sort -u; }
ports() { sed -n 's/.* ports=\([^ ]*\) .*/\1/p' "$1" | sort -u; }
no_lock_left() { for p in $(seq "$lo" "$hi"); do [ ! -e "$(lock "$p")" ] || return 1; done; }
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

# ---- the site's keys: a range smaller than one block is refused when the
# plugin loads (every client), one block of one port is the old single port
set_plugin_args "$D" "max_tp=8 master_ports=$a0-$a1"
run_client "$out" "$err" srun -w node1 -N1 -n1 --dtrain-tp=1 true
check "master_ports=$a0-$a1 (2 ports) with ports_per_step=3 (the default): refused at plugin load, one line naming both keys (exit $RC)" \
  eval '[ "$RC" -ne 0 ] && [ "$(grep -c "dtrain: " "$err")" -eq 1 ] &&
        grep -q "dtrain: plugstack.conf: master_ports=$a0-$a1 holds 2 ports, fewer than ports_per_step=3 (the ports each step is given): widen master_ports or lower ports_per_step" "$err"'
grep 'dtrain' "$err" | diag_file /dev/stdin
set_plugin_args "$D" "max_tp=8 master_ports=$a0-$a1 ports_per_step=1"
run_client "$out" "$err" srun -w node1 -N1 -n2 --dtrain-tp=2 sh "$show_task"
check "ports_per_step=1: MASTER_PORT is the range's first port alone, DTRAIN_PORTS=$a0-$a0 (exit $RC, $(master_port "$out") $(ports "$out"))" \
  eval '[ "$RC" -eq 0 ] && [ "$(master_port "$out")" = "$a0" ] && [ "$(ports "$out")" = "$a0-$a0" ]'
set_plugin_args "$D" "max_tp=8 master_ports=$lo-$hi"
run_client "$out" "$err" srun -w node1 -N1 -n2 --dtrain-tp=2 sh "$show_task"
check "ports_per_step=3 (the default): the step gets the first block, MASTER_PORT=$a0 DTRAIN_PORTS=$a0-$a2 (exit $RC, $(master_port "$out") $(ports "$out"))" \
  eval '[ "$RC" -eq 0 ] && [ "$(master_port "$out")" = "$a0" ] && [ "$(ports "$out")" = "$a0-$a2" ]'
check "... and gives its ports back: no lock file is left" no_lock_left

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
check "a stranger's lock on the step's MASTER_PORT: the step runs on the next block, $b0-$b2 (exit $RC, port $(master_port "$out"), ports $(ports "$out"))" \
  eval '[ "$RC" -eq 0 ] && [ "$(master_port "$out")" = "$b0" ] && [ "$(ports "$out")" = "$b0-$b2" ]'
grep '^dtrain' "$err" | diag_file /dev/stdin
stop "$holder"
rm -f "$lock0" # the test's own file
check "the folder is made root's and 0700 again ($(stat -c '%u %a' /run/dtrain))" \
  eval '[ "$(stat -c "%u %a" /run/dtrain)" = "0 700" ]'

# ---- a stranger listens on MASTER_PORT+1, then +2 (the ports Megatron-LM's
# in-process restart binds), then on MASTER_PORT itself (kept listening)
for port in "$a1" "$a2" "$a0"; do
  listen_as_stranger "$port"
  run_client "$out" "$err" srun -w node1 -N1 -n2 --dtrain-tp=2 sh "$show_task"
  check "a stranger listening on $port, MASTER_PORT+$((port - a0)) of the step's block $a0-$a2: the step moves to the next block (exit $RC, MASTER_PORT $(master_port "$out"), DTRAIN_PORTS $(ports "$out"))" \
    eval '[ "$RC" -eq 0 ] && [ "$(master_port "$out")" = "$b0" ] && [ "$(ports "$out")" = "$b0-$b2" ]'
  grep '^dtrain' "$err" | diag_file /dev/stdin
  [ "$port" = "$a0" ] || stop "$LISTENER"
done
listener0=$LISTENER

# ---- while a step holds its block: the lock files are closed to strangers
in_cluster "$D" timeout 120 srun -J hold -w node1 -N1 -n1 --dtrain-tp=1 \
  sh -c 'echo task-started; exec sleep 100' >"$D/hold.out" 2>&1 &
hold=$!
# the locks are taken in slurmstepd before the task runs: wait for the task's
# own line (squeue lists the step as running before slurmstepd claims them)
wait_for 30 grep -q '^task-started' "$D/hold.out"
modes=$(for p in "$b0" "$b1" "$b2"; do stat -c '%u %a' "$(lock "$p")" 2>&1; done | sort -u)
check "a step holds a lock file for each port of its block $b0-$b2: root's, mode 0600 ($modes)" \
  eval '[ "$modes" = "0 600" ]'
check "... the stranger can open neither the folder nor a lock file" \
  eval '! stranger ls /run/dtrain >/dev/null 2>&1 && ! stranger flock -n "$(lock "$b1")" true 2>/dev/null'
# both blocks busy (the stranger's listener, the holding step): a full range
run_client "$out" "$err" srun -w node1 -N1 -n1 --dtrain-tp=1 true
check "every block of the range busy: refused with exit 1 and one line naming master_ports=$lo-$hi (exit $RC)" \
  eval '[ "$RC" -eq 1 ] && [ "$(grep -c "^dtrain: " "$err")" -eq 1 ] &&
        grep -q "^dtrain: node1: MASTER_PORT $a0 (block $a0-$a2 of master_ports=$lo-$hi, ports_per_step=3, job [0-9]* step 0): port $a0 is taken on this node .*; no block of 3 free ports of master_ports=$lo-$hi is left on this node" "$err"'
grep '^dtrain' "$err" | diag_file /dev/stdin
hold_job=$(in_cluster "$D" squeue -h -n hold -o %i | head -n 1)
[ -n "$hold_job" ] && in_cluster "$D" scancel "$hold_job"
wait "$hold" 2>/dev/null
check "the holding step ends and its lock files are gone" \
  wait_for 30 eval '[ -z "$(in_cluster "$D" squeue -h -s -n hold)" ] && no_lock_left'
check "no lock file is left of the steps that ended ($(ls /run/dtrain 2>&1 | grep -c "master-port-"))" no_lock_left

# ---- dtrain's own trainer claims nothing: with both blocks taken by
# strangers (one port of each), dtrain-launch without "-- PROGRAM" runs
# (--print stops after printing the placement), and a framework step is
# refused.
listen_as_stranger "$b2"
listener1=$LISTENER
run_client "$out" "$err" srun --mpi=pmi2 -w node1 -N1 -n2 --dtrain-tp=2 "$launch" --print
check "dtrain-launch --print (no framework) with every block of the range taken: runs, claims nothing (exit $RC)" \
  eval '[ "$RC" -eq 0 ] && ! grep -q "MASTER_PORT" "$err" && no_lock_left'
grep '^dtrain' "$err" | diag_file /dev/stdin
run_client "$out" "$err" srun --mpi=pmi2 -w node1 -N1 -n2 --dtrain-tp=2 "$launch" -- sh "$show_task"
check "... while dtrain-launch -- PROGRAM (a framework) is refused, the range being full (exit $RC)" \
  eval '[ "$RC" -ne 0 ] && grep -q "^dtrain: node1: MASTER_PORT $a0 .*no block of 3 free ports of master_ports=$lo-$hi is left" "$err"'
# A step of several nodes keeps the block every node computes alone: a busy
# port of it refuses the step with one line that says so (doc/frameworks.md).
stop "$listener1"
run_client "$out" "$err" srun -N2 -n2 --dtrain-tp=1 sh "$show_task"
check "a step of 2 nodes whose MASTER_PORT a stranger listens on: refused with one line, it cannot move (exit $RC)" \
  eval '[ "$RC" -ne 0 ] && grep -q "^dtrain: node1: MASTER_PORT $a0 .*port $a0 is taken on this node .*a step of 2 nodes cannot move to another block" "$err"'
stop "$listener0"
listen_as_stranger "$a2"
run_client "$out" "$err" srun -N2 -n2 --dtrain-tp=1 sh "$show_task"
check "... and one whose MASTER_PORT+2 a stranger listens on: refused the same way (exit $RC)" \
  eval '[ "$RC" -ne 0 ] && grep -q "^dtrain: node1: MASTER_PORT $a0 (block $a0-$a2 .*port $a2 is taken on this node .*cannot move to another block" "$err"'
stop "$LISTENER"
run_client "$out" "$err" srun -N2 -n2 --dtrain-tp=1 sh "$show_task"
check "with the block free, both nodes of a 2-node step give the same block, MASTER_PORT=$a0 DTRAIN_PORTS=$a0-$a2 (exit $RC, $(master_port "$out") $(ports "$out"), nodes $(sed -n 's/^node=\([^ ]*\) .*/\1/p' "$out" | sort -u | tr '\n' ' '))" \
  eval '[ "$RC" -eq 0 ] && [ "$(sed -n "s/^node=\([^ ]*\) .*/\1/p" "$out" | sort -u | wc -l)" -eq 2 ] &&
        [ "$(master_port "$out")" = "$a0" ] && [ "$(ports "$out")" = "$a0-$a2" ]'

done_testing
