"""The convex rule (Vertex's `convexAutomatedStoppingSpec`)."""

from __future__ import annotations

import math
from typing import Sequence

from vcli.spec import ConvexAutomatedStoppingSpec, MetricSpec, StudySpec, Trial, iter_parameters
from vcli.tuning.stopping.base import FieldError, RuleType
from vcli.tuning.stopping.curves import Curve, Curves, completed, fmt

#: Vertex's default min_measurement_count.
CONVEX_DEFAULT_MIN_MEASUREMENTS = 5




class ConvexRule:
    """Vertex's convex rule: extrapolate the trial's curve optimistically to max_step_count and
    stop it when even that cannot beat the best completed trial.

    The optimistic estimate assumes diminishing returns (a convex loss, a concave accuracy):
    the best-so-far curve, extended in a straight line with its slope over the last
    min_measurement_count measurements, bounds what the trial can still reach. Vertex's fields:

    * max_step_count: the x a full trial reaches; unset: learnt as the largest last x of the
      completed trials (no decision before one exists).
    * min_step_count: trials without a measurement past it are not judged; unset: a tenth of
      max_step_count.
    * min_measurement_count (default 5): no decision before min_measurement_count + 1
      completed trials, nor for a trial with fewer measurements.
    * use_elapsed_duration: x is elapsed seconds; the step counts above are read as seconds.
    * learning_rate_parameter_name: accepted (the codec checks it names a parameter) but not
      used: vcli's estimate needs no learning rate.
    * update_all_stopped_trials: accepted and ignored; vcli never rewrites a stopped trial's
      measurements (nor adds Vertex's predicted last measurement): a stopped trial keeps the
      measurement its trainer reported.

    A completely flat curve gives no prediction (as Vertex says), so it is never stopped.
    Counted: SUCCEEDED trials (early-stopped included), by their final value. Stateless.
    """

    name = "convex"

    def __init__(self, metric: MetricSpec, spec: ConvexAutomatedStoppingSpec):
        spec = _unset_zeros(spec)
        self.curves = Curves(metric, spec.use_elapsed_duration)
        self.spec = spec
        self.min_measurements = (spec.min_measurement_count if spec.min_measurement_count is not None
                                 else CONVEX_DEFAULT_MIN_MEASUREMENTS)

    def review(self, trial: Trial, trials: Sequence[Trial]) -> str | None:
        """Why `trial` should stop, or None to let it go on (the class docstring's rule)."""
        c = self.curves
        own = c.points(trial)
        if len(own) < max(self.min_measurements, 2):
            return None
        done = [(t, c.points(t)) for t in completed(trials, trial)]
        finals = [s for t, pts in done if (s := c.final_score(t, pts)) is not None]
        if len(finals) < self.min_measurements + 1:
            return None
        step_range = self._step_range(done)
        if step_range is None:
            return None
        min_x, max_x = step_range
        x = own[-1].x
        if x <= min_x or x >= max_x:
            return None
        if len({p.score for p in own}) == 1:
            return None  # completely flat: no prediction
        optimistic, best_so_far = self._optimistic(own, max_x)
        best_final = max(finals)
        if optimistic >= best_final:
            return None
        return (f"convex rule: {c.metric_id} can reach at best {fmt(c.value(optimistic))} by {c.unit} "
                f"{fmt(max_x)} (best so far {fmt(c.value(best_so_far))} at {c.unit} {fmt(x)}), worse than the best "
                f"{fmt(c.value(best_final))} of {len(finals)} completed trials")

    def _step_range(self, done: Sequence[tuple[Trial, Curve]]) -> tuple[float, float] | None:
        """(min_step_count, max_step_count) with their defaults: max learnt as the largest last
        x of the completed curves `done`, min a tenth of max. None when max is unset and no
        completed trial has a measurement to learn it from."""
        max_x = self.spec.max_step_count
        if max_x is None:
            max_x = max((pts[-1].x for _, pts in done if pts), default=None)
            if max_x is None:
                return None
        min_x = self.spec.min_step_count if self.spec.min_step_count is not None else max_x / 10
        return min_x, max_x

    def _optimistic(self, own: Curve, max_x: float) -> tuple[float, float]:
        """(the optimistic score at `max_x`, the best score so far) of the curve `own`: its
        best-so-far envelope extended in a straight line with the envelope's slope over the
        last min_measurement_count points (never downwards)."""
        envelope, best = [], -math.inf
        for p in own:
            best = max(best, p.score)
            envelope.append((p.x, best))
        window = envelope[-max(self.min_measurements, 2):]
        (x0, s0), (x1, s1) = window[0], window[-1]
        slope = (s1 - s0) / (x1 - x0) if x1 > x0 else 0.0
        return s1 + max(slope, 0.0) * (max_x - x1), s1


def _unset_zeros(spec: ConvexAutomatedStoppingSpec) -> ConvexAutomatedStoppingSpec:
    """The spec as Vertex reads it: a count of 0 is not set (proto3 int64: `maxStepCount: 0`
    means "learn it", where it made every extrapolation end at x = 0 and the rule stop nothing)."""
    from dataclasses import replace

    names = ("max_step_count", "min_step_count", "min_measurement_count")
    # mypy matches a **dict against every field; these names are all `int | None` ones
    return replace(spec, **{n: None for n in names if getattr(spec, n) == 0})  # type: ignore[arg-type]


def _describe(spec: ConvexAutomatedStoppingSpec) -> str:
    spec = _unset_zeros(spec)
    unit = RULE.unit(spec)
    mx = spec.max_step_count if spec.max_step_count is not None else "learned"
    mn = spec.min_step_count if spec.min_step_count is not None else "max/10"
    mm = spec.min_measurement_count if spec.min_measurement_count is not None else CONVEX_DEFAULT_MIN_MEASUREMENTS
    return f"convex rule (max {unit} {mx}, min {unit} {mn}, min measurements {mm})"


def _check(stop: ConvexAutomatedStoppingSpec, study: StudySpec, error: FieldError) -> None:
    stop = _unset_zeros(stop)
    for name, value in (("minStepCount", stop.min_step_count), ("maxStepCount", stop.max_step_count),
                        ("minMeasurementCount", stop.min_measurement_count)):
        if value is not None and value < 0:
            raise error(name, f"must not be negative, found [{value}]")
    if stop.min_step_count is not None and stop.max_step_count is not None and stop.max_step_count < stop.min_step_count:
        raise error("maxStepCount", f"must be at least minStepCount ({stop.min_step_count}), found [{stop.max_step_count}]")
    lr = stop.learning_rate_parameter_name
    if lr and lr not in {p.parameter_id for p in iter_parameters(study.parameters)}:
        raise error("learningRateParameterName", f"[{lr}] is not a parameter of the study")


RULE = RuleType(
    name="convex", key="convexAutomatedStoppingSpec", spec=ConvexAutomatedStoppingSpec,
    flag_keys=("min-step-count", "max-step-count", "min-measurement-count", "learning-rate-parameter-name",
               "use-elapsed-duration"),
    build=lambda spec, metric: ConvexRule(metric, spec), describe=_describe, check=_check,
)
