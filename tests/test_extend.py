"""Extending a study that ended and warm-starting a new one (issue 49).

- `hp-tuning-jobs extend ID --max-trial-count=N`: a SUCCEEDED, FAILED or CANCELLED study goes on
  with its history (same id, trial ids continuing, its suggester rebuilt from the store), its
  end recomputed; `cancel` and `resume` work on it; what it refuses is one line, exit 2.
- `hp-tuning-jobs create --warm-start-from=SOURCE` (a vcli study, a CSV of `export`, an Optuna
  storage): the matching observations are told to the suggester as priors before its first
  suggestion, never as trials, recorded with the study so a resumed one is told the same;
  every bad source is one line naming the flag.
- The suggester side (`SuggesterBase.prior`): priors feed the models, not the trial numbering,
  replay stays deterministic, and the worker process of a model-based suggester (`Apart`) is
  told them, a restarted worker too.
"""

from __future__ import annotations

import csv
import json
import math
import os
import signal
import textwrap
import time
from pathlib import Path

import pytest

from tests.helpers import describe, job_id_from_stderr, read_stderr_until, reap, spawn, vcli, wait_for
from vcli.spec import (
    Algorithm,
    DoubleValueSpec,
    Goal,
    Measurement,
    MetricSpec,
    ParameterSpec,
    StudySpec,
    Trial,
    TrialState,
)
from vcli.tuning.suggesters import get_suggester

#: score = -(x-3)^2 - (y-1)^2, on stdout; SLEEP_SECONDS before it; exit 3 when FAIL is set.
TOY = """
    import os, sys, time
    args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:] if "=" in a)
    time.sleep(float(os.environ.get("SLEEP_SECONDS", "0")))
    if os.environ.get("FAIL"):
        sys.exit(3)
    x, y = float(args.get("x", 0)), float(args.get("y", 1))
    print(f"score={-(x - 3) ** 2 - (y - 1) ** 2:.6f}", flush=True)
"""
SPACE = ("--parameter-spec=parameter-id=x,type=double,min=0,max=6",
         "--parameter-spec=parameter-id=y,type=double,min=0.001,max=10,scale=log")


@pytest.fixture
def toy(tmp_path: Path) -> Path:
    pkg = tmp_path / "toy"
    pkg.mkdir()
    (pkg / "toy.py").write_text(textwrap.dedent(TOY))
    return pkg


def _study_args(toy: Path, *extra: str, name: str = "toy") -> list[str]:
    return ["hp-tuning-jobs", "create", f"--display-name={name}", "--metric=metric-id=score,goal=maximize",
            f"--worker-pool-spec=machine-type=n1-standard-4,local-package-path={toy},script=toy.py", *extra]


def _create(home: Path, toy: Path, *extra: str, **env: str) -> str:
    r = vcli(home, *_study_args(toy, *extra), **env)
    assert r.returncode in (0, 6), r.stderr
    return job_id_from_stderr(r.stderr)


def _points(study: dict) -> list[tuple]:
    return [tuple(p["value"] for p in t["parameters"]) for t in study["trials"]]


def _one_line(r, command: str) -> str:
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    prefix = f"ERROR: (vcli.hp-tuning-jobs.{command}) "
    assert lines[0].startswith(prefix), lines[0]
    return lines[0][len(prefix):]


# --------------------------------------------------------------------------- extend


