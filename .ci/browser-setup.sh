#!/usr/bin/env bash
# Prepare a Debian machine (as root) for vcli's browser tests (tests/harness/browser.py drives
# Debian's chromium through the DevTools protocol). Idempotent: installs `chromium` only when
# `chromium --version` does not answer. `unshare` (util-linux, essential in Debian) is checked,
# not installed: the harness runs the browser in PID and network namespaces with it.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

START=$SECONDS
log() { echo "[browser-setup +$((SECONDS - START))s] $*"; }
die() { echo "[browser-setup] ERROR: $*" >&2; exit 1; }

# The package's wrapper script may print shell warnings on stderr; only the version line counts.
chromium_version() { timeout 60 chromium --version 2>/dev/null; }

if version=$(chromium_version); then
    log "chromium present: $version"
else
    [ "$(id -u)" = 0 ] || die "chromium is missing; run me as root to apt-get install it"
    log "apt-get update"
    timeout 300 apt-get update -q
    # With its recommends (fonts-liberation among them), as on the machines the tests were written on.
    log "apt-get install -y chromium"
    timeout 900 apt-get install -y -q chromium
    version=$(chromium_version) || die "chromium was installed but \`chromium --version\` fails"
    log "chromium installed: $version"
fi
command -v unshare >/dev/null || die "\`unshare\` (util-linux) is missing"
log "done in $((SECONDS - START)) s"
