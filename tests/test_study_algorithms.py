"""End-to-end: early stopping, TPE and multi-objective studies through the real CLI.

The trials are real processes (the local executor) running a stand-in trainer whose learning
curves are known in advance, so which trials a rule must stop, and where, is checked by
counting steps rather than seconds.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.helpers import REPO, vcli

# accuracy(step) = q * (1 - 0.5**step) with q = 1 - x: a config's quality is visible after a
# step or two, and a larger x is a worse config. One `accuracy=V step=S` line per step.
CURVE = """
import sys, time
args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:] if "=" in a)
x = float(args["x"]); steps = int(args.get("steps", 9)); pause = float(args.get("pause", 0.3))
for step in range(1, steps + 1):
    time.sleep(pause)
    print(f"accuracy={(1 - x) * (1 - 0.5 ** step):.6f} step={step}", flush=True)
"""

XS = [0.05, 0.15, 0.25, 0.35, 0.45, 0.55, 0.65, 0.75, 0.85, 0.95]
STEPS = 9


def _curve_study(tmp_path: Path, name: str, *extra: str) -> tuple[dict, str]:
    pkg = tmp_path / "curve"
    pkg.mkdir(exist_ok=True)
    (pkg / "curve.py").write_text(CURVE)
    r = vcli(
        tmp_path / f"home-{name}", "hp-tuning-jobs", "create", f"--display-name={name}",
        "--metric=metric-id=accuracy,goal=maximize",
        f"--parameter-spec=parameter-id=x,type=discrete,values={';'.join(map(str, XS))}",
        f"--worker-pool-spec=machine-type=n1-standard-4,local-package-path={pkg},script=curve.py",
        f"--args=--steps={STEPS}", "--algorithm=grid-search", f"--max-trial-count={len(XS)}",
        "--parallel-trial-count=2", "--format=json", *extra, timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout), r.stderr


def _x(trial: dict) -> float:
    return next(p["value"] for p in trial["parameters"] if p["parameterId"] == "x")


def _last_step(trial: dict) -> int:
    return max(int(m["stepCount"]) for m in trial["measurements"])


def _stop_steps(stderr: str) -> dict[str, int]:
    """trial id -> the step it had reached when its rule stopped it (the plain view says)."""
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^trial (\d+) STOPPING at step (\d+), stopped early", stderr, re.M)}


def test_median_rule_stops_bad_trials_early_and_saves_steps(tmp_path: Path) -> None:
    full, _ = _curve_study(tmp_path, "full")
    stopped, stderr = _curve_study(tmp_path, "median", "--early-stopping=median")
    assert full["state"] == stopped["state"] == "JOB_STATE_SUCCEEDED"
    assert all(t["state"] == "SUCCEEDED" and "earlyStoppingRule" not in t for t in full["trials"])
    assert sum(_last_step(t) for t in full["trials"]) == len(XS) * STEPS

    by_x = {_x(t): t for t in stopped["trials"]}
    assert sorted(by_x) == XS
    early = {x for x, t in by_x.items() if t.get("earlyStoppingRule") == "median"}
    # The good configurations run to the end; the clearly bad ones are stopped before it.
    for x in (0.05, 0.15):
        assert x not in early and _last_step(by_x[x]) == STEPS
    assert {0.85, 0.95} <= early, sorted(early)
    for x in early:
        t = by_x[x]
        # Vertex semantics: a stopped trial SUCCEEDED with its last measurement, reason kept.
        assert t["state"] == "SUCCEEDED" and t["finalMeasurement"]["stepCount"] == str(_last_step(t))
        assert t["stopReason"].startswith("median") and _last_step(t) < STEPS
    assert set(_stop_steps(stderr)) == {t["id"] for t in stopped["trials"] if t.get("earlyStoppingRule")}
    # Fewer steps consumed in total, and the same best trial.
    assert sum(_last_step(t) for t in stopped["trials"]) < 0.8 * len(XS) * STEPS
    assert _x(by_x[0.05]) == _x(next(t for t in stopped["trials"] if t["id"] == stopped["bestTrialId"]))
    assert stopped["studySpec"]["medianAutomatedStoppingSpec"] == {}


@pytest.mark.parametrize(
    "flag, rungs",
    [
        ("--early-stopping=asha,reduction-factor=3,min-step-count=1,max-step-count=9", {1, 3}),
        ("--early-stopping=hyperband,reduction-factor=3,min-step-count=1,max-step-count=9", {1, 3}),
    ],
)
def test_successive_halving_stops_trials_only_at_rungs(tmp_path: Path, flag: str, rungs: set[int]) -> None:
    study, stderr = _curve_study(tmp_path, "sha", flag)
    rule = flag.split("=")[1].split(",")[0]
    assert study["state"] == "JOB_STATE_SUCCEEDED"
    early = [t for t in study["trials"] if t.get("earlyStoppingRule")]
    assert early and all(t["earlyStoppingRule"] == rule for t in early)
    stop_steps = _stop_steps(stderr)
    assert set(stop_steps) == {t["id"] for t in early}
    # The rule fires when a trial reports at a rung, and nowhere else.
    assert set(stop_steps.values()) <= rungs, stop_steps
    best = next(t for t in study["trials"] if _x(t) == 0.05)
    assert "earlyStoppingRule" not in best and _last_step(best) == STEPS
    assert sum(_last_step(t) for t in study["trials"]) < len(XS) * STEPS


# Two objectives of one parameter pair (a ZDT1-like trade-off): f1 = x, f2 = 1 - sqrt(x) + y,
# both minimised; reported with cloudml-hypertune, one call per metric tag at each step.
TWO_OBJECTIVES = """
import sys, hypertune
args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:] if "=" in a)
x = float(args["x"]); y = float(args["y"])
hpt = hypertune.HyperTune()
for step in (1, 2):
    slack = 0.1 * (2 - step)
    hpt.report_hyperparameter_tuning_metric(hyperparameter_metric_tag="f1", metric_value=x + slack, global_step=step)
    hpt.report_hyperparameter_tuning_metric(hyperparameter_metric_tag="f2", metric_value=1 - x ** 0.5 + y + slack, global_step=step)
