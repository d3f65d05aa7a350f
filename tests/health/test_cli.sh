#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-or-later
# dtrain-health command line and the Slurm hook wrappers, without Slurm:
# exit codes, one-line messages, JSON, a hung NVML call cut off, config
# errors, the IMEX daemon's state, and the per-node config choice of
# dtrain-prolog.  Stand-ins at the hardware boundary only: the fake NVML
# library (answers set by a file), a folder tree shaped like /sys, saved
# hwloc topologies, and fake-nvidia-imex-ctl for NVIDIA's IMEX control
# program.
. "${DTRAIN_TAP_SH:?run through make check}"
build=${DTRAIN_HEALTH_BUILD:?}
bin=$build/dtrain-health
fx=${DTRAIN_FIXTURES:?}
fake=${FAKE_NVML_LIB:?}
fake_imex_ctl=${FAKE_IMEX_CTL:?}
[ -x "$bin" ] || skip_all "$bin not built"
[ -r "$fake" ] || skip_all "fake NVML library $fake not built"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-health-cli.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

# No Slurm here: a drain attempt must fail fast, not look for a cluster.
SLURM_CONF=$tmp/no-slurm.conf
export SLURM_CONF
unset SLURMD_NODENAME DTRAIN_NVML_LIBRARY

run() { # run ARGS...: stdout in $tmp/out, stderr in $tmp/err, status in $rc
    timeout 120 "$bin" "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?
}
has() { grep -q -- "$1" "$2"; }
one_line() { test "$(wc -l <"$1")" -eq 1; }

# A DGX-1 (8x V100) whose fake NVML agrees with the topology.
healthy_nvml() {
    cat <<EOF
count = 8
all.name = Tesla V100-SXM2-32GB
gpu0.busid = 0000:06:00.0
gpu1.busid = 0000:07:00.0
gpu2.busid = 0000:0a:00.0
gpu3.busid = 0000:0b:00.0
gpu4.busid = 0000:85:00.0
gpu5.busid = 0000:86:00.0
gpu6.busid = 0000:89:00.0
gpu7.busid = 0000:8a:00.0
EOF
}
healthy_nvml >"$tmp/nvml.conf"
FAKE_NVML_CONFIG=$tmp/nvml.conf
export FAKE_NVML_CONFIG
mkdir -p "$tmp/sys/class/infiniband/mlx5_0/ports/1" "$tmp/ckpt"
echo "4: ACTIVE" >"$tmp/sys/class/infiniband/mlx5_0/ports/1/state"
echo "5: LinkUp" >"$tmp/sys/class/infiniband/mlx5_0/ports/1/phys_state"
echo "200 Gb/sec (4X HDR)" >"$tmp/sys/class/infiniband/mlx5_0/ports/1/rate"

# write_config FILE TOPOLOGY: the site config ($nvml_lib: the NVML library)
nvml_lib=$fake
write_config() {
    cat >"$1" <<EOF
{
  "topology": "$fx/$2",
  "sysfs_root": "$tmp/sys",
  "nvml_library": "$nvml_lib",
  "gpus": {"count": 8, "model": "V100"},
  "timeouts_ms": {"nvml": 2000},
  "checks": {
    "nvlink": {"reference_topology": "$fx/dgx1-v100.xml", "min_largest_island": 8},
    "checkpoint_fs": {"path": "$tmp/ckpt", "min_free": "1MiB"},
    "shm": {"path": "$tmp", "min_free": 1},
    "infiniband": {"ports": ["mlx5_0:1"], "min_rate_gbps": 100}
  }
}
EOF
}
write_config "$tmp/health.json" dgx1-v100.xml

# ---------------------------------------------------------------- healthy
run --prolog --no-drain --config "$tmp/health.json" --node n1
check "healthy prolog: exit 0" test "$rc" -eq 0
check "healthy prolog: one summary line on stdout" sh -c "one_line() { test \$(wc -l <\"\$1\") -eq 1; }; one_line '$tmp/out'"
check "healthy prolog: says healthy, 12 checks passed or skipped" has "^dtrain-health: n1 prolog: healthy (1[0-2] passed, [0-2] skipped)" "$tmp/out"
check "healthy prolog: nothing on stderr" test ! -s "$tmp/err"

