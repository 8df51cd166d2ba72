#!/usr/bin/env bash
# Prepare a Debian machine (as root) for vcli's Docker tests. Idempotent: run it as often as
# you like; each step is skipped when its result is already there.
#
#   1. apt packages: docker.io mmdebstrap iproute2 ca-certificates (apt-get update first)
#   2. one dockerd with the overlay2 storage driver, unless `docker info` already answers
#      (log: $VCLI_DOCKERD_LOG, default /var/log/vcli-dockerd.log)
#   3. vcli-base:bookworm  = mmdebstrap --variant=apt --include=python3,python3-venv bookworm
#                            | docker import.  The apt mirror is taken from THIS machine's apt
#                            configuration at run time (`apt-get indextargets`), so a CI mirror
#                            or snapshot configured on the host is used; no host name is
#                            written here.
#   4. vcli-trainer:latest = docker build of the repository's Dockerfile FROM vcli-base,
#                            rebuilt when Dockerfile, .dockerignore or trainer/ change (label
#                            vcli.source-hash). The host's CA bundle is put at
#                            .build-extra/ca.crt for the build (pip behind a TLS-intercepting
#                            proxy) and removed afterwards.
#
# Every step is bounded by `timeout`. Environment knobs:
#   VCLI_BASE_IMAGE (vcli-base:bookworm), VCLI_TRAINER_IMAGE (vcli-trainer:latest),
#   VCLI_DOCKERD_LOG, VCLI_SKIP_TRAINER=1 (only steps 1-3), VCLI_FORCE_REBUILD=1.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BASE_IMAGE=${VCLI_BASE_IMAGE:-vcli-base:bookworm}
TRAINER_IMAGE=${VCLI_TRAINER_IMAGE:-vcli-trainer:latest}
DOCKERD_LOG=${VCLI_DOCKERD_LOG:-/var/log/vcli-dockerd.log}
SUITE=bookworm
# The legacy builder: no buildx/BuildKit is assumed (Debian's docker.io has none).
export DOCKER_BUILDKIT=0
export DEBIAN_FRONTEND=noninteractive

