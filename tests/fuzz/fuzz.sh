#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The suite's short fuzzing pass: every harness for DTRAIN_FUZZ_SECONDS.
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/run-fuzz.sh" "${DTRAIN_FUZZ_SECONDS:-20}"
