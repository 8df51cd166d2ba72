"""Big studies stay quick to read: a 10,000-trial study and 10,000 custom jobs, inserted
through the store API, are described and listed within a CPU-time bound far below what
re-serialising them through PyYAML's general representer took (12.8 s for `describe` on
this machine; bench/bench_reads.py measures the read paths), and the fast YAML emitter
writes exactly what that representer writes."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from dataclasses import replace
from enum import Enum
from pathlib import Path

import pytest

from tests.helpers import vcli_env
from vcli.codec.yamlio import SourceFloat, SourceInt, _to_yaml_represented, to_yaml

#: CPU seconds a read of the 10,000-trial home may take (about 3 s here; 13 s before).
READ_CPU_SECONDS = 7.0


def make_study(home: Path, trials: int) -> str:
    """A SUCCEEDED study of `trials` trials (5 measurements each), each with its custom job."""
    from vcli import codec
    from vcli.enums import JobKind, JobState, TrialState
    from vcli.spec import Measurement, Trial
    from vcli.store import Store, resource_name

    store = Store(home)
    study_spec = {"metrics": [{"metricId": "acc", "goal": "MAXIMIZE"}],
                  "parameters": [{"parameterId": "lr", "doubleValueSpec": {"minValue": 1e-4, "maxValue": 0.1},
                                  "scaleType": "UNIT_LOG_SCALE"},
                                 {"parameterId": "units", "integerValueSpec": {"minValue": 16, "maxValue": 512}}]}
    job_spec = {"workerPoolSpecs": [{"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": 1,
                                     "containerSpec": {"imageUri": "python", "command": ["python3", "-c", "pass"]}}]}
    study = store.create_job(kind=JobKind.HYPERPARAMETER_TUNING_JOB.value, display_name="big",
                             state=JobState.JOB_STATE_SUCCEEDED.value,
                             record={"studySpec": study_spec, "trialJobSpec": job_spec, "maxTrialCount": trials,
                                     "parallelTrialCount": 64, "maxFailedTrialCount": 0, "labels": {}, "seed": 1,
                                     "executor": "local"})
    specs = {p.parameter_id: p for p in codec.study_spec_from_stored(study_spec).parameters}
    for i in range(1, trials + 1):
        job = store.create_job(kind=JobKind.CUSTOM_JOB.value, display_name=f"big-trial-{i}",
                               record={"jobSpec": job_spec, "executor": "local"}, state=JobState.JOB_STATE_SUCCEEDED.value,
                               parent_id=study.id, trial_id=str(i))
        ms = tuple(Measurement(step_count=s, metrics={"acc": 0.5 + s / 100 + i / (10 * trials)}) for s in range(1, 6))
        store.save_trial(study.id, Trial(id=str(i), parameters={"lr": 0.001 * (1 + i % 50), "units": 16 + i % 400},
                                         state=TrialState.SUCCEEDED, final_measurement=ms[-1], measurements=ms,
                                         custom_job=resource_name(JobKind.CUSTOM_JOB.value, job.id),
                                         start_time="2026-12-07T10:00:00Z", end_time="2026-12-07T10:01:00Z"), specs)
    return study.id


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    home = tmp_path_factory.mktemp("big") / "home"
    return home, make_study(home, 10_000)


def _cpu_run(home: Path, *argv: str) -> tuple[subprocess.CompletedProcess[str], float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run([sys.executable, "-m", "vcli", *argv], env=vcli_env(home), capture_output=True, text=True,
                       timeout=600)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


@pytest.mark.parametrize("argv", [
    ("hp-tuning-jobs", "describe", "ID"),
    ("hp-tuning-jobs", "describe", "ID", "--format=json"),
    ("hp-tuning-jobs", "list"),
    ("custom-jobs", "list", "--include-trial-jobs"),
], ids=" ".join)
def test_a_10000_trial_study_reads_within_the_bound(big: tuple[Path, str], argv: tuple[str, ...]) -> None:
    home, study = big
    r, cpu = _cpu_run(home, *(study if a == "ID" else a for a in argv))
    assert r.returncode == 0, r.stderr[-2000:]
    assert cpu < READ_CPU_SECONDS, f"{' '.join(argv)} took {cpu:.1f} s of CPU"
    if argv[-1] == "--format=json":
        assert len(json.loads(r.stdout)["trials"]) == 10_000
    elif argv[0] == "custom-jobs":
        assert r.stdout.count("\n---\n") + 1 == 10_000


class Colour(str, Enum):
    RED = "RED"
    MULTI = "a\nb"


@pytest.mark.parametrize("value", [
    {"b": 1, "a": [1, 2.5, -0.0, 1e17, 1e-7, float("inf"), float("-inf"), 10**30, True, False, None]},
    {"text": ["", "plain", "007", "1e3", "true", "null", "~", "yes", "no", "on", "- dash", ": colon", "#hash",
              "a: b", "x #y", "'quoted'", '"double"', "tab\there", "line\nbreak", "trailing\n", " lead", "trail ",
              "λ unicode ✓", "2026-12-07", "12:30", "0x1F", ".inf", "[list]", "{map}", "*star", "&amp", "!bang",
              "%pct", "@at", "`tick", "|pipe", ">gt", "?q", "," + "x" * 1200]},
    {"enum": [Colour.RED, Colour.MULTI], "empty": {}, "none": [], "nested": [{"z": {"y": [[]]}}, [{}]]},
    {"source": [SourceInt(7), SourceFloat(2.1)], "nan": float("nan"), "keys": {"a b": 1, "": 2, "1": 3, "é": 4}},
    [1, "two", {"three": 3}],
    "a lone string",
    None,
], ids=lambda v: type(v).__name__)
def test_the_fast_yaml_writer_writes_what_pyyamls_representer_writes(value: object) -> None:
    assert to_yaml(value) == _to_yaml_represented(value)


def test_a_value_the_fast_writer_does_not_know_goes_through_the_representer() -> None:
    import datetime

    assert to_yaml({"day": datetime.date(2026, 12, 7), "n": 1}) == "day: 2026-12-07\nn: 1\n"


def test_the_figures_of_a_big_study_draw_its_points_as_images(tmp_path: Path) -> None:
    """Past `MAX_VECTOR_MARKS` marks in a plot, its points, lines and bars are an image inside
    the SVG (axes and text stay vector): a 3,000-trial study's figures stay small, where each
    figure was megabytes of SVG elements. A small study's plots keep every point as an element
    with its tooltip (the other plot tests)."""
    pytest.importorskip("matplotlib", reason="needs the plot extra: pip install 'vcli[plot]'")
    from vcli import codec
    from vcli.plots import render
    from vcli.plots.canvas import MAX_VECTOR_MARKS
    from vcli.store import Store

    home = tmp_path / "home"
    study = make_study(home, 3_000)
    store = Store(home)
    spec = codec.study_spec_from_stored(store.get_job(study).record["studySpec"])
    drawn, _ = render.draw(spec, spec.parameters, store.trials(study), now=None)
    svgs = {f.key: render.svg_element(f) for f in drawn}
    assert 3_000 > MAX_VECTOR_MARKS
    for key in ("history", "parallel", "intermediate", "rank", "timeline"):
        assert "<image" in svgs[key], key
        assert svgs[key].count("<title>") < 100, key  # no per-trial elements left
    assert sum(map(len, svgs.values())) < 2_500_000, {k: len(v) for k, v in svgs.items()}


def test_the_dashboards_live_check_and_index_read_no_trial_of_a_10000_trial_study(big: tuple[Path, str]) -> None:
    """An open study page asks for `/version` every 2 s: at 10,000 trials that decoded every
    trial (0.3-0.75 s of CPU a poll, a third of a core per open tab). It and the index's trial
    counts come from two aggregate queries: five of each take well under half a second of CPU,
    and the version still changes when one trial gets a measurement."""
    import time

    from vcli.dashboard.reader import Reader
    from vcli.spec import Measurement
    from vcli.store import Store

    home, study = big
    reader = Reader(home)
    try:
        before = time.process_time()
        versions = {reader.study_version(study) for _ in range(5)}
        counts = [reader.studies() for _ in range(5)]
        cpu = time.process_time() - before
        assert cpu < 0.5, f"{cpu:.2f} s of CPU"
        assert len(versions) == 1 and counts[0][0][1] == 10_000
        store = Store(home)
        try:
            trial = store.trials(study)[4321]
            trial = replace(trial, measurements=(*trial.measurements, Measurement(step_count=6, metrics={"acc": 0.9})))
            from vcli import codec

            specs = {p.parameter_id: p for p in codec.study_spec_from_stored(store.get_job(study).record["studySpec"]).parameters}
            store.save_trial(study, trial, specs)
        finally:
            store.close()
        reader.close()
        assert reader.study_version(study) not in versions
    finally:
        reader.close()


@pytest.mark.parametrize("fmt", [
    "value(name)",
    "table(name.basename():label=ID, displayName, state, trials.len():label=TRIALS, bestTrialId:label=BEST_TRIAL)",
    "csv(name.basename(),trials.len())",
])
def test_a_list_that_prints_no_trial_reads_none(big: tuple[Path, str], fmt: str) -> None:
    """`hp-tuning-jobs list` with a projection that names no trial (or only `trials.len()`, the
    terminal's table) reads no trial record: under 1.5 s of CPU at 10,000 trials, with the
    count and best trial the full read gives."""
    home, study = big
    r, cpu = _cpu_run(home, "hp-tuning-jobs", "list", f"--format={fmt}")
    assert r.returncode == 0, r.stderr[-2000:]
    assert cpu < 1.5, f"{fmt} took {cpu:.1f} s of CPU"
    assert study in r.stdout
    if "trials.len()" in fmt:
        assert "10000" in r.stdout
        filtered, _ = _cpu_run(home, "hp-tuning-jobs", "list", "--format=value(name.basename())",
                               "--filter=trials.len()>9999")
        assert filtered.stdout.split() == [study]


def test_the_dashboard_page_of_a_10000_trial_study(big: tuple[Path, str]) -> None:
    """The study page at 10,000 trials: drawn once in under 30 s of CPU (every curve in one
    collection, one colour lookup per figure, no "best" legend placement over thousands of
    marks: 47 s of drawing before), under 5 MB, and served from the figures' cache at once."""
    import time

    from vcli.dashboard import pages
    from vcli.dashboard.reader import Reader

    home, study = big
    reader = Reader(home)
    try:
        for bound in (30.0, 5.0):  # the first view draws; the second reads the cache
            before = time.process_time()
            view = reader.study(study)
            assert view is not None
            html = pages.study_page(view, pages.figures_part(reader.figures(view)))
            cpu = time.process_time() - before
            assert cpu < bound, f"{cpu:.1f} s of CPU (bound {bound} s)"
            assert len(html.encode()) < 5_000_000, f"{len(html.encode()) / 1e6:.1f} MB"
            assert html.count('<svg id="fig-') >= 5
    finally:
        reader.close()
