"""Host-wide GPU leases: a GPU index of a host is held by at most one replica at a time,
whichever vcli process, Unix user or controller started it. Standard library only, no vcli
imports (the supervisor and `vcli hosts gpus` use it without vcli's dependencies).

The mechanism is the kernel's: one lock file per GPU index in a host-wide lease directory
(`$VCLI_GPU_LEASE_DIR`, default `/tmp/vcli-gpu-leases`, created sticky and world-writable like
/tmp), `gpu<index>.lock`, locked with `flock(LOCK_EX)`. A lock belongs to an open file
description, so:

- the controller takes the locks of a job's (or trial's) GPUs all at once or not at all
  (`LeaseDir.acquire`, non-blocking: nobody ever holds one GPU while waiting for another, so two
  studies each wanting two GPUs never deadlock), writes the holder's record into the lock file,
  and hands the descriptor to the replica's supervisor (inherited over exec); from then on the
  supervisor alone holds it, and the lock lives exactly as long as the supervisor process;
- `kill -9` of the supervisor, of the controller and supervisor, of the whole tree, or a reboot
  drops the lock at once (the kernel closes the descriptor); no stale lease can block a GPU;
- a controller that dies does not free its replicas' GPUs: their supervisors still hold them,
  and a resumed controller re-attaches without taking them again.

The record is a small JSON object (job, trial, study, replica, user, pid, since, ...) written
into the lock file by the holder; it is read only while the lock is held (a free GPU's file may
keep its last holder's record). `probe` tells held from free by trying a shared lock for a few
microseconds; an acquirer that meets such a probe retries a few times before it gives up.

A process started outside vcli cannot be kept off a GPU by any of this: leases are advisory
between vcli processes. `nvidia_busy` reports GPUs whose memory a process holds that no lease
accounts for, so placement can treat them as busy too.

On an SSH host the same directory lives on the host, and a controller elsewhere reaches it
through a lease server it starts there over SSH (`vcli.placement.leaseserver`, shipped beside
this file): the server holds the locks for the controller and hands a placed replica's
descriptors to the replica's wrapper, so the lease again lives exactly as long as the
supervisor.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import pwd
import shutil
import socket
import stat
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

__all__ = [
    "DEFAULT_DIR",
    "ENV_DIR",
    "Lease",
    "LeaseBusy",
    "LeaseDir",
    "Waiting",
    "describe_holder",
    "local_leases",
    "nvidia_busy",
]

#: The environment variable that names the lease directory (all vcli users of a host must agree).
ENV_DIR = "VCLI_GPU_LEASE_DIR"
DEFAULT_DIR = "/tmp/vcli-gpu-leases"
#: How often a supervisor touches its lock files, so that /tmp cleaners (systemd-tmpfiles ages
#: files by their times) never remove a lock file that is held.
TOUCH_SECONDS = 3600.0
#: An acquirer retries a lock this many times (1 ms apart) before it counts the GPU as held: a
#: `probe` from another process holds a shared lock for microseconds.
_RETRIES = 3


class LeaseBusy(Exception):
    """A GPU is held by another replica; `holder` is its record ({} when unreadable)."""

    def __init__(self, index: int, holder: Mapping[str, Any]) -> None:
        why = holder.get("unavailable") if isinstance(holder.get("unavailable"), str) else None
        super().__init__(f"GPU {index} cannot be leased: {why}" if why else
                         f"GPU {index} is held by {describe_holder(holder)}")
        self.index = index
        self.holder = dict(holder)


@dataclass
class Lease:
    """One held GPU lock: the open descriptor is the lease."""

    index: int
    fd: int
    path: str

    def write(self, record: Mapping[str, Any]) -> None:
        """Replace the holder record in the lock file (best effort: a read-only lock file keeps
        none, which only makes `hosts gpus` less informative)."""
        data = json.dumps(dict(record), sort_keys=True).encode()
        try:
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, data, 0)
        except OSError:
            pass

    def record(self) -> dict[str, Any]:
        return _read_record(self.fd) if self.fd >= 0 else {}

    def close(self) -> None:
        if self.fd >= 0:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = -1


def current_user() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


def base_record(**fields: Any) -> dict[str, Any]:
    """A holder record: who (user, uid, host, pid) and since when, plus `fields` (None dropped)."""
    rec: dict[str, Any] = {"user": current_user(), "uid": os.geteuid(), "host": socket.gethostname(),
                           "pid": os.getpid(), "since": time.time()}
    rec.update({k: v for k, v in fields.items() if v is not None})
    return rec


def describe_holder(rec: Mapping[str, Any], *, now: float | None = None) -> str:
    """`trial 4 of study 179556… started by alice 3m ago` (whatever the record holds)."""
    if not rec:
        return "another vcli replica"
    if isinstance(rec.get("unavailable"), str):  # not a holder: why the lease could not be asked for
        return str(rec["unavailable"])
    what = []
    if rec.get("trial") and rec.get("study"):
        what.append(f"trial {rec['trial']} of study {_short(str(rec['study']))}")
    elif rec.get("job"):
        what.append(f"job {_short(str(rec['job']))}")
    if rec.get("replica"):
        what.append(f"replica {rec['replica']}")
    text = ", ".join(what) or "a vcli replica"
    if rec.get("user"):
        text += f" started by {rec['user']}"
    if isinstance(rec.get("since"), (int, float)):
        text += f" {_ago((now or time.time()) - float(rec['since']))} ago"
    return text


def _short(ident: str) -> str:
    return ident  # vcli's ids share their leading digits (they grow with time): never cut them


def _ago(seconds: float) -> str:
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600}h"


class LeaseDir:
    """The lease directory of this host. Thread-safe; keeps the leases this process holds."""

    def __init__(self, path: str | None = None) -> None:
        self.path = os.path.abspath(path or os.environ.get(ENV_DIR) or DEFAULT_DIR)
        self._lock = threading.Lock()
        self._held: dict[int, Lease] = {}

    # ------------------------------------------------------------------ files

    def ensure(self) -> None:
        """Create the directory (mode 1777, like /tmp) if it does not exist."""
        try:
            os.mkdir(self.path, 0o1777)
        except FileExistsError:
            return
        except FileNotFoundError:
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            return self.ensure()
        try:
            os.chmod(self.path, 0o1777)  # the umask took bits away
        except OSError:
            pass

    def lock_path(self, index: int) -> str:
        return os.path.join(self.path, f"gpu{int(index)}.lock")

    def _open(self, index: int, *, create: bool) -> int | None:
        """A descriptor of the lock file (read-write when allowed). O_CREAT is only used for a
        file that does not exist: `fs.protected_regular` refuses O_CREAT on another user's file
        in a sticky directory, even when its mode would allow the open."""
        path = self.lock_path(index)
        for _ in range(10):
            for flags in (os.O_RDWR, os.O_RDONLY):
                try:
                    fd = os.open(path, flags | os.O_CLOEXEC | os.O_NONBLOCK)
                except PermissionError:
                    continue
                except FileNotFoundError:
                    break
                if not stat.S_ISREG(os.fstat(fd).st_mode):  # a directory or a FIFO someone put there
                    os.close(fd)
                    raise OSError(errno.EINVAL, "not a lock file", path)
                return fd
            else:
                raise PermissionError(errno.EACCES, f"cannot open {path}")
            if not create:
                return None
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
            except FileExistsError:
                continue
            try:
                os.fchmod(fd, 0o666)  # every user locks (and records in) the same file
            except OSError:
                pass
            return fd
        raise OSError(errno.EAGAIN, f"cannot open {path}")

    # ------------------------------------------------------------------ leases

    def acquire(self, indices: Iterable[int], record: Mapping[str, Any]) -> list[Lease]:
        """Lock every index of `indices` or none (non-blocking); write `record` into each.

        Raises `LeaseBusy` naming the first index another holder has (everything taken here is
        given back first). Indices are locked in ascending order.
        """
        self.ensure()
        got: list[Lease] = []
        try:
            for index in sorted(set(int(i) for i in indices)):
                got.append(self._lock_one(index))
        except BaseException:
            for lease in got:
                lease.close()
            raise
        for lease in got:
            lease.write({**record, "gpu": lease.index})
        with self._lock:
            for lease in got:
                self._held[lease.index] = lease
        return got

    def _lock_one(self, index: int) -> Lease:
        for _ in range(10):
            fd = self._open(index, create=True)
            assert fd is not None
            for attempt in range(_RETRIES):
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if attempt + 1 == _RETRIES:
                        holder = _read_record(fd)
                        os.close(fd)
                        raise LeaseBusy(index, holder) from None
                    time.sleep(0.001)
            # The file we locked must still be the one at the path (not removed meanwhile).
            try:
                same = os.stat(self.lock_path(index)).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                return Lease(index, fd, self.lock_path(index))
            os.close(fd)
        raise OSError(errno.EAGAIN, f"the lock file of GPU {index} keeps changing")

    def held_here(self, index: int) -> Lease | None:
        """The lease of `index` this process still holds (before handing it to a supervisor)."""
        with self._lock:
            return self._held.get(int(index))

    def release(self, indices: Iterable[int]) -> None:
        """Close this process's descriptors of `indices` (idempotent). A supervisor that was
        handed a lease keeps holding it until it exits."""
        with self._lock:
            leases = [self._held.pop(int(i), None) for i in indices]
        for lease in leases:
            if lease is not None:
                lease.close()

    def probe(self, indices: Iterable[int]) -> dict[int, dict[str, Any] | None]:
        """index -> the holder's record while the GPU is leased (by anyone, this process
        included), None while it is free."""
        out: dict[int, dict[str, Any] | None] = {}
        for index in indices:
            index = int(index)
            mine = self.held_here(index)
            if mine is not None:
                out[index] = _read_record(mine.fd)
                continue
            fd = self._open(index, create=False)  # OSError: a lock file nobody can use is never "free"
            if fd is None:
                out[index] = None
                continue
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except BlockingIOError:
                    out[index] = _read_record(fd)
                else:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    out[index] = None
            finally:
                os.close(fd)
        return out

    # ------------------------------------------------------------------ waiting queue

    def queue(self, record: Mapping[str, Any]) -> Waiting:
        """Enter `record` in this host's waiting queue until the returned entry is closed."""
        return Waiting(self, record)

    def nvidia_busy(self) -> dict[int, str]:
        """`nvidia_busy()` of this host: GPUs a process vcli did not start uses."""
        return nvidia_busy()

    def waiters(self) -> list[dict[str, Any]]:
        """Records of the jobs and trials that wait for GPUs on this host now (oldest first)."""
        qdir = os.path.join(self.path, "queue")
        try:
            names = os.listdir(qdir)
        except OSError:
            return []
        out = []
        for name in names:
            path = os.path.join(qdir, name)
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except BlockingIOError:
                    rec = _read_record(fd)
                    if rec:
                        # Seconds since the waiter last tried (`Waiting.touch`), by this host's clock.
                        rec["idle"] = round(max(0.0, time.time() - os.fstat(fd).st_mtime), 3)
                        out.append(rec)
                else:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    _unlink_quietly(path)  # a waiter that died: its entry goes
            finally:
                os.close(fd)
        return sorted(out, key=lambda r: float(r.get("since") or 0))


