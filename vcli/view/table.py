"""The study's table: `study_table(snapshot)`, a pure function of a `StudySnapshot` (what a
view collected from the study's events), laid out to fit a terminal's width and height, and
the formatting its rows share with the plain lines (`vcli.view`)."""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from vcli.spec import Goal, JobState, MetricSpec, Trial, TrialState
from vcli.store import iso_seconds

if TYPE_CHECKING:
    from rich.text import Text

STATE_STYLE = {
    TrialState.REQUESTED: "dim",
    TrialState.ACTIVE: "cyan",
    TrialState.STOPPING: "yellow",
    TrialState.SUCCEEDED: "green",
    TrialState.INFEASIBLE: "red",
}


_JOB_STYLE = {
    JobState.JOB_STATE_RUNNING: "cyan",
    JobState.JOB_STATE_SUCCEEDED: "green",
    JobState.JOB_STATE_FAILED: "red",
    JobState.JOB_STATE_CANCELLED: "yellow",
    JobState.JOB_STATE_CANCELLING: "yellow",
}


def fmt_value(value: Any) -> str:
    """A value as the table and plain lines print it: 6 significant digits, and values that are
    not finite as `describe` and Vertex spell them (`NaN`, `Infinity`, `-Infinity`; the lines
    said `nan`, `inf`)."""
    if isinstance(value, float):
        if not math.isfinite(value):
            return "NaN" if value != value else "Infinity" if value > 0 else "-Infinity"
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
    #: When the view started watching the study (time.monotonic()), for elapsed time and ETA.
    since: float | None = None

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

    def duration(self, t: Trial, now: float | None = None) -> float | None:
        """Seconds the trial ran (so far, at `now`): an ended trial's from its recorded start
        and end (one that ended while no controller ran was "after 0.0s" once resumed), else
        as the view saw it."""
        if t.state.is_final() and (ran := _iso_span(t.start_time, t.end_time)) is not None:
            return ran
        start = self.started.get(t.id)
        if start is None:
            return None
        return self.ended.get(t.id, time.monotonic() if now is None else now) - start


def _iso_span(start: str | None, end: str | None) -> float | None:
    """Seconds from one stored ISO time to another; None if either is missing or unreadable."""
    a, b = iso_seconds(start), iso_seconds(end)
    return None if a is None or b is None else max(0.0, b - a)


def started_at(t: Trial) -> float:
    """The monotonic time the trial started: now, or its recorded start for a trial `resume`
    re-attached (its TIME goes on from there, not from the resume)."""
    began = iso_seconds(t.start_time)
    return time.monotonic() - (max(0.0, time.time() - began) if began is not None else 0.0)


def _lineage(t: Trial) -> str:
    """A PBT trial's origin: `2@4` (from trial 2's checkpoint at step 4), or `-`."""
    lin = t.lineage
    return f"{lin.parent_trial_id}@{lin.start_step}" if lin is not None and lin.parent_trial_id else "-"


def values_text(snap: StudySnapshot, values: Mapping[str, float]) -> str:
    return " ".join(f"{m.metric_id}={fmt_value(values[m.metric_id])}" for m in snap.metrics if m.metric_id in values)


