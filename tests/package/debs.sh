#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The Debian packages as an admin gets them (doc/install.md): packaged twice in
# the same tree, installed into a Debian 12 chroot with Debian's Slurm,
# upgraded, removed and purged, with Slurm asked after every step.
#
#  1. copy the source tree (git's files, or the unpacked tarball) and build
#     the packages with dpkg-buildpackage -b (DEB_BUILD_OPTIONS=nocheck: the
#     suite runs the tests itself); then a second version is packaged in the
#     same tree from the first build's objects (-nc: a changelog entry and a
#     changed conffile, /etc/dtrain/dtrain.json); `debian/rules clean` must
#     then leave every source file in place;
#     the first build's packages go through Debian 12's lintian.
#  2. a Debian 12 chroot (debootstrap, minbase, plus Debian's slurmctld,
#     slurmd, slurm-client, munge and the packages' dependencies) is made in
#     CACHE/bookworm once and reused (made anew when absent or older than
#     DTRAIN_CI_MAX_AGE_DAYS, 7); each run works on a copy of it.
#  3. in the copy, as doc/install.md says: install the packages, copy the
#     slurm.conf settings and a slurm.conf from the shipped example, start
#     munged, slurmctld and slurmd (the node looks like a DGX H100 through
#     HWLOC_XMLFILE), check the health config with dtrain-health --check,
#     then enable the hooks; run a placed job; upgrade to the second version
#     with the admin's edit of dtrain.json (--force-confold); removal with
#     the hooks still set is refused; remove in the documented order and
#     purge; after each step `scontrol ping` and `sinfo` must answer and the
#     node must not be drained.
#
# Needs root, dpkg-buildpackage with the Build-Depends, debootstrap and
# Debian's registry for the first run (later runs use the cache).  What
# cannot run is reported SKIP with the reason.  Every process started in the
# chroot and its /proc mount are gone at exit, passed or failed.
#
#   DTRAIN_CI_CACHE=DIR      the chroot cache (default /var/cache/dtrain-ci)
#   DTRAIN_CI_MIRROR=URL     Debian mirror (default http://deb.debian.org/debian)
#   DTRAIN_TEST_PACKAGES=0   skip this test;  DTRAIN_KEEP=1 keeps the work folder
set -uo pipefail
top=${abs_top_srcdir:?}
here=${abs_builddir:?}
. "$top/tests/tap.sh"

[ "${DTRAIN_TEST_PACKAGES:-1}" != 0 ] || skip_all "DTRAIN_TEST_PACKAGES=0"
[ "${DTRAIN_TEST_CLUSTERS:-1}" != 0 ] || skip_all "DTRAIN_TEST_CLUSTERS=0: no Slurm daemons"
[ "$(id -u)" = 0 ] || skip_all "needs root (chroot, Slurm daemons)"
for t in dpkg-buildpackage dpkg-checkbuilddeps dh fakeroot debootstrap chroot flock; do
  command -v "$t" >/dev/null || skip_all "$t is missing (scripts/install-deps installs it)"
done
deps=$(cd "$top" && dpkg-checkbuilddeps 2>&1) || skip_all "build dependencies missing: ${deps##*: }"

