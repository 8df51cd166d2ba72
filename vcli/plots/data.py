"""What the study report shows, worked out from the study alone (standard library only).

A trial counts as *finished* for the plots when it SUCCEEDED with a finite final value of the
study's first metric (trials stopped early by a rule are SUCCEEDED too, Vertex semantics). The
first metric is the objective of the history, slice, parallel-coordinates, intermediate and
importance figures; the Pareto figure is the one that looks at several metrics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
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
    Trial,
    TrialState,
)
from vcli.tuning.result import best_trial, final_value


@dataclass(frozen=True)
class Finished:
    """A finished trial and its final value of the objective (the first metric)."""

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
    return a > b if goal == Goal.MAXIMIZE else a < b


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
