"""The executor interface: how a replica is started, watched, stopped and read back.

Plain data crosses this boundary. The job controller (`vcli.control.jobs`) resolves everything a
replica needs into a `ReplicaLaunch` (argv, environment, working dir, output dir, placement);
the executor turns it into a process, a container or a remote process and returns a
`ReplicaHandle` that round-trips through JSON, so `vcli custom-jobs cancel` in another
terminal can stop replicas that a different vcli process started.

Every executor writes the replica's combined output to `launch.log_path` in the format of
`vcli.logs` (one `timestamp<TAB>stream<TAB>line` record per line), so log streaming, the
foreground view and `stream-logs` share one reader whatever ran the replica.

Heavy libraries (docker, paramiko) are imported only inside their executor module, lazily.
"""

from __future__ import annotations

import os
import stat
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

from vcli.placement.types import Placement

if TYPE_CHECKING:  # the data model is imported where launches are made, not by every reader of handles
    from vcli.spec import LocalPackage, MachineSpec, ReplicaId

__all__ = [
    "Executor",
    "ExecutorBase",
    "HostHealth",
    "Placement",
    "ReplicaHandle",
    "ReplicaLaunch",
    "ReplicaStatus",
]


@dataclass(frozen=True, kw_only=True)
class ReplicaLaunch:
    """Everything needed to start one replica, already resolved by the controller.

    `command` empty means "the image's own entrypoint" (containers only); the process
    runtime runs `command + args`. `env` already holds CLUSTER_SPEC, TF_CONFIG, AIP_*,
    CLOUD_ML_* and the GPU variables. `output_dir` is a host directory private to this
    replica that holds its log and metric file; container runtimes bind-mount it (and
    `mounts`) at the same path so every path in `env` means the same inside and out.
    """

    job_id: str
    trial_id: str | None
    replica: ReplicaId
    placement: Placement
    image_uri: str | None
    command: tuple[str, ...]
    args: tuple[str, ...]
    env: Mapping[str, str]
    workdir: str | None
    output_dir: str
    log_path: str
    metric_file: str
    machine_spec: MachineSpec = field(default_factory=lambda: _machine_spec())
    #: pythonPackageSpec.pythonModule (run as `python -m` by process runtimes).
    python_module: str | None = None
    local_package: LocalPackage | None = None
    mounts: tuple[str, ...] = ()
    #: vcli extension: /dev/shm size for containers (NCCL needs more than Docker's 64m).
    shm_size: str | None = None
    #: Environment variable names whose values are secrets: never logged or described.
    secret_env: tuple[str, ...] = ()
    #: pythonPackageSpec.packageUris: distributions installed before the replica runs.
    package_uris: tuple[str, ...] = ()
    #: Directories to fill before the replica starts: (local source directory, destination
    #: as the replica sees it, e.g. its AIP_CHECKPOINT_DIR). Population Based Training seeds a
    #: new trial with a copy of a better trial's checkpoint this way. `start` places them (on
    #: the replica's host, or where its container sees them) before the trainer runs.
    seed_dirs: tuple[tuple[str, str], ...] = ()

    @property
    def task_name(self) -> str:
        return self.replica.task_name

    @property
    def argv(self) -> tuple[str, ...]:
        return self.command + self.args


def _machine_spec() -> MachineSpec:
    from vcli.spec import MachineSpec

    return MachineSpec()


@dataclass(frozen=True, kw_only=True)
class ReplicaHandle:
    """A started replica, as stored: `ref` is a pid, a container id or `host:pgid`."""

    executor: str
    host: str
    ref: str
    task_name: str
    #: What a person may want to know about where the replica lives (e.g. its remote
    #: directories on an SSH host); shown by `describe`, never parsed back.
    details: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"executor": self.executor, "host": self.host, "ref": self.ref, "taskName": self.task_name}
        if self.details:
            data["details"] = dict(self.details)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ReplicaHandle:
        return cls(executor=data["executor"], host=data["host"], ref=data["ref"], task_name=data["taskName"],
                   details=dict(data.get("details") or {}))