def test_an_extended_study_goes_on_as_a_study_with_the_larger_count_would_have(tmp_path: Path, toy: Path) -> None:
    """Random search, seed 7: 3 trials extended to 6 propose the points a 6-trial study does;
    the trials keep their ids and records, and the end (state, best trial, endTime) is the new one."""
    home = tmp_path / "home"
    args = ("--algorithm=random-search", "--seed=7", *SPACE)
    study_id = _create(home, toy, "--max-trial-count=3", *args)
    before = describe(home, "hp-tuning-jobs", study_id)
    r = vcli(home, "hp-tuning-jobs", "extend", study_id, "--max-trial-count=6", "--format=json")
    assert r.returncode == 0, r.stderr
    assert (f"Hyperparameter tuning job [{study_id}] is extended from 3 to 6 trials (JOB_STATE_SUCCEEDED before): "
            "its 3 trial(s) kept") in r.stderr
    after = json.loads(r.stdout)
    assert after["name"].endswith(study_id) and after["state"] == "JOB_STATE_SUCCEEDED"
    assert [t["id"] for t in after["trials"]] == ["1", "2", "3", "4", "5", "6"]
    assert after["trials"][:3] == before["trials"]  # history kept as it was
    assert after["maxTrialCount"] == 6 and after["endTime"] > before["endTime"]
    assert after["startTime"] == before["startTime"]
    best = max(after["trials"], key=lambda t: t["finalMeasurement"]["metrics"][0]["value"])
    assert after["bestTrialId"] == best["id"]
    assert after["extensions"][0]["fromMaxTrialCount"] == 3 and after["extensions"][0]["endedAs"] == "JOB_STATE_SUCCEEDED"
    straight = describe(home, "hp-tuning-jobs", _create(home, toy, "--max-trial-count=6", *args))
    assert _points(after) == _points(straight)
    # `resume` of a study that ended says what gives it more trials.
    r = vcli(home, "hp-tuning-jobs", "resume", study_id)
    assert r.returncode == 0 and "hp-tuning-jobs extend" in r.stderr, r.stderr


def test_extend_refuses_in_one_line(tmp_path: Path, toy: Path) -> None:
    """A study still running (pointed to resume), N not above its trials, PBT, a failure
    budget already spent: one line each, exit 2, and the study untouched."""
    home = tmp_path / "home"
    failed = _create(home, toy, "--max-trial-count=2", "--max-failed-trial-count=1", *SPACE, FAIL="1")
    assert describe(home, "hp-tuning-jobs", failed)["state"] == "JOB_STATE_FAILED"
    r = vcli(home, "hp-tuning-jobs", "extend", failed, "--max-trial-count=2")
    assert r.returncode == 2 and "has 2 trial(s); extend it to more than 2 (received 2)" in _one_line(r, "extend")
    r = vcli(home, "hp-tuning-jobs", "extend", failed, "--max-trial-count=5")
    assert r.returncode == 2
    assert "has 2 failed trials, more than the failure budget of 1" in _one_line(r, "extend")
    assert "--max-failed-trial-count=3" in r.stderr
    assert describe(home, "hp-tuning-jobs", failed)["maxTrialCount"] == 2  # nothing changed
    # The trainer fixed, a larger budget: the FAILED study goes on and succeeds.
    r = vcli(home, "hp-tuning-jobs", "extend", failed, "--max-trial-count=4", "--max-failed-trial-count=3")
    assert r.returncode == 0, r.stderr
    study = describe(home, "hp-tuning-jobs", failed)
    assert study["state"] == "JOB_STATE_SUCCEEDED" and "error" not in study and study["maxFailedTrialCount"] == 3
    assert [t["state"] for t in study["trials"]] == ["INFEASIBLE", "INFEASIBLE", "SUCCEEDED", "SUCCEEDED"]
    # PBT: nothing to extend.
    pbt = tmp_path / "pbt.yaml"
    pbt.write_text(PBT)
    r = vcli(home, "hp-tuning-jobs", "create", f"--config={pbt}", "--validate-only", "--format=json")
    assert r.returncode == 0, r.stderr
    from vcli.enums import JobKind, JobState
    from vcli.store import Store

    row = Store(home).create_job(kind=JobKind.HYPERPARAMETER_TUNING_JOB, display_name="pbt", record=json.loads(r.stdout),
                                 state=JobState.JOB_STATE_SUCCEEDED)
    r = vcli(home, "hp-tuning-jobs", "extend", row.id, "--max-trial-count=20")
    assert r.returncode == 2 and "Population Based Training" in _one_line(r, "extend")
    # A running study: extend points to resume.
    proc = spawn(home, *_study_args(toy, "--max-trial-count=1", *SPACE), SLEEP_SECONDS="60")
    try:
        running = job_id_from_stderr(read_stderr_until(proc, "submitted successfully", 60))
        r = vcli(home, "hp-tuning-jobs", "extend", running, "--max-trial-count=5")
        assert r.returncode == 2
        assert f"`vcli hp-tuning-jobs resume {running}`" in _one_line(r, "extend")
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=60)
    finally:
        reap(proc)


