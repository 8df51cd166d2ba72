"""What a person watching a study sees: a live rich table on a terminal, plain lines elsewhere.

`study_table(snapshot)` is a pure function of a `StudySnapshot`; `LiveStudyView` refreshes it
with rich's `Live`; `PlainStudyView` prints one line per trial event (for CI logs and pipes).
Both take the same events from the study controller.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from typing import IO, Any, Mapping, Sequence

from vcli.spec import Goal, JobState, MetricSpec, ParameterSpec, StudyEvent, Trial, TrialState
from vcli.tuning.events import StudyListener

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
    metrics: Sequence[MetricSpec]
    parameter_ids: Sequence[str]
    max_trial_count: int
    trials: Mapping[str, Trial] = field(default_factory=dict)
    started: Mapping[str, float] = field(default_factory=dict)
    ended: Mapping[str, float] = field(default_factory=dict)
    state: JobState = JobState.JOB_STATE_RUNNING

    @property
    def metric_id(self) -> str:
        return self.metrics[0].metric_id

    def best(self) -> Trial | None:
        """The best trial by the (first) metric; None with several metrics (see `optimal`)."""
        if len(self.metrics) > 1:
            return None
        from vcli.tuning.result import best_trial

        return best_trial(self.trials.values(), self.metrics[0])

    def optimal(self) -> set[str]:
        """Ids of the study's result so far: the best trial, or the Pareto front."""
        if len(self.metrics) == 1:
            best = self.best()
            return {best.id} if best is not None else set()
        from vcli.tuning.pareto import pareto_front

        return {t.id for t in pareto_front(list(self.trials.values()), list(self.metrics))}

    def latest(self, t: Trial) -> tuple[Mapping[str, float], int | None]:
        """The trial's final measurement, else its latest one: (metric values, step)."""
        m = t.final_measurement or (t.measurements[-1] if t.measurements else None)
        if m is None:
            return {}, None
        return m.metrics, m.step_count

    def duration(self, t: Trial) -> float | None:
        start = self.started.get(t.id)
        if start is None:
            return None
        return self.ended.get(t.id, time.monotonic()) - start


def _state_text(t: Trial) -> str:
    text = f"[{STATE_STYLE[t.state]}]{t.state.value}[/]"
    if t.early_stopping_rule:
        text += f" [yellow](stopped early: {t.early_stopping_rule})[/]"
    return text


def _lineage(t: Trial) -> str:
    """A PBT trial's origin: `2@4` (from trial 2's checkpoint at step 4), or `-`."""
    lin = t.lineage
    return f"{lin.parent_trial_id}@{lin.start_step}" if lin is not None and lin.parent_trial_id else "-"


def _values(snap: StudySnapshot, values: Mapping[str, float]) -> str:
    return " ".join(f"{m.metric_id}={_fmt(values[m.metric_id])}" for m in snap.metrics if m.metric_id in values)


def study_table(snap: StudySnapshot) -> Any:
    """The live table: header counts, one row per trial, the best trial (or, with several
    metrics, the Pareto front) highlighted and starred."""
    from rich.table import Table

    counts = {s: sum(1 for t in snap.trials.values() if t.state == s) for s in TrialState}
    optimal = snap.optimal()
    early = sum(1 for t in snap.trials.values() if t.early_stopping_rule)
    title = (
        f"{snap.display_name}  {snap.state.value}  trials {len(snap.trials)}/{snap.max_trial_count}  "
        f"succeeded {counts[TrialState.SUCCEEDED]}  infeasible {counts[TrialState.INFEASIBLE]}  "
        f"active {counts[TrialState.ACTIVE] + counts[TrialState.STOPPING]}"
    )
    if early:
        title += f"  stopped early {early}"
    best = snap.best()
    if best is not None:
        values, _ = snap.latest(best)
        title += f"  best: trial {best.id} {_values(snap, values)}"
    elif optimal:
        title += f"  Pareto front: {len(optimal)} trial(s) (*)"
    table = Table(title=title, title_justify="left", expand=False)
    table.add_column("TRIAL", justify="right")
    table.add_column("STATE")
    for pid in snap.parameter_ids:
        table.add_column(pid, justify="right")
    for m in snap.metrics:
        table.add_column(f"{m.metric_id} ({'max' if m.goal == Goal.MAXIMIZE else 'min'})", justify="right")
    table.add_column("STEP", justify="right")
    table.add_column("TIME", justify="right")
    pbt = any(t.lineage is not None for t in snap.trials.values())
    if pbt:
        table.add_column("MEMBER", justify="right")
        table.add_column("FROM (trial@step)", justify="right")
    for t in sorted(snap.trials.values(), key=lambda t: int(t.id)):
        values, step = snap.latest(t)
        dur = snap.duration(t)
        on_front = t.id in optimal
        table.add_row(
            t.id + ("*" if on_front and len(snap.metrics) > 1 else ""),
            _state_text(t),
            *[_fmt(t.parameters[p]) if p in t.parameters else "-" for p in snap.parameter_ids],
            *[_fmt(values[m.metric_id]) if m.metric_id in values else "-" for m in snap.metrics],
            "-" if step is None else str(step),
            "-" if dur is None else f"{dur:.1f}s",
            *([str(t.lineage.member) if t.lineage else "-", _lineage(t)] if pbt else []),
            style="bold green" if on_front else None,
        )
    return table


