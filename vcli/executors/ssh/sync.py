"""Shipping a job's local package to a host: an SFTP mirror keyed by size and mtime.

The package lands in `<workdir>/code/<package>-<hash>/` on the host (`code_dir`; the hash is of
this machine's name and the local path, so two checkouts never share a directory). Only files
whose size or mtime differ are uploaded, each to a temporary name renamed into place, so a
replica that is reading the tree never sees half a file; files gone locally are removed.
Caches, VCS and virtualenv directories are not shipped (`EXCLUDED_DIRS`).
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import random
import re
import socket
import stat
import time
from typing import Any, Callable

from vcli.errors import ExecutorError
from vcli.executors.ssh.link import HostLink, q

__all__ = ["EXCLUDED_DIRS", "code_dir", "ship", "sync_dir"]

EXCLUDED_DIRS = {".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".venv", "venv",
                 "node_modules", ".tox", ".ipynb_checkpoints"}


#: The most files one package ships (links can make a small tree look huge).
MAX_FILES = 200_000


def _local_manifest(root: str, outside: list[str] | None = None) -> dict[str, tuple[int, int, int]]:
    """rel path -> (size, mtime seconds, mode) of the files to ship: what a trainer sees in the
    package, links to directories inside it included (`data_link -> data`: a link to a directory
    was left out, and the same job FAILED over SSH that SUCCEEDED locally). A link that leads
    out of the package (`data -> /mnt/datasets`) is not followed: its `name -> target` goes to
    `outside`. A link back to a directory it is in is not followed either (a loop)."""
    out: dict[str, tuple[int, int, int]] = {}
    root = os.path.abspath(root)
    real_root = os.path.realpath(root)
    chains = {root: (real_root,)}  # the real directories on the way to each directory walked
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        chain = chains.pop(dirpath, ())
        kept = []
        for d in sorted(dirnames):
            full = os.path.join(dirpath, d)
            real = os.path.realpath(full)
            if d in EXCLUDED_DIRS or d.endswith(".egg-info") or real in chain:
                continue
            if os.path.islink(full) and os.path.commonpath([real, real_root]) != real_root:
                if outside is not None:
                    outside.append(f"{os.path.relpath(full, root)} -> {os.readlink(full)}")
                continue
            chains[full] = (*chain, real)
            kept.append(d)
        dirnames[:] = kept
        for name in filenames:
            if name.endswith((".pyc", ".pyo")):
                continue
            full = os.path.join(dirpath, name)
            try:
                st = os.stat(full)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            if len(out) >= MAX_FILES:
                raise ExecutorError(f"'{root}' holds more than {MAX_FILES} files (links included): too many to ship.")
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            out[rel] = (st.st_size, int(st.st_mtime), stat.S_IMODE(st.st_mode))
    return out


def _remote_manifest(sftp: Any, root: str) -> tuple[dict[str, tuple[int, int]], set[str]]:
    files: dict[str, tuple[int, int]] = {}
    dirs: set[str] = set()
    stack = [""]
    while stack:
        rel = stack.pop()
        try:
            entries = sftp.listdir_attr(posixpath.join(root, rel) if rel else root)
        except FileNotFoundError:
            continue
        if rel:
            dirs.add(rel)
        for e in entries:
            child = f"{rel}/{e.filename}" if rel else e.filename
            if stat.S_ISDIR(e.st_mode or 0):
                stack.append(child)
            elif stat.S_ISREG(e.st_mode or 0):
                files[child] = (int(e.st_size or 0), int(e.st_mtime or 0))
    return files, dirs


def sync_dir(link: HostLink, local_dir: str, remote_dir: str) -> tuple[int, int, int]:
    """Make `remote_dir` a copy of `local_dir`; returns (uploaded, unchanged, removed)."""
    local = _local_manifest(local_dir)
    rc, err = link.quick(f"mkdir -p -- {q(remote_dir)}", timeout=30)
    if rc != 0:
        raise ExecutorError(f"Host {link.host.name}: cannot create {remote_dir}: {err.strip()}")
    sftp = link.sftp()
    try:
        remote, remote_dirs = _remote_manifest(sftp, remote_dir)
        uploaded = unchanged = removed = 0
        made = set(remote_dirs) | {""}
        for rel, (size, mtime, mode) in sorted(local.items()):
            if remote.get(rel) == (size, mtime):
                unchanged += 1
                continue
            parent = posixpath.dirname(rel)
            if parent not in made:
                acc = ""
                for piece in parent.split("/"):
                    acc = f"{acc}/{piece}" if acc else piece
                    if acc not in made:
                        try:
                            sftp.mkdir(posixpath.join(remote_dir, acc))
                        except OSError:
                            pass  # exists already (another replica/process made it)
                        made.add(acc)
            target = posixpath.join(remote_dir, rel)
            tmp = posixpath.join(posixpath.dirname(target), f".{posixpath.basename(target)}.vcli-{os.getpid()}-{random.randrange(1 << 30)}")
            sftp.put(os.path.join(local_dir, *rel.split("/")), tmp)
            sftp.chmod(tmp, mode)
            sftp.utime(tmp, (mtime, mtime))
            sftp.posix_rename(tmp, target)
            uploaded += 1
        for rel in remote:
            if rel not in local and not posixpath.basename(rel).startswith(".") and not rel.endswith((".pyc", ".pyo")):
                try:
                    sftp.remove(posixpath.join(remote_dir, rel))
                    removed += 1
                except OSError:
                    pass
        return uploaded, unchanged, removed
    finally:
        sftp.close()


def code_dir(root: str, local_dir: str) -> str:
    """Where `local_dir` is shipped under the host's workdir `root`."""
    tag = hashlib.sha1(f"{socket.gethostname()}:{os.path.abspath(local_dir)}".encode()).hexdigest()[:10]
    base = re.sub(r"[^A-Za-z0-9_.-]", "_", os.path.basename(os.path.abspath(local_dir))) or "package"
    return f"{root}/code/{base}-{tag}"



def ship(link: HostLink, local_dir: str, progress: Callable[[str], None]) -> str:
    """Sync `local_dir` to its code dir on the link's host (once per content); returns that dir."""
    if not os.path.isdir(local_dir):
        raise ExecutorError(f"Directory '{local_dir}' is not found.")
    remote = code_dir(link.root(), local_dir)
    with link.sync_lock:
        outside: list[str] = []
        key = json.dumps(sorted(_local_manifest(local_dir, outside).items()))
        if link.synced.get(remote) == key:
            return remote
        started = time.monotonic()
        up, same, gone = sync_dir(link, local_dir, remote)
        link.synced[remote] = key
        progress(f"Copied {local_dir} to {link.host.name}:{remote} ({up} uploaded, {same} unchanged, "
                 f"{gone} removed, {time.monotonic() - started:.1f}s).")
        if outside:
            more = f" and {len(outside) - 3} more" if len(outside) > 3 else ""
            progress(f"WARNING: not copied to {link.host.name}: {len(outside)} link(s) out of the package "
                     f"({', '.join(outside[:3])}{more}); a trainer there finds nothing at those paths.")
    return remote
