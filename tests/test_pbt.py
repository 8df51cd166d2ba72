"""Population Based Training's decisions (`vcli.tuning.pbt`): checks, explore, review, a toy population."""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import replace

import pytest

from vcli.spec import (
    Algorithm,
    CategoricalValueSpec,
    ConditionalParameterSpec,
    DiscreteValueSpec,
    DoubleValueSpec,
    Goal,
    IntegerValueSpec,
    Measurement,
    MetricSpec,
    ParameterSpec,
    PbtLineage,
    PopulationBasedTrainingSpec,
    ScaleType,
    StudySpec,
    Trial,
    TrialState,
)
from vcli.tuning.pbt import Exploit, PbtScheduler, check_pbt, quantile_count

LOG, REV, LIN = ScaleType.UNIT_LOG_SCALE, ScaleType.UNIT_REVERSE_LOG_SCALE, ScaleType.UNIT_LINEAR_SCALE


def pspec(pid, vs, scale=LIN, children=()):
    return ParameterSpec(parameter_id=pid, value_spec=vs, scale_type=scale, conditional_parameter_specs=children)


ALL_TYPES = (
    pspec("lr", DoubleValueSpec(min_value=1e-5, max_value=1e-1), LOG),
    pspec("momentum", DoubleValueSpec(min_value=0.5, max_value=0.999), REV),
    pspec("dropout", DoubleValueSpec(min_value=0.0, max_value=0.5)),
    pspec("units", IntegerValueSpec(min_value=1, max_value=512), LOG),
    pspec("layers", IntegerValueSpec(min_value=1, max_value=4)),
    pspec("batch", DiscreteValueSpec(values=(16, 32, 64, 128))),
    pspec("optimizer", CategoricalValueSpec(values=("sgd", "adam", "rmsprop")), children=(
        ConditionalParameterSpec(parameter_spec=pspec("nesterov", CategoricalValueSpec(values=("yes", "no"))),
                                 parent_values=("sgd",)),
        ConditionalParameterSpec(parameter_spec=pspec("beta2", DoubleValueSpec(min_value=0.9, max_value=0.9999), REV),
                                 parent_values=("adam",)),
        ConditionalParameterSpec(parameter_spec=pspec("rho", DiscreteValueSpec(values=(0.8, 0.9, 0.99))),
                                 parent_values=("rmsprop",)),
    )),
)


def study(params=ALL_TYPES, goal=Goal.MAXIMIZE, **pbt) -> StudySpec:
    defaults = dict(population_size=4, perturbation_interval_steps=2, max_step_count=20)
    return StudySpec(
        metrics=(MetricSpec(metric_id="accuracy", goal=goal),),
        parameters=params,
        algorithm=Algorithm.POPULATION_BASED_TRAINING,
        population_based_training_spec=PopulationBasedTrainingSpec(**{**defaults, **pbt}),
    )


# --------------------------------------------------------------------------- check_pbt


class Bad(Exception):
    pass


def error(field: str, message: str) -> Bad:
    return Bad(field, message)


def judge(spec: StudySpec) -> tuple[str, str] | None:
    try:
        check_pbt(spec, error)
    except Bad as e:
        return e.args
    return None


@pytest.mark.parametrize("change, field, words", [
    ({"population_size": 1}, "populationSize", "at least 2"),
    ({"quantile_fraction": 0.0}, "quantileFraction", "(0, 0.5]"),
    ({"quantile_fraction": 0.6}, "quantileFraction", "(0, 0.5]"),
    ({"quantile_fraction": math.nan}, "quantileFraction", "(0, 0.5]"),
    ({"resample_probability": -0.1}, "resampleProbability", "[0, 1]"),
    ({"resample_probability": 1.5}, "resampleProbability", "[0, 1]"),
    ({"perturbation_factors": ()}, "perturbationFactors", "[0.8, 1.2]"),
    ({"perturbation_factors": (0.8, 0.0)}, "perturbationFactors", "found [0.0]"),
    ({"perturbation_factors": (-1.2,)}, "perturbationFactors", "positive"),
    ({"perturbation_interval_steps": 0}, "perturbationIntervalSteps", "at least 1"),
    ({"max_step_count": 0}, "maxStepCount", "at least perturbationIntervalSteps (2)"),
])
def test_check_pbt_rejects_bad_values_naming_the_field_and_valid_values(change, field, words):
    got = judge(study(**change))
    assert got is not None and got[0] == field and words in got[1], got