# The prolog path's time (reported, never asserted: no timing assertions).
start=$(date +%s%N)
i=0
while [ $i -lt 10 ]; do "$bin" --prolog --no-drain --config "$tmp/health.json" --node n1 >/dev/null 2>&1; i=$((i + 1)); done
end=$(date +%s%N)
diag "healthy prolog path: $(( (end - start) / 10000000 )) ms per run (mean of 10, fake NVML, 8 GPUs)"

run --epilog --no-drain --json --config "$tmp/health.json" --node n1
check "json: exit 0" test "$rc" -eq 0
if command -v python3 >/dev/null 2>&1; then
    check "json: one object, healthy, every epilog check named with a result" python3 -c '
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 1, lines
d = json.loads(lines[0])
assert d["program"] == "dtrain-health" and d["mode"] == "epilog" and d["node"] == "n1", d
assert d["healthy"] is True and d["drained"] is False and d["reason"] is None, d
names = [c["name"] for c in d["checks"]]
assert names == ["gpu_count", "gpu_model", "nvlink", "nvml", "ecc", "retired_memory", "xid", "nvlink_errors",
                 "gpu_memory", "gpu_processes", "checkpoint_fs", "shm", "infiniband", "imex"], names
assert all(c["result"] in ("pass", "skip") and c["detail"] for c in d["checks"])
assert d["elapsed_ms"]["total"] >= d["elapsed_ms"]["nvml"] >= 0
' "$tmp/out"
else
    skip_test "python3 not installed: JSON not parsed"
fi

# ---------------------------------------------------------------- faults
fault() { # fault DESCRIPTION NVML-LINES: the healthy answers plus these
    { healthy_nvml; printf '%s\n' "$2"; } >"$tmp/nvml.conf"
}
fault xid "gpu3.xid = 79"
run --check --config "$tmp/health.json" --node n1
check "XID: exit 1" test "$rc" -eq 1
check "XID: one FAIL line naming the GPU and the XID" has "^dtrain-health: FAIL xid: GPU 0000:0b:00.0: XID 79$" "$tmp/err"
check "XID: check mode does not drain" has "n1 check: unhealthy (1 failed); not drained" "$tmp/err"

fault ecc "gpu5.ecc_uncorrected = 2"
run --check --json --config "$tmp/health.json" --node n1
check "ECC: exit 1" test "$rc" -eq 1
if command -v python3 >/dev/null 2>&1; then
    check "ECC: JSON says unhealthy with the drain reason" python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["healthy"] is False and d["drained"] is False
assert d["reason"] == "dtrain: ecc: GPU 0000:86:00.0: 2 uncorrected ECC errors (volatile; at most 0 allowed)", d["reason"]
' "$tmp/out"
else
    skip_test "python3 not installed: JSON not parsed"
fi

fault hang "hang = nvmlDeviceGetTotalEccErrors"
run --check --config "$tmp/health.json" --node n1
check "hung NVML: exit 1 (the call is cut off within the bound)" test "$rc" -eq 1
check "hung NVML: the nvml check names the call and the GPU" \
    has "FAIL nvml: NVML did not finish within 2000 ms (stuck in nvmlDeviceGetTotalEccErrors on GPU 0 (0000:06:00.0))" "$tmp/err"
check "hung NVML: one fault, one FAIL line" test "$(grep -c FAIL "$tmp/err")" -eq 1

healthy_nvml >"$tmp/nvml.conf"
write_config "$tmp/missing.json" dgx1-v100-gpu5-missing.xml
run --check --config "$tmp/missing.json" --node n1
check "GPU missing from the topology: exit 1" test "$rc" -eq 1
check "GPU missing: gpu_count names it" has "FAIL gpu_count: 7 GPUs in the topology, 8 expected (missing 0000:86:00.0)" "$tmp/err"

