#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# dtrain-train and dtrain-tokenize as programs: a tiny training run from a
# config file plus flags, its progress lines and metrics file, llm.c export
# and import, checkpoint and resume, and exit code 2 with one
# "dtrain-train: " line for each kind of bad input.
set -u
. "$top_srcdir/tests/tap.sh"
train="$top_builddir/runtime/dtrain-train"
tokenize="$top_builddir/runtime/dtrain-tokenize"
work=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-test-cli-XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT

# expect_fail CODE PREFIX NEEDLE DESC CMD...: exit status CODE, stderr one
# line starting with PREFIX and containing NEEDLE.
expect_fail() {
    local code=$1 prefix=$2 needle=$3 desc=$4; shift 4
    "$@" >"$work/out" 2>"$work/err"
    local rc=$? msg
    msg=$(cat "$work/err")
    if [ "$rc" -eq "$code" ] && [ "$(wc -l <"$work/err")" -eq 1 ] &&
       [[ "$msg" == "$prefix"* ]] && [[ "$msg" == *"$needle"* ]]; then
        pass "$desc: $msg"
    else
        fail "$desc (exit $rc): $msg"
    fi
}

for i in $(seq 200); do echo "the quick brown fox jumps over the lazy dog $i"; done >"$work/text.txt"
check "dtrain-tokenize --help" "$tokenize" --help
check "dtrain-tokenize turns a text file into a token file" "$tokenize" "$work/text.txt" "$work/data.bin"
bytes=$(stat -c %s "$work/text.txt")
check "the token file has a 1024-byte header and 2 bytes per input byte" \
    test "$(stat -c %s "$work/data.bin")" -eq $((1024 + 2 * bytes))
expect_fail 2 "dtrain-tokenize: " "cannot open" "dtrain-tokenize with a missing input" \
    "$tokenize" "$work/none.txt" "$work/x.bin"
"$tokenize" >/dev/null 2>&1
check "dtrain-tokenize without arguments exits 2" test $? -eq 2

"$train" --help >"$work/help" 2>&1
check "dtrain-train --help lists the flags and config keys" \
    grep -q -- "--init-llmc .*run.init_llmc" "$work/help"

cat >"$work/tiny.json" <<JSON
{"model": {"num_layers": 2, "channels": 32, "num_heads": 4, "max_seq_len": 32},
 "data": {"train": "$work/data.bin"},
 "optimizer": {"lr": 0.003, "schedule": "cosine", "warmup_steps": 1},
 "run": {"batch": 4, "seq": 16, "steps": 100, "seed": 3}}
JSON
"$train" "$work/tiny.json" --steps 4 --threads 2 --metrics "$work/m.jsonl" \
    --save-llmc "$work/model.bin" --checkpoint "$work/run.ckpt" >"$work/out" 2>"$work/err"
check "a tiny run from a config file and flags exits 0" test $? -eq 0
check "one progress line per step with loss, lr, ms, tok/s and GFLOP/s" \
    test "$(grep -cE '^step +[0-9]+/4 \| loss [0-9.]+ \| lr [0-9.e+-]+ \| norm [0-9.]+ \| +[0-9.]+ ms \| +[0-9]+ tok/s \| +[0-9.]+ GFLOP/s$' "$work/out")" -eq 4
check "the metrics file has one JSON line per step, from step 0" \
    test "$(grep -c '^{"step": [0-3], "loss": [0-9.]*, ' "$work/m.jsonl")" -eq 4
check "the run wrote an llm.c model file and a checkpoint" test -s "$work/model.bin" -a -d "$work/run.ckpt"

"$train" "$work/tiny.json" --steps 4 --threads 2 --metrics "$work/m2.jsonl" --log-every 0 >/dev/null 2>&1
check "a second process with the same seed and threads logs the same losses" \
    test "$(sed 's/, "ms".*//' "$work/m.jsonl")" = "$(sed 's/, "ms".*//' "$work/m2.jsonl")"

"$train" --data "$work/data.bin" --init-llmc "$work/model.bin" --batch 2 --seq 32 --steps 2 \
    --threads 1 >"$work/out" 2>"$work/err"
check "--init-llmc starts from the exported model (its shape comes from the file)" \
    grep -q "L=2 C=32 NH=4 V=256 (padded 256) maxT=32" "$work/out"
"$train" "$work/tiny.json" --resume "$work/run.ckpt" --steps 6 --threads 2 \
    --metrics "$work/m.jsonl" >"$work/out" 2>"$work/err"
check "--resume continues at step 4 and appends to the metrics file" \
    test "$(grep -c '^step' "$work/out")" -eq 2 -a "$(grep -c '"step": [4-5],' "$work/m.jsonl")" -eq 2