PBT = """
displayName: pbt
maxTrialCount: 8
studySpec:
  metrics: [{metricId: score, goal: MAXIMIZE}]
  algorithm: POPULATION_BASED_TRAINING
  populationBasedTrainingSpec: {populationSize: 2, perturbationIntervalSteps: 2, maxStepCount: 4}
  parameters:
  - parameterId: lr
    doubleValueSpec: {minValue: 0.001, maxValue: 0.2}
trialJobSpec:
  workerPoolSpecs:
  - machineSpec: {machineType: n1-standard-4}
    replicaCount: 1
    containerSpec: {imageUri: toy, command: [python3, toy.py]}
"""


def _running_trials(home: Path, study_id: str) -> list[str]:
    return [t["id"] for t in describe(home, "hp-tuning-jobs", study_id).get("trials", []) if t["state"] == "ACTIVE"]


def test_an_extended_study_is_cancelled_then_extended_again(tmp_path: Path, toy: Path) -> None:
    """`cancel` of an extended study from another terminal ends it CANCELLED (exit 5); extended
    again, the cancel request is gone and the study runs to its new end."""
    home = tmp_path / "home"
    study_id = _create(home, toy, "--max-trial-count=2", *SPACE)
    proc = spawn(home, "hp-tuning-jobs", "extend", study_id, "--max-trial-count=4", SLEEP_SECONDS="60")
    try:
        wait_for(lambda: _running_trials(home, study_id) == ["3"], 60, "trial 3 running")
        r = vcli(home, "hp-tuning-jobs", "cancel", study_id, timeout=120)
        assert r.returncode == 0, r.stderr
        assert proc.wait(timeout=120) == 5
    finally:
        reap(proc)
    study = describe(home, "hp-tuning-jobs", study_id)
    assert study["state"] == "JOB_STATE_CANCELLED" and study["endTime"]
    assert [t["state"] for t in study["trials"]] == ["SUCCEEDED", "SUCCEEDED", "INFEASIBLE"]
    r = vcli(home, "hp-tuning-jobs", "extend", study_id, "--max-trial-count=5", "--parallel-trial-count=2")
    assert r.returncode == 0, r.stderr
    study = describe(home, "hp-tuning-jobs", study_id)
    assert study["state"] == "JOB_STATE_SUCCEEDED" and "error" not in study
    assert [t["id"] for t in study["trials"]] == ["1", "2", "3", "4", "5"]
    assert study["parallelTrialCount"] == 2 and len(study["extensions"]) == 2


