"""Whole directories to and from a host over SFTP, atomically (PBT's checkpoint copies).

`upload_dir` puts a local directory at a path on the host: into a temporary sibling first, then
renamed over the destination, so a replica started afterwards never sees part of it.
`download_dir` copies a host directory into a new local one with the check of
`vcli.executors.copy_dir_atomically`: the host's listing (names, sizes, mtimes in ns, taken
there by the host's Python, `LISTING`) must be the same before and after the copy (at least
`SETTLE_SECONDS` apart), and every file must arrive with its listed size, else the copy is
retried. Only files travel: a
checkpoint's empty subdirectories are not recreated.

A host without Python (a Docker-only host) is listed over SFTP instead, whose times are whole
seconds: a file rewritten with the same size within the second of a copy goes unnoticed there
(the size check still catches a file caught mid-write).
"""

from __future__ import annotations

import json
import os
import posixpath
import random
import shutil
import stat
import time
from typing import Any

from vcli.errors import ExecutorError
from vcli.executors import SETTLE_SECONDS, ReplicaLaunch
from vcli.executors.ssh.link import HostLink, q
from vcli.executors.ssh.remote import map_path

__all__ = ["LISTING", "download_dir", "upload_dir", "upload_seed_dirs"]

#: Run on the host with `python -S -c LISTING DIR`: `MISSING`, `CHANGING` (a file vanished while
#: listing) or a JSON list of [relative path, size, mtime ns], as `vcli.executors.dir_listing`.
LISTING = r'''
import json, os, sys
root = sys.argv[1]
if not os.path.isdir(root):
    print("MISSING"); sys.exit(0)
out = []
try:
    for here, dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(here, name)
            st = os.stat(path)
            out.append([os.path.relpath(path, root), st.st_size, st.st_mtime_ns])
except FileNotFoundError:
    print("CHANGING"); sys.exit(0)
print(json.dumps(sorted(out)))
'''

Listing = list[tuple[str, int, int]]


def upload_seed_dirs(link: HostLink, launch: ReplicaLaunch, home: str) -> None:
    """Place `launch.seed_dirs` on the launch's host, each destination mapped to the host's
    workdir as the replica's environment is (`remote.map_path`). Raises `ExecutorError`."""
    for src, dest in launch.seed_dirs:
        upload_dir(link, src, map_path(os.path.abspath(dest), home, link.root()))


def upload_dir(link: HostLink, src: str, dest: str) -> None:
    """Make the host's directory `dest` a copy of local directory `src` (replacing what was
    there), atomically: files go to a temporary sibling, which is then renamed into place.
    Modes and modification times travel with the files. Raises `ExecutorError`."""
    if not os.path.isdir(src):
        raise ExecutorError(f"Cannot copy {src} to host {link.host.name}: it is not a directory.")
    dest = dest.rstrip("/") or dest
    tmp = f"{dest}.seed-{os.getpid()}-{random.randrange(1 << 32):08x}"
    where = f"Host {link.host.name}"
    rc, out = link.quick(f"mkdir -p -- {q(posixpath.dirname(dest))} && rm -rf -- {q(tmp)}", timeout=30)
    if rc != 0:
        raise ExecutorError(f"{where}: cannot create {posixpath.dirname(dest)}: {out.strip()}")
    try:
        sftp = link.sftp()
    except Exception as e:
        raise ExecutorError(f"{where}: cannot open SFTP: {e}") from None
    try:
        for here, _dirs, files in os.walk(src):
            rel = os.path.relpath(here, src)
            target = tmp if rel == "." else posixpath.join(tmp, *rel.split(os.sep))
            sftp.mkdir(target)
            for name in files:
                local = os.path.join(here, name)
                remote = posixpath.join(target, name)
                st = os.stat(local)
                sftp.put(local, remote)
                sftp.chmod(remote, stat.S_IMODE(st.st_mode))
                sftp.utime(remote, (st.st_atime, st.st_mtime))
    except Exception as e:
        link.quick(f"rm -rf -- {q(tmp)}", timeout=30)
        raise ExecutorError(f"{where}: cannot copy {src} to {dest}: {e}") from None
    finally:
        sftp.close()
    rc, out = link.quick(f"rm -rf -- {q(dest)} && mv -- {q(tmp)} {q(dest)}", timeout=60)
    if rc != 0:
        link.quick(f"rm -rf -- {q(tmp)}", timeout=30)
        raise ExecutorError(f"{where}: cannot move the copy of {src} to {dest}: {out.strip()}")