def clock(seconds: float) -> str:
    """`0.9s`, `42s`, `3m05s`, `1h02m`: short and unambiguous (a 0.9 s trial was "after 0s")."""
    if seconds < 10:  # tenths, cut as the whole seconds below are
        return f"{int(max(0.0, seconds) * 10) / 10:.1f}s"
    s = int(max(0.0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def _note(t: Trial) -> str:
    """Why a trial is where it is, in a few words: the stopping rule, why it is INFEASIBLE, or
    that it is unsafe (safe search)."""
    if t.early_stopping_rule:
        return f"stopped early ({t.early_stopping_rule})"
    if t.state == TrialState.STOPPING and t.stop_reason:
        return f"stopping: {t.stop_reason}"
    if t.state == TrialState.INFEASIBLE and t.infeasible_reason:
        return failure_note(t.infeasible_reason, t.failure_class)
    if t.safe is False:  # safe search: SUCCEEDED, but beyond a safety threshold
        return "unsafe: breaks a safety threshold"
    if t.retry_of:
        return f"retry of trial {t.retry_of}"
    if t.lineage is not None and t.lineage.parent_trial_id:
        return f"from trial {t.lineage.parent_trial_id} at step {t.lineage.start_step}"
    return ""


def failure_note(reason: str, cls: str | None) -> str:
    """An INFEASIBLE trial's note: its failure class and its cause (`vcli.control.failures`:
    the `(CLASS: cause)` its reason ends with), or for USER the trainer's last error line."""
    if cls is None:
        return _short_reason(reason)
    marker = f" ({cls}: "
    if cls != "USER" and marker in reason:
        cause = reason.rsplit(marker, 1)[1]
        return f"{cls}: {cause[:-1] if cause.endswith(')') else cause}"
    return f"{cls}: {_short_reason(reason)}"


def _short_reason(reason: str) -> str:
    """An INFEASIBLE reason without the custom job's boilerplate: the trainer's last error line
    when there is one, else the reason's first sentence."""
    if "last error line: " in reason:
        return reason.rsplit("last error line: ", 1)[1].strip().strip(".")
    reason = reason.replace("The trial's custom job ended JOB_STATE_FAILED: ", "")
    return reason.split(". To find out more", 1)[0]


def _number_format(values: Sequence[float]) -> Callable[[float], str]:
    """One format for a column of numbers, so that they line up: fixed decimals when their
    magnitudes allow (4 significant digits of the largest), else scientific."""
    finite = [abs(v) for v in values if math.isfinite(v)]
    top = max(finite, default=0.0)
    if top == 0.0 or 1e-3 <= top < 1e7:
        decimals = 0 if top >= 1000 else max(0, 3 - int(math.floor(math.log10(top)))) if top else 1
        decimals = min(decimals, 6)
        return lambda v: f"{v:.{decimals}f}" if math.isfinite(v) else str(v)
    return lambda v: f"{v:.3e}" if math.isfinite(v) else str(v)


def _ended(trials: Sequence[Trial]) -> int:
    """The trials that ended, towards maxTrialCount: a failure run again (its `retryOf`) is not one."""
    retried = {t.retry_of for t in trials if t.retry_of is not None}
    return sum(1 for t in trials if t.state.is_final() and t.id not in retried)


def _summary(snap: StudySnapshot, now: float, width: int) -> Text:
    """The first line: state, progress, elapsed, ETA, rate and the machine's load. What does
    not fit `width` is left out, least important first (never the progress)."""
    from rich.text import Text

    trials = list(snap.trials.values())
    counts = {s: sum(1 for t in trials if t.state == s) for s in TrialState}
    ended = _ended(trials)
    early = sum(1 for t in trials if t.early_stopping_rule)
    # (priority, text): lower priority numbers stay longer; shown in this order.
    parts = [(0, f"{ended}/{snap.max_trial_count} done"),
             (1, f"{counts[TrialState.ACTIVE] + counts[TrialState.STOPPING]} active"),
             (5, f"{counts[TrialState.SUCCEEDED]} ok"), (4, f"{counts[TrialState.INFEASIBLE]} infeasible")]
    if early:
        parts.append((6, f"{early} stopped early"))
    elapsed = now - snap.since if snap.since is not None else None
    if elapsed is not None:
        parts.append((3, f"elapsed {clock(elapsed)}"))
        if ended and ended < snap.max_trial_count and not snap.state.is_final():
            rate = ended / max(elapsed, 1e-9)
            parts.append((2, f"ETA ~{clock((snap.max_trial_count - ended) / rate)}"))
            parts.append((7, f"{rate * 60:.1f} trials/min"))
    if hasattr(os, "getloadavg"):
        parts.append((8, f"load {os.getloadavg()[0]:.1f}/{os.cpu_count() or 1}"))
    head = f"{snap.display_name} {snap.state.value.removeprefix('JOB_STATE_')}  "
    while len(parts) > 1 and len(head) + len(" · ".join(p for _, p in parts)) > width:
        parts.remove(max(parts, key=lambda p: p[0]))
    text = Text(overflow="ellipsis", no_wrap=True)
    text.append(f"{snap.display_name} ", style="bold")
    text.append(snap.state.value.removeprefix("JOB_STATE_"), style=_JOB_STYLE.get(snap.state, ""))
    text.append("  " + " · ".join(p for _, p in parts))
    return text


def _best_line(snap: StudySnapshot, param_ids: Sequence[str]) -> Text:
    """The second line: the best trial so far and its parameters, or the Pareto front's size."""
    from rich.text import Text

    text = Text(overflow="ellipsis", no_wrap=True)
    best = snap.best()
    if best is not None:
        values, step = snap.latest(best)
        text.append("best ", style="bold green")
        text.append(f"trial {best.id}  {values_text(snap, values)} (step {step})  ")
        text.append(" ".join(f"{p}={fmt_value(best.parameters[p])}" for p in param_ids if p in best.parameters), style="dim")
    elif len(snap.metrics) > 1 and (front := snap.optimal()):
        text.append("Pareto front ", style="bold green")
        text.append(f"{len(front)} trial(s), marked *: " + ", ".join(sorted(front, key=int)))
    else:
        text.append("no trial has reported yet" if not any(t.measurements for t in snap.trials.values())
                    else "no trial has succeeded yet", style="dim")
    return text


#: Rows of the screen that are not trial rows: summary, best, table header and rule, the
#: "more" line, and up to `MESSAGE_LINES` status messages.
MESSAGE_LINES = 3
CHROME_LINES = 6 + MESSAGE_LINES  # and one spare line, so the screen never scrolls


def visible_trials(snap: StudySnapshot, rows: int) -> tuple[list[Trial], list[Trial]]:
    """(shown, hidden) for a table of at most `rows` trial rows: every running trial and the
    study's result (best trial or Pareto front) always; then the most recently ended ones.
    Shown in trial order."""
    trials = sorted(snap.trials.values(), key=lambda t: int(t.id))
    optimal = snap.optimal()
    must = [t for t in trials if not t.state.is_final() or t.id in optimal]
    rest = [t for t in trials if t not in must]
    rest.sort(key=lambda t: (snap.ended.get(t.id, 0.0), int(t.id)), reverse=True)
    room = max(0, rows - len(must))
    shown = {t.id for t in must} | {t.id for t in rest[:room]}
    return [t for t in trials if t.id in shown], [t for t in trials if t.id not in shown]


def study_table(snap: StudySnapshot, *, width: int = 120, height: int | None = None,
                messages: Sequence[str] = (), now: float | None = None, order: Sequence[str] | None = None) -> Any:
    """The live screen as a pure function of the snapshot: a summary line (progress, elapsed,
    ETA, rate, load), the best trial (or the Pareto front), the table of trials, a line
    counting the trials left out, and the latest status `messages`. With `height`, the table
    keeps to the screen: running trials and the result always show, older finished trials
    are folded into the count. Columns that do not fit `width` are left out, the least
    important first (note, PBT columns, time, parameters from the last, step), and the line
    under the table says which. `order` (trial ids; no `height`): exactly those rows, in
    that order (`vcli hp-tuning-jobs trials`)."""
    from rich import box
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    now = time.monotonic() if now is None else now
    rows = max(1, height - CHROME_LINES) if height is not None else len(snap.trials)
    optimal = snap.optimal()
    shown, hidden, kept, notes = _layout(snap, rows, width, optimal, now, order)
    if len(notes) > 1 and len("  ".join(notes)) > width and height is not None:  # a line more for the notes
        shown, hidden, kept, notes = _layout(snap, max(1, rows - 1), width, optimal, now)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, expand=False, padding=(0, 1))
    for col in kept:
        table.add_column(col.header, justify=col.justify, no_wrap=True, overflow="ellipsis", max_width=col.max_width)
    for i, t in enumerate(shown):
        table.add_row(*(col.cells[i] for col in kept), style="bold green" if t.id in optimal else None)
    parts: list[Any] = [_summary(snap, now, width), _best_line(snap, snap.parameter_ids), table]
    lines = ["  ".join(notes)] if len("  ".join(notes)) <= width else notes
    parts.extend(Text(line, style="dim", overflow="ellipsis", no_wrap=True) for line in lines if line)
    parts.extend(Text(m, style="dim", overflow="ellipsis", no_wrap=True) for m in messages[-MESSAGE_LINES:])
    return Group(*parts)


def _layout(snap: StudySnapshot, rows: int, width: int, optimal: set[str], now: float,
            order: Sequence[str] | None = None) -> tuple[list[Trial], list[Trial], list[_Column], list[str]]:
    """(trials shown, trials hidden, columns kept, notes under the table) for `rows` rows."""
    shown, hidden = ([snap.trials[i] for i in order], []) if order is not None else visible_trials(snap, rows)
    kept, dropped = _fit(_columns(snap, shown, optimal, now), width)
    notes = []
    if hidden:
        by_state = {s: sum(1 for t in hidden if t.state == s) for s in TrialState}
        notes.append(f"... {len(hidden)} more (" + ", ".join(f"{n} {s.value}" for s, n in by_state.items() if n) + ")")
    if dropped:
        notes.append(f"not shown (narrow terminal): {', '.join(dropped)}")
    return shown, hidden, kept, notes


@dataclass
class _Column:
    header: str
    cells: list[Text]
    #: Dropped first when the screen is narrow: higher goes first.
    drop_rank: int = 0
    justify: str = "right"
    max_width: int | None = None

    def width(self) -> int:
        """Screen columns it takes: its widest cell (within `max_width`), padding and divider."""
        widest = max([len(self.header), *(c.cell_len for c in self.cells)])
        return min(widest, self.max_width or widest) + 3


def _columns(snap: StudySnapshot, shown: Sequence[Trial], optimal: set[str], now: float) -> list[_Column]:
    from rich.text import Text

    latest = [snap.latest(t) for t in shown]
    star = len(snap.metrics) > 1
    cols = [
        _Column("TRIAL", [Text(t.id + ("*" if star and t.id in optimal else "")) for t in shown]),
        _Column("STATE", [Text(t.state.value, style=STATE_STYLE[t.state]) for t in shown], justify="left"),
        *_parameter_columns(snap, shown),
        *_metric_columns(snap, latest),
        _Column("STEP", [Text("-" if step is None else str(step)) for _, step in latest], drop_rank=5),
    ]
    durations = [snap.duration(t, now) for t in shown]
    cols.append(_Column("TIME", [Text("-" if d is None else clock(d)) for d in durations], drop_rank=30))
    return cols + _lineage_columns(snap, shown) + _note_columns(shown)


def _lineage_columns(snap: StudySnapshot, shown: Sequence[Trial]) -> list[_Column]:
    """MEMBER and FROM, in a population-based study only."""
    from rich.text import Text

    if not any(t.lineage is not None for t in snap.trials.values()):
        return []
    return [_Column("MEMBER", [Text(str(t.lineage.member) if t.lineage else "-") for t in shown], drop_rank=40),
            _Column("FROM", [Text(_lineage(t)) for t in shown], drop_rank=41)]


def _note_columns(shown: Sequence[Trial]) -> list[_Column]:
    """NOTE (why a trial stopped or failed), when any shown trial has one."""
    from rich.text import Text

    notes = [_note(t) for t in shown]
    if not any(notes):
        return []
    return [_Column("NOTE", [Text(x, style="yellow" if "stop" in x else "red") for x in notes],
                    drop_rank=50, justify="left", max_width=60)]


def _parameter_columns(snap: StudySnapshot, shown: Sequence[Trial]) -> list[_Column]:
    """One column per parameter; floats share one number format per column."""
    from rich.text import Text

    cols = []
    for i, pid in enumerate(snap.parameter_ids):
        vals = [t.parameters.get(pid) for t in shown]
        fmt = _number_format([v for v in vals if isinstance(v, float)])
        cells = [Text("-" if v is None else fmt(v) if isinstance(v, float) else str(v)) for v in vals]
        cols.append(_Column(pid, cells, drop_rank=10 + i, max_width=24))  # the last parameters go first
    return cols


def _metric_columns(snap: StudySnapshot, latest: Sequence[tuple[Mapping[str, float], int | None]]) -> list[_Column]:
    """One column per metric, its goal in the header, from each trial's latest values."""
    from rich.text import Text

    cols = []
    for m in snap.metrics:
        vals = [values.get(m.metric_id) for values, _ in latest]
        fmt = _number_format([v for v in vals if v is not None])
        cols.append(_Column(f"{m.metric_id} ({'max' if m.goal == Goal.MAXIMIZE else 'min'})",
                            [Text("-" if v is None else fmt(v)) for v in vals]))
    return cols


def _fit(columns: list[_Column], width: int) -> tuple[list[_Column], list[str]]:
    """The columns that fit `width`, and the headers of those left out: the NOTE column is
    narrowed (to 12 characters at least) before anything goes; then columns go by
    `drop_rank`, highest first. TRIAL, STATE and the metrics always stay."""
    kept = list(columns)
    dropped: list[str] = []
    while (over := sum(c.width() for c in kept) - width) > 0:
        note = next((c for c in kept if c.header == "NOTE"), None)
        if note is not None and note.width() - over >= 12 + 3:
            note.max_width = note.width() - over - 3
            break
        droppable = [c for c in kept if c.drop_rank]
        if not droppable:
            break
        victim = max(droppable, key=lambda c: c.drop_rank)
        kept.remove(victim)
        dropped.append(victim.header)
    return kept, dropped

