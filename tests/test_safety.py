"""Safe search: Vertex's `metrics[].safetyConfig` through the codec, the suggesters, the
study's result and the CLI."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from tests.kit import describe, vcli
from vcli.codec.schema import Decoder
from vcli.codec.study import study_spec_from_dict, study_spec_from_stored, study_spec_to_dict
from vcli.codec.trial import trial_from_dict, trial_to_dict
from vcli.errors import ConfigError
from vcli.spec import (
    Algorithm,
    Goal,
    Measurement,
    MetricSpec,
    SafetyMetricConfig,
    StudySpec,
    Trial,
    TrialState,
)
from vcli.tuning.pareto import pareto_front
from vcli.tuning.result import best_trial, is_safe
from vcli.tuning.suggesters import get_suggester

SAFE_STUDY = {
    "metrics": [
        {"metricId": "loss", "goal": "MINIMIZE"},
        {"metricId": "margin", "goal": "MAXIMIZE", "safetyConfig": {"safetyThreshold": 0.0, "desiredMinSafeTrialsFraction": 0.8}},
    ],
    "parameters": [
        {"parameterId": "x", "doubleValueSpec": {"minValue": 0.0, "maxValue": 1.0}},
        {"parameterId": "y", "doubleValueSpec": {"minValue": 0.0, "maxValue": 1.0}},
    ],
}


def _decode(d: dict) -> StudySpec:
    decoder = Decoder("safe.yaml")
    return study_spec_from_dict(decoder.decode_message(d, StudySpec, "studySpec"), decoder)


def _with_metric(i: int, **changes) -> dict:
    d = json.loads(json.dumps(SAFE_STUDY))
    d["metrics"][i].update(changes)
    return d


# --------------------------------------------------------------------------- codec


def test_a_metric_with_safety_config_is_a_safety_metric_and_round_trips():
    spec = _decode(SAFE_STUDY)
    assert [m.metric_id for m in spec.metrics] == ["loss"]
    (safety,) = spec.safety_metrics
    assert safety == MetricSpec(metric_id="margin", goal=Goal.MAXIMIZE,
                                safety_config=SafetyMetricConfig(safety_threshold=0.0, desired_min_safe_trials_fraction=0.8))
    wire = study_spec_to_dict(spec)
    assert wire["metrics"] == SAFE_STUDY["metrics"]  # a zero threshold is shown, objectives first
    assert study_spec_from_stored(wire) == spec


def test_safety_metrics_go_after_the_objectives_on_the_wire():
    d = json.loads(json.dumps(SAFE_STUDY))
    d["metrics"].reverse()
    spec = _decode(d)
    assert [m["metricId"] for m in study_spec_to_dict(spec)["metrics"]] == ["loss", "margin"]


@pytest.mark.parametrize(("doc", "path", "words"), [
    (_with_metric(1, safetyConfig={"desiredMinSafeTrialsFraction": 0.5}),
     "studySpec.metrics[1].safetyConfig.safetyThreshold", "required field is missing"),
    (_with_metric(1, safetyConfig={"safetyThreshold": 1.0, "desiredMinSafeTrialsFraction": 1.5}),
     "studySpec.metrics[1].safetyConfig.desiredMinSafeTrialsFraction", "between 0.0 and 1.0"),
    (_with_metric(1, safetyConfig={"safetyThreshold": 1.0, "desiredMinSafeTrialsFraction": -0.1}),
     "studySpec.metrics[1].safetyConfig.desiredMinSafeTrialsFraction", "between 0.0 and 1.0"),
    (_with_metric(0, safetyConfig={"safetyThreshold": 1.0}), "studySpec.metrics", "add an objective metric"),
    (_with_metric(1, safetyConfig={"safetyThreshold": "high"}), "studySpec.metrics[1].safetyConfig.safetyThreshold", ""),
])
def test_a_bad_safety_config_is_one_error_naming_the_field(doc, path, words):
    with pytest.raises(ConfigError) as e:
        _decode(doc)
    assert e.value.path == path
    assert words in str(e.value)
    assert "\n" not in str(e.value)


def test_population_based_training_refuses_a_safety_metric():
    d = {**SAFE_STUDY, "algorithm": "POPULATION_BASED_TRAINING", "populationBasedTrainingSpec": {"maxStepCount": 4}}
    with pytest.raises(ConfigError) as e:
        _decode(d)
    assert "safetyConfig" in str(e.value)


# --------------------------------------------------------------------------- the result


def _trial(tid: str, loss: float, margin: float, spec: StudySpec) -> Trial:
    t = Trial(id=tid, parameters={"x": 0.5, "y": 0.5}, state=TrialState.SUCCEEDED,
              final_measurement=Measurement(step_count=1, metrics={"loss": loss, "margin": margin}))
    return replace(t, safe=is_safe(t, spec.safety_metrics))


def test_the_best_trial_is_the_best_safe_one_and_unsafe_ones_keep_succeeded():
    spec = _decode(SAFE_STUDY)
    trials = [_trial("1", 0.5, 0.2, spec), _trial("2", 0.1, -0.3, spec), _trial("3", 0.3, 0.0, spec)]
    assert [t.safe for t in trials] == [True, False, True]  # on the threshold is safe
    assert all(t.state == TrialState.SUCCEEDED for t in trials)
    assert best_trial(trials, spec.metrics[0]).id == "3"
    assert [t.id for t in pareto_front(trials, spec.metrics)] == ["3"]
    # the mark travels with the stored trial (vcli's own field), absent without safety metrics
    specs = {p.parameter_id: p for p in spec.parameters}
    wire = trial_to_dict(trials[1], specs)
    assert wire["safe"] is False and trial_from_dict(wire).safe is False
    assert "safe" not in trial_to_dict(replace(trials[1], safe=None), specs)


def test_a_trial_without_a_finite_safety_value_is_unsafe():
    spec = _decode(SAFE_STUDY)
    assert _trial("1", 0.1, math.nan, spec).safe is False
    running = Trial(id="2", parameters={}, state=TrialState.ACTIVE)
    assert is_safe(running, spec.safety_metrics) is None


# --------------------------------------------------------------------------- the suggesters

# min (x - 0.8)^2 + (y - 0.8)^2 where x + y <= 0.9: the unconstrained optimum is unsafe; the
# safe optimum is x = y = 0.45 (0.245).


def _loss(p) -> float:
    return (p["x"] - 0.8) ** 2 + (p["y"] - 0.8) ** 2


def _margin(p) -> float:
    return 0.9 - p["x"] - p["y"]


def _run(spec: StudySpec, n: int, seed: int, backend: str = "gp") -> tuple[int, float]:
    """(unsafe trials after the 10 random ones, the best safe loss) of n sequential trials."""
    sug = get_suggester(spec, seed=seed, bayesian_backend=backend)
    safety = _decode(SAFE_STUDY).safety_metrics
    unsafe, best = 0, math.inf
    for i in range(n):
        p = sug.ask(1)[0].parameters
        t = Trial(id=str(i + 1), parameters=p, state=TrialState.SUCCEEDED,
                  final_measurement=Measurement(step_count=1, metrics={"loss": _loss(p), "margin": _margin(p)}))
        t = replace(t, safe=is_safe(t, safety))
        unsafe += i >= 10 and not t.safe
        best = min(best, _loss(p)) if t.safe else best
        sug.tell(t)
    return unsafe, best


def test_the_gp_with_a_safety_metric_proposes_far_fewer_unsafe_points():
    safe_spec = _decode(SAFE_STUDY)
    plain = replace(safe_spec, safety_metrics=())
    with_safety = [_run(safe_spec, 24, seed) for seed in (1, 2)]
    without = [_run(plain, 24, seed) for seed in (1, 2)]
    # 14 model-based trials per run: without the constraint most go to the unsafe optimum
    assert sum(u for u, _ in with_safety) + 10 <= sum(u for u, _ in without), (with_safety, without)
    assert all(best < 0.30 for _, best in with_safety), with_safety


def test_tpe_keeps_out_of_the_unsafe_region_as_out_of_oom_ones():
    safe_spec = replace(_decode(SAFE_STUDY), algorithm=Algorithm.TPE)
    plain = replace(safe_spec, safety_metrics=())
    with_safety = sum(_run(safe_spec, 40, seed)[0] for seed in (1, 2, 3))
    without = sum(_run(plain, 40, seed)[0] for seed in (1, 2, 3))
    assert with_safety + 15 <= without, (with_safety, without)


def test_random_search_ignores_the_safety_metric():
    safe_spec = replace(_decode(SAFE_STUDY), algorithm=Algorithm.RANDOM_SEARCH)
    a = get_suggester(safe_spec, seed=3).ask(5)
    b = get_suggester(replace(safe_spec, safety_metrics=()), seed=3).ask(5)
    assert a == b


def test_a_safe_gp_replays_the_same_points():
    spec = _decode(SAFE_STUDY)
    sug = get_suggester(spec, seed=5)
    told = []
    for i in range(12):
        p = sug.ask(1)[0].parameters
        t = Trial(id=str(i + 1), parameters=p, state=TrialState.SUCCEEDED,
                  final_measurement=Measurement(step_count=1, metrics={"loss": _loss(p), "margin": _margin(p)}))
        told.append(t)
        sug.tell(t)
    rebuilt = get_suggester(spec, seed=5)
    for t in told:
        rebuilt.tell(t)
    assert rebuilt.ask(2) == sug.ask(2)


# --------------------------------------------------------------------------- the CLI

# one `metricId=value [step=N]` line per metric, at one step
TRAINER = """
import sys
args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:] if "=" in a)
x = float(args["x"])
print(f"loss={(x - 0.9) ** 2:.6f} step=1", flush=True)
print(f"margin={0.5 - x:.6f} step=1", flush=True)
"""


def test_a_study_with_a_safety_config_in_yaml_reports_the_best_safe_trial(tmp_path: Path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "t.py").write_text(TRAINER)
    config = tmp_path / "hpt.yaml"
    config.write_text(f"""
