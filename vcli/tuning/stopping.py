"""Automated early stopping: the rules behind `StudySpec.automated_stopping_spec`.

A rule sees only the study's trials (no store, no executor, no clock). The study controller
calls `rule.review(trial, trials)` each time the running trial `trial` reports new
intermediate measurements; `trials` is every trial of the study in creation order, `trial`
included with its latest measurements. `review` answers None (keep running) or a one-line
reason; the controller then stops the trial, which ends SUCCEEDED with its selected
measurement (Vertex semantics), so an early-stopped trial stays data for the rules below.

Common ground of every rule:

* The x axis is a measurement's `step_count`, or its `elapsed_seconds` when the spec says
  `use_elapsed_duration` (then every step count of the spec is read as seconds, as Vertex
  overloads them). A measurement without that x, or whose metric value is missing, NaN or
  infinite, is ignored as if it had not been reported.
* Values are compared in the goal's direction: "better" is higher for MAXIMIZE and lower for
  MINIMIZE; reasons print values as reported.
* A trial's "final value" is its `final_measurement`'s value when finite, else its last
  finite measured value. "Completed" means SUCCEEDED (early-stopped trials included);
  INFEASIBLE trials are never a reference for the curve rules.

This module imports nothing heavy: the decay-curve rule imports numpy inside its function.
"""

from __future__ import annotations

import bisect
import math
import zlib
from dataclasses import dataclass
from typing import Protocol, Sequence

from vcli.spec import (
    AshaStoppingSpec,
    AutomatedStoppingSpec,
    ConvexAutomatedStoppingSpec,
    DecayCurveAutomatedStoppingSpec,
    Goal,
    HyperbandStoppingSpec,
    MedianAutomatedStoppingSpec,
    MetricSpec,
    Trial,
    TrialState,
)

__all__ = ["StoppingRule", "stopping_rule", "describe_rule", "RULE_NAMES"]

RULE_NAMES = ("median", "decay-curve", "convex", "asha", "hyperband")

#: Median rule: completed trials that must have reached the running trial's step (Optuna's
#: MedianPruner waits for 5 finished trials; Katib's medianstop for 3).
MEDIAN_MIN_TRIALS = 5
#: Median rule: measurements a trial reports before it can be judged (its first report, often
#: taken before any training, is never enough evidence).
MEDIAN_MIN_MEASUREMENTS = 2
#: Decay-curve rule: completed full-length curves needed before anything is predicted.
DECAY_MIN_TRIALS = 5
#: Decay-curve rule: the running trial is judged from this fraction of the full length on.
DECAY_MIN_FRACTION = 0.1
#: Decay-curve rule: stop only when the prediction's upper bound (mean + Z sd, about 0.6 %
#: one-sided) is still worse than the best; Vertex: "very low probability to exceed the best".
#: 2.5 rather than 2: on bench/bench_stopping.py 2.0 stopped the eventual best trial in 2 of
#: 20 more seeds for 0.02 of the epochs saved.
DECAY_Z = 2.5
#: Convex rule: Vertex's default min_measurement_count.
CONVEX_DEFAULT_MIN_MEASUREMENTS = 5


class StoppingRule(Protocol):
    """Decides whether a running trial should stop early.

    ``review(trial, trials)`` returns None (keep running) or a one-line human reason. It never
    mutates the trials. Decisions depend only on the trials given, except for the rung
    bookkeeping of "asha"/"hyperband" documented on `AshaRule`.
    """

    name: str

    def review(self, trial: Trial, trials: Sequence[Trial]) -> str | None: ...