check "the checkpoint is a folder of sharded checkpoints (one shard)" \
    test -f "$work/run.ckpt/step-00000004/manifest.json" -a -f "$work/run.ckpt/step-00000004/shard-00000.bin"
expect_fail 2 "dtrain-train: " "is a file, not a folder" "--resume of a single file (the format of old)" \
    "$train" "$work/tiny.json" --resume "$work/model.bin" --steps 6

# fp16 (emulated on the cpu kernels) with dynamic loss scaling: an initial
# scale of 1e9 overflows fp16 (65504) in the first backward passes, each
# overflow skips its step and halves the scale; a window of 2 doubles it
# again after 2 good steps.  The scaler's state is in the checkpoint: a run
# cut after 3 steps and resumed gives the uncut run's steps 3..5 bit for bit
# (a constant learning rate: a cosine schedule depends on --steps).
fp16=(--precision fp16 --loss-scale 1e9 --loss-scale-window 2 --schedule constant --threads 1 --log-every 1)
"$train" "$work/tiny.json" --steps 6 "${fp16[@]}" --metrics "$work/f.jsonl" >"$work/out" 2>"$work/err"
check "--precision fp16 --loss-scale 1e9: 6 steps, exit 0" test $? -eq 0 -a "$(grep -c '^step' "$work/out")" -eq 6
over=$(grep -c 'gradient overflow at loss scale .* (fp16): step skipped' "$work/out")
last=$(sed -n 's/.*"loss_scale": \([^,]*\), "overflow_steps": \([0-9]*\),.*/\1 \2/p' "$work/f.jsonl" | tail -n 1)
check "the scale backs off: $over overflow lines, the last metrics line has scale and overflow count '$last'" \
    test "$over" -ge 1 -a "${last#* }" = "$over"
check "and it is below the initial 1e9" awk -v s="${last% *}" 'BEGIN { exit !(s + 0 < 1e9 && s + 0 >= 1) }'
check "the loss falls under fp16 (first and last step: $(losses() { sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$1"; }; losses "$work/f.jsonl" | sed -n '1p;$p' | tr '\n' ' '))" \
    awk -v a="$(sed -n '1s/.*"loss": \([^,]*\),.*/\1/p' "$work/f.jsonl")" -v b="$(sed -n '$s/.*"loss": \([^,]*\),.*/\1/p' "$work/f.jsonl")" 'BEGIN { exit !(b + 0 < a + 0) }'
"$train" "$work/tiny.json" --steps 3 "${fp16[@]}" --checkpoint "$work/f.ckpt" --metrics "$work/f1.jsonl" \
    >/dev/null 2>&1 &&
"$train" "$work/tiny.json" --steps 6 "${fp16[@]}" --resume "$work/f.ckpt" --metrics "$work/f2.jsonl" >/dev/null 2>&1
check "fp16: 3 steps with a checkpoint, then resumed to 6, exit 0" test $? -eq 0
check "the checkpoint records the loss scaler" grep -q '"loss_scale": {' "$work/f.ckpt/step-00000003/manifest.json"
strip() { sed 's/, "ms".*"dp_exposed_ms": [0-9.]*//; s/, "time".*//' "$1"; }
check "the resumed run's steps 3..5 (loss, norm, scale, overflows) are the uncut run's, bit for bit" \
    test "$(strip "$work/f2.jsonl")" = "$(strip "$work/f.jsonl" | sed -n '4,6p')" -a -n "$(strip "$work/f2.jsonl")"
"$train" "$work/tiny.json" --steps 1 --backend cuda --precision fp16 >"$work/out" 2>"$work/err"
rc=$?
if grep -q "not a kernel backend of this build" "$work/err"; then
    skip_test "no cuda kernels in this build: --backend cuda --precision fp16 not tried"
else
    check "--backend cuda --precision fp16: exit 2, one line naming --backend cpu (exit $rc)" \
        test "$rc" -eq 2 -a "$(wc -l <"$work/err")" -eq 1 && grep -q "fp16 is emulated on the cpu kernels only" "$work/err"
fi
expect_fail 2 "dtrain-train: " "holds no complete checkpoint" "--resume of a folder without checkpoints" \
    "$train" "$work/tiny.json" --resume "$work" --steps 6
"$train" "$work/tiny.json" --steps 4 --threads 2 --micro-batches 2 --metrics "$work/m3.jsonl" --log-every 0 \
    >/dev/null 2>&1
check "one process accumulates gradients over --micro-batches 2 (the parallel trainer's option)" \
    test "$(grep -c '^{"step": [0-3], ' "$work/m3.jsonl")" -eq 4
echo '{"run": {"batch": 4, "sequence": 16}}' >"$work/bad.json"
expect_fail 2 "dtrain-train: " "unknown key 'run.sequence'" "an unknown config key" \
    "$train" "$work/bad.json" --data "$work/data.bin"
