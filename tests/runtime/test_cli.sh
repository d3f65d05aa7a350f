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
check "--version on dtrain-train, dtrain-tokenize, dtrain-launch, dtrain-topo, dtrain-health" \
    eval '"$train" --version | grep -qx "dtrain-train [0-9.]*" && "$tokenize" --version | grep -qx "dtrain-tokenize [0-9.]*" &&
          "$top_builddir/launcher/dtrain-launch" --version | grep -qx "dtrain-launch [0-9.]*" &&
          "$top_builddir/topo/dtrain-topo" --version | grep -qx "dtrain-topo [0-9.]*" &&
          "$top_builddir/health/dtrain-health" --version | grep -qx "dtrain-health [0-9.]*" &&
          "$top_builddir/runtime/dtrain-generate" --version | grep -qx "dtrain-generate [0-9.]*" &&
          "$top_builddir/runtime/dtrain-ckpt" --version | grep -qx "dtrain-ckpt [0-9.]*"' 
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

# --dtrain-verbose's report (DTRAIN_VERBOSE=1) with the links the plugin
# passes (DTRAIN_GROUP_LINKS): a malformed value is one warning and the run
# goes on without predicted times; a group of one has no link.
DTRAIN_VERBOSE=1 DTRAIN_GROUP_LINKS=$'TP=450:NV\nLink,PP=-,DP=-,WORLD=-' "$train" "$work/tiny.json" --steps 1 --threads 1 \
    >"$work/vout" 2>"$work/verr"
vrc=$?
check "a malformed DTRAIN_GROUP_LINKS: exit 0, one warning line naming it, no predicted times" \
    sh -c "[ $vrc -eq 0 ] && [ \"\$(grep -c 'warning: DTRAIN_GROUP_LINKS ignored (no predicted times): byte 7: TP.s link kind' '$work/verr')\" -eq 1 ] &&
           grep -q 'explain: no predicted times' '$work/vout' '$work/verr'"
DTRAIN_VERBOSE=1 DTRAIN_GROUP_LINKS='TP=-,PP=-,DP=-,WORLD=-' "$train" "$work/tiny.json" --steps 1 --threads 1 \
    >"$work/vout" 2>"$work/verr"
vrc=$?
check "DTRAIN_GROUP_LINKS of groups of one: exit 0, no link for each, 0 ms predicted in all" \
    sh -c "[ $vrc -eq 0 ] && [ \"\$(cat '$work/vout' '$work/verr' | grep -c 'group of 1: 0 bytes in all, 0 per member, over -; no link (one member)\$')\" -eq 4 ] &&
           cat '$work/vout' '$work/verr' | grep -q 'explain: predicted communication per step: 0.000 ms'"
"$train" "$work/tiny.json" --steps 4 --threads 2 --metrics "$work/m.jsonl" \
    --save-llmc "$work/model.bin" --checkpoint "$work/run.ckpt" >"$work/out" 2>"$work/err"
check "a tiny run from a config file and flags exits 0" test $? -eq 0
check "one progress line per step with loss, smoothed loss, lr, ms, tok/s, GFLOP/s, MFU, elapsed and ETA" \
    test "$(grep -cE '^step +[0-9]+/4 \| loss [0-9.]+ \(smoothed [0-9.]+\) \| lr [0-9.e+-]+ \| norm [0-9.]+ \| +[0-9.]+ ms \| +[0-9]+ tok/s \| +[0-9.]+ GFLOP/s \| MFU [0-9.]+% \| elapsed [0-9hms]+ \| ETA [0-9hms]+$' "$work/out")" -eq 4
check "a summary line at the end: steps, final loss, where the checkpoints, model and metrics are" \
    grep -qE "^dtrain-train: done: steps 0\.\.3 of 4 in [0-9hms]+, final loss [0-9.]+ \(smoothed [0-9.]+\); checkpoints in $work/run.ckpt; model $work/model.bin; metrics $work/m.jsonl$" "$work/out"
