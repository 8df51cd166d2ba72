"""Start-up stays light: `vcli --help` and listing never import TensorFlow, Docker, paramiko,
scikit-optimize, scikit-learn or Ray (they are installed here, so an eager import would show),
nor pydantic: typer 0.29 imports it to check every option, 0.18 s of each command here
(pyproject.toml keeps typer below 0.29).

Each check runs the real CLI entry point in a fresh interpreter and then reports which of
those packages ended up in `sys.modules`; nothing is hooked into the import system.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("tensorflow", "docker", "paramiko", "skopt", "sklearn", "ray", "matplotlib", "tensorboard", "mlflow", "pydantic")
MARKER = "@@vcli-heavy-modules@@"

PROBE = f"""
import json, sys
sys.argv = ["vcli", *json.loads(sys.argv[1])]
from vcli.cli import app
code = 0
try:
    app()
except SystemExit as e:
    code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {set(HEAVY)!r})
print({MARKER!r} + json.dumps({{"code": code, "heavy": heavy}}))
"""


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["custom-jobs", "list"],
        ["custom-jobs", "create", "--help"],
        ["hp-tuning-jobs", "list"],
    ],
    ids=lambda a: " ".join(a),
)
def test_cli_does_not_import_heavy_packages(vcli_home, argv):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    r = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(argv)],
        env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )
    assert "Traceback" not in r.stderr, r.stderr
    (line,) = [l for l in r.stdout.splitlines() if l.startswith(MARKER)]
    report = json.loads(line[len(MARKER):])
    assert report["code"] == 0, r.stderr
    assert report["heavy"] == [], f"`vcli {' '.join(argv)}` imported {report['heavy']}"


def test_importing_the_sdk_imports_no_heavy_package(vcli_home):
    """`from vcli import aiplatform` in a notebook costs no TensorFlow, Docker, Ray or MLflow:
    the controllers (and MLflow, with tracking on) are imported when a job is submitted."""
    probe = PROBE.replace("from vcli.cli import app", "from vcli import aiplatform\napp = lambda: None")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    r = subprocess.run([sys.executable, "-c", probe, json.dumps([])], env=env, capture_output=True, text=True,
                       timeout=60, stdin=subprocess.DEVNULL)
    (line,) = [l for l in r.stdout.splitlines() if l.startswith(MARKER)]
    assert json.loads(line[len(MARKER):])["heavy"] == [], r.stderr


def test_the_probe_detects_an_import(vcli_home):
    """The probe itself works: a module that is imported is reported."""
    probe = PROBE.replace("from vcli.cli import app", "import docker\nfrom vcli.cli import app")
    r = subprocess.run(
        [sys.executable, "-c", probe, json.dumps(["--version"])],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )
    (line,) = [l for l in r.stdout.splitlines() if l.startswith(MARKER)]
    assert "docker" in json.loads(line[len(MARKER):])["heavy"]


@pytest.mark.parametrize("argv", [["--help"], ["custom-jobs", "list"], ["custom-jobs", "list", "--format=json"]],
                         ids=lambda a: " ".join(a))
def test_help_and_listing_do_not_build_the_data_model(vcli_home, tmp_path, argv):
    """`vcli --help` and `custom-jobs list` need the enums, not the dozens of spec dataclasses
    (about 50 ms, a fifth of `custom-jobs list`'s start-up, when they imported them). The
    store holds a real job first, so listing has a row to print."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    if argv != ["--help"]:
        config = tmp_path / "job.yaml"
        config.write_text(json.dumps({"workerPoolSpecs": [{"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": 1,
                                      "containerSpec": {"imageUri": "python:3", "command": [sys.executable, "-c", "pass"]}}]}))
        made = subprocess.run([sys.executable, "-m", "vcli", "custom-jobs", "create", "--display-name=j", f"--config={config}",
                               "--executor=local"], env=env, capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL)
        assert made.returncode == 0, made.stderr[-2000:]
    probe = PROBE.replace("heavy = sorted(m for m in sys.modules if m.split(\".\")[0] in",
                          "heavy = sorted(m for m in sys.modules if m in {'vcli.spec', 'vcli.enums'} or m.split(\".\")[0] in")
    assert probe != PROBE
    r = subprocess.run([sys.executable, "-c", probe, json.dumps(argv)], env=env, capture_output=True, text=True,
                       timeout=60, stdin=subprocess.DEVNULL)
    (line,) = [l for l in r.stdout.splitlines() if l.startswith(MARKER)]
    report = json.loads(line[len(MARKER):])
    assert report["code"] == 0, r.stderr
    assert report["heavy"] == ["vcli.enums"], r.stderr
    if argv != ["--help"]:
        assert "j" in r.stdout.replace(line, "")  # the job was listed
