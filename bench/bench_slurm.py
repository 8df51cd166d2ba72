"""The slurm executor (issue #22): per-trial overhead against --executor=local and submitit.

    python bench/bench_slurm.py [--trials 50] [--parallel 2] [--quick]

One run starts a real one-node Slurm cluster on loopback (tests/harness/slurm_cluster.py:
munged, slurmctld, one slurmd with 8 CPUs; `batch_sched_delay=0`, `bf_interval=1`), then runs
`--trials` trivial trials (a script that prints `score=...` and exits), `--parallel` at a time,
three ways, each timed from outside as a user would see it:

* `python -m vcli hp-tuning-jobs create --executor=slurm --algorithm=random-search ...`
  (a fresh VCLI_HOME; each trial is one Slurm job: sbatch, wait until it runs, a port step,
  the replica's step, scancel);
* the same command with `--executor=local` (one supervised OS process per trial, no Slurm);
* submitit (if it is installed: `pip install submitit`), the tool Slurm users use today,
  submitting the same trivial function as a job array of `--trials` tasks with
  `slurm_array_parallelism=--parallel`, waiting for every result.

Nothing is subtracted: wall / trials includes the interpreter start-up of the CLI or driver.
Everything started here is stopped before exit. About 3 minutes on a busy 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.harness.slurm_cluster import Node, SlurmCluster  # noqa: E402

TRIAL = """
import sys
x = float(sys.argv[1].split("=", 1)[1])
print(f"score={1 - (x - 0.3) ** 2:.6f}")
"""


def _study(executor: str, root: Path, trials: int, parallel: int, env: dict[str, str]) -> float:
    home = root / f"home-{executor}"
    pkg = root / "pkg"
    pkg.mkdir(exist_ok=True)
    (pkg / "trial.py").write_text(TRIAL)
    argv = [sys.executable, "-m", "vcli", "hp-tuning-jobs", "create", f"--display-name=bench-{executor}",
            f"--executor={executor}", f"--max-trial-count={trials}", f"--parallel-trial-count={parallel}",
            "--algorithm=random-search", "--seed=1", "--metric=metric-id=score,goal=maximize",
            "--parameter-spec=parameter-id=x,type=double,min=0,max=1", "--format=none",
            f"--worker-pool-spec=machine-type=n1-standard-1,replica-count=1,local-package-path={pkg},script=trial.py"]
    full = {**os.environ, **env, "VCLI_HOME": str(home), "VCLI_CONFIG_DIR": str(home / "config"),
            "PYTHONPATH": str(REPO)}
    began = time.monotonic()
    res = subprocess.run(argv, env=full, cwd=REPO, capture_output=True, text=True, timeout=1800)
    took = time.monotonic() - began
    if res.returncode != 0:
        raise SystemExit(f"{executor} study failed ({res.returncode}): {res.stderr[-2000:]}")
    return took


def trivial(x: float) -> float:
    return 1 - (x - 0.3) ** 2


def _submitit(root: Path, trials: int, parallel: int) -> float | None:
    try:
        import submitit
    except ImportError:
        return None
    began = time.monotonic()
    ex = submitit.AutoExecutor(folder=str(root / "submitit"), cluster="slurm")
    ex.update_parameters(slurm_array_parallelism=parallel, cpus_per_task=1, timeout_min=10)
    jobs = ex.map_array(trivial, [i / trials for i in range(trials)])
    results = [j.result() for j in jobs]
    assert len(results) == trials
    return time.monotonic() - began


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=50)
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="6 trials")
    args = ap.parse_args()
    trials = 6 if args.quick else args.trials
    root = Path(tempfile.mkdtemp(prefix="vcli-bench-slurm-"))
    cluster = SlurmCluster(root / "slurm", [Node("b1", cpus=8)]).start()
    try:
        os.environ.update(cluster.env())
        rows = []
        slurm = _study("slurm", root, trials, args.parallel, cluster.env())
        local = _study("local", root, trials, args.parallel, {})
        sub = _submitit(root, trials, args.parallel)
        rows.append(("vcli --executor=slurm", slurm))
        rows.append(("vcli --executor=local", local))
        if sub is not None:
            rows.append(("submitit (job array, same function)", sub))
        print(f"\n{trials} trivial trials, {args.parallel} at a time, one-node Slurm 22.05 on loopback\n")
        print("| how | wall | per trial | vs local |")
        print("| --- | --- | --- | --- |")
        for name, wall in rows:
            print(f"| {name} | {wall:.1f} s | {1000 * wall / trials:,.0f} ms | {wall / local:.1f}x |")
        if sub is None:
            print("\nsubmitit is not installed (pip install submitit): not measured.")
        else:
            print(f"\nvcli slurm / submitit = {slurm / sub:.2f}")
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
