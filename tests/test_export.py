"""`hp-tuning-jobs export`: real finished studies out to CSV, Parquet and an Optuna storage,
read back with the csv module, pyarrow and `optuna.load_study`.

Three studies run through the CLI once per module: one objective with every parameter type
(integer and whole discrete values must come out as integers), one under the median
early-stopping rule (its stopped trials must be PRUNED), and one with two objectives (their
names). States no finished study has here (PBT's exploits, running and requested trials)
go through the same export from trials built in the test.
"""

from __future__ import annotations

import csv
from datetime import datetime
from pathlib import Path

import pytest

from tests.helpers import script_study, vcli

TRAINER = """
import sys
args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:] if "=" in a)
x = float(args["x"]); n = int(args["n"]); bonus = 0.5 if args["kind"] == "b" else 0.0
bs = int(args["bs"])  # a whole DISCRETE value arrives as an integer
for step in (1, 2):
    print(f"score={-(x - 0.3) ** 2 - (n - 2) ** 2 / 10 + bonus - (2 - step) * 0.1 + bs / 1000:.6f} step={step}", flush=True)
"""

# The worse the larger x; grid search runs x in increasing order, so the median rule has
# five better completed trials by the time the last ones run (as in tests/test_plots.py).
CURVE = """
import sys, time
x = float(dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:] if "=" in a)["x"])
for step in range(1, 5):
    time.sleep(0.25)
    print(f"accuracy={(1 - x) * (1 - 0.5 ** step):.6f} step={step}", flush=True)
"""

TWO_METRICS = """
import sys
x = float(dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:] if "=" in a)["x"])
print(f"error={x * x:.6f} step=1", flush=True)
print(f"speed={1 - x:.6f} step=1", flush=True)
"""


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    tmp = tmp_path_factory.mktemp("export")
    home = tmp / "exp"
    _, study, _ = script_study(home, tmp, TRAINER, "--metric=metric-id=score,goal=maximize",
                               "--parameter-spec=parameter-id=x,type=double,min=0,max=1",
                               "--parameter-spec=parameter-id=n,type=integer,min=1,max=4",
                               "--parameter-spec=parameter-id=kind,values=a;b",
                               "--parameter-spec=parameter-id=bs,type=discrete,values=8;16;32",
                               "--parameter-spec=parameter-id=drop,type=discrete,values=0.1;0.25;0.5",
                               "--algorithm=random-search", "--max-trial-count=6", "--parallel-trial-count=2", "--seed=2")
    return home, study


@pytest.fixture(scope="module")
def stopped(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    tmp = tmp_path_factory.mktemp("export")
    home = tmp / "median"
    _, study, _ = script_study(home, tmp, CURVE, "--metric=metric-id=accuracy,goal=maximize",
                               "--parameter-spec=parameter-id=x,type=discrete,values=0.05;0.15;0.25;0.35;0.45;0.85;0.95",
                               "--algorithm=grid-search", "--max-trial-count=7", "--parallel-trial-count=2",
                               "--early-stopping=median")
    return home, study


def _id(study: dict) -> str:
    return study["name"].rsplit("/", 1)[1]


def _params(trial: dict) -> dict:
    return {p["parameterId"]: p["value"] for p in trial["parameters"]}


def _local(iso: str) -> datetime:
    """A stored UTC time as Optuna records times: naive, local."""
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).astimezone().replace(tzinfo=None)


def _export_optuna(home: Path, s: dict, tmp_path: Path):
    import optuna

    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    r = vcli(home, "hp-tuning-jobs", "export", _id(s), f"--to={url}")
    assert r.returncode == 0, r.stderr
    name = f"{s['displayName']}-{_id(s)}"
    assert f"to the Optuna study [{name}] at {url}" in r.stderr
    return optuna.load_study(study_name=name, storage=url), url


