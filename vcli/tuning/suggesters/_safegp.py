"""Safe search for `GPSuggester` (`bayesian.py`): a GP per safety metric and the acquisition
weighted by the probability of being safe.

Each safety metric (`vcli.tuning.safety`) gets a GP of its own (the same kernel and MAP fit as
the objective's) on its minimised values, standardised, over the trials that reported it; the
point x is safe for it with probability P_j(x) = Phi((t_j - m_j(x)) / s_j(x)), t_j the
standardised threshold. The acquisition is constrained expected improvement (Gardner et al.,
2014): log EI(x) + sum_j log P_j(x), EI measured against the best *safe* observation; while
no observation is safe it is sum_j log P_j(x) alone (find a safe point first). With a
`desiredMinSafeTrialsFraction` d > 0, a point whose probability of being safe P(x) is below d
loses `BARRIER` nats per e-fold below it, so the search keeps to points at least that likely to
be safe (each such point is, in expectation, safe a fraction d of the time) wherever there are
some; d = 1 asks for the most surely safe point the model knows of.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
from scipy import special

from vcli.tuning.safety import minimised_thresholds, safety_observations, target_fraction

#: nats lost per e-fold of P(safe) below the desired fraction
BARRIER = 20.0
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


class SafetyModel:
    """The GPs of the safety metrics with their standardised thresholds; `log_target`:
    log of the desired fraction of safe trials, None when there is none."""

    def __init__(self, parts: Sequence[tuple[Any, float]], target: float) -> None:
        self.parts = list(parts)
        self.log_target = math.log(target) if target > 0 else None

    def log_p(self, X: np.ndarray) -> np.ndarray:
        """log P(safe) at the rows of X (every safety metric at once)."""
        out = np.zeros(len(X))
        for gp, t in self.parts:
            mean, var = gp.predict(X)
            out += special.log_ndtr((t - mean) / np.sqrt(var))
        return out

    def log_p_grad(self, x: np.ndarray, cols: np.ndarray) -> tuple[float, np.ndarray]:
        """log P(safe) at x and its gradient w.r.t. x[cols]."""
        val, grad = 0.0, np.zeros(len(cols))
        for gp, t in self.parts:
            mean, var, dmean, dvar = gp.predict_grad(x, cols)
            sd = math.sqrt(var)
            z = (t - mean) / sd
            lp = float(special.log_ndtr(z))
            ratio = math.exp(-0.5 * z * z - _LOG_SQRT_2PI - lp)  # phi(z) / Phi(z)
            val += lp
            grad += ratio * (-dmean / sd - z * dvar / (2.0 * var))
        return val, grad


class SafeAcq:
    """`base` (log EI, or None while no observation is safe) plus log P(safe), less the
    barrier below the desired fraction (the module docstring)."""

    def __init__(self, base: Any, safety: SafetyModel) -> None:
        self.base, self.safety = base, safety

    def values(self, X: np.ndarray) -> np.ndarray:
        lp = self.safety.log_p(X)
        out = lp if self.base is None else self.base.values(X) + lp
        if self.safety.log_target is not None:
            out = out - BARRIER * np.maximum(0.0, self.safety.log_target - lp)
        return out

    def value_grad(self, x: np.ndarray, cols: np.ndarray):
        lp, dlp = self.safety.log_p_grad(x, cols)
        val, grad = lp, dlp
        if self.base is not None:
            bv, bg = self.base.value_grad(x, cols)
            val, grad = val + bv, grad + bg
        if self.safety.log_target is not None and lp < self.safety.log_target:
            val, grad = val - BARRIER * (self.safety.log_target - lp), grad + BARRIER * dlp
        return val, grad


def safety_model(suggester: Any) -> SafetyModel | None:
    """The GPs of `suggester`'s safety metrics (a `GPSuggester`: its space, trials, `_fit`),
    or None without safety metrics or before two trials reported them."""
    from vcli.tuning.suggesters import _gp

    metrics = suggester.safety_metrics
    if not metrics:
        return None
    obs = safety_observations(suggester._valued(), metrics)
    if len(obs) < 2:
        return None
    sp = suggester.space
    X = np.array([sp.encode(p) for p, _ in obs], dtype=float)
    S = np.array([v for _, v in obs], dtype=float)
    parts = []
    for j, thr in enumerate(minimised_thresholds(metrics)):
        mu, sd = float(np.mean(S[:, j])), float(np.std(S[:, j]))
        sd = sd if sd > 0 else max(1.0, abs(thr - mu))
        y = (S[:, j] - mu) / sd
        theta = suggester._fit(X, y)
        parts.append((_gp.GP(X, y, suggester._is_cat, theta, suggester.min_noise), (thr - mu) / sd))
    return SafetyModel(parts, target_fraction(metrics))


def safe_incumbent(model: tuple, X: np.ndarray, safe: np.ndarray) -> tuple:
    """`model` ((gp, theta, best, best_x), of `GPSuggester._model`) with its incumbent the
    best *safe* observation among the first len(safe) rows (X, the modelled observations);
    best None when none is safe (the acquisition is then P(safe) alone)."""
    gp, theta = model[0], model[1]
    y = gp.y[: len(safe)]
    if not safe.any():
        return gp, theta, None, model[3]
    i = int(np.flatnonzero(safe)[np.argmin(y[safe])])
    return gp, theta, float(y[i]), X[i]