class Waiting:
    """An entry in the host's waiting queue while a job or trial waits for GPUs (shown by
    `vcli hosts gpus`). Held by a lock like a lease: a waiter that dies leaves no entry."""

    def __init__(self, leases: LeaseDir, record: Mapping[str, Any]) -> None:
        self.fd = -1
        self.path = ""
        try:
            leases.ensure()
            qdir = os.path.join(leases.path, "queue")
            try:
                os.mkdir(qdir, 0o1777)
                os.chmod(qdir, 0o1777)
            except FileExistsError:
                pass
            self.path = os.path.join(qdir, f"{socket.gethostname()}-{os.getpid()}-{id(self):x}.json")
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            fcntl.flock(self.fd, fcntl.LOCK_EX)
            os.write(self.fd, json.dumps(dict(record), sort_keys=True).encode())
        except OSError:
            self.close()  # the queue is informative only: never fail a job for it

    def touch(self) -> None:
        """The waiter tried again (and is still waiting): `waiters()` shows it as `tried` now.
        A waiter that stopped trying (a suspended process) loses its place in the queue."""
        if self.fd >= 0:
            try:
                os.utime(self.fd)
            except OSError:
                pass

    def close(self) -> None:
        if self.fd >= 0:
            _unlink_quietly(self.path)
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = -1


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _read_record(fd: int) -> dict[str, Any]:
    try:
        data = os.pread(fd, 65536, 0)
        rec = json.loads(data.decode("utf-8", errors="replace")) if data else {}
    except (OSError, ValueError, RecursionError):  # the files are world-writable: anything may be in them
        return {}
    return rec if isinstance(rec, dict) else {}