def test_csv_has_one_row_per_trial_with_every_parameter_and_metric(study, tmp_path: Path) -> None:
    home, s = study
    out = tmp_path / "trials.csv"
    r = vcli(home, "hp-tuning-jobs", "export", _id(s), f"--to={out}")
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(out.open()))
    assert [row["trial_id"] for row in rows] == [t["id"] for t in s["trials"]]
    for row, t in zip(rows, s["trials"]):
        params = _params(t)
        assert float(row["param_x"]) == pytest.approx(params["x"]) and row["param_n"] == str(params["n"])
        assert row["param_kind"] == params["kind"] and row["state"] == "SUCCEEDED"
        assert float(row["metric_score"]) == pytest.approx(t["finalMeasurement"]["metrics"][0]["value"])
        assert row["final_step"] == "2"
        # Integers as integers: the whole DISCRETE value as the trainer got it (`16`, not `16.0`).
        assert row["param_bs"] in ("8", "16", "32") and row["param_bs"] == str(int(params["bs"]))
        assert row["param_drop"] in ("0.1", "0.25", "0.5")
    upper = tmp_path / "TRIALS.CSV"  # refused before, while `plot` took `.PNG` (found by a probe)
    assert vcli(home, "hp-tuning-jobs", "export", _id(s), f"--to={upper}").returncode == 0
    assert upper.read_text() == out.read_text()


