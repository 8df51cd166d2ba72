"""Do trial slots wait for the tuner? A study of short trials (1-4 s, `--max-trial-count`,
`--parallel-trial-count`) run by `vcli hp-tuning-jobs create`, once per algorithm, side by
side: vcli's default (its GP, asked in a worker process ahead of need) against random search
(which answers at once), optionally while a CPU hog keeps every core busy (as a GPU box's
data loaders do).

    .venv/bin/python bench/bench_slots.py [--trials 40] [--parallel 4] [--hog] [--repo DIR]

`--repo` runs another checkout's vcli (an earlier commit, for a before/after table).

Per algorithm: the study's wall time; slot occupancy (the trials' running time over the
study's wall time times parallelTrialCount, from the first trial's start to the last one's
end); the hand-over gap (from a trial's end to the start of the next trial that took its slot:
median and max); and how many trials took a point prepared ahead or random search's
(`suggestedBy`).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

TRAINER = """
import argparse, random, time
import hypertune
p = argparse.ArgumentParser(); p.add_argument("--x", type=float); p.add_argument("--y", type=float)
a = p.parse_args()
time.sleep(random.Random(a.x * 1e6 + a.y).uniform(1.0, 4.0))
hypertune.HyperTune().report_hyperparameter_tuning_metric(
    hyperparameter_metric_tag="score", metric_value=-(a.x - 1) ** 2 - (a.y + 2) ** 2, global_step=1)
"""


def _t(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def run(algorithm: str, trials: int, parallel: int, work: Path, repo: Path) -> dict[str, float | int]:
    home = Path(tempfile.mkdtemp(prefix="bench-slots-", dir=work))
    env = {**os.environ, "VCLI_HOME": str(home), "VCLI_CONFIG_DIR": str(home / "config"),
           "PYTHONPATH": str(repo) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    began = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "vcli", "hp-tuning-jobs", "create", "--display-name=slots", f"--algorithm={algorithm}",
         "--metric=metric-id=score,goal=maximize", "--parameter-spec=parameter-id=x,type=double,min=-5,max=5",
         "--parameter-spec=parameter-id=y,type=double,min=-5,max=5", f"--max-trial-count={trials}",
         f"--parallel-trial-count={parallel}", "--seed=1", "--format=json",
         "--worker-pool-spec=machine-type=n1-standard-4,executor-image-uri=x,python-module=trainer"],
        cwd=work, env=env, capture_output=True, text=True, timeout=3600)
    wall = time.monotonic() - began
    if r.returncode != 0:
        raise SystemExit(f"{algorithm}: {r.stderr[-2000:]}")
    ts = json.loads(r.stdout)["trials"]
    spans = sorted((_t(t["startTime"]), _t(t["endTime"])) for t in ts)
    first, last = spans[0][0], max(e for _, e in spans)
    busy = sum(e - s for s, e in spans)
    # Hand-overs: the k-th start after the first `parallel` took the slot of the k-th end.
    ends = sorted(e for _, e in spans)
    starts = [s for s, _ in spans][parallel:]
    gaps = [max(0.0, s - e) for s, e in zip(starts, ends)]
    by = [t.get("suggestedBy") for t in ts]
    return {"wall": wall, "occupancy": busy / ((last - first) * parallel), "gap_median": statistics.median(gaps),
            "gap_max": max(gaps), "ahead": by.count("model-ahead"), "fallback": by.count("random-fallback")}


def _hog(stop) -> None:  # a core kept busy
    while not stop.is_set():
        sum(i * i for i in range(10000))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--hog", action="store_true", help="keep every core busy meanwhile")
    ap.add_argument("--repo", type=Path, default=REPO, help="the checkout whose vcli runs")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-slots-"))
    (work / "trainer.py").write_text(TRAINER)
    stop = multiprocessing.Event()
    hogs = [multiprocessing.Process(target=_hog, args=(stop,), daemon=True) for _ in range(os.cpu_count() or 1)] \
        if args.hog else []
    for h in hogs:
        h.start()
    try:
        rows = {a: run(a, args.trials, args.parallel, work, args.repo.resolve()) for a in ("algorithm-unspecified", "random-search")}
    finally:
        stop.set()
        for h in hogs:
            h.join()
    print(f"# {datetime.now():%Y-%m-%d}, {platform.node()}, {os.cpu_count()} cores, "
          f"vcli at {args.repo.resolve()}, {args.trials} trials of 1-4 s, parallel {args.parallel}{', every core hogged' if args.hog else ''}")
    print("| algorithm | wall (s) | slot occupancy | hand-over gap median / max (s) | model-ahead | random-fallback |")
    print("|---|---|---|---|---|---|")
    for a, m in rows.items():
        print(f"| {a} | {m['wall']:.1f} | {m['occupancy']:.2f} | {m['gap_median']:.2f} / {m['gap_max']:.2f} "
              f"| {m['ahead']} | {m['fallback']} |")
    base = rows["random-search"]["occupancy"]
    print(f"\noccupancy, default over random search: {rows['algorithm-unspecified']['occupancy'] / base:.2f}")


if __name__ == "__main__":
    main()