START=$SECONDS
log() { echo "[docker-setup +$((SECONDS - START))s] $*"; }
die() { echo "[docker-setup] ERROR: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run me as root (apt-get, dockerd and mmdebstrap need it)"

# ----------------------------------------------------------------------------- 1. packages
missing=()
for pkg in docker.io mmdebstrap iproute2 ca-certificates; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$pkg")
    fi
done
if [ ${#missing[@]} -gt 0 ]; then
    log "apt-get update"
    timeout 300 apt-get update -q
    log "apt-get install -y ${missing[*]}"
    timeout 900 apt-get install -y -q --no-install-recommends "${missing[@]}"
else
    log "packages present: docker.io mmdebstrap iproute2 ca-certificates"
fi

# ----------------------------------------------------------------------------- 2. dockerd
docker_up() { timeout 10 docker info >/dev/null 2>&1; }
if docker_up; then
    log "docker engine already answers ($(docker info -f '{{.ServerVersion}}, storage {{.Driver}}'))"
else
    if pgrep -x dockerd >/dev/null; then
        log "a dockerd process exists but does not answer yet: waiting for it (not starting another)"
    else
        log "starting dockerd --storage-driver=overlay2 in the background (log: $DOCKERD_LOG)"
        # setsid + nohup: the daemon outlives this script. Never --bridge=none (it deletes docker0).
        setsid nohup dockerd --storage-driver=overlay2 >>"$DOCKERD_LOG" 2>&1 </dev/null &
    fi
    for _ in $(seq 1 60); do
        docker_up && break
        sleep 1
    done
    if ! docker_up; then
        echo "--- last lines of $DOCKERD_LOG:" >&2
        tail -n 30 "$DOCKERD_LOG" >&2 || true
        die "the docker engine did not answer within 60 s"
    fi
    log "docker engine up ($(docker info -f '{{.ServerVersion}}, storage {{.Driver}}'))"
fi
driver=$(docker info -f '{{.Driver}}')
[ "$driver" = overlay2 ] || log "WARNING: storage driver is '$driver', not overlay2: containers will be slow"

# ----------------------------------------------------------------------------- 3. base image
apt_sources() {
    # One-line sources for $SUITE from the host's configured Debian archive (main) and
    # security archive, as apt itself resolved them. Prints nothing if apt has no lists.
    apt-get indextargets --format '$(TARGET_OF) $(ORIGIN) $(REPO_URI) $(RELEASE)' 'Created-By: Packages' 2>/dev/null |
        awk -v s="$SUITE" '
            $1 == "deb" && $2 == "Debian" {
                if ($4 ~ /-security$/) { if (!sec) sec = $3 }
                else if ($4 !~ /-(updates|backports|proposed-updates)$/) { if (!main) main = $3 }
            }
            END {
                if (main) { print "deb " main " " s " main"; print "deb " main " " s "-updates main" }
                if (sec) print "deb " sec " " s "-security main"
            }'
}
if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1 && [ -z "${VCLI_FORCE_REBUILD:-}" ]; then
    log "$BASE_IMAGE present"
else
    mapfile -t sources < <(apt_sources)
    if [ ${#sources[@]} -eq 0 ]; then
        log "apt has no package lists yet: apt-get update"
        timeout 300 apt-get update -q
        mapfile -t sources < <(apt_sources)
    fi
    [ ${#sources[@]} -gt 0 ] || die "no Debian archive found in this machine's apt sources (apt-get indextargets)"
    log "mirrors from the host's apt configuration: ${sources[*]}"
    tmp=$(mktemp -d /var/tmp/vcli-rootfs.XXXXXX)
    trap 'rm -rf "$tmp"' EXIT
    log "mmdebstrap --variant=apt --include=python3,python3-venv $SUITE"
    timeout 900 mmdebstrap --quiet --variant=apt --include=python3,python3-venv \
        "$SUITE" "$tmp/rootfs.tar" "${sources[@]}"
    log "docker import -> $BASE_IMAGE ($(du -h "$tmp/rootfs.tar" | cut -f1) rootfs)"
    timeout 300 docker import \
        --change 'ENV LANG=C.UTF-8' \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["/bin/bash"]' \
        "$tmp/rootfs.tar" "$BASE_IMAGE" >/dev/null
    rm -rf "$tmp"
    trap - EXIT
    log "$BASE_IMAGE built"
fi

# ----------------------------------------------------------------------------- 4. trainer image
if [ -n "${VCLI_SKIP_TRAINER:-}" ]; then
    log "VCLI_SKIP_TRAINER set: not building $TRAINER_IMAGE"
    log "done in $((SECONDS - START)) s"
    exit 0
fi
[ -f "$REPO/Dockerfile" ] || die "$REPO/Dockerfile not found: cannot build $TRAINER_IMAGE"
cd "$REPO"
# Content hash of everything the image is built from (+ the base image id).
source_hash=$(
    {
        docker image inspect -f '{{.Id}}' "$BASE_IMAGE"
        find Dockerfile .dockerignore trainer -type f ! -name '*.pyc' ! -path '*/__pycache__/*' -print0 2>/dev/null |
            sort -z | xargs -0 sha256sum
    } | sha256sum | cut -c1-16
)
current=$(docker image inspect -f '{{index .Config.Labels "vcli.source-hash"}}' "$TRAINER_IMAGE" 2>/dev/null || true)
if [ "$current" = "$source_hash" ] && [ -z "${VCLI_FORCE_REBUILD:-}" ]; then
    log "$TRAINER_IMAGE up to date (source hash $source_hash)"
else
    log "building $TRAINER_IMAGE (source hash $source_hash, image has '${current:-none}')"
    old_id=$(docker image inspect -f '{{.Id}}' "$TRAINER_IMAGE" 2>/dev/null || true)
    mkdir -p .build-extra
    ca_copied=
    if [ -f /etc/ssl/certs/ca-certificates.crt ] && [ ! -e .build-extra/ca.crt ]; then
        cp /etc/ssl/certs/ca-certificates.crt .build-extra/ca.crt
        ca_copied=1
        trap 'rm -f "$REPO/.build-extra/ca.crt"' EXIT
        log "host CA bundle copied to .build-extra/ca.crt for the build (removed afterwards)"
    fi
    timeout 1200 docker build --network host --rm --force-rm \
        --build-arg BASE_IMAGE="$BASE_IMAGE" \
        --label vcli.source-hash="$source_hash" \
        -t "$TRAINER_IMAGE" -f Dockerfile .
    if [ -n "$ca_copied" ]; then
        rm -f .build-extra/ca.crt
        trap - EXIT
    fi
    log "$TRAINER_IMAGE built"
    if [ -n "$old_id" ] && [ "$old_id" != "$(docker image inspect -f '{{.Id}}' "$TRAINER_IMAGE")" ]; then
        # The previous build is now untagged: drop it (shared layers stay).
        docker image rm "$old_id" >/dev/null 2>&1 && log "removed the previous $TRAINER_IMAGE (${old_id:7:12})" || true
    fi
fi

for image in "$BASE_IMAGE" "$TRAINER_IMAGE"; do
    log "  $image: $(docker image inspect -f '{{.Id}} {{.Size}}' "$image" | awk '{printf "%s, %.0f MB", substr($1, 8, 12), $2 / 1e6}')"
done
log "done in $((SECONDS - START)) s"
