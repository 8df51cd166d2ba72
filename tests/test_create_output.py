"""What scripts and notebooks read from `create`: gcloud's status lines in gcloud's order
(foreground and `--async`, custom jobs and studies), the interpreter's console scripts on
the replicas' PATH, and a whole job passed as `--config` named for what it is. Real vcli
processes and trainers."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import vcli

POOL = "--worker-pool-spec=machine-type=n1-standard-4,replica-count=1,container-image-uri=python"
TRAIN = f"--command={sys.executable},-c,print('trained')"
REPORT = ("import json, os\n"
          "with open(os.environ['CLOUD_ML_HP_METRIC_FILE'], 'a') as f:\n"
          "    f.write(json.dumps({'m': '0.5', 'global_step': '1'}) + '\\n')\n")
STUDY = ("--parameter-spec=parameter-id=x,type=double,min=0,max=1", "--metric=metric-id=m,goal=maximize",
         "--max-trial-count=1", "--algorithm=random-search")


def _reporter(root: Path) -> str:
    """--command of a trainer that reports the studies' metric."""
    path = root / "report.py"
    path.write_text(REPORT)
    return f"--command={sys.executable},{path}"


def _custom_job_lines(job_id: str) -> list[str]:
    """gcloud's lines (lib/googlecloudsdk/command_lib/ai/custom_jobs), with vcli's commands."""
    return [f"CustomJob [projects/local/locations/local/customJobs/{job_id}] is submitted successfully.", "",
            "Your job is still active. You may view the status of your job with the command", "",
            f"  $ vcli custom-jobs describe {job_id}", "", "or continue streaming the logs with the command", "",
            f"  $ vcli custom-jobs stream-logs {job_id}"]


def _study_lines(study_id: str) -> list[str]:
    return [f"Hyperparameter tuning job [{study_id}] submitted successfully.", "",
            "Your job is still active. You may view the status of your job with the command", "",
            f"  $ vcli hp-tuning-jobs describe {study_id}", "", "Job State: JOB_STATE_QUEUED"]