check "the start says against which peak MFU is counted" grep -qE "^dtrain-train: MFU against .*measured at start" "$work/out"
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
"$train" "$work/tiny.json" --steps 4 --threads 2 --checkpoint "$work/run.ckpt" >"$work/out" 2>"$work/err"
rc=$?
check "resumed at its last step: exit 0 and \"nothing to do\"" \
    eval 'test $rc -eq 0 && grep -q "^dtrain-train: nothing to do: the run is at step 4 of 4 already$" "$work/out"'
# Ctrl-C: a checkpoint of the step after the one in flight, exit 75, resumable
"$train" "$work/tiny.json" --steps 100000 --threads 1 --checkpoint "$work/int.ckpt" >"$work/int.out" 2>"$work/int.err" &
pid=$!
for i in $(seq 600); do grep -qE "^step +2/" "$work/int.out" 2>/dev/null && break; sleep 0.1; done
kill -INT $pid
wait $pid
rc=$?
check "SIGINT: exit 75 after writing a checkpoint, saying so" \
    eval 'test $rc -eq 75 && grep -q "stopping on SIGINT (received by 1 rank): checkpoint of step [0-9]* written" "$work/int.err" &&
          ls "$work/int.ckpt" | grep -q "^step-"'
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
generate="$top_builddir/runtime/dtrain-generate"
"$generate" --checkpoint "$work/run.ckpt" --prompt "the " --max-tokens 20 --seed 4 >"$work/g1" 2>"$work/gerr"
rc=$?
"$generate" --checkpoint "$work/run.ckpt" --prompt "the " --max-tokens 20 --seed 4 >"$work/g2" 2>/dev/null
"$generate" --model "$work/model.bin" --prompt "the " --max-tokens 20 --seed 4 >"$work/g3" 2>/dev/null
check "dtrain-generate continues a prompt from the checkpoint folder, the same for a seed and from the llm.c export" \
    eval 'test $rc -eq 0 && test "$(head -c 4 "$work/g1")" = "the " && test "$(wc -c <"$work/g1")" -eq 25 &&
          cmp -s "$work/g1" "$work/g2" && cmp -s "$work/g1" "$work/g3" && grep -q "written by T=1 P=1 D=1" "$work/gerr"'
check "dtrain-generate --tokens prints the 20 ids" \
    eval 'test "$("$generate" --model "$work/model.bin" --prompt-tokens 116,104,101 --max-tokens 20 --tokens | wc -w)" -eq 20'
expect_fail 2 "dtrain-generate: " "give either --checkpoint DIR or --model FILE" "dtrain-generate without a model" \
    "$generate" --prompt x
expect_fail 2 "dtrain-generate: " "holds no complete checkpoint" "dtrain-generate from a folder without checkpoints" \
    eval 'mkdir -p "$work/empty.ckpt" && "$generate" --checkpoint "$work/empty.ckpt"' 
expect_fail 2 "dtrain-generate: " "outside the model's vocabulary" "a prompt token beyond the vocabulary" \
    "$generate" --model "$work/model.bin" --prompt-tokens 1,999
ckpt="$top_builddir/runtime/dtrain-ckpt"
check "dtrain-ckpt list: the step, layout, size and state of each checkpoint" \
    eval '"$ckpt" list "$work/run.ckpt" | grep -qE "^4 +T=1 P=1 D=1 +off +[0-9]+  complete \(not verified\)$"'
check "dtrain-ckpt show: the manifest in words" \
    eval '"$ckpt" show "$work/run.ckpt" | grep -q "model L=2 C=32 NH=4 V=256 (padded 256) maxT=32" &&
          "$ckpt" show "$work/run.ckpt" 4 | grep -q "shard-00000.bin .* checksum [0-9a-f]\{16\}$"'