nvml_lib=$tmp/libnvidia-ml.so.1 write_config "$tmp/nonvml.json" dgx1-v100.xml
run --check --config "$tmp/nonvml.json" --node n1
check "GPUs declared, no NVML: exit 1" test "$rc" -eq 1
check "GPUs declared, no NVML: a clear reason" has "FAIL nvml: the node should have 8 GPUs but NVML is unusable: cannot load NVML" "$tmp/err"

cp -r "$tmp/sys" "$tmp/sys-down"
echo "1: DOWN" >"$tmp/sys-down/class/infiniband/mlx5_0/ports/1/state"
echo "2: Polling" >"$tmp/sys-down/class/infiniband/mlx5_0/ports/1/phys_state"
run --check --config "$tmp/health.json" --node n1 --sysfs-root "$tmp/sys-down"
check "--sysfs-root: a down InfiniBand port fails" has "FAIL infiniband: mlx5_0 port 1 is DOWN (physical state Polling)" "$tmp/err"

# Bytes read from sysfs reach the drain reason (slurmctld, scontrol): only
# printable ASCII, whatever a damaged or planted file holds.
printf '1: DO\033[2JWN\001\n' >"$tmp/sys-down/class/infiniband/mlx5_0/ports/1/state"
run --check --config "$tmp/health.json" --node n1 --sysfs-root "$tmp/sys-down"
check "sysfs control bytes: the FAIL line carries them as '?'" \
    has "FAIL infiniband: mlx5_0 port 1 is DO?\\[2JWN? (physical state Polling)" "$tmp/err"
check "sysfs control bytes: no control byte in the output" sh -c "! LC_ALL=C grep -q '[[:cntrl:]]' '$tmp/err'"

# An NVML whose init ends the process (exit 0, no answer): a reason that
# says so, never an empty one.
fault nvml-exits "exit = nvmlInit_v2:0"
run --check --config "$tmp/health.json" --node n1
check "NVML that exits in init: exit 1" test "$rc" -eq 1
check "NVML that exits in init: the reason says it exited, in nvmlInit_v2" \
    has "^dtrain-health: FAIL nvml: NVML exited with status 0 before answering, in nvmlInit_v2$" "$tmp/err"
healthy_nvml >"$tmp/nvml.conf"

fault xid "gpu3.xid = 79"
run --prolog --config "$tmp/health.json" --node n1
check "prolog without a reachable slurmctld: still exit 1" test "$rc" -eq 1
check "prolog without a reachable slurmctld: says it could not drain, and why" \
    has "n1 prolog: unhealthy (1 failed); cannot drain n1: libslurm" "$tmp/err"
healthy_nvml >"$tmp/nvml.conf"

# ---------------------------------------------------------------- bad input
printf '{"gpus": {"count": 8, "modle": "V100"}}\n' >"$tmp/typo.json"
run --check --config "$tmp/typo.json"
check "unknown config key: exit 2" test "$rc" -eq 2
check "unknown config key: one line naming it" sh -c "test \$(wc -l <'$tmp/err') -eq 1 && grep -q '^dtrain-health: $tmp/typo.json: gpus.modle: unknown key (known: count, model)$' '$tmp/err'"
run --check --json --config "$tmp/typo.json"
if command -v python3 >/dev/null 2>&1; then
    check "unknown config key, --json: an object with the error" python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert "gpus.modle: unknown key" in d["error"] and d["mode"] == "check", d
' "$tmp/out"
else
    skip_test "python3 not installed: JSON not parsed"
