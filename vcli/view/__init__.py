"""What a person watching a study sees: a live rich table on a terminal, plain lines elsewhere.

`study_table(snapshot)` (`vcli.view.table`) is a pure function of a `StudySnapshot`;
`LiveStudyView` refreshes it with rich's `Live`; `PlainStudyView` prints one line per trial
event (for CI logs and pipes). Both take the same events from the study controller.
"""

from __future__ import annotations

import sys
import time
from typing import IO, Any, Mapping, Sequence

from vcli.spec import JobState, Measurement, MetricSpec, ParameterSpec, StudyEvent, Trial, TrialState
from vcli.tuning.events import StudyListener
from vcli.view.table import (
    CHROME_LINES,
    MESSAGE_LINES,
    StudySnapshot,
    clock,
    fmt_value,
    started_at,
    study_table,
    values_text,
    visible_trials,
)

__all__ = ["LiveStudyView", "PlainStudyView", "StudySnapshot", "StudyView", "make_study_view", "study_result_lines",
           "study_table"]


class StudyView(StudyListener):
    """Collects trial events into a snapshot; subclasses decide how to show it (`show`, with
    the event's name) and where status lines go (`progress`)."""

    #: Trials the view's latest screen left out (a live screen folds them into "... N more").
    hidden = 0

    def __init__(self, display_name: str, metrics: Sequence[MetricSpec], parameters: Sequence[ParameterSpec], max_trial_count: int) -> None:
        self.snapshot = StudySnapshot(display_name, list(metrics), [p.parameter_id for p in parameters], max_trial_count,
                                      {}, {}, {}, since=time.monotonic())
        self._trials: dict[str, Trial] = {}
        self._started: dict[str, float] = {}
        self._ended: dict[str, float] = {}
        self.snapshot.trials = self._trials
        self.snapshot.started = self._started
        self.snapshot.ended = self._ended

    def trial_started(self, trial: Trial) -> None:
        self._started[trial.id] = started_at(trial)
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
        self._record(trial)
        self.show(kind, trial)

    def _record(self, trial: Trial) -> None:
        self._trials[trial.id] = trial
        if trial.state.is_final():
            self._ended.setdefault(trial.id, time.monotonic())

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
        #: Per trial, the last measurement printed.
        self._shown: dict[str, Measurement] = {}

    def trial_started(self, trial: Trial) -> None:
        if trial.measurements:  # re-attached by `resume`: what it measured before was printed then
            self._shown[trial.id] = trial.measurements[-1]
        super().trial_started(trial)

    def _params(self, t: Trial) -> str:
        return " ".join(f"{k}={fmt_value(v)}" for k, v in t.parameters.items())

    def show(self, kind: StudyEvent, trial: Trial | None) -> None:
        if kind == StudyEvent.TRIAL_MEASUREMENT and trial is not None:
            lines = self.measurement_lines(trial)
        else:
            line = self.line(kind, trial) if trial is not None else None
            lines = [line] if line is not None else []
        if lines:
            self.stream.write("".join(line + "\n" for line in lines))
            self.stream.flush()

    def measurement_lines(self, trial: Trial) -> list[str]:
        """A line for each measurement not printed yet: a trainer that reports several steps
        between two polls had only its last one printed. A measurement printed before and
        completed since (a second metric of the same step) is printed again."""
        ms = trial.measurements
        start = _first_unprinted(ms, self._shown.get(trial.id))
        if ms:
            self._shown[trial.id] = ms[-1]
        params = self._params(trial)
        return [f"trial {trial.id} measurement step={m.step_count} {values_text(self.snapshot, m.metrics)} ({params})"
                for m in ms[start:]]

    def line(self, kind: StudyEvent, trial: Trial) -> str | None:
        """The line for one event: each names the trial, its state and its parameters."""
        params = self._params(trial)
        if kind == StudyEvent.TRIAL_STARTED:
            line = f"trial {trial.id} ACTIVE {params}"
            if trial.lineage is not None and trial.lineage.parent_trial_id:
                line += (f" (member {trial.lineage.member}, from trial {trial.lineage.parent_trial_id}'s checkpoint "
                         f"at step {trial.lineage.start_step})")
            return line + (f" (retry of trial {trial.retry_of})" if trial.retry_of else "")
        if kind == StudyEvent.TRIAL_STOPPING:
            at = f" at step {trial.measurements[-1].step_count}" if trial.measurements else ""
            early = ", stopped early" if trial.early_stopping_rule else ""
            return f"trial {trial.id} STOPPING{at}{early} ({params}): {_stop_reason(trial)}"
        if kind == StudyEvent.TRIAL_FINISHED:
            dur = self.snapshot.duration(trial)
            after = f" after {clock(dur)}" if dur is not None else ""
            if trial.state == TrialState.SUCCEEDED:
                values, step = self.snapshot.latest(trial)
                early = f", stopped early by the {trial.early_stopping_rule} rule" if trial.early_stopping_rule else ""
                return f"trial {trial.id} SUCCEEDED{after}{early}: {values_text(self.snapshot, values)} step={step} ({params})"
            failed = f" {trial.failure_class}" if trial.failure_class else ""
            return f"trial {trial.id} {trial.state.value}{failed}{after} ({params}): {trial.infeasible_reason}"
        return None

    def progress(self, text: str) -> None:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()


