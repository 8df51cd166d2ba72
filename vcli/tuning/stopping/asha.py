"""Asynchronous successive halving (vcli's `ashaStoppingSpec`), and the rungs Hyperband shares."""

from __future__ import annotations

import bisect
from typing import Sequence

from vcli.spec import AshaStoppingSpec, MetricSpec, StudySpec, Trial
from vcli.tuning.stopping.base import FieldError, RuleType
from vcli.tuning.stopping.curves import Curve, Curves, fmt


def check_halving(reduction_factor: int, min_step_count: int) -> None:
    if reduction_factor < 2:
        raise ValueError(f"reduction_factor must be at least 2, found {reduction_factor}")
    if min_step_count < 1:
        raise ValueError(f"min_step_count must be at least 1, found {min_step_count}")


def rungs(min_x: float, eta: int, max_x: float | None, *, upto: float | None = None, limit: int = 64) -> list[float]:
    """Rung positions min_x * eta**k, strictly below max_x (a full trial needs no judging),
    and at most `upto` when given."""
    out: list[float] = []
    r = float(min_x)
    while len(out) < limit and (max_x is None or r < max_x) and (upto is None or r <= upto):
        out.append(r)
        r *= eta
    return out


def rung_list(rungs: list[float], max_x: float | None) -> str:
    text = ", ".join(fmt(r) for r in rungs)
    return text if max_x is not None else text + ", ..."


class AshaRule:
    """Asynchronous successive halving (vcli extension), as Optuna's SuccessiveHalvingPruner.

    Rungs sit at min_step_count x reduction_factor**k, below max_step_count when given. A
    trial is judged once per rung, at its first finite measurement at or past the rung, with
    that measurement's value; it continues when that value is among the top
    max(1, n // reduction_factor) of the n values recorded at the rung so far (its own
    included; ties continue), so the first trial at a rung always continues. Counted: every
    trial with a value at the rung, whatever its state (stopped, finished, running,
    INFEASIBLE). Stops therefore happen only at rung measurements.

    State and resume: "recorded so far" means in the trials given at the time of the review,
    and each (trial, rung) judgement is kept, so a later review never re-judges it. A fresh
    rule (a replacement controller) meeting a running trial for the first time judges only
    its highest rung reached: lower rungs were judged already, since it still runs past them.
    The same review calls on the same stored trials give the same decisions; only the rung a
    dead controller judged last is judged once more, against everything stored by then.
    """

    name = "asha"

    def __init__(self, metric: MetricSpec, use_elapsed_duration: bool, reduction_factor: int,
                 min_step_count: float, max_step_count: float | None, *, label: str = "ASHA"):
        self.curves = Curves(metric, use_elapsed_duration)
        self.eta = reduction_factor
        self.min_x = min_step_count
        self.max_x = max_step_count
        self.label = label
        self._judged: dict[str, float] = {}  # trial id -> the highest rung judged (and passed)

    def review(self, trial: Trial, trials: Sequence[Trial], peers: Sequence[Trial] | None = None) -> str | None:
        """`peers` (Hyperband) limits the competitors; default: every trial."""
        c = self.curves
        own = c.points(trial)
        if not own:
            return None
        reached = rungs(self.min_x, self.eta, self.max_x, upto=own[-1].x)
        if not reached:
            return None
        last = self._judged.get(trial.id)
        todo = [r for r in reached if last is None or r > last]
        if last is None:
            todo = todo[-1:]
        pool = trials if peers is None else peers
        for rung in todo:
            mine = _value_at_rung(own, rung)
            assert mine is not None  # rung <= own[-1].x (`reached` stops at it): own has a point at or past it
            values = [v for t in pool if t.id != trial.id and (v := _value_at_rung(c.points(t), rung)) is not None]
            values.append(mine)
            keep = max(1, len(values) // self.eta)
            cutoff = sorted(values, reverse=True)[keep - 1]
            self._judged[trial.id] = rung
            if mine < cutoff:
                return (f"{self.label}: at rung {c.unit} {fmt(rung)}, {c.metric_id} {fmt(c.value(mine))} is not in "
                        f"the top 1/{self.eta} of {len(values)} trials at that rung")
        return None


def _value_at_rung(points: Curve, rung: float) -> float | None:
    """The score of the first measurement at or past the rung."""
    k = bisect.bisect_left(points.xs, rung)
    return points[k].score if k < len(points) else None



def check_halving_fields(stop: AshaStoppingSpec, study: StudySpec, error: FieldError) -> None:
    """The bounds ASHA and Hyperband share, with the YAML field names."""
    if stop.reduction_factor < 2:
        raise error("reductionFactor", f"must be an integer of at least 2, found [{stop.reduction_factor}]")
    if stop.min_step_count < 1:
        raise error("minStepCount", f"must be at least 1, found [{stop.min_step_count}]")


def _check(stop: AshaStoppingSpec, study: StudySpec, error: FieldError) -> None:
    check_halving_fields(stop, study, error)
    if stop.max_step_count is not None and stop.max_step_count < stop.min_step_count:
        raise error("maxStepCount", f"must be at least minStepCount ({stop.min_step_count}), found [{stop.max_step_count}]")


def _build(spec: AshaStoppingSpec, metric: MetricSpec) -> AshaRule:
    check_halving(spec.reduction_factor, spec.min_step_count)
    if spec.max_step_count is not None and spec.max_step_count < spec.min_step_count:
        raise ValueError(f"ASHA max_step_count {spec.max_step_count} is below min_step_count {spec.min_step_count}")
    return AshaRule(metric, spec.use_elapsed_duration, spec.reduction_factor, spec.min_step_count, spec.max_step_count)


def _describe(spec: AshaStoppingSpec) -> str:
    found = rungs(spec.min_step_count, spec.reduction_factor, spec.max_step_count, limit=6)
    return (f"ASHA (reduction factor {spec.reduction_factor}, rungs at {RULE.unit(spec)} "
            f"{rung_list(found, spec.max_step_count)})")


RULE = RuleType(
    name="asha", key="ashaStoppingSpec", spec=AshaStoppingSpec,
    flag_keys=("reduction-factor", "min-step-count", "max-step-count", "use-elapsed-duration"),
    build=_build, describe=_describe, check=_check,
)
