"""Host-wide GPU leases: a GPU index of a host is held by at most one replica at a time,
whichever vcli process, Unix user or controller started it. Standard library only, no vcli
imports (the supervisor and `vcli hosts gpus` use it without vcli's dependencies).

The mechanism is the kernel's: lock files in a host-wide lease directory
(`$VCLI_GPU_LEASE_DIR`, default `/tmp/vcli-gpu-leases`, created sticky and world-writable like
/tmp), one subdirectory per Unix user that only that user can write (`uid-<uid>/gpu<index>.lock`,
see `LeaseDir`), locked with `flock(LOCK_EX)`. A lock belongs to an open file description, so:

- the controller takes a job's (or trial's) GPUs all at once or not at all (non-blocking: two
  studies each wanting two GPUs never deadlock) and hands the descriptors to the replica's
  supervisor (inherited over exec): the lease lives exactly as long as the supervisor;
- `kill -9` of anything, or a reboot, drops the lock at once: no stale lease blocks a GPU;
- a controller that dies leaves its replicas' GPUs held by their supervisors; `resume`
  re-attaches without taking them again.

The holder's record is JSON in the lock file. `probe` tries a shared lock for microseconds.
Leases are advisory between vcli processes (`vcli.placement.gpuinfo` reports GPUs others use). On an SSH
host a lease server (`vcli.placement.leaseserver`, shipped beside this file) holds the locks
for a controller elsewhere and hands each replica's descriptors to its wrapper.
"""

from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import socket
import stat
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

try:
    from vcli.placement import leasefiles as _files
except ImportError:  # the copy shipped to an SSH host: the lease server loaded its sibling first
    import vcli_leasefiles as _files  # type: ignore[no-redef]

_check_own, _open_dir, _open_file = _files.check_own, _files.open_dir, _files.open_file
_try_shared, _user, _read_record = _files.try_shared, _files.user_name, _files.read_record
_held_files, _lock_index, _unlink_quietly = _files.held_files, _files.lock_index, _files.unlink_quietly
_lock_share, UNITS = _files.lock_share, _files.UNITS