def test_an_extended_study_whose_controller_is_killed_is_resumed(tmp_path: Path, toy: Path) -> None:
    """kill -9 of the controller `extend` started, two trials running: `resume` re-attaches them
    and runs the rest, no trial lost or run twice; the same with `extend --async`'s runner."""
    home = tmp_path / "home"
    study_id = _create(home, toy, "--max-trial-count=2", "--algorithm=algorithm-unspecified", "--seed=3", *SPACE)
    proc = spawn(home, "hp-tuning-jobs", "extend", study_id, "--max-trial-count=6", "--parallel-trial-count=2",
                 SLEEP_SECONDS="3")
    try:
        wait_for(lambda: len(_running_trials(home, study_id)) == 2, 60, "two trials running")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        reap(proc)
    assert describe(home, "hp-tuning-jobs", study_id)["controller"]["alive"] is False
    r = vcli(home, "hp-tuning-jobs", "resume", study_id, SLEEP_SECONDS="0.5")
    assert r.returncode == 0, r.stderr
    study = describe(home, "hp-tuning-jobs", study_id)
    assert study["state"] == "JOB_STATE_SUCCEEDED"
    assert [t["id"] for t in study["trials"]] == [str(i) for i in range(1, 7)]
    assert {t["state"] for t in study["trials"]} == {"SUCCEEDED"}
    assert len(set(_points(study))) == 6
    r = vcli(home, "hp-tuning-jobs", "extend", study_id, "--max-trial-count=7", "--async")
    assert r.returncode == 0 and "It runs in a background vcli process" in r.stderr, r.stderr
    wait_for(lambda: describe(home, "hp-tuning-jobs", study_id)["state"] == "JOB_STATE_SUCCEEDED"
             and len(describe(home, "hp-tuning-jobs", study_id)["trials"]) == 7, 120, "the background run's end")


# --------------------------------------------------------------------------- warm start


def _source_study(home: Path, toy: Path) -> str:
    return _create(home, toy, "--max-trial-count=6", "--algorithm=random-search", "--seed=5", *SPACE, name="source")


def test_a_warm_start_from_a_study_and_its_csv_is_recorded_and_no_trial(tmp_path: Path, toy: Path) -> None:
    """From a vcli study: its 6 observations are priors (describe shows them), the new study
    runs its own maxTrialCount trials, none of them a prior; a resumed study's suggester is told
    the stored priors, after the CSV it came from is gone. From the study's CSV, in a narrower
    space with a parameter of its own: rows outside it are skipped and counted."""
    home = tmp_path / "home"
    source = _source_study(home, toy)
    r = vcli(home, *_study_args(toy, "--max-trial-count=2", "--seed=1", f"--warm-start-from={source}", *SPACE))
    assert r.returncode == 0, r.stderr
    assert (f"Warm start from [projects/local/locations/local/hyperparameterTuningJobs/{source}]: 6 prior "
            "observation(s) told to the suggester") in r.stderr
    study = describe(home, "hp-tuning-jobs", job_id_from_stderr(r.stderr))
    assert study["warmStart"] == {"source": f"projects/local/locations/local/hyperparameterTuningJobs/{source}",
                                  "observations": 6, "skipped": 0}
    assert [t["id"] for t in study["trials"]] == ["1", "2"]
    assert not set(_points(study)) & set(_points(describe(home, "hp-tuning-jobs", source)))

    table = tmp_path / "trials.csv"
    assert vcli(home, "hp-tuning-jobs", "export", source, f"--to={table}").returncode == 0
    rows = list(csv.DictReader(table.open()))
    inside = [row for row in rows if float(row["param_x"]) <= 3]
    r = vcli(home, *_study_args(
        toy, "--max-trial-count=1", "--algorithm=tpe", f"--warm-start-from={table}", "--validate-only",
        "--parameter-spec=parameter-id=x,type=double,min=0,max=3", "--parameter-spec=parameter-id=y,type=double,min=0.001,max=10",
        "--parameter-spec=parameter-id=z,type=integer,min=1,max=4"))
    assert r.returncode == 1 and "none of the 6 observation(s)" in _one_line(r, "create")  # z: no value, no default
    config = tmp_path / "narrow.yaml"
    config.write_text(NARROW)
    r = vcli(home, "hp-tuning-jobs", "create", f"--config={config}", f"--warm-start-from={table}", "--seed=2",
             f"--worker-pool-spec=machine-type=n1-standard-4,local-package-path={toy},script=toy.py")
    assert r.returncode == 0, r.stderr
    assert (f"{len(inside)} prior observation(s) told to the suggester before its first suggestion (no trials of this "
            f"study); {6 - len(inside)} skipped") in r.stderr
    assert "at their defaultValue: z" in r.stderr
    narrow_id = job_id_from_stderr(r.stderr)
    narrow = describe(home, "hp-tuning-jobs", narrow_id)
    assert narrow["warmStart"]["observations"] == len(inside) and len(narrow["trials"]) == 3
    # The priors live in the record: the CSV gone, a rebuilt suggester is told them.
    table.unlink()
    from vcli.control import runner
    from vcli.store import Store

    store = Store(home)
    planned = runner.plan_stored_study(store, store.get_job(narrow_id))
    try:
        assert [dict(t.parameters)["x"] for t in planned.suggester.priors] == [float(row["param_x"]) for row in inside]
        assert {t.parameters["z"] for t in planned.suggester.priors} == {2}
    finally:
        planned.close()


