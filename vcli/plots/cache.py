"""The figure cache: a study's rendered figures on disk, shared by `hp-tuning-jobs plot` (its
HTML report and its SVG/PNG files) and the dashboard, so a study that has not changed is
drawn once, whoever asks first.

An entry is one rendered figure (an inline SVG element, or PNG bytes) or a study's index for
a format (its figures' keys and titles and the notes on figures left out), keyed by a hash of
the study id, the study's last change (`last_change`: its row's state and update time and
`Store.trials_version`), the figure's name, the format and its drawing options, and vcli's and
matplotlib's versions. A trial added or rewritten gives the study new keys: an entry is never
stale, only unused, and the least recently used go first when the cache outgrows its bound.

Where: `VCLI_HOME/cache/figures` (mode 0700), one file per entry named by its key. A writer
opens a private temporary file `O_CREAT | O_EXCL | O_NOFOLLOW` inside the opened directory,
writes it whole, then renames it over the entry: a reader sees a whole entry or none, and
writers racing on one key each leave a whole one (the last rename wins). Each file starts with
the SHA-256 of its body; one that does not match reads as a miss and is removed. Entries are
opened `O_NOFOLLOW` relative to the directory, itself opened `O_NOFOLLOW | O_DIRECTORY`; a
directory that is a link, not the user's own, or writable by others turns the cache off (the
figures are drawn every time), as does any error of the disk: the cache only ever saves work.

Bounded: past `MAX_BYTES` the least recently used entries (a hit touches the file's time) are
removed until the cache holds three quarters of the bound; temporary files a killed writer
left are removed after `STALE_TMP_SECONDS`.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Sequence

from vcli.spec import ParameterSpec, StudySpec, Trial

__all__ = ["FigureCache", "Rendered", "Slot", "last_change", "rendered_figures", "MAX_BYTES"]

#: The most the cache keeps on disk (a 10,000-trial study's figures are about 1.5 MB of SVG).
MAX_BYTES = 128 * 1024 * 1024
#: A temporary file this old is a killed writer's leftover.
STALE_TMP_SECONDS = 600
#: The cache's file format (a new one leaves the old files unused until they are evicted).
_MAGIC = b"vcli-figure-cache 1 "
_TMP = ".tmp-"
#: What a format's entries hold: inline SVG elements (the report, the dashboard, .svg files) or PNGs.
FORMATS = ("svg", "png")
#: The PNG files' resolution (`hp-tuning-jobs plot --output=name.png`).
PNG_DPI = 150


@dataclass(frozen=True)
class Rendered:
    """One figure as a format renders it: its report key, its title, and its bytes (an
    inline `<svg>` element in UTF-8, or a PNG file)."""

    key: str
    title: str
    data: bytes


def last_change(state: str, update_time: str, trials_version: str) -> str:
    """The study's last-change value: its row's state and update time and its trials'
    version (`Store.trials_version`), hashed; it moves with any change a figure could show."""
    return hashlib.sha256("|".join([state, update_time or "", trials_version]).encode()).hexdigest()[:16]


class FigureCache:
    """The cache directory of one vcli home (module docstring); every method is safe to call
    from several threads and processes at once, and none raises for a disk error."""

    def __init__(self, home: Path | str | None = None, *, max_bytes: int = MAX_BYTES) -> None:
        if home is None:
            from vcli.store import default_home

            home = default_home()
        self.path = Path(home) / "cache" / "figures"
        self.max_bytes = max_bytes

    # ------------------------------------------------------------------ the directory

    def _open_dir(self, create: bool) -> int | None:
        """A descriptor of the cache directory, made (0700) when `create`; None when it is
        missing, a link, not the user's own or writable by others."""
        try:
            if create:
                os.makedirs(self.path, mode=0o700, exist_ok=True)
            fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            return None
        info = os.fstat(fd)
        if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            os.close(fd)
            return None
        return fd

    # ------------------------------------------------------------------ entries

    def get(self, name: str) -> bytes | None:
        """The body of entry `name` (a key from `key`), or None: missing, damaged or unreadable."""
        fd = self._open_dir(create=False)
        if fd is None:
            return None
        try:
            return self._read(fd, name)
        finally:
            os.close(fd)

    def get_many(self, names: Sequence[str]) -> list[bytes] | None:
        """Every entry of `names`, in order, or None when any is missing."""
        fd = self._open_dir(create=False)
        if fd is None:
            return None
        try:
            out = []
            for name in names:
                body = self._read(fd, name)
                if body is None:
                    return None
                out.append(body)
            return out
        finally:
            os.close(fd)

    def _read(self, dir_fd: int, name: str) -> bytes | None:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd)
        except OSError:
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            with os.fdopen(os.dup(fd), "rb") as f:
                data = f.read()
            try:
                os.utime(fd)  # recently used: evicted last
            except OSError:
                pass
        except OSError:
            return None
        finally:
            os.close(fd)
        head, sep, body = data.partition(b"\n")
        if not sep or head != _MAGIC + hashlib.sha256(body).hexdigest().encode():
            _remove(dir_fd, name)  # damaged (not written by this format): a miss
            return None
        return body

    def put_many(self, entries: dict[str, bytes]) -> bool:
        """Store every entry (name -> body), then keep the cache within its bound; False when
        the cache is off or the disk refused (nothing half-written is left behind)."""
        fd = self._open_dir(create=True)
        if fd is None:
            return False
        try:
            for name, body in entries.items():
                if not self._write(fd, name, body):
                    return False
            self._trim(fd)
            return True
        finally:
            os.close(fd)

    def _write(self, dir_fd: int, name: str, body: bytes) -> bool:
        tmp = f"{_TMP}{os.getpid()}-{os.urandom(6).hex()}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd)
        except OSError:
            return False
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(_MAGIC + hashlib.sha256(body).hexdigest().encode() + b"\n")
                f.write(body)
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            return True
        except OSError:  # a full disk: the entry is simply not kept
            _remove(dir_fd, tmp)
            return False

    def _trim(self, dir_fd: int) -> None:
        """Remove the least recently used entries while the cache holds more than its bound
        (down to three quarters of it), and killed writers' temporary files."""
        now = time.time()
        files: list[tuple[float, int, str]] = []
        try:
            with os.scandir(dir_fd) as found:
                for e in found:
                    try:
                        info = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if e.name.startswith(_TMP):
                        if now - info.st_mtime > STALE_TMP_SECONDS:
                            _remove(dir_fd, e.name)
                        continue
                    files.append((info.st_mtime, info.st_size, e.name))
        except OSError:
            return
        total = sum(size for _, size, _ in files)
        if total <= self.max_bytes:
            return
        for _, size, name in sorted(files):
            if total <= self.max_bytes * 3 // 4:
                break
            _remove(dir_fd, name)
            total -= size

    def size(self) -> int:
        """The bytes the cache's entries hold now."""
        try:
            return sum(e.stat(follow_symlinks=False).st_size for e in os.scandir(self.path) if not e.name.startswith(_TMP))
        except OSError:
            return 0