@dataclass(frozen=True, kw_only=True)
class ReplicaStatus:
    """`exit_code` is None while the replica runs; `message` explains an abnormal end.

    `end_time` (seconds since the epoch) is when an ended replica ended, where the executor
    knows it (its supervisor's record, its container's FinishedAt): a replica that ended
    while no controller watched is then recorded as ending then, not when it was next
    polled. None: the caller takes the moment it saw the end. `stopped`: it ended after vcli
    asked its supervisor to stop it (a `cancel` killed after its stop, say).
    """

    running: bool
    exit_code: int | None = None
    message: str | None = None
    end_time: float | None = None
    stopped: bool = False

    @classmethod
    def from_record(cls, data: Mapping[str, Any]) -> ReplicaStatus:
        """An ended replica from its supervisor's record `{"exitCode", "signal", "endTime",
        "stopped"}` (vcli.executors.supervisor writes it the moment the trainer exits)."""
        signame = data.get("signal")
        return cls(running=False, exit_code=int(data["exitCode"]), message=f"killed by signal {signame}" if signame else None,
                   end_time=epoch_seconds(data.get("endTime")), stopped=data.get("stopped") is True)


#: The most of a replica's file `read_replica_file` returns (the end of a bigger one). The
#: hypertune library keeps a trial's last 100 reports, a few kilobytes.
MAX_READ_BYTES = 1 << 20


#: path -> ((device, inode, size, mtime in ns, limit), text) of the files `read_replica_file` read
#: last: a file that did not change since is not read again (a study polls every running
#: trial's metric file ten times a second; most of those polls find nothing new).
_LAST_READ: dict[str, tuple[tuple[int, int, int, int, int], str]] = {}
_LAST_READ_MAX = 4096


def read_replica_file(path: str, limit: int = MAX_READ_BYTES) -> str | None:
    """The text of a file a replica wrote (its metric file), for the controller to read.

    A replica's files are its own: None where `path` is absent, unreadable (no permission, a
    link loop) or not a regular file (a FIFO is never waited on, /dev/zero never read), never
    an exception that would end the caller. A file bigger than `limit` bytes gives its last
    `limit` bytes from the first line that starts there (the latest reports). A file whose
    inode, size and modification time are those of the last read gives that read's text, the
    same object, without reading it again.
    """
    try:
        seen = os.stat(path)
    except OSError:
        return None
    key = (seen.st_dev, seen.st_ino, seen.st_size, seen.st_mtime_ns, limit)
    last = _LAST_READ.get(path)
    if last is not None and last[0] == key and stat.S_ISREG(seen.st_mode):
        return last[1]
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        start = max(0, info.st_size - limit)
        data = os.pread(fd, limit, start)
    except OSError:
        return None
    finally:
        os.close(fd)
    if start:
        data = data[data.find(b"\n") + 1:] if b"\n" in data else b""
    text = data.decode("utf-8", "replace")
    if len(_LAST_READ) >= _LAST_READ_MAX:
        _LAST_READ.clear()
    _LAST_READ[path] = ((info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, limit), text)
    return text