@pytest.mark.parametrize("async_", [False, True], ids=["foreground", "async"])
def test_custom_job_create_prints_gcloud_lines_first_in_gcloud_order(tmp_path: Path, async_: bool) -> None:
    """The `describe` hint is the 5th line and the `stream-logs` one the 9th, as gcloud's
    after its endpoint line, whatever notices the job has (this one has one: an image whose
    command runs as a process)."""
    r = vcli(tmp_path / "home", "custom-jobs", "create", "--display-name=lines", POOL, TRAIN, "--executor=local",
             *(["--async"] if async_ else []), timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    job_id = re.match(r"CustomJob \[projects/local/locations/local/customJobs/(\d+)\]", lines[0])[1]  # type: ignore[index]
    assert lines[:9] == _custom_job_lines(job_id), r.stderr
    assert any(line.startswith("Note: workerpool0 runs its command as a process on this host") for line in lines[9:])
    assert "Python" not in r.stderr  # a `sh -c` command is no Python


@pytest.mark.parametrize("async_", [False, True], ids=["foreground", "async"])
def test_study_create_prints_gcloud_lines_first_in_gcloud_order(tmp_path: Path, async_: bool) -> None:
    r = vcli(tmp_path / "home", "hp-tuning-jobs", "create", "--display-name=lines", POOL, _reporter(tmp_path),
             "--executor=local",
             *STUDY, *(["--async"] if async_ else []), timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    study_id = re.match(r"Hyperparameter tuning job \[(\d+)\]", lines[0])[1]  # type: ignore[index]
    assert lines[:7] == _study_lines(study_id), r.stderr
    if async_:
        assert lines[7:11] == ["", "Follow its trials with the command", "",
                               f"  $ vcli hp-tuning-jobs stream-logs {study_id}"], r.stderr


def test_the_chosen_interpreters_console_scripts_run_by_name(tmp_path: Path) -> None:
    """VCLI_PYTHON names a virtual environment's python: a console script of that environment
    (as `torchrun` is of PyTorch's) runs by its bare name, as in an image."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    tool = venv / "bin" / "mytorchrun"
    tool.write_text(f"#!{venv}/bin/python\nimport sys\nprint('launched by', sys.prefix, sys.argv[1:])\n")
    tool.chmod(0o755)
    r = vcli(tmp_path / "home", "custom-jobs", "create", "--display-name=console-script", POOL,
             "--command=mytorchrun,--nproc-per-node=1", "--executor=local", timeout=120, VCLI_PYTHON=str(venv / "bin" / "python"))
    assert r.returncode == 0, r.stderr
    assert f"launched by {venv} ['--nproc-per-node=1']" in r.stdout, r.stdout + r.stderr


CUSTOM_JOB_BODY = """\
displayName: trained-before
jobSpec:
  workerPoolSpecs:
  - machineSpec: {machineType: n1-standard-4}
    replicaCount: 1
    containerSpec: {imageUri: python, command: [python3, -c, "print(1)"]}
"""


@pytest.mark.parametrize("extra,what", [
    ("", "is a whole CustomJob (a REST request body), but --config takes a CustomJobSpec: the mapping under its "
         "[jobSpec] key"),
    ("name: projects/p/locations/l/customJobs/1\nstate: JOB_STATE_SUCCEEDED\n",
     "is a `describe` output of a CustomJob, but --config takes a CustomJobSpec"),
], ids=["rest-body", "describe-output"])
def test_a_whole_custom_job_as_config_is_named_for_what_it_is(tmp_path: Path, extra: str, what: str) -> None:
    config = tmp_path / "job.yaml"
    config.write_text(CUSTOM_JOB_BODY + extra)
    r = vcli(tmp_path / "home", "custom-jobs", "create", "--display-name=x", f"--config={config}", "--validate-only")
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"ERROR: (vcli.custom-jobs.create) Invalid value for [--config]: {config} {what}"), r.stderr
    r = vcli(tmp_path / "home", "hp-tuning-jobs", "create", "--display-name=x", f"--config={config}", "--validate-only")
    assert r.returncode == 1 and "is a CustomJob, not a HyperparameterTuningJob" in r.stderr, r.stderr


def test_a_study_describe_output_as_config_names_its_output_only_fields(tmp_path: Path) -> None:
    home = tmp_path / "home"
    r = vcli(home, "hp-tuning-jobs", "create", "--display-name=first", POOL, _reporter(tmp_path), "--executor=local",
             *STUDY,
             "--format=value(name.basename())", timeout=120)
    assert r.returncode == 0, r.stderr
    described = vcli(home, "hp-tuning-jobs", "describe", r.stdout.strip()).stdout
    config = tmp_path / "study.yaml"
    config.write_text(described)
    r = vcli(home, "hp-tuning-jobs", "create", "--display-name=again", f"--config={config}", "--validate-only")
    assert r.returncode == 1, r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert "is a `describe` output of a HyperparameterTuningJob: it holds the output-only field(s) [name, state," in line
    assert "Remove them to run the same study again." in line


def test_a_tpu_request_is_called_a_tpu(tmp_path: Path) -> None:
    r = vcli(tmp_path / "home", "custom-jobs", "create", "--display-name=tpu",
             "--worker-pool-spec=machine-type=cloud-tpu,replica-count=1,accelerator-type=TPU_V3,accelerator-count=8,"
             "container-image-uri=python", TRAIN, "--executor=local", "--validate-only", VCLI_LOCAL_GPUS="")
    assert r.returncode == 0, r.stderr
    assert "WARNING: workerpool0 asks for 8 TPU_V3, a TPU: vcli runs replicas on this machine's CPUs and GPUs only, " \
           "so its replicas run without a TPU." in r.stderr, r.stderr
    assert "GPU" not in r.stderr.replace("CPUs and GPUs", ""), r.stderr
