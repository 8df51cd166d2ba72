"""Safe search for the suggesters: what the safety metrics (`StudySpec.safety_metrics`, Vertex's
`metrics[].safetyConfig`) say about the trials a suggester was told.

A safety metric is a constraint beside the objectives: a trial is safe when its final value is
on the good side of the metric's `safetyThreshold` (at least it for MAXIMIZE, at most it for
MINIMIZE; `MetricSpec.is_safe`). The models see it minimised, as they see the objectives: a
value v of a metric with sign s (-1 for MAXIMIZE, +1 for MINIMIZE) is s * v, and the point is
safe when s * v <= s * threshold. Which suggester models it how is in each one's docstring:
the GP fits a second GP per safety metric and weighs its acquisition by the probability of
being safe, TPE adds the unsafe points to c-TPE's infeasible group, skopt imputes them the
worst value; random and grid search ignore it.

Standard library only (RANDOM_SEARCH and GRID_SEARCH import the tuning wing without numpy).
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from vcli.spec import MetricSpec, ParameterValue, Trial
from vcli.tuning.pareto import metric_values
from vcli.tuning.result import is_safe

__all__ = ["minimised_thresholds", "safe_flags", "safety_observations", "target_fraction", "unsafe_points"]


def minimised_thresholds(metrics: Sequence[MetricSpec]) -> tuple[float, ...]:
    """Each safety metric's threshold, minimised (s * threshold, the module docstring)."""
    return tuple(-m.goal.sign * float(m.safety_config.safety_threshold or 0.0) if m.safety_config else 0.0
                 for m in metrics)


def safety_observations(trials: Iterable[Trial], metrics: Sequence[MetricSpec]
                        ) -> list[tuple[Mapping[str, ParameterValue], tuple[float, ...]]]:
    """(parameters, each safety metric's value minimised) of every trial with a finite final
    value of every safety metric, in order."""
    ids = [m.metric_id for m in metrics]
    signs = [-m.goal.sign for m in metrics]
    out = []
    for t in trials:
        v = metric_values(t, ids)
        if v is not None:
            out.append((t.parameters, tuple(s * x for s, x in zip(signs, v))))
    return out


def safe_flags(trials: Iterable[Trial], objective_ids: Sequence[str], metrics: Sequence[MetricSpec]) -> list[bool]:
    """For each trial with a finite final value of every objective (an observation, in the
    order `SuggesterBase.observations` gives them): is it safe? All True without safety metrics."""
    return [not metrics or bool(is_safe(t, metrics)) for t in trials if metric_values(t, objective_ids) is not None]


def unsafe_points(trials: Iterable[Trial], metrics: Sequence[MetricSpec]) -> list[Mapping[str, ParameterValue]]:
    """The parameters of the SUCCEEDED trials that break a safety threshold, in order."""
    return [t.parameters for t in trials if metrics and is_safe(t, metrics) is False]


def target_fraction(metrics: Sequence[MetricSpec]) -> float:
    """The study's desired minimum fraction of safe trials: the largest of its safety metrics'
    `desiredMinSafeTrialsFraction` (0 when none sets one)."""
    return max((m.safety_config.desired_min_safe_trials_fraction or 0.0 for m in metrics if m.safety_config), default=0.0)
