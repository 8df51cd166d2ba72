"""What the study report shows, worked out from the study alone (standard library only).

A trial counts as *finished* for a metric when it SUCCEEDED with a finite final value of that
metric (trials stopped early by a rule are SUCCEEDED too, Vertex semantics). Every metric is
an objective: the figures that plot one objective are drawn once per metric.

A trial's *outcome* (`outcome`) says how it ended, for the marks and colours of the figures
and the tables: completed, stopped early by a rule, replaced by a PBT exploit, stopped by the
study (goal value, time budget, cancel), infeasible, running or requested.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Sequence

from vcli.spec import (
    CategoricalValueSpec,
    DiscreteValueSpec,
    DoubleValueSpec,
    Goal,
    IntegerValueSpec,
    MetricSpec,
    ParameterSpec,
    ParameterValue,
    ScaleType,
    StudySpec,
    Trial,
    TrialState,
)
from vcli.tuning.pareto import pareto_front
from vcli.tuning.result import best_trial, final_value


@dataclass(frozen=True)
class Finished:
    """A finished trial and its final value of one objective."""

    trial: Trial
    value: float


def metric_value(trial: Trial, metric_id: str) -> float | None:
    """The trial's final value of `metric_id` when it SUCCEEDED with a finite one, else None
    (`vcli.tuning.result.final_value`)."""
    return final_value(trial, metric_id)


def finished(metric: MetricSpec, trials: Sequence[Trial]) -> list[Finished]:
    """The finished trials (module docstring), in the order given."""
    return [Finished(t, v) for t in trials if (v := metric_value(t, metric.metric_id)) is not None]


def better(a: float, b: float, goal: Goal) -> bool:
    return goal.sign * a > goal.sign * b


def best_so_far(values: Sequence[float], goal: Goal) -> list[float]:
    """The running best of `values` for `goal`, one entry per value."""
    out: list[float] = []
    for v in values:
        out.append(v if not out or better(v, out[-1], goal) else out[-1])
    return out


def best(metric: MetricSpec, trials: Sequence[Trial]) -> Finished | None:
    """The finished trial with the best objective (`vcli.tuning.result.best_trial`), or None."""
    top = best_trial(trials, metric)
    value = final_value(top, metric.metric_id) if top is not None else None
    return Finished(top, value) if top is not None and value is not None else None


def study_best(spec: StudySpec, trials: Sequence[Trial]) -> Finished | None:
    """The study's best trial as its controller names it, or None (and always None with
    several metrics: the result is then the Pareto front). With Population Based Training
    only the trials that trained to maxStepCount compete (all finished ones while none has):
    the rule of `vcli.control.population`, which the views may not import."""
    if len(spec.metrics) != 1:
        return None
    metric = spec.metrics[0]
    pbt = spec.population_based_training_spec
    if pbt is not None:
        done = [f.trial for f in finished(metric, trials)]
        full = [t for t in done if t.final_measurement is not None and t.final_measurement.step_count >= pbt.max_step_count]
        trials = full or done
    return best(metric, trials)


def optimal_ids(spec: StudySpec, trials: Sequence[Trial]) -> list[str]:
    """The ids of the study's result so far, in trial order: its best trial (`study_best`)
    or, with several metrics, the Pareto front (`vcli.tuning.pareto`)."""
    if len(spec.metrics) > 1:
        return [t.id for t in pareto_front(trials, spec.metrics)]
    top = study_best(spec, trials)
    return [top.trial.id] if top is not None else []


def is_categorical(p: ParameterSpec) -> bool:
    return isinstance(p.value_spec, CategoricalValueSpec)


def is_log(p: ParameterSpec) -> bool:
    """UNIT_LOG_SCALE on a positive numeric range: plotted (and learned from) in log space."""
    lo, _ = bounds(p)
    return p.scale_type == ScaleType.UNIT_LOG_SCALE and not is_categorical(p) and lo > 0


def bounds(p: ParameterSpec) -> tuple[float, float]:
    """A numeric parameter's feasible range from its spec; (0, 0) for a categorical one."""
    v = p.value_spec
    if isinstance(v, (DoubleValueSpec, IntegerValueSpec)):
        return float(v.min_value), float(v.max_value)
    if isinstance(v, DiscreteValueSpec):
        return float(min(v.values)), float(max(v.values))
    return 0.0, 0.0