def test_check_pbt_accepts_good_specs_and_ignores_other_algorithms():
    assert judge(study()) is None
    assert judge(study(quantile_fraction=0.5, resample_probability=1.0, perturbation_factors=(1.0,),
                       max_step_count=2)) is None
    assert judge(replace(study(), algorithm=Algorithm.RANDOM_SEARCH, population_based_training_spec=None)) is None


def test_check_pbt_algorithm_and_block_must_agree_and_one_metric():
    missing = judge(replace(study(), population_based_training_spec=None))
    assert missing is not None and missing[0] == "" and "populationBasedTrainingSpec" in missing[1]
    stray = judge(replace(study(), algorithm=Algorithm.TPE))
    assert stray is not None and stray[0] == "" and "[TPE]" in stray[1]
    two = replace(study(), metrics=(MetricSpec(metric_id="a", goal=Goal.MAXIMIZE),
                                    MetricSpec(metric_id="b", goal=Goal.MINIMIZE)))
    got = judge(two)
    assert got is not None and got[0] == "" and "one metric" in got[1]


def test_quantile_count_never_overlaps():
    assert quantile_count(4, 0.25) == 1
    assert quantile_count(8, 0.25) == 2
    assert quantile_count(5, 0.25) == 2
    assert quantile_count(2, 0.25) == 1
    assert quantile_count(3, 0.5) == 1
    for n in range(2, 40):
        for q in (0.01, 0.1, 0.25, 0.3, 0.5):
            assert 1 <= quantile_count(n, q) <= n // 2


# --------------------------------------------------------------------------- parameters


def in_domain(spec: StudySpec, params: dict) -> None:
    """Every active parameter is present, typed and within its domain; no inactive one."""
    sched = PbtScheduler(spec, seed=0)
    space = sched.space
    for col, node in enumerate(space.nodes):
        active = space.is_active(col, params)
        assert (node.parameter_id in params) == active, (node.parameter_id, params)
        if not active:
            continue
        v = params[node.parameter_id]
        if node.kind == "DOUBLE":
            assert type(v) is float and node.lo <= v <= node.hi
        elif node.kind == "INTEGER":
            assert type(v) is int and node.int_lo <= v <= node.int_hi
        else:
            assert v in node.values
            assert type(v) is (str if node.kind == "CATEGORICAL" else float)


def test_initial_parameters_are_random_in_domain_and_deterministic():
    spec = study()
    a, b = PbtScheduler(spec, seed=7), PbtScheduler(spec, seed=7)
    draws = [a.initial_parameters(m) for m in range(40)]
    assert draws == [b.initial_parameters(m) for m in range(40)]
    assert draws != [PbtScheduler(spec, seed=8).initial_parameters(m) for m in range(40)]
    for p in draws:
        in_domain(spec, p)
    assert {p["optimizer"] for p in draws} == {"sgd", "adam", "rmsprop"}
    lrs = [p["lr"] for p in draws]  # log scale: about as many below 1e-3 as above
    assert 10 <= sum(v < 10 ** -3 for v in lrs) <= 30


