"""The embedded store: one SQLite database (WAL) under VCLI_HOME, shared by every vcli process.

Holds custom jobs (trial jobs included), hyperparameter tuning jobs, their trials and every
replica (host, address, handle, exit code, log path). Several vcli processes use it at once:
each write is one short transaction and readers never block writers (WAL). Files are 0600,
folders 0700. Nothing here knows about executors or rendering; values are plain JSON.
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import threading
import time
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from vcli.enums import JobKind, JobState, ReplicaState
from vcli.errors import StoreError
from vcli.store_tx import Tx, damaged, makedirs_private, store_errors

if TYPE_CHECKING:  # the data model's dataclasses cost ~50 ms to import: not for `custom-jobs list`
    from vcli.spec import ParameterSpec, Trial

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,                 -- customJob | hyperparameterTuningJob
    display_name TEXT NOT NULL,
    state TEXT NOT NULL,
    create_time TEXT NOT NULL,
    start_time TEXT,
    end_time TEXT,
    update_time TEXT NOT NULL,
    parent_id TEXT,                     -- the study of a trial's custom job
    trial_id TEXT,
    controller_pid INTEGER,             -- the vcli process that runs the job
    controller_start TEXT,              -- its start time, so a reused pid is not mistaken for it
    heartbeat REAL,                     -- unix time the controller last said it was alive
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    error TEXT,                         -- JSON {code, message}
    record TEXT NOT NULL                -- JSON: jobSpec / studySpec etc., labels, output dirs
);
CREATE INDEX IF NOT EXISTS jobs_kind ON jobs(kind, create_time);
CREATE INDEX IF NOT EXISTS jobs_parent ON jobs(parent_id);
CREATE TABLE IF NOT EXISTS replicas (
    job_id TEXT NOT NULL,
    task_name TEXT NOT NULL,
    host TEXT NOT NULL,
    address TEXT,
    handle TEXT,                        -- JSON ReplicaHandle
    state TEXT NOT NULL,
    exit_code INTEGER,
    message TEXT,
    log_path TEXT NOT NULL,
    metric_file TEXT NOT NULL,
    gpus TEXT,
    start_time TEXT,
    end_time TEXT,
    PRIMARY KEY (job_id, task_name)
);
CREATE TABLE IF NOT EXISTS trials (
    study_id TEXT NOT NULL,
    trial_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    state TEXT NOT NULL,
    record TEXT NOT NULL,               -- JSON Vertex Trial resource
    PRIMARY KEY (study_id, trial_id)
);
"""

SCHEMA_VERSION = 2
#: Statements that bring a store of version N-1 to version N.
MIGRATIONS = {2: ("ALTER TABLE jobs ADD COLUMN heartbeat REAL",)}
PROJECT = "local"
LOCATION = "local"


