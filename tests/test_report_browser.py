"""The study report (`hp-tuning-jobs plot`) in a real headless Chromium, offline; and the
browser harness itself (tests/harness/browser.py): it must see console errors and requests,
keep an offline page off every network, and leave no browser process behind.

The report's screenshot is a CI artifact: it goes to $VCLI_ARTIFACTS_DIR when that is set.
"""

from __future__ import annotations

import http.server
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.browser import Browser
from tests.helpers import script_study, vcli

TRAINER = """
import sys
args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:] if "=" in a)
x = float(args["x"]); n = int(args["n"])
for step in (1, 2, 3):
    print(f"score={-(x - 0.3) ** 2 - (n - 2) ** 2 / 10 - (3 - step) * 0.1:.6f} step={step}", flush=True)
"""

TWO_METRICS = """
import sys
args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:] if "=" in a)
x = float(args["x"]); n = int(args["n"])
for step in (1, 2):
    print(f"error={x * x + n / (10 * step):.6f} step={step}", flush=True)
    print(f"speed={(1 - x) ** 2 + n / 4:.6f} step={step}", flush=True)
"""

#: The report's figures for a finished single-metric study of parameters x and n: Optuna's
#: plots (contour, rank, EDF and timeline among them).
FIGURES = ("fig-history", "fig-parallel", "fig-slice-x", "fig-slice-n", "fig-intermediate", "fig-importance",
           "fig-contour", "fig-rank", "fig-edf", "fig-timeline")
#: ... and for a two-metric study: a figure per objective where a figure plots one objective.
PER_OBJECTIVE = ("parallel", "intermediate", "importance", "contour", "rank")
TWO_FIGURES = ("fig-history", "fig-slice-x", "fig-slice-n", "fig-edf", "fig-timeline", "fig-pareto",
               *(f"fig-{base}-{metric}" for base in PER_OBJECTIVE for metric in ("error", "speed")))

#: For each id: [width, height] of its <svg> (the element itself, or the first one inside it).
SVG_SIZES = """Object.fromEntries(%s.map(id => {
    const el = document.getElementById(id);
    const svg = el && (el.tagName.toLowerCase() === "svg" ? el : el.querySelector("svg"));
    const box = svg && svg.getBoundingClientRect();
    return [id, box ? [box.width, box.height] : null];
}))"""


def _artifacts_dir(tmp_path: Path) -> Path:
    where = os.environ.get("VCLI_ARTIFACTS_DIR")
    if not where:
        return tmp_path
    Path(where).mkdir(parents=True, exist_ok=True)
    return Path(where)


def _assert_not_blank(png: Path) -> None:
    from PIL import Image  # Pillow comes with matplotlib (the plot extra)

    assert png.stat().st_size > 20_000, f"{png}: {png.stat().st_size} bytes, too small for a page of figures"
    with Image.open(png) as image:
        assert image.format == "PNG" and image.width >= 800 and image.height >= 900, (image.format, image.size)
        grey = image.convert("L")
        low, high = grey.getextrema()
        assert high - low > 128, f"{png}: grey levels only span {low}..{high}"
        colours = image.convert("RGB").getcolors(maxcolors=1 << 20) or []
        assert len(colours) > 50, f"{png}: only {len(colours)} distinct colours"


def test_the_report_of_a_finished_study_renders_offline_with_every_figure(tmp_path: Path) -> None:
    home = tmp_path / "seen"
    _, study, _ = script_study(home, tmp_path, TRAINER, "--metric=metric-id=score,goal=maximize",
                               "--parameter-spec=parameter-id=x,type=double,min=0,max=1",
                               "--parameter-spec=parameter-id=n,type=integer,min=1,max=4",
                               "--algorithm=random-search", "--max-trial-count=6", "--parallel-trial-count=2", "--seed=3")
    assert [t["state"] for t in study["trials"]] == ["SUCCEEDED"] * 6
    report = tmp_path / "report.html"
    r = vcli(home, "hp-tuning-jobs", "plot", study["name"].rsplit("/", 1)[1], f"--output={report}")
    assert r.returncode == 0, r.stderr

    with Browser(offline=True) as browser:
        browser.open(report.as_uri())
        sizes = browser.evaluate(SVG_SIZES % json.dumps(FIGURES))
        shot = browser.screenshot(_artifacts_dir(tmp_path) / "study-report.png")
        errors, requests = browser.console_errors, browser.requests
        title = browser.evaluate("document.title")

    assert errors == []
    assert requests and all(url.startswith(("file:", "data:")) for url in requests), requests
    assert report.as_uri() in requests
    assert "seen" in title
    empty = {fig: size for fig, size in sizes.items() if not size or min(size) <= 0}
    assert not empty, f"figures missing or empty (no <svg>, or a zero-sized one): {empty}"
    _assert_not_blank(shot)


