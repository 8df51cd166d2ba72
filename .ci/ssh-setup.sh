#!/usr/bin/env bash
# Prepare a Debian machine (as root) for vcli's SSH tests (tests/test_ssh.py, bench/bench_ssh.py).
# Idempotent: every step is skipped when its result is already there.
#
#   1. apt packages: openssh-server openssh-client iproute2 procps (apt-get update first, only
#      if something is missing). The package's own sshd service is NOT started by the install
#      (a temporary policy-rc.d denies it): the tests run their own throw-away sshd per network
#      namespace and never touch the system sshd, its config or port 22.
#   2. /run/sshd, sshd's compiled-in privilege separation directory.
#   3. a smoke test: create and delete a network namespace with a veth pair (the kernel and
#      iproute2 support what tests/harness/netns.py does), and `sshd -t` of a minimal config.
#
# Every step is bounded by `timeout`.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

START=$SECONDS
log() { echo "[ssh-setup +$((SECONDS - START))s] $*"; }
die() { echo "[ssh-setup] ERROR: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run me as root (apt-get, network namespaces and sshd need it)"

# ----------------------------------------------------------------------------- 1. packages
. "$(dirname "$0")/apt-install.sh"
apt_install_missing openssh-server openssh-client iproute2 procps

# ----------------------------------------------------------------------------- 2. /run/sshd
mkdir -p /run/sshd
chmod 755 /run/sshd

# ----------------------------------------------------------------------------- 3. smoke test
sfx=$(head -c 3 /dev/urandom | od -An -tx1 | tr -d ' \n')
ns="vcli-setup-$sfx"
cleanup() { ip netns del "$ns" 2>/dev/null || true; }
trap cleanup EXIT
timeout 20 ip netns add "$ns"
timeout 20 ip link add "eth0" netns "$ns" type veth peer name "p$sfx" netns "$ns"
timeout 20 ip -n "$ns" link set lo up
cleanup
trap - EXIT
ip netns list | grep -q "$ns" && die "could not delete the smoke-test namespace $ns"
log "network namespaces and veth pairs work"

tmp=$(mktemp -d)
ssh-keygen -q -t ed25519 -N '' -f "$tmp/key" >/dev/null
printf 'ListenAddress 127.0.0.1\nHostKey %s\nUsePAM no\n' "$tmp/key" >"$tmp/cfg"
timeout 20 /usr/sbin/sshd -t -f "$tmp/cfg" || die "sshd -t failed"
rm -rf "$tmp"
log "sshd: $(/usr/sbin/sshd -V 2>&1 | head -n 1 || true)"

for py in "${PYTHON:-}" .venv/bin/python python3; do
    [ -n "$py" ] && command -v "$py" >/dev/null 2>&1 || continue
    if "$py" -c 'import paramiko' 2>/dev/null; then
        log "paramiko $("$py" -c 'import paramiko; print(paramiko.__version__)') in $py"
    else
        log "NOTE: paramiko is not importable from $py: pip install 'vcli[ssh]' (the SSH tests skip without it)"
    fi
    break
done
log "done"
