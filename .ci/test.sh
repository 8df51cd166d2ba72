#!/usr/bin/env bash
# Install everything vcli's tests need, then run the whole test suite.
#
#   bash .ci/test.sh [pytest args...]
#
# Installs (idempotent): Debian packages (docker.io, openssh-server, mmdebstrap, iproute2),
# a running dockerd with the test images (.ci/docker-setup.sh), sshd prerequisites
# (.ci/ssh-setup.sh), Debian's chromium for the browser tests (.ci/browser-setup.sh), Slurm's
# daemons and clients and munge for the slurm tests (.ci/slurm-setup.sh; the tests start them), and a
# virtualenv .venv with vcli[all]. Needs root for apt, dockerd and the browser's namespaces.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
log() { echo "[ci +$(( $(date +%s) - start ))s] $*"; }

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    log "creating .venv with $($PY --version)"
    $PY -m venv .venv
fi
log "installing vcli[all] into .venv"
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[all]'

# Bytecode for the repository's modules: where PYTHONDONTWRITEBYTECODE is set (this machine
# sets it), nothing writes it, and every vcli process a test starts compiled every module again
# (`vcli --help` 0.22 s against 0.13 s with it). Python reads it whatever the variable says.
log "compiling vcli, tests, trainer and bench to bytecode"
PYTHONDONTWRITEBYTECODE= .venv/bin/python -m compileall -q vcli tests trainer bench > /dev/null

# Vertex's own protos, read (not imported) by tests/test_vertex_protos.py: the wheel only.
if ! ls .ci/cache/google_cloud_aiplatform-2.7.0-*.whl >/dev/null 2>&1; then
    log "downloading google-cloud-aiplatform 2.7.0's wheel into .ci/cache"
    .venv/bin/python -m pip download -q --disable-pip-version-check --no-deps -d .ci/cache 'google-cloud-aiplatform==2.7.0'
fi

if [ -f .ci/ssh-setup.sh ]; then log "ssh setup"; bash .ci/ssh-setup.sh; fi
if [ -f .ci/docker-setup.sh ]; then log "docker setup"; PATH="$PWD/.venv/bin:$PATH" bash .ci/docker-setup.sh; fi
if [ -f .ci/browser-setup.sh ]; then log "browser setup"; bash .ci/browser-setup.sh; fi
if [ -f .ci/slurm-setup.sh ]; then log "slurm setup"; bash .ci/slurm-setup.sh; fi

# Files tests keep for people to look at (the study report's screenshot): .ci/artifacts/.
export VCLI_ARTIFACTS_DIR=${VCLI_ARTIFACTS_DIR:-$PWD/.ci/artifacts}
mkdir -p "$VCLI_ARTIFACTS_DIR"

log "ruff check (configuration: ruff.toml)"
.venv/bin/python -m ruff check vcli tests bench trainer docs

log "mypy (the packages listed under [tool.mypy] in pyproject.toml)"
.venv/bin/python -m mypy

log "running tests"
set +e
.venv/bin/python -m pytest -q -p no:cacheprovider --durations=0 --durations-min=8 "$@"
rc=$?
set -e
log "pytest exit code $rc"
exit $rc