def now_iso(at: float | None = None) -> str:
    """RFC 3339 UTC with microseconds, as Vertex prints times: now, or `at` (seconds since
    the epoch)."""
    moment = datetime.now(UTC) if at is None else datetime.fromtimestamp(at, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def iso_seconds(stamp: str | None) -> float | None:
    """A stored time (`now_iso`'s form, or any ISO 8601 time; UTC when it names no zone) as
    seconds since the epoch; None for None, "" or text that is not such a time."""
    if not stamp:
        return None
    try:
        moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except (TypeError, ValueError):
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def default_home() -> Path:
    env = os.environ.get("VCLI_HOME")
    if env:  # absolute: the store records paths under it, and the dashboard opens it by URI
        return Path(os.path.abspath(os.path.expanduser(env)))
    xdg = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(xdg) / "vcli"


def new_id() -> str:
    """A Vertex-like 19-digit numeric id that sorts by creation time."""
    return f"{int(time.time() * 1_000_000) % 10**16:016d}{secrets.randbelow(1000):03d}"


def _text(value: Enum | str) -> str:
    """What a column holds for an enum member or its value (states and kinds are stored as text)."""
    return value.value if isinstance(value, Enum) else value


def _column_value(value: Any) -> Any:
    """What SQLite stores for a column value: an enum member's value, anything else as is."""
    return value.value if isinstance(value, Enum) else value


def resource_name(kind: JobKind | str, job_id: str) -> str:
    collection = "customJobs" if _text(kind) == JobKind.CUSTOM_JOB.value else "hyperparameterTuningJobs"
    return f"projects/{PROJECT}/locations/{LOCATION}/{collection}/{job_id}"


def parse_job_ref(ref: str) -> str:
    """Accept a bare id or a full resource name; return the id."""
    return ref.rstrip("/").rsplit("/", 1)[-1]


@dataclass(frozen=True)
class JobRow:
    id: str
    kind: JobKind
    display_name: str
    state: JobState
    create_time: str
    start_time: str | None
    end_time: str | None
    update_time: str
    parent_id: str | None
    trial_id: str | None
    controller_pid: int | None
    controller_start: str | None
    heartbeat: float | None
    cancel_requested: bool
    error: dict[str, Any] | None
    record: dict[str, Any]

    @property
    def name(self) -> str:
        return resource_name(self.kind, self.id)


@dataclass(frozen=True)
class ReplicaRow:
    job_id: str
    task_name: str
    host: str
    address: str | None
    handle: dict[str, str] | None
    state: ReplicaState
    exit_code: int | None
    message: str | None
    log_path: str
    metric_file: str
    gpus: str | None
    start_time: str | None
    end_time: str | None


#: The columns `update_job` and `upsert_replica` may set (names are built into SQL: never a caller's text).
_JOB_COLUMNS = frozenset(f.name for f in fields(JobRow)) - {"id"}
_REPLICA_COLUMNS = frozenset(f.name for f in fields(ReplicaRow)) - {"job_id", "task_name"}


def _columns(given: Mapping[str, Any], allowed: frozenset[str], table: str) -> str:
    """`a = ?, b = ?` for `given`'s keys, each of which must be one of `allowed`."""
    unknown = sorted(set(given) - allowed)
    if unknown:
        raise ValueError(f"{table} has no column {', '.join(unknown)}")
    return ", ".join(f"{k} = ?" for k in given)


class Store:
    """All persistent state. Thread-safe; one instance per process is enough.

    `readonly=True` opens an existing store for reading only (the dashboard): nothing is
    created, migrated or reserved, SQLite refuses every write (`mode=ro`, `query_only`), and a
    missing store, or one an older vcli wrote and no command has upgraded yet, is a `StoreError`.
    """

    def __init__(self, home: Path | str | None = None, *, readonly: bool = False) -> None:
        self.home = Path(os.path.abspath(home)) if home is not None else default_home()
        self.db_path = self.home / "vcli.db"
        self._lock = threading.RLock()
        if readonly:
            self._open_readonly()
            return
        with store_errors(self.home):
            self.home.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.chmod(self.home, 0o700)
            if not self.db_path.exists():
                fd = os.open(self.db_path, os.O_CREAT | os.O_WRONLY, 0o600)
                os.close(fd)
            self._conn = sqlite3.connect(self.db_path, timeout=30, isolation_level=None, check_same_thread=False)
            self._conn.row_factory = sqlite3.Row
            self._conn.execute("PRAGMA busy_timeout=30000")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            # The schema and WAL mode persist in the file: set them up once, not on every command.
            version = self._conn.execute("PRAGMA user_version").fetchone()[0]
            if version != SCHEMA_VERSION:
                with self._lock:
                    self._conn.execute("PRAGMA journal_mode=WAL")
                    if version:
                        for v in range(version + 1, SCHEMA_VERSION + 1):
                            for statement in MIGRATIONS.get(v, ()):
                                self._conn.execute(statement)
                    self._conn.executescript(SCHEMA)
                    self._conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            for suffix in ("-wal", "-shm"):
                p = Path(str(self.db_path) + suffix)
                if p.exists():
                    os.chmod(p, 0o600)
        self._keep_ballast()

    def _open_readonly(self) -> None:
        if not self.db_path.exists():
            raise StoreError(f"There is no vcli store in {self.home} (VCLI_HOME) yet: no job has run with this home.")
        with store_errors(self.home):
            self._conn = sqlite3.connect(f"{self.db_path.as_uri()}?mode=ro", uri=True, timeout=30,
                                         isolation_level=None, check_same_thread=False)
            self._conn.row_factory = sqlite3.Row
            self._conn.execute("PRAGMA busy_timeout=30000")
            self._conn.execute("PRAGMA query_only=1")
            version = self._conn.execute("PRAGMA user_version").fetchone()[0]
        if version != SCHEMA_VERSION:
            self._conn.close()
            raise StoreError(f"The vcli store in {self.home} (VCLI_HOME) has schema version {version}, not "
                             f"{SCHEMA_VERSION}: run any vcli command that uses it (e.g. `vcli custom-jobs list`) "
                             "to bring it up to date.")

    # ------------------------------------------------------------------ a full disk

    #: Space kept in reserve in vcli's home, so that when the disk fills up mid-run the final
    #: state of a job can still be written (the reserve is given up for it; see `release_ballast`).
    BALLAST_BYTES = 1 << 20

    @property
    def ballast_path(self) -> Path:
        return self.home / ".ballast"

    def _keep_ballast(self) -> None:
        try:
            if self.ballast_path.exists() and self.ballast_path.stat().st_size >= self.BALLAST_BYTES:
                return
            fd = os.open(self.ballast_path, os.O_CREAT | os.O_WRONLY, 0o600)
            try:
                os.posix_fallocate(fd, 0, self.BALLAST_BYTES)
            finally:
                os.close(fd)
        except OSError:
            # Already full, or a file system without fallocate: run without a reserve.
            try:
                self.ballast_path.unlink()
            except OSError:
                pass

    def release_ballast(self) -> bool:
        """Give up the reserved space (the disk is full and a final state must be written)."""
        try:
            self.ballast_path.unlink()
            return True
        except OSError:
            return False

    # ------------------------------------------------------------------ plumbing

    def _tx(self) -> Tx:
        return Tx(self._conn, self._lock, self.home)

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        with self._lock, store_errors(self.home):
            return self._conn.execute(sql, params).fetchall()

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def job_dir(self, job_id: str) -> Path:
        """The folder of a job's local files (replica logs, metric files, default outputs)."""
        path = self.home / "jobs" / job_id
        with store_errors(self.home):
            makedirs_private(path)
        return path

    # ------------------------------------------------------------------ jobs

    def create_job(
        self,
        *,
        kind: JobKind | str,
        display_name: str,
        record: Mapping[str, Any],
        state: JobState | str,
        parent_id: str | None = None,
        trial_id: str | None = None,
        job_id: str | None = None,
    ) -> JobRow:
        job_id = job_id or new_id()
        ts = now_iso()
        with self._tx() as c:
            c.execute(
                "INSERT INTO jobs (id, kind, display_name, state, create_time, update_time, parent_id, trial_id, record)"
                " VALUES (?,?,?,?,?,?,?,?,?)",
                (job_id, _text(kind), display_name, _text(state), ts, ts, parent_id, trial_id, json.dumps(record)),
            )
        row = self.get_job(job_id)
        assert row is not None
        return row

    def get_job(self, job_id: str) -> JobRow | None:
        rows = self._query("SELECT * FROM jobs WHERE id = ?", (job_id,))
        r = rows[0] if rows else None
        return _job_row(r) if r else None

    def list_jobs(self, kind: JobKind | str, *, include_trial_jobs: bool = False) -> list[JobRow]:
        sql = "SELECT * FROM jobs WHERE kind = ?"
        if not include_trial_jobs:
            sql += " AND parent_id IS NULL"
        rows = self._query(sql + " ORDER BY create_time", (_text(kind),))
        return [_job_row(r) for r in rows]

    def child_jobs(self, parent_id: str) -> list[JobRow]:
        rows = self._query("SELECT * FROM jobs WHERE parent_id = ? ORDER BY create_time", (parent_id,))
        return [_job_row(r) for r in rows]

    def update_job(self, job_id: str, **fields: Any) -> None:
        """Set columns; `record` and `error` are JSON-encoded; update_time is refreshed."""
        if "record" in fields:
            fields["record"] = json.dumps(fields["record"])
        if "error" in fields and fields["error"] is not None:
            fields["error"] = json.dumps(fields["error"])
        fields["update_time"] = now_iso()
        cols = _columns(fields, _JOB_COLUMNS, "jobs")
        with self._tx() as c:
            c.execute(f"UPDATE jobs SET {cols} WHERE id = ?", (*map(_column_value, fields.values()), job_id))

    def set_state(self, job_id: str, state: JobState | str, *, error: Mapping[str, Any] | None = None) -> None:
        """Record a state change with Vertex's time rules (startTime on RUNNING, endTime at the end)."""
        state = JobState(state)
        ts = now_iso()
        with self._tx() as c:
            c.execute("UPDATE jobs SET state = ?, update_time = ? WHERE id = ?", (state.value, ts, job_id))
            if state == JobState.JOB_STATE_RUNNING:
                c.execute("UPDATE jobs SET start_time = COALESCE(start_time, ?) WHERE id = ?", (ts, job_id))
            if state.is_final():
                c.execute("UPDATE jobs SET end_time = COALESCE(end_time, ?) WHERE id = ?", (ts, job_id))
            if error is not None:
                c.execute("UPDATE jobs SET error = ? WHERE id = ?", (json.dumps(dict(error)), job_id))

    def claim_controller(self, job_id: str, pid: int, start: str | None,
                         alive: Callable[[int, str | None], bool]) -> tuple[int, str | None] | None:
        """Make (`pid`, `start`) the job's controller unless another live one holds it.

        Atomic (one IMMEDIATE transaction), so of two processes claiming the same job at once
        exactly one wins. Returns None on success, else the live holder's (pid, start).
        """
        with self._tx() as c:
            r = c.execute("SELECT controller_pid, controller_start FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if r is None:
                return None
            held = (r[0], r[1])
            if held[0] and held != (pid, start) and alive(held[0], held[1]):
                return held
            c.execute("UPDATE jobs SET controller_pid = ?, controller_start = ?, heartbeat = ?, update_time = ?"
                      " WHERE id = ?", (pid, start, time.time(), now_iso(), job_id))
            return None

    def hand_back_controller(self, job_id: str, before: tuple[int | None, str | None, float | None],
                             claimed: tuple[int, str | None]) -> None:
        """Put back the controller (pid, start, heartbeat) `before` a claim by `claimed`, if it
        still holds the job."""
        with self._tx() as c:
            c.execute("UPDATE jobs SET controller_pid = ?, controller_start = ?, heartbeat = ? WHERE id = ?"
                      " AND controller_pid = ? AND controller_start IS ?", (*before, job_id, *claimed))

    def beat(self, job_id: str) -> None:
        """The controller is alive (see `JobRow.heartbeat`)."""
        with self._tx() as c:
            c.execute("UPDATE jobs SET heartbeat = ? WHERE id = ?", (time.time(), job_id))

    def request_cancel(self, job_id: str) -> bool:
        """Mark a job for cancellation; False if it had already ended."""
        with self._tx() as c:
            final = [s.value for s in JobState if s.is_final()]
            cur = c.execute(
                "UPDATE jobs SET cancel_requested = 1, state = ?, update_time = ?"
                f" WHERE id = ? AND state NOT IN ({', '.join('?' * len(final))})",
                (JobState.JOB_STATE_CANCELLING.value, now_iso(), job_id, *final),
            )
            return cur.rowcount > 0

    def cancel_requested(self, job_id: str) -> bool:
        return job_id in self.cancels_requested([job_id])

    def beat_all(self, job_ids: Sequence[str]) -> None:
        """`beat` for several jobs in one statement (a study and its running trial jobs)."""
        with self._tx() as c:
            c.execute(f"UPDATE jobs SET heartbeat = ? WHERE id IN ({', '.join('?' * len(job_ids))})",
                      (time.time(), *job_ids))

    def cancels_requested(self, job_ids: Sequence[str]) -> set[str]:
        """Which of these jobs another process asked to cancel, in one query."""
        rows = self._query(f"SELECT id FROM jobs WHERE cancel_requested AND id IN ({', '.join('?' * len(job_ids))})",
                           tuple(job_ids))
        return {r[0] for r in rows}

    # ------------------------------------------------------------------ replicas

    def upsert_replica(self, job_id: str, task_name: str, **fields: Any) -> None:
        """Set a replica's columns (`ReplicaRow`'s names), creating its row on first use."""
        if "handle" in fields and fields["handle"] is not None:
            fields["handle"] = json.dumps(fields["handle"])
        cols = _columns(fields, _REPLICA_COLUMNS, "replicas")
        values = tuple(map(_column_value, fields.values()))
        with self._tx() as c:
            exists = c.execute("SELECT 1 FROM replicas WHERE job_id = ? AND task_name = ?", (job_id, task_name)).fetchone()
            if exists:
                c.execute(f"UPDATE replicas SET {cols} WHERE job_id = ? AND task_name = ?", (*values, job_id, task_name))
            else:
                names = ", ".join(["job_id", "task_name", *fields])
                marks = ", ".join("?" * (len(fields) + 2))
                c.execute(f"INSERT INTO replicas ({names}) VALUES ({marks})", (job_id, task_name, *values))

    def replicas(self, job_id: str) -> list[ReplicaRow]:
        rows = self._query("SELECT * FROM replicas WHERE job_id = ? ORDER BY task_name", (job_id,))
        out = []
        for r in rows:
            with damaged(f"replica {r['task_name']} of job {job_id}"):
                out.append(ReplicaRow(
                    job_id=r["job_id"], task_name=r["task_name"], host=r["host"], address=r["address"],
                    handle=json.loads(r["handle"]) if r["handle"] else None, state=ReplicaState(r["state"]),
                    exit_code=r["exit_code"], message=r["message"], log_path=r["log_path"], metric_file=r["metric_file"],
                    gpus=r["gpus"], start_time=r["start_time"], end_time=r["end_time"],
                ))
        return out

    # ------------------------------------------------------------------ trials

    def save_trial(self, study_id: str, trial: Trial, specs: Mapping[str, ParameterSpec]) -> None:
        """Insert or replace one trial, stored as its Vertex Trial resource (`specs`: the study's
        parameters, which say how each value is written)."""
        from vcli.codec.trial import trial_to_dict

        record = trial_to_dict(trial, specs)
        with self._tx() as c:
            c.execute(
                "INSERT INTO trials (study_id, trial_id, seq, state, record) VALUES (?,?,?,?,?)"
                " ON CONFLICT(study_id, trial_id) DO UPDATE SET state = excluded.state, record = excluded.record",
                (study_id, trial.id, int(trial.id), trial.state.value, json.dumps(record)),
            )

    def trials(self, study_id: str) -> list[Trial]:
        """A study's trials in trial order."""
        from vcli.codec.trial import trial_from_dict

        return [trial_from_dict(d) for d in self.trial_records(study_id)]

    def trials_version(self, study_id: str) -> str:
        """A value that changes whenever a trial of the study is added or rewritten with another
        text (a state, a measurement, an end), read without decoding a record: the trials'
        count and their records' byte lengths, summed plain and weighted by trial number."""
        row = self._query("SELECT COUNT(*), TOTAL(length(CAST(record AS BLOB))), TOTAL(seq * length(CAST(record AS BLOB)))"
                          " FROM trials WHERE study_id = ?", (study_id,))[0]
        return f"{row[0]}:{int(row[1])}:{int(row[2])}"

    def ended_trials(self, study_id: str, known: set[str]) -> list[dict[str, Any]]:
        """The stored records of the study's trials in a final state (SUCCEEDED, INFEASIBLE)
        whose ids are not in `known`, in trial order; the others are not decoded."""
        rows = self._query("SELECT trial_id, record FROM trials WHERE study_id = ? AND state IN ('SUCCEEDED', 'INFEASIBLE')"
                           " ORDER BY seq", (study_id,))
        out = []
        for r in rows:
            if r[0] not in known:
                with damaged(f"trial {r[0]} of study {study_id}"):
                    out.append(json.loads(r[1]))
        return out

    def trial_states(self, study_id: str) -> dict[str, int]:
        """How many of the study's trials are in each state, without decoding a record."""
        rows = self._query("SELECT state, COUNT(*) FROM trials WHERE study_id = ? GROUP BY state", (study_id,))
        return {r[0]: int(r[1]) for r in rows}

    def trial_records(self, study_id: str) -> list[dict[str, Any]]:
        """A study's trials as stored: Vertex Trial resources (for describe, exports, the dashboard)."""
        rows = self._query("SELECT trial_id, record FROM trials WHERE study_id = ? ORDER BY seq", (study_id,))
        out = []
        for r in rows:
            with damaged(f"trial {r[0]} of study {study_id}"):
                out.append(json.loads(r[1]))
        return out


def _job_row(r: sqlite3.Row) -> JobRow:
    with damaged(f"job {r['id']}"):
        if not str(r["record"]).startswith("{") or not (r["error"] is None or str(r["error"]).startswith("{")):
            raise ValueError("its record or error is not a JSON object")
        return JobRow(
            id=r["id"], kind=JobKind(r["kind"]), display_name=r["display_name"], state=JobState(r["state"]),
            create_time=r["create_time"], start_time=r["start_time"], end_time=r["end_time"],
            update_time=r["update_time"], parent_id=r["parent_id"], trial_id=r["trial_id"],
            controller_pid=r["controller_pid"], controller_start=r["controller_start"], heartbeat=r["heartbeat"],
            cancel_requested=bool(r["cancel_requested"]),
            error=json.loads(r["error"]) if r["error"] else None, record=json.loads(r["record"]),
        )


def peek_jobs(kind: JobKind | str, prefix: str = "", home: Path | str | None = None) -> list[tuple[str, str]]:
    """(id, "display name  STATE") of the top-level jobs of `kind` whose id starts with `prefix`.

    For shell completion: opens the database read-only and creates nothing (no home, no
    file); an absent or unreadable store has no jobs.
    """
    db = (Path(home) if home is not None else default_home()) / "vcli.db"
    if not db.exists():
        return []
    try:
        conn = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True, timeout=2)
        try:
            rows = conn.execute(
                "SELECT id, display_name, state FROM jobs WHERE kind = ? AND parent_id IS NULL ORDER BY create_time",
                (_text(kind),),
            ).fetchall()
        finally:
            conn.close()
    except sqlite3.Error:
        return []
    return [(r[0], f"{r[1]}  {r[2]}") for r in rows if r[0].startswith(prefix)]
