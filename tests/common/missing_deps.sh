#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# configure stops on a missing required dependency with ONE line naming the
# Debian package that provides it.  Each case runs the real configure in a
# temporary folder with one dependency made to look absent, without touching
# the installed packages: a cache variable says a header or library check
# failed (ac_cv_header_*, ac_cv_lib_*), or PKG_CONFIG is a wrapper that says
# one module is not there.
: "${abs_top_srcdir:?run through make check}" "${DTRAIN_TAP_SH:?run through make check}"
. "$DTRAIN_TAP_SH"

configure=$abs_top_srcdir/configure
[ -x "$configure" ] || skip_all "$configure not found (run ./autogen.sh)"
# configure refuses to run in another folder when the source tree itself
# has been configured.
[ ! -f "$abs_top_srcdir/config.status" ] || skip_all "the source tree is configured in place (make distclean there)"
real_pkg_config=$(command -v pkg-config) || skip_all "pkg-config not installed (apt-get install pkg-config)"

work=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-missing-deps.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT

# without_module NAME: path of a pkg-config that says NAME is not installed.
without_module() {
  local w=$work/pkg-config-without-$1
  cat >"$w" <<EOF
#!/bin/sh
for a in "\$@"; do
  case \$a in $1|"$1 "*) exit 1 ;; esac
done
exec "$real_pkg_config" "\$@"
EOF
  chmod +x "$w"
  echo "$w"
}

# expect_missing PACKAGE WHAT CONFIGURE-ARGS...: configure fails, and its
# stderr is exactly one line naming PACKAGE.
n=0
expect_missing() {
  local package=$1 what=$2 dir
  shift 2
  n=$((n + 1))
  dir=$work/case$n
  mkdir -p "$dir"
  (cd "$dir" && "$configure" --without-cuda "$@" >stdout 2>stderr)
  local rc=$? lines
  lines=$(wc -l <"$dir/stderr")
  if [ "$rc" -ne 0 ] && [ "$lines" -eq 1 ] &&
     grep -qxF "configure: error: $what not found: install the Debian package $package (apt-get install $package)" "$dir/stderr"; then
    pass "missing $what: configure stops with one line naming $package"
  else
    fail "missing $what: configure stops with one line naming $package"
    diag "configure arguments: $*"
    diag "exit status $rc, $lines line(s) on stderr:"
    sed 's/^/#   /' "$dir/stderr"
  fi
}

expect_missing libslurm-dev 'slurm/spank.h' ac_cv_header_slurm_spank_h=no
expect_missing libslurm-dev 'slurm/slurm.h' ac_cv_header_slurm_slurm_h=no
expect_missing libslurm-dev 'libslurm' ac_cv_lib_slurm_slurm_requeue=no
expect_missing libpmi2-0-dev 'slurm/pmi2.h' ac_cv_header_slurm_pmi2_h=no
expect_missing libpmi2-0-dev 'libpmi2' ac_cv_lib_pmi2_PMI2_Init=no
expect_missing libhwloc-dev 'hwloc >= 2.5' PKG_CONFIG="$(without_module hwloc)"
expect_missing libjansson-dev 'jansson' PKG_CONFIG="$(without_module jansson)"
expect_missing libpcre2-dev 'libpcre2-8 >= 10.34' PKG_CONFIG="$(without_module libpcre2-8)"
expect_missing libopenblas-dev 'OpenBLAS (cblas_sgemm)' PKG_CONFIG="$(without_module openblas)" \
  ac_cv_lib_openblas_cblas_sgemm=no
expect_missing libopenblas-dev 'cblas.h' ac_cv_header_cblas_h=no
# A pkg-config that fails the version check ends like none at all: PKG_CONFIG empty.
expect_missing pkg-config 'pkg-config (0.9.0 or later)' PKG_CONFIG=/bin/false

done_testing
