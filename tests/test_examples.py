"""The example configs the README runs stay valid: each validates from the repository's root
(where the README runs them) with no warning and no notice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import REPO, vcli

EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))


def test_there_are_examples() -> None:
    assert {p.name for p in EXAMPLES} >= {"hp_tuning.yaml", "pbt.yaml"}


@pytest.mark.parametrize("config", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_an_example_validates_cleanly(config: Path, tmp_path: Path) -> None:
    r = vcli(tmp_path / "home", "hp-tuning-jobs", "create", f"--config={config}", "--validate-only", "--format=json")
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip().splitlines() == ["The study is valid; nothing was launched (--validate-only)."], r.stderr
    study = json.loads(r.stdout)
    assert study["displayName"] and study["executor"] == "local"