class StudyView(StudyListener):
    """Collects trial events into a snapshot; subclasses decide how to show it (`show`, with
    the event's name) and where status lines go (`progress`)."""

    def __init__(self, display_name: str, metrics: Sequence[MetricSpec], parameters: Sequence[ParameterSpec], max_trial_count: int) -> None:
        self.snapshot = StudySnapshot(display_name, list(metrics), [p.parameter_id for p in parameters], max_trial_count, {}, {}, {})
        self._trials: dict[str, Trial] = {}
        self._started: dict[str, float] = {}
        self._ended: dict[str, float] = {}
        self.snapshot.trials = self._trials
        self.snapshot.started = self._started
        self.snapshot.ended = self._ended

    def trial_started(self, trial: Trial) -> None:
        self._started[trial.id] = time.monotonic()
        self._event(StudyEvent.TRIAL_STARTED, trial)

    def trial_measured(self, trial: Trial) -> None:
        self._event(StudyEvent.TRIAL_MEASUREMENT, trial)

    def trial_stopping(self, trial: Trial) -> None:
        self._event(StudyEvent.TRIAL_STOPPING, trial)

    def trial_ended(self, trial: Trial) -> None:
        self._event(StudyEvent.TRIAL_FINISHED, trial)

    def study_ended(self, state: JobState, best: Trial | None, optimal: Sequence[Trial]) -> None:
        self.show(StudyEvent.STUDY_FINISHED, best)

    def _event(self, kind: StudyEvent, trial: Trial) -> None:
        self._trials[trial.id] = trial
        if trial.state.is_final():
            self._ended.setdefault(trial.id, time.monotonic())
        self.show(kind, trial)

    def show(self, kind: StudyEvent, trial: Trial | None) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def close(self, state: JobState) -> None:
        self.snapshot.state = JobState(state)


class PlainStudyView(StudyView):
    """One line per trial event on `stream`: for pipes and CI logs. Status messages (a trial
    stopped early, replicas stopping, waiting for capacity) go to stderr, as every status
    line does, so that `stream` holds the trial lines alone."""

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
            if trial.lineage is not None and trial.lineage.parent_trial_id:
                line += (f" (member {trial.lineage.member}, from trial {trial.lineage.parent_trial_id}'s checkpoint "
                         f"at step {trial.lineage.start_step})")
        elif kind == StudyEvent.TRIAL_MEASUREMENT:
            m = trial.measurements[-1]
            line = f"trial {trial.id} measurement step={m.step_count} {_values(self.snapshot, m.metrics)}"
        elif kind == StudyEvent.TRIAL_STOPPING:
            at = f" at step {trial.measurements[-1].step_count}" if trial.measurements else ""
            why = f" (stopped early by the {trial.early_stopping_rule} rule: {trial.stop_reason})" if trial.early_stopping_rule else ""
            line = f"trial {trial.id} STOPPING{at}{why}"
        elif kind == StudyEvent.TRIAL_FINISHED:
            values, step = self.snapshot.latest(trial)
            dur = self.snapshot.duration(trial)
            tail = f" {_values(self.snapshot, values)} step={step}" if trial.state == TrialState.SUCCEEDED else f" reason: {trial.infeasible_reason}"
            if trial.early_stopping_rule:
                tail += f" (stopped early: {trial.early_stopping_rule})"
            line = f"trial {trial.id} {trial.state.value}{tail}" + (f" in {dur:.1f}s" if dur is not None else "")
        else:
            return
        self.stream.write(line + "\n")
        self.stream.flush()

    def progress(self, text: str) -> None:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()


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

    def progress(self, text: str) -> None:
        self.live.console.print(text, markup=False, highlight=False)

    def close(self, state: JobState) -> None:
        super().close(state)
        self.live.update(study_table(self.snapshot), refresh=True)
        self.live.stop()


def make_study_view(stream: IO[str], *args: Any) -> StudyView:
    if stream.isatty():
        return LiveStudyView(stream, *args)
    return PlainStudyView(stream, *args)


def study_result_lines(
    metrics: Sequence[MetricSpec], best: Trial | None, optimal: Sequence[Trial],
    schedule: Sequence[Mapping[str, Any]] | None, param_specs: Mapping[str, ParameterSpec],
) -> list[str]:
    """What an ended study found, for people: the Pareto front (several metrics), the best
    trial with its PBT schedule (`schedule`: its lineage's legs), or the best trial and the
    args it ran with. Empty when no trial succeeded."""
    from vcli.codec.trial import trial_args

    def args(parameters: Mapping[str, Any]) -> str:
        return " ".join(trial_args(param_specs, parameters))

    if len(metrics) > 1:
        front = [t for t in optimal if t.final_measurement is not None]
        lines = [f"Pareto front: {len(front)} trial(s) not dominated by any other:"] if front else []
        for t in front:
            values = " ".join(f"{k}={v:.6g}" for k, v in t.final_measurement.metrics.items())  # type: ignore[union-attr]
            lines.append(f"  trial {t.id}: {values} with {args(t.parameters)}")
        return lines
    if best is None or best.final_measurement is None:
        return []
    metric_id = metrics[0].metric_id
    head = f"Best trial: {best.id} {metric_id}={best.final_measurement.metrics[metric_id]:.6g} (step {best.final_measurement.step_count})"
    if not schedule:
        return [f"{head} with {args(best.parameters)}"]
    return [f"{head}; its schedule (PBT lineage):",
            *(f"  steps {leg['fromStep']}-{leg['toStep']}: trial {leg['trialId']} with {args(leg['parameters'])}"
              for leg in schedule)]


def finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)