def stopping_rule(spec: AutomatedStoppingSpec, metric: MetricSpec) -> StoppingRule:
    """The rule for `spec`, judging trials by `metric` (the study's only metric).

    Raises ValueError for bounds that make no sense (the codec reports the same cases with
    the YAML path first).
    """
    if isinstance(spec, MedianAutomatedStoppingSpec):
        return MedianRule(metric, spec.use_elapsed_duration)
    if isinstance(spec, DecayCurveAutomatedStoppingSpec):
        return DecayCurveRule(metric, spec.use_elapsed_duration)
    if isinstance(spec, ConvexAutomatedStoppingSpec):
        return ConvexRule(metric, spec)
    if isinstance(spec, AshaStoppingSpec):
        _check_halving(spec.reduction_factor, spec.min_step_count)
        if spec.max_step_count is not None and spec.max_step_count < spec.min_step_count:
            raise ValueError(f"ASHA max_step_count {spec.max_step_count} is below min_step_count {spec.min_step_count}")
        return AshaRule(metric, spec.use_elapsed_duration, spec.reduction_factor, spec.min_step_count,
                        spec.max_step_count)
    if isinstance(spec, HyperbandStoppingSpec):
        _check_halving(spec.reduction_factor, spec.min_step_count)
        if spec.max_step_count < spec.min_step_count * spec.reduction_factor:
            raise ValueError(f"Hyperband needs max_step_count >= min_step_count x reduction_factor, "
                             f"found {spec.max_step_count}")
        return HyperbandRule(metric, spec)
    raise ValueError(f"unknown automated stopping spec {spec!r}")


def describe_rule(spec: AutomatedStoppingSpec) -> str:
    """One line for logs and `describe`, e.g. "ASHA (reduction factor 3, rungs at steps 1, 3, 9, 27)"."""
    unit = "seconds" if spec.use_elapsed_duration else "steps"
    if isinstance(spec, MedianAutomatedStoppingSpec):
        return (f"median rule (best so far vs the median of completed trials' running averages, by {unit}; "
                f"from {MEDIAN_MIN_TRIALS} completed trials)")
    if isinstance(spec, DecayCurveAutomatedStoppingSpec):
        return (f"decay-curve rule (final value predicted from {DECAY_MIN_TRIALS}+ completed curves, "
                f"by {unit})")
    if isinstance(spec, ConvexAutomatedStoppingSpec):
        mx = spec.max_step_count if spec.max_step_count is not None else "learned"
        mn = spec.min_step_count if spec.min_step_count is not None else "max/10"
        mm = spec.min_measurement_count if spec.min_measurement_count is not None else CONVEX_DEFAULT_MIN_MEASUREMENTS
        return f"convex rule (max {unit} {mx}, min {unit} {mn}, min measurements {mm})"
    if isinstance(spec, AshaStoppingSpec):
        rungs = _rungs(spec.min_step_count, spec.reduction_factor, spec.max_step_count, limit=6)
        return f"ASHA (reduction factor {spec.reduction_factor}, rungs at {unit} {_list(rungs, spec.max_step_count)})"
    if isinstance(spec, HyperbandStoppingSpec):
        n = _bracket_count(spec.min_step_count, spec.reduction_factor, spec.max_step_count)
        return (f"Hyperband (reduction factor {spec.reduction_factor}, {n} brackets, first rungs at {unit} "
                f"{', '.join(_fmt(spec.min_step_count * spec.reduction_factor**b) for b in range(n))}, "
                f"full trial {spec.max_step_count} {unit})")
    raise ValueError(f"unknown automated stopping spec {spec!r}")


# --------------------------------------------------------------------------- curves


@dataclass(frozen=True)
class _Point:
    x: float
    score: float  # the value in the goal's direction: higher is better
    value: float  # the value as reported


class _Curve(list):
    """A trial's points sorted by x, with the x values and prefix sums of scores for
    look-ups in log time (the rules run on every report of every trial)."""

    def __init__(self, points: list[_Point]):
        super().__init__(points)
        self.xs = [p.x for p in points]
        self.prefix = [0.0]
        for p in points:
            self.prefix.append(self.prefix[-1] + p.score)

    def upto(self, x: float) -> int:
        """How many points have x' <= x."""
        return bisect.bisect_right(self.xs, x)


