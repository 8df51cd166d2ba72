"""Points the GP suggester takes outside log EI on a quantised objective (issue 24).

A quantised objective (plateaus and steps: an accuracy on a few hundred examples, an integer
loss) misleads a GP in two ways, each measured on the benchmark's quantised problems
(bench/README, "Quantised objectives"):

* it reads a plateau as flat and stops looking inside it for the better cells that a
  wide plateau hides (`svm_digits`: the best level covers 2 % of the grid, scattered in a
  band of one error worse). Every fourth model-phase trial is therefore a Thompson draw
  (`thompson_row`): one joint sample of the posterior over random candidates, and over
  candidates near the best tenth of the observations; the sample's minimiser;
* log EI keeps proposing points next to the observations at the incumbent's level (one
  `svm_digits` run: 19 of the 20 log-EI points of trials 33-59 within 4 % of the box of one
  another, each making the same 9 errors). A deterministic objective answers such a point
  with the value it already has, so the point is replaced (`on_plateau`): by a uniform
  random point or a point near a good one, half and half.

Pure functions of numpy arrays and the search space; the draws come from the caller's
seeded generator, so replay and batches hold.
"""

from __future__ import annotations

from typing import Any

from vcli.tuning.space import CATEGORICAL, Space

#: probability that a point near a good one redraws each categorical column
CATEGORICAL_REDRAW = 0.2


def quantised(values) -> bool:
    """Whether an objective looks quantised: at least 10 % of its observed values (and at
    least 2) repeat exactly. Continuous objectives practically never repeat a value."""
    n = len(values)
    return n - len(set(values)) >= max(2, 0.1 * n)


def near_rows(np: Any, sp: Space, base, rng, sd: float):
    """Copies of the rows `base` (unit space), every numeric column moved by N(0, sd) and
    clipped to [0, 1], every categorical redrawn with probability `CATEGORICAL_REDRAW`;
    snapped to valid values."""
    B = np.array(base, dtype=float, copy=True)
    n = len(B)
    for c, node in enumerate(sp.nodes):
        if node.kind == CATEGORICAL:
            flip = rng.random(n) < CATEGORICAL_REDRAW
            B[flip, c] = rng.integers(len(node.values), size=int(flip.sum()))
        else:
            B[:, c] = np.clip(B[:, c] + sd * rng.normal(size=n), 0.0, 1.0)
    return sp.snap(B)


def near_good(np: Any, sp: Space, obs, rng, known: set, *, top: float, sd: float):
    """A point near a good one: a copy of one of the best `top` fraction of `obs` ((point,
    value) pairs, drawn uniformly), each numeric column moved by N(0, sd) in the unit
    space, each categorical redrawn with probability `CATEGORICAL_REDRAW`; one not in
    `known` in a finite space, or None after 64 tries.

    Why local, not only uniform: where the best plateau is wide and its best level is
    scattered over it (svm_digits: the 8-error level on 2 % of the grid, within a band where
    most points make 9 or 10 errors), sampling near the good points finds it early, as TPE's
    density of good points does; uniform points (every third trial) solved fewer runs by
    trial 30 there and on hartmann6_step (tables in bench/README)."""
    order = sorted(range(len(obs)), key=lambda j: obs[j][1])
    best = order[: max(1, int(len(order) * top))]
    base = np.array(sp.encode(obs[best[int(rng.integers(len(best)))]][0]), dtype=float)
    for _ in range(64):
        x = base.copy()
        for c, node in enumerate(sp.nodes):
            if node.kind == CATEGORICAL:
                if rng.random() < CATEGORICAL_REDRAW:
                    x[c] = float(rng.integers(len(node.values)))
            else:
                x[c] = min(1.0, max(0.0, x[c] + sd * rng.normal()))
        p = sp.decode(sp.snap(x[None, :])[0])
        if sp.key(p) not in known:
            return p
    return None


def thompson_row(np: Any, sp: Space, gp: Any, X, y, rng, known: set, *, top: float, sd: float,
                 n_random: int = 1024, n_near: int = 256):
    """The minimiser of one joint draw of `gp`'s posterior (latent f, jitter 1e-6 of the
    signal variance) over `n_random` uniform candidates and `n_near` candidates near the
    best `top` fraction of the modelled observations (rows `X`, outputs `y` to minimise;
    `near_rows` with `sd`); in a finite space, candidates in `known` are left out. The row,
    or None when every candidate is known.

    Why a draw, not a point near a good one: on `mixed5_int` (an integer loss over a
    categorical and an integer), points near the best tenth left the GP behind Optuna's
    GPSampler at 30 trials (8 of 40 runs solved against 15); the draws solved 16."""
    from scipy import linalg

    from vcli.tuning.suggesters import _gp

    C = [sp.sample_unit(rng.random((n_random, sp.dim)))]
    order = np.argsort(y)[: max(1, int(len(y) * top))]
    if n_near:
        C.append(near_rows(np, sp, X[order[rng.integers(len(order), size=n_near)]], rng, sd))
    C = np.vstack(C)
    if sp.is_finite:
        C = C[np.array([sp.key_of_row(r) not in known for r in C], dtype=bool)]
        if not len(C):
            return None
    Ks = gp.s * _gp.matern52_value(_gp.sqdist(C, gp.X, gp.lam, gp.is_cat))
    mean = Ks @ gp.alpha
    V = linalg.solve_triangular(gp.chol[0], Ks.T, lower=True, check_finite=False)
    K = gp.s * _gp.matern52_value(_gp.sqdist(C, C, gp.lam, gp.is_cat)) - V.T @ V
    K[np.diag_indices(len(C))] += 1e-6 * gp.s
    try:
        L = np.linalg.cholesky(K)
    except np.linalg.LinAlgError:  # not positive definite in floating point: its square root
        w, U = np.linalg.eigh(K)
        L = U * np.sqrt(np.maximum(w, 0.0))
    f = mean + L @ rng.normal(size=len(C))
    return C[int(np.argmin(f))]


def on_plateau(np: Any, level_rows, x, radius: float) -> bool:
    """Is row `x` within `radius` (max-norm in the unit space) of one of `level_rows` (the
    observations at the incumbent's level)? Categorical columns differ by at least 1 when
    they differ, so a point with another category is never on the plateau."""
    if not len(level_rows):
        return False
    return float(np.min(np.max(np.abs(level_rows - np.asarray(x, dtype=float)), axis=1))) < radius