NARROW = """
displayName: narrow
maxTrialCount: 3
studySpec:
  metrics: [{metricId: score, goal: MAXIMIZE}]
  algorithm: ALGORITHM_UNSPECIFIED
  parameters:
  - parameterId: x
    doubleValueSpec: {minValue: 0, maxValue: 3}
  - parameterId: y
    doubleValueSpec: {minValue: 0.001, maxValue: 10}
    scaleType: UNIT_LOG_SCALE
  - parameterId: z
    integerValueSpec: {minValue: 1, maxValue: 4, defaultValue: 2}
"""


def _optuna_storage(path: Path, *, names: bool) -> str:
    """An Optuna SQLite storage with the study `prior`: 12 COMPLETE trials near x=3, y=1, one
    FAIL, and a parameter vcli's study lacks."""
    import warnings

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = f"sqlite:///{path}"
    study = optuna.create_study(storage=url, study_name="prior", direction="maximize")
    if names:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(["score"])
    for i in range(12):
        x, y = 2.4 + i * 0.1, 0.7 + i * 0.05
        study.add_trial(optuna.trial.create_trial(
            params={"x": x, "y": y, "dropout": 0.1},
            distributions={"x": optuna.distributions.FloatDistribution(0, 6),
                           "y": optuna.distributions.FloatDistribution(0.001, 10, log=True),
                           "dropout": optuna.distributions.FloatDistribution(0, 1)},
            value=-(x - 3) ** 2 - (y - 1) ** 2))
    study.add_trial(optuna.trial.create_trial(params={}, distributions={}, state=optuna.trial.TrialState.FAIL))
    return url


def test_a_warm_start_from_an_optuna_storage(tmp_path: Path, toy: Path) -> None:
    """An Optuna SQLite study: its COMPLETE trials are priors (its extra parameter left out);
    more of them than the GP's random start-up, so the study's first trial is the model's point
    given those priors (computed here by a suggester told the stored ones), no random point."""
    home = tmp_path / "home"
    url = _optuna_storage(tmp_path / "optuna.db", names=True)
    r = vcli(home, *_study_args(toy, "--max-trial-count=1", "--seed=4", f"--warm-start-from={url}#prior", *SPACE))
    assert r.returncode == 0, r.stderr
    assert f"Warm start from [{url}#prior]: 12 prior observation(s)" in r.stderr
    assert "parameters this study lacks, left out: dropout" in r.stderr
    study_id = job_id_from_stderr(r.stderr)
    study = describe(home, "hp-tuning-jobs", study_id)
    assert study["warmStart"] == {"source": f"{url}#prior", "observations": 12, "skipped": 0}
    from vcli import codec
    from vcli.control.warmstart import stored_priors
    from vcli.store import Store

    record = Store(home).get_job(study_id).record
    here = get_suggester(codec.study_spec_from_stored(record["studySpec"]), seed=4)
    here.prior(stored_priors(record))  # type: ignore[attr-defined]
    cold = get_suggester(codec.study_spec_from_stored(record["studySpec"]), seed=4)
    trial = {p["parameterId"]: p["value"] for p in study["trials"][0]["parameters"]}
    assert [trial] == [dict(x.parameters) for x in here.ask(1)] != [dict(x.parameters) for x in cold.ask(1)]
    # Without metric names, its only value is the study's metric; the storage's one study needs no name.
    other = _optuna_storage(tmp_path / "unnamed.db", names=False)
    r = vcli(home, *_study_args(toy, "--max-trial-count=1", f"--warm-start-from={other}", "--validate-only", *SPACE))
    assert r.returncode == 0 and f"Warm start from [{other}#prior]: 12 prior" in r.stderr, r.stderr