"""


@pytest.mark.parametrize("algorithm", ["algorithm-unspecified", "random-search", "tpe"])
def test_multi_objective_study_returns_the_pareto_front(tmp_path: Path, algorithm: str) -> None:
    pkg = tmp_path / "mo"
    pkg.mkdir()
    (pkg / "mo.py").write_text(TWO_OBJECTIVES)
    home = tmp_path / "home"
    r = vcli(
        home, "hp-tuning-jobs", "create", "--display-name=mo",
        "--metric=metric-id=f1,goal=minimize", "--metric=metric-id=f2,goal=minimize",
        "--parameter-spec=parameter-id=x,type=double,min=0,max=1",
        "--parameter-spec=parameter-id=y,type=double,min=0,max=1",
        f"--worker-pool-spec=machine-type=n1-standard-4,local-package-path={pkg},script=mo.py",
        f"--algorithm={algorithm}", "--max-trial-count=12", "--parallel-trial-count=3", "--seed=5", "--format=json",
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    study = json.loads(r.stdout)
    assert study["state"] == "JOB_STATE_SUCCEEDED" and "bestTrialId" not in study
    values = {}
    for t in study["trials"]:
        assert t["state"] == "SUCCEEDED", t
        final = {m["metricId"]: m["value"] for m in t["finalMeasurement"]["metrics"]}
        assert set(final) == {"f1", "f2"} and t["finalMeasurement"]["stepCount"] == "2"
        values[t["id"]] = (final["f1"], final["f2"])
    front = study["optimalTrialIds"]
    assert front

    def dominated(a: tuple[float, float]) -> bool:
        return any(b[0] <= a[0] and b[1] <= a[1] and b != a for b in values.values())

    # Exactly the non-dominated trials: none on the front is dominated, every other one is.
    assert {i for i, v in values.items() if not dominated(v)} == set(front)
    assert f"Pareto front: {len(front)} trial(s)" in r.stderr
    # describe from another terminal says the same.
    d = vcli(home, "hp-tuning-jobs", "describe", study["name"].rsplit("/", 1)[1], "--format=json")
    assert json.loads(d.stdout)["optimalTrialIds"] == front


def test_several_metrics_refuse_what_needs_one(tmp_path: Path) -> None:
    base = ["hp-tuning-jobs", "create", "--display-name=mo", "--metric=metric-id=f1,goal=minimize",
            "--metric=metric-id=f2,goal=maximize", "--parameter-spec=parameter-id=x,type=double,min=0,max=1",
            "--worker-pool-spec=machine-type=n1-standard-4,container-image-uri=img", "--command=python3,-c,pass",
            "--validate-only"]
    r = vcli(tmp_path / "home", *base, "--goal-value=1")
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "--goal-value" in r.stderr and "Pareto front" in r.stderr
    r = vcli(tmp_path / "home", *base, "--early-stopping=median")
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "--early-stopping" in r.stderr and "one metric" in r.stderr
    r = vcli(tmp_path / "home", *base[:-2], "--metric=metric-id=f1,goal=maximize", "--command=python3,-c,pass", "--validate-only")
    assert r.returncode == 1 and "listed twice" in r.stderr


def test_convex_fields_vcli_does_not_use_are_named_in_one_note(tmp_path: Path) -> None:
    base = ["hp-tuning-jobs", "create", "--display-name=cv", "--metric=metric-id=acc,goal=maximize",
            "--parameter-spec=parameter-id=lr,type=double,min=0.001,max=0.1,scale=log",
            "--worker-pool-spec=machine-type=n1-standard-4,container-image-uri=img", "--command=python3,-c,pass",
            "--validate-only"]
    r = vcli(tmp_path / "home", *base, "--early-stopping=convex,max-step-count=10,learning-rate-parameter-name=lr")
    assert r.returncode == 0, r.stderr
    # (The image pool's own Note, that its command runs on this host, is not the rule's.)
    notes = [line for line in r.stderr.splitlines() if line.startswith("Note:") and "runs its command" not in line]
    assert len(notes) == 1 and "learningRateParameterName has no effect" in notes[0], r.stderr
    r = vcli(tmp_path / "home", *base, "--early-stopping=convex,max-step-count=10")
    assert r.returncode == 0 and not [line for line in r.stderr.splitlines()
                                      if line.startswith("Note:") and "runs its command" not in line], r.stderr


@pytest.mark.parametrize(
    "flag, message",
    [
        ("--early-stopping=asha,reduction-factor=1", "reduction-factor: must be an integer of at least 2"),
        ("--early-stopping=hyperband", "max-step-count: required: Hyperband builds its brackets"),  # was "found [0]"
        ("--early-stopping=sometimes", "valid rules are [none, median, decay-curve, convex, asha, hyperband]"),
        ("--early-stopping=asha,bogus=1", "valid keys are"),
        ("--early-stopping=asha,min-step-count=x", "must be an integer"),
        # it said "Unknown rule [none]; valid rules are [none, ...]"
        ("--early-stopping=none,reduction-factor=3", "[none] takes no settings, received: [reduction-factor=3]."),
    ],
)
def test_bad_early_stopping_flags_are_one_line(tmp_path: Path, flag: str, message: str) -> None:
    r = vcli(tmp_path / "home", "hp-tuning-jobs", "create", "--display-name=x", "--metric=metric-id=a,goal=maximize",
             "--parameter-spec=parameter-id=x,type=double,min=0,max=1",
             "--worker-pool-spec=machine-type=n1-standard-4,container-image-uri=img", "--command=python3,-c,pass",
             "--validate-only", flag)
    assert r.returncode in (1, 2) and r.stderr.count("\n") == 1, r.stderr
    assert message in r.stderr and "--early-stopping" in r.stderr


@pytest.mark.parametrize("flag, named", [("--algorithm=grid-search", "--algorithm"),
                                         ("--early-stopping=hyperband", "--early-stopping")])
def test_a_flag_that_makes_a_config_invalid_is_named_instead_of_the_file(tmp_path: Path, flag: str, named: str) -> None:
    config = REPO / "examples" / "hp_tuning.yaml"  # valid as it is; the flag makes it invalid
    r = vcli(tmp_path / "home", "hp-tuning-jobs", "create", f"--config={config}", flag, "--validate-only")
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert f"Invalid value for [{named}]: " in r.stderr and "hp_tuning.yaml" not in r.stderr, r.stderr


@pytest.mark.parametrize("flags, named, said", [
    (("--metric=metric-id=a,goal=maximize", "--metric=metric-id=a,goal=minimize"), "--metric",
     "metricId [a] is listed twice"),
    (("--parameter-spec=parameter-id=x,type=double,min=0,max=1",
      "--parameter-spec=parameter-id=x,type=double,min=0,max=2"), "--parameter-spec", "[x]"),
])
def test_study_flags_that_clash_are_named_not_config(tmp_path: Path, flags: tuple[str, ...], named: str,
                                                     said: str) -> None:
    """Two --metric flags of one id were "Invalid value for [--config]: <flags> at ..." with no
    --config given (found by a probe)."""
    base = {"--metric": "--metric=metric-id=m,goal=maximize",
            "--parameter-spec": "--parameter-spec=parameter-id=p,type=double,min=0,max=1"}
    other = [v for k, v in base.items() if k != named]
    r = vcli(tmp_path / "home", "hp-tuning-jobs", "create", "--display-name=x", *flags, *other,
             "--worker-pool-spec=machine-type=n1-standard-4,container-image-uri=img", "--command=python3,-c,pass",
             "--validate-only")
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert f"Invalid value for [{named}]: " in r.stderr and said in r.stderr and "<flags>" not in r.stderr, r.stderr


def test_plain_output_holds_trial_lines_and_status_goes_to_stderr(tmp_path: Path) -> None:
    # Without --format, stdout (not a terminal) is one line per trial event; status messages
    # (a trial stopped early) are stderr's, as every status line is.
    pkg = tmp_path / "curve"
    pkg.mkdir()
    (pkg / "curve.py").write_text(CURVE)
    r = vcli(tmp_path / "home", "hp-tuning-jobs", "create", "--display-name=plain",
             "--metric=metric-id=accuracy,goal=maximize", "--parameter-spec=parameter-id=x,type=discrete,values=0.05;0.5;0.9;0.95",
             f"--worker-pool-spec=machine-type=n1-standard-4,local-package-path={pkg},script=curve.py",
             "--args=--steps=4,--pause=0.3", "--algorithm=grid-search", "--max-trial-count=4", "--parallel-trial-count=2",
             "--early-stopping=asha,reduction-factor=2,min-step-count=1", timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert lines and all(line.startswith("trial ") for line in lines), r.stdout
    assert any(" STOPPING at step " in line for line in lines), r.stdout
    # one status line per early stop, naming the trial (never its internal custom job)
    assert "stopped early" in r.stderr and "replica(s) of job" not in r.stderr, r.stderr


def test_enqueued_trials_and_the_defaults_run_first(tmp_path: Path) -> None:
    """`--enqueue-trial` configurations run first, in order, after the parameters' defaults
    when every one has a defaultValue; a value outside its range is one line naming the flag."""
    train = tmp_path / "train.py"
    train.write_text("import sys\nargs = dict(a.lstrip('-').split('=', 1) for a in sys.argv[1:])\n"
                     "print(f\"score={-(float(args['x']) - 4) ** 2:.4f}\")\n")
    base = ["hp-tuning-jobs", "create", "--display-name=eq", "--executor=local", "--metric=metric-id=score,goal=maximize",
            "--worker-pool-spec=machine-type=n1-standard-4,container-image-uri=x", f"--command=python3,{train}",
            "--parameter-spec=parameter-id=k,type=categorical,values=a;b", "--algorithm=random-search"]
    r = vcli(tmp_path / "home", *base, "--parameter-spec=parameter-id=x,type=double,min=0,max=10", "--max-trial-count=4",
             "--enqueue-trial=x=4,k=b", "--enqueue-trial=x=1.5,k=a", "--format=json", timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    first = [{p["parameterId"]: p["value"] for p in t["parameters"]} for t in json.loads(r.stdout)["trials"]]
    assert first[:2] == [{"x": 4.0, "k": "b"}, {"x": 1.5, "k": "a"}] and len(first) == 4
    bad = vcli(tmp_path / "home", *base, "--parameter-spec=parameter-id=x,type=double,min=0,max=10",
               "--enqueue-trial=x=11,k=a", "--validate-only", timeout=60)
    assert bad.returncode == 1 and bad.stderr.strip() == (
        "ERROR: (vcli.hp-tuning-jobs.create) Invalid value for [--enqueue-trial]: [11] is outside parameter [x]'s [0, 10].")
    config = tmp_path / "study.yaml"
    config.write_text(json.dumps({"studySpec": {"metrics": [{"metricId": "score", "goal": "MAXIMIZE"}], "parameters": [
        {"parameterId": "x", "doubleValueSpec": {"minValue": 0, "maxValue": 10, "defaultValue": 3}},
        {"parameterId": "k", "categoricalValueSpec": {"values": ["a", "b"], "defaultValue": "a"}}]},
        "maxTrialCount": 3, "trialJobSpec": {"workerPoolSpecs": [{"machineSpec": {"machineType": "n1-standard-4"},
        "replicaCount": 1, "containerSpec": {"imageUri": "x", "command": ["python3", str(train)]}}]}}))
    r = vcli(tmp_path / "home", "hp-tuning-jobs", "create", "--display-name=defaults", f"--config={config}",
             "--executor=local", "--enqueue-trial=x=5,k=b", "--format=json", timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    first = [{p["parameterId"]: p["value"] for p in t["parameters"]} for t in json.loads(r.stdout)["trials"]]
    assert first[:2] == [{"x": 3.0, "k": "a"}, {"x": 5.0, "k": "b"}]
    assert "defaultValue" not in r.stderr  # used, so not noted as unused
