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

. "$(dirname "$0")/apt-install.sh"
apt_install_missing slurmctld slurmd slurm-client munge iproute2 util-linux

log "slurmctld: $(timeout 20 slurmctld -V 2>&1 | head -n 1)"
log "munged: $(timeout 20 munged --version 2>&1 | head -n 1)"
log "done"