cache=${DTRAIN_CI_CACHE:-/var/cache/dtrain-ci}
mirror=${DTRAIN_CI_MIRROR:-http://deb.debian.org/debian}
max_age=${DTRAIN_CI_MAX_AGE_DAYS:-7}
work=$(mktemp -d "$here/pkg.XXXXXX") || { echo "cannot create a folder in $here" >&2; exit 1; }
root=$work/root
t0=$SECONDS
elapsed() { echo "$((SECONDS - t0)) s"; }

# ------------------------------------------------------------------ cleanup
# chroot_pids DIR: every process whose root is DIR (only ones this test
# started can have it).
chroot_pids() {
  local p r
  for p in /proc/[0-9]*; do
    r=$(readlink "$p/root" 2>/dev/null) || continue
    [ "$r" = "$1" ] && echo "${p#/proc/}"
  done
}
stop_chroot() {
  local d=$1 i pids
  [ -d "$d" ] || return 0
  pids=$(chroot_pids "$d")
  [ -z "$pids" ] || kill $pids 2>/dev/null
  for i in $(seq 50); do
    pids=$(chroot_pids "$d"); [ -n "$pids" ] || break
    sleep 0.2
  done
  [ -z "$pids" ] || kill -9 $pids 2>/dev/null
  for i in $(seq 25); do [ -z "$(chroot_pids "$d")" ] && break; sleep 0.2; done
  if mountpoint -q "$d/sys/fs/cgroup"; then umount -R "$d/sys/fs/cgroup" || umount -R -l "$d/sys/fs/cgroup"; fi
  if mountpoint -q "$d/proc"; then umount "$d/proc" || umount -l "$d/proc"; fi
  return 0
}
cleanup() {
  stop_chroot "$root"
  [ -z "${base_new:-}" ] || { stop_chroot "$base_new"; rm -rf "$base_new"; }
  if [ "${DTRAIN_KEEP:-0}" = 1 ]; then echo "# kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

# in_root CMD...: CMD in the work chroot, bounded, with a plain environment.
in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 HOME=/root timeout 300 "$@"; }
apt_root() { in_root env DEBIAN_FRONTEND=noninteractive apt-get -q -y --no-install-recommends "$@"; }
# debs VERSION-FOLDER: the three packages an admin installs, as chroot paths.
debs() { local f; for f in "$root/tmp/debs/$1"/{slurm-dtrain-plugin,dtrain,libdtrain0}_*.deb; do echo "${f#"$root"}"; done; }

# Skip the remaining N points with a reason, then end.
skip_rest() {
  local reason=$1 i
  for i in $(seq "$2"); do skip_test "$reason"; done
  done_testing
}
# Points after the builds: keep in step with the checks below.
chroot_points=18

# ------------------------------------------------------------------ 1. builds
src=$work/src/dtrain
mkdir -p "$src" "$work/v1" "$work/v2"
if git -C "$top" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  (cd "$top" && git ls-files -z --cached --others --exclude-standard | xargs -0 -r sh -c 'for f; do [ -f "$f" ] && printf "%s\0" "$f"; done' _ |
    tar --null -T - -cf -) | tar -xf - -C "$src"
else
  (cd "$top" && tar --exclude=./_build --exclude='./build*' -cf - .) | tar -xf - -C "$src"
fi
(cd "$src" && find . -type f | sort) >"$work/files.before"
diag "source copy: $(wc -l <"$work/files.before") files"

# build DEST LOG [ARGS]: dpkg-buildpackage -b [ARGS] in $src, the .debs moved to DEST.
build() {
  local dest=$1 log=$2 s=$SECONDS
  shift 2
  (cd "$src" && DEB_BUILD_OPTIONS="nocheck parallel=$(nproc)" dpkg-buildpackage -b -us -uc "$@") >"$log" 2>&1 || {
    tail -20 "$log" | sed 's/^/# /'; return 1; }
  mv "$work/src"/*.deb "$dest"/ && rm -f "$work/src"/*.changes "$work/src"/*.buildinfo
  diag "built $(ls "$dest" | tr '\n' ' ')in $((SECONDS - s)) s"
}
v1=$(dpkg-parsechangelog -l "$src/debian/changelog" -S Version)
v2=$v1+rebuild1
check "first package build ($v1) in a copy of the tree" build "$work/v1" "$work/build1.log"

# lintian (Debian 12's) on the first build's packages: no error, no warning
# (Debian 13's lintian runs in tests/compat/run-debian --suite trixie).
if command -v lintian >/dev/null; then
  if lintian --fail-on error,warning --suppress-tags initial-upload-closes-no-bugs "$work/v1"/*.deb \
      >"$work/lintian.log" 2>&1; then
    pass "lintian (Debian 12) on the packages: no error, no warning"
  else
    grep -E '^[EW]: ' "$work/lintian.log" | head -10 | sed 's/^/#   /'
    fail "lintian (Debian 12) on the packages: $(grep -cE '^[EW]: ' "$work/lintian.log") errors or warnings"
  fi
else
  skip_test "lintian is not installed (scripts/install-deps installs it)"
fi

# The second version: a changelog entry and a changed shipped dtrain.json.
{ printf 'dtrain (%s) unstable; urgency=medium\n\n  * CI rebuild (tests/package/debs.sh).\n\n -- dtrain CI <ci@dtrain.invalid>  %s\n\n' \
    "$v2" "$(date -R)"; cat "$src/debian/changelog"; } >"$work/changelog" && mv "$work/changelog" "$src/debian/changelog"
sed -i 's/"allow_pcie": "user"/"allow_pcie": "no"/' "$src/etc/dtrain.json"
grep -q '"allow_pcie": "no"' "$src/etc/dtrain.json" || diag "could not change etc/dtrain.json for the second build"
# -nc: the packaging steps again on the first build's objects (the upgrade
# test needs a new version and conffile, not another compile: 2 minutes less)
check "second package build ($v2, changed conffile) in the same tree" build "$work/v2" "$work/build2.log" -nc

# debian/rules clean (make distclean in the tree) leaves every source file.
(cd "$src" && debian/rules clean) >"$work/clean.log" 2>&1
(cd "$src" && find . -type f | sort) >"$work/files.after"
missing=$(comm -23 "$work/files.before" "$work/files.after")
if [ -z "$missing" ]; then pass "debian/rules clean keeps every source file"
else fail "debian/rules clean deleted source files"; echo "$missing" | head -10 | sed 's/^/#   /'; fi

debs_ok=1
for v in v1 v2; do ls "$work/$v"/slurm-dtrain-plugin_*.deb "$work/$v"/dtrain_*.deb "$work/$v"/libdtrain0_*.deb >/dev/null 2>&1 || debs_ok=0; done
[ $debs_ok = 1 ] || skip_rest "the packages were not built" $((chroot_points + 1))

# libhwloc-plugins (libxml2's parser for hwloc) is declared where hwloc is used.
depends_hwloc() {
  local d
  for d in "$work/v1"/slurm-dtrain-plugin_*.deb "$work/v1"/dtrain_*.deb; do
    dpkg-deb -f "$d" Depends | grep -qw libhwloc-plugins || { diag "$(basename "$d"): no libhwloc-plugins in Depends"; return 1; }
  done
}
check "slurm-dtrain-plugin and dtrain depend on libhwloc-plugins" depends_hwloc

# ------------------------------------------------------------------ 2. chroot
mkdir -p "$cache" || skip_rest "cannot create $cache" $chroot_points
exec 7>>"$cache/lock"
flock -w 1800 7 || skip_rest "waited 30 min for $cache/lock" $chroot_points
base=$cache/bookworm
# The packages' dependencies other than their own, for the cached chroot.
pkg_deps=$(for d in "$work/v1"/*.deb; do dpkg-deb -f "$d" Depends; done | tr ',' '\n' |
  sed -E 's/\|.*//; s/\(.*//; s/[[:space:]]//g' | grep -vE '^(dtrain|slurm-dtrain-plugin|libdtrain0|libdtrain-dev)?$' | sort -u | tr '\n' ' ')
make_base() {
  base_new=$base.new
  stop_chroot "$base_new"; rm -rf "$base_new"
  debootstrap --variant=minbase bookworm "$base_new" "$mirror" >"$work/debootstrap.log" 2>&1 || {
    tail -3 "$work/debootstrap.log" | sed 's/^/# /'
    why=$(grep -E '^E: ' "$work/debootstrap.log" | tail -1); return 1; }
  cat >"$base_new/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb ${mirror%/debian}/debian-security bookworm-security main
EOF
  # Packages' maintainer scripts must not start daemons in the chroot.
  printf '#!/bin/sh\nexit 101\n' >"$base_new/usr/sbin/policy-rc.d" && chmod 755 "$base_new/usr/sbin/policy-rc.d"
  mount -t proc proc "$base_new/proc" || return 1
  local rc=0
  chroot "$base_new" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
    sh -c "apt-get -q update && apt-get -q -y --no-install-recommends install slurmctld slurmd slurm-client munge $pkg_deps" \
    >"$work/base-apt.log" 2>&1 || { rc=1; tail -5 "$work/base-apt.log" | sed 's/^/# /'; why=$(grep -E '^E: ' "$work/base-apt.log" | tail -1); }
  stop_chroot "$base_new"
  [ $rc = 0 ] || return 1
  date -u +%s >"$base_new/.dtrain-ci-base"
  rm -rf "$base" && mv "$base_new" "$base" && base_new=
}
s=$SECONDS
if [ -f "$base/.dtrain-ci-base" ] && [ $(( $(date -u +%s) - $(cat "$base/.dtrain-ci-base") )) -lt $((max_age * 86400)) ]; then
  how="reused $base"
else
  why=""
  make_base || skip_rest "cannot make a Debian 12 chroot from $mirror (no network?): ${why:-see the lines above}" $chroot_points
  how="made $base"
fi
cp -a "$base" "$root" || skip_rest "cannot copy $base" $chroot_points
exec 7>&-
diag "chroot: $how, copied to the work folder, in $((SECONDS - s)) s"
# slurmd initialises its cgroup plugin even with proctrack/linuxproc and
# task/none: it needs the host's cgroup mounts (a slave copy, so that
# unmounting it never reaches the host's).
mount -t proc proc "$root/proc" || skip_rest "cannot mount /proc in the chroot" $chroot_points
mkdir -p "$root/sys/fs/cgroup"
{ mount --rbind /sys/fs/cgroup "$root/sys/fs/cgroup" && mount --make-rslave "$root/sys/fs/cgroup"; } ||
  skip_rest "cannot bind /sys/fs/cgroup into the chroot" $chroot_points

# ------------------------------------------------------------------ 3. install
mkdir -p "$root/tmp/debs" && cp -a "$work/v1" "$work/v2" "$root/tmp/debs/"
install_v1() { apt_root install $(debs v1) >"$work/install1.log" 2>&1 ||
  { tail -8 "$work/install1.log" | sed 's/^/# /'; return 1; }; }
check "install $v1 in the chroot (apt-get install of the three .debs)" install_v1

# The site's setup, in the order of doc/install.md.
host=$(hostname -s)
read -r ctld_port node_port < <(for i in 1 2; do
  while :; do p=$((20000 + RANDOM % 10000)); awk -v h=":$(printf '%04X' $p)" 'substr($2, length($2) - 4) == h {f=1} END {exit !f}' /proc/net/tcp /proc/net/tcp6 || break; done
  echo $p; done | tr '\n' ' ')
setup_site() {
  local ex=$root/usr/share/dtrain/slurm/slurm.conf.example
  [ -f "$ex" ] && [ -f "$root/usr/share/dtrain/slurm/dtrain.conf" ] || { diag "/usr/share/dtrain/slurm/ lacks a file"; return 1; }
  cp "$root/usr/share/dtrain/slurm/dtrain.conf" "$root/etc/slurm/dtrain.conf"
  sed -e "s/^ClusterName=.*/ClusterName=dtrainci/" -e "s/^SlurmctldHost=.*/SlurmctldHost=$host(127.0.0.1)/" \
      -e "s/^NodeName=.*/NodeName=gpu01 NodeHostname=$host NodeAddr=127.0.0.1 CPUs=16 RealMemory=1000 State=UNKNOWN/" \
      "$ex" >"$root/etc/slurm/slurm.conf"
  cat >>"$root/etc/slurm/slurm.conf" <<EOF
# ---- the test's own: free ports, no cgroups in the chroot, 16 CPUs declared
SlurmctldPort=$ctld_port
SlurmdPort=$node_port
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SlurmdParameters=config_overrides
EOF
  mkdir -p "$root/var/lib/dtrain-ci" "$root/run/munge"
  cp "$top/tests/fixtures/topology/dgx-h100.xml" "$root/var/lib/dtrain-ci/"
  in_root chown munge:munge /run/munge
}
check "site set up from /usr/share/dtrain/slurm/ (dtrain.conf copied, slurm.conf from the example)" setup_site

# slurm_answers: the controller and the node answer, and the node is not drained.
node_state() { in_root timeout 20 sinfo -h -n gpu01 -o %T 2>/dev/null; }
slurm_answers() {
  local i st=""
  in_root timeout 20 scontrol ping >"$work/ping" 2>&1 || { diag "scontrol ping: $(tail -1 "$work/ping")"; return 1; }
  for i in $(seq 60); do
    st=$(node_state) || { diag "sinfo failed"; return 1; }
    case $st in idle|mixed|allocated) return 0 ;; *drain*) break ;; esac
    sleep 0.5
  done
  diag "node gpu01 is '$st': $(in_root timeout 20 scontrol show node gpu01 | grep -o 'Reason=.*')"
  return 1
}
start_slurm() {
  in_root runuser -u munge -- munged || return 1
  in_root slurmctld || { diag "slurmctld: $(tail -3 "$root/var/log/slurm/slurmctld.log")"; return 1; }
  in_root env HWLOC_XMLFILE=/var/lib/dtrain-ci/dgx-h100.xml slurmd -N gpu01 ||
    { diag "slurmd: $(tail -3 "$root/var/log/slurm/slurmd.log")"; return 1; }
  slurm_answers
}
check "munged, slurmctld and slurmd start with the site's slurm.conf; Slurm answers" start_slurm

# Health config first, checked, then the hooks (doc/install.md).
health_then_hooks() {
  mkdir -p "$root/etc/dtrain"
  cat >"$root/etc/dtrain/health.json" <<'EOF'
{
  "topology": "/var/lib/dtrain-ci/dgx-h100.xml",
  "gpus": {"count": 8, "model": "H100"},
  "checks": {
    "nvml": {"enabled": false},
    "nvlink": {"min_largest_island": 8},
    "checkpoint_fs": {"enabled": false},
    "shm": {"path": "/tmp", "min_free": "1MiB"},
    "infiniband": {"enabled": false}
  }
}
EOF
  in_root dtrain-health --check -v --node gpu01 >"$work/health.out" 2>&1 || { sed 's/^/# /' "$work/health.out"; return 1; }
  sed -i -E 's/^#(Prolog|Epilog|HealthCheckProgram|HealthCheckInterval)=/\1=/' "$root/etc/slurm/slurm.conf"
  grep -q '^Prolog=/usr/sbin/dtrain-prolog' "$root/etc/slurm/slurm.conf" || { diag "no Prolog line to enable"; return 1; }
  in_root scontrol reconfigure || return 1
  slurm_answers
}
check "dtrain-health --check passes, then the hooks are enabled; the node stays in service" health_then_hooks

# placed_job: two tasks placed by the plugin on two GPUs, through the prolog.
placed_job() {
  local out
  out=$(in_root timeout 60 srun -N1 -n2 --dtrain-tp=2 sh -c 'echo "$DTRAIN_PLACED_BY $DTRAIN_GPU"' 2>"$work/srun.err") ||
    { diag "srun: $(tail -2 "$work/srun.err")"; return 1; }
  [ "$(echo "$out" | grep -c '^spank ')" = 2 ] && [ "$(echo "$out" | awk '{print $2}' | sort -u | wc -l)" = 2 ] ||
    { diag "tasks said: $(echo "$out" | tr '\n' ';')"; return 1; }
  slurm_answers
}
check "a placed job runs (srun -n2 --dtrain-tp=2: DTRAIN_PLACED_BY=spank, two GPUs), the prolog passes" placed_job
# The installed trainer: dtrain-launch starts /usr/libexec/dtrain/dtrain-rank.
trained_job() {
  in_root sh -c 'printf "%s\n" "a few words to train on, again and again" >/tmp/t.txt && dtrain-tokenize /tmp/t.txt /tmp/t.bin' \
    >"$work/train.out" 2>&1 &&
    in_root timeout 120 srun -N1 -n2 --mpi=pmi2 --dtrain-tp=2 dtrain-launch --data /tmp/t.bin --layers 1 --channels 16 \
      --heads 2 --vocab-size 256 --padded-vocab-size 256 --max-seq-len 8 --seq 8 --batch 2 --steps 2 \
      >>"$work/train.out" 2>&1 || { tail -4 "$work/train.out" | sed 's/^/# /'; return 1; }
  grep -Eq '^step +1/2 ' "$work/train.out" || { tail -4 "$work/train.out" | sed 's/^/# /'; return 1; }
}
check "the installed dtrain-launch trains 2 steps at T=2 (its trainer, dtrain-rank, from /usr/libexec/dtrain)" trained_job
# The hooks are live: a failing check in the prolog drains the node with
# dtrain's reason; fixed and resumed, the node serves again.
prolog_drains() {
  local cfg=$root/etc/dtrain/health.json i reason=""
  cp "$cfg" "$work/health.good" && sed -i 's/"count": 8/"count": 9/' "$cfg"
  in_root timeout 60 srun -N1 -n1 true >/dev/null 2>&1 && { diag "the job ran although the prolog must fail"; cp "$work/health.good" "$cfg"; return 1; }
  for i in $(seq 60); do
    reason=$(in_root timeout 20 sinfo -h -R -n gpu01 -o %E 2>/dev/null)
    case $reason in dtrain:*) break ;; esac
    sleep 0.5
  done
  # The epilog of that job runs with the same config: restore it only once
  # the job has left the node (COMPLETING is over), then resume.
  for i in $(seq 120); do
    [ -z "$(in_root timeout 20 squeue -h -o %i 2>/dev/null)" ] && break
    sleep 0.5
  done
  cp "$work/health.good" "$cfg"
  case $reason in dtrain:*gpu_count*) diag "drained: $reason" ;; *) diag "drain reason: '$reason'"; return 1 ;; esac
  in_root timeout 20 scontrol update NodeName=gpu01 State=RESUME || return 1
  slurm_answers
}
check "a failing prolog check drains the node with a dtrain: reason; resumed after the fix" prolog_drains
sbatch_knows() { local help; help=$(in_root sbatch --help 2>&1) && grep -q -- --dtrain-tp <<<"$help"; }
check "sbatch knows --dtrain-tp" sbatch_knows

