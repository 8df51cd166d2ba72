"""A process replica's code on an SSH host: a private working directory and its installs.

As on the process executor (`vcli.packages`), every replica with code runs in a working
directory of its own, `<replica dir on the host>/work`, never in the synced tree that all
replicas and jobs share (`sync.ship`): the host's `workspace.py` snapshots the synced package
into `<job dir on the host>/package/<content hash>` (read-only) and populates each replica's
`work` from it (small files copied, large ones hard-linked). A replica with a python module
and no local package gets an empty `work`.

What a replica needs installed (packageUris, `requirements=`, the package's requirements.txt,
extra packages) goes into `<host workdir>/envs/<key>`, the host's `packages.python_env` with the
host's python, keyed as `packages.Installs.key` is. Files that are not part of the synced package
are shipped over SFTP to `<host workdir>/envs/files/<content hash>/<name>` first.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import random
import time
from dataclasses import dataclass, replace
from typing import Callable, Sequence

from vcli import errors as _errors
from vcli import packages
from vcli.errors import ExecutorError
from vcli.executors import ReplicaLaunch, process_argv
from vcli.executors.ssh import workspace as _workspace
from vcli.executors.ssh.link import HostLink, q, qargv
from vcli.executors.ssh.sync import code_dir, sync_dir

__all__ = ["RemoteEnv", "has_code", "install_workspace", "populate", "private_workdir", "python_env", "with_env"]

#: How long one environment build on a host may take (pip/uv install of everything).
ENV_TIMEOUT = float(os.environ.get("VCLI_SSH_ENV_TIMEOUT", "1800"))


def private_workdir(remote_output_dir: str) -> str:
    """A replica's private working directory on its host (the process executor's `<replica>/work`)."""
    return f"{remote_output_dir}/work"


def has_code(launch: ReplicaLaunch) -> bool:
    """Does the replica run code of the job (so in a private working directory of its own)?"""
    return bool(launch.workdir or launch.python_module)


def install_workspace(link: HostLink) -> str:
    """Ship `workspace.py` with `vcli.errors` and `vcli.packages` to `<workdir>/bin/vcli-lib-<hash>/`
    once per host and version; returns the script's path on the host. The directory is built
    under a temporary name and renamed into place, so no host ever runs a half-shipped copy."""
    with link.tools_lock:
        if link.workspace is not None:
            return link.workspace
        sources = {"vcli/__init__.py": b""}  # a package of just these two stdlib-only modules
        for rel, module in (("vcli/errors.py", _errors), ("vcli/packages.py", packages), ("workspace.py", _workspace)):
            with open(module.__file__ or "", "rb") as f:
                sources[rel] = f.read()
        digest = hashlib.sha256(b"".join(k.encode() + b"\0" + v for k, v in sorted(sources.items()))).hexdigest()[:12]
        lib = f"{link.root()}/bin/vcli-lib-{digest}"
        rc, out = link.quick(f"mkdir -p -- {q(posixpath.dirname(lib))} && test -f {q(lib + '/workspace.py')}",
                             timeout=30)
        if rc != 0:
            tmp = f"{lib}.tmp{random.randrange(1 << 32):x}"
            sftp = link.sftp()
            try:
                sftp.mkdir(tmp)
                sftp.mkdir(f"{tmp}/vcli")
                for rel, data in sorted(sources.items()):
                    with sftp.open(f"{tmp}/{rel}", "wb") as f:
                        f.write(data)
                try:
                    sftp.posix_rename(tmp, lib)
                except OSError:
                    pass  # another vcli process shipped the same version first
            except OSError as e:
                raise ExecutorError(f"Host {link.host.name}: cannot install vcli's helper in {lib}: {e}") from None
            finally:
                sftp.close()
            link.quick(f"rm -rf -- {q(tmp)}", timeout=30)
        link.workspace = f"{lib}/workspace.py"
        return link.workspace


def populate(link: HostLink, local_dir: str, store: str, workdirs: Sequence[str]) -> None:
    """Make each of `workdirs` on the host a private copy of `local_dir`'s synced code dir.

    Holds the link's sync lock, so a sync of a changed package by another job of this vcli
    process never lands half-way through the snapshot.
    """
    script = install_workspace(link)
    python = link.host.python
    with link.sync_lock:
        command = f"{q(python)} -S {q(script)} populate {q(code_dir(link.root(), local_dir))} {q(store)} {qargv(workdirs)}"
        rc, out, err = link.run(command, timeout=600)
    if rc in (126, 127):  # the shell could not run the inventory's interpreter: not the directory's fault
        raise ExecutorError(f"Host {link.host.name}: cannot run its Python interpreter {python} (the inventory's "
                            f"`python`; `vcli hosts check {link.host.name}` tests it): {_error(out, err)}")
    if rc != 0:
        raise ExecutorError(f"Host {link.host.name}: cannot create the working directory {workdirs[0]}: "
                            f"{_error(out, err)}")


@dataclass(frozen=True)
class RemoteEnv:
    """An environment on a host: its python and the PATH a replica's session starts from."""

    python: str
    path: str


