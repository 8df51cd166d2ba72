"""Safe file operations in a directory every user of a host can write (the GPU lease
directory, `vcli.placement.gpulease`): nothing is opened through a symbolic link, only regular
files are read, the user's own subdirectory is checked before it is trusted, and records written
by others are read as data that may be anything. Standard library only, no vcli imports: it is
shipped to SSH hosts beside `gpulease.py` (`vcli.placement.leaseserver` loads it first).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import pwd
import stat
from typing import Any, Iterator

__all__ = ["UNITS", "check_own", "held_files", "lock_index", "lock_share", "open_dir", "open_file", "read_record", "try_shared",
           "unlink_quietly", "user_name"]


def held_files(sub: int, wanted: Any, *, unlink_free: bool = False) -> Iterator[tuple[str, int]]:
    """(name, read-only descriptor, closed after the step) of each regular file of directory
    `sub` whose name `wanted` accepts and that somebody holds locked now. With `unlink_free`
    (the user's own directory) a wanted file nobody holds is removed: its holder died."""
    try:
        names = os.listdir(sub)
    except OSError:
        return  # a directory its owner keeps from others: nothing seen
    for name in names:
        fd = open_file(name, sub) if wanted(name) else None
        if fd is None:
            continue
        try:
            if not try_shared(fd):
                yield name, fd
            elif unlink_free:
                unlink_quietly(name, sub)
        finally:
            os.close(fd)


#: A GPU's whole capacity in share units: a share lock file's name says how many it holds.
UNITS = 1000


def lock_share(name: str) -> tuple[int, int] | None:
    """(GPU index, units) of a lock file's name: `gpu3.lock` -> (3, UNITS), the whole GPU;
    `gpu3.250u.ab12cd34.lock` -> (3, 250), a quarter of it; None for other files."""
    if not (name.startswith("gpu") and name.endswith(".lock")):
        return None
    parts = name[3:-5].split(".")
    if len(parts) == 1 and parts[0].isdigit():
        return int(parts[0]), UNITS
    if len(parts) == 3 and parts[0].isdigit() and parts[1][:-1].isdigit() and parts[1].endswith("u"):
        units = int(parts[1][:-1])
        return (int(parts[0]), units) if 0 < units < UNITS else None
    return None


def lock_index(name: str) -> int | None:
    """The GPU index of a lock file's name (whole or share), None for other files."""
    found = lock_share(name)
    return found[0] if found else None


def check_own(fd: int, path: str) -> None:
    """This user's subdirectory `path` (open as `fd`) must be a directory of this user that
    others can read but not write; else an `OSError` says why and the fix."""
    st = os.fstat(fd)
    why = None
    if st.st_uid != os.geteuid():
        why = f"owned by {user_name(st.st_uid)}, not by {user_name(os.geteuid())} (remove it: vcli creates it)"
    elif st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        why = f"writable by other users (they could remove your leases; run `chmod 755 {path}`)"
    elif st.st_mode & 0o005 != 0o005:
        why = f"not readable by other users (their vcli would not see your leases; run `chmod 755 {path}`)"
    if why:
        raise OSError(errno.EPERM, why, path)


def open_dir(name: str, dir_fd: int, path: str) -> int:
    try:
        return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as e:
        why = "a symbolic link or not a directory" if e.errno in (errno.ELOOP, errno.ENOTDIR) else e.strerror
        raise OSError(e.errno, why, path) from None


def open_file(name: str, dir_fd: int, *, strict: bool = False) -> int | None:
    """A read-only descriptor of the regular file `name` in `dir_fd` (never through a link), or
    None; `strict` (the user's own directory): anything but a regular file is an `OSError`."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError as e:
        if e.errno == errno.ENOENT or (not strict and e.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR)):
            return None
        if e.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "a symbolic link, not a lock file") from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        if strict:
            raise OSError(errno.EINVAL, "not a regular file, not a lock file")
        return None
    return fd


def try_shared(fd: int) -> bool:
    """True when nobody holds `fd`'s file exclusively (a shared lock taken for microseconds)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    fcntl.flock(fd, fcntl.LOCK_UN)
    return True


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def unlink_quietly(path: str, dir_fd: int | None = None) -> None:
    try:
        os.unlink(path, dir_fd=dir_fd)
    except OSError:
        pass


def read_record(fd: int) -> dict[str, Any]:
    try:
        data = os.pread(fd, 65536, 0)
        rec = json.loads(data.decode("utf-8", errors="replace")) if data else {}
    except (OSError, ValueError, RecursionError):  # the files are world-writable: anything may be in them
        return {}
    return rec if isinstance(rec, dict) else {}
