#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# libFuzzer harnesses for every parser of untrusted input (issue 16), built
# with clang (-fsanitize=fuzzer,address,undefined) straight from the
# sources, each run for a bounded time from its seed corpus in the tree
# (tests/fuzz/corpus/NAME, plus the topology fixtures for topo_xml).
#
#   tests/fuzz/run-fuzz.sh [SECONDS] [NAME...]   (default 20 s each, all)
#
# TAP output: one line per harness with the executions done; a crash fails
# it and leaves the input in $DTRAIN_FUZZ_OUT (default a temporary folder);
# add that input to tests/fuzz/corpus/NAME as a regression once fixed.
# Without clang and libFuzzer (Debian: clang, libclang-rt-14-dev) it SKIPs.
# The suite runs it for a short time; a longer run is this command with
# a larger SECONDS.  DTRAIN_FUZZ_SEED=N (the suite's fuzz.sh sets 1) makes a
# run repeatable: the same seed and the same number of executions
# (DTRAIN_FUZZ_RUNS per harness, still bounded by SECONDS), so the suite
# gives the same verdict on every machine and a new crash only ever comes
# from a change, not from a lucky draw; an exploring run leaves the seed
# unset.
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
seconds=${1:-20}
shift $(( $# > 0 ? 1 : 0 ))
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(topo_xml plugstack health_config wire hb_wire inject srun_lines train_config ckpt tokens_llmc bpe hf)

if ! command -v clang >/dev/null 2>&1; then
  echo "1..0 # SKIP clang is not installed (apt-get install clang libclang-rt-14-dev)"
  exit 0
fi
out=${DTRAIN_FUZZ_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/dtrain-fuzz-XXXXXX")}
mkdir -p "$out"
probe="$out/probe.c"
printf '#include <stdint.h>\n#include <stddef.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' >"$probe"
if ! clang -fsanitize=fuzzer "$probe" -o "$out/probe" 2>/dev/null; then
  echo "1..0 # SKIP clang has no libFuzzer (apt-get install libclang-rt-14-dev)"
  exit 0
fi

c=$top/common
common_src="$c/dtrain_parse.c $c/dtrain_file.c"
pc() { pkg-config "$@" 2>/dev/null; }
# No config.h (it would turn on CUDA): its one value the sources need here, from configure.ac.
version=$(sed -n 's/^AC_INIT(\[dtrain\], \[\([^]]*\)\].*/\1/p' "$top/configure.ac")
cflags="-g -O1 -std=c11 -D_GNU_SOURCE -DPACKAGE_VERSION=\"${version:-0}\" -fsanitize=fuzzer,address,undefined"
cflags="$cflags -fno-sanitize-recover=undefined -I$top/include/dtrain -I$c"
sources() {
  case $1 in
    topo_xml) echo "$here/fuzz_topo_xml.c $top/topo/topo_model.c $top/topo/topo_hwloc.c $top/topo/topo_xml_check.c" \
                   "$top/topo/topo_nvml.c $top/topo/topo_bounded.c $top/topo/plan_node.c $top/topo/plan_cpus.c $top/topo/plan.c" \
                   "$common_src $c/dtrain_nvml.c $c/dtrain_bounded.c -I$top/topo $(pc --cflags hwloc libxml-2.0)" \
                   "$(pc --libs hwloc libxml-2.0) -ldl" ;;
    plugstack) echo "$here/fuzz_plugstack.c $top/spank_plugin/site_config.c $common_src $c/dtrain_master_port.c" \
                    "$c/dtrain_settings.c" \
                    "-I$top/spank_plugin -I$top/topo" \
                    "$(pc --cflags --libs jansson)" ;;
    health_config) echo "$here/fuzz_health_config.c $top/health/site_config.c $common_src $c/dtrain_settings.c" \
                        "-I$top/health -I$top/topo" \
                        "$(pc --cflags --libs jansson)" ;;
    wire) echo "$here/fuzz_wire.c $top/runtime/comm/cpu/wire.c -I$top/runtime" ;;
    hb_wire) echo "$here/fuzz_hb_wire.c $top/runtime/ft/dtrain_hb_wire.c $c/dtrain_sha256.c -I$top/runtime" ;;
    inject) echo "$here/fuzz_inject.c $top/runtime/ft/dtrain_inject.c $common_src -I$top/runtime" ;;
    srun_lines) echo "$here/fuzz_srun_lines.c $top/launcher/spares.c $top/topo/plan_tree.c $common_src" \
                     "-I$top/launcher -I$top/topo" ;;
    bpe) echo "$here/fuzz_bpe.c $top/runtime/data/dtrain_bpe.c $common_src -I$top/runtime -I$top/runtime/data" \
              "$(pc --cflags --libs jansson libpcre2-8)" ;;
    train_config|ckpt|tokens_llmc|hf)
      runtime_archive || return 2
      echo "$here/fuzz_$1.c $runtime_inc $out/libdtrain-fuzz.a $(pc --cflags --libs jansson libpcre2-8) -lopenblas -lm -lpthread -ldl" ;;
    *) return 1 ;;
  esac
}

