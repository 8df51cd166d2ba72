"""End-to-end hyperparameter tuning through the real CLI (local process executor).

Two studies run the real TensorFlow trainer; the rest use a tiny stand-in trainer (a script
that reports through the hypertune file format or a `metric=value` stdout line) so that the
controller's rules can be checked in seconds.
"""

from __future__ import annotations

import json
import math
import os
import signal
from pathlib import Path

import pytest

from tests.helpers import (
    describe,
    job_id_from_stderr,
    processes_with_env,
    read_stderr_until,
    script_study,
    spawn,
    vcli,
    wait_for,
)
from vcli import codec as cfg
from vcli.codec.trial import trial_from_dict
from vcli.store import Store
from vcli.tuning.suggesters import get_suggester

DIGITS_STUDY = """
displayName: digits-hpt
maxTrialCount: 4
parallelTrialCount: 2
studySpec:
  metrics:
  - metricId: accuracy
    goal: MAXIMIZE
  parameters:
  - parameterId: learning_rate
    doubleValueSpec: {minValue: 1e-3, maxValue: 0.3}
    scaleType: UNIT_LOG_SCALE
  - parameterId: num_units
    discreteValueSpec: {values: [16, 32, 64]}
    scaleType: UNIT_LINEAR_SCALE
  - parameterId: momentum
    doubleValueSpec: {minValue: 0.5, maxValue: 0.95}
    scaleType: UNIT_LINEAR_SCALE
trialJobSpec:
  workerPoolSpecs:
    machineSpec: {machineType: n1-standard-4}
    replicaCount: 1
    pythonPackageSpec:
      executorImageUri: vcli-trainer:latest
      pythonModule: trainer.task
      args: [--epochs=2]
"""


def _trial_logs(home: Path, study_id: str) -> dict[str, list[str]]:
    r = vcli(home, "hp-tuning-jobs", "stream-logs", study_id, "--task-name=workerpool0-0", timeout=60)
    assert r.returncode == 0, r.stderr
    out: dict[str, list[str]] = {}
    for line in r.stdout.splitlines():
        severity, ts, task, message = line.split("\t", 3)
        out.setdefault(task, []).append(message)
    return out