def download_dir(link: HostLink, src: str, dest: str, *, attempts: int = 5) -> bool:
    """Copy the host's directory `src` into the local directory `dest` (absent), atomically
    and consistently (see the module). False, and nothing created, if `src` is missing, holds
    no file, or never held still for a whole copy. Raises `ExecutorError` if the host cannot
    be reached."""
    dest = dest.rstrip("/") or dest
    src = src.rstrip("/") or src
    try:
        sftp = link.sftp()
    except Exception as e:
        raise ExecutorError(f"Host {link.host.name}: cannot open SFTP: {e}") from None
    try:
        for attempt in range(attempts):
            listed_at = time.monotonic()
            before = _listing(link, sftp, src)
            if before == []:
                return False
            if before is not None and _copy(sftp, src, before, dest, attempt):
                time.sleep(max(0.0, listed_at + SETTLE_SECONDS - time.monotonic()))
                if _listing(link, sftp, src) == before:
                    os.rename(f"{dest}.tmp-{os.getpid()}-{attempt}", dest)
                    return True
            shutil.rmtree(f"{dest}.tmp-{os.getpid()}-{attempt}", ignore_errors=True)
            time.sleep(0.1 * (attempt + 1))
        return False
    except ExecutorError:
        raise
    except Exception as e:  # the connection broke mid-copy
        raise ExecutorError(f"Host {link.host.name}: cannot copy {src}: {e or type(e).__name__}") from None
    finally:
        for attempt in range(attempts):
            shutil.rmtree(f"{dest}.tmp-{os.getpid()}-{attempt}", ignore_errors=True)
        sftp.close()


def _copy(sftp: Any, src: str, files: Listing, dest: str, attempt: int) -> bool:
    """Download `files` (a listing of `src`) into `dest`'s temporary sibling for `attempt`;
    False if one went away or arrived with another size than listed (it is being written)."""
    tmp = f"{dest}.tmp-{os.getpid()}-{attempt}"
    shutil.rmtree(tmp, ignore_errors=True)
    for rel, size, _ in files:
        local = os.path.join(tmp, *rel.split("/"))
        os.makedirs(os.path.dirname(local), exist_ok=True)
        try:
            sftp.get(posixpath.join(src, rel), local)
        except (FileNotFoundError, OSError):
            return False
        if os.path.getsize(local) != size:
            return False
    return True


def _listing(link: HostLink, sftp: Any, src: str) -> Listing | None:
    """The host directory's listing (see `LISTING`): [] if missing or empty, None if changing."""
    try:
        rc, out = link.quick(f"{q(link.host.python)} -S -c {q(LISTING)} {q(src)}", timeout=60)
    except ExecutorError:
        if not link.healthy():
            raise
        rc, out = 1, ""
    text = out.strip()
    if rc == 0 and text == "MISSING":
        return []
    if rc == 0 and text == "CHANGING":
        return None
    if rc == 0 and text.startswith("["):
        return [(rel, size, mtime) for rel, size, mtime in json.loads(text)]
    return _sftp_listing(sftp, src)  # no Python on the host


def _sftp_listing(sftp: Any, src: str) -> Listing | None:
    out: Listing = []
    pending = [""]
    while pending:
        rel = pending.pop()
        try:
            entries = sftp.listdir_attr(posixpath.join(src, rel) if rel else src)
        except FileNotFoundError:
            return [] if not rel else None  # the root is missing; a subdirectory vanished
        for e in entries:
            path = posixpath.join(rel, e.filename) if rel else e.filename
            if stat.S_ISDIR(e.st_mode or 0):
                pending.append(path)
            else:
                out.append((path, int(e.st_size or 0), int(e.st_mtime or 0) * 1_000_000_000))
    return sorted(out)
