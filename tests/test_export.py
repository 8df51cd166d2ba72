"""`hp-tuning-jobs export`: a real finished study out to CSV, Parquet and an Optuna storage."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from tests.helpers import script_study, vcli

TRAINER = """
import sys
args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:] if "=" in a)
x = float(args["x"]); n = int(args["n"]); bonus = 0.5 if args["kind"] == "b" else 0.0
for step in (1, 2):
    print(f"score={-(x - 0.3) ** 2 - (n - 2) ** 2 / 10 + bonus - (2 - step) * 0.1:.6f} step={step}", flush=True)
"""


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    tmp = tmp_path_factory.mktemp("export")
    home = tmp / "exp"
    _, study, _ = script_study(home, tmp, TRAINER, "--metric=metric-id=score,goal=maximize",
                               "--parameter-spec=parameter-id=x,type=double,min=0,max=1",
                               "--parameter-spec=parameter-id=n,type=integer,min=1,max=4",
                               "--parameter-spec=parameter-id=kind,values=a;b",
                               "--algorithm=random-search", "--max-trial-count=6", "--parallel-trial-count=2", "--seed=2")
    return home, study


def _id(study: dict) -> str:
    return study["name"].rsplit("/", 1)[1]


def test_csv_has_one_row_per_trial_with_every_parameter_and_metric(study, tmp_path: Path) -> None:
    home, s = study
    out = tmp_path / "trials.csv"
    r = vcli(home, "hp-tuning-jobs", "export", _id(s), f"--to={out}")
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(out.open()))
    assert [row["trial_id"] for row in rows] == [t["id"] for t in s["trials"]]
    for row, t in zip(rows, s["trials"]):
        params = {p["parameterId"]: p["value"] for p in t["parameters"]}
        assert float(row["param_x"]) == pytest.approx(params["x"]) and int(row["param_n"]) == params["n"]
        assert row["param_kind"] == params["kind"] and row["state"] == "SUCCEEDED"
        assert float(row["metric_score"]) == pytest.approx(t["finalMeasurement"]["metrics"][0]["value"])
        assert row["final_step"] == "2"


def test_parquet_keeps_the_types(study, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    home, s = study
    out = tmp_path / "trials.parquet"
    assert vcli(home, "hp-tuning-jobs", "export", _id(s), f"--to={out}").returncode == 0
    t = pq.read_table(out).to_pydict()
    assert t["trial_id"] == [x["id"] for x in s["trials"]]
    assert all(isinstance(v, int) for v in t["param_n"]) and all(isinstance(v, float) for v in t["metric_score"])


def test_optuna_import_shows_the_same_best_trial(study, tmp_path: Path) -> None:
    import optuna

    home, s = study
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    r = vcli(home, "hp-tuning-jobs", "export", _id(s), f"--to={url}")
    assert r.returncode == 0, r.stderr
    loaded = optuna.load_study(study_name=f"exp-{_id(s)}", storage=url)
    assert len(loaded.trials) == 6
    assert loaded.best_trial.user_attrs["vcli_trial_id"] == s["bestTrialId"]
    best = next(t for t in s["trials"] if t["id"] == s["bestTrialId"])
    assert loaded.best_value == pytest.approx(best["finalMeasurement"]["metrics"][0]["value"])
    assert set(loaded.best_trial.intermediate_values) == {1, 2}


def test_an_unknown_target_is_one_line(study, tmp_path: Path) -> None:
    home, s = study
    r = vcli(home, "hp-tuning-jobs", "export", _id(s), f"--to={tmp_path / 'trials.txt'}")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--to" in r.stderr
