"""A replica's code on the process runtime: a private working directory and a Python environment.

Vertex gives every replica a filesystem of its own with the job's code in it, and installs
`pythonPackageSpec.packageUris` (and, for gcloud's autopackaging, `requirements=` and the
package's `requirements.txt`) before the module runs. The process runtime does the same here:

- `snapshot(src, store)`: the package's files, copied once per job into
  `<job dir>/package/<content hash>`, so an edit to the source tree while the job runs never
  changes what its replicas see. Version control and cache directories, virtual environments
  and `*.pyc` files are left out.
- `populate(snapshot, workdir)`: a replica's working directory, `<replica dir>/work`, made from
  the snapshot. Files under `SMALL_FILE_BYTES` (sources, configs) are copied; larger ones are
  hard-linked (a copy where linking fails, e.g. across file systems). Copy-on-write is not
  available, so a hard link shares its bytes with the snapshot and every sibling: snapshot files
  are made read-only, which makes a non-root trainer that rewrites a large package file in place
  fail instead of corrupting its siblings. Root ignores file modes, so that protection is for
  small files only (they are private copies); large package files are data a trainer reads.
- `python_env(installs, ...)`: a virtual environment under `<vcli home>/envs/<hash>` holding
  what the replica needs installed, keyed by the content of everything installed and by the
  interpreter, so a second job with the same packages costs nothing. It sees the interpreter's
  own packages (`--system-site-packages`, plus the interpreter's site-packages when that
  interpreter is itself a virtual environment), so TensorFlow and the like stay available.
  Installs use `uv pip` when `uv` is on PATH, else the environment's `python -m pip`.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import shutil
import stat
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence
from urllib.parse import unquote, urlparse

from vcli.errors import ExecutorError

#: Files smaller than this are copied into a replica's working directory; larger ones are linked.
SMALL_FILE_BYTES = 1 << 20
#: Directories never part of a package's snapshot (also any directory holding a pyvenv.cfg).
SKIPPED_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache",
                          ".tox", ".nox", ".ipynb_checkpoints"})
#: The file that marks an environment under `<home>/envs/` as completely installed.
ENV_MARKER = "vcli-env.json"


# ---------------------------------------------------------------------------- working directories


def _entries(root: str) -> list[tuple[str, str, os.stat_result]]:
    """(relative path, absolute path, lstat) of every regular file and symlink a snapshot
    holds, sorted. Named pipes, sockets and device nodes are left out: a package is code and
    data, and reading a FIFO blocks for ever, a device (/dev/zero) never ends."""
    out = []
    for here, dirs, files in os.walk(root):
        keep = []
        for d in dirs:
            full = os.path.join(here, d)
            if d in SKIPPED_DIRS or os.path.isfile(os.path.join(full, "pyvenv.cfg")):
                continue
            if os.path.islink(full):
                out.append((os.path.relpath(full, root), full, os.lstat(full)))
            else:
                keep.append(d)
        dirs[:] = keep
        for name in files:
            if name.endswith((".pyc", ".pyo")):
                continue
            full = os.path.join(here, name)
            st = os.lstat(full)
            if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
                out.append((os.path.relpath(full, root), full, st))
    return sorted(out)


def _read_small(path: str) -> bytes:
    """A regular file's bytes, opened without following a link or blocking (one swapped for a
    FIFO since it was listed is refused, never waited on)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(SMALL_FILE_BYTES + 1)
    finally:
        os.close(fd)


def tree_hash(root: str) -> str:
    """A hash of a package directory's content as `snapshot` would copy it.

    Small files count by content; large ones (data, not code) by size and modification time, so
    that hashing a package never reads gigabytes. Names are bytes as the file system has them
    (a name or link target that is not UTF-8 is as valid as any).
    """
    h = hashlib.sha256()
    for rel, full, st in _entries(root):
        h.update(os.fsencode(rel) + f"\0{st.st_mode & 0o170111:o}\0".encode())
        if stat.S_ISLNK(st.st_mode):
            h.update(os.fsencode(os.readlink(full)))
        elif st.st_size < SMALL_FILE_BYTES:
            h.update(hashlib.sha256(_read_small(full)).digest())
        else:
            h.update(f"{st.st_size}:{st.st_mtime_ns}".encode())
        h.update(b"\0")
    return h.hexdigest()[:20]


