"""TPE's multi-objective pieces (`vcli.tuning.suggesters.tpe`): non-dominated ranks, the
hypervolume, and the choice of the below set by rank and hypervolume contribution (as
Optuna's MOTPE). numpy is imported inside the functions."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

_EPS = 1e-12


def _nondominated_ranks(Y) -> np.ndarray:
    """Pareto rank of each row (0 = non-dominated), all objectives minimised."""
    import numpy as np

    n = len(Y)
    le = np.all(Y[:, None, :] <= Y[None, :, :], axis=2)
    lt = np.any(Y[:, None, :] < Y[None, :, :], axis=2)
    dominates = le & lt  # [i, j]: i dominates j
    count = dominates.sum(axis=0)
    ranks = np.full(n, -1)
    rank = 0
    front = np.flatnonzero(count == 0)
    while len(front):
        ranks[front] = rank
        count = count - dominates[front].sum(axis=0)
        count[ranks >= 0] = -1
        front = np.flatnonzero(count == 0)
        rank += 1
    return ranks


def _hypervolume(P, ref) -> float:
    """Hypervolume dominated by points P (minimised) up to `ref`, by slicing the last axis."""
    import numpy as np

    P = P[np.all(P < ref, axis=1)]
    if len(P) == 0:
        return 0.0
    if P.shape[1] == 1:
        return float(ref[0] - P[:, 0].min())
    P = P[np.argsort(P[:, -1], kind="stable")]
    vol = 0.0
    for i in range(len(P)):
        upper = P[i + 1, -1] if i + 1 < len(P) else ref[-1]
        if upper > P[i, -1]:
            vol += (upper - P[i, -1]) * _hypervolume(P[: i + 1, :-1], ref[:-1])
    return vol


def _select_multiobjective(Y, n_below: int) -> np.ndarray:
    """Indices of `n_below` rows: whole non-dominated ranks while they fit, then the rank
    that does not fit by greedy hypervolume contribution (Optuna's HSSP tie-break)."""
    import numpy as np

    ranks = _nondominated_ranks(Y)
    chosen: list[int] = []
    for r in range(int(ranks.max()) + 1):
        idx = np.flatnonzero(ranks == r)
        if len(chosen) + len(idx) <= n_below:
            chosen.extend(int(i) for i in idx)
            continue
        need = n_below - len(chosen)
        pts = Y[idx]
        worst = pts.max(axis=0)
        ref = np.maximum(1.1 * worst, 0.9 * worst)
        ref[ref == 0] = _EPS
        picked: list[int] = []
        base = 0.0
        for _ in range(need):
            best_j, best_gain = -1, -1.0
            for j in range(len(idx)):
                if j in picked:
                    continue
                gain = _hypervolume(pts[picked + [j]], ref) - base
                if gain > best_gain:
                    best_j, best_gain = j, gain
            picked.append(best_j)
            base += best_gain
        chosen.extend(int(idx[j]) for j in picked)
        break
    return np.array(chosen, dtype=int)