class _Curves:
    """Reads trials' finite measurements of one metric as sorted (x, score) points."""

    def __init__(self, metric: MetricSpec, use_elapsed_duration: bool):
        self.metric_id = metric.metric_id
        self.sign = 1.0 if metric.goal == Goal.MAXIMIZE else -1.0
        self.use_elapsed = use_elapsed_duration
        self.unit = "second" if use_elapsed_duration else "step"
        self._cache: dict[str, tuple[object, _Curve]] = {}

    def points(self, trial: Trial) -> _Curve:
        """The trial's curve. Cached by identity: a trial whose measurements tuple is the very
        object read before (a finished trial passed again) is not read twice."""
        hit = self._cache.get(trial.id)
        if hit is not None and hit[0] is trial.measurements:
            return hit[1]
        curve = _Curve(self._read(trial))
        self._cache[trial.id] = (trial.measurements, curve)
        return curve

    def _read(self, trial: Trial) -> list[_Point]:
        by_x: dict[float, _Point] = {}
        for m in trial.measurements:
            x = m.elapsed_seconds if self.use_elapsed else m.step_count
            value = m.metrics.get(self.metric_id)
            if x is None or not _finite(value) or not _finite(x):
                continue
            by_x[float(x)] = _Point(float(x), self.sign * float(value), float(value))  # a re-report replaces
        return sorted(by_x.values(), key=lambda p: p.x)

    def final_score(self, trial: Trial, points: list[_Point]) -> float | None:
        fm = trial.final_measurement
        if fm is not None and _finite(fm.metrics.get(self.metric_id)):
            return self.sign * float(fm.metrics[self.metric_id])
        return points[-1].score if points else None

    def value(self, score: float) -> float:
        return self.sign * score


