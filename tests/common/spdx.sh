#!/usr/bin/env bash
# Every source file says SPDX-License-Identifier: GPL-2.0-or-later
# (scripts/spdx-headers --check), and the script adds the line where it
# belongs (first line, or after a #! line) and only once.
set -uo pipefail
. "${DTRAIN_TAP_SH:?}"
top=${abs_top_srcdir:?}
script=$top/scripts/spdx-headers
id='SPDX-License-Identifier: GPL-2.0-or-later'

out=$(cd "$top" && "$script" --check 2>&1)
if [ $? = 0 ]; then pass "every source file has the SPDX line"
else fail "source files without the SPDX line (run scripts/spdx-headers)"; echo "$out" | head -20 | sed 's/^/#   /'; fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-spdx.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
printf '/* a C file */\nint x;\n' >"$tmp/a.c"
printf '#!/bin/sh\necho hi\n' >"$tmp/run"; chmod 755 "$tmp/run"
printf 'SUBDIRS = x\n' >"$tmp/Makefile.am"
printf '{"a": 1}\n' >"$tmp/data.json"
(cd "$tmp" && "$script" a.c run Makefile.am data.json >/dev/null)
check "C file: the line comes first, as a C comment" sh -c "[ \"\$(head -n1 '$tmp/a.c')\" = '/* $id */' ] && [ \"\$(sed -n 2p '$tmp/a.c')\" = '/* a C file */' ]"
check "script: the line follows #!, which stays first; still executable" sh -c "[ \"\$(head -n1 '$tmp/run')\" = '#!/bin/sh' ] && [ \"\$(sed -n 2p '$tmp/run')\" = '# $id' ] && [ -x '$tmp/run' ] && [ \"\$('$tmp/run')\" = hi ]"
check "Makefile.am: a # comment first; JSON left alone" sh -c "[ \"\$(head -n1 '$tmp/Makefile.am')\" = '# $id' ] && [ \"\$(cat '$tmp/data.json')\" = '{\"a\": 1}' ]"
sum1=$(cat "$tmp"/* | md5sum)
(cd "$tmp" && "$script" a.c run Makefile.am data.json >/dev/null)
check "a second run changes nothing" test "$sum1" = "$(cat "$tmp"/* | md5sum)"
check "--check passes on the files it fixed" sh -c "cd '$tmp' && '$script' --check a.c run Makefile.am data.json"
done_testing
