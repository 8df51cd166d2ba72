#!/usr/bin/env bash
# Prepare a Debian machine (as root) for vcli's Slurm tests (tests/test_slurm.py, the contract
# suite's slurm cases, bench/bench_slurm.py). Idempotent: every step is skipped when its result
# is already there.
#
#   1. apt packages: slurmctld slurmd slurm-client munge iproute2 util-linux (apt-get update
#      first, only if something is missing). The packages' own services are NOT started by the
#      install (a temporary policy-rc.d denies them): the tests start munged, slurmctld and
#      slurmd themselves, with their own configuration, key, ports and state under a temporary
#      directory (tests/harness/slurm_cluster.py), and stop them afterwards. /etc/slurm and
#      /etc/munge are never written.
#   2. a smoke check: the daemons' binaries run (`slurmctld -V`, `munged --version`).
#
# Every step is bounded by `timeout`.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

START=$SECONDS
log() { echo "[slurm-setup +$((SECONDS - START))s] $*"; }
die() { echo "[slurm-setup] ERROR: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run me as root (apt-get, and the test daemons run as root)"

missing=()
for pkg in slurmctld slurmd slurm-client munge iproute2 util-linux; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$pkg")
    fi
done
if [ ${#missing[@]} -gt 0 ]; then
    log "apt-get update"
    timeout 300 apt-get update -q
    policy=/usr/sbin/policy-rc.d
    made_policy=""
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy"
        chmod 755 "$policy"
        made_policy=1
    fi
    log "apt-get install -y ${missing[*]} (service start suppressed)"
    rc=0
    timeout 900 apt-get install -y -q --no-install-recommends "${missing[@]}" || rc=$?
    [ -n "$made_policy" ] && rm -f "$policy"
    [ "$rc" = 0 ] || die "apt-get install failed ($rc)"
else
    log "packages present: slurmctld slurmd slurm-client munge"
fi

log "slurmctld: $(timeout 20 slurmctld -V 2>&1 | head -n 1)"
log "munged: $(timeout 20 munged --version 2>&1 | head -n 1)"
log "done"
