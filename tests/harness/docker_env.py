"""The Docker engine and images for tests. No mocks and no skips: if the engine or an image
cannot be had, the test FAILS with a message that says what to run.

    client = ensure_docker()                       # engine + vcli-base:bookworm
    client = ensure_docker(images=(TRAINER_IMAGE,)) # also the trainer image

When the engine does not answer or an image is missing and we are root, `.ci/docker-setup.sh`
is run once (it starts dockerd and builds the images; VCLI_TEST_NO_SETUP=1 disables this).
"""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path
from typing import Any, Iterable

import pytest

REPO = Path(__file__).resolve().parents[2]
SETUP_SCRIPT = REPO / ".ci" / "docker-setup.sh"

#: Debian bookworm + python3 + python3-venv, from mmdebstrap (no pip, no registry).
BASE_IMAGE = "vcli-base:bookworm"
#: The repository's Dockerfile built FROM BASE_IMAGE (TensorFlow, the example trainer).
TRAINER_IMAGE = "vcli-trainer:latest"
#: BASE_IMAGE + a venv with pip at /opt/venv on PATH: a small executor image for autopackaging.
PYBASE_IMAGE = "vcli-pybase:bookworm"

_PYBASE_DOCKERFILE = f"""FROM {BASE_IMAGE}
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
"""

_lock = threading.Lock()
_setup_ran = False


def _connect() -> Any:
    import docker

    client = docker.from_env(version="auto", timeout=120)
    client.ping()
    return client


def _run_setup(with_trainer: bool) -> str:
    global _setup_ran
    if _setup_ran or os.environ.get("VCLI_TEST_NO_SETUP") or os.geteuid() != 0 or not SETUP_SCRIPT.exists():
        return ""
    _setup_ran = True
    env = dict(os.environ)
    if not with_trainer:
        env["VCLI_SKIP_TRAINER"] = "1"
    proc = subprocess.run(
        ["bash", str(SETUP_SCRIPT)], env=env, capture_output=True, text=True, timeout=1500
    )
    tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
    return f"\n{SETUP_SCRIPT} exited {proc.returncode}:\n{tail}" if proc.returncode else ""


def _missing(client: Any, images: Iterable[str]) -> list[str]:
    import docker

    out = []
    for image in images:
        try:
            client.images.get(image)
        except docker.errors.ImageNotFound:
            out.append(image)
    return out


def ensure_docker(images: Iterable[str] = (BASE_IMAGE,)) -> Any:
    """A connected `docker.DockerClient` with `images` present, or pytest.fail (never skip)."""
    try:
        import docker  # noqa: F401
    except ImportError:
        pytest.fail("the Docker SDK is not installed: pip install 'docker>=7' (vcli[docker])", pytrace=False)
    images = tuple(images)
    with _lock:
        note = ""
        try:
            client = _connect()
        except Exception as first:
            note = _run_setup(with_trainer=TRAINER_IMAGE in images)
            try:
                client = _connect()
            except Exception as e:
                host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
                pytest.fail(
                    f"Docker engine not reachable at {host} ({first.__class__.__name__}: {e}). "
                    f"Run `sudo {SETUP_SCRIPT.relative_to(REPO)}` (starts dockerd, builds the test images).{note}",
                    pytrace=False,
                )
        wanted = [i for i in images if i != PYBASE_IMAGE]
        if _missing(client, wanted):
            note = _run_setup(with_trainer=TRAINER_IMAGE in images)
            missing = _missing(client, wanted)
            if missing:
                pytest.fail(
                    f"Docker image(s) {', '.join(missing)} missing: run `sudo {SETUP_SCRIPT.relative_to(REPO)}`.{note}",
                    pytrace=False,
                )
        if PYBASE_IMAGE in images and _missing(client, [PYBASE_IMAGE]):
            _build_pybase(client)
        return client


def _build_pybase(client: Any) -> None:
    import io

    if _missing(client, [BASE_IMAGE]):
        pytest.fail(f"{BASE_IMAGE} missing: run `sudo {SETUP_SCRIPT.relative_to(REPO)}`", pytrace=False)
    log = []
    for chunk in client.api.build(
        fileobj=io.BytesIO(_PYBASE_DOCKERFILE.encode()), tag=PYBASE_IMAGE, rm=True, forcerm=True, decode=True
    ):
        log.append(str(chunk.get("stream") or chunk.get("error") or ""))
        if "error" in chunk:
            pytest.fail(f"building {PYBASE_IMAGE} failed: {chunk['error']}\n{''.join(log[-20:])}", pytrace=False)


def job_containers(client: Any, job_id: str) -> list[Any]:
    """Every container (running or not) labelled vcli.job=<job_id>."""
    return client.containers.list(all=True, filters={"label": f"vcli.job={job_id}"})


def remove_job_containers(client: Any, job_id: str) -> None:
    for container in job_containers(client, job_id):
        try:
            container.remove(force=True)
        except Exception:  # already gone
            pass
