#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# libdtrain.so exports the functions of its installed headers and nothing
# else: every dynamic symbol it defines is declared in one of them (checked
# with grep against the headers, independently of how libdtrain.map is made),
# the internal parts (pipeline stage, ZeRO, the cpu backend, the parsing
# helpers of common/) are not exported, and the programs built on the
# library start (their own tests run them further).
set -u
. "$top_srcdir/tests/tap.sh"
lib="$top_builddir/runtime/.libs/libdtrain.so"
[ -f "$lib" ] || skip_all "no shared libdtrain in this build ($lib)"
command -v nm >/dev/null || skip_all "nm is missing (binutils)"
headers=(common/dtrain_status.h runtime/model/dtrain_rng.h runtime/model/dtrain_gpt2.h
         runtime/model/dtrain_optim.h runtime/data/dtrain_data.h runtime/data/dtrain_llmc.h
         runtime/cli/dtrain_train.h runtime/trainer/dtrain_parallel.h runtime/cli/dtrain_generate.h
         runtime/ckpt/dtrain_shard_ckpt.h runtime/comm/dtrain_comm.h
         runtime/comm/bootstrap/dtrain_bootstrap.h kernels/dtrain_kernels.h kernels/dtrain_blas.h)
# the list above is what the Makefiles install (pkginclude_HEADERS)
installed=$(cd "$top_srcdir" && sed -n '/^pkginclude_HEADERS/,/[^\\]$/p' runtime/Makefile.am runtime/comm/Makefile.am \
  kernels/Makefile.am common/Makefile.am)
missing=()
for h in "${headers[@]}"; do
  [[ "$installed" == *"$(basename "$h")"* ]] || missing+=("$h")
done
if [ ${#missing[@]} -eq 0 ]; then pass "the ${#headers[@]} headers checked are the installed ones"
else fail "not installed, but checked as the API: ${missing[*]}"; fi
work=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-test-exports-XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
nm -D --defined-only "$lib" | awk '$2 != "A" {sub(/@.*/, "", $3); print $3}' | sort -u >"$work/exported"
n=$(wc -l <"$work/exported")
if [ "$n" -ge 100 ]; then pass "libdtrain.so exports $n symbols"
else fail "libdtrain.so exports only $n symbols (the API is larger: is the map empty?)"; fi

others=$(grep -v '^dtrain_' "$work/exported" | head -5 | tr '\n' ' ')
if [ -z "$others" ]; then pass "every exported symbol is dtrain_*"
else fail "symbols without the dtrain_ prefix are exported: $others"; fi

(cd "$top_srcdir" && cat "${headers[@]}") >"$work/headers"
undeclared=()
while read -r s; do
  grep -Eq "(^|[ *])$s\(" "$work/headers" || undeclared+=("$s")
done <"$work/exported"
if [ ${#undeclared[@]} -eq 0 ]; then pass "every exported symbol is declared in an installed header"
else fail "${#undeclared[@]} exported symbols are in no installed header: ${undeclared[*]:0:8}"; fi

hidden=()
for s in dtrain_stage_create dtrain_dp_create dtrain_pipe_schedule dtrain_tp_create dtrain_parse_int \
         dtrain_out_open dtrain_kernels_cpu_ops dtrain_shard_plan_v dtrain_watchdog_start; do
  grep -qx "$s" "$work/exported" && hidden+=("$s")
done
if [ ${#hidden[@]} -eq 0 ]; then pass "internal functions (stage, ZeRO, schedule, TP, parsing, io, cpu ops) are not exported"
else fail "internal functions are exported: ${hidden[*]}"; fi

for s in dtrain_train_config_parse_args dtrain_parallel_main dtrain_comm_init dtrain_kernels_create dtrain_gpt2_forward dtrain_sckpt_inspect dtrain_blas_select; do
  if grep -qx "$s" "$work/exported"; then pass "the API function $s is exported"
  elif grep -Eq "(^|[ *])$s\(" "$work/headers"; then fail "$s is declared in an installed header but not exported"
  else diag "$s is not part of the API any more (checked nothing)"; fi
done

for p in runtime/dtrain-train runtime/dtrain-ckpt runtime/dtrain-generate; do
  out=$("$top_builddir/$p" --help 2>&1); rc=$?
  if [ $rc -eq 0 ]; then pass "$p --help runs on the exported API"
  else fail "$p --help: exit $rc: $(echo "$out" | tail -1)"; fi
done
done_testing
