"""Katib Experiments (kubeflow.org/v1beta1) through `hp-tuning-jobs create --config`.

Three Experiments shaped like Katib's published examples (random, Bayesian optimisation with
medianstop, grid) run end to end on the local executor with a one-file trainer that reports
as Katib's StdOut collector reads (`Validation-accuracy=0.91` lines); the rest checks the
conversion: `--print-vertex`, the one `Note:` line, and what is refused in one line.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import vcli
from vcli import codec as cfg
from vcli.codec import katib
from vcli.errors import ConfigError

TRAINER = """\
import argparse
import time

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, required=True)
parser.add_argument("--num-layers", type=int, default=2)
parser.add_argument("--optimizer", default="sgd")
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--epochs", type=int, default=3)
a = parser.parse_args()
print(f"training with lr={a.lr} layers={a.num_layers} optimizer={a.optimizer}", flush=True)
bonus = {"sgd": 0.0, "adam": 0.05, "ftrl": -0.05}[a.optimizer]
for epoch in range(1, a.epochs + 1):
    accuracy = min(0.99, 0.4 + bonus + 0.02 * a.num_layers + epoch * (0.1 - abs(a.lr - 0.02) * 2))
    print(f"Train-accuracy={accuracy + 0.01:.4f}")
    print(f"Validation-accuracy={accuracy:.4f}", flush=True)
    time.sleep(0.02)
"""

#: A batch Job trial: the container's command passes the trial parameters as Katib's examples do.
JOB_TRIAL = """\
  trialTemplate:
    primaryContainerName: training-container
    trialParameters:
      - name: learningRate
        description: Learning rate for the training model
        reference: lr
      - name: numberLayers
        reference: num-layers
      - name: optimizer
        reference: optimizer
    trialSpec:
      apiVersion: batch/v1
      kind: Job
      spec:
        template:
          spec:
            containers:
              - name: training-container
                image: docker.io/example/mnist:v1
                command:
                  - "@PYTHON@"
                  - "@TRAINER@"
                  - "--batch-size=64"
                  - "--lr=${trialParameters.learningRate}"
                  - "--num-layers"
                  - "${trialParameters.numberLayers}"
                  - "--optimizer=${trialParameters.optimizer}"
            restartPolicy: Never
"""

RANDOM = """\
apiVersion: kubeflow.org/v1beta1
kind: Experiment
metadata:
  namespace: kubeflow
  name: katib-random
spec:
  objective:
    type: maximize
    goal: 0.999
    objectiveMetricName: Validation-accuracy
    additionalMetricNames:
      - Train-accuracy
  algorithm:
    algorithmName: random
  parallelTrialCount: 2
  maxTrialCount: 4
  maxFailedTrialCount: 2
  parameters:
    - name: lr
      parameterType: double
      feasibleSpace:
        min: "0.01"
        max: "0.03"
    - name: num-layers
      parameterType: int
      feasibleSpace:
        min: "2"
        max: "5"
    - name: optimizer
      parameterType: categorical
      feasibleSpace:
        list: [sgd, adam, ftrl]
""" + JOB_TRIAL

BAYESIAN_MEDIAN = """\
apiVersion: kubeflow.org/v1beta1
kind: Experiment
metadata:
  name: katib-bayesian-median
spec:
  objective:
    type: maximize
    objectiveMetricName: Validation-accuracy
  algorithm:
    algorithmName: bayesianoptimization
    algorithmSettings:
      - name: random_state
        value: "10"
  earlyStopping:
    algorithmName: medianstop
    algorithmSettings:
      - name: min_trials_required
        value: "2"
      - name: start_step
        value: "2"
  parallelTrialCount: 2
  maxTrialCount: 7
  maxFailedTrialCount: 3
  parameters:
    - name: lr
      parameterType: double
      feasibleSpace:
        min: "0.01"
        max: "0.5"
    - name: num-layers
      parameterType: int
      feasibleSpace:
        min: "2"
        max: "4"
    - name: optimizer
      parameterType: categorical
      feasibleSpace:
        list: [sgd, adam]
