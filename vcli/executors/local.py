"""The local process executor (the embedded default): one supervised child per replica.

Each replica runs under its own supervisor process (`vcli.executors.supervisor`): a child
subreaper in a session of its own that runs the trainer, writes its output into the replica's
log file, records its exit status the moment it exits, and then stops every descendant the
trainer left (helpers, `setsid` grandchildren, double-forked daemons). So a replica's whole
process tree goes when the replica ends, and the replica's end is seen at once even when a
helper still holds the trainer's stdout.

Replicas outlive a controller that dies without cleaning up (killed, crashed): supervisors
run in sessions of their own, so `vcli custom-jobs resume` / `hp-tuning-jobs resume` can
re-attach to them, and `cancel` stops them. A controller that ends normally (success,
failure, Ctrl-C, SIGTERM, SIGHUP, cancel) always stops its replicas first.

Stopping: SIGTERM to every process of the tree, a grace period, then SIGKILL. TensorFlow's
multi-worker runtime installs its own SIGTERM handler and keeps running (a 2-replica
MultiWorkerMirrored job outlived SIGTERM for the whole grace period when we measured it), so
the KILL step is what actually ends it.

A handle's ref is `<supervisor pid>@<job id>@<status file>`; the job id check (the replica's
environment carries VCLI_JOB_ID) keeps `cancel` from another terminal from ever signalling a
process that merely reuses a recorded pid.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from typing import Callable, Sequence

from vcli import packages
from vcli.errors import ExecutorError
from vcli.executors import (
    ExecutorBase,
    Placement,
    ReplicaHandle,
    ReplicaLaunch,
    ReplicaStatus,
    place_seed_dirs,
    process_argv,
    read_replica_file,
)
from vcli.executors import supervisor as _supervisor
from vcli.executors.leases import hand_over, held_leases, idle_argv
from vcli.logs import LogWriter
from vcli.placement import gpuinfo as _gpuinfo
from vcli.spec import is_secret

SUPERVISOR = os.path.abspath(_supervisor.__file__)
#: How long release() waits for a supervisor to finish cleaning up after its trainer ended.
RELEASE_WAIT_SECONDS = _supervisor.LEFTOVER_GRACE_SECONDS + 5.0


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


class LocalExecutor(ExecutorBase):
    """Replicas as supervised child processes of this vcli process."""

    name = "local"

    def __init__(self, python: str | None = None, *, home: str | os.PathLike[str] | None = None) -> None:
        #: The interpreter for `python -m` / `.py` entrypoints: $VCLI_PYTHON, else the `python`
        #: property (`vcli config set python PATH`), else the one running vcli.
        from vcli import properties

        self.python = python or os.environ.get("VCLI_PYTHON") or properties.get("python") or sys.executable
        #: vcli's home, where installed Python environments are cached (`<home>/envs`).
        self.home = home
        self._running: dict[str, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ protocol

    def prepare(
        self, launches: Sequence[ReplicaLaunch], *, cancelled: threading.Event, progress: Callable[[str], None]
    ) -> list[ReplicaLaunch]:
        """Give each replica its private working directory and its Python environment.

        A replica with code (a local package, or a python module from packageUris) runs in
        `<replica dir>/work`, a private copy of the job's snapshot of the package
        (`vcli.packages`), never in the source tree; one with only an explicit command keeps
        running where vcli runs (its command may name files there). A python module with no
        package at all (an executor image's module, e.g. the README's `trainer.task`) is
        imported from where vcli runs, on PYTHONPATH, while the replica works in its own
        empty directory. Whatever the replica needs
        installed (packageUris, `requirements=`, the package's requirements.txt, extra
        packages) goes into a cached environment whose python runs the replica.
        """
        for launch in launches:
            process_argv(launch, self.python)  # raises a clear error for image-only pools
            if launch.workdir and not os.path.isdir(launch.workdir):
                raise ExecutorError(f"Directory '{launch.workdir}' is not found.")
        snapshots: dict[tuple[str, str], str] = {}
        envs: dict[packages.Installs, str] = {}
        out = []
        for launch in launches:
            if cancelled.is_set():
                break
            out.append(self._prepare_one(launch, snapshots, envs, cancelled=cancelled, progress=progress))
        return out

    def _prepare_one(self, launch: ReplicaLaunch, snapshots: dict[tuple[str, str], str],
                     envs: dict[packages.Installs, str], *, cancelled: threading.Event,
                     progress: Callable[[str], None]) -> ReplicaLaunch:
        lp = launch.local_package
        installs = packages.installs_for(
            package_uris=list(launch.package_uris),
            requirements=lp.requirements if lp else (),
            package_dir=launch.workdir,
            extra_packages=lp.extra_packages if lp else (),
        )
        changes: dict[str, object] = {}
        if installs:
            if installs not in envs:
                envs[installs] = packages.python_env(
                    installs, python=self.python, home=self._home(), progress=progress, cancelled=cancelled,
                    label=f" for {launch.task_name}",
                )
            env_python = envs[installs]
            if not launch.command:
                changes["command"] = tuple(process_argv(replace(launch, args=()), env_python))
            # `python`/`pip` of an explicit command are the environment's, as in Vertex's image.
            bin_dir = os.path.dirname(env_python)
            changes["env"] = {**launch.env, "VIRTUAL_ENV": os.path.dirname(bin_dir),
                              "PATH": os.pathsep.join(p for p in (bin_dir, os.environ.get("PATH", "")) if p)}
        if launch.workdir or (launch.python_module and not launch.command):
            private = os.path.join(launch.output_dir, "work")
            if launch.workdir:
                # `<job dir>/package`: plan_job puts replica dirs at `<job dir>/replicas/<task>`.
                store = os.path.join(os.path.dirname(os.path.dirname(launch.output_dir)), "package")
                key = (store, os.path.abspath(launch.workdir))
                if key not in snapshots:
                    snapshots[key] = packages.snapshot(key[1], store)
                packages.populate(snapshots[key], private)
            else:
                packages.populate_empty(private)
                if not installs:  # nothing else could provide the module: the image's code is here
                    env = changes.get("env", launch.env)
                    inherited = env.get("PYTHONPATH") or os.environ.get("PYTHONPATH", "")  # type: ignore[union-attr]
                    changes["env"] = {**env, "PYTHONPATH": os.pathsep.join(  # type: ignore[dict-item]
                        p for p in (os.getcwd(), inherited) if p)}
            changes["workdir"] = private
        return replace(launch, **changes) if changes else launch  # type: ignore[arg-type]

    def _home(self) -> str:
        if self.home is not None:
            return os.fspath(self.home)
        from vcli.store import default_home

        return str(default_home())

    def reserve_port(self, placement: Placement) -> int:
        return free_port("127.0.0.1")

    def start(self, launch: ReplicaLaunch) -> ReplicaHandle:
        argv = process_argv(launch, self.python)
        env = dict(os.environ)
        env.update(launch.env)
        # How stop() recognises the replica's processes (and never a reused pid's).
        env["VCLI_JOB_ID"] = launch.job_id
        env[REPLICA_TAG] = _tag(launch.job_id, launch.task_name)
        env.setdefault("PYTHONUNBUFFERED", "1")
        if self.python != sys.executable and "PATH" not in launch.env:
            # The chosen interpreter's console scripts (`torchrun`, `accelerate`) run by name, as
            # in an image whose python is on PATH (an installs environment set PATH itself).
            env["PATH"] = os.pathsep.join(p for p in (os.path.dirname(self.python), env.get("PATH", "")) if p)
        if launch.workdir:
            # `python -m pkg.mod` and scripts import siblings from the package dir, as in the image.
            env["PYTHONPATH"] = os.pathsep.join(p for p in (launch.workdir, env.get("PYTHONPATH", "")) if p)
        os.makedirs(launch.output_dir, exist_ok=True)
        try:
            place_seed_dirs(launch)  # e.g. the checkpoint a PBT trial resumes from
        except ExecutorError as e:
            _log_vcli(launch.log_path, str(e))
            raise
        status_path = os.path.join(launch.output_dir, "replica.status")
        try:
            os.unlink(status_path)
        except FileNotFoundError:
            pass
        # The spec's secrets, and those the replica inherits from vcli's own environment (an
        # exported API token reaches a local trainer too, and must not reach its log).
        names = dict.fromkeys([*launch.secret_env, *(n for n in os.environ if is_secret(n))])
        masks = [arg for name in names for arg in ("--mask", name)]
        leases = held_leases(launch)
        argv = idle_argv(launch, argv, python=sys.executable, gpuinfo=_gpuinfo.__file__ or "")
        fds = [lease.fd for lease in leases]
        lease_args = [arg for fd in fds for arg in ("--lease-fd", str(fd))]
        command = [sys.executable, "-S", SUPERVISOR, *masks, *lease_args, status_path, launch.log_path, "--", *argv]
        try:
            popen = subprocess.Popen(
                command,
                cwd=launch.workdir or None,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
                pass_fds=fds,
            )
        except OSError as e:
            _log_vcli(launch.log_path, f"failed to start the replica's supervisor: {e.strerror}")
            raise ExecutorError(f"Cannot start replica {launch.task_name}: {e.strerror}.") from None
        hand_over(launch, leases, popen.pid)
        ref = f"{popen.pid}@{launch.job_id}@{status_path}"
        with self._lock:
            self._running[ref] = popen
        return ReplicaHandle(executor=self.name, host="local", ref=ref, task_name=launch.task_name)

    def poll(self, handle: ReplicaHandle) -> ReplicaStatus:
        pid, job_id, status_path = _parse_ref(handle.ref)
        popen = self._running.get(handle.ref)
        if popen is not None:
            popen.poll()  # reap the supervisor once it is done
        status = _read_status(status_path)
        if status is not None:
            return ReplicaStatus.from_record(status)
        if self._alive(pid, job_id):
            return ReplicaStatus(running=True)
        return ReplicaStatus(running=False, message="the replica is gone (exit code unknown)")

    def stop(self, handles: Sequence[ReplicaHandle], *, grace_seconds: float) -> None:
        targets = [_target(h) for h in handles]
        live = [t for t in targets if _read_status(t[2]) is None and self._alive(t[0], t[1])]
        for pid, *_ in live:
            _kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_seconds
        while live and time.monotonic() < deadline:
            live = [t for t in live if _read_status(t[2]) is None and self._alive(t[0], t[1])]
            self._reap()
            time.sleep(0.02)
        for pid, *_ in live:
            _kill(pid, signal.SIGUSR1)  # the grace period is over: SIGKILL the whole tree
        self._wait_gone(targets, 10.0)

    def find(self, launch: ReplicaLaunch) -> ReplicaHandle | None:
        """The replica's supervisor, found by the replica's tag in its environment and its
        command line; an ended one by the status file it left (no pid then)."""
        status_path = os.path.join(launch.output_dir, "replica.status")
        tag = _tag(launch.job_id, launch.task_name)
        for pid in tagged_processes(tag, exclude=os.getpid()):
            if _is_supervisor(pid, launch.job_id) and SUPERVISOR.encode() in _cmdline(pid):
                return ReplicaHandle(executor=self.name, host="local", ref=f"{pid}@{launch.job_id}@{status_path}",
                                     task_name=launch.task_name)
        if _read_status(status_path) is not None:
            return ReplicaHandle(executor=self.name, host="local", ref=f"0@{launch.job_id}@{status_path}",
                                 task_name=launch.task_name)
        return None

    def fetch_dir(self, handle: ReplicaHandle, path: str, dest: str) -> bool:
        """The contract's copy, with the replica's trainer tree stopped for it (its supervisor
        keeps watching): a trainer that rewrites its checkpoint every few milliseconds still
        gives a consistent copy (`vcli.executors.freeze`)."""
        from vcli.executors import copy_dir_atomically
        from vcli.executors.freeze import copy_still, frozen

        pid, job_id, status_path, tag = _target(handle)
        tree = [p for p in tagged_processes(tag, exclude=os.getpid()) if p != pid] \
            if _read_status(status_path) is None and _is_supervisor(pid, job_id) else []
        if not tree:
            return copy_dir_atomically(path, dest)
        with frozen(tree) as (stop, cont):
            return copy_still(tree, stop, cont, path, dest)

    def read_file(self, handle: ReplicaHandle, path: str) -> str | None:
        return read_replica_file(path)

    def release(self, handles: Sequence[ReplicaHandle]) -> None:
        """Wait for each supervisor to finish stopping its trainer's leftovers; then forget it."""
        targets = [_target(h) for h in handles]
        self._wait_gone(targets, RELEASE_WAIT_SECONDS)
        with self._lock:
            for h in handles:
                popen = self._running.pop(h.ref, None)
                if popen is not None:
                    popen.poll()

    # ------------------------------------------------------------------ internals

    def _alive(self, pid: int, job_id: str) -> bool:
        """Is the supervisor `pid` still running? Our own children are asked directly (a child
        that has not exec'd yet does not show the job's environment in /proc)."""
        with self._lock:
            own = next((p for p in self._running.values() if p.pid == pid), None)
        if own is not None:
            return own.poll() is None
        return _is_supervisor(pid, job_id)

    def _reap(self) -> None:
        for popen in list(self._running.values()):
            popen.poll()

    def _wait_gone(self, targets: Sequence[tuple[int, str, str, str]], seconds: float) -> None:
        """Until no supervisor of `targets` and no process of theirs is left; then force it."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self._reap()
            if not any(self._alive(pid, job) for pid, job, *_ in targets):
                break
            time.sleep(0.02)
        for pid, job, *_ in targets:
            if self._alive(pid, job):
                _kill(pid, signal.SIGUSR1)
        for _, _, _, tag in targets:
            # A supervisor that does not answer, or was itself killed: everything that still
            # carries the job's tag goes (this is what keeps a SIGKILLed supervisor's tree from
            # surviving a cancel).
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                self._reap()
                left = tagged_processes(tag, exclude=os.getpid())
                if not left:
                    break
                for p in left:
                    _kill(p, signal.SIGKILL)
                time.sleep(0.02)


def _log_vcli(path: str, message: str) -> None:
    try:
        w = LogWriter(path)
        w.write("vcli", message)
        w.close()
    except OSError:
        pass


#: The environment variable that marks every process of one replica (`<job id>/<task name>`).
REPLICA_TAG = "VCLI_REPLICA"


def _tag(job_id: str, task_name: str) -> str:
    return f"{job_id}/{task_name}"


def _target(handle: ReplicaHandle) -> tuple[int, str, str, str]:
    pid, job_id, status_path = _parse_ref(handle.ref)
    return pid, job_id, status_path, _tag(job_id, handle.task_name)


def _parse_ref(ref: str) -> tuple[int, str, str]:
    pid, _, rest = ref.partition("@")
    job_id, _, status_path = rest.partition("@")
    return int(pid), job_id, status_path


def _read_status(path: str) -> dict[str, object] | None:
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (FileNotFoundError, ValueError):
        return None
    return data if isinstance(data, dict) and "exitCode" in data else None


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _stat_fields(pid: int) -> list[bytes]:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return []
    return stat[stat.rfind(b")") + 2:].split()


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def _is_supervisor(pid: int, job_id: str) -> bool:
    """Is `pid` alive (not a zombie) and a process of job `job_id`?"""
    fields = _stat_fields(pid)
    return bool(fields) and fields[0] not in (b"Z", b"X") and _has_env(pid, "VCLI_JOB_ID", job_id)


def tagged_processes(tag: str, *, exclude: int = 0) -> list[int]:
    """Every live process whose environment carries VCLI_REPLICA=`tag` (one replica's tree)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == exclude:
            continue
        fields = _stat_fields(int(entry))
        if fields and fields[0] not in (b"Z", b"X") and _has_env(int(entry), REPLICA_TAG, tag):
            out.append(int(entry))
    return out


def _has_env(pid: int, name: str, value: str) -> bool:
    if not value:
        return False
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f"{name}={value}".encode() in f.read().split(b"\0")
    except OSError:
        return False
