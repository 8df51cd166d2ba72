"""End-to-end Population Based Training through the real CLI: real trial processes that
save and restore checkpoints in AIP_CHECKPOINT_DIR, exploits that copy them.

The toy trainer is Ray's PBT toy: a "model" whose score grows fastest when the learning rate
is close to an optimum that moves with the step, so a member that inherits a good state and
keeps exploring beats one that keeps its initial learning rate.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
from pathlib import Path

import pytest

from tests.helpers import describe, job_id_from_stderr, read_stderr_until, spawn, vcli, wait_for
from tests.kit import PBT_STUDY, PBT_TOY


def _study(tmp_path: Path, *, population: int = 4, max_trials: int = 16, extra: str = "", flags: tuple[str, ...] = ()):
    import sys

    script = tmp_path / "toy.py"
    script.write_text(PBT_TOY)
    config = tmp_path / "pbt.yaml"
    config.write_text(PBT_STUDY.format(max_trials=max_trials, population=population, python=sys.executable, script=script,
                                       extra=extra))
    return vcli(tmp_path / "home", "hp-tuning-jobs", "create", f"--config={config}", "--seed=11", "--format=json", *flags,
                timeout=600)


def _params(t: dict) -> dict:
    return {p["parameterId"]: p["value"] for p in t["parameters"]}


def _steps(t: dict) -> list[int]:
    return [int(m["stepCount"]) for m in t.get("measurements", [])]


def test_pbt_exploits_copy_checkpoints_and_explore(tmp_path: Path) -> None:
    r = _study(tmp_path)
    assert r.returncode == 0, r.stderr[-4000:]
    study = json.loads(r.stdout)
    assert study["state"] == "JOB_STATE_SUCCEEDED"
    trials = {t["id"]: t for t in study["trials"]}
    members = {t["populationBasedTraining"]["member"] for t in trials.values()}
    assert members == {0, 1, 2, 3}
    exploited = [t for t in trials.values() if "parentTrialId" in t["populationBasedTraining"]]
    assert exploited, "no exploit happened"
    home = tmp_path / "home"
    logs = vcli(home, "hp-tuning-jobs", "stream-logs", study["name"].rsplit("/", 1)[1], "--task-name=workerpool0-0")
    by_task: dict[str, list[str]] = {}
    for line in logs.stdout.splitlines():
        _severity, _ts, task, message = line.split("\t", 3)
        by_task.setdefault(task, []).append(message)
    for t in exploited:
        lin = t["populationBasedTraining"]
        parent = trials[lin["parentTrialId"]]
        start = int(lin["startStep"])
        # It started from the parent's checkpoint: the step the parent had reported, and it
        # reports on from the next step.
        assert start in _steps(parent) and _steps(t)[0] == start + 1, (start, _steps(parent), _steps(t))
        # Its trainer restored the parent's state at that step (the score the parent reported).
        log = "\n".join(by_task[f"trial-{t['id']}/workerpool0-0"])
        parent_score = next(m["metrics"][0]["value"] for m in parent["measurements"] if int(m["stepCount"]) == start)
        assert f"restored step={start} score={parent_score:.6f}" in log
        # The hyperparameters are the parent's, perturbed by a factor or resampled, in bounds.
        assert lin["inheritedParameters"] == parent["parameters"]
        lr, inherited = _params(t)["lr"], _params(parent)["lr"]
        assert 0.001 <= lr <= 0.2
        ratio = lr / inherited
        perturbed = any(math.isclose(ratio, f, rel_tol=1e-6) for f in (0.8, 1.2)) or lr in (0.001, 0.2)
        assert perturbed or lr != inherited  # resampled otherwise
        # The member it replaced was stopped as a PBT exploit, and ended SUCCEEDED.
    replaced = [t for t in trials.values() if t.get("earlyStoppingRule") == "pbt"]
    assert len(replaced) == len(exploited)
    assert all(t["state"] == "SUCCEEDED" and t["stopReason"].startswith("PBT") for t in replaced)
    # Every member trained to the last step; the best trial is one of those.
    finals = [t for t in trials.values() if t.get("finalMeasurement", {}).get("stepCount") == "8"]
    assert {t["populationBasedTraining"]["member"] for t in finals} == members
    best = trials[study["bestTrialId"]]
    assert best["finalMeasurement"]["stepCount"] == "8"
    assert "replaced" in r.stderr
    # The best trial's lineage, as a schedule: contiguous step ranges ending at the best trial.
    legs = study["pbtSchedule"]
    assert legs[-1]["trialId"] == best["id"] and legs[0]["fromStep"] == 0 and legs[-1]["toStep"] == 8
    assert all(a["toStep"] == b["fromStep"] for a, b in zip(legs, legs[1:]))
    for leg in legs[1:]:
        assert trials[leg["trialId"]]["populationBasedTraining"]["startStep"] == str(leg["fromStep"])
    assert "its schedule (PBT lineage):" in r.stderr


def test_a_member_that_ended_before_the_other_reported_is_still_exploited(tmp_path: Path) -> None:
    """What CI saw under load with TensorFlow: member 0 (trial 1) diverged and trained to the
    end before member 1's first report, so its judgement at the first boundary was still
    waiting. Once member 1 gets there, trial 1 ranks last and its member goes on as a new
    trial from member 1's checkpoint; trial 1 itself is not stopped (it had ended)."""
    marker = tmp_path / "trial-1-done"
    r = _study(tmp_path, population=2, max_trials=4, extra=f",--mode=staggered,--marker={marker}")
    assert r.returncode == 0, r.stderr[-4000:]
    study = json.loads(r.stdout)
    assert study["state"] == "JOB_STATE_SUCCEEDED"
    trials = {t["id"]: t for t in study["trials"]}
    first, second = trials["1"], trials["2"]
    assert first["state"] == "SUCCEEDED" and _steps(first)[-1] == 8 and "earlyStoppingRule" not in first
    assert _steps(second)[0] == 1
    heir = trials["3"]
    lin = heir["populationBasedTraining"]
    assert lin["member"] == 0 and lin["parentTrialId"] == "2", lin
    assert "Trial 1 is replaced (it trained to the end; its member goes on): PBT: trial 1 (score 0 at step 2)" in r.stderr
    logs = vcli(tmp_path / "home", "hp-tuning-jobs", "stream-logs", study["name"].rsplit("/", 1)[1],
                "--task-name=workerpool0-0")
    by_task: dict[str, list[str]] = {}
    for line in logs.stdout.splitlines():
        _severity, _ts, task, message = line.split("\t", 3)
        by_task.setdefault(task, []).append(message)
    _check_lineage(trials, by_task)
    last = max((t for t in trials.values() if t["populationBasedTraining"]["member"] == 0), key=lambda t: int(t["id"]))
    assert _steps(last)[-1] == 8 and last["state"] == "SUCCEEDED"