def test_explore_perturbs_every_type_by_its_rule():
    spec = study(resample_probability=0.0, perturbation_factors=(0.8, 1.2))
    sched = PbtScheduler(spec, seed=1)
    start = {"lr": 1e-3, "momentum": 0.9, "dropout": 0.25, "units": 3, "layers": 2, "batch": 32.0,
             "optimizer": "adam", "beta2": 0.99}
    seen_factor = set()
    for k in range(60):
        out = sched.explore(start, key=(k,))
        in_domain(spec, out)
        assert out == sched.explore(start, key=(k,))  # deterministic in key
        f = out["lr"] / start["lr"]  # log scale: the factor multiplies the value
        assert f == pytest.approx(0.8) or f == pytest.approx(1.2)
        seen_factor.add(round(f, 6))
        assert out["momentum"] / 0.9 == pytest.approx(0.8) or out["momentum"] == 0.999  # 1.08 clamped
        assert out["dropout"] / 0.25 in (pytest.approx(0.8), pytest.approx(1.2))
        assert out["units"] in (2, 4)  # 3 x 0.8 = 2.4 -> 2; 3 x 1.2 = 3.6 -> 4
        assert out["layers"] in (1, 3)  # 1.6 rounds to 2, moved to 1; 2.4 -> 2 moved to 3
        assert out["batch"] in (16.0, 64.0)  # a neighbour
        assert out["optimizer"] in ("sgd", "rmsprop")
    assert seen_factor == {0.8, 1.2}


def test_explore_clamps_moves_inward_at_the_ends_and_resamples_zero():
    spec = study(resample_probability=0.0, perturbation_factors=(2.0,))
    sched = PbtScheduler(spec, seed=3)
    top = {"lr": 0.08, "momentum": 0.99, "dropout": 0.0, "units": 512, "layers": 4, "batch": 128.0,
           "optimizer": "rmsprop", "rho": 0.8}
    moved_dropout = set()
    for k in range(20):
        out = sched.explore(top, key=(k,))
        in_domain(spec, out)
        assert out["lr"] == 0.1 and out["units"] == 512 and out["layers"] == 4  # clamped to max
        assert out["batch"] == 64.0  # the last value moves inward
        assert out["optimizer"] == "adam" and "beta2" in out and "rho" not in out  # new branch
        assert out["beta2"] != 0.8
        moved_dropout.add(out["dropout"])
    assert len(moved_dropout) > 1  # 0 x 2 would stay 0: resampled instead


@pytest.mark.parametrize("factor", [1e308, 1e-308])
def test_explore_with_an_extreme_factor_stays_in_the_domain(factor: float):
    """A factor check_pbt accepts made an INTEGER inf (OverflowError: the study's controller
    died with a traceback and left the study RUNNING)."""
    assert judge(study(perturbation_factors=(factor,))) is None
    sched = PbtScheduler(study(resample_probability=0.0, perturbation_factors=(factor,)), seed=3)
    start = {"lr": 1e-3, "momentum": 0.9, "dropout": 0.25, "units": 3, "layers": 2, "batch": 32.0,
             "optimizer": "adam", "beta2": 0.99}
    for k in range(10):
        out = sched.explore(start, key=(k,))
        in_domain(study(), out)
        assert (out["units"], out["layers"]) == ((512, 4) if factor > 1 else (1, 1)), out


def test_explore_resample_probability_one_draws_from_the_prior():
    spec = study(resample_probability=1.0, perturbation_factors=(1.0,))
    sched = PbtScheduler(spec, seed=5)
    start = {"lr": 1e-3, "momentum": 0.9, "dropout": 0.25, "units": 3, "layers": 2, "batch": 32.0,
             "optimizer": "adam", "beta2": 0.99}
    outs = [sched.explore(start, key=(k, 9)) for k in range(60)]
    for out in outs:
        in_domain(spec, out)
    assert len({o["lr"] for o in outs}) == 60
    assert {o["batch"] for o in outs} == {16.0, 32.0, 64.0, 128.0}  # not only neighbours
    assert {o["optimizer"] for o in outs} == {"sgd", "adam", "rmsprop"}
    # factor 1 and no resampling: nothing moves but the discrete/categorical neighbours
    still = PbtScheduler(study(resample_probability=0.0, perturbation_factors=(1.0,)), seed=5)
    out = still.explore(start, key=(1,))
    assert {k: out[k] for k in ("lr", "momentum", "dropout", "units", "layers")} == \
        {k: start[k] for k in ("lr", "momentum", "dropout", "units", "layers")}


