#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# dtrain-train's side channels never cost the run: a metrics, Prometheus or
# per-rank file on a full disk (a tiny tmpfs, filled) gives one warning
# with the cause, exit 0 and the checkpoint, and no half line in the JSON
# lines; a boolean flag alone before another option (--memory-report
# --metrics m.jsonl) is on and leaves that option its value.
set -u
. "$top_srcdir/tests/tap.sh"
train="$top_builddir/runtime/dtrain-train"
tokenize="$top_builddir/runtime/dtrain-tokenize"
work=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-test-side-XXXXXX") || exit 1
full=$work/full
mounted=0
trap '[ $mounted -eq 1 ] && umount "$full"; rm -rf "$work"' EXIT

for i in $(seq 200); do echo "the quick brown fox jumps over the lazy dog $i"; done >"$work/text.txt"
"$tokenize" "$work/text.txt" "$work/data.bin" >/dev/null || { fail "dtrain-tokenize"; done_testing; }
tiny=(--data "$work/data.bin" --layers 2 --channels 32 --heads 4 --max-seq-len 32 --batch 4 --seq 16 --threads 2)

"$train" "${tiny[@]}" --steps 3 --memory-report --metrics "$work/m.jsonl" >"$work/out" 2>"$work/err"
rc=$?
check "--memory-report --metrics m.jsonl: exit 0 ($(head -n 1 "$work/err" | cut -c 1-200))" test $rc -eq 0
check "--memory-report --metrics m.jsonl: 3 metrics lines, with rank 0's memory" \
    test "$(cat "$work/m.jsonl" 2>/dev/null | grep -c '"model_state_bytes": [0-9]*,')" -eq 3

# A full disk: a tmpfs of 64 KiB, filled, then one page (4 KiB) freed, so
# the metrics file takes a few lines and then a write stops half way.
mkdir -p "$full"
if [ "$(id -u)" -ne 0 ] || ! mount -t tmpfs -o size=64k dtrain-full "$full" 2>/dev/null; then
    skip_test "cannot mount a tmpfs here (needs root): no full-disk run"
    done_testing
fi
mounted=1
mkdir "$full/ranks"
dd if=/dev/zero of="$full/filler" bs=4k >/dev/null 2>&1
truncate -s -4096 "$full/filler"

"$train" "${tiny[@]}" --steps 40 --metrics "$full/m.jsonl" --checkpoint "$work/ckpt" >"$work/out" 2>"$work/err"
rc=$?
check "metrics on a full disk: exit 0, training goes on ($(head -n 1 "$work/err" | cut -c 1-200))" test $rc -eq 0
check "metrics on a full disk: one warning naming the file and the cause" \
    test "$(grep -c "^dtrain-train: warning: rank 0: cannot write metrics file $full/m.jsonl: No space left on device; training goes on" "$work/err")" -eq 1
check "metrics on a full disk: nothing else on stderr" test "$(wc -l <"$work/err")" -eq 1
check "metrics on a full disk: every step trained (40 progress lines)" test "$(grep -c '^step ' "$work/out")" -eq 40
check "metrics on a full disk: the checkpoint of the last step is written" \
    test -f "$work/ckpt/step-00000040/manifest.json"
check "metrics on a full disk: the lines that fitted are whole, from step 0, and no half line follows" \
    sh -c "head -n 1 '$full/m.jsonl' | grep -q '^{\"step\": 0, ' && ! grep -qv '^{\"step\": [0-9]*, .*\"time\": [0-9.]*}\$' '$full/m.jsonl' &&
           test \"\$(tail -c 1 '$full/m.jsonl' | od -An -tx1 | tr -d ' ')\" = 0a"

# The Prometheus file and the per-rank lines on a disk with no page left.
rm -f "$full/m.jsonl"
dd if=/dev/zero of="$full/filler2" bs=4k >/dev/null 2>&1
"$train" "${tiny[@]}" --steps 5 --prom-textfile "$full/run.prom" --rank-metrics "$full/ranks" \
    --checkpoint "$work/ckpt2" >"$work/out" 2>"$work/err"
rc=$?
check "prom and per-rank files on a full disk: exit 0 ($(head -n 1 "$work/err" | cut -c 1-200))" test $rc -eq 0
check "prom on a full disk: one warning with the cause" \
    test "$(grep -c "^dtrain-train: warning: rank 0: cannot write $full/run.prom: No space left on device; training goes on" "$work/err")" -eq 1
check "per-rank lines on a full disk: one warning with the cause" \
    test "$(grep -c "^dtrain-train: warning: rank 0: cannot write per-rank metrics file $full/ranks/rank-00000.jsonl: No space left on device; training goes on" "$work/err")" -eq 1
check "prom and per-rank files on a full disk: the checkpoint is written" test -f "$work/ckpt2/step-00000005/manifest.json"
check "prom on a full disk: no temporary file left" sh -c "! ls '$full' | grep -q 'run.prom.tmp'"
done_testing
