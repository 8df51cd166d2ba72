"""The store's transactions and errors: one IMMEDIATE transaction under the process lock
(`Tx`), and the OS's and SQLite's errors about vcli's home, or a row vcli cannot decode,
turned into one `StoreError` line (`store_errors`, `store_error`, `damaged`). Split from
vcli/store.py, which keeps the tables and their rows."""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any, Iterator

from vcli.errors import StoreError

#: How long a process that drives jobs (`wait_out_locks`) waits, beyond SQLite's own 30 s,
#: for a store another process holds locked before its write fails (0: it fails then).
_patience = {"seconds": 0.0}


def wait_out_locks(seconds: float) -> None:
    """Let this process's writes wait up to `seconds` for a store another process keeps locked
    (a sqlite3 shell, a backup), saying so once on stderr: a controller failed its running
    job, and stopped its trainer, after SQLite's 30 s. Commands that only read or record keep
    the 30 s and fail with one line."""
    _patience["seconds"] = float(seconds)


class Tx:
    """`with store._tx() as conn` (`Store._tx`): one IMMEDIATE transaction under the process lock.

    A store that cannot be written (full disk, read-only file system) raises `StoreError`.
    """

    def __init__(self, conn: sqlite3.Connection, lock: threading.RLock, home: Path) -> None:
        self.conn = conn
        self.lock = lock
        self.home = home

    def __enter__(self) -> sqlite3.Connection:
        import time

        self.lock.acquire()
        deadline = None
        try:
            while True:
                try:
                    self.conn.execute("BEGIN IMMEDIATE")
                    return self.conn
                except sqlite3.Error as e:
                    waited_enough = deadline is not None and time.monotonic() > deadline
                    if not _busy(e) or _patience["seconds"] <= 0 or waited_enough:
                        raise store_error(self.home, e) from e
                    if deadline is None:
                        deadline = time.monotonic() + _patience["seconds"]
                        _say_locked(self.home)
        except BaseException:
            # A Ctrl-C between a BEGIN that succeeded and the return left the connection inside
            # the transaction: every later write failed ("cannot start a transaction within a
            # transaction", exit 7) and the job was left RUNNING with nobody driving it.
            if self.conn.in_transaction:
                self._rollback()
            self.lock.release()
            raise

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            if exc_type is None:
                try:
                    self.conn.execute("COMMIT")
                except sqlite3.Error as e:
                    self._rollback()
                    raise store_error(self.home, e) from e
            else:
                self._rollback()
                if isinstance(exc, (sqlite3.Error, OSError)):
                    raise store_error(self.home, exc) from exc
        finally:
            self.lock.release()

    def _rollback(self) -> None:
        try:
            self.conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass


def _busy(error: sqlite3.Error) -> bool:
    return (getattr(error, "sqlite_errorcode", 0) or 0) & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)


def _say_locked(home: Path) -> None:
    import sys

    try:
        sys.stderr.write(f"WARNING: vcli's store {home / 'vcli.db'} is locked by another process (for more than 30 s "
                         "now); waiting for it. Find it with `fuser` if it does not let go.\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def makedirs_private(path: Path | str) -> None:
    """`mkdir -p` where every directory it creates is 0700 (umask or not): job, replica and log
    directories are private to their owner, like the store itself."""
    missing = []
    p = Path(path)
    while not p.exists():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for d in reversed(missing):
        try:
            d.mkdir(mode=0o700)
        except FileExistsError:
            continue
        os.chmod(d, 0o700)


@contextlib.contextmanager
def store_errors(home: Path) -> Iterator[None]:
    """Turn the OS's and SQLite's errors about vcli's home into one clear `StoreError`."""
    try:
        yield
    except (OSError, sqlite3.Error) as e:
        raise store_error(home, e) from e


#: SQLite's primary result codes vcli tells apart (`sqlite3.Error.sqlite_errorcode & 0xff`).
_SQLITE_PERM, _SQLITE_BUSY, _SQLITE_LOCKED, _SQLITE_READONLY, _SQLITE_IOERR, _SQLITE_FULL, _SQLITE_CANTOPEN = (
    3, 5, 6, 8, 10, 13, 14)


def store_error(home: Path, error: BaseException) -> StoreError:
    """One line saying why vcli's home cannot be used and what to do, from the error's code
    (errno, SQLite's result code), never from its text (which holds the path: a home under
    `/tmp/full/...` is not a full disk)."""
    code = getattr(error, "errno", None) if isinstance(error, OSError) else None
    sql = (getattr(error, "sqlite_errorcode", None) or 0) & 0xFF if isinstance(error, sqlite3.Error) else None
    if code == errno.ENOSPC or code == errno.EDQUOT or sql == _SQLITE_FULL or (sql == _SQLITE_IOERR and _disk_full(home)):
        why, fix = "the disk is full", "Free space there, or set VCLI_HOME to a directory on another disk."
    elif code == errno.EROFS or sql == _SQLITE_READONLY:
        why, fix = "it is on a read-only file system", "Set VCLI_HOME to a writable directory."
    elif code in (errno.EACCES, errno.EPERM) or sql == _SQLITE_PERM:
        why, fix = "permission denied", "Fix its permissions, or set VCLI_HOME to a directory of yours."
    elif code in (errno.ENOTDIR, errno.EEXIST):
        why, fix = "a file is in the way of the directory", "Move that file away, or set VCLI_HOME elsewhere."
    elif sql in (_SQLITE_BUSY, _SQLITE_LOCKED):  # the home is fine: "set VCLI_HOME to a writable directory" was wrong
        why = "its store vcli.db was locked by another process for more than 30 s"
        fix = f"Find it with `fuser {home / 'vcli.db'}` (a sqlite3 shell, a backup), and try again once it is done."
    else:
        detail = getattr(error, "strerror", None) or str(error) or type(error).__name__
        why, fix = str(detail), "Set VCLI_HOME to a writable directory on a local disk."
    return StoreError(f"Cannot use vcli's home {home} (VCLI_HOME): {why}. {fix}")


def _disk_full(home: Path) -> bool:
    """SQLite reports a write that found no space as a bare I/O error: ask the file system."""
    try:
        st = os.statvfs(home)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < 1024 * 1024


@contextlib.contextmanager
def damaged(what: str) -> Iterator[None]:
    """Turn a row vcli cannot decode (a JSON column or a state that is not one of vcli's: the
    file was edited, or written by something else) into one StoreError line naming `what`,
    not a traceback in every command that reads it."""
    try:
        yield
    except (ValueError, TypeError) as e:
        text = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise StoreError(f"vcli's store has a damaged record ({what}: {text}); vcli did not write it this way. "
                         "Restore vcli.db from a backup, or move the home aside.") from None
