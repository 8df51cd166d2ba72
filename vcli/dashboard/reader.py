"""What the dashboard reads: jobs, studies, trials and replica logs, through a read-only store.

`Reader` is shared by every request thread. It opens the store lazily (a home with no store
yet shows empty lists and is opened once a job has created it) and never writes to it. A
study's figures are drawn once per `version` (the study's last change, `vcli.plots.cache.last_change`):
kept in memory for the last `FIGURE_CACHE_SIZE` studies viewed, and on disk in the home's
figure cache (`vcli.plots.cache`), which `hp-tuning-jobs plot` shares, so a dashboard
started again, or a study `plot` already drew, draws nothing.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from vcli.errors import MissingExtraError, StoreError, VcliError
from vcli.spec import JobKind, JobState, ParameterSpec, StudySpec, Trial
from vcli.store import JobRow, ReplicaRow, Store, default_home

#: The most log text one request returns (the first view of a long log starts this far from its end).
LOG_CHUNK_BYTES = 256 * 1024
#: Studies whose figures are kept (each a few SVGs).
FIGURE_CACHE_SIZE = 16
PLOT_HINT = str(MissingExtraError("Drawing plots", "plot", "matplotlib"))


@dataclass(frozen=True)
class StudyView:
    """One study as its page shows it."""

    row: JobRow
    spec: StudySpec
    params: list[ParameterSpec]
    trials: list[Trial]
    #: trial id -> the id of the custom job that ran it (its replicas and logs).
    trial_jobs: dict[str, str]
    version: str
    #: No trial changed while the trials were read: figures of them may go to the disk cache.
    settled: bool = True


@dataclass(frozen=True)
class Figures:
    """The plots of one study version, or the one line that says why there are none."""

    figures: Sequence[Any]  # vcli.plots.Figure: key, title, svg
    note: str | None = None


@dataclass(frozen=True)
class LogChunk:
    """Complete log records read from byte `start` up to `offset` (where the next read starts)."""

    records: list[tuple[float, str, str]]  # (unix time, stream, message)
    start: int
    offset: int


class Reader:
    def __init__(self, home: Path | str | None = None) -> None:
        self._home = home
        self._store: Store | None = None
        self._open_lock = threading.Lock()
        self._figures: OrderedDict[str, tuple[str, Figures]] = OrderedDict()
        self._figures_lock = threading.Lock()  # one drawing at a time: matplotlib is not thread-safe

    def store(self) -> Store | None:
        """The read-only store, or None while the home has none."""
        with self._open_lock:
            if self._store is None:
                try:
                    self._store = Store(self._home, readonly=True)
                except StoreError:
                    if (Path(self._home) if self._home else default_home()).joinpath("vcli.db").exists():
                        raise  # there is a store, and it cannot be read: say so
                    return None
            return self._store

    def close(self) -> None:
        with self._open_lock:
            if self._store is not None:
                self._store.close()
                self._store = None

    # ------------------------------------------------------------------ listing

    def custom_jobs(self) -> list[JobRow]:
        """Top-level custom jobs (not trials), newest first."""
        store = self.store()
        return list(reversed(store.list_jobs(JobKind.CUSTOM_JOB))) if store else []

    def studies(self) -> list[tuple[JobRow, int, int]]:
        """(study, trials done, maxTrialCount), newest first."""
        store = self.store()
        if store is None:
            return []
        out = []
        for row in reversed(store.list_jobs(JobKind.HYPERPARAMETER_TUNING_JOB)):
            states = store.trial_states(row.id)
            done = states.get("SUCCEEDED", 0) + states.get("INFEASIBLE", 0)
            out.append((row, done, int(row.record.get("maxTrialCount") or 0)))
        return out

    # ------------------------------------------------------------------ one study

    def study_version(self, study_id: str) -> str | None:
        """A short value that changes whenever the study's row or one of its trials changes (None:
        no such study). Cheap: two queries, no trial decoded, nothing drawn (an open tab asks
        every 2 s)."""
        store = self.store()
        row = store.get_job(study_id) if store else None
        if store is None or row is None or row.kind != JobKind.HYPERPARAMETER_TUNING_JOB.value:
            return None
        return _version(row, store.trials_version(study_id))

    def figure_slot(self, view: StudyView) -> Any:
        """Where the study's figures go in the home's figure cache (`vcli.plots.cache.Slot`);
        None when its trials changed while they were read."""
        from vcli.plots.cache import FigureCache, Slot

        if not view.settled:
            return None
        return Slot(FigureCache(Path(self._home) if self._home else default_home()), view.row.id, view.version)

    def study(self, study_id: str) -> StudyView | None:
        from vcli import codec
        from vcli.codec.trial import trial_from_dict

        store = self.store()
        row = store.get_job(study_id) if store else None
        if store is None or row is None or row.kind != JobKind.HYPERPARAMETER_TUNING_JOB.value:
            return None
        before = store.trials_version(study_id)
        stored = store.trial_records(study_id)
        after = store.trials_version(study_id)
        spec = codec.study_spec_from_stored(row.record["studySpec"])
        trial_jobs = {c.trial_id: c.id for c in store.child_jobs(study_id) if c.trial_id}
        return StudyView(row=row, spec=spec, params=codec.iter_parameters(spec.parameters),
                         trials=[trial_from_dict(d) for d in stored], trial_jobs=trial_jobs,
                         version=_version(row, after), settled=before == after)

    def figures(self, view: StudyView) -> Figures:
        """The study's plots (`vcli.plots.study_figures`), drawn once per study version."""
        with self._figures_lock:
            cached = self._figures.get(view.row.id)
            if cached and cached[0] == view.version:
                self._figures.move_to_end(view.row.id)
                return cached[1]
            figures = _draw(view, self.figure_slot(view))
            self._figures[view.row.id] = (view.version, figures)
            self._figures.move_to_end(view.row.id)
            while len(self._figures) > FIGURE_CACHE_SIZE:
                self._figures.popitem(last=False)
            return figures

    # ------------------------------------------------------------------ jobs and logs

    def job(self, job_id: str) -> tuple[JobRow, list[ReplicaRow]] | None:
        """A custom job (a trial's too) and its replicas; None if there is no such job."""
        store = self.store()
        row = store.get_job(job_id) if store else None
        if store is None or row is None or row.kind != JobKind.CUSTOM_JOB.value:
            return None
        return row, store.replicas(job_id)

    def replica(self, job_id: str, task_name: str) -> tuple[JobRow, ReplicaRow] | None:
        found = self.job(job_id)
        if found is None:
            return None
        row, replicas = found
        match = next((r for r in replicas if r.task_name == task_name), None)
        return (row, match) if match else None