def test_parquet_keeps_the_types(study, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    home, s = study
    out = tmp_path / "trials.parquet"
    assert vcli(home, "hp-tuning-jobs", "export", _id(s), f"--to={out}").returncode == 0
    t = pq.read_table(out).to_pydict()
    assert t["trial_id"] == [x["id"] for x in s["trials"]]
    assert all(isinstance(v, int) for v in t["param_n"]) and all(isinstance(v, float) for v in t["metric_score"])
    assert all(isinstance(v, int) for v in t["param_bs"]) and all(isinstance(v, float) for v in t["param_drop"])


def test_optuna_import_shows_the_same_best_trial_times_and_names(study, tmp_path: Path) -> None:
    import optuna

    home, s = study
    loaded, _ = _export_optuna(home, s, tmp_path)
    assert len(loaded.trials) == 6
    assert loaded.best_trial.user_attrs["vcli_trial_id"] == s["bestTrialId"]
    best = next(t for t in s["trials"] if t["id"] == s["bestTrialId"])
    assert loaded.best_value == pytest.approx(best["finalMeasurement"]["metrics"][0]["value"])
    assert set(loaded.best_trial.intermediate_values) == {1, 2}
    assert loaded.metric_names == ["score"] and loaded.direction == optuna.study.StudyDirection.MAXIMIZE
    for ft, t in zip(loaded.trials, s["trials"]):
        assert ft.user_attrs["vcli_trial_id"] == t["id"] and ft.state == optuna.trial.TrialState.COMPLETE
        # Each trial's own start and end, not the moment of the export.
        assert ft.datetime_start == _local(t["startTime"]) and ft.datetime_complete == _local(t["endTime"])
        assert ft.duration.total_seconds() == pytest.approx(
            (datetime.fromisoformat(t["endTime"].replace("Z", "+00:00"))
             - datetime.fromisoformat(t["startTime"].replace("Z", "+00:00"))).total_seconds(), abs=1e-6)
        params = _params(t)
        assert ft.params == {"x": params["x"], "n": params["n"], "kind": params["kind"], "bs": int(params["bs"]),
                             "drop": params["drop"]}
        assert ft.distributions["n"] == optuna.distributions.IntDistribution(1, 4)
        assert ft.distributions["bs"] == optuna.distributions.CategoricalDistribution((8, 16, 32))
    # Two at a time: the trials overlap as they ran, which a timeline of the export shows.
    starts = sorted(ft.datetime_start for ft in loaded.trials)
    assert starts[-1] - starts[0] > loaded.trials[0].duration / 2


def test_trials_stopped_early_are_pruned_with_their_values(stopped, tmp_path: Path) -> None:
    import optuna

    home, s = stopped
    loaded, _ = _export_optuna(home, s, tmp_path)
    states = {ft.user_attrs["vcli_trial_id"]: ft for ft in loaded.trials}
    rule = {t["id"] for t in s["trials"] if t.get("earlyStoppingRule") == "median"}
    assert rule, "the median rule stopped no trial: nothing to check"
    for t in s["trials"]:
        ft = states[t["id"]]
        expected = optuna.trial.TrialState.PRUNED if t["id"] in rule else optuna.trial.TrialState.COMPLETE
        assert ft.state == expected, t["id"]
        assert ft.value == pytest.approx(t["finalMeasurement"]["metrics"][0]["value"])
        assert ft.intermediate_values == {int(m["stepCount"]): m["metrics"][0]["value"] for m in t["measurements"]}
        assert ft.datetime_start == _local(t["startTime"]) and ft.datetime_complete == _local(t["endTime"])
        if t["id"] in rule:
            assert ft.user_attrs["early_stopping_rule"] == "median" and ft.user_attrs["stop_reason"]
    assert sum(ft.state == optuna.trial.TrialState.PRUNED for ft in loaded.trials) == len(rule)


def test_objectives_keep_their_names_and_directions(tmp_path: Path) -> None:
    import optuna

    home = tmp_path / "two"
    _, s, _ = script_study(home, tmp_path, TWO_METRICS, "--metric=metric-id=error,goal=minimize",
                           "--metric=metric-id=speed,goal=maximize",
                           "--parameter-spec=parameter-id=x,type=double,min=0,max=1",
                           "--algorithm=random-search", "--max-trial-count=3", "--parallel-trial-count=3", "--seed=1")
    loaded, _ = _export_optuna(home, s, tmp_path)
    assert loaded.metric_names == ["error", "speed"]
    assert loaded.directions == [optuna.study.StudyDirection.MINIMIZE, optuna.study.StudyDirection.MAXIMIZE]
    for ft, t in zip(loaded.trials, s["trials"]):
        values = {m["metricId"]: m["value"] for m in t["finalMeasurement"]["metrics"]}
        assert ft.values == pytest.approx([values["error"], values["speed"]])
    assert {ft.user_attrs["vcli_trial_id"] for ft in loaded.best_trials} == set(s["optimalTrialIds"])


def test_an_existing_optuna_study_is_one_line(study, tmp_path: Path) -> None:
    home, s = study
    _, url = _export_optuna(home, s, tmp_path)
    r = vcli(home, "hp-tuning-jobs", "export", _id(s), f"--to={url}")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert f"already has an Optuna study named [{s['displayName']}-{_id(s)}]" in r.stderr


@pytest.mark.parametrize(
    "command,target,fragment",
    [
        ("export", "{missing}/t.csv", "Invalid value for [--to]: cannot write [{missing}/t.csv]: No such file or directory"),
        ("export", "{afile}/t.csv", "Invalid value for [--to]: cannot write [{afile}/t.csv]: Not a directory"),
        ("export", "{missing}/t.parquet", "Invalid value for [--to]: cannot write [{missing}/t.parquet]"),
        ("export", "sqlite:///{missing}/o.db", "Invalid value for [--to]: cannot open the Optuna storage sqlite:///{missing}/o.db: "
                                               "OperationalError"),
        ("export", "postgresql://u@127.0.0.1:1/db", "cannot open the Optuna storage postgresql://u@127.0.0.1:1/db: ImportError"),
        ("export", "mysql://u:pa55w0rd@127.0.0.1:1/db", "cannot open the Optuna storage mysql://u:***@127.0.0.1:1/db: "),
        # a short password was masked wherever its letters occurred: every `p` of the message
        ("export", "postgresql://u:p@127.0.0.1:1/db", "cannot open the Optuna storage postgresql://u:***@127.0.0.1:1/db: "
                                                     "ImportError: Failed to import DB access module for the specified "
                                                     "storage URL. Please install appropriate one."),
        ("plot", "{missing}/r.html", "Invalid value for [--output]: cannot write [{missing}/r.html]: No such file or directory"),
        ("plot", "{afile}/r.svg", "Invalid value for [--output]: cannot write [{afile}/r.svg]: Not a directory"),
    ],
    ids=["csv-no-dir", "csv-under-a-file", "parquet-no-dir", "sqlite-no-dir", "no-driver", "password", "short-password",
         "html-no-dir",
         "svg-under-a-file"],
)
def test_a_destination_that_cannot_be_written_is_one_line(study, tmp_path: Path, command: str, target: str,
                                                           fragment: str) -> None:
    # Each was a traceback of 60 to 175 lines (FileNotFoundError, SQLAlchemy's OperationalError).
    home, s = study
    afile = tmp_path / "a-file"
    afile.write_text("")
    where = {"missing": tmp_path / "no-such-dir", "afile": afile}
    flag = "--to" if command == "export" else "--output"
    r = vcli(home, "hp-tuning-jobs", command, _id(s), f"{flag}={target.format(**where)}")
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert fragment.format(**where) in r.stderr, r.stderr
    assert "pa55w0rd" not in r.stderr


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///", "sqlite:///:memory:"])
def test_an_in_memory_optuna_storage_is_refused(study, url: str) -> None:
    # The export reported success into a database that ended with vcli.
    home, s = study
    r = vcli(home, "hp-tuning-jobs", "export", _id(s), f"--to={url}")
    assert r.returncode == 2, r.stderr
    assert r.stderr == (f"ERROR: (vcli.hp-tuning-jobs.export) argument --to: [{url}] is an in-memory SQLite database, "
                        "which ends with vcli: name a file, such as sqlite:///optuna.db\n")


def test_pbt_running_and_requested_trials_keep_their_states(tmp_path: Path) -> None:
    """PBT's exploited trials (rule "pbt") are PRUNED with their lineage; ACTIVE is RUNNING with
    its start; REQUESTED is WAITING; INFEASIBLE is FAIL with its reason."""
    import optuna

    from vcli.plots.export import to_optuna
    from vcli.spec import (
        Goal,
        IntegerValueSpec,
        Measurement,
        MetricSpec,
        ParameterSpec,
        PbtLineage,
        StudySpec,
        Trial,
        TrialState,
    )

    p = ParameterSpec(parameter_id="units", value_spec=IntegerValueSpec(min_value=1, max_value=8))
    spec = StudySpec(metrics=(MetricSpec(metric_id="acc", goal=Goal.MAXIMIZE),), parameters=(p,))
    m2, m4 = Measurement(step_count=2, metrics={"acc": 0.5}), Measurement(step_count=4, metrics={"acc": 0.8})
    trials = [
        Trial(id="1", parameters={"units": 2}, state=TrialState.SUCCEEDED, measurements=(m2,), final_measurement=m2,
              start_time="2024-05-01T10:00:00Z", end_time="2024-05-01T10:00:04.5Z", early_stopping_rule="pbt",
              stop_reason="pbt: bottom of the population", lineage=PbtLineage(member=0)),
        Trial(id="2", parameters={"units": 4}, state=TrialState.SUCCEEDED, measurements=(m2, m4), final_measurement=m4,
              start_time="2024-05-01T10:00:05Z", end_time="2024-05-01T10:00:09Z",
              lineage=PbtLineage(member=0, parent_trial_id="1", start_step=2, inherited_parameters={"units": 2})),
        Trial(id="3", parameters={"units": 8}, state=TrialState.ACTIVE, start_time="2024-05-01T10:00:06Z"),
        Trial(id="4", parameters={"units": 1}, state=TrialState.REQUESTED),
        Trial(id="5", parameters={"units": 3}, state=TrialState.INFEASIBLE, start_time="2024-05-01T10:00:01Z",
              end_time="2024-05-01T10:00:02Z", infeasible_reason="no metric reported"),
    ]
    url = f"sqlite:///{tmp_path / 'pbt.db'}"
    to_optuna(url, "pbt", spec, {"units": p}, trials)
    loaded = {ft.user_attrs["vcli_trial_id"]: ft for ft in optuna.load_study(study_name="pbt", storage=url).trials}
    states = optuna.trial.TrialState
    assert {k: ft.state for k, ft in loaded.items()} == {"1": states.PRUNED, "2": states.COMPLETE, "3": states.RUNNING,
                                                         "4": states.WAITING, "5": states.FAIL}
    assert loaded["1"].value == 0.5 and loaded["1"].duration.total_seconds() == 4.5
    assert loaded["1"].user_attrs["early_stopping_rule"] == "pbt" and loaded["1"].user_attrs["pbt_member"] == 0
    assert loaded["2"].user_attrs["pbt_parent_trial_id"] == "1" and loaded["2"].user_attrs["pbt_start_step"] == 2
    assert loaded["3"].datetime_start == _local("2024-05-01T10:00:06Z") and loaded["3"].datetime_complete is None
    assert loaded["4"].datetime_start is None
    assert loaded["5"].values is None and loaded["5"].user_attrs["infeasible_reason"] == "no metric reported"