fi
run --check --config "$tmp/absent.json"
check "unreadable config: exit 2 and the reason" sh -c "test $rc -eq 2 && grep -q 'cannot open the config $tmp/absent.json: No such file or directory' '$tmp/err'"
printf '{"topology": "%s/absent.xml"}\n' "$tmp" >"$tmp/badtopo.json"
run --check --config "$tmp/badtopo.json"
check "unreadable topology file: exit 2 and the file named" sh -c "test $rc -eq 2 && grep -q 'topology: cannot open the file $tmp/absent.xml' '$tmp/err'"
run --config "$tmp/health.json"
check "no mode: exit 2" sh -c "test $rc -eq 2 && grep -q 'say when this runs: --prolog, --epilog or --check' '$tmp/err'"
run --prolog --epilog --config "$tmp/health.json"
check "two modes: exit 2" test "$rc" -eq 2
run --check --frobnicate
check "unknown option: exit 2, named" sh -c "test $rc -eq 2 && grep -q \"unknown option '--frobnicate'\" '$tmp/err'"
run --check --config
check "option without its value: exit 2" sh -c "test $rc -eq 2 && grep -q \"option '--config' needs a value\" '$tmp/err'"
run --help
check "--help: exit 0, usage on stdout" sh -c "test $rc -eq 0 && grep -q '^usage: dtrain-health --prolog | --epilog | --check' '$tmp/out'"
run --version
check "--version" sh -c "test $rc -eq 0 && grep -q '^dtrain-health [0-9]' '$tmp/out'"

# ---------------------------------------------------------------- IMEX
# A node of a multi-node NVLink domain (the fake NVML reports a fabric for
# every GPU) and the IMEX daemon's state through fake-nvidia-imex-ctl, the
# stand-in for NVIDIA's nvidia-imex-ctl: READY passes; a daemon that does
# not answer, one not READY, a hung or missing program fail with one line;
# a node without a fabric runs no control program (unless "always").
mkdir -p "$tmp/imex" && cp "$fake_imex_ctl" "$tmp/imex/nvidia-imex-ctl"
imex_state() { echo "$1" >"$tmp/imex/state"; rm -f "$tmp/imex/calls"; }
fabric='all.fabric_state = 3
all.fabric_cluster = 6d1e4a7b-0c2f-4e0a-9b1d-3c5e7f9a1b2c
all.fabric_clique = 1'
# imex_config FILE MEMBERS: the site config plus "imex": {MEMBERS}
imex_config() {
    write_config "$1" dgx1-v100.xml
    sed -i -e "s|\"checks\": {|\"checks\": {\n    \"imex\": {$2},|" \
        -e 's|"timeouts_ms": {"nvml": 2000}|"timeouts_ms": {"nvml": 2000, "imex": 1000}|' "$1"
}
imex_config "$tmp/imex.json" "\"ctl\": \"$tmp/imex/nvidia-imex-ctl\""
fault fabric "$fabric"
imex_state READY
run --check -v --config "$tmp/imex.json" --node n1
check "IMEX daemon READY on a multi-node NVLink node: exit 0, the imex check passes saying so (exit $rc)" \
    sh -c "test $rc -eq 0 && grep -q '^dtrain-health: pass imex: IMEX daemon READY (nvidia-imex-ctl -q)\$' '$tmp/out'"
check "... it asked the daemon with nvidia-imex-ctl -q" sh -c "test \"\$(cat '$tmp/imex/calls')\" = '-q'"
imex_state DOWN
run --check --config "$tmp/imex.json" --node n1
check "IMEX daemon down: exit 1, one FAIL line naming the fix" sh -c "test $rc -eq 1 && test \$(grep -c FAIL '$tmp/err') -eq 1 &&
    grep -q '^dtrain-health: FAIL imex: IMEX daemon not answering (nvidia-imex-ctl -q exit 1: ERROR: failed to connect to the IMEX command service (fake): Connection refused): start it (systemctl start nvidia-imex) with IMEX_CMD_ENABLED=1 in /etc/nvidia-imex/config.cfg\$' '$tmp/err'"
run --check --json --config "$tmp/imex.json" --node n1
if command -v python3 >/dev/null 2>&1; then
    check "IMEX daemon down: the JSON's drain reason starts 'dtrain: imex: IMEX daemon not answering'" python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["healthy"] is False and d["reason"].startswith("dtrain: imex: IMEX daemon not answering"), d["reason"]
assert d["elapsed_ms"]["imex"] >= 0, d["elapsed_ms"]
' "$tmp/out"
else
    skip_test "python3 not installed: JSON not parsed"
