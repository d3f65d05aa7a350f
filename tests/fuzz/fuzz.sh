#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The suite's short fuzzing pass: every harness, repeatable (seed 1,
# DTRAIN_FUZZ_RUNS executions each, at most DTRAIN_FUZZ_SECONDS); exploring
# runs with random seeds are `tests/fuzz/run-fuzz.sh SECONDS`.
here=$(cd "$(dirname "$0")" && pwd)
DTRAIN_FUZZ_SEED=${DTRAIN_FUZZ_SEED:-1} exec "$here/run-fuzz.sh" "${DTRAIN_FUZZ_SECONDS:-20}"