studySpec:
  metrics:
  - metricId: loss
    goal: MINIMIZE
  - metricId: margin
    goal: MAXIMIZE
    safetyConfig:
      safetyThreshold: 0
      desiredMinSafeTrialsFraction: 0.5
  parameters:
  - parameterId: x
    discreteValueSpec:
      values: [0.1, 0.3, 0.5, 0.7, 0.9]
  algorithm: GRID_SEARCH
maxTrialCount: 5
parallelTrialCount: 2
trialJobSpec:
  workerPoolSpecs:
  - machineSpec:
      machineType: n1-standard-4
    replicaCount: 1
    localPackage:
      path: {pkg}
      script: t.py
""")
    home = tmp_path / "home"
    r = vcli(home, "hp-tuning-jobs", "create", "--display-name=safe", f"--config={config}", "--format=json", timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    study = json.loads(r.stdout)
    sid = study["name"].rsplit("/", 1)[1]
    desc = describe(home, "hp-tuning-jobs", sid)
    assert desc["state"] == "JOB_STATE_SUCCEEDED"
    assert [m["metricId"] for m in desc["studySpec"]["metrics"]] == ["loss", "margin"]
    assert desc["studySpec"]["metrics"][1]["safetyConfig"] == {"safetyThreshold": 0.0, "desiredMinSafeTrialsFraction": 0.5}
    by_x = {t["parameters"][0]["value"]: t for t in desc["trials"]}
    assert all(t["state"] == "SUCCEEDED" for t in by_x.values())
    assert [x for x, t in sorted(by_x.items()) if t.get("safe") is False] == [0.7, 0.9]
    assert desc["bestTrialId"] == by_x[0.5]["id"]  # 0.9 has the best loss but is unsafe
    # The export has the safety metric's values and whether each trial was safe.
    out = tmp_path / "trials.csv"
    r = vcli(home, "hp-tuning-jobs", "export", sid, f"--to={out}", timeout=120)
    assert r.returncode == 0, r.stderr
    import csv

    rows = list(csv.DictReader(out.open()))
    assert "metric_margin" in rows[0] and rows[0]["metric_margin"] != ""
    assert sorted(float(r["param_x"]) for r in rows if r["safe"] == "False") == [0.7, 0.9]
    # The report marks the unsafe trials as such.
    from vcli.plots import data
    from vcli.store import Store

    trials = Store(home).trials(sid)
    assert sorted(float(t.parameters["x"]) for t in trials if data.outcome(t) == "unsafe") == [0.7, 0.9]
    assert data.outcome_label(next(t for t in trials if t.safe is False)) == "unsafe (beyond a safety threshold)"


def test_the_metric_flag_makes_a_safety_metric_and_names_its_mistakes(tmp_path: Path) -> None:
    """`--metric=...,safety-threshold=X,min-safe-fraction=F` is `safetyConfig`; a threshold that
    is not a number, a fraction without a threshold or outside [0, 1], and a study of safety
    metrics only are one line each."""
    base = ["hp-tuning-jobs", "create", "--display-name=s", "--validate-only", "--max-trial-count=3",
            "--parameter-spec=parameter-id=lr,type=double,min=0.001,max=0.1",
            "--worker-pool-spec=machine-type=n1-standard-4,container-image-uri=python:3.11", "--command=python,-c,pass"]
    r = vcli(tmp_path, *base, "--metric=metric-id=acc,goal=maximize",
             "--metric=metric-id=mem,goal=minimize,safety-threshold=20,min-safe-fraction=0.9", "--format=json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["studySpec"]["metrics"][1] == {
        "goal": "MINIMIZE", "metricId": "mem", "safetyConfig": {"desiredMinSafeTrialsFraction": 0.9, "safetyThreshold": 20.0}}
    for metrics, said in [
        (["--metric=metric-id=acc", "--metric=metric-id=mem,safety-threshold=x"],
         "Key [safety-threshold] must be a number, received: x."),
        (["--metric=metric-id=acc", "--metric=metric-id=mem,min-safe-fraction=0.5"], "Key [min-safe-fraction] needs [safety-threshold]"),
        (["--metric=metric-id=acc", "--metric=metric-id=mem,safety-threshold=3,min-safe-fraction=2"],
         "desiredMinSafeTrialsFraction]: must be between 0.0 and 1.0"),
        (["--metric=metric-id=mem,safety-threshold=3"], "every metric has a safetyConfig (mem)"),
    ]:
        r = vcli(tmp_path, *base, *metrics)
        assert r.returncode == 1 and r.stderr.count("\n") == 1 and said in r.stderr, r.stderr