def epoch_seconds(value: Any) -> float | None:
    """`value` as a time in seconds since the epoch, or None where it is not a plausible one
    (a record from a host whose clock is far off, or damaged)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1e11:
        return None
    return float(value)


class HostHealth(Protocol):
    """Hears which hosts an executor found dead or alive again (the placement scheduler does).

    Executors that reach other machines report through this instead of importing placement:
    the controller layer wires the executor and the scheduler together.
    """

    def mark_unhealthy(self, host: str, reason: str) -> None: ...

    def mark_healthy(self, host: str) -> None: ...


@runtime_checkable
class Executor(Protocol):
    """Starts and controls replicas: the whole surface controllers and the CLI may use.

    Implementations: `local` (processes), `docker` (containers), `ssh` (processes or containers
    on inventory hosts), `ray` (processes on a Ray cluster's nodes), `slurm` (steps of one
    Slurm allocation per job), and the in-process fake of the test suite; every one must pass
    `tests/test_executor_contract.py`.

    Call order for one job: `check` (what `--validate-only` runs: is the job valid here?),
    `ready` (can it run now?), `prepare` once (may
    build images or ship code; must return promptly when `cancelled` is set), `reserve_port` for
    every replica, `start` for every replica, then `poll` repeatedly, `stop` for whatever still
    runs, `release` at the end; `close` once when the executor is no longer needed. Handles may
    also come from another process (`cancel`): `poll`, `stop` and `release` must work on them.

    Errors: anything the user must fix in the spec raises `InvalidValueError`; an executor that
    cannot run now (engine down, image missing, host unreachable) raises `ExecutorError`.
    """

    #: The `--executor` name that selects this executor (`ExecutorKind` value).
    name: str

    def check(self, launches: Sequence[ReplicaLaunch]) -> None:
        """Raise if these launches cannot run on this executor; launch nothing, change nothing."""
        ...

    def command_for(self, launch: ReplicaLaunch) -> list[str]:
        """The argv the replica will run (empty: the image's own entrypoint), for print-env."""
        ...

    def ready(self, launches: Sequence[ReplicaLaunch]) -> None:
        """Raise `ExecutorError` if the executor cannot run these launches now (engine down,
        image missing, host unreachable). Separate from `check`: a valid job stays valid."""
        ...

    def prepare(
        self,
        launches: Sequence[ReplicaLaunch],
        *,
        cancelled: threading.Event,
        progress: Callable[[str], None],
    ) -> list[ReplicaLaunch]:
        """Make the launches runnable (e.g. build an image); returns them, possibly updated."""
        ...

    def reserve_port(self, placement: Placement) -> int:
        """A TCP port that is free on the placement's host now, for the replica's server."""
        ...

    def start(self, launch: ReplicaLaunch) -> ReplicaHandle:
        """Start the replica without waiting for it; its output goes to `launch.log_path`."""
        ...

    def poll(self, handle: ReplicaHandle) -> ReplicaStatus:
        """Non-blocking, idempotent status of a replica (started here or by another process)."""
        ...

    def stop(self, handles: Sequence[ReplicaHandle], *, grace_seconds: float) -> None:
        """Stop replicas: polite signal, `grace_seconds`, then kill. Returns when all are gone."""
        ...

    def read_file(self, handle: ReplicaHandle, path: str) -> str | None:
        """The text of a file the replica wrote (e.g. its metric file), None if absent."""
        ...

    def release(self, handles: Sequence[ReplicaHandle]) -> None:
        """Free what the replicas held (containers, remote dirs); after stop or exit. Idempotent."""
        ...

    def fetch_dir(self, handle: ReplicaHandle, path: str, dest: str) -> bool:
        """Copy the directory `path` (as the replica sees it, e.g. its AIP_CHECKPOINT_DIR) into
        the local directory `dest`, which must not exist yet. Atomic: `dest` appears complete
        or not at all. Works while the replica runs and after it ended (its files stay). A
        copy taken while the replica writes is retried until the directory's listing (names,
        sizes, modification times) is the same before and after it, at least
        `SETTLE_SECONDS` apart. False, and nothing created, if `path` is missing, holds no
        file, or never held still for a whole copy. `ExecutorError` if the replica's machine
        cannot be reached."""
        ...

    def adopt(self, handle: ReplicaHandle, launch: ReplicaLaunch) -> None:
        """Take over a running replica another process started (`resume`): resume whatever this
        executor does for its own replicas (e.g. copying the replica's output into
        `launch.log_path`, from where it stopped), so its log goes on without gaps or repeats."""
        ...

    def find(self, launch: ReplicaLaunch) -> ReplicaHandle | None:
        """The handle of this launch's replica if it was started (by any process) though no
        handle was recorded: a controller killed between `start` and writing the handle
        down. `resume` adopts it instead of starting the replica a second time. None when
        there is none, or when this executor cannot tell (then `start` must replace an earlier
        incarnation, never run beside it)."""
        ...

    def close(self) -> None:
        """Drop connections and helper threads; the executor is not used afterwards."""
        ...

    # What only some kinds do; `ExecutorBase` holds the defaults, so callers never ask
    # whether an executor has a capability.

    #: Seconds past `scheduling.timeout` before a job is failed for it: the time this kind's
    #: replicas may need to start counting (a Slurm allocation's start-up).
    timeout_grace_seconds: float

    def share_notice(self, spec: Any) -> str | None:
        """One line saying how this executor shares a job's CPUs and memory out, where that
        differs from Vertex's whole machines (Ray); None where there is nothing to say."""
        ...

    def gpu_leases(self, host: str) -> Any:
        """The host-wide GPU leases of inventory host `host`, held on that host itself (SSH);
        None where this executor runs on no host but this machine."""
        ...

    def settings(self) -> dict[str, Any]:
        """What a job's record keeps of this executor so that `resume` builds it the same way
        (Slurm's partition, account, QOS, shared directory); empty when nothing matters."""
        ...

    def cancel_leftovers(self, job_id: str, *, study: bool) -> list[str]:
        """Cancel what a dead controller of job `job_id` (a study's: its trials') left with the
        cluster that no stored handle names (a Slurm allocation still pending); the ids
        cancelled. Raises `ExecutorError` where the cluster cannot be reached."""
        ...


class ExecutorBase:
    """Defaults for the contract's optional capabilities; executors subclass it.

    `check` asks `command_for` about every launch (which raises for a replica with nothing to
    run); `ready` asks nothing; `adopt` has nothing to resume; `close` has nothing to drop.
    `command_for` defaults to the process runtime's argv. No start-up grace, no share notice,
    no remote leases, no settings to keep, no leftovers to cancel.
    """

    name: str = ""
    timeout_grace_seconds: float = 0.0
    #: The interpreter for `python -m` / `.py` entrypoints of process replicas.
    python: str = "python3"

    def check(self, launches: Sequence[ReplicaLaunch]) -> None:
        for launch in launches:
            self.command_for(launch)

    def command_for(self, launch: ReplicaLaunch) -> list[str]:
        return process_argv(launch, self.python)

    def ready(self, launches: Sequence[ReplicaLaunch]) -> None:
        return None  # nothing to ask before starting

    def adopt(self, handle: ReplicaHandle, launch: ReplicaLaunch) -> None:
        return None  # replicas whose logs are written where they run need nothing

    def find(self, launch: ReplicaLaunch) -> ReplicaHandle | None:
        return None  # cannot tell: `start` replaces an earlier incarnation

    def close(self) -> None:
        return None

    def fetch_dir(self, handle: ReplicaHandle, path: str, dest: str) -> bool:
        """The replica's files are on this machine (processes; containers bind-mount them)."""
        return copy_dir_atomically(path, dest)

    def share_notice(self, spec: Any) -> str | None:
        return None

    def gpu_leases(self, host: str) -> Any:
        return None

    def settings(self) -> dict[str, Any]:
        return {}

    def cancel_leftovers(self, job_id: str, *, study: bool) -> list[str]:
        return []


#: How long a directory's listing must stay the same around a copy for the copy to count as
#: whole. A file being rewritten in place is empty or short for a moment; a copy taken within
#: that moment sees the same listing before and after unless the two are this far apart.
SETTLE_SECONDS = 0.2


def copy_dir_atomically(src: str, dest: str, *, attempts: int = 5) -> bool:
    """Copy local directory `src` to `dest` (absent), atomically and consistently: the copy
    goes to a sibling temp directory, is kept only if `src`'s listing (names, sizes,
    modification times in ns) was the same before and after it, `SETTLE_SECONDS` apart at
    least (else retried, up to `attempts`), then renamed into place. False, and nothing
    created, if `src` is missing or holds no file, or never held still for a whole copy."""
    import os
    import shutil
    import time as _time

    if not os.path.isdir(src):
        return False
    dest = dest.rstrip("/") or dest
    for attempt in range(attempts):
        listed_at = _time.monotonic()
        before = dir_listing(src)
        if before == []:
            return False
        if before is not None:
            os.makedirs(os.path.dirname(os.path.abspath(dest)), exist_ok=True)
            tmp = f"{dest}.tmp-{os.getpid()}-{attempt}"
            shutil.rmtree(tmp, ignore_errors=True)
            try:
                shutil.copytree(src, tmp, symlinks=True)
            except (shutil.Error, OSError):
                pass  # a file went away mid-copy: the listing check below retries
            else:
                _time.sleep(max(0.0, listed_at + SETTLE_SECONDS - _time.monotonic()))
                if dir_listing(src) == before:
                    os.rename(tmp, dest)
                    return True
            shutil.rmtree(tmp, ignore_errors=True)
        _time.sleep(0.1 * (attempt + 1))
    return False


def dir_listing(root: str) -> list[tuple[str, int, int]] | None:
    """(relative path, size, mtime in ns) of every file under `root`, sorted; None when a file
    vanished while listing (the directory is changing). What `fetch_dir` compares before and
    after a copy; the SSH executor runs the same listing on its hosts."""
    import os

    out = []
    for here, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(here, name)
            try:
                st = os.stat(path)
            except FileNotFoundError:
                return None
            out.append((os.path.relpath(path, root), st.st_size, st.st_mtime_ns))
    return sorted(out)


def place_seed_dirs(launch: ReplicaLaunch) -> None:
    """Fill `launch.seed_dirs` on this machine (processes, and containers that bind-mount the
    destinations at the same path): each destination becomes a copy of its source, replacing
    what was there. The copy is taken beside the destination and renamed into place, so the
    replica (started afterwards) never sees part of it. Raises `ExecutorError`."""
    import os
    import shutil

    from vcli.errors import ExecutorError

    for src, dest in launch.seed_dirs:
        dest = dest.rstrip("/") or dest
        tmp = f"{dest}.seed-{os.getpid()}"
        try:
            shutil.rmtree(tmp, ignore_errors=True)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            shutil.copytree(src, tmp, symlinks=True)
            shutil.rmtree(dest, ignore_errors=True)
            os.rename(tmp, dest)
        except OSError as e:
            shutil.rmtree(tmp, ignore_errors=True)
            raise ExecutorError(f"Cannot place {src} at {dest} for replica {launch.task_name}: "
                                f"{e.strerror or e}") from None


def process_argv(launch: ReplicaLaunch, python: str) -> list[str]:
    """The argv a process runtime runs for a replica (no image: the code runs in place).

    Precedence as on Vertex: an explicit command (containerSpec.command / --command) wins;
    then the local package's module or script (gcloud's autopackaging entrypoint), then
    pythonPackageSpec.pythonModule. `python` is the interpreter for modules and .py scripts.
    """
    if launch.command:
        return [*launch.command, *launch.args]
    lp = launch.local_package
    if lp is not None and lp.script:
        runner = [python] if lp.script.endswith(".py") else ["/bin/bash"]
        return [*runner, lp.script, *launch.args]
    module = (lp.python_module if lp is not None else None) or launch.python_module
    if module:
        return [python, "-m", module, *launch.args]
    from vcli.errors import InvalidValueError

    raise InvalidValueError(
        "--worker-pool-spec",
        f"{launch.task_name} has container-image-uri={launch.image_uri} but no command: processes run code "
        "directly, so give --command (or containerSpec.command), or run containers with --executor=docker.",
    )
