# SPDX-License-Identifier: GPL-2.0-or-later
# A minimal TAP producer for dtrain's shell tests; source it.
#   ok COND_STATUS "description"   -> use: check "desc" cmd args...
#   check "desc" CMD...            runs CMD, one test point from its status
#   pass "desc" / fail "desc"      one test point
#   skip_test "reason"             one skipped test point (never a pass)
#   skip_all "reason"              the whole file is skipped (exit 0 with 1..0 # SKIP)
#   done_testing                   prints the plan, exits 0 when all passed
TAP_N=0
TAP_FAILED=0
pass() { TAP_N=$((TAP_N + 1)); echo "ok $TAP_N - $*"; }
fail() { TAP_N=$((TAP_N + 1)); TAP_FAILED=$((TAP_FAILED + 1)); echo "not ok $TAP_N - $*"; }
check() {
    local desc=$1; shift
    if "$@"; then pass "$desc"; else fail "$desc"; fi
}
diag() { printf '# %s\n' "$*"; }
skip_test() { TAP_N=$((TAP_N + 1)); echo "ok $TAP_N # SKIP $*"; }
skip_all() { echo "1..0 # SKIP $*"; exit 0; }
done_testing() { echo "1..$TAP_N"; [ "$TAP_FAILED" -eq 0 ]; exit $?; }