_LOCAL: dict[str, LeaseDir] = {}
_LOCAL_LOCK = threading.Lock()


def local_leases(path: str | None = None) -> LeaseDir:
    """The lease directory `path` of this machine (default: $VCLI_GPU_LEASE_DIR, else
    DEFAULT_DIR), one object per path and process: it keeps the leases held here, which the
    executor that starts a replica hands to the replica's supervisor."""
    path = os.path.abspath(path or os.environ.get(ENV_DIR) or DEFAULT_DIR)
    with _LOCAL_LOCK:
        if path not in _LOCAL:
            _LOCAL[path] = LeaseDir(path)
        return _LOCAL[path]


def nvidia_busy(leased: Iterable[int] = ()) -> dict[int, str]:
    """GPU index -> why it is busy, for GPUs whose memory a process holds that is not vcli's
    (no lease of `leased` accounts for it), by `nvidia-smi`. {} without nvidia-smi."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return {}
    try:
        gpus = subprocess.run([smi, "--query-gpu=index,uuid", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=10).stdout
        apps = subprocess.run([smi, "--query-compute-apps=gpu_uuid,pid,used_memory", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    index_of = {}
    for line in gpus.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2 and parts[0].isdigit():
            index_of[parts[1]] = int(parts[0])
    skip = set(int(i) for i in leased)
    out: dict[int, str] = {}
    for line in apps.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3 or parts[0] not in index_of:
            continue
        index = index_of[parts[0]]
        if index in skip or index in out:
            continue
        out[index] = f"used by a process vcli did not start (pid {parts[1]}, {parts[2]} MiB)"
    return out