def test_every_bad_source_is_one_line_naming_the_flag(tmp_path: Path, toy: Path) -> None:
    home = tmp_path / "home"
    no_metric = tmp_path / "no-metric.csv"
    no_metric.write_text("trial_id,state,param_x,metric_loss\n1,SUCCEEDED,1.0,0.5\n")
    other_params = tmp_path / "other.csv"
    other_params.write_text("trial_id,state,param_lr,metric_score\n1,SUCCEEDED,0.1,0.5\n")
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"\xff\xfe\x00\x01garbage")
    url = _optuna_storage(tmp_path / "optuna.db", names=True)
    cases = {
        "1234567890123456789": "[1234567890123456789] is neither a study of this vcli home",
        str(tmp_path / "missing.csv"): "cannot read [",
        str(tmp_path): "cannot read [",
        str(binary): "cannot read [",
        str(no_metric): "has no column [metric_score] (the value of this study's metric [score]; its metric columns: "
                        "metric_loss)",
        str(other_params): "shares no parameter with this study (it has: lr; this study: x, y)",
        f"{url}#nope": f"{url} has no Optuna study named [nope] (its studies: prior)",
        f"sqlite:///{tmp_path}/absent.db#prior": "names no SQLite file",
    }
    for source, message in cases.items():
        r = vcli(home, *_study_args(toy, f"--warm-start-from={source}", "--validate-only", *SPACE))
        assert r.returncode == 1, (source, r.stderr)
        line = _one_line(r, "create")
        assert line.startswith("Invalid value for [--warm-start-from]: ") and message in line, (source, line)
    assert not (tmp_path / "absent.db").exists()
    pbt = tmp_path / "pbt.yaml"
    pbt.write_text(PBT)
    r = vcli(home, "hp-tuning-jobs", "create", f"--config={pbt}", f"--warm-start-from={url}#prior", "--validate-only")
    assert r.returncode == 2 and "argument --warm-start-from: Population Based Training" in _one_line(r, "create")


# --------------------------------------------------------------------------- the suggesters


def _spec(algorithm: Algorithm = Algorithm.ALGORITHM_UNSPECIFIED) -> StudySpec:
    return StudySpec(metrics=(MetricSpec(metric_id="score", goal=Goal.MAXIMIZE),), algorithm=algorithm,
                     parameters=tuple(ParameterSpec(parameter_id=p, value_spec=DoubleValueSpec(min_value=0.0, max_value=1.0))
                                      for p in ("a", "b")))


def _score(p) -> float:
    return -((p["a"] - 0.8) ** 2) - (p["b"] - 0.2) ** 2


def _priors(n: int = 12) -> list[Trial]:
    """Observations around the optimum (0.8, 0.2) and a few far from it."""
    points = [{"a": 0.8 + 0.04 * math.cos(i), "b": 0.2 + 0.04 * math.sin(i)} for i in range(n - 4)]
    points += [{"a": 0.1, "b": 0.9}, {"a": 0.2, "b": 0.7}, {"a": 0.4, "b": 0.95}, {"a": 0.05, "b": 0.5}]
    return [Trial(id=f"prior-{i}", parameters=p, state=TrialState.SUCCEEDED,
                  final_measurement=Measurement(step_count=0, metrics={"score": _score(p)})) for i, p in enumerate(points, 1)]


