#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# dtrain-tokenize --tokenizer and dtrain-generate --tokenizer against the
# real Hugging Face `tokenizers` (from tests/frameworks/torch-venv; SKIP
# without network): byte-level BPE tokenizers trained here on the licence
# texts, one with Llama 3's split pattern, ignore_merges and special and
# added tokens, one with GPT-2's (ByteLevel use_regex) and merges written
# as "a b" strings.  The same ids on every licence text and on a file of
# mixed scripts, emoji, CJK, digit runs, CRLF and special tokens;
# decode(encode(x)) == x byte for byte, invalid UTF-8 included; and exit 2
# with one line for each kind of hostile tokenizer.json.
set -u
. "$top_srcdir/tests/tap.sh"
tokenize="$top_builddir/runtime/dtrain-tokenize"
generate="$top_builddir/runtime/dtrain-generate"
train="$top_builddir/runtime/dtrain-train"
decode="$top_builddir/tests/runtime/bpe_decode"
licenses=/usr/share/common-licenses
[ -d "$licenses" ] || skip_all "no $licenses"
python=$("$top_srcdir/tests/frameworks/torch-venv" 2>/dev/null)
case $? in
  0) ;;
  77) skip_all "no Hugging Face tokenizers (tests/frameworks/torch-venv: no network)" ;;
  *) fail "tests/frameworks/torch-venv installs tokenizers"; done_testing ;;
esac
work=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-test-tokenizer-XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT

# The mixed file: scripts, emoji (with ZWJ), CJK, digit runs, CRLF, the
# special and added tokens inside words, contractions, unusual spaces.
printf '%s\r\n' "Hello, World! It's 2024-05-20; we'll see 1234567890 apples." \
  "Ünïcödé: Ελληνικά, русский текст, עברית, العربية, हिन्दी, ไทย." \
  "日本語のテキストと中文文本，한국어 텍스트。" \
  "emoji: 👩‍👩‍👧‍👦 🇫🇷 ✨🚀 x²+y³=z⁴ ½ ⅓ ①②③ ٣٤٥ ４５６" \
  "<|begin_of_text|>special<|end_of_text|>inside<|begin_of_text|><|begin_of_text|>" \
  "an <extra> token and <extr partial and <|begin_of_text| partial" \
  $'tabs\tand\t\tspaces   \u00a0nbsp \u3000ideographic \u2028line sep \u0085nel' \
  "I'M YOU'RE THEY'VE HE'D SHE'LL ſ 'S" "    leading spaces" "trailing   " "" >"$work/mixed.txt"
printf '\n\n\n   \r\n\t\n' >>"$work/mixed.txt"
# invalid UTF-8: stray continuation, truncated sequences, overlong, surrogate, 0xff
printf 'ok \x80\x80 \xe4\xb8 end \xc0\xaf \xed\xa0\x80 \xff\xfe\xf8 caf\xc3\xa9 \xf0\x9f\x98 x\x00y <|begin_of_\xff' >"$work/invalid.bin"

"$python" - "$work" "$licenses" <<'PY' >"$work/train.log" 2>&1
import json, os, sys
from tokenizers import Tokenizer, Regex, models, pre_tokenizers, decoders, trainers
work, lic = sys.argv[1], sys.argv[2]
files = sorted(os.path.join(lic, f) for f in os.listdir(lic) if os.path.isfile(os.path.join(lic, f)))
llama3 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
def train(name, pre, ignore_merges):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=3300, show_progress=False,
                                  special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train(files, trainer)
    tok.add_tokens(["<extra>"])
    tok.save(os.path.join(work, name + ".json"))
train("llama3", pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(llama3), behavior="isolated", invert=False),
                                         pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), True)