def read_log(path: str, offset: int | None) -> LogChunk:
    """The complete records of the log file at `path` from byte `offset` (None: the last
    `LOG_CHUNK_BYTES`, from a line start), at most `LOG_CHUNK_BYTES` of them. A partial last
    line is left for the next read; a file not written yet reads as empty."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if offset is None or offset > size:  # first view, or a log that was replaced
                offset = max(0, size - LOG_CHUNK_BYTES)
                if offset:
                    f.seek(offset - 1)
                    offset += len(f.readline()) - 1  # from the next line start
            f.seek(offset)
            data = f.read(LOG_CHUNK_BYTES)
    except FileNotFoundError:
        return LogChunk([], offset or 0, offset or 0)
    complete = data[: data.rfind(b"\n") + 1]
    records = []
    for line in complete.decode("utf-8", errors="replace").splitlines():
        stamp, _, rest = line.partition("\t")
        stream, _, message = rest.partition("\t")
        try:
            records.append((float(stamp), stream, message))
        except ValueError:
            continue  # not a record (a torn write): skip it, as every reader of these logs does
    return LogChunk(records, offset, offset + len(complete))


def _version(row: JobRow, trials_version: str) -> str:
    """The study's last change (`vcli.plots.cache.last_change`): its row's state and last
    update and its trials (`Store.trials_version`), hashed."""
    from vcli.plots.cache import last_change

    return last_change(JobState(row.state).value, row.update_time, trials_version)


def _draw(view: StudyView, slot: Any) -> Figures:
    try:
        from vcli.plots import study_figures
    except ImportError:
        return Figures([], PLOT_HINT)
    try:
        return Figures(list(study_figures(view.spec, view.params, view.trials, slot=slot)))
    except ImportError:
        return Figures([], PLOT_HINT)
    except VcliError as e:  # vcli.plots says what is missing (matplotlib: pip install 'vcli[plot]')
        return Figures([], str(e))
    except Exception as e:  # a plot that cannot be drawn must not take the trial table with it
        return Figures([], f"The plots could not be drawn: {type(e).__name__}: {e}")