echo '{"run": {"batch": "four"}}' >"$work/bad.json"
expect_fail 2 "dtrain-train: " "must be an integer, not a string" "a config value of the wrong type" \
    "$train" "$work/bad.json" --data "$work/data.bin"
expect_fail 2 "dtrain-train: " "not a multiple of num_heads" "C % NH != 0" \
    "$train" --data "$work/data.bin" --channels 30 --heads 4
expect_fail 2 "dtrain-train: " "longer than the model's max_seq_len" "T > max T" \
    "$train" --data "$work/data.bin" --seq 64 --max-seq-len 32
expect_fail 2 "dtrain-train: " "cannot open token file" "a missing token file" \
    "$train" --data "$work/none.bin"
expect_fail 2 "dtrain-train: " "is not a token file" "a text file given as token file" \
    "$train" --data "$work/text.txt" --steps 1
expect_fail 2 "dtrain-train: " "outside the model's vocabulary" "tokens beyond the vocabulary" \
    "$train" --data "$work/data.bin" --vocab-size 64 --steps 1
expect_fail 2 "dtrain-train: " "not an llm.c model file" "a token file given as llm.c model" \
    "$train" --data "$work/data.bin" --init-llmc "$work/data.bin"
expect_fail 2 "dtrain-train: " "unknown option" "an unknown flag" "$train" --data "$work/data.bin" --sped 3
expect_fail 2 "dtrain-train: " "no token file" "no token file at all" "$train" --steps 1

# Special files where a file is expected are refused at once (issue 16);
# `timeout` only turns a hang into a failure instead of a stuck suite.
mkfifo "$work/fifo"
mkdir "$work/adir"
expect_fail 2 "dtrain-train: " "is a directory" "a folder given as the config" \
    timeout 60 "$train" "$work/adir"
expect_fail 2 "dtrain-train: " "is not a regular file (a FIFO)" "a FIFO given as the config" \
    timeout 60 "$train" "$work/fifo"
expect_fail 2 "dtrain-train: " "is not a regular file (a FIFO)" "a FIFO given as the token file" \
    timeout 60 "$train" --data "$work/fifo" --steps 1
expect_fail 2 "dtrain-train: " "is not a regular file (a FIFO)" "a FIFO given as the llm.c model file" \
    timeout 60 "$train" --data "$work/data.bin" --init-llmc "$work/fifo" --steps 1
expect_fail 2 "dtrain-tokenize: " "is not a regular file (a FIFO)" "a FIFO given to dtrain-tokenize" \
    timeout 60 "$tokenize" "$work/fifo" "$work/x.bin"
# Outputs are checked before any work, and only regular files are replaced.
expect_fail 2 "dtrain-tokenize: " "is a character device, not a regular file" \
    "dtrain-tokenize onto /dev/full: refused" "$tokenize" "$work/text.txt" /dev/full
check "/dev/full is still a character device" test -c /dev/full
expect_fail 2 "dtrain-train: " "is a character device, not a regular file" "--save-llmc /dev/full: refused" \
    "$train" "$work/tiny.json" --steps 1 --save-llmc /dev/full
expect_fail 2 "dtrain-train: " "folder $work/none: No such file" "--save-llmc into a missing folder: refused before step 0" \
    "$train" "$work/tiny.json" --steps 1 --save-llmc "$work/none/model.bin"
check "... and no step ran" test ! -s "$work/out"
expect_fail 2 "dtrain-train: " "folder $work/none: No such file" "--checkpoint into a missing folder: refused before step 0" \
    "$train" "$work/tiny.json" --steps 1 --checkpoint "$work/none/run.ckpt"
expect_fail 2 "dtrain-train: " "is a file, not a folder" "--checkpoint naming a file: refused before step 0" \
    "$train" "$work/tiny.json" --steps 1 --checkpoint "$work/model.bin"
expect_fail 2 "dtrain-train: " "metrics file $work/adir is a directory" "--metrics naming a folder: refused" \
    "$train" "$work/tiny.json" --steps 1 --metrics "$work/adir"

# The README's demo corpus on Debian.
if [ -r /usr/share/common-licenses/GPL-3 ]; then
    "$tokenize" /usr/share/common-licenses/GPL-3 "$work/gpl.bin" >/dev/null &&
    "$train" --data "$work/gpl.bin" --layers 1 --channels 32 --heads 2 --batch 2 --seq 32 \
        --steps 2 --threads 1 >"$work/out" 2>&1
    check "the demo corpus /usr/share/common-licenses/GPL-3 trains" test $? -eq 0
else
    skip_test "no /usr/share/common-licenses/GPL-3 on this machine"
fi
done_testing
