"""Replica log files: one writer format for every executor, one follower for every reader.

A replica's log is a text file of records `<unix time>\\t<stream>\\t<line>` where stream is
`stdout`, `stderr` or `vcli` (messages from vcli itself about the replica, e.g. its exit).
Records end at "\n" only: a trainer's carriage returns (a progress bar) stay inside its line,
and readers decode each record on its own (a cut UTF-8 character spoils one record at most).
Executors write it (`LogWriter`, the supervisor); the foreground view, `stream-logs` and tests read it
(`read_records`, `Follower`). gcloud prints stderr lines with severity ERROR; so do we.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Iterator, Sequence


@dataclass(frozen=True)
class LogRecord:
    timestamp: float
    stream: str
    task_name: str
    message: str

    @property
    def severity(self) -> str:
        return "ERROR" if self.stream == "stderr" else "INFO"


class LogWriter:
    """Appends records to one replica's log file; safe to share between threads."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._file = os.fdopen(fd, "a", encoding="utf-8", errors="replace")

    def write(self, stream: str, line: str, timestamp: float | None = None) -> None:
        line = line.rstrip("\r\n").replace("\t", "    ")
        with self._lock:
            if self._file.closed:
                return
            self._file.write(f"{time.time() if timestamp is None else timestamp:.6f}\t{stream}\t{line}\n")
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: str) -> str:
    """`text` with its control characters escaped (`\\n`, `\\x1b`): safe to repeat in one
    line of a status message, a table cell or an error line (an escape sequence a trainer
    printed to stderr cleared the terminal each time the study's table was redrawn)."""
    import re

    return re.sub(r"[\x00-\x1f\x7f]", lambda m: _ESCAPES.get(m.group(0), f"\\x{ord(m.group(0)):02x}"), text)


def parse_line(line: str, task_name: str) -> LogRecord | None:
    parts = line.rstrip("\n").split("\t", 2)
    if len(parts) != 3:
        return None
    try:
        ts = float(parts[0])
    except ValueError:
        return None
    if not 0 <= ts < 32503680000:  # nan, inf, 1e300: not a time (stream-logs crashed, the dashboard's log page was a 500)
        return None
    return LogRecord(ts, parts[1], task_name, parts[2])


#: The most a `Follower` reads of one file per poll: a log that grew by gigabytes between two
#: polls is printed over several, in bounded memory.
POLL_READ_BYTES = 4 * 1024 * 1024


def _lines(path: str) -> Iterator[str]:
    """The complete ("\n"-terminated) lines of a file, each decoded on its own."""
    with open(path, "rb") as f:
        for raw in f:
            if raw.endswith(b"\n"):
                yield raw.decode("utf-8", errors="replace")


def read_records(path: str, task_name: str) -> list[LogRecord]:
    """Every complete record of one log file (a missing file has none)."""
    try:
        return [r for r in (parse_line(line, task_name) for line in _lines(path)) if r]
    except FileNotFoundError:
        return []


class Follower:
    """Tails several replica log files at once, yielding only complete new records."""

    def __init__(self, logs: Sequence[tuple[str, str]]) -> None:
        self._logs = list(logs)  # (task_name, path)
        self._offsets: dict[str, int] = {}
        self._partial: dict[str, bytes] = {}
        #: Did the last `poll` leave something unread (a file grew by more than POLL_READ_BYTES)?
        #: Poll again at once: a reader that ends after one last poll must drain first.
        self.behind = False

    def add(self, task_name: str, path: str) -> None:
        if all(p != path for _, p in self._logs):
            self._logs.append((task_name, path))

    def poll(self) -> list[LogRecord]:
        """New records from all files since the last call (at most POLL_READ_BYTES of each:
        `behind` says whether more is there), in time order."""
        out: list[LogRecord] = []
        self.behind = False
        for task_name, path in self._logs:
            try:
                if os.stat(path).st_size == self._offsets.get(path, 0):
                    continue  # nothing new: one stat, no open (a study polls every log ten times a second)
                with open(path, "rb") as f:
                    f.seek(self._offsets.get(path, 0))
                    chunk = f.read(POLL_READ_BYTES)
                    self._offsets[path] = f.tell()
                    self.behind = self.behind or len(chunk) == POLL_READ_BYTES
            except FileNotFoundError:
                continue
            if not chunk:
                continue
            lines = (self._partial.pop(path, b"") + chunk).split(b"\n")
            if lines[-1]:
                self._partial[path] = lines[-1]
            for line in lines[:-1]:
                record = parse_line(line.decode("utf-8", errors="replace"), task_name)
                if record:
                    out.append(record)
        out.sort(key=lambda r: r.timestamp)
        return out

    def drain(self) -> Iterator[list[LogRecord]]:
        """`poll` until nothing is left unread: everything written so far, a batch at a time."""
        while True:
            yield self.poll()
            if not self.behind:
                return


def last_times(log_path: str) -> dict[str, float]:
    """The time of the last stdout and stderr record in a local replica log: where the log of
    a re-attached replica (an adopted container, a resumed SSH replica) goes on."""
    out: dict[str, float] = {}
    try:
        for line in _lines(log_path):
            stamp, _, rest = line.partition("\t")
            stream = rest.partition("\t")[0]
            if stream in ("stdout", "stderr"):
                try:
                    out[stream] = max(out.get(stream, 0.0), float(stamp))
                except ValueError:
                    continue
    except OSError:
        pass
    return out