def _check_lineage(trials: dict[str, dict], by_task: dict[str, list[str]]) -> None:
    """Every exploited trial resumed from its parent's checkpoint at its start step; no trial
    was started twice (a restart would restore its own checkpoint: a second `restored`)."""
    for t in trials.values():
        lin = t["populationBasedTraining"]
        restored = [m for m in by_task.get(f"trial-{t['id']}/workerpool0-0", []) if m.startswith("restored ")]
        if "parentTrialId" not in lin:
            assert restored == [], (t["id"], restored)
            continue
        start = int(lin["startStep"])
        assert start in _steps(trials[lin["parentTrialId"]]) and _steps(t)[0] == start + 1, (t["id"], lin)
        assert len(restored) == 1 and restored[0].startswith(f"restored step={start} "), (t["id"], restored)


def test_a_pbt_study_survives_its_controller_and_resumes(tmp_path: Path) -> None:
    # kill -9 of the controller after the first exploit: the members go on training (replicas
    # outlive their controller), `resume` re-attaches them, judges them from their latest
    # step, and every member still trains to maxStepCount with its lineage intact.
    script = tmp_path / "toy.py"
    script.write_text(PBT_TOY)
    config = tmp_path / "pbt.yaml"
    config.write_text(PBT_STUDY.format(max_trials=16, population=4, python=sys.executable, script=script,
                                       extra=", --pause=1.0"))
    home = tmp_path / "home"
    proc = spawn(home, "hp-tuning-jobs", "create", f"--config={config}", "--seed=11", "--format=json")
    try:
        study_id = job_id_from_stderr(read_stderr_until(proc, "submitted successfully", 60))
        read_stderr_until(proc, "is replaced", 120)
        wait_for(lambda: any("parentTrialId" in t["populationBasedTraining"]
                             for t in describe(home, "hp-tuning-jobs", study_id).get("trials", [])), 30, "an exploit")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    before = describe(home, "hp-tuning-jobs", study_id)
    assert before["state"] == "JOB_STATE_RUNNING" and any(t["state"] == "ACTIVE" for t in before["trials"])
    r = vcli(home, "hp-tuning-jobs", "resume", study_id, "--format=json", timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    study = json.loads(r.stdout)
    assert study["state"] == "JOB_STATE_SUCCEEDED"
    trials = {t["id"]: t for t in study["trials"]}
    assert {t["state"] for t in trials.values()} == {"SUCCEEDED"}
    finals = [t for t in trials.values() if t["finalMeasurement"]["stepCount"] == "8"]
    assert {t["populationBasedTraining"]["member"] for t in finals} == {0, 1, 2, 3}
    logs = vcli(home, "hp-tuning-jobs", "stream-logs", study_id, "--task-name=workerpool0-0")
    by_task: dict[str, list[str]] = {}
    for line in logs.stdout.splitlines():
        _severity, _ts, task, message = line.split("\t", 3)
        by_task.setdefault(task, []).append(message)
    _check_lineage(trials, by_task)
    legs = study["pbtSchedule"]
    assert legs[-1]["trialId"] == study["bestTrialId"] and legs[0]["fromStep"] == 0 and legs[-1]["toStep"] == 8


@pytest.mark.docker
def test_pbt_study_in_containers_copies_checkpoints_between_bind_mounts(tmp_path: Path) -> None:
    # Every member a container on the real engine: an exploit copies the donor's checkpoint
    # out of its bind-mounted AIP_CHECKPOINT_DIR into the new container's.
    from tests.harness.docker_env import ensure_docker

    client = ensure_docker()
    study_spec = {
        "displayName": "pbt-docker", "maxTrialCount": 12, "parallelTrialCount": 4,
        "studySpec": {
            "metrics": [{"metricId": "score", "goal": "MAXIMIZE"}], "algorithm": "POPULATION_BASED_TRAINING",
            "populationBasedTrainingSpec": {"populationSize": 4, "perturbationIntervalSteps": 2, "maxStepCount": 8},
            "parameters": [{"parameterId": "lr", "doubleValueSpec": {"minValue": 0.001, "maxValue": 0.2},
                            "scaleType": "UNIT_LOG_SCALE"}]},
        "trialJobSpec": {"workerPoolSpecs": [{
            "machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": 1,
            "containerSpec": {"imageUri": "vcli-trainer:latest", "command": ["python3", "-c", PBT_TOY],
                              "args": ["--steps=8", "--pause=0.6"]}}]},
    }
    config = tmp_path / "pbt.json"
    config.write_text(json.dumps(study_spec))
    home = tmp_path / "home"
    r = vcli(home, "hp-tuning-jobs", "create", "--executor=docker", f"--config={config}", "--seed=11",
             "--format=json", timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    study = json.loads(r.stdout)
    assert study["state"] == "JOB_STATE_SUCCEEDED"
    trials = {t["id"]: t for t in study["trials"]}
    assert any("parentTrialId" in t["populationBasedTraining"] for t in trials.values()), "no exploit happened"
    finals = [t for t in trials.values() if t["finalMeasurement"]["stepCount"] == "8"]
    assert {t["populationBasedTraining"]["member"] for t in finals} == {0, 1, 2, 3}
    logs = vcli(home, "hp-tuning-jobs", "stream-logs", study["name"].rsplit("/", 1)[1], "--task-name=workerpool0-0")
    by_task: dict[str, list[str]] = {}
    for line in logs.stdout.splitlines():
        _severity, _ts, task, message = line.split("\t", 3)
        by_task.setdefault(task, []).append(message)
    _check_lineage(trials, by_task)
    for t in trials.values():
        job_id = t["customJob"].rsplit("/", 1)[-1]
        assert not client.containers.list(all=True, filters={"label": f"vcli.job={job_id}"})


def test_a_trainer_without_checkpoints_skips_exploits_and_the_study_goes_on(tmp_path: Path) -> None:
    r = _study(tmp_path, extra=",--mode=no-checkpoint")
    assert r.returncode == 0, r.stderr[-3000:]
    study = json.loads(r.stdout)
    assert study["state"] == "JOB_STATE_SUCCEEDED"
    assert all("parentTrialId" not in t["populationBasedTraining"] for t in study["trials"])
    assert len(study["trials"]) == 4
    assert "has no checkpoint in its AIP_CHECKPOINT_DIR" in r.stderr and "is skipped" in r.stderr


def test_a_metric_without_steps_is_infeasible_with_a_reason(tmp_path: Path) -> None:
    r = _study(tmp_path, extra=",--mode=no-step", flags=("--max-failed-trial-count=10",))
    study = json.loads(r.stdout)
    assert study["state"] == "JOB_STATE_FAILED"
    assert all(t["state"] == "INFEASIBLE" and "without one" in t["infeasibleReason"] for t in study["trials"])


@pytest.mark.parametrize(
    "change, message",
    [
        ("populationSize: 4", "populationSize"),
        ("quantileFraction: 0.25", "quantileFraction"),
        ("perturbationFactors: [0.8, 1.2]", "perturbationFactors"),
    ],
)
def test_bad_pbt_settings_are_one_line(tmp_path: Path, change: str, message: str) -> None:
    bad = {"populationSize: 4": "populationSize: 1", "quantileFraction: 0.25": "quantileFraction: 0.6",
           "perturbationFactors: [0.8, 1.2]": "perturbationFactors: [0.8, -1.0]"}[change]
    import sys

    config = tmp_path / "bad.yaml"
    config.write_text(PBT_STUDY.format(max_trials=16, population=4, python=sys.executable, script="toy.py", extra="")
                      .replace(change, bad))
    r = vcli(tmp_path / "home", "hp-tuning-jobs", "create", f"--config={config}", "--validate-only")
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert message in r.stderr and "populationBasedTrainingSpec" in r.stderr


TF_PBT = """
displayName: digits-pbt
maxTrialCount: 6
studySpec:
  metrics: [{metricId: accuracy, goal: MAXIMIZE}]
  algorithm: POPULATION_BASED_TRAINING
  populationBasedTrainingSpec: {populationSize: 2, perturbationIntervalSteps: 4, quantileFraction: 0.5, maxStepCount: 12}
  parameters:
  - parameterId: learning_rate
    doubleValueSpec: {minValue: 0.0005, maxValue: 0.3}
    scaleType: UNIT_LOG_SCALE
"""


def test_pbt_with_the_real_tensorflow_trainer(tmp_path: Path) -> None:
    """Under a CPU hog (one busy process per core beside the two TensorFlow members): PBT must
    not depend on the machine being idle. On a loaded machine one member starts TensorFlow
    seconds after the other (CI saw one reach step 5 before the other's first report); members
    are compared by their values at each boundary, so the drift costs no exploit."""
    import subprocess

    config = tmp_path / "pbt.yaml"
    config.write_text(TF_PBT)
    home = tmp_path / "home"
    hogs = [subprocess.Popen([sys.executable, "-S", "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        r = vcli(home, "hp-tuning-jobs", "create", f"--config={config}", "--seed=3", "--format=json",
                 "--worker-pool-spec=machine-type=n1-standard-4,replica-count=1,local-package-path=.,python-module=trainer.task",
                 # Small batches make an epoch last a second or more: PBT reads reports while the
                 # trainer runs, so an epoch must outlast the controller's tick to be judged at it.
                 # Two boundaries (4, 8) before the last step leave a donor that has not finished.
                 "--args=--epochs=12,--batch_size=8", timeout=900)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert r.returncode == 0, r.stderr[-4000:]
    study = json.loads(r.stdout)
    assert study["state"] == "JOB_STATE_SUCCEEDED"
    trials = {t["id"]: t for t in study["trials"]}
    exploited = [t for t in trials.values() if "parentTrialId" in t["populationBasedTraining"]]
    assert exploited, r.stderr[-3000:]
    logs = vcli(home, "hp-tuning-jobs", "stream-logs", study["name"].rsplit("/", 1)[1], "--task-name=workerpool0-0")
    text = {}
    for line in logs.stdout.splitlines():
        _severity, _ts, task, message = line.split("\t", 3)
        text.setdefault(task, []).append(message)
    for t in exploited:
        start = int(t["populationBasedTraining"]["startStep"])
        lines = text[f"trial-{t['id']}/workerpool0-0"]
        # TensorFlow restored the parent's checkpoint of that epoch and trained on from the next.
        assert any(line.startswith(f"restored ckpt-{start} (epoch {start})") for line in lines), lines[:5]
        assert _steps(t)[0] == start + 1
        assert t["state"] == "SUCCEEDED"