def test_a_multi_objective_report_has_a_figure_per_objective_offline(tmp_path: Path) -> None:
    """Every figure that plots one objective is drawn once per metric (each titled by its own),
    next to the contour, rank, EDF, timeline and Pareto figures and the trial table, all
    rendered by Chromium with no network and no console error."""
    home = tmp_path / "pareto"
    _, study, _ = script_study(home, tmp_path, TWO_METRICS, "--metric=metric-id=error,goal=minimize",
                               "--metric=metric-id=speed,goal=minimize",
                               "--parameter-spec=parameter-id=x,type=double,min=0,max=1",
                               "--parameter-spec=parameter-id=n,type=integer,min=1,max=4",
                               "--algorithm=random-search", "--max-trial-count=6", "--parallel-trial-count=3", "--seed=7")
    assert [t["state"] for t in study["trials"]] == ["SUCCEEDED"] * 6
    report = tmp_path / "pareto.html"
    r = vcli(home, "hp-tuning-jobs", "plot", study["name"].rsplit("/", 1)[1], f"--output={report}")
    assert r.returncode == 0, r.stderr

    with Browser(offline=True) as browser:
        browser.open(report.as_uri())
        sizes = browser.evaluate(SVG_SIZES % json.dumps(TWO_FIGURES))
        drawn = browser.evaluate("Array.from(document.querySelectorAll('svg.vcli-figure-svg')).map(s => s.id)")
        labels = browser.evaluate("Object.fromEntries(Array.from(document.querySelectorAll('svg.vcli-figure-svg'))"
                                  ".map(s => [s.id, s.getAttribute('aria-label')]))")
        rows = browser.evaluate("Array.from(document.querySelectorAll('table.trials tr[id]')).map(r => "
                                "[r.id, r.className, r.getBoundingClientRect().height])")
        shot = browser.screenshot(_artifacts_dir(tmp_path) / "study-report-multi-objective.png")
        errors = browser.console_errors

    assert errors == []
    assert sorted(drawn) == sorted(TWO_FIGURES)
    empty = {fig: size for fig, size in sizes.items() if not size or min(size) <= 0}
    assert not empty, f"figures missing or empty: {empty}"
    for base in PER_OBJECTIVE:
        for metric, other in (("error", "speed"), ("speed", "error")):
            label = labels[f"fig-{base}-{metric}"]
            assert metric in label and other not in label, (base, metric, label)
    # The trial table: every trial, visible, the Pareto front's trials marked.
    assert [r[0] for r in rows] == [f"trial-{t['id']}" for t in study["trials"]] and all(r[2] > 0 for r in rows)
    assert {r[0] for r in rows if r[1] == "pareto"} == {f"trial-{t}" for t in study["optimalTrialIds"]}
    _assert_not_blank(shot)


def test_the_harness_sees_console_errors_exceptions_and_blocked_requests(tmp_path: Path) -> None:
    page = tmp_path / "errors.html"
    page.write_text('<!DOCTYPE html><html><body><p>page</p>'
                    '<img src="http://192.0.2.1/x.png">'
                    '<script>console.error("x")</script><script>throw new Error("thrown")</script>'
                    '</body></html>')
    with Browser(offline=True) as browser:
        browser.open(page.as_uri(), wait_for="document.images[0].complete")
        assert browser.evaluate("document.images[0].naturalWidth") == 0  # it never loaded
        assert browser.evaluate("document.querySelector('p').textContent") == "page"
        errors, requests = browser.console_errors, browser.requests

    assert "console.error: x" in errors
    assert any("Error: thrown" in e and e.startswith("uncaught:") for e in errors), errors
    assert any("http://192.0.2.1/x.png" in e and "ERR_INTERNET_DISCONNECTED" in e for e in errors), errors
    assert requests[:2] == [page.as_uri(), "http://192.0.2.1/x.png"]


@pytest.fixture
def loopback_server() -> Iterator[tuple[str, list[str]]]:
    """An HTTP server on this machine's 127.0.0.1 (a thread of the test): (its URL, the paths
    it was asked for). Every GET answers a 1x1 GIF."""
    asked: list[str] = []
    gif = bytes.fromhex("47494638396101000100800000000000ffffff21f90401000000002c00000000010001000002024401003b")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "image/gif")
            self.send_header("Content-Length", str(len(gif)))
            self.end_headers()
            self.wfile.write(gif)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_offline_means_not_even_loopback_and_online_reaches_it(tmp_path: Path, loopback_server) -> None:
    url, asked = loopback_server
    page = tmp_path / "img.html"
    page.write_text(f'<!DOCTYPE html><img src="{url}/pixel.gif">')
    loaded = "document.images[0].complete && document.images[0].naturalWidth"

    with Browser(offline=True) as browser:
        browser.open(page.as_uri(), wait_for="document.images[0].complete")
        assert browser.evaluate(loaded) == 0
        assert f"{url}/pixel.gif" in browser.requests
    assert asked == []

    with Browser(offline=False) as browser:
        browser.open(page.as_uri(), wait_for=loaded)
        assert browser.console_errors == []
    assert asked == ["/pixel.gif"]


def test_no_browser_process_outlives_the_with_block() -> None:
    with Browser(offline=True) as browser:
        browser.open("about:blank")
        running = browser.pids()
        # The crash handlers chromium double-forks leave its process group: a group kill alone
        # would leave them behind, so this checks the namespace kill, not just the easy part.
        groups = {os.getpgid(pid) for pid in running}
        assert len(running) >= 3 and len(groups) >= 2, (running, groups)
    alive = [pid for pid in running if _alive(pid)]
    assert alive == []


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except OSError:
        return False
