"""A big study's figures: `hp-tuning-jobs plot` (the HTML report) twice, and the dashboard's
study page on a fresh dashboard twice (each a first view: the figures drawn, or read from
the figure cache another process filled), on a home holding one study of N trials (5
measurements each, each trial with its custom job) inserted through the store API.

    .venv/bin/python bench/bench_figures.py [--trials 10000] [--repeat 2] [--draw-only]

Prints, per step, the median, minimum and maximum wall time of `--repeat` runs, and the size
of the dashboard's study page and of its trials part (what a live page fetches when a trial
changes). `plot` runs are new processes, as a user runs them; the dashboard's views are
in-process requests through the dashboard's own router on a new `Reader` each time (a
dashboard started again). The figure cache lives in the home (VCLI_HOME/cache/figures); each
repeat of a "first" step starts from an empty cache. `--draw-only` measures only the CPU
seconds of drawing the figures in-process (`vcli.plots.render.draw`) and of making their SVG
(`svg_element`), figure by figure.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def make_study(home: Path, trials: int) -> str:
    """The study of the test suite's big-study tests (tests/test_big_studies.py), N trials."""
    from tests.test_big_studies import make_study as make

    return make(home, trials)


def plot(env: dict[str, str], study: str, out: Path) -> float:
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "vcli", "hp-tuning-jobs", "plot", study, f"--output={out}"], env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=1800)
    if r.returncode != 0:
        raise SystemExit(f"plot: exit {r.returncode}: {r.stderr[-500:]}")
    return time.perf_counter() - t0


def dashboard_view(home: Path, study: str) -> tuple[float, int, int]:
    """(seconds, page bytes, trials part bytes) of a fresh dashboard's first view of the study."""
    from vcli.dashboard.reader import Reader
    from vcli.dashboard.server import route

    reader = Reader(home)
    try:
        t0 = time.perf_counter()
        status, _, page = route(reader, ["studies", study], {})
        seconds = time.perf_counter() - t0
        assert status == 200
        _, _, part = route(reader, ["api", "studies", study, "parts", "trials"], {})
        return seconds, len(page.encode()), len(part.encode())
    finally:
        reader.close()


def draw_cpu(home: Path, study: str) -> None:
    """Print the CPU seconds of drawing the study's figures and of each figure's SVG."""
    from vcli import codec
    from vcli.plots import render
    from vcli.store import Store

    store = Store(home)
    spec = codec.study_spec_from_stored(store.get_job(study).record["studySpec"])
    trials = store.trials(study)
    t0 = time.process_time()
    drawn, _ = render.draw(spec, codec.iter_parameters(spec.parameters), trials)
    print(f"| draw (every figure) | {time.process_time() - t0:.2f} |")
    total = 0.0
    for f in drawn:
        t0 = time.process_time()
        render.svg_element(f)
        total += time.process_time() - t0
        print(f"| svg_element: {f.key} | {time.process_time() - t0:.2f} |")
    print(f"| svg_element: all | {total:.2f} |")


def clear_cache(home: Path) -> None:
    shutil.rmtree(home / "cache", ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--draw-only", action="store_true")
    args = parser.parse_args()
    results: dict[str, list[float]] = {}
    sizes: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        t0 = time.perf_counter()
        study = make_study(home, args.trials)
        made = time.perf_counter() - t0
        os.environ["VCLI_HOME"] = str(home)
        os.environ["VCLI_CONFIG_DIR"] = str(Path(tmp) / "config")
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        if args.draw_only:
            print("| step | CPU s |\n|---|---|")
            draw_cpu(home, study)
            return 0
        out = Path(tmp) / "report.html"
        for _ in range(args.repeat):
            clear_cache(home)
            results.setdefault("plot --output=report.html, first", []).append(plot(env, study, out))
            results.setdefault("plot --output=report.html, again", []).append(plot(env, study, out))
        sizes["report.html"] = out.stat().st_size
        for _ in range(args.repeat):
            clear_cache(home)
            seconds, page, part = dashboard_view(home, study)
            results.setdefault("dashboard study page, first view", []).append(seconds)
            seconds, page, part = dashboard_view(home, study)
            results.setdefault("dashboard study page, fresh dashboard again", []).append(seconds)
        sizes["dashboard study page"], sizes["dashboard trials part"] = page, part
    load = os.getloadavg()[0]
    print(f"{args.trials} trials, {args.repeat} runs each; home made in {made:.1f} s; "
          f"{platform.node()}, {os.cpu_count()} CPUs, load {load:.1f}, Python {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d')}\n")
    print("| step | median s | min s | max s |\n|---|---|---|---|")
    for name, runs in results.items():
        print(f"| {name} | {statistics.median(runs):.2f} | {min(runs):.2f} | {max(runs):.2f} |")
    print("\n| document | bytes |\n|---|---|")
    for name, size in sizes.items():
        print(f"| {name} | {size:,} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
