"""Tracking stores that cannot be used: a malformed tracking URI is one line at `--validate-only`
and at `create` (exit 2); a store that cannot be opened costs a job seconds, one WARNING line,
and the job runs untracked; an interrupt while the store opens records the job CANCELLED.
Real vcli processes, a real MLflow where one is opened."""

from __future__ import annotations

import fcntl
import hashlib
import os
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.helpers import describe, job_id_from_stderr, read_stderr_until, spawn, vcli

pytest.importorskip("mlflow", reason="needs the mlflow extra: pip install 'vcli[mlflow]'")

POOL = "--worker-pool-spec=machine-type=n1-standard-4,replica-count=1,container-image-uri=python"


def _job(name: str, uri: str | None, *extra: str) -> list[str]:
    return ["custom-jobs", "create", f"--display-name={name}", POOL, f"--command={sys.executable},-c,print('trained')",
            "--executor=local", *([f"--tracking-uri={uri}"] if uri is not None else []), *extra]


def _study(name: str, uri: str, *extra: str) -> list[str]:
    return ["hp-tuning-jobs", "create", f"--display-name={name}", POOL,
            f"--command={sys.executable},-c,print('trained')", "--executor=local", f"--tracking-uri={uri}",
            "--parameter-spec=parameter-id=x,type=double,min=0,max=1", "--metric=metric-id=m,goal=maximize",
            "--max-trial-count=1", *extra]


@pytest.mark.parametrize("uri,why", [
    ("bogus://x", "unknown scheme [bogus]"),
    ("http://localhost:99999", "Port out of range"),
    ("http://local\nhost:5000", "it contains control characters"),
    ("sqlite://relative.db", "a SQLite store is sqlite:///"),
], ids=["bad-scheme", "bad-port", "newline", "sqlite-two-slashes"])
@pytest.mark.parametrize("command", ["custom-jobs", "hp-tuning-jobs"])
def test_a_malformed_tracking_uri_is_one_line_at_validate_only_and_at_create(tmp_path: Path, uri: str, why: str,
                                                                            command: str) -> None:
    build = _job if command == "custom-jobs" else _study
    for extra in (("--validate-only",), ()):
        r = vcli(tmp_path / "home", *build("bad-uri", uri, *extra), timeout=60)
        assert r.returncode == 2, r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"ERROR: (vcli.{command}.create) argument --tracking-uri: ") \
            and why in lines[0], r.stderr
    listed = vcli(tmp_path / "home", command, "list", "--format=value(displayName)")
    assert "bad-uri" not in listed.stdout


def test_the_variable_is_named_when_it_holds_the_bad_uri(tmp_path: Path) -> None:
    r = vcli(tmp_path / "home", *_job("env-uri", None, "--validate-only"), timeout=60, MLFLOW_TRACKING_URI="bogus://x")
    assert r.returncode == 2 and "MLFLOW_TRACKING_URI: [bogus://x] is not a tracking URI" in r.stderr, r.stderr


@pytest.mark.parametrize("uri", ["sqlite:////proc/self/mem", "sqlite:////etc/hostname/under-a-file.db",
                                 "/etc/hostname/mlruns"], ids=["proc-mem", "under-a-file", "file-store-under-a-file"])
def test_a_store_that_cannot_be_opened_is_one_warning_and_the_job_runs_untracked_at_once(tmp_path: Path,
                                                                                          uri: str) -> None:
    home = tmp_path / "home"
    r = vcli(home, *_job("unopenable", uri, "--validate-only"), timeout=60)
    assert r.returncode == 0, r.stderr
    assert f"WARNING: MLflow tracking at {uri} cannot start: " in r.stderr and "would run untracked" in r.stderr
    started = time.monotonic()
    r = vcli(home, *_job("unopenable", uri), timeout=120)
    took = time.monotonic() - started
    assert r.returncode == 0 and "trained" in r.stdout, r.stderr
    warnings = [line for line in r.stderr.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1 and warnings[0].startswith(f"WARNING: MLflow tracking at {uri} cannot start (") \
        and warnings[0].endswith("the job runs untracked."), r.stderr
    assert "Traceback" not in r.stderr
    assert took < 30, f"{took:.1f}s"  # MLflow is not even imported


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_tracking_server_costs_a_bounded_time_and_the_job_succeeds(tmp_path: Path) -> None:
    uri = f"http://127.0.0.1:{_closed_port()}"
    r = vcli(tmp_path / "home", *_job("no-server", uri, "--validate-only"), timeout=60)
    assert r.returncode == 0, r.stderr
    started = time.monotonic()
    r = vcli(tmp_path / "home", *_job("no-server", uri), timeout=180)
    assert r.returncode == 0 and "trained" in r.stdout, r.stderr
    assert time.monotonic() - started < 90
    assert "Traceback" not in r.stderr and f"MLflow tracking at {uri} is still failing" in r.stderr, r.stderr


def _schema_lock_path(db: Path) -> Path:
    name = f"vcli-mlflow-{hashlib.sha256(str(db).encode()).hexdigest()[:16]}.lock"
    return Path(tempfile.gettempdir()) / name


@pytest.mark.parametrize("how,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["sigterm", "sigint"])
def test_an_interrupt_while_the_tracking_store_opens_records_the_job_cancelled(tmp_path: Path, how: int,
                                                                                code: int) -> None:
    """Another process holds the store's schema lock (as one migrating a new store does), so
    the job waits in the opening; a signal then ends it CANCELLED, never QUEUED with no
    controller."""
    db = tmp_path / "store.db"
    lock = _schema_lock_path(db)
    fd = os.open(lock, os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        home = tmp_path / "home"
        proc = spawn(home, *_job("interrupted", f"sqlite:///{db}"))
        try:
            job_id = job_id_from_stderr(read_stderr_until(proc, "submitted successfully", 60))
            read_stderr_until(proc, "Running 1 replica(s)", 60)
            time.sleep(3)  # in the opening: MLflow imported, waiting for the lock
            os.kill(proc.pid, how)
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    finally:
        os.close(fd)
        lock.unlink(missing_ok=True)
    assert proc.returncode == code, err
    assert "Traceback" not in err, err
    assert describe(home, "custom-jobs", job_id)["state"] == "JOB_STATE_CANCELLED"
