"""What a container says and how it ended: its log stream as lines, its state as a status.

Pure functions of what the engine returns (no SDK import): `iter_log_lines` splits a
`logs(timestamps=True)` stream into timed lines, `status_from_state` turns `State` (docker
inspect) into a ReplicaStatus with a one-line message, and `secret_values` lists what must
not reach the replica's log.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import replace
from typing import Any, Iterable, Iterator, Mapping

from vcli.executors import ReplicaLaunch, ReplicaStatus, epoch_seconds
from vcli.executors.supervisor import MASK_MIN_LENGTH, MAX_RECORD_BYTES

__all__ = ["iter_log_lines", "parse_docker_timestamp", "secret_values", "status_from_state"]


def parse_docker_timestamp(text: str) -> float | None:
    """`2024-05-01T12:34:56.123456789Z` -> unix time (None if not that shape)."""
    m = re.fullmatch(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d+))?Z", text)
    if not m:
        return None
    whole = calendar.timegm(tuple(int(g) for g in m.groups()[:6]) + (0, 0, 0))  # type: ignore[arg-type]
    return whole + (float("0." + m.group(7)) if m.group(7) else 0.0)


def iter_log_lines(frames: Iterable[bytes], secrets: Iterable[str] = ()) -> Iterator[tuple[float | None, str]]:
    """(timestamp, line) from a `logs(timestamps=True)` stream of one container stream.

    Each frame is one log message `<RFC3339Nano> <text>`; a message without a trailing newline
    is a partial line that the next message continues. A line takes its first part's time.
    Lines end at "\n" only (a carriage return stays inside), and a line longer than
    MAX_RECORD_BYTES characters comes as several, cut outside any of `secrets` (the caller
    masks them), so a 200 MB line costs linear time and bounded memory, as in the supervisor.
    """
    secrets = tuple(secrets)
    pending = ""
    pending_ts: float | None = None
    for frame in frames:
        text = frame.decode("utf-8", errors="replace")
        stamp, sep, rest = text.partition(" ")
        ts = parse_docker_timestamp(stamp) if sep else None
        if ts is None:
            rest = text
        if not pending:
            pending_ts = ts
        while (nl := rest.find("\n")) >= 0:
            line, rest = pending + rest[:nl], rest[nl + 1:]
            yield from _bounded(pending_ts, line, secrets)
            pending, pending_ts = "", ts
        pending += rest
        while len(pending) > MAX_RECORD_BYTES:
            cut = _cut(pending, secrets)
            yield pending_ts, pending[:cut]
            pending, pending_ts = pending[cut:], ts
    if pending:
        yield from _bounded(pending_ts, pending, secrets)


def _bounded(ts: float | None, line: str, secrets: tuple[str, ...]) -> Iterator[tuple[float | None, str]]:
    while len(line) > MAX_RECORD_BYTES:
        cut = _cut(line, secrets)
        yield ts, line[:cut]
        line = line[cut:]
    yield ts, line


def _cut(text: str, secrets: tuple[str, ...]) -> int:
    """MAX_RECORD_BYTES, or the start of an occurrence of a secret that spans it."""
    cut, moved = MAX_RECORD_BYTES, True
    while moved:
        moved = False
        for secret in secrets:
            at = text.find(secret, max(0, cut - len(secret) + 1), cut + len(secret) - 1) if secret else -1
            if 0 < at < cut:
                cut, moved = at, True
    return cut


def _start_error_text(explanation: str) -> str:
    """The useful tail of an OCI start error (`exec: "x": executable file not found in $PATH`)."""
    text = explanation.strip()
    if "caused: " in text:
        text = text.rsplit("caused: ", 1)[1]
    text = re.sub(r":\s*unknown$", "", text).strip()
    if "could not select device driver" in text:
        text += " (GPUs need the NVIDIA Container Toolkit configured for this Docker engine)"
    return text


def status_from_state(state: Mapping[str, Any], task_name: str, *, stopped: bool = False) -> ReplicaStatus:
    """ReplicaStatus from a container's `State` (docker inspect)."""
    status = state.get("Status", "")
    error = (state.get("Error") or "").strip()
    if status in ("running", "paused", "restarting") or (status == "created" and not error):
        return ReplicaStatus(running=True)
    # FinishedAt is in year 1 for a container that never ran: no end time then.
    ended = parse_docker_timestamp(str(state.get("FinishedAt") or ""))
    return replace(_ended(state, status, error, task_name, stopped=stopped), end_time=epoch_seconds(ended))


def _ended(state: Mapping[str, Any], status: str, error: str, task_name: str, *, stopped: bool) -> ReplicaStatus:
    code = int(state.get("ExitCode") or 0)
    if status == "created" and error:  # the start failed (e.g. the entrypoint does not exist)
        code = code or 127
        return ReplicaStatus(running=False, exit_code=code, message=f"replica {task_name} could not start: {_start_error_text(error)}")
    if state.get("OOMKilled"):
        return ReplicaStatus(
            running=False, exit_code=code, message=f"replica {task_name} was killed: out of memory (OOMKilled, exit {code})"
        )
    if code == 0:
        return ReplicaStatus(running=False, exit_code=0)
    if stopped:
        return ReplicaStatus(running=False, exit_code=code, message=f"replica {task_name} was stopped (exit {code})")
    if code == 137:
        return ReplicaStatus(running=False, exit_code=code, message=f"replica {task_name} was killed (SIGKILL, exit 137)")
    return ReplicaStatus(running=False, exit_code=code, message=f"replica {task_name} exited with code {code}")


def secret_values(launch: ReplicaLaunch) -> tuple[str, ...]:
    """The values to mask in the replica's log, longest first (so no part of one survives).

    The same rule as the local executor's supervisor: values shorter than MASK_MIN_LENGTH are
    left alone (masking "1" everywhere would destroy the log and protect nothing).
    """
    values = {launch.env[name] for name in launch.secret_env if launch.env.get(name)}
    return tuple(sorted((v for v in values if len(v) >= MASK_MIN_LENGTH), key=len, reverse=True))