# The runtime's parsers open files and call into the rest of libdtrain
# (model shapes, kernels' backend names, checkpoint folders), so their
# harnesses link an archive of libdtrain's sources (and the kernels, comm
# and common ones it uses) built here with clang once per run: the linker
# takes only the objects a harness needs.  No CUDA (DTRAIN_HAVE_CUDA unset).
# The include paths of the Makefiles: the API (in cflags), the runtime's
# parts by name, common, and the kernels' private header.
runtime_inc="-I$top/runtime -I$top/common -I$top/kernels"
runtime_archive() {
  [ -f "$out/libdtrain-fuzz.a" ] && return 0
  [ -f "$out/libdtrain-fuzz.failed" ] && return 1
  mkdir -p "$out/rt"
  local src list=()
  for src in "$top"/runtime/*.c "$top"/runtime/{model,data,parallel,ckpt,ft,trainer}/*.c \
             "$top"/runtime/cli/dtrain_config.c "$top"/runtime/cli/dtrain_main.c "$top"/kernels/*.c \
             "$top"/kernels/cpu/*.c "$top"/runtime/comm/*.c "$top"/runtime/comm/cpu/*.c \
             "$top"/runtime/comm/bootstrap/*.c "$c"/*.c; do
    list+=("$src")
  done
  # shellcheck disable=SC2016,SC2086 # the sh -c script expands its own variables; flags are several words
  if ! printf '%s\n' "${list[@]}" | CFL="${cflags/fuzzer,/fuzzer-no-link,} $runtime_inc $(pc --cflags jansson libpcre2-8)" RT="$out/rt" \
      xargs -P "$(nproc 2>/dev/null || echo 2)" -I{} sh -c 'o="$RT/$(echo "$1" | tr / _).o"; clang $CFL -c "$1" -o "$o"' sh {} \
      >"$out/runtime.build.log" 2>&1 || ! ar rcs "$out/libdtrain-fuzz.a" "$out"/rt/*.o 2>>"$out/runtime.build.log"; then
    touch "$out/libdtrain-fuzz.failed"
    return 1
  fi
}

repeatable=""
[ -n "${DTRAIN_FUZZ_SEED:-}" ] && repeatable="-seed=$DTRAIN_FUZZ_SEED -runs=${DTRAIN_FUZZ_RUNS:-2000}"
echo "1..${#names[@]}"
i=0
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
for name in "${names[@]}"; do
  i=$((i + 1))
  # shellcheck disable=SC2046 # the source list is several words
  src=$(sources "$name")
  case $? in
    0) ;;
    2) echo "not ok $i - $name: libdtrain's sources do not build with clang"
       grep -E "error|warning" "$out/runtime.build.log" | head -n 20 | sed 's/^/# /'; continue ;;
    *) echo "not ok $i - $name: no such harness"; continue ;;
  esac
  # shellcheck disable=SC2086
  if ! clang $cflags $src -o "$out/fuzz_$name" 2>"$out/$name.build.log"; then
    echo "not ok $i - $name: does not build with clang"; sed 's/^/# /' "$out/$name.build.log" | head -n 20; continue
  fi
  work="$out/$name.corpus"
  mkdir -p "$work"
  seeds=("$here/corpus/$name")
  [ "$name" = topo_xml ] && seeds+=("$top/tests/fixtures/topology")
  log="$out/$name.log"
  # hwloc 2.9 leaks what it parsed of some malformed files (lsan.supp)
  lsan=${LSAN_OPTIONS:-}
  [ "$name" = topo_xml ] && lsan="suppressions=$here/lsan.supp${lsan:+:$lsan}"
  (cd "$out" && LSAN_OPTIONS="$lsan" "./fuzz_$name" -max_total_time="$seconds" $repeatable -timeout=10 -rss_limit_mb=2048 -max_len=1048576 \
      -print_final_stats=1 -artifact_prefix="$out/$name-" "$work" "${seeds[@]}") >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  if [ "$rc" -eq 0 ]; then
    echo "ok $i - $name: ${execs:-?} executions (at most ${seconds} s${DTRAIN_FUZZ_SEED:+, seed $DTRAIN_FUZZ_SEED}), no crash, no leak"
  else
    echo "not ok $i - $name: exit $rc after ${execs:-?} executions; input and log in $out"
    grep -E "ERROR|SUMMARY|runtime error" "$log" | head -n 5 | sed 's/^/# /'
  fi
done