__all__ = [
    "DEFAULT_DIR",
    "ENV_DIR",
    "Lease",
    "LeaseBusy",
    "LeaseDir",
    "Waiting",
    "describe_holder",
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
    #: How much of the GPU: `UNITS` (all of it), or fewer for a share (`LeaseDir.acquire(share=)`).
    units: int = UNITS

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
    return _user(os.geteuid())


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
        what.append(f"trial {rec['trial']} of study {rec['study']}")  # ids are never cut: they share their lead
    elif rec.get("job") or rec.get("command"):
        what.append(f"job {rec['job']}" if rec.get("job") else f"`{rec['command']}`")
    if rec.get("replica"):
        what.append(f"replica {rec['replica']}")
    text = ", ".join(what) or "a vcli replica"
    if rec.get("user"):
        text += f" started by {rec['user']}"
    if isinstance(rec.get("since"), (int, float)):
        text += f" {_ago((now or time.time()) - float(rec['since']))} ago"
    return text


def _ago(seconds: float) -> str:
    s = max(0, int(seconds))
    if s < 3600:
        return f"{s}s" if s < 60 else f"{s // 60}m"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m" if s < 86400 else f"{s // 86400}d{(s % 86400) // 3600}h"


class LeaseDir:
    """The lease directory of this host. Thread-safe; keeps the leases this process holds.

    Layout: `DIR/uid-<uid>/gpu<index>.lock` and `queue-*.json`, one subdirectory per Unix user,
    made by that user (0755): nobody else but root can remove or replace a file in it, whoever
    owns DIR. DIR's owner may rename it (not empty or move it out), so every subdirectory is
    searched. Taking GPU i locks the taker's own file, then checks every other `gpu<i>.lock`
    (and an older vcli's flat `DIR/gpu<i>.lock`): one held gives the own lock back. Two racing
    takers both back off, never both hold (lock, then check). Every open is `O_NOFOLLOW`; vcli
    writes only files it made in its own subdirectory; a DIR writable by others must be sticky;
    anything else unfit is an `OSError` naming the path and the fix.
    """

    def __init__(self, path: str | None = None, *, info: Any = None) -> None:
        self.path = os.path.abspath(path or os.environ.get(ENV_DIR) or DEFAULT_DIR)
        self._info = info
        self._lock = threading.Lock()
        self._held: dict[int, Lease] = {}
        self._shares: list[Lease] = []
        self.own = f"uid-{os.geteuid()}"

    # ------------------------------------------------------------------ files

    def _top(self, *, create: bool) -> int | None:
        """A descriptor of DIR (None: it does not exist and `create` is False)."""
        if create:
            try:
                os.mkdir(self.path, 0o1777)
            except FileExistsError:
                pass
            except FileNotFoundError:
                os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
                return self._top(create=True)
            else:
                os.chmod(self.path, 0o1777)  # ours: the umask took bits away
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(st.st_mode) and st.st_uid not in (0, os.geteuid()):
            raise OSError(errno.EPERM, f"a symbolic link owned by {_user(st.st_uid)}, not the lease directory",
                          self.path)
        fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        st = os.fstat(fd)
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
            os.close(fd)
            raise OSError(errno.EPERM, "writable by other users but not sticky (any user could replace the "
                          f"others' leases; run `chmod +t {self.path}`)", self.path)
        return fd

    def _own_dir(self, *, create: bool) -> int:
        """A descriptor of this user's subdirectory, checked: a real directory this user owns
        that others can read but not write."""
        top = self._top(create=create)
        if top is None:
            raise FileNotFoundError(errno.ENOENT, "no such directory", self.path)
        path = os.path.join(self.path, self.own)
        try:
            if create:
                try:
                    os.mkdir(self.own, 0o755, dir_fd=top)
                except FileExistsError:
                    pass
                else:
                    fd = _open_dir(self.own, top, path)
                    os.fchmod(fd, 0o755)  # ours: the umask must not hide the leases from the others
                    return fd
            fd = _open_dir(self.own, top, path)
        finally:
            os.close(top)
        try:
            _check_own(fd, path)
        except OSError:
            os.close(fd)
            raise
        return fd

    def _lock_files(self, index: int) -> list[tuple[str, int, int]]:
        """(path, read-only descriptor, units) of every lock file of GPU `index` in DIR: each
        user's whole-GPU and share files, and an older vcli's flat one. Symbolic links and what
        is not a regular file are skipped (only their owner could have put them there, and they
        hold no lease)."""
        top = self._top(create=False)
        if top is None:
            return []
        out: list[tuple[str, int, int]] = []

        def visit(entry: str, sub: int) -> None:
            if entry == self.own:
                _check_own(sub, os.path.join(self.path, entry))
            try:
                names = sorted(os.listdir(sub))
            except OSError:
                names = []
            for name in names:
                found = _lock_share(name)
                if found is None or found[0] != index:
                    continue
                path = os.path.join(self.path, entry, name)
                try:
                    fd = _open_file(name, sub, strict=entry == self.own and found[1] == UNITS)
                except OSError as e:
                    raise OSError(e.errno, e.strerror, path) from None
                if fd is not None:
                    out.append((path, fd, found[1]))

        name = f"gpu{int(index)}.lock"
        try:
            legacy = _open_file(name, top)
            if legacy is not None:
                out.append((os.path.join(self.path, name), legacy, UNITS))
            self._each_subdir(top, visit)
        except BaseException:
            for _, fd, _ in out:
                os.close(fd)
            raise
        finally:
            os.close(top)
        return out

    def _each_subdir(self, top: int, visit: Any, *, tolerant: bool = False) -> None:
        """`visit(name, descriptor)` for every directory in DIR, whatever its name (the owner of
        DIR may rename another user's); links and files are skipped, and with `tolerant` too
        what cannot be opened."""
        try:
            entries = sorted(os.listdir(top))
        except OSError as e:
            raise OSError(e.errno, e.strerror, self.path) from None
        for entry in entries:
            try:
                sub = os.open(entry, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=top)
            except OSError as e:
                if tolerant or e.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                    continue
                raise OSError(e.errno, e.strerror, os.path.join(self.path, entry)) from None
            try:
                visit(entry, sub)
            finally:
                os.close(sub)

    def _held_by(self, index: int, *, skip: str | None = None) -> dict[str, Any] | None:
        """The record of a holder of GPU `index` (of all of it or a share) among all lock files
        (but `skip`), or None."""
        used, holder = self._held_units(index, skip=skip, first=True)
        return holder if used else None

    def _held_units(self, index: int, *, skip: str | None = None, first: bool = False) -> tuple[int, dict[str, Any]]:
        """(units of GPU `index` held by its lock files but `skip`, the record of one holder);
        `first`: stop at the first holder."""
        files = self._lock_files(index)
        used, holder = 0, dict[str, Any]()
        try:
            for path, fd, units in files:
                if path != skip and not _try_shared(fd):
                    share = {"share": units / UNITS} if units < UNITS else {}
                    used, holder = used + units, holder or {**_read_record(fd), **share}
                    if first:
                        break
            return used, holder
        finally:
            for _, fd, _ in files:
                os.close(fd)

    # ------------------------------------------------------------------ leases

    def acquire(self, indices: Iterable[int], record: Mapping[str, Any], *, share: float | None = None) -> list[Lease]:
        """Lock every index of `indices` or none (non-blocking); write `record` into each.
        With `share` (below 1): a share of one GPU, beside other shares of it as long as they
        add up to at most the whole (in 1/`UNITS` steps, rounded up), never beside a whole lease.

        Raises `LeaseBusy` naming the first index another holder has (everything taken here is
        given back first). Indices are locked in ascending order.
        """
        wanted = sorted(set(int(i) for i in indices))
        units = UNITS if share is None or share >= 1 else max(1, min(UNITS - 1, math.ceil(share * UNITS - 1e-6)))
        if units < UNITS and len(wanted) != 1:
            raise ValueError(f"a share of a GPU is of one GPU, not of {wanted}")
        got: list[Lease] = []
        own = self._own_dir(create=True)
        try:
            for index in wanted:
                got.append(self._lock_one(own, index) if units == UNITS else self._lock_share(own, index, units))
        except BaseException:
            for lease in got:
                lease.close()
            raise
        finally:
            os.close(own)
        since = time.time()  # after the locks: a lease policy orders holders by it (`leasepolicy.over_limit`)
        for lease in got:
            lease.write({**record, "gpu": lease.index, "since": since, **({"share": units / UNITS} if units < UNITS else {})})
        with self._lock:
            for lease in got:
                if units == UNITS:
                    self._held[lease.index] = lease
                else:
                    self._shares.append(lease)
        return got

    def _lock_share(self, own: int, index: int, units: int) -> Lease:
        """Lock a new share file of GPU `index` holding `units`; then any whole lease of it, or
        shares that add up with this one to more than the whole, make us give it back."""
        for _ in range(10):
            for _name, _fd in _held_files(own, lambda n: (_lock_share(n) or (0, UNITS))[1] < UNITS, unlink_free=True):
                pass  # shares of ours that nobody holds any more (their holder died) go
            name = f"gpu{int(index)}.{units}u.{os.urandom(4).hex()}.lock"
            path = os.path.join(self.path, self.own, name)
            try:
                fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=own)
            except OSError as e:
                raise OSError(e.errno, e.strerror, path) from None
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new file: nobody else has it
            try:  # another process of ours may have taken it for a dead holder's before we locked it
                same = os.stat(name, dir_fd=own, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            try:
                used, holder = self._held_units(index, skip=path)
            except BaseException:
                os.close(fd)
                _unlink_quietly(name, own)
                raise
            if used + units > UNITS:
                os.close(fd)
                _unlink_quietly(name, own)
                raise LeaseBusy(index, holder)
            return Lease(index, fd, path, units)
        raise OSError(errno.EAGAIN, f"the share files of GPU {index} keep changing", os.path.join(self.path, self.own))

    def held_share(self, index: int, **owner: Any) -> Lease | None:
        """The share of GPU `index` this process still holds whose record says `owner` (`job`,
        `replica`): several replicas of one process may hold shares of one GPU."""
        with self._lock:
            shares = [lease for lease in self._shares if lease.index == int(index)]
        for lease in shares:
            rec = lease.record()
            if all(rec.get(k) == v for k, v in owner.items()):
                return lease
        return None

    def share_at(self, path: str) -> Lease | None:
        """The share this process still holds whose lock file is `path` (its key)."""
        with self._lock:
            return next((lease for lease in self._shares if lease.path == path), None)

    def release_share(self, lease: Lease) -> None:
        """Close this process's descriptor of a share (handed to a supervisor, or not used)."""
        with self._lock:
            if lease in self._shares:
                self._shares.remove(lease)
        lease.close()

    def _lock_one(self, own: int, index: int) -> Lease:
        path = os.path.join(self.path, self.own, f"gpu{int(index)}.lock")
        name = os.path.basename(path)
        for _ in range(10):
            try:
                fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o644,
                             dir_fd=own)
            except OSError as e:
                raise OSError(e.errno, e.strerror, path) from None
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                os.close(fd)
                raise OSError(errno.EINVAL, "not a lock file of yours", path)
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
                same = os.stat(name, dir_fd=own, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            # Ours is locked: now any other holder of the GPU makes us give it back.
            try:
                other = self._held_by(index, skip=path)
            except BaseException:
                os.close(fd)
                raise
            if other is not None:
                os.close(fd)
                raise LeaseBusy(index, other)
            return Lease(index, fd, path)
        raise OSError(errno.EAGAIN, f"the lock file of GPU {index} keeps changing", path)

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
        included), None while it is free. `OSError`: the directory cannot be used (a GPU
        nobody can lease is never "free")."""
        out: dict[int, dict[str, Any] | None] = {}
        for index in indices:
            index = int(index)
            mine = self.held_here(index)
            out[index] = _read_record(mine.fd) if mine is not None else self._held_by(index)
        return out

    # ------------------------------------------------------------------ waiting queue

    def queue(self, record: Mapping[str, Any]) -> Waiting:
        """Enter `record` in this host's waiting queue until the returned entry is closed."""
        return Waiting(self, record)

    def nvidia_busy(self) -> dict[int, str]:
        """GPUs of this host that a process vcli did not start uses (`gpuinfo.nvidia_busy`)."""
        return self.info().nvidia_busy()

    def policy(self) -> dict[str, Any]:
        """The host's lease policy file (`gpuinfo.read_policy`)."""
        return self.info().read_policy(self.path)

    def write_policy(self, text: str) -> dict[str, Any]:
        """Write the host's lease policy file (`gpuinfo.write_policy`)."""
        return self.info().write_policy(self.path, text)

    def gpu_processes(self) -> dict[int, list[dict[str, Any]]]:
        """Who holds GPU memory on this host (`gpuinfo.gpu_processes`)."""
        return self.info().gpu_processes()

    def info(self) -> Any:  # vcli.placement.gpuinfo: the constructor's copy (a lease server's), else vcli's
        if self._info is None:
            import importlib

            self._info = importlib.import_module("vcli.placement.gpuinfo")
        return self._info

    def holders(self) -> list[dict[str, Any]]:
        """The record of every lease held on this host now, whoever holds it, with `gpu` (the
        index, from the file's name) and `uid`/`user` (the owner of the subdirectory the lock
        file is in: the record itself is only what its holder wrote). What a lease policy counts."""
        try:
            top = self._top(create=False)
        except OSError:
            return []
        if top is None:
            return []
        out: list[dict[str, Any]] = []

        def visit(entry: str, sub: int) -> None:
            uid = os.fstat(sub).st_uid
            for name, fd in _held_files(sub, lambda n: _lock_index(n) is not None):
                index, units = _lock_share(name) or (0, UNITS)
                out.append({**_read_record(fd), "gpu": index, "share": units / UNITS, "uid": uid, "user": _user(uid)})

        try:
            self._each_subdir(top, visit, tolerant=True)
        except OSError:
            pass
        finally:
            os.close(top)
        return sorted(out, key=lambda r: (r["gpu"], r["uid"]))

    def waiters(self) -> list[dict[str, Any]]:
        """Records of the jobs and trials that wait for GPUs on this host now (oldest first)."""
        try:
            top = self._top(create=False)
        except OSError:
            top = None
        out: list[dict[str, Any]] = []
        if top is None:
            return out
        try:
            self._each_subdir(top, lambda entry, sub: out.extend(_waiters_in(sub, mine=entry == self.own)),
                              tolerant=True)
        except OSError:
            pass
        finally:
            os.close(top)
        return sorted(out, key=lambda r: float(r.get("since") or 0))


def _waiters_in(sub: int, *, mine: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for _, fd in _held_files(sub, lambda n: n.startswith("queue-") and n.endswith(".json"), unlink_free=mine):
        rec = _read_record(fd)
        if rec:
            # Seconds since the waiter last tried (`Waiting.touch`), by this host's clock.
            rec["idle"] = round(max(0.0, time.time() - os.fstat(fd).st_mtime), 3)
            out.append(rec)
    return out


class Waiting:
    """An entry in the host's waiting queue while a job or trial waits for GPUs (shown by
    `vcli hosts gpus`). Held by a lock like a lease: a waiter that dies leaves no entry."""

    def __init__(self, leases: LeaseDir, record: Mapping[str, Any]) -> None:
        self.fd = -1
        self.path = ""
        try:
            own = leases._own_dir(create=True)
        except OSError:
            return  # the queue is informative only: never fail a job for it
        try:
            name = f"queue-{socket.gethostname()}-{os.getpid()}-{id(self):x}-{os.urandom(4).hex()}.json"
            self.fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                              dir_fd=own)
            self.path = os.path.join(leases.path, leases.own, name)  # ours: close() removes it
            fcntl.flock(self.fd, fcntl.LOCK_EX)
            os.write(self.fd, json.dumps(dict(record), sort_keys=True).encode())
        except OSError:
            self.close()
        finally:
            os.close(own)

    def touch(self) -> None:
        """The waiter tried again: a waiter that stops trying (suspended) loses its place."""
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
        self.path = ""
