#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-or-later
# Regenerate configure and Makefile.in from configure.ac and Makefile.am.
set -e
cd "$(dirname "$0")"
mkdir -p build-aux m4
autoreconf --install --force --warnings=all
# The TAP driver for the unit tests (automake ships it, autoreconf does not copy it).
for d in /usr/share/automake-*; do
  [ -f "$d/tap-driver.sh" ] && cp -f "$d/tap-driver.sh" build-aux/ && break
done
test -f build-aux/tap-driver.sh || { echo "autogen.sh: automake's tap-driver.sh not found: install automake" >&2; exit 1; }