def test_explore_resample_probability_matches_its_rate():
    params = (pspec("x", DoubleValueSpec(min_value=0.0, max_value=1.0)),)
    sched = PbtScheduler(study(params, resample_probability=0.25, perturbation_factors=(1.0,)), seed=2)
    resampled = sum(sched.explore({"x": 0.5}, key=(k,))["x"] != 0.5 for k in range(2000))
    assert 400 <= resampled <= 600


# --------------------------------------------------------------------------- review


def trial(tid, member, steps_values, *, start=0, state=TrialState.ACTIVE, params=None, parent=None):
    return Trial(id=str(tid), parameters=params or {"lr": 0.01}, state=state,
                 measurements=tuple(Measurement(step_count=s, metrics={"accuracy": v}) for s, v in steps_values),
                 lineage=PbtLineage(member=member, start_step=start, parent_trial_id=parent))


SIMPLE = (pspec("lr", DoubleValueSpec(min_value=1e-4, max_value=1e-1), LOG),)


def population_at(step, values, **kw):
    return [trial(i + 1, i, [(step, v)], params={"lr": 10 ** -(i + 1)}, **kw) for i, v in enumerate(values)]


def test_review_exploits_the_bottom_member_from_the_top_one():
    sched = PbtScheduler(study(SIMPLE, perturbation_interval_steps=4), seed=0)
    pop = population_at(4, [0.5, 0.9, 0.2, 0.7])
    got = sched.review(pop[2], pop)
    assert isinstance(got, Exploit)
    assert got.donor.id == "2" and got.start_step == 4 and got.inherited == {"lr": 0.01}
    assert got.parameters["lr"] in (pytest.approx(0.008), pytest.approx(0.012)) or got.parameters["lr"] != 0.01
    assert got.reason == ("PBT: trial 3 (accuracy 0.2 at step 4) is in the bottom 25% of the 4 members measured at "
                          "step 4 (population 4); exploiting trial 2 (0.9 at step 4)")
    for t in (pop[0], pop[1], pop[3]):
        assert sched.review(t, pop) is None
    # judged once per boundary: the same call again continues
    assert sched.review(pop[2], pop) is None
    # a fresh scheduler (a replacement controller) decides the same for the same call
    again = PbtScheduler(study(SIMPLE, perturbation_interval_steps=4), seed=0).review(pop[2], pop)
    assert again == got


def test_review_minimize_flips_the_ranking():
    sched = PbtScheduler(study(SIMPLE, goal=Goal.MINIMIZE, perturbation_interval_steps=4), seed=0)
    pop = population_at(4, [0.5, 0.9, 0.2, 0.7])
    assert sched.review(pop[2], pop) is None
    got = sched.review(pop[1], pop)
    assert got is not None and got.donor.id == "3"


def test_review_waits_for_boundaries_counted_in_absolute_steps():
    spec = study(SIMPLE, perturbation_interval_steps=2)
    others = population_at(6, [0.9, 0.8, 0.7])
    resumed = trial(9, 3, [(5, 0.1)], start=4)  # resumed from a checkpoint at step 4
    sched = PbtScheduler(spec, seed=0)
    assert sched.review(resumed, others + [resumed]) is None  # step 5: before boundary 6
    resumed = replace(resumed, measurements=resumed.measurements + (Measurement(step_count=6, metrics={"accuracy": 0.1}),))
    assert sched.review(resumed, others + [resumed]) is not None  # step 6: judged
    fresh = trial(10, 3, [(4, 0.1)], start=4)
    assert PbtScheduler(spec, seed=0).review(fresh, others + [fresh]) is None  # its start is no boundary


