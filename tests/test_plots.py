"""`hp-tuning-jobs plot`: the report of real finished studies, as HTML, SVG and PNG files.

Three studies run through the CLI once per module (the local executor, a script trainer):
one objective and three parameters (every figure but the Pareto front), two objectives (the
per-objective figures and the Pareto front), and one under the median early-stopping rule
(the stopped trials' marks). The figures' own contracts that need no study run (the colour
key of many trials, the timeline's bars) are checked on trials built here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.helpers import REPO, script_study, vcli_env

TRAINER = """
import sys
args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:] if "=" in a)
x = float(args["x"]); n = int(args["n"]); bonus = 0.5 if args["kind"] == "b" else 0.0
for step in (1, 2, 3):
    print(f"score={-(x - 0.3) ** 2 - (n - 2) ** 2 / 10 + bonus - (3 - step) * 0.1:.6f} step={step}", flush=True)
"""

TWO_METRICS = """
import sys
args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:] if "=" in a)
x = float(args["x"]); y = float(args["y"])
for step in (1, 2):
    print(f"error={x * x + y / step:.6f} step={step}", flush=True)
    print(f"speed={(1 - x) ** 2 + y:.6f} step={step}", flush=True)
"""

# The worse the larger x; grid search runs x in increasing order, so the median rule has
# five better completed trials by the time the last ones run.
CURVE = """
import sys, time
x = float(dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:] if "=" in a)["x"])
for step in range(1, 5):
    time.sleep(0.25)
    print(f"accuracy={(1 - x) * (1 - 0.5 ** step):.6f} step={step}", flush=True)
