"""A study controller's memory over a long study: `vcli hp-tuning-jobs create` with a trivial
trainer (it reports one measurement and exits), its resident memory (VmRSS) sampled every
second against the trials finished so far.

    .venv/bin/python bench/bench_controller_memory.py [--trials 1000] [--parallel 4] [--algorithm default]

Prints, per algorithm: RSS once 10 % of the trials finished (after the warm-up: the default
algorithm imports numpy and scipy for its first suggestion), at the end, the highest sample,
and the growth per finished trial between the two (a least-squares slope over the samples
after the warm-up). No peer is run: this measures vcli against itself (issue #44 asks for
flat memory after the warm-up).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
REPORT = ("import json, os\n"
          "with open(os.environ['CLOUD_ML_HP_METRIC_FILE'], 'a') as f:\n"
          "    f.write(json.dumps({'m': '0.5', 'global_step': '1'}) + '\\n')\n")


def _rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _finished(home: Path) -> int:
    """Trials whose trainer ended (each writes its replica's status file)."""
    return sum(1 for _ in (home / "jobs").glob("*/replicas/*/replica.status")) if (home / "jobs").exists() else 0


def measure(algorithm: str, trials: int, parallel: int) -> dict[str, float]:
    root = Path(tempfile.mkdtemp(prefix="vcli-bench-mem-"))
    try:
        trainer = root / "report.py"
        trainer.write_text(REPORT)
        home = root / "home"
        argv = [sys.executable, "-m", "vcli", "hp-tuning-jobs", "create", "--display-name=memory",
                "--worker-pool-spec=machine-type=n1-standard-4,replica-count=1,container-image-uri=python",
                f"--command={sys.executable},{trainer}", "--executor=local",
                "--parameter-spec=parameter-id=x,type=double,min=0,max=1", "--metric=metric-id=m,goal=maximize",
                f"--max-trial-count={trials}", f"--parallel-trial-count={parallel}"]
        if algorithm != "default":
            argv.append(f"--algorithm={algorithm}")
        env = {**os.environ, "VCLI_HOME": str(home), "PYTHONPATH": str(REPO)}
        started = time.monotonic()
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=root)
        samples: list[tuple[int, int]] = []
        while proc.poll() is None:
            rss = _rss_kib(proc.pid)
            if rss is not None:
                samples.append((_finished(home), rss))
            time.sleep(1.0)
        wall = time.monotonic() - started
        if proc.returncode != 0:
            raise SystemExit(f"the study failed (exit {proc.returncode})")
        after = [(n, r) for n, r in samples if n >= trials // 10]
        n0, r0 = after[0]
        n1, r1 = after[-1]
        mean_n = sum(n for n, _ in after) / len(after)
        mean_r = sum(r for _, r in after) / len(after)
        var = sum((n - mean_n) ** 2 for n, _ in after)
        slope = sum((n - mean_n) * (r - mean_r) for n, r in after) / var if var else 0.0
        return {"warm_mib": r0 / 1024, "end_mib": r1 / 1024, "peak_mib": max(r for _, r in samples) / 1024,
                "kib_per_trial": slope, "trials_from": n0, "trials_to": n1, "wall_s": wall}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--algorithm", action="append", help="default, random-search, ... (repeatable)")
    args = parser.parse_args()
    algorithms = args.algorithm or ["random-search", "default"]
    print(f"# {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{args.trials} trials, {args.parallel} in parallel")
    print("| algorithm | RSS after 10 % | RSS at the end | peak | growth per trial (slope) | wall |")
    print("|---|---|---|---|---|---|")
    for algorithm in algorithms:
        m = measure(algorithm, args.trials, args.parallel)
        print(f"| {algorithm} | {m['warm_mib']:.0f} MiB (trial {m['trials_from']:.0f}) | {m['end_mib']:.0f} MiB "
              f"(trial {m['trials_to']:.0f}) | {m['peak_mib']:.0f} MiB | {m['kib_per_trial']:.1f} KiB | "
              f"{m['wall_s']:.0f} s |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