fi
imex_state WAITING_FOR_PEERS
run --check --config "$tmp/imex.json" --node n1
check "IMEX daemon WAITING_FOR_PEERS: exit 1, the state named" sh -c "test $rc -eq 1 &&
    grep -q '^dtrain-health: FAIL imex: IMEX daemon WAITING_FOR_PEERS, not READY (nvidia-imex-ctl -q)' '$tmp/err'"
imex_state HANG
run --check --config "$tmp/imex.json" --node n1
check "a control program that never answers is cut off at timeouts_ms.imex: exit 1, one line" sh -c "test $rc -eq 1 &&
    grep -q '^dtrain-health: FAIL imex: IMEX daemon state unknown: $tmp/imex/nvidia-imex-ctl -q did not finish within 1000 ms' '$tmp/err'"
imex_config "$tmp/imex-none.json" "\"ctl\": \"$tmp/imex/none\""
run --check --config "$tmp/imex-none.json" --node n1
check "no control program at checks.imex.ctl: exit 1, named" sh -c "test $rc -eq 1 &&
    grep -q '^dtrain-health: FAIL imex: IMEX daemon state unknown: cannot open the IMEX control program $tmp/imex/none' '$tmp/err'"
healthy_nvml >"$tmp/nvml.conf"
imex_state DOWN
run --check -v --config "$tmp/imex.json" --node n1
check "no NVLink fabric (an ordinary node): imex skipped, no control program run, healthy (exit $rc)" \
    sh -c "test $rc -eq 0 && grep -q '^dtrain-health: skip imex: no GPU reports a multi-node NVLink fabric' '$tmp/out' &&
    test ! -e '$tmp/imex/calls'"
imex_config "$tmp/imex-always.json" "\"always\": true, \"ctl\": \"$tmp/imex/nvidia-imex-ctl\""
run --check --config "$tmp/imex-always.json" --node n1
check "... with \"always\": true the daemon is asked anyway: down fails (exit $rc)" \
    sh -c "test $rc -eq 1 && grep -q '^dtrain-health: FAIL imex: IMEX daemon not answering' '$tmp/err'"
imex_config "$tmp/imex-off.json" "\"enabled\": false, \"always\": true, \"ctl\": \"$tmp/imex/nvidia-imex-ctl\""
imex_state DOWN
run --check --config "$tmp/imex-off.json" --node n1
check "... and \"enabled\": false turns it off (exit $rc)" sh -c "test $rc -eq 0 && test ! -e '$tmp/imex/calls'"

# ---------------------------------------------------------------- wrappers
# dtrain-prolog picks CONFDIR/health.d/<node>.json over CONFDIR/health.json.
mkdir -p "$tmp/etc/health.d"
cp "$tmp/health.json" "$tmp/etc/health.json"
write_config "$tmp/etc/health.d/node2.json" dgx1-v100-gpu5-missing.xml
for hook in dtrain-prolog dtrain-epilog dtrain-healthcheck; do
    check "$hook is built and executable" test -x "$build/$hook"
done
DTRAIN_HEALTH=$bin DTRAIN_HEALTH_CONFDIR=$tmp/etc SLURMD_NODENAME=node1 "$build/dtrain-prolog" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "dtrain-prolog on node1 (site config): exit 0" test "$rc" -eq 0
check "dtrain-prolog on node1: ran the prolog for node1" has "^dtrain-health: node1 prolog: healthy" "$tmp/out"
DTRAIN_HEALTH=$bin DTRAIN_HEALTH_CONFDIR=$tmp/etc SLURMD_NODENAME=node2 "$build/dtrain-epilog" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "dtrain-epilog on node2 (its own config, a GPU missing): exit 1" test "$rc" -eq 1
check "dtrain-epilog on node2: the per-node config was used" has "FAIL gpu_count: 7 GPUs in the topology" "$tmp/err"
DTRAIN_HEALTH=$bin DTRAIN_HEALTH_CONFDIR=$tmp/etc SLURMD_NODENAME=node2 "$build/dtrain-healthcheck" >"$tmp/out" 2>"$tmp/err"
check "dtrain-healthcheck runs --check --drain" has "node2 check: unhealthy (.*); cannot drain node2" "$tmp/err"

done_testing