"""

#: The report's figures for the single-objective study, in report order.
SINGLE_ORDER = ["history", "parallel", "slice-x", "slice-n", "slice-kind", "intermediate", "importance",
                "contour", "rank", "edf", "timeline"]
SINGLE_FIGURES = set(SINGLE_ORDER)
#: The two-objective study's: one figure per objective where a figure plots one objective.
TWO_FIGURES = {"history", "parallel-error", "parallel-speed", "slice-x", "slice-y", "intermediate-error",
               "intermediate-speed", "importance-error", "importance-speed", "contour-error", "contour-speed",
               "rank-error", "rank-speed", "edf", "timeline", "pareto"}
# The only URIs a report may name: the SVG and XLink namespaces (identifiers, never fetched).
NAMESPACES = {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict]:
    tmp = tmp_path_factory.mktemp("plots")
    home = tmp / "single"
    sid, study, _ = script_study(home, tmp, TRAINER, "--metric=metric-id=score,goal=maximize",
                            "--parameter-spec=parameter-id=x,type=double,min=0.01,max=1,scale=log",
                            "--parameter-spec=parameter-id=n,type=integer,min=1,max=4",
                            "--parameter-spec=parameter-id=kind,values=a;b",
                            "--algorithm=random-search", "--max-trial-count=6", "--parallel-trial-count=3", "--seed=3")
    return home, sid, study


@pytest.fixture(scope="module")
def two_metrics(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    tmp = tmp_path_factory.mktemp("plots")
    home = tmp / "pareto"
    sid, _, stderr = script_study(home, tmp, TWO_METRICS, "--metric=metric-id=error,goal=minimize",
                             "--metric=metric-id=speed,goal=minimize",
                             "--parameter-spec=parameter-id=x,type=double,min=0,max=1",
                             "--parameter-spec=parameter-id=y,type=double,min=0,max=0.2",
                             "--algorithm=random-search", "--max-trial-count=6", "--parallel-trial-count=3", "--seed=5")
    return home, sid, stderr


def _plot(home: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`vcli hp-tuning-jobs plot ARGS` run in `cwd` (where the default report goes)."""
    return subprocess.run([sys.executable, "-m", "vcli", "hp-tuning-jobs", "plot", *args], cwd=cwd,
                          env=vcli_env(home, PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"),
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def _said(stderr: str) -> str:
    """`stderr` without the drawing's step lines (`Drawing the report of ID: step (at N s)`)."""
    return "".join(line for line in stderr.splitlines(keepends=True) if not line.startswith("Drawing the report of "))


def _figure_ids(html: str) -> set[str]:
    return set(re.findall(r'<svg id="fig-([^"]+)"', html))


def _figure_svg(html: str, key: str) -> str:
    start = html.index(f'<svg id="fig-{key}"')
    return html[start:html.index("</svg>", start)]


def test_the_default_report_is_one_self_contained_page(single, tmp_path: Path) -> None:
    home, sid, study = single
    shutil.rmtree(home / "cache", ignore_errors=True)  # drawn here, whichever test ran before
    r = _plot(home, tmp_path, sid)
    assert r.returncode == 0, r.stderr
    # Piped, each step of the drawing is a line with the time it began at; the last line says what was written.
    steps = [re.sub(r" \(at \d+\.\d s\)$", "", line) for line in r.stderr.splitlines()]
    assert steps == [f"Drawing the report of {sid}: {step}" for step in (
        "hyperparameter importances (6 trials)", "history, parallel coordinates and slices",
        "intermediate values", "parameter pairs and the distribution of values", f"rendering {len(SINGLE_FIGURES)} figures",
        f"writing {len(SINGLE_FIGURES)} figures", f"writing {sid}.html")] + [f"Wrote {sid}.html."], r.stderr
    html = (tmp_path / f"{sid}.html").read_text()
    # Again: the figures come from the figure cache (VCLI_HOME/cache/figures), nothing is drawn, the same page.
    (tmp_path / "again").mkdir()
    r = _plot(home, tmp_path / "again", sid)
    assert r.returncode == 0, r.stderr
    steps = [re.sub(r" \(at \d+\.\d s\)$", "", line) for line in r.stderr.splitlines()]
    assert steps == [f"Drawing the report of {sid}: {step}" for step in (
        f"{len(SINGLE_FIGURES)} figures from the cache", f"writing {len(SINGLE_FIGURES)} figures",
        f"writing {sid}.html")] + [f"Wrote {sid}.html."], r.stderr
    assert (tmp_path / "again" / f"{sid}.html").read_text() == html
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
    assert _figure_ids(html) == SINGLE_FIGURES
    assert html.count('<figure class="vcli-figure"') == len(SINGLE_FIGURES)
    # Nothing to fetch: no scripts, stylesheets, fonts or images by URL; only namespace URIs.
    assert set(re.findall(r"https?://[^\"'\s)<>]+", html)) <= NAMESPACES
    assert not re.search(r"<script|<link|<img|@import|url\((?!#)", html)
    # The figures' ids were made unique, so every reference inside an SVG finds its own target.
    ids = re.findall(r'\bid="([^"]+)"', html)
    assert len(ids) == len(set(ids))
    assert set(re.findall(r'href="#([^"]+)"', html)) <= set(ids)
    # The summary names the study's best trial; every finished trial has a tooltip in the history.
    best = next(t for t in study["trials"] if t["id"] == study["bestTrialId"])
    assert f"trial {best['id']}: score={best['finalMeasurement']['metrics'][0]['value']:.6g}" in html
    history = _figure_svg(html, "history")
    for t in study["trials"]:
        assert f"<title>trial {t['id']}: score=" in history
    assert "stopped early" not in html and "Pareto" not in html
    # The trial table: a row per trial in trial order, the best one marked, its values as in the study.
    table = html[html.index('<table class="trials">'):]
    assert re.findall(r'<tr id="trial-(\d+)"', table) == [t["id"] for t in study["trials"]]
    assert re.findall(r'<tr id="trial-(\d+)" class="best">', table) == [study["bestTrialId"]]
    for t in study["trials"]:
        row = re.search(rf'<tr id="trial-{t["id"]}"[^>]*>(.*?)</tr>', table).group(1)
        cells = re.findall(r"<td>(.*?)</td>", row)
        params = {p["parameterId"]: p["value"] for p in t["parameters"]}
        assert cells[1] == "SUCCEEDED" and cells[2:5] == [f"{params['x']:.6g}", str(params["n"]), params["kind"]]
        assert cells[5] == f"{t['finalMeasurement']['metrics'][0]['value']:.6g}" and cells[6] == "3"
        assert re.fullmatch(r"\d+(\.\d)? s", cells[7]) and re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", cells[8])
    # The timeline has a bar per trial, its tooltip naming the trial's duration.
    timeline = _figure_svg(html, "timeline")
    assert sorted(re.findall(r"<title>trial (\d+): completed, \d+(?:\.\d)? s \(", timeline), key=int) == \
        sorted((t["id"] for t in study["trials"]), key=int)


def test_svg_output_writes_one_standalone_svg_per_figure(single, tmp_path: Path) -> None:
    home, sid, _ = single
    (tmp_path / "out").mkdir()
    r = _plot(home, tmp_path, sid, f"--output={tmp_path / 'out' / 'fig.svg'}")
    assert r.returncode == 0, r.stderr
    written = [line.removeprefix("Wrote ").removesuffix(".") for line in r.stderr.splitlines() if line.startswith("Wrote ")]
    assert sorted(written) == sorted(str(tmp_path / "out" / f"fig-{k}.svg") for k in SINGLE_FIGURES)
    for path in written:
        root = ET.fromstring(Path(path).read_text())  # well-formed XML, no prolog needed
        assert root.tag == "{http://www.w3.org/2000/svg}svg"
        assert root.get("id") == "fig-" + Path(path).stem.removeprefix("fig-")


def test_a_log_scale_axis_is_labelled_with_numbers_not_raw_tex(single, tmp_path: Path) -> None:
    """Log-scale ticks read 0.01, 0.1, 1: with matplotlib's TeX off (names are text), its
    default log labels printed `$\\mathdefault{10^{-2}}$` in the report and the dashboard."""
    home, sid, _ = single
    (tmp_path / "out").mkdir()
    r = _plot(home, tmp_path, sid, f"--output={tmp_path / 'out' / 'fig.svg'}")
    assert r.returncode == 0, r.stderr
    text = (tmp_path / "out" / "fig-slice-x.svg").read_text()
    assert "mathdefault" not in text and "$" not in text
    labels = re.findall(r"<!-- (\S+) -->", text)
    assert {"0.01", "0.1", "1"} <= set(labels), labels


def test_png_output_writes_real_pngs(single, tmp_path: Path) -> None:
    from PIL import Image

    home, sid, _ = single
    r = _plot(home, tmp_path, sid, "--output=study.png")
    assert r.returncode == 0, r.stderr
    assert _said(r.stderr).splitlines() == [f"Wrote study-{k}.png." for k in SINGLE_ORDER]
    for k in SINGLE_FIGURES:
        path = tmp_path / f"study-{k}.png"
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        with Image.open(path) as img:
            assert img.format == "PNG" and img.size[0] >= 600 and img.size[1] >= 300


def test_a_multi_objective_report_shows_the_pareto_front(two_metrics, tmp_path: Path) -> None:
    home, sid, create_stderr = two_metrics
    r = _plot(home, tmp_path, sid, "--output=report.html")
    assert r.returncode == 0, r.stderr
    html = (tmp_path / "report.html").read_text()
    assert _figure_ids(html) == TWO_FIGURES
    # Each objective's figures are its own: titled by it, its values in the tooltips.
    for metric in ("error", "speed"):
        for base in ("parallel", "intermediate", "importance", "contour", "rank"):
            svg = _figure_svg(html, f"{base}-{metric}")
            label = re.search(r'aria-label="([^"]+)"', svg).group(1)
            assert metric in label and ("speed" if metric == "error" else "error") not in label, (base, label)
        assert re.search(rf"<title>trial \d+: {metric}=[^<]* at step 2, succeeded</title>", _figure_svg(html, f"intermediate-{metric}"))
    # Slices and the history have a panel per objective: each trial's point in each.
    assert len(re.findall(r"<title>trial \d+: error=", _figure_svg(html, "slice-x"))) == 12
    assert len(re.findall(r"<title>trial \d+: error=", _figure_svg(html, "history"))) == 12
    # The trials highlighted are the ones `create` reported as the front.
    reported = set(re.findall(r"^  trial (\d+): error=", create_stderr, re.M))
    assert reported
    assert set(re.findall(r"<title>on the front: trial (\d+):", _figure_svg(html, "pareto"))) == reported
    assert "Pareto front</th><td>" + ", ".join(f"trial {t}" for t in sorted(reported, key=int)) in html


def test_trials_stopped_early_are_marked(tmp_path: Path) -> None:
    home = tmp_path / "median"
    sid, study, _ = script_study(home, tmp_path, CURVE, "--metric=metric-id=accuracy,goal=maximize",
                            "--parameter-spec=parameter-id=x,type=discrete,values=0.05;0.15;0.25;0.35;0.45;0.85;0.95",
                            "--algorithm=grid-search", "--max-trial-count=7", "--parallel-trial-count=2",
                            "--early-stopping=median")
    r = _plot(home, tmp_path, sid, "--output=report.html")
    assert r.returncode == 0, r.stderr
    intermediate = _figure_svg((tmp_path / "report.html").read_text(), "intermediate")
    stopped = {t["id"] for t in study["trials"] if t.get("earlyStoppingRule") == "median"}
    assert stopped, "the median rule stopped no trial: nothing to mark"
    marked = set(re.findall(r"<title>trial (\d+): accuracy=[^<]*, stopped early \(median\)</title>", intermediate))
    assert marked == stopped
    # The history marks them apart from the trials that completed (their own points, legend entry).
    history = _figure_svg((tmp_path / "report.html").read_text(), "history")
    assert set(re.findall(r"<title>trial (\d+): accuracy=[^<]*\(stopped early \(median\)\)</title>", history)) == stopped
    assert len(re.findall(r"<title>trial \d+: accuracy=[^<(]*</title>", history)) == 7 - len(stopped)
    # So do the timeline (the bar's outcome) and the trial table.
    html = (tmp_path / "report.html").read_text()
    assert set(re.findall(r"<title>trial (\d+): stopped early \(median\), ", _figure_svg(html, "timeline"))) == stopped
    assert set(re.findall(r'<tr id="trial-(\d+)"[^>]*><td>\d+[^<]*(?:<span[^>]*>[^<]*</span>)?</td><td>SUCCEEDED <span class="how">stopped early \(median\)</span>', html)) == stopped


def _synthetic(n: int, *, metrics: int = 1):
    """A study of `n` finished trials with 3 measurements each, started a second apart, two at a time."""
    from datetime import UTC, datetime, timedelta

    from vcli.spec import DoubleValueSpec, Goal, Measurement, MetricSpec, ParameterSpec, StudySpec, Trial, TrialState

    params = [ParameterSpec(parameter_id=p, value_spec=DoubleValueSpec(min_value=0, max_value=1)) for p in ("a", "b")]
    ms = (MetricSpec(metric_id="loss", goal=Goal.MINIMIZE), MetricSpec(metric_id="cost", goal=Goal.MINIMIZE))[:metrics]
    t0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
    trials = []
    for i in range(1, n + 1):
        a, b = (i * 0.37) % 1, (i * 0.61) % 1
        steps = tuple(Measurement(step_count=s, metrics={"loss": (a - 0.5) ** 2 + b / s, "cost": a + b + s}) for s in (1, 2, 3))
        start = t0 + timedelta(seconds=(i - 1) // 2 * 3)
        trials.append(Trial(id=str(i), parameters={"a": a, "b": b}, state=TrialState.SUCCEEDED, measurements=steps,
                            final_measurement=steps[-1], start_time=start.isoformat().replace("+00:00", "Z"),
                            end_time=(start + timedelta(seconds=2.5)).isoformat().replace("+00:00", "Z")))
    return StudySpec(metrics=ms, parameters=tuple(params)), params, trials


@pytest.mark.parametrize("n", [6, 25])
def test_the_intermediate_values_have_a_colour_key_for_any_number_of_trials(n: int) -> None:
    """Up to 10 trials a legend names each one; beyond, a colour bar keyed by trial number."""
    from vcli.plots import render

    spec, params, trials = _synthetic(n)
    (fig,) = [f for f in render.draw(spec, params, trials)[0] if f.key == "intermediate"]
    (ax, *bars) = fig.figure.axes
    if n <= render.LEGEND_TRIALS:
        assert bars == [] and [t.get_text() for t in ax.get_legend().get_texts()] == [f"trial {i}" for i in range(1, n + 1)]
    else:
        (bar,) = bars
        assert bar.get_ylabel() == "trial" and bar.get_ylim() == (1.0, float(n))
        assert ax.get_legend() is None  # no trial-by-trial legend of 25 entries
    # the colours follow the trial: no two trials share one
    colours = [line.get_color() for line in ax.get_lines()]
    assert len({tuple(c) if not isinstance(c, str) else c for c in colours}) == n


def test_figures_of_metrics_whose_file_names_coincide_are_all_written(tmp_path: Path) -> None:
    """Metrics `l/s` and `l_s` both became `-l_s` in file names: one's figures silently
    overwrote the other's (`Wrote r-rank-l_s.svg.` twice)."""
    from dataclasses import replace

    from vcli.plots import write_report
    from vcli.spec import MetricSpec

    spec, params, trials = _synthetic(6, metrics=2)
    spec = replace(spec, metrics=(MetricSpec(metric_id="l/s", goal=spec.metrics[0].goal),
                                  MetricSpec(metric_id="l_s", goal=spec.metrics[1].goal)))
    trials = [replace(t, measurements=tuple(replace(m, metrics={"l/s": m.metrics["loss"], "l_s": m.metrics["cost"]})
                                            for m in t.measurements)) for t in trials]
    trials = [replace(t, final_measurement=t.measurements[-1]) for t in trials]
    written = write_report(str(tmp_path / "r.svg"), "s", spec, params, trials)
    assert len(written) == len(set(written)) and sorted(os.listdir(tmp_path)) == sorted(os.path.basename(w) for w in written)
    assert str(tmp_path / "r-rank-l_s.svg") in written and str(tmp_path / "r-rank-l_s-2.svg") in written


def test_the_timeline_shows_durations_and_how_many_ran_at_once() -> None:
    from datetime import UTC, datetime

    from vcli.plots import render

    spec, params, trials = _synthetic(6, metrics=2)
    (fig,) = [f for f in render.draw(spec, params, trials, now=datetime(2024, 5, 1, 13, tzinfo=UTC))[0]
              if f.key == "timeline"]
    bars_ax, load_ax = fig.figure.axes
    (bars,) = bars_ax.collections
    boxes = [p.vertices for p in bars.get_paths()]
    assert [(round(b[:, 0].min(), 3), round(b[:, 0].max(), 3)) for b in boxes] == \
        [(0.0, 2.5), (0.0, 2.5), (3.0, 5.5), (3.0, 5.5), (6.0, 8.5), (6.0, 8.5)]
    (line,) = load_ax.get_lines()
    assert max(line.get_ydata()) == 2 and line.get_ydata()[-1] == 0
    assert fig.members[bars.get_gid()][0].startswith("trial 1: completed, 2.5 s (12:00:00 to 12:00:02 UTC)")


def test_an_unknown_output_extension_is_one_line(single, tmp_path: Path) -> None:
    home, sid, _ = single
    r = _plot(home, tmp_path, sid, "--output=x.txt")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "--output" in r.stderr and ".html" in r.stderr and ".png" in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_nothing_to_draw_and_a_name_that_is_only_an_extension_are_one_line(tmp_path: Path) -> None:
    """A .png report of a study with nothing to draw wrote nothing and exited 0; `--output=.html`
    said it "must end in .html" (found by a probe)."""
    from tests.helpers import vcli

    home = tmp_path / "home"
    r = vcli(home, "hp-tuning-jobs", "create", "--display-name=silent", "--max-trial-count=1",
             "--algorithm=random-search", "--parameter-spec=parameter-id=x,type=double,min=0,max=1",
             "--metric=metric-id=score,goal=maximize", "--format=value(name.basename())",
             "--worker-pool-spec=machine-type=n1-standard-4,container-image-uri=x", f"--command={sys.executable},-c,pass",
             timeout=120)
    sid = r.stdout.strip().splitlines()[-1]
    import sqlite3

    with sqlite3.connect(home / "vcli.db") as db:  # as a study cancelled before its first trial
        db.execute("DELETE FROM trials WHERE study_id = ?", (sid,))
    out = tmp_path / "out"
    out.mkdir()
    r = _plot(home, out, sid, "--output=study.png")
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert f"nothing to draw for [{sid}] as .png: no trial has a measurement yet (0 trial(s))" in r.stderr, r.stderr
    r = _plot(home, out, sid, "--output=.html")
    assert r.returncode == 2 and "[.html] needs a file name before .html" in r.stderr, r.stderr
    assert list(out.iterdir()) == []


def test_without_matplotlib_it_says_what_to_install(single, tmp_path: Path) -> None:
    home, sid, _ = single
    # A `matplotlib` that fails to import, first on the path: as if it were not installed.
    (tmp_path / "shadow" / "matplotlib").mkdir(parents=True)
    (tmp_path / "shadow" / "matplotlib" / "__init__.py").write_text("raise ImportError('No module named matplotlib')\n")
    r = subprocess.run([sys.executable, "-m", "vcli", "hp-tuning-jobs", "plot", sid, "--output=r.html"], cwd=tmp_path,
                       env=vcli_env(home, PYTHONPATH=f"{tmp_path / 'shadow'}{os.pathsep}{REPO}"),
                       capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 9 and r.stderr.count("\n") == 1, r.stderr  # a missing extra
    assert "Drawing plots needs matplotlib, which the [plot] extra installs: " in r.stderr and "pip install 'vcli[plot]'" in r.stderr
    assert not (tmp_path / "r.html").exists()


def test_a_study_without_finished_trials_still_has_a_report() -> None:
    from vcli.plots import report_html, study_figures
    from vcli.spec import DoubleValueSpec, Goal, MetricSpec, ParameterSpec, StudySpec, Trial, TrialState

    params = [ParameterSpec(parameter_id="x", value_spec=DoubleValueSpec(min_value=0, max_value=1))]
    spec = StudySpec(metrics=(MetricSpec(metric_id="score", goal=Goal.MAXIMIZE),), parameters=tuple(params))
    trials = [Trial(id="1", parameters={"x": 0.5}, state=TrialState.ACTIVE),
              Trial(id="2", parameters={"x": 0.1}, state=TrialState.INFEASIBLE, infeasible_reason="no metric")]
    assert study_figures(spec, params, trials) == []
    html = report_html("empty (7)", spec, params, trials)
    assert "no finished trials yet" in html and "<svg" not in html
    assert "ACTIVE 1, INFEASIBLE 1" in html


PROBE = """
import json, sys
sys.argv = ["vcli", *json.loads(sys.argv[1])]
from vcli.cli import app
try:
    app()
except SystemExit:
    pass
print("@@" + json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("matplotlib", "sklearn", "numpy"))))
"""


@pytest.mark.parametrize("argv", [["--help"], ["hp-tuning-jobs", "plot", "--help"]], ids=" ".join)
def test_help_imports_no_plotting_library(tmp_path: Path, argv: list[str]) -> None:
    r = subprocess.run([sys.executable, "-c", PROBE, json.dumps(argv)], env=vcli_env(tmp_path), capture_output=True,
                       text=True, timeout=60, stdin=subprocess.DEVNULL)
    (line,) = [line for line in r.stdout.splitlines() if line.startswith("@@")]
    assert json.loads(line[2:]) == [], r.stderr


def _plot_kinds(tmp_path: Path, trainer: str, kinds: str) -> subprocess.CompletedProcess[str]:
    """`plot` of a 3-trial study over x, n and the categorical `kind` with values `kinds`."""
    home = tmp_path / "kinds"
    sid, _, _ = script_study(home, tmp_path, trainer, "--metric=metric-id=score,goal=maximize",
                             "--parameter-spec=parameter-id=x,type=double,min=0.01,max=1,scale=log",
                             "--parameter-spec=parameter-id=n,type=integer,min=1,max=4",
                             f"--parameter-spec=parameter-id=kind,values={kinds}",
                             "--algorithm=random-search", "--max-trial-count=3", "--seed=3")
    return _plot(home, tmp_path, sid, f"--output={tmp_path / 'r.html'}")


def test_values_in_a_script_the_font_lacks_leave_stderr_one_line(tmp_path: Path) -> None:
    # matplotlib warned twice per figure for each missing glyph: 30 lines naming vcli's source.
    r = _plot_kinds(tmp_path, TRAINER, "日本語;b")
    assert r.returncode == 0, r.stderr
    assert _said(r.stderr).count("\n") == 1 and _said(r.stderr).startswith("Wrote "), r.stderr


def test_names_and_values_are_text_never_tex(tmp_path: Path) -> None:
    # `$\foo$` as a category crashed plot (a 130-line ParseException traceback); `a$b$c` was
    # drawn as abc with an italic b.
    r = _plot_kinds(tmp_path, TRAINER.replace('args["kind"] == "b"', 'args["kind"] == "a$b$c"'), "$\\foo$;a$b$c")
    assert r.returncode == 0, r.stderr[-2000:]
    assert _said(r.stderr).count("\n") == 1 and _said(r.stderr).startswith("Wrote "), r.stderr[-2000:]
