"""vcli.tuning.pareto: dominance, fronts, non-dominated sorting, hypervolume, reference points."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from vcli.spec import Goal, Measurement, MetricSpec, Trial, TrialState
from vcli.tuning.pareto import (
    default_reference,
    dominates,
    hypervolume,
    metric_values,
    non_dominated_sort,
    pareto_front,
)

MIN, MAX = Goal.MINIMIZE, Goal.MAXIMIZE


def _trial(tid: str, state=TrialState.SUCCEEDED, **metrics) -> Trial:
    m = Measurement(step_count=1, metrics=metrics) if state == TrialState.SUCCEEDED else None
    return Trial(id=tid, parameters={"x": 0.0}, state=state, final_measurement=m)


def _union_volume(points, ref) -> float:
    """Brute force, exact: the volume of the union of the boxes [p, ref] (minimisation),
    by cutting space at every coordinate and testing each cell's centre."""
    pts = [p for p in points if all(x < r for x, r in zip(p, ref))]
    if not pts:
        return 0.0
    axes = [sorted({p[j] for p in pts} | {ref[j]}) for j in range(len(ref))]
    total = 0.0
    for cell in itertools.product(*[range(len(a) - 1) for a in axes]):
        lo = [axes[j][k] for j, k in enumerate(cell)]
        hi = [axes[j][k + 1] for j, k in enumerate(cell)]
        centre = [(a + b) / 2 for a, b in zip(lo, hi)]
        if any(all(p[j] <= centre[j] for j in range(len(ref))) for p in pts):
            total += math.prod(b - a for a, b in zip(lo, hi))
    return total


# ---------------------------------------------------------------------------- dominance


def test_dominates_by_goal():
    assert dominates((1, 1), (2, 2), [MIN, MIN])
    assert dominates((1, 2), (1, 3), [MIN, MIN])  # equal in one, better in the other
    assert not dominates((1, 3), (2, 2), [MIN, MIN])  # a trade-off
    assert not dominates((1, 1), (1, 1), [MIN, MIN])  # equal vectors: neither dominates
    assert dominates((2, 1), (1, 2), [MAX, MIN])
    assert not dominates((2, 1), (1, 2), [MIN, MAX])
    assert dominates((0.9, 5), (0.8, 5), ["MAXIMIZE", "MINIMIZE"])  # goal names as strings
    with pytest.raises(ValueError):
        dominates((1, 2), (1, 2), [MIN])


def test_non_dominated_sort_hand_checked():
    # minimise both: a=(1,5) b=(2,2) c=(5,1) non-dominated; d=(3,3) dominated by b only;
    # e=(4,4) by b and d; f=(2,2) a duplicate of b; g=(6,6) by everything
    pts = [(1, 5), (3, 3), (2, 2), (6, 6), (5, 1), (4, 4), (2, 2)]
    assert non_dominated_sort(pts, [MIN, MIN]) == [[0, 2, 4, 6], [1], [5], [3]]
    # the second objective maximised: a=(1,5) and g=(6,6) lead; c=(5,1) is behind d=(3,3)
    assert non_dominated_sort(pts, [MIN, MAX]) == [[0, 3], [1, 2, 5, 6], [4]]
    assert non_dominated_sort([], [MIN, MIN]) == []


def test_non_dominated_sort_fronts_are_correct_on_random_points():
    rng = random.Random(7)
    pts = [(rng.randint(0, 6), rng.randint(0, 6), rng.randint(0, 6)) for _ in range(60)]
    goals = [MIN, MAX, MIN]
    fronts = non_dominated_sort(pts, goals)
    assert sorted(i for f in fronts for i in f) == list(range(len(pts)))
    rank = {i: r for r, f in enumerate(fronts) for i in f}
    for i, j in itertools.permutations(range(len(pts)), 2):
        if dominates(pts[i], pts[j], goals):
            assert rank[i] < rank[j]
    for r, f in enumerate(fronts):  # within a front nobody dominates; each later point is
        assert f == sorted(f)       # dominated by someone of the front just before
        assert not any(dominates(pts[i], pts[j], goals) for i in f for j in f)
        if r:
            assert all(any(dominates(pts[i], pts[j], goals) for i in fronts[r - 1]) for j in f)


def test_pareto_front_of_trials():
    metrics = (MetricSpec(metric_id="acc", goal=MAX), MetricSpec(metric_id="latency", goal=MIN))
    trials = [
        _trial("1", acc=0.90, latency=20.0),
        _trial("2", acc=0.80, latency=10.0),
        _trial("3", acc=0.85, latency=25.0),  # dominated by 1
        _trial("4", acc=0.99, latency=math.nan),  # not finite: takes no part
        _trial("5", acc=0.99),  # a metric missing
        _trial("6", state=TrialState.INFEASIBLE),
        _trial("7", state=TrialState.ACTIVE),
        _trial("8", acc=0.80, latency=10.0),  # a duplicate of 2: kept
        _trial("9", acc="0.95", latency=30),  # numbers as strings are numbers
    ]
    assert [t.id for t in pareto_front(trials, metrics)] == ["1", "2", "8", "9"]
    assert [t.id for t in pareto_front(reversed(trials), metrics)] == ["9", "8", "2", "1"]
    assert pareto_front(trials[3:7], metrics) == []
    assert metric_values(trials[0], ["latency", "acc"]) == (20.0, 0.9)
    assert metric_values(trials[3], ["acc", "latency"]) is None
    assert metric_values(trials[4], ["acc", "latency"]) is None
    assert metric_values(trials[4], ["acc"]) == (0.99,)


