"""Shared pytest fixtures for the vcli test suite.

- `vcli_home`: a private, empty VCLI_HOME and VCLI_CONFIG_DIR (tmp dirs) for the test.
- `run_vcli`: runs the real CLI (`python -m vcli ...`) in a subprocess with that home and
  returns the CompletedProcess (text mode, stdout and stderr captured, never raises on a
  non-zero exit).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

#: Outer-environment variables that would change how vcli behaves in a test.
_SCRUB = ("VCLI_EXECUTOR", "VCLI_PYTHON", "TF_CONFIG", "CLUSTER_SPEC", "CLOUD_ML_TRIAL_ID")


@pytest.fixture
def vcli_home(tmp_path, monkeypatch):
    """An empty vcli home and config dir; returns the home Path (config dir is its sibling)."""
    home = tmp_path / "vcli-home"
    conf = tmp_path / "vcli-config"
    home.mkdir()
    conf.mkdir()
    monkeypatch.setenv("VCLI_HOME", str(home))
    monkeypatch.setenv("VCLI_CONFIG_DIR", str(conf))
    for name in _SCRUB:
        monkeypatch.delenv(name, raising=False)
    return home


@pytest.fixture
def run_vcli(vcli_home):
    """`run_vcli(*args, input=None, env=None, timeout=60)` -> subprocess.CompletedProcess."""

    def run(*args: str, input: str | None = None, env: dict[str, str] | None = None, timeout: float = 60):
        full_env = dict(os.environ)  # already holds VCLI_HOME / VCLI_CONFIG_DIR (monkeypatched)
        full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), full_env.get("PYTHONPATH")]))
        if env:
            full_env.update(env)
        return subprocess.run(
            [sys.executable, "-m", "vcli", *args],
            input=input,
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=None if input is not None else subprocess.DEVNULL,
        )

    return run


def _processes_under(root: str) -> list[int]:
    """Live processes (not this one) whose VCLI_HOME lies under `root`: everything a test's vcli
    runs started (controllers, supervisors, trainers) carries its home in the environment."""
    found = []
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X"):
                    continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except (OSError, IndexError):
            continue
        if any(v.startswith(b"VCLI_HOME=" + root.encode()) for v in env):
            found.append(int(entry))
    return found


@pytest.fixture(autouse=True)
def no_process_left_behind(tmp_path):
    """Fails a test that leaves any process of its vcli runs behind (orphans are a defect), after
    killing them so that they do not outlive the suite. Processes get 10 s to finish on their own."""
    yield
    import signal
    import time

    root = str(tmp_path)
    deadline = time.monotonic() + 10
    left = _processes_under(root)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = _processes_under(root)
    if not left:
        return
    described = []
    for pid in left:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                described.append(f"{pid}: {f.read().replace(chr(0).encode(), b' ').decode(errors='replace')[:200]}")
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    pytest.fail("processes left behind by the test:\n" + "\n".join(described), pytrace=False)


@pytest.fixture(autouse=True)
def gpu_lease_dir(tmp_path_factory, monkeypatch):
    """A host-wide GPU lease directory of the test's own (`vcli.placement.gpulease`): tests that declare
    GPUs never meet another test's (or a real user's) leases. Returns its path."""
    path = tmp_path_factory.mktemp("gpu-leases")
    monkeypatch.setenv("VCLI_GPU_LEASE_DIR", str(path))
    import sys as _sys

    kinds = _sys.modules.get("vcli.executors.kinds")
    if kinds is not None:
        kinds._PLACERS.clear()  # placers cached by an earlier test use its directory
    return path
