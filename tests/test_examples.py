"""The example configs the README runs stay valid: each validates from the repository's root
(where the README runs them) with no warning and no notice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import REPO, vcli

EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))


def test_there_are_examples() -> None:
    assert {p.name for p in EXAMPLES} >= {"custom_job.yaml", "hp_tuning.yaml", "pbt.yaml"}


@pytest.mark.parametrize("config", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_an_example_validates_cleanly(config: Path, tmp_path: Path) -> None:
    """A study (`studySpec`) with `hp-tuning-jobs create`, a CustomJobSpec with `custom-jobs create`."""
    study = "studySpec" in config.read_text()
    group, what = ("hp-tuning-jobs", "study") if study else ("custom-jobs", "job")
    name = [] if study else ["--display-name=example"]  # a CustomJobSpec has no displayName of its own
    r = vcli(tmp_path / "home", group, "create", f"--config={config}", *name, "--validate-only", "--format=json")
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip().splitlines() == [f"The {what} is valid; nothing was launched (--validate-only)."], r.stderr
    resource = json.loads(r.stdout)
    assert resource["displayName"] and resource["executor"] == "local"


def test_the_readme_study_runs_from_the_repository_root(tmp_path: Path) -> None:
    # The README's `vcli hp-tuning-jobs create --config=examples/hp_tuning.yaml ...`, with two
    # trials: the example trainer's module comes from the directory vcli runs in.
    r = vcli(tmp_path / "home", "hp-tuning-jobs", "create", "--config=examples/hp_tuning.yaml", "--display-name=digits-hpt",
             "--max-trial-count=2", "--format=json", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    study = json.loads(r.stdout)
    assert [t["state"] for t in study["trials"]] == ["SUCCEEDED", "SUCCEEDED"]
    assert all(t["finalMeasurement"]["stepCount"] == "3" for t in study["trials"])