def test_bayesian_study_of_the_real_trainer(tmp_path: Path) -> None:
    home = tmp_path / "home"
    config = tmp_path / "hp.yaml"
    config.write_text(DIGITS_STUDY)
    r = vcli(home, "hp-tuning-jobs", "create", f"--config={config}", "--display-name=digits-hpt", "--seed=3",
             "--format=json", timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    study = json.loads(r.stdout)
    assert study["state"] == "JOB_STATE_SUCCEEDED"
    assert study["studySpec"]["algorithm"] == "ALGORITHM_UNSPECIFIED"
    trials = study["trials"]
    assert [t["id"] for t in trials] == ["1", "2", "3", "4"]
    assert all(t["state"] == "SUCCEEDED" for t in trials)
    # Plain lines on a non-TTY, and the best trial is named at the end.
    assert "trial 1 ACTIVE" in r.stderr and "Best trial:" in r.stderr
    best = max(trials, key=lambda t: t["finalMeasurement"]["metrics"][0]["value"])
    assert study["bestTrialId"] == best["id"]
    assert f"Best trial: {best['id']} " in r.stderr
    logs = _trial_logs(home, study["name"].rsplit("/", 1)[-1])
    for t in trials:
        params = {p["parameterId"]: p["value"] for p in t["parameters"]}
        assert set(params) == {"learning_rate", "num_units", "momentum"}
        assert 1e-3 <= params["learning_rate"] <= 0.3 and 0.5 <= params["momentum"] <= 0.95
        assert params["num_units"] in (16.0, 32.0, 64.0)
        fm = t["finalMeasurement"]
        assert fm["stepCount"] == "2" and fm["metrics"][0]["metricId"] == "accuracy"
        assert [m["stepCount"] for m in t["measurements"]] == ["1", "2"]
        assert t["startTime"] <= t["endTime"]
        # The trial's custom job got the static args plus --<id>=<value> (integers as integers).
        job = describe(home, "custom-jobs", t["customJob"].rsplit("/", 1)[-1])
        args = job["jobSpec"]["workerPoolSpecs"][0]["pythonPackageSpec"]["args"]
        assert args[0] == "--epochs=2"
        assert f"--num_units={int(params['num_units'])}" in args
        assert f"--learning_rate={params['learning_rate']!r}" in args
        assert job["trialId"] == t["id"]
        assert job["outputDirectory"].endswith(f"/{t['id']}")
        # The replica saw CLOUD_ML_TRIAL_ID; its AIP_MODEL_DIR is <base>/<trial>/model.
        assert f"single replica trial={t['id']}" in logs[f"trial-{t['id']}/workerpool0-0"]
        assert (Path(study["outputDirectory"]) / t["id"] / "model").is_dir()
    described = describe(home, "hp-tuning-jobs", study["name"])
    assert [t["state"] for t in described["trials"]] == ["SUCCEEDED"] * 4
    assert described["maxTrialCount"] == 4 and described["parallelTrialCount"] == 2


def test_study_with_two_replica_trials(tmp_path: Path) -> None:
    home = tmp_path / "home"
    r = vcli(
        home, "hp-tuning-jobs", "create", "--display-name=mw-hpt",
        "--parameter-spec=parameter-id=learning_rate,type=double,min=0.05,max=0.2,scale=log",
        "--metric=metric-id=accuracy,goal=maximize",
        "--worker-pool-spec=machine-type=n1-standard-4,local-package-path=.,python-module=trainer.task",
        "--worker-pool-spec=machine-type=n1-standard-4,replica-count=1",
        "--args=--epochs=1",
        "--max-trial-count=2", "--parallel-trial-count=1", "--algorithm=random-search", "--seed=5",
        "--format=json",
        timeout=900,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    study = json.loads(r.stdout)
    assert [t["state"] for t in study["trials"]] == ["SUCCEEDED", "SUCCEEDED"]
    r2 = vcli(home, "hp-tuning-jobs", "stream-logs", study["name"], timeout=60)
    for t in study["trials"]:
        lines = [l.split("\t")[3] for l in r2.stdout.splitlines() if l.split("\t")[2].startswith(f"trial-{t['id']}/")]
        cluster_lines = [l for l in lines if l.startswith("cluster=")]
        # chief and worker both report TF_CONFIG with task.trial = this trial's id.
        assert len(cluster_lines) == 2, lines[:20]
        assert all(l.endswith(f"trial={t['id']}") for l in cluster_lines)
        assert {l.split(" task=")[1].split(" ")[0] for l in cluster_lines} == {"chief:0", "worker:0"}
        job = describe(home, "custom-jobs", t["customJob"])
        assert [x["taskName"] for x in job["replicas"]] == ["workerpool0-0", "workerpool1-0"]


# A stand-in trainer: objective = -(x-3)^2 - (y-1)^2 (+ categorical bonus), reported via
# hypertune's file format (or stdout); fails on purpose for x > FAIL_ABOVE if set.
TOY = """
import json, os, sys, time
args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:] if "=" in a)
with open(os.environ["VCLI_TEST_ECHO"] + "/" + os.environ.get("CLOUD_ML_TRIAL_ID", "0"), "w") as f:
    json.dump({"argv": sys.argv[1:], "trial": os.environ.get("CLOUD_ML_TRIAL_ID"),
               "cluster_spec": json.loads(os.environ["CLUSTER_SPEC"])}, f)
x = float(args.get("x", 0)); y = float(args.get("y", 0))
if "fail_above" in args and x > float(args["fail_above"]):
    sys.exit(7)
if args.get("mode") == "silent":
    sys.exit(0)
value = -(x - 3) ** 2 - (y - 1) ** 2 + (0.5 if args.get("kind") == "b" else 0.0)
if args.get("mode") == "stdout":
    for step in (1, 2):
        print(f"score={value - (2 - step):.6f} step={step}", flush=True)
else:
    path = os.environ["CLOUD_ML_HP_METRIC_FILE"]
    os.makedirs(os.path.dirname(path), exist_ok=True)
    lines = []
    for step in (1, 2, 3):   # rewrite the whole file every report, like cloudml-hypertune
        v = value - 1.0 if step == 2 else value - (3 - step)   # step 2 is the worst
        lines.append(json.dumps({"score": str(v), "global_step": str(step), "timestamp": time.time(),
                                 "trial": os.environ.get("CLOUD_ML_TRIAL_ID", "0"), "checkpoint_path": ""}, sort_keys=True))
        with open(path, "w") as f:
            f.write("\\n".join(lines) + "\\n")
        time.sleep(float(args.get("sleep", 0)))
"""


def _toy(tmp_path: Path) -> tuple[Path, Path]:
    pkg = tmp_path / "toy"
    pkg.mkdir()
    (pkg / "toy.py").write_text(TOY)
    echo = tmp_path / "echo"
    echo.mkdir()
    return pkg, echo


def _toy_study(home: Path, pkg: Path, echo: Path, *extra: str, timeout: float = 300):
    return vcli(
        home, "hp-tuning-jobs", "create", "--display-name=toy",
        "--metric=metric-id=score,goal=maximize",
        f"--worker-pool-spec=machine-type=n1-standard-4,local-package-path={pkg},script=toy.py",
        "--format=json", *extra, timeout=timeout, VCLI_TEST_ECHO=str(echo),
    )


def test_grid_search_enumerates_the_product_and_stops(tmp_path: Path) -> None:
    pkg, echo = _toy(tmp_path)
    r = _toy_study(
        tmp_path / "home", pkg, echo,
        "--parameter-spec=parameter-id=x,type=integer,min=1,max=3",
        "--parameter-spec=parameter-id=kind,values=a;b",
        "--algorithm=grid-search", "--max-trial-count=20", "--parallel-trial-count=3",
    )
    assert r.returncode == 0, r.stderr
    trials = json.loads(r.stdout)["trials"]
    points = sorted((p["parameters"][0]["value"], p["parameters"][1]["value"]) for p in trials)
    assert points == [(1, "a"), (1, "b"), (2, "a"), (2, "b"), (3, "a"), (3, "b")]
    best = json.loads(r.stdout)["bestTrialId"]
    assert {p["parameterId"]: p["value"] for p in trials[int(best) - 1]["parameters"]} == {"x": 3, "kind": "b"}
    # --x reached the trainer as an integer; CLUSTER_SPEC.task.trial matches the trial id.
    for t in trials:
        seen = json.loads((echo / t["id"]).read_text())
        assert seen["trial"] == t["id"] and seen["cluster_spec"]["task"]["trial"] == t["id"]
        assert any(a in seen["argv"] for a in ("--x=1", "--x=2", "--x=3"))


def test_random_search_is_reproducible_with_a_seed(tmp_path: Path) -> None:
    pkg, echo = _toy(tmp_path)
    runs = []
    for i in range(2):
        r = _toy_study(
            tmp_path / f"home{i}", pkg, echo,
            "--parameter-spec=parameter-id=x,min=0.0,max=6.0",
            "--parameter-spec=parameter-id=y,min=0.001,max=10,scale=log",
            "--algorithm=random-search", "--max-trial-count=4", "--parallel-trial-count=2", "--seed=11",
        )
        assert r.returncode == 0, r.stderr
        runs.append([t["parameters"] for t in json.loads(r.stdout)["trials"]])
    assert runs[0] == runs[1]


def test_failed_trials_beyond_the_budget_fail_the_study(tmp_path: Path) -> None:
    pkg, echo = _toy(tmp_path)
    r = _toy_study(
        tmp_path / "home", pkg, echo,
        "--parameter-spec=parameter-id=x,type=integer,min=1,max=6",
        "--parameter-spec=parameter-id=fail_above,values=2",
        "--algorithm=grid-search", "--max-trial-count=6", "--parallel-trial-count=1",
        "--max-failed-trial-count=2",
    )
    assert r.returncode == 6, r.stderr
    study = json.loads(r.stdout)
    assert study["state"] == "JOB_STATE_FAILED"
    assert "more than the budget of 2" in study["error"]["message"]
    states = [t["state"] for t in study["trials"]]
    # x=1,2 succeed; x=3,4,5 fail (exit 7): the third failure exceeds the budget; x=6 never runs.
    assert states == ["SUCCEEDED", "SUCCEEDED", "INFEASIBLE", "INFEASIBLE", "INFEASIBLE"]
    assert "non-zero status of 7" in study["trials"][2]["infeasibleReason"]


def test_trainer_that_never_reports_is_infeasible_not_a_crash(tmp_path: Path) -> None:
    pkg, echo = _toy(tmp_path)
    r = _toy_study(
        tmp_path / "home", pkg, echo,
        "--parameter-spec=parameter-id=mode,values=silent",
        "--max-trial-count=1",
    )
    assert r.returncode == 6, r.stderr
    assert "Traceback" not in r.stderr
    study = json.loads(r.stdout)
    assert study["trials"][0]["state"] == "INFEASIBLE"
    assert "without reporting the metric [score]" in study["trials"][0]["infeasibleReason"]


def test_stdout_metrics_and_best_measurement_selection(tmp_path: Path) -> None:
    pkg, echo = _toy(tmp_path)
    r = _toy_study(
        tmp_path / "home", pkg, echo,
        "--parameter-spec=parameter-id=mode,values=stdout",
        "--parameter-spec=parameter-id=x,values=3",
        "--max-trial-count=1",
    )
    assert r.returncode == 0, r.stderr
    t = json.loads(r.stdout)["trials"][0]
    assert [m["stepCount"] for m in t["measurements"]] == ["1", "2"]
    assert t["finalMeasurement"]["stepCount"] == "2"
    # hypertune file with BEST selection: step 3 is best, step 2 worst; LAST would also be 3,
    # so use a 2-report file via y: BEST must pick the max over all reports.
    r = _toy_study(
        tmp_path / "home", pkg, echo,
        "--parameter-spec=parameter-id=x,values=3",
        "--measurement-selection=best", "--max-trial-count=1",
    )
    assert r.returncode == 0, r.stderr
    t = json.loads(r.stdout)["trials"][0]
    values = {m["stepCount"]: m["metrics"][0]["value"] for m in t["measurements"]}
    assert set(values) == {"1", "2", "3"}  # re-read and de-duplicated, not tailed
    assert t["finalMeasurement"]["metrics"][0]["value"] == max(values.values())


def test_goal_value_ends_the_study_early(tmp_path: Path) -> None:
    pkg, echo = _toy(tmp_path)
    r = _toy_study(
        tmp_path / "home", pkg, echo,
        "--parameter-spec=parameter-id=x,type=integer,min=1,max=5",
        "--algorithm=grid-search", "--max-trial-count=5", "--parallel-trial-count=1",
        "--goal-value=-0.5",
    )
    # x=1 -> -4-1=-5, x=2 -> -2, x=3 -> -1 ... y=0 gives -1 at best; goal -0.5 is never reached
    assert r.returncode == 0
    assert len(json.loads(r.stdout)["trials"]) == 5
    r = _toy_study(
        tmp_path / "home", pkg, echo,
        "--parameter-spec=parameter-id=x,type=integer,min=1,max=5",
        "--parameter-spec=parameter-id=y,values=1",
        "--algorithm=grid-search", "--max-trial-count=5", "--parallel-trial-count=1",
        "--goal-value=-0.5",
    )
    assert r.returncode == 0, r.stderr
    study = json.loads(r.stdout)
    assert len(study["trials"]) == 3  # x=3, y=1 reaches 0 >= -0.5
    assert "goal value" in r.stderr


def test_study_timeout_stops_running_trials(tmp_path: Path) -> None:
    pkg, echo = _toy(tmp_path)
    r = _toy_study(
        tmp_path / "home", pkg, echo,
        "--parameter-spec=parameter-id=sleep,values=3",
        "--parameter-spec=parameter-id=x,min=0.0,max=6.0",
        "--max-trial-count=4", "--parallel-trial-count=2", "--study-timeout=4s",
    )
    study = json.loads(r.stdout)
    # Two trials ran 2 reports (about 6 s each would be needed for all 3): stopped at 4 s,
    # they end SUCCEEDED with the measurements they made; no more trials were launched.
    assert len(study["trials"]) == 2, r.stderr
    assert all(t["state"] == "SUCCEEDED" for t in study["trials"])
    assert r.returncode == 0
    assert "time budget" in r.stderr


def test_cancel_study_from_another_terminal(tmp_path: Path) -> None:
    pkg, echo = _toy(tmp_path)
    home = tmp_path / "home"
    proc = spawn(
        home, "hp-tuning-jobs", "create", "--display-name=cancel-study",
        "--metric=metric-id=score,goal=maximize",
        f"--worker-pool-spec=machine-type=n1-standard-4,local-package-path={pkg},script=toy.py",
        "--parameter-spec=parameter-id=sleep,values=30",
        "--parameter-spec=parameter-id=x,min=0.0,max=6.0",
        "--max-trial-count=4", "--parallel-trial-count=2",
        VCLI_TEST_ECHO=str(echo),
    )
    try:
        study_id = job_id_from_stderr(read_stderr_until(proc, "submitted successfully", 60))
        store = Store(home)
        wait_for(lambda: len(store.child_jobs(study_id)) == 2, 30, "two trials")
        jobs = [c.id for c in store.child_jobs(study_id)]
        wait_for(lambda: all(processes_with_env("VCLI_JOB_ID", j) for j in jobs), 30, "trial replicas running")
        r = vcli(home, "hp-tuning-jobs", "cancel", study_id, timeout=60)
        assert r.returncode == 0, r.stderr
        assert proc.wait(timeout=60) == 5
        study = describe(home, "hp-tuning-jobs", study_id)
        assert study["state"] == "JOB_STATE_CANCELLED"
        assert len(study["trials"]) == 2
        for j in jobs:
            assert not processes_with_env("VCLI_JOB_ID", j)
            assert describe(home, "custom-jobs", j)["state"] == "JOB_STATE_CANCELLED"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_resume_by_replay_proposes_the_original_next_point(tmp_path: Path) -> None:
    pkg, echo = _toy(tmp_path)
    home = tmp_path / "home"
    # Every trial waits for the model's answer to the study as it stands (no point prepared ahead).
    assert vcli(home, "config", "set", "tuning/suggestion-wait", "600").returncode == 0
    for algorithm in ("algorithm-unspecified", "random-search"):
        r = _toy_study(
            home, pkg, echo,
            "--parameter-spec=parameter-id=x,min=0.0,max=6.0",
            "--parameter-spec=parameter-id=kind,values=a;b",
            f"--algorithm={algorithm}", "--max-trial-count=5", "--parallel-trial-count=1", "--seed=21",
        )
        assert r.returncode == 0, r.stderr
        study = json.loads(r.stdout)
        stored = Store(home).trial_records(study["name"].rsplit("/", 1)[-1])
        spec = cfg.study_spec_from_stored(study["studySpec"])
        rebuilt = get_suggester(spec, seed=21)
        for data in stored[:4]:  # as StudyRun.resume tells a fresh suggester every stored trial
            rebuilt.tell(trial_from_dict(data))
        nxt = rebuilt.ask(1)[0].parameters
        assert dict(nxt) == {p["parameterId"]: p["value"] for p in stored[4]["parameters"]}
        assert not any("suggestedBy" in t for t in stored), stored


def test_bad_study_inputs_get_one_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    base = ["hp-tuning-jobs", "create", "--display-name=bad", "--metric=metric-id=score,goal=maximize",
            "--worker-pool-spec=machine-type=n1-standard-4,container-image-uri=x,"]
    cases = {
        "--parameter-spec=parameter-id=x,min=5,max=1": "must not be greater than maxValue",
        "--parameter-spec=parameter-id=x,min=0,max=1.0,scale=log": "strictly positive",
        "--parameter-spec=parameter-id=x,type=double,min=0.1,max=1.0": None,
    }
    for flag, needle in cases.items():
        r = vcli(home, *base[:4], flag, "--worker-pool-spec=machine-type=n1-standard-4,container-image-uri=img",
                 "--command=python3,-c,pass", "--algorithm=grid-search" if needle is None else "--max-trial-count=1",
                 "--validate-only", timeout=60)
        if needle is None:
            needle = "GRID_SEARCH needs every parameter"
        assert r.returncode == 1, (flag, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("ERROR: (vcli.hp-tuning-jobs.create)") and needle in lines[0], (flag, r.stderr)
    r = vcli(home, "hp-tuning-jobs", "create", "--display-name=x", "--metric=metric-id=a b", timeout=60)
    assert r.returncode == 2  # no parameters / pools: usage
    # parallel > max is clamped with a warning (validate-only shows the result)
    r = vcli(home, *base[:4], "--parameter-spec=parameter-id=x,min=0.0,max=1.0",
             "--worker-pool-spec=machine-type=n1-standard-4,container-image-uri=img", "--command=python3,-c,pass",
             "--max-trial-count=2", "--parallel-trial-count=5", "--validate-only", "--format=json", timeout=60)
    assert r.returncode == 0, r.stderr
    assert "WARNING: parallelTrialCount (5) is greater than maxTrialCount (2)" in r.stderr
    assert json.loads(r.stdout)["parallelTrialCount"] == 2


def test_async_study_returns_at_once_and_runs_in_the_background(tmp_path: Path) -> None:
    """`create --async` records the study and returns; a detached vcli runs it. describe,
    stream-logs, cancel and resume work on it from other processes."""
    import time

    pkg, echo = _toy(tmp_path)
    home = tmp_path / "home"
    flags = ("--metric=metric-id=score,goal=maximize",
             f"--worker-pool-spec=machine-type=n1-standard-4,local-package-path={pkg},script=toy.py",
             "--parameter-spec=parameter-id=x,min=0.0,max=6.0", "--format=value(name)")
    started = time.monotonic()
    r = vcli(home, "hp-tuning-jobs", "create", "--async", "--display-name=bg", *flags, "--max-trial-count=3",
             "--parallel-trial-count=2", "--seed=4", timeout=60, VCLI_TEST_ECHO=str(echo))
    took = time.monotonic() - started
    assert r.returncode == 0, r.stderr
    assert took < 10, took  # the process start dominates: no trial is started by create itself
    name = r.stdout.strip()
    assert name.startswith("projects/") and "/hyperparameterTuningJobs/" in name
    study_id = name.rsplit("/", 1)[-1]
    assert f"Hyperparameter tuning job [{study_id}] submitted successfully." in r.stderr
    assert f"vcli hp-tuning-jobs describe {study_id}" in r.stderr
    logs = vcli(home, "hp-tuning-jobs", "stream-logs", study_id, timeout=240)  # follows the study to its end
    assert logs.returncode == 0, logs.stderr
    study = describe(home, "hp-tuning-jobs", study_id)
    assert study["state"] == "JOB_STATE_SUCCEEDED", study
    assert [t["state"] for t in study["trials"]] == ["SUCCEEDED"] * 3
    assert {line.split("\t")[2].split("/")[0] for line in logs.stdout.splitlines()} == {"trial-1", "trial-2", "trial-3"}
    controller_log = (home / "jobs" / study_id / "controller.log").read_text()
    assert "runs in this background process" in controller_log and "trial 3 SUCCEEDED" in controller_log

    # cancel from another process: the background controller stops every trial
    r = vcli(home, "hp-tuning-jobs", "create", "--async", "--display-name=bg-cancel", *flags, "--max-trial-count=4",
             "--parallel-trial-count=2", "--parameter-spec=parameter-id=sleep,values=60", timeout=60,
             VCLI_TEST_ECHO=str(echo))
    assert r.returncode == 0, r.stderr
    study_id = r.stdout.strip().rsplit("/", 1)[-1]
    store = Store(home)
    wait_for(lambda: len(store.child_jobs(study_id)) == 2, 60, "two trials")
    jobs = [c.id for c in store.child_jobs(study_id)]
    wait_for(lambda: all(processes_with_env("VCLI_JOB_ID", j) for j in jobs), 60, "trial replicas running")
    c = vcli(home, "hp-tuning-jobs", "cancel", study_id, timeout=120)
    assert c.returncode == 0, c.stderr
    assert describe(home, "hp-tuning-jobs", study_id)["state"] == "JOB_STATE_CANCELLED"
    assert not any(processes_with_env("VCLI_JOB_ID", j) for j in jobs)
    ended = wait_for(lambda: "finished: JOB_STATE_CANCELLED" in (text := (home / "jobs" / study_id / "controller.log").read_text())
                     and text, 60, "the controller's last line")
    assert "JOB_STATE_CANCELLED in " in ended and ". CANCELED" not in ended, ended  # Vertex's error text was glued on

    # its controller killed: resume takes the running trials over and ends the study
    r = vcli(home, "hp-tuning-jobs", "create", "--async", "--display-name=bg-resume", *flags, "--max-trial-count=2",
             "--parallel-trial-count=2", "--parameter-spec=parameter-id=sleep,values=1", timeout=60,
             VCLI_TEST_ECHO=str(echo))
    assert r.returncode == 0, r.stderr
    study_id = r.stdout.strip().rsplit("/", 1)[-1]
    wait_for(lambda: len(store.child_jobs(study_id)) == 2, 60, "two trials")
    controller = store.get_job(study_id).controller_pid
    assert controller and controller != os.getpid()
    os.kill(controller, signal.SIGKILL)
    wait_for(lambda: not os.path.exists(f"/proc/{controller}") or "Z" in open(f"/proc/{controller}/stat").read().split()[2],
             30, "the background controller gone")
    r = vcli(home, "hp-tuning-jobs", "resume", study_id, "--format=value(state)", timeout=240, VCLI_TEST_ECHO=str(echo))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "JOB_STATE_SUCCEEDED"
    assert [t["state"] for t in describe(home, "hp-tuning-jobs", study_id)["trials"]] == ["SUCCEEDED"] * 2


def test_a_trainer_module_that_cannot_be_imported_fails_the_study_at_once(tmp_path: Path) -> None:
    """A typo in python-module would fail every trial the same way: the first failure ends the
    study, naming the module and Python's own error line, instead of burning the budget."""
    pkg, echo = _toy(tmp_path)
    (pkg / "__init__.py").write_text("")
    home = tmp_path / "home"
    # pythonPackageSpec: the module is looked for where it runs (here: the working directory).
    r = vcli(home, "hp-tuning-jobs", "create", "--display-name=typo", "--metric=metric-id=score,goal=maximize",
             "--worker-pool-spec=machine-type=n1-standard-4,executor-image-uri=python:3.11,python-module=toy.tyop",
             "--parameter-spec=parameter-id=x,min=0.0,max=6.0", "--max-trial-count=10", "--parallel-trial-count=1",
             "--algorithm=random-search", "--format=json", timeout=300, VCLI_TEST_ECHO=str(echo))
    assert r.returncode == 6, r.stderr
    study = json.loads(r.stdout)
    assert study["state"] == "JOB_STATE_FAILED"
    assert len(study["trials"]) == 1
    assert "could not import its module [toy.tyop]" in study["error"]["message"]
    assert "No module named 'toy'" in study["error"]["message"]
    assert "No module named 'toy'" in study["trials"][0]["infeasibleReason"]


HOSTILE_REPORTS = """
import json, os, sys, time
path = os.environ["CLOUD_ML_HP_METRIC_FILE"]
def report(**kw):
    with open(path, "a") as f:
        f.write(json.dumps({**kw, "timestamp": kw.get("timestamp", time.time())}) + "\\n")
report(score="0.5", global_step="inf")                 # crashed the controller (OverflowError)
report(score="0.5", global_step="1e400")
report(score="0.5", global_step="9" * 40)              # beyond int64: broke the Parquet export
report(score="nan", global_step="1", timestamp="nan")  # re-read as new on every poll
print("score=0.25 step=" + "9" * 40, flush=True)
report(score="0.75", global_step="2")
time.sleep(2)                                          # the controller polls the file meanwhile
"""


def test_reports_vertex_could_not_store_are_skipped_never_a_crash(tmp_path: Path) -> None:
    home = tmp_path / "home"
    sid, study, err = script_study(home, tmp_path, HOSTILE_REPORTS, "--parameter-spec=parameter-id=x,type=double,min=0,max=1",
                                   "--metric=metric-id=score,goal=maximize", "--algorithm=random-search",
                                   "--max-trial-count=1")
    assert "Traceback" not in err
    (trial,) = study["trials"]
    assert trial["state"] == "SUCCEEDED", trial
    # the NaN report once (not once per poll), then step 2; no infinite or 40-digit step
    assert [(m["stepCount"], m["metrics"][0].get("value")) for m in trial["measurements"]] == [("1", "NaN"), ("2", 0.75)], \
        trial["measurements"]
    # proto3's JSON spelling, which Vertex's own protos parse (they refuse Python's "nan")
    from google.protobuf import descriptor_pb2, json_format

    value = trial["measurements"][0]["metrics"][0]["value"]
    assert math.isnan(json_format.Parse(json.dumps({"doubleValue": value}), descriptor_pb2.UninterpretedOption()).double_value)
    r = vcli(home, "hp-tuning-jobs", "export", sid, f"--to={tmp_path / 't.parquet'}")
    assert r.returncode == 0, r.stderr


HOSTILE_METRIC_FILES = """
import json, os, sys, time
path = os.environ["CLOUD_ML_HP_METRIC_FILE"]
how = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--how=")][0]
with open(path, "w") as f:
    f.write(json.dumps({"score": "0.5", "global_step": "1"}) + "\\n")
time.sleep(1)  # the controller reads the report
os.remove(path)
if how == "fifo":
    os.mkfifo(path)
elif how == "zero":
    os.symlink("/dev/zero", path)
elif how == "loop":
    os.symlink(path, path)
else:  # one line nested beyond the JSON parser's depth
    with open(path, "w") as f:
        f.write(json.dumps({"score": "0.75", "global_step": "2"}) + "\\n" + "[" * 100000 + "\\n")
time.sleep(1.5)  # the controller polls it meanwhile
"""


def test_a_trial_whose_metric_file_is_hostile_keeps_its_reports_and_the_study_goes_on(tmp_path: Path) -> None:
    # A FIFO hung the controller for good (cancel and SIGTERM too), a link to /dev/zero took
    # all its memory, a link loop or a deeply nested line ended it with a traceback, each
    # leaving the study RUNNING (found by a probe).
    home = tmp_path / "home"
    sid, study, err = script_study(home, tmp_path, HOSTILE_METRIC_FILES, "--algorithm=grid-search",
                                   "--parameter-spec=parameter-id=how,type=categorical,values=fifo;zero;loop;deep",
                                   "--metric=metric-id=score,goal=maximize", "--max-trial-count=4")
    assert "Traceback" not in err
    trials = {t["parameters"][0]["value"]: t for t in study["trials"]}
    assert sorted(trials) == ["deep", "fifo", "loop", "zero"]
    assert {how: (t["state"], t["finalMeasurement"]["metrics"][0]["value"]) for how, t in trials.items()} == {
        "fifo": ("SUCCEEDED", 0.5), "zero": ("SUCCEEDED", 0.5), "loop": ("SUCCEEDED", 0.5), "deep": ("SUCCEEDED", 0.75)}


def test_a_trainers_escape_sequences_never_reach_the_terminal(tmp_path: Path) -> None:
    """The trainer's last stderr line is repeated in the trial's reason, its line and the
    live table's NOTE: with its control characters escaped (a clear-screen sequence there
    cleared the terminal at every redraw, and an unterminated title sequence swallowed the
    rest of the output)."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "t.py").write_text("import sys\nsys.stderr.write('\\x1b[2J\\x1b[H\\x1b]0;pwned\\x07BOOM\\n')\nsys.exit(2)\n")
    r = vcli(tmp_path / "home", "hp-tuning-jobs", "create", "--display-name=esc", "--format=json",
             f"--worker-pool-spec=machine-type=n1-standard-4,local-package-path={pkg},script=t.py",
             "--parameter-spec=parameter-id=x,type=double,min=0,max=1", "--metric=metric-id=score,goal=maximize",
             "--algorithm=random-search", "--max-trial-count=1")
    assert r.returncode == 6, r.stderr[-2000:]
    assert "\x1b" not in r.stdout and "\x1b" not in r.stderr and "\x07" not in r.stderr
    reason = json.loads(r.stdout)["trials"][0]["infeasibleReason"]
    assert "The trainer's last error line: \\x1b[2J\\x1b[H\\x1b]0;pwned\\x07BOOM" in reason, reason


def test_a_trial_that_reported_only_nan_says_so(tmp_path: Path) -> None:
    # It was "finished without reporting the metric [score]", though score=nan was printed.
    r = vcli(tmp_path / "home", "hp-tuning-jobs", "create", "--display-name=nan", "--format=json",
             "--worker-pool-spec=machine-type=n1-standard-4,container-image-uri=x",
             "--command=python3,-c,print('score=nan'); print('score=inf')", "--executor=local",
             "--parameter-spec=parameter-id=x,type=double,min=0,max=1", "--metric=metric-id=score,goal=maximize",
             "--algorithm=random-search", "--max-trial-count=1")
    assert r.returncode == 6, r.stderr[-2000:]
    reason = json.loads(r.stdout)["trials"][0]["infeasibleReason"]
    assert reason == "The trial reported the metric [score] only as values that are not finite numbers (inf, nan).", reason


@pytest.mark.parametrize("signame, more", [("SIGINT", 1), ("SIGINT", 12), ("SIGTERM", 1)])
def test_a_second_ctrl_c_while_a_study_stops_kills_its_trials_and_leaves_nothing(tmp_path: Path, signame: str,
                                                                                more: int) -> None:
    # The second Ctrl-C made vcli exit 130 "every trial was stopped" at once, with the trial's
    # trainer (ignoring SIGTERM) still running and the study CANCELLING. A third one, 0.1 s
    # after the second, escaped the handler: the study CANCELLING for good, trials STOPPING. So
    # did a second SIGTERM (found by a probe).
    import signal
    import textwrap
    import time

    sig = getattr(signal, signame)

    home = tmp_path / "home"
    script = tmp_path / "stubborn.py"
    script.write_text(textwrap.dedent("""
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("acc=0.5 step=1", flush=True)
        time.sleep(300)
    """))
    proc = spawn(home, "hp-tuning-jobs", "create", "--display-name=impatient", "--max-trial-count=2",
                 "--algorithm=random-search", "--parameter-spec=parameter-id=x,type=double,min=0,max=1",
                 "--metric=metric-id=acc,goal=maximize",
                 "--worker-pool-spec=machine-type=n1-standard-4,container-image-uri=x", f"--command=python3,{script}")
    try:
        study_id = job_id_from_stderr(read_stderr_until(proc, "submitted successfully", 60))
        wait_for(lambda: any(t.get("measurements") for t in describe(home, "hp-tuning-jobs", study_id).get("trials", [])),
                 60, "a measurement recorded")
        [trial_job] = [t["customJob"].rsplit("/", 1)[-1] for t in describe(home, "hp-tuning-jobs", study_id)["trials"]]
        store = Store(home)
        proc.send_signal(sig)
        wait_for(lambda: store.get_job(trial_job).state == "JOB_STATE_CANCELLING", 30, "the trial stopping", interval=0.01)
        store.close()
        for _ in range(more):
            proc.send_signal(sig)
            time.sleep(0.01)
        assert proc.wait(timeout=60) == 128 + sig
        assert describe(home, "hp-tuning-jobs", study_id)["state"] == "JOB_STATE_CANCELLED"
        assert not processes_with_env("VCLI_JOB_ID", trial_job)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_a_metric_printed_after_megabytes_of_output_at_the_very_end_is_read(tmp_path: Path) -> None:
    """A poll reads at most 4 MiB of a log; the last read before a trial is concluded read no
    more, so a chatty trainer's final `score=` lines were lost: INFEASIBLE, the study FAILED
    (or, with metrics every step, a final measurement some steps early)."""
    script = (
        "import sys\n"
        "line = 'epoch 1 batch progress ' + 'x' * 200 + '\\n'\n"
        "sys.stdout.write(line * 60000)\n"
        "for step in range(1, 4):\n"
        "    sys.stdout.write(f'score={step / 10} step={step}\\n')\n"
        "sys.stdout.flush()\n")
    _, study, _ = script_study(tmp_path / "chatty", tmp_path, script, "--metric=metric-id=score,goal=maximize",
                               "--parameter-spec=parameter-id=x,type=double,min=0,max=1", "--max-trial-count=1")
    [trial] = study["trials"]
    assert trial["state"] == "SUCCEEDED", trial
    assert trial["finalMeasurement"]["stepCount"] == "3" and len(trial["measurements"]) == 3


def test_stdout_reports_read_every_metric_id_a_study_accepts() -> None:
    """`acc@1=0.69` was never read (ids were [A-Za-z0-9_./-] only) while the trial's reason
    told the user to print exactly that line."""
    from vcli.metrics import MetricReader

    reader = MetricReader(("acc@1", "λ", "a=b"))
    assert reader.feed_stdout_line("acc@1=0.69 step=1", 1.0)
    assert reader.feed_stdout_line("λ = 0.5 step=1", 1.0)
    assert reader.feed_stdout_line("a=b=0.25 step=1", 1.0)
    assert not reader.feed_stdout_line("acc=0.9 step=1", 1.0)  # not one of the study's
    assert not reader.feed_stdout_line("acc@1=high step=2", 1.0)
    assert [(m.step_count, m.metrics) for m in reader.measurements] == [(1, {"acc@1": 0.69, "λ": 0.5, "a=b": 0.25})]


def test_a_stdout_line_without_a_step_is_one_past_the_metrics_largest_step() -> None:
    """It was the count of reports + 1: after steps 1, 2 and 9, a bare `score=0.4` made a
    second measurement at step 4 (one export keeps only one of two equal steps)."""
    from vcli.metrics import MetricReader

    reader = MetricReader(("score", "loss"))
    for i, line in enumerate(["score=0.1 step=1", "score=0.2 step=2", "score=0.3 step=9", "score=0.4", "loss=0.5",
                              "score=0.5 step=9223372036854775807"]):
        assert reader.feed_stdout_line(line, float(i + 1)), line
    assert not reader.feed_stdout_line("score=0.6", 7.0)  # past int64, as `step=` beyond it: not a measurement
    steps = [(m.step_count, dict(m.metrics)) for m in reader.measurements]
    assert steps == [(1, {"score": 0.1}), (2, {"score": 0.2}), (9, {"score": 0.3}), (10, {"score": 0.4, "loss": 0.5}),
                     (2**63 - 1, {"score": 0.5})], steps


def test_a_trial_that_reported_another_tag_is_told_which() -> None:
    # "finished without reporting the metric [score]" of a trial that reported `Score` left
    # the user to find the misspelling in the trainer.
    from vcli.control.active import missing_metric_reason
    from vcli.metrics import MetricReader

    reader = MetricReader(("score",))
    lines = [json.dumps({"Score": "0.5", "global_step": "1", "timestamp": 1.0, "trial": "1", "checkpoint_path": ""}),
             json.dumps({"loss": "0.1", "accuracy\x1b[31m": "0.9", "global_step": "2"})]
    assert reader.feed_hypertune("\n".join(lines)) is False
    assert missing_metric_reason(("score",), reader) == (
        "The trial finished without reporting the metric [score] (report it with cloudml-hypertune, or print a line "
        "`score=VALUE`); it reported [Score, loss, accuracy\\x1b[31m] instead.")
    silent = MetricReader(("score",))
    assert missing_metric_reason(("score",), silent).endswith("`score=VALUE`).")


def test_a_trainer_that_reports_every_batch_keeps_a_bounded_even_curve(tmp_path: Path) -> None:
    """200,000 `score=` lines were 200,000 stored measurements: `list` and `describe` took 37 s
    and 900 MB, the controller 450 MB. The trial now keeps at most MEASUREMENT_LIMIT of them,
    whole for its first steps and evenly after, with the final (best and last) ones exact."""
    from vcli.metrics import MEASUREMENT_LIMIT

    script = (
        "import sys\n"
        "for step in range(1, 30001):\n"
        "    value = 0.9 if step == 12345 else step / 1e5\n"  # the best one is in the middle
        "    sys.stdout.write(f'score={value} step={step}\\n')\n")
    home, study, _ = script_study(tmp_path / "flood", tmp_path, script, "--metric=metric-id=score,goal=maximize",
                                  "--parameter-spec=parameter-id=x,type=double,min=0,max=1", "--max-trial-count=1",
                                  "--measurement-selection=best")
    [trial] = study["trials"]
    assert trial["state"] == "SUCCEEDED", trial
    assert trial["finalMeasurement"]["stepCount"] == "12345" and trial["finalMeasurement"]["metrics"][0]["value"] == 0.9
    steps = [int(m["stepCount"]) for m in trial["measurements"]]
    assert MEASUREMENT_LIMIT // 2 <= len(steps) <= MEASUREMENT_LIMIT + 8, len(steps)
    assert steps[0] == 1 and steps[-1] == 30000 and 12345 in steps and steps == sorted(steps)
    head = MEASUREMENT_LIMIT // 4
    assert steps[:head] == list(range(1, head + 1))  # the early steps rules compare at, whole
    gaps = sorted(b - a for a, b in zip(steps[head:], steps[head + 1:]))
    assert gaps[len(gaps) // 10] == gaps[-len(gaps) // 10] == 64, gaps[::50]  # an even stride, not a dense tail
    elapsed = [float(m["elapsedDuration"].rstrip("s")) for m in trial["measurements"]]
    assert elapsed == sorted(elapsed)


def test_the_metric_reader_parses_only_what_changed() -> None:
    """The controller reads a running trial's hypertune file every tick: a file that did not
    change is not parsed again, one that grew by whole lines (a trainer that appends) is parsed
    from where it was, and one the library rewrote (its last 100 reports) is parsed whole. The
    measurements are exactly those of a reader that parses every text whole."""
    from vcli.metrics import MetricReader

    def line(step: int) -> str:
        return json.dumps({"acc": str(step / 1000), "global_step": str(step), "timestamp": 1e9 + step}) + "\n"

    incremental, whole = MetricReader("acc"), MetricReader("acc")
    texts = []
    appended = ""
    for step in range(1, 151):  # a trainer that appends: each text is the last plus one line
        appended += line(step)
        texts.append(appended)
    texts.append(texts[-1])  # read again, unchanged
    texts.append(texts[-1] + '{"acc": "0.9", "glo')  # caught mid-write: an unfinished last line
    texts.append(texts[-3] + line(151))  # the line finished
    rewritten = [line(step) for step in range(152, 400)]
    texts += ["".join(rewritten[max(0, i - 99):i + 1]) for i in range(len(rewritten))]  # hypertune's own rewrite
    for i, text in enumerate(texts):
        before = incremental.parsed_lines
        assert incremental.feed_hypertune(text) == whole.feed_hypertune(text)
        whole._last_text = ""  # the reader without memory of its last text: every text parsed whole
        parsed = incremental.parsed_lines - before
        assert parsed <= text.count("\n") + 1
        if i == 150:
            assert parsed == 0, "an unchanged file was parsed again"
    assert incremental.measurements == whole.measurements and len(incremental.measurements) == 399
    assert incremental.parsed_lines < whole.parsed_lines / 2
    grown = MetricReader("acc")
    grown.feed_hypertune(texts[99])
    before = grown.parsed_lines
    grown.feed_hypertune(texts[100])
    assert grown.parsed_lines - before == 1, "a file that grew by one line is parsed from where it was"


def test_the_metric_reader_bounds_what_it_remembers() -> None:
    """Each report seen stayed in memory for ever (de-duplication of the hypertune file, which
    the library rewrites with its last 100 reports): bounded now, with no report read twice."""
    from vcli.metrics import MetricReader
    from vcli.spec import Goal, MeasurementSelectionType

    reader = MetricReader(("loss", "acc"), limit=64)
    reports = []
    for step in range(1, 5001):
        reports += [json.dumps({"loss": str(1 / step), "global_step": str(step), "timestamp": 1e9 + step}),
                    json.dumps({"acc": str(step % 997 / 1000), "global_step": str(step), "timestamp": 1e9 + step})]
        if step % 7 == 0 or step == 5000:  # the file as the library rewrites it, read now and then
            assert reader.feed_hypertune("\n".join(reports[-200:]))
            assert not reader.feed_hypertune("\n".join(reports[-200:]))  # the same file again: nothing new
    assert len(reader._seen) <= 1200 and 32 <= len(reader.measurements) <= 64 + 8
    assert all(set(m.metrics) == {"loss", "acc"} for m in reader.measurements)
    assert reader.measurements[0].step_count == 1 and reader.measurements[-1].step_count == 5000
    assert reader.final(Goal.MINIMIZE, MeasurementSelectionType.LAST_MEASUREMENT).step_count == 5000
    assert max(m.metrics["acc"] for m in reader.measurements) == 0.996  # the largest and smallest of each metric
    assert min(m.metrics["loss"] for m in reader.measurements) == 1 / 5000
    assert len(reader.times) == len(reader.elapsed) == len(reader.measurements)
    single = MetricReader("score", limit=16)
    for step in range(1, 1001):
        single.feed_stdout_line(f"score={-abs(step - 700)} step={step}", float(step))
    best = single.final(Goal.MAXIMIZE, MeasurementSelectionType.BEST_MEASUREMENT)
    assert best.step_count == 700 and len(single._stdout_seen) == 1


def test_stdout_reports_read_every_spelling_of_a_value_that_is_not_finite() -> None:
    """`score=NaN`, `-Infinity` (proto3, Java) and `+Inf` (Go) were never read (only `nan` and
    `inf`); Arabic-Indic digits were read as a number; a negative step dropped the line."""
    from vcli.metrics import MetricReader

    reader = MetricReader("score")
    for line in ("score=NaN step=1", "score=-Infinity step=2", "score=+Inf step=3", "score=0.5 step=-4"):
        assert reader.feed_stdout_line(line, 1.0), line
    assert not reader.feed_stdout_line("score=\u0661\u0662 step=5", 1.0)
    got = [(m.step_count, repr(m.metrics["score"])) for m in reader.measurements]
    assert got == [(1, "nan"), (2, "-inf"), (3, "inf"), (-4, "0.5")]


def test_metrics_reported_at_different_steps_are_said_so() -> None:
    """`acc` at step 1 and `loss` at step 2 were "finished without reporting the metric [acc,
    loss]": both were reported, never at one step (found by a probe)."""
    from vcli.control.active import missing_metric_reason
    from vcli.metrics import MetricReader

    reader = MetricReader(("acc", "loss"))
    for line in ("acc=0.5 step=1", "loss=0.2 step=2", "acc=0.6 step=3"):
        assert reader.feed_stdout_line(line, 1.0)
    assert missing_metric_reason(("acc", "loss"), reader) == (
        "The trial reported the metrics [acc, loss] but never all of them at one step: a multi-objective trial must "
        "report every metric with the same step (the same `global_step`, or `step=` on stdout).")
    only_acc = MetricReader(("acc", "loss"))
    only_acc.feed_stdout_line("acc=0.5 step=1", 1.0)
    assert missing_metric_reason(("acc", "loss"), only_acc).startswith(
        "The trial finished without reporting the metric [loss]")


def test_a_ctrl_c_as_soon_as_the_study_is_submitted_cancels_it(tmp_path: Path) -> None:
    """Ctrl-C right after `submitted successfully`, before the study's run had its own handler,
    ended vcli ("Interrupted.", 130) and left the study QUEUED or RUNNING with nobody driving
    it, trainers running (5 of 5 times; found by a probe)."""
    import signal

    home = tmp_path / "home"
    proc = spawn(home, "hp-tuning-jobs", "create", "--display-name=early", "--max-trial-count=6",
                 "--parallel-trial-count=3", "--algorithm=random-search",
                 "--parameter-spec=parameter-id=x,type=double,min=0,max=1", "--metric=metric-id=acc,goal=maximize",
                 "--worker-pool-spec=machine-type=n1-standard-4,container-image-uri=x",
                 "--command=python3,-c,import time; time.sleep(60)")
    try:
        study_id = job_id_from_stderr(read_stderr_until(proc, "submitted successfully", 60))
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    study = describe(home, "hp-tuning-jobs", study_id)
    assert study["state"] == "JOB_STATE_CANCELLED", study["state"]
    assert all(t["state"] in ("SUCCEEDED", "INFEASIBLE") for t in study.get("trials", [])), study.get("trials")
    assert not any(processes_with_env("VCLI_JOB_ID", t["customJob"].rsplit("/", 1)[-1]) for t in study.get("trials", []))


def test_stream_logs_of_a_study_says_how_each_trial_ended(tmp_path: Path) -> None:
    """A study's `stream-logs` prints, after each trial's own lines, one line for how the trial
    ended (task `trial-N`): SUCCEEDED with its final metric (INFO), INFEASIBLE with its reason
    (ERROR), each with its parameters; `--task-name` keeps to the replicas' lines."""
    pkg, echo = _toy(tmp_path)
    home = tmp_path / "home"
    r = _toy_study(home, pkg, echo, "--parameter-spec=parameter-id=x,type=integer,min=1,max=3",
                   "--parameter-spec=parameter-id=fail_above,values=2", "--algorithm=grid-search",
                   "--max-trial-count=3", "--parallel-trial-count=1", "--max-failed-trial-count=1")
    study = json.loads(r.stdout)
    assert [t["state"] for t in study["trials"]] == ["SUCCEEDED", "SUCCEEDED", "INFEASIBLE"], r.stderr
    logs = vcli(home, "hp-tuning-jobs", "stream-logs", study["name"].rsplit("/", 1)[1], timeout=60).stdout
    ended = [line.split("\t") for line in logs.splitlines() if "/" not in line.split("\t")[2]]
    assert [(sev, task) for sev, _, task, _ in ended] == [("INFO", "trial-1"), ("INFO", "trial-2"), ("ERROR", "trial-3")]
    assert ended[0][3] == "trial 1 SUCCEEDED: score=-5 (x=1 fail_above=2)"
    assert ended[2][3].startswith("trial 3 INFEASIBLE USER: ") and "non-zero status of 7" in ended[2][3]
    tasks = logs.splitlines()
    assert tasks.index("\t".join(ended[0])) > max(i for i, line in enumerate(tasks) if "\ttrial-1/" in line)
    only = vcli(home, "hp-tuning-jobs", "stream-logs", study["name"].rsplit("/", 1)[1], "--task-name=workerpool0-0",
                timeout=60).stdout
    assert only and all("/workerpool0-0\t" in line for line in only.splitlines())