def _ship_file(link: HostLink, local: str) -> str:
    """Upload one file (or directory) to `<workdir>/envs/files/<content hash>/<name>`; its host path."""
    name = os.path.basename(local.rstrip("/"))
    digest = packages.content_hash(local)
    remote = f"{link.root()}/envs/files/{digest[:20]}/{name}"
    if os.path.isdir(local):
        sync_dir(link, local, remote)
        return remote
    rc, _ = link.quick(f"mkdir -p -- {q(posixpath.dirname(remote))} && test -f {q(remote)}", timeout=30)
    if rc == 0:
        return remote  # content-addressed: there already means complete
    sftp = link.sftp()
    try:
        tmp = f"{remote}.tmp{random.randrange(1 << 32):x}"
        sftp.put(local, tmp)
        sftp.posix_rename(tmp, remote)
    except OSError as e:
        raise ExecutorError(f"Host {link.host.name}: cannot copy {local} to {remote}: {e}") from None
    finally:
        sftp.close()
    return remote


def python_env(link: HostLink, installs: packages.Installs, *, progress: Callable[[str], None],
               label: str = "") -> RemoteEnv:
    """`installs` in a cached environment on the link's host (built there once per content).

    Paths under `installs.origin` (the local package) are its synced copy on the host; other
    files are shipped first. A failed install raises ExecutorError with the installer's line.
    """
    origin = installs.origin
    remote_origin = code_dir(link.root(), origin) if origin else None

    def on_host(path: str) -> str:
        if origin and remote_origin and path.startswith(origin.rstrip("/") + "/"):
            return remote_origin + "/" + os.path.relpath(path, origin).replace(os.sep, "/")
        return _ship_file(link, path)

    spec = {"home": link.root(), "python": link.host.python, "origin": remote_origin,
            "packages": [on_host(p) for p in installs.packages], "requirements": list(installs.requirements),
            "requirementFiles": [on_host(p) for p in installs.requirement_files]}
    script = install_workspace(link)
    started = time.monotonic()
    rc, out, err = link.run(f"{q(link.host.python)} -S {q(script)} env {q(json.dumps(spec))}", timeout=ENV_TIMEOUT)
    found: dict[str, str] = {}
    for line in out.splitlines():
        tag, _, rest = line.partition(" ")
        if tag == "VCLI-PROGRESS":
            progress(f"{link.host.name}: {rest}")
        elif tag in ("VCLI-PYTHON", "VCLI-PATH"):
            found[tag] = rest
    if rc != 0 or "VCLI-PYTHON" not in found:
        raise ExecutorError(f"Host {link.host.name}: cannot install {installs.describe()}{label}: {_error(out, err)}")
    if time.monotonic() - started > 5:
        progress(f"{link.host.name}: the Python environment for {installs.describe()}{label} is ready.")
    return RemoteEnv(python=found["VCLI-PYTHON"], path=found.get("VCLI-PATH", ""))


def with_env(launch: ReplicaLaunch, env: RemoteEnv) -> ReplicaLaunch:
    """The launch run by the environment's python, with the environment first on PATH (as the
    process executor does: `python`/`pip` of an explicit command are the environment's)."""
    bin_dir = posixpath.dirname(env.python)
    changes: dict[str, object] = {
        "env": {**launch.env, "VIRTUAL_ENV": posixpath.dirname(bin_dir),
                "PATH": ":".join(p for p in (bin_dir, env.path) if p)},
    }
    if not launch.command:
        changes["command"] = tuple(process_argv(replace(launch, args=()), env.python))
    return replace(launch, **changes)  # type: ignore[arg-type]


def _error(out: str, err: str) -> str:
    for line in reversed(out.splitlines()):
        if line.startswith("VCLI-ERROR "):
            return line[len("VCLI-ERROR "):]
    return packages.error_line((out + err).splitlines()) or "the host's helper failed"
