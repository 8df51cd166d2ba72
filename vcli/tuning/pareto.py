"""Pareto dominance, fronts and hypervolume for multi-objective studies.

A study with several metrics (Vertex `studySpec.metrics`, each MAXIMIZE or MINIMIZE) has no
single best trial: its result is the Pareto front, the finished trials that no other trial
beats on every metric at once. This module computes it and measures it (hypervolume), in
pure Python (no numpy), for the study controller, the views and the suggesters alike.

Conventions shared by every function here:

* Values are in the metrics' own units and directions: ``goals[j]`` (a `Goal`, or its name
  as a string) says whether larger (MAXIMIZE) or smaller (MINIMIZE) values of objective j
  are better. Internally everything is turned into minimisation by negating MAXIMIZE
  objectives; nothing returned is negated.
* ``a`` dominates ``b`` when ``a`` is at least as good in every objective and strictly
  better in at least one. Equal vectors do not dominate each other, so duplicates (and
  trials with tied values) are all on the same front.
* Orders are stable: fronts list their members in input order.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

from vcli.spec import Goal, MetricSpec, Trial, TrialState

__all__ = [
    "metric_values",
    "dominates",
    "pareto_front",
    "non_dominated_sort",
    "hypervolume",
    "default_reference",
]

Point = Sequence[float]


def metric_values(trial: Trial, metric_ids: Sequence[str]) -> tuple[float, ...] | None:
    """The trial's final value of every metric in ``metric_ids`` (in that order), or None
    when it is not SUCCEEDED or any of them is missing or not a finite number."""
    if trial.state != TrialState.SUCCEEDED or trial.final_measurement is None:
        return None
    metrics = trial.final_measurement.metrics
    out = []
    for mid in metric_ids:
        try:
            v = float(metrics[mid])
        except (KeyError, TypeError, ValueError):
            return None
        if not math.isfinite(v):
            return None
        out.append(v)
    return tuple(out)


def _signs(goals: Sequence[Goal | str]) -> tuple[float, ...]:
    return tuple(-Goal(g).sign for g in goals)


def _minimised(points: Iterable[Point], signs: Sequence[float]) -> list[tuple[float, ...]]:
    out = []
    for p in points:
        if len(p) != len(signs):
            raise ValueError(f"a point has {len(p)} values for {len(signs)} goals")
        out.append(tuple(s * float(v) for s, v in zip(signs, p)))
    return out


def _dominates_min(a: Sequence[float], b: Sequence[float]) -> bool:
    strictly = False
    for x, y in zip(a, b):
        if x > y:
            return False
        if x < y:
            strictly = True
    return strictly


def dominates(a: Point, b: Point, goals: Sequence[Goal | str]) -> bool:
    """True when ``a`` is no worse than ``b`` in every objective and better in one."""
    signs = _signs(goals)
    ma, mb = _minimised([a, b], signs)
    return _dominates_min(ma, mb)


def _first_front(pts: Sequence[tuple[float, ...]], idx: Sequence[int]) -> list[int]:
    """Indices (from ``idx``) of the non-dominated points among ``pts[idx]``, sorted.

    In lexicographic order a point can only be dominated by points before it, so each point
    is compared with the front kept so far: O(n log n + n * |front| * m)."""
    front: list[int] = []
    for i in sorted(idx, key=lambda k: pts[k]):
        if not any(_dominates_min(pts[f], pts[i]) for f in front):
            front.append(i)
    return sorted(front)


def non_dominated_sort(points: Sequence[Point], goals: Sequence[Goal | str]) -> list[list[int]]:
    """Indices of ``points`` grouped into successive Pareto fronts.

    Front 0 is the non-dominated points, front 1 those dominated only by front 0, and so
    on; every index appears in exactly one front, each front in increasing index order.
    """
    pts = _minimised(points, _signs(goals))
    rest = list(range(len(pts)))
    fronts: list[list[int]] = []
    while rest:
        front = _first_front(pts, rest)
        fronts.append(front)
        taken = set(front)
        rest = [i for i in rest if i not in taken]
    return fronts


def pareto_front(trials: Iterable[Trial], metrics: Sequence[MetricSpec]) -> list[Trial]:
    """The SUCCEEDED trials with a finite value of every metric that no other such trial
    dominates, in input order. Trials with equal values are all kept. Trials lacking a
    value (infeasible, running, a metric missing or not finite) or marked unsafe (safe
    search, `Trial.safe`) take no part."""
    ids = [m.metric_id for m in metrics]
    scored = [(t, v) for t in trials if (v := metric_values(t, ids)) is not None and t.safe is not False]
    front = non_dominated_sort([v for _, v in scored], [m.goal for m in metrics])
    return [scored[i][0] for i in front[0]] if front else []


def default_reference(points: Sequence[Point], goals: Sequence[Goal | str]) -> tuple[float, ...]:
    """The reference point vcli measures hypervolume against when none is given.

    Per objective: the worst value among ``points`` moved away from the best by 10% of their
    range (by 10% of max(|worst|, 1) when all values are equal), so every point, extreme
    ones included, adds volume. It depends on the points, so hypervolumes are comparable
    only when computed against the same reference: benchmarks fix theirs. Raises
    ValueError for no points.
    """
    if not points:
        raise ValueError("a reference point needs at least one point")
    signs = _signs(goals)
    pts = _minimised(points, signs)
    ref = []
    for j, s in enumerate(signs):
        worst = max(p[j] for p in pts)
        span = worst - min(p[j] for p in pts)
        margin = 0.1 * span if span > 0 else 0.1 * max(abs(worst), 1.0)
        ref.append(s * (worst + margin))
    return tuple(ref)


def hypervolume(points: Sequence[Point], reference: Point, goals: Sequence[Goal | str]) -> float:
    """The volume of objective space dominated by ``points`` and bounded by ``reference``.

    Exact for any number of objectives: a sweep for 2, slicing along the last objective
    (HSO) above that, O(n^(m-1) log n) for n points and m objectives (3 objectives: n^2).
    Points not strictly better than the reference in every objective add nothing; dominated
    points and duplicates are harmless. Units are the product of the metrics' units.
    """
    signs = _signs(goals)
    (ref,) = _minimised([reference], signs)
    pts = [p for p in _minimised(points, signs) if all(x < r for x, r in zip(p, ref))]
    return _hv(pts, ref)


def _hv(pts: list[tuple[float, ...]], ref: tuple[float, ...]) -> float:
    if not pts:
        return 0.0
    m = len(ref)
    if m == 1:
        return ref[0] - min(p[0] for p in pts)
    if m == 2:
        total, y_cover = 0.0, ref[1]
        for x, y in sorted(pts):  # x ascending: each lower y adds a strip reaching to ref
            if y < y_cover:
                total += (ref[0] - x) * (y_cover - y)
                y_cover = y
        return total
    # slab between consecutive values of the last objective: the (m-1)-volume of the points
    # already below it, times its thickness
    pts = sorted(pts, key=lambda p: p[-1])
    total = 0.0
    for k, p in enumerate(pts):
        top = pts[k + 1][-1] if k + 1 < len(pts) else ref[-1]
        if top > p[-1]:
            total += _hv([q[:-1] for q in pts[: k + 1]], ref[:-1]) * (top - p[-1])
    return total