def snapshot(src: str, store: str) -> str:
    """Copy package `src` to `<store>/<content hash>` unless it is there already; returns that dir.

    Built in a temporary directory and renamed into place, so a snapshot that exists is complete
    (two replicas preparing at once both end with the same one). Its files are read-only.
    """
    if not os.path.isdir(src):
        raise ExecutorError(f"Directory '{src}' is not found.")
    try:
        target = os.path.join(store, tree_hash(src))
    except OSError as e:
        raise ExecutorError(f"Cannot read the package {src}: {e.strerror or e} ({e.filename}).") from None
    if os.path.isdir(target):
        return target
    os.makedirs(store, exist_ok=True)
    tmp = os.path.join(store, f".tmp-{os.getpid()}-{threading.get_ident()}-{time.monotonic_ns()}")
    try:
        for rel, full, st in _entries(src):
            dest = os.path.join(tmp, rel)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            if stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(full), dest)
            else:
                shutil.copy2(full, dest)
                os.chmod(dest, stat.S_IMODE(st.st_mode) & ~0o222)
        os.makedirs(tmp, exist_ok=True)  # an empty package
        try:
            os.rename(tmp, target)
        except OSError:
            if not os.path.isdir(target):
                raise
    except OSError as e:
        raise ExecutorError(f"Cannot copy the package {src}: {e.strerror or e} ({e.filename}).") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def populate(snapshot_dir: str, workdir: str) -> None:
    """Make `workdir` a fresh, private copy of a snapshot (small files copied, large ones linked).

    Whatever `workdir` held before (a replica that was never started) is replaced.
    """
    try:
        shutil.rmtree(workdir, ignore_errors=True)
        os.makedirs(workdir)
        for rel, full, st in _entries(snapshot_dir):
            dest = os.path.join(workdir, rel)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            if stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(full), dest)
                continue
            if st.st_size >= SMALL_FILE_BYTES:
                try:
                    os.link(full, dest)
                    continue
                except OSError:
                    pass  # another file system, or links not allowed: copy
            shutil.copy2(full, dest)
            # The replica's own copy: writable, as the file was in the source tree.
            os.chmod(dest, stat.S_IMODE(st.st_mode) | 0o200)
    except OSError as e:
        raise ExecutorError(f"Cannot create the working directory {workdir}: {e.strerror or e}.") from None


def populate_empty(workdir: str) -> None:
    """Make `workdir` a fresh, empty working directory (a replica whose code is installed)."""
    try:
        shutil.rmtree(workdir, ignore_errors=True)
        os.makedirs(workdir)
    except OSError as e:
        raise ExecutorError(f"Cannot create the working directory {workdir}: {e.strerror or e}.") from None


# ---------------------------------------------------------------------------- python environments


@dataclass(frozen=True)
class Installs:
    """What one replica needs installed before it runs.

    `requirements`: requirement specifiers (`requirements=` of a local package);
    `requirement_files`: requirements.txt files; `packages`: local sdists, wheels or package dirs
    (`packageUris`, `extra-packages`), as absolute paths. `origin` is the directory installs run
    in (relative paths inside a requirements.txt are relative to it).
    """

    requirements: tuple[str, ...] = ()
    requirement_files: tuple[str, ...] = ()
    packages: tuple[str, ...] = ()
    origin: str | None = None

    def __bool__(self) -> bool:
        return bool(self.requirements or self.requirement_files or self.packages)

    def describe(self) -> str:
        """The installed things in a few words, for progress and error lines."""
        names = [*(os.path.basename(p.rstrip("/")) for p in self.packages), *self.requirements,
                 *(f"-r {os.path.basename(os.path.dirname(f))}/{os.path.basename(f)}" for f in self.requirement_files)]
        return ", ".join(names)

    def key(self, interpreter: str) -> str:
        """Content hash of what is installed and of the interpreter it is installed for."""
        h = hashlib.sha256(f"vcli-env-1\0{interpreter}\0".encode())
        for r in self.requirements:
            h.update(f"req\0{r}\0".encode())
        for path in (*self.requirement_files, *self.packages):
            h.update(f"file\0{os.path.basename(path)}\0".encode())
            h.update(tree_hash(path).encode() if os.path.isdir(path) else _file_hash(path).encode())
        return h.hexdigest()[:24]