# ---------------------------------------------------------------------------- hypervolume


def test_hypervolume_hand_values():
    # 2-D staircase to (4,4) from (1,3), (2,2), (3,1): strips of 3*1 + 2*1 + 1*1
    assert hypervolume([(1, 3), (2, 2), (3, 1)], (4, 4), [MIN, MIN]) == pytest.approx(6.0)
    # a dominated point, a duplicate and a point beyond the reference change nothing
    assert hypervolume([(1, 3), (2, 2), (3, 1), (3, 3), (2, 2), (5, 0)], (4, 4), [MIN, MIN]) == pytest.approx(6.0)
    # a point on the reference's boundary adds no volume
    assert hypervolume([(4, 0)], (4, 4), [MIN, MIN]) == 0.0
    assert hypervolume([], (4, 4), [MIN, MIN]) == 0.0
    # maximised objective: accuracy 0.9 above reference 0.5, latency 2 below reference 10
    assert hypervolume([(0.9, 2.0)], (0.5, 10.0), [MAX, MIN]) == pytest.approx(0.4 * 8.0)
    # 3-D: boxes (0,0,0)->(2,2,2) of volume 8 and (1,1,-1)->(2,2,2) of 1*1*3, overlapping
    # in 1*1*2
    assert hypervolume([(0, 0, 0), (1, 1, -1)], (2, 2, 2), [MIN] * 3) == pytest.approx(8 + 3 - 2)
    # 1-D
    assert hypervolume([(3,), (1,)], (5,), [MIN]) == 4.0
    assert hypervolume([(3,), (1,)], (0,), [MAX]) == 3.0


@pytest.mark.parametrize("m, n", [(2, 30), (3, 12), (4, 7)])
def test_hypervolume_matches_brute_force(m, n):
    rng = random.Random(m * 100 + n)
    for _ in range(5):
        goals = [rng.choice([MIN, MAX]) for _ in range(m)]
        pts = [tuple(rng.uniform(-1, 1) for _ in range(m)) for _ in range(n)]
        pts += [tuple(round(x, 1) for x in p) for p in pts[:3]]  # ties on some coordinates
        ref = tuple(0.8 if g == MIN else -0.8 for g in goals)
        minimised = [tuple(x if g == MIN else -x for x, g in zip(p, goals)) for p in pts]
        expected = _union_volume(minimised, (0.8,) * m)
        assert expected > 0
        assert hypervolume(pts, ref, goals) == pytest.approx(expected, rel=1e-9)


def test_hypervolume_of_a_known_front_against_monte_carlo():
    """ZDT1's front f2 = 1 - sqrt(f1), 200 points, reference (1, 1): the area above the
    curve is 1 - 1/3; a seeded Monte Carlo estimate of the staircase's area agrees."""
    k = 199
    front = [(i / k, 1 - math.sqrt(i / k)) for i in range(k + 1)]
    hv = hypervolume(front, (1.0, 1.0), [MIN, MIN])
    assert hv == pytest.approx(2 / 3, abs=5e-3)
    rng = random.Random(0)
    n = 100_000
    # (x, y) is dominated when y is above the front point just left of x (the staircase)
    hits = sum(y >= front[math.floor(x * k)][1] for x, y in ((rng.random(), rng.random()) for _ in range(n)))
    assert hv == pytest.approx(hits / n, abs=4 / math.sqrt(n))


def test_default_reference_rule():
    pts = [(1.0, 10.0), (3.0, 0.0)]
    assert default_reference(pts, [MIN, MIN]) == pytest.approx((3.2, 11.0))
    assert default_reference(pts, [MAX, MIN]) == pytest.approx((0.8, 11.0))
    assert default_reference([(5.0, -2.0)], [MIN, MAX]) == pytest.approx((5.5, -2.2))
    assert default_reference([(0.0, 0.0)], [MIN, MAX]) == pytest.approx((0.1, -0.1))
    # every point, the extreme ones included, adds volume against it
    front = [(1.0, 3.0), (2.0, 2.0), (3.0, 1.0)]
    ref = default_reference(front, [MIN, MIN])
    base = hypervolume(front, ref, [MIN, MIN])
    for k in range(len(front)):
        assert hypervolume(front[:k] + front[k + 1 :], ref, [MIN, MIN]) < base
    with pytest.raises(ValueError):
        default_reference([], [MIN])