def test_review_never_exploits_at_or_past_max_steps_nor_finished_donors():
    spec = study(SIMPLE, perturbation_interval_steps=2, max_step_count=7)
    pop = population_at(8, [0.5, 0.9, 0.2, 0.7])
    assert PbtScheduler(spec, seed=0).review(pop[2], pop) is None
    pop = population_at(6, [0.5, 0.9, 0.2, 0.7])
    assert PbtScheduler(spec, seed=0).review(pop[2], pop) is not None
    pop[1] = trial(2, 1, [(6, 0.8), (7, 0.9)], state=TrialState.SUCCEEDED)  # the top one finished
    assert PbtScheduler(spec, seed=0).review(pop[2], pop) is None


def test_review_ranks_values_at_the_boundary_and_needs_two():
    spec = study(SIMPLE, perturbation_interval_steps=4)
    # the others are far ahead with no value in step 4's window, or have no measurement yet
    pop = [trial(1, 0, [(20, 9.0)]), trial(2, 1, []), trial(3, 2, [(4, 0.1)]), trial(4, 3, [(12, 5.0)])]
    assert PbtScheduler(spec, seed=0).review(pop[2], pop) is None
    # one member ahead: ranked by the value it had at step 4, exploited from its latest step
    pop[1] = trial(2, 1, [(3, 0.05), (5, 0.5), (9, 0.05)])
    got = PbtScheduler(spec, seed=0).review(pop[2], pop)
    assert got is not None and got.donor.id == "2" and got.start_step == 9
    assert "exploiting trial 2 (0.5 at step 5, now at step 9)" in got.reason


def test_review_waits_for_members_behind_then_judges_at_the_boundary():
    """Members drift apart (one starts TensorFlow seconds later): the one ahead is judged at
    boundary 4 once the one behind gets there, from its value at 4, whatever its step now."""
    spec = study(SIMPLE, perturbation_interval_steps=4, population_size=2, quantile_fraction=0.5, max_step_count=12)
    ahead = trial(1, 0, [(s, 0.1 * s) for s in range(1, 10)])
    behind = trial(2, 1, [])
    sched = PbtScheduler(spec, seed=0)
    assert sched.review(ahead, [ahead, behind]) is None  # alone at 4 and 8: nobody to rank against yet
    behind = trial(2, 1, [(1, 0.3), (2, 0.35)])
    assert sched.review(ahead, [ahead, behind]) is None  # the member behind has reported: waited for
    behind = trial(2, 1, [(1, 0.3), (2, 0.35), (3, 0.45), (4, 0.5)])
    assert sched.review(behind, [ahead, behind]) is None  # 0.5 beats the leader's 0.4 at step 4
    got = sched.review(ahead, [ahead, behind])
    assert got is not None and got.donor.id == "2" and got.start_step == 4
    assert "trial 1 (accuracy 0.4 at step 4)" in got.reason
    # a member that ended short of the boundary is not waited for; one that never reported is
    # not waited for once two can be ranked
    ended = replace(trial(2, 1, [(1, 0.3)]), state=TrialState.SUCCEEDED)
    assert PbtScheduler(spec, seed=0).review(ahead, [ahead, ended]) is None
    spec4 = study(SIMPLE, perturbation_interval_steps=4, population_size=3, quantile_fraction=0.34, max_step_count=12)
    pop = [trial(1, 0, [(4, 0.1)]), trial(2, 1, [(4, 0.9)]), trial(3, 2, [])]
    assert PbtScheduler(spec4, seed=0).review(pop[0], pop) is not None