def _first_unprinted(ms: Sequence[Measurement], last: Measurement | None) -> int:
    """Where the measurements after `last` (the last one printed) start in `ms`. Found by its
    step and elapsed time (a metric merged into it since changes its values only: it is
    printed again); a long trial's measurements are thinned, so `last` may be gone, and
    then the later ones are those after it in time and step."""
    if last is None:
        return 0
    where = (last.step_count, last.elapsed_seconds)
    for j in range(len(ms) - 1, -1, -1):
        if (ms[j].step_count, ms[j].elapsed_seconds) == where:
            return j if ms[j] != last else j + 1
    after = (last.elapsed_seconds or 0.0, last.step_count)
    return next((k for k, m in enumerate(ms) if (m.elapsed_seconds or 0.0, m.step_count) > after), len(ms))


def _stop_reason(t: Trial) -> str:
    """Why the study stops a trial, naming the rule once (rules' reasons start with their name)."""
    reason = t.stop_reason or "stopped by the study"
    rule = t.early_stopping_rule
    if rule and not reason.lower().startswith((rule.lower(), "pbt")):
        return f"{rule} rule: {reason}"
    return reason


class LiveStudyView(StudyView):
    """A rich Live screen (`study_table`) sized to the terminal, redrawn on every event and
    four times a second (for durations, elapsed time and resizes). Status messages show in
    the screen's last lines; WARNING and ERROR lines are also printed above it, to stay."""

    def __init__(self, stream: IO[str], *args: Any) -> None:
        super().__init__(*args)
        import threading
        from collections import deque

        from rich.console import Console
        from rich.live import Live

        self._lock = threading.Lock()
        self.messages: deque[str] = deque(maxlen=MESSAGE_LINES)
        #: Lines kept free under the screen: once the study ends, for the lines that report it.
        self._margin = 0
        self.console = Console(file=stream)
        self.live = Live(console=self.console, refresh_per_second=4, transient=False, get_renderable=self._screen)
        self.live.start()

    def _screen(self) -> Any:
        """The screen now (called by Live's refresh thread as well: reads a copy)."""
        with self._lock:
            snap = StudySnapshot(self.snapshot.display_name, self.snapshot.metrics, self.snapshot.parameter_ids,
                                 self.snapshot.max_trial_count, dict(self._trials), dict(self._started), dict(self._ended),
                                 self.snapshot.state, self.snapshot.since)
            messages = list(self.messages)
        height = self.console.height - self._margin
        self.hidden = len(snap.trials) - len(visible_trials(snap, max(1, height - CHROME_LINES))[0])
        return study_table(snap, width=self.console.width, height=height, messages=messages)

    def _record(self, trial: Trial) -> None:
        with self._lock:  # the refresh thread reads these (`_screen`)
            super()._record(trial)

    def trial_started(self, trial: Trial) -> None:
        with self._lock:
            self._started[trial.id] = started_at(trial)
        self._event(StudyEvent.TRIAL_STARTED, trial)

    def show(self, kind: StudyEvent, trial: Trial | None) -> None:
        self.live.refresh()

    def progress(self, text: str) -> None:
        from rich.text import Text

        if text.startswith(("WARNING", "ERROR")):
            self.live.console.print(Text(text))
        with self._lock:
            self.messages.append(text)
        self.live.refresh()

    def close(self, state: JobState) -> None:
        with self._lock:
            super().close(state)
            self._margin = 4  # the final screen and the lines after it fit the terminal together
        self.live.refresh()
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

