"""Early-stopping rules (vcli.tuning.stopping) on simulated studies: synthetic learning curves run step
by step, `review` after every step, stopped trials ended SUCCEEDED as the controller does."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace
from typing import Callable

import pytest

from vcli.spec import (
    AshaStoppingSpec,
    ConvexAutomatedStoppingSpec,
    DecayCurveAutomatedStoppingSpec,
    Goal,
    HyperbandStoppingSpec,
    Measurement,
    MedianAutomatedStoppingSpec,
    MetricSpec,
    Trial,
    TrialState,
)
from vcli.tuning.stopping import RULE_NAMES, describe_rule, stopping_rule

ACC = MetricSpec(metric_id="accuracy", goal=Goal.MAXIMIZE)
LOSS = MetricSpec(metric_id="loss", goal=Goal.MINIMIZE)

Curve = Callable[[int], float]


def saturating(quality: float, rate: float = 0.25) -> Curve:
    """Accuracy that rises to `quality`; a good config improves, a bad one plateaus low."""
    return lambda step: quality * (1 - math.exp(-rate * step))


@dataclass
class Outcome:
    steps: dict[str, int] = field(default_factory=dict)  # trial id -> steps it ran
    reasons: dict[str, str] = field(default_factory=dict)  # stopped trial id -> reason

    @property
    def total(self) -> int:
        return sum(self.steps.values())

    def stopped_at(self) -> dict[str, int]:
        return {tid: self.steps[tid] for tid in self.reasons}


def simulate(
    new_rule: Callable[[], object],
    curves: list[Curve],
    *,
    max_steps: int,
    parallel: int = 1,
    metric: MetricSpec = ACC,
    elapsed: bool = False,
    fresh_rule_each_review: bool = False,
) -> Outcome:
    """Runs trials 1..len(curves) with `parallel` slots, interleaved one step at a time.

    Values come from the curve (negated into a loss for MINIMIZE). With `elapsed`, the step
    count stays 0 and only elapsed_seconds (3 s a step) moves, so a rule that read steps would
    see nothing. `fresh_rule_each_review` rebuilds the rule before every review, as a
    replacement controller would.
    """
    rule = new_rule()
    trials: list[Trial] = []
    queue = list(range(len(curves)))
    out = Outcome()
    while queue or any(t.state == TrialState.ACTIVE for t in trials):
        while queue and sum(t.state == TrialState.ACTIVE for t in trials) < parallel:
            i = queue.pop(0)
            trials.append(Trial(id=str(i + 1), parameters={"i": i}, state=TrialState.ACTIVE))
        for pos, t in enumerate(trials):
            if t.state != TrialState.ACTIVE:
                continue
            step = len(t.measurements) + 1
            v = curves[int(t.id) - 1](step)
            if metric.goal == Goal.MINIMIZE and math.isfinite(v):
                v = 1 - v
            m = Measurement(step_count=0 if elapsed else step, metrics={metric.metric_id: v},
                            elapsed_seconds=3.0 * step if elapsed else None)
            t = replace(t, measurements=t.measurements + (m,))
            trials[pos] = t
            if fresh_rule_each_review:
                rule = new_rule()
            reason = rule.review(t, list(trials))
            if reason is not None or step == max_steps:
                if reason is not None:
                    out.reasons[t.id] = reason
                out.steps[t.id] = step
                trials[pos] = replace(t, state=TrialState.SUCCEEDED, final_measurement=m)
    return out


def mixed_curves(n: int, seed: int = 0, *, good_share: int = 1) -> tuple[list[Curve], set[str], set[str]]:
    """n curves: `good_share` of every 3 good (rise to 0.85-0.95), the others bad (plateau at
    0.3-0.5)."""
    rng = random.Random(seed)
    curves, good, bad = [], set(), set()
    for i in range(n):
        if i % 3 < good_share:
            curves.append(saturating(rng.uniform(0.85, 0.95)))
            good.add(str(i + 1))
        else:
            curves.append(saturating(rng.uniform(0.3, 0.5)))
            bad.add(str(i + 1))
    return curves, good, bad


def record_setters(curves: list[Curve], max_steps: int) -> set[str]:
    """Trials whose final value beats every earlier trial's: a rule that stops only trials
    unable to beat the best so far never stops these."""
    out, best = set(), -math.inf
    for i, curve in enumerate(curves):
        if curve(max_steps) > best:
            out.add(str(i + 1))
            best = curve(max_steps)
    return out


# --------------------------------------------------------------------------- median


@pytest.mark.parametrize("metric", [ACC, LOSS], ids=["maximize", "minimize"])
@pytest.mark.parametrize("parallel", [1, 3])
def test_median_stops_bad_trials_and_lets_good_ones_finish(metric, parallel):
    # Two good trials in three: the median is a good trial's, so every bad one is below it.
    curves, good, bad = mixed_curves(18, good_share=2)
    out = simulate(lambda: stopping_rule(MedianAutomatedStoppingSpec(), metric), curves, max_steps=20,
                   parallel=parallel, metric=metric)
    assert all(out.steps[t] == 20 for t in good), out.steps
    late_bad = {t for t in bad if int(t) > 9}  # by then enough trials have completed
    assert late_bad and all(out.steps[t] < 20 for t in late_bad), out.steps
    assert out.total < 18 * 20
    reason = out.reasons[min(out.reasons, key=int)]
    assert reason.startswith(f"median rule: best {metric.metric_id} ") and "running averages at step" in reason


def test_median_waits_for_enough_completed_trials():
    curves = [saturating(0.9)] + [saturating(0.3)] * 5
    out = simulate(lambda: stopping_rule(MedianAutomatedStoppingSpec(), ACC), curves, max_steps=10)
    # Trials 2-5 meet fewer than 5 completed trials: nothing can be stopped yet.
    assert out.reasons == {}


def test_median_uses_elapsed_duration():
    curves, good, bad = mixed_curves(18, good_share=2)
    out = simulate(lambda: stopping_rule(MedianAutomatedStoppingSpec(use_elapsed_duration=True), ACC), curves,
                   max_steps=20, parallel=2, elapsed=True)
    assert all(out.steps[t] == 20 for t in good)
    assert any(out.steps[t] < 20 for t in bad)
    assert "at second " in next(iter(out.reasons.values()))
    # The same study read by steps sees only step 0 everywhere and stops nothing sooner than
    # the warm-up allows; by elapsed seconds it does.
    by_steps = simulate(lambda: stopping_rule(MedianAutomatedStoppingSpec(), ACC), curves, max_steps=20,
                        parallel=2, elapsed=True)
    assert by_steps.reasons == {}


def test_median_ignores_nan_and_inf_values():
    good = saturating(0.9)
    broken: Curve = lambda step: math.nan if step % 2 else -math.inf
    curves = [good] * 6 + [broken, saturating(0.3)]
    out = simulate(lambda: stopping_rule(MedianAutomatedStoppingSpec(), ACC), curves, max_steps=10)
    assert "7" not in out.reasons  # only non-finite values: no evidence, never judged
    assert out.steps["8"] < 10
    # NaN in the completed trials' curves does not poison the median either.
    holey: Curve = lambda step: math.nan if step == 3 else good(step)
    out = simulate(lambda: stopping_rule(MedianAutomatedStoppingSpec(), ACC), [holey] * 6 + [saturating(0.3)],
                   max_steps=10)
    assert out.steps["7"] < 10


# --------------------------------------------------------------------------- decay curve and convex


@pytest.mark.parametrize("metric", [ACC, LOSS], ids=["maximize", "minimize"])
def test_decay_curve_stops_trials_that_cannot_catch_up(metric):
    curves, good, bad = mixed_curves(18, seed=1)
    out = simulate(lambda: stopping_rule(DecayCurveAutomatedStoppingSpec(), metric), curves, max_steps=20,
                   parallel=2, metric=metric)
    # A trial that cannot beat the best is fair game, even a good one; one that ends best so
    # far (in creation order) must never be stopped.
    assert all(out.steps[t] == 20 for t in record_setters(curves, 20)), out.steps
    late_bad = {t for t in bad if int(t) > 9}
    assert all(out.steps[t] < 20 for t in late_bad), out.steps
    assert out.total < 18 * 20
    assert "predicts at best" in next(iter(out.reasons.values()))


def test_decay_curve_judges_huge_values_as_it_judges_them_scaled_down():
    """Values near 1e160 overflowed the fit's squares: numpy's RuntimeWarnings on the user's
    terminal and a NaN bound, which stopped the trial (found by a probe). The rule is now the
    same at any scale, and silent."""
    import warnings

    curves, _, _ = mixed_curves(18, seed=1)
    huge = [lambda step, c=c: c(step) * 1e160 for c in curves]
    plain = simulate(lambda: stopping_rule(DecayCurveAutomatedStoppingSpec(), ACC), curves, max_steps=20, parallel=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scaled = simulate(lambda: stopping_rule(DecayCurveAutomatedStoppingSpec(), ACC), huge, max_steps=20, parallel=2)
    assert scaled.steps == plain.steps and plain.total < 18 * 20


def test_decay_curve_keeps_a_slow_starter_that_ends_best():
    # Completed curves teach that early values say little: fast-rising mediocre configs and
    # slow-rising ones that end higher. A slow starter must then survive.
    fast = [saturating(0.6 + 0.02 * i, rate=1.0) for i in range(5)]
    slow = [saturating(0.8 + 0.02 * i, rate=0.08) for i in range(5)]
    curves = [c for pair in zip(fast, slow) for c in pair] + [saturating(0.95, rate=0.08)]
    out = simulate(lambda: stopping_rule(DecayCurveAutomatedStoppingSpec(), ACC), curves, max_steps=30)
    assert out.steps["11"] == 30


@pytest.mark.parametrize("metric", [ACC, LOSS], ids=["maximize", "minimize"])
def test_decay_curve_does_not_extrapolate_to_a_curve_unlike_any_completed_one(metric):
    # Only fast risers have completed; the line fitted to them says a low score at step 5
    # means a low end. A slow starter below all of them but rising faster than any of them
    # is outside what they span: it must run on (it ends best), while the same completed
    # curves do stop a late trial that is below all of them on every count.
    fast = [saturating(0.5 + 0.05 * i, rate=2.0) for i in range(6)]
    slow_winner = saturating(0.97, rate=0.1)
    low_plateau = saturating(0.4, rate=2.0)
    out = simulate(lambda: stopping_rule(DecayCurveAutomatedStoppingSpec(), metric), fast + [slow_winner, low_plateau],
                   max_steps=30, metric=metric)
    assert out.steps["7"] == 30, out.reasons
    assert out.steps["8"] < 30 and "predicts at best" in out.reasons["8"]


def test_decay_curve_stops_a_diverging_trial():
    # Worse than every completed curve and getting worse: below them on every count, so the
    # extrapolation guard does not shield it.
    done = [saturating(0.6 + 0.05 * i, rate=0.3) for i in range(6)]
    diverging: Curve = lambda step: max(0.0, 0.3 - 0.02 * step)
    out = simulate(lambda: stopping_rule(DecayCurveAutomatedStoppingSpec(), ACC), done + [diverging], max_steps=30)
    assert out.steps["7"] < 30, out.steps


@pytest.mark.parametrize("metric", [ACC, LOSS], ids=["maximize", "minimize"])
def test_convex_stops_plateaued_trials(metric):
    curves, good, bad = mixed_curves(18, seed=2)
    spec = ConvexAutomatedStoppingSpec(max_step_count=20, min_step_count=4, min_measurement_count=3)
    out = simulate(lambda: stopping_rule(spec, metric), curves, max_steps=20, parallel=2, metric=metric)
    assert all(out.steps[t] == 20 for t in record_setters(curves, 20)), out.steps
    stopped = out.stopped_at()
    assert {t for t in bad if int(t) > 4} <= set(stopped)
    assert all(5 <= s < 20 for s in stopped.values())  # never at or before minStepCount
    assert out.total < 18 * 20


def test_convex_defaults_learn_max_steps_and_wait_for_completed_trials():
    curves, good, bad = mixed_curves(18, seed=3)
    out = simulate(lambda: stopping_rule(ConvexAutomatedStoppingSpec(), ACC), curves, max_steps=20)
    assert all(out.steps[t] == 20 for t in record_setters(curves, 20))
    # min_measurement_count 5 -> nothing stops before 6 trials have completed.
    assert all(int(t) > 6 for t in out.reasons)
    assert any(out.steps[t] < 20 for t in bad)


def test_convex_counts_of_zero_are_unset_as_in_vertex():
    """`maxStepCount: 0` (proto3's "not set": learn it) made every extrapolation end at x = 0,
    so the rule never stopped anything."""
    curves, good, bad = mixed_curves(18, seed=3)
    zeros = ConvexAutomatedStoppingSpec(max_step_count=0, min_step_count=0, min_measurement_count=0)
    out = simulate(lambda: stopping_rule(zeros, ACC), curves, max_steps=20)
    unset = simulate(lambda: stopping_rule(ConvexAutomatedStoppingSpec(), ACC), curves, max_steps=20)
    assert out.steps == unset.steps and any(out.steps[t] < 20 for t in bad)


def test_convex_never_stops_a_flat_curve():
    curves = [saturating(0.9)] * 6 + [lambda step: 0.1]
    out = simulate(lambda: stopping_rule(ConvexAutomatedStoppingSpec(min_measurement_count=3), ACC), curves,
                   max_steps=20)
    assert out.steps["7"] == 20


# --------------------------------------------------------------------------- ASHA


def test_asha_promotes_the_top_third_at_each_rung():
    qualities = [5, 1, 9, 3, 7, 2, 8, 4, 6]
    curves = [saturating(q / 10) for q in qualities]
    spec = AshaStoppingSpec(reduction_factor=3, min_step_count=1, max_step_count=27)
    out = simulate(lambda: stopping_rule(spec, ACC), curves, max_steps=27)
    # Worked by hand: at rung 1 the n-th arrival continues iff it is in the top max(1, n // 3).
    assert out.stopped_at() == {"2": 1, "4": 1, "5": 1, "6": 1, "7": 3, "8": 1, "9": 1}
    assert {t for t, s in out.steps.items() if s == 27} == {"1", "3"}
    promoted_past_1 = [t for t, s in out.steps.items() if s > 1]
    assert len(promoted_past_1) == len(qualities) // 3
    assert out.reasons["7"] == "ASHA: at rung step 3, accuracy 0.4221 is not in the top 1/3 of 3 trials at that rung"


@pytest.mark.parametrize("metric", [ACC, LOSS], ids=["maximize", "minimize"])
@pytest.mark.parametrize("parallel", [1, 4])
def test_asha_stops_only_at_rungs(metric, parallel):
    rng = random.Random(7)
    curves = [saturating(rng.uniform(0.2, 0.95)) for _ in range(40)]  # curves never cross
    spec = AshaStoppingSpec(reduction_factor=3, min_step_count=1, max_step_count=30)
    out = simulate(lambda: stopping_rule(spec, metric), curves, max_steps=30, parallel=parallel, metric=metric)
    assert set(out.stopped_at().values()) <= {1, 3, 9, 27}
    assert len(out.reasons) >= 25
    finished = [t for t, s in out.steps.items() if s == 30]
    best = max(range(40), key=lambda i: curves[i](30))
    assert str(best + 1) in finished  # the best is in the top third at every rung
    assert out.total < 40 * 30 / 3


def test_asha_rungs_in_elapsed_seconds_and_min_step_count():
    rng = random.Random(3)
    curves = [saturating(rng.uniform(0.2, 0.95)) for _ in range(20)]
    spec = AshaStoppingSpec(reduction_factor=2, min_step_count=6, max_step_count=60, use_elapsed_duration=True)
    out = simulate(lambda: stopping_rule(spec, ACC), curves, max_steps=20, parallel=2, elapsed=True)
    # Rungs at 6, 12, 24, 48 seconds = steps 2, 4, 8, 16 (3 s a step).
    assert out.reasons and set(out.stopped_at().values()) <= {2, 4, 8, 16}
    assert "at rung second " in next(iter(out.reasons.values()))


def test_asha_judges_a_nan_rung_value_at_the_next_finite_measurement():
    curves = [saturating(0.9), lambda step: math.nan if step <= 3 else 0.1]
    spec = AshaStoppingSpec(reduction_factor=2, min_step_count=2, max_step_count=16)
    out = simulate(lambda: stopping_rule(spec, ACC), curves, max_steps=16)
    # Trial 2 reports NaN at steps 1-3 (rung 2 unseen); at step 4 it is judged at rung 4.
    assert out.stopped_at() == {"2": 4}


def test_asha_decisions_are_deterministic_and_survive_a_new_rule_object():
    rng = random.Random(11)
    curves = [saturating(rng.uniform(0.2, 0.95), rate=rng.uniform(0.1, 0.5)) for _ in range(30)]
    spec = AshaStoppingSpec(reduction_factor=3, min_step_count=1, max_step_count=27)
    first = simulate(lambda: stopping_rule(spec, ACC), curves, max_steps=27)
    again = simulate(lambda: stopping_rule(spec, ACC), curves, max_steps=27)
    resumed = simulate(lambda: stopping_rule(spec, ACC), curves, max_steps=27, fresh_rule_each_review=True)
    assert first == again == resumed


@pytest.mark.parametrize(
    "spec",
    [MedianAutomatedStoppingSpec(), DecayCurveAutomatedStoppingSpec(), ConvexAutomatedStoppingSpec()],
    ids=["median", "decay-curve", "convex"],
)
def test_stateless_rules_decide_the_same_on_a_fresh_object(spec):
    curves, _, _ = mixed_curves(18, seed=5)
    first = simulate(lambda: stopping_rule(spec, ACC), curves, max_steps=20, parallel=3)
    resumed = simulate(lambda: stopping_rule(spec, ACC), curves, max_steps=20, parallel=3,
                       fresh_rule_each_review=True)
    assert first == resumed and first.reasons


def test_asha_rung_competitors_are_read_at_the_rung_not_at_their_end():
    # As Optuna's SuccessiveHalvingPruner: a finished trial competes at a rung with the value it
    # had there. Trial 1 starts slow (0.2 at step 3) and ends best (0.99); trial 2 is at 0.6 at
    # step 3. Against trial 1's final value trial 2 would stop at rung 3; against its rung value
    # it is the top 1 of 2 and continues.
    curves = [lambda step: 0.2 if step <= 3 else 0.99, lambda step: 0.6]
    spec = AshaStoppingSpec(reduction_factor=2, min_step_count=3, max_step_count=12)
    out = simulate(lambda: stopping_rule(spec, ACC), curves, max_steps=9)
    assert out.steps == {"1": 9, "2": 6}  # trial 2 stops at rung 6, where trial 1 had 0.99
    assert out.reasons["2"].startswith("ASHA: at rung step 6, accuracy 0.6 is not in the top 1/2 of 2 trials")


# --------------------------------------------------------------------------- Hyperband


def test_hyperband_brackets_stop_only_at_their_own_rungs():
    spec = HyperbandStoppingSpec(reduction_factor=3, min_step_count=1, max_step_count=27)
    rule = stopping_rule(spec, ACC)
    rng = random.Random(5)
    curves = [saturating(rng.uniform(0.2, 0.95), rate=rng.uniform(0.1, 0.5)) for _ in range(98)]
    out = simulate(lambda: rule, curves, max_steps=27, parallel=3)
    rungs = {0: {1, 3, 9}, 1: {3, 9}, 2: {9}, 3: set()}  # bracket 3 starts at 27 = a full trial
    for tid, step in out.stopped_at().items():
        b = rule.bracket_of(tid)
        assert step in rungs[b], (tid, b, step)
        assert out.reasons[tid].startswith(f"Hyperband bracket {b}: at rung step {step}, accuracy ")
    brackets = [rule.bracket_of(str(i)) for i in range(1, 99)]
    # Hyperband's trial counts 27:12:6:4 over a cycle of 49 ids, two full cycles here.
    assert [brackets.count(b) for b in range(4)] == [54, 24, 12, 8]
    assert all(out.steps[str(i)] == 27 for i in range(1, 99) if brackets[i - 1] == 3)
    assert len(set(brackets[:4])) == 4 or len(set(brackets[:8])) == 4  # brackets interleave early
    assert out.total < 98 * 27 / 2


def test_hyperband_with_a_huge_max_step_count_is_built_at_once():
    """The bracket cycle's length grows as max_step_count / min_step_count: 1e23 hung the
    controller before its first trial (1e7 took 48 s). The cycle is cut at CYCLE_MAX, and
    every bracket still gets trials in proportion over it."""
    import time

    from vcli.tuning.stopping.hyperband import CYCLE_MAX

    spec = HyperbandStoppingSpec(reduction_factor=3, min_step_count=1, max_step_count=10**23)
    start = time.process_time()
    rule = stopping_rule(spec, ACC)
    assert time.process_time() - start < 5
    assert len(rule.brackets) == 49 and len(rule.cycle) == CYCLE_MAX
    counts = [rule.cycle.count(b) for b in range(3)]
    assert counts[0] > counts[1] > counts[2] > 0  # bracket 0 has the most trials, as in Hyperband
    assert rule.bracket_of("123456789") in range(49)


def test_hyperband_compares_only_trials_of_the_same_bracket():
    spec = HyperbandStoppingSpec(reduction_factor=3, min_step_count=1, max_step_count=27)
    rule = stopping_rule(spec, ACC)
    ids = [str(i) for i in range(1, 50)]
    first_in_bracket = {}
    for tid in ids:
        first_in_bracket.setdefault(rule.bracket_of(tid), tid)
    # Every trial but the first of each bracket is much worse than trial 1; the first of each
    # bracket meets nobody at its rungs and must run to the end.
    curves = [saturating(0.95)] + [saturating(0.1)] * 48
    out = simulate(lambda: rule, curves, max_steps=27)
    for tid in first_in_bracket.values():
        assert out.steps[tid] == 27, tid


def test_hyperband_trial_counts_and_rungs_match_optunas_hyperband_pruner():
    # Optuna's HyperbandPruner(min_resource=1, max_resource=100, reduction_factor=3): 5 brackets,
    # trial budgets ceil(5 x 3**s / (s + 1)) = 81:34:15:8:5, bracket b's rungs at 3**b x 3**k.
    spec = HyperbandStoppingSpec(reduction_factor=3, min_step_count=1, max_step_count=100)
    rule = stopping_rule(spec, ACC)
    cycle = [rule.bracket_of(str(i)) for i in range(1, 144)]
    assert [cycle.count(b) for b in range(5)] == [81, 34, 15, 8, 5]
    assert [rule.bracket_of(str(i + 143)) for i in range(1, 144)] == cycle
    assert [b.min_x for b in rule.brackets] == [1, 3, 9, 27, 81]
    assert describe_rule(spec) == ("Hyperband (reduction factor 3, 5 brackets, first rungs at steps 1, 3, 9, 27, 81, "
                                   "full trial 100 steps)")


def test_hyperband_bracket_of_is_stable_and_handles_non_numeric_ids():
    spec = HyperbandStoppingSpec(reduction_factor=3, min_step_count=1, max_step_count=81)
    a, b = stopping_rule(spec, ACC), stopping_rule(spec, ACC)
    assert [a.bracket_of(str(i)) for i in range(200)] == [b.bracket_of(str(i)) for i in range(200)]
    assert a.bracket_of("trial-x") == b.bracket_of("trial-x") in range(5)


# --------------------------------------------------------------------------- construction


def test_describe_rule_and_names():
    assert describe_rule(AshaStoppingSpec(max_step_count=30)) == "ASHA (reduction factor 3, rungs at steps 1, 3, 9, 27)"
    assert describe_rule(AshaStoppingSpec()) == "ASHA (reduction factor 3, rungs at steps 1, 3, 9, 27, 81, 243, ...)"
    assert describe_rule(HyperbandStoppingSpec(max_step_count=27)) == (
        "Hyperband (reduction factor 3, 4 brackets, first rungs at steps 1, 3, 9, 27, full trial 27 steps)")
    assert describe_rule(ConvexAutomatedStoppingSpec(use_elapsed_duration=True)).startswith(
        "convex rule (max seconds learned, min seconds max/10, min measurements 5)")
    assert describe_rule(MedianAutomatedStoppingSpec()).startswith("median rule")
    assert describe_rule(DecayCurveAutomatedStoppingSpec()).startswith("decay-curve rule")
    specs = [MedianAutomatedStoppingSpec(), DecayCurveAutomatedStoppingSpec(), ConvexAutomatedStoppingSpec(),
             AshaStoppingSpec(), HyperbandStoppingSpec(max_step_count=9)]
    assert tuple(stopping_rule(s, ACC).name for s in specs) == RULE_NAMES


@pytest.mark.parametrize(
    "spec",
    [AshaStoppingSpec(reduction_factor=1), AshaStoppingSpec(min_step_count=0), AshaStoppingSpec(min_step_count=5, max_step_count=4),
     HyperbandStoppingSpec(), HyperbandStoppingSpec(min_step_count=4, max_step_count=8)],
)
def test_bad_bounds_are_refused(spec):
    with pytest.raises(ValueError):
        stopping_rule(spec, ACC)


def test_review_does_not_stop_trials_without_measurements():
    for spec in (MedianAutomatedStoppingSpec(), DecayCurveAutomatedStoppingSpec(), ConvexAutomatedStoppingSpec(),
                 AshaStoppingSpec(), HyperbandStoppingSpec(max_step_count=9)):
        t = Trial(id="1", parameters={}, state=TrialState.ACTIVE)
        assert stopping_rule(spec, ACC).review(t, [t]) is None


def _reported(curve: Callable[[int], float], steps: int, thinned: bool) -> tuple:
    """A trial's measurements of `curve` at steps 1..`steps`, as a MetricReader keeps them
    (`thinned`) or every one of them."""
    from vcli.metrics import MetricReader

    if not thinned:
        return tuple(Measurement(step_count=s, metrics={"accuracy": curve(s)}) for s in range(1, steps + 1))
    reader = MetricReader("accuracy")
    for s in range(1, steps + 1):
        reader.feed_stdout_line(f"accuracy={curve(s)!r} step={s}", 1.0)
    return tuple(reader.measurements)


@pytest.mark.parametrize("thinned", [False, True], ids=["whole", "thinned"])
@pytest.mark.parametrize("rule, spec, worse_stops", [
    ("median", MedianAutomatedStoppingSpec(), True),
    ("asha", AshaStoppingSpec(reduction_factor=3, min_step_count=1), False),
])
def test_rules_judge_long_finished_trials_as_if_every_report_were_kept(thinned, rule, spec, worse_stops):
    """Finished trials of 100,000 reports keep 1,000 measurements: with an even stride the
    early steps were gone (steps 1, 129, 257...), so ASHA compared a running trial at rung 3
    with a finished one at step 129 (a better trial stopped) and the median rule read running
    averages of step 1 alone (a worse trial never stopped; found by a probe)."""
    kept = _reported(lambda s: 1 - 1 / s, 100_000, thinned)
    done = [Trial(id=str(i), parameters={}, state=TrialState.SUCCEEDED, measurements=kept) for i in range(1, 6)]
    r = stopping_rule(spec, ACC)
    if worse_stops:  # always worse than every finished trial: stopped at step 3, as with whole curves
        running = Trial(id="9", parameters={}, state=TrialState.ACTIVE,
                        measurements=_reported(lambda s: 0.5 * (1 - 1 / s), 3, False))
        assert r.review(running, [*done, running]) is not None
    else:  # better than the finished ones at every step: never stopped at a rung
        running = Trial(id="9", parameters={}, state=TrialState.ACTIVE,
                        measurements=_reported(lambda s: 1.1 * (1 - 1 / s), 3, False))
        assert r.review(running, [*done, running]) is None