def _remove(dir_fd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass


@dataclass(frozen=True)
class Slot:
    """Where one study's figures go in a cache: the cache, the study id and its last change
    (`last_change`) as of the trials being drawn."""

    cache: FigureCache
    study_id: str
    change: str

    def key(self, name: str, fmt: str) -> str:
        """The entry name of figure `name` (or "index") in format `fmt` (module docstring)."""
        from vcli import __version__
        from vcli.plots.canvas import MAX_MARKS, MAX_VECTOR_MARKS, RASTER_DPI, matplotlib

        options = f"{fmt}:vector<={MAX_VECTOR_MARKS}:raster@{RASTER_DPI}:marks<={MAX_MARKS}:png@{PNG_DPI}"
        text = json.dumps([self.study_id, self.change, name, options, __version__, matplotlib().__version__])
        return hashlib.sha256(text.encode()).hexdigest()[:40] + "." + fmt


def rendered_figures(spec: StudySpec, params: Sequence[ParameterSpec], trials: Sequence[Trial], fmt: str, *,
                     slot: Slot | None = None, now: datetime | None = None,
                     progress: Callable[[str], None] | None = None) -> tuple[list[Rendered], list[str]]:
    """Every figure of the study rendered as `fmt` ("svg": inline SVG elements, "png": PNG
    files), in report order, and the notes on figures left out: read from the cache when
    `slot` names one that has them all, else drawn (`vcli.plots.render.draw`) and stored there.
    `progress` is told each step."""
    step = progress or (lambda text: None)
    if fmt not in FORMATS:
        raise ValueError(f"no figure format {fmt!r}")
    found = _cached(slot, fmt) if slot is not None else None
    if found is not None:
        step(f"{len(found[0])} figures from the cache")
        return found
    from vcli.plots import render

    drawn, notes = render.draw(spec, params, trials, now=now, progress=progress)
    step(f"rendering {len(drawn)} figures")
    out = [Rendered(f.key, f.title, _render(render, f, fmt)) for f in drawn]
    if slot is not None:
        index = json.dumps({"figures": [[r.key, r.title] for r in out], "notes": notes}).encode()
        entries = {slot.key(f"figure:{r.key}", fmt): r.data for r in out}
        entries[slot.key("index", fmt)] = index  # last: an index names only figures already there
        slot.cache.put_many(entries)
    return out, notes


def _cached(slot: Slot, fmt: str) -> tuple[list[Rendered], list[str]] | None:
    raw = slot.cache.get(slot.key("index", fmt))
    if raw is None:
        return None
    try:
        index = json.loads(raw)
        names = [(str(k), str(t)) for k, t in index["figures"]]
        notes = [str(n) for n in index["notes"]]
    except (ValueError, KeyError, TypeError):
        return None
    bodies = slot.cache.get_many([slot.key(f"figure:{k}", fmt) for k, _ in names])
    if bodies is None:
        return None  # a figure was evicted: draw them all again
    return [Rendered(k, t, b) for (k, t), b in zip(names, bodies)], notes


def _render(render: Any, fig: Any, fmt: str) -> bytes:
    if fmt == "svg":
        return render.svg_element(fig).encode("utf-8")
    buf = io.BytesIO()
    from vcli.plots.canvas import RC, matplotlib

    with matplotlib().rc_context(RC):
        fig.figure.savefig(buf, format="png", dpi=PNG_DPI)
    return buf.getvalue()