# ------------------------------------------------------------------ upgrade
upgrade() {
  sed -i 's/"max_tp": 0/"max_tp": 4/' "$root/etc/dtrain/dtrain.json"
  grep -q '"max_tp": 4' "$root/etc/dtrain/dtrain.json" || { diag "could not edit dtrain.json"; return 1; }
  apt_root -o Dpkg::Options::=--force-confold install $(debs v2) </dev/null >"$work/upgrade.log" 2>&1 || { tail -8 "$work/upgrade.log" | sed 's/^/# /'; return 1; }
  [ "$(in_root dpkg-query -W -f='${Version}' slurm-dtrain-plugin)" = "$v2" ] || { diag "slurm-dtrain-plugin is not $v2"; return 1; }
}
check "upgrade to $v2 with an edited conffile, non-interactive (--force-confold)" upgrade
check "the admin's dtrain.json is kept, the new one is dtrain.json.dpkg-dist" sh -c \
  "grep -q '\"max_tp\": 4' '$root/etc/dtrain/dtrain.json' && grep -q '\"allow_pcie\": \"no\"' '$root/etc/dtrain/dtrain.json.dpkg-dist'"
check "after the upgrade Slurm answers and a placed job runs" placed_job
refused_tp() { ! in_root timeout 60 sbatch --dtrain-tp=8 --wrap true >"$work/tp8" 2>&1 && grep -qi 'max_tp\|larger\|tp' "$work/tp8"; }
check "the kept setting is in force: sbatch --dtrain-tp=8 refused (max_tp=4)" refused_tp