def _done(i: int, p) -> Trial:
    return Trial(id=str(i), parameters=p, state=TrialState.SUCCEEDED,
                 final_measurement=Measurement(step_count=1, metrics={"score": _score(p)}))


def _distance(p) -> float:
    return math.hypot(p["a"] - 0.8, p["b"] - 0.2)


@pytest.mark.parametrize("algorithm", [Algorithm.ALGORITHM_UNSPECIFIED, Algorithm.TPE])
def test_priors_feed_the_model_not_the_trial_numbers_and_replay_holds(algorithm: Algorithm) -> None:
    """12 priors (more than the random start-up's 10): the first points are the model's, nearer
    the priors' optimum than the random start-up's; the priors take no trial number; a
    suggester rebuilt with the same priors and trials proposes the same points."""
    warm, cold = [], []
    for seed in range(6):
        s = get_suggester(_spec(algorithm), seed=seed)
        s.prior(_priors())  # type: ignore[attr-defined]
        assert s.n_known == 0 and s.n_priors == 12 and len(s.observations()) == 12  # type: ignore[attr-defined]
        warm += [_distance(x.parameters) for x in s.ask(2)]
        cold += [_distance(x.parameters) for x in get_suggester(_spec(algorithm), seed=seed).ask(2)]
    assert sum(warm) < 0.8 * sum(cold), (warm, cold)
    s = get_suggester(_spec(algorithm), seed=3)
    s.prior(_priors())  # type: ignore[attr-defined]
    first = [dict(x.parameters) for x in s.ask(2)]
    for i, p in enumerate(first, 1):
        s.tell(_done(i, p))
    assert s.n_known == 2 and [o[0] for o in s.observations()][12:] == first  # type: ignore[attr-defined]
    rebuilt = get_suggester(_spec(algorithm), seed=3)
    rebuilt.prior(_priors())  # type: ignore[attr-defined]
    for i, p in enumerate(first, 1):
        rebuilt.tell(_done(i, p))
    assert [x.parameters for x in s.ask(2)] == [x.parameters for x in rebuilt.ask(2)]


def test_random_search_proposes_the_same_points_with_priors() -> None:
    plain, warm = (get_suggester(_spec(Algorithm.RANDOM_SEARCH), seed=9) for _ in range(2))
    warm.prior(_priors())  # type: ignore[attr-defined]
    assert [x.parameters for x in plain.ask(4)] == [x.parameters for x in warm.ask(4)]


def test_the_worker_process_is_told_the_priors_a_restarted_one_too() -> None:
    """`Apart` (vcli's GP in a worker process): its first points are those of the suggester
    told the same priors in this process; after the worker is killed, its replacement is told
    the priors and the trials again and answers as this process's suggester does."""
    from vcli.control.suggesting import Apart, suggestions_for

    spec = _spec()
    apart = suggestions_for(get_suggester(spec, seed=5), spec, seed=5, ahead=1, wait=600.0, priors=_priors())
    assert isinstance(apart, Apart)
    here = get_suggester(spec, seed=5)
    here.prior(_priors())  # type: ignore[attr-defined]

    def taken() -> list:
        got = wait_for(lambda: apart.take(1, time.monotonic()), 60, "the worker's answer", interval=0.05)
        return [dict(x.parameters) for x in got]

    try:
        first = taken()
        assert first == [dict(x.parameters) for x in here.ask(1)]
        for s in (apart, here):
            s.tell(_done(1, first[0]))
        assert apart._proc is not None
        os.kill(apart._proc.pid, signal.SIGKILL)
        apart._proc.wait()
        assert taken() == [dict(x.parameters) for x in here.ask(1)]
    finally:
        apart.close()