def _finite(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def _completed(trials: Sequence[Trial], trial: Trial) -> list[Trial]:
    return [t for t in trials if t.id != trial.id and t.state == TrialState.SUCCEEDED]


# --------------------------------------------------------------------------- median


class MedianRule:
    """Vertex's median rule: stop a trial whose best value so far is strictly worse than the
    median, over completed trials, of their running averages up to the trial's last step.

    Counted: completed trials (SUCCEEDED, early-stopped ones included) that have a measurement
    at or after the trial's last x, their running average taken over measurements up to x.
    Warm-up: at least MEDIAN_MIN_TRIALS such trials, and MEDIAN_MIN_MEASUREMENTS finite
    measurements of the trial itself. Stateless.

    Trade-off, kept for Vertex parity: on a loss that falls, a running average lags behind
    the value at x, so the median is easier to beat than Optuna's MedianPruner (median of the
    values *at* x); this rule stops fewer trials, later, and keeps more of the good ones
    (bench/README.md, "Early stopping", measures both).
    """

    name = "median"

    def __init__(self, metric: MetricSpec, use_elapsed_duration: bool):
        self.curves = _Curves(metric, use_elapsed_duration)

    def review(self, trial: Trial, trials: Sequence[Trial]) -> str | None:
        own = self.curves.points(trial)
        if len(own) < MEDIAN_MIN_MEASUREMENTS:
            return None
        x = own[-1].x
        averages = []
        for other in _completed(trials, trial):
            pts = self.curves.points(other)
            if not pts or pts[-1].x < x:
                continue
            k = pts.upto(x)
            if k:
                averages.append(pts.prefix[k] / k)
        if len(averages) < MEDIAN_MIN_TRIALS:
            return None
        median = _median(averages)
        best = max(p.score for p in own)
        if best >= median:
            return None
        c = self.curves
        return (f"median rule: best {c.metric_id} {_fmt(c.value(best))} by {c.unit} {_fmt(x)} is worse than the "
                f"median {_fmt(c.value(median))} of {len(averages)} trials' running averages at {c.unit} {_fmt(x)}")


def _median(values: list[float]) -> float:
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def _score_at(points: _Curve, x: float) -> float | None:
    """The last score measured at or before x (the curve as a step function)."""
    k = points.upto(x)
    return points[k - 1].score if k else None


def _score_at_or_first(points: _Curve, x: float) -> float:
    found = _score_at(points, x)
    return points[0].score if found is None else found


# --------------------------------------------------------------------------- decay curve


class DecayCurveRule:
    """Vertex's decay-curve rule: predict the trial's final value from the curves of completed
    trials and stop it when even an optimistic prediction cannot beat the best final value.

    The model is learnt from completed trials that ran the full length L (the largest last x
    of any completed trial): a least-squares regression of their final score on their score
    at the running trial's current x and on how much it rose since x/2 (which tells a slow
    starter from a curve that has flattened). The trial stops when the
    prediction's upper bound, mean + DECAY_Z x the prediction standard deviation (residual
    noise plus the fit's own uncertainty), is still worse than the best final score of a
    completed trial. A trial whose curve lies outside what the completed curves span (a score
    or a rise beyond all of theirs, typically a slow starter still improving fast) is not
    stopped: its prediction would be an extrapolation, and the straight line confidently
    under-predicts exactly the curves that go on to win. Below all of them on every count (a
    lower score and a smaller rise than any completed curve) it is judged as usual. Counted: SUCCEEDED trials; early-stopped ones count for the best value
    only (they have no full-length curve). Warm-up: DECAY_MIN_TRIALS full-length curves, the
    trial at x >= DECAY_MIN_FRACTION x L with at least 2 measurements. Stateless.
    """

    name = "decay-curve"

    def __init__(self, metric: MetricSpec, use_elapsed_duration: bool):
        self.curves = _Curves(metric, use_elapsed_duration)

    def review(self, trial: Trial, trials: Sequence[Trial]) -> str | None:
        c = self.curves
        own = c.points(trial)
        if len(own) < 2:
            return None
        done = [(t, c.points(t)) for t in _completed(trials, trial)]
        done = [(t, pts) for t, pts in done if pts]
        if not done:
            return None
        length = max(pts[-1].x for _, pts in done)
        x = own[-1].x
        if x >= length or x < DECAY_MIN_FRACTION * length:
            return None
        best_final = max(s for t, pts in done if (s := c.final_score(t, pts)) is not None)
        rows, finals = [], []
        for t, pts in done:
            if pts[-1].x < length:
                continue
            at = _score_at(pts, x)
            if at is None:
                continue
            rows.append((1.0, at, at - _score_at_or_first(pts, x / 2)))
            finals.append(c.final_score(t, pts))
        if len(rows) < DECAY_MIN_TRIALS:
            return None
        query = (1.0, own[-1].score, own[-1].score - _score_at_or_first(own, x / 2))
        upper = _prediction_upper_bound(rows, finals, query)
        if upper is None or upper >= best_final:
            return None
        return (f"decay-curve rule: {c.metric_id} {_fmt(own[-1].value)} at {c.unit} {_fmt(x)} predicts at best "
                f"{_fmt(c.value(upper))} at {c.unit} {_fmt(length)} (from {len(rows)} completed curves), "
                f"worse than the best {_fmt(c.value(best_final))}")


def _prediction_upper_bound(rows, finals, query) -> float | None:
    """mean + DECAY_Z sd of the least-squares prediction at `query`; None when the fit is
    degenerate or would extrapolate: a feature of `query` outside the rows' [min, max], unless
    `query` is at or below the minimum on every feature (worse than every row on every count,
    e.g. a diverging trial: the line may be trusted to call that bad)."""
    import numpy as np

    X = np.asarray(rows, dtype=float)
    y = np.asarray(finals, dtype=float)
    q = np.asarray(query, dtype=float)
    lows, highs = X[:, 1:].min(axis=0), X[:, 1:].max(axis=0)
    tol = 1e-12 * (1 + np.abs(X[:, 1:]).max(axis=0))
    outside = np.any(q[1:] > highs + tol) or np.any(q[1:] < lows - tol)
    if outside and not np.all(q[1:] <= lows + tol):
        return None
    keep = [0] + [j for j in range(1, X.shape[1]) if np.ptp(X[:, j]) > 1e-12 * (1 + np.abs(X[:, j]).max())]
    X, q = X[:, keep], q[keep]
    n, p = X.shape
    if n <= p:
        return None
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    resid = y - X @ coef
    sigma2 = float(resid @ resid) / (n - p)
    xtx_inv = np.linalg.pinv(X.T @ X)
    var = sigma2 * (1.0 + float(q @ xtx_inv @ q))
    return float(q @ coef) + DECAY_Z * math.sqrt(max(var, 0.0))


# --------------------------------------------------------------------------- convex


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
        self.curves = _Curves(metric, spec.use_elapsed_duration)
        self.spec = spec
        self.min_measurements = (spec.min_measurement_count if spec.min_measurement_count is not None
                                 else CONVEX_DEFAULT_MIN_MEASUREMENTS)

    def review(self, trial: Trial, trials: Sequence[Trial]) -> str | None:
        c = self.curves
        own = c.points(trial)
        if len(own) < max(self.min_measurements, 2):
            return None
        done = [(t, c.points(t)) for t in _completed(trials, trial)]
        finals = [s for t, pts in done if (s := c.final_score(t, pts)) is not None]
        if len(finals) < self.min_measurements + 1:
            return None
        max_x = self.spec.max_step_count
        if max_x is None:
            max_x = max((pts[-1].x for _, pts in done if pts), default=None)
            if max_x is None:
                return None
        min_x = self.spec.min_step_count if self.spec.min_step_count is not None else max_x / 10
        x = own[-1].x
        if x <= min_x or x >= max_x:
            return None
        if len({p.score for p in own}) == 1:
            return None  # completely flat: no prediction
        envelope, best = [], -math.inf
        for p in own:
            best = max(best, p.score)
            envelope.append((p.x, best))
        window = envelope[-max(self.min_measurements, 2):]
        (x0, s0), (x1, s1) = window[0], window[-1]
        slope = (s1 - s0) / (x1 - x0) if x1 > x0 else 0.0
        optimistic = s1 + max(slope, 0.0) * (max_x - x1)
        best_final = max(finals)
        if optimistic >= best_final:
            return None
        return (f"convex rule: {c.metric_id} can reach at best {_fmt(c.value(optimistic))} by {c.unit} "
                f"{_fmt(max_x)} (best so far {_fmt(c.value(s1))} at {c.unit} {_fmt(x)}), worse than the best "
                f"{_fmt(c.value(best_final))} of {len(finals)} completed trials")


# --------------------------------------------------------------------------- ASHA / Hyperband


def _check_halving(reduction_factor: int, min_step_count: int) -> None:
    if reduction_factor < 2:
        raise ValueError(f"reduction_factor must be at least 2, found {reduction_factor}")
    if min_step_count < 1:
        raise ValueError(f"min_step_count must be at least 1, found {min_step_count}")


def _rungs(min_x: float, eta: int, max_x: float | None, *, upto: float | None = None, limit: int = 64) -> list[float]:
    """Rung positions min_x * eta**k, strictly below max_x (a full trial needs no judging),
    and at most `upto` when given."""
    out, r = [], float(min_x)
    while len(out) < limit and (max_x is None or r < max_x) and (upto is None or r <= upto):
        out.append(r)
        r *= eta
    return out


def _list(rungs: list[float], max_x: float | None) -> str:
    text = ", ".join(_fmt(r) for r in rungs)
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
        self.curves = _Curves(metric, use_elapsed_duration)
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
        reached = _rungs(self.min_x, self.eta, self.max_x, upto=own[-1].x)
        if not reached:
            return None
        last = self._judged.get(trial.id)
        todo = [r for r in reached if last is None or r > last]
        if last is None:
            todo = todo[-1:]
        pool = trials if peers is None else peers
        for rung in todo:
            mine = _value_at_rung(own, rung)
            values = [v for t in pool if t.id != trial.id and (v := _value_at_rung(c.points(t), rung)) is not None]
            values.append(mine)
            keep = max(1, len(values) // self.eta)
            cutoff = sorted(values, reverse=True)[keep - 1]
            self._judged[trial.id] = rung
            if mine < cutoff:
                return (f"{self.label}: at rung {c.unit} {_fmt(rung)}, {c.metric_id} {_fmt(c.value(mine))} is not in "
                        f"the top 1/{self.eta} of {len(values)} trials at that rung")
        return None


def _value_at_rung(points: _Curve, rung: float) -> float | None:
    """The score of the first measurement at or past the rung."""
    k = bisect.bisect_left(points.xs, rung)
    return points[k].score if k < len(points) else None


def _bracket_count(min_x: int, eta: int, max_x: int) -> int:
    """Brackets 0..s_max with s_max the largest s where min_x * eta**s <= max_x."""
    s, r = 0, min_x
    while r * eta <= max_x:
        s, r = s + 1, r * eta
    return s + 1


class HyperbandRule:
    """Hyperband (vcli extension) as brackets of ASHA, like Optuna's HyperbandPruner.

    Bracket s (0..s_max, s_max the largest s with min_step_count x eta**s <= max_step_count)
    runs ASHA with its first rung at min_step_count x eta**s; the last bracket may have no
    rung below max_step_count and then never stops a trial (Hyperband's "no early stopping"
    bracket). A trial's bracket follows from its id alone: its number (a non-numeric id: a
    CRC-32 of it) indexes a fixed cycle in which bracket s appears in proportion to
    Hyperband's trial count n_s = ceil((s_max + 1) / (s_max - s + 1) x eta**(s_max - s)),
    spread by smooth weighted round-robin so consecutive trials visit every bracket. Within a
    bracket, only trials of the same bracket compete. State and resume: as `AshaRule`.

    Given the same bracket per trial, the decisions are Optuna's HyperbandPruner's (default
    bootstrap_count 0): same trial budgets, rungs and promotion. Only the assignment differs:
    Optuna hashes the study name with the trial number (random proportions per study), vcli
    cycles (exact proportions, no study name needed to reproduce a run).
    """

    name = "hyperband"

    def __init__(self, metric: MetricSpec, spec: HyperbandStoppingSpec):
        self.eta = spec.reduction_factor
        n = _bracket_count(spec.min_step_count, self.eta, spec.max_step_count)
        self.brackets = [
            AshaRule(metric, spec.use_elapsed_duration, self.eta, spec.min_step_count * self.eta**s,
                     spec.max_step_count, label=f"Hyperband bracket {s}")
            for s in range(n)
        ]
        smax = n - 1
        weights = [math.ceil((smax + 1) / (smax - s + 1) * self.eta ** (smax - s)) for s in range(n)]
        self.cycle = _smooth_round_robin(weights)

    def bracket_of(self, trial_id: str) -> int:
        number = int(trial_id) if trial_id.isdigit() else zlib.crc32(trial_id.encode())
        return self.cycle[number % len(self.cycle)]

    def review(self, trial: Trial, trials: Sequence[Trial]) -> str | None:
        b = self.bracket_of(trial.id)
        peers = [t for t in trials if self.bracket_of(t.id) == b]
        return self.brackets[b].review(trial, trials, peers=peers)


def _smooth_round_robin(weights: list[int]) -> list[int]:
    """A cycle of sum(weights) indices, index i appearing weights[i] times, evenly spread."""
    current = [0] * len(weights)
    total = sum(weights)
    out = []
    for _ in range(total):
        for i, w in enumerate(weights):
            current[i] += w
        pick = max(range(len(weights)), key=lambda i: (current[i], -i))
        current[pick] -= total
        out.append(pick)
    return out
