"""CLI start-up and launch-overhead benchmarks (issue: custom-jobs).

    python bench/bench_cli.py [--runs 15]

1. Wall time of `vcli --help` and `vcli custom-jobs list` (median of N runs) and the ratio to a
   bare typer hello-world measured in the same run. Goal: < 0.25 s and < 1.5x the bare app.
2. Launch overhead: time from `create` to every replica's process running, for 1, 4 and 16
   replicas of a trivial command, minus Python's own start-up. Goal: < 50 ms per replica.
   Measured in-process through vcli's controller (plan_job + JobRun + LocalExecutor): each
   replica runs `python3 -c <write a timestamp file; exit>`, and the latest time any replica
   reports being alive, minus the start of planning, minus one bare `python3 -c pass`
   start-up, is the overhead.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

HELLO = """
import typer
app = typer.Typer()
@app.command()
def hello(name: str = "world") -> None:
    print(f"hello {name}")
app()
"""


def median_time(argv: list[str], runs: int, env: dict[str, str]) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def startup(runs: int) -> list[tuple[str, float, float]]:
    tmp = tempfile.mkdtemp()
    env = dict(os.environ, VCLI_HOME=tmp, VCLI_CONFIG_DIR=tmp)
    hello = Path(tmp) / "hello.py"
    hello.write_text(HELLO)
    vcli = [sys.executable, "-m", "vcli"]
    plain = Path(tmp) / "hello_plain.py"
    plain.write_text(HELLO.replace("typer.Typer()", "typer.Typer(rich_markup_mode=None, pretty_exceptions_enable=False)"))
    base = median_time([sys.executable, str(hello), "--help"], runs, env)
    rows = [("bare typer app --help", base, 1.0)]
    t = median_time([sys.executable, str(plain), "--help"], runs, env)
    rows.append(("bare typer app --help (rich_markup_mode=None, as vcli)", t, t / base))
    # Running a command (not --help) makes typer convert parameters, which imports more of
    # typer (and pydantic, when it is installed); the fair baseline for `custom-jobs list`.
    run_base = median_time([sys.executable, str(plain), "--name=x"], runs, env)
    rows.append(("bare typer app running its command", run_base, run_base / base))
    for label, argv, ref in (("vcli --help", vcli + ["--help"], base), ("vcli custom-jobs list", vcli + ["custom-jobs", "list"], run_base)):
        t = median_time(argv, runs, env)
        rows.append((label + (" (vs the command run)" if ref is run_base else ""), t, t / ref))
    return rows


def launch_overhead(replicas: int, python_start: float) -> float:
    import threading

    from vcli.control.jobs import JobRun, plan_job
    from vcli.executors.local import LocalExecutor
    from vcli.spec import ContainerSpec, CustomJobSpec, JobKind, JobState, MachineSpec, WorkerPoolSpec
    from vcli.store import Store, new_id

    home = Path(tempfile.mkdtemp())
    stamps = home / "stamps"
    stamps.mkdir()
    code = f"import os,time; open(os.path.join({str(stamps)!r}, os.environ['VCLI_TASK_NAME']), 'w').write(repr(time.time()))"
    cs = ContainerSpec(command=("python3", "-c", code))
    pools = [WorkerPoolSpec(machine_spec=MachineSpec(machine_type="n1-standard-4"), replica_count=1, container_spec=cs)]
    if replicas > 1:
        pools.append(WorkerPoolSpec(machine_spec=MachineSpec(machine_type="n1-standard-4"), replica_count=replicas - 1, container_spec=cs))
    spec = CustomJobSpec(worker_pool_specs=tuple(pools))
    store = Store(home)
    ex = LocalExecutor()
    job_id = new_id()
    store.create_job(kind=JobKind.CUSTOM_JOB, display_name="bench", record={}, state=JobState.JOB_STATE_QUEUED, job_id=job_id)
    t0 = time.time()
    plan = plan_job(spec, job_id=job_id, job_dir=home / "jobs" / job_id, executor=ex)
    run = JobRun(store=store, executor=ex, plan=plan)
    run.start()
    while run.poll() is None:
        time.sleep(0.005)
    last = max(float(p.read_text()) for p in stamps.iterdir())
    del threading
    return (last - t0 - python_start) / replicas


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    a = parser.parse_args()
    print(f"## CLI start-up (median of {a.runs} runs)\n")
    print("| command | wall time | ratio to bare typer |\n| --- | --- | --- |")
    for label, t, ratio in startup(a.runs):
        print(f"| `{label}` | {t * 1000:.0f} ms | {ratio:.2f}x |")
    py = median_time(["python3", "-c", "import time"], a.runs, dict(os.environ))
    print(f"\n## Launch overhead (python3 start-up {py * 1000:.0f} ms subtracted)\n")
    print("| replicas | overhead per replica |\n| --- | --- |")
    for n in (1, 4, 16):
        samples = [launch_overhead(n, py) for _ in range(5)]
        print(f"| {n} | {statistics.median(samples) * 1000:.1f} ms |")


if __name__ == "__main__":
    main()
