"""A study's result, computed in one place: a trial's final value and the best trial.

Every reader of a study (the controller's `bestTrialId`, PBT's winner, the live table, the
report's figures) asks here, so they agree on the same rules: only SUCCEEDED trials with a
finite final value of the metric count (NaN, infinities, a missing or non-numeric value do
not), "better" follows the metric's goal (`Goal.sign`), and of equal values the earliest trial
(the lowest number) wins. With safe search (`StudySpec.safety_metrics`) a trial marked unsafe
(`Trial.safe` False) is never the best: the result is the best safe trial.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

from vcli.spec import MetricSpec, Trial, TrialState

__all__ = ["best_trial", "final_value", "is_safe"]


def final_value(trial: Trial, metric_id: str) -> float | None:
    """The trial's final value of `metric_id` when it SUCCEEDED with a finite one, else None."""
    if trial.state != TrialState.SUCCEEDED or trial.final_measurement is None:
        return None
    try:
        v = float(trial.final_measurement.metrics[metric_id])
    except (KeyError, TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def best_trial(trials: Iterable[Trial], metric: MetricSpec) -> Trial | None:
    """The best trial by `metric` (module docstring), or None when no trial has a value; a
    trial marked unsafe takes no part."""
    top: tuple[float, int, Trial] | None = None
    for position, t in enumerate(trials):
        v = final_value(t, metric.metric_id)
        if v is None or t.safe is False:
            continue
        key = (metric.goal.sign * v, -_number(t.id, position))
        if top is None or key > top[:2]:
            top = (*key, t)
    return top[2] if top is not None else None


def _number(trial_id: str, position: int) -> int:
    return int(trial_id) if trial_id.isdigit() else position


def is_safe(trial: Trial, safety_metrics: Sequence[MetricSpec]) -> bool | None:
    """Does the trial meet every safety threshold (`Trial.safe`)? None without safety metrics
    or when it has no final value (not SUCCEEDED); False when a safety metric's value is
    missing or not finite (it cannot be shown safe) or on the wrong side of its threshold."""
    if not safety_metrics or trial.state != TrialState.SUCCEEDED or trial.final_measurement is None:
        return None
    values = [final_value(trial, m.metric_id) for m in safety_metrics]
    return all(v is not None and m.is_safe(v) for m, v in zip(safety_metrics, values))
