#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# dtrain-train --offload-optimizer (doc/runtime.md, ZeRO-Offload) as a
# program on the cpu backend: `cpu` and a malformed value are refused with
# one line and exit 2, as is --offload-params cpu (needs ZeRO-3 and a
# device backend); nvme:DIR gives the resident run's losses bit for bit
# and its --memory-report line carries the NVMe bytes (= 8n, the formula);
# a hostile DIR (a link; as root, another user's folder) is refused and
# nothing in it touched; a run killed with SIGKILL after a checkpoint
# leaves nothing in DIR, and resumed from the checkpoint repeats the
# unbroken run's losses bit for bit.
set -u
. "$top_srcdir/tests/tap.sh"
train="$top_builddir/runtime/dtrain-train"
tokenize="$top_builddir/runtime/dtrain-tokenize"
work=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-test-offload-XXXXXX") || exit 1
killed=
trap '[ -n "$killed" ] && kill -9 "$killed" 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT

# expect_fail CODE NEEDLE DESC CMD...: exit CODE, stderr one "dtrain-train: " line containing NEEDLE.
expect_fail() {
    local code=$1 needle=$2 desc=$3; shift 3
    "$@" >"$work/out" 2>"$work/err"
    local rc=$? msg
    msg=$(cat "$work/err")
    if [ "$rc" -eq "$code" ] && [ "$(wc -l <"$work/err")" -eq 1 ] &&
       [[ "$msg" == "dtrain-train: "* ]] && [[ "$msg" == *"$needle"* ]]; then
        pass "$desc: $msg"
    else
        fail "$desc (exit $rc): $msg"
    fi
}
losses() { sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$1"; }

for i in $(seq 300); do echo "the quick brown fox jumps over the lazy dog $i"; done >"$work/text.txt"
"$tokenize" "$work/text.txt" "$work/data.bin" >/dev/null 2>&1
mkdir -m 700 "$work/nvme"
tiny=(--data "$work/data.bin" --layers 2 --channels 32 --heads 4 --max-seq-len 16 --batch 4 --seq 16 --lr 3e-3
  --grad-clip 1 --weight-decay 0.01 --seed 3 --threads 1 --log-every 0 --peak-flops 1e12)

expect_fail 2 "host memory already" "--offload-optimizer cpu on the cpu backend" \
    "$train" "${tiny[@]}" --steps 1 --offload-optimizer cpu
expect_fail 2 "give cpu (pinned host memory) or nvme:DIR" "--offload-optimizer disk" \
    "$train" "${tiny[@]}" --steps 1 --offload-optimizer disk
expect_fail 2 "needs --zero-stage 3" "--offload-params cpu at ZeRO stage 2" \
    "$train" "${tiny[@]}" --steps 1 --zero-stage 2 --offload-params cpu
expect_fail 2 "host memory already" "--offload-params cpu on the cpu backend" \
    "$train" "${tiny[@]}" --steps 1 --zero-stage 3 --offload-params cpu
expect_fail 2 "give cpu (or leave it out)" "--offload-params nvme" \
    "$train" "${tiny[@]}" --steps 1 --zero-stage 3 --offload-params nvme

"$train" "${tiny[@]}" --steps 6 --metrics "$work/base.jsonl" >/dev/null 2>&1
"$train" "${tiny[@]}" --steps 6 --metrics "$work/nvme.jsonl" --offload-optimizer "nvme:$work/nvme" \
    --memory-report >"$work/nvme.out" 2>&1
check "nvme:DIR: 6 steps, the resident run's losses bit for bit, DIR left empty" \
    eval '[ "$(losses "$work/base.jsonl" | wc -l)" -eq 6 ] && cmp -s <(losses "$work/base.jsonl") <(losses "$work/nvme.jsonl") &&
          [ -z "$(ls -A "$work/nvme")" ]'
printf '{"optimizer": {"offload": "nvme:%s"}}\n' "$work/nvme" >"$work/offload.json"
"$train" "$work/offload.json" "${tiny[@]}" --steps 6 --metrics "$work/json.jsonl" >/dev/null 2>&1
check "the config key optimizer.offload does the same as the flag" cmp -s <(losses "$work/base.jsonl") <(losses "$work/json.jsonl")
line=$(grep '"memory"' "$work/nvme.out")
n=$(sed -n 's/.*"local_params": \([0-9]*\).*/\1/p' <<<"$line")
nvme=$(sed -n 's/.*"nvme_bytes": \([0-9]*\).*/\1/p' <<<"$line")
nvme_f=$(sed -n 's/.*"nvme_formula_bytes": \([0-9]*\).*/\1/p' <<<"$line")
opt=$(sed -n 's/.*"optimizer_bytes": \([0-9]*\).*/\1/p' <<<"$line")
check "--memory-report: optimizer_bytes 0 on the device, nvme_bytes $nvme = 8n = formula (n=$n)" \
    test -n "$n" -a "$opt" = 0 -a "$nvme" = $((8 * n)) -a "$nvme_f" = $((8 * n))

ln -s "$work/nvme" "$work/link"
expect_fail 2 "not a folder" "nvme:DIR with DIR a symbolic link" \
    "$train" "${tiny[@]}" --steps 1 --offload-optimizer "nvme:$work/link"
stranger=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null && chmod 711 "$work" && mkdir -m 1777 "$work/pub" &&
   "${stranger[@]}" sh -c "mkdir -m 755 '$work/pub/theirs' && echo mine >'$work/pub/theirs/keep'" 2>/dev/null; then
    before=$(ls -lan --time-style=+%s.%N "$work/pub/theirs" | md5sum)
    expect_fail 2 "owned by uid" "nvme:DIR with DIR another user's folder (made by nobody)" \
        "$train" "${tiny[@]}" --steps 1 --offload-optimizer "nvme:$work/pub/theirs"
    check "another user's folder: nothing in it touched" \
        test "$(ls -lan --time-style=+%s.%N "$work/pub/theirs" | md5sum)" = "$before"
else
    skip_test "another user's folder: needs root and setpriv"
    skip_test "another user's folder: nothing touched (needs root and setpriv)"
fi

# killed after a checkpoint: a long run, SIGKILL once step-2 is written
"$train" "${tiny[@]}" --steps 100000 --checkpoint "$work/ckpt" --checkpoint-every 2 \
    --offload-optimizer "nvme:$work/nvme" >/dev/null 2>&1 &
killed=$!
for _ in $(seq 600); do ls "$work/ckpt" 2>/dev/null | grep -q '^step-[0-9]*$' && break; sleep 0.05; done
kill -9 "$killed" 2>/dev/null
wait "$killed" 2>/dev/null
rc=$?
killed=
check "the nvme run is killed by SIGKILL mid-run (exit $rc) after writing a checkpoint; DIR left empty" \
    eval '[ "$rc" -eq 137 ] && ls "$work/ckpt" | grep -q "^step-[0-9]*$" && [ -z "$(ls -A "$work/nvme")" ]'
# the run goes on to 4 steps past the newest checkpoint written before the
# kill (a fast machine writes several before the kill lands), and an
# unbroken run of as many steps is the reference
newest=$(ls "$work/ckpt" | sed -n 's/^step-0*\([0-9][0-9]*\)$/\1/p' | sort -n | tail -n 1)
end=$(( ${newest:-0} + 4 ))
"$train" "${tiny[@]}" --steps "$end" --metrics "$work/whole.jsonl" >/dev/null 2>&1
"$train" "${tiny[@]}" --steps "$end" --checkpoint "$work/ckpt" --offload-optimizer "nvme:$work/nvme" \
    --metrics "$work/resumed.jsonl" >"$work/resumed.out" 2>&1
first=$(sed -n 's/.*"step": \([0-9]*\),.*/\1/p' "$work/resumed.jsonl" | head -1)
check "resumed from the checkpoint (first step $first), it repeats the unbroken run's losses to step $end bit for bit" \
    eval '[ -n "$first" ] && [ "$first" -gt 0 ] && [ "$(losses "$work/resumed.jsonl" | wc -l)" -eq $((end - first)) ] &&
          cmp -s <(losses "$work/whole.jsonl" | tail -n $((end - first))) <(losses "$work/resumed.jsonl")'
done_testing