def test_a_member_that_trained_to_the_end_while_judgements_waited_is_still_judged():
    """CI saw it under load: one member diverged and trained all 12 steps before the other's
    TensorFlow reported once. At boundary 4 it waited for the other; when that one gets
    there, the ended member is judged from its value at 4 and its member goes on."""
    spec = study(SIMPLE, perturbation_interval_steps=4, population_size=2, quantile_fraction=0.5, max_step_count=12)
    done = replace(trial(1, 0, [(s, 0.1) for s in range(1, 13)]), state=TrialState.SUCCEEDED)
    behind = trial(2, 1, [])
    sched = PbtScheduler(spec, seed=0)
    assert sched.review(done, [done, behind]) is None  # nobody to rank against at 4 or 8 yet
    behind = trial(2, 1, [(1, 0.7), (2, 0.9), (3, 0.93), (4, 0.95)])
    got = sched.review(done, [done, behind])
    assert got is not None and got.donor.id == "2" and got.start_step == 4
    assert "trial 1 (accuracy 0.1 at step 4)" in got.reason
    assert sched.review(done, [done, behind]) is None  # judged once at 4; 8 waits again
    # the winner at 4 is not judged at 12 (maxStepCount), nor are members that ended otherwise
    winner = replace(trial(1, 0, [(s, 0.99) for s in range(1, 13)]), state=TrialState.SUCCEEDED)
    behind8 = trial(2, 1, [(s, 0.5) for s in range(1, 13)])
    assert PbtScheduler(spec, seed=0).review(winner, [winner, behind8]) is None
    for state in (TrialState.STOPPING, TrialState.INFEASIBLE, TrialState.REQUESTED):
        assert PbtScheduler(spec, seed=0).review(replace(done, state=state), [done, behind]) is None
    short = replace(trial(1, 0, [(s, 0.1) for s in range(1, 7)]), state=TrialState.SUCCEEDED)
    assert PbtScheduler(spec, seed=0).review(short, [short, behind]) is None  # ended short of maxStepCount


def test_review_skips_replaced_stopping_infeasible_and_nonfinite():
    spec = study(SIMPLE, perturbation_interval_steps=4)
    pop = population_at(4, [0.5, 0.9, 0.2, 0.7])
    newer = trial(5, 2, [], start=4, parent="2")
    assert PbtScheduler(spec, seed=0).review(pop[2], pop + [newer]) is None  # member 2 moved on
    stopping = replace(pop[2], state=TrialState.STOPPING)
    assert PbtScheduler(spec, seed=0).review(stopping, pop) is None
    nan = trial(3, 2, [(4, 0.2), (5, math.nan)])
    assert PbtScheduler(spec, seed=0).review(nan, pop) is not None  # NaN ignored: latest is step 4
    crashed = pop[:1] + [replace(pop[1], state=TrialState.INFEASIBLE)] + pop[2:]
    got = PbtScheduler(spec, seed=0).review(pop[2], crashed)
    assert got is not None and got.donor.id == "4"  # the crashed top member is no donor


def test_review_ties_take_turns_at_the_bottom():
    spec = study(SIMPLE, perturbation_interval_steps=1, population_size=8, max_step_count=100)
    exploited: set[str] = set()
    for step in range(1, 30):
        pop = [trial(i + 1, i, [(step, 0.0 if i < 6 else 1.0)]) for i in range(8)]  # six stuck at 0
        sched = PbtScheduler(spec, seed=4)
        hits = [t.id for t in pop if sched.review(t, pop) is not None]
        assert len(hits) == quantile_count(8, 0.25)
        assert all(int(h) <= 6 for h in hits)
        exploited.update(hits)
    assert len(exploited) == 6


# --------------------------------------------------------------------------- a toy population


def toy_step(accuracy: float, lr: float, rng: random.Random) -> float:
    """Ray Tune's PBT toy: the best learning rate rises, then falls, with the accuracy."""
    optimal = 0.01 * accuracy / 5 if accuracy < 5 else 0.01 - 0.01 * (accuracy - 5) / 5
    optimal = min(0.01, max(0.001, optimal))
    q = max(lr, optimal) / min(lr, optimal)
    if q < 3:
        accuracy += rng.random() / q
    elif lr > optimal:
        accuracy -= (q - 3) * rng.random()
    return max(0.0, accuracy + rng.gauss(0.0, 0.1))


