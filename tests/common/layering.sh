#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Folders are layers (doc/design.md, "Layers"): every quoted #include of the
# plugin, launcher, health checks, topology, kernels and runtime names a
# header of its own folder, of the installed API (include/dtrain/), or of a
# part the table below lets it use.  The installed headers include only one
# another, and include/dtrain/Makefile.inc lists exactly that folder.
# Tests and benchmarks may use any part: they test the private ones.
set -uo pipefail
. "${DTRAIN_TAP_SH:?}"
top=${abs_top_srcdir:?}

# part: the parts (besides itself, common and the API) whose private
# headers it may include.  A part is a top folder, or runtime/X for the
# runtime's parts (runtime/comm/bootstrap apart: the launcher carries its
# ids and links no runtime); runtime/ itself holds the file helpers.
declare -A may=(
  [common]=""
  [topo]=""
  [kernels]=""
  [runtime]=""
  [runtime/comm/bootstrap]=""
  [runtime/comm]="runtime/comm/bootstrap"
  [runtime/model]="runtime"
  [runtime/data]="runtime runtime/model"
  [runtime/parallel]="runtime runtime/model runtime/comm"
  [runtime/ckpt]="runtime runtime/model runtime/data runtime/parallel runtime/comm"
  [runtime/ft]="runtime runtime/model runtime/data runtime/parallel runtime/comm runtime/comm/bootstrap runtime/ckpt"
  [runtime/trainer]="runtime runtime/model runtime/data runtime/parallel runtime/comm runtime/comm/bootstrap runtime/ckpt runtime/ft"
  [runtime/cli]="runtime runtime/model runtime/data runtime/parallel runtime/comm runtime/comm/bootstrap runtime/ckpt runtime/ft runtime/trainer"
  [launcher]="topo runtime/comm/bootstrap"
  [spank_plugin]="topo"
  [health]="topo"
)
# Where a quoted include that is not beside its file is looked for, in the
# order of the Makefiles' -I flags.
search=(include/dtrain runtime common topo runtime/comm/bootstrap)

part_of() {
  case $1 in
    include/dtrain/*) echo api ;;
    runtime/comm/bootstrap/*) echo runtime/comm/bootstrap ;;
    runtime/*/*) local r=${1#runtime/}; echo "runtime/${r%%/*}" ;;
    runtime/*) echo runtime ;;
    *) echo "${1%%/*}" ;;
  esac
}

# violations ROOT: one line "FILE: includes HEADER (PART may not use PART)"
# for each include the table does not allow.
violations() {
  local root=$1 f d inc target p q ok
  (cd "$root" && find common topo kernels runtime launcher spank_plugin health include \
      -name '*.[ch]' -o -name '*.cu' 2>/dev/null) | sort | while read -r f; do
    p=$(part_of "$f")
    d=$(dirname "$f")
    grep -o '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^"]*"' "$root/$f" | sed 's/.*"\(.*\)"/\1/' |
    while read -r inc; do
      target=""
      if [ -f "$root/$d/$inc" ]; then target=$d/$inc
      else
        for s in "${search[@]}"; do
          if [ -f "$root/$s/$inc" ]; then target=$s/$inc; break; fi
        done
      fi
      [ -n "$target" ] || continue   # not ours (config.h, a system header)
      target=$(realpath -m --relative-to="$root" "$root/$target")
      q=$(part_of "$target")
      if [ "$p" = api ]; then
        [ "$q" = api ] || echo "$f: includes $target (an installed header may include only installed ones)"
        continue
      fi
      [ "$q" = "$p" ] || [ "$q" = api ] || [ "$q" = common ] && continue
      ok=0
      for a in ${may[$p]-}; do [ "$a" = "$q" ] && ok=1; done
      [ $ok = 1 ] || echo "$f: includes $target ($p may not use $q)"
    done
  done
}

out=$(violations "$top")
if [ -z "$out" ]; then pass "every include of the product's folders follows the layers"
else fail "includes across the layers:"; echo "$out" | head -30 | sed 's/^/#   /'; fi

for p in "${!may[@]}"; do
  [ -d "$top/$p" ] || fail "the layer table names $p, which is no folder"
done
pass "the layer table names folders that exist"

# The installed API is the folder: its list in Makefile.inc is the folder.
listed=$(sed -n 's|^[[:space:]]*include/dtrain/\([^ ]*\.h\).*|\1|p' "$top/include/dtrain/Makefile.inc" | sort)
present=$(cd "$top/include/dtrain" && ls -- *.h | sort)
if [ -n "$listed" ] && [ "$listed" = "$present" ]; then pass "include/dtrain/Makefile.inc lists exactly the folder's $(echo "$present" | wc -l) headers"
else fail "include/dtrain/Makefile.inc and the folder differ: $(diff <(echo "$listed") <(echo "$present") | grep '^[<>]' | tr '\n' ' ')"; fi

# The check itself finds a violation: a copy of a tiny tree where the
# kernels include the runtime's pipeline header, and the API a private one.
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-layering.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/kernels" "$tmp/runtime/parallel" "$tmp/runtime/trainer" "$tmp/include/dtrain" "$tmp/common"
echo '#include "parallel/dtrain_pipeline.h"' >"$tmp/kernels/k.c"
echo '#include "parallel/dtrain_pipeline.h"' >"$tmp/runtime/trainer/t.c"
echo '#include "dtrain_bounded.h"' >"$tmp/include/dtrain/dtrain_api.h"
echo '#include "dtrain_api.h"' >"$tmp/common/c.c"
: >"$tmp/runtime/parallel/dtrain_pipeline.h"; : >"$tmp/common/dtrain_bounded.h"
out=$(violations "$tmp")
check "a planted include of the runtime from the kernels is found" grep -q '^kernels/k.c: includes runtime/parallel/dtrain_pipeline.h (kernels may not use runtime/parallel)' <<<"$out"
check "a planted private include in an installed header is found" grep -q '^include/dtrain/dtrain_api.h: includes common/dtrain_bounded.h' <<<"$out"
check "what the table allows is not reported (trainer -> parallel, common -> API)" test "$(echo "$out" | wc -l)" = 2
done_testing