def categories(p: ParameterSpec) -> list[str]:
    v = p.value_spec
    return [str(c) for c in v.values] if isinstance(v, CategoricalValueSpec) else []


def unit(p: ParameterSpec, value: ParameterValue | None) -> float:
    """`value` placed on [0, 1] along the parameter's own axis (spec range, log where the
    scale is log, categories evenly spaced in spec order); NaN when the trial has no value
    (an inactive conditional parameter) or one outside the spec."""
    if value is None:
        return math.nan
    if is_categorical(p):
        cats = categories(p)
        if str(value) not in cats:
            return math.nan
        return 0.5 if len(cats) == 1 else cats.index(str(value)) / (len(cats) - 1)
    lo, hi = bounds(p)
    x = float(value)
    if is_log(p):
        lo, hi, x = math.log10(lo), math.log10(hi), math.log10(x) if x > 0 else math.nan
    return 0.5 if hi <= lo else (x - lo) / (hi - lo)


def fmt(value: object) -> str:
    """A value as the report writes it: floats to 6 significant digits."""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def describe(trial: Trial, params: Sequence[ParameterSpec], metrics: Sequence[MetricSpec]) -> str:
    """One line for a tooltip: `trial 3: score=0.52 | x=0.31 n=2 kind=b`."""
    final = trial.final_measurement.metrics if trial.final_measurement else {}
    values = " ".join(f"{m.metric_id}={fmt(final[m.metric_id])}" for m in metrics if m.metric_id in final)
    args = " ".join(f"{p.parameter_id}={fmt(trial.parameters[p.parameter_id])}" for p in params if p.parameter_id in trial.parameters)
    return f"trial {trial.id}: {values} | {args}".rstrip(" |")


def counts_by_state(trials: Sequence[Trial]) -> dict[str, int]:
    """How many trials are in each state, in TrialState's order, states with none left out."""
    counts = {s.value: 0 for s in TrialState}
    for t in trials:
        counts[t.state.value] += 1
    return {k: n for k, n in counts.items() if n}


# ------------------------------------------------------------------ how a trial ended

#: Outcomes, in the order legends list them.
OUTCOMES = ("completed", "unsafe", "stopped-early", "pbt", "stopped", "infeasible", "running", "requested")


def outcome(trial: Trial) -> str:
    """How the trial ended (module docstring), one of OUTCOMES. PBT's exploits are recorded as
    the early-stopping rule "pbt"; any other rule is "stopped-early"; a stop reason without
    a rule is the study's own stop."""
    if trial.state in (TrialState.ACTIVE, TrialState.STOPPING):
        return "running"
    if trial.state == TrialState.REQUESTED:
        return "requested"
    if trial.state == TrialState.INFEASIBLE:
        return "infeasible"
    if trial.safe is False:  # safe search: SUCCEEDED beyond a safety threshold, never the best
        return "unsafe"
    if trial.early_stopping_rule == "pbt":
        return "pbt"
    if trial.early_stopping_rule:
        return "stopped-early"
    return "stopped" if trial.stop_reason else "completed"


def outcome_label(trial: Trial) -> str:
    """The outcome in words: `completed`, `unsafe (beyond a safety threshold)`, `stopped early
    (median)`, `replaced by a PBT exploit`, `stopped by the study`, `infeasible`, `running`,
    `requested`."""
    kind = outcome(trial)
    if kind == "stopped-early":
        return f"stopped early ({trial.early_stopping_rule})"
    return {"pbt": "replaced by a PBT exploit", "stopped": "stopped by the study",
            "unsafe": "unsafe (beyond a safety threshold)"}.get(kind, kind)


def parse_time(iso: str | None) -> datetime | None:
    """A stored RFC 3339 time (`2024-05-01T10:00:00.123Z`) as an aware datetime; None for
    None or text that is not such a time."""
    if not iso:
        return None
    try:
        when = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def span(trial: Trial, now: datetime | None = None) -> tuple[datetime, datetime] | None:
    """(start, end) of the trial; a started trial without an end (running) ends at `now`
    (default: the current time); None for a trial that never started."""
    start = parse_time(trial.start_time)
    if start is None:
        return None
    end = parse_time(trial.end_time) or now or datetime.now(UTC)
    return start, max(start, end)


def fmt_duration(seconds: float) -> str:
    """`0.7 s`, `42 s`, `3 min 05 s`, `2 h 07 min`."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"
