"""A trial's learning curve as the stopping rules read it: its finite measurements of one
metric as (x, score) points, x the step count or elapsed seconds, score the value in the goal's
direction (higher is better)."""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Sequence, TypeGuard

from vcli.spec import MetricSpec, Trial, TrialState

__all__ = ["Curve", "Curves", "Point", "completed", "finite", "fmt", "score_at", "score_at_or_first"]


@dataclass(frozen=True)
class Point:
    x: float
    score: float  # the value in the goal's direction: higher is better
    value: float  # the value as reported


class Curve(list):
    """A trial's points sorted by x, with the x values and prefix sums of scores for
    look-ups in log time (the rules run on every report of every trial)."""

    def __init__(self, points: list[Point]):
        super().__init__(points)
        self.xs = [p.x for p in points]
        # Prefix sums of scores and of weights, each point weighted by the x span it stands
        # for (the gap to the point before; the first, the gap after): evenly spaced reports
        # weigh the same, and a long trial's thinned measurements (dense early, sparse later)
        # still average as the reports they stand for.
        self.prefix = [0.0]
        self.weights = [0.0]
        for i, p in enumerate(points):
            gap = (p.x - points[i - 1].x) if i else (points[1].x - p.x if len(points) > 1 else 1.0)
            w = gap if gap > 0 else 1.0
            self.prefix.append(self.prefix[-1] + w * p.score)
            self.weights.append(self.weights[-1] + w)

    def average(self, k: int) -> float:
        """The weighted running average of the first `k` points' scores (k >= 1)."""
        return self.prefix[k] / self.weights[k]

    def upto(self, x: float) -> int:
        """How many points have x' <= x."""
        return bisect.bisect_right(self.xs, x)


class Curves:
    """Reads trials' finite measurements of one metric as sorted (x, score) points."""

    def __init__(self, metric: MetricSpec, use_elapsed_duration: bool):
        self.metric_id = metric.metric_id
        self.sign = metric.goal.sign
        self.use_elapsed = use_elapsed_duration
        self.unit = "second" if use_elapsed_duration else "step"
        self._cache: dict[str, tuple[object, Curve]] = {}

    def points(self, trial: Trial) -> Curve:
        """The trial's curve. Cached by identity: a trial whose measurements tuple is the very
        object read before (a finished trial passed again) is not read twice."""
        hit = self._cache.get(trial.id)
        if hit is not None and hit[0] is trial.measurements:
            return hit[1]
        curve = Curve(self._read(trial))
        self._cache[trial.id] = (trial.measurements, curve)
        return curve

    def _read(self, trial: Trial) -> list[Point]:
        by_x: dict[float, Point] = {}
        for m in trial.measurements:
            x = m.elapsed_seconds if self.use_elapsed else m.step_count
            value = m.metrics.get(self.metric_id)
            if x is None or not finite(value) or not finite(x):
                continue
            by_x[float(x)] = Point(float(x), self.sign * float(value), float(value))  # a re-report replaces
        return sorted(by_x.values(), key=lambda p: p.x)

    def final_score(self, trial: Trial, points: list[Point]) -> float | None:
        fm = trial.final_measurement
        if fm is not None and finite(fm.metrics.get(self.metric_id)):
            return self.sign * float(fm.metrics[self.metric_id])
        return points[-1].score if points else None

    def value(self, score: float) -> float:
        return self.sign * score


def finite(v: object) -> TypeGuard[float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def fmt(v: float) -> str:
    return f"{v:.4g}"


def completed(trials: Sequence[Trial], trial: Trial) -> list[Trial]:
    return [t for t in trials if t.id != trial.id and t.state == TrialState.SUCCEEDED]



def score_at(points: Curve, x: float) -> float | None:
    """The last score measured at or before x (the curve as a step function)."""
    k = points.upto(x)
    return points[k - 1].score if k else None


def score_at_or_first(points: Curve, x: float) -> float:
    found = score_at(points, x)
    return points[0].score if found is None else found