# ------------------------------------------------------------------ removal
installed() { in_root dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
refused_remove() {
  if apt_root remove dtrain >"$work/remove-refused.log" 2>&1; then diag "apt-get remove dtrain succeeded"; return 1; fi
  grep -q 'refusing to remove dtrain' "$work/remove-refused.log" || { tail -5 "$work/remove-refused.log" | sed 's/^/# /'; return 1; }
  installed dtrain && slurm_answers
}
check "removing dtrain while Prolog= names dtrain-prolog is refused; Slurm still answers" refused_remove

remove_hooks_then_dtrain() {
  sed -i -E 's/^(Prolog|Epilog|HealthCheckProgram|HealthCheckInterval)=/#\1=/' "$root/etc/slurm/slurm.conf"
  in_root scontrol reconfigure || return 1
  apt_root purge dtrain >"$work/purge-dtrain.log" 2>&1 || { tail -5 "$work/purge-dtrain.log" | sed 's/^/# /'; return 1; }
  ! installed dtrain && slurm_answers
}
check "hooks removed and reconfigured, then dtrain purged; Slurm answers" remove_hooks_then_dtrain
job_runs() { in_root timeout 60 srun -N1 -n1 true && slurm_answers; }
check "a job runs after dtrain's removal (the node is not drained)" job_runs

remove_plugin() {
  apt_root remove slurm-dtrain-plugin >"$work/remove-plugin.log" 2>&1 || { tail -5 "$work/remove-plugin.log" | sed 's/^/# /'; return 1; }
  [ ! -e "$root/etc/slurm/plugstack.conf.d/dtrain.conf" ] || { diag "the plugstack line is still there"; return 1; }
  job_runs
}
check "remove slurm-dtrain-plugin: srun still works (plugstack line moved aside); Slurm answers" remove_plugin

purge_all() {
  apt_root purge slurm-dtrain-plugin libdtrain0 >"$work/purge.log" 2>&1 || { tail -5 "$work/purge.log" | sed 's/^/# /'; return 1; }
  [ -f "$root/etc/slurm/dtrain.conf" ] || { diag "/etc/slurm/dtrain.conf is gone"; return 1; }
  in_root timeout 20 scontrol reconfigure || return 1
  local conf; conf=$(in_root timeout 20 scontrol show config) || return 1
  grep -q 'RequeueExit *= *75' <<<"$conf" || { diag "RequeueExit=75 lost"; return 1; }
  job_runs
}
check "purge: the Included /etc/slurm/dtrain.conf stays, Slurm reconfigures, answers and runs jobs" purge_all
nothing_left() {
  local left
  left=$(in_root dpkg-query -W -f='${Package} ${Status}\n' 2>/dev/null | grep -E '^(dtrain|slurm-dtrain-plugin|libdtrain0) ' | grep -v 'not-installed')
  [ -z "$left" ] || { diag "still known to dpkg: $left"; return 1; }
  ls "$root"/etc/slurm/plugstack.conf.d/dtrain.conf* >/dev/null 2>&1 && { diag "plugstack line left"; return 1; }
  return 0
}
check "nothing of the packages is left (dpkg, plugstack.conf.d)" nothing_left
diag "whole test: $(elapsed)"
done_testing