""" + JOB_TRIAL

GRID = """\
apiVersion: kubeflow.org/v1beta1
kind: Experiment
metadata:
  name: katib-grid
spec:
  objective:
    type: maximize
    goal: 0.999
    objectiveMetricName: Validation-accuracy
  algorithm:
    algorithmName: grid
  parallelTrialCount: 3
  maxTrialCount: 6
  parameters:
    - name: lr
      parameterType: double
      feasibleSpace:
        min: "0.01"
        max: "0.03"
        step: "0.01"
    - name: num-layers
      parameterType: discrete
      feasibleSpace:
        list: ["3"]
    - name: optimizer
      parameterType: categorical
      feasibleSpace:
        list: [sgd, adam]
""" + JOB_TRIAL


def _experiment(tmp_path: Path, text: str, name: str = "experiment.yaml") -> Path:
    trainer = tmp_path / "train.py"
    trainer.write_text(TRAINER)
    path = tmp_path / name
    path.write_text(text.replace("@PYTHON@", sys.executable).replace("@TRAINER@", str(trainer)))
    return path


def _run(tmp_path: Path, text: str, *flags: str) -> tuple[dict[str, Any], str]:
    config = _experiment(tmp_path, text)
    r = vcli(tmp_path / "home", "hp-tuning-jobs", "create", f"--config={config}", "--executor=local",
             "--format=json", *flags, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout), r.stderr


def _value(trial: dict[str, Any]) -> float:
    return float(trial["finalMeasurement"]["metrics"][0]["value"])


def _expected(trial: dict[str, Any], best_report: bool = True) -> float:
    """The trainer's own Validation-accuracy for the trial's parameters (its best report)."""
    p = {x["parameterId"]: x["value"] for x in trial["parameters"]}
    bonus = {"sgd": 0.0, "adam": 0.05, "ftrl": -0.05}[p["optimizer"]]
    values = [round(min(0.99, 0.4 + bonus + 0.02 * int(p["num-layers"]) + e * (0.1 - abs(p["lr"] - 0.02) * 2)), 4)
              for e in (1, 2, 3)]
    return max(values) if best_report else values[-1]


def _best_line(stderr: str) -> str:
    return next(line for line in stderr.splitlines() if line.startswith("Best trial:"))


def test_a_random_experiment_runs_with_stdout_metrics(tmp_path: Path) -> None:
    study, stderr = _run(tmp_path, RANDOM)
    assert study["state"] == "JOB_STATE_SUCCEEDED"
    assert study["displayName"] == "katib-random"
    assert study["studySpec"]["algorithm"] == "RANDOM_SEARCH"
    assert study["maxTrialCount"] == 4 and study["parallelTrialCount"] == 2 and study["maxFailedTrialCount"] == 2
    trials = study["trials"]
    assert len(trials) == 4 and {t["state"] for t in trials} == {"SUCCEEDED"}
    for t in trials:  # the metric parsed from the trainer's stdout is the one it printed
        assert _value(t) == pytest.approx(_expected(t), abs=1e-4)
        p = {x["parameterId"]: x["value"] for x in t["parameters"]}
        assert 0.01 <= p["lr"] <= 0.03 and 2 <= p["num-layers"] <= 5 and p["optimizer"] in ("sgd", "adam", "ftrl")
    best = max(trials, key=_value)
    assert f"Best trial: {best['id']} Validation-accuracy={_value(best):g}" in _best_line(stderr)
    notes = [line for line in stderr.splitlines() if line.startswith("Note: [--config] Katib")]
    assert len(notes) == 1 and "spec.objective.additionalMetricNames" in notes[0] and "metadata.namespace" in notes[0]


def test_a_bayesian_experiment_with_medianstop_runs(tmp_path: Path) -> None:
    study, stderr = _run(tmp_path, BAYESIAN_MEDIAN)
    assert study["state"] == "JOB_STATE_SUCCEEDED"
    spec = study["studySpec"]
    assert spec["algorithm"] == "ALGORITHM_UNSPECIFIED" and "medianAutomatedStoppingSpec" in spec
    assert "seed 10" in stderr  # algorithmSettings random_state
    trials = study["trials"]
    assert len(trials) == 7
    assert {t["state"] for t in trials} <= {"SUCCEEDED", "STOPPING"}
    for t in trials:
        if "earlyStoppingRule" not in t:
            assert _value(t) == pytest.approx(_expected(t), abs=1e-4)
    best = max(trials, key=_value)
    assert f"Best trial: {best['id']} " in _best_line(stderr)
    note = next(line for line in stderr.splitlines() if line.startswith("Note: [--config] Katib"))
    assert "spec.earlyStopping.algorithmSettings[min_trials_required, start_step]" in note


def test_a_grid_experiment_runs_every_point(tmp_path: Path) -> None:
    study, stderr = _run(tmp_path, GRID)
    assert study["state"] == "JOB_STATE_SUCCEEDED"
    assert study["studySpec"]["algorithm"] == "GRID_SEARCH"
    trials = study["trials"]
    assert len(trials) == 6 and {t["state"] for t in trials} == {"SUCCEEDED"}
    points = {(round(p["lr"], 6), p["optimizer"])
              for p in ({x["parameterId"]: x["value"] for x in t["parameters"]} for t in trials)}
    assert points == {(lr, opt) for lr in (0.01, 0.02, 0.03) for opt in ("sgd", "adam")}
    best = max(trials, key=_value)
    assert {x["parameterId"]: x["value"] for x in best["parameters"]}["optimizer"] == "adam"
    assert _value(best) == pytest.approx(0.4 + 0.05 + 0.06 + 0.3, abs=1e-4)  # lr 0.02, 3 epochs
    assert "Best trial:" in _best_line(stderr)


def test_an_unsupported_algorithm_is_refused_in_one_line(tmp_path: Path) -> None:
    config = _experiment(tmp_path, RANDOM.replace("algorithmName: random", "algorithmName: cmaes"))
    r = vcli(tmp_path / "home", "hp-tuning-jobs", "create", f"--config={config}", "--executor=local", timeout=60)
    assert r.returncode == 1, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "spec.algorithm.algorithmName" in r.stderr and "[cmaes]" in r.stderr
    assert "random, grid, bayesianoptimization, tpe" in r.stderr


def test_print_vertex_prints_a_vertex_config_and_runs_nothing(tmp_path: Path) -> None:
    text = RANDOM.replace("  maxFailedTrialCount: 2\n", "  maxFailedTrialCount: 2\n  resumePolicy: LongRunning\n")
    text = text.replace("            restartPolicy: Never\n", "            restartPolicy: Never\n"
                        "            nodeSelector: {gpu: a100}\n")
    config = _experiment(tmp_path, text)
    r = vcli(tmp_path / "home", "hp-tuning-jobs", "create", f"--config={config}", "--print-vertex", timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("# with: vcli hp-tuning-jobs create --config=THIS_FILE --goal-value=0.999\n")
    spec, name, _ = cfg.hp_tuning_job_from_document(cfg.parse_yaml(r.stdout, "<stdout>"), "<stdout>")
    assert name == "katib-random" and spec.max_trial_count == 4 and spec.parallel_trial_count == 2
    assert [p.parameter_id for p in spec.study_spec.parameters] == ["lr", "num-layers", "optimizer"]
    assert spec.study_spec.measurement_selection_type.value == "BEST_MEASUREMENT"  # Katib's default: the best report
    container = spec.trial_job_spec.worker_pool_specs[0].container_spec
    assert container is not None and container.command[2:] == ("--batch-size=64",)
    notes = [line for line in r.stderr.splitlines() if line.startswith("Note:")]
    assert len(notes) == 1, r.stderr
    for ignored in ("spec.resumePolicy", "metadata.namespace", "spec.objective.additionalMetricNames",
                    "spec.trialTemplate.trialSpec.spec.template.spec.nodeSelector"):
        assert ignored in notes[0]
    assert "submitted" not in r.stderr and not (tmp_path / "home" / "jobs").exists()


# --------------------------------------------------------------------------- the conversion alone


def _convert(text: str) -> katib.Conversion:
    return katib.convert(cfg.parse_yaml(text.replace("@PYTHON@", "python3").replace("@TRAINER@", "t.py"), "x.yaml"), "x.yaml")


def test_a_flag_named_otherwise_renames_the_parameter_and_steps_become_values() -> None:
    text = GRID.replace('"--lr=${trialParameters.learningRate}"', '"--learning_rate=${trialParameters.learningRate}"')
    text = text.replace("  maxTrialCount: 6\n", "")
    doc = _convert(text).document
    params = doc["studySpec"]["parameters"]
    assert params[0] == {"parameterId": "learning_rate", "discreteValueSpec": {"values": [0.01, 0.02, 0.03]}}
    assert doc["maxTrialCount"] == 6  # a grid without maxTrialCount runs its every point
    assert "--learning_rate=${trialParameters.learningRate}" not in doc["trialJobSpec"]["workerPoolSpecs"][0]["containerSpec"]["command"]


@pytest.mark.parametrize(("old", "new", "expected"), [
    ('"--lr=${trialParameters.learningRate}"', '"python train.py --lr=${trialParameters.learningRate}"',
     "inside a larger value"),
    ("kind: Job", "kind: MPIJob", "[MPIJob] is not run by vcli"),
    ("  parallelTrialCount:", "  metricsCollectorSpec:\n    collector: {kind: File}\n  parallelTrialCount:",
     "[File] is not read by vcli"),
    ("algorithmName: random", "algorithmName: hyperband", "--early-stopping=hyperband"),
    ("  maxTrialCount: 4\n", "", "spec.maxTrialCount"),
    ("reference: lr", "reference: ${trialSpec.Name}", "CLOUD_ML_TRIAL_ID"),
])
def test_what_vcli_cannot_run_is_refused_in_one_line(old: str, new: str, expected: str) -> None:
    assert old in RANDOM
    with pytest.raises(ConfigError) as e:
        _convert(RANDOM.replace(old, new))
    assert expected in str(e.value) and "\n" not in str(e.value)


def test_a_tfjob_trial_becomes_chief_and_worker_pools() -> None:
    trial = textwrap.dedent("""\
      trialTemplate:
        trialParameters:
          - {name: learningRate, reference: lr}
        trialSpec:
          apiVersion: kubeflow.org/v1
          kind: TFJob
          spec:
            tfReplicaSpecs:
              Worker:
                replicas: 3
                restartPolicy: OnFailure
                template:
                  spec:
                    containers:
                      - name: tensorflow
                        image: example/tf:1
                        command: [python, /opt/mnist.py, "--learning-rate=${trialParameters.learningRate}"]
                        env: [{name: MODE, value: fast}]
    """)
    text = RANDOM.split("  trialTemplate:")[0].replace("""    - name: num-layers
      parameterType: int
      feasibleSpace:
        min: "2"
        max: "5"
    - name: optimizer
      parameterType: categorical
      feasibleSpace:
        list: [sgd, adam, ftrl]
""", "") + textwrap.indent(trial, "  ")
    doc = katib.convert(cfg.parse_yaml(text, "x.yaml"), "x.yaml").document
    pools = doc["trialJobSpec"]["workerPoolSpecs"]
    assert [p["replicaCount"] for p in pools] == [1, 2]  # the first worker is the chief, as on Vertex
    assert pools[0]["containerSpec"] == {"imageUri": "example/tf:1", "command": ["python", "/opt/mnist.py"],
                                         "env": [{"name": "MODE", "value": "fast"}]}
    assert doc["studySpec"]["parameters"][0]["parameterId"] == "learning-rate"
    cfg.hp_tuning_job_from_document(doc, "x.yaml")  # a valid Vertex document