def run_population(seed: int, *, exploit: bool, population: int = 4, interval: int = 4, steps: int = 32):
    """Members step round-robin; after each report the scheduler reviews the trial and an
    exploit starts a new trial from the donor's state at its step (its "checkpoint")."""
    spec = study(SIMPLE, population_size=population, perturbation_interval_steps=interval, max_step_count=steps)
    sched = PbtScheduler(spec, seed=seed)
    trials: list[Trial] = []
    model: dict[str, float] = {}  # trial id -> accuracy at its latest step
    current: dict[int, int] = {}
    events = []
    for m in range(population):
        current[m] = len(trials)
        trials.append(trial(len(trials) + 1, m, [], params=sched.initial_parameters(m)))
        model[trials[-1].id] = 0.0
    while any(_step(trials[i]) < steps for i in current.values()):
        for m in range(population):
            i = current[m]
            t = trials[i]
            step = _step(t) + 1
            if step > steps:
                continue
            acc = toy_step(model[t.id], t.parameters["lr"], random.Random(f"{seed}:{t.id}:{step}"))
            model[t.id] = acc
            t = trials[i] = replace(t, measurements=t.measurements + (Measurement(step_count=step, metrics={"accuracy": acc}),))
            decision = sched.review(t, trials) if exploit else None
            if decision is None:
                continue
            events.append((t, decision, [trials[j] for j in current.values()]))
            trials[i] = replace(t, state=TrialState.SUCCEEDED)
            new = Trial(id=str(len(trials) + 1), parameters=decision.parameters, state=TrialState.ACTIVE,
                        lineage=PbtLineage(member=m, parent_trial_id=decision.donor.id,
                                           start_step=decision.start_step, inherited_parameters=decision.inherited))
            model[new.id] = model[decision.donor.id]
            current[m] = len(trials)
            trials.append(new)
    best = max(model[trials[i].id] for i in current.values())
    return best, trials, events


def _step(t: Trial) -> int:
    return t.measurements[-1].step_count if t.measurements else t.lineage.start_step


def test_pbt_population_exploits_the_bottom_member_and_resumes_from_the_donor():
    best, trials, events = run_population(0, exploit=True)
    assert events, "no exploit happened"
    by_id = {t.id: t for t in trials}
    for judged, decision, population in events:
        # the replaced trial was the worst of the members ranked by their values at the boundary
        boundary = int(decision.reason.split(" members measured at step ")[1].split(" ")[0])
        at = {p.id: next(m.metrics["accuracy"] for m in p.measurements if boundary <= m.step_count < boundary + 4)
              for p in population if any(boundary <= m.step_count < boundary + 4 for m in p.measurements)}
        assert len(at) >= 2 and at[judged.id] == min(at.values())
        assert at[decision.donor.id] == max(at.values())
    children = [t for t in trials if t.lineage.parent_trial_id]
    assert len(children) == len(events)
    for child in children:
        parent = by_id[child.lineage.parent_trial_id]
        steps_of_parent = [m.step_count for m in parent.measurements]
        assert child.lineage.start_step in steps_of_parent
        if child.measurements:  # continues from the donor's step
            assert child.measurements[0].step_count == child.lineage.start_step + 1
        assert child.lineage.inherited_parameters == parent.parameters
        assert 1e-4 <= child.parameters["lr"] <= 1e-1
    assert all(_step(t) == 32 for t in trials if t.state == TrialState.ACTIVE)


def test_pbt_beats_the_same_population_without_exploits():
    seeds = range(7)
    with_pbt = [run_population(s, exploit=True)[0] for s in seeds]
    without = [run_population(s, exploit=False)[0] for s in seeds]
    assert statistics.median(with_pbt) > statistics.median(without), (with_pbt, without)
    assert sum(a > b for a, b in zip(with_pbt, without)) >= 5, (with_pbt, without)


def test_pbt_population_replays_identically():
    a = run_population(3, exploit=True)
    b = run_population(3, exploit=True)
    assert a[0] == b[0] and [t.parameters for t in a[1]] == [t.parameters for t in b[1]]