def _file_hash(path: str) -> str:
    h = hashlib.sha256()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, "not a regular file", path)
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except OSError as e:
        raise ExecutorError(f"Cannot read the Python package {path}: {e.strerror or e}.") from None
    return h.hexdigest()


def local_uri(uri: str) -> str:
    """An absolute local path for a packageUris entry (a path or a file:// URI)."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        path = unquote(parsed.path)
    elif parsed.scheme in ("", ) or len(parsed.scheme) == 1:  # a plain path (or a Windows drive)
        path = os.path.expanduser(uri)
    else:
        raise ExecutorError(
            f"Cannot install the Python package {uri}: the process executor installs local files and "
            "file:// URIs only."
        )
    path = os.path.abspath(path)
    if not os.path.exists(path):
        raise ExecutorError(f"Cannot install the Python package {uri}: {path} is not found.")
    if not (os.path.isfile(path) or os.path.isdir(path)):
        raise ExecutorError(f"Cannot install the Python package {uri}: {path} is not a file or a directory.")
    return path


_SITE_QUERY = (
    "import json, site, sys, sysconfig; "
    "paths = [p for p in sys.path if p.endswith(('site-packages', 'dist-packages'))]; "
    "print(json.dumps({'exe': sys.executable, 'version': sys.version, 'prefix': sys.prefix, "
    "'base': sys.base_prefix, 'site': paths, 'purelib': sysconfig.get_path('purelib')}))"
)


def _interpreter_facts(python: str) -> dict[str, object]:
    try:
        out = subprocess.run([python, "-c", _SITE_QUERY], capture_output=True, text=True, timeout=60, check=True)
        return dict(json.loads(out.stdout))
    except (OSError, subprocess.SubprocessError, ValueError) as e:
        raise ExecutorError(f"Cannot run the Python interpreter {python}: {e}.") from None


def python_env(
    installs: Installs,
    *,
    python: str,
    home: str | os.PathLike[str],
    progress: Callable[[str], None],
    cancelled: threading.Event,
    label: str = "",
) -> str:
    """The python of a virtual environment with `installs` installed; built once per content.

    Builds under `<home>/envs/<key>` while holding `<key>.lock` (other threads and vcli processes
    wait and then reuse it). The environment is built in place, not renamed into place: a
    virtual environment's scripts name its own path, so a renamed one would be broken. The
    marker file, written last and atomically, is what makes it exist; a directory without it is
    a build that died and is started over. A failed install raises ExecutorError with one line.
    """
    facts = _interpreter_facts(python)
    key = installs.key(f"{facts['exe']}\0{facts['version']}")
    envs = Path(home) / "envs"
    envs.mkdir(parents=True, exist_ok=True)
    env_dir = envs / key
    env_python = str(env_dir / "bin" / "python")
    if (env_dir / ENV_MARKER).is_file():
        progress(f"Using the Python environment {env_dir} ({installs.describe()}){label}.")
        return env_python
    with open(envs / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (env_dir / ENV_MARKER).is_file():  # another job built it while this one waited
            progress(f"Using the Python environment {env_dir} ({installs.describe()}){label}.")
            return env_python
        shutil.rmtree(env_dir, ignore_errors=True)
        try:
            _build(env_dir, installs, facts, progress=progress, cancelled=cancelled, label=label)
        except BaseException:
            shutil.rmtree(env_dir, ignore_errors=True)
            raise
    return env_python


def _build(env_dir: Path, installs: Installs, facts: dict[str, object], *, progress: Callable[[str], None],
           cancelled: threading.Event, label: str) -> None:
    started = time.monotonic()
    uv = shutil.which("uv")
    tool = "uv" if uv else "pip"
    progress(f"Installing {installs.describe()}{label} into {env_dir} ({tool}).")
    what = installs.describe()
    python = str(facts["exe"])
    _run([python, "-m", "venv", "--system-site-packages", "--without-pip", str(env_dir)],
         cancelled=cancelled, failure=f"Cannot create a Python environment for {what}")
    env_python = str(env_dir / "bin" / "python")
    # An interpreter that is itself a virtual environment: --system-site-packages reaches its
    # base installation only, so its own packages (TensorFlow, pip) are added behind the new ones.
    inner = _interpreter_facts(env_python)
    parent_site = [p for p in facts["site"] if isinstance(p, str) and p not in (inner["site"] or [])]  # type: ignore[union-attr]
    if parent_site:
        # `site.addsitedir`, not a plain path line: the parent's own .pth files (editable
        # installs) must work too. They come after this environment's packages, which win.
        with open(os.path.join(str(inner["purelib"]), "_vcli_parent_site.pth"), "w", encoding="utf-8") as f:
            f.write("".join(f"import site; site.addsitedir({p!r})\n" for p in parent_site))
    args = [*installs.packages, *installs.requirements]
    for req_file in installs.requirement_files:
        args += ["-r", req_file]
    if uv:
        command = [uv, "pip", "install", "--python", env_python, *args]
    else:
        probe = subprocess.run([env_python, "-c", "import pip"], capture_output=True)
        if probe.returncode != 0:
            _run([env_python, "-m", "ensurepip", "--default-pip"], cancelled=cancelled,
                 failure=f"Cannot install pip to install {what}")
        command = [env_python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", *args]
    _run(command, cancelled=cancelled, cwd=installs.origin, failure=f"Cannot install {what}")
    marker = env_dir / ENV_MARKER
    tmp = env_dir / f".{ENV_MARKER}.tmp"
    tmp.write_text(json.dumps({"installed": args, "python": python, "tool": tool}, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, marker)
    progress(f"Installed {what}{label} in {time.monotonic() - started:.1f}s.")


def _run(command: Sequence[str], *, cancelled: threading.Event, failure: str, cwd: str | None = None) -> None:
    """Run an install step; raise ExecutorError `failure: <the tool's own error line>` if it fails."""
    env = dict(os.environ)
    env.setdefault("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    try:
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace")
    except OSError as e:
        raise ExecutorError(f"{failure}: {e.strerror or e}.") from None
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(proc.stdout or ()), daemon=True)
    reader.start()
    while proc.poll() is None:
        if cancelled.is_set():
            proc.kill()
            proc.wait()
            raise ExecutorError(f"{failure}: cancelled.")
        time.sleep(0.05)
    reader.join(5)
    if proc.returncode != 0:
        raise ExecutorError(f"{failure}: {_error_line(output) or f'exit code {proc.returncode}'}")


def _error_line(lines: Sequence[str]) -> str:
    """The line of an installer's output that says what went wrong."""
    text = [line.strip() for line in lines if line.strip()]
    errors = [line for line in text if line.lower().startswith(("error:", "×", "  ×"))]
    line = errors[-1] if errors else (text[-1] if text else "")
    return line[len("ERROR: "):] if line.startswith("ERROR: ") else line


def installs_for(*, package_uris: Sequence[str], requirements: Sequence[str] = (), package_dir: str | None = None,
                 extra_packages: Sequence[str] = ()) -> Installs:
    """What a replica needs installed: packageUris and extra packages (local paths or file://
    URIs), `requirements=` specifiers, and the local package's requirements.txt if it has one."""
    req_files: tuple[str, ...] = ()
    if package_dir and os.path.isfile(os.path.join(package_dir, "requirements.txt")):
        req_files = (os.path.abspath(os.path.join(package_dir, "requirements.txt")),)
    return Installs(
        requirements=tuple(requirements),
        requirement_files=req_files,
        packages=tuple(local_uri(u) for u in (*package_uris, *extra_packages)),
        origin=os.path.abspath(package_dir) if package_dir else None,
    )


def error_line(lines: Sequence[str]) -> str:
    """The line of an installer's output (pip, uv) that says what went wrong."""
    return _error_line(lines)


def content_hash(path: str) -> str:
    """The hash `Installs.key` counts for one installed path: a directory's `tree_hash`, a file's sha256."""
    return tree_hash(path) if os.path.isdir(path) else _file_hash(path)
