#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Checkpoint trust (doc/fault-tolerance.md, "What the checksums protect
# against"), with dtrain-train (the same save and resume as dtrain-launch):
#  - a symbolic link planted as step-N.tmp is never written through: the
#    save fails with one line naming it, the link's target stays empty;
#  - a checkpoint folder owned by another user (nobody), or writable by
#    group or others, or a step's file owned by nobody, is refused at
#    resume: exit 2, one line naming the path and the reason;
#  - a manifest whose data_batches was edited (the shard header says
#    otherwise) is not resumed at the edited data position.
# Needs root (the files are given to nobody); SKIP otherwise.
. "$abs_top_srcdir/tests/tap.sh"
train=$abs_top_builddir/runtime/dtrain-train
tokenize=$abs_top_builddir/runtime/dtrain-tokenize
[ -x "$train" ] && [ -x "$tokenize" ] || skip_all "dtrain-train is not built"
[ "$(id -u)" -eq 0 ] || skip_all "needs root to give files to another user (chown nobody)"
id nobody >/dev/null 2>&1 || skip_all "there is no user nobody"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-test-trust.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

for i in $(seq 200); do echo "the quick brown fox jumps over the lazy dog $i"; done >"$tmp/text.txt"
"$tokenize" "$tmp/text.txt" "$tmp/data.bin" >/dev/null 2>&1 || skip_all "dtrain-tokenize failed"
cat >"$tmp/tiny.json" <<JSON
{"model": {"num_layers": 1, "channels": 16, "num_heads": 2, "max_seq_len": 16},
 "data": {"train": "$tmp/data.bin"},
 "run": {"batch": 2, "seq": 8, "steps": 100, "seed": 3}}
JSON
# train ARGS...: a run, its code in $rc, its stderr in $tmp/err
train() { "$train" "$tmp/tiny.json" --threads 1 --log-every 0 "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?; }
# refused DESC NEEDLE: exit 2 and one line on stderr holding NEEDLE
refused() {
  local desc=$1 needle=$2
  if [ "$rc" -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -qF -- "$needle" "$tmp/err"; then
    pass "$desc: $(cat "$tmp/err")"
  else
    fail "$desc (exit $rc): $(cat "$tmp/err")"
  fi
}

# ---- a planted link step-N.tmp
mkdir -p "$tmp/link.ckpt" "$tmp/elsewhere"
ln -s "$tmp/elsewhere" "$tmp/link.ckpt/step-00000002.tmp"
train --steps 2 --checkpoint "$tmp/link.ckpt"
check "a link planted as step-00000002.tmp: nothing is written into its target" \
  eval '[ -z "$(ls -A "$tmp/elsewhere")" ]' || diag "in the target: $(ls -A "$tmp/elsewhere")"
check "the link is left where it was, no step-00000002 made through it" \
  eval '[ -L "$tmp/link.ckpt/step-00000002.tmp" ] && [ ! -e "$tmp/link.ckpt/step-00000002" ]'
# (a failed save is a warning, as on a full disk: the run goes on)
check "the save fails with one line naming the link (exit $rc)" \
  eval '[ "$(grep -c "$tmp/link.ckpt/step-00000002.tmp is a symbolic link, not a step folder this run made" "$tmp/err")" -eq 1 ]' ||
  diag "stderr: $(cat "$tmp/err")"

# ---- a checkpoint folder of another user's, or one others can write
train --steps 2 --checkpoint "$tmp/own.ckpt"
check "a run writes the checkpoint of step 2 (exit $rc)" test "$rc" -eq 0 -a -f "$tmp/own.ckpt/step-00000002/manifest.json"
cp -a "$tmp/own.ckpt" "$tmp/own.saved"
chown -R nobody "$tmp/own.ckpt"
train --steps 4 --checkpoint "$tmp/own.ckpt"
refused "the checkpoint folder owned by nobody: refused at resume" "checkpoint folder $tmp/own.ckpt is not trusted: owned by uid $(id -u nobody)"
train --steps 4 --resume "$tmp/own.ckpt"
refused "the same with --resume" "checkpoint folder $tmp/own.ckpt is not trusted: owned by uid $(id -u nobody)"
check "nothing of it removed or written" eval '[ "$(stat -c %U "$tmp/own.ckpt")" = nobody ] && [ "$(ls "$tmp/own.ckpt")" = step-00000002 ]'
chown -R root "$tmp/own.ckpt"
chown nobody "$tmp/own.ckpt/step-00000002/shard-00000.bin"
train --steps 4 --checkpoint "$tmp/own.ckpt"
refused "a shard file owned by nobody: refused, naming it" "$tmp/own.ckpt/step-00000002/shard-00000.bin is not trusted: owned by uid"
chown root "$tmp/own.ckpt/step-00000002/shard-00000.bin"
chmod g+w "$tmp/own.ckpt"
train --steps 4 --checkpoint "$tmp/own.ckpt"
refused "a checkpoint folder writable by its group: refused" "checkpoint folder $tmp/own.ckpt is not trusted: writable by group or others (mode 0775)"
chmod 0755 "$tmp/own.ckpt"
chmod o+w "$tmp/own.ckpt/step-00000002"
train --steps 4 --checkpoint "$tmp/own.ckpt"
refused "a step folder writable by others: refused" "$tmp/own.ckpt/step-00000002 is not trusted: writable by group or others"
chmod 0755 "$tmp/own.ckpt/step-00000002"
train --steps 4 --checkpoint "$tmp/own.ckpt"
check "the folder root owns and nobody else can write resumes (exit $rc)" \
  eval '[ "$rc" -eq 0 ] && grep -q "resum.*step 2" "$tmp/out" "$tmp/err"' || diag "$(cat "$tmp/out" "$tmp/err" | tail -3)"

# ---- an edited data_batches
rm -rf "$tmp/own.ckpt" && cp -a "$tmp/own.saved" "$tmp/own.ckpt"
sed -i 's/"data_batches": [0-9]*/"data_batches": 12345/' "$tmp/own.ckpt/step-00000002/manifest.json"
train --steps 4 --checkpoint "$tmp/own.ckpt"
check "a manifest whose data_batches disagrees with the shard header is not resumed (exit $rc)" \
  eval '[ "$rc" -eq 2 ] && grep -q "header does not match the manifest" "$tmp/err" && ! grep -q "data batch 12345" "$tmp/out" "$tmp/err"' ||
  diag "$(cat "$tmp/out" "$tmp/err" | tail -4)"
done_testing
