"""The decay-curve rule (Vertex's `decayCurveStoppingSpec`). Imports numpy inside its fit only."""

from __future__ import annotations

import math
from typing import Sequence

from vcli.spec import DecayCurveAutomatedStoppingSpec, MetricSpec, Trial
from vcli.tuning.stopping.base import RuleType
from vcli.tuning.stopping.curves import Curve, Curves, completed, fmt, score_at, score_at_or_first

#: Completed full-length curves needed before anything is predicted.
DECAY_MIN_TRIALS = 5
#: The running trial is judged from this fraction of the full length on.
DECAY_MIN_FRACTION = 0.1
#: Stop only when the prediction's upper bound (mean + Z sd, about 0.6 % one-sided) is still
#: worse than the best; Vertex: "very low probability to exceed the best". 2.5 rather than 2:
#: on bench/bench_stopping.py 2.0 stopped the eventual best trial in 2 of 20 more seeds for
#: 0.02 of the epochs saved.
DECAY_Z = 2.5




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
        self.curves = Curves(metric, use_elapsed_duration)

    def review(self, trial: Trial, trials: Sequence[Trial]) -> str | None:
        """Why `trial` should stop, or None to let it go on (the class docstring's rule)."""
        c = self.curves
        own = c.points(trial)
        if len(own) < 2:
            return None
        done = [(t, c.points(t)) for t in completed(trials, trial)]
        done = [(t, pts) for t, pts in done if pts]
        if not done:
            return None
        length = max(pts[-1].x for _, pts in done)
        x = own[-1].x
        if x >= length or x < DECAY_MIN_FRACTION * length:
            return None
        best_final = max(s for t, pts in done if (s := c.final_score(t, pts)) is not None)
        rows, finals = self._training_rows(done, length, x)
        if len(rows) < DECAY_MIN_TRIALS:
            return None
        query = (1.0, own[-1].score, own[-1].score - score_at_or_first(own, x / 2))
        upper = _prediction_upper_bound(rows, finals, query)
        if upper is None or upper >= best_final:
            return None
        return (f"decay-curve rule: {c.metric_id} {fmt(own[-1].value)} at {c.unit} {fmt(x)} predicts at best "
                f"{fmt(c.value(upper))} at {c.unit} {fmt(length)} (from {len(rows)} completed curves), "
                f"worse than the best {fmt(c.value(best_final))}")

    def _training_rows(
        self, done: Sequence[tuple[Trial, Curve]], length: float, x: float
    ) -> tuple[list[tuple[float, float, float]], list[float | None]]:
        """The regression's data at `x`: for each completed curve that ran the full `length`
        and has a score at or before `x`, the features (1, score at x, rise since x/2) and its
        final score, in `done`'s order."""
        rows, finals = [], []
        for t, pts in done:
            if pts[-1].x < length:
                continue
            at = score_at(pts, x)
            if at is None:
                continue
            rows.append((1.0, at, at - score_at_or_first(pts, x / 2)))
            finals.append(self.curves.final_score(t, pts))
        return rows, finals


def _prediction_upper_bound(rows, finals, query) -> float | None:
    """mean + DECAY_Z sd of the least-squares prediction at `query`; None when the fit is
    degenerate or would extrapolate: a feature of `query` outside the rows' [min, max], unless
    `query` is at or below the minimum on every feature (worse than every row on every count,
    e.g. a diverging trial: the line may be trusted to call that bad)."""
    import numpy as np

    X = np.asarray(rows, dtype=float)
    y = np.asarray(finals, dtype=float)
    q = np.asarray(query, dtype=float)
    # One scale for the scores and the target: the prediction scales with it and the leverage
    # does not, and values near 1e160 no longer overflow the squares (numpy's warnings on the
    # user's terminal, and a NaN bound that stopped the trial).
    scale = float(max(np.abs(y).max(), np.abs(X[:, 1:]).max(), np.abs(q[1:]).max(), 1.0))
    if not math.isfinite(scale):
        return None
    X[:, 1:], q[1:], y = X[:, 1:] / scale, q[1:] / scale, y / scale
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
    with np.errstate(all="ignore"):
        coef, *_ = np.linalg.lstsq(X, y, rcond=None)
        resid = y - X @ coef
        sigma2 = float(resid @ resid) / (n - p)
        xtx_inv = np.linalg.pinv(X.T @ X)
        var = sigma2 * (1.0 + float(q @ xtx_inv @ q))
        bound = (float(q @ coef) + DECAY_Z * math.sqrt(max(var, 0.0))) * scale
    return bound if math.isfinite(bound) else None  # never a decision on a NaN



RULE: RuleType = RuleType(
    name="decay-curve", key="decayCurveStoppingSpec", spec=DecayCurveAutomatedStoppingSpec,
    flag_keys=("use-elapsed-duration",),
    build=lambda spec, metric: DecayCurveRule(metric, spec.use_elapsed_duration),
    describe=lambda spec: (f"decay-curve rule (final value predicted from {DECAY_MIN_TRIALS}+ completed curves, "
                           f"by {RULE.unit(spec)})"),
)