train("gpt2", pre_tokenizers.ByteLevel(add_prefix_space=False), False)
# GPT-2's files write merges as "a b" strings: the same tokenizer that way
j = json.load(open(os.path.join(work, "gpt2.json")))
j["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in j["model"]["merges"]]
json.dump(j, open(os.path.join(work, "gpt2.json"), "w"))
# the expected ids of every text file, one per line
inputs = [(os.path.basename(f), f) for f in files] + [("mixed.txt", os.path.join(work, "mixed.txt"))]
for name in ("llama3", "gpt2"):
    tok = Tokenizer.from_file(os.path.join(work, name + ".json"))
    with open(os.path.join(work, name + ".expected"), "w") as out:
        for base, path in inputs:
            try:
                text = open(path, "rb").read().decode("utf-8")
            except UnicodeDecodeError:
                continue
            ids = tok.encode(text, add_special_tokens=False).ids
            out.write(path + "\t" + " ".join(map(str, ids)) + "\n")
print("trained", len(files), "files")
PY
if [ $? -ne 0 ]; then
    fail "tokenizers trains the two tokenizers"; sed 's/^/# /' "$work/train.log" | tail -n 20; done_testing
fi
pass "tokenizers trains a Llama 3 and a GPT-2 style byte-level BPE on the licence texts"

# ids FILE: a token file's ids, space separated (uint16 or uint32)
ids() {
    "$python" -c '
import struct, sys
b = open(sys.argv[1], "rb").read()
h = struct.unpack("<256i", b[:1024])
fmt = "H" if h[0] == 20240520 else "I"
print(" ".join(map(str, struct.unpack("<%d%s" % (h[2], fmt), b[1024:]))))' "$1"
}

for name in llama3 gpt2; do
    json=$work/$name.json
    n=0 bad=0 badrt=0
    while IFS=$'\t' read -r path expect; do
        n=$((n + 1))
        if ! "$tokenize" --tokenizer "$json" "$path" "$work/out.bin" >/dev/null 2>"$work/err"; then
            bad=$((bad + 1)); diag "$name: $path: $(cat "$work/err")"; continue
        fi
        got=$(ids "$work/out.bin")
        if [ "$got" != "$expect" ]; then
            bad=$((bad + 1)); diag "$name: $path: ids differ from tokenizers'"
        fi
        "$decode" "$json" "$work/out.bin" >"$work/back" && cmp -s "$work/back" "$path" || badrt=$((badrt + 1))
    done <"$work/$name.expected"
    check "$name: dtrain-tokenize --tokenizer gives tokenizers' ids on all $n files (licences and mixed scripts)" test "$n" -gt 10 -a "$bad" -eq 0
    check "$name: decode(encode(x)) == x on all $n files" test "$badrt" -eq 0
    "$tokenize" --tokenizer "$json" "$work/invalid.bin" "$work/inv.bin" >/dev/null &&
        "$decode" "$json" "$work/inv.bin" >"$work/back"
    check "$name: invalid UTF-8 encodes and decodes back byte for byte" cmp -s "$work/back" "$work/invalid.bin"
    head -c 100000 /dev/urandom >"$work/random.bin"
    "$tokenize" --tokenizer "$json" "$work/random.bin" "$work/rnd.bin" >/dev/null &&
        "$decode" "$json" "$work/rnd.bin" >"$work/back"
    check "$name: 100 kB of random bytes encode and decode back byte for byte" cmp -s "$work/back" "$work/random.bin"
done

# speed: all the licence texts in one file
cat "$licenses"/* >"$work/all.txt" 2>/dev/null
start=$(date +%s%N)
"$tokenize" --tokenizer "$work/llama3.json" "$work/all.txt" "$work/all.bin" >"$work/out"
rc=$? ms=$((($(date +%s%N) - start) / 1000000))
check "the licence texts ($(wc -c <"$work/all.txt") bytes) encode in $ms ms (under 5 s)" test $rc -eq 0 -a $ms -lt 5000
check "a vocabulary under 65536 writes uint16 tokens (magic 20240520 version 1)" \
    grep -q "vocabulary 3301, uint16" "$work/out"

# a vocabulary beyond uint16: ids above 65535 through uint32 (llm.c's llama-3 layout)
"$python" - "$work" <<'PY'
import json, sys
j = json.load(open(sys.argv[1] + "/llama3.json"))
for t in j["added_tokens"]:
    if t["content"] == "<extra>":
        t["id"] = 128000
json.dump(j, open(sys.argv[1] + "/big.json", "w"))
PY
printf 'a <extra> b' >"$work/big.txt"
"$tokenize" --tokenizer "$work/big.json" "$work/big.txt" "$work/big.bin" >"$work/out" &&
    "$decode" "$work/big.json" "$work/big.bin" >"$work/back"
check "a vocabulary of 128001 writes uint32 tokens (magic 20240801 version 7), id 128000 included, and decodes back" \
    sh -c "grep -q 'vocabulary 128001, uint32' '$work/out' && cmp -s '$work/back' '$work/big.txt' &&
           [ \"\$(od -An -tu4 -N8 '$work/big.bin' | tr -s ' ')\" = ' 20240801 7' ]"
check "the uint32 file holds id 128000" eval '[[ " $(ids "$work/big.bin") " == *" 128000 "* ]]'

# dtrain-generate --tokenizer: a tiny model over the llama3 vocabulary
"$tokenize" --tokenizer "$work/llama3.json" "$licenses/GPL-3" "$work/gpl.bin" >/dev/null
"$train" --data "$work/gpl.bin" --vocab-size 3301 --layers 1 --channels 16 --heads 2 --max-seq-len 16 \
    --batch 2 --seq 8 --steps 1 --threads 1 --save-llmc "$work/model.bin" >"$work/tout" 2>&1
"$generate" --model "$work/model.bin" --tokenizer "$work/llama3.json" --prompt "The GNU <|begin_of_text|>" \
    --max-tokens 8 --temperature 0 >"$work/gen" 2>"$work/generr"
rc=$?
check "dtrain-generate --tokenizer prints the prompt and the text decoded with it" \
    sh -c "[ $rc -eq 0 ] && head -c 25 '$work/gen' | grep -q '^The GNU <|begin_of_text|>'"
[ $rc -eq 0 ] || diag "$(cat "$work/tout" "$work/generr" | tail -n 3)"
"$generate" --model "$work/model.bin" --tokenizer "$work/big.json" --prompt x >/dev/null 2>"$work/err"
rc=$?
check "dtrain-generate --tokenizer refuses a tokenizer larger than the model's vocabulary (exit 2, one line)" \
    sh -c "[ $rc -eq 2 ] && [ \"\$(wc -l <'$work/err')\" -eq 1 ] && grep -q 'larger than the model' '$work/err'"

# hostile tokenizer.json files: exit 2 and one "dtrain-tokenize: " line
hostile() {
    local desc=$1 needle=$2 file=$3
    "$tokenize" --tokenizer "$file" "$work/mixed.txt" "$work/h.bin" >"$work/out" 2>"$work/err"
    local rc=$?
    if [ $rc -eq 2 ] && [ "$(wc -l <"$work/err")" -eq 1 ] && grep -q "^dtrain-tokenize: .*$needle" "$work/err"; then
        pass "$desc: $(head -c 200 "$work/err")"
    else
        fail "$desc (exit $rc): $(head -c 300 "$work/err")"
    fi
}
# edit NAME PYTHON: NAME.json from llama3.json with j edited by PYTHON
edit() {
    "$python" -c "
import json, sys
j = json.load(open(sys.argv[1]))
$2
open(sys.argv[2], 'w').write(j if isinstance(j, str) else json.dumps(j))" "$work/llama3.json" "$work/$1.json"
}
head -c 20000 "$work/llama3.json" >"$work/truncated.json"
hostile "a truncated file" "not valid JSON" "$work/truncated.json"
edit vocab_array 'j["model"]["vocab"] = list(j["model"]["vocab"])'
hostile "model.vocab an array" "model.vocab is not an object" "$work/vocab_array.json"
edit id_string 'j["model"]["vocab"]["a"] = "1"'
hostile "a vocabulary id a string" "model.vocab" "$work/id_string.json"
edit id_huge 'j["model"]["vocab"]["a"] = 10**15'
hostile "a vocabulary id of 10^15" "model.vocab" "$work/id_huge.json"
edit id_neg 'j["model"]["vocab"]["a"] = -1'
hostile "a negative vocabulary id" "model.vocab" "$work/id_neg.json"
edit merge_unknown 'j["model"]["merges"][5] = ["nosuchtoken", "a"]'
hostile "a merge naming an unknown token" "model.merges\[5\] names a token" "$work/merge_unknown.json"
edit merge_three 'j["model"]["merges"][0] = "a b c"'
hostile "a merge of three parts" "model.merges\[0\]" "$work/merge_three.json"
edit merge_type 'j["model"]["merges"][0] = 7'
hostile "a merge a number" "model.merges\[0\]" "$work/merge_type.json"
edit merges_obj 'j["model"]["merges"] = {}'
hostile "model.merges an object" "model.merges is not an array" "$work/merges_obj.json"
edit wordpiece 'j["model"]["type"] = "WordPiece"'
hostile "a WordPiece model" "model.type" "$work/wordpiece.json"
edit unigram 'j["model"] = {"type": "Unigram", "vocab": [["a", 0.0]]}'
hostile "a Unigram model" "model.type" "$work/unigram.json"
edit normalizer 'j["normalizer"] = {"type": "NFC"}'
hostile "a normalizer" "normalizer" "$work/normalizer.json"
edit no_bytelevel 'j["pre_tokenizer"] = {"type": "Whitespace"}'
hostile "a Whitespace pre-tokenizer" "pre_tokenizer" "$work/no_bytelevel.json"
edit bad_regex 'j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed"'
hostile "a split pattern that does not compile" "does not compile" "$work/bad_regex.json"
edit decoder 'j["decoder"] = {"type": "WordPiece"}'
hostile "a WordPiece decoder" "decoder" "$work/decoder.json"
edit added_type 'j["added_tokens"][0]["id"] = "x"'
hostile "an added token's id a string" "added_tokens\[0\].id" "$work/added_type.json"
edit added_empty 'j["added_tokens"][0]["content"] = ""'
hostile "an empty added token" "added_tokens\[0\].content" "$work/added_empty.json"
edit lstrip 'j["added_tokens"][0]["lstrip"] = True'
hostile "an added token with lstrip" "lstrip" "$work/lstrip.json"
edit missing_byte 'del j["model"]["vocab"]["Ā"]; j["model"]["merges"] = []'
hostile "a vocabulary without a byte's token" "byte 0x00" "$work/missing_byte.json"
edit not_object 'j = "[1, 2, 3]"'
hostile "a JSON array" "not a JSON object" "$work/not_object.json"
edit deep 'j = "[" * 100000 + "]" * 100000'
hostile "arrays nested 100000 deep" "not valid JSON" "$work/deep.json"
edit long_token 'j["model"]["vocab"]["x" * 5000] = 5000'
hostile "a 5000-byte token" "longer than" "$work/long_token.json"
printf '{"model": "\xff\xfe\n"}' >"$work/badutf.json"
hostile "invalid UTF-8 in the JSON" "not valid JSON" "$work/badutf.json"
truncate -s 300M "$work/huge.json"
hostile "a 300 MB file" "" "$work/huge.json"
hostile "a missing file" "" "$work/nonexistent.json"
hostile "a directory" "" "$work"
"$generate" --model "$work/model.bin" --tokenizer "$work/merge_unknown.json" >/dev/null 2>"$work/err"
rc=$?
check "dtrain-generate --tokenizer with a hostile file: exit 2, one line" \
    sh -c "[ $rc -eq 2 ] && [ \"\$(wc -l <'$work/err')\" -eq 1 ] && grep -q '^dtrain-generate: ' '$work/err'"
"$tokenize" "$work/mixed.txt" "$work/bytes.bin" >/dev/null
check "without --tokenizer dtrain-tokenize keeps one token per byte" \
    test "$(ids "$work/bytes.bin" | wc -w)" -eq "$(wc -c <"$work/mixed.txt")"
done_testing
