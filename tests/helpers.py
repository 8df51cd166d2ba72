"""Shared helpers for end-to-end tests: run the real CLI, find leftovers, wait for states."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent


def vcli_env(home: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["VCLI_HOME"] = str(home)
    env["VCLI_CONFIG_DIR"] = str(home / "config")
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def vcli(home: Path, *args: str, timeout: float = 300, input: str | None = None, cwd: Path = REPO,
         **env: str) -> subprocess.CompletedProcess[str]:
    """Run `python -m vcli ARGS` in `cwd` to completion (killing its group on timeout)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "vcli", *args],
        env=vcli_env(home, **env),
        cwd=cwd,
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(input=input, timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"vcli {' '.join(args)} timed out after {timeout}s\nstdout:\n{out}\nstderr:\n{err}") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _default_sigint() -> None:
    """In the child before exec: SIGINT back to its default disposition. A test run started
    with SIGINT ignored (`nohup ... &`) would pass SIG_IGN on, and Python keeps an inherited
    SIG_IGN, so the Ctrl-C a test sends would never reach vcli."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def spawn(home: Path, *args: str, **env: str) -> subprocess.Popen[str]:
    """Start `python -m vcli ARGS` in the background (its own session), SIGINT at its default
    whatever this test run inherited, so a test can Ctrl-C it."""
    return subprocess.Popen(
        [sys.executable, "-m", "vcli", *args],
        env=vcli_env(home, **env),
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=_default_sigint,
    )


def describe(home: Path, kind: str, job_id: str) -> dict[str, Any]:
    r = vcli(home, kind, "describe", job_id, "--format=json", timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def list_ids(home: Path, kind: str) -> list[str]:
    r = vcli(home, kind, "list", "--format=value(name.basename())", timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def processes_with_env(key: str, value: str) -> list[int]:
    """Live (non-zombie) pids whose environment has KEY=VALUE (e.g. VCLI_JOB_ID=<id>)."""
    needle = f"{key}={value}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
            if stat[stat.rfind(b")") + 2:].split()[0] == b"Z":
                continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def running_replicas(job_id: str) -> set[str]:
    """The replicas of a local job with a live process (each replica's processes carry
    VCLI_REPLICA=<job>/<task>, its supervisor and trainer alike)."""
    tags = set()
    for pid in processes_with_env("VCLI_JOB_ID", job_id):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
        except OSError:
            continue
        if b"VCLI_REPLICA" in env:
            tags.add(env[b"VCLI_REPLICA"].decode())
    return tags


def job_id_from_stderr(stderr: str) -> str:
    for line in stderr.splitlines():
        if "is submitted successfully" in line or "submitted successfully" in line:
            return line.split("[", 1)[1].split("]", 1)[0].rsplit("/", 1)[-1]
    raise AssertionError(f"no job id in stderr:\n{stderr}")


def read_stderr_until(proc: subprocess.Popen[str], needle: str, timeout: float) -> str:
    """Read the background process's stderr lines until one contains `needle`.

    Byte by byte from the pipe itself, never through `proc.stderr`'s buffers: a buffered
    `readline` takes every line the pipe holds, and the selector, which sees only the pipe,
    then waits for more while the needle sits in the buffer (CI, loaded, got the note and the
    "submitted successfully" line in one read and waited 60 s for nothing). Nothing past the
    needle's line is read, so a later `communicate()` gets the rest."""
    import selectors

    assert proc.stderr is not None
    fd = proc.stderr.fileno()
    sel = selectors.DefaultSelector()
    sel.register(fd, selectors.EVENT_READ)
    seen, line = "", b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not sel.select(timeout=0.2):
                continue
            byte = os.read(fd, 1)
            if not byte:
                break
            line += byte
            if byte == b"\n":
                text = line.decode(errors="replace")
                seen, line = seen + text, b""
                if needle in text:
                    return seen
    finally:
        sel.close()
    raise AssertionError(f"'{needle}' not seen in stderr within {timeout}s:\n{seen}{line.decode(errors='replace')}")


def clusters_from_stdout(stdout: str) -> dict[str, dict[str, list[str]]]:
    """The trainer's `[task] cluster={...} task=...` lines, as {task name: cluster}."""
    clusters = {}
    for line in stdout.splitlines():
        if "cluster=" in line:
            task = line.split("]", 1)[0].lstrip("[")
            clusters[task] = json.loads(line.split("cluster=", 1)[1].split(" task=", 1)[0])
    return clusters


def script_study(home: Path, root: Path, script: str, *flags: str) -> tuple[str, dict[str, Any], str]:
    """Run a study of a one-file trainer to its end: `script` becomes `<root>/pkg-<home name>/t.py`,
    the pool `machine-type=n1-standard-4,local-package-path=...,script=t.py`, the display name
    the home's name; `flags` add the metrics, parameters and algorithm. Returns (study id, the
    study as `--format=json` printed it, stderr); asserts `create` exited 0."""
    pkg = root / f"pkg-{home.name}"
    pkg.mkdir(parents=True)
    (pkg / "t.py").write_text(script)
    r = vcli(home, "hp-tuning-jobs", "create", f"--display-name={home.name}",
             f"--worker-pool-spec=machine-type=n1-standard-4,local-package-path={pkg},script=t.py",
             "--format=json", *flags)
    assert r.returncode == 0, r.stderr[-3000:]
    study = json.loads(r.stdout)
    return study["name"].rsplit("/", 1)[1], study, r.stderr


def write_package(root: Path, files: dict[str, str]) -> Path:
    """A trainer package `root/pkg` holding `files` (relative path -> source, dedented)."""
    import textwrap

    pkg = root / "pkg"
    pkg.mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        p = pkg / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    return pkg


def reap(proc: subprocess.Popen[str]) -> None:
    """For a test's `finally`: SIGKILL the session of a spawned process that is still running
    and collect its output, so a failed assertion leaves no process behind."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()


class PeakRss:
    """The peak resident size, in KiB, of one child process itself: its `/proc/PID/status`
    VmHWM, read every few milliseconds until it exits (`stop()` returns the largest seen).

    `wait4`'s ru_maxrss is no measure of a child's own memory: Linux starts a child's at its
    parent's size when it forks and keeps the larger across `exec`, so a test process that
    earlier tests grew to 500 MB made every child it started look that big."""

    def __init__(self, pid: int, interval: float = 0.005) -> None:
        import threading

        self.pid, self.interval, self.peak = pid, interval, 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._done.is_set():
            try:
                with open(f"/proc/{self.pid}/status") as f:
                    hwm = next((int(line.split()[1]) for line in f if line.startswith("VmHWM:")), None)
            except (OSError, ValueError):
                return
            if hwm is None:  # exited (a zombie has no memory left)
                return
            self.peak = max(self.peak, hwm)
            time.sleep(self.interval)

    def stop(self) -> int:
        self._done.set()
        self._thread.join()
        return self.peak
