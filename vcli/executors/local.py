"""The local process executor (the embedded default): one child process per replica.

Each replica runs in its own session and process group (so stop reaches everything it
spawned), with the launch's environment on top of vcli's own, its working dir set to the local
package, and stdout/stderr pumped into the replica's log file. The child also gets
PR_SET_PDEATHSIG=SIGKILL: if the vcli process that started it dies without cleaning up, the
kernel kills the replica, so no orphan outlives its controller.

Stopping: SIGTERM to the group, a grace period, then SIGKILL. TensorFlow's multi-worker
runtime installs its own SIGTERM handler and keeps running (a 2-replica MultiWorkerMirrored
job outlived SIGTERM for the whole grace period when we measured it), so the KILL step is
what actually ends it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Callable, Sequence

from vcli.errors import ExecutorError
from vcli.executors import ExecutorBase, Placement, ReplicaHandle, ReplicaLaunch, ReplicaStatus, process_argv
from vcli.logs import LogWriter, pump

_PR_SET_PDEATHSIG = 1


def _set_pdeathsig() -> None:  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except Exception:  # noqa: BLE001 - best effort; process groups still cover stop
        pass


_recent_ports: dict[int, float] = {}
_recent_lock = threading.Lock()


def free_port(address: str = "127.0.0.1") -> int:
    """A TCP port the kernel says is free on `address` now (bind to 0, read, release).

    The kernel may hand the same ephemeral port out again right after it is released, so
    ports given out in the last minute are skipped: one job never gets a port twice.
    """
    with _recent_lock:
        now = time.monotonic()
        for port, at in list(_recent_ports.items()):
            if now - at > 60:
                del _recent_ports[port]
        for _ in range(100):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind((address, 0))
                port = int(s.getsockname()[1])
            if port not in _recent_ports:
                _recent_ports[port] = now
                return port
        raise ExecutorError(f"Cannot find a free TCP port on {address}.")


class _Spawner:
    """Forks every replica from one long-lived thread.

    PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, not the process;
    replicas are started from short-lived threads (job start-up), so the fork itself must
    happen on a thread that lives as long as vcli does.
    """

    _instance: "_Spawner | None" = None
    _guard = threading.Lock()

    def __init__(self) -> None:
        import queue

        self._queue: "queue.Queue[tuple[Callable[[], object], list[object], threading.Event]]" = queue.Queue()
        threading.Thread(target=self._loop, name="vcli-spawner", daemon=True).start()

    @classmethod
    def get(cls) -> "_Spawner":
        with cls._guard:
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance

    def _loop(self) -> None:
        while True:
            fn, box, done = self._queue.get()
            try:
                box.append(fn())
            except BaseException as e:  # noqa: BLE001 - handed back to the caller
                box.append(e)
            done.set()

    def call(self, fn: Callable[[], object]) -> object:
        box: list[object] = []
        done = threading.Event()
        self._queue.put((fn, box, done))
        done.wait()
        if isinstance(box[0], BaseException):
            raise box[0]
        return box[0]


class _Running:
    def __init__(self, popen: subprocess.Popen[bytes], writer: LogWriter, threads: list[threading.Thread]) -> None:
        self.popen = popen
        self.writer = writer
        self.threads = threads
        self.finished = False


class LocalExecutor(ExecutorBase):
    """Replicas as child processes of this vcli process."""

    name = "local"

    def __init__(self, python: str | None = None) -> None:
        #: The interpreter for `python -m` / `.py` entrypoints: the one running vcli unless set.
        self.python = python or os.environ.get("VCLI_PYTHON") or sys.executable
        self._running: dict[str, _Running] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ protocol

    def prepare(
        self, launches: Sequence[ReplicaLaunch], *, cancelled: threading.Event, progress: Callable[[str], None]
    ) -> list[ReplicaLaunch]:
        for launch in launches:
            process_argv(launch, self.python)  # raises a clear error for image-only pools
            if launch.workdir and not os.path.isdir(launch.workdir):
                raise ExecutorError(f"Directory '{launch.workdir}' is not found.")
        return list(launches)

    def reserve_port(self, placement: Placement) -> int:
        return free_port("127.0.0.1")

    def start(self, launch: ReplicaLaunch) -> ReplicaHandle:
        argv = process_argv(launch, self.python)
        env = dict(os.environ)
        env.update(launch.env)
        # How stop() recognises the replica's processes (and never a reused pgid's).
        env["VCLI_JOB_ID"] = launch.job_id
        env.setdefault("PYTHONUNBUFFERED", "1")
        if launch.workdir:
            # `python -m pkg.mod` and scripts import siblings from the package dir, as in the image.
            env["PYTHONPATH"] = os.pathsep.join(p for p in (launch.workdir, env.get("PYTHONPATH", "")) if p)
        os.makedirs(launch.output_dir, exist_ok=True)
        writer = LogWriter(launch.log_path)
        try:
            popen = _Spawner.get().call(lambda: subprocess.Popen(
                argv,
                cwd=launch.workdir or None,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                preexec_fn=_set_pdeathsig,  # noqa: PLW1509 - only a prctl call, no locks
                close_fds=True,
            ))
            assert isinstance(popen, subprocess.Popen)
        except OSError as e:
            writer.write("vcli", f"failed to start {argv[0]}: {e.strerror}")
            writer.close()
            raise ExecutorError(f"Cannot start replica {launch.task_name}: {argv[0]}: {e.strerror}.") from None
        assert popen.stdout is not None and popen.stderr is not None
        threads = [pump(popen.stdout, writer, "stdout"), pump(popen.stderr, writer, "stderr")]
        ref = f"{popen.pid}@{launch.job_id}"
        with self._lock:
            self._running[ref] = _Running(popen, writer, threads)
        return ReplicaHandle(executor=self.name, host="local", ref=ref, task_name=launch.task_name)

    def poll(self, handle: ReplicaHandle) -> ReplicaStatus:
        run = self._running.get(handle.ref)
        if run is None:
            pid, job_id = _parse_ref(handle.ref)
            alive = bool(_group_members(pid, job_id))
            return ReplicaStatus(running=alive, message=None if alive else "the replica is gone (exit code unknown)")
        code = run.popen.poll()
        if code is None:
            return ReplicaStatus(running=True)
        self._finish(run)
        if code < 0:
            return ReplicaStatus(running=False, exit_code=128 - code, message=f"killed by signal {signal.Signals(-code).name}")
        return ReplicaStatus(running=False, exit_code=code)

    def stop(self, handles: Sequence[ReplicaHandle], *, grace_seconds: float) -> None:
        targets = [_parse_ref(h.ref) for h in handles]
        for pid, job_id in targets:
            if _group_members(pid, job_id):
                _killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_seconds
        while time.monotonic() < deadline:
            self._reap()
            if not any(_group_members(pid, job_id) for pid, job_id in targets):
                break
            time.sleep(0.05)
        for pid, job_id in targets:
            if _group_members(pid, job_id):
                _killpg(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            self._reap()
            if not any(_group_members(pid, job_id) for pid, job_id in targets):
                return
            time.sleep(0.05)

    def read_file(self, handle: ReplicaHandle, path: str) -> str | None:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except (FileNotFoundError, IsADirectoryError):
            return None

    def release(self, handles: Sequence[ReplicaHandle]) -> None:
        for h in handles:
            run = self._running.pop(h.ref, None)
            if run is not None:
                self._finish(run)

    # ------------------------------------------------------------------ internals

    def _reap(self) -> None:
        for run in list(self._running.values()):
            run.popen.poll()

    def _finish(self, run: _Running) -> None:
        if run.finished:
            return
        run.finished = True
        # Pipes close when the last holder exits; a daemonised grandchild may keep them open.
        for t in run.threads:
            t.join(timeout=2)
        run.writer.close()


def _parse_ref(ref: str) -> tuple[int, str]:
    pid, _, job_id = ref.partition("@")
    return int(pid), job_id


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _group_members(pgid: int, job_id: str) -> list[int]:
    """Live (non-zombie) processes of process group `pgid` that belong to job `job_id`.

    The job check matters for `cancel` from another terminal: a pgid read from the store
    could have been reused by an unrelated process since, and must never be signalled.
    """
    members = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) < 3 or fields[0] == b"Z" or int(fields[2]) != pgid:
            continue
        if job_id and not _has_job_env(int(entry), job_id):
            continue
        members.append(int(entry))
    return members


def _has_job_env(pid: int, job_id: str) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f"VCLI_JOB_ID={job_id}".encode() in f.read().split(b"\0")
    except OSError:
        return False
