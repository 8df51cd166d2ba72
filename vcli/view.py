"""What a person watching a study sees: a live rich table on a terminal, plain lines elsewhere.

`study_table(snapshot)` is a pure function of a `StudySnapshot`; `LiveStudyView` refreshes it
with rich's `Live`; `PlainStudyView` prints one line per trial event (for CI logs and pipes).
Both take the same events from the study controller.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import IO, Any, Mapping, Sequence

from vcli.spec import Goal, JobState, ParameterSpec, StudyEvent, Trial, TrialState

STATE_STYLE = {
    TrialState.REQUESTED: "dim",
    TrialState.ACTIVE: "cyan",
    TrialState.STOPPING: "yellow",
    TrialState.SUCCEEDED: "green",
    TrialState.INFEASIBLE: "red",
}


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


@dataclass
class StudySnapshot:
    display_name: str
    metric_id: str
    goal: Goal
    parameter_ids: Sequence[str]
    max_trial_count: int
    trials: Mapping[str, Trial] = field(default_factory=dict)
    started: Mapping[str, float] = field(default_factory=dict)
    ended: Mapping[str, float] = field(default_factory=dict)
    state: JobState = JobState.JOB_STATE_RUNNING

    def best(self) -> Trial | None:
        sign = 1.0 if self.goal == Goal.MAXIMIZE else -1.0
        done = [t for t in self.trials.values() if t.state == TrialState.SUCCEEDED and t.final_measurement]
        return max(done, key=lambda t: (sign * t.final_measurement.metrics[self.metric_id], -int(t.id)), default=None)  # type: ignore[union-attr]

    def latest(self, t: Trial) -> tuple[float | None, int | None]:
        m = t.final_measurement or (t.measurements[-1] if t.measurements else None)
        if m is None:
            return None, None
        return m.metrics.get(self.metric_id), m.step_count

    def duration(self, t: Trial) -> float | None:
        start = self.started.get(t.id)
        if start is None:
            return None
        return self.ended.get(t.id, time.monotonic()) - start


def study_table(snap: StudySnapshot) -> Any:
    """The live table: header counts, one row per trial, the best trial highlighted."""
    from rich.table import Table

    counts = {s: sum(1 for t in snap.trials.values() if t.state == s) for s in TrialState}
    best = snap.best()
    title = (
        f"{snap.display_name}  {snap.state.value}  trials {len(snap.trials)}/{snap.max_trial_count}  "
        f"succeeded {counts[TrialState.SUCCEEDED]}  infeasible {counts[TrialState.INFEASIBLE]}  "
        f"active {counts[TrialState.ACTIVE] + counts[TrialState.STOPPING]}"
    )
    if best is not None:
        value, _ = snap.latest(best)
        title += f"  best: trial {best.id} {snap.metric_id}={_fmt(value)}"
    table = Table(title=title, title_justify="left", expand=False)
    table.add_column("TRIAL", justify="right")
    table.add_column("STATE")
    for pid in snap.parameter_ids:
        table.add_column(pid, justify="right")
    goal = "max" if snap.goal == Goal.MAXIMIZE else "min"
    table.add_column(f"{snap.metric_id} ({goal})", justify="right")
    table.add_column("STEP", justify="right")
    table.add_column("TIME", justify="right")
    for t in sorted(snap.trials.values(), key=lambda t: int(t.id)):
        value, step = snap.latest(t)
        dur = snap.duration(t)
        style = "bold green" if best is not None and t.id == best.id else None
        state = f"[{STATE_STYLE[t.state]}]{t.state.value}[/]"
        table.add_row(
            t.id,
            state,
            *[_fmt(t.parameters[p]) if p in t.parameters else "-" for p in snap.parameter_ids],
            "-" if value is None else _fmt(value),
            "-" if step is None else str(step),
            "-" if dur is None else f"{dur:.1f}s",
            style=style,
        )
    return table


class StudyView:
    """Collects trial events into a snapshot; subclasses decide how to show it."""

    def __init__(self, display_name: str, metric_id: str, goal: Goal, parameters: Sequence[ParameterSpec], max_trial_count: int) -> None:
        self.snapshot = StudySnapshot(display_name, metric_id, goal, [p.parameter_id for p in parameters], max_trial_count, {}, {}, {})
        self._trials: dict[str, Trial] = {}
        self._started: dict[str, float] = {}
        self._ended: dict[str, float] = {}
        self.snapshot.trials = self._trials
        self.snapshot.started = self._started
        self.snapshot.ended = self._ended

    def event(self, kind: StudyEvent, trial: Trial | None) -> None:
        if trial is not None and kind != StudyEvent.STUDY_FINISHED:
            self._trials[trial.id] = trial
            if kind == StudyEvent.TRIAL_STARTED:
                self._started[trial.id] = time.monotonic()
            if trial.state.is_final():
                self._ended.setdefault(trial.id, time.monotonic())
        self.show(kind, trial)

    def show(self, kind: StudyEvent, trial: Trial | None) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def close(self, state: JobState) -> None:
        self.snapshot.state = JobState(state)

    def message(self, text: str) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


class PlainStudyView(StudyView):
    """One line per trial event: for pipes and CI logs."""

    def __init__(self, stream: IO[str], *args: Any) -> None:
        super().__init__(*args)
        self.stream = stream

    def _params(self, t: Trial) -> str:
        return " ".join(f"{k}={_fmt(v)}" for k, v in t.parameters.items())

    def show(self, kind: StudyEvent, trial: Trial | None) -> None:
        if trial is None:
            return
        if kind == StudyEvent.TRIAL_STARTED:
            line = f"trial {trial.id} ACTIVE {self._params(trial)}"
        elif kind == StudyEvent.TRIAL_MEASUREMENT:
            m = trial.measurements[-1]
            line = f"trial {trial.id} measurement step={m.step_count} {self.snapshot.metric_id}={_fmt(m.metrics[self.snapshot.metric_id])}"
        elif kind == StudyEvent.TRIAL_STOPPING:
            line = f"trial {trial.id} STOPPING"
        elif kind == StudyEvent.TRIAL_FINISHED:
            value, step = self.snapshot.latest(trial)
            dur = self.snapshot.duration(trial)
            tail = f" {self.snapshot.metric_id}={_fmt(value)} step={step}" if trial.state == TrialState.SUCCEEDED else f" reason: {trial.infeasible_reason}"
            line = f"trial {trial.id} {trial.state.value}{tail}" + (f" in {dur:.1f}s" if dur is not None else "")
        else:
            return
        self.stream.write(line + "\n")
        self.stream.flush()

    def message(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()


class LiveStudyView(StudyView):
    """A rich Live table refreshed on every event (and a few times a second for durations)."""

    def __init__(self, stream: IO[str], *args: Any) -> None:
        super().__init__(*args)
        from rich.console import Console
        from rich.live import Live

        self.console = Console(file=stream)
        self.live = Live(study_table(self.snapshot), console=self.console, refresh_per_second=4, transient=False)
        self.live.start()

    def show(self, kind: StudyEvent, trial: Trial | None) -> None:
        self.live.update(study_table(self.snapshot), refresh=True)

    def message(self, text: str) -> None:
        self.live.console.print(text, markup=False, highlight=False)

    def close(self, state: JobState) -> None:
        super().close(state)
        self.live.update(study_table(self.snapshot), refresh=True)
        self.live.stop()


def make_study_view(stream: IO[str], *args: Any) -> StudyView:
    if stream.isatty():
        return LiveStudyView(stream, *args)
    return PlainStudyView(stream, *args)


def finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)