check "dtrain-ckpt verify: every shard good, exit 0" \
    eval '"$ckpt" verify "$work/run.ckpt" | grep -q "step-00000004: good (verified)$"'
"$ckpt" export "$work/run.ckpt" "$work/export.bin" >/dev/null
check "dtrain-ckpt export: the llm.c model file --save-llmc wrote at the same step, byte for byte" \
    cmp -s "$work/export.bin" "$work/model.bin"
cp -r "$work/run.ckpt" "$work/bad.ckpt"
printf 'x' | dd of="$work/bad.ckpt/step-00000004/shard-00000.bin" bs=1 seek=2000 conv=notrunc 2>/dev/null
"$ckpt" verify "$work/bad.ckpt" >"$work/vout" 2>&1
rc=$?
check "dtrain-ckpt verify of a damaged shard: exit 1, names the shard, changes nothing" \
    eval 'test $rc -eq 1 && grep -q "DAMAGED; shard-00000.bin: .*checksum" "$work/vout" && test -d "$work/bad.ckpt/step-00000004"'
expect_fail 2 "dtrain-ckpt: " "holds no complete checkpoint" "dtrain-ckpt list of a folder without checkpoints" \
    "$ckpt" list "$work/empty.ckpt"
expect_fail 2 "dtrain-ckpt: " "give list, show, verify or export" "dtrain-ckpt with an unknown verb" "$ckpt" frob x
"$train" "$work/tiny.json" --steps 4 --threads 1 --sample-every 2 >"$work/sout" 2>&1
check "--sample-every 2: a line of what the model writes after steps 2 and 4 (32 tokens: max_seq_len)" \
    eval 'test "$(grep -cE "^sample after step [24]: .{32}$" "$work/sout")" -eq 2'
# a metrics plot for any metrics file (the demo's report generalised)
"$train" "$work/tiny.json" --steps 4 --threads 1 --val-fraction 0.2 --val-every 2 --val-batches 2 \
    --metrics "$work/val.jsonl" >/dev/null 2>&1
report="$top_srcdir/scripts/demo.d/report.py"
python3 "$report" --metrics "$work/val.jsonl" --png "$work/val.png" >"$work/rout" 2>"$work/rerr"
rc=$?
if python3 -c 'import matplotlib' 2>/dev/null; then
    check "report.py --metrics plots training and validation loss of any metrics file" \
        eval 'test $rc -eq 0 && test -s "$work/val.png" && grep -q "validation loss final [0-9.]* after step 3, best" "$work/rout"'
else
    check "report.py --metrics without matplotlib: the summary, then one line saying so, exit 2" \
        eval 'test $rc -eq 2 && grep -q "validation loss final [0-9.]* after step 3, best" "$work/rout" &&
              test "$(wc -l <"$work/rerr")" -eq 1 && grep -q "matplotlib is not installed" "$work/rerr"'
fi
mkdir "$work/shards"
cp "$work/data.bin" "$work/shards/t_train_000000.bin"
cp "$work/data.bin" "$work/shards/t_train_000001.bin"
check "--data takes a glob of shards" "$train" --data "$work/shards/t_train_*.bin" --steps 1 --layers 1 \
    --channels 16 --heads 2 --batch 2 --seq 16 --threads 1
expect_fail 2 "dtrain-train: " "t_train_000000.bin holds token id" "a shard beyond the vocabulary is named" \
    "$train" --data "$work/shards/t_train_*.bin" --vocab-size 64 --steps 1
head -c 1500 "$work/data.bin" >"$work/shards/t_train_000002.bin"
expect_fail 2 "dtrain-train: " "t_train_000002.bin is truncated" "a truncated shard is named" \
    "$train" --data "$work/shards/t_train_*.bin" --steps 1
expect_fail 2 "dtrain-train: " "no token file matches" "a glob that matches nothing" \
    "$train" --data "$work/shards/v_*.bin" --steps 1
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
