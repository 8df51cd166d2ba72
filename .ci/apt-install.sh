# Sourced by the .ci setup scripts (bash; needs log and die defined, and root):
#   apt_install_missing PKG...
# installs those of PKG that dpkg does not list as installed (apt-get update first, only if
# one is missing), with the packages' own services NOT started by the install (a temporary
# policy-rc.d denies them: the tests start their own daemons, with their own configuration).
# Every apt-get is bounded by `timeout`.

apt_install_missing() {
    local missing=() pkg
    for pkg in "$@"; do
        if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
            missing+=("$pkg")
        fi
    done
    if [ ${#missing[@]} -eq 0 ]; then
        log "packages present: $*"
        return 0
    fi
    log "apt-get update"
    timeout 300 apt-get update -q
    local policy=/usr/sbin/policy-rc.d made_policy="" rc=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy"
        chmod 755 "$policy"
        made_policy=1
    fi
    log "apt-get install -y ${missing[*]} (service start suppressed)"
    DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -q --no-install-recommends "${missing[@]}" || rc=$?
    if [ -n "$made_policy" ]; then rm -f "$policy"; fi
    [ "$rc" = 0 ] || die "apt-get install failed ($rc)"
}
